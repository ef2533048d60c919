// `kvsim size` and `kvsim models` as a user runs them: exit codes, help, the seed's numbers in
// the table and in JSON.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "cli_util.h"
#include "trace_test_util.h"

using kvsim::test::run_cli;
using Json = nlohmann::json;

namespace {

std::string config(const std::string& name) { return std::string(KVSIM_SOURCE_DIR) + "/tests/data/configs/" + name; }

}  // namespace

TEST_CASE("kvsim size: the seed's worked example") {
  const auto r = run_cli({"size", "--model", "seed-example", "--dtype", "fp16", "--seqs", "6", "--tokens", "4096"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("163,840"));        // 2 x 40 x 8 x 128 x 2
  CHECK_THAT(r.out, Catch::Contains("671,088,640"));    // x 4,096 positions
  CHECK_THAT(r.out, Catch::Contains("0.625 GiB"));
  CHECK_THAT(r.out, Catch::Contains("4,026,531,840"));  // x 6 sequences
  CHECK_THAT(r.out, Catch::Contains("3.75 GiB"));
  CHECK(r.err.empty());

  const auto j = run_cli({"size", "--model", "seed-example", "--dtype", "fp16", "--seqs", "6", "--tokens", "4096", "--json"});
  REQUIRE(j.exit_code == 0);
  CHECK_THAT(j.out, Catch::Contains("4026531840"));
  const auto doc = nlohmann::json::parse(j.out);
  CHECK(doc["bytes_per_token"].get<std::int64_t>() == 163'840);
  CHECK(doc["sequences"]["count"].get<std::int64_t>() == 6);
  CHECK(doc["sequences"]["rows"][0]["bytes_per_sequence"].get<std::int64_t>() == 671'088'640);
  CHECK(doc["sequences"]["rows"][0]["bytes"].is_number_integer());
  CHECK(doc["sequences"]["rows"][0]["bytes"].get<std::int64_t>() == 4'026'531'840);
  CHECK(doc["kv_dtype"]["name"] == "fp16");
  CHECK(doc["kv_dtype"]["chosen_by"] == "--dtype");
}

TEST_CASE("kvsim size: the other rows of the seed's table") {
  const auto r = run_cli({"size", "--model", "seed-example", "--dtype", "fp16", "--seqs", "6", "--tokens", "4096,8192"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("8,053,063,680"));  // 6 x 8,192 x 163,840
  CHECK_THAT(r.out, Catch::Contains("7.50 GiB"));
  // 40 KV heads: 6 x 4,096 x 2 x 40 x 40 x 128 x 2
  const auto forty = run_cli({"size", "--config", config("seed-40-kv-heads.json"), "--seqs", "6", "--tokens", "4096"});
  REQUIRE(forty.exit_code == 0);
  CHECK_THAT(forty.out, Catch::Contains("20,132,659,200"));
  CHECK_THAT(forty.out, Catch::Contains("18.75 GiB"));
  CHECK_THAT(forty.out, Catch::Contains("fp16") && Catch::Contains("torch_dtype float16"));
}

TEST_CASE("kvsim size: placement, sliding windows and MLA through the command line") {
  // 16 devices, 8 KV heads: one head per device, 32 layers x 256 values x 2 bytes.
  auto r = run_cli({"size", "--model", "llama-3.1-8b", "--tp", "16", "--json"});
  REQUIRE(r.exit_code == 0);
  auto doc = nlohmann::json::parse(r.out);
  CHECK(doc["bytes_per_token"].get<std::int64_t>() == 32 * 1 * 256 * 2);
  CHECK(doc["layer_groups"][0]["kv_heads"].get<std::int64_t>() == 1);
  CHECK(doc["placement"]["devices"].get<std::int64_t>() == 16);

  // Uneven pipeline split: 32 layers in 3 stages -> 11, 11, 10; the first stage binds.
  r = run_cli({"size", "--model", "llama-3.1-8b", "--pp", "3"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("0-10") && Catch::Contains("11-21") && Catch::Contains("22-31") &&
                        Catch::Contains("binds"));

  // Gemma 3 at 32,768 tokens keeps 1,024 positions on its 52 local layers.
  r = run_cli({"size", "--model", "gemma-3-27b", "--tokens", "32768", "--json"});
  REQUIRE(r.exit_code == 0);
  doc = nlohmann::json::parse(r.out);
  CHECK(doc["sequences"]["rows"][0]["bytes_per_sequence"].get<std::int64_t>() ==
        10LL * 32768 * 8192 + 52LL * 1024 * 8192);

  // DeepSeek-V3: both MLA forms, named in the sheet.
  r = run_cli({"size", "--model", "deepseek-v3"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("mla latent") && Catch::Contains("70,272"));
  r = run_cli({"size", "--model", "deepseek-v3", "--mla-form", "decompressed"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("mla decompressed") && Catch::Contains("4,997,120"));  // 61 x 128 x 320 x 2
}

TEST_CASE("kvsim size: a budget, its terms and vLLM's concurrency line") {
  auto r = run_cli({"size", "--model", "llama-3.1-8b", "--tokens", "4096", "--device", "H100-80GB", "--json"});
  REQUIRE(r.exit_code == 0);
  const auto doc = nlohmann::json::parse(r.out);
  const auto& b = doc["budget"];
  CHECK(b["device_total_bytes"].get<std::int64_t>() == 81559LL * 1048576);
  CHECK(b["usable_bytes"].get<std::int64_t>() == 76'968'728'985);  // floor(x 0.9)
  CHECK(b["weights_bytes_per_device"].get<std::int64_t>() == 8'030'261'248LL * 2);
  CHECK(b["kv_budget_bytes"].get<std::int64_t>() == 76'968'728'985 - 16'060'522'496 - 1'073'741'824);
  CHECK(doc["paged"]["num_blocks"].get<std::int64_t>() == 59'834'464'665 / (32 * 16 * 4096));
  CHECK(doc["paged"]["concurrency"][0]["blocks_per_request"].get<std::int64_t>() == 4096 / 16);
  // A JSON number, not a string (issue 14): 28,531 / 256 = 111.449..., two decimals.
  REQUIRE(doc["paged"]["concurrency"][0]["max_concurrency"].is_number());
  CHECK(doc["paged"]["concurrency"][0]["max_concurrency"].get<double>() == 111.45);
  REQUIRE(b["gpu_memory_utilization"].is_number());
  CHECK(b["gpu_memory_utilization"].get<double>() == 0.9);

  // --seqs B at T: 112 x 256 = 28,672 blocks > 28,531, so 112 do not fit and 111 do.
  r = run_cli({"size", "--model", "llama-3.1-8b", "--tokens", "4096", "--seqs", "112", "--device", "H100-80GB"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("--seqs 112 of 4,096 tokens: does NOT fit: they need 112 x 256 blocks and the "
                                    "pool has 28,531; at most 111 such sequences fit"));
  r = run_cli({"size", "--model", "llama-3.1-8b", "--tokens", "4096", "--seqs", "111", "--device", "H100-80GB", "--json"});
  REQUIRE(r.exit_code == 0);
  const auto fit = nlohmann::json::parse(r.out);
  CHECK(fit["paged"]["concurrency"][0]["seqs_fit"] == true);
  CHECK(fit["paged"]["concurrency"][0]["max_seqs"].get<std::int64_t>() == 111);
  // 111 x 4,096 x 131,072 bytes = 59,592,671,232 = 55.50 GiB (59.59 GB), numbers in JSON.
  REQUIRE(fit["sequences"]["rows"][0]["gib"].is_number());
  CHECK(fit["sequences"]["rows"][0]["gib"].get<double>() == 55.5);
  CHECK(fit["sequences"]["rows"][0]["gb"].get<double>() == 59.59);

  r = run_cli({"size", "--model", "llama-3.1-8b", "--tokens", "4096", "--device", "H100-80GB"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("Maximum concurrency for 4,096 tokens per request: 111.45x"));
  CHECK_THAT(r.out, Catch::Contains("x gpu-memory-utilization 0.9") && Catch::Contains("= KV budget") &&
                        Catch::Contains("59,834,464,665"));

  // A direct budget: 10 GiB / (32 layers x 16 tokens x 4,096 bytes) = 5,120 blocks.
  r = run_cli({"size", "--model", "llama-3.1-8b", "--tokens", "4096", "--kv-budget", "10GiB"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("5,120 blocks") && Catch::Contains("20.00x"));

  // Mistral with 1 GB and 1-token blocks: 1,000,000,000 / (32 x 4,096) = 7,629 blocks, but a
  // 32,768-token request keeps min(4,095 + 8,192, 32,768) + 1 = 12,288 blocks on its windows.
  r = run_cli({"size", "--model", "mistral-7b-v0.1", "--tokens", "32768", "--kv-budget", "1GB", "--block-size", "1"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("0.62x (7,629 / 12,288 blocks)") && Catch::Contains("less than one request"));

  // Without a budget there is no pool to size: the paging options are refused, not ignored.
  for (const char* flag : {"--block-size", "--max-num-batched-tokens"}) {
    r = run_cli({"size", "--model", "llama-3.1-8b", "--tokens", "4096", flag, "32"});
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(std::string(flag) + ": sizes the paged pool, which needs a budget"));
  }

  // Under a budget the chunk caps only sliding windows: refused for a model without any, kept
  // for Mistral's (and for an engine's start-up, whose profile batch it sizes).
  r = run_cli({"size", "--model", "llama-3.1-8b", "--tokens", "4096", "--kv-budget", "10GiB", "--max-num-batched-tokens",
               "2048"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--max-num-batched-tokens: caps the blocks a sliding-window layer keeps, and "
                                    "llama-3.1-8b has none"));
  CHECK(run_cli({"size", "--model", "mistral-7b-v0.1", "--tokens", "4096", "--kv-budget", "10GiB",
                 "--max-num-batched-tokens", "2048"}).exit_code == 0);
  CHECK(run_cli({"size", "--model", "llama-3.1-8b", "--tokens", "4096", "--device", "H100-80GB", "--engine", "vllm",
                 "--max-num-batched-tokens", "2048"}).exit_code == 0);

  // Sizes past 64 bits are an input error, not a wrapped number.
  r = run_cli({"size", "--model", "llama-3.1-8b", "--tokens", "9223372036854775807"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("overflows 64 bits"));

  // The seed example needs a parameter count for its weights.
  r = run_cli({"size", "--model", "seed-example", "--device", "A100-80GB", "--params", "13B", "--tokens", "4096"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("13,000,000,000 params (--params)"));
}

TEST_CASE("kvsim size --engine vllm --weights-bytes: the weights row says where the weights come from") {
  // 16GB = 16,000,000,000 bytes on one device: the weights term is that total, given, not
  // counted tensor by tensor.
  const auto r = run_cli({"size", "--model", "llama-3.1-8b", "--device", "H100-80GB", "--engine", "vllm",
                          "--weights-bytes", "16GB"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("16,000,000,000") &&
                        Catch::Contains("from --weights-bytes (16,000,000,000 bytes, spread evenly over the devices)"));
  CHECK_THAT(r.out, !Catch::Contains("tensor by tensor (see below)"));
  const auto j = run_cli({"size", "--model", "llama-3.1-8b", "--device", "H100-80GB", "--engine", "vllm",
                          "--weights-bytes", "16GB", "--json"});
  REQUIRE(j.exit_code == 0);
  const auto doc = nlohmann::json::parse(j.out);  // kept: the loop below walks into it
  int weights_rows = 0;
  for (const auto& term : doc["startup"]["stages"][0]["terms"]) {
    if (term["name"] != "- weights") continue;
    ++weights_rows;
    CHECK(term["bytes"].get<std::int64_t>() == 16'000'000'000);
    CHECK_THAT(term["rule"].get<std::string>(), Catch::StartsWith("from --weights-bytes"));
  }
  CHECK(weights_rows == 1);
  // Counted from the config, the row still says so.
  const auto counted = run_cli({"size", "--model", "llama-3.1-8b", "--device", "H100-80GB", "--engine", "vllm"});
  REQUIRE(counted.exit_code == 0);
  CHECK_THAT(counted.out, Catch::Contains("tensor by tensor (see below)"));
}

TEST_CASE("size and replay refuse --weights-bytes beside --params or --weight-dtype") {
  // --weights-bytes replaces params x bits per weight, so either term beside it would be
  // dropped without a word (replay's roofline read 16 GB of weights with --params 70B given).
  for (const char* term : {"--params", "--weight-dtype"}) {
    const char* value = std::string_view(term) == "--params" ? "70B" : "fp8";
    for (const char* command : {"size", "replay"}) {
      std::vector<std::string> args{command};
      if (std::string_view(command) == "replay") args.push_back(std::string(KVSIM_SOURCE_DIR) + "/traces/chat-mix.csv");
      for (const char* a : {"--model", "llama-3.1-8b", "--device", "H100-80GB", "--weights-bytes", "16GB"}) {
        args.push_back(a);
      }
      args.push_back(term);
      args.push_back(value);
      const auto r = run_cli(args);
      INFO(command << " " << term);
      CHECK(r.exit_code == 2);
      CHECK_THAT(r.err, Catch::Contains("--weights-bytes") &&
                            Catch::Contains(std::string("so ") + term + " (a term of parameters x bits per weight) "
                                            "has no effect: give one or the other"));
    }
  }
}

TEST_CASE("kvsim size --pp: a sequence is sized on the stage that holds the most at its length") {
  // Five layers, 2 KV heads of 128: 1,024 bytes a layer a position. get_pp_indices gives
  // stage 0 layers 0-2, all sliding (window 128), and stage 1 layers 3-4, full attention.
  // Stage 0 has more bytes per token (3,072 against 2,048), but holds at most 128 positions.
  const std::string cfg = kvsim::test::write_file(
      "pp-windows.json",
      R"({"model_type": "llama", "hidden_size": 1024, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 128,)"
      R"( "num_hidden_layers": 5, "max_position_embeddings": 131072, "sliding_window": 128,)"
      R"( "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention", "full_attention"],)"
      R"( "torch_dtype": "bfloat16"})");
  const auto r = run_cli({"size", "--config", cfg, "--pp", "2", "--tokens", "100,100000", "--seqs", "4", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const Json rows = Json::parse(r.out)["sequences"]["rows"];
  // 100 tokens: stage 0 keeps 3 x 100 x 1,024 = 307,200 bytes, stage 1 2 x 100 x 1,024.
  CHECK(rows[0]["bytes_per_sequence"] == 307'200);
  CHECK(rows[0]["stage"] == 0);
  // 100,000 tokens: stage 0 keeps 3 x 128 x 1,024 = 393,216, stage 1 2 x 100,000 x 1,024.
  CHECK(rows[1]["bytes_per_sequence"] == 204'800'000);
  CHECK(rows[1]["stage"] == 1);
  CHECK(rows[1]["bytes"] == 4 * 204'800'000LL);
  // Both lengths at once on one device: stage 1 holds 2 x 100,100 x 1,024 of them.
  const Json total = Json::parse(r.out)["sequences"]["total"];
  CHECK(total["bytes_per_sequence"] == 205'004'800);
  CHECK(total["stage"] == 1);
}

TEST_CASE("kvsim size and models: help, usage errors and input errors") {
  auto r = run_cli({"size", "--help"});
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("Usage: kvsim size") && Catch::Contains("--gpu-memory-utilization"));
  r = run_cli({"models", "--help"});
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("Usage: kvsim models"));

  r = run_cli({"size", "--model", "llama-3.1-8b", "--bogus"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("Usage"));
  r = run_cli({"size"});  // neither --model nor --config
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--model"));
  r = run_cli({"models", "extra"});
  CHECK(r.exit_code == 2);

  // A value typed on the command line that kvsim rejects is a usage error: exit 2, the
  // option named, the usage printed.
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad_values = {
      {{"size", "--model", "llama-4"}, "--model"},
      {{"size", "--model", "llama-3.1-8b", "--dtype", "fp7"}, "--dtype"},
      {{"size", "--model", "llama-3.1-8b", "--tp", "3"}, "--tp"},
      {{"size", "--model", "llama-3.1-8b", "--tokens", "4096,x"}, "--tokens"},
      {{"size", "--model", "llama-3.1-8b", "--device", "H100-80GB", "--gpu-memory-utilization", "1.5"},
       "--gpu-memory-utilization"},
      {{"size", "--model", "llama-3.1-8b", "--params", "8B"}, "--device"},  // a budget option without a device
      // Past the model's 131,072 positions: vLLM's _get_and_verify_max_len refuses it, so a
      // 200,000-token check would say "yes" for an engine that never starts.
      {{"size", "--model", "llama-3.1-8b", "--device", "H100-80GB", "--max-model-len", "131073"}, "--max-model-len"},
  };
  for (const auto& [args, option] : bad_values) {
    INFO(args.back());
    r = run_cli(args);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(option) && Catch::Contains("Usage: kvsim size"));
  }
  // At the maximum it runs.
  CHECK(run_cli({"size", "--model", "llama-3.1-8b", "--device", "H100-80GB", "--max-model-len", "131072"}).exit_code == 0);
  r = run_cli({"size", "--model", "llama-4"});
  CHECK_THAT(r.err, Catch::Contains("llama-3.1-8b"));  // the known presets are listed
  // A result that cannot be computed from valid options is an input error: exit 1.
  r = run_cli({"size", "--model", "deepseek-v3", "--tp", "8", "--device", "H100-80GB"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("nothing is left for the KV cache"));
  CHECK_THAT(r.err, !Catch::Contains("internal error"));
}

TEST_CASE("kvsim size --config: each bad config exits 1 naming the file and the field") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bad/not-json.json", "not valid JSON"},
      {"bad/missing-layers.json", "field 'num_hidden_layers'"},
      {"bad/zero-heads.json", "field 'num_attention_heads'"},
      {"bad/head-dim-not-dividing.json", "field 'head_dim'"},
      {"bad/layer-types-length.json", "field 'layer_types'"},
      {"bad/kv-heads-not-dividing.json", "field 'num_key_value_heads'"},
      // Lengths past a trace's longest request (2^40): a row of them overflowed the pools' bytes.
      {"bad/context-past-2-40.json", "field 'max_position_embeddings': 4611686018427387904 positions is implausible"},
      {"bad/rope-past-2-40.json", "field 'rope_scaling': scales the context past 2^40 positions"},
  };
  for (const auto& [file, field] : cases) {
    INFO(file);
    const auto r = run_cli({"size", "--config", config(file)});
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains(config(file)) && Catch::Contains(field));
    CHECK(r.out.empty());
  }
}

TEST_CASE("kvsim models lists the presets") {
  auto r = run_cli({"models"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("llama-3.1-8b") && Catch::Contains("meta-llama/Llama-3.1-8B config.json") &&
                        Catch::Contains("10 full + 52 sliding 1024") && Catch::Contains("131,072"));
  r = run_cli({"models", "--json"});
  REQUIRE(r.exit_code == 0);
  const auto doc = nlohmann::json::parse(r.out);
  REQUIRE(doc.size() == 17);
  CHECK(doc[0]["name"] == "llama-3.1-8b");
  CHECK(doc[0]["bf16_bytes_per_token"].get<std::int64_t>() == 131'072);
  for (const auto& m : doc) {
    // MLA has no head_dim: null, as is a parameter count no one published (pandas reads both
    // as missing, where 0 would be a number).
    if (m["name"] == "deepseek-v3") {
      CHECK(m["bf16_bytes_per_token"].get<std::int64_t>() == 61 * 1152);
      CHECK(m["head_dim"].is_null());
    }
    if (m["name"] == "llama-3.2-3b") CHECK(m["parameter_count"].is_null());
    if (m["name"] == "llama-3.1-8b") CHECK(m["parameter_count"] == 8'030'261'248);
    // Qwen3: 64 layers x 8 KV heads x (128 + 128) x 2 B; the MoE: 48 x 4 x 256 x 2.
    if (m["name"] == "qwen3-32b") CHECK(m["bf16_bytes_per_token"].get<std::int64_t>() == 262'144);
    if (m["name"] == "qwen3-30b-a3b") CHECK(m["bf16_bytes_per_token"].get<std::int64_t>() == 98'304);
    // Mixtral and Phi-mini-MoE: 32 x 8 x 256 x 2.
    if (m["name"] == "mixtral-8x7b-v0.1") CHECK(m["bf16_bytes_per_token"].get<std::int64_t>() == 131'072);
    if (m["name"] == "phi-mini-moe") CHECK(m["bf16_bytes_per_token"].get<std::int64_t>() == 131'072);
  }
}
