// KV layout arithmetic: dtypes, per-layer bytes, tensor- and pipeline-parallel placement.
#include "kvsim/model.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <map>
#include <string>

#include "hybrid_model.h"
#include "kvsim/error.h"
#include "kvsim/option_names.h"
#include "kvsim/units.h"

namespace kvsim {
namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

constexpr std::array<KvDtypeInfo, 7> kDtypes{{
    {"fp32", 32, false},
    {"fp16", 16, false},
    {"bf16", 16, false},
    // vLLM's fp8 KV cache keeps per-tensor (or per-head) k_scale/v_scale per layer, not per
    // token: no bytes per position beyond the values themselves.
    {"fp8", 8, false},
    // Hugging Face's QuantizedCache (quanto and HQQ backends) stores a scale and a zero-point
    // per group of q_group_size values (default 64), in the compute dtype.
    {"int8", 8, true},
    {"int4", 4, true},
    {"int2", 2, true},
}};

struct DtypeName {
  std::string_view name;
  KvDtype dtype;
};

// Spellings users and config files use; torch_dtype names map onto the same dtypes.
constexpr std::array<DtypeName, 17> kDtypeNames{{
    {"fp32", KvDtype::fp32},         {"float32", KvDtype::fp32},    {"float", KvDtype::fp32},
    {"fp16", KvDtype::fp16},         {"float16", KvDtype::fp16},    {"half", KvDtype::fp16},
    {"bf16", KvDtype::bf16},         {"bfloat16", KvDtype::bf16},   {"fp8", KvDtype::fp8},
    {"fp8_e4m3", KvDtype::fp8},      {"fp8_e5m2", KvDtype::fp8},    {"float8_e4m3fn", KvDtype::fp8},
    {"float8_e5m2", KvDtype::fp8},   {"e4m3", KvDtype::fp8},        {"int8", KvDtype::int8},
    {"int4", KvDtype::int4},         {"int2", KvDtype::int2},
}};

// Groups identical layers: same window, heads and dims cost the same per position.
struct GroupKey {
  std::int64_t window = 0;
  std::int64_t kv_heads = 0;
  std::int64_t k_dim = 0;
  std::int64_t v_dim = 0;
  // Full attention (window 0) sorts first, then windows from the smallest.
  bool operator<(const GroupKey& o) const {
    auto rank = [](std::int64_t w) { return w == 0 ? std::int64_t{-1} : w; };
    if (rank(window) != rank(o.window)) return rank(window) < rank(o.window);
    if (kv_heads != o.kv_heads) return kv_heads < o.kv_heads;
    if (k_dim != o.k_dim) return k_dim < o.k_dim;
    return v_dim < o.v_dim;
  }
};

std::string group_name(const ModelSpec& model, const KvOptions& options, std::int64_t window) {
  const std::string kind = window == 0 ? "full" : "sliding " + std::to_string(window);
  if (model.mla) {
    const std::string form = options.mla_form == MlaForm::latent ? "mla latent" : "mla decompressed";
    return window == 0 ? form : form + ", " + kind;  // a window over MLA layers is shown, not hidden
  }
  return kind;
}

}  // namespace

const KvDtypeInfo& kv_dtype_info(KvDtype dtype) {
  return kDtypes.at(static_cast<std::size_t>(dtype));
}

std::optional<KvDtype> try_parse_kv_dtype(std::string_view text) {
  const std::string key = lower(text);
  for (const auto& entry : kDtypeNames) {
    if (entry.name == key) return entry.dtype;
  }
  return std::nullopt;
}

KvDtype parse_kv_dtype(std::string_view text, std::string_view field) {
  if (auto dtype = try_parse_kv_dtype(text)) return *dtype;
  throw InputError(Location{"", 0, std::string(field)},
                   "expected one of fp32, fp16, bf16, fp8, int8, int4, int2, got \"" +
                       std::string(text) + "\"");
}

bool KvLayout::any_window() const {
  return std::any_of(groups.begin(), groups.end(), [](const LayerGroup& g) { return g.window_tokens > 0; });
}

std::int64_t KvLayout::bytes_per_token() const {
  std::int64_t total = 0;
  for (const auto& g : groups) total = checked_add(total, g.bytes_per_position, "bytes per token");
  return total;
}

