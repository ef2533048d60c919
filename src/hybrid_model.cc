// Hybrid models: the constant per-sequence state of state-space and linear-attention layers
// (Jamba, Zamba2, Nemotron-H, Granite-4.0-H, Qwen3-Next, MiniMax). Only their attention layers hold KV
// (model.cc); the rest hold a state whose size does not depend on the sequence's length.
//
// The shapes are vLLM's MambaStateShapeCalculator
// (vllm/model_executor/layers/mamba/mamba_utils.py):
//   mamba1:          conv (intermediate / tp) x (kernel - 1),  temporal (intermediate / tp) x state_size
//   mamba2:          conv (intermediate + 2 x n_groups' x state_size) / tp x (kernel - 1),
//                    temporal (heads / tp) x head_dim x state_size, where n_groups' is n_groups
//                    rounded up to tp when tp does not divide it (extra_groups_for_head_shards)
//   gated deltanet:  conv (2 x k_heads x k_dim + v_heads x v_dim) / tp x (kernel - 1),
//                    temporal (v_heads / tp) x v_dim x k_dim
//   linear attention (MiniMax's lightning attention): no conv state, temporal
//                    (heads / tp) x head_dim x head_dim
// Both states take mamba_cache_dtype "auto", the model's dtype (MambaStateDtypeCalculator).
#include <string>
#include <utility>

#include "hybrid_model.h"
#include "kvsim/error.h"
#include "kvsim/model.h"
#include "kvsim/option_names.h"
#include "kvsim/units.h"

namespace kvsim {
namespace {

std::int64_t split(std::int64_t whole, std::int64_t tp, const StateDims& state, const char* what) {
  if (whole % tp != 0) {
    throw InputError(Location{"", 0, kOptTp}, "tensor parallelism " + std::to_string(tp) + " does not divide the " +
                                                  std::to_string(whole) + " " + what + " of the " + state.kind +
                                                  " state");
  }
  return whole / tp;
}

}  // namespace

std::pair<std::int64_t, std::int64_t> state_bytes_per_layer(const StateDims& state, const KvOptions& options) {
  const std::int64_t tp = options.tensor_parallel;
  if (tp < 1) throw InputError(Location{"", 0, kOptTp}, "expected at least 1 device, got " + std::to_string(tp));
  std::int64_t groups = state.n_groups;
  if (groups > 0 && groups % tp != 0) groups = tp;  // vLLM: n_groups + (tp - n_groups) when tp does not divide it
  const std::int64_t channels =
      checked_add(state.conv_channels, checked_mul(checked_mul(2, groups, "conv state channels"), state.group_state_size, "conv state channels"),
                  "conv state channels");
  const std::int64_t value_bytes = kv_dtype_info(options.state_dtype).bits / 8;
  const std::int64_t conv = checked_mul(checked_mul(split(channels, tp, state, "conv channels"), state.conv_kernel - 1,
                                                    "conv state values"),
                                        value_bytes, "conv state bytes");
  const std::int64_t temporal = checked_mul(
      checked_mul(split(state.state_heads, tp, state, "state heads"), state.values_per_head, "temporal state values"),
      value_bytes, "temporal state bytes");
  return {conv, temporal};
}

void validate_layer_kinds(const ModelSpec& model, const std::string& file) {
  auto fail = [&](const std::string& field, const std::string& problem) {
    throw InputError(Location{file, 0, "field '" + field + "'"}, problem);
  };
  const auto layers = static_cast<std::size_t>(model.num_hidden_layers);
  if (!model.layer_kinds.empty() && model.layer_kinds.size() != layers) {
    fail("layer_types", "names " + std::to_string(model.layer_kinds.size()) + " layers for num_hidden_layers " +
                            std::to_string(layers));
  }
  if (!model.layer_attention_heads.empty() && model.layer_attention_heads.size() != layers) {
    fail("num_attention_heads", "lists " + std::to_string(model.layer_attention_heads.size()) +
                                    " layers for num_hidden_layers " + std::to_string(layers));
  }
  if (!model.layer_kv_heads.empty() && model.layer_kv_heads.size() != layers) {
    fail("num_key_value_heads", "lists " + std::to_string(model.layer_kv_heads.size()) +
                                    " layers for num_hidden_layers " + std::to_string(layers));
  }
  for (std::size_t i = 0; i < layers && !(model.layer_kv_heads.empty() && model.layer_attention_heads.empty()); ++i) {
    const std::int64_t h = model.layer_kv_heads.empty() ? model.num_key_value_heads : model.layer_kv_heads[i];
    const std::int64_t q = model.layer_attention_heads.empty() ? model.num_attention_heads : model.layer_attention_heads[i];
    if (h <= 0 || q <= 0 || h > q || q % h != 0) {
      fail("num_key_value_heads[" + std::to_string(i) + "]",
           std::to_string(h) + " KV heads do not divide layer " + std::to_string(i) + "'s " + std::to_string(q) +
               " attention heads evenly");
    }
  }
  bool any_state = false;
  for (LayerKind k : model.layer_kinds) any_state = any_state || k == LayerKind::state || k == LayerKind::attention_and_state;
  if (any_state && !model.state) fail("layer_types", "names state-space layers but their state dimensions are missing");
  if (model.state) {
    const StateDims& s = *model.state;
    // Lightning attention has no conv state: 0 channels.
    if (s.conv_channels < 0) fail(s.kind + " conv channels", "expected a non-negative count");
    if (s.conv_kernel < 1) fail(s.kind + " conv kernel", "expected a positive width");
    if (s.state_heads <= 0) fail(s.kind + " state heads", "expected a positive count");
    if (s.values_per_head <= 0) fail(s.kind + " state size", "expected a positive size");
    if (s.n_groups < 0 || (s.n_groups > 0 && s.group_state_size <= 0)) fail(s.kind + " n_groups", "expected a positive count");
  }
}

std::int64_t KvLayout::state_bytes_per_sequence() const {
  return checked_mul(state_layers, checked_add(conv_state_bytes_per_layer, temporal_state_bytes_per_layer, "state bytes"),
                     "state bytes per sequence");
}

}  // namespace kvsim
