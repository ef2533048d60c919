#include "kvsim/stage_weights.h"

#include "kvsim/error.h"
#include "kvsim/option_names.h"
#include "kvsim/units.h"

namespace kvsim {

std::vector<StageWeights> stage_weights(const ModelSpec& model, const KvOptions& kv, const Budget& budget,
                                        std::string& why) {
  why.clear();
  if (kv.pipeline_parallel <= 1 || budget.direct) return {};
  if (budget.parameter_count <= 0) {
    why = "weights given in bytes (no parameter count): spread evenly over the stages";
    return {};
  }
  if (model.vocab_size <= 0 || model.hidden_size <= 0) {
    why = "vocab_size or hidden_size unknown: weights spread evenly over the stages";
    return {};
  }
  const std::int64_t embedding = checked_mul(model.vocab_size, model.hidden_size, "embedding parameters");
  const std::int64_t norm = model.hidden_size;
  // What the total counts besides the layers: embed_tokens, lm_head unless tied, the final norm.
  const std::int64_t outside = checked_add(checked_add(embedding, model.tie_word_embeddings ? 0 : embedding, "parameters"),
                                           norm, "parameters");
  const std::int64_t layer_parameters = budget.parameter_count - outside;
  if (layer_parameters <= 0) {
    why = "the parameter count is not above the embeddings and LM head: weights spread evenly over the stages";
    return {};
  }
  const auto stages = pipeline_stage_layers(model.num_hidden_layers, kv.pipeline_parallel);
  __extension__ typedef __int128 Wide;
  std::vector<StageWeights> out;
  std::int64_t layers_counted = 0;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    StageWeights s;
    s.first_layer = stages[i].first;
    s.end_layer = stages[i].second;
    s.embedding = i == 0;
    s.lm_head = i + 1 == stages.size();
    // floor(layer_parameters x layers up to here / L) minus what earlier stages took: the
    // stages add up to layer_parameters exactly.
    const std::int64_t upto = static_cast<std::int64_t>(Wide{layer_parameters} * s.end_layer / model.num_hidden_layers);
    s.parameters = upto - layers_counted;
    layers_counted = upto;
    if (s.embedding) s.parameters = checked_add(s.parameters, embedding, "stage parameters");
    if (s.lm_head) s.parameters = checked_add(checked_add(s.parameters, embedding, "stage parameters"), norm, "stage parameters");
    const std::int64_t bytes = ceil_div(checked_mul(s.parameters, budget.weight_bits, "stage weight bits"), 8);
    s.bytes_per_device = ceil_div(bytes, kv.tensor_parallel);
    s.kv_budget_bytes = budget.usable_bytes - s.bytes_per_device - budget.reserve_bytes;
    if (s.kv_budget_bytes <= 0) {
      throw InputError(Location{"", 0, kOptPp},
                       "pipeline stage " + std::to_string(i) + " (layers " + std::to_string(s.first_layer) + "-" +
                           std::to_string(s.end_layer - 1) + (s.embedding ? ", embeddings" : "") +
                           (s.lm_head ? ", LM head" : "") + ") has no room for KV: usable " +
                           std::to_string(budget.usable_bytes) + " - weights " + std::to_string(s.bytes_per_device) +
                           " - reserve " + std::to_string(budget.reserve_bytes) + " bytes");
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace kvsim
