// kvsim calibrate: the linear cost model fitted to a measured vLLM run (kvsim/calibrate.h
// states the rule), printed with its residuals and the --cost spec that replays it.
#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "kvsim/calibrate.h"
#include "kvsim/error.h"
#include "kvsim/measured_run.h"
#include "kvsim/model.h"
#include "kvsim/option_names.h"
#include "model_options.h"
#include "run_models.h"

namespace kvsim::cli {
namespace {

const CommandSpec kSpec{
    "kvsim calibrate RUN_DIR [options]",
    "Fits the iteration cost model (base per step, per prefill token, per decoding sequence, per\n"
    "context position read) by least squares to a measured vLLM run: RUN_DIR holds meta.json,\n"
    "requests.jsonl and timeseries.csv (see ../shared/measured/README.md). Each tick the engine\n"
    "was busy throughout gives one equation: the tick's length = steps x base + prompt tokens x\n"
    "prefill-token + decoded tokens x decode-seq + steps x mean context x context-token, with\n"
    "decoded tokens = generated tokens less first tokens, and steps = decoded tokens / mean\n"
    "requests decoding. A term fitted non-positive is dropped; context-token is kept only when\n"
    "it lowers the residual RMS by 5% or more. Prints the fit, its residuals and the --cost\n"
    "spec for 'kvsim replay' and 'kvsim validate'.\n\n"
    "With data parallelism the fit is per engine, each taking its share of the tick's decodes;\n"
    "the prompt tokens are shared out too, except for a mixture-of-experts model, whose\n"
    "replicas take every step together (vLLM aligns their forward passes), so a replica's\n"
    "prefill lengthens both replicas' steps. The model (meta.json's, by validate's table, or\n"
    "--model / --config) says which.",
    "  kvsim calibrate ../shared/measured/rtxpro6000-llama-3.1-8b\n"
    "  kvsim validate ../shared/measured/rtxpro6000-llama-3.1-8b \\\n"
    "      --cost \"$(kvsim calibrate ../shared/measured/rtxpro6000-llama-3.1-8b --json | jq -r .cost)\""};

std::string unit_of(const std::string& term) {
  if (term == "base") return "per step";
  if (term == "prefill-token") return "per prompt token";
  if (term == "decode-seq") return "per decoding sequence";
  return "per context position";
}

std::string table(const MeasuredRun& run, const Calibration& c) {
  std::string out = fmt::format("calibration of {} ({}, vLLM {})\n", run.dir, run.model, run.vllm_version);
  out += fmt::format("ticks fitted: {} of {} (busy for the whole {} s tick)\n", c.ticks.size(), c.ticks_in_run,
                     c.tick_s);
  if (run.untimed_requests > 0) {
    out += fmt::format("{} of {} requests carry no timestamps (vLLM returned no metrics): their decodes are not "
                       "counted among the decoding, so the steps come out short by about their share\n",
                       run.untimed_requests, run.requests.size());
  }
  if (run.data_parallel > 1) {
    out += fmt::format("per engine, {} data-parallel engines {}\n", run.data_parallel,
                       c.steps_together ? "stepping together (a model with experts)" : "stepping independently");
  }
  out += "\n";
  out += fmt::format("{:<15} {:>14}  {}\n", "term", "coefficient", "");
  for (const CalibrationTerm& t : c.terms) {
    if (t.kept) {
      out += fmt::format("{:<15} {:>11.3f} us  {}\n", t.name, t.seconds * 1e6, unit_of(t.name));
    } else {
      out += fmt::format("{:<15} {:>14}  not kept: {}\n", t.name, "-", t.why);
    }
  }
  out += fmt::format("\nresiduals (predicted - measured tick length): RMS {:.1f} ms ({:.2f}%), max {:.1f} ms\n",
                     c.residual_rms_s * 1e3, c.residual_rms_s / c.tick_s * 100, c.residual_max_s * 1e3);
  out += "\n  t, s   prompt tok  decoded tok  decoding  steps  predicted, s\n";
  for (const CalibrationTick& t : c.ticks) {
    out += fmt::format("{:>6.1f} {:>12.0f} {:>12.0f} {:>9.1f} {:>6.1f} {:>13.4f}\n", t.t_s, t.prompt_tokens,
                       t.decoded_tokens, t.decoding_mean, t.steps, t.predicted_s);
  }
  out += "\n--cost " + c.cost_spec + "\n";
  return out;
}

std::string json_of(const MeasuredRun& run, const Calibration& c) {
  using Json = nlohmann::ordered_json;
  Json terms = Json::array();
  for (const CalibrationTerm& t : c.terms) {
    Json j{{"name", t.name}, {"kept", t.kept}, {"seconds", t.seconds}};
    if (!t.kept) j["why"] = t.why;
    terms.push_back(j);
  }
  Json ticks = Json::array();
  for (const CalibrationTick& t : c.ticks) {
    ticks.push_back(Json{{"t_s", t.t_s}, {"prompt_tokens", t.prompt_tokens}, {"generated_tokens", t.generated_tokens},
                         {"decoded_tokens", t.decoded_tokens}, {"decoding_mean", t.decoding_mean},
                         {"context_mean", t.context_mean}, {"steps", t.steps}, {"predicted_s", t.predicted_s}});
  }
  Json j{{"run", run.dir},
         {"model", run.model},
         {"cost", c.cost_spec},
         {"terms", terms},
         {"ticks_in_run", c.ticks_in_run},
         {"ticks_fitted", c.ticks.size()},
         {"untimed_requests", run.untimed_requests},
         {"tick_s", c.tick_s},
         {"data_parallel", run.data_parallel},
         {"steps_together", c.steps_together},
         {"residual_rms_s", c.residual_rms_s},
         {"residual_max_s", c.residual_max_s},
         {"ticks", ticks}};
  return j.dump(2) + "\n";
}

// Whether the run's model is a mixture of experts: --config, --model, else meta.json's model
// by validate's table (an InputError naming meta.json when it has no row).
bool has_experts(const MeasuredRun& run, const po::variables_map& vm) {
  if (const auto config = option_text(vm, option_key(kOptConfig))) return load_hf_config(*config).moe.has_value();
  if (const auto model = option_text(vm, option_key(kOptModel))) return find_model_preset(*model).moe.has_value();
  const RunModelRow* row = run_model_row(run.model);
  if (row == nullptr) {
    throw InputError(Location{run.dir + "/meta.json", 0, "model"},
                     "\"" + run.model + "\" has no kvsim preset in validate's table, and with data parallelism "
                     "the fit needs to know whether it has experts; give --model PRESET or --config config.json");
  }
  return find_model_preset(row->preset).moe.has_value();
}

}  // namespace

int run_calibrate(const Invocation& inv) {
  po::options_description options("Options");
  options.add_options()
      ("workload", po::value<std::string>(), "the run's workload (not needed for the fit; checked to exist when given)")
      (option_key(kOptModel), po::value<std::string>(), "the model, a preset (default: meta.json's, by validate's table); it "
                                           "matters only with data parallelism, where replicas of a model with "
                                           "experts step together")
      (option_key(kOptConfig), po::value<std::string>(), "the model as a Hugging Face config.json, instead of --model")
      ("json", "print the fit as JSON; its \"cost\" field is the --cost spec");
  po::options_description hidden;
  hidden.add_options()("run", po::value<std::string>());
  po::positional_options_description positional;
  positional.add("run", 1);
  po::variables_map vm;
  if (!parse_options(inv, kSpec, options, positional, vm, &hidden)) return kExitOk;
  const auto dir = option_text(vm, "run");
  if (!dir) throw UsageError("a run directory is required\nUsage: " + kSpec.synopsis);
  if (vm.count(option_key(kOptModel)) && vm.count(option_key(kOptConfig))) {
    throw UsageError("give --model or --config, not both\nUsage: " + kSpec.synopsis);
  }
  const MeasuredRun run = read_measured_run(*dir, option_text(vm, "workload"), false);
  const Calibration c = calibrate(run, run.data_parallel > 1 && has_experts(run, vm));
  fmt::print("{}", vm.count("json") ? json_of(run, c) : table(run, c));
  return kExitOk;
}

}  // namespace kvsim::cli
