// Reading a Hugging Face config.json into a ModelSpec. nlohmann::json stays in this file: the
// public headers are standard library only.
//
// Which layers slide is the part configs spell in several ways; the order of the rules below
// follows transformers:
//   1. layer_types: one "sliding_attention" / "full_attention" per layer (newer configs);
//   2. use_sliding_window false, or sliding_window null/absent: every layer is full attention
//      (Qwen2Config: sliding_window = sliding_window if use_sliding_window else None);
//   3. sliding_window_pattern P: layer i is full when (i + 1) % P == 0 (Gemma 3; Gemma 3's
//      default P = 6 applies when a gemma3 config leaves it out);
//   4. model_type gemma2: even layers slide (Gemma2DecoderLayer: is_sliding = not layer_idx % 2);
//   5. use_sliding_window true with max_window_layers M: layers i >= M slide (Qwen2);
//   6. otherwise sliding_window applies to every layer (Mistral, Phi-3).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sys/stat.h>

#include "json_keys.h"
#include "kvsim/error.h"
#include "kvsim/model.h"
#include "kvsim/request.h"

namespace kvsim {
namespace {

using nlohmann::json;

// A sanity cap so a typo like 3200000000 layers is an error, not an allocation of gigabytes.
constexpr std::int64_t kMaxLayers = 100'000;

class Config {
 public:
  Config(const json& root, std::string path) : root_(root), path_(std::move(path)) {
    const auto it = root_.find("text_config");
    if (it != root_.end() && it->is_object()) text_ = &*it;
    if (it != root_.end() && !it->is_null() && !it->is_object()) fail("text_config", "expected an object, got " + it->dump());
  }

  const std::string& path() const { return path_; }
  bool nested() const { return text_ != nullptr; }

  // The value of `key`: text_config's first (multimodal configs keep the language model
  // there), then the top level. nullptr when absent or JSON null.
  const json* find(const char* key) const {
    if (text_ != nullptr) {
      const auto it = text_->find(key);
      if (it != text_->end() && !it->is_null()) return &*it;
    }
    const auto it = root_.find(key);
    if (it != root_.end() && !it->is_null()) return &*it;
    return nullptr;
  }

  // Whether `key` is written at all, JSON null included (find() treats null as absent).
  bool written(const char* key) const {
    return (text_ != nullptr && text_->contains(key)) || root_.contains(key);
  }

  [[noreturn]] void fail(const std::string& field, const std::string& problem) const {
    throw InputError(Location{path_, 0, "field '" + field + "'"}, problem);
  }

  std::optional<std::int64_t> integer(const char* key) const {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (v->is_number_unsigned()) {
      const auto u = v->get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        fail(key, "is too large (overflows 64 bits)");
      }
      return static_cast<std::int64_t>(u);
    }
    if (v->is_number_integer()) return v->get<std::int64_t>();
    fail(key, "expected an integer, got " + v->dump());
  }

  std::int64_t required_positive(const char* key) const {
    const auto v = integer(key);
    if (!v) fail(key, nested() ? "missing (looked in text_config and at the top level)" : "missing");
    if (*v <= 0) fail(key, "expected a positive integer, got " + std::to_string(*v));
    return *v;
  }

  std::optional<std::int64_t> optional_positive(const char* key) const {
    const auto v = integer(key);
    if (v && *v <= 0) fail(key, "expected a positive integer, got " + std::to_string(*v));
    return v;
  }

  std::optional<std::int64_t> optional_non_negative(const char* key) const {
    const auto v = integer(key);
    if (v && *v < 0) fail(key, "expected a non-negative integer, got " + std::to_string(*v));
    return v;
  }

  std::optional<std::string> string(const char* key) const {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) fail(key, "expected a string, got " + v->dump());
    return v->get<std::string>();
  }

  std::optional<bool> boolean(const char* key) const {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) fail(key, "expected true or false, got " + v->dump());
    return v->get<bool>();
  }

 private:
  const json& root_;
  const json* text_ = nullptr;
  std::string path_;
};

std::string parse_error_text(const json::exception& e) {
  // what() reads "[json.exception.parse_error.101] parse error at line 3, column 5: ..."
  // (or "[json.exception.out_of_range.406] number overflow parsing '1e999'"); the bracketed
  // id means nothing to a user.
  std::string text = e.what();
  const auto close = text.find("] ");
  if (text.rfind("[json.exception.", 0) == 0 && close != std::string::npos) text.erase(0, close + 2);
  return text;
}

std::vector<std::int64_t> layer_windows(const Config& c, const std::string& model_type,
                                        std::int64_t layers) {
  const auto window = c.optional_positive("sliding_window");
  if (const json* types = c.find("layer_types")) {
    if (!types->is_array()) c.fail("layer_types", "expected a list of attention types");
    if (static_cast<std::int64_t>(types->size()) != layers) {
      c.fail("layer_types", "has " + std::to_string(types->size()) + " entries but num_hidden_layers is " +
                                std::to_string(layers));
    }
    std::vector<std::int64_t> out;
    for (std::size_t i = 0; i < types->size(); ++i) {
      const json& t = (*types)[i];
      const std::string field = "layer_types[" + std::to_string(i) + "]";
      if (!t.is_string()) c.fail(field, "expected a string, got " + t.dump());
      const auto name = t.get<std::string>();
      if (name == "full_attention" || name == "attention" || name == "mamba" || name == "linear_attention") {
        out.push_back(0);  // full attention, or a state layer (layer_kinds() says which)
      } else if (name == "sliding_attention") {
        if (!window) c.fail("sliding_window", "missing, but " + field + " is \"sliding_attention\"");
        out.push_back(*window);
      } else if (name == "chunked_attention") {
        c.fail(field, "\"chunked_attention\": chunked local attention (Llama 4) is not modelled: those layers keep "
                      "only part of the sequence, and how much depends on the engine; kvsim cannot size this model");
      } else {
        c.fail(field, "\"" + name + "\" is not a layer type kvsim can size (expected \"full_attention\", "
                      "\"sliding_attention\", \"attention\", \"mamba\" or \"linear_attention\")");
      }
    }
    return out;
  }
  const auto use_sliding = c.boolean("use_sliding_window");
  std::optional<std::int64_t> pattern = c.optional_positive("sliding_window_pattern");
  if (!pattern && (model_type == "gemma3" || model_type == "gemma3_text")) pattern = 6;
  if (!pattern && model_type == "gemma2") pattern = 2;
  // A field that says layers slide, with no window written at all, would otherwise read as
  // full attention: transformers then applies its class's default window (Gemma2Config,
  // Gemma3TextConfig, Qwen2Config: 4096), which kvsim does not guess. An explicit null
  // means no window, as in transformers.
  if (!window && !c.written("sliding_window") && !(use_sliding && !*use_sliding)) {
    if (const auto given = c.optional_positive("sliding_window_pattern")) {
      c.fail("sliding_window", "missing, but sliding_window_pattern " + std::to_string(*given) +
                                   " says which layers slide: give the window (or null for none)");
    }
    if (pattern) c.fail("sliding_window", "missing, but model_type " + model_type + " has sliding layers: give the window (or null for none)");
    if (use_sliding && *use_sliding) c.fail("sliding_window", "missing, but use_sliding_window is true: give the window");
  }
  if (!window || (use_sliding && !*use_sliding)) return std::vector<std::int64_t>(static_cast<std::size_t>(layers), 0);
  // max_window_layers is Qwen2's, whose use_sliding_window defaults to false (no window at
  // all); without it the last rule below would make every layer slide.
  if (!use_sliding && c.find("max_window_layers") != nullptr) {
    c.fail("use_sliding_window", "missing, but sliding_window and max_window_layers are given: say whether the window "
                                 "is used (Qwen2's default is false, no window)");
  }
  std::vector<std::int64_t> out;
  if (pattern) {
    for (std::int64_t i = 0; i < layers; ++i) out.push_back((i + 1) % *pattern != 0 ? *window : 0);
    return out;
  }
  const auto max_window_layers = c.optional_non_negative("max_window_layers");
  if (use_sliding && *use_sliding && max_window_layers) {
    for (std::int64_t i = 0; i < layers; ++i) out.push_back(i >= *max_window_layers ? *window : 0);
    return out;
  }
  return std::vector<std::int64_t>(static_cast<std::size_t>(layers), *window);
}

