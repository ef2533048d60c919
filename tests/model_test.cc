// KV geometry: every expected number is derived by hand next to it, from the seed guide or the
// model's published config.json.
#include "kvsim/model.h"

#include <catch2/catch.hpp>

#include "kvsim/error.h"
#include "kvsim/units.h"

using namespace kvsim;

namespace {

KvOptions with_dtype(KvDtype dtype) {
  KvOptions o;
  o.dtype = dtype;
  return o;
}

ModelSpec seed_with_kv_heads(std::int64_t kv_heads) {
  ModelSpec m = find_model_preset("seed-example");
  m.num_key_value_heads = kv_heads;
  return m;
}

}  // namespace

TEST_CASE("KV dtypes parse by their common names and carry their widths") {
  CHECK(parse_kv_dtype("bf16", "--dtype") == KvDtype::bf16);
  CHECK(parse_kv_dtype("bfloat16", "--dtype") == KvDtype::bf16);
  CHECK(parse_kv_dtype("Float16", "--dtype") == KvDtype::fp16);
  CHECK(parse_kv_dtype("fp8_e5m2", "--dtype") == KvDtype::fp8);
  CHECK(parse_kv_dtype("float32", "--dtype") == KvDtype::fp32);
  CHECK(kv_dtype_info(KvDtype::fp32).bits == 32);
  CHECK(kv_dtype_info(KvDtype::int4).bits == 4);
  CHECK(kv_dtype_info(KvDtype::int2).group_scales);
  CHECK_FALSE(kv_dtype_info(KvDtype::fp8).group_scales);
  CHECK_FALSE(try_parse_kv_dtype("int32").has_value());
  CHECK_THROWS_WITH(parse_kv_dtype("fp7", "--dtype"), Catch::Contains("--dtype") && Catch::Contains("\"fp7\""));
}

