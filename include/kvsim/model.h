// Model geometry: what one token position costs in the KV cache, per layer group and in
// total, on one device.
//
// A ModelSpec is an architecture as published (a built-in preset or a Hugging Face
// config.json). KvOptions say how it is served: the KV dtype (its own setting, independent
// of the weights' dtype), how MLA is stored, and the tensor/pipeline-parallel placement.
// kv_layout() turns the two into LayerGroups: sets of layers that store the same number of
// bytes per position and keep the same history (full attention, or a sliding window of W
// positions). Every byte count is an exact integer.
#ifndef KVSIM_MODEL_H_
#define KVSIM_MODEL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvsim {

// How each cached K or V value is stored.
enum class KvDtype { fp32, fp16, bf16, fp8, int8, int4, int2 };

struct KvDtypeInfo {
  std::string_view name;  // "bf16"
  int bits;               // bits per value: 32, 16, 16, 8, 8, 4, 2
  bool group_scales;      // true for int8/int4/int2: a scale and a zero-point per group
};

const KvDtypeInfo& kv_dtype_info(KvDtype dtype);
// "fp16", "float16", "bf16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8", ...
// Throws InputError naming `field` for anything else.
KvDtype parse_kv_dtype(std::string_view text, std::string_view field);

// Multi-head latent attention (DeepSeek-V2/V3) dimensions, from config.json.
struct MlaDims {
  std::int64_t kv_lora_rank = 0;
  std::int64_t qk_rope_head_dim = 0;
  std::int64_t qk_nope_head_dim = 0;
  std::int64_t v_head_dim = 0;
};

// An architecture as published. Field names follow Hugging Face's config.json.
struct ModelSpec {
  std::string name;    // preset name ("llama-3.1-8b") or the config file's path
  std::string source;  // where the numbers come from: "meta-llama/Llama-3.1-8B config.json"
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;  // equal to num_attention_heads for MHA
  std::int64_t head_dim = 0;             // K and V width per head (non-MLA)
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;    // for the parameter-count estimate; 0 if unknown
  std::int64_t vocab_size = 0;           // for the parameter-count estimate; 0 if unknown
  std::int64_t max_position_embeddings = 0;
  // One entry per layer: 0 for full attention, W for a sliding window of W positions.
  std::vector<std::int64_t> layer_window_tokens;
  std::optional<MlaDims> mla;            // set for MLA models
  std::string weight_dtype;              // torch_dtype as published, e.g. "bfloat16"
  std::int64_t parameter_count = 0;      // published total; 0 when unknown (then estimated)
};

enum class MlaForm {
  latent,        // vLLM, SGLang, llama.cpp: kv_lora_rank + qk_rope_head_dim values, no V
  decompressed,  // Hugging Face transformers: per-head K (nope + rope) and V
};

struct KvOptions {
  KvDtype dtype = KvDtype::bf16;
  std::int64_t quant_group_values = 64;  // values sharing one scale (+ zero-point), int8/4/2
  std::int64_t scale_bytes = 2;          // bytes of one scale and of one zero-point (fp16)
  MlaForm mla_form = MlaForm::latent;
  std::int64_t tensor_parallel = 1;      // devices that split the KV heads
  std::int64_t pipeline_parallel = 1;    // stages that split the layers
};

// Layers on one device that cost the same per position and keep the same history.
struct LayerGroup {
  std::string name;                 // "full", "sliding 4096", "mla latent", "mla decompressed"
  std::int64_t window_tokens = 0;   // 0: keeps every position; W: keeps the last W
  std::int64_t layers = 0;          // layers of this group on this device
  std::int64_t kv_heads = 0;        // heads stored per layer on this device (MLA latent: 1)
  std::int64_t k_head_dim = 0;      // values per head for K (MLA latent: the whole latent)
  std::int64_t v_head_dim = 0;      // values per head for V (MLA latent: 0)
  std::int64_t bytes_per_layer_position = 0;  // one layer, one position, values + scales
  std::int64_t bytes_per_position = 0;        // all `layers` of the group, one position
};

// The KV cost of a model on one device (one pipeline stage).
struct KvLayout {
  std::vector<LayerGroup> groups;
  std::int64_t max_model_len = 0;   // max_position_embeddings
  std::int64_t bytes_per_token() const;  // sum of bytes_per_position over groups
};

// The layout of each pipeline stage, stage 0 first. Throws InputError on impossible
// placements (tensor parallelism that neither divides nor is a multiple of the KV heads,
// more stages than layers).
std::vector<KvLayout> kv_stage_layouts(const ModelSpec& model, const KvOptions& options);

// The layout of the stage with the most bytes per token: the one that binds.
KvLayout kv_layout(const ModelSpec& model, const KvOptions& options);

// The built-in presets, in the order `kvsim models` lists them.
const std::vector<ModelSpec>& model_presets();

// A preset by name (case-insensitive). Throws InputError listing the known names.
const ModelSpec& find_model_preset(std::string_view name);

// Reads a Hugging Face config.json (top level, or its nested text_config). Throws
// InputError naming the file and the missing or contradictory field.
ModelSpec load_hf_config(const std::string& path);

}  // namespace kvsim

#endif  // KVSIM_MODEL_H_
