// kvsim replay --per-request, kvsim calibrate and kvsim validate through the real program:
// figures worked out by hand for tiny inputs, and their errors.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "cli_util.h"
#include "trace_test_util.h"

using namespace kvsim;
using Json = nlohmann::json;

namespace {

const std::string kData = std::string(KVSIM_SOURCE_DIR) + "/tests/data/measured";

}  // namespace

TEST_CASE("replay --per-request: one row per request, times worked out by hand") {
  // Demand mode (no budget, no batch limit), every step 1 ms whatever it holds:
  //   step 0 [0, 1 ms): r1 (arrived at 0) prefills its 100 tokens: first token at 1 ms.
  //     r2 arrives at 0.5 ms, inside the step, and waits for the next one.
  //   step 1 [1, 2 ms): r1 decodes token 2; r2 is admitted at 1 ms and prefills: first token at 2 ms.
  //   step 2 [2, 3 ms): r1 token 3 (its last), r2 token 2 (its last): both finish at 3 ms.
  //   r3 (300 + 5 tokens > --max-model-len 200) is refused at arrival.
  // r1: TTFT 1 ms, TPOT (3 - 1) / 2 = 1 ms, e2e 3 ms; r2: TTFT 2 - 0.5 = 1.5 ms, TPOT 1 ms, e2e 2.5 ms.
  const std::string trace = test::write_file(
      "per-request.csv", "id,arrival,prompt_tokens,output_tokens\nr1,0,100,3\nr3,0.0001,300,5\nr2,0.0005,10,2\n");
  const std::string out = test::scratch_path("per-request-out.csv");
  const auto r = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--max-model-len", "200", "--cost",
                                "constant:step=1ms,prefill-token=0ps", "--allocator", "paged:block=16",
                                "--per-request", out, "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK(test::slurp(out) ==
        "allocator,id,ordinal,arrival_s,first_scheduled_s,first_token_s,finish_s,ttft_s,tpot_s,e2e_s,prompt_tokens,"
        "cached_prompt_tokens,output_tokens,preemptions,outcome\n"
        "paged:block=16,r1,1,0.000000000,0.000000000,0.001000000,0.003000000,0.001000000,0.001000000,0.003000000,"
        "100,0,3,0,completed\n"
        "paged:block=16,r3,2,0.000100000,,,,,,,300,0,5,0,refused\n"
        "paged:block=16,r2,3,0.000500000,0.001000000,0.002000000,0.003000000,0.001500000,0.001000000,0.002500000,"
        "10,0,2,0,completed\n");
  // The report's TPOT: one sample per completed request with two or more tokens (1 ms each);
  // inter-token latency: one per token a decode step produced: r1's tokens 2 and 3, r2's
  // token 2, each after a 1 ms step.
  const Json doc = Json::parse(r.out);
  const Json& latency = doc["runs"][0]["latency"];
  CHECK(latency["tpot"]["count"] == 2);
  CHECK(latency["tpot"]["mean_s"].get<double>() == Approx(0.001));
  CHECK(latency["inter_token"]["count"] == 3);
  CHECK(latency["inter_token"]["p99_s"].get<double>() == Approx(0.001));
  CHECK_THAT(test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--max-model-len", "200"}).out,
             Catch::Contains("TPOT p50 / p99, ms") && Catch::Contains("inter-token latency p50 / p99, ms"));
}