TEST_CASE("the seed's worked example, every row of its table") {
  const ModelSpec& seed = find_model_preset("seed-example");
  const KvLayout fp16 = kv_layout(seed, with_dtype(KvDtype::fp16));
  REQUIRE(fp16.groups.size() == 1);
  CHECK(fp16.groups[0].name == "full");
  CHECK(fp16.groups[0].bytes_per_layer_position == 8 * (128 + 128) * 2);  // 4,096
  // 2 (K and V) x 40 layers x 8 KV heads x 128 dims x 2 bytes
  CHECK(fp16.bytes_per_token() == 2 * 40 * 8 * 128 * 2);
  CHECK(fp16.bytes_per_token() == 163'840);
  CHECK(kv_bytes_for_tokens(fp16, 4096) == 163'840LL * 4096);  // 671,088,640 = 0.625 GiB
  CHECK(kv_bytes_for_tokens(fp16, 4096) == 671'088'640);
  CHECK(6 * kv_bytes_for_tokens(fp16, 4096) == 4'026'531'840);  // 3.75 GiB
  CHECK(format_gib(6 * kv_bytes_for_tokens(fp16, 4096)) == "3.75 GiB");
  CHECK(6 * kv_bytes_for_tokens(fp16, 8192) == 8'053'063'680);  // doubling the length doubles it
  // 40 KV heads instead of 8: five times as much.
  const KvLayout forty = kv_layout(seed_with_kv_heads(40), with_dtype(KvDtype::fp16));
  CHECK(6 * kv_bytes_for_tokens(forty, 4096) == 5 * 4'026'531'840LL);
  CHECK(6 * kv_bytes_for_tokens(forty, 4096) == 20'132'659'200);
  CHECK(format_gib(20'132'659'200) == "18.75 GiB");
}

TEST_CASE("presets: bytes per token in bf16 from their configs") {
  auto bf16 = with_dtype(KvDtype::bf16);
  // Llama-3.1-8B: 32 layers x 8 KV heads x (128 + 128) x 2 bytes
  CHECK(kv_layout(find_model_preset("llama-3.1-8b"), bf16).bytes_per_token() == 32 * 8 * 256 * 2);
  CHECK(kv_layout(find_model_preset("llama-3.1-8b"), bf16).bytes_per_token() == 131'072);
  // Llama-3.1-70B: 80 x 8 x 256 x 2
  CHECK(kv_layout(find_model_preset("LLAMA-3.1-70B"), bf16).bytes_per_token() == 80 * 8 * 256 * 2);
  // Qwen2.5-7B: use_sliding_window false -> 28 full layers x 4 KV heads x 256 x 2
  const KvLayout qwen = kv_layout(find_model_preset("qwen2.5-7b"), bf16);
  REQUIRE(qwen.groups.size() == 1);
  CHECK(qwen.groups[0].window_tokens == 0);
  CHECK(qwen.bytes_per_token() == 28 * 4 * 256 * 2);  // 57,344
  // Llama-3.2-3B: 28 x 8 KV heads x 256 x 2; the dense Qwen3s: 36, 36 and 40 layers x 8 x 256 x 2
  CHECK(kv_layout(find_model_preset("llama-3.2-3b"), bf16).bytes_per_token() == 28 * 8 * 256 * 2);  // 114,688
  CHECK(kv_layout(find_model_preset("qwen3-4b"), bf16).bytes_per_token() == 36 * 8 * 256 * 2);      // 147,456
  CHECK(kv_layout(find_model_preset("qwen3-8b"), bf16).bytes_per_token() == 36 * 8 * 256 * 2);
  CHECK(kv_layout(find_model_preset("qwen3-14b"), bf16).bytes_per_token() == 40 * 8 * 256 * 2);     // 163,840
  // Phi-3-mini-4k: MHA, 32 KV heads of 96: 32 x 32 x 192 x 2, all sliding 2047
  const KvLayout phi = kv_layout(find_model_preset("phi-3-mini-4k"), bf16);
  CHECK(phi.bytes_per_token() == 32 * 32 * 192 * 2);
  CHECK(phi.groups[0].name == "sliding 2047");
}

TEST_CASE("sliding windows: Mistral slides everywhere, Gemma 2 alternates, Gemma 3 is five to one") {
  auto bf16 = with_dtype(KvDtype::bf16);
  const KvLayout mistral = kv_layout(find_model_preset("mistral-7b-v0.1"), bf16);
  REQUIRE(mistral.groups.size() == 1);
  CHECK(mistral.groups[0].name == "sliding 4096");
  CHECK(mistral.groups[0].layers == 32);
  // 32,768 tokens keep only 4,096 positions on every layer: 4096 x 131,072 bytes
  CHECK(kv_bytes_for_tokens(mistral, 32768) == 4096LL * 32 * 8 * 256 * 2);

  const ModelSpec& gemma2 = find_model_preset("gemma-2-9b");
  CHECK(gemma2.layer_window_tokens[0] == 4096);  // layer 0 slides (is_sliding = not layer_idx % 2)
  CHECK(gemma2.layer_window_tokens[1] == 0);
  CHECK(gemma2.layer_window_tokens[41] == 0);
  const KvLayout g2 = kv_layout(gemma2, bf16);
  REQUIRE(g2.groups.size() == 2);
  CHECK(g2.groups[0].name == "full");  // full first
  CHECK(g2.groups[0].layers == 21);
  CHECK(g2.groups[1].name == "sliding 4096");
  CHECK(g2.groups[1].layers == 21);
  CHECK(g2.groups[1].bytes_per_layer_position == 8 * 512 * 2);  // 8 heads x (256 + 256) x 2

  const ModelSpec& gemma3 = find_model_preset("gemma-3-27b");
  CHECK(gemma3.layer_window_tokens[4] == 1024);
  CHECK(gemma3.layer_window_tokens[5] == 0);  // (5 + 1) % 6 == 0: global
  CHECK(gemma3.layer_window_tokens[59] == 0);
  CHECK(gemma3.layer_window_tokens[61] == 1024);
  const KvLayout g3 = kv_layout(gemma3, bf16);
  REQUIRE(g3.groups.size() == 2);
  CHECK(g3.groups[0].layers == 10);  // i = 5, 11, ..., 59
  CHECK(g3.groups[1].layers == 52);
  CHECK(g3.groups[1].window_tokens == 1024);
  // 32,768 tokens: every position on the 10 global layers, only 1,024 on the 52 local ones.
  CHECK(kept_positions(g3.groups[1], 32768) == 1024);
  CHECK(kept_positions(g3.groups[0], 32768) == 32768);
  const std::int64_t layer = 16 * (128 + 128) * 2;  // 8,192 bytes per layer per position
  CHECK(kv_bytes_for_tokens(g3, 32768) == 10LL * 32768 * layer + 52LL * 1024 * layer);
  CHECK(kv_bytes_for_tokens(g3, 32768) == 3'120'562'176);
  // Below the window both kinds keep everything.
  CHECK(kv_bytes_for_tokens(g3, 1000) == 62LL * 1000 * layer);
}

TEST_CASE("MLA: the latent form engines store and the decompressed form transformers stores") {
  const ModelSpec& ds = find_model_preset("deepseek-v3");
  KvOptions latent = with_dtype(KvDtype::bf16);
  const KvLayout l = kv_layout(ds, latent);
  REQUIRE(l.groups.size() == 1);
  CHECK(l.groups[0].name == "mla latent");
  CHECK(l.groups[0].kv_heads == 1);
  CHECK(l.groups[0].k_head_dim == 512 + 64);
  CHECK(l.groups[0].v_head_dim == 0);
  CHECK(l.groups[0].bytes_per_layer_position == (512 + 64) * 2);  // 1,152
  CHECK(l.bytes_per_token() == 61 * 1152);                        // 70,272
  CHECK(l.bytes_per_token() == 70'272);

  KvOptions decompressed = latent;
  decompressed.mla_form = MlaForm::decompressed;
  const KvLayout d = kv_layout(ds, decompressed);
  CHECK(d.groups[0].name == "mla decompressed");
  CHECK(d.groups[0].kv_heads == 128);
  CHECK(d.groups[0].k_head_dim == 128 + 64);  // qk_nope + qk_rope = 192
  CHECK(d.groups[0].v_head_dim == 128);
  // 128 heads x (192 + 128) x 2 bytes = 81,920 per layer; x 61 layers
  CHECK(d.bytes_per_token() == 61 * 128 * (192 + 128) * 2);
  CHECK(d.bytes_per_token() == 4'997'120);

  // The latent is replicated on every tensor-parallel rank; decompressed heads are split.
  latent.tensor_parallel = 8;
  CHECK(kv_layout(ds, latent).bytes_per_token() == 70'272);
  decompressed.tensor_parallel = 8;
  CHECK(kv_layout(ds, decompressed).bytes_per_token() == 61 * 16 * 320 * 2);

  // kv_b_proj decompresses K and V for every attention head: a config's num_key_value_heads
  // (DeepSeek-V3's says 128, a copy could say 1) changes nothing.
  ModelSpec one_kv = ds;
  one_kv.num_key_value_heads = 1;
  decompressed.tensor_parallel = 1;
  CHECK(kv_layout(one_kv, decompressed).bytes_per_token() == 4'997'120);
  CHECK(kv_layout(one_kv, latent).bytes_per_token() == 70'272);

  // A window over MLA layers (a config with sliding_window beside kv_lora_rank) is kept and
  // named: at most 1,024 positions of 1,152 bytes a layer.
  ModelSpec windowed = ds;
  windowed.layer_window_tokens.assign(static_cast<std::size_t>(ds.num_hidden_layers), 1024);
  const KvLayout w = kv_layout(windowed, latent);
  REQUIRE(w.groups.size() == 1);
  CHECK(w.groups[0].name == "mla latent, sliding 1024");
  CHECK(kv_bytes_for_tokens(w, 100'000) == 61LL * 1024 * 1152);
}

TEST_CASE("quantised caches: packed values plus a scale and a zero-point per group") {
  const ModelSpec& seed = find_model_preset("seed-example");
  KvOptions o;
  // fp8: 1 byte per value, scales per tensor (nothing per token): 40 x 8 x 256 x 1
  o.dtype = KvDtype::fp8;
  CHECK(kv_layout(seed, o).bytes_per_token() == 40 * 8 * 256);
  // int8: 128 bytes + ceil(128 / 64) = 2 groups x (2 + 2) bytes = 136 per vector
  o.dtype = KvDtype::int8;
  CHECK(kv_vector_bytes(128, o) == 128 + 2 * 4);
  CHECK(kv_layout(seed, o).bytes_per_token() == 40 * 8 * 2 * 136);
  // int4: 128 x 4 / 8 = 64 bytes + 8 bytes of scales = 72 per vector
  o.dtype = KvDtype::int4;
  CHECK(kv_vector_bytes(128, o) == 64 + 8);
  CHECK(kv_layout(seed, o).bytes_per_token() == 40 * 8 * 2 * 72);  // 46,080
  // int2: 32 bytes + 8
  o.dtype = KvDtype::int2;
  CHECK(kv_vector_bytes(128, o) == 32 + 8);
  // Group size 32: ceil(128 / 32) = 4 groups x 4 bytes
  o.dtype = KvDtype::int4;
  o.quant_group_values = 32;
  CHECK(kv_vector_bytes(128, o) == 64 + 16);
  // Partial groups and partial bytes round up: 96 values (Phi-3) -> 48 bytes + 2 groups x 4
  o.quant_group_values = 64;
  CHECK(kv_vector_bytes(96, o) == 48 + 8);
  // 3 int4 values: ceil(12 / 8) = 2 bytes + 1 group x 4
  CHECK(kv_vector_bytes(3, o) == 2 + 4);
  // MLA latent in int4: 576 values -> 288 bytes + ceil(576 / 64) = 9 groups x 4; no V
  KvOptions mla = o;
  CHECK(kv_layout(find_model_preset("deepseek-v3"), mla).groups[0].bytes_per_layer_position == 288 + 36);
  // Scale width is an option: 4-byte fp32 scales double the scale bytes.
  o.scale_bytes = 4;
  CHECK(kv_vector_bytes(128, o) == 64 + 2 * 8);
  o.quant_group_values = 0;
  CHECK_THROWS_AS(kv_vector_bytes(128, o), InputError);
}

TEST_CASE("tensor parallelism splits KV heads, and replicates them past the head count") {
  const ModelSpec& llama = find_model_preset("llama-3.1-8b");
  KvOptions o = with_dtype(KvDtype::bf16);
  o.tensor_parallel = 2;
  CHECK(kv_layout(llama, o).groups[0].kv_heads == 4);
  CHECK(kv_layout(llama, o).bytes_per_token() == 32 * 4 * 256 * 2);  // 65,536
  o.tensor_parallel = 8;
  CHECK(kv_layout(llama, o).bytes_per_token() == 32 * 1 * 256 * 2);
  // 16 devices, 8 KV heads: each device holds one head (each head on two devices).
  o.tensor_parallel = 16;
  const KvLayout tp16 = kv_layout(llama, o);
  CHECK(tp16.groups[0].kv_heads == 1);
  CHECK(tp16.bytes_per_token() == 32 * 1 * 256 * 2);
  CHECK(tp16.bytes_per_token() == 16'384);

  CHECK(kv_heads_per_device(8, 32, 32) == 1);
  CHECK(kv_heads_per_device(8, 48, 4) == 2);
  // 3 does not divide the 32 query heads.
  o.tensor_parallel = 3;
  CHECK_THROWS_WITH(kv_layout(llama, o), Catch::Contains("--tp") && Catch::Contains("32 attention heads"));
  // 12 divides 48 query heads but is neither a divisor nor a multiple of 8 KV heads.
  CHECK_THROWS_WITH(kv_heads_per_device(8, 48, 12), Catch::Contains("not a multiple of the 8 KV heads"));
  CHECK_THROWS_WITH(kv_heads_per_device(8, 48, 6), Catch::Contains("does not divide the 8 KV heads"));
  CHECK_THROWS_AS(kv_heads_per_device(8, 32, 0), InputError);
}

TEST_CASE("pipeline parallelism splits layers where vLLM's get_pp_indices puts them") {
  using Stages = std::vector<std::pair<std::int64_t, std::int64_t>>;
  CHECK(pipeline_stage_layers(32, 1) == Stages{{0, 32}});
  CHECK(pipeline_stage_layers(32, 4) == Stages{{0, 8}, {8, 16}, {16, 24}, {24, 32}});
  // 61 / 4 = 15 rem 1: the extra layer goes to the second-to-last stage.
  CHECK(pipeline_stage_layers(61, 4) == Stages{{0, 15}, {15, 30}, {30, 46}, {46, 61}});
  // 32 / 3 = 10 rem 2: partitions[-2] and partitions[-3] get one each -> 11, 11, 10.
  CHECK(pipeline_stage_layers(32, 3) == Stages{{0, 11}, {11, 22}, {22, 32}});
  // 61 / 8 = 7 rem 5: stages 2..6 get 8, the first and last 7.
  const auto s = pipeline_stage_layers(61, 8);
  std::vector<std::int64_t> sizes;
  for (const auto& [a, b] : s) sizes.push_back(b - a);
  CHECK(sizes == std::vector<std::int64_t>{7, 7, 8, 8, 8, 8, 8, 7});
  CHECK_THROWS_WITH(pipeline_stage_layers(4, 5), Catch::Contains("at least one layer"));
  CHECK_THROWS_AS(pipeline_stage_layers(4, 0), InputError);

  // Per-stage layouts; the stage with the most bytes per token binds.
  KvOptions o = with_dtype(KvDtype::bf16);
  o.pipeline_parallel = 3;
  const auto stages = kv_stage_layouts(find_model_preset("llama-3.1-8b"), o);
  REQUIRE(stages.size() == 3);
  CHECK(stages[0].bytes_per_token() == 11 * 4096);
  CHECK(stages[2].bytes_per_token() == 10 * 4096);
  CHECK(stages[2].first_layer == 22);
  CHECK(stages[2].end_layer == 32);
  CHECK(kv_layout(find_model_preset("llama-3.1-8b"), o).bytes_per_token() == 11 * 4096);

  // Gemma 3 in two stages of 31 layers: stage 0 holds globals 5, 11, 17, 23, 29 (5 of them).
  o.pipeline_parallel = 2;
  const auto g = kv_stage_layouts(find_model_preset("gemma-3-27b"), o);
  CHECK(g[0].groups[0].layers == 5);
  CHECK(g[0].groups[1].layers == 26);
  CHECK(g[1].groups[0].layers == 5);  // 35, 41, 47, 53, 59
}

TEST_CASE("default KV dtype follows torch_dtype, else bf16") {
  CHECK(default_kv_dtype(find_model_preset("llama-3.1-8b")) == KvDtype::bf16);
  ModelSpec m = find_model_preset("seed-example");
  CHECK(default_kv_dtype(m) == KvDtype::bf16);  // no torch_dtype
  m.weight_dtype = "float16";
  CHECK(default_kv_dtype(m) == KvDtype::fp16);
  m.weight_dtype = "int32";
  CHECK(default_kv_dtype(m) == KvDtype::bf16);
}

TEST_CASE("presets are found case-insensitively and unknown names list the known ones") {
  CHECK(find_model_preset("Gemma-3-27B").name == "gemma-3-27b");
  CHECK(model_presets().size() == 17);
  CHECK_THROWS_WITH(find_model_preset("llama-4"), Catch::Contains("llama-3.1-8b") && Catch::Contains("--model"));
  for (const auto& m : model_presets()) {
    CHECK_FALSE(m.source.empty());
    CHECK(static_cast<std::int64_t>(m.layer_window_tokens.size()) == m.num_hidden_layers);
  }
}

TEST_CASE("impossible specs are rejected with the field") {
  ModelSpec m = find_model_preset("llama-3.1-8b");
  m.num_key_value_heads = 5;
  CHECK_THROWS_WITH(validate_model(m, "x.json"), Catch::Contains("x.json") && Catch::Contains("num_key_value_heads"));
  m = find_model_preset("llama-3.1-8b");
  m.layer_window_tokens.pop_back();
  CHECK_THROWS_WITH(validate_model(m, ""), Catch::Contains("layer_types"));
  m = find_model_preset("deepseek-v3");
  m.mla->qk_rope_head_dim = 0;
  CHECK_THROWS_WITH(validate_model(m, ""), Catch::Contains("qk_rope_head_dim"));
}

TEST_CASE("overflowing arithmetic is an error, never a wrapped number") {
  ModelSpec m = find_model_preset("seed-example");
  m.head_dim = std::int64_t{1} << 60;
  CHECK_THROWS_WITH(kv_layout(m, KvOptions{}), Catch::Contains("overflows 64 bits"));
  const KvLayout l = kv_layout(find_model_preset("llama-3.1-70b"), KvOptions{});
  CHECK_THROWS_AS(kv_bytes_for_tokens(l, std::int64_t{1} << 50), InputError);
}
