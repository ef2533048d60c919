// Model geometry: what one token position costs in the KV cache, per layer group and in
// total, on one device.
//
// A ModelSpec is an architecture as published (a built-in preset or a Hugging Face
// config.json). KvOptions say how it is served: the KV dtype (its own setting, independent
// of the weights' dtype), how MLA is stored, and the tensor/pipeline-parallel placement.
// kv_layout() turns the two into LayerGroups: sets of layers that store the same number of
// bytes per position and keep the same history (full attention, or a sliding window of W
// positions). Every byte count is an exact integer; arithmetic that could overflow 64 bits
// throws InputError instead of wrapping.
//
// The per-value rule, for one layer and one position:
//   kv_heads x (bytes(k_head_dim) + bytes(v_head_dim))
//   bytes(d) = ceil(d x bits / 8) + [int8/int4/int2 only] ceil(d / group) x 2 x scale_bytes
// (a scale and a zero-point per group of `quant_group_values` values, groups formed along each
// head's K and V vector separately). docs/size.md gives the sources of each rule.
#ifndef KVSIM_MODEL_H_
#define KVSIM_MODEL_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
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
// The same names, or nullopt when `text` names no KV dtype (e.g. torch_dtype "int32").
std::optional<KvDtype> try_parse_kv_dtype(std::string_view text);

// Multi-head latent attention (DeepSeek-V2/V3) dimensions, from config.json.
struct MlaDims {
  std::int64_t kv_lora_rank = 0;
  std::int64_t qk_rope_head_dim = 0;
  std::int64_t qk_nope_head_dim = 0;
  std::int64_t v_head_dim = 0;
  std::int64_t q_lora_rank = 0;  // 0 when queries are not compressed (parameter estimate only)
};

// Mixture-of-experts MLP dimensions (parameter estimate and roofline; the KV cache does not see them).
struct MoeDims {
  std::int64_t routed_experts = 0;            // n_routed_experts (DeepSeek), num_local_experts (Mixtral)
  std::int64_t shared_experts = 0;            // n_shared_experts: always-on experts of the same size
  std::int64_t expert_intermediate_size = 0;  // moe_intermediate_size (Mixtral: intermediate_size)
  std::int64_t dense_layers = 0;              // first_k_dense_replace: leading layers with a dense MLP
  std::int64_t experts_per_token = 0;         // num_experts_per_tok: routed experts a token uses
                                              // (0: unknown; compute then counts every expert)
};

// What a decoder layer keeps per sequence (hybrid and KV-sharing models; docs/size.md).
enum class LayerKind {
  attention,            // KV per position (the default for every layer)
  state,                // a state-space or linear-attention layer: a constant state per sequence, no KV
  attention_and_state,  // both (Zamba2's hybrid layers: a Mamba-2 block and a shared attention block)
  kv_reused,            // reads another layer's KV (Gemma-3n's last num_kv_shared_layers): holds none
  none,                 // an MLP-only or MoE-only layer (Nemotron-H's '-' and 'E'): holds nothing
};

// The constant per-sequence state of one state-space layer, before tensor parallelism, as
// vLLM's MambaStateShapeCalculator shapes it (vllm/model_executor/layers/mamba/mamba_utils.py):
// a convolution state of conv_channels (+ 2 x n_groups x group_state_size for Mamba-2) x
// (conv_kernel - 1) values, and a temporal (SSM or recurrent) state of state_heads x
// values_per_head values. Tensor parallelism splits the channels and the heads.
struct StateDims {
  std::string kind;                       // "mamba" (Mamba-1), "mamba2", "gated deltanet"
  std::int64_t conv_channels = 0;         // Mamba-1/2: intermediate size; GatedDeltaNet: 2 x key + value dims
  std::int64_t n_groups = 0;              // Mamba-2's B/C groups (0 otherwise)
  std::int64_t group_state_size = 0;      // Mamba-2: ssm_state_size, added twice per group to the conv
  std::int64_t conv_kernel = 0;           // the conv state keeps conv_kernel - 1 positions
  std::int64_t state_heads = 0;           // temporal state rows split by tensor parallelism
  std::int64_t values_per_head = 0;       // temporal state values per row
};

// How a checkpoint's linear weights are quantised, from config.json's quantization_config
// (what the start-up memory model in kvsim/weights.h needs beyond the bits per weight).
enum class WeightQuantMethod {
  awq,        // quant_method "awq": packed int4 qweight, fp16 scales and packed zeros per group
  gptq,       // quant_method "gptq": packed qweight, fp16 scales, packed qzeros per group, g_idx
  fp8,        // quant_method "fp8", or compressed-tensors float 8-bit: fp8 weights, fp32 scales
  int8,       // compressed-tensors int 8-bit (w8a8): int8 weights, fp32 per-channel scales
  other,      // a method kvsim reads only the bits of (bitsandbytes, ...): params x bits
};

