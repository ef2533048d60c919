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
#include "replay_plan.h"
#include "run_models.h"
#include "run_replay.h"

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
    "--model / --config) says which.\n\n"
    "vLLM's prompt throughput credits a whole prompt at its first token, the tokens its prefix\n"
    "cache served included, which no step computes. Unless the timeseries has newer recorders'\n"
    "prompt_compute_throughput, calibrate replays the run as 'kvsim validate' does (meta.json's\n"
    "settings; the replay options below change them) with its fit, takes the tokens each\n"
    "request found cached out of the tick that credits its prompt, and fits again until the\n"
    "hits settle. Without the workload (meta.json's dataset_path, or --workload) it says the\n"
    "hits were not estimated.",
    "  kvsim calibrate ../shared/measured/rtxpro6000-llama-3.1-8b\n"
    "  kvsim validate ../shared/measured/rtxpro6000-llama-3.1-8b \\\n"
    "      --cost \"$(kvsim calibrate ../shared/measured/rtxpro6000-llama-3.1-8b --json | jq -r .cost)\""};

std::string unit_of(const std::string& term) {
  if (term == "base") return "per step";
  if (term == "prefill-token") return "per prompt token";
  if (term == "decode-seq") return "per decoding sequence";
  return "per context position";
}

// The prompt tokens vLLM's prefix cache served each request, as kvsim's replay of the run
// finds them (vLLM's rule: src/paged_allocator_prefix.cc).
struct CacheEstimate {
  std::vector<std::int64_t> served;  // per request, in requests.jsonl's order
  std::int64_t served_total = 0, prompt_total = 0;
  int replays = 0;
};

std::string table(const MeasuredRun& run, const Calibration& c, const CacheEstimate& cache, const std::string& cache_note) {
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
  if (cache.replays > 0) {
    out += fmt::format("prompt tokens the prefix cache served: {} of {} ({:.1f}%), {}; taken out of the ticks "
                       "that credit them\n",
                       cache.served_total, cache.prompt_total,
                       cache.prompt_total > 0 ? 100.0 * static_cast<double>(cache.served_total) /
                                                    static_cast<double>(cache.prompt_total)
                                              : 0.0,
                       cache_note);
  } else {
    out += "prompt tokens the prefix cache served: " + cache_note + "\n";
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

std::string json_of(const MeasuredRun& run, const Calibration& c, const CacheEstimate& cache,
                    const std::string& cache_note) {
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
         {"prefix_cache_hits", Json{{"source", cache_note},
                                    {"served_prompt_tokens", cache.replays > 0 ? Json(cache.served_total) : Json(nullptr)},
                                    {"prompt_tokens", cache.replays > 0 ? Json(cache.prompt_total) : Json(nullptr)}}},
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

// The fit made again without the prefix cache's hits, as a replay of the run with the fit
// finds them, until the hits settle; the final fit, and the hits it was made with.
Calibration fit_with_cache_hits(const MeasuredRun& run, const po::variables_map& vm, bool together,
                                Calibration c, CacheEstimate& estimate) {
  // Each replay's hits give the next fit; they depend on the fit only through the schedule
  // (what was computed before a request was admitted, and evictions), so they settle at once
  // on runs that do not evict. Four rounds at most.
  constexpr int kMaxReplays = 4;
  while (estimate.replays < kMaxReplays) {
    po::variables_map v = vm;
    v.erase(option_key(kOptCost));
    v.insert({option_key(kOptCost), po::variable_value(c.cost_spec, false)});
    const RunReplay replayed = replay_run(v, run, kSpec.synopsis);
    ++estimate.replays;
    if (replayed.records.size() != run.requests.size()) {
      throw InputError(Location{replayed.plan.trace_path, 0, ""},
                       fmt::format("the workload has {} requests but {}/requests.jsonl has {}: not this run's workload",
                                   replayed.records.size(), run.dir, run.requests.size()));
    }
    std::vector<std::int64_t> served;
    estimate.served_total = estimate.prompt_total = 0;
    for (const RequestRecord& r : replayed.records) {
      served.push_back(r.cached_prompt_tokens);
      estimate.served_total += r.cached_prompt_tokens;
      estimate.prompt_total += r.prompt_tokens;
    }
    if (served == estimate.served) break;
    estimate.served = std::move(served);
    c = calibrate(run, together, estimate.served);
  }
  return c;
}

}  // namespace

int run_calibrate(const Invocation& inv) {
  // The replay options say how the run is replayed to learn the prefix cache's hits (as
  // validate replays it: meta.json's settings by default).
  po::options_description options = replay_option_descriptions(false);
  po::options_description own("Calibration");
  own.add_options()
      ("workload", po::value<std::string>(), "the run's workload (default: meta.json's dataset_path, relative to the "
                                             "folder above the run); without it the prefix cache's hits are not "
                                             "estimated")
      ("json", "print the fit as JSON; its \"cost\" field is the --cost spec");
  options.add(own);
  po::options_description hidden;
  hidden.add_options()("run", po::value<std::string>())("trace", po::value<std::string>());
  po::positional_options_description positional;
  positional.add("run", 1);
  po::variables_map vm;
  if (!parse_options(inv, kSpec, options, positional, vm, &hidden)) return kExitOk;
  const auto dir = option_text(vm, "run");
  if (!dir) throw UsageError("a run directory is required\nUsage: " + kSpec.synopsis);
  if (vm.count(option_key(kOptModel)) && vm.count(option_key(kOptConfig))) {
    throw UsageError("give --model or --config, not both\nUsage: " + kSpec.synopsis);
  }
  if (!vm[option_key(kOptCost)].defaulted()) {
    throw UsageError(std::string(kOptCost) + " is what calibrate fits; its replay uses the fit\nUsage: " +
                     kSpec.synopsis);
  }
  MeasuredRun run = read_measured_run(*dir, option_text(vm, "workload"), false);
  const bool together = run.data_parallel > 1 && has_experts(run, vm);
  Calibration c = calibrate(run, together);
  // Where the timeseries credits the prompt tokens the prefix cache served, the fit is made
  // again without them, as a replay of the run finds them.
  CacheEstimate estimate;
  std::string cache_note;
  if (!credits_cached_prompt_tokens(run)) {
    cache_note = "prompt_compute_throughput: the timeseries counts the prompt tokens computed";
  } else if (!run.prefix_caching.value_or(true)) {
    cache_note = "none: the run had prefix caching off";
  } else {
    if (run.workload.empty()) run.workload = locate_workload(run);
    if (run.workload.empty()) {
      cache_note = "not estimated (" + workload_not_found(run) +
                   "): the prompt tokens the prefix cache served count as computed";
    } else {
      c = fit_with_cache_hits(run, vm, together, std::move(c), estimate);
      cache_note = fmt::format("kvsim's replay of the run with this fit ({} replays)", estimate.replays);
    }
  }
  fmt::print("{}", vm.count("json") ? json_of(run, c, estimate, cache_note) : table(run, c, estimate, cache_note));
  return kExitOk;
}

}  // namespace kvsim::cli
