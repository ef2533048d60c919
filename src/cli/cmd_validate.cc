// kvsim validate: replays a measured vLLM run's workload closed-loop with the run's engine
// settings (meta.json) and prints measured against simulated, in the shape of the peer's
// peer_validation_summary.txt, plus the error in the per-second running and waiting counts,
// KV usage where the run recorded it, and the makespan.
//
// The run's settings become defaults of `kvsim replay`'s own options: whatever the user gives
// wins. Two small tables map what meta.json and peer_cluster_config.json name onto kvsim's
// presets; where a preset is missing the error says which and what to give instead.
#include <fmt/core.h>
#include <fmt/ranges.h>  // fmt::join

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>
#include <vector>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "json_text.h"
#include "kvsim/allocator.h"
#include "kvsim/budget.h"
#include "kvsim/cost_model.h"
#include "kvsim/error.h"
#include "kvsim/measured_run.h"
#include "kvsim/model.h"
#include "kvsim/output_file.h"
#include "kvsim/option_names.h"
#include "kvsim/replay.h"
#include "kvsim/replicas.h"
#include "kvsim/startup_memory.h"
#include "kvsim/trace.h"
#include "kvsim/units.h"
#include "model_options.h"
#include "replay_output.h"
#include "replay_plan.h"
#include "run_models.h"
#include "run_replay.h"

