// The built-in model presets. Every number is the value of the published Hugging Face
// config.json of the model named in `source`; parameter counts are the "safetensors total" the
// Hub reports for that checkpoint (exact), unless the comment says otherwise.
#include <algorithm>
#include <cctype>
#include <string>

#include "kvsim/error.h"
#include "kvsim/model.h"

namespace kvsim {
namespace {

std::vector<std::int64_t> all_layers(std::int64_t layers, std::int64_t window) {
  return std::vector<std::int64_t>(static_cast<std::size_t>(layers), window);
}

// Layer i is global (full attention) when (i + 1) % pattern == 0, else it slides over
// `window` positions: Gemma 3's rule (transformers Gemma3TextConfig.layer_types:
// "sliding_attention" if bool((i + 1) % sliding_window_pattern) else "full_attention").
// Gemma 2 is the same rule with pattern 2 (Gemma2DecoderLayer: is_sliding = not bool(layer_idx
// % 2)), so its even-indexed layers 0, 2, 4, ... slide and the odd ones are global.
std::vector<std::int64_t> local_global(std::int64_t layers, std::int64_t window, std::int64_t pattern) {
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < layers; ++i) out.push_back((i + 1) % pattern != 0 ? window : 0);
  return out;
}

std::vector<ModelSpec> build_presets() {
  std::vector<ModelSpec> presets;

  {  // meta-llama/Llama-3.1-8B: hidden 4096 / 32 heads -> head_dim 128 (no head_dim field).
    ModelSpec m;
    m.name = "llama-3.1-8b";
    m.source = "meta-llama/Llama-3.1-8B config.json";
    m.num_hidden_layers = 32;
    m.num_attention_heads = 32;
    m.num_key_value_heads = 8;
    m.head_dim = 128;
    m.hidden_size = 4096;
    m.intermediate_size = 14336;
    m.vocab_size = 128256;
    m.max_position_embeddings = 131072;
    m.layer_window_tokens = all_layers(32, 0);
    m.weight_dtype = "bfloat16";
    m.parameter_count = 8'030'261'248;
    presets.push_back(m);
  }
  {  // meta-llama/Llama-3.1-70B: hidden 8192 / 64 heads -> head_dim 128.
    ModelSpec m;
    m.name = "llama-3.1-70b";
    m.source = "meta-llama/Llama-3.1-70B config.json";
    m.num_hidden_layers = 80;
    m.num_attention_heads = 64;
    m.num_key_value_heads = 8;
    m.head_dim = 128;
    m.hidden_size = 8192;
    m.intermediate_size = 28672;
    m.vocab_size = 128256;
    m.max_position_embeddings = 131072;
    m.layer_window_tokens = all_layers(80, 0);
    m.weight_dtype = "bfloat16";
    m.parameter_count = 70'553'706'496;
    presets.push_back(m);
  }
  {  // mistralai/Mistral-7B-v0.1: "sliding_window": 4096 with no per-layer pattern, so every
     // layer slides (transformers and vLLM both apply it to all 32 layers).
    ModelSpec m;
    m.name = "mistral-7b-v0.1";
    m.source = "mistralai/Mistral-7B-v0.1 config.json";
    m.num_hidden_layers = 32;
    m.num_attention_heads = 32;
    m.num_key_value_heads = 8;
    m.head_dim = 128;
    m.hidden_size = 4096;
    m.intermediate_size = 14336;
    m.vocab_size = 32000;
    m.max_position_embeddings = 32768;
    m.layer_window_tokens = all_layers(32, 4096);
    m.weight_dtype = "bfloat16";
    m.parameter_count = 7'241'732'096;
    presets.push_back(m);
  }
  {  // Qwen/Qwen2.5-7B: the config carries "sliding_window": 131072 but "use_sliding_window":
     // false, and transformers' Qwen2Config sets sliding_window = None unless use_sliding_window
     // (vLLM's Qwen2 model does the same), so every layer is full attention.
    ModelSpec m;
    m.name = "qwen2.5-7b";
    m.source = "Qwen/Qwen2.5-7B config.json";
    m.num_hidden_layers = 28;
    m.num_attention_heads = 28;
    m.num_key_value_heads = 4;
    m.head_dim = 128;  // 3584 / 28
    m.hidden_size = 3584;
    m.intermediate_size = 18944;
    m.vocab_size = 152064;
    m.max_position_embeddings = 131072;
    m.layer_window_tokens = all_layers(28, 0);
    m.weight_dtype = "bfloat16";
    m.parameter_count = 7'615'616'512;
    presets.push_back(m);
  }
  {  // google/gemma-2-9b-it: the instruction-tuned checkpoint, stored in bfloat16. The base
     // google/gemma-2-9b has the same geometry but ships float32 weights (torch_dtype float32),
     // which would make fp32 the default KV dtype; engines serve both in bf16.
    ModelSpec m;
    m.name = "gemma-2-9b";
    m.source = "google/gemma-2-9b-it config.json";
    m.num_hidden_layers = 42;
    m.num_attention_heads = 16;
    m.num_key_value_heads = 8;
    m.head_dim = 256;
    m.hidden_size = 3584;
    m.intermediate_size = 14336;
    m.vocab_size = 256000;
    m.max_position_embeddings = 8192;
    m.layer_window_tokens = local_global(42, 4096, 2);  // 21 sliding (even i) + 21 global
    m.tie_word_embeddings = true;
    m.weight_dtype = "bfloat16";
    m.parameter_count = 9'241'705'984;
    presets.push_back(m);
  }
  {  // google/gemma-3-27b-it, its text_config: sliding_window 1024, sliding_window_pattern 6
     // (five local layers per global one: i = 5, 11, ..., 59 are global -> 10 global, 52 local).
     // The parameter count includes the SigLIP vision tower the -it checkpoint ships.
    ModelSpec m;
    m.name = "gemma-3-27b";
    m.source = "google/gemma-3-27b-it config.json (text_config)";
    m.num_hidden_layers = 62;
    m.num_attention_heads = 32;
    m.num_key_value_heads = 16;
    m.head_dim = 128;
    m.hidden_size = 5376;
    m.intermediate_size = 21504;
    m.vocab_size = 262208;
    m.max_position_embeddings = 131072;
    m.layer_window_tokens = local_global(62, 1024, 6);
    m.tie_word_embeddings = true;
    m.weight_dtype = "bfloat16";
    m.parameter_count = 27'432'406'640;
    presets.push_back(m);
  }
  {  // deepseek-ai/DeepSeek-V3: MLA with kv_lora_rank 512 and a 64-wide decoupled RoPE key;
     // 256 routed + 1 shared experts of 2048, the first 3 layers dense. torch_dtype is
     // bfloat16 but quantization_config stores the weights as fp8 e4m3 (128x128 blocks), hence
     // weight_bits 8. The Hub's safetensors total, 684,531,386,000, includes the 14B
     // multi-token-prediction module that engines load only for speculative decoding.
    ModelSpec m;
    m.name = "deepseek-v3";
    m.source = "deepseek-ai/DeepSeek-V3 config.json";
    m.num_hidden_layers = 61;
    m.num_attention_heads = 128;
    m.num_key_value_heads = 128;
    m.head_dim = 0;  // MLA: widths come from mla
    m.hidden_size = 7168;
    m.intermediate_size = 18432;
    m.vocab_size = 129280;
    m.max_position_embeddings = 163840;
    m.layer_window_tokens = all_layers(61, 0);
    m.mla = MlaDims{512, 64, 128, 128, 1536};
    m.moe = MoeDims{256, 1, 2048, 3};
    m.weight_dtype = "bfloat16";
    m.weight_bits = 8;
    m.parameter_count = 684'531'386'000;
    presets.push_back(m);
  }
  {  // microsoft/Phi-3-mini-4k-instruct: multi-head attention (32 KV heads = 32 heads),
     // head_dim 3072 / 32 = 96. Its config sets "sliding_window": 2047 for every layer, which
     // transformers' flash-attention path applies and vLLM serves (vLLM PR #4380 made that
     // odd-sized window work in its block manager).
    ModelSpec m;
    m.name = "phi-3-mini-4k";
    m.source = "microsoft/Phi-3-mini-4k-instruct config.json";
    m.num_hidden_layers = 32;
    m.num_attention_heads = 32;
    m.num_key_value_heads = 32;
    m.head_dim = 96;
    m.hidden_size = 3072;
    m.intermediate_size = 8192;
    m.vocab_size = 32064;
    m.max_position_embeddings = 4096;
    m.layer_window_tokens = all_layers(32, 2047);
    m.weight_dtype = "bfloat16";
    m.parameter_count = 3'821'079'552;
    presets.push_back(m);
  }
  {  // The seed guide's worked example: a hypothetical architecture, not a real model. It gives
     // no MLP or vocabulary, so a budget needs --params or --weights-bytes; its 4,096 positions
     // are the guide's per-sequence cap (3,072 prompt + 1,024 generated).
    ModelSpec m;
    m.name = "seed-example";
    m.source = "seed guide worked example (hypothetical: 40 layers, 8 KV heads, head_dim 128)";
    m.num_hidden_layers = 40;
    m.num_attention_heads = 40;
    m.num_key_value_heads = 8;
    m.head_dim = 128;
    m.hidden_size = 5120;  // 40 heads x 128
    m.max_position_embeddings = 4096;
    m.layer_window_tokens = all_layers(40, 0);
    presets.push_back(m);
  }
  for (const auto& m : presets) validate_model(m, "");
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
  throw InputError(Location{"", 0, "--model"},
                   "no preset named \"" + std::string(name) + "\" (known: " + known +
                       "; or use --config FILE)");
}

}  // namespace kvsim