std::int64_t kv_vector_bytes(std::int64_t values, const KvOptions& options) {
  const KvDtypeInfo& info = kv_dtype_info(options.dtype);
  // int4/int2 values are packed; a vector that does not fill its last byte still owns it.
  std::int64_t bytes = ceil_div(checked_mul(values, info.bits, "KV vector bits"), 8);
  if (info.group_scales && values > 0) {
    if (options.quant_group_values <= 0) {
      throw InputError(Location{"", 0, kOptKvGroupSize}, "expected a positive number of values");
    }
    if (options.scale_bytes < 0) {
      throw InputError(Location{"", 0, "scale bytes"}, "expected a non-negative number");
    }
    const std::int64_t groups = ceil_div(values, options.quant_group_values);
    bytes = checked_add(bytes, checked_mul(groups, 2 * options.scale_bytes, "KV scale bytes"),
                        "KV vector bytes");
  }
  return bytes;
}

std::int64_t kept_positions(const LayerGroup& group, std::int64_t tokens) {
  return group.window_tokens > 0 ? std::min(tokens, group.window_tokens) : tokens;
}

std::int64_t kv_bytes_for_tokens(const KvLayout& layout, std::int64_t tokens) {
  std::int64_t total = 0;
  for (const auto& g : layout.groups) {
    total = checked_add(total,
                        checked_mul(g.bytes_per_position, kept_positions(g, tokens), "KV bytes per sequence"),
                        "KV bytes per sequence");
  }
  return total;
}

std::vector<std::pair<std::int64_t, std::int64_t>> pipeline_stage_layers(std::int64_t layers,
                                                                         std::int64_t stages) {
  if (stages < 1) {
    throw InputError(Location{"", 0, kOptPp}, "expected at least 1 pipeline stage, got " +
                                                  std::to_string(stages));
  }
  if (stages > layers) {
    throw InputError(Location{"", 0, kOptPp},
                     std::to_string(stages) + " pipeline stages for " + std::to_string(layers) +
                         " layers: every stage needs at least one layer");
  }
  // vllm/distributed/utils.py get_pp_indices: layers // stages each; the remainder goes one
  // layer at a time to partitions[-2], partitions[-3], ... (the last stage holds the final norm
  // and LM head, so it never gets an extra layer).
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(stages), layers / stages);
  const std::int64_t remainder = layers % stages;
  for (std::int64_t i = 2; i < remainder + 2; ++i) sizes[static_cast<std::size_t>(stages - i)] += 1;
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  std::int64_t start = 0;
  for (std::int64_t size : sizes) {
    out.emplace_back(start, start + size);
    start += size;
  }
  return out;
}

std::int64_t kv_heads_per_device(std::int64_t kv_heads, std::int64_t attention_heads,
                                 std::int64_t tensor_parallel) {
  const Location where{"", 0, kOptTp};
  if (tensor_parallel < 1) {
    throw InputError(where, "expected at least 1 device, got " + std::to_string(tensor_parallel));
  }
  // vLLM splits the query heads evenly (QKVParallelLinear: divide(total_num_heads, tp_size)).
  if (attention_heads % tensor_parallel != 0) {
    throw InputError(where, "tensor parallelism " + std::to_string(tensor_parallel) +
                                " does not divide the " + std::to_string(attention_heads) +
                                " attention heads");
  }
  // vllm/model_executor/layers/linear.py QKVParallelLinear: tp >= kv heads -> one head per
  // device, replicated tp / kv_heads times (divide() asserts it is whole); else kv_heads / tp.
  if (tensor_parallel >= kv_heads) {
    if (tensor_parallel % kv_heads != 0) {
      throw InputError(where, "tensor parallelism " + std::to_string(tensor_parallel) +
                                  " is not a multiple of the " + std::to_string(kv_heads) +
                                  " KV heads, so heads cannot be replicated evenly");
    }
    return 1;
  }
  if (kv_heads % tensor_parallel != 0) {
    throw InputError(where, "tensor parallelism " + std::to_string(tensor_parallel) +
                                " does not divide the " + std::to_string(kv_heads) + " KV heads");
  }
  return kv_heads / tensor_parallel;
}

