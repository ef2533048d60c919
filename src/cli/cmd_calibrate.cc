// kvsim calibrate: the linear cost model fitted to a measured vLLM run (kvsim/calibrate.h
// states the rule), printed with its residuals and the --cost spec that replays it.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "json_text.h"
#include "kvsim/calibrate.h"
#include "kvsim/cost_model.h"
#include "kvsim/error.h"
#include "kvsim/measured_run.h"
#include "kvsim/model.h"
#include "kvsim/option_names.h"
#include "kvsim/output_file.h"
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
    "requests decoding. The fit sums consecutive ticks into blocks of at least 100 steps (by\n"
    "the ticks' median; fewer when the run would make less than twice as many blocks as terms),\n"
    "one equation a block (a gap in the busy ticks ends one): a tick counts whole steps, each in\n"
    "the tick it ends in, and the errors that leaves at its ends cancel inside a block. A term fitted non-positive is\n"
    "dropped; context-token is kept only when it lowers the fit's residual RMS (over its\n"
    "blocks) by 5% or more. Prints the fit with each coefficient's standard error (how much\n"
    "the blocks' scatter leaves it free), the kept terms whose estimates move together\n"
    "(correlation 0.9 or more in size: the run shows their sum, not the split), its residuals\n"
    "per tick and the --cost spec for 'kvsim replay' and 'kvsim validate'.\n\n"
    "With data parallelism the fit is per engine, each taking its share of the tick's decodes;\n"
    "the prompt tokens are shared out too, except for a mixture-of-experts model, whose\n"
    "replicas take every step together (vLLM aligns their forward passes), so a replica's\n"
    "prefill lengthens both replicas' steps. The model (meta.json's, by validate's table, or\n"
    "--model / --config) says which.\n\n"
    "A mixture-of-experts model reads only the routed experts a step's tokens reach (vLLM's\n"
    "fused MoE kernels skip an expert no token is routed to). Its fit tries one more term,\n"
    "expert-weights: the read of all the device's routed experts, charged per step by the\n"
    "expected share its tokens reach, 1 - (1 - k/E)^T for T tokens sent to k of E experts each\n"
    "(all the replicas' tokens when they step together); kept, like context-token, only when\n"
    "it lowers the residual RMS by 5% or more. Where the replay below has steps in a tick, the\n"
    "share is their mean, and for replicas that step together the prompt tokens, decodes and\n"
    "context the fit charges are the slowest replica's in each of them (a step lasts as long\n"
    "as its slowest replica's work), as fractions of the tick's own counts; elsewhere the tick\n"
    "itself estimates the share.\n\n"
    "vLLM's prompt throughput credits a whole prompt once, at its first token: the tokens its\n"
    "prefix cache served included, which no step computes, and never what a preemption by\n"
    "recompute makes it compute again. calibrate replays the run as 'kvsim validate' does\n"
    "(meta.json's settings; the replay options below change them) with its fit, takes the\n"
    "tokens each request found cached out of the tick that credits its prompt (unless the\n"
    "timeseries has newer recorders' prompt_compute_throughput, which leaves them out), adds\n"
    "the positions computed again to the ticks that computed them, and where the replay\n"
    "preempts, scales each tick's mean requests decoding and their context by what the\n"
    "replay's steps decoded against its own requests counted from first token to last (a\n"
    "preempted request waits inside that span; without such a replay, the mean is bounded by\n"
    "the running count). It fits again, until a replay finds what the one before did or the\n"
    "new fit times every tick within 1% of the last one (eight replays at most). Without the\n"
    "workload (meta.json's dataset_path, or --workload) it says nothing was estimated. Any of\n"
    "replay's model, schedule and budget options may be given but --time-window, --requests,\n"
    "--rate-scale (the run is replayed whole, at its own load) and --cost (the replays use the\n"
    "fit); replay's outputs are not (calibrate prints the fit, or --json).",
    "  kvsim calibrate ../shared/measured/rtxpro6000-llama-3.1-8b\n"
    "  kvsim validate ../shared/measured/rtxpro6000-llama-3.1-8b \\\n"
    "      --cost \"$(kvsim calibrate ../shared/measured/rtxpro6000-llama-3.1-8b --json | jq -r .cost)\""};

std::string unit_of(const std::string& term) {
  if (term == "base") return "per step";
  if (term == "prefill-token") return "per prompt token";
  if (term == "decode-seq") return "per decoding sequence";
  if (term == "expert-weights") return "per step, x the share of the routed experts it reaches";
  return "per context position";
}