TEST_CASE("replay --per-request: several allocators share one file, in allocator order, byte-identical twice") {
  const std::string trace =
      test::write_file("per-request-2.csv", "id,arrival,prompt_tokens,output_tokens\na,0,20,4\nb,0.001,30,3\n");
  const std::string one = test::scratch_path("pr-1.csv"), two = test::scratch_path("pr-2.csv");
  for (const auto& out : {one, two}) {
    REQUIRE(test::run_cli({"replay", trace, "--allocator", "dense-static,paged", "--per-request", out}).exit_code == 0);
  }
  const std::string text = test::slurp(one);
  CHECK(text == test::slurp(two));
  // Header + 2 requests x 2 allocators; dense-static's rows first.
  CHECK(std::count(text.begin(), text.end(), '\n') == 5);
  CHECK(text.find("dense-static") < text.find("\npaged"));
  // A measured schedule has no simulated per-request times.
  const std::string measured = test::write_file(
      "per-request-measured.csv", "id,arrival,prompt_tokens,output_tokens,start,first_token,finish\nx,0,10,2,0,1,2\n");
  const auto bad = test::run_cli({"replay", measured, "--schedule", "measured", "--per-request", one});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("--per-request"));
}

TEST_CASE("calibrate: the JSON's cost field is the spec the fit gives, and replay accepts it") {
  const auto r = test::run_cli({"calibrate", kData + "/synthetic", "--json"});
  REQUIRE(r.exit_code == 0);
  const Json doc = Json::parse(r.out);
  const std::string cost = doc["cost"];
  CHECK(cost.rfind("linear:base=", 0) == 0);
  CHECK(doc["terms"][0]["seconds"].get<double>() == Approx(0.010).epsilon(1e-6));
  CHECK(doc["ticks_fitted"] == 11);
  const auto table = test::run_cli({"calibrate", kData + "/synthetic"});
  CHECK(table.exit_code == 0);
  CHECK_THAT(table.out, Catch::Contains("--cost " + cost));
  const std::string trace = test::write_file("cal.csv", "id,arrival,prompt_tokens,output_tokens\na,0,20,4\n");
  CHECK(test::run_cli({"replay", trace, "--cost", cost}).exit_code == 0);
  const auto missing = test::run_cli({"calibrate", kData + "/no-such-run"});
  CHECK(missing.exit_code == 1);
  CHECK_THAT(missing.err, Catch::Contains("no-such-run"));
}

