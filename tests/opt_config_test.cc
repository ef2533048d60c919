// An OPT config.json sizes its parameters without --params: OPT's modules are counted from
// transformers' modeling_opt.py (learned positions with 2 extra rows, biases, LayerNorm
// with weight and bias, fc1/fc2 without a gate), not with the Llama-shaped estimate.
#include <catch2/catch.hpp>
#include <string>

#include "kvsim/budget.h"
#include "kvsim/error.h"
#include "kvsim/model.h"

using namespace kvsim;

namespace {
std::string config(const std::string& name) { return std::string(KVSIM_SOURCE_DIR) + "/tests/data/configs/" + name; }
}  // namespace

TEST_CASE("an OPT-13B config.json: geometry and a parameter count by hand") {
  // tests/data/configs/opt-13b.json carries facebook/opt-13b's published values: hidden
  // 5120, 40 layers, 40 heads, ffn_dim 20480, vocab 50272, max positions 2048,
  // word_embed_proj_dim 5120 (no projections), do_layer_norm_before true, fp16.
  const ModelSpec m = load_hf_config(config("opt-13b.json"));
  CHECK(m.num_hidden_layers == 40);
  CHECK(m.num_key_value_heads == 40);  // no num_key_value_heads: multi-head attention
  CHECK(m.head_dim == 128);            // 5120 / 40
  CHECK(m.max_position_embeddings == 2048);
  // KV per token: 40 layers x 2 (K, V) x 40 heads x 128 x 2 bytes = 819,200 bytes, the
  // vLLM paper's "800 KB of space per token" for OPT-13B (section 3).
  KvOptions fp16;
  fp16.dtype = KvDtype::fp16;
  CHECK(kv_layout(m, fp16).bytes_per_token() == 819'200);
  // Parameters, by hand:
  //   embed_tokens     50272 x 5120                                  =    257,392,640
  //   embed_positions  (2048 + 2) x 5120                             =     10,496,000
  //   per layer: q, k, v, out_proj 4 x (5120^2 + 5120)               =    104,878,080
  //              fc1 5120 x 20480 + 20480                            =    104,878,080
  //              fc2 20480 x 5120 + 5120                             =    104,862,720
  //              two LayerNorms 2 x (5120 + 5120)                    =         20,480
  //              layer total                                         =    314,639,360
  //   40 layers                                                      = 12,585,574,400
  //   final_layer_norm 5120 + 5120                                   =         10,240
  //   lm_head tied to embed_tokens                                   =              0
  //   total                                                          = 12,853,473,280
  CHECK(m.parameter_count == 12'853'473'280);
  const ModelWeights w = model_weights(m, fp16, BudgetOptions{});
  CHECK(w.parameter_source == "counted from the OPT config");
  CHECK(w.weight_bits == 16);  // torch_dtype float16
  CHECK(w.weights_bytes == 2 * 12'853'473'280LL);
}

TEST_CASE("OPT variants: projections, no final norm, no biases, untied head") {
  // A small OPT: hidden 8, 1 layer, ffn 16, vocab 10, positions 4, and each variant's
  // difference from the base worked out by hand.
  //   base: embed 10 x 8 = 80; positions (4 + 2) x 8 = 48; layer: attention 4 x (64 + 8) =
  //   288, fc1 8 x 16 + 16 = 144, fc2 16 x 8 + 8 = 136, norms 2 x 16 = 32 -> 600;
  //   final norm 16. Total 80 + 48 + 600 + 16 = 744.
  auto count = [](const std::string& extra) {
    const std::string text = R"({"model_type": "opt", "hidden_size": 8, "num_hidden_layers": 1,
      "num_attention_heads": 2, "ffn_dim": 16, "vocab_size": 10, "max_position_embeddings": 4)" +
                             extra + "}";
    return parse_hf_config(text, "opt.json").parameter_count;
  };
  CHECK(count("") == 744);
  // word_embed_proj_dim 4 (OPT-350m's shape): embed 10 x 4 = 40 instead of 80, plus
  // project_in and project_out 2 x 4 x 8 = 64: 744 - 80 + 40 + 64 = 768.
  CHECK(count(R"(, "word_embed_proj_dim": 4)") == 768);
  // do_layer_norm_before false: no final LayerNorm, 744 - 16 = 728.
  CHECK(count(R"(, "do_layer_norm_before": false)") == 728);
  // enable_bias false: attention loses 4 x 8, fc1 16, fc2 8: 744 - 56 = 688.
  CHECK(count(R"(, "enable_bias": false)") == 688);
  // tie_word_embeddings false: an lm_head of 10 x 8 more, 824.
  CHECK(count(R"(, "tie_word_embeddings": false)") == 824);
}

TEST_CASE("an OPT config without ffn_dim names the field") {
  try {
    parse_hf_config(R"({"model_type": "opt", "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
                        "vocab_size": 10, "max_position_embeddings": 4})",
                    "opt.json");
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("opt.json") && Catch::Contains("ffn_dim"));
  }
}
