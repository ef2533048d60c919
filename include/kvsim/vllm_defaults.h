// vLLM's scheduler defaults, the figures kvsim follows when it models a served engine.
//
// One place for them: the replay engine's defaults under a memory budget
// (apply_vllm_scheduler_defaults in kvsim/replay.h, which `kvsim replay` calls) and the paged
// pool's sliding-window bound (PagedOptions in kvsim/budget.h, which `kvsim size` uses) both
// read these. Where they come from (vLLM v1; docs/replay.md and docs/size.md cite them):
#ifndef KVSIM_VLLM_DEFAULTS_H_
#define KVSIM_VLLM_DEFAULTS_H_

#include <cstdint>

namespace kvsim {

// max_num_seqs: requests running at once (EngineArgs' default for `vllm serve`, 256).
inline constexpr std::int64_t kVllmMaxNumSeqs = 256;

// max_num_batched_tokens with chunked prefill: tokens per step, decodes included
// (`vllm serve`'s default on large GPUs, vllm/engine/arg_utils.py).
inline constexpr std::int64_t kVllmMaxNumBatchedTokens = 8192;

// Without chunked prefill vLLM's SchedulerConfig makes the step budget
// max(max_model_len, 2048), so that any prompt the model accepts fits one step.
inline constexpr std::int64_t kVllmMinNumBatchedTokensUnchunked = 2048;

}  // namespace kvsim

#endif  // KVSIM_VLLM_DEFAULTS_H_