namespace kvsim::cli {
namespace {

const CommandSpec kSpec{
    "kvsim validate RUN_DIR [replay options]",
    "Replays a measured vLLM run's workload (meta.json's dataset_path, or --workload) with the\n"
    "run's engine settings and compares what kvsim predicts with what was measured: TTFT, TPOT\n"
    "and latency (mean, p50, p90, p95, p99, % difference, as the peer's\n"
    "peer_validation_summary.txt), the mean absolute error of the running and waiting counts at\n"
    "each tick of timeseries.csv, KV usage when the run recorded it, and the makespan.\n\n"
    "From meta.json, unless given: --model (a preset, by the table below), --tp, --max-running\n"
    "(max_num_seqs), --max-batched-tokens, --max-model-len, --replicas (data_parallel_size; the\n"
    "running and waiting counts are the replicas' summed), --expert-parallel\n"
    "(enable_expert_parallel, on a model with experts; not with --replicas 1), --allocator\n"
    "paged:block=16,prefix-caching=on (vLLM's defaults) and --schedule simulate; --vllm-version\n"
    "(vllm_version), which for vLLM 0.19 and later gives\n"
    "--async-scheduling on and --cuda-graphs on (off with enforce_eager), and with --policy vllm\n"
    "v1's admission: --watermark 0 from 0.8, --reserve-full-isl on from 0.19 (or as meta.json's\n"
    "scheduler_reserve_full_isl says); the device from meta.json's hardware.device_name, else\n"
    "peer_cluster_config.json (--timing-device; a GPU with no preset is a warning), and its KV\n"
    "pool by vLLM's start-up rule (as 'kvsim size --engine vllm', with the replay's options; the\n"
    "device's total as meta.json's hardware records it) or as meta.json fixes it\n"
    "(kv_cache.num_gpu_blocks, what vLLM allocated; kv_cache_memory_bytes;\n"
    "num_gpu_blocks_override), less vLLM's null block (--kv-budget: that pool; --reserve or\n"
    "--params: replay's rule). Where engine_kwargs is null or silent, meta.json's\n"
    "resolved_config (what vLLM ran with) gives the setting; max_model_len -1 (vLLM's auto) is\n"
    "fitted to the pool replayed, as vLLM fits it. A request longer than max_model_len is served\n"
    "up to it, as vLLM's engine ends it. A workload longer than requests.jsonl is replayed to\n"
    "its first rows, one per request the run recorded (the recorder's --num-reqs).\n"
    "Any of replay's model, schedule and budget options may be given but --time-window, --requests\n"
    "and --rate-scale (the run is replayed whole, at its own load); its outputs are validate's own\n"
    "(--json, --per-request, --per-tick), not replay's (--csv, --timeline, --html); --cost takes\n"
    "the spec 'kvsim calibrate RUN_DIR' prints. Measured figures follow the run's README: TTFT =\n"
    "first_token - queued, TPOT = (last_token - first_token) / (output - 1), latency = last_token\n"
    "- queued; percentiles interpolate linearly (numpy's default).\n"
    "Simulated ones likewise, queued being where vLLM records it: as its engine loop takes the\n"
    "request in, at the first step its engine begins at or after the arrival (at once when\n"
    "idle; with replicas that step together, an idle one's next step is the next aligned\n"
    "one). --per-tick writes the running and waiting counts tick by tick, --per-request each\n"
    "request's figures, both measured beside simulated.\n\n" +
        run_name_table(),
    "  kvsim validate ../shared/measured/rtxpro6000-llama-3.1-8b --device-memory 96GB\n"
    "  kvsim validate RUN --device-memory 96GB --cost \"$(kvsim calibrate RUN --json | jq -r .cost)\" --json"};

// One engine step as the recorder sees it. vLLM reports the scheduler's state once a step
// (Scheduler.make_stats, from update_from_output as the step's output is processed), and
// the recorder keeps an engine's last report in each tick (LLMServingSim's
// BenchStatLogger.downsample_to_csv_rows). The report is made as the step ends, with the
// step's completions gone from the running requests; its waiting requests are those the
// latest plan saw, as requests that arrive during a step are taken in only between steps
// (vllm/v1/engine/core.py run_busy_loop: _process_input_queue, then the step). Synchronous,
// that plan is the ending step's own. Asynchronous, the next step is planned before the
// ending one's output is processed (step_with_batch_queue: schedule, then block on the
// oldest batch), so the report shows the next step's plan: the timeline's row for the
// step that begins as this one ends.
struct Step {  // a timeline row's part read here
  std::int64_t begin_ns, duration_ns, running, queued_seen, allocated_bytes;
};
struct Sample {
  std::int64_t begin_ns;     // the step's start
  std::int64_t reported_ns;  // when vLLM reports the counts below
  std::int64_t running, waiting, allocated_bytes;
};

// What one engine (replica) did: its timeline, and when its requests arrived and finished.
struct EngineState {
  std::vector<Sample> samples;
  std::vector<std::int64_t> arrivals, finishes;
};

struct Comparison {
  Distribution measured, simulated;
};

// (simulated - measured) / measured in percent; none against a measured 0 (a share of
// nothing is no figure: the table says n/a, the JSON null).
std::optional<double> diff_percent(double measured, double simulated) {
  if (measured == 0) return std::nullopt;
  return (simulated - measured) / measured * 100;
}
// The table's Diff% cell, 9 wide.
std::string diff_cell(std::optional<double> percent) {
  return percent ? fmt::format("{:>+8.1f}%", *percent) : fmt::format("{:>9}", "n/a");
}
nlohmann::ordered_json diff_json(std::optional<double> percent) {
  return percent ? nlohmann::ordered_json(*percent) : nlohmann::ordered_json(nullptr);
}

// One tick of timeseries.csv beside the simulated state at its end (--per-tick).
struct TickRow {
  double t_s = 0;
  std::int64_t measured_running = 0, simulated_running = 0, measured_waiting = 0, simulated_waiting = 0;
  double measured_kv_percent = 0, simulated_kv_percent = 0;
};

struct Result {
  Comparison ttft, tpot, latency;
  // Per request, in workload order: when its engine took it in (trace clock), and its
  // simulated figures counted from there (none when it did not complete).
  std::vector<std::int64_t> taken_in_ns;
  std::vector<std::optional<RequestLatency>> simulated_each;
  std::vector<TickRow> per_tick;
  double running_mae = 0, waiting_mae = 0;
  std::int64_t ticks = 0;
  bool kv_recorded = false;
  double kv_mae_percent = 0;
  double measured_makespan_s = 0, simulated_makespan_s = 0;
  bool simulated_makespan_known = false;  // false: no timed request completed in the simulation
  std::int64_t completed = 0, requests = 0, preemptions = 0;
};

std::int64_t count_in(const std::vector<std::int64_t>& sorted, std::int64_t after, std::int64_t upto) {
  return static_cast<std::int64_t>(std::upper_bound(sorted.begin(), sorted.end(), upto) -
                                   std::upper_bound(sorted.begin(), sorted.end(), after));
}

// The engines' steps (each engine's in time order) as vLLM would have reported them
// (Sample), with `records` (in trace order) as replica_of routed them (empty: one engine).
// A step is reported as it ends, less its completions; asynchronous, a step that begins as
// the last one ends is reported as it begins (the ending step's report shows this plan),
// and one after a pause as it ends (nothing was planned during the pause). The KV a step's
// completions free before its report stays counted in it.
std::vector<EngineState> engine_states(const std::vector<std::vector<Step>>& steps,
                                       const std::vector<RequestRecord>& records,
                                       const std::vector<std::uint32_t>& replica_of, bool async_scheduling) {
  std::vector<EngineState> engines(steps.size());
  for (std::size_t k = 0; k < records.size(); ++k) {
    const RequestRecord& q = records[k];
    EngineState& e = engines[replica_of.empty() ? 0 : replica_of.at(k)];
    e.arrivals.push_back(q.arrival_ns);
    if (q.outcome == RequestRecord::Outcome::completed) e.finishes.push_back(q.finish_ns);
  }
  for (std::size_t i = 0; i < engines.size(); ++i) {
    EngineState& e = engines[i];
    std::sort(e.arrivals.begin(), e.arrivals.end());
    std::sort(e.finishes.begin(), e.finishes.end());
    std::int64_t last_end = std::numeric_limits<std::int64_t>::min();
    for (const Step& step : steps[i]) {
      const std::int64_t end = step.begin_ns + step.duration_ns;
      const std::int64_t reported = async_scheduling && step.begin_ns == last_end ? step.begin_ns : end;
      e.samples.push_back({step.begin_ns, reported, step.running - count_in(e.finishes, step.begin_ns, reported),
                           step.queued_seen, step.allocated_bytes});
      last_end = end;
    }
  }
  return engines;
}

// The engine's running and waiting counts and allocated bytes at `at_ns`, as its last
// report before then gave them (0 before its first): the recorder's tick ending at `at_ns`
// keeps the reports made in [at_ns - tick, at_ns) (BenchStatLogger.downsample_to_csv_rows). Completions after that report mean the
// engine went idle (a busy engine reports again as its step ends): vLLM reports that last
// step's end too, with nothing running, and then nothing holds KV (a waiting request holds
// none, a cached block is free), as vLLM's usage falls to 0. A request that arrived since
// the report is not counted: the engine takes it in between steps, and reports it with
// the next one.
Sample state_at(const EngineState& e, std::int64_t at_ns) {
  const auto it = std::lower_bound(e.samples.begin(), e.samples.end(), at_ns,
                                   [](const Sample& s, std::int64_t x) { return s.reported_ns < x; });
  Sample s{std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::min(), 0, 0, 0};
  if (it != e.samples.begin()) s = *(it - 1);
  const std::int64_t running = s.running - count_in(e.finishes, s.reported_ns, at_ns - 1);
  return {s.begin_ns, s.reported_ns, running, s.waiting, running > 0 ? s.allocated_bytes : 0};
}

// When vLLM's engine would have taken in a request that arrived at `arrival_ns` at the
// engine `e`: the start of its first step at or after the arrival. vLLM's queued_ts, where
// the measured TTFT and latency begin, is recorded as the engine core's loop hands the
// request to the scheduler (Scheduler.add_request, EngineCoreEventType.QUEUED), which a busy
// loop does between steps, once the step under way has returned (vllm/v1/engine/core.py
// run_busy_loop: _process_input_queue, then the step); an idle one at once, and its step
// then starts at the arrival. The arrival itself when the engine took no step after it.
std::int64_t taken_in_ns(const EngineState& e, std::int64_t arrival_ns) {
  const auto it = std::lower_bound(e.samples.begin(), e.samples.end(), arrival_ns,
                                   [](const Sample& s, std::int64_t x) { return s.begin_ns < x; });
  return it == e.samples.end() ? arrival_ns : it->begin_ns;
}

// `records` one per request of `run` (replay_run() checks), in its order; `replica_of` the
// engine each went to (empty: one engine).
Result compare(const MeasuredRun& run, const ReplayReport& report, const std::vector<RequestRecord>& records,
               const std::vector<std::uint32_t>& replica_of, double wall_offset, const std::vector<EngineState>& engines) {
  Result r;
  r.requests = static_cast<std::int64_t>(records.size());
  r.preemptions = report.preemptions;
  const MeasuredLatencies measured = measured_latencies(run);
  MeasuredLatencies simulated;
  double first_arrival = 0, last_finish = 0;
  bool any = false;
  // Like with like: the simulated figures are over the requests the measured ones are over
  // (those with timestamps).
  for (std::size_t i = 0; i < records.size(); ++i) {
    const RequestRecord& q = records[i];
    const bool completed = q.outcome == RequestRecord::Outcome::completed;
    r.completed += completed ? 1 : 0;
    // Like the measured figures, from the instant vLLM's engine takes the request in.
    const EngineState& engine = engines.at(replica_of.empty() ? 0 : replica_of.at(i));
    r.taken_in_ns.push_back(taken_in_ns(engine, q.arrival_ns));
    r.simulated_each.emplace_back();
    if (!completed) continue;
    const double arrival = static_cast<double>(r.taken_in_ns.back()) / 1e9;
    const double finish = static_cast<double>(q.finish_ns) / 1e9;
    const double first = static_cast<double>(q.first_token_ns) / 1e9;
    const RequestLatency l = request_latency(arrival, first, finish, q.output_tokens);
    r.simulated_each.back() = l;
    if (!run.requests[i].timed) continue;
    simulated.ttft.push_back(l.ttft);
    if (l.tpot) simulated.tpot.push_back(*l.tpot);
    simulated.latency.push_back(l.latency);
    first_arrival = any ? std::min(first_arrival, arrival) : arrival;
    last_finish = any ? std::max(last_finish, finish) : finish;
    any = true;
  }
  r.ttft = {distribution(measured.ttft), distribution(simulated.ttft)};
  r.tpot = {distribution(measured.tpot), distribution(simulated.tpot)};
  r.latency = {distribution(measured.latency), distribution(simulated.latency)};
  r.measured_makespan_s = measured_makespan_s(run);
  r.simulated_makespan_s = last_finish - first_arrival;
  r.simulated_makespan_known = any;
  // Each tick against the simulated state at the same instant, as the recorder combines the
  // engines (LLMServingSim's BenchStatLogger.downsample_to_csv_rows): each engine's last
  // report in the tick, the running and waiting counts summed and KV usage averaged over the
  // engines that reported in it. An engine reports when it takes a step (vLLM's
  // EngineCore.step returns no outputs, so no scheduler stats, without requests), so one idle
  // through the tick, or inside a step longer than it, is left out. With none that reported
  // (the recorder writes no row for such a tick, so the replay is off there), every engine
  // counts.
  double running_err = 0, waiting_err = 0, kv_err = 0;
  const double capacity = static_cast<double>(report.capacity_bytes);
  const double engine_capacity = capacity / static_cast<double>(std::max<std::size_t>(1, engines.size()));
  const auto tick_ns = static_cast<std::int64_t>(std::llround(run.tick_s * 1e9));
  const auto reported_in = [](const EngineState& e, std::int64_t from, std::int64_t before) {
    const auto it = std::lower_bound(e.samples.begin(), e.samples.end(), from,
                                     [](const Sample& s, std::int64_t x) { return s.reported_ns < x; });
    return it != e.samples.end() && it->reported_ns < before;
  };
  for (const MeasuredTick& t : run.ticks) {
    const double at_s = run.started_at_s + t.t_s - wall_offset;
    const auto at_ns = static_cast<std::int64_t>(std::llround(at_s * 1e9));
    std::int64_t logged = 0;
    for (const EngineState& e : engines) logged += reported_in(e, at_ns - tick_ns, at_ns) ? 1 : 0;
    std::int64_t running = 0, waiting = 0, allocated = 0;
    for (const EngineState& e : engines) {
      if (logged > 0 && !reported_in(e, at_ns - tick_ns, at_ns)) continue;
      const Sample s = state_at(e, at_ns);
      running += s.running;
      waiting += s.waiting;
      allocated += s.allocated_bytes;
    }
    if (logged == 0) logged = static_cast<std::int64_t>(engines.size());
    const double kv_percent =
        engine_capacity > 0 ? static_cast<double>(allocated) / (engine_capacity * static_cast<double>(logged)) * 100 : 0;
    running_err += std::abs(static_cast<double>(running - t.running));
    waiting_err += std::abs(static_cast<double>(waiting - t.waiting));
    kv_err += std::abs(kv_percent - t.kv_cache_percent);
    r.per_tick.push_back({t.t_s, t.running, running, t.waiting, waiting, t.kv_cache_percent, kv_percent});
  }
  r.ticks = static_cast<std::int64_t>(run.ticks.size());
  if (r.ticks > 0) {
    r.running_mae = running_err / static_cast<double>(r.ticks);
    r.waiting_mae = waiting_err / static_cast<double>(r.ticks);
    r.kv_mae_percent = kv_err / static_cast<double>(r.ticks);
  }
  r.kv_recorded = run.kv_usage_recorded && capacity > 0;
  return r;
}

std::string budget_text(const ReplayPlan& plan, const std::string& source) {
  if (!plan.budget) return "none (unbounded)";
  return source.empty() ? budget_description(*plan.budget) : budget_description(*plan.budget, source);
}

// What the figures do not show by themselves: requests the simulation did not complete,
// and what the replay could not take from the run (RunReplay::warnings). The table ends with
// them, the JSON lists them, and standard error carries them either way.
std::vector<std::string> warnings_of(const RunReplay& replayed, const Result& r) {
  std::vector<std::string> out = replayed.warnings;
  // A pool the user sized (--kv-budget, --reserve, --params) that cannot hold one sequence
  // of max_model_len: vLLM refuses to start such an engine (vllm/v1/core/kv_cache_utils.py,
  // check_enough_kv_cache_memory, before its null block is taken: one block more than the
  // pool replayed), so no run has it. Sized as a sequence decoded to that length, whose
  // sliding windows hold only their windows, as vLLM sizes it per layer. A pool meta.json
  // records is one vLLM started with; one its start-up rule gives from meta.json's settings
  // is checked (a what-if with a lower gpu_memory_utilization can be such a pool).
  // The one allocator replayed (replay_run checks), the first replica's with replicas.
  const ReplayPlan& plan = replayed.plan;
  const Allocator& allocator = plan.replicas > 1 ? *plan.replica_allocators.at(0).at(0) : *plan.allocators.at(0);
  const PoolState pool = allocator.pool();
  const std::int64_t max_model_len = plan.options.layout.max_model_len;
  if ((replayed.budget_source.empty() || replayed.startup_pool) && pool.capacity_bytes > 0 && max_model_len > 1) {
    AdmitInfo longest;
    longest.prompt_tokens = 1;
    longest.planned_output_tokens = max_model_len - 1;
    longest.output_tokens = max_model_len - 1;
    const std::int64_t needed = allocator.peak_bytes(longest, max_model_len);
    if (needed > pool.capacity_bytes + pool.unit_bytes) {
      out.push_back(fmt::format("the KV pool replayed ({} bytes{}) cannot hold one sequence of max model len {} ({} "
                                "bytes): vLLM refuses to start such an engine (check_enough_kv_cache_memory), so no "
                                "run can show this setting",
                                with_commas(pool.capacity_bytes), plan.replicas > 1 ? " an engine" : "", max_model_len,
                                with_commas(needed)));
    }
  }
  // A pool from the start-up rule, on a replay that fills it: every figure follows the pool's
  // size, which the rule gives only to a few percent (docs/fidelity.md: 3.4% more blocks than
  // vLLM allocated on the RTX 4090 run, the activation peak and non-torch memory being
  // estimates), where a run that records kv_cache.num_gpu_blocks gives it exactly.
  if (replayed.startup_pool && (replayed.report.preemptions > 0 || replayed.report.memory_bound_ns > 0)) {
    const std::int64_t preemptions = replayed.report.preemptions;
    out.push_back(fmt::format("the KV pool ({} bytes{}) comes from vLLM's start-up rule, as meta.json records no "
                              "kv_cache, and the replay fills it ({}): the figures follow its size, which the rule "
                              "estimates to a few percent; give --kv-budget with the pool vLLM logged (\"# GPU "
                              "blocks\" x block size x bytes per token) if the run's log has it",
                              with_commas(pool.capacity_bytes), plan.replicas > 1 ? " an engine" : "",
                              preemptions > 0 ? fmt::format("{} preemption{}", with_commas(preemptions),
                                                            preemptions == 1 ? "" : "s")
                                              : std::string("requests waited for room")));
  }
  if (r.completed < r.requests) {
    const std::int64_t too_long = replayed.report.rejected_too_long;
    out.push_back(fmt::format("{} of {} requests did not complete in the simulation{}: the figures are over the rest "
                              "only",
                              r.requests - r.completed, r.requests,
                              too_long > 0 ? fmt::format(" ({} refused: a prompt not shorter than max model len {})",
                                                         too_long, replayed.plan.options.layout.max_model_len)
                                           : std::string()));
  }
  return out;
}

std::string table(const MeasuredRun& run, const ReplayPlan& plan, const std::string& budget_source, const ReplayReport& report,
                  const Result& r, const std::vector<std::string>& warnings) {
  std::string out = fmt::format("validation of {} ({}, vLLM {})\n", run.dir, run.model, vllm_version_text(run));
  out += fmt::format("workload {}: {} requests, {} completed in the simulation, {} preemptions\n", plan.trace_path,
                     r.requests, r.completed, r.preemptions);
  out += fmt::format("kvsim: model {} (tp {}{}), {}, cost {}\n", plan.choice.model.name, plan.choice.kv.tensor_parallel,
                     plan.replicas > 1 ? fmt::format(", {} data-parallel replicas", plan.replicas) : std::string(),
                     report.allocator, report.cost_model);
  out += fmt::format("       max running {}, max batched tokens {}{}, policy {}{}{}\n", plan.options.max_running,
                     plan.options.max_batched_tokens, plan.options.chunked_prefill ? "" : " (no chunked prefill)",
                     report.policy, plan.options.async_scheduling ? ", asynchronous scheduling" : "",
                     plan.options.cuda_graph_max_tokens > 0
                         ? fmt::format(", CUDA graphs up to {} tokens", cuda_graph_largest(plan.options.cuda_graph_max_tokens))
                         : std::string());
  out += fmt::format("       KV budget per device {}, max model len {}\n", budget_text(plan, budget_source),
                     plan.options.layout.max_model_len);
  if (report.capped_at_max_model_len > 0) {
    out += fmt::format("       {} requests longer than max model len served up to it, as vLLM ends them "
                       "(FINISHED_LENGTH_CAPPED)\n", report.capped_at_max_model_len);
  }
  if (!run.unmodelled_settings.empty()) {
    out += fmt::format("       not modelled (meta.json engine_kwargs, or the resolved_config named): {}\n",
                       fmt::join(run.unmodelled_settings, ", "));
  }
  if (!run.unread_fields.empty()) {
    out += fmt::format("       not read (meta.json's top level, where the recorder writes no setting; engine_kwargs, "
                       "kv_cache and resolved_config hold vLLM's): {}\n",
                       fmt::join(run.unread_fields, ", "));
  }
  if (!run.unread_request_fields.empty()) {
    out += fmt::format("       not read (requests.jsonl, beside the recorder's eight fields): {}\n",
                       fmt::join(run.unread_request_fields, ", "));
  }
  out += "\n";
  out += fmt::format("{:<24} {:>12} {:>12} {:>9}\n", "Metric", "measured", "kvsim", "Diff%");
  out += std::string(59, '-') + "\n";
  const auto block = [&](const char* name, const Comparison& c) {
    const std::pair<const char*, double Distribution::*> rows[] = {{"Mean", &Distribution::mean},
                                                                  {"Median", &Distribution::p50},
                                                                  {"P90", &Distribution::p90},
                                                                  {"P95", &Distribution::p95},
                                                                  {"P99", &Distribution::p99}};
    for (const auto& [label, field] : rows) {
      if (c.measured.count == 0 || c.simulated.count == 0) {  // e.g. TPOT with one-token outputs only
        const auto cell = [](const Distribution& d, double v) {
          return d.count > 0 ? fmt::format("{:.1f}", v * 1e3) : std::string("n/a");
        };
        out += fmt::format("{:<24} {:>12} {:>12} {:>9}\n", fmt::format("{} {} (ms)", name, label),
                           cell(c.measured, c.measured.*field), cell(c.simulated, c.simulated.*field), "n/a");
        continue;
      }
      const double m = c.measured.*field * 1e3, s = c.simulated.*field * 1e3;
      out += fmt::format("{:<24} {:>12.1f} {:>12.1f} {}\n", fmt::format("{} {} (ms)", name, label), m, s,
                         diff_cell(diff_percent(m, s)));
    }
    out += "\n";
  };
  block("TTFT", r.ttft);
  block("TPOT", r.tpot);
  block("Latency", r.latency);
  if (r.simulated_makespan_known) {
    out += fmt::format("{:<24} {:>12.2f} {:>12.2f} {}\n", "Makespan (s)", r.measured_makespan_s,
                       r.simulated_makespan_s, diff_cell(diff_percent(r.measured_makespan_s, r.simulated_makespan_s)));
  } else {  // nothing the measured makespan spans completed: no span to compare
    out += fmt::format("{:<24} {:>12.2f} {:>12} {:>9}\n", "Makespan (s)", r.measured_makespan_s, "n/a", "n/a");
  }
  if (run.preemptions_recorded) {
    out += fmt::format("{:<24} {:>12} {:>12}\n", "Preemptions", run.preemptions, r.preemptions);
  }
  if (r.ticks > 0) {
    out += fmt::format("running, MAE per tick     {:.2f} requests over {} ticks\n", r.running_mae, r.ticks);
    out += fmt::format("waiting, MAE per tick     {:.2f} requests\n", r.waiting_mae);
  } else {
    out += "running, waiting MAE      n/a: no tick of timeseries.csv falls inside the run\n";
  }
  out += r.kv_recorded ? fmt::format("KV usage, MAE per tick    {:.2f} percentage points\n", r.kv_mae_percent)
                       : std::string("KV usage                  not recorded in this run\n");
  if (run.untimed_requests > 0) {
    out += fmt::format("NOTE: {} of {} requests carry no timestamps in requests.jsonl (vLLM returned no metrics): "
                       "replayed, but the latencies and the makespan above are over the other {}\n",
                       run.untimed_requests, r.requests, timed_requests(run));
  }
  for (const std::string& w : warnings) out += "WARNING: " + w + "\n";
  return out;
}

std::string json_of(const MeasuredRun& run, const ReplayPlan& plan, const std::string& budget_source,
                    const ReplayReport& report, const Result& r, const std::vector<std::string>& warnings) {
  using Json = nlohmann::ordered_json;
  // No samples: null figures, never 0.
  const auto dist = [](const Distribution& d) {
    const auto v = [&](double x) { return d.count > 0 ? Json(x) : Json(nullptr); };
    return Json{{"count", d.count}, {"mean_s", v(d.mean)}, {"p50_s", v(d.p50)},
                {"p90_s", v(d.p90)},   {"p95_s", v(d.p95)},   {"p99_s", v(d.p99)}};
  };
  const auto cmp = [&](const Comparison& c) {
    if (c.measured.count == 0 || c.simulated.count == 0) {
      return Json{{"measured", dist(c.measured)}, {"simulated", dist(c.simulated)}, {"diff_percent", nullptr}};
    }
    return Json{{"measured", dist(c.measured)},
                {"simulated", dist(c.simulated)},
                {"diff_percent", Json{{"mean", diff_json(diff_percent(c.measured.mean, c.simulated.mean))},
                                      {"p50", diff_json(diff_percent(c.measured.p50, c.simulated.p50))},
                                      {"p90", diff_json(diff_percent(c.measured.p90, c.simulated.p90))},
                                      {"p95", diff_json(diff_percent(c.measured.p95, c.simulated.p95))},
                                      {"p99", diff_json(diff_percent(c.measured.p99, c.simulated.p99))}}}};
  };
  Json j{{"run", run.dir},
         {"model", run.model},
         {"vllm_version", run.vllm_version.empty() ? Json(nullptr) : Json(run.vllm_version)},
         {"workload", plan.trace_path},
         {"kvsim", Json{{"model", plan.choice.model.name},
                        {"tensor_parallel", plan.choice.kv.tensor_parallel},
                        {"replicas", plan.replicas},
                        {"allocator", report.allocator},
                        {"cost_model", report.cost_model},
                        {"max_running", plan.options.max_running},
                        {"max_batched_tokens", plan.options.max_batched_tokens},
                        {"chunked_prefill", plan.options.chunked_prefill},
                        {"async_scheduling", plan.options.async_scheduling},
                        {"cuda_graph_max_tokens", cuda_graph_largest(plan.options.cuda_graph_max_tokens)},
                        {"policy", report.policy},
                        {"kv_budget_bytes", plan.budget ? Json(plan.budget->kv_budget_bytes) : Json(nullptr)},
                        {"kv_budget", budget_text(plan, budget_source)},
                        {"max_model_len", plan.options.layout.max_model_len},
                        {"capped_at_max_model_len", report.capped_at_max_model_len}}},
         {"unmodelled_settings", run.unmodelled_settings},
         {"unread_fields", run.unread_fields},
         {"unread_request_fields", run.unread_request_fields},
         {"requests", r.requests},
         {"completed", r.completed},
         {"untimed_requests", run.untimed_requests},
         {"preemptions", r.preemptions},
         {"preemptions_measured", run.preemptions_recorded ? Json(run.preemptions) : Json(nullptr)},
         {"ttft", cmp(r.ttft)},
         {"tpot", cmp(r.tpot)},
         {"latency", cmp(r.latency)},
         {"makespan_s",
          Json{{"measured", r.measured_makespan_s},
               {"simulated", r.simulated_makespan_known ? Json(r.simulated_makespan_s) : Json(nullptr)},
               {"diff_percent", r.simulated_makespan_known
                                    ? diff_json(diff_percent(r.measured_makespan_s, r.simulated_makespan_s))
                                    : Json(nullptr)}}},
         {"ticks", r.ticks},
         {"running_mae", r.ticks > 0 ? Json(r.running_mae) : Json(nullptr)},
         {"waiting_mae", r.ticks > 0 ? Json(r.waiting_mae) : Json(nullptr)},
         {"kv_usage_mae_percent", r.kv_recorded ? Json(r.kv_mae_percent) : Json(nullptr)},
         {"warnings", warnings}};
  return json_text(j);
}

// --per-tick: one CSV row a tick of timeseries.csv, measured beside simulated (the replicas
// summed), KV usage empty where the run did not record it.
std::string per_tick_csv(const Result& r) {
  std::string out =
      "t_s,measured_running,simulated_running,measured_waiting,simulated_waiting,measured_kv_usage_percent,"
      "simulated_kv_usage_percent\n";
  for (const TickRow& t : r.per_tick) {
    out += fmt::format("{},{},{},{},{},", t.t_s, t.measured_running, t.simulated_running, t.measured_waiting,
                       t.simulated_waiting);
    out += r.kv_recorded ? fmt::format("{},{}\n", t.measured_kv_percent, t.simulated_kv_percent) : ",\n";
  }
  return out;
}

// --per-request: replay's rows (so `kvsim report` reads them), each request's id that of
// requests.jsonl, then its engine, when that engine took it in, and its TTFT, TPOT and
// latency measured beside simulated, both as the table counts them. An empty cell for what
// did not happen: no timestamps in the run, not completed in the simulation, or a TPOT of
// fewer than two tokens.
std::string per_request_csv(const MeasuredRun& run, const std::string& allocator, std::vector<RequestRecord>& records,
                            const std::vector<std::uint32_t>& replica_of, const Result& r) {
  std::string out = per_request_header();
  out.pop_back();
  out +=
      ",replica,queued_s,measured_ttft_s,simulated_ttft_s,measured_tpot_s,simulated_tpot_s,measured_latency_s,"
      "simulated_latency_s\n";
  // A request's TTFT, TPOT and latency cells.
  const auto cells = [](const std::optional<RequestLatency>& l) {
    const auto text = [](std::optional<double> v) { return v ? fmt::format("{:.9f}", *v) : std::string(); };
    return l ? std::array<std::string, 3>{text(l->ttft), text(l->tpot), text(l->latency)} : std::array<std::string, 3>{};
  };
  for (std::size_t i = 0; i < records.size(); ++i) {
    const MeasuredRequest& m = run.requests[i];
    records[i].id = m.id;
    std::string row = per_request_row(allocator, records[i]);
    row.pop_back();
    std::optional<RequestLatency> measured;
    if (m.timed) measured = request_latency(m.queued_s, m.first_token_s, m.last_token_s, m.output_tokens);
    const auto mc = cells(measured), sc = cells(r.simulated_each[i]);
    out += row + fmt::format(",{},{},{},{},{},{},{},{}\n", replica_of.empty() ? 0 : replica_of[i],
                             format_seconds(r.taken_in_ns[i], 9), mc[0], sc[0], mc[1], sc[1], mc[2], sc[2]);
  }
  return out;
}

}  // namespace

int run_validate(const Invocation& inv) {
  // replay's options but its outputs: validate prints its own comparison.
  po::options_description options = replay_option_descriptions(false, true, kMeasuredRunAllocatorHelp, false);
  po::options_description own("Validation");
  own.add_options()(
      option_key(kOptWorkload), po::value<std::string>(),
      "the run's workload (default: meta.json's dataset_path, relative to the folder above the run)")(
      "json", "print the comparison as JSON instead of the table")(
      "per-request", po::value<std::string>(),
      "write this CSV file: one row a request, replay --per-request's columns with requests.jsonl's id, then "
      "its replica, when it was taken in (queued_s) and its TTFT, TPOT and latency measured beside simulated, as "
      "the table counts them")(
      "per-tick", po::value<std::string>(),
      "write this CSV file: one row a tick of timeseries.csv, its running and waiting counts (and KV usage, "
      "where recorded) measured beside simulated, the replicas summed");
  options.add(own);
  po::variables_map vm;
  const auto dir = parse_run_command(inv, kSpec, options, vm);
  if (!dir) return kExitOk;
  MeasuredRun run = read_measured_run(*dir, option_text(vm, option_key(kOptWorkload)), true);
  // The version replayed, which the header names: the user's, over the run's.
  if (const auto version = option_text(vm, option_key(kOptVllmVersion))) run.vllm_version = *version;
  // Written as every output is (include/kvsim/output_file.h): never over the run's files or
  // its workload, never two to one file, and an output given as '-' takes standard output in
  // place of the table (as in kvsim replay), not in place of --json.
  const std::vector<std::string> inputs = measured_run_inputs(run);
  std::vector<std::pair<std::string, std::string>> outputs;
  for (const char* name : {"per-request", "per-tick"}) {
    if (const auto path = option_text(vm, name)) outputs.emplace_back(std::string("--") + name, *path);
  }
  refuse_output_over_input(outputs, inputs, kSpec.synopsis);
  const bool table_on_stdout = table_keeps_stdout(outputs, vm.count("json") != 0, kSpec.synopsis);
  // Both files opened before the replay (a path that cannot be written fails at once), and
  // committed together once both are written.
  std::optional<OutputFile> per_request_file, per_tick_file;
  if (const auto path = option_text(vm, "per-request")) per_request_file.emplace(*path, inputs);
  if (const auto path = option_text(vm, "per-tick")) per_tick_file.emplace(*path, inputs);
  std::vector<std::vector<Step>> steps;  // per engine
  RunReplay r = replay_run(vm, run, kSpec.synopsis, [&](const TimelineRow& row) {
    if (row.idle) return;  // no step, so no report
    const auto replica = static_cast<std::size_t>(row.replica);
    if (replica >= steps.size()) steps.resize(replica + 1);
    steps[replica].push_back({row.time_ns, row.duration_ns, row.running, row.queued_seen, row.allocated_bytes});
  });
  const ReplayPlan& plan = r.plan;
  // An engine that never stepped has no steps.
  steps.resize(std::max<std::size_t>(steps.size(), plan.replicas > 1 ? static_cast<std::size_t>(plan.replicas) : 1));
  const std::vector<EngineState> states =
      engine_states(steps, r.records, r.replica_of, plan.options.async_scheduling);
  const Result result = compare(run, r.report, r.records, r.replica_of, r.wall_offset_s, states);
  write_each(std::initializer_list<OutputFill>{
      {per_request_file ? &*per_request_file : nullptr,
       [&](OutputFile& out) { out.write(per_request_csv(run, r.report.allocator, r.records, r.replica_of, result)); }},
      {per_tick_file ? &*per_tick_file : nullptr, [&](OutputFile& out) { out.write(per_tick_csv(result)); }}});
  const std::vector<std::string> warnings = warnings_of(r, result);
  for (const std::string& w : warnings) fmt::print(stderr, "kvsim validate: warning: {}\n", w);
  if (plan.json) {
    write_stdout(json_of(run, plan, r.budget_source, r.report, result, warnings));
  } else if (table_on_stdout) {
    write_stdout(table(run, plan, r.budget_source, r.report, result, warnings));
  }
  return kExitOk;
}

}  // namespace kvsim::cli