// Fields that change what a model caches in ways kvsim does not model. Each would otherwise be
// ignored and the model sized as plain decoder attention: a silent miscount. A field counts
// when it is written with a value that turns the feature on (not null, false or empty).
void refuse_unmodelled(const Config& c) {
  struct Unmodelled {
    const char* field;
    const char* problem;
  };
  static const Unmodelled kUnmodelled[] = {
      {"cross_attention_layers",
       "lists cross-attention layers (Mllama): they cache the keys and values of the image tokens, which kvsim does "
       "not model; it cannot size this model"},
      {"attention_chunk_size",
       "chunked local attention (Llama 4) is not modelled: the layers that no_rope_layers / nope_layer_interval "
       "select keep only part of the sequence, and how much depends on the engine; kvsim cannot size this model"},
      {"is_encoder_decoder",
       "an encoder-decoder model: its decoder's cross-attention caches the encoder's tokens, which kvsim does not "
       "model; it cannot size this model"},
      {"linear_attn_config",
       "linear-attention layers described by linear_attn_config (Kimi Linear) and their state are not modelled; "
       "kvsim cannot size this model"},
      {"index_topk",
       "sparse attention with an indexer (DeepSeek-V3.2): the indexer caches a key per token beside the MLA latent, "
       "which kvsim does not model; it cannot size this model"},
      {"block_types",
       "recurrent blocks (RecurrentGemma's RG-LRU layers) and their state are not modelled; kvsim cannot size this "
       "model"},
      {"use_cla",
       "cross-layer attention (layers sharing the KV of cla_share_factor layers) is not modelled; kvsim cannot size "
       "this model"},
  };
  auto on = [](const json& v) {
    return !(v.is_null() || (v.is_boolean() && !v.get<bool>()) || ((v.is_array() || v.is_object()) && v.empty()));
  };
  for (const auto& [field, problem] : kUnmodelled) {
    if (const json* v = c.find(field); v != nullptr && on(*v)) c.fail(field, problem);
  }
  // Falcon names its KV heads num_kv_heads (or multi_query: one KV head) where kvsim reads
  // num_key_value_heads; without that, kvsim's default of one KV head per query head is wrong.
  if (c.find("num_key_value_heads") == nullptr) {
    for (const char* field : {"num_kv_heads", "multi_query"}) {
      if (const json* v = c.find(field); v != nullptr && on(*v)) {
        c.fail(field, "says how many KV heads there are in a field kvsim does not read (Falcon's num_kv_heads, "
                      "multi_query); give num_key_value_heads");
      }
    }
  }
}

// OpenELM (apple/OpenELM-*, configuration_openelm.py) names its fields its own way and lists
// per-layer head counts: num_transformer_layers, num_query_heads[i], num_kv_heads[i], head_dim,
// model_dim, max_context_length. Read as the standard names (errors name those; the OpenELM
// name is the one the docs table gives beside it). Every layer is full attention.
json openelm_as_standard(const json& root) {
  json out = root;
  const std::pair<const char*, const char*> names[] = {{"num_transformer_layers", "num_hidden_layers"},
                                                       {"num_query_heads", "num_attention_heads"},
                                                       {"num_kv_heads", "num_key_value_heads"},
                                                       {"model_dim", "hidden_size"},
                                                       {"max_context_length", "max_position_embeddings"}};
  for (const auto& [from, to] : names) {
    if (root.contains(from) && !root.contains(to)) out[to] = root[from];
  }
  return out;
}

