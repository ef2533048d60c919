// Data-parallel replicas (`kvsim replay --replicas N`): N copies of the engine, each with its
// own KV pool (allocator) and scheduler, fed by one router that sends every request where
// vLLM's data-parallel load balancer would.
//
// The router is vLLM's DPLBAsyncMPClient.get_core_engine_for_request (vllm/v1/engine/
// core_client.py) with one API-server client; the request goes to the first replica with the
// lowest score, scanned from a start index. Two versions of it (ReplayOptions::dp_router):
//   queue_score, vLLM 0.19's (and until July 2026): score = 4 x waiting + running, scanned from
//     replica 0. Only an MoE model's engines publish their counts (DPEngineCoreProc's
//     _maybe_publish_request_counts; a dense model's engines, independent since vllm#30739,
//     publish none until vllm#49204), so a dense model's router has only the requests it sent,
//     each counted as waiting: round robin from replica 0.
//   in_flight, vLLM's main since July 2026 (vllm#47420, vllm#49204; read at 00080ee1): scanned
//     from a start index that advances by one after every request,
//       score = max(requests in flight there, waiting + running)
//               + waiting x 6 x max(0, KV usage - 0.5).
// vLLM reads waiting, running and KV usage from its coordinator's snapshot (published every
// 100 ms) and counts the requests it sent since as waiting (or keeps the in-flight count
// itself); kvsim reads all of them from the replica at the instant the request arrives (the
// state after the replica's last step began, the requests routed since waiting).
//
// For a mixture-of-experts model (ReplayOptions::replicas_step_together) the replicas take
// every step together, and a step lasts as long as the slowest replica's: vLLM aligns the
// forward passes of an MoE model's data-parallel ranks, whose expert layers exchange tokens
// in every pass (docs/serving/data_parallel_deployment.md; vllm/v1/worker/dp_utils.py
// coordinate_batch_across_dp all-reduces the ranks' token counts each step and pads every
// rank to the largest), and runs a dummy pass on a rank with nothing scheduled. Dense models'
// replicas step independently. Docs: docs/replay.md, "Data-parallel replicas".
#ifndef KVSIM_REPLICAS_H_
#define KVSIM_REPLICAS_H_

#include <cstdint>
#include <vector>

#include "kvsim/allocator.h"
#include "kvsim/replay.h"
#include "kvsim/trace.h"

namespace kvsim {

// The most replicas a replay simulates (each is a whole engine, simulated step by step):
// `kvsim replay --replicas`, and a measured run's data_parallel_size.
inline constexpr std::int64_t kMaxReplicas = 1024;

struct ReplicaRun {
  std::vector<ReplayReport> replicas;  // rank order
  std::vector<std::int64_t> routed;    // requests routed to each replica
  std::vector<std::uint32_t> replica_of;  // by trace position (ordinal - 1): where it was routed
  // The replicas together: counts and tokens summed; start the first arrival, end the last
  // release; latencies over every request; queue and throughput over the combined span;
  // occupancy figures are per replica only (left zero here).
  ReplayReport total;
};

// Replays `trace` through one engine per allocator (allocators.size() replicas, at least 1),
// each with `options` (a simulated schedule; the measured one cannot be split). Throws
// InputError when the options ask for a measured schedule. options.timeline, when set,
// receives every engine's rows, each tagged with its replica; options.per_request receives
// every engine's records, each with its ordinal in `trace` (not in the replica's share).
ReplicaRun replay_replicas(TraceReader& trace, const std::vector<Allocator*>& allocators, const ReplayOptions& options);

// The tokens each of the replicas that step together runs in a step, given what each
// schedules (`scheduled`, 0 for one with nothing to run) and the largest CUDA graph
// (`graph_max`, 0 for none; ReplayOptions::cuda_graph_max_tokens). A replica with nothing
// scheduled runs vLLM's dummy batch of one token (vllm/v1/worker/gpu_worker.py
// execute_dummy_batch: _dummy_run(1)). With CUDA graphs each replica pads its own step to
// its captured size (cuda_graph_tokens); when every replica's step fits a graph, all then pad
// to the largest of those, and when one does not, none runs a graph and each keeps its own
// padded count (vllm/v1/worker/dp_utils.py _synchronize_dp_ranks: the ranks take the smallest
// CUDA graph mode, and pad to the largest count unless it is NONE, else each keeps the count
// it sent). Every token, padding included, reaches the MoE layers' experts and the gathers.
std::vector<std::int64_t> replica_tokens(const std::vector<std::int64_t>& scheduled, std::int64_t graph_max);

}  // namespace kvsim

#endif  // KVSIM_REPLICAS_H_
