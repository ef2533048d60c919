// A measured run (kvsim/measured_run.h) replayed as kvsim validate replays it: the run's
// engine settings from meta.json (model, parallelism, max_num_seqs, max_num_batched_tokens,
// max_model_len, block size, prefix caching, asynchronous scheduling from vLLM 0.19) and its
// KV pool (what meta.json records vLLM allocated, else vLLM's start-up rule on the run's GPU,
// less the null block) become the defaults of replay's options; whatever the user gives wins.
// kvsim validate compares the replay with the run; kvsim calibrate replays the run with its
// fit to learn what the timeseries does not show: the prompt tokens the prefix cache served
// and the positions preemptions made the engine compute again.
#ifndef KVSIM_SRC_CLI_RUN_REPLAY_H_
#define KVSIM_SRC_CLI_RUN_REPLAY_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvsim/error.h"
#include "kvsim/measured_run.h"
#include "kvsim/replay.h"
#include "replay_plan.h"

namespace kvsim::cli {

// validate's and calibrate's --allocator: one, by default meta.json's.
inline constexpr std::string_view kMeasuredRunAllocatorHelp =
    "the one allocator to replay the run with: KIND[:key=value,...] (default: paged with meta.json's block size, and "
    "prefix-caching=on unless it records caching off; the kinds: 'kvsim replay --help')";

// Parses validate's or calibrate's command line: `options` and one positional argument, the
// run's folder, which it returns; std::nullopt when --help was printed (the caller returns
// 0). Throws UsageError when the folder is missing, and when `vm` selects or rescales the
// workload (--time-window, --requests, --rate-scale): a measured run is replayed whole.
std::optional<std::string> parse_run_command(const Invocation& inv, const CommandSpec& spec,
                                             po::options_description& options, po::variables_map& vm);

// A run meta.json describes well, with a model or a GPU kvsim has no preset for: replayed
// only with options that supply it (--model, --config, --device, ...). kvsim calibrate fits
// such a run from its ticks alone and says why; every other InputError is the run's fault.
class NoPresetError : public InputError {
 public:
  using InputError::InputError;
};

// meta.json's settings as defaults of the replay options in `vm`. Returns where the KV pool
// comes from ("" when the user's options size it: --kv-budget, or replay's rule with
// --reserve or --params). `usage` ends usage errors. Throws NoPresetError for a model or a
// GPU without a preset, InputError for anything else meta.json gets wrong.
std::string apply_run_settings(po::variables_map& vm, const MeasuredRun& run, const std::string& usage);

// The files validate and calibrate read of `run` (its folder's and its workload), which no
// output of theirs may write.
std::vector<std::string> measured_run_inputs(const MeasuredRun& run);

// The run's vLLM version as validate's and calibrate's headers give it: meta.json's, or
// "version not recorded".
std::string vllm_version_text(const MeasuredRun& run);

// The largest step `run`'s engine ran as a CUDA graph (kvsim/cost_model.h
// cuda_graph_max_tokens), as validate replays it: vLLM 0.19 and later, unless enforce_eager or
// `vm` gives --cuda-graphs off (on, given, also for older versions); 0 for none.
std::int64_t run_cuda_graph_max_tokens(const MeasuredRun& run, const po::variables_map& vm);

struct RunReplay {
  ReplayPlan plan;
  std::string budget_source;              // apply_run_settings' answer
  bool startup_pool = false;              // the pool is vLLM's start-up rule's, not one the run recorded
  ReplayReport report;                    // all replicas' together
  std::vector<RequestRecord> records;     // one per request, in trace order
  std::vector<std::uint32_t> replica_of;  // the replica each request went to; empty: one engine
  // The workload's clock against the wall clock, seconds: the mean over the timed requests of
  // requests.jsonl's arrival_time less the workload's arrival. A replay instant w (s on the
  // workload's clock) is timeseries.csv's t = w + wall_offset_s - run.started_at_s.
  double wall_offset_s = 0;
  // What the replay could not take from the run as it was (validate prints them).
  std::vector<std::string> warnings;
};

// Replays `run`'s workload with `vm` (replay's options, parsed) and the run's settings as
// their defaults; `timeline`, when set, gets every engine's every step. An InputError when the
// workload has another number of requests than the run.
RunReplay replay_run(po::variables_map vm, const MeasuredRun& run, const std::string& usage,
                     const std::function<void(const TimelineRow&)>& timeline = {});

}  // namespace kvsim::cli

#endif  // KVSIM_SRC_CLI_RUN_REPLAY_H_