// The state dimensions of a hybrid model's state layers, from the fields vLLM's
// get_mamba_state_shape_from_config reads for each family (vllm/model_executor/models/
// jamba.py, nemotron_h.py, granitemoehybrid.py, zamba2.py, qwen3_next.py).
// `named_by` is the field (and its value) that named the first state layer, for the error
// when the state's own fields are missing.
// `lightning`: the state layers are MiniMax's lightning attention (attn_type_list, or a
// MiniMax model_type's "linear_attention" layer_types).
StateDims read_state_dims(const Config& c, const std::pair<std::string, std::string>& named_by, bool lightning,
                          ModelSpec& m) {
  StateDims s;
  auto need_hidden = [&](const char* why) {
    if (m.hidden_size <= 0) c.fail("hidden_size", std::string("missing, and ") + why + " needs it");
    return m.hidden_size;
  };
  auto mul = [&](std::int64_t a, std::int64_t b, const char* field) {
    if (a != 0 && b > std::numeric_limits<std::int64_t>::max() / a) c.fail(field, "the state size overflows 64 bits");
    return a * b;
  };
  if (lightning) {
    // MiniMax's lightning (linear) attention: per head, the running K^T V sum of head_dim x
    // head_dim values and no conv state (vLLM linear_attention_state_shape:
    // (num_attention_heads / tp, head_dim, head_dim), from minimax_text_01.py's
    // get_mamba_state_shape_from_config; transformers' MiniMaxLightningAttention keeps the
    // same tensor).
    s.kind = "lightning attention";
    s.conv_channels = 0;
    s.conv_kernel = 1;
    s.state_heads = m.num_attention_heads;
    s.values_per_head = mul(m.head_dim, m.head_dim, "head_dim");
  } else if (c.find("linear_num_value_heads") != nullptr) {  // Qwen3-Next: GatedDeltaNet
    s.kind = "gated deltanet";
    const std::int64_t k_heads = c.required_positive("linear_num_key_heads");
    const std::int64_t v_heads = c.required_positive("linear_num_value_heads");
    const std::int64_t k_dim = c.required_positive("linear_key_head_dim");
    const std::int64_t v_dim = c.required_positive("linear_value_head_dim");
    const std::int64_t keys = mul(2, mul(k_heads, k_dim, "linear_key_head_dim"), "linear_key_head_dim");
    const std::int64_t values = mul(v_heads, v_dim, "linear_value_head_dim");
    if (values > std::numeric_limits<std::int64_t>::max() - keys) c.fail("linear_value_head_dim", "the state size overflows 64 bits");
    s.conv_channels = keys + values;
    s.conv_kernel = c.required_positive("linear_conv_kernel_dim");
    s.state_heads = v_heads;
    s.values_per_head = mul(v_dim, k_dim, "linear_value_head_dim");
  } else if (c.find("mamba_num_heads") != nullptr) {  // Nemotron-H: Mamba-2, d_inner = heads x head_dim
    s.kind = "mamba2";
    const std::int64_t heads = c.required_positive("mamba_num_heads");
    const std::int64_t head_dim = c.required_positive("mamba_head_dim");
    const std::int64_t state = c.required_positive("ssm_state_size");
    s.conv_channels = mul(heads, head_dim, "mamba_head_dim");
    s.n_groups = c.required_positive("n_groups");
    s.group_state_size = state;
    s.conv_kernel = c.required_positive("conv_kernel");
    s.state_heads = heads;
    s.values_per_head = mul(head_dim, state, "ssm_state_size");
  } else if (c.find("mamba_n_heads") != nullptr || c.find("n_mamba_heads") != nullptr) {
    // Granite-4.0-H (mamba_n_heads, mamba_d_head, mamba_n_groups) and Zamba2 (n_mamba_heads,
    // mamba_headdim, mamba_ngroups): Mamba-2 with d_inner = mamba_expand x hidden_size.
    const bool zamba = c.find("n_mamba_heads") != nullptr;
    s.kind = "mamba2";
    const std::int64_t heads = c.required_positive(zamba ? "n_mamba_heads" : "mamba_n_heads");
    const std::int64_t head_dim = c.required_positive(zamba ? "mamba_headdim" : "mamba_d_head");
    const std::int64_t state = c.required_positive("mamba_d_state");
    s.conv_channels = mul(c.required_positive("mamba_expand"), need_hidden("mamba_expand"), "mamba_expand");
    s.n_groups = c.required_positive(zamba ? "mamba_ngroups" : "mamba_n_groups");
    s.group_state_size = state;
    s.conv_kernel = c.required_positive("mamba_d_conv");
    s.state_heads = heads;
    s.values_per_head = mul(head_dim, state, "mamba_d_state");
  } else if (c.find("mamba_d_state") != nullptr) {  // Jamba: Mamba-1, d_inner = mamba_expand x hidden_size
    s.kind = "mamba";
    s.conv_channels = mul(c.required_positive("mamba_expand"), need_hidden("mamba_expand"), "mamba_expand");
    s.conv_kernel = c.required_positive("mamba_d_conv");
    s.state_heads = s.conv_channels;
    s.values_per_head = c.required_positive("mamba_d_state");
  } else {
    c.fail(named_by.first, named_by.second + " names a state-space layer, but none of the state fields kvsim reads "
                           "is present (mamba_d_state, mamba_num_heads, mamba_n_heads, n_mamba_heads, "
                           "linear_num_value_heads)");
  }
  return s;
}