void require_weight_bits_known(const ModelSpec& model) {
  if (model.unread_quantization.empty()) return;
  throw InputError(Location{model.name, 0, "quantization_config.quant_method"},
                   "\"" + model.unread_quantization +
                       "\" stores weights in a scheme kvsim does not read the bits per weight of, and torch_dtype "
                       "would count them at full width: give --weights-bytes (about the checkpoint's size) or "
                       "--weight-dtype");
}

void validate_model(const ModelSpec& model, const std::string& file) {
  auto fail = [&](const std::string& field, const std::string& problem) {
    throw InputError(Location{file, 0, "field '" + field + "'"}, problem);
  };
  if (model.num_hidden_layers <= 0) fail("num_hidden_layers", "expected a positive layer count");
  if (model.num_attention_heads <= 0) fail("num_attention_heads", "expected a positive head count");
  if (model.num_key_value_heads <= 0) fail("num_key_value_heads", "expected a positive head count");
  if (static_cast<std::int64_t>(model.layer_window_tokens.size()) != model.num_hidden_layers) {
    fail("layer_types", "has " + std::to_string(model.layer_window_tokens.size()) +
                            " entries for " + std::to_string(model.num_hidden_layers) + " layers");
  }
  for (std::int64_t w : model.layer_window_tokens) {
    if (w < 0) fail("sliding_window", "expected a positive window");
  }
  validate_layer_kinds(model, file);
  if (model.mla) {
    const MlaDims& m = *model.mla;
    if (m.kv_lora_rank <= 0) fail("kv_lora_rank", "expected a positive rank");
    if (m.qk_rope_head_dim <= 0) fail("qk_rope_head_dim", "expected a positive dimension");
    if (m.qk_nope_head_dim <= 0) fail("qk_nope_head_dim", "expected a positive dimension");
    if (m.v_head_dim <= 0) fail("v_head_dim", "expected a positive dimension");
  } else {
    if (model.head_dim <= 0) fail("head_dim", "expected a positive head dimension");
  }
  // Checked for MLA configs too, though neither form reads it (see device_heads below).
  // Per-layer lists are checked layer by layer (validate_layer_kinds).
  if (model.layer_attention_heads.empty() && (model.num_key_value_heads > model.num_attention_heads ||
                                              model.num_attention_heads % model.num_key_value_heads != 0)) {
    fail("num_key_value_heads", std::to_string(model.num_key_value_heads) + " KV heads do not divide the " +
                                    std::to_string(model.num_attention_heads) +
                                    " attention heads evenly (each KV head serves a whole group)");
  }
}

