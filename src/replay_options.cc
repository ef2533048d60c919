// Defaults for ReplayOptions that depend on other fields, shared by the library and the CLI.
#include <algorithm>

#include "kvsim/replay.h"

namespace kvsim {

void apply_vllm_scheduler_defaults(ReplayOptions& options) {
  if (options.memory.kv_budget_bytes <= 0) return;
  if (options.max_running == 0) options.max_running = kVllmMaxNumSeqs;
  if (options.max_batched_tokens == 0) {
    options.max_batched_tokens =
        options.chunked_prefill ? kVllmMaxNumBatchedTokens
                                : std::max(options.layout.max_model_len, kVllmMinNumBatchedTokensUnchunked);
  }
}

}  // namespace kvsim