// Hybrid attention / state-space models: which layers hold KV, which hold a constant state
// (docs/size.md, "Hybrid models"), in the order configs spell it:
//   1. layers_block_type: "attention" | "mamba" | "hybrid" per layer (Jamba as transformers
//      writes it, Zamba2; Zamba2's "hybrid" layer runs a Mamba-2 block and a shared attention
//      block, so it holds both);
//   2. hybrid_override_pattern: one character per layer, '*' attention, 'M' Mamba-2, '-' MLP
//      and 'E' MoE holding nothing (Nemotron-H);
//   3. attn_layer_period P and attn_layer_offset O: layer i is attention when i % P == O, the
//      rest Mamba (JambaConfig.layers_block_type);
//   4. attn_type_list: 1 softmax attention, 0 lightning (linear) attention per layer (MiniMax-
//      Text-01, MiniMax-M1; vLLM's get_num_layers_by_block_type counts the 1s as attention);
//   5. layer_types with "mamba" (Granite-4.0-H) or "linear_attention" (Qwen3-Next; MiniMax as
//      transformers writes it) entries;
//   6. full_attention_interval N: layer i is full attention when (i + 1) % N == 0, else linear
//      attention (Qwen3NextConfig's default layer_types).
// Then num_kv_shared_layers N: the last N layers reuse earlier layers' KV and hold none
// (Gemma-3n; transformers' Gemma3nTextAttention.is_kv_shared_layer, vLLM's kv sharing).
// A config that carries state-space fields but none of these rules is an error, never a
// silent all-attention count.
void read_layer_kinds(const Config& c, ModelSpec& m) {
  const auto layers = static_cast<std::size_t>(m.num_hidden_layers);
  std::vector<LayerKind> kinds;
  std::pair<std::string, std::string> named_by;  // the first state layer's field and value
  // MiniMax's linear layers: attn_type_list, or layer_types under a MiniMax model_type.
  const std::string model_type = c.string("model_type").value_or("");
  bool lightning = model_type.rfind("minimax", 0) == 0;
  auto note_state = [&](const std::string& field, const std::string& value) {
    if (named_by.first.empty()) named_by = {field, value};
  };
  auto length_check = [&](const char* field, std::size_t n) {
    if (n != layers) {
      c.fail(field, "has " + std::to_string(n) + " entries but num_hidden_layers is " + std::to_string(layers));
    }
  };
  if (const json* blocks = c.find("layers_block_type")) {
    if (!blocks->is_array()) c.fail("layers_block_type", "expected a list of layer types");
    length_check("layers_block_type", blocks->size());
    for (std::size_t i = 0; i < blocks->size(); ++i) {
      const json& t = (*blocks)[i];
      const std::string field = "layers_block_type[" + std::to_string(i) + "]";
      const std::string name = t.is_string() ? t.get<std::string>() : t.dump();
      if (name == "attention") kinds.push_back(LayerKind::attention);
      else if (name == "mamba" || name == "hybrid") {
        kinds.push_back(name == "mamba" ? LayerKind::state : LayerKind::attention_and_state);
        note_state(field, "\"" + name + "\"");
      }
      else c.fail(field, name + " is not a layer type kvsim can size (expected \"attention\", \"mamba\" or \"hybrid\")");
    }
  } else if (const auto pattern = c.string("hybrid_override_pattern")) {
    length_check("hybrid_override_pattern", pattern->size());
    for (std::size_t i = 0; i < pattern->size(); ++i) {
      const char ch = (*pattern)[i];
      if (ch == '*') kinds.push_back(LayerKind::attention);
      else if (ch == 'M') {
        kinds.push_back(LayerKind::state);
        note_state("hybrid_override_pattern", "'M' at layer " + std::to_string(i));
      }
      else if (ch == '-' || ch == 'E') kinds.push_back(LayerKind::none);
      else c.fail("hybrid_override_pattern", std::string("character '") + ch + "' at layer " + std::to_string(i) +
                                                 " is not a layer kvsim can size (expected '*', 'M', '-' or 'E')");
    }
  } else if (const auto period = c.optional_positive("attn_layer_period")) {
    const std::int64_t offset = c.optional_non_negative("attn_layer_offset").value_or(-1);
    if (offset < 0) c.fail("attn_layer_offset", "missing, but attn_layer_period is given");
    if (offset >= *period) c.fail("attn_layer_offset", std::to_string(offset) + " is not below attn_layer_period " + std::to_string(*period));
    for (std::size_t i = 0; i < layers; ++i) {
      kinds.push_back(static_cast<std::int64_t>(i) % *period == offset ? LayerKind::attention : LayerKind::state);
    }
    note_state("attn_layer_period", std::to_string(*period));
  } else if (const json* types = c.find("attn_type_list")) {
    if (!types->is_array()) c.fail("attn_type_list", "expected a list of 0 (lightning attention) and 1 (softmax attention)");
    length_check("attn_type_list", types->size());
    for (std::size_t i = 0; i < types->size(); ++i) {
      const json& t = (*types)[i];
      const std::string field = "attn_type_list[" + std::to_string(i) + "]";
      if (!t.is_number_integer() || (t.get<std::int64_t>() != 0 && t.get<std::int64_t>() != 1)) {
        c.fail(field, t.dump() + " is not a layer type kvsim can size (expected 0, lightning attention, or 1, softmax "
                                 "attention)");
      }
      const bool softmax = t.get<std::int64_t>() == 1;
      if (!softmax) note_state(field, "0 (lightning attention)");
      kinds.push_back(softmax ? LayerKind::attention : LayerKind::state);
    }
    lightning = true;
  } else if (const json* types = c.find("layer_types"); types != nullptr && types->is_array()) {
    bool any_state = false;
    for (std::size_t i = 0; i < types->size(); ++i) {
      const json& t = (*types)[i];
      const bool state = t.is_string() && (t.get<std::string>() == "mamba" || t.get<std::string>() == "linear_attention");
      if (state) note_state("layer_types[" + std::to_string(i) + "]", "\"" + t.get<std::string>() + "\"");
      any_state = any_state || state;
      kinds.push_back(state ? LayerKind::state : LayerKind::attention);
    }
    if (!any_state) kinds.clear();
  } else if (const auto interval = c.optional_positive("full_attention_interval")) {
    for (std::size_t i = 0; i < layers; ++i) {
      kinds.push_back((static_cast<std::int64_t>(i) + 1) % *interval == 0 ? LayerKind::attention : LayerKind::state);
    }
    note_state("full_attention_interval", std::to_string(*interval));
  }
  bool any_state = false;
  for (LayerKind k : kinds) any_state = any_state || k == LayerKind::state || k == LayerKind::attention_and_state;
  if (any_state) m.state = read_state_dims(c, named_by, lightning, m);
  if (!any_state) {
    for (const char* hint : {"mamba_d_state", "ssm_state_size", "mamba_d_conv", "linear_num_value_heads", "mamba_expand",
                             "mamba_n_heads", "mamba_num_heads"}) {
      if (c.find(hint) != nullptr) {
        c.fail(hint, "present, so this looks like a hybrid state-space model, but no field says which layers are "
                     "attention (layers_block_type, hybrid_override_pattern, attn_layer_period, attn_type_list, "
                     "layer_types or full_attention_interval): kvsim cannot size it");
      }
    }
  }
  if (const auto shared = c.optional_non_negative("num_kv_shared_layers"); shared && *shared > 0) {
    if (*shared >= m.num_hidden_layers) {
      c.fail("num_kv_shared_layers", std::to_string(*shared) + " shared layers leave no layer holding KV (num_hidden_layers " +
                                         std::to_string(m.num_hidden_layers) + ")");
    }
    if (kinds.empty()) kinds.assign(layers, LayerKind::attention);
    for (std::size_t i = layers - static_cast<std::size_t>(*shared); i < layers; ++i) {
      if (kinds[i] != LayerKind::attention) c.fail("num_kv_shared_layers", "covers a layer that is not attention");
      kinds[i] = LayerKind::kv_reused;
    }
  }
  m.layer_kinds = std::move(kinds);
}

// vLLM's default max_model_len under rope scaling (vllm/config/model.py,
// _get_and_verify_max_len): rope_scaling (transformers v5: rope_parameters, possibly one
// entry per layer type), skipped for Gemma 3, whose max_position_embeddings is scaled already;
// for each entry whose rope_type is not su, longrope or llama3 (those keep the length), the
// factor (default 1) multiplies the length, which YaRN first sets to its
// original_max_position_embeddings; Python's int() truncates. 0 when the length stays.
std::int64_t rope_scaled_length(const Config& c, const std::string& model_type, std::int64_t positions) {
  if (positions <= 0 || model_type.find("gemma3") != std::string::npos) return 0;
  const char* key = c.find("rope_scaling") != nullptr ? "rope_scaling" : "rope_parameters";
  const json* rope = c.find(key);
  if (rope == nullptr) return 0;
  if (!rope->is_object()) c.fail(key, "expected an object, got " + rope->dump());
  // Nested (one entry per layer type) when no entry says a type or a factor itself.
  const bool nested = !rope->empty() && rope->find("rope_type") == rope->end() && rope->find("type") == rope->end() &&
                      rope->find("factor") == rope->end() &&
                      std::all_of(rope->begin(), rope->end(), [](const json& v) { return v.is_object(); });
  std::vector<std::pair<std::string, const json*>> entries;
  if (nested) {
    for (auto it = rope->begin(); it != rope->end(); ++it) entries.emplace_back(std::string(key) + "." + it.key(), &*it);
  } else {
    entries.emplace_back(key, rope);
  }
  double length = static_cast<double>(positions);
  double factor = 1.0;
  for (const auto& [name, rp] : entries) {
    const auto type_it = rp->find("rope_type") != rp->end() ? rp->find("rope_type") : rp->find("type");
    if (type_it != rp->end() && !type_it->is_null() && !type_it->is_string()) {
      c.fail(name + ".rope_type", "expected a string, got " + type_it->dump());
    }
    const std::string type = type_it != rp->end() && type_it->is_string() ? type_it->get<std::string>() : "default";
    if (type == "su" || type == "longrope" || type == "llama3") continue;
    if (const auto f = rp->find("factor"); f != rp->end() && !f->is_null()) {
      if (!f->is_number() || f->get<double>() <= 0) c.fail(name + ".factor", "expected a positive number, got " + f->dump());
      factor = f->get<double>();
    }
    // YaRN's original length; transformers defaults it to max_position_embeddings.
    if (const auto o = rp->find("original_max_position_embeddings"); type == "yarn" && o != rp->end() && !o->is_null()) {
      if (!o->is_number() || o->get<double>() < 1 || o->get<double>() != std::floor(o->get<double>())) {
        c.fail(name + ".original_max_position_embeddings", "expected a positive whole number, got " + o->dump());
      }
      length = o->get<double>();
    }
  }
  const double scaled = length * factor;
  if (scaled > static_cast<double>(kMaxRequestTokens)) {
    c.fail(key, "scales the context past 2^40 positions, longer than any request kvsim reads");
  }
  const auto out = static_cast<std::int64_t>(scaled);
  if (out <= 0) c.fail(key, "scales the context to no position");
  return out == positions ? 0 : out;
}