struct WeightQuantization {
  WeightQuantMethod method = WeightQuantMethod::other;
  std::string method_name;            // as the config spells it: "awq", "compressed-tensors"
  std::int64_t bits = 0;              // bits per quantised weight
  std::int64_t group_size = 0;        // input values sharing a scale; 0: one scale per output
                                      // channel (GPTQ group_size -1, w8a8 "channel")
  bool per_tensor_scale = false;      // fp8/int8 "tensor" strategy: one scale per matrix
  std::int64_t block_rows = 0;        // fp8 weight_block_size [rows, cols]; 0 when not blocked
  std::int64_t block_cols = 0;
  bool lm_head_quantized = false;     // GPTQ "lm_head": true; everywhere else the head stays
  std::vector<std::string> not_converted;  // modules_to_not_convert / ignore (names or patterns)
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
  // One entry per layer, or empty when every layer is attention.
  std::vector<LayerKind> layer_kinds;
  // KV heads of each layer when they differ (a list in config.json); empty: every layer has
  // num_key_value_heads (then the largest of the list).
  std::vector<std::int64_t> layer_kv_heads;
  // Query heads of each layer when they differ (OpenELM's num_query_heads); empty: every layer
  // has num_attention_heads (then the largest of the list).
  std::vector<std::int64_t> layer_attention_heads;
  std::optional<StateDims> state;        // set when some layer holds a state (LayerKind::state)
  std::optional<MlaDims> mla;            // set for MLA models
  std::optional<MoeDims> moe;            // set for mixture-of-experts models
  bool tie_word_embeddings = false;      // LM head shares the embedding matrix (estimate only)
  std::string weight_dtype;              // torch_dtype as published, e.g. "bfloat16"
  // Bits per stored weight when the checkpoint is quantised (quantization_config: DeepSeek-V3's
  // fp8 is 8, a 4-bit AWQ/GPTQ checkpoint is 4); 0 when weight_dtype is what is stored.
  std::int64_t weight_bits = 0;
  std::int64_t parameter_count = 0;      // published total; 0 when unknown (then estimated)
  // Empty when parameter_count is published; else how it was counted (an OPT config's
  // layout, which the Llama-shaped estimate does not fit).
  std::string parameter_count_source;
  // The quantisation scheme in full when the config names one kvsim sizes tensor by tensor
  // (kvsim/weights.h). Last, so that presets written positionally stay as they are.
  std::optional<WeightQuantization> quantization = std::nullopt;
  bool attention_bias = false;           // q/k/v projections carry biases (Qwen2: qkv_bias)
  // quantization_config's quant_method when kvsim cannot tell the bits a weight is stored in
  // ("mxfp4", or bitsandbytes with neither load flag): the weights then need --weights-bytes
  // or --weight-dtype (require_weight_bits_known). Empty otherwise.
  std::string unread_quantization;
  // The longest sequence vLLM serves by default when rope_scaling stretches the context past
  // max_position_embeddings (YaRN: original_max_position_embeddings x factor; dynamic, linear:
  // max_position_embeddings x factor), as vllm/config/model.py's _get_and_verify_max_len
  // derives it; 0 when it is max_position_embeddings (context_length()).
  std::int64_t rope_scaled_length = 0;
  // The KV cache a ModelOpt checkpoint was quantised for, as vLLM's "auto" KV dtype reads it
  // (vllm/utils/torch_utils.py get_kv_cache_quant_algo_string): "fp8", "nvfp4", or "" when
  // the checkpoint names none (or one vLLM does not know, which it serves as "auto").
  std::string checkpoint_kv_dtype;
};

// The model's default maximum length: rope_scaled_length when rope scaling sets one, else
// max_position_embeddings (0 when neither is known).
inline std::int64_t context_length(const ModelSpec& m) {
  return m.rope_scaled_length > 0 ? m.rope_scaled_length : m.max_position_embeddings;
}
// Which field context_length() comes from, for people.
inline const char* context_length_source(const ModelSpec& m) {
  return m.rope_scaled_length > 0 ? "rope-scaled max_position_embeddings" : "max_position_embeddings";
}

// The routed experts a token goes through: num_experts_per_tok (at most every expert), or
// every expert when the config does not say.
inline std::int64_t routed_experts_used(const MoeDims& e) {
  return e.experts_per_token > 0 ? std::min(e.experts_per_token, e.routed_experts) : e.routed_experts;
}

