// What the fuzz targets check, shared with the regression tests that replay their findings
// (tests/fuzz_regression_test.cc), so that a fixed finding stays fixed in every build.
//
// Each check runs one input through a reader (and the statistics) or the config loader. Bad input must end in
// kvsim::InputError; a broken promise about what was accepted throws Finding; anything else
// (another exception, a crash, a sanitizer report, a leak, a hang) escapes to the caller.
// In a fuzz target, Finding and any other exception are uncaught, so libFuzzer reports them.
#ifndef KVSIM_FUZZ_FUZZ_CHECKS_H_
#define KVSIM_FUZZ_FUZZ_CHECKS_H_

#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "kvsim/budget.h"
#include "kvsim/calibrate.h"
#include "kvsim/cost_model.h"
#include "kvsim/error.h"
#include "kvsim/measured_run.h"
#include "kvsim/model.h"
#include "kvsim/size_sheet.h"
#include "kvsim/speculative.h"
#include "kvsim/trace.h"
#include "kvsim/trace_stats.h"

namespace kvsim::fuzz {

// A promise broken without a crash: e.g. a reader returned a request it should have rejected.
class Finding : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// Reads the trace at `path` to the end, summarising it as `kvsim trace stats` does; true
// when it was accepted.
inline bool read_trace_checked(const std::string& path, const TraceOptions& options) {
  try {
    auto reader = open_trace(path, options);
    TraceStatsBuilder stats;
    Request r;
    std::int64_t previous_arrival = 0;
    for (std::int64_t count = 0; reader->next(r); ++count) {
      // What every reader promises of a request it returns (kvsim/trace.h).
      const bool valid = r.prompt_tokens >= 0 && r.output_tokens >= 0 && r.n >= 1 && r.arrival_ns >= 0 &&
                         r.arrival_ns >= previous_arrival && (!r.max_tokens || *r.max_tokens >= r.output_tokens) &&
                         (!r.cancel_ns || *r.cancel_ns >= r.arrival_ns);
      if (!valid) {
        throw Finding("request #" + std::to_string(count + 1) + " ('" + r.id + "', arrival " +
                      std::to_string(r.arrival_ns) + " ns) breaks the readers' validation promises");
      }
      previous_arrival = r.arrival_ns;
      stats.add(r);
    }
    format_trace_stats(stats.finish());
    return true;
  } catch (const InputError&) {
    return false;  // bad input, reported as such: the expected outcome
  }
}

// One trace file, read as `format` (as a user's --format would), then with --sort (which
// buffers, sorts and shifts the requests), then through format detection.
inline void check_trace(TraceFormat format, const std::string& path) {
  TraceOptions options;
  options.format = format;
  options.synthetic_rate_per_s = 3;  // length-only traces need an arrival process
  options.max_errors = 4;            // enough to exercise error collection, cheaper than 20
  read_trace_checked(path, options);
  options.sort = true;
  read_trace_checked(path, options);
  try {
    detect_trace_format(path);
  } catch (const InputError&) {
  }
}

// Sizes an accepted model as `kvsim size --config FILE --device H100-80GB` does: the budget,
// every pipeline stage's layout, bytes for the longest sequence, vLLM's block pool.
inline void size_model(const ModelSpec& model, const KvOptions& kv) {
  try {
    const std::int64_t tokens = model.max_position_embeddings > 0 ? model.max_position_embeddings : 4096;
    BudgetOptions budget_options;
    budget_options.device = "H100-80GB";
    const Budget budget = derive_budget(model, kv, budget_options);
    for (const KvLayout& stage : kv_stage_layouts(model, kv)) {
      kv_bytes_for_tokens(stage, tokens);
      // A stage of only state-space or KV-reusing layers has no pool; size_sheet() refuses a
      // budget for it with an InputError (checked below).
      if (stage.groups.empty()) continue;
      const PagedOptions paging;
      const PagedPool pool = paged_pool(stage, budget.kv_budget_bytes, paging);
      request_blocks(stage, pool, tokens, paging);
    }
  } catch (const InputError&) {
  }
  try {
    kv_bytes_for_tokens(kv_layout(model, kv), 1 << 20);
  } catch (const InputError&) {
  }
  // The sheet as `kvsim size` builds it, with every sizing case: it refuses what it cannot
  // pool (hybrid models, stages without KV) with an InputError, never an internal error.
  try {
    SizeQuery query;
    query.tokens = {1000, model.max_position_embeddings > 0 ? model.max_position_embeddings : 4096};
    query.request = RequestShape{3000, 1000, 4, true};
    query.static_cache_tokens = 8192;
    query.offload_ppb = 500'000'000;
    query.link_bytes_per_second = 25'000'000'000;
    query.draft = eagle_draft(model);
    size_sheet(model, kv, query);
    query.draft.reset();
    query.budget = BudgetOptions{};
    query.budget->device = "H100-80GB";
    query.checks = {{"usual input", 1, 2000}, {"long input", 1, 100000}, {"maximum concurrency", 64, 2000}};
    size_sheet(model, kv, query);
  } catch (const InputError&) {
  }
}

// One config.json text: loaded, then sized with the defaults and with a quantised,
// decompressed, parallel placement. Arithmetic on a config's numbers must end in a result
// or an InputError, never in undefined behaviour.
inline void check_hf_config(std::string_view text) {
  ModelSpec model;
  try {
    model = parse_hf_config(text, "config.json");
  } catch (const InputError&) {
    return;
  }
  KvOptions kv;
  kv.dtype = default_kv_dtype(model);
  size_model(model, kv);
  kv.dtype = KvDtype::int4;
  kv.mla_form = MlaForm::decompressed;
  kv.tensor_parallel = 2;
  kv.pipeline_parallel = 2;
  size_model(model, kv);
}

// A figure derived from an accepted run must be a number: `kvsim validate` and `kvsim
// calibrate` print these, and an inf or a NaN there is a number produced from bad input.
inline void require_finite(double value, const std::string& what) {
  if (!std::isfinite(value)) throw Finding(what + " is " + std::to_string(value) + " for an accepted run");
}

// A duration: finite, and not below zero (the reader refuses timestamps out of order).
inline void require_duration(double seconds, const std::string& what) {
  require_finite(seconds, what);
  if (seconds < 0) throw Finding(what + " is " + std::to_string(seconds) + " s for an accepted run");
}

inline void require_durations(const Distribution& d, const std::string& what) {
  for (const double v : {d.mean, d.p50, d.p90, d.p95, d.p99}) require_duration(v, what);
}

// A measured run's folder (meta.json, requests.jsonl, timeseries.csv, perhaps
// peer_cluster_config.json) read as `kvsim validate` and `kvsim calibrate` read it, without
// looking for its workload; then the measured figures validate prints and calibrate's fit of
// the ticks alone (no replay). A run that is read must give finite figures; a fit that is
// refused must be an InputError.
inline void check_measured_run(const std::string& dir) {
  MeasuredRun run;
  try {
    run = read_measured_run(dir, std::nullopt, false);
  } catch (const InputError&) {
    return;
  }
  const MeasuredLatencies l = measured_latencies(run);
  require_durations(distribution(l.ttft), "TTFT");
  require_durations(distribution(l.tpot), "TPOT");
  require_durations(distribution(l.latency), "latency");
  if (timed_requests(run) < 1) throw Finding("a run without a timed request was accepted");
  require_finite(monotonic_to_wall_s(run), "the monotonic clock's origin");
  require_finite(tick_origin_monotonic_s(run), "the ticks' origin");
  require_duration(measured_makespan_s(run), "the makespan");
  Calibration c;
  try {
    c = calibrate(run);
  } catch (const InputError&) {
    return;  // too few busy ticks, or no positive time per step: refused, as it should be
  }
  for (const CalibrationTerm& t : c.terms) {
    // The fit drops a term until every kept one is positive (src/calibrate.cc).
    if (t.kept && !(t.seconds > 0 && std::isfinite(t.seconds))) {
      throw Finding("the fit kept " + t.name + " at " + std::to_string(t.seconds) + " s");
    }
    require_finite(t.standard_error, "the standard error of " + t.name);
  }
  require_finite(c.residual_rms_s, "the fit's residual");
  require_finite(c.residual_max_s, "the fit's largest residual");
  // The spec calibrate prints is what --cost takes, and gives back the fitted model.
  CostModel parsed;
  try {
    parsed = parse_cost_model(c.cost_spec, CostModel{}, "--cost");
  } catch (const InputError& e) {
    throw Finding("the fit's --cost spec \"" + c.cost_spec + "\" is refused: " + e.what());
  }
  if (parsed.base_ps != c.cost.base_ps || parsed.prefill_token_ps != c.cost.prefill_token_ps ||
      parsed.decode_seq_ps != c.cost.decode_seq_ps || parsed.context_token_ps != c.cost.context_token_ps) {
    throw Finding("the fit's --cost spec \"" + c.cost_spec + "\" reads back as another model");
  }
}

}  // namespace kvsim::fuzz

#endif  // KVSIM_FUZZ_FUZZ_CHECKS_H_