// Bits per stored weight from quantization_config, or 0 when the weights are stored as
// torch_dtype (or in a scheme this does not recognise: the caller then records the scheme as
// unread). A field of the wrong type is an error naming it, like any other field.
std::int64_t quantized_weight_bits(const Config& c) {
  const json* q = c.find("quantization_config");
  if (q == nullptr || q->is_null()) return 0;
  if (!q->is_object()) c.fail("quantization_config", "expected an object, got " + q->dump());
  auto field = [&](const char* key, bool (json::*is_type)() const noexcept, const char* type) -> const json* {
    const auto it = q->find(key);
    if (it == q->end() || it->is_null()) return nullptr;
    if (!((*it).*is_type)()) c.fail(std::string("quantization_config.") + key, std::string("expected ") + type + ", got " + it->dump());
    return &*it;
  };
  const json* method = field("quant_method", &json::is_string, "a string");
  const std::string method_name = method != nullptr ? method->get<std::string>() : std::string{};
  // fp8 and FBGEMM's fp8 (Meta's Llama-3.1-405B-Instruct-FP8) store a byte a weight.
  if (method_name == "fp8" || method_name == "fbgemm_fp8") return 8;
  // `bits` is the weights' width for AWQ, GPTQ and AutoRound (also exported as
  // "intel/auto-round"); other schemes use the name for other things, or not at all.
  // AutoAWQ's own exports call it w_bit (vLLM's AWQConfig reads either).
  auto bits = q->find("bits");
  if (method_name == "awq" && (bits == q->end() || bits->is_null())) bits = q->find("w_bit");
  if ((method_name == "awq" || method_name == "gptq" || method_name == "auto-round" ||
       method_name == "intel/auto-round") &&
      bits != q->end() && bits->is_number_integer() && bits->get<std::int64_t>() > 0) {
    return bits->get<std::int64_t>();
  }
  if (method_name == "bitsandbytes") {
    const json* four = field("load_in_4bit", &json::is_boolean, "true or false");
    const json* eight = field("load_in_8bit", &json::is_boolean, "true or false");
    const bool in4 = four != nullptr && four->get<bool>();
    const bool in8 = eight != nullptr && eight->get<bool>();
    // transformers' BitsAndBytesConfig refuses both at once.
    if (in4 && in8) c.fail("quantization_config.load_in_8bit", "and load_in_4bit are both true: give one");
    if (in4) return 4;
    if (in8) return 8;
  }
  return 0;
}

// The KV cache a ModelOpt checkpoint was quantised for, as vLLM reads it when its KV dtype is
// "auto" (vllm/utils/torch_utils.py resolve_kv_cache_dtype_string ->
// get_kv_cache_quant_algo_string): for a quant_method starting "modelopt", the first of
// kv_cache_scheme and kv_cache_quant_algo given (inside "quantization" or beside it); a scheme
// object of static 8-bit floats is fp8, of 4-bit floats nvfp4. "" for other methods, none
// given, or a value vLLM does not know (it warns and serves "auto").
std::string checkpoint_kv_dtype(const Config& c) {
  const json* q = c.find("quantization_config");
  if (q == nullptr || !q->is_object()) return "";
  const auto method = q->find("quant_method");
  if (method == q->end() || !method->is_string() || !method->get<std::string>().starts_with("modelopt")) return "";
  const auto inner_it = q->find("quantization");
  const json& inner = inner_it != q->end() && inner_it->is_object() ? *inner_it : *q;
  // Python's `a or b`: the first value that is present and not null, false, 0, "" or empty.
  const json* algo = nullptr;
  for (const auto& [object, key] : {std::pair{&inner, "kv_cache_scheme"}, std::pair{q, "kv_cache_scheme"},
                                    std::pair{&inner, "kv_cache_quant_algo"}, std::pair{q, "kv_cache_quant_algo"}}) {
    const auto it = object->find(key);
    if (it == object->end()) continue;
    const json& v = *it;
    const bool falsy = v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_number() && v == 0) ||
                       ((v.is_string() || v.is_object() || v.is_array()) && v.empty());
    if (!falsy) {
      algo = &v;
      break;
    }
  }
  if (algo == nullptr) return "";
  if (algo->is_object()) {
    const auto is = [&](const char* key, const json& want) {
      const auto it = algo->find(key);
      return it != algo->end() && *it == want;
    };
    if (is("dynamic", false) && is("num_bits", 8) && is("type", "float")) return "fp8";
    if (is("num_bits", 4) && is("type", "float")) return "nvfp4";
    return "";
  }
  if (!algo->is_string()) return "";
  std::string lower = algo->get<std::string>();
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  // MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP: fp8 -> fp8_e4m3; nvfp4 where the release knows it.
  return lower == "fp8" || lower == "nvfp4" ? lower : "";
}

