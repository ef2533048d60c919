// Weights per real pipeline stage: the first stage holds the token embeddings, the last the
// final norm and the LM head, and each its layers as vLLM's get_pp_indices splits them
// (vllm/distributed/utils.py). In vLLM's decoder models (e.g. vllm/model_executor/models/
// llama.py) the first rank builds embed_tokens, the last builds lm_head, and with tied
// embeddings the last rank also builds embed_tokens (is_first_rank or (tie_word_embeddings
// and is_last_rank)), so under pipeline parallelism a tied LM head costs a second copy on the
// last stage. Layers are taken as equal in size (a model whose first layers are dense and the
// rest MoE is split by layer count, not by weight).
#ifndef KVSIM_STAGE_WEIGHTS_H_
#define KVSIM_STAGE_WEIGHTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kvsim/budget.h"
#include "kvsim/model.h"

namespace kvsim {

struct StageWeights {
  std::int64_t first_layer = 0;       // layers [first_layer, end_layer)
  std::int64_t end_layer = 0;
  bool embedding = false;             // holds embed_tokens
  bool lm_head = false;               // holds the final norm and lm_head
  std::int64_t parameters = 0;        // on this stage, all its tensor-parallel ranks together
  std::int64_t bytes_per_device = 0;  // ceil(ceil(parameters x bits / 8) / tensor_parallel)
  std::int64_t kv_budget_bytes = 0;   // usable - bytes_per_device - reserve
};

// The stages' weights and KV budgets for `budget` (a derived one, not --kv-budget). Empty,
// with `why` set, when the split cannot be made: one stage, weights given as bytes
// (no parameter count), or a model without vocab_size and hidden_size. Throws InputError when
// a stage's budget comes out at or below zero, naming the stage and every term.
std::vector<StageWeights> stage_weights(const ModelSpec& model, const KvOptions& kv, const Budget& budget,
                                        std::string& why);

}  // namespace kvsim

#endif  // KVSIM_STAGE_WEIGHTS_H_
