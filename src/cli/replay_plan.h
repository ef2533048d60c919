// What `kvsim replay`'s options decide, shared with `kvsim validate`, which replays a
// measured run's workload with the same options (and the run's engine settings as defaults).
#ifndef KVSIM_SRC_CLI_REPLAY_PLAN_H_
#define KVSIM_SRC_CLI_REPLAY_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli.h"
#include "kvsim/allocator.h"
#include "kvsim/budget.h"
#include "kvsim/replay.h"
#include "kvsim/trace.h"
#include "model_options.h"

namespace kvsim::cli {

struct ReportOutput;  // replay_output.h: a registered output file (--csv, ...)

// The device the roofline times steps on when neither a budget's device nor --timing-device
// names one.
inline constexpr char kDefaultTimingDevice[] = "H100-80GB";

// Everything the options decide, checked, before any trace is read.
struct ReplayPlan {
  std::string trace_path;
  ModelChoice choice;
  std::optional<Budget> budget;
  // Demand mode: the KV budget the roofline's timing device would give (--device's), when
  // the model's weights are known; the report warns when a run's peak needs more.
  std::optional<Budget> timing_device_budget;
  ReplayOptions options;      // layout, schedule, cost, limits, memory; no callbacks yet
  TraceOptions trace;
  std::vector<std::unique_ptr<Allocator>> allocators;
  // --replicas N > 1: one allocator (KV pool) per replica for each spec, spec after spec.
  std::int64_t replicas = 1;
  std::vector<std::vector<std::unique_ptr<Allocator>>> replica_allocators;
  std::size_t jobs = 1;
  // The registered outputs asked for (--csv FILE, --timeline FILE, ...), in registry order,
  // with their paths.
  std::vector<std::pair<const ReportOutput*, std::string>> report_files;
  bool json = false;
  bool table_on_stdout = true;  // false when an output file is '-' (standard output)
  bool progress = false;
  // A trace that cannot be read again (a pipe, a FIFO), read once for every allocator and
  // replica; or, for one allocator on one engine, the stream itself, read as the run goes.
  std::shared_ptr<const TraceInMemory> trace_in_memory;
  std::unique_ptr<TraceReader> trace_stream;
};

// One line on where the KV budget comes from: "70.08 GiB (75,243,498,700 bytes) on
// RTX-PRO-6000: total x 0.9 - weights ... - reserve ...", or for a budget given directly
// "... bytes, <direct_source>)".
std::string budget_description(const Budget& b, std::string_view direct_source = "--kv-budget");

// --expert-parallel with --replicas N (vLLM --enable-expert-parallel with
// --data-parallel-size N): the data-parallel ranks an MoE model's routed experts are spread
// over, beyond tensor parallelism (BudgetOptions::expert_parallel_ranks); 1 without. Throws
// InputError for a model without experts or fewer than 2 replicas.
std::int64_t expert_parallel_ranks(const po::variables_map& vm, const ModelChoice& choice);

// The defaults of a vLLM version for the settings replay's options model: for --vllm-version,
// and for kvsim validate, which takes the run's version from meta.json. Read from vLLM
// 0.19's code; a setting whose model follows that code (the CUDA graphs' sizes and padding,
// asynchronous scheduling) is on from 0.19 only, as kvsim does not model earlier releases'.
struct VllmVersionDefaults {
  // from 0.14.0 (vllm#27614: vllm/config/vllm.py, async_scheduling None -> True when nothing
  // incompatible is set; the release's integrators disabled it as "now enabled by default")
  bool async_scheduling = false;
  // from 0.19 (validate: off when meta.json sets enforce_eager). Earlier v1 releases captured
  // graphs by default too, but their capture sizes differ from 0.19's, which kvsim models.
  bool cuda_graphs = false;
  bool no_watermark = false;      // from 0.8, v1's default engine: no watermark through 0.19
  bool reserve_full_isl = false;  // from 0.19: scheduler_reserve_full_isl (vllm#37307)
  // from 0.10: v1's hybrid KV-cache manager gives a model with both full and sliding-window
  // layers a manager per kind (vllm#17996, merged June 2025); before, such a model was served
  // as full attention. A model whose layers all slide had its window manager from v1's start
  // (vllm#14097).
  bool hybrid_kv_cache_manager = false;
};
// `version` is MAJOR.MINOR, then nothing, or ".PATCH", a pre-release ("rc1") or a local
// label ("+cu128"): "0.19", "0.19.0", "0.19.1rc1". nullopt otherwise.
std::optional<VllmVersionDefaults> vllm_version_defaults(const std::string& version);

// Every option `kvsim replay` declares (the trace is the hidden positional "trace").
// Without `with_outputs`, those that shape one replay's output (--json, the registered
// outputs of report_outputs(), --sample-every, --jobs, --quiet) are left out: `kvsim sweep`
// has its own.
// `with_cost`: false for a command that chooses the cost itself (kvsim calibrate replays with
// its fit), which must then set --cost in the variables before plan_replay().
// `one_allocator`: for commands that replay one allocator whose default they choose
// themselves (plan, validate, calibrate), the --allocator help, with no default value.
// `with_selection`: the options that select or rescale part of a trace (--time-window,
// --requests, --rate-scale); a measured run is replayed whole (parse_run_command).
po::options_description replay_option_descriptions(bool with_outputs = true, bool with_cost = true,
                                                   std::string_view one_allocator = {}, bool with_selection = true);

// How much of a replay plan_replay() settles, for the command that calls it.
enum class PlanScope {
  allocators,  // stops before the trace: plan.trace_in_memory, jobs and the outputs stay
               // unset, and the caller reads the trace (kvsim sweep, once for all its points)
  trace,       // opens the trace, reads --json, --jobs and --quiet, and no registered output:
               // the command writes its own files (kvsim validate and calibrate)
  outputs,     // and replay's registered outputs, into plan.report_files (kvsim replay)
};
// Reads the parsed options in the order their errors are reported, builds the allocators and
// opens the trace once, so that every mistake fails before any work.
ReplayPlan plan_replay(const po::variables_map& vm, PlanScope scope = PlanScope::outputs);

// Throws InputError when the user gave --timing-device (`given_timing_device`) and `plan`'s
// cost names every term itself (a linear or constant model): the device would time nothing.
void refuse_idle_timing_device(bool given_timing_device, const ReplayPlan& plan);

// parse_options() for a command whose one positional argument is the trace ("trace" in `vm`,
// required: a UsageError without it): replay, sweep, plan.
bool parse_trace_command(const Invocation& inv, const CommandSpec& spec, po::options_description& options,
                         po::variables_map& vm);

// The trace-reading options the command line gave explicitly.
GivenTraceOptions given_trace_options(const po::variables_map& vm);

// The trace options a run of `allocator` reads with: plan.trace, token ids hashed at the
// block size the allocator shares prompts at.
TraceOptions trace_options_for(const ReplayPlan& plan, const Allocator& allocator);

// How a run gets its trace: a reader with these options (a file opened again, or a trace
// kept in memory).
using TraceOpener = std::function<std::unique_ptr<TraceReader>(const TraceOptions&)>;

// --replicas N: each allocator spec of plan.replica_allocators replayed by N engines behind
// vLLM's router; the reports are the replicas, then their total (ReplayReport::replica;
// run_name() names them "<allocator> [replica k: R routed]" and "<allocator> [N replicas]").
std::vector<ReplayReport> run_replicas(ReplayPlan& plan, const TraceOpener& open);

}  // namespace kvsim::cli

#endif  // KVSIM_SRC_CLI_REPLAY_PLAN_H_