std::vector<KvLayout> kv_stage_layouts(const ModelSpec& model, const KvOptions& options) {
  validate_model(model, "");
  // Per-head widths: the same on every layer and stage.
  std::int64_t k_dim = 0;
  std::int64_t v_dim = 0;
  const bool latent = model.mla && options.mla_form == MlaForm::latent;
  if (latent) {
    // One latent per token per layer (kv_lora_rank + rope), shared by every head: vLLM keeps
    // it whole on every tensor-parallel rank (get_num_kv_heads returns 1 under MLA). The query
    // heads are still split, so tp must divide them.
    kv_heads_per_device(1, model.num_attention_heads, options.tensor_parallel);
    k_dim = checked_add(model.mla->kv_lora_rank, model.mla->qk_rope_head_dim, "MLA latent width");
    v_dim = 0;
  } else if (model.mla) {
    // Hugging Face's DeepseekV3Attention caches K = [nope | rope] and V per head, before any
    // padding of V for flash attention.
    k_dim = checked_add(model.mla->qk_nope_head_dim, model.mla->qk_rope_head_dim, "MLA key width");
    v_dim = model.mla->v_head_dim;
  } else {
    k_dim = model.head_dim;
    v_dim = model.head_dim;
  }
  // Per-device heads of layer i: vLLM places every layer's heads by the same rule, per layer
  // when the config lists them (layer_kv_heads).
  auto device_heads = [&](std::size_t i) {
    if (latent) return std::int64_t{1};
    // Decompressed, kv_b_proj expands the latent into K and V for every attention head
    // (DeepseekV3Attention: num_heads x (qk_nope_head_dim + v_head_dim)); the config's
    // num_key_value_heads plays no part.
    if (model.mla) return kv_heads_per_device(model.num_attention_heads, model.num_attention_heads, options.tensor_parallel);
    const std::int64_t heads = model.layer_kv_heads.empty() ? model.num_key_value_heads : model.layer_kv_heads[i];
    const std::int64_t queries =
        model.layer_attention_heads.empty() ? model.num_attention_heads : model.layer_attention_heads[i];
    return kv_heads_per_device(heads, queries, options.tensor_parallel);
  };
  const std::int64_t head_bytes =
      checked_add(kv_vector_bytes(k_dim, options), kv_vector_bytes(v_dim, options), "bytes per head");
  std::pair<std::int64_t, std::int64_t> state_bytes{0, 0};
  if (model.state) state_bytes = state_bytes_per_layer(*model.state, options);

  std::vector<KvLayout> stages;
  for (const auto& [first, end] : pipeline_stage_layers(model.num_hidden_layers, options.pipeline_parallel)) {
    std::map<GroupKey, std::int64_t> counts;
    KvLayout layout;
    for (std::int64_t i = first; i < end; ++i) {
      const auto at = static_cast<std::size_t>(i);
      const LayerKind kind = model.layer_kinds.empty() ? LayerKind::attention : model.layer_kinds[at];
      if (kind == LayerKind::state || kind == LayerKind::attention_and_state) layout.state_layers += 1;
      if (kind == LayerKind::kv_reused) layout.kv_reused_layers += 1;
      if (kind != LayerKind::attention && kind != LayerKind::attention_and_state) continue;
      counts[GroupKey{model.layer_window_tokens[at], device_heads(at), k_dim, v_dim}] += 1;
    }
    if (layout.state_layers > 0) {
      layout.conv_state_bytes_per_layer = state_bytes.first;
      layout.temporal_state_bytes_per_layer = state_bytes.second;
    }
    layout.max_model_len = context_length(model);
    layout.first_layer = first;
    layout.end_layer = end;
    for (const auto& [key, layers] : counts) {
      LayerGroup g;
      g.name = group_name(model, options, key.window);
      // Layers whose head counts differ (a per-layer list) cost differently: say which is which.
      if (!model.layer_kv_heads.empty()) g.name += ", " + std::to_string(key.kv_heads) + " KV heads";
      g.window_tokens = key.window;
      g.layers = layers;
      g.kv_heads = key.kv_heads;
      g.k_head_dim = key.k_dim;
      g.v_head_dim = key.v_dim;
      g.bytes_per_layer_position = checked_mul(key.kv_heads, head_bytes, "bytes per layer position");
      g.bytes_per_position = checked_mul(g.bytes_per_layer_position, layers, "bytes per position");
      layout.groups.push_back(std::move(g));
    }
    stages.push_back(std::move(layout));
  }
  return stages;
}

KvLayout kv_layout(const ModelSpec& model, const KvOptions& options) {
  std::vector<KvLayout> stages = kv_stage_layouts(model, options);
  std::size_t binding = 0;
  for (std::size_t i = 1; i < stages.size(); ++i) {
    if (stages[i].bytes_per_token() > stages[binding].bytes_per_token()) binding = i;
  }
  return stages[binding];
}

KvDtype default_kv_dtype(const ModelSpec& model) {
  // A ModelOpt checkpoint quantised for an fp8 cache gets one (vLLM's
  // resolve_kv_cache_dtype_string); nvfp4, which kvsim does not size, is the caller's to refuse.
  if (model.checkpoint_kv_dtype == "fp8") return KvDtype::fp8;
  return served_dtype(model);
}

KvDtype served_dtype(const ModelSpec& model) {
  // Only a 16-bit compute dtype carries over to the cache (docs/size.md): torch_dtype
  // "int8" or "float8_e4m3fn" names how weights are stored, and an engine's "auto" KV
  // dtype is the activations' dtype, which is then bf16 (vLLM's kv_cache_dtype "auto").
  // A float32 checkpoint is served in 16 bits (vLLM's _resolve_auto_dtype in
  // vllm/config/model.py, "Downcast for float32 models"), so its cache is bf16 too.
  if (auto dtype = try_parse_kv_dtype(model.weight_dtype)) {
    if (*dtype == KvDtype::fp16 || *dtype == KvDtype::bf16) return *dtype;
  }
  return KvDtype::bf16;
}

}  // namespace kvsim
