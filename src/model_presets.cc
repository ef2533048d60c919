// The built-in model presets. Every number is the value of the published Hugging Face
// config.json of the model named in `source`; parameter counts are the "safetensors total" the
// Hub reports for that checkpoint (exact), unless the comment says otherwise.
//
// The presets are one table, kPresets, one row each: adding one is adding a row (its name
// lower-case and new; tests/model_presets_test.cc checks every row).
#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <string_view>

#include "kvsim/error.h"
#include "kvsim/option_names.h"
#include "kvsim/model.h"

namespace kvsim {
namespace {

// One preset: a ModelSpec's fields as config.json gives them, with the per-layer windows
// given by a rule (`sliding_window`, `global_every`) instead of one entry per layer. Fields
// left out are 0, false or empty, as in ModelSpec.
struct PresetRow {
  std::string_view name = {};
  std::string_view source = {};
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t vocab_size = 0;
  std::int64_t max_position_embeddings = 0;
  std::int64_t sliding_window = 0;  // 0: every layer is full attention
  // 0: with a window, every layer slides. P: layer i is global (full attention) when
  // (i + 1) % P == 0 and slides otherwise: Gemma 3's rule (transformers
  // Gemma3TextConfig.layer_types: "sliding_attention" if bool((i + 1) % sliding_window_pattern)
  // else "full_attention"). Gemma 2 is the same rule with P = 2 (Gemma2DecoderLayer: is_sliding
  // = not bool(layer_idx % 2)), so its even-indexed layers 0, 2, 4, ... slide and the odd ones
  // are global.
  std::int64_t global_every = 0;
  std::optional<MlaDims> mla = std::nullopt;
  std::optional<MoeDims> moe = std::nullopt;
  bool tie_word_embeddings = false;
  std::string_view weight_dtype = {};
  std::int64_t weight_bits = 0;
  // quantization_config of fp8 weights in square blocks of this width, each block with an
  // fp32 scale (DeepSeek-V3: "weight_block_size": [128, 128]); 0: none.
  std::int64_t fp8_block = 0;
  bool attention_bias = false;  // q/k/v projections carry biases (every Qwen2)
  std::int64_t parameter_count = 0;
};

// In the order `kvsim models` lists them.
const PresetRow kPresets[] = {
    // meta-llama/Llama-3.1-8B: hidden 4096 / 32 heads -> head_dim 128 (no head_dim field).
    {.name = "llama-3.1-8b",
     .source = "meta-llama/Llama-3.1-8B config.json",
     .num_hidden_layers = 32,
     .num_attention_heads = 32,
     .num_key_value_heads = 8,
     .head_dim = 128,
     .hidden_size = 4096,
     .intermediate_size = 14336,
     .vocab_size = 128256,
     .max_position_embeddings = 131072,
     .weight_dtype = "bfloat16",
     .parameter_count = 8'030'261'248},
    // meta-llama/Llama-3.1-70B: hidden 8192 / 64 heads -> head_dim 128.
    {.name = "llama-3.1-70b",
     .source = "meta-llama/Llama-3.1-70B config.json",
     .num_hidden_layers = 80,
     .num_attention_heads = 64,
     .num_key_value_heads = 8,
     .head_dim = 128,
     .hidden_size = 8192,
     .intermediate_size = 28672,
     .vocab_size = 128256,
     .max_position_embeddings = 131072,
     .weight_dtype = "bfloat16",
     .parameter_count = 70'553'706'496},
    // mistralai/Mistral-7B-v0.1: "sliding_window": 4096 with no per-layer pattern, so every
    // layer slides (transformers and vLLM both apply it to all 32 layers).
    {.name = "mistral-7b-v0.1",
     .source = "mistralai/Mistral-7B-v0.1 config.json",
     .num_hidden_layers = 32,
     .num_attention_heads = 32,
     .num_key_value_heads = 8,
     .head_dim = 128,
     .hidden_size = 4096,
     .intermediate_size = 14336,
     .vocab_size = 32000,
     .max_position_embeddings = 32768,
     .sliding_window = 4096,
     .weight_dtype = "bfloat16",
     .parameter_count = 7'241'732'096},
    // Qwen/Qwen2.5-7B: the config carries "sliding_window": 131072 but "use_sliding_window":
    // false, and transformers' Qwen2Config sets sliding_window = None unless use_sliding_window
    // (vLLM's Qwen2 model does the same), so every layer is full attention.
    {.name = "qwen2.5-7b",
     .source = "Qwen/Qwen2.5-7B config.json",
     .num_hidden_layers = 28,
     .num_attention_heads = 28,
     .num_key_value_heads = 4,
     .head_dim = 128,  // 3584 / 28
     .hidden_size = 3584,
     .intermediate_size = 18944,
     .vocab_size = 152064,
     .max_position_embeddings = 131072,
     .weight_dtype = "bfloat16",
     .attention_bias = true,  // transformers' Qwen2Attention: q/k/v with bias=True
     .parameter_count = 7'615'616'512},
    // meta-llama/Llama-3.2-3B: head_dim 128 is its own field (24 heads x 128 = 3072 = hidden);
    // the LM head is the embedding's table ("tie_word_embeddings": true). Its weights are
    // estimated from the config: 3,212,749,824, which the Hub's 3.21B matches (Llama has no
    // biases and no per-head norms, so the estimate leaves nothing out).
    {.name = "llama-3.2-3b",
     .source = "meta-llama/Llama-3.2-3B config.json",
     .num_hidden_layers = 28,
     .num_attention_heads = 24,
     .num_key_value_heads = 8,
     .head_dim = 128,
     .hidden_size = 3072,
     .intermediate_size = 8192,
     .vocab_size = 128256,
     .max_position_embeddings = 131072,
     .tie_word_embeddings = true,
     .weight_dtype = "bfloat16"},
    // The dense Qwen3 models below have head_dim 128 as their own field, no sliding window
    // ("use_sliding_window": false, "sliding_window": null) and 40,960 positions. Their
    // weights are estimated from the config, leaving out the per-head q_norm/k_norm vectors
    // (256 parameters a layer), as for Qwen3-32B.
    // Qwen/Qwen3-4B: the LM head is the embedding's table ("tie_word_embeddings": true).
    {.name = "qwen3-4b",
     .source = "Qwen/Qwen3-4B config.json",
     .num_hidden_layers = 36,
     .num_attention_heads = 32,
     .num_key_value_heads = 8,
     .head_dim = 128,
     .hidden_size = 2560,
     .intermediate_size = 9728,
     .vocab_size = 151936,
     .max_position_embeddings = 40960,
     .tie_word_embeddings = true,
     .weight_dtype = "bfloat16"},
    // Qwen/Qwen3-8B: an LM head of its own (the Hub's 8.19B).
    {.name = "qwen3-8b",
     .source = "Qwen/Qwen3-8B config.json",
     .num_hidden_layers = 36,
     .num_attention_heads = 32,
     .num_key_value_heads = 8,
     .head_dim = 128,
     .hidden_size = 4096,
     .intermediate_size = 12288,
     .vocab_size = 151936,
     .max_position_embeddings = 40960,
     .weight_dtype = "bfloat16"},
    // Qwen/Qwen3-14B: an LM head of its own.
    {.name = "qwen3-14b",
     .source = "Qwen/Qwen3-14B config.json",
     .num_hidden_layers = 40,
     .num_attention_heads = 40,
     .num_key_value_heads = 8,
     .head_dim = 128,
     .hidden_size = 5120,
     .intermediate_size = 17408,
     .vocab_size = 151936,
     .max_position_embeddings = 40960,
     .weight_dtype = "bfloat16"},
    // Qwen/Qwen3-32B: head_dim 128 is its own field (64 heads x 128 = 8192, not hidden 5120);
    // no sliding window ("use_sliding_window": false). No exact safetensors total is quoted
    // here, so the weights are estimated from the config (32,762,106,880; the Hub says 32.8B;
    // the estimate leaves out the per-head q_norm/k_norm vectors, 16,384 parameters).
    {.name = "qwen3-32b",
     .source = "Qwen/Qwen3-32B config.json",
     .num_hidden_layers = 64,
     .num_attention_heads = 64,
     .num_key_value_heads = 8,
     .head_dim = 128,
     .hidden_size = 5120,
     .intermediate_size = 25600,
     .vocab_size = 151936,
     .max_position_embeddings = 40960,
     .weight_dtype = "bfloat16"},
    // Qwen/Qwen3-30B-A3B-Instruct-2507 (qwen3_moe): every one of the 48 layers is sparse
    // (decoder_sparse_step 1, mlp_only_layers []) with 128 experts of moe_intermediate_size 768,
    // 8 per token, no shared expert; max_position_embeddings 262144 (the 2507 release; the
    // original Qwen3-30B-A3B has 40960). Estimated 30,532,110,336 parameters (Hub: 30.5B), of
    // which 2,730,491,904 per token outside the embedding and LM head.
    {.name = "qwen3-30b-a3b",
     .source = "Qwen/Qwen3-30B-A3B-Instruct-2507 config.json",
     .num_hidden_layers = 48,
     .num_attention_heads = 32,
     .num_key_value_heads = 4,
     .head_dim = 128,
     .hidden_size = 2048,
     .intermediate_size = 6144,
     .vocab_size = 151936,
     .max_position_embeddings = 262144,
     .moe = MoeDims{128, 0, 768, 0, 8},
     .weight_dtype = "bfloat16"},
    // mistralai/Mixtral-8x7B-v0.1 (mixtral): every one of the 32 layers is sparse, 8 experts of
    // intermediate_size 14336, 2 per token; "sliding_window": null (every layer full
    // attention; the instruction-tuned release has the same geometry). Estimated
    // 46,702,792,704 parameters (Hub: 46.7B; router and norms included, no biases).
    {.name = "mixtral-8x7b-v0.1",
     .source = "mistralai/Mixtral-8x7B-v0.1 config.json",
     .num_hidden_layers = 32,
     .num_attention_heads = 32,
     .num_key_value_heads = 8,
     .head_dim = 128,  // 4096 / 32
     .hidden_size = 4096,
     .intermediate_size = 14336,
     .vocab_size = 32000,
     .max_position_embeddings = 32768,
     .moe = MoeDims{8, 0, 14336, 0, 2},
     .weight_dtype = "bfloat16"},
    // microsoft/Phi-mini-MoE-instruct (phimoe): 32 sparse layers of 16 experts of
    // intermediate_size 960, 2 per token, head_dim 128 its own field; "sliding_window": 2047
    // with no per-layer pattern, which vLLM applies to every layer (PhiMoEAttention passes no
    // per-layer window, so Attention takes cache_config.sliding_window, the config's), as
    // for Phi-3-mini. The attention projections and the LM head have biases, the norms are
    // LayerNorms; the estimate from the config leaves those vectors out (Hub: 7.65B).
    {.name = "phi-mini-moe",
     .source = "microsoft/Phi-mini-MoE-instruct config.json",
     .num_hidden_layers = 32,
     .num_attention_heads = 32,
     .num_key_value_heads = 8,
     .head_dim = 128,
     .hidden_size = 4096,
     .intermediate_size = 960,
     .vocab_size = 32064,
     .max_position_embeddings = 4096,
     .sliding_window = 2047,
     .moe = MoeDims{16, 0, 960, 0, 2},
     .weight_dtype = "bfloat16"},
    // google/gemma-2-9b-it: the instruction-tuned checkpoint, stored in bfloat16. The base
    // google/gemma-2-9b has the same geometry but ships float32 weights (torch_dtype float32),
    // which would make fp32 the default KV dtype; engines serve both in bf16.
    {.name = "gemma-2-9b",
     .source = "google/gemma-2-9b-it config.json",
     .num_hidden_layers = 42,
     .num_attention_heads = 16,
     .num_key_value_heads = 8,
     .head_dim = 256,
     .hidden_size = 3584,
     .intermediate_size = 14336,
     .vocab_size = 256000,
     .max_position_embeddings = 8192,
     .sliding_window = 4096,
     .global_every = 2,  // 21 sliding (even i) + 21 global
     .tie_word_embeddings = true,
     .weight_dtype = "bfloat16",
     .parameter_count = 9'241'705'984},
    // google/gemma-3-27b-it, its text_config: sliding_window 1024, sliding_window_pattern 6
    // (five local layers per global one: i = 5, 11, ..., 59 are global -> 10 global, 52 local).
    // The parameter count includes the SigLIP vision tower the -it checkpoint ships.
    {.name = "gemma-3-27b",
     .source = "google/gemma-3-27b-it config.json (text_config)",
     .num_hidden_layers = 62,
     .num_attention_heads = 32,
     .num_key_value_heads = 16,
     .head_dim = 128,
     .hidden_size = 5376,
     .intermediate_size = 21504,
     .vocab_size = 262208,
     .max_position_embeddings = 131072,
     .sliding_window = 1024,
     .global_every = 6,
     .tie_word_embeddings = true,
     .weight_dtype = "bfloat16",
     .parameter_count = 27'432'406'640},
    // deepseek-ai/DeepSeek-V3: MLA with kv_lora_rank 512 and a 64-wide decoupled RoPE key;
    // 256 routed + 1 shared experts of 2048, the first 3 layers dense. torch_dtype is
    // bfloat16 but quantization_config stores the weights as fp8 e4m3 in 128x128 blocks, each
    // with an fp32 scale. The Hub's safetensors total, 684,531,386,000, includes the 14B
    // multi-token-prediction module that engines load only for speculative decoding.
    {.name = "deepseek-v3",
     .source = "deepseek-ai/DeepSeek-V3 config.json",
     .num_hidden_layers = 61,
     .num_attention_heads = 128,
     .num_key_value_heads = 128,
     .head_dim = 0,  // MLA: widths come from mla
     .hidden_size = 7168,
     .intermediate_size = 18432,
     .vocab_size = 129280,
     .max_position_embeddings = 163840,
     .mla = MlaDims{512, 64, 128, 128, 1536},
     .moe = MoeDims{256, 1, 2048, 3, 8},
     .weight_dtype = "bfloat16",
     .weight_bits = 8,
     .fp8_block = 128,
     .parameter_count = 684'531'386'000},
    // microsoft/Phi-3-mini-4k-instruct: multi-head attention (32 KV heads = 32 heads),
    // head_dim 3072 / 32 = 96. Its config sets "sliding_window": 2047 for every layer, which
    // transformers' flash-attention path applies and vLLM serves (vLLM PR #4380 made that
    // odd-sized window work in its block manager).
    {.name = "phi-3-mini-4k",
     .source = "microsoft/Phi-3-mini-4k-instruct config.json",
     .num_hidden_layers = 32,
     .num_attention_heads = 32,
     .num_key_value_heads = 32,
     .head_dim = 96,
     .hidden_size = 3072,
     .intermediate_size = 8192,
     .vocab_size = 32064,
     .max_position_embeddings = 4096,
     .sliding_window = 2047,
     .weight_dtype = "bfloat16",
     .parameter_count = 3'821'079'552},
    // The seed guide's worked example: a hypothetical architecture, not a real model. It gives
    // no MLP or vocabulary, so a budget needs --params or --weights-bytes; its 4,096 positions
    // are the guide's per-sequence cap (3,072 prompt + 1,024 generated).
    {.name = "seed-example",
     .source = "seed guide worked example (hypothetical: 40 layers, 8 KV heads, head_dim 128)",
     .num_hidden_layers = 40,
     .num_attention_heads = 40,
     .num_key_value_heads = 8,
     .head_dim = 128,
     .hidden_size = 5120,  // 40 heads x 128
     .max_position_embeddings = 4096},
};

ModelSpec to_model(const PresetRow& row) {
  ModelSpec m;
  m.name = std::string(row.name);
  m.source = std::string(row.source);
  m.num_hidden_layers = row.num_hidden_layers;
  m.num_attention_heads = row.num_attention_heads;
  m.num_key_value_heads = row.num_key_value_heads;
  m.head_dim = row.head_dim;
  m.hidden_size = row.hidden_size;
  m.intermediate_size = row.intermediate_size;
  m.vocab_size = row.vocab_size;
  m.max_position_embeddings = row.max_position_embeddings;
  for (std::int64_t i = 0; i < row.num_hidden_layers; ++i) {
    const bool global = row.global_every > 0 && (i + 1) % row.global_every == 0;
    m.layer_window_tokens.push_back(global ? 0 : row.sliding_window);
  }
  m.mla = row.mla;
  m.moe = row.moe;
  m.tie_word_embeddings = row.tie_word_embeddings;
  m.weight_dtype = std::string(row.weight_dtype);
  m.weight_bits = row.weight_bits;
  if (row.fp8_block > 0) {
    WeightQuantization q;
    q.method = WeightQuantMethod::fp8;
    q.method_name = "fp8";
    q.bits = 8;
    q.block_rows = q.block_cols = row.fp8_block;
    m.quantization = q;
  }
  m.attention_bias = row.attention_bias;
  m.parameter_count = row.parameter_count;
  return m;
}

std::vector<ModelSpec> build_presets() {
  std::vector<ModelSpec> presets;
  for (const PresetRow& row : kPresets) {
    presets.push_back(to_model(row));
    validate_model(presets.back(), "");
  }
  return presets;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

const std::vector<ModelSpec>& model_presets() {
  static const std::vector<ModelSpec> presets = build_presets();
  return presets;
}

const ModelSpec& find_model_preset(std::string_view name) {
  const std::string key = lower(name);
  std::string known;
  for (const auto& m : model_presets()) {
    if (m.name == key) return m;
    known += (known.empty() ? "" : ", ") + m.name;
  }
  throw InputError(Location{"", 0, kOptModel},
                   "no preset named \"" + std::string(name) + "\" (known: " + known + "; or use " + kOptConfig +
                       " FILE)");
}

}  // namespace kvsim
