// Reading Hugging Face config.json files: published configs give the preset geometry, and every
// bad config is an InputError naming the file and the field.
#include <catch2/catch.hpp>
#include <string>

#include "kvsim/budget.h"
#include "kvsim/error.h"
#include "kvsim/model.h"
#include "kvsim/weights.h"
#include "test_support.h"

using namespace kvsim;
using kvsim::test::load_error;

namespace {

std::string config(const std::string& name) { return std::string(KVSIM_SOURCE_DIR) + "/tests/data/configs/" + name; }

std::int64_t bf16_bytes_per_token(const ModelSpec& m) { return kv_layout(m, KvOptions{}).bytes_per_token(); }

}  // namespace

TEST_CASE("a published Llama config gives the preset's geometry") {
  const ModelSpec m = load_hf_config(config("llama-3.1-8b.json"));
  const ModelSpec& preset = find_model_preset("llama-3.1-8b");
  CHECK(m.num_hidden_layers == 32);
  CHECK(m.num_attention_heads == 32);
  CHECK(m.num_key_value_heads == 8);
  CHECK(m.head_dim == 4096 / 32);  // no head_dim field: hidden_size / num_attention_heads
  CHECK(m.max_position_embeddings == 131072);
  CHECK(m.weight_dtype == "bfloat16");
  CHECK(m.layer_window_tokens == preset.layer_window_tokens);
  CHECK(bf16_bytes_per_token(m) == 131'072);
  CHECK(estimate_parameter_count(m) == 8'030'261'248);  // matches the published count exactly
  CHECK(m.source.find("model_type llama") != std::string::npos);
}

TEST_CASE("a preset holds the weights of its published config, tensor by tensor") {
  // The start-up rule subtracts what device_weights() counts, so a preset that leaves out a
  // tensor its config implies (Qwen2's q/k/v biases: 28 layers x (3584 + 2 x 512) = 129,024
  // parameters; DeepSeek-V3's fp32 scale for every 128 x 128 block of fp8) hands out that
  // much more KV budget than the same model given as its config.json.
  const std::pair<const char*, const char*> pairs[] = {
      {"llama-3.1-8b", "llama-3.1-8b.json"}, {"mistral-7b-v0.1", "mistral-7b-v0.1.json"},
      {"qwen2.5-7b", "qwen2.5-7b.json"},     {"gemma-2-9b", "gemma-2-9b-it.json"},
      {"deepseek-v3", "deepseek-v3.json"}};
  for (const auto& [preset, file] : pairs) {
    INFO(preset);
    KvOptions kv;
    kv.tensor_parallel = std::string(preset) == "deepseek-v3" ? 8 : 1;
    const std::vector<DeviceWeights> a = device_weights(find_model_preset(preset), kv, WeightServing{});
    const std::vector<DeviceWeights> b = device_weights(load_hf_config(config(file)), kv, WeightServing{});
    REQUIRE(a.size() == 1);
    REQUIRE(b.size() == 1);
    CHECK(a[0].bytes == b[0].bytes);
  }
  // The biases by hand: two bytes each in bfloat16.
  KvOptions one;
  const ModelSpec& qwen = find_model_preset("qwen2.5-7b");
  ModelSpec no_bias = qwen;
  no_bias.attention_bias = false;
  CHECK(device_weights(qwen, one, WeightServing{})[0].bytes - device_weights(no_bias, one, WeightServing{})[0].bytes ==
        28 * (3584 + 2 * 512) * 2);
}

TEST_CASE("sliding windows as each family spells them") {
  // Qwen2.5: sliding_window 131072 but use_sliding_window false -> all full.
  const ModelSpec qwen = load_hf_config(config("qwen2.5-7b.json"));
  CHECK(qwen.layer_window_tokens == std::vector<std::int64_t>(28, 0));
  CHECK(bf16_bytes_per_token(qwen) == 28 * 4 * 256 * 2);
  // Qwen2 with the window on: layers i >= max_window_layers (4) slide.
  const ModelSpec qwen_on = load_hf_config(config("qwen-sliding-enabled.json"));
  CHECK(qwen_on.layer_window_tokens == std::vector<std::int64_t>{0, 0, 0, 0, 4096, 4096});
  // Mistral: one window for every layer.
  CHECK(load_hf_config(config("mistral-7b-v0.1.json")).layer_window_tokens == std::vector<std::int64_t>(32, 4096));
  // Gemma 2: no layer_types or pattern; model_type gemma2 makes even layers slide.
  const ModelSpec gemma2 = load_hf_config(config("gemma-2-9b-it.json"));
  CHECK(gemma2.layer_window_tokens == find_model_preset("gemma-2-9b").layer_window_tokens);
  CHECK(gemma2.tie_word_embeddings);
  CHECK(estimate_parameter_count(gemma2) == 9'241'705'984 - 42 * 2 * 3584);  // Gemma's 2 extra norms per layer
  // Explicit layer_types win.
  CHECK(load_hf_config(config("layer-types.json")).layer_window_tokens == std::vector<std::int64_t>{128, 0, 128, 0});
}

TEST_CASE("a multimodal config is read from its text_config") {
  const ModelSpec m = load_hf_config(config("gemma-3-27b-it.json"));
  CHECK(m.num_hidden_layers == 62);
  CHECK(m.num_key_value_heads == 16);
  CHECK(m.head_dim == 128);
  CHECK(m.weight_dtype == "bfloat16");          // from the top level
  CHECK(m.max_position_embeddings == 131072);   // Gemma3TextConfig's default
  // sliding_window_pattern left to its default of 6: 10 global, 52 local layers.
  CHECK(m.layer_window_tokens == find_model_preset("gemma-3-27b").layer_window_tokens);
  const KvLayout l = kv_layout(m, KvOptions{});
  CHECK(kv_bytes_for_tokens(l, 32768) == 10LL * 32768 * 8192 + 52LL * 1024 * 8192);
}

TEST_CASE("an MLA config with fp8 weights") {
  const ModelSpec m = load_hf_config(config("deepseek-v3.json"));
  REQUIRE(m.mla.has_value());
  CHECK(m.mla->kv_lora_rank == 512);
  CHECK(m.mla->qk_rope_head_dim == 64);
  CHECK(m.mla->q_lora_rank == 1536);
  CHECK(m.weight_bits == 8);  // quantization_config: fp8
  CHECK(bf16_bytes_per_token(m) == 61 * (512 + 64) * 2);
  CHECK(estimate_parameter_count(m) == estimate_parameter_count(find_model_preset("deepseek-v3")));
  REQUIRE(m.moe.has_value());
  CHECK(m.moe->routed_experts == 256);
  CHECK(m.moe->dense_layers == 3);
}

TEST_CASE("defaults: MHA without num_key_value_heads, 4-bit weights with an fp16 cache") {
  const ModelSpec mha = load_hf_config(config("mha-no-kv-heads.json"));
  CHECK(mha.num_key_value_heads == 16);
  CHECK(mha.head_dim == 2048 / 16);
  CHECK(bf16_bytes_per_token(mha) == 24 * 16 * 256 * 2);
  // The seed's pitfall: 4-bit weights say nothing about the cache.
  const ModelSpec awq = load_hf_config(config("awq-4bit.json"));
  CHECK(awq.weight_bits == 4);
  CHECK(default_kv_dtype(awq) == KvDtype::fp16);
  BudgetOptions o;
  o.device = "L4";
  CHECK(derive_budget(awq, KvOptions{}, o).weights_bytes == 8'030'261'248LL * 4 / 8);
  // The seed's 40-KV-head row as a config.
  CHECK(kv_layout(load_hf_config(config("seed-40-kv-heads.json")), KvOptions{}).bytes_per_token() == 40 * 40 * 256 * 2);
}

TEST_CASE("a quantization scheme whose bits kvsim does not read needs the weights given") {
  // gpt-oss's MXFP4 (about 4.25 bits a weight with its scales) under torch_dtype bfloat16:
  // sizing at 16 bits would overstate the weights fourfold, so the budget asks for them.
  const std::string base = R"({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
      "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
      "max_position_embeddings": 8192, "torch_dtype": "bfloat16", "quantization_config": )";
  const ModelSpec mx = parse_hf_config(base + R"({"quant_method": "mxfp4"}})", "mx.json");
  CHECK(mx.unread_quantization == "mxfp4");
  CHECK(mx.weight_bits == 0);
  BudgetOptions o;
  o.device = "H100-80GB";
  CHECK_THROWS_WITH(derive_budget(mx, KvOptions{}, o),
                    Catch::Contains("mx.json: quantization_config.quant_method: \"mxfp4\" stores weights in a scheme "
                                    "kvsim does not read the bits per weight of") &&
                        Catch::Contains("give --weights-bytes"));
  // Given, they are used: 8 GB, or 8,030,261,248 parameters at 4 bits.
  o.weights_bytes = 8'000'000'000;
  CHECK(derive_budget(mx, KvOptions{}, o).weights_bytes == 8'000'000'000);
  o.weights_bytes.reset();
  o.weight_bits = 4;
  CHECK(derive_budget(mx, KvOptions{}, o).weights_bytes == 8'030'261'248LL * 4 / 8);
  // FBGEMM's fp8 is a byte a weight; an empty config, or compressed-tensors without a weights
  // group, quantizes no weight.
  CHECK(parse_hf_config(base + R"({"quant_method": "fbgemm_fp8"}})", "f.json").weight_bits == 8);
  CHECK(parse_hf_config(base + R"({}})", "e.json").unread_quantization.empty());
  CHECK(parse_hf_config(base + R"({"quant_method": "compressed-tensors", "kv_cache_scheme": {"num_bits": 8}}})", "c.json")
            .unread_quantization.empty());
  // `bits` is the width for AWQ, GPTQ and AutoRound only; under an unknown name it is not trusted.
  CHECK(parse_hf_config(base + R"({"quant_method": "banana", "bits": 3}})", "b.json").unread_quantization == "banana");
  CHECK(parse_hf_config(base + R"({"quant_method": "auto-round", "bits": 4}})", "a.json").weight_bits == 4);
  // bitsandbytes says its width only through a load flag.
  CHECK(parse_hf_config(base + R"({"quant_method": "bitsandbytes"}})", "q.json").unread_quantization == "bitsandbytes");
  CHECK(parse_hf_config(base + R"({"quant_method": "bitsandbytes", "load_in_4bit": true}})", "q.json").weight_bits == 4);
  // Both flags: transformers' BitsAndBytesConfig refuses that, and so does kvsim.
  CHECK_THROWS_WITH(parse_hf_config(base + R"({"quant_method": "bitsandbytes", "load_in_4bit": true, "load_in_8bit": true}})",
                                    "q.json"),
                    Catch::Contains("q.json") && Catch::Contains("quantization_config.load_in_8bit") &&
                        Catch::Contains("both true"));
  // AWQ's width as AutoAWQ writes it (w_bit), and no width at all: vLLM's AWQConfig requires
  // one, where kvsim used to assume 4 bits.
  CHECK(parse_hf_config(base + R"({"quant_method": "awq", "w_bit": 8, "group_size": 128}})", "w.json").weight_bits == 8);
  CHECK(parse_hf_config(base + R"({"quant_method": "awq", "w_bit": 8, "group_size": 128}})", "w.json").quantization->bits == 8);
  CHECK_THROWS_WITH(parse_hf_config(base + R"({"quant_method": "awq", "group_size": 128}})", "n.json"),
                    Catch::Contains("n.json") && Catch::Contains("quantization_config.bits") && Catch::Contains("missing"));
  // Not an object: an error naming the field.
  CHECK_THROWS_WITH(parse_hf_config(base + R"("awq"})", "s.json"),
                    Catch::Contains("s.json") && Catch::Contains("field 'quantization_config': expected an object"));
}

TEST_CASE("rope scaling stretches the default maximum length as vLLM derives it") {
  // vllm/config/model.py, _get_and_verify_max_len: a factor multiplies the length, which YaRN
  // first sets to its original_max_position_embeddings; su, longrope and llama3 keep it; Gemma 3
  // is scaled already.
  const auto with = [](const std::string& type, const std::string& rope) {
    return parse_hf_config(R"({"model_type": ")" + type + R"(", "hidden_size": 4096, "num_attention_heads": 32,
        "num_hidden_layers": 2, "num_key_value_heads": 8, "max_position_embeddings": 40960, "rope_scaling": )" +
                               rope + "}",
                           "rope.json");
  };
  // Qwen3's documented YaRN setting: 32,768 x 4 = 131,072 (above max_position_embeddings).
  const ModelSpec yarn = with("qwen3", R"({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})");
  CHECK(context_length(yarn) == 131'072);
  CHECK(yarn.max_position_embeddings == 40'960);  // the rotary table's own length is unchanged
  CHECK(std::string(context_length_source(yarn)) == "rope-scaled max_position_embeddings");
  CHECK(kv_layout(yarn, KvOptions{}).max_model_len == 131'072);
  // "type" as older configs spell it; linear and dynamic scale max_position_embeddings.
  CHECK(context_length(with("llama", R"({"type": "linear", "factor": 2})")) == 81'920);
  CHECK(context_length(with("llama", R"({"rope_type": "dynamic", "factor": 1.5})")) == 61'440);
  // Kept as they are: llama3's own scaling, a type without a factor, Gemma 3, null.
  CHECK(context_length(with("llama", R"({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192})")) == 40'960);
  CHECK(context_length(with("llama", R"({"rope_type": "default"})")) == 40'960);
  CHECK(context_length(with("gemma3_text", R"({"rope_type": "linear", "factor": 8.0}, "sliding_window": null)")) == 40'960);
  CHECK(context_length(with("llama", "null")) == 40'960);
  // transformers v5's rope_parameters, one entry per layer type.
  const ModelSpec nested = parse_hf_config(R"({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
      "num_hidden_layers": 2, "max_position_embeddings": 4096, "rope_parameters": {"full_attention": {"rope_type": "linear",
      "factor": 4.0, "rope_theta": 1e6}, "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}})",
                                           "v5.json");
  CHECK(context_length(nested) == 16'384);
  // Wrong types are errors naming the field.
  CHECK_THROWS_WITH(with("llama", R"({"rope_type": "linear", "factor": "2"})"),
                    Catch::Contains("rope.json") && Catch::Contains("rope_scaling.factor"));
  // YaRN without its original length scales max_position_embeddings (transformers' default);
  // a whole number written as a float is read.
  CHECK(context_length(with("llama", R"({"rope_type": "yarn", "factor": 2})")) == 81'920);
  CHECK(context_length(with("llama", R"({"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 32768.0})")) ==
        131'072);
  CHECK_THROWS_WITH(with("llama", R"({"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 0.5})"),
                    Catch::Contains("rope_scaling.original_max_position_embeddings"));
  CHECK_THROWS_WITH(with("llama", R"("yarn")"), Catch::Contains("field 'rope_scaling': expected an object"));
}

TEST_CASE("bad configs: the message names the file and the field") {
  const std::string not_json = config("bad/not-json.json");
  CHECK_THAT(load_error(not_json), Catch::Contains(not_json) && Catch::Contains("not valid JSON") &&
                                       Catch::Contains("line 4") && Catch::Contains("column"));
  CHECK_THAT(load_error(not_json), !Catch::Contains("json.exception"));
  // A NUL byte ends nlohmann's input, so the field after it would be dropped unread: line 3
  // (two newlines before it), column 2 (after the closing brace).
  CHECK_THROWS_WITH(parse_hf_config(std::string("{\n  \"num_hidden_layers\": 32\n}") + '\0' + ", \"x\": 1}", "nul.json"),
                    Catch::Contains("nul.json:3: a NUL byte at column 2: expected text"));

  const std::string missing = config("bad/missing-layers.json");
  CHECK_THAT(load_error(missing), Catch::Contains(missing) && Catch::Contains("field 'num_hidden_layers'") &&
                                      Catch::Contains("missing"));

  const std::string zero = config("bad/zero-heads.json");
  CHECK_THAT(load_error(zero), Catch::Contains(zero) && Catch::Contains("field 'num_attention_heads'") &&
                                   Catch::Contains("got 0"));

  const std::string head_dim = config("bad/head-dim-not-dividing.json");
  CHECK_THAT(load_error(head_dim), Catch::Contains(head_dim) && Catch::Contains("field 'head_dim'") &&
                                       Catch::Contains("4000") && Catch::Contains("48"));

  const std::string types = config("bad/layer-types-length.json");
  CHECK_THAT(load_error(types), Catch::Contains(types) && Catch::Contains("field 'layer_types'") &&
                                    Catch::Contains("3 entries") && Catch::Contains("4"));

  const std::string kv = config("bad/kv-heads-not-dividing.json");
  CHECK_THAT(load_error(kv), Catch::Contains(kv) && Catch::Contains("field 'num_key_value_heads'"));

  const std::string not_int = config("bad/layers-not-integer.json");
  CHECK_THAT(load_error(not_int), Catch::Contains("field 'num_hidden_layers'") && Catch::Contains("\"32\""));

  const std::string mla = config("bad/mla-incomplete.json");
  CHECK_THAT(load_error(mla), Catch::Contains("field 'qk_rope_head_dim'") && Catch::Contains("missing"));

  const std::string window = config("bad/sliding-without-window.json");
  CHECK_THAT(load_error(window), Catch::Contains("field 'sliding_window'") && Catch::Contains("layer_types[0]"));

  CHECK_THAT(load_error(config("bad/top-level-array.json")), Catch::Contains("JSON object"));
  // Fields of the wrong shape are errors, not ignored.
  const std::string dense = R"({"model_type": "qwen2", "hidden_size": 1024, "num_attention_heads": 8,
      "num_hidden_layers": 4, "max_position_embeddings": 4096, )";
  CHECK_THROWS_WITH(parse_hf_config(dense + R"("text_config": "x"})", "t.json"),
                    Catch::Contains("t.json") && Catch::Contains("field 'text_config': expected an object, got \"x\""));
  CHECK_THROWS_WITH(parse_hf_config(dense + R"("use_sliding_window": true, "sliding_window": 1024, "max_window_layers": -5})",
                                    "w.json"),
                    Catch::Contains("field 'max_window_layers': expected a non-negative integer, got -5"));
  CHECK_THROWS_WITH(parse_hf_config(dense + R"("n_routed_experts": 8, "moe_intermediate_size": 256,
                                              "first_k_dense_replace": 5})",
                                    "m.json"),
                    Catch::Contains("field 'first_k_dense_replace': 5 dense layers, more than the 4 layers"));
  CHECK_THAT(load_error(config("bad/no-such-file.json")), Catch::Contains("no-such-file.json") &&
                                                             Catch::Contains("cannot open"));
}

TEST_CASE("config text edge cases") {
  CHECK_THROWS_WITH(parse_hf_config("", "empty.json"), Catch::Contains("empty.json") && Catch::Contains("not valid JSON"));
  CHECK_THROWS_WITH(parse_hf_config(R"({"num_hidden_layers": 3000000, "num_attention_heads": 8, "head_dim": 64})", "big.json"),
                    Catch::Contains("implausible"));
  CHECK_THROWS_WITH(parse_hf_config(R"({"num_hidden_layers": 2.5, "num_attention_heads": 8, "head_dim": 64})", "f.json"),
                    Catch::Contains("expected an integer"));
  CHECK_THROWS_WITH(
      parse_hf_config(R"({"num_hidden_layers": 2, "num_attention_heads": 8, "head_dim": 64,
                          "sliding_window": 16, "layer_types": ["linear_attention", "full_attention"]})",
                      "l.json"),
      Catch::Contains("layer_types[0]") && Catch::Contains("linear_attention"));
  // null means absent: MHA and full attention.
  const ModelSpec m = parse_hf_config(
      R"({"num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": null, "head_dim": 64,
          "sliding_window": null})",
      "n.json");
  CHECK(m.num_key_value_heads == 8);
  CHECK(m.layer_window_tokens == std::vector<std::int64_t>{0, 0});
}

TEST_CASE("a Qwen3-MoE config: experts per token drive compute, every expert the weights") {
  // Qwen/Qwen3-30B-A3B-Instruct-2507's config.json, the fields kvsim reads.
  const std::string qwen3_moe = R"({"model_type": "qwen3_moe", "num_hidden_layers": 48, "num_attention_heads": 32,
    "num_key_value_heads": 4, "head_dim": 128, "hidden_size": 2048, "intermediate_size": 6144,
    "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1,
    "mlp_only_layers": [], "vocab_size": 151936, "max_position_embeddings": 262144,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16"})";
  const ModelSpec m = parse_hf_config(qwen3_moe, "qwen3-moe.json");
  REQUIRE(m.moe);
  CHECK(m.moe->routed_experts == 128);
  CHECK(m.moe->experts_per_token == 8);
  CHECK(m.moe->expert_intermediate_size == 768);
  CHECK(m.moe->shared_experts == 0);
  // The preset was typed from the same config: the same parameters.
  CHECK(estimate_parameter_count(m) == estimate_parameter_count(find_model_preset("qwen3-30b-a3b")));
  CHECK(split_parameters(m).per_token == 2'730'491'904);
  // Qwen2-MoE's shared expert of 5632 = 4 experts of 1408 (Qwen1.5-MoE-A2.7B).
  std::string shared = qwen3_moe;
  shared.replace(shared.find("\"moe_intermediate_size\": 768"), 28, "\"moe_intermediate_size\": 1408, \"shared_expert_intermediate_size\": 5632");
  CHECK(parse_hf_config(shared, "shared.json").moe->shared_experts == 4);
  std::string sparse_step = qwen3_moe;
  sparse_step.replace(sparse_step.find("\"decoder_sparse_step\": 1"), 24, "\"decoder_sparse_step\": 2");
  CHECK_THROWS_WITH(parse_hf_config(sparse_step, "step.json"),
                    Catch::Contains("step.json") && Catch::Contains("decoder_sparse_step"));
  std::string too_many = qwen3_moe;
  too_many.replace(too_many.find("\"num_experts_per_tok\": 8"), 24, "\"num_experts_per_tok\": 200");
  CHECK_THROWS_WITH(parse_hf_config(too_many, "many.json"), Catch::Contains("num_experts_per_tok"));
  // Two expert counts that disagree: which family's width applies is unknowable (with
  // num_local_experts the experts would be Mixtral's, intermediate_size wide).
  std::string two_counts = qwen3_moe;
  two_counts.replace(two_counts.find("\"num_experts\": 128"), 18, "\"num_experts\": 128, \"num_local_experts\": 8");
  CHECK_THROWS_WITH(parse_hf_config(two_counts, "two.json"),
                    Catch::Contains("two.json: field 'num_experts': 128 experts, but num_local_experts says 8"));
  // Routing without a count: it would be sized as a dense model, a tenth of its weights.
  std::string no_count = qwen3_moe;
  no_count.replace(no_count.find("\"num_experts\": 128, "), 20, "");
  CHECK_THROWS_WITH(parse_hf_config(no_count, "none.json"),
                    Catch::Contains("none.json") && Catch::Contains("num_experts_per_tok") && Catch::Contains("no expert count"));
}

TEST_CASE("DeepSeek's MoE layers: from first_k_dense_replace on, every layer (moe_layer_freq 1 only)") {
  const std::string deepseek = R"({"model_type": "deepseek_v3", "hidden_size": 1024, "num_attention_heads": 8,
      "num_hidden_layers": 4, "max_position_embeddings": 4096, "n_routed_experts": 8, "moe_intermediate_size": 256,
      "first_k_dense_replace": 1, )";
  CHECK(parse_hf_config(deepseek + R"("moe_layer_freq": 1})", "one.json").moe->dense_layers == 1);
  // DeepseekV3DecoderLayer: MoE when i >= first_k_dense_replace and i % moe_layer_freq == 0,
  // so 2 makes layers 1 and 3 dense as well; kvsim counts dense layers as a leading block only.
  CHECK_THROWS_WITH(parse_hf_config(deepseek + R"("moe_layer_freq": 2})", "two.json"),
                    Catch::Contains("two.json") && Catch::Contains("moe_layer_freq") && Catch::Contains("only 1"));
  CHECK_THROWS_WITH(parse_hf_config(deepseek + R"("moe_layer_freq": 0})", "zero.json"),
                    Catch::Contains("moe_layer_freq") && Catch::Contains("expected a positive integer"));
}

TEST_CASE("a config.json key given twice in one object is refused, not read as its last value") {
  // nlohmann (as Python's json) would keep the last hidden_size, 2048, without a word.
  try {
    kvsim::parse_hf_config(R"({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
      "hidden_size": 2048})",
                           "twice.json");
    FAIL("expected an error");
  } catch (const kvsim::InputError& e) {
    CHECK(std::string(e.what()) ==
          "twice.json: hidden_size: given twice in one object (a JSON reader keeps one of them silently, so kvsim "
          "refuses to choose)");
  }
  // Nested, named by its path; the same key in two objects is fine.
  try {
    kvsim::parse_hf_config(R"({"model_type": "llava", "text_config": {"vocab_size": 32000, "vocab_size": 1},
      "vision_config": {"hidden_size": 1024}, "hidden_size": 4096})",
                           "nested.json");
    FAIL("expected an error");
  } catch (const kvsim::InputError& e) {
    CHECK(std::string(e.what()).rfind("nested.json: text_config.vocab_size: given twice in one object", 0) == 0);
  }
}