// The quantisation scheme in the detail the start-up weights need (kvsim/weights.h): AWQ and
// GPTQ (bits, group_size, zero points, GPTQ's "lm_head"), fp8 ("fp8" with an optional
// weight_block_size) and compressed-tensors (its first config group's weights: num_bits,
// type int or float, strategy tensor, channel, group or block), with the modules they leave
// out. nullopt for no quantization_config or a method kvsim only reads the bits of.
std::optional<WeightQuantization> weight_quantization(const Config& c) {
  const json* q = c.find("quantization_config");
  if (q == nullptr || !q->is_object()) return std::nullopt;
  auto integer_at = [&](const json& object, const char* key, const std::string& name) -> std::optional<std::int64_t> {
    const auto it = object.find(key);
    if (it == object.end() || it->is_null()) return std::nullopt;
    if (!it->is_number_integer()) c.fail(name, "expected an integer, got " + it->dump());
    return it->get<std::int64_t>();
  };
  auto names_at = [&](const json& object, const char* key, const std::string& name) {
    std::vector<std::string> out;
    const auto it = object.find(key);
    if (it == object.end() || it->is_null()) return out;
    if (!it->is_array()) c.fail(name, "expected a list of module names, got " + it->dump());
    for (const auto& v : *it) {
      if (!v.is_string()) c.fail(name, "expected a list of module names, got " + it->dump());
      out.push_back(v.get<std::string>());
    }
    return out;
  };
  const auto method_it = q->find("quant_method");
  if (method_it == q->end() || !method_it->is_string()) return std::nullopt;
  WeightQuantization w;
  w.method_name = method_it->get<std::string>();
  if (w.method_name == "awq" || w.method_name == "gptq") {
    w.method = w.method_name == "awq" ? WeightQuantMethod::awq : WeightQuantMethod::gptq;
    // vLLM's AWQConfig and GPTQConfig.from_config require the width (AWQ's as bits or w_bit).
    const char* bits_key = w.method == WeightQuantMethod::awq && q->contains("w_bit") && !q->contains("bits") ? "w_bit" : "bits";
    const std::string bits_name = std::string("quantization_config.") + bits_key;
    const auto bits = integer_at(*q, bits_key, bits_name);
    if (!bits) c.fail(bits_name, "missing: the width of " + w.method_name + "'s weights (vLLM requires it)");
    w.bits = *bits;
    if (w.bits != 2 && w.bits != 3 && w.bits != 4 && w.bits != 8) {
      c.fail(bits_name, "expected 2, 3, 4 or 8 for " + w.method_name + ", got " + std::to_string(w.bits));
    }
    const std::int64_t group = integer_at(*q, "group_size", "quantization_config.group_size").value_or(128);
    if (group == 0 || group < -1) c.fail("quantization_config.group_size", "expected a positive size or -1, got " + std::to_string(group));
    w.group_size = group == -1 ? 0 : group;  // -1: one group per output channel
    if (w.method == WeightQuantMethod::gptq) {
      const auto head = q->find("lm_head");
      w.lm_head_quantized = head != q->end() && head->is_boolean() && head->get<bool>();
    }
    w.not_converted = names_at(*q, "modules_to_not_convert", "quantization_config.modules_to_not_convert");
    return w;
  }
  if (w.method_name == "fp8") {
    w.method = WeightQuantMethod::fp8;
    w.bits = 8;
    w.per_tensor_scale = true;
    const auto block = q->find("weight_block_size");
    if (block != q->end() && !block->is_null()) {
      if (!block->is_array() || block->size() != 2 || !(*block)[0].is_number_integer() || !(*block)[1].is_number_integer() ||
          (*block)[0].get<std::int64_t>() <= 0 || (*block)[1].get<std::int64_t>() <= 0) {
        c.fail("quantization_config.weight_block_size", "expected [rows, columns], got " + block->dump());
      }
      w.per_tensor_scale = false;
      w.block_rows = (*block)[0].get<std::int64_t>();
      w.block_cols = (*block)[1].get<std::int64_t>();
    }
    w.not_converted = names_at(*q, "modules_to_not_convert", "quantization_config.modules_to_not_convert");
    return w;
  }
  if (w.method_name == "compressed-tensors") {
    const auto groups = q->find("config_groups");
    if (groups == q->end() || !groups->is_object() || groups->empty()) return std::nullopt;
    const json& group = groups->begin().value();
    const std::string name = "quantization_config.config_groups." + groups->begin().key() + ".weights";
    const auto weights = group.find("weights");
    if (weights == group.end() || !weights->is_object()) return std::nullopt;
    w.bits = integer_at(*weights, "num_bits", name + ".num_bits").value_or(0);
    if (w.bits <= 0 || w.bits > 16) c.fail(name + ".num_bits", "expected 1 to 16 bits, got " + std::to_string(w.bits));
    const auto type = weights->find("type");
    const bool is_float = type != weights->end() && type->is_string() && type->get<std::string>() == "float";
    w.method = is_float ? WeightQuantMethod::fp8 : WeightQuantMethod::int8;
    const auto strategy_it = weights->find("strategy");
    const std::string strategy = strategy_it != weights->end() && strategy_it->is_string() ? strategy_it->get<std::string>() : "tensor";
    if (strategy == "tensor") {
      w.per_tensor_scale = true;
    } else if (strategy == "group") {
      w.group_size = integer_at(*weights, "group_size", name + ".group_size").value_or(0);
      if (w.group_size <= 0) c.fail(name + ".group_size", "expected a positive group size for strategy \"group\"");
    } else if (strategy == "block") {
      const auto block = weights->find("block_structure");
      if (block == weights->end() || !block->is_array() || block->size() != 2 || !(*block)[0].is_number_integer() ||
          !(*block)[1].is_number_integer() || (*block)[0].get<std::int64_t>() <= 0 || (*block)[1].get<std::int64_t>() <= 0) {
        c.fail(name + ".block_structure", "expected [rows, columns] for strategy \"block\"");
      }
      w.block_rows = (*block)[0].get<std::int64_t>();
      w.block_cols = (*block)[1].get<std::int64_t>();
    } else if (strategy != "channel") {
      c.fail(name + ".strategy", "expected tensor, channel, group or block, got \"" + strategy + "\"");
    }
    w.not_converted = names_at(*q, "ignore", "quantization_config.ignore");
    return w;
  }
  return std::nullopt;
}

// OPT (transformers' OPTDecoder) is not Llama-shaped: learned absolute positions with an
// offset of 2 rows, biases on every projection, LayerNorm with weight and bias, a two-matrix
// MLP of ffn_dim (fc1, fc2, no gate), embeddings of word_embed_proj_dim projected in and
// out when that differs from hidden_size, a final LayerNorm only when
// do_layer_norm_before (OPT-350m has none), and the LM head tied to the embeddings unless
// the config says otherwise. Counted here from modeling_opt.py's modules, since the
// estimate in budget.cc assumes a gated MLP and RMSNorm.
std::int64_t opt_parameter_count(const Config& c, const ModelSpec& m) {
  auto mul = [&](std::int64_t a, std::int64_t b) {
    if (a != 0 && b > std::numeric_limits<std::int64_t>::max() / a) c.fail("ffn_dim", "the parameter count overflows 64 bits");
    return a * b;
  };
  auto add = [&](std::int64_t a, std::int64_t b) {
    if (b > std::numeric_limits<std::int64_t>::max() - a) c.fail("ffn_dim", "the parameter count overflows 64 bits");
    return a + b;
  };
  const std::int64_t h = c.required_positive("hidden_size");
  const std::int64_t ffn = c.required_positive("ffn_dim");
  const std::int64_t vocab = c.required_positive("vocab_size");
  const std::int64_t positions = c.required_positive("max_position_embeddings");
  const std::int64_t proj = c.optional_positive("word_embed_proj_dim").value_or(h);
  const bool bias = c.boolean("enable_bias").value_or(true);
  const bool affine = c.boolean("layer_norm_elementwise_affine").value_or(true);
  const bool norm_before = c.boolean("do_layer_norm_before").value_or(true);
  const bool tied = c.boolean("tie_word_embeddings").value_or(true);
  const std::int64_t b = bias ? 1 : 0;
  const std::int64_t norm = affine ? mul(2, h) : 0;  // LayerNorm: weight and bias
  const std::int64_t attention = mul(4, add(mul(h, h), mul(b, h)));      // q, k, v, out_proj
  const std::int64_t mlp = add(add(mul(h, ffn), mul(b, ffn)), add(mul(ffn, h), mul(b, h)));  // fc1, fc2
  std::int64_t total = mul(vocab, proj);                                  // embed_tokens
  total = add(total, mul(add(positions, 2), h));                          // embed_positions (offset 2)
  if (proj != h) total = add(total, mul(2, mul(proj, h)));                // project_in, project_out
  total = add(total, mul(m.num_hidden_layers, add(add(attention, mlp), mul(2, norm))));
  if (norm_before) total = add(total, norm);                              // final_layer_norm
  if (!tied) total = add(total, mul(vocab, proj));                        // lm_head
  return total;
}

}  // namespace

