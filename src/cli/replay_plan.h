// What `kvsim replay`'s options decide, shared with `kvsim validate`, which replays a
// measured run's workload with the same options (and the run's engine settings as defaults).
#ifndef KVSIM_SRC_CLI_REPLAY_PLAN_H_
#define KVSIM_SRC_CLI_REPLAY_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "kvsim/allocator.h"
#include "kvsim/budget.h"
#include "kvsim/replay.h"
#include "kvsim/trace.h"
#include "model_options.h"

namespace kvsim::cli {

// Everything the options decide, checked, before any trace is read.
struct ReplayPlan {
  std::string trace_path;
  ModelChoice choice;
  std::optional<Budget> budget;
  ReplayOptions options;      // layout, schedule, cost, limits, memory; no callbacks yet
  TraceOptions trace;
  std::vector<std::unique_ptr<Allocator>> allocators;
  // --replicas N > 1: one allocator (KV pool) per replica for each spec, spec after spec.
  std::int64_t replicas = 1;
  std::vector<std::vector<std::unique_ptr<Allocator>>> replica_allocators;
  std::size_t jobs = 1;
  std::optional<std::string> timeline_path;
  std::optional<std::string> csv_path;
  std::optional<std::string> per_request_path;
  std::optional<std::string> html_path;       // --html
  bool json = false;
  bool progress = false;
  // A trace that cannot be read again (a pipe, a FIFO), read once for every allocator.
  std::shared_ptr<const TraceInMemory> trace_in_memory;
};

// Every option `kvsim replay` declares (the trace is the hidden positional "trace").
po::options_description replay_option_descriptions();

// Reads the parsed options in the order their errors are reported, builds the allocators and
// opens the trace once, so that every mistake fails before any work.
ReplayPlan plan_replay(const po::variables_map& vm);

}  // namespace kvsim::cli

#endif  // KVSIM_SRC_CLI_REPLAY_PLAN_H_
