// Defaults for ReplayOptions that depend on other fields, shared by the library and the CLI.
#include <algorithm>
#include <string>

#include "kvsim/error.h"
#include "kvsim/option_names.h"
#include "kvsim/replay.h"

namespace kvsim {

void apply_vllm_scheduler_defaults(ReplayOptions& options) {
  if (options.memory.kv_budget_bytes <= 0) return;
  if (options.max_batched_tokens == 0) {
    options.max_batched_tokens =
        options.chunked_prefill ? kVllmMaxNumBatchedTokens
                                : std::max(options.layout.max_model_len, kVllmMinNumBatchedTokensUnchunked);
  }
  // vllm/engine/arg_utils.py _set_default_args: an unset max_num_seqs is the default, but
  // no more than max_num_batched_tokens (SchedulerConfig refuses more).
  if (options.max_running == 0) options.max_running = std::min(kVllmMaxNumSeqs, options.max_batched_tokens);
}

void check_scheduler_limits(const ReplayOptions& options) {
  if (options.max_batched_tokens > 0 && options.max_running > options.max_batched_tokens) {
    throw InputError(Location{"", 0, kOptMaxBatchedTokens},
                     "must be at least " + std::string(kOptMaxRunning) + " (" + std::to_string(options.max_running) +
                         "): every running sequence takes a token of each step (vLLM refuses it too)");
  }
}

}  // namespace kvsim