ModelSpec parse_hf_config(std::string_view json_text, const std::string& path) {
  json root;
  try {
    root = detail::parse_json_keys_once(json_text, Location{path, 0, ""});
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for a number too large for a double (1e999).
    throw InputError(Location{path, 0, ""}, "not valid JSON: " + parse_error_text(e));
  }
  // After the parse, which stops at a NUL byte: an error before the byte is reported first.
  refuse_nul_bytes(json_text, Location{path, 0, ""});
  if (!root.is_object()) throw InputError(Location{path, 0, ""}, "expected a JSON object at the top level");
  const bool openelm = root.contains("model_type") && root["model_type"] == "openelm";
  if (openelm) root = openelm_as_standard(root);
  const Config c(root, path);

  ModelSpec m;
  m.name = path;
  const std::string model_type = c.string("model_type").value_or("");
  refuse_unmodelled(c);
  // The name is the path already: the source says what in it the numbers come from.
  m.source = "config.json" + (model_type.empty() ? std::string() : ", model_type " + printable(model_type));
  // Multimodal configs: the language model is what holds KV; its weights are all the
  // parameter estimate counts.
  if (c.nested()) m.source += "; text_config: the language model (vision/audio tower weights not counted)";
  m.num_hidden_layers = c.required_positive("num_hidden_layers");
  if (m.num_hidden_layers > kMaxLayers) {
    c.fail("num_hidden_layers", std::to_string(m.num_hidden_layers) + " layers is implausible (more than " +
                                    std::to_string(kMaxLayers) + ")");
  }
  // Per-layer query heads come only from OpenELM configs (num_query_heads), where each layer's
  // KV heads are listed too: the largest stands for the model, each layer is placed with its own.
  if (const json* q = c.find("num_attention_heads"); openelm && q != nullptr && q->is_array()) {
    for (std::size_t i = 0; i < q->size(); ++i) {
      const json& h = (*q)[i];
      if (!h.is_number_integer() || h.get<std::int64_t>() <= 0) {
        c.fail("num_query_heads[" + std::to_string(i) + "]", "expected a positive integer, got " + h.dump());
      }
      m.layer_attention_heads.push_back(h.get<std::int64_t>());
      m.num_attention_heads = std::max(m.num_attention_heads, m.layer_attention_heads.back());
    }
    if (m.layer_attention_heads.empty()) c.fail("num_query_heads", "is an empty list");
  } else {
    m.num_attention_heads = c.required_positive("num_attention_heads");
  }
  // Absent (or null) means multi-head attention: one KV head per query head. A list gives each
  // layer's own count (per-layer KV heads, as OpenELM-style configs publish them).
  if (const json* kv = c.find("num_key_value_heads"); kv != nullptr && kv->is_array()) {
    for (std::size_t i = 0; i < kv->size(); ++i) {
      const json& h = (*kv)[i];
      if (!h.is_number_integer() || h.get<std::int64_t>() <= 0) {
        c.fail("num_key_value_heads[" + std::to_string(i) + "]", "expected a positive integer, got " + h.dump());
      }
      m.layer_kv_heads.push_back(h.get<std::int64_t>());
      m.num_key_value_heads = std::max(m.num_key_value_heads, m.layer_kv_heads.back());
    }
    if (m.layer_kv_heads.empty()) c.fail("num_key_value_heads", "is an empty list");
  } else {
    m.num_key_value_heads = c.optional_positive("num_key_value_heads").value_or(m.num_attention_heads);
  }
  m.hidden_size = c.optional_positive("hidden_size").value_or(0);
  m.intermediate_size = c.optional_positive("intermediate_size").value_or(0);
  m.vocab_size = c.optional_positive("vocab_size").value_or(0);
  // Gemma3TextConfig defaults max_position_embeddings to 131072 and its Hub configs rely on it.
  const bool gemma3 = model_type == "gemma3" || model_type == "gemma3_text";
  m.max_position_embeddings = c.optional_positive("max_position_embeddings").value_or(gemma3 ? 131072 : 0);
  if (m.max_position_embeddings > kMaxRequestTokens) {
    c.fail("max_position_embeddings", std::to_string(m.max_position_embeddings) +
                                          " positions is implausible (at most 2^40, the longest request kvsim reads)");
  }
  m.rope_scaled_length = rope_scaled_length(c, model_type, m.max_position_embeddings);

  if (c.find("kv_lora_rank") != nullptr) {
    MlaDims mla;
    mla.kv_lora_rank = c.required_positive("kv_lora_rank");
    mla.qk_rope_head_dim = c.required_positive("qk_rope_head_dim");
    mla.qk_nope_head_dim = c.required_positive("qk_nope_head_dim");
    mla.v_head_dim = c.required_positive("v_head_dim");
    mla.q_lora_rank = c.optional_positive("q_lora_rank").value_or(0);
    m.mla = mla;
    m.head_dim = c.optional_positive("head_dim").value_or(0);
  } else if (const auto head_dim = c.optional_positive("head_dim")) {
    m.head_dim = *head_dim;
  } else if (const auto attention_head_dim = c.optional_positive("attention_head_dim")) {
    m.head_dim = *attention_head_dim;  // Zamba2 (2 x hidden_size / heads), Nemotron-H
  } else {
    if (m.hidden_size == 0) c.fail("head_dim", "missing, and hidden_size is missing too, so it cannot be derived");
    if (m.hidden_size % m.num_attention_heads != 0) {
      c.fail("head_dim", "missing, and hidden_size " + std::to_string(m.hidden_size) +
                             " is not a multiple of num_attention_heads " +
                             std::to_string(m.num_attention_heads));
    }
    m.head_dim = m.hidden_size / m.num_attention_heads;
  }

  m.layer_window_tokens = layer_windows(c, model_type, m.num_hidden_layers);
  read_layer_kinds(c, m);

  // The expert count under each family's name; two names that disagree leave the model
  // ambiguous (and each family reads its experts' width from a different field).
  const char* expert_fields[] = {"n_routed_experts", "num_local_experts", "num_experts"};
  const char* counted_by = nullptr;
  std::int64_t counted = 0;
  for (const char* name : expert_fields) {
    const auto count = c.integer(name);
    if (!count || *count <= 0) continue;  // a family's own branch below refuses a bad count
    if (counted_by == nullptr) {
      counted_by = name;
      counted = *count;
    } else if (*count != counted) {
      c.fail(name, std::to_string(*count) + " experts, but " + counted_by + " says " + std::to_string(counted) +
                       ": give one expert count");
    }
  }
  if (const auto experts = c.optional_positive("n_routed_experts")) {  // DeepSeek
    MoeDims moe;
    moe.routed_experts = *experts;
    moe.shared_experts = c.optional_non_negative("n_shared_experts").value_or(0);
    moe.expert_intermediate_size = c.required_positive("moe_intermediate_size");
    moe.dense_layers = c.optional_non_negative("first_k_dense_replace").value_or(0);
    // DeepseekV3DecoderLayer: layer i is MoE when i >= first_k_dense_replace and
    // i % moe_layer_freq == 0. kvsim counts dense layers only as a leading block.
    if (const auto freq = c.optional_positive("moe_layer_freq"); freq && *freq != 1) {
      c.fail("moe_layer_freq", std::to_string(*freq) + ": only 1 (every layer from first_k_dense_replace on is MoE) "
                                                      "is supported");
    }
    if (moe.dense_layers > m.num_hidden_layers) {
      c.fail("first_k_dense_replace", std::to_string(moe.dense_layers) + " dense layers, more than the " +
                                          std::to_string(m.num_hidden_layers) + " layers (num_hidden_layers)");
    }
    m.moe = moe;
  } else if (const auto local = c.optional_positive("num_local_experts")) {  // Mixtral
    m.moe = MoeDims{*local, 0, m.intermediate_size, 0, 0};
  } else if (const auto qwen = c.optional_positive("num_experts")) {  // Qwen MoE
    m.moe = MoeDims{*qwen, 0, c.optional_positive("moe_intermediate_size").value_or(0), 0, 0};
    // Qwen2-MoE's shared expert is one MLP of shared_expert_intermediate_size, counted here as
    // that many experts of moe_intermediate_size (Qwen1.5-MoE-A2.7B: 5632 = 4 x 1408).
    const std::int64_t shared = c.optional_non_negative("shared_expert_intermediate_size").value_or(0);
    if (shared > 0) {
      const std::int64_t expert = m.moe->expert_intermediate_size;
      if (expert <= 0 || shared % expert != 0) {
        c.fail("shared_expert_intermediate_size", std::to_string(shared) + " is not a multiple of moe_intermediate_size " +
                                                      std::to_string(expert) + ", which kvsim's MoE parameter count needs");
      }
      m.moe->shared_experts = shared / expert;
    }
    // transformers' Qwen2MoeDecoderLayer/Qwen3MoeDecoderLayer: layer i is sparse when it is not
    // in mlp_only_layers and (i + 1) % decoder_sparse_step == 0. kvsim counts dense layers only
    // as a leading block, so only the every-layer-sparse case is accepted.
    if (const auto step = c.optional_positive("decoder_sparse_step"); step && *step != 1) {
      c.fail("decoder_sparse_step", std::to_string(*step) + ": only 1 (every layer sparse) is supported");
    }
    if (const json* only = c.find("mlp_only_layers"); only != nullptr && !only->is_null() &&
                                                      !(only->is_array() && only->empty())) {
      c.fail("mlp_only_layers", "only an empty list (every layer sparse) is supported");
    }
  }
  if (m.moe) {
    // How many routed experts one token uses: what drives compute (all of them drive memory).
    if (const auto per_token = c.optional_positive("num_experts_per_tok")) {
      if (*per_token > m.moe->routed_experts) {
        c.fail("num_experts_per_tok", std::to_string(*per_token) + " is more than the " +
                                          std::to_string(m.moe->routed_experts) + " routed experts");
      }
      m.moe->experts_per_token = *per_token;
    }
  }

  const char* dtype_field = c.find("torch_dtype") != nullptr ? "torch_dtype" : "dtype";
  // As written ("torch." dropped): a dtype kvsim does not know the width of is refused where
  // the weights are sized by it (model_weights), not here, where only the KV dtype's default
  // reads it.
  m.weight_dtype = c.string(dtype_field).value_or("");
  if (m.weight_dtype.rfind("torch.", 0) == 0) m.weight_dtype.erase(0, 6);
  m.weight_bits = quantized_weight_bits(c);
  m.quantization = weight_quantization(c);
  // compressed-tensors says its bits inside a config group, which quantized_weight_bits does
  // not read.
  if (m.weight_bits == 0 && m.quantization) m.weight_bits = m.quantization->bits;
  // A scheme whose bits neither read: sizing its weights as torch_dtype would be wrong. An
  // empty quantization_config quantizes nothing, and compressed-tensors without a weights
  // group (a KV-cache scheme or sparsity alone) leaves the weights as torch_dtype stores them.
  if (const json* q = c.find("quantization_config"); q != nullptr && !q->empty() && m.weight_bits == 0) {
    const auto method = q->find("quant_method");
    const std::string name = method != q->end() && method->is_string() ? method->get<std::string>() : "(none named)";
    if (name != "compressed-tensors") m.unread_quantization = name;
  }
  m.checkpoint_kv_dtype = checkpoint_kv_dtype(c);
  // Routing with no expert count named (a misspelt n_routed_experts, say): sized as a dense
  // model, the experts' weights would be a fraction of the real ones.
  if (const auto routed = c.integer("num_experts_per_tok"); !m.moe && routed && *routed > 0) {
    c.fail("num_experts_per_tok", "routes tokens to experts, but no expert count is given (n_routed_experts, "
                                  "num_local_experts or num_experts): the model would be sized as dense");
  }
  // Qwen2's attention always has q/k/v biases (transformers' Qwen2Attention, bias=True);
  // Llama-style configs say so in attention_bias.
  m.attention_bias = c.boolean("attention_bias")
                         .value_or(model_type == "qwen2" || model_type == "qwen2_moe" || model_type == "qwen2_vl" ||
                                   model_type == "qwen2_5_vl");
  // transformers' PretrainedConfig ties embeddings unless told otherwise, but most decoder
  // configs (Llama, Mistral, Qwen2) default to untied and say so; Gemma's default is tied.
  m.tie_word_embeddings = c.boolean("tie_word_embeddings").value_or(model_type.rfind("gemma", 0) == 0);
  if (model_type == "opt") {
    m.parameter_count = opt_parameter_count(c, m);
    m.parameter_count_source = "counted from the OPT config";
    m.tie_word_embeddings = c.boolean("tie_word_embeddings").value_or(true);
  }

  validate_model(m, path);
  return m;
}

ModelSpec load_hf_config(const std::string& path) {
  // A config.json is kilobytes; 16 MiB is far beyond any, and reading stops there, so that
  // /dev/zero or a weights file given by mistake fails at once instead of filling memory.
  constexpr std::size_t kMaxConfigBytes = std::size_t{16} << 20;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> in(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!in) throw InputError(Location{path, 0, ""}, std::string("cannot open: ") + std::strerror(errno));
  if (struct stat info {}; ::fstat(::fileno(in.get()), &info) == 0 && S_ISDIR(info.st_mode)) {
    throw InputError(Location{path, 0, ""}, "is a directory, not a file");
  }
  std::string text;
  char buffer[1 << 16];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, in.get())) > 0;) {
    text.append(buffer, n);
    if (text.size() > kMaxConfigBytes) {
      throw InputError(Location{path, 0, ""}, "larger than the limit of 16 MiB for a model config: is this a config.json?");
    }
  }
  if (std::ferror(in.get())) throw InputError(Location{path, 0, ""}, std::string("read error: ") + std::strerror(errno));
  return parse_hf_config(text, path);
}

}  // namespace kvsim
