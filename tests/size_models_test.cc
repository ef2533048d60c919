// Models kvsim used to mis-size: hybrid attention/state-space stacks (only attention layers hold
// KV; the rest hold a constant state per sequence), per-layer KV head counts, layers that reuse
// another layer's KV, and multimodal configs. Every figure below is computed by hand in the
// comments from the config in tests/data/configs and the rules cited in docs/size.md.
#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "cli_util.h"
#include "fuzz_checks.h"
#include "kvsim/error.h"
#include "kvsim/model.h"
#include "test_support.h"

using namespace kvsim;
using kvsim::test::load_error;
using kvsim::test::run_cli;

namespace {

std::string config(const std::string& name) { return std::string(KVSIM_SOURCE_DIR) + "/tests/data/configs/" + name; }

KvOptions tp(std::int64_t devices) {
  KvOptions o;  // bf16 KV and bf16 state, as the configs' torch_dtype
  o.tensor_parallel = devices;
  return o;
}

}  // namespace

TEST_CASE("Jamba: 4 attention layers of 32 hold KV, not 32 (the 8x over-count)") {
  const ModelSpec m = load_hf_config(config("jamba-v0.1.json"));
  // attn_layer_period 8, attn_layer_offset 4: layers 4, 12, 20, 28 are attention.
  REQUIRE(m.layer_kinds.size() == 32);
  for (std::size_t i = 0; i < 32; ++i) {
    INFO(i);
    CHECK((m.layer_kinds[i] == LayerKind::attention) == (i % 8 == 4));
  }
  const KvLayout l = kv_layout(m, tp(1));
  // One attention layer, one position: 8 KV heads x (128 + 128) values x 2 bytes = 4,096
  // (head_dim 4096 / 32 = 128). Four layers: 16,384 bytes per token. Counting all 32 layers
  // as attention gave 131,072: 8 times too many.
  CHECK(l.bytes_per_token() == 16'384);
  CHECK(l.bytes_per_token() * 8 == 32 * 8 * 256 * 2);
  // Mamba-1 state (vLLM mamba1_state_shape): d_inner = mamba_expand 2 x hidden 4096 = 8,192.
  // conv: 8,192 x (d_conv 4 - 1) x 2 bytes = 49,152; temporal: 8,192 x d_state 16 x 2 = 262,144.
  CHECK(l.state_layers == 28);
  CHECK(l.conv_state_bytes_per_layer == 49'152);
  CHECK(l.temporal_state_bytes_per_layer == 262'144);
  CHECK(l.state_bytes_per_sequence() == 28 * (49'152 + 262'144));  // 8,716,288
  CHECK(kv_bytes_for_tokens(l, 4096) == 16'384LL * 4096);

  // Tensor parallel 2: 4 KV heads per device; d_inner 4,096 per device halves both states.
  const KvLayout l2 = kv_layout(m, tp(2));
  CHECK(l2.bytes_per_token() == 4 * 4 * 256 * 2);
  CHECK(l2.conv_state_bytes_per_layer == 4096 * 3 * 2);
  CHECK(l2.temporal_state_bytes_per_layer == 4096 * 16 * 2);
}

TEST_CASE("Nemotron-H: '*' holds KV, 'M' holds a Mamba-2 state, '-' and 'E' hold nothing") {
  const ModelSpec m = load_hf_config(config("nemotron-h-small.json"));
  // "M*M-ME*-": attention at 1 and 6; Mamba at 0, 2, 4; MLP/MoE at 3, 5, 7.
  const KvLayout l = kv_layout(m, tp(1));
  CHECK(l.bytes_per_token() == 2 * 8 * 256 * 2);  // 8,192
  CHECK(l.state_layers == 3);
  CHECK(l.kv_reused_layers == 0);
  // Mamba-2 (vLLM mamba2_state_shape): d_inner = mamba_num_heads 128 x mamba_head_dim 64 = 8,192;
  // conv channels 8,192 + 2 x n_groups 8 x ssm_state_size 128 = 10,240, x (4 - 1) x 2 = 61,440;
  // temporal 128 heads x 64 x 128 x 2 = 2,097,152.
  CHECK(l.conv_state_bytes_per_layer == 61'440);
  CHECK(l.temporal_state_bytes_per_layer == 2'097'152);
  // TP 16 does not divide n_groups 8: vLLM extends them to 16 (extra_groups_for_head_shards),
  // conv (8,192 + 2 x 16 x 128) / 16 = 768 channels x 3 x 2 = 4,608; temporal 8 heads x 64 x 128 x 2.
  // 16 devices over 8 KV heads: one head each, 2 layers x 256 x 2 = 1,024 bytes per token.
  const KvLayout l16 = kv_layout(m, tp(16));
  CHECK(l16.conv_state_bytes_per_layer == 4'608);
  CHECK(l16.temporal_state_bytes_per_layer == 131'072);
  CHECK(l16.bytes_per_token() == 1'024);
}

TEST_CASE("Granite-4.0-H: layer_types mamba/attention, and n_groups extended under TP") {
  const ModelSpec m = load_hf_config(config("granite-4.0-h-small4.json"));
  const KvLayout l = kv_layout(m, tp(1));
  CHECK(l.bytes_per_token() == 1 * 8 * 256 * 2);  // one attention layer: 4,096
  CHECK(l.state_layers == 3);
  // d_inner = mamba_expand 2 x 4,096 = 8,192; conv 8,192 + 2 x 1 x 128 = 8,448 channels x 3 x 2 = 50,688;
  // temporal mamba_n_heads 128 x mamba_d_head 64 x mamba_d_state 128 x 2 = 2,097,152.
  CHECK(l.conv_state_bytes_per_layer == 50'688);
  CHECK(l.temporal_state_bytes_per_layer == 2'097'152);
  // TP 2 with n_groups 1: groups become 2, conv (8,192 + 2 x 2 x 128) / 2 = 4,352 x 3 x 2 = 26,112.
  CHECK(kv_layout(m, tp(2)).conv_state_bytes_per_layer == 26'112);
}

TEST_CASE("Zamba2: a hybrid layer holds both KV and a Mamba-2 state") {
  const ModelSpec m = load_hf_config(config("zamba2-small6.json"));
  CHECK(m.head_dim == 128);  // attention_head_dim (2 x hidden 2,048 / 32 heads)
  const KvLayout l = kv_layout(m, tp(1));
  // Layers 1 and 4 are "hybrid": 2 layers x 32 KV heads x 256 x 2 bytes = 32,768 per token.
  CHECK(l.bytes_per_token() == 32'768);
  // Every layer has a Mamba-2 block: d_inner = 2 x 2,048 = 4,096; conv 4,096 + 2 x 1 x 64 = 4,224
  // channels x 3 x 2 = 25,344; temporal n_mamba_heads 64 x mamba_headdim 64 x mamba_d_state 64 x 2 = 524,288.
  CHECK(l.state_layers == 6);
  CHECK(l.conv_state_bytes_per_layer == 25'344);
  CHECK(l.temporal_state_bytes_per_layer == 524'288);
}

TEST_CASE("Qwen3-Next: every 4th layer is full attention, the rest Gated DeltaNet") {
  const ModelSpec m = load_hf_config(config("qwen3-next-80b-a3b.json"));
  const KvLayout l = kv_layout(m, tp(1));
  // full_attention_interval 4: layers 3, 7, ..., 47 = 12 layers x 2 KV heads x 512 x 2 bytes.
  CHECK(l.bytes_per_token() == 12 * 2 * 512 * 2);  // 24,576
  CHECK(l.state_layers == 36);
  // vLLM gated_delta_net_state_shape: conv 2 x 16 x 128 + 32 x 128 = 8,192 channels x 3 x 2 = 49,152;
  // temporal 32 value heads x 128 x 128 x 2 = 1,048,576.
  CHECK(l.conv_state_bytes_per_layer == 49'152);
  CHECK(l.temporal_state_bytes_per_layer == 1'048'576);
  CHECK(l.state_bytes_per_sequence() == 36LL * 1'097'728);
}

TEST_CASE("MiniMax: attn_type_list 1 is softmax attention (KV), 0 lightning attention (a state)") {
  const ModelSpec m = load_hf_config(config("minimax-m1-small8.json"));
  // attn_type_list [0 x 7, 1]: layer 7 alone is softmax attention.
  REQUIRE(m.layer_kinds.size() == 8);
  for (std::size_t i = 0; i < 8; ++i) {
    INFO(i);
    CHECK((m.layer_kinds[i] == LayerKind::attention) == (i == 7));
  }
  const KvLayout l = kv_layout(m, tp(1));
  // One softmax layer: 8 KV heads x (128 + 128) values x 2 bytes = 4,096 bytes per token. Read
  // as 8 attention layers (what kvsim did before) it was 32,768: the 80-layer model's 327,680
  // instead of 40,960, 8 times too many.
  CHECK(l.bytes_per_token() == 4'096);
  // Lightning attention (vLLM linear_attention_state_shape): num_attention_heads 64 x head_dim
  // 128 x 128 values x 2 bytes (bf16) = 2,097,152 per layer, no conv state; 7 layers:
  // 14,680,064 bytes per sequence, at any length.
  CHECK(l.state_layers == 7);
  CHECK(l.conv_state_bytes_per_layer == 0);
  CHECK(l.temporal_state_bytes_per_layer == 2'097'152);
  CHECK(l.state_bytes_per_sequence() == 14'680'064);
  // TP 8: 1 KV head per device, 1 x 256 x 2 = 512 bytes per token; 64 / 8 = 8 heads of
  // state, 8 x 128 x 128 x 2 = 262,144 bytes per layer.
  const KvLayout l8 = kv_layout(m, tp(8));
  CHECK(l8.bytes_per_token() == 512);
  CHECK(l8.temporal_state_bytes_per_layer == 262'144);
  // TP 3 splits neither the 8 KV heads nor the 64 state heads.
  CHECK_THROWS_AS(kv_layout(m, tp(3)), InputError);

  // The same layers as transformers' MiniMaxConfig writes them: layer_types, under a MiniMax
  // model_type, with "linear_attention" meaning lightning attention.
  const ModelSpec hf = parse_hf_config(R"({"model_type": "minimax", "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "head_dim": 16, "torch_dtype": "bfloat16",
      "layer_types": ["linear_attention", "full_attention"]})", "minimax.json");
  const KvLayout h = kv_layout(hf, tp(1));
  CHECK(h.bytes_per_token() == 2 * 32 * 2);                    // 1 layer x 2 heads x (16 + 16) x 2 bytes
  CHECK(h.temporal_state_bytes_per_layer == 4 * 16 * 16 * 2);  // 2,048

  const auto r = run_cli({"size", "--config", config("minimax-m1-small8.json"), "--tokens", "4096", "--json"});
  REQUIRE(r.exit_code == 0);
  const auto doc = nlohmann::json::parse(r.out);
  CHECK(doc["bytes_per_token"].get<std::int64_t>() == 4'096);
  CHECK(doc["layers_without_kv"]["state"]["kind"] == "lightning attention");
  CHECK(doc["layers_without_kv"]["state"]["bytes_per_sequence"].get<std::int64_t>() == 14'680'064);
  // 4,096 tokens x 4,096 bytes = 16,777,216 of KV.
  CHECK(doc["sequences"]["rows"][0]["bytes"].get<std::int64_t>() == 16'777'216);
}

TEST_CASE("Gemma-3n: the last num_kv_shared_layers reuse KV and hold none") {
  const ModelSpec m = load_hf_config(config("gemma-3n-e2b.json"));
  CHECK(m.source.find("vision/audio tower weights not counted") != std::string::npos);
  const KvLayout l = kv_layout(m, tp(1));
  // 30 layers, 4 sliding (512) + 1 full repeated; layers 20-29 are shared, so 0-19 hold KV:
  // 4 full + 16 sliding, each 2 KV heads x 512 values x 2 bytes = 2,048 per position.
  CHECK(l.kv_reused_layers == 10);
  CHECK(l.state_layers == 0);
  REQUIRE(l.groups.size() == 2);
  CHECK(l.groups[0].layers == 4);
  CHECK(l.groups[1].layers == 16);
  // 4,096 tokens: 4 x 2,048 x 4,096 + 16 x 2,048 x 512 = 33,554,432 + 16,777,216.
  CHECK(kv_bytes_for_tokens(l, 4096) == 50'331'648);
}

TEST_CASE("per-layer KV heads from a list") {
  const ModelSpec m = load_hf_config(config("per-layer-kv-heads.json"));
  CHECK(m.num_key_value_heads == 8);
  // fp16, head_dim 64: a layer with h heads costs h x 128 x 2 = 256h bytes per position.
  KvOptions fp16;
  fp16.dtype = KvDtype::fp16;
  CHECK(kv_layout(m, fp16).bytes_per_token() == 256 * (2 + 4 + 4 + 8));  // 4,608
  // TP 2: 1, 2, 2, 4 heads; TP 4: 2 and 4 heads -> 1 (replicated), 8 -> 2.
  fp16.tensor_parallel = 2;
  CHECK(kv_layout(m, fp16).bytes_per_token() == 256 * (1 + 2 + 2 + 4));
  fp16.tensor_parallel = 4;
  const KvLayout l4 = kv_layout(m, fp16);
  CHECK(l4.bytes_per_token() == 256 * (1 + 1 + 1 + 2));
  REQUIRE(l4.groups.size() == 2);
  CHECK(l4.groups[0].name == "full, 1 KV heads");
  CHECK(l4.groups[0].layers == 3);
}

TEST_CASE("OpenELM: per-layer query and KV heads under its own field names") {
  const ModelSpec m = load_hf_config(config("openelm-270m.json"));
  CHECK(m.num_hidden_layers == 16);          // num_transformer_layers
  CHECK(m.max_position_embeddings == 2048);  // max_context_length
  // fp32 (torch_dtype float32), head_dim 64: a layer with h KV heads costs h x 128 x 4 = 512h
  // bytes per position; KV heads 5 x 3 + 7 x 4 + 4 x 5 = 63: 32,256 bytes per token.
  KvOptions fp32;
  fp32.dtype = KvDtype::fp32;
  const KvLayout l = kv_layout(m, fp32);
  CHECK(l.bytes_per_token() == 63 * 512);
  CHECK(l.groups.size() == 3);
  // TP 2 cannot split 3 KV heads (and is not a multiple of them): an error naming --tp.
  CHECK_THROWS_WITH(kv_layout(m, tp(2)), Catch::Contains("does not divide the 3 KV heads"));
  // A list of query heads outside OpenELM is not read as one.
  CHECK_THROWS_WITH(parse_hf_config(R"({"num_hidden_layers": 2, "num_attention_heads": [4, 8], "head_dim": 8})", "q.json"),
                    Catch::Contains("field 'num_attention_heads'") && Catch::Contains("expected an integer"));
}

TEST_CASE("configs kvsim cannot size are errors naming the file and the field") {
  auto check = [](const std::string& file, const std::string& field) {
    const std::string path = config("bad/" + file);
    const std::string message = load_error(path);
    INFO(message);
    CHECK(message.find(path) != std::string::npos);
    CHECK(message.find("field '" + field) != std::string::npos);
  };
  check("hybrid-no-layer-rule.json", "mamba_d_state");  // state fields, no rule for which layers attend
  check("hybrid-period-without-offset.json", "attn_layer_offset");
  check("hybrid-missing-conv.json", "mamba_d_conv");
  check("hybrid-unknown-block.json", "layers_block_type[4]");
  check("hybrid-pattern-char.json", "hybrid_override_pattern");
  check("hybrid-pattern-length.json", "hybrid_override_pattern");
  check("kv-heads-list-not-dividing.json", "num_key_value_heads[2]");
  check("kv-heads-list-length.json", "num_key_value_heads");
  check("attn-type-list-value.json", "attn_type_list[2]");
}

TEST_CASE("fields that change what a model caches and kvsim does not model are refused, never ignored") {
  // Each config below would otherwise be sized as plain decoder attention: the message names
  // the field and says what is not modelled.
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"mllama-cross-attention.json", "cross_attention_layers", "image tokens"},
      {"llama4-chunked-attention.json", "attention_chunk_size", "chunked local attention"},
      {"layer-types-chunked.json", "layer_types[0]", "chunked local attention"},
      {"encoder-decoder.json", "is_encoder_decoder", "cross-attention"},
      {"kimi-linear.json", "linear_attn_config", "not modelled"},
      {"deepseek-v32-indexer.json", "index_topk", "indexer"},
      {"recurrent-gemma.json", "block_types", "recurrent"},
      {"cross-layer-attention.json", "use_cla", "cross-layer attention"},
      {"falcon-multi-query.json", "multi_query", "num_key_value_heads"},
      {"sliding-pattern-without-window.json", "sliding_window", "sliding_window_pattern 6"},
      {"window-layers-without-use-flag.json", "use_sliding_window", "max_window_layers"},
  };
  for (const auto& [file, field, what] : cases) {
    const std::string path = config("bad/" + file);
    const std::string message = load_error(path);
    INFO(message);
    CHECK(message.find(path) != std::string::npos);
    CHECK(message.find("field '" + field + "'") != std::string::npos);
    CHECK(message.find(what) != std::string::npos);
  }
  // Off is not on: null, false and an empty list are the feature absent.
  const std::string base = R"({"num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
      "head_dim": 64, )";
  for (const char* off : {R"("attention_chunk_size": null})", R"("is_encoder_decoder": false})",
                          R"("cross_attention_layers": []})", R"("use_cla": false, "cla_share_factor": 1})",
                          R"("multi_query": true, "num_kv_heads": 2})"}) {
    INFO(off);
    // 2 layers x 2 KV heads x (64 + 64) x 2 bytes = 1,024 bytes per token (multi_query is
    // moot when num_key_value_heads is written).
    CHECK(kv_layout(parse_hf_config(base + off, "off.json"), tp(1)).bytes_per_token() == 1'024);
  }
  // The same through the command line: exit 1, the file and the field named.
  const auto r = run_cli({"size", "--config", config("bad/mllama-cross-attention.json")});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("field 'cross_attention_layers'"));
  CHECK(r.out.empty());
}

TEST_CASE("kvsim size shows the state beside the KV, and refuses what it cannot model") {
  const auto r = run_cli({"size", "--config", config("jamba-v0.1.json"), "--seqs", "2", "--tokens", "4096"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("4 of 32 layers hold KV"));
  CHECK_THAT(r.out, Catch::Contains("8,716,288 bytes per sequence"));
  // 2 x 16,384 x 4,096 = 134,217,728 KV; 2 x 8,716,288 = 17,432,576 state; sum 151,650,304.
  CHECK_THAT(r.out, Catch::Contains("134,217,728"));
  CHECK_THAT(r.out, Catch::Contains("17,432,576"));
  CHECK_THAT(r.out, Catch::Contains("151,650,304"));
  const auto j = run_cli({"size", "--config", config("jamba-v0.1.json"), "--tokens", "4096", "--json"});
  REQUIRE(j.exit_code == 0);
  const auto doc = nlohmann::json::parse(j.out);
  CHECK(doc["bytes_per_token"].get<std::int64_t>() == 16'384);
  CHECK(doc["layers_without_kv"]["state"]["bytes_per_sequence"].get<std::int64_t>() == 8'716'288);
  CHECK(doc["sequences"]["rows"][0]["state_bytes"].get<std::int64_t>() == 8'716'288);

  const auto budget = run_cli({"size", "--config", config("jamba-v0.1.json"), "--device", "H100-80GB"});
  CHECK(budget.exit_code == 1);  // the config's model cannot be pooled: input, naming the file
  CHECK_THAT(budget.err, Catch::Contains(config("jamba-v0.1.json") + ": this model has state-space layers"));
  const auto replay = run_cli({"replay", std::string(KVSIM_SOURCE_DIR) + "/traces/chat-mix.csv", "--config",
                               config("jamba-v0.1.json"), "--quiet"});
  CHECK(replay.exit_code == 1);
  CHECK_THAT(replay.err, Catch::Contains("kvsim replay simulates KV caches only"));
}

TEST_CASE("speculative decoding: EAGLE adds one layer at the target's dims, a draft model its own") {
  // Llama-3.1-8B: 32 layers x 8 KV heads x 256 values x 2 bytes = 131,072 per token; the EAGLE
  // head's layer makes 33 layers, 135,168, in the same KV-cache group (same spec).
  const auto plain = run_cli({"size", "--model", "llama-3.1-8b", "--device", "H100-80GB", "--json"});
  const auto eagle = run_cli({"size", "--model", "llama-3.1-8b", "--device", "H100-80GB", "--speculative", "eagle", "--json"});
  REQUIRE(plain.exit_code == 0);
  REQUIRE(eagle.exit_code == 0);
  const auto p = nlohmann::json::parse(plain.out);
  const auto e = nlohmann::json::parse(eagle.out);
  CHECK(e["bytes_per_token"].get<std::int64_t>() == 33 * 4096);
  CHECK(e["speculative"]["draft_layers"].get<std::int64_t>() == 1);
  CHECK(e["speculative"]["draft_bytes_per_token"].get<std::int64_t>() == 4096);
  REQUIRE(e["layer_groups"].size() == 1);
  CHECK(e["layer_groups"][0]["layers"].get<std::int64_t>() == 33);
  // Same budget (the draft's weights are not in it); a block is 33 layers x 16 x 4,096 bytes.
  const std::int64_t budget = p["budget"]["kv_budget_bytes"].get<std::int64_t>();
  CHECK(e["budget"]["kv_budget_bytes"].get<std::int64_t>() == budget);
  CHECK(e["paged"]["num_blocks"].get<std::int64_t>() == budget / (33 * 16 * 4096));

  // A draft model with other dims: Llama-3.2-1B (16 layers x 8 KV heads x 64 x 2 values x 2
  // bytes = 32,768 per token) beside Llama's 131,072: a group of its own, 163,840 in all.
  const auto d = run_cli({"size", "--model", "llama-3.1-8b", "--speculative", "draft:" + config("llama-3.2-1b.json"), "--json"});
  REQUIRE(d.exit_code == 0);
  const auto dj = nlohmann::json::parse(d.out);
  CHECK(dj["bytes_per_token"].get<std::int64_t>() == 131'072 + 32'768);
  REQUIRE(dj["layer_groups"].size() == 2);
  CHECK(dj["layer_groups"][1]["name"] == "draft full");
  CHECK(dj["speculative"]["draft_layers"].get<std::int64_t>() == 16);

  const auto bad = run_cli({"size", "--model", "llama-3.1-8b", "--speculative", "medusa"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("expected eagle, eagle3 or draft:CONFIG"));
}

TEST_CASE("speculative decoding: a draft of other KV shapes shares the target's one group, as vLLM's uniform type") {
  // vLLM's get_kv_cache_groups makes layers of one attention type one group before looking at
  // page sizes (UniformTypeKVCacheSpecs): a block holds a page of every layer.
  // Llama-3.2-1B as the draft: 16 x (131,072 + 32,768) = 2,621,440 bytes a block; 40 GiB =
  // 42,949,672,960 bytes hold exactly 16,384 of them.
  const auto one = run_cli({"size", "--model", "llama-3.1-8b", "--speculative", "draft:" + config("llama-3.2-1b.json"),
                            "--kv-budget", "40GiB", "--json"});
  REQUIRE(one.exit_code == 0);
  const auto j = nlohmann::json::parse(one.out)["paged"];
  CHECK(j["uniform_type"].get<bool>());
  CHECK(j["cache_groups"].get<std::int64_t>() == 1);
  CHECK(j["block_bytes"].get<std::int64_t>() == 16 * 163'840);
  CHECK(j["num_blocks"].get<std::int64_t>() == 16'384);
  // A draft with 16 KV heads of 64 has the target's 4,096 bytes per layer and position, but
  // not its spec: still one group of 48 layers, not three groups of 16 (grouping by spec).
  // 16 x (131,072 + 16 x 16 x 64 x 2 x 2 = 65,536) = 3,145,728 bytes a block: 13,653 blocks.
  const auto same_page = run_cli({"size", "--model", "llama-3.1-8b", "--speculative",
                                  "draft:" + config("draft-16-kv-heads.json"), "--kv-budget", "40GiB", "--json"});
  REQUIRE(same_page.exit_code == 0);
  const auto k = nlohmann::json::parse(same_page.out)["paged"];
  CHECK(k["uniform_type"].get<bool>());
  CHECK(k["cache_groups"].get<std::int64_t>() == 1);
  CHECK(k["group_size"].get<std::int64_t>() == 48);
  CHECK(k["block_bytes"].get<std::int64_t>() == 3'145'728);
  CHECK(k["num_blocks"].get<std::int64_t>() == 42'949'672'960 / 3'145'728);
  CHECK(k["num_blocks"].get<std::int64_t>() == 13'653);
  const auto text = run_cli({"size", "--model", "llama-3.1-8b", "--speculative", "draft:" + config("llama-3.2-1b.json"),
                             "--kv-budget", "40GiB"});
  CHECK_THAT(text.out, Catch::Contains("1 KV-cache group of 48 layers of one attention type") &&
                           !Catch::Contains("approximated"));
}

TEST_CASE("speculative decoding: K drafts a step hold 2K slots past a sequence's tokens, within max_model_len") {
  // Llama-3.1-8B with EAGLE in 40 GiB: 42,949,672,960 / (33 x 16 x 4,096 = 2,162,688) = 19,859
  // blocks. 1,024 tokens take 64 blocks, so 310 sequences (19,840 blocks) fit; with K = 3, vLLM's
  // allocate_slots holds 1,024 + 3 drafts + 3 lookahead = 1,030 slots: 65 blocks, and
  // 19,859 / 65 = 305.5, so 305 fit and 310 do not.
  const std::vector<std::string> base = {"size", "--model", "llama-3.1-8b", "--speculative", "eagle", "--kv-budget", "40GiB",
                                         "--tokens", "1024", "--seqs", "310", "--json"};
  const auto plain = run_cli(base);
  REQUIRE(plain.exit_code == 0);
  const auto p = nlohmann::json::parse(plain.out);
  CHECK(p["paged"]["num_blocks"].get<std::int64_t>() == 19'859);
  CHECK(p["paged"]["concurrency"][0]["blocks_per_request"].get<std::int64_t>() == 64);
  CHECK(p["paged"]["concurrency"][0]["seqs_fit"].get<bool>());
  CHECK(p["speculative"]["lookahead_slots"].get<std::int64_t>() == 0);
  std::vector<std::string> with_k = base;
  with_k.insert(with_k.end(), {"--num-speculative-tokens", "3"});
  const auto k3 = run_cli(with_k);
  REQUIRE(k3.exit_code == 0);
  const auto q = nlohmann::json::parse(k3.out);
  CHECK(q["speculative"]["lookahead_slots"].get<std::int64_t>() == 6);
  CHECK(q["paged"]["concurrency"][0]["blocks_per_request"].get<std::int64_t>() == 65);
  CHECK_FALSE(q["paged"]["concurrency"][0]["seqs_fit"].get<bool>());
  CHECK(q["paged"]["concurrency"][0]["max_seqs"].get<std::int64_t>() == 305);
  // The bytes of 1,024 tokens are what the sequence keeps: unchanged.
  CHECK(q["sequences"]["rows"][0]["bytes_per_sequence"] == p["sequences"]["rows"][0]["bytes_per_sequence"]);
  // At T = max_model_len the slots are capped there: 131,072 / 16 = 8,192 blocks either way.
  const auto full = run_cli({"size", "--model", "llama-3.1-8b", "--speculative", "eagle", "--kv-budget", "40GiB",
                             "--num-speculative-tokens", "3", "--json"});
  REQUIRE(full.exit_code == 0);
  CHECK(nlohmann::json::parse(full.out)["paged"]["concurrency"][0]["blocks_per_request"].get<std::int64_t>() == 8'192);

  const auto alone = run_cli({"size", "--model", "llama-3.1-8b", "--num-speculative-tokens", "3"});
  CHECK(alone.exit_code == 2);
  CHECK_THAT(alone.err, Catch::Contains("--num-speculative-tokens: needs --speculative"));
  const auto zero = run_cli({"size", "--model", "llama-3.1-8b", "--speculative", "eagle", "--num-speculative-tokens", "0"});
  CHECK(zero.exit_code == 2);
}

TEST_CASE("speculative decoding: the draft goes on the last pipeline stage, and what vLLM refuses is refused") {
  // --pp 2: layers 0-15 and 16-31; vLLM builds the whole drafter on the last rank, so stage 1
  // holds 17 layers of 4,096 bytes = 69,632 per position, and binds.
  const auto pp = run_cli({"size", "--model", "llama-3.1-8b", "--pp", "2", "--speculative", "eagle", "--json"});
  REQUIRE(pp.exit_code == 0);
  const auto j = nlohmann::json::parse(pp.out);
  REQUIRE(j["stages"].size() == 2);
  CHECK(j["stages"][0]["bytes_per_token"].get<std::int64_t>() == 16 * 4096);
  CHECK(j["stages"][1]["bytes_per_token"].get<std::int64_t>() == 17 * 4096);
  CHECK(j["speculative"]["draft_layers"].get<std::int64_t>() == 1);

  // Qwen2.5-7B's vocabulary (152,064) is not Llama's (128,256): vLLM's
  // verify_equal_vocab_size_if_draft_model refuses the pair.
  const auto vocab = run_cli({"size", "--model", "llama-3.1-8b", "--speculative", "draft:" + config("qwen2.5-7b.json")});
  CHECK(vocab.exit_code == 1);
  CHECK_THAT(vocab.err, Catch::Contains("vocab_size: the draft's vocabulary has 152064 tokens and the target's 128256"));
  // OpenELM's layers have 3 to 5 KV heads: no one count for an EAGLE head.
  const auto openelm = run_cli({"size", "--config", config("openelm-270m.json"), "--speculative", "eagle"});
  CHECK(openelm.exit_code == 1);
  CHECK_THAT(openelm.err, Catch::Contains("its layers differ in KV heads"));
  // SGLang keeps the draft's KV in a pool of its own.
  const auto sglang = run_cli({"size", "--model", "llama-3.1-8b", "--speculative", "eagle", "--device", "H100-80GB",
                               "--engine", "sglang"});
  CHECK(sglang.exit_code == 2);
  CHECK_THAT(sglang.err, Catch::Contains("with --engine sglang the draft keeps a pool of its own"));
}

TEST_CASE("a pipeline stage that holds no KV is refused under a budget, not an internal error") {
  // 4 layers, the last 2 reuse KV: --pp 2 puts layers 2-3 (no KV) on stage 1.
  const auto r = run_cli({"size", "--config", config("shared-kv-stage.json"), "--pp", "2", "--device", "H100-80GB"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--pp") && Catch::Contains("holds no KV"));
  // Without a budget the stages are sized: stage 0 has 2 layers x 2 heads x 128 x 2 = 1,024 bytes per token.
  const auto ok = run_cli({"size", "--config", config("shared-kv-stage.json"), "--pp", "2", "--json"});
  REQUIRE(ok.exit_code == 0);
  CHECK(nlohmann::json::parse(ok.out)["bytes_per_token"].get<std::int64_t>() == 1'024);
}

TEST_CASE("the fuzz target's checks pass on every config here, hybrid and bad ones included") {
  for (const auto& dir : {std::string("/tests/data/configs"), std::string("/tests/data/configs/bad")}) {
    for (const auto& entry : std::filesystem::directory_iterator(std::string(KVSIM_SOURCE_DIR) + dir)) {
      if (entry.path().extension() != ".json") continue;
      INFO(entry.path().string());
      CHECK_NOTHROW(kvsim::fuzz::check_hf_config(kvsim::test::slurp(entry.path().string())));
    }
  }
}
