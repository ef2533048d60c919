// kvsim replay through the real program: byte-exact figures for a hand-computed trace,
// determinism, parallel runs equal to sequential ones, and its errors.
#include <cmath>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "cli_util.h"
#include "kvsim/units.h"
#include "trace_test_util.h"

using namespace kvsim;
using Json = nlohmann::json;

namespace {

// Llama-3.1-8B in bf16: 32 layers x 8 KV heads x (128 + 128) values x 2 bytes.
constexpr std::int64_t kLlamaBytesPerToken = 32 * 8 * (128 + 128) * 2;

const Json* run_named(const Json& doc, const std::string& allocator) {
  for (const auto& run : doc["runs"]) {
    if (run["allocator"] == allocator) return &run;
  }
  return nullptr;
}

// The bundled chat mix through paged under a budget of `budget`, with `extra` options: the
// JSON printed (the run must succeed).
std::string chat_mix_json(const std::string& budget, const std::vector<std::string>& extra) {
  std::vector<std::string> args{"replay", std::string(KVSIM_SOURCE_DIR) + "/traces/chat-mix.csv",
                                "--kv-budget", budget, "--allocator", "paged", "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = test::run_cli(args);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return r.out;
}

}  // namespace

TEST_CASE("replay: one request through the CLI, byte-exact for Llama-3.1-8B") {
  static_assert(kLlamaBytesPerToken == 131'072);
  const std::string trace = test::write_file("one.csv", "id,arrival,prompt_tokens,output_tokens,max_tokens\nr1,0,100,50,50\n");
  const auto r = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--cost", "constant:step=1ms,prefill-token=0ps",
                                "--allocator", "paged:block=16,dense-static:reserve=max-tokens,dense-static", "--json"});
  REQUIRE(r.exit_code == 0);
  const Json doc = Json::parse(r.out);
  // Paged ends with ceil(150 / 16) = 10 blocks of 16 positions.
  const Json* paged = run_named(doc, "paged:block=16");
  REQUIRE(paged != nullptr);
  CHECK((*paged)["memory_bytes"]["allocated_slots"]["peak"] == 160 * kLlamaBytesPerToken);
  CHECK((*paged)["memory_bytes"]["effective_tokens"]["peak"] == 150 * kLlamaBytesPerToken);
  // 50 steps of 1 ms: the first produces token 1, the last token 50.
  CHECK((*paged)["time"]["duration_ns"] == 50'000'000);
  CHECK((*paged)["leak_check"]["allocated_bytes_at_end"] == 0);
  // Dense static reserves prompt + max_tokens = 150 positions, or the model's 131,072.
  const Json* dense = run_named(doc, "dense-static:reserve=max-tokens");
  REQUIRE(dense != nullptr);
  CHECK((*dense)["memory_bytes"]["allocated_slots"]["peak"] == 150 * kLlamaBytesPerToken);
  const Json* full = run_named(doc, "dense-static:reserve=max-model-len");
  REQUIRE(full != nullptr);
  CHECK((*full)["memory_bytes"]["allocated_slots"]["peak"] == std::int64_t{131'072} * kLlamaBytesPerToken);
  // Past prompt + max_tokens = 150 the row is padding, all 50 ms long; up to 150, reservation.
  CHECK((*full)["internal_fragmentation_bytes"]["mean"]["padding"] == (131'072 - 150) * kLlamaBytesPerToken);
  CHECK((*dense)["internal_fragmentation_bytes"]["mean"]["padding"] == 0);
}

TEST_CASE("replay: under a budget the header gives each allocator's own simulated span when they differ") {
  // Dense-static reserving the model's whole length serves a request or two at a time under
  // 2 GB, paged many: their schedules, so their spans, differ. The header named only the
  // first run's.
  const std::string trace = std::string(KVSIM_SOURCE_DIR) + "/traces/chat-mix.csv";
  const std::vector<std::string> args{"replay", trace, "--requests", "40", "--kv-budget", "2GB", "--allocator",
                                      "dense-static,paged", "--quiet"};
  auto with_json = args;
  with_json.push_back("--json");
  const auto table = test::run_cli(args);
  const auto json = test::run_cli(with_json);
  REQUIRE(table.exit_code == 0);
  REQUIRE(json.exit_code == 0);
  const Json runs = Json::parse(json.out)["runs"];
  REQUIRE(runs.size() == 2);
  const std::int64_t dense = runs[0]["time"]["duration_ns"].get<std::int64_t>();
  const std::int64_t paged = runs[1]["time"]["duration_ns"].get<std::int64_t>();
  REQUIRE(dense != paged);
  CHECK_THAT(table.out, Catch::Contains("trace    40 requests over " + format_seconds(dense, 3) + " s (" +
                                        runs[0]["allocator"].get<std::string>() + "), " + format_seconds(paged, 3) +
                                        " s (" + runs[1]["allocator"].get<std::string>() + ") simulated\n"));
}

TEST_CASE("replay: a cost coefficient not named is the roofline's, and a step must take time") {
  const std::string trace = test::write_file("one-cost.csv", "id,arrival,prompt_tokens,output_tokens\nr1,0,100,50\n");
  // Llama-3.1-8B bf16 on an H100-80GB: 90% of 3.35e12 B/s = 3.015e12 B/s; 80.3% of 989.5e12
  // dense BF16 FLOP/s = 794.5685e12 FLOP/s. The matmuls a token goes through: 32 layers x
  // (4096 x 4096 x 2 + 2 x 4096 x 1024 + 3 x 4096 x 14336) = 6,979,321,856 parameters. A step
  // reads every weight but the input embedding's table (128,256 x 4,096 = 525,336,576
  // parameters, untied), of which it looks up only its tokens' rows:
  //   base          = ceil(7,504,924,672 params x 2 B x 1e12 ps / 3.015e12 B/s) = 4,978,391,159 ps
  //   prefill token = ceil(2 x 6,979,321,856 x 1e12 / 794.5685e12)              =    17,567,578 ps
  //   position read = ceil(131,072 B x 1e12 / 3.015e12)                          =        43,474 ps
  auto r = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--cost", "linear:decode-seq=0ps", "--json"});
  REQUIRE(r.exit_code == 0);
  Json cost = Json::parse(r.out)["cost_model"];
  CHECK(cost["step_base_ps"] == 4'978'391'159);
  CHECK(cost["per_prompt_token_ps"] == 17'567'578);
  CHECK(cost["per_decoding_sequence_ps"] == 0);
  CHECK(cost["per_position_read_ps"] == 43'474);
  r = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--cost", "constant:step=7ms", "--json"});
  REQUIRE(r.exit_code == 0);
  cost = Json::parse(r.out)["cost_model"];
  CHECK(cost["step_base_ps"] == 7'000'000'000);
  CHECK(cost["per_prompt_token_ps"] == 17'567'578);
  CHECK(cost["per_decoding_sequence_ps"] == 0);
  CHECK(cost["per_position_read_ps"] == 0);
  // Without a budget the weights' terms still set what the roofline reads each step:
  // --weights-bytes 8GB, ceil(8e9 B x 1e12 / 3.015e12) = 2,653,399,669 ps; --params 4e9,
  // ceil((4e9 - 525,336,576 table) x 2 B x 1e12 / 3.015e12) = 2,304,917,695 ps.
  r = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--weights-bytes", "8GB", "--cost",
                     "linear:decode-seq=0ps", "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK(Json::parse(r.out)["cost_model"]["step_base_ps"] == 2'653'399'669);
  r = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--params", "4000000000", "--cost",
                     "linear:decode-seq=0ps", "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK(Json::parse(r.out)["cost_model"]["step_base_ps"] == 2'304'917'695);
  // ... and do nothing when --cost names every term itself.
  r = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--params", "4000000000", "--cost",
                     "constant:step=1ms,prefill-token=0ps"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--params: gives the weights the roofline reads each step, and --cost names "
                                    "every term of its own: it would have no effect"));
  // The seed guide's model has no vocabulary size, so no weights to read: a cost naming every
  // term times it without them. 100 + 50 tokens end holding 150 positions, 10 blocks of 16:
  // 160 x 163,840 = 26,214,400 bytes allocated, 150 x 163,840 = 24,576,000 effective.
  r = test::run_cli({"replay", trace, "--model", "seed-example", "--allocator", "paged", "--cost",
                     "constant:step=1ms,prefill-token=0ps", "--json"});
  REQUIRE(r.exit_code == 0);
  const Json seed = Json::parse(r.out)["runs"][0]["memory_bytes"];
  CHECK(seed["allocated_slots"]["peak"] == 26'214'400);
  CHECK(seed["effective_tokens"]["peak"] == 24'576'000);
  // Nor does a KV budget given in bytes (one derived from a device subtracts the weights):
  // the same run under 100 blocks' worth, 100 x 16 x 163,840 bytes, which it fits.
  r = test::run_cli({"replay", trace, "--model", "seed-example", "--allocator", "paged", "--cost",
                     "constant:step=1ms,prefill-token=0ps", "--kv-budget", "262144000", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(Json::parse(r.out)["runs"][0]["memory_bytes"]["allocated_slots"]["peak"] == 26'214'400);
  // The roofline needs them, and says where they come from.
  r = test::run_cli({"replay", trace, "--model", "seed-example"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("seed-example: field 'vocab_size': unknown, so the parameter count cannot be "
                                    "estimated; pass --params or --weights-bytes"));
  // A config the parameter count cannot be estimated from names itself and the field.
  const std::string config = test::write_file(
      "no-intermediate.json",
      R"({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32,)"
      R"( "num_key_value_heads": 8, "max_position_embeddings": 8192, "vocab_size": 128256, "torch_dtype": "bfloat16"})");
  r = test::run_cli({"replay", trace, "--config", config});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains(config + ": field 'intermediate_size': unknown, so the parameter count cannot be "
                                             "estimated; pass --params or --weights-bytes"));
  for (const char* zero : {"constant:step=0ms", "linear:base=0s,decode-seq=1ms"}) {
    r = test::run_cli({"replay", trace, "--cost", zero});
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("--cost") && Catch::Contains("every engine step takes time"));
    CHECK(r.out.empty());
  }
}

TEST_CASE("replay: --timing-device times a device without a budget, and --replicas adds a column per replica") {
  const std::string trace = test::write_file("timing.csv", "id,arrival,prompt_tokens,output_tokens\nr1,0,100,5\nr2,0.001,100,5\n");
  auto r = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--allocator", "paged", "--timing-device",
                          "RTX-PRO-6000", "--json"});
  REQUIRE(r.exit_code == 0);
  Json j = Json::parse(r.out);
  CHECK(j["cost_model"]["roofline"]["device"] == "RTX-PRO-6000");
  CHECK_THAT(j["budget"].get<std::string>(), Catch::Contains("none"));
  // 90% of 1,597 GB/s = 1.4373e12 B/s: 131,072 B per position -> ceil(91,193.21...) ps.
  CHECK(j["cost_model"]["roofline"]["per_kv_position_ps"] == 91'194);
  // The activations (docs/replay.md), in bf16 values a token for Llama-3.1-8B's 32 layers
  // (hidden 4,096, q 4,096, k and v 1,024 each, MLP 14,336): the matmuls' inputs and outputs
  // 32 x (2 x 4,096 + 2 x 4,096 + 2 x 1,024 + 2 x 4,096 + 3 x 14,336) = 2,228,224 values,
  // 4,456,448 B -> 3,100,569.1.. ps; the element-wise kernels 32 x (8 x 4,096 + 2 x 5,120 + 3 x
  // 14,336) + 4 x 4,096 = 2,768,896 values -> 3,852,913.1.. ps; per sampled token the LM head's
  // 4,096 + 128,256 values -> 184,167.5.. ps and the sampler's 10 x 128,256 bytes ->
  // 892,339.8.. ps; each rounded up.
  CHECK(j["cost_model"]["roofline"]["per_token_matmul_io_ps"] == 3'100'570);
  CHECK(j["cost_model"]["roofline"]["per_token_elementwise_ps"] == 3'852'914);
  CHECK(j["cost_model"]["roofline"]["per_sampled_token_matmul_io_ps"] == 184'168);
  CHECK(j["cost_model"]["roofline"]["per_sampled_token_elementwise_ps"] == 892'340);
  CHECK(j["cost_model"]["roofline"]["per_token_collective_ps"] == 0);  // one device: no collectives
  // Tensor parallelism 2 over the preset's link (53 GB/s one way, 7.5 us a collective):
  // 2 x 32 layers + 1 = 65 all-reduces of 4,096 x 2 = 8,192 bytes per token, a ring of two
  // sending them once: 532,480 B / 53e9 B/s = 10,046,792.45 ps, rounded up; the logits'
  // all-gather, half of 128,256 x 2 bytes per sampled token: 128,256 / 53e9 s = 2,419,924.53
  // ps, rounded up; 65 + 1 collectives of 7.5 us per step: 495,000,000 ps.
  r = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--allocator", "paged", "--timing-device",
                     "RTX-PRO-6000", "--tp", "2", "--json"});
  REQUIRE(r.exit_code == 0);
  j = Json::parse(r.out);
  CHECK(j["cost_model"]["roofline"]["per_token_collective_ps"] == 10'046'793);
  CHECK(j["cost_model"]["roofline"]["per_sampled_token_collective_ps"] == 2'419'925);
  CHECK(j["cost_model"]["roofline"]["collective_step_ps"] == 495'000'000);
  CHECK(j["cost_model"]["roofline"]["per_replica_token_collective_ps"] == 0);  // not an MoE model's replicas
  r = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--allocator", "paged", "--replicas", "2", "--json"});
  REQUIRE(r.exit_code == 0);
  j = Json::parse(r.out);
  REQUIRE(j["runs"].size() == 3);
  // Both replicas are empty when r1 arrives (replica 0), and r2 finds replica 0 busy. The
  // allocator stays the allocator (a key to group by); the replica is a field of its own,
  // null for the total.
  for (int k = 0; k < 3; ++k) {
    CHECK(j["runs"][k]["allocator"] == "paged:block=16");
    CHECK(j["runs"][k]["replicas"] == 2);
    CHECK(j["runs"][k]["requests"]["total"] == (k < 2 ? 1 : 2));
  }
  CHECK(j["runs"][0]["replica"] == 0);
  CHECK(j["runs"][1]["replica"] == 1);
  CHECK(j["runs"][2]["replica"].is_null());
  CHECK(j["runs"][2]["requests"]["completed"] == 2);
  // The same in CSV: replicas and replica after the allocator, empty for the total; the table
  // names the runs for people.
  r = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--allocator", "paged", "--replicas", "2", "--csv", "-"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::StartsWith("allocator,replicas,replica,requests,completed,") &&
                        Catch::Contains("\npaged:block=16,2,0,1,1,") && Catch::Contains("\npaged:block=16,2,1,1,1,") &&
                        Catch::Contains("\npaged:block=16,2,,2,2,"));
  r = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--allocator", "paged", "--replicas", "2"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("block=16 [replica 0: 1 routed]") && Catch::Contains("block=16 [replica 1: 1 routed]") &&
                        Catch::Contains("block=16 [2 replicas]"));
  // One engine's run has neither field.
  r = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--allocator", "paged", "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK_FALSE(Json::parse(r.out)["runs"][0].contains("replica"));
  r = test::run_cli({"replay", trace, "--timing-device", "H900"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--timing-device") && Catch::Contains("RTX-PRO-6000"));
  r = test::run_cli({"replay", trace, "--model", "qwen3-32b", "--expert-parallel", "--replicas", "2"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--expert-parallel"));
}

TEST_CASE("replay: an MoE model's replicas take every step together, a dense model's do not") {
  // 10 ms per step plus 1 ms per prefill token. r1 (30 tokens) goes to replica 0 and is
  // prefilled in 0-40 ms; r2 (1 token, at 1 ms) goes to replica 1. Dense (qwen3-32b): replica 1
  // prefills r2 at once, 1-12 ms, a TTFT of 11 ms. MoE (qwen3-30b-a3b): r2 waits for the next
  // aligned step, 40-51 ms (as long as its 11 ms prefill, longer than r1's 10 ms decode), a
  // TTFT of 50 ms (tests/replicas_test.cc works the same case through the library).
  const std::string trace =
      test::write_file("aligned.csv", "id,arrival,prompt_tokens,output_tokens\nr1,0,30,2\nr2,0.001,1,3\n");
  const auto ttft_of_replica_1 = [&](const std::string& model) {
    const auto r = test::run_cli({"replay", trace, "--model", model, "--allocator", "paged", "--replicas", "2", "--cost",
                                  "linear:base=10ms,prefill-token=1ms,decode-seq=0ms,context-token=0ms,expert-weights=0ms",
                                  "--json"});
    REQUIRE(r.exit_code == 0);
    const Json j = Json::parse(r.out);
    REQUIRE(j["runs"].size() == 3);
    CHECK(j["runs"][0]["latency"]["ttft"]["max_s"].get<double>() == Approx(0.040));
    return j["runs"][1]["latency"]["ttft"]["max_s"].get<double>();
  };
  CHECK(ttft_of_replica_1("qwen3-32b") == Approx(0.011));
  CHECK(ttft_of_replica_1("qwen3-30b-a3b") == Approx(0.050));
}

TEST_CASE("replay: an MoE model's aligned step reads the experts all the replicas' tokens reach") {
  // The case above with 16 ms to read all of a device's routed experts, charged by the share a
  // step's tokens reach (Qwen3-30B-A3B: 8 of 128 experts a token). Step 1, replica 0's 30
  // prompt tokens beside the dummy batch of one token vLLM runs on the idle replica 1, whose
  // token reaches the experts too: 10 + 30 + 16 x (1 - (15/16)^31) ms. Step 2: replica 1 prefills r2 (1
  // token) while replica 0 decodes r1 (1 token); each device's experts serve both tokens, a
  // share of 1 - (15/16)^2, so replica 1's step lasts 10 + 1 + 16 x 0.12109375 = 12.9375 ms
  // (12 ms if it counted its own token only), and r2, which arrived at 1 ms, waits out step 1.
  const std::string trace =
      test::write_file("aligned-experts.csv", "id,arrival,prompt_tokens,output_tokens\nr1,0,30,2\nr2,0.001,1,3\n");
  const auto r = test::run_cli({"replay", trace, "--model", "qwen3-30b-a3b", "--allocator", "paged", "--replicas", "2",
                                "--cost",
                                "linear:base=10ms,prefill-token=1ms,decode-seq=0ms,context-token=0ms,expert-weights=16ms",
                                "--json"});
  REQUIRE(r.exit_code == 0);
  const Json j = Json::parse(r.out);
  REQUIRE(j["runs"].size() == 3);
  const double step1 = 0.010 + 0.030 + 0.016 * (1 - std::pow(15.0 / 16.0, 31));
  CHECK(j["runs"][0]["latency"]["ttft"]["max_s"].get<double>() == Approx(step1).epsilon(1e-6));
  CHECK(j["runs"][1]["latency"]["ttft"]["max_s"].get<double>() == Approx(step1 + 0.0129375 - 0.001).epsilon(1e-6));
  // The experts' read is in the cost model's JSON and in the table's cost line; a dense
  // model's has neither.
  CHECK(j["cost_model"]["routed_expert_weights_ps"] == 16'000'000'000);
  CHECK(j["cost_model"]["routed_experts"] == 128);
  CHECK(j["cost_model"]["experts_per_token"] == 8);
  const auto table = test::run_cli({"replay", trace, "--model", "qwen3-30b-a3b", "--allocator", "paged", "--cost",
                                    "linear:base=10ms,prefill-token=1ms,decode-seq=0ms,context-token=0ms,expert-weights=16ms"});
  REQUIRE(table.exit_code == 0);
  CHECK_THAT(table.out, Catch::Contains("a step costs 10.000 ms + 1.000 ms per prompt token + 0 ps per decoding sequence + "
                                        "0 ps per position read + 16.000 ms x the share of the 128 routed experts "
                                        "(8 a token) reached"));
  const auto dense = test::run_cli({"replay", trace, "--model", "qwen3-32b", "--allocator", "paged", "--json"});
  REQUIRE(dense.exit_code == 0);
  CHECK_FALSE(Json::parse(dense.out)["cost_model"].contains("routed_expert_weights_ps"));
}

TEST_CASE("replay: on a FlashAttention 2 device the cost line and JSON give a decode's tile costs") {
  // Qwen3-32B at TP 2: each RTX PRO 6000 (compute capability 12.0) holds 32 query heads and 4
  // KV heads of width 128 in 64 layers, and computes 500 TFLOPS x 77.6% = 388e12 FLOP/s. A
  // useful (query, key) pair: 32 heads x 4 x 128 x 64 layers = 1,048,576 FLOPs = 2,702.5 ps,
  // rounded up to 2,703. A decode's position in a step with a prompt chunk is 64 tile rows:
  // 64 x 2,703 = 172,992 ps; in a decode-only step one 64-row tile per KV head: 4 x 64 x 512
  // x 64 = 8,388,608 FLOPs = 21,620.12 ps, rounded up.
  const std::string trace = test::write_file("tiles.csv", "id,arrival,prompt_tokens,output_tokens\nr1,0,30,2\n");
  const auto r = test::run_cli(
      {"replay", trace, "--model", "qwen3-32b", "--tp", "2", "--timing-device", "RTX-PRO-6000", "--json"});
  REQUIRE(r.exit_code == 0);
  const Json roofline = Json::parse(r.out)["cost_model"]["roofline"];
  CHECK(roofline["per_attention_pair_ps"] == 2'703);
  CHECK(roofline["per_decode_kv_position_tile_ps"] == 172'992);
  CHECK(roofline["per_decode_kv_position_packed_ps"] == 21'621);
  const auto table =
      test::run_cli({"replay", trace, "--model", "qwen3-32b", "--tp", "2", "--timing-device", "RTX-PRO-6000"});
  REQUIRE(table.exit_code == 0);
  CHECK_THAT(table.out, Catch::Contains("+ 172.992 ns per KV position a decode reads (21.621 ns in a decode-only step)"));
  // An H100 runs FA3, which packs the heads in every step: pairs only, and no tile fields.
  const auto hopper = test::run_cli({"replay", trace, "--model", "qwen3-32b", "--tp", "2", "--json"});
  REQUIRE(hopper.exit_code == 0);
  CHECK_FALSE(Json::parse(hopper.out)["cost_model"]["roofline"].contains("per_decode_kv_position_tile_ps"));
}

TEST_CASE("replay: the peak's time is trace time in every output, nothing measured is n/a, never 0") {
  // Arrival at 10 s, 1 ms steps: step k starts at 10 s + (k - 1) ms and writes position 100 + k.
  // Position 145 is the first of the 10th block of 16, so the peak starts at step 45: 10.044 s.
  const std::string trace = test::write_file("late.csv", "id,arrival,prompt_tokens,output_tokens\nr1,10,100,50\n");
  const std::string csv = test::scratch_path("late-out.csv");
  const std::vector<std::string> args{"replay", trace, "--model", "llama-3.1-8b", "--allocator", "paged",
                                      "--cost", "constant:step=1ms,prefill-token=0ps"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> all = args;
    all.insert(all.end(), extra.begin(), extra.end());
    return test::run_cli(all);
  };
  auto r = with({"--json", "--csv", csv});
  REQUIRE(r.exit_code == 0);
  const Json slots = Json::parse(r.out)["runs"][0]["memory_bytes"]["allocated_slots"];
  CHECK(slots["peak"] == 160 * kLlamaBytesPerToken);
  CHECK(slots["peak_at_s"] == 10.044);
  CHECK_THAT(test::slurp(csv), Catch::Contains(",10.044000000,"));
  r = with({});
  CHECK_THAT(r.out, Catch::Contains("peak at, s (trace time)") && Catch::Contains("10.044"));

  // A budget of 50 positions cannot hold the 100-token prompt: refused, nothing allocated,
  // nothing completed, and the step that refused it is not time at full capacity.
  r = with({"--kv-budget", std::to_string(50 * kLlamaBytesPerToken), "--json", "--csv", csv});
  REQUIRE(r.exit_code == 0);
  const Json run = Json::parse(r.out)["runs"][0];
  CHECK(run["serving"]["refused_too_large"] == 1);
  CHECK(run["serving"]["time_at_full_capacity_ns"] == 0);
  CHECK(run["memory_bytes"]["allocated_slots"]["peak_at_s"].is_null());
  CHECK(run["latency"]["ttft"]["count"] == 0);
  CHECK(run["latency"]["ttft"]["p50_s"].is_null());
  CHECK(run["latency"]["end_to_end"]["p99_s"].is_null());
  CHECK(run["serving"]["waiting"]["p50_s"].is_null());
  // Nothing allocated: token-level usage (effective / allocated) is a ratio of nothing, while
  // block-level usage is 0 of the capacity.
  CHECK(run["usage"]["token_level"].is_null());
  CHECK(run["usage"]["block_level"] == 0.0);
  // Empty cells, not zero seconds: the header and the row split on commas (no quoted cells here).
  const std::string table = test::slurp(csv);
  const auto cells = [](const std::string& line) {
    std::vector<std::string> out(1);
    for (char ch : line) {
      if (ch == ',') out.emplace_back();
      else out.back().push_back(ch);
    }
    return out;
  };
  const auto newline = table.find('\n');
  const auto header = cells(table.substr(0, newline));
  const auto row = cells(table.substr(newline + 1, table.find('\n', newline + 1) - newline - 1));
  REQUIRE(header.size() == row.size());
  for (const char* column : {"allocated_bytes_peak_at_s", "ttft_p50_s", "ttft_p99_s", "e2e_p50_s", "e2e_p99_s",
                             "waiting_p50_s", "waiting_p99_s", "token_usage"}) {
    const auto at = std::find(header.begin(), header.end(), column);
    REQUIRE(at != header.end());
    CHECK(row[static_cast<std::size_t>(at - header.begin())].empty());
  }
  r = with({"--kv-budget", std::to_string(50 * kLlamaBytesPerToken)});
  CHECK_THAT(r.out, Catch::Contains("TTFT p50 / p99, s") && Catch::Contains("n/a"));
  const auto usage_at = r.out.find("token-level (effective/allocated)");
  REQUIRE(usage_at != std::string::npos);
  const std::string usage_line = r.out.substr(usage_at, r.out.find('\n', usage_at) - usage_at);
  CHECK_THAT(usage_line, Catch::EndsWith(" n/a"));
}

TEST_CASE("replay: a hit rate over nothing looked up is n/a, null and an empty cell, never 0%") {
  // Two identical 15-token prompts, the second after the first has finished. A 16-token block
  // never fills, so paged caching queries no full block: its block hit rate is undefined, and
  // its token rate is 0 of 30 (vLLM counts every prompt token as queried). SGLang's radix
  // tree at page 1 finds the second prompt's first 14 tokens (the last is always computed):
  // 14 of 30 tokens. Neither run preempts, so no rate after preemption exists.
  std::string ids = "[";
  for (int i = 1; i <= 15; ++i) ids += std::to_string(i) + (i < 15 ? "," : "]");
  const std::string trace = test::write_file(
      "short-prompts.jsonl",
      "{\"input_toks\": 15, \"output_toks\": 2, \"arrival_time_ns\": 0, \"input_tok_ids\": " + ids + "}\n" +
          "{\"input_toks\": 15, \"output_toks\": 2, \"arrival_time_ns\": 1000000000, \"input_tok_ids\": " + ids +
          "}\n");
  const std::string csv = test::scratch_path("short-prompts.csv");
  const auto r = test::run_cli({"replay", trace, "--allocator", "paged:block=16,prefix-caching=on,radix:page=1",
                                "--device", "RTX-4090", "--json", "--csv", csv});
  REQUIRE(r.exit_code == 0);
  const Json doc = Json::parse(r.out);
  REQUIRE(doc["runs"].size() == 2);
  const Json& paged = doc["runs"][0]["prefix_cache"];
  CHECK(paged["queried_tokens"] == 30);
  CHECK(paged["hit_tokens"] == 0);
  CHECK(paged["hit_rate"] == 0.0);
  CHECK(paged["queried_blocks"] == 0);
  CHECK(paged["block_hit_rate"].is_null());
  CHECK(paged["preempted_hit_rate"].is_null());
  const Json& radix = doc["runs"][1]["prefix_cache"];
  CHECK(radix["queried_tokens"] == 30);
  CHECK(radix["hit_tokens"] == 14);
  CHECK(radix["hit_rate"] == 14.0 / 30.0);
  CHECK(radix["queried_blocks"] == 30);
  CHECK(radix["block_hit_rate"] == 14.0 / 30.0);
  CHECK(radix["preempted_hit_rate"].is_null());
  // The table says n/a for paged's block rate; the CSV's hit rates are 0 and 14/30.
  const auto table = test::run_cli({"replay", trace, "--allocator", "paged:block=16,prefix-caching=on",
                                    "--device", "RTX-4090"});
  REQUIRE(table.exit_code == 0);
  const auto row = table.out.find("hit rate, full blocks");
  REQUIRE(row != std::string::npos);
  CHECK(table.out.substr(row, table.out.find('\n', row) - row).find("n/a") != std::string::npos);
  CHECK_THAT(test::slurp(csv), Catch::Contains(",0.000000,") && Catch::Contains(",0.466667,"));
}

TEST_CASE("replay: the same run twice, and in parallel or not, gives the same bytes") {
  const std::string trace = std::string(KVSIM_SOURCE_DIR) + "/traces/chat-mix.csv";
  const std::string timeline_a = test::scratch_path("timeline-a.csv");
  const std::string timeline_b = test::scratch_path("timeline-b.csv");
  const auto a = test::run_cli({"replay", trace, "--json", "--jobs", "1", "--timeline", timeline_a, "--sample-every", "5s"});
  const auto b = test::run_cli({"replay", trace, "--json", "--jobs", "4", "--timeline", timeline_b, "--sample-every", "5s"});
  REQUIRE(a.exit_code == 0);
  REQUIRE(b.exit_code == 0);
  CHECK(a.out == b.out);
  CHECK(test::slurp(timeline_a) == test::slurp(timeline_b));
  const Json doc = Json::parse(a.out);
  REQUIRE(doc["runs"].size() == 4);  // the default comparison
  for (const auto& run : doc["runs"]) {
    INFO(run["allocator"]);
    CHECK(run["leak_check"]["ok"] == true);
    CHECK(run["requests"]["total"] == 2000);
  }
  // The timeline is long-format CSV: a header, then rows whose first field is an allocator.
  const std::string timeline = test::slurp(timeline_a);
  CHECK(timeline.rfind("allocator,time_s,step,running,queued,effective_bytes,allocated_bytes,reserved_bytes,"
                       "effective_tokens_full,allocated_slots_full,allocated_bytes_max,allocated_bytes_mean\n", 0) == 0);
  CHECK(timeline.find("\nsliding-window:block=16,") != std::string::npos);
}

TEST_CASE("replay: --timeline adds cached and evicted bytes when an allocator caches prefixes") {
  const std::string trace = std::string(KVSIM_SOURCE_DIR) + "/traces/shared-prefix.csv";
  const std::string timeline = test::scratch_path("timeline-cached.csv");
  const auto r = test::run_cli({"replay", trace, "--allocator", "paged,paged:block=16,prefix-caching=on",
                                "--device", "RTX-4090", "--timeline", timeline, "--json"});
  REQUIRE(r.exit_code == 0);
  const std::string text = test::slurp(timeline);
  const std::string header = text.substr(0, text.find('\n') + 1);
  CHECK(header == "allocator,time_s,step,running,queued,effective_bytes,allocated_bytes,reserved_bytes,"
                  "effective_tokens_full,allocated_slots_full,allocated_bytes_max,allocated_bytes_mean,"
                  "cached_bytes,evicted_bytes\n");
  // The plain paged rows leave the two cells empty; the caching rows fill them, and their
  // last row's evicted bytes are the run's (JSON) figure.
  const Json doc = Json::parse(r.out);
  const std::int64_t evicted = doc["runs"][1]["prefix_cache"]["evicted_bytes"].get<std::int64_t>();
  std::string last_cached_row;
  std::int64_t plain_rows = 0;
  for (std::size_t at = header.size(); at < text.size();) {
    const std::size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    if (line.rfind("paged:block=16,", 0) == 0) {
      CHECK(line.substr(line.size() - 2) == ",,");
      ++plain_rows;
    } else {
      last_cached_row = line;
    }
  }
  CHECK(plain_rows > 0);
  REQUIRE_FALSE(last_cached_row.empty());
  CHECK(last_cached_row.substr(last_cached_row.rfind(',') + 1) == std::to_string(evicted));
}

TEST_CASE("replay --per-request: an id with a comma, a quote, a line feed or a carriage return is quoted") {
  // RFC 4180: a field holding any of them is quoted, its quotes doubled; a bare CR would split
  // the row for any CSV reader.
  const std::string trace = test::write_file(
      "odd-ids.jsonl",
      "{\"id\": \"a,b\", \"arrival\": 0, \"prompt_tokens\": 10, \"output_tokens\": 3}\n"
      "{\"id\": \"say \\\"hi\\\"\", \"arrival\": 0.1, \"prompt_tokens\": 10, \"output_tokens\": 3}\n"
      "{\"id\": \"line\\nfeed\", \"arrival\": 0.2, \"prompt_tokens\": 10, \"output_tokens\": 3}\n"
      "{\"id\": \"carriage\\rreturn\", \"arrival\": 0.3, \"prompt_tokens\": 10, \"output_tokens\": 3}\n");
  const auto r = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--allocator", "paged", "--per-request", "-"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("\npaged:block=16,\"a,b\",1,") && Catch::Contains("\npaged:block=16,\"say \"\"hi\"\"\",2,") &&
                        Catch::Contains("\npaged:block=16,\"line\nfeed\",3,") &&
                        Catch::Contains("\npaged:block=16,\"carriage\rreturn\",4,"));
}

TEST_CASE("replay: --csv writes one row per allocator under a header") {
  const std::string trace = std::string(KVSIM_SOURCE_DIR) + "/traces/chat-mix.csv";
  const std::string csv = test::scratch_path("summary.csv");
  const auto r = test::run_cli({"replay", trace, "--allocator", "paged,dynamic:growth=chunk,chunk=64", "--csv", csv});
  REQUIRE(r.exit_code == 0);
  const std::string text = test::slurp(csv);
  CHECK(std::count(text.begin(), text.end(), '\n') == 3);
  CHECK(text.find("\n\"dynamic:growth=chunk,chunk=64\",") != std::string::npos);  // quoted: it holds a comma
}

TEST_CASE("replay: help, usage errors and input errors") {
  auto r = test::run_cli({"replay", "--help"});
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("Usage: kvsim replay TRACE") && Catch::Contains("sliding-window[:block=16]"));
  r = test::run_cli({"replay"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("a trace file is required"));
  const std::string trace = std::string(KVSIM_SOURCE_DIR) + "/traces/chat-mix.csv";
  r = test::run_cli({"replay", trace, "--allocator", "no-such-kind"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("unknown allocator 'no-such-kind'") && Catch::Contains("Usage: kvsim replay"));
  r = test::run_cli({"replay", trace, "--allocator", "paged:blok=16"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("unknown parameter 'blok'"));
  r = test::run_cli({"replay", trace, "--cost", "linear:base=5"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--cost"));
  r = test::run_cli({"replay", trace, "--cuda-graphs", "yes"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--cuda-graphs: expected on or off, got \"yes\""));
  // The schedule named on the command line, or implied by the trace's first request.
  r = test::run_cli({"replay", trace, "--schedule", "measured"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("request #1 ('1'): has no start, first_token and finish times, which --schedule "
                                    "measured needs for every request"));
  const std::string half = test::write_file(
      "half-measured.csv", "id,arrival,prompt_tokens,output_tokens,start,first_token,finish\na,0,10,5,0.1,0.2,0.5\nb,1,10,5,,,\n");
  r = test::run_cli({"replay", half});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("request #2 ('b'): has no start, first_token and finish times, but the trace's first "
                                    "request has them"));
  // A trace whose times fix the schedule refuses the options only a simulation acts on, named
  // in the order given; --schedule simulate takes them.
  const std::string timed = test::write_file(
      "timed.csv", "id,arrival,prompt_tokens,output_tokens,start,first_token,finish\na,0,10,5,0.1,0.2,0.5\n");
  r = test::run_cli({"replay", timed, "--max-running", "4", "--cost", "linear"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("timed.csv: its start/first_token/finish times fix the schedule, on which --cost, "
                                    "--max-running would not act; replay it without them, or with --schedule simulate"));
  for (const char* option : {"--cuda-graphs", "--async-scheduling"}) {
    r = test::run_cli({"replay", timed, option, "on", "--schedule", "measured"});
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains(std::string("on which ") + option + " would not act; replay it without it"));
  }
  CHECK(test::run_cli({"replay", timed, "--max-running", "4", "--schedule", "simulate"}).exit_code == 0);
  // A cost that names every term takes nothing from the roofline: its device is refused.
  r = test::run_cli({"replay", trace, "--cost", "constant:step=25ms,prefill-token=50us", "--timing-device", "A100-40GB"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--timing-device: times the roofline, and --cost "
                                    "\"constant:step=25ms,prefill-token=50us\" names every term itself"));
  // Likewise CUDA graphs' padding beside a cost that charges it nothing (a dense model: the
  // linear model charges padding only through routed experts' reads), a switch against
  // splitting prompts where nothing bounds a step's tokens, and the sglang queue order under
  // another policy, fcfs included.
  r = test::run_cli({"replay", trace, "--cost", "linear:base=5ms", "--cuda-graphs", "on"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--cuda-graphs: pads a step's tokens to a captured size, which --cost "
                                    "\"linear") &&
                        Catch::Contains("charges nothing for (no routed experts' read): it would have no effect"));
  CHECK(test::run_cli({"replay", trace, "--cost", "linear:base=5ms", "--cuda-graphs", "off"}).exit_code == 0);
  CHECK(test::run_cli({"replay", trace, "--cuda-graphs", "on"}).exit_code == 0);  // the roofline pads
  r = test::run_cli({"replay", trace, "--no-chunked-prefill"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--no-chunked-prefill: with no --max-batched-tokens bound (demand mode, no "
                                    "budget) no prompt is split into chunks"));
  CHECK(test::run_cli({"replay", trace, "--no-chunked-prefill", "--kv-budget", "10GiB"}).exit_code == 0);
  r = test::run_cli({"replay", trace, "--kv-budget", "10GiB", "--schedule-policy", "fcfs"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--schedule-policy: applies to the sglang policy only"));
  CHECK(test::run_cli({"replay", trace, "--requests", "5", "--cost", "constant:step=25ms", "--timing-device",
                       "A100-40GB"}).exit_code == 0);
  // Without chunking a prompt's first chunk is the whole sequence: the whole-sequence check
  // given by hand could not change an admission.
  r = test::run_cli({"replay", trace, "--kv-budget", "1GiB", "--no-chunked-prefill", "--reserve-full-isl", "on"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--reserve-full-isl: asks room for the whole sequence before its first chunk, and "
                                    "with --no-chunked-prefill the first chunk is the whole sequence"));
  CHECK(test::run_cli({"replay", timed}).exit_code == 0);
  r = test::run_cli({"replay", "does-not-exist.csv"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("does-not-exist.csv"));
  const std::string bad = test::write_file("bad.csv", "id,arrival,prompt_tokens,output_tokens\n1,0,12x,5\n");
  r = test::run_cli({"replay", bad});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("bad.csv:2") && Catch::Contains("prompt_tokens") && Catch::Contains("12x"));
  CHECK(r.out.empty());  // no numbers from a bad trace

  const std::string four = test::write_file(
      "four.csv", "id,arrival,prompt_tokens,output_tokens\n1,0,100,10\n2,0,100,10\n3,0,100,10\n4,0,100,10\n");
  // Standard output holds one thing: a file given as '-' replaces the table; two, or one
  // beside --json, are a usage error naming both.
  r = test::run_cli({"replay", four, "--allocator", "paged", "--csv", "-"});
  CHECK(r.exit_code == 0);
  CHECK(r.out.rfind("allocator,requests,", 0) == 0);
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 2);  // the header and one row: no table
  r = test::run_cli({"replay", four, "--allocator", "paged", "--csv", "-", "--json"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--json and --csv both write standard output"));
  r = test::run_cli({"replay", four, "--allocator", "paged", "--csv", "-", "--per-request", "-"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--csv and --per-request both write standard output"));
  CHECK(r.out.empty());

  // An option that cannot act is refused rather than ignored: a swap link without swapping.
  r = test::run_cli({"replay", four, "--kv-budget", "1GiB", "--swap-bandwidth", "1GB"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--swap-bandwidth: applies to --preemption swap only"));

  // A term of the budget without a device names the term given.
  r = test::run_cli({"replay", four, "--reserve", "2GiB"});
  CHECK(r.exit_code == 2);  // an option without its partner: a usage error
  CHECK_THAT(r.err, Catch::Contains("--reserve: a term of the memory budget needs a device"));

  // An empty file name is refused before the run, naming the option.
  r = test::run_cli({"replay", four, "--allocator", "paged", "--timeline", ""});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--timeline: expected a value, got an empty string"));
  CHECK(r.out.empty());

  // Absurd sizes are input errors, never wrapped numbers or a host out of memory: four
  // 110-token requests in blocks (or pages) of 2^45 positions at Llama's 131,072 bytes each
  // (2^62 bytes a block, 2^64 for four), and one prompt of 2^40 - 1 tokens: 2^36 blocks of
  // 16, more than 32-bit block ids number.
  for (const char* spec : {"paged:block=35184372088832", "sliding-window:block=35184372088832",
                           "radix:page=35184372088832"}) {
    INFO(spec);
    r = test::run_cli({"replay", four, "--quiet", "--allocator", spec});
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains("overflow"));
    CHECK(r.out.empty());
  }
  const std::string huge = test::write_file("huge.csv", "id,arrival,prompt_tokens,output_tokens\n1,0,1099511627775,1\n");
  for (const char* spec : {"paged", "paged:prefix-caching=on", "sliding-window"}) {
    INFO(spec);
    r = test::run_cli({"replay", huge, "--quiet", "--allocator", spec, "--max-model-len", "1099511627776"});
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains("68719476736 blocks"));
  }
}

TEST_CASE("replay: Azure 2023 conversation trace through the four allocators") {
  KVSIM_REQUIRE_SHARED_TRACE(trace, "azure2023/AzureLLMInferenceTrace_conv.csv");
  const auto r = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--allocator",
                                "dense-static,dynamic,paged,sliding-window", "--json"});
  REQUIRE(r.exit_code == 0);
  const Json doc = Json::parse(r.out);
  for (const auto& run : doc["runs"]) {
    CHECK(run["requests"]["total"] == 19'366);
    CHECK(run["leak_check"]["allocated_bytes_at_end"] == 0);
  }
  // Paged wastes at most a partial block per sequence; a max-model-len reservation of
  // 131,072 positions per request holds almost nothing but reservation.
  CHECK((*run_named(doc, "paged:block=16"))["usage"]["token_level"].get<double>() > 0.9);
  CHECK((*run_named(doc, "dense-static:reserve=max-model-len"))["usage"]["token_level"].get<double>() < 0.05);
}

TEST_CASE("replay under a budget: Azure 2023 conversation on an RTX 4090 against an H100") {
  KVSIM_REQUIRE_SHARED_TRACE(trace, "azure2023/AzureLLMInferenceTrace_conv.csv");
  const auto serve = [&](const char* device) {
    const auto r = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--allocator", "paged", "--device", device,
                                  "--json"});
    REQUIRE(r.exit_code == 0);
    return Json::parse(r.out)["runs"][0];
  };
  const Json small = serve("RTX-4090");
  const Json large = serve("H100-80GB");
  // The 4090 leaves 6,047,234,457 bytes for KV (kvsim size pins the subtraction): 2,883
  // blocks of 2 MiB, far below the trace's peak demand of about 8.5 GiB. The pool, its
  // capacity and its reserved slots are those blocks; the budget's remainder holds none.
  CHECK(small["serving"]["capacity_bytes"] == std::int64_t{2'883} * 2'097'152);
  CHECK(small["memory_bytes"]["reserved_slots"]["peak"] == std::int64_t{2'883} * 2'097'152);
  CHECK(small["serving"]["preemptions"].get<std::int64_t>() > 0);
  CHECK(small["serving"]["queue_length_max"].get<std::int64_t>() > 0);
  CHECK(small["serving"]["time_at_full_capacity_ns"].get<std::int64_t>() > 0);
  CHECK(large["serving"]["preemptions"] == 0);
  CHECK(large["serving"]["time_at_full_capacity_ns"] == 0);
  CHECK(large["requests"]["completed"] == 19'366);
  CHECK(small["requests"]["completed"] == 19'366);
}

TEST_CASE("replay: policy options without a budget are a usage error") {
  const std::string trace = std::string(KVSIM_SOURCE_DIR) + "/traces/chat-mix.csv";
  auto r = test::run_cli({"replay", trace, "--policy", "sglang"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--policy") && Catch::Contains("memory budget"));
  r = test::run_cli({"replay", trace, "--kv-budget", "2GiB", "--policy", "fifo"});
  CHECK(r.exit_code == 2);
  // The message lists the registered policies (the list itself: tests/scheduler_registry_test.cc).
  CHECK_THAT(r.err, Catch::Contains("--policy") && Catch::Contains("expected vllm, reserve") &&
                        Catch::Contains("got \"fifo\""));
  r = test::run_cli({"replay", trace, "--kv-budget", "2GiB", "--policy", "reserve", "--preemption", "swap"});
  CHECK(r.exit_code == 2);
  r = test::run_cli({"replay", trace, "--kv-budget", "2GiB", "--allocator", "paged", "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK(Json::parse(r.out)["runs"][0]["serving"]["capacity_bytes"] == std::int64_t{2} << 30);
}

TEST_CASE("replay: under a budget the scheduler's limits default to vLLM's, chunked prefill or not") {
  // vLLM's SchedulerConfig: 8192 batched tokens with chunked prefill; without it,
  // max(max_model_len, 2048): 131,072 for Llama-3.1-8B, 2,048 for a 1,024-token limit.
  const auto scheduler = [](const std::vector<std::string>& extra) {
    return Json::parse(chat_mix_json("10GiB", extra))["scheduler"].get<std::string>();
  };
  CHECK(scheduler({}) == "max batched tokens 8,192, chunked prefill on, max running 256");
  CHECK(scheduler({"--no-chunked-prefill"}) == "max batched tokens 131,072, chunked prefill off, max running 256");
  CHECK(scheduler({"--no-chunked-prefill", "--max-model-len", "1024"}) ==
        "max batched tokens 2,048, chunked prefill off, max running 256");
}

TEST_CASE("replay: --vllm-version gives that version's scheduling defaults, and an option given wins") {
  // vLLM 0.19 schedules asynchronously, captures CUDA graphs, keeps no watermark (v1, from
  // 0.8) and admits a request only when its whole sequence's blocks fit
  // (scheduler_reserve_full_isl): the four options given by hand must replay the same bytes.
  const std::string trace = std::string(KVSIM_SOURCE_DIR) + "/traces/chat-mix.csv";
  const auto replay = [](const std::vector<std::string>& extra) { return chat_mix_json("1GiB", extra); };
  const auto policy = [](const std::string& json) { return Json::parse(json)["runs"][0]["serving"]["policy"].get<std::string>(); };
  const std::string v19 = replay({"--vllm-version", "0.19.0"});
  CHECK(v19 == replay({"--async-scheduling", "on", "--cuda-graphs", "on", "--watermark", "0", "--reserve-full-isl", "on"}));
  CHECK(policy(v19) == "vllm (recompute, whole sequence must fit, watermark 0)");
  CHECK(policy(replay({})) == "vllm (recompute)");  // replay's own: v0's watermark of 0.01
  const std::string v8 = replay({"--vllm-version", "0.8.5"});
  CHECK(policy(v8) == "vllm (recompute, watermark 0)");
  CHECK(v8 == replay({"--watermark", "0"}));  // nor asynchronous scheduling nor CUDA graphs before 0.14
  // Asynchronous scheduling from 0.14.0 (vllm#27614), CUDA graphs' 0.19 capture sizes from 0.19.
  CHECK(replay({"--vllm-version", "0.14.0"}) == replay({"--watermark", "0", "--async-scheduling", "on"}));
  CHECK(replay({"--vllm-version", "0.13.0"}) == v8);
  CHECK(policy(replay({"--vllm-version", "0.19.1rc1", "--reserve-full-isl", "off"})) == "vllm (recompute, watermark 0)");
  // Another policy keeps its own admission; the version still gives the step's settings.
  const std::string sglang = replay({"--vllm-version", "0.19.0", "--policy", "sglang"});
  CHECK(policy(sglang) == "sglang (retract)");
  CHECK_THAT(Json::parse(sglang)["scheduler"].get<std::string>(), Catch::Contains("CUDA graphs up to 512 tokens"));
  CHECK(policy(replay({"--vllm-version", "0.19+cu128"})) == policy(v19));
  CHECK(policy(replay({"--vllm-version", "0.19.0.dev20"})) == policy(v19));
  for (const char* version : {"v0.19", " 0.19", "+0.19", "-1.5", "1", "0.", "0.19garbage", "0.19-1"}) {
    const auto bad = test::run_cli({"replay", trace, "--kv-budget", "1GiB", "--vllm-version", version});
    INFO(version);
    CHECK(bad.exit_code == 2);
    CHECK_THAT(bad.err, Catch::Contains("--vllm-version: expected a version such as 0.19.0, got \"" + std::string(version) + "\""));
  }
}

TEST_CASE("replay --replicas: the total's external fragmentation ratio is the replicas' mean, not their sum") {
  // docs/replay.md ("Replicas"): 1 - largest free extent / free is a ratio of each replica's
  // own arena, so the total is the replicas' mean weighted by each one's span, at most their
  // largest max; the bytes outside the largest extent add up like the occupancy.
  const std::string trace = std::string(KVSIM_SOURCE_DIR) + "/traces/chat-mix.csv";
  const auto r = test::run_cli({"replay", trace, "--requests", "400", "--kv-budget", "2GiB", "--allocator",
                                "dense-static:reserve=max-tokens,placement=first-fit", "--replicas", "3", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const Json runs = Json::parse(r.out)["runs"];
  REQUIRE(runs.size() == 4);
  double integral = 0, time = 0, largest = 0, bytes = 0;
  const double span = runs[3]["time"]["duration_ns"].get<double>();
  for (int k = 0; k < 3; ++k) {
    const Json& x = runs[k]["external_fragmentation"];
    const double own = runs[k]["time"]["duration_ns"].get<double>();
    integral += x["mean"].get<double>() * own;
    time += own;
    largest = std::max(largest, x["max"].get<double>());
    bytes += x["free_bytes_outside_largest_extent_mean"].get<double>() * own / span;
  }
  REQUIRE(largest > 0);  // the case fragments
  const Json& total = runs[3]["external_fragmentation"];
  CHECK(total["mean"].get<double>() == Approx(integral / time));
  CHECK(total["mean"].get<double>() <= total["max"].get<double>());
  CHECK(total["max"].get<double>() == Approx(largest));
  CHECK(total["free_bytes_outside_largest_extent_mean"].get<double>() == Approx(bytes));
}

TEST_CASE("replay --replicas on a trace with measured times asks for --schedule simulate") {
  // Without --replicas this trace replays its own schedule (Schedule::automatic); replicas
  // can only simulate, so they are not assumed: the measured times would be dropped unsaid.
  const std::string trace = test::write_file("replicas-measured.csv",
                                             "id,arrival,prompt_tokens,output_tokens,start,first_token,finish\n"
                                             "1,0,20,5,0.1,0.2,0.6\n"
                                             "2,0.05,10,1,0.05,0.3,0.3\n");
  auto r = test::run_cli({"replay", trace, "--allocator", "paged", "--replicas", "2"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("replicas-measured.csv: its start/first_token/finish times are one engine's "
                                    "schedule, which --replicas cannot split; give --schedule simulate"));
  r = test::run_cli({"replay", trace, "--allocator", "paged", "--replicas", "2", "--schedule", "simulate", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(Json::parse(r.out)["runs"][2]["requests"]["completed"] == 2);
}

TEST_CASE("replay: a request whose cache hits lie behind a sliding window is not refused as never fitting") {
  // Mistral-7B (one group, a 4,096-token window, 131,072 bytes a position): 600 MiB is 300
  // blocks of 16. A (8,000 tokens, prefix hashes per 16) is computed and cached; B (8,100
  // tokens, A's 500 blocks then 6 of its own) comes at 3 s while C decodes. B's whole
  // sequence is 507 blocks, more than the pool, but the 8,000 cached tokens behind its window
  // take no block (vLLM's null blocks): alone it fits, so it must not be refused as a request
  // that can never fit (Scheduler::never_admits) just because C is running. With or without
  // C, all complete.
  std::string hashes_a, hashes_b;
  for (int i = 1; i <= 506; ++i) {
    (i <= 500 ? hashes_a : hashes_b) += (i == 1 ? "" : " ") + std::to_string(i);
  }
  const std::string header = "id,arrival,prompt_tokens,output_tokens,prefix_block_tokens,prefix_hashes\n";
  const std::string a = "a,0,8000,2,16," + hashes_a + "\n";
  const std::string b = "b,3,8100,2,16," + hashes_a + " " + hashes_b + "\n";
  for (const bool with_c : {false, true}) {
    INFO((with_c ? "with C decoding" : "alone"));
    const std::string trace =
        test::write_file("window-hits-behind.csv", header + a + (with_c ? "c,0.001,16,3000,16,9001\n" : "") + b);
    const auto r = test::run_cli({"replay", trace, "--model", "mistral-7b-v0.1", "--allocator",
                                  "sliding-window:block=16,prefix-caching=on", "--kv-budget", "600MiB",
                                  "--max-batched-tokens", "512", "--watermark", "0", "--json"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const Json run = Json::parse(r.out)["runs"][0];
    CHECK(run["requests"]["completed"] == (with_c ? 3 : 2));
    CHECK(run["serving"]["refused_too_large"] == 0);
  }
}

TEST_CASE("replay: hashes given at 16 and at 32 tokens never make a hit for each other, at any block size") {
  // Requests 1 and 3 give hashes {1 2 3 4} per 16 tokens, 2 and 4 {1 2} per 32: the same
  // values, other spans. Unbounded, 3 finds 1's prompt and 4 finds 2's, less the last token
  // vLLM and SGLang always compute: 63 + 63 = 126 tokens at page 1; at blocks of 8,
  // (64 - 1) / 8 = 7 blocks each, 112 tokens. Nothing more, as trace stats' bound (128) says.
  const std::string trace = test::write_file("mixed-sizes.csv",
                                             "id,arrival,prompt_tokens,output_tokens,prefix_block_tokens,prefix_hashes\n"
                                             "1,0,64,5,16,1 2 3 4\n2,1,64,5,32,1 2\n3,2,64,5,16,1 2 3 4\n4,3,64,5,32,1 2\n");
  const auto r = test::run_cli({"replay", trace, "--allocator", "radix,paged:block=8,prefix-caching=on", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const Json runs = Json::parse(r.out)["runs"];
  CHECK(runs[0]["prefix_cache"]["hit_tokens"] == 126);
  CHECK(runs[1]["prefix_cache"]["hit_tokens"] == 112);
}

TEST_CASE("replay: sliding-window on a model with no sliding layer is paged, figure for figure") {
  // Llama-3.1-8B has none, so nothing frees behind a window and vLLM's hybrid hit rules do not
  // apply: a request of two samples, preempted under a pool of 150 MiB (75 blocks), finds its
  // own prompt and generated blocks again through each sample's chain, as paged finds them.
  const std::string trace = test::write_file("no-window-n2.csv",
                                             "id,arrival,prompt_tokens,output_tokens,n\n1,0,443,168,1\n2,0.1,344,381,2\n");
  const auto r = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--allocator",
                                "paged:block=16,prefix-caching=on,sliding-window:block=16,prefix-caching=on",
                                "--kv-budget", "150MiB", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  Json runs = Json::parse(r.out)["runs"];
  REQUIRE(runs.size() == 2);
  CHECK(runs[0]["serving"]["preemptions"] == 1);
  CHECK(runs[0]["prefix_cache"]["preempted_hit_tokens"].get<std::int64_t>() > 0);
  runs[0].erase("allocator");
  runs[1].erase("allocator");
  CHECK(runs[0] == runs[1]);
}

TEST_CASE("replay: a prompt of 0 tokens still takes a forward pass for its first token") {
  // 10 ms a step, 1 ms a prompt token. p0 computes no prompt position but samples its first
  // token in its first step (10 ms), then decodes 4 more (10 ms each): ends at 50 ms. Before,
  // that first step counted as one computing nothing, 1 ns long.
  const std::string trace = test::write_file("p0.csv", "id,arrival,prompt_tokens,output_tokens\np0,0,0,5\n");
  const auto r = test::run_cli({"replay", trace, "--quiet", "--allocator", "paged", "--cost",
                                "constant:step=10ms,prefill-token=1ms", "--per-request", "-"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("p0,1,0.000000000,0.000000000,0.010000000,0.050000000,0.010000000,0.010000000,"
                                    "0.050000000,0,0,5,0,completed"));
}

TEST_CASE("replay: dynamic's own arena is part of its name, so it and an unbounded dynamic are two allocators") {
  // A request of 100 + 10 tokens at Llama's 131,072 bytes a position; an arena of 1 GiB.
  const std::string trace = test::write_file("arena.csv", "id,arrival,prompt_tokens,output_tokens\nr1,0,100,10\n");
  const auto r = test::run_cli({"replay", trace, "--quiet", "--allocator", "dynamic,dynamic:arena=1GiB", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const Json doc = Json::parse(r.out);
  REQUIRE(doc["runs"].size() == 2);
  CHECK(doc["runs"][0]["allocator"] == "dynamic:growth=double");
  CHECK(doc["runs"][1]["allocator"] == "dynamic:growth=double,arena=1073741824");
  CHECK(doc["runs"][1]["serving"]["capacity_bytes"] == 1'073'741'824);
  CHECK(doc["budget"] == "none (demand: every allocator unbounded but by its own arena=)");
  // The name is a spec: given back, it is the same allocator.
  const auto again = test::run_cli({"replay", trace, "--quiet", "--allocator", "dynamic:growth=double,arena=1073741824,dynamic:arena=1GiB"});
  CHECK(again.exit_code == 2);
  CHECK_THAT(again.err, Catch::Contains("are the same allocator (dynamic:growth=double,arena=1073741824)"));
}

TEST_CASE("replay: a step whose cost passes 2^63 ps is an error, not a step of 2^63 ps") {
  // One request of 10,000,000 prompt tokens and 1 output token, one step of 1 s + 1 s a token:
  // 10,000,001 s, past 2^63 ps (9,223,372.04 s). At 100 ms a token it is 1,000,001 s.
  const std::string trace = test::write_file("huge-step.csv", "id,arrival,prompt_tokens,output_tokens\nr1,0,10000000,1\n");
  const auto args = [&](const char* cost) {
    return std::vector<std::string>{"replay", trace, "--max-model-len", "20000000", "--allocator", "paged",
                                    "--cost", cost, "--json"};
  };
  const auto fits = test::run_cli(args("constant:step=1s,prefill-token=100ms"));
  REQUIRE(fits.exit_code == 0);
  CHECK(Json::parse(fits.out)["runs"][0]["time"]["duration_ns"] == std::int64_t{1'000'001} * 1'000'000'000);
  const auto r = test::run_cli(args("constant:step=1s,prefill-token=1s"));
  CHECK(r.exit_code == 1);
  CHECK(r.out.empty());
  CHECK(r.err.find(trace + ": step 0 (10000000 prompt tokens, 0 decoding sequences, 0 context positions) would take "
                           "2^63 ps (about 107 days) or more under the cost model") != std::string::npos);
}

TEST_CASE("replay --html on a trace with measured times draws the page without latency CDFs, --per-request is refused") {
  // docs/report.md: a measured schedule has no per-request times and no CDFs. The page is
  // drawn from the timeline and the reports; only --per-request needs the records.
  const std::string trace = test::write_file(
      "measured-html.csv",
      "id,arrival,prompt_tokens,output_tokens,start,first_token,finish\n1,0,100,10,0,0.05,0.5\n2,0.1,200,20,0.1,0.2,1.0\n");
  const std::string page = test::scratch_dir("measured-html").string() + "/page.html";
  const auto r = test::run_cli({"replay", trace, "--allocator", "paged", "--html", page});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const std::string html = test::slurp(page);
  CHECK(html.find("<h2>Over time</h2>") != std::string::npos);
  CHECK(html.find("<h2>Latency</h2>") == std::string::npos);
  for (const char* also : {"--per-request", "--timeline"}) {
    const std::string file = test::scratch_dir("measured-html").string() + "/also.csv";
    const auto both = test::run_cli({"replay", trace, "--allocator", "paged", "--html", page, also, file});
    CHECK(both.exit_code == (std::string(also) == "--per-request" ? 1 : 0));
  }
  // Nothing is costed nor batched: the run-level figures say so, as each run's do.
  const auto json = test::run_cli({"replay", trace, "--allocator", "paged", "--json"});
  REQUIRE(json.exit_code == 0);
  const Json doc = Json::parse(json.out);
  CHECK(doc["cost_model"] == Json{{"name", "none (measured schedule)"}});
  CHECK(doc["scheduler"] == "none (measured schedule)");
  CHECK(doc["runs"][0]["cost_model"] == "none (measured schedule)");
  const auto table = test::run_cli({"replay", trace, "--allocator", "paged"});
  CHECK_THAT(table.out, Catch::Contains("no batching (measured schedule)") &&
                            Catch::Contains("trace    2 requests over 1.000 s as measured"));
}