TEST_CASE("validate: measured against simulated for a hand-made run") {
  // tests/data/measured/tiny: measured (see measured_run_test.cc) TTFT 0.1 / 0.05 s, TPOT 0.1 s,
  // latency 0.3 / 0.45 s, makespan 0.95 s. Simulated with 10 ms steps and free prefill:
  //   bench-0 arrives at 0: first token at 10 ms, tokens 2 and 3 at 20 and 30 ms.
  //   bench-1 arrives at 500 ms: first token at 510 ms, its 5th token at 550 ms.
  //   TTFT 10 ms both, TPOT 10 ms, latency 30 / 50 ms, makespan 550 ms.
  // Ticks (the workload's clock = the run's, both start at 2026-01-01T00:00:00Z):
  //   0.25 s: measured 1 running, simulated 0 (bench-0 done at 30 ms);
  //   0.75 s: measured 1, simulated 0 (bench-1 done at 550 ms); 1.0 s: 0 and 0.
  //   running MAE 2/3, waiting MAE 0.
  const auto r = test::run_cli({"validate", kData + "/tiny/run", "--kv-budget", "1GB", "--cost",
                                "constant:step=10ms,prefill-token=0ps", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const Json doc = Json::parse(r.out);
  CHECK(doc["kvsim"]["allocator"] == "paged:block=16,prefix-caching=on");
  CHECK(doc["kvsim"]["max_running"] == 128);
  CHECK(doc["kvsim"]["max_batched_tokens"] == 2048);
  CHECK(doc["ttft"]["measured"]["mean_s"].get<double>() == Approx(0.075));
  CHECK(doc["ttft"]["simulated"]["mean_s"].get<double>() == Approx(0.010));
  CHECK(doc["ttft"]["diff_percent"]["mean"].get<double>() == Approx((0.010 - 0.075) / 0.075 * 100));
  CHECK(doc["tpot"]["simulated"]["p50_s"].get<double>() == Approx(0.010));
  CHECK(doc["latency"]["simulated"]["mean_s"].get<double>() == Approx(0.040));
  CHECK(doc["latency"]["measured"]["p90_s"].get<double>() == Approx(0.435));
  CHECK(doc["makespan_s"]["measured"].get<double>() == Approx(0.95));
  CHECK(doc["makespan_s"]["simulated"].get<double>() == Approx(0.55));
  CHECK(doc["running_mae"].get<double>() == Approx(2.0 / 3.0));
  CHECK(doc["waiting_mae"].get<double>() == Approx(0.0));
  CHECK(doc["kv_usage_mae_percent"].is_null());
  const auto table = test::run_cli({"validate", kData + "/tiny/run", "--kv-budget", "1GB"});
  CHECK(table.exit_code == 0);
  CHECK_THAT(table.out, Catch::Contains("TTFT Mean (ms)") && Catch::Contains("not recorded"));
}

TEST_CASE("validate: with one-token outputs there is no TPOT, and it says n/a, not 0") {
  // TPOT needs two tokens (README: (last - first) / (output - 1)).
  const auto base = test::scratch_dir("validate-one-token");
  std::filesystem::create_directories(base / "run");
  std::filesystem::create_directories(base / "workloads");
  std::filesystem::copy(kData + "/tiny/run", base / "run",
                        std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
  {
    std::ofstream(base / "run" / "requests.jsonl")
        << R"({"request_id": "a", "input_toks": 100, "output_toks": 1, "arrival_time": 1767225600.0, "queued_ts": 500.0, "scheduled_ts": 500.0, "first_token_ts": 500.1, "last_token_ts": 500.1})" "\n";
    std::ofstream(base / "workloads" / "tiny.jsonl") << R"({"input_toks": 100, "output_toks": 1, "arrival_time_ns": 0})" "\n";
  }
  const auto r = test::run_cli({"validate", (base / "run").string(), "--kv-budget", "1GB", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const Json doc = Json::parse(r.out);
  CHECK(doc["tpot"]["measured"]["count"] == 0);
  CHECK(doc["tpot"]["measured"]["mean_s"].is_null());
  CHECK(doc["tpot"]["diff_percent"].is_null());
  CHECK(doc["ttft"]["measured"]["mean_s"].get<double>() == Approx(0.1));
  const auto table = test::run_cli({"validate", (base / "run").string(), "--kv-budget", "1GB"});
  CHECK_THAT(table.out, Catch::Contains("TPOT Mean (ms)                    n/a          n/a       n/a"));
  std::filesystem::remove_all(base);
}

TEST_CASE("validate: what it cannot map is an error naming the file and field") {
  const auto dir = test::scratch_dir("validate-bad") / "run";
  std::filesystem::create_directories(dir);
  std::filesystem::copy(kData + "/tiny/run", dir, std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
  const std::string workload = kData + "/tiny/workloads/tiny.jsonl";
  // No peer_cluster_config.json: the GPU is unknown.
  auto r = test::run_cli({"validate", dir.string(), "--workload", workload});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("peer_cluster_config.json") && Catch::Contains("--device-memory"));
  const auto rewrite_meta = [&](const std::string& from, const std::string& to) {
    std::string meta = test::slurp(dir / "meta.json");
    meta.replace(meta.find(from), from.size(), to);
    std::ofstream(dir / "meta.json") << meta;
  };
  rewrite_meta("\"data_parallel_size\": 1", "\"data_parallel_size\": 2");
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--kv-budget", "1GB"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("meta.json") && Catch::Contains("data_parallel_size"));
  rewrite_meta("meta-llama/Llama-3.1-8B", "example/unknown-model");
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--kv-budget", "1GB"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("model") && Catch::Contains("--config"));
  // The dataset is not beside the run nor above it.
  r = test::run_cli({"validate", dir.string(), "--kv-budget", "1GB"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("dataset_path") && Catch::Contains("--workload"));
  std::filesystem::remove_all(dir.parent_path());
}