// The leading layers with a dense MLP: first_k_dense_replace for an MoE model (within the
// layer count), every layer otherwise.
inline std::int64_t dense_mlp_layers(const ModelSpec& m) {
  return m.moe ? std::clamp<std::int64_t>(m.moe->dense_layers, 0, m.num_hidden_layers) : m.num_hidden_layers;
}

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
  // How state-space layers store their state (vLLM's mamba_cache_dtype "auto": the model's
  // dtype; the CLI sets the model's default_kv_dtype()). Conv and temporal states alike.
  KvDtype state_dtype = KvDtype::bf16;
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
  std::vector<LayerGroup> groups;   // full attention first, then sliding windows, smallest first
  std::int64_t max_model_len = 0;   // max_position_embeddings
  std::int64_t first_layer = 0;     // this stage holds layers [first_layer, end_layer)
  std::int64_t end_layer = 0;
  // Layers of this stage that hold a constant per-sequence state, and what one holds.
  std::int64_t state_layers = 0;
  std::int64_t conv_state_bytes_per_layer = 0;
  std::int64_t temporal_state_bytes_per_layer = 0;
  std::int64_t kv_reused_layers = 0;     // layers that read another layer's KV and hold none
  std::int64_t bytes_per_token() const;  // sum of bytes_per_position over groups
  bool any_window() const;               // a group of sliding-window layers
  // state_layers x (conv + temporal): bytes a sequence holds whatever its length.
  std::int64_t state_bytes_per_sequence() const;
};

// The conv and temporal state bytes of one state-space layer on one device (the rule in
// StateDims). Throws InputError when tensor parallelism does not divide the channels or heads.
std::pair<std::int64_t, std::int64_t> state_bytes_per_layer(const StateDims& state, const KvOptions& options);

// Bytes of one K or V vector of `values` values in `dtype`, scales included (the rule above).
// REQUIRES: values >= 0; options.quant_group_values > 0 for the int dtypes.
std::int64_t kv_vector_bytes(std::int64_t values, const KvOptions& options);

// Positions a sequence of `tokens` tokens keeps on `group`: all of them on full attention,
// at most window_tokens on a sliding window (the DESIGN's "effective tokens" of one sequence).
std::int64_t kept_positions(const LayerGroup& group, std::int64_t tokens);

// KV bytes one sequence of `tokens` tokens holds on the device `layout` describes: the sum over
// groups of bytes_per_position x kept_positions. Throws InputError on 64-bit overflow.
std::int64_t kv_bytes_for_tokens(const KvLayout& layout, std::int64_t tokens);

// The layers of each pipeline stage as vLLM's get_pp_indices splits them: layers / stages
// each, the remainder added one each to the stages before the last, starting next to it.
// Returns [first, end) per stage. Throws InputError when stages < 1 or stages > layers.
std::vector<std::pair<std::int64_t, std::int64_t>> pipeline_stage_layers(std::int64_t layers,
                                                                         std::int64_t stages);

// KV heads one device stores per layer under tensor parallelism (vLLM's rule): kv_heads / tp
// when tp divides kv_heads; 1 (the head replicated) when tp is a multiple of kv_heads. Throws
// InputError for anything else, and when tp does not divide the attention (query) heads.
std::int64_t kv_heads_per_device(std::int64_t kv_heads, std::int64_t attention_heads,
                                 std::int64_t tensor_parallel);

// The layout of each pipeline stage, stage 0 first. Throws InputError on impossible
// placements (tensor parallelism that neither divides nor is a multiple of the KV heads,
// more stages than layers).
std::vector<KvLayout> kv_stage_layouts(const ModelSpec& model, const KvOptions& options);

// The layout of the stage with the most bytes per token: the one that binds (the first such
// stage on a tie).
KvLayout kv_layout(const ModelSpec& model, const KvOptions& options);

// The KV dtype a model is served with when the user does not say: fp8 for a checkpoint
// quantised for an fp8 cache (ModelSpec::checkpoint_kv_dtype), else served_dtype().
KvDtype default_kv_dtype(const ModelSpec& model);
// The dtype a model computes in: its torch_dtype when that names a 16-bit dtype (bfloat16 ->
// bf16, float16 -> fp16), else bf16 (a float32 checkpoint is served in 16 bits).
KvDtype served_dtype(const ModelSpec& model);

// Checks that a spec is usable (positive layer and head counts, one window per layer, KV heads
// dividing attention heads, complete MLA dims). Throws InputError naming the field; `file`
// goes into the error's Location (empty for presets).
void validate_model(const ModelSpec& model, const std::string& file);

// Throws InputError naming the config and quantization_config.quant_method when the model's
// weights are stored in a scheme kvsim cannot tell the bits of (ModelSpec::unread_quantization):
// its torch_dtype would count them at full width. For callers whose user gave neither
// --weights-bytes nor --weight-dtype.
void require_weight_bits_known(const ModelSpec& model);

// The built-in presets, in the order `kvsim models` lists them.
const std::vector<ModelSpec>& model_presets();

// A preset by name (case-insensitive). Throws InputError listing the known names.
const ModelSpec& find_model_preset(std::string_view name);

// Reads a Hugging Face config.json (top level, or its nested text_config). Throws
// InputError naming the file and the missing or contradictory field.
ModelSpec load_hf_config(const std::string& path);

// Parses the text of a config.json; `path` only names it in errors and in ModelSpec::name.
ModelSpec parse_hf_config(std::string_view json_text, const std::string& path);

}  // namespace kvsim

#endif  // KVSIM_MODEL_H_
