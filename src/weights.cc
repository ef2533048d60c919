// Weights per device, tensor group by tensor group (see kvsim/weights.h).
#include "kvsim/weights.h"

#include <algorithm>
#include <string>

#include "kvsim/error.h"
#include "kvsim/option_names.h"
#include "kvsim/units.h"

namespace kvsim {
namespace {

constexpr std::int64_t kVocabPadding = 64;  // vLLM's DEFAULT_VOCAB_PADDING_SIZE
constexpr std::int64_t kScaleBytes = 2;     // AWQ/GPTQ scales: fp16
constexpr std::int64_t kFp32 = 4;           // fp8/int8 weight scales: float32

std::int64_t mul(std::int64_t a, std::int64_t b) { return checked_mul(a, b, "weight bytes"); }
std::int64_t add(std::int64_t a, std::int64_t b) { return checked_add(a, b, "weight bytes"); }

std::int64_t need(const ModelSpec& m, std::int64_t value, const char* field) {
  if (value <= 0) {
    throw InputError(Location{m.name, 0, "field '" + std::string(field) + "'"},
                     std::string("unknown, so the weights cannot be counted tensor by tensor; pass ") + kOptWeightsBytes);
  }
  return value;
}

// `total` split over `tp` devices, which must divide it (vLLM's divide()).
std::int64_t shard(std::int64_t total, std::int64_t tp, const char* what) {
  if (total % tp != 0) {
    throw InputError(Location{"", 0, kOptTp},
                     std::to_string(tp) + " devices do not divide " + what + " (" + std::to_string(total) + ")");
  }
  return total / tp;
}

// How one kind of linear layer is stored.
struct LinearRule {
  const WeightQuantization* quant = nullptr;  // nullptr: unquantised
  std::int64_t dtype_bytes = 2;
  std::int64_t override_bits = 0;
};

// Bytes of a K (inputs) x N (outputs) matrix on one device.
std::int64_t linear_bytes(std::int64_t k, std::int64_t n, const LinearRule& r) {
  const std::int64_t elements = mul(k, n);
  if (r.override_bits > 0) return ceil_div(mul(elements, r.override_bits), 8);
  if (r.quant == nullptr) return mul(elements, r.dtype_bytes);
  const WeightQuantization& q = *r.quant;
  const std::int64_t packed = ceil_div(mul(elements, q.bits), 8);
  switch (q.method) {
    case WeightQuantMethod::awq:
    case WeightQuantMethod::gptq: {
      // qweight (packed), scales (fp16) and qzeros (packed) per group of g inputs per output:
      // vllm/model_executor/layers/quantization/awq.py and gptq.py create_weights.
      const std::int64_t groups = q.group_size > 0 ? ceil_div(k, q.group_size) : 1;
      return add(add(packed, mul(mul(groups, n), kScaleBytes)), ceil_div(mul(mul(groups, n), q.bits), 8));
    }
    case WeightQuantMethod::fp8:
    case WeightQuantMethod::int8: {
      std::int64_t scales = 0;
      if (q.block_rows > 0) {
        scales = mul(mul(ceil_div(n, q.block_rows), ceil_div(k, q.block_cols)), kFp32);  // weight_scale_inv
      } else if (q.group_size > 0) {
        scales = mul(mul(ceil_div(k, q.group_size), n), kScaleBytes);  // W4A16-style grouped
      } else if (q.per_tensor_scale) {
        scales = kFp32;
      } else {
        scales = mul(n, kFp32);  // one per output channel
      }
      return add(packed, scales);
    }
    case WeightQuantMethod::other:
      return packed;
  }
  return packed;
}

std::string rule_text(const LinearRule& r) {
  if (r.override_bits > 0) return std::to_string(r.override_bits) + "-bit (" + kOptWeightDtype + ")";
  if (r.quant == nullptr) return std::to_string(r.dtype_bytes * 8) + "-bit, unquantised";
  const WeightQuantization& q = *r.quant;
  std::string text = q.method_name + " " + std::to_string(q.bits) + "-bit";
  switch (q.method) {
    case WeightQuantMethod::awq:
    case WeightQuantMethod::gptq:
      text += q.group_size > 0 ? ", group " + std::to_string(q.group_size) : ", per channel";
      text += ": + fp16 scales + packed zeros";
      break;
    case WeightQuantMethod::fp8:
    case WeightQuantMethod::int8:
      if (q.block_rows > 0) {
        text += ", block " + std::to_string(q.block_rows) + "x" + std::to_string(q.block_cols) + ": + fp32 scales";
      } else if (q.group_size > 0) {
        text += ", group " + std::to_string(q.group_size) + ": + 16-bit scales";
      } else {
        text += q.per_tensor_scale ? ": + one fp32 scale per matrix" : ": + fp32 scale per output channel";
      }
      break;
    case WeightQuantMethod::other:
      break;
  }
  return text;
}

// Whether the checkpoint leaves `module` unquantised (modules_to_not_convert / ignore name it,
// alone or as the last part of a dotted path).
bool left_out(const WeightQuantization* q, const std::string& module) {
  if (q == nullptr) return false;
  return std::any_of(q->not_converted.begin(), q->not_converted.end(), [&](const std::string& name) {
    return name == module || (name.size() > module.size() && name.compare(name.size() - module.size(), module.size(), module) == 0 &&
                              name[name.size() - module.size() - 1] == '.');
  });
}

// One group being summed: logical parameters and bytes.
struct Tally {
  std::int64_t parameters = 0;
  std::int64_t bytes = 0;
  void linear(std::int64_t k, std::int64_t n, const LinearRule& r) {
    parameters = add(parameters, mul(k, n));
    bytes = add(bytes, linear_bytes(k, n, r));
  }
  void plain(std::int64_t elements, std::int64_t dtype_bytes) {
    parameters = add(parameters, elements);
    bytes = add(bytes, mul(elements, dtype_bytes));
  }
  void times(std::int64_t n) {
    parameters = mul(parameters, n);
    bytes = mul(bytes, n);
  }
  void plus(const Tally& other) {
    parameters = add(parameters, other.parameters);
    bytes = add(bytes, other.bytes);
  }
};

}  // namespace

std::int64_t padded_vocab(std::int64_t vocab_size) { return ceil_div(vocab_size, kVocabPadding) * kVocabPadding; }

std::vector<DeviceWeights> device_weights(const ModelSpec& m, const KvOptions& kv, const WeightServing& serving) {
  if (serving.override_bits == 0) require_weight_bits_known(m);
  const std::int64_t tp = kv.tensor_parallel;
  const std::int64_t hidden = need(m, m.hidden_size, "hidden_size");
  const std::int64_t vocab = padded_vocab(need(m, m.vocab_size, "vocab_size"));
  const std::int64_t b = serving.dtype_bytes;
  const WeightQuantization* quant = m.quantization ? &*m.quantization : nullptr;
  auto rule_for = [&](const std::string& module) {
    LinearRule r;
    r.dtype_bytes = b;
    r.override_bits = serving.override_bits;
    if (!left_out(quant, module)) r.quant = quant;
    // A quantised checkpoint kvsim cannot size tensor by tensor keeps the old product.
    if (r.quant == nullptr && quant == nullptr && serving.override_bits == 0 && m.weight_bits > 0) {
      r.override_bits = m.weight_bits;
    }
    return r;
  };
  LinearRule unquantised;
  unquantised.dtype_bytes = b;
  unquantised.override_bits = serving.override_bits;

  // One layer's attention on one device.
  Tally attention;
  const LinearRule attn = rule_for("self_attn");
  if (m.mla) {
    const MlaDims& d = *m.mla;
    const std::int64_t heads = shard(m.num_attention_heads, tp, "num_attention_heads");
    const std::int64_t qk = d.qk_nope_head_dim + d.qk_rope_head_dim;
    if (d.q_lora_rank > 0) {
      attention.linear(hidden, d.q_lora_rank, attn);               // q_a_proj (replicated)
      attention.plain(d.q_lora_rank, b);                            // q_a_layernorm
      attention.linear(d.q_lora_rank, mul(heads, qk), attn);       // q_b_proj
    } else {
      attention.linear(hidden, mul(heads, qk), attn);              // q_proj
    }
    attention.linear(hidden, d.kv_lora_rank + d.qk_rope_head_dim, attn);  // kv_a_proj_with_mqa
    attention.plain(d.kv_lora_rank, b);                                   // kv_a_layernorm
    attention.linear(d.kv_lora_rank, mul(heads, d.qk_nope_head_dim + d.v_head_dim), attn);  // kv_b_proj
    attention.linear(mul(heads, d.v_head_dim), hidden, attn);             // o_proj
  } else {
    const std::int64_t q_heads = shard(m.num_attention_heads, tp, "num_attention_heads");
    const std::int64_t kv_heads = kv_heads_per_device(m.num_key_value_heads, m.num_attention_heads, tp);
    const std::int64_t qkv = mul(q_heads + 2 * kv_heads, m.head_dim);
    attention.linear(hidden, qkv, attn);                           // qkv_proj (QKVParallelLinear)
    if (m.attention_bias) attention.plain(qkv, b);                 // q/k/v biases
    attention.linear(mul(q_heads, m.head_dim), hidden, attn);      // o_proj (RowParallelLinear)
  }

  // One layer's dense MLP, and one MoE layer's experts, router and shared experts.
  Tally dense;
  Tally experts;
  const LinearRule mlp = rule_for("mlp");
  const bool has_dense = !m.moe || m.moe->dense_layers > 0;
  if (has_dense) {
    const std::int64_t inter = shard(need(m, m.intermediate_size, "intermediate_size"), tp, "intermediate_size");
    dense.linear(hidden, 2 * inter, mlp);                          // gate_up_proj
    dense.linear(inter, hidden, mlp);                              // down_proj
  }
  if (m.moe) {
    const MoeDims& e = *m.moe;
    const std::int64_t ep = std::max<std::int64_t>(1, serving.expert_parallel_ranks);
    const std::int64_t full = need(m, e.expert_intermediate_size, "moe_intermediate_size");
    const auto expert_tally = [&](std::int64_t width, std::int64_t count) {
      Tally one;
      one.linear(hidden, 2 * width, rule_for("experts"));          // w13 of one expert
      one.linear(width, hidden, rule_for("experts"));              // w2
      one.times(count);
      return one;
    };
    // With expert parallelism FusedMoE does not split an expert by tensor parallelism: each of
    // the ep ranks holds whole experts, routed / ep of them, the first routed % ep ranks one
    // more (vllm/model_executor/layers/fused_moe/config.py FusedMoEParallelConfig.make,
    // layer.py determine_expert_map); this device, rank 0, holds the most. Shared experts sit
    // outside FusedMoE and keep their tensor-parallel slices.
    const auto sliced = [&] { return shard(full, tp, "moe_intermediate_size"); };
    experts = ep > 1 ? expert_tally(full, ceil_div(e.routed_experts, ep)) : expert_tally(sliced(), e.routed_experts);
    if (e.shared_experts > 0) experts.plus(expert_tally(sliced(), e.shared_experts));
    // The router (FusedMoE's gate) is a ReplicatedLinear built without quant_config.
    experts.plain(mul(e.routed_experts, hidden), b);
  }
  const std::int64_t norm_elements = 2 * hidden;  // input and post-attention norms

  std::vector<DeviceWeights> out;
  const auto stages = pipeline_stage_layers(m.num_hidden_layers, kv.pipeline_parallel);
  const std::int64_t dense_until = dense_mlp_layers(m);
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const auto [first, end] = stages[s];
    const bool first_stage = s == 0;
    const bool last_stage = s + 1 == stages.size();
    const std::int64_t layers = end - first;
    const std::int64_t dense_layers = std::max<std::int64_t>(0, std::min(end, dense_until) - first);
    const std::int64_t moe_layers = layers - dense_layers;
    DeviceWeights d;
    d.stage = static_cast<std::int64_t>(s);
    auto push = [&](const std::string& name, Tally t, const std::string& rule) {
      if (t.parameters == 0) return;
      d.groups.push_back({name, t.parameters, t.bytes, rule});
      d.bytes = add(d.bytes, t.bytes);
    };
    const std::int64_t vocab_rows = shard(vocab, tp, "the padded vocabulary");
    if (first_stage) {
      Tally t;
      t.plain(mul(vocab_rows, hidden), b);
      push("embeddings", t, std::to_string(vocab) + " padded rows / " + std::to_string(tp) + " x " +
                                std::to_string(hidden) + ", " + std::to_string(b * 8) + "-bit, unquantised");
    }
    // The LM head shares the embedding matrix only when both sit on this device.
    if (last_stage && !(m.tie_word_embeddings && first_stage)) {
      Tally t;
      LinearRule head = unquantised;
      if (quant != nullptr && quant->lm_head_quantized) head.quant = quant;
      t.linear(hidden, vocab_rows, head);
      push("lm_head", t, rule_text(head) + (m.tie_word_embeddings ? " (tied, but on another stage)" : ""));
    }
    Tally a = attention;
    a.times(layers);
    push("attention", a, rule_text(attn) + (m.attention_bias ? ", + q/k/v biases" : ""));
    Tally dm = dense;
    dm.times(dense_layers);
    push("mlp", dm, rule_text(mlp));
    Tally ex = experts;
    ex.times(moe_layers);
    if (m.moe) push("experts", ex, rule_text(rule_for("experts")) + "; router unquantised");
    Tally n;
    n.plain(mul(norm_elements, layers) + (last_stage ? hidden : 0), b);
    push("norms", n, std::to_string(b * 8) + "-bit, replicated");
    // vLLM's RotaryEmbedding keeps a cos/sin cache of max_position_embeddings x rotary_dim in
    // the model dtype (vllm/model_executor/layers/rotary_embedding.py, one per model: get_rope
    // caches it); a buffer, not a parameter.
    if (m.max_position_embeddings > 0) {
      Tally r;
      r.bytes = mul(mul(m.max_position_embeddings, m.mla ? m.mla->qk_rope_head_dim : m.head_dim), b);
      d.groups.push_back({"rotary cache", 0, r.bytes,
                          std::to_string(m.max_position_embeddings) + " positions x rotary dim, buffer"});
      d.bytes = add(d.bytes, r.bytes);
    }
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace kvsim
