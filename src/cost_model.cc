#include "kvsim/cost_model.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "decimal.h"

#include <limits>

#include "kvsim/error.h"
#include "kvsim/option_names.h"
#include "kvsim/parse.h"
#include "kvsim/units.h"
#include "kvsim/weights.h"

namespace kvsim {
namespace {

__extension__ typedef __int128 Int128;

constexpr Int128 kPsPerSecond = 1'000'000'000'000;

// "80.3%" from 803 per mille.
std::string format_permille(std::int64_t permille) {
  // Appended piece by piece: GCC 12 at -O3 warns falsely (-Wrestrict) on "." + temporary.
  std::string text = std::to_string(permille / 10);
  if (permille % 10 != 0) {
    text += '.';
    text += std::to_string(permille % 10);
  }
  text += '%';
  return text;
}

std::int64_t tokens_of(const StepWork& w) { return w.prefill_tokens + w.decode_seqs; }

// ceil(numerator / denominator) as int64, for durations in picoseconds.
std::int64_t ceil_ps(Int128 numerator, Int128 denominator) {
  return static_cast<std::int64_t>((numerator + denominator - 1) / denominator);
}

// The activations a token moves through memory per step on one device, in bf16 values
// (docs/replay.md, "Cost models"): what the matmuls read and write besides their weights
// (`matmul_io`, on the matmuls' memory side) and what the element-wise kernels between them
// read and write (`elementwise`), as vLLM's decoder layers run them (Llama's, which Qwen and
// Mistral follow): two residual-add RMSNorms per layer (read the input and the residual,
// write both), rotary embedding of q and k in place, SiLU-and-mul (read gate and up, write
// one), and for an MoE layer the sum of the routed experts' outputs (read each, write one).
// Hidden-sized tensors are whole on every tensor-parallel rank; head- and intermediate-sized
// ones are split over them. Per sampled token: the LM head's input and its share of the
// logits, and the sampler's float32 copy of the logits and its argmax (vLLM's Sampler:
// read 2 + write 4 + read 4 bytes a logit).
struct ActivationTraffic {
  Int128 matmul_io = 0;        // values per token
  Int128 elementwise = 0;      // values per token
  Int128 matmul_io_sample = 0;  // values per sampled token
  Int128 sampler_bytes = 0;    // bytes per sampled token
};

ActivationTraffic activation_traffic(const ModelSpec& m, const RooflineParallel& parallel) {
  const Int128 h = m.hidden_size;
  const std::int64_t tp = std::max<std::int64_t>(1, parallel.tensor_parallel);
  const std::int64_t stages = std::max<std::int64_t>(1, parallel.pipeline_parallel);
  Int128 attention_io = 0;  // projections' inputs and outputs
  Int128 rotary = 0;        // q and k read and written
  if (m.mla) {
    const MlaDims& d = *m.mla;
    const Int128 q = Int128{m.num_attention_heads} * (d.qk_nope_head_dim + d.qk_rope_head_dim);
    const Int128 o = Int128{m.num_attention_heads} * d.v_head_dim;
    attention_io = 2 * h + (q + o) / tp + d.kv_lora_rank + d.qk_rope_head_dim + 2 * Int128{d.q_lora_rank};
    rotary = 2 * (Int128{m.num_attention_heads} * d.qk_rope_head_dim / tp + d.qk_rope_head_dim);
  } else {
    // Per rank: q / tp, and the KV heads as vLLM places them (one whole head, replicated,
    // when there are fewer than ranks).
    const Int128 q = Int128{m.num_attention_heads} * m.head_dim / tp;
    const Int128 kv = Int128{kv_heads_per_device(m.num_key_value_heads, m.num_attention_heads, tp)} * m.head_dim;
    attention_io = 2 * h + 2 * q + 2 * kv;
    rotary = 2 * (q + kv);
  }
  const Int128 norms = 8 * h;
  Int128 dense_io = 0;
  Int128 dense_act = 0;
  if (m.intermediate_size > 0) {
    dense_io = 2 * h + Int128{3} * m.intermediate_size / tp;
    dense_act = Int128{3} * m.intermediate_size / tp;
  }
  const std::int64_t dense_layers = dense_mlp_layers(m);
  Int128 moe_io = 0;
  Int128 moe_elementwise = 0;
  if (m.moe) {
    const MoeDims& e = *m.moe;
    const std::int64_t used = routed_experts_used(e);
    const Int128 experts = Int128{used} + e.shared_experts;
    moe_io = h + e.routed_experts + experts * (2 * h + Int128{3} * e.expert_intermediate_size / tp);
    moe_elementwise = experts * 3 * e.expert_intermediate_size / tp + (Int128{used} + 1) * h;
  }
  const std::int64_t moe_layers = m.num_hidden_layers - dense_layers;
  ActivationTraffic t;
  t.matmul_io = (Int128{dense_layers} * (attention_io + dense_io) + Int128{moe_layers} * (attention_io + moe_io)) / stages;
  // Once a token: the embedding's gather (read and write a row, 2h) and the final
  // residual-add norm (4h), less the 2h the first layer's input norm does not do (it has no
  // residual yet: read and write the row only). Like the rest of the roofline, everything is
  // spread over the pipeline's stages (the LM head's FLOPs and weights too).
  t.elementwise = (Int128{dense_layers} * (norms + rotary + dense_act) +
                   Int128{moe_layers} * (norms + rotary + moe_elementwise) + 4 * h) / stages;
  t.matmul_io_sample = (h + Int128{padded_vocab(m.vocab_size)} / tp) / stages;
  t.sampler_bytes = Int128{10} * m.vocab_size / stages;
  return t;
}

// The routed experts' read in a step: expert_weights_ps times the share of the experts the
// step's tokens (and the other replicas', where they step together) reach, to the nearest ps.
// Out of line, and called only for a model with routed experts: the dense step stays as short
// as it was.
[[gnu::noinline]] Int128 expert_weights_read(const CostModel& c, const StepWork& w) {
  const double share = routed_expert_share(c.routed_experts, c.experts_per_token, expert_tokens(w));
  return Int128{std::llround(static_cast<double>(c.expert_weights_ps) * share)};
}

// vLLM 0.19 runs FlashAttention 2 on NVIDIA devices of compute capability 8.x and 12.x:
// its CUDA platform prefers the FLASH_ATTN backend except on 10.x (FlashInfer first;
// vllm/platforms/cuda.py _get_backend_priorities), and get_flash_attn_version
// (vllm/v1/attention/backends/fa_utils.py) takes FA3 on 9.x, FA4 on 10.x and FA2 otherwise.
// The backend takes a 16-bit KV cache only there (an fp8 cache needs FA3:
// FlashAttentionBackend.supports_kv_cache_dtype), and head sizes up to 256 (flash_api.cpp);
// otherwise vLLM picks another backend, counted by its pairs.
bool runs_flash_attention_2(const DevicePreset& device, const ModelSpec& model, const KvLayout& layout) {
  const std::int64_t major = device.compute_capability / 10;
  if (major != 8 && major != 12) return false;
  if (model.head_dim <= 0 || model.head_dim > 256) return false;
  for (const LayerGroup& g : layout.groups) {
    if (g.bytes_per_layer_position != 2 * g.kv_heads * (g.k_head_dim + g.v_head_dim)) return false;
  }
  return true;
}

// FlashAttention 2's work per KV position a decoding sequence reads in a step whose every
// query has one token, all layers and heads of the model (the caller divides by the devices),
// counted from the kernel vLLM calls (vllm-project/flash-attention,
// csrc/flash_attn/flash_api.cpp mha_varlen_fwd and src/flash_fwd_launch_template.h). A paged
// KV cache always takes the split-KV kernel, whose query tile is kBlockM = 64 rows for every
// head size, computed whole, QK^T and PV over 64 rows whatever rows hold a query; each
// (sequence, query head) gets its own tiles (64 rows a decode: attention_tile_position_ps).
// When every query of the step has one token (max_seqlen_q == 1), no sliding window and more
// query heads than KV heads, the kernel swaps the heads that share a KV head into the rows
// (seqlenq_ngroups_swapped): one tile of roundup(group, 64) rows per KV head instead.
Int128 packed_tile_flops(const ModelSpec& m, std::int64_t tensor_parallel) {
  constexpr std::int64_t kRows = kFlashAttention2TileRows;
  const std::int64_t tp = std::max<std::int64_t>(1, tensor_parallel);
  const Int128 per_row = Int128{2} * (m.head_dim + m.head_dim);  // QK^T and PV, one (row, key)
  const std::int64_t q_per_device = ceil_div(m.num_attention_heads, tp);
  const std::int64_t kv_per_device = kv_heads_per_device(m.num_key_value_heads, m.num_attention_heads, tp);
  const std::int64_t group = kv_per_device > 0 ? q_per_device / kv_per_device : 1;
  std::int64_t windowed = 0;
  for (const std::int64_t w : m.layer_window_tokens) windowed += w > 0 ? 1 : 0;
  const std::int64_t full = m.num_hidden_layers - windowed;
  // Per device, then times the devices of the tensor-parallel group: the caller's division
  // by the replica's devices gives one device's share, as for the useful pairs.
  const Int128 unpacked_layer = Int128{q_per_device} * kRows * per_row;
  const Int128 packed_layer = group > 1 ? Int128{kv_per_device} * ceil_div(group, kRows) * kRows * per_row : unpacked_layer;
  return (packed_layer * full + unpacked_layer * windowed) * tp;
}

// Attention's FLOPs in a step, as time: the prefill chunks' part, and a part per context
// position the decoding sequences read.
struct AttentionFlops {
  Int128 prefill = 0;
  std::int64_t per_position = 0;
};

AttentionFlops attention_flops(const CostModel& c, const StepWork& w) {
  if (c.attention_tile_position_ps == 0) {  // the useful pairs
    return {Int128{c.attention_pair_ps} * w.prefill_pairs, c.attention_pair_ps};
  }
  if (w.longest_chunk > 1) {  // FlashAttention 2, a query of two or more: whole tiles
    return {Int128{c.attention_pair_ps} * w.prefill_tile_pairs, c.attention_tile_position_ps};
  }
  // Every query one token (single-token chunks read s + 1 keys, their pairs): packed.
  return {Int128{c.attention_packed_position_ps} * w.prefill_pairs, c.attention_packed_position_ps};
}

}  // namespace

std::int64_t cuda_graph_max_tokens(std::int64_t max_num_seqs, std::int64_t max_num_batched_tokens) {
  // min(2 x max_num_seqs, 512), capped before the doubling can overflow.
  std::int64_t largest = max_num_seqs > 0 ? 2 * std::min<std::int64_t>(max_num_seqs, 256) : 512;
  if (max_num_batched_tokens > 0) largest = std::min(largest, max_num_batched_tokens);
  return largest;
}

std::int64_t cuda_graph_largest(std::int64_t max_tokens) {
  if (max_tokens >= 256) return 256 + (max_tokens - 256) / 16 * 16;
  if (max_tokens >= 8) return max_tokens / 8 * 8;
  return max_tokens >= 4 ? 4 : max_tokens >= 2 ? 2 : max_tokens >= 1 ? 1 : 0;
}

std::int64_t cuda_graph_tokens(std::int64_t max_tokens, std::int64_t tokens) {
  if (tokens <= 0 || tokens > cuda_graph_largest(max_tokens)) return tokens;  // no graph
  if (tokens <= 4) return tokens <= 1 ? 1 : tokens <= 2 ? 2 : 4;
  if (tokens <= 256) return ceil_div(tokens, std::int64_t{8}) * 8;  // 256 itself is range(256, .., 16)'s
  return 256 + ceil_div(tokens - 256, std::int64_t{16}) * 16;
}

double routed_expert_share(std::int64_t experts, std::int64_t per_token, std::int64_t tokens) {
  if (tokens <= 0 || experts <= 0) return 0;
  if (per_token <= 0 || per_token >= experts) return 1;  // unknown (0): every expert, as compute counts them
  // (1 - k / E)^T by squaring.
  double base = static_cast<double>(experts - per_token) / static_cast<double>(experts);
  double missed = 1;
  for (std::int64_t t = tokens; t > 0; t >>= 1) {
    if ((t & 1) != 0) missed *= base;
    base *= base;
  }
  return 1 - missed;
}

std::int64_t step_time_ps(const CostModel& c, const StepWork& w) {
  Int128 ps = 0;
  if (!c.roofline) {
    ps = Int128{c.base_ps} + Int128{c.prefill_token_ps} * w.prefill_tokens + Int128{c.decode_seq_ps} * w.decode_seqs +
         Int128{c.context_token_ps} * w.context;
    if (c.expert_weights_ps != 0) ps += expert_weights_read(c, w);
  } else {
    // The matmuls and attention run one after the other, each bounded by its own roofline. A
    // CUDA graph's padding tokens run through the matmuls, the element-wise kernels and the
    // collectives as decodes that sample nothing, and through no attention.
    const std::int64_t tokens = tokens_of(w);
    const std::int64_t run = run_tokens(w);
    const Int128 matmul_compute = Int128{c.prefill_token_ps} * w.prefill_tokens +
                                  Int128{c.decode_seq_ps} * (w.decode_seqs + run - tokens) +
                                  Int128{c.sample_token_ps} * w.sampled;
    Int128 matmul_memory =
        Int128{c.weights_ps} + Int128{c.matmul_io_token_ps} * run + Int128{c.matmul_io_sample_ps} * w.sampled;
    if (c.expert_weights_ps != 0) matmul_memory += expert_weights_read(c, w);
    const AttentionFlops a = attention_flops(c, w);
    const Int128 attention_compute = a.prefill + Int128{a.per_position} * w.context;
    const Int128 attention_memory = Int128{c.kv_position_ps} * (Int128{w.context} + w.prefill_context);
    const Int128 elementwise = Int128{c.elementwise_token_ps} * run + Int128{c.elementwise_sample_ps} * w.sampled;
    const Int128 collectives =
        run > 0 ? Int128{c.collective_step_ps} + Int128{c.collective_token_ps} * run +
                         Int128{c.collective_sample_ps} * w.sampled
                   : 0;
    ps = Int128{c.overhead_ps} + std::max(matmul_compute, matmul_memory) + std::max(attention_compute, attention_memory) +
         elementwise + collectives;
  }
  return ps > std::numeric_limits<std::int64_t>::max() ? std::numeric_limits<std::int64_t>::max()
                                                       : static_cast<std::int64_t>(ps);
}

DecodeStepLine decode_step_line(const CostModel& c, StepWork w) {
  check(w.prefill_tokens == 0 && w.prefill_pairs == 0 && w.prefill_context == 0 && w.prefill_tile_pairs == 0 &&
            w.longest_chunk <= 1,
        "cost model: a decode step's line asked for a step with a prompt chunk");
  w.context = 0;
  DecodeStepLine line;
  line.fixed_ps = step_time_ps(c, w);
  // The context's only terms: the linear model's read per position, or the roofline's
  // attention, max(FLOPs x context, bytes x context) = max(FLOPs, bytes) x context.
  line.per_position_ps = c.roofline ? std::max(attention_flops(c, w).per_position, c.kv_position_ps) : c.context_token_ps;
  return line;
}

CostModel roofline_cost_model(const ModelSpec& model, const KvLayout& layout, const DevicePreset& device,
                              const ModelWeights& weights, const RooflineParallel& parallel) {
  check(device.hbm_bytes_per_second > 0 && device.bf16_dense_flops > 0 && device.compute_permille > 0 &&
            device.memory_permille > 0,
        "roofline: device without bandwidth or FLOP/s");
  const Int128 flops = Int128{device.bf16_dense_flops} * device.compute_permille / 1000;
  const Int128 bandwidth = Int128{device.hbm_bytes_per_second} * device.memory_permille / 1000;
  const std::int64_t devices = weights.devices > 0 ? weights.devices : 1;
  const std::int64_t tp = devices;  // FLOPs and KV heads split over every device of the replica

  CostModel c;
  c.roofline = true;
  c.device = std::string(device.name);
  // Matmul parameters per token; without the fields to split them, all parameters (the
  // weights' bytes at their width) and no LM-head or attention terms.
  std::int64_t per_token = 0;
  std::int64_t lm_head = 0;
  Int128 pair_flops = 0;
  if (can_split_parameters(model)) {
    const ParameterSplit split = split_parameters(model);
    per_token = split.per_token;
    lm_head = split.lm_head;
    // QK^T and PV: 2 x (qk width + v width) FLOPs per head per layer for one (query, key) pair.
    const std::int64_t qk = model.mla ? model.mla->qk_nope_head_dim + model.mla->qk_rope_head_dim : model.head_dim;
    const std::int64_t v = model.mla ? model.mla->v_head_dim : model.head_dim;
    pair_flops = Int128{2} * model.num_attention_heads * (qk + v) * model.num_hidden_layers;
    const ActivationTraffic t = activation_traffic(model, parallel);
    c.matmul_io_token_ps = ceil_ps(t.matmul_io * 2 * kPsPerSecond, bandwidth);
    c.matmul_io_sample_ps = ceil_ps(t.matmul_io_sample * 2 * kPsPerSecond, bandwidth);
    c.elementwise_token_ps = ceil_ps(t.elementwise * 2 * kPsPerSecond, bandwidth);
    c.elementwise_sample_ps = ceil_ps(t.sampler_bytes * kPsPerSecond, bandwidth);
  } else {
    per_token = weights.parameter_count > 0
                    ? weights.parameter_count
                    : weights.weights_bytes * 8 / (weights.weight_bits > 0 ? weights.weight_bits : 16);
  }
  c.prefill_token_ps = ceil_ps(Int128{2} * ceil_div(per_token, devices) * kPsPerSecond, flops);
  c.decode_seq_ps = c.prefill_token_ps;
  c.sample_token_ps = ceil_ps(Int128{2} * ceil_div(lm_head, devices) * kPsPerSecond, flops);
  c.attention_pair_ps = ceil_ps(ceil_div(pair_flops, Int128{tp}) * kPsPerSecond, flops);
  if (pair_flops > 0 && !model.mla && runs_flash_attention_2(device, model, layout)) {
    // A tile row against a key is one useful pair's work, so a tile costs as many pairs as rows.
    c.attention_tile_position_ps = kFlashAttention2TileRows * c.attention_pair_ps;
    c.attention_packed_position_ps =
        ceil_ps(ceil_div(packed_tile_flops(model, parallel.tensor_parallel), Int128{tp}) * kPsPerSecond, flops);
  }
  c.weights_ps = ceil_ps(Int128{weights.weights_bytes_per_device - weights.routed_expert_bytes_per_device -
                                weights.embedding_bytes_per_device} *
                             kPsPerSecond,
                         bandwidth);
  if (model.moe) {
    // The experts are the model's whatever is known of their bytes: a linear model may name
    // their read even when the weights were given as bytes.
    c.routed_experts = model.moe->routed_experts;
    c.experts_per_token = routed_experts_used(*model.moe);
    c.expert_weights_ps = ceil_ps(Int128{weights.routed_expert_bytes_per_device} * kPsPerSecond, bandwidth);
  }
  c.kv_position_ps = ceil_ps(Int128{layout.bytes_per_token()} * kPsPerSecond, bandwidth);
  // Collectives over the device's link, activations in bf16 (2 bytes a value).
  const Int128 link = device.link_bytes_per_second;
  const bool collectives = link > 0 && model.hidden_size > 0 && model.vocab_size > 0;
  const std::int64_t latency_ps = device.link_latency_ns * 1000;
  if (collectives && parallel.tensor_parallel > 1) {
    const std::int64_t p = parallel.tensor_parallel;
    const std::int64_t stages = std::max<std::int64_t>(1, parallel.pipeline_parallel);
    const std::int64_t all_reduces = 2 * ceil_div(model.num_hidden_layers, stages) + 1;
    // A ring all-reduce sends 2 (p - 1) / p of the bytes over each device's link, an
    // all-gather (p - 1) / p; the logits' all-gather adds one latency.
    c.collective_step_ps = (all_reduces + 1) * latency_ps;
    c.collective_token_ps =
        ceil_ps(Int128{all_reduces} * 2 * (p - 1) * model.hidden_size * 2 * kPsPerSecond, Int128{p} * link);
    c.collective_sample_ps =
        ceil_ps(Int128{p - 1} * padded_vocab(model.vocab_size) * 2 * kPsPerSecond, Int128{p} * link);
  }
  if (collectives && parallel.moe_replicas > 1 && model.moe) {
    const std::int64_t p = parallel.moe_replicas;
    const std::int64_t ops = 2 * (model.num_hidden_layers - model.moe->dense_layers);  // gather and scatter
    c.replica_collective_step_ps = ops * latency_ps;
    c.replica_collective_token_ps =
        ceil_ps(Int128{ops} * (p - 1) * model.hidden_size * 2 * kPsPerSecond, Int128{p} * link);
  }
  // The linear model's terms, for "--cost linear" and "constant" to start from: the read of
  // the weights but the routed experts as the base, the matmuls per token, the KV read per
  // position, and the routed experts' read as it is (expert_weights_ps).
  c.base_ps = c.weights_ps;
  c.context_token_ps = c.kv_position_ps;
  c.name = "roofline " + c.device + " (per step: matmuls and attention, each the slower of its FLOPs at " +
           format_permille(device.compute_permille) + " of peak and its bytes at " +
           format_permille(device.memory_permille) + " of bandwidth";
  if (c.collective_token_ps > 0 || c.replica_collective_token_ps > 0) {
    c.name += "; collectives over " + std::to_string(device.link_bytes_per_second / 1'000'000'000) + " GB/s links";
  }
  c.name += ")";
  return c;
}

std::int64_t parse_duration_ps(std::string_view text, std::string_view field) {
  static constexpr std::pair<std::string_view, std::int64_t> kUnits[] = {
      {"ps", 1}, {"ns", 1'000}, {"us", 1'000'000}, {"ms", 1'000'000'000}, {"s", 1'000'000'000'000}};
  const Location where{"", 0, std::string(field)};
  for (const auto& [unit, scale] : kUnits) {
    if (text.size() <= unit.size() || text.substr(text.size() - unit.size()) != unit) continue;
    const std::string_view number = text.substr(0, text.size() - unit.size());
    if (!number.empty() && (number.back() < '0' || number.back() > '9') && number.back() != '.') continue;  // "ms" vs "s"
    // Up to 12 fractional digits exactly, then the unit's picoseconds, then back to whole ps.
    std::int64_t fixed = 0;
    const auto status = detail::parse_scaled_decimal(number, 12, fixed);
    if (status != detail::DecimalStatus::ok) {
      throw InputError(where, detail::describe(status, "\"" + std::string(text) + "\""));
    }
    const Int128 ps = Int128{fixed} * scale;
    if (ps % kPsPerSecond != 0) throw InputError(where, "\"" + std::string(text) + "\" is finer than 1 ps");
    if (ps / kPsPerSecond > std::numeric_limits<std::int64_t>::max()) {
      throw InputError(where, "\"" + std::string(text) + "\" is too large");
    }
    return static_cast<std::int64_t>(ps / kPsPerSecond);
  }
  throw InputError(where, "expected a duration with a unit (ps, ns, us, ms, s), got \"" + std::string(text) + "\"");
}

CostModel parse_cost_model(std::string_view text, const CostModel& roofline, std::string_view field) {
  const auto colon = text.find(':');
  const std::string_view kind = text.substr(0, colon);
  const Location where{"", 0, std::string(field)};
  CostModel c;
  if (kind == "roofline") {
    if (colon == std::string_view::npos) return roofline;
    // One parameter: the per-step overhead outside the max (the device comes from its option).
    const std::string_view rest = text.substr(colon + 1);
    const auto items = parse_key_values(rest, field);
    if (items.size() != 1 || items[0].first != "overhead") {
      throw InputError(where, std::string("roofline takes one parameter, overhead=DURATION (the device follows ") +
                                  kOptTimingDevice + " or " + kOptDevice + "), got \"" + std::string(rest) + "\"");
    }
    c = roofline;
    c.overhead_ps = parse_duration_ps(items[0].second, std::string(field) + " overhead");
    c.name = roofline.name + " + " + std::string(items[0].second) + " per step";
    return c;
  }
  if (kind != "constant" && kind != "linear") {
    throw InputError(where, "expected roofline, constant:... or linear:..., got \"" + std::string(text) + "\"");
  }
  // Both start from the roofline's coefficients, so an unnamed one has a stated source:
  // constant keeps its step and per-prompt-token cost and drops the rest; linear keeps all four.
  // constant's step reads every weight (it has no share of the experts); linear's base the
  // weights but the routed experts, which its own term reads.
  c.base_ps = kind == "constant" ? roofline.base_ps + roofline.expert_weights_ps : roofline.base_ps;
  c.prefill_token_ps = roofline.prefill_token_ps;
  c.decode_seq_ps = kind == "linear" ? roofline.decode_seq_ps : 0;
  c.context_token_ps = kind == "linear" ? roofline.context_token_ps : 0;
  c.expert_weights_ps = kind == "linear" ? roofline.expert_weights_ps : 0;
  c.routed_experts = roofline.routed_experts;
  c.experts_per_token = roofline.experts_per_token;
  const std::string_view rest = colon == std::string_view::npos ? std::string_view{} : text.substr(colon + 1);
  // The terms the roofline still gives (each named one replaces its own): while any does, the
  // timing rests on the roofline's device, and `device` names it.
  std::vector<std::string_view> inherited = {kind == "constant" ? "step" : "base", "prefill-token"};
  if (kind == "linear") {
    inherited.insert(inherited.end(), {"decode-seq", "context-token"});
    if (roofline.expert_weights_ps != 0) inherited.push_back("expert-weights");
  }
  for (const auto& [key, value] : parse_key_values(rest, field)) {
    const bool known = key == "prefill-token" || (kind == "constant" && key == "step") ||
                       (kind == "linear" && (key == "base" || key == "decode-seq" || key == "context-token" ||
                                             key == "expert-weights"));
    if (!known) {
      throw InputError(where, "unknown parameter '" + std::string(key) + "' for " + std::string(kind) + " (" +
                                  (kind == "constant" ? "step, prefill-token"
                                                      : "base, prefill-token, decode-seq, context-token, expert-weights") +
                                  ")");
    }
    std::erase(inherited, key);
    const std::int64_t ps = parse_duration_ps(value, std::string(field) + " " + std::string(key));
    if (kind == "constant" && key == "step") c.base_ps = ps;
    else if (kind == "linear" && key == "base") c.base_ps = ps;
    else if (key == "prefill-token") c.prefill_token_ps = ps;
    else if (kind == "linear" && key == "decode-seq") c.decode_seq_ps = ps;
    else if (kind == "linear" && key == "context-token") c.context_token_ps = ps;
    else if (kind == "linear" && key == "expert-weights") {
      if (c.routed_experts == 0 && ps != 0) {
        throw InputError(where, "expert-weights is the read of a mixture-of-experts model's routed experts, and this "
                                "model has none");
      }
      c.expert_weights_ps = ps;
    }
  }
  // A step that takes no time would make every latency 0 and every rate infinite.
  if (c.base_ps <= 0) {
    throw InputError(where, "every engine step takes time: " + std::string(kind == "constant" ? "step" : "base") +
                                " must be positive, got \"" + std::string(text) + "\"");
  }
  c.name = std::string(text);
  if (!inherited.empty()) c.device = roofline.device;
  return c;
}

}  // namespace kvsim