// What kvsim's replay of the run with the fit finds that the timeseries does not show: the
// prompt tokens vLLM's prefix cache served (vLLM's rule: src/paged_allocator_prefix.cc) and
// the positions computed again after preemptions.
struct ReplayFindings {
  ReplayEstimate estimate;
  std::int64_t served_total = 0, prompt_total = 0, recomputed_total = 0;
  int replays = 0;
  bool settled = false;  // the last replay found what the one before did
  std::string not_estimated;  // why there was no replay
  std::vector<std::string> warnings;  // what the last replay could not take from the run
};

double share(std::int64_t part, std::int64_t whole) {
  return whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

std::string table(const MeasuredRun& run, const Calibration& c, const ReplayFindings& f) {
  std::string out = fmt::format("calibration of {} ({}, vLLM {})\n", run.dir, run.model, vllm_version_text(run));
  out += fmt::format("ticks fitted: {} of {} (busy for the whole {} s tick), summed {} to an equation\n",
                     c.ticks.size(), c.ticks_in_run, c.tick_s, c.block_ticks);
  if (run.untimed_requests > 0) {
    out += fmt::format("{} of {} requests carry no timestamps (vLLM returned no metrics): their decodes are not "
                       "counted among the decoding, so the steps come out short by about their share, and the "
                       "prefix cache's share of their prompts is not taken out\n",
                       run.untimed_requests, run.requests.size());
  }
  if (run.data_parallel > 1) {
    out += fmt::format("per engine, {} data-parallel engines {}\n", run.data_parallel,
                       c.steps_together ? "stepping together (a model with experts)" : "stepping independently");
  }
  if (f.replays > 0) {
    if (f.settled && f.replays == 1) {
      // The first replay found what the fit had assumed: nothing was fitted again.
      out += "kvsim's replay of the run with this fit (1 replay, which found what the fit assumed) finds:\n";
    } else {
      out += f.settled ? fmt::format("kvsim's replay of the run with this fit ({} replays, the last two fits timing every tick within "
                                   "1% of each other) finds:\n",
                                   f.replays)
                     : fmt::format("kvsim's replays of the run ({}, the last two fits timing a tick more than 1% apart; "
                                   "this fit is made with the last one's findings) find:\n",
                                   f.replays);
    }
    out += fmt::format("  the prefix cache served {} of {} prompt tokens ({:.1f}%){}\n", f.served_total,
                       f.prompt_total, share(f.served_total, f.prompt_total),
                       credits_cached_prompt_tokens(run) ? ", taken out of the ticks that credit them"
                                                         : ", which prompt_compute_throughput leaves out already");
    out += fmt::format("  preemptions had {} prompt positions computed again, added to the ticks that computed them\n",
                       f.recomputed_total);
  } else {
    out += "prefix-cache hits and recomputation after preemption: " + f.not_estimated + "\n";
  }
  out += "\n";
  out += fmt::format("{:<15} {:>14}  {:>14}\n", "term", "coefficient", "std. error");
  for (const CalibrationTerm& t : c.terms) {
    if (t.kept) {
      const std::string error = t.standard_error >= 0 ? fmt::format("{:>11.3f} us", t.standard_error * 1e6) : "-";
      out += fmt::format("{:<15} {:>11.3f} us  {:>14}  {}\n", t.name, t.seconds * 1e6, error, unit_of(t.name));
    } else {
      out += fmt::format("{:<15} {:>14}  {:>14}  not kept: {}\n", t.name, "-", "", t.why);
    }
  }
  for (const CorrelatedTerms& p : c.correlated) {
    out += fmt::format("{} and {} move together in these ticks (correlation {:.2f}): the fit gives what they cost "
                       "together on steps shaped like the run's, not how that splits between them\n",
                       p.first, p.second, p.correlation);
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

std::string json_of(const MeasuredRun& run, const Calibration& c, const ReplayFindings& f) {
  using Json = nlohmann::ordered_json;
  Json terms = Json::array();
  for (const CalibrationTerm& t : c.terms) {
    Json j{{"name", t.name}, {"kept", t.kept}, {"seconds", t.seconds}};
    if (t.kept) j["standard_error_s"] = t.standard_error >= 0 ? Json(t.standard_error) : Json(nullptr);
    if (!t.kept) j["why"] = t.why;
    terms.push_back(j);
  }
  Json correlated = Json::array();
  for (const CorrelatedTerms& p : c.correlated) {
    correlated.push_back(Json{{"terms", Json::array({p.first, p.second})}, {"correlation", p.correlation}});
  }
  Json ticks = Json::array();
  for (const CalibrationTick& t : c.ticks) {
    ticks.push_back(Json{{"t_s", t.t_s}, {"prompt_tokens", t.prompt_tokens}, {"generated_tokens", t.generated_tokens},
                         {"decoded_tokens", t.decoded_tokens}, {"decoding_mean", t.decoding_mean},
                         {"context_mean", t.context_mean}, {"steps", t.steps}, {"predicted_s", t.predicted_s}});
    // An MoE model's: the share of the experts its steps reached, summed.
    if (c.terms.size() > 4) ticks.back()["expert_steps"] = t.expert_steps;
  }
  Json j{{"run", run.dir},
         {"model", run.model},
         {"vllm_version", run.vllm_version.empty() ? Json(nullptr) : Json(run.vllm_version)},
         {"cost", c.cost_spec},
         {"terms", terms},
         {"correlated_terms", correlated},
         {"ticks_in_run", c.ticks_in_run},
         {"ticks_fitted", c.ticks.size()},
         {"untimed_requests", run.untimed_requests},
         {"replay_estimate",
          Json{{"replays", f.replays},
               {"settled", f.settled},
               {"not_estimated", f.replays > 0 ? Json(nullptr) : Json(f.not_estimated)},
               {"prompt_tokens", f.replays > 0 ? Json(f.prompt_total) : Json(nullptr)},
               {"cached_prompt_tokens", f.replays > 0 ? Json(f.served_total) : Json(nullptr)},
               {"cached_taken_out", f.replays > 0 && credits_cached_prompt_tokens(run)},
               {"recomputed_tokens", f.replays > 0 ? Json(f.recomputed_total) : Json(nullptr)},
               {"warnings", f.warnings}}},
         {"tick_s", c.tick_s},
         {"data_parallel", run.data_parallel},
         {"steps_together", c.steps_together},
         {"block_ticks", c.block_ticks},
         {"equations", c.equations},
         {"residual_rms_s", c.residual_rms_s},
         {"residual_max_s", c.residual_max_s},
         {"ticks", ticks}};
  return json_text(j);
}

// What the fit needs of the run's model: --config, --model, else meta.json's model by
// validate's table. A model that none of them names is taken to have no experts, except with
// data parallelism, where whether the replicas step together depends on it: an InputError
// naming meta.json then.
CalibrationModel calibration_model(const MeasuredRun& run, const po::variables_map& vm) {
  std::optional<MoeDims> moe;
  if (const auto config = option_text(vm, option_key(kOptConfig))) {
    moe = load_hf_config(*config).moe;
  } else if (const auto model = option_text(vm, option_key(kOptModel))) {
    moe = find_model_preset(*model).moe;
  } else if (const RunModelRow* row = run_model_row(run.model)) {
    moe = find_model_preset(row->preset).moe;
  } else if (run.data_parallel > 1) {
    throw InputError(Location{run.dir + "/meta.json", 0, "model"},
                     "\"" + run.model + "\" has no kvsim preset in validate's table, and with data parallelism "
                     "the fit needs to know whether it has experts; give --model PRESET or --config config.json");
  }
  CalibrationModel m;
  if (moe) {
    m.replicas_step_together = run.data_parallel > 1;
    m.routed_experts = moe->routed_experts;
    m.experts_per_token = routed_experts_used(*moe);
    m.cuda_graph_max_tokens = run_cuda_graph_max_tokens(run, vm);
  }
  return m;
}

// Whether the user gave any replay option (all of calibrate's options are replay's but these).
bool gives_replay_options(const po::variables_map& vm) {
  return std::any_of(vm.begin(), vm.end(), [](const auto& kv) {
    return !kv.second.defaulted() && kv.first != "run" && kv.first != "json" && kv.first != option_key(kOptWorkload);
  });
}

// The index of the tick of `run` a replay's step that began `workload_s` into the workload
// falls in, or -1: the clocks mapped as validate maps them (RunReplay::wall_offset_s), a tick
// covering (t - tick, t].
std::ptrdiff_t tick_of(const MeasuredRun& run, double wall_offset, double workload_s) {
  const double t = workload_s + wall_offset - run.started_at_s;
  const auto it = std::lower_bound(run.ticks.begin(), run.ticks.end(), t,
                                   [](const MeasuredTick& m, double x) { return m.t_s < x; });
  if (it == run.ticks.end() || t <= it->t_s - run.tick_s) return -1;
  return it - run.ticks.begin();
}

// The replay's requests as requests.jsonl would give them (each decoding from its first token
// to its last), on the run's monotonic clock; untimed where one did not complete, and where
// the run's own is untimed (vLLM returned no metrics for it): the run's decoding spans, which
// these are set against, leave it out too. Records are in trace order, one per run request.
std::vector<MeasuredRequest> on_run_clock(const MeasuredRun& run, const RunReplay& replayed) {
  std::vector<MeasuredRequest> out;
  const double to_monotonic = tick_origin_monotonic_s(run) + replayed.wall_offset_s - run.started_at_s;
  for (std::size_t k = 0; k < replayed.records.size(); ++k) {
    const RequestRecord& r = replayed.records[k];
    MeasuredRequest m;
    m.timed = run.requests[k].timed && r.first_token_ns >= 0 && r.finish_ns >= 0 &&
              r.outcome == RequestRecord::Outcome::completed;
    m.input_tokens = r.prompt_tokens;
    m.output_tokens = r.output_tokens;
    m.first_token_s = static_cast<double>(r.first_token_ns) / 1e9 + to_monotonic;
    m.last_token_s = static_cast<double>(r.finish_ns) / 1e9 + to_monotonic;
    out.push_back(m);
  }
  return out;
}

// What the replay's steps show of each tick of `run` (StepEstimate), from its timeline
// `rows`: replicas that step together give one row each for a step, one after another, at the
// step's start; the slowest under `cost` sets the step's length.
struct StepRow {
  std::int64_t time_ns = 0;  // the step's start
  StepCounts work;
};

std::vector<StepEstimate> step_estimates(const MeasuredRun& run, const CalibrationModel& model, const CostModel& cost,
                                         const RunReplay& replayed, const std::vector<StepRow>& rows) {
  // A replay that preempts: what its steps decode against its requests counted as the run's are.
  const bool preempts = replayed.report.preemptions > 0;
  if (!preempts && model.routed_experts <= 0) return {};  // nothing the counts do not show
  const double wall_offset = replayed.wall_offset_s;
  struct Sums {
    std::int64_t steps = 0;
    std::int64_t engine_steps = 0;  // the engines' steps: a step of replicas that step together counts dp times
    double share = 0;
    double prompt[2] = {}, decode[2] = {}, context[2] = {};  // the slowest replica's, all replicas'
  };
  std::vector<Sums> sums(run.ticks.size());
  for (std::size_t first = 0; first < rows.size();) {
    std::size_t end = first + 1;
    while (end < rows.size() && rows[end].time_ns == rows[first].time_ns) ++end;
    const std::ptrdiff_t i = tick_of(run, wall_offset, static_cast<double>(rows[first].time_ns) / 1e9);
    if (i >= 0) {
      Sums& s = sums[static_cast<std::size_t>(i)];
      std::size_t slowest = first;
      std::int64_t longest = -1;
      for (std::size_t r = first; r < end; ++r) {
        const StepCounts& w = rows[r].work;
        const std::int64_t ps = step_time_ps(cost, step_work_of(w));
        if (ps > longest) longest = ps, slowest = r;
        s.prompt[1] += static_cast<double>(w.prefill_tokens);
        s.decode[1] += static_cast<double>(w.decode_seqs);
        s.context[1] += static_cast<double>(w.context);
      }
      const StepCounts& w = rows[slowest].work;
      s.prompt[0] += static_cast<double>(w.prefill_tokens);
      s.decode[0] += static_cast<double>(w.decode_seqs);
      s.context[0] += static_cast<double>(w.context);
      s.share += routed_expert_share(model.routed_experts, model.experts_per_token, expert_tokens(step_work_of(w)));
      ++s.steps;
      s.engine_steps += model.replicas_step_together ? run.data_parallel : static_cast<std::int64_t>(end - first);
    }
    first = end;
  }
  const std::vector<MeasuredRequest> requests = preempts ? on_run_clock(run, replayed) : std::vector<MeasuredRequest>{};
  const double origin = tick_origin_monotonic_s(run);
  std::vector<StepEstimate> out(run.ticks.size());
  const auto engines = static_cast<double>(run.data_parallel);
  for (std::size_t i = 0; i < sums.size(); ++i) {
    const Sums& s = sums[i];
    if (s.steps == 0) continue;
    StepEstimate& e = out[i];
    if (preempts) {
      const double t1 = origin + run.ticks[i].t_s;
      const DecodingIntegrals counted = decoding_integrals(requests, t1 - run.tick_s, t1);
      const auto per_step = [&](double total) { return total / static_cast<double>(s.engine_steps); };
      if (counted.decoding > 0) e.decoding_ratio = per_step(s.decode[1]) / (counted.decoding / run.tick_s / engines);
      if (counted.context > 0) e.context_ratio = per_step(s.context[1]) / (counted.context / run.tick_s / engines);
    }
    e.expert_share = s.share / static_cast<double>(s.steps);
    if (!model.replicas_step_together) continue;
    // Against the per-engine terms the fit uses: all the prompt tokens, the engines' mean decodes and context.
    if (s.prompt[1] > 0) e.prompt_factor = s.prompt[0] / s.prompt[1];
    if (s.decode[1] > 0) e.decode_factor = s.decode[0] * engines / s.decode[1];
    if (s.context[1] > 0) e.context_factor = s.context[0] * engines / s.context[1];
  }
  return out;
}

// Whether fit `before` times every tick `now` fits within 1% of a tick of what `now` gives it:
// the replay each would drive then runs the same steps to within that. Coefficients the ticks
// cannot tell apart (a base and a per-position term that move together) can wander from one
// replay to the next while what they give the run's steps does not, so the ticks, not the
// coefficients, say when the fit has settled.
bool same_fit(const Calibration& now, const Calibration& before, double engines) {
  for (const CalibrationTick& t : now.ticks) {
    if (std::abs(predicted_tick_s(before, t, engines) - t.predicted_s) > 1e-2 * now.tick_s) return false;
  }
  return now.terms.size() == before.terms.size();
}

// The fit made again with what a replay of the run with the fit finds (cached prompt tokens
// per request, recomputed positions per tick, and for an MoE model the share of the experts
// each step reached and the slowest replica's share of it), until a replay finds what the one
// before did or the fit moves by less than 1%; eight replays at most. Cached hits depend on
// the fit only through the schedule (what was computed before a request came, what was
// evicted), so without preemptions they settle at once. The steps' shares are real numbers
// that move with the schedule, and a fit and the replay it times can chase each other: each
// replay's are averaged with the estimate before, which damps that.
Calibration refit_with_replay(const MeasuredRun& run, const po::variables_map& vm, const CalibrationModel& model,
                              Calibration c, ReplayFindings& f) {
  constexpr int kMaxReplays = 8;
  while (f.replays < kMaxReplays) {
    po::variables_map v = vm;
    v.insert({option_key(kOptCost), po::variable_value(c.cost_spec, false)});
    std::vector<std::pair<std::int64_t, std::int64_t>> recomputed_at;  // (step start, positions)
    std::vector<StepRow> rows;  // every replica's steps, for step_estimates
    const RunReplay replayed = replay_run(v, run, kSpec.synopsis, [&](const TimelineRow& row) {
      if (row.idle) return;  // no step
      if (row.recomputed_tokens != 0) recomputed_at.emplace_back(row.time_ns, row.recomputed_tokens);
      rows.push_back({row.time_ns, row.work});
    });
    ++f.replays;
    f.warnings = replayed.warnings;
    ReplayEstimate next;
    f.served_total = f.prompt_total = f.recomputed_total = 0;
    for (const RequestRecord& r : replayed.records) {
      next.served_by_cache.push_back(r.cached_prompt_tokens);
      f.served_total += r.cached_prompt_tokens;
      f.prompt_total += r.prompt_tokens;
    }
    next.recomputed.assign(run.ticks.size(), 0);
    for (const auto& [at_ns, positions] : recomputed_at) {
      // A step outside the run's ticks (before the first, after the last) counts in none.
      const std::ptrdiff_t i = tick_of(run, replayed.wall_offset_s, static_cast<double>(at_ns) / 1e9);
      if (i < 0) continue;
      next.recomputed[static_cast<std::size_t>(i)] += positions;
      f.recomputed_total += positions;
    }
    next.steps = step_estimates(run, model, c.cost, replayed, rows);
    if (f.estimate.steps.size() == next.steps.size()) {
      const auto damp = [](double& now, double before) {
        if (now >= 0 && before >= 0) now = (now + before) / 2;
      };
      for (std::size_t i = 0; i < next.steps.size(); ++i) {
        const StepEstimate& before = f.estimate.steps[i];
        StepEstimate& now = next.steps[i];
        damp(now.expert_share, before.expert_share);
        damp(now.prompt_factor, before.prompt_factor);
        damp(now.decode_factor, before.decode_factor);
        damp(now.context_factor, before.context_factor);
        damp(now.decoding_ratio, before.decoding_ratio);
        damp(now.context_ratio, before.context_ratio);
      }
    }
    f.settled = next.served_by_cache == f.estimate.served_by_cache && next.recomputed == f.estimate.recomputed &&
                next.steps == f.estimate.steps;
    if (f.settled) break;
    f.estimate = std::move(next);
    Calibration refit = calibrate(run, model, f.estimate);
    f.settled = same_fit(refit, c, static_cast<double>(run.data_parallel));
    c = std::move(refit);
    if (f.settled) break;
  }
  return c;
}

}  // namespace

int run_calibrate(const Invocation& inv) {
  // The replay options say how the run is replayed to learn the prefix cache's hits and the
  // recomputation after preemptions (as validate replays it: meta.json's settings by
  // default); the replay's cost is the fit.
  po::options_description options = replay_option_descriptions(false, false, kMeasuredRunAllocatorHelp, false);
  po::options_description own("Calibration");
  own.add_options()
      (option_key(kOptWorkload), po::value<std::string>(),
       "the run's workload (default: meta.json's dataset_path, relative to the "
       "folder above the run); without it the prefix cache's hits and the "
       "recomputation after preemptions are not estimated")
      ("json", "print the fit as JSON; its \"cost\" field is the --cost spec");
  options.add(own);
  po::variables_map vm;
  const auto dir = parse_run_command(inv, kSpec, options, vm);
  if (!dir) return kExitOk;
  if (given(vm, option_key(kOptTimingDevice))) {
    throw InputError(Location{"", 0, kOptTimingDevice},
                     "times the roofline, and calibrate's replays time their steps with the fit, which names every "
                     "term itself: it would have no effect");
  }
  if (vm.count(option_key(kOptModel)) && vm.count(option_key(kOptConfig))) {
    throw UsageError("give --model or --config, not both\nUsage: " + kSpec.synopsis);
  }
  MeasuredRun run = read_measured_run(*dir, option_text(vm, option_key(kOptWorkload)), false);
  refuse_stdout_over_input(measured_run_inputs(run), kSpec.synopsis);
  // The version replayed, which the header names: the user's, over the run's.
  if (const auto version = option_text(vm, option_key(kOptVllmVersion))) run.vllm_version = *version;
  const CalibrationModel model = calibration_model(run, vm);
  Calibration c = calibrate(run, model);
  // What the timeseries does not show, a replay of the run finds: the prompt tokens the
  // prefix cache served (where prompt_throughput credits them) and those computed again after
  // preemptions (which nothing credits).
  ReplayFindings findings;
  if (run.workload.empty()) run.workload = locate_workload(run);
  if (run.workload.empty()) {
    findings.not_estimated = "not estimated (" + workload_not_found(run) + ")";
  } else {
    // A run whose meta.json names what kvsim has no preset for (a model, a GPU) cannot be
    // replayed as it is: when the user gave nothing to replay it with, the fit stands without
    // the estimate and says why. Anything else (a value meta.json gets wrong, a bad option, a
    // bad workload) is an error, as in validate.
    std::optional<std::string> unreplayable;
    if (!gives_replay_options(vm)) {
      try {
        po::variables_map v = vm;
        apply_run_settings(v, run, kSpec.synopsis);
      } catch (const NoPresetError& e) {
        unreplayable = e.what();
      }
    }
    if (unreplayable) {
      findings.not_estimated = "not estimated (the run cannot be replayed as meta.json describes it: " +
                               *unreplayable + "; the replay options, as validate's, supply what is missing)";
    } else {
      c = refit_with_replay(run, vm, model, std::move(c), findings);
    }
  }
  write_stdout(vm.count("json") ? json_of(run, c, findings) : table(run, c, findings));
  // The fit stands without what only a replay finds (served prompt tokens, recomputation,
  // the experts' share): said where it is read, and here too, for a caller reading --json.
  if (findings.replays == 0) {
    fmt::print(stderr, "kvsim calibrate: warning: the fit is of the ticks alone; prefix-cache hits and "
                       "recomputation after preemption {}\n", findings.not_estimated);
  }
  for (const std::string& w : findings.warnings) fmt::print(stderr, "kvsim calibrate: warning: {}\n", w);
  return kExitOk;
}

}  // namespace kvsim::cli
