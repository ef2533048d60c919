// kvsim replay --per-request, kvsim calibrate and kvsim validate through the real program:
// figures worked out by hand for tiny inputs, and their errors.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cli_util.h"
#include "sha256.h"
#include "trace_test_util.h"

using namespace kvsim;
using Json = nlohmann::json;

namespace {

const std::string kData = std::string(KVSIM_SOURCE_DIR) + "/tests/data/measured";

// A copy of the tiny run in `base`/run, to edit; returns that folder.
std::filesystem::path copy_tiny_run(const std::filesystem::path& base) {
  const auto dir = base / "run";
  std::filesystem::create_directories(dir);
  std::filesystem::copy(kData + "/tiny/run", dir,
                        std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
  return dir;
}

// Edits a run's file in place: the first `from` in it becomes `to` (which must be there).
void replace_in_file(const std::filesystem::path& path, const std::string& from, const std::string& to) {
  std::string text = test::slurp(path);
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
  std::ofstream(path, std::ios::binary) << text;
}

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
  // Its workload (workloads/none.jsonl) is nowhere: the fit is of the ticks alone, and the
  // JSON's reader is told on stderr as well as in the JSON.
  CHECK_THAT(r.err, Catch::StartsWith("kvsim calibrate: warning: the fit is of the ticks alone") &&
                        Catch::Contains("\"workloads/none.jsonl\" is neither at"));
  const Json doc = Json::parse(r.out);
  const std::string cost = doc["cost"];
  CHECK(cost.rfind("linear:base=", 0) == 0);
  CHECK(doc["terms"][0]["seconds"].get<double>() == Approx(0.010).epsilon(1e-6));
  CHECK(doc["ticks_fitted"] == 11);
  // The ticks follow the rule exactly (make_synthetic.py), so nothing is left to scatter: each
  // kept term's standard error is at rounding level, and no two kept terms move together
  // (steps, prompt tokens and decodes vary independently there).
  for (const Json& term : doc["terms"]) {
    if (!term["kept"].get<bool>()) {
      CHECK_FALSE(term.contains("standard_error_s"));
      continue;
    }
    CHECK(term["standard_error_s"].get<double>() >= 0);
    CHECK(term["standard_error_s"].get<double>() < 1e-9 * term["seconds"].get<double>());
  }
  CHECK(doc["correlated_terms"] == Json::array());
  const auto table = test::run_cli({"calibrate", kData + "/synthetic"});
  CHECK(table.exit_code == 0);
  CHECK_THAT(table.out, Catch::Contains("--cost " + cost));
  CHECK_THAT(table.out, Catch::Contains("coefficient      std. error"));
  CHECK_THAT(table.out, Catch::Contains("base              10000.000 us        0.000 us  per step"));
  const std::string trace = test::write_file("cal.csv", "id,arrival,prompt_tokens,output_tokens\na,0,20,4\n");
  CHECK(test::run_cli({"replay", trace, "--cost", cost}).exit_code == 0);
  const auto missing = test::run_cli({"calibrate", kData + "/no-such-run"});
  CHECK(missing.exit_code == 1);
  CHECK_THAT(missing.err, Catch::Contains("no-such-run"));
}

TEST_CASE("calibrate: a replay of the run finds the prompt tokens the prefix cache served, and the fit leaves them out") {
  // synthetic-cached (make_synthetic.py; measured_run_test.cc): requests 0.3 s apart sharing
  // their first 96 prompt tokens. calibrate replays the run (meta.json's settings, its
  // workload) with its fit: each request after the first finds 6 blocks of 16 cached, 9 x 96 =
  // 864 of the 100 + 110 + ... + 190 = 1,450 prompt tokens, and the fit without them gives back
  // the rule's 10 ms, 50 us and 200 us.
  auto r = test::run_cli({"calibrate", kData + "/synthetic-cached", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  Json doc = Json::parse(r.out);
  const Json& found = doc["replay_estimate"];
  CHECK(found["cached_prompt_tokens"] == 864);
  CHECK(found["prompt_tokens"] == 1450);
  CHECK(found["cached_taken_out"] == true);
  CHECK(found["recomputed_tokens"] == 0);  // 1,000 blocks: nothing is preempted
  CHECK(found["replays"] == 2);            // the second finds what the first did
  CHECK(found["settled"] == true);
  CHECK(doc["terms"][0]["seconds"].get<double>() == Approx(0.010).epsilon(1e-6));
  CHECK(doc["terms"][1]["seconds"].get<double>() == Approx(50e-6).epsilon(1e-6));
  CHECK(doc["terms"][2]["seconds"].get<double>() == Approx(200e-6).epsilon(1e-6));
  // Without the workload the hits are not estimated, and the table says the prompt tokens
  // count as computed (the fit is then the wrong one the library test shows).
  const auto base = test::scratch_dir("calibrate-no-workload");
  std::filesystem::copy(kData + "/synthetic-cached", base / "run", std::filesystem::copy_options::recursive);
  r = test::run_cli({"calibrate", (base / "run").string()});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("recomputation after preemption: not estimated (the workload"));
  // A run kvsim cannot replay as it is (here, meta.json names a model kvsim has no preset
  // for) is still fitted, and the table says why nothing was estimated.
  std::filesystem::remove_all(base / "run");
  std::filesystem::copy(kData + "/synthetic-cached", base / "run", std::filesystem::copy_options::recursive);
  std::filesystem::create_directories(base / "workloads");
  std::filesystem::copy(kData + "/workloads/synthetic-cached.jsonl", base / "workloads" / "synthetic-cached.jsonl");
  replace_in_file(base / "run" / "meta.json", "meta-llama/Llama-3.1-8B", "acme/unknown-7b");
  r = test::run_cli({"calibrate", (base / "run").string(), "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  doc = Json::parse(r.out);
  CHECK(doc["replay_estimate"]["replays"] == 0);
  CHECK_THAT(doc["replay_estimate"]["not_estimated"].get<std::string>(),
             Catch::Contains("cannot be replayed") && Catch::Contains("acme/unknown-7b"));
  // A value meta.json gets wrong is not a missing preset: an error, as validate makes it.
  replace_in_file(base / "run" / "meta.json", "acme/unknown-7b", "meta-llama/Llama-3.1-8B");
  replace_in_file(base / "run" / "meta.json", R"("vllm_version": "0.19.0")", R"("vllm_version": "banana")");
  for (const char* command : {"calibrate", "validate"}) {
    r = test::run_cli({command, (base / "run").string()});
    INFO(command);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains("meta.json: vllm_version: \"banana\" is not a version such as \"0.19.0\""));
  }
  // What the user gives is not swallowed: a bad replay option or workload is an error.
  r = test::run_cli({"calibrate", kData + "/synthetic-cached", "--max-running", "0"});
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("--max-running"));
  std::ofstream(base / "bad.jsonl") << "{\"input_toks\": \n";
  r = test::run_cli({"calibrate", kData + "/synthetic-cached", "--workload", (base / "bad.jsonl").string()});
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("bad.jsonl"));
  // calibrate's replay uses its fit: there is no --cost to give.
  r = test::run_cli({"calibrate", kData + "/synthetic-cached", "--cost", "roofline"});
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("--cost"));
  std::filesystem::remove_all(base);
}

TEST_CASE("calibrate: data-parallel replicas of a model with experts are fitted as stepping together") {
  // synthetic-dp2-together's meta.json names Qwen3-30B-A3B (experts): validate's table gives
  // the preset, and the fit recovers make_synthetic.py's 50 us per prompt token only when the
  // replicas' steps are aligned. --model with a dense preset reads the run as independent
  // engines, which must put 100 us on a prompt token to explain the same ticks.
  const auto moe = test::run_cli({"calibrate", kData + "/synthetic-dp2-together", "--json"});
  REQUIRE(moe.exit_code == 0);
  const Json doc = Json::parse(moe.out);
  CHECK(doc["steps_together"] == true);
  CHECK(doc["data_parallel"] == 2);
  CHECK(doc["terms"][1]["seconds"].get<double>() == Approx(50e-6).epsilon(1e-6));
  const auto table = test::run_cli({"calibrate", kData + "/synthetic-dp2-together"});
  CHECK_THAT(table.out, Catch::Contains("per engine, 2 data-parallel engines stepping together"));
  const auto dense = test::run_cli({"calibrate", kData + "/synthetic-dp2-together", "--model", "llama-3.1-8b", "--json"});
  REQUIRE(dense.exit_code == 0);
  CHECK(Json::parse(dense.out)["steps_together"] == false);
  CHECK(Json::parse(dense.out)["terms"][1]["seconds"].get<double>() == Approx(100e-6).epsilon(1e-6));
  const auto both = test::run_cli({"calibrate", kData + "/synthetic-dp2-together", "--model", "llama-3.1-8b",
                                   "--config", "x.json"});
  CHECK(both.exit_code == 2);
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
  CHECK(doc["preemptions_measured"].is_null());  // no preempted column in this run
  const auto table = test::run_cli({"validate", kData + "/tiny/run", "--kv-budget", "1GB"});
  CHECK(table.exit_code == 0);
  CHECK_THAT(table.out, Catch::Contains("TTFT Mean (ms)") && Catch::Contains("not recorded"));
}

TEST_CASE("validate: a tick_seconds the timeseries' rows do not keep is named, as every per-tick figure reads it") {
  // The tiny run's rows are at 0.25, 0.75 and 1.0 s: one missing row, the closest two 0.25 s
  // apart, as its tick_seconds says. Said to be 1 s, the rows are read 1 s apart.
  const auto base = test::scratch_dir("validate-tick");
  const auto dir = copy_tiny_run(base);
  const std::string workload = kData + "/tiny/workloads/tiny.jsonl";
  auto r = test::run_cli({"validate", dir.string(), "--workload", workload, "--kv-budget", "1GB"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, !Catch::Contains("tick_seconds"));
  replace_in_file(dir / "meta.json", R"("tick_seconds": 0.25)", R"("tick_seconds": 1)");
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--kv-budget", "1GB"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("timeseries.csv: its closest rows are 0.25 s apart, but meta.json's tick_seconds "
                                    "is 1 s"));
  CHECK_THAT(r.out, Catch::Contains("WARNING: ") && Catch::Contains("its closest rows are 0.25 s apart"));
  std::filesystem::remove_all(base);
}

TEST_CASE("validate: arrivals that drift from the workload's by more than a second are named, and a missing start") {
  // The tiny run's requests arrive at wall times 0.0 and 0.5 s past its epoch, as the
  // workload's arrivals (0 and 0.5 s) say: one offset. Moved to 2 s in the workload, the
  // second's offset is 1.5 s less than the first's: the workload's times are not the run's.
  const auto base = test::scratch_dir("validate-arrivals");
  const auto dir = copy_tiny_run(base);
  const auto workload = base / "tiny.jsonl";
  std::filesystem::copy_file(kData + "/tiny/workloads/tiny.jsonl", workload);
  auto r = test::run_cli({"validate", dir.string(), "--workload", workload.string(), "--kv-budget", "1GB"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, !Catch::Contains("arrival times"));
  replace_in_file(workload, R"("arrival_time_ns": 500000000)", R"("arrival_time_ns": 2000000000)");
  r = test::run_cli({"validate", dir.string(), "--workload", workload.string(), "--kv-budget", "1GB", "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("requests.jsonl: its arrival times follow the workload's " + workload.string() +
                                    " only to within 1.500 s"));
  const Json warnings = Json::parse(r.out)["warnings"];
  CHECK(std::count_if(warnings.begin(), warnings.end(), [](const Json& w) {
          return w.get<std::string>().find("its arrival times follow") != std::string::npos;
        }) == 1);
  // Without started_at the ticks are placed from the first arrival: said, not silent.
  CHECK_THAT(r.err, !Catch::Contains("started_at"));
  replace_in_file(dir / "meta.json", R"("started_at": "2026-01-01T00:00:00Z",)", "");
  r = test::run_cli({"validate", dir.string(), "--workload", workload.string(), "--kv-budget", "1GB"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("meta.json records no started_at: timeseries.csv's ticks are placed from the first "
                                    "request's arrival"));
  std::filesystem::remove_all(base);
}

TEST_CASE("validate: with one-token outputs there is no TPOT, and it says n/a, not 0") {
  // TPOT needs two tokens (README: (last - first) / (output - 1)).
  const auto base = test::scratch_dir("validate-one-token");
  copy_tiny_run(base);
  std::filesystem::create_directories(base / "workloads");
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

TEST_CASE("validate: when nothing completes in the simulation the makespan is n/a, not 0 and -100%") {
  // The tiny run's two requests (100 + 3 and 20 + 5 tokens: 7 and 2 blocks) under a pool of
  // one 16-token block of Llama-3.1-8B (16 x 131,072 bytes = 2 MiB): neither ever fits, so
  // neither completes and there is no simulated span to set beside the measured 0.95 s.
  const auto base = test::scratch_dir("validate-none-completes");
  copy_tiny_run(base);
  const std::string workload = kData + "/tiny/workloads/tiny.jsonl";
  const auto r = test::run_cli({"validate", (base / "run").string(), "--workload", workload, "--kv-budget", "2MiB", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const Json doc = Json::parse(r.out);
  CHECK(doc["completed"] == 0);
  CHECK(doc["makespan_s"]["measured"].get<double>() == Approx(0.95));
  CHECK(doc["makespan_s"]["simulated"].is_null());
  CHECK(doc["makespan_s"]["diff_percent"].is_null());
  const auto table = test::run_cli({"validate", (base / "run").string(), "--workload", workload, "--kv-budget", "2MiB"});
  CHECK_THAT(table.out, Catch::Contains("Makespan (s)                     0.95          n/a       n/a") &&
                            Catch::Contains("WARNING: 2 of 2 requests did not complete"));
  // One block cannot hold a sequence of the model's 131,072 tokens (8,192 blocks, 16 GiB):
  // vLLM would not have started, and the table says so.
  CHECK_THAT(table.out, Catch::Contains("WARNING: the KV pool replayed (2,097,152 bytes) cannot hold one sequence of "
                                        "max model len 131072 (17,179,869,184 bytes): vLLM refuses to start such an "
                                        "engine"));
  // vLLM checks before it takes its null block: a pool of 127 blocks of 16 tokens replayed
  // (128 in vLLM) holds a sequence of 2,048 tokens, one of 126 does not. A pool meta.json
  // records is one vLLM started with: never warned about.
  replace_in_file(base / "run" / "meta.json", "\"max_model_len\": null", "\"max_model_len\": 2048");
  const auto blocks = [&](int n) {
    return test::run_cli({"validate", (base / "run").string(), "--workload", workload, "--kv-budget",
                          std::to_string(n * 2'097'152)})
        .out;
  };
  CHECK_THAT(blocks(127), !Catch::Contains("cannot hold one sequence"));
  CHECK_THAT(blocks(126), Catch::Contains("cannot hold one sequence of max model len 2048 (268,435,456 bytes)"));
  replace_in_file(base / "run" / "meta.json", "\"tick_seconds\": 0.25",
                  "\"tick_seconds\": 0.25, \"kv_cache\": {\"num_gpu_blocks\": 100}, "
                  "\"hardware\": {\"device_name\": \"NVIDIA GeForce RTX 4090\"}");
  const auto recorded = test::run_cli({"validate", (base / "run").string(), "--workload", workload});
  INFO(recorded.err);
  REQUIRE(recorded.exit_code == 0);
  CHECK_THAT(recorded.out, !Catch::Contains("cannot hold one sequence"));
  // kvsim report draws the page from that JSON, leaving out the figures with no simulated side.
  const std::string json = (base / "validate.json").string();
  std::ofstream(json) << r.out;
  const auto page = test::run_cli({"report", json, "--html", (base / "page.html").string()});
  CHECK(page.exit_code == 0);
  CHECK_THAT(page.err, Catch::Equals(""));
  std::filesystem::remove_all(base);
}

TEST_CASE("validate: a run that records no vLLM version is replayed with replay's defaults, and says so") {
  // tiny's run without "vllm_version": nothing tells 0.19's asynchronous scheduling and CUDA
  // graphs apart from an older engine's, so the replay takes kvsim replay's defaults (neither)
  // and the output names the gap. --vllm-version gives what the file does not.
  const auto dir = copy_tiny_run(test::scratch_dir("validate-no-version"));
  std::string meta = test::slurp(dir / "meta.json");
  const std::string version = R"("vllm_version": "0.19.0",)";
  REQUIRE(meta.find(version) != std::string::npos);
  meta.erase(meta.find(version), version.size());
  std::ofstream(dir / "meta.json") << meta;
  const std::string workload = kData + "/tiny/workloads/tiny.jsonl";
  // A pool that holds one sequence of the model's 131,072 tokens (16 GiB): no warning of its own.
  const std::vector<std::string> args = {"validate", dir.string(), "--workload", workload, "--kv-budget", "17GiB",
                                         "--timing-device", "RTX-PRO-6000"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> all = args;
    all.insert(all.end(), more.begin(), more.end());
    return test::run_cli(all);
  };
  auto r = with({"--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  Json doc = Json::parse(r.out);
  CHECK(doc["vllm_version"].is_null());
  CHECK(doc["kvsim"]["async_scheduling"] == false);
  CHECK(doc["kvsim"]["cuda_graph_max_tokens"] == 0);
  REQUIRE(doc["warnings"].size() == 1);
  CHECK_THAT(doc["warnings"][0].get<std::string>(),
             Catch::Contains("meta.json records no vllm_version") && Catch::Contains("--vllm-version"));
  CHECK_THAT(r.err, Catch::Contains("kvsim validate: warning: ") && Catch::Contains("records no vllm_version"));
  const auto table = with({});
  CHECK_THAT(table.out, Catch::Contains("(meta-llama/Llama-3.1-8B, vLLM version not recorded)") &&
                            Catch::Contains("WARNING: ") && Catch::Contains("records no vllm_version"));
  r = with({"--vllm-version", "0.19.0", "--json"});
  REQUIRE(r.exit_code == 0);
  doc = Json::parse(r.out);
  CHECK(doc["vllm_version"] == "0.19.0");
  CHECK(doc["kvsim"]["async_scheduling"] == true);
  CHECK(doc["warnings"].empty());
  std::filesystem::remove_all(dir.parent_path());
}

TEST_CASE("SHA-256: FIPS 180-4's examples, one block, two, and a million bytes") {
  const auto digest = [](const std::string& text) {
    kvsim::detail::Sha256 h;
    h.update(text);
    return h.hex();
  };
  CHECK(digest("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(digest("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 56 bytes: the length no longer fits the first block's padding.
  CHECK(digest("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // A million 'a's, given in uneven pieces.
  kvsim::detail::Sha256 h;
  for (int given = 0; given < 1'000'000;) {
    const int piece = std::min(1'000'000 - given, 1 + given % 997);
    h.update(std::string(static_cast<std::size_t>(piece), 'a'));
    given += piece;
  }
  CHECK(h.hex() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("validate: a workload whose SHA-256 is not meta.json's dataset_hash is named in a warning") {
  const auto dir = copy_tiny_run(test::scratch_dir("validate-digest"));
  const std::string workload = kData + "/tiny/workloads/tiny.jsonl";
  // sha256sum tests/data/measured/tiny/workloads/tiny.jsonl
  const std::string digest = "7185409b965e3a2d475f4fb97216dccecfe25eb3d55448bc9a96175c67969eff";
  const auto run = [&](const std::string& hash) {
    replace_in_file(dir / "meta.json", "\"tick_seconds\"", "\"dataset_hash\": \"" + hash + "\", \"tick_seconds\"");
    // 17 GiB holds a sequence of the model's 131,072 tokens: no warning about the pool.
    auto r = test::run_cli({"validate", dir.string(), "--workload", workload, "--kv-budget", "17GiB", "--timing-device",
                            "RTX-PRO-6000", "--json"});
    std::filesystem::copy_file(kData + "/tiny/run/meta.json", dir / "meta.json",
                               std::filesystem::copy_options::overwrite_existing);
    return r;
  };
  auto r = run(digest);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(Json::parse(r.out)["warnings"].empty());
  // Upper case is the same digest.
  std::string upper = digest;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  CHECK(Json::parse(run(upper).out)["warnings"].empty());
  // Another file's digest: replayed, and said.
  std::string other = digest;
  other[0] = '8';
  r = run(other);
  REQUIRE(r.exit_code == 0);
  const Json doc = Json::parse(r.out);
  REQUIRE(doc["warnings"].size() == 1);
  CHECK_THAT(doc["warnings"][0].get<std::string>(),
             Catch::Contains("tiny.jsonl: its SHA-256 is " + digest) && Catch::Contains("dataset_hash is " + other));
  CHECK_THAT(r.err, Catch::Contains("kvsim validate: warning: ") && Catch::Contains("not the workload this run replayed"));
  // Not a SHA-256 (some other digest, or a name): nothing to compare.
  CHECK(Json::parse(run("md5:0123").out)["warnings"].empty());
  std::filesystem::remove_all(dir.parent_path());
}

TEST_CASE("validate: a meta.json of another schema_version is read, with a warning") {
  const auto dir = copy_tiny_run(test::scratch_dir("validate-schema"));
  const std::string workload = kData + "/tiny/workloads/tiny.jsonl";
  const auto warnings = [&](const std::string& version) {
    std::filesystem::copy_file(kData + "/tiny/run/meta.json", dir / "meta.json",
                               std::filesystem::copy_options::overwrite_existing);
    replace_in_file(dir / "meta.json", "\"tick_seconds\"", "\"schema_version\": " + version + ", \"tick_seconds\"");
    const auto r = test::run_cli({"validate", dir.string(), "--workload", workload, "--kv-budget", "17GiB",
                                  "--timing-device", "RTX-PRO-6000", "--json"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return Json::parse(r.out)["warnings"];
  };
  CHECK(warnings("1").empty());
  Json w = warnings("2");
  REQUIRE(w.size() == 1);
  CHECK_THAT(w[0].get<std::string>(), Catch::Contains("meta.json's schema_version is 2, and kvsim reads version 1"));
  w = warnings("\"abc\"");
  REQUIRE(w.size() == 1);
  CHECK_THAT(w[0].get<std::string>(), Catch::Contains("schema_version is not a version number"));
  std::filesystem::remove_all(dir.parent_path());
}

TEST_CASE("validate: what it cannot map is an error naming the file and field") {
  const auto dir = copy_tiny_run(test::scratch_dir("validate-bad"));
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
  rewrite_meta("meta-llama/Llama-3.1-8B", "example/unknown-model");
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--kv-budget", "1GB"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("model") && Catch::Contains("--config"));
  rewrite_meta("example/unknown-model", "meta-llama/Llama-3.1-8B");
  r = test::run_cli({"validate", (dir.parent_path() / "no-such-run").string()});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("no-such-run: no such directory"));
  // A part of the workload, or a rescaled one, is not what was measured: a usage error for
  // validate and calibrate alike, naming the option.
  for (const char* command : {"validate", "calibrate"}) {
    for (const std::vector<std::string>& option :
         {std::vector<std::string>{"--rate-scale", "2"}, {"--requests", "1"}, {"--time-window", "0s..1s"}}) {
      INFO(command << " " << option[0]);
      r = test::run_cli({command, dir.string(), "--workload", workload, "--kv-budget", "1GB", option[0], option[1]});
      CHECK(r.exit_code == 2);
      CHECK_THAT(r.err, Catch::Contains(option[0] + " selects or rescales the workload"));
      // Nor does --help offer it among the options.
      CHECK_THAT(test::run_cli({command, "--help"}).out, !Catch::Contains("  " + option[0] + " "));
    }
  }
  // A value meta.json gives that the replay cannot take is meta.json's error (exit 1), not a
  // usage error about an option the user never typed; the same value given as that option is.
  // (calibrate replays through the same replay_run(), after a fit this tiny run cannot give.)
  rewrite_meta("\"tensor_parallel_size\": 1", "\"tensor_parallel_size\": 3");
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--kv-budget", "1GB"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("meta.json: engine_kwargs.tensor_parallel_size: tensor parallelism 3 does not "
                                    "divide the 32 attention heads (the replay takes this value as --tp)"));
  rewrite_meta("\"tensor_parallel_size\": 3", "\"tensor_parallel_size\": 1");
  // A pool meta.json fixes whose bytes do not fit 64 bits: 2^62 blocks of 16 tokens, 2 MiB each.
  rewrite_meta("\"max_model_len\": null", "\"max_model_len\": null, \"num_gpu_blocks_override\": 4611686018427387904");
  r = test::run_cli({"validate", dir.string(), "--workload", workload});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("meta.json: engine_kwargs.num_gpu_blocks_override: 4611686018427387904 blocks of "
                                    "2097152 bytes each overflow 64 bits"));
  rewrite_meta(", \"num_gpu_blocks_override\": 4611686018427387904", "");
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--kv-budget", "1GB", "--tp", "3"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--tp: tensor parallelism 3 does not divide"));
  // The engine's check as it starts, likewise (vLLM's SchedulerConfig refuses the same): with
  // --no-chunked-prefill, meta.json's 2,048 batched tokens are below the model's 131,072.
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--kv-budget", "1GB", "--no-chunked-prefill"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("meta.json: engine_kwargs.max_num_batched_tokens: without chunked prefill it must "
                                    "be at least the model's maximum length (131072) (the replay takes this value as "
                                    "--max-batched-tokens)"));
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--kv-budget", "1GB", "--no-chunked-prefill",
                     "--max-batched-tokens", "2048"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--max-batched-tokens: without chunked prefill"));
  // An expert-parallel run over two replicas (meta.json) replayed as one engine: the user's
  // --replicas 1 leaves no replicas to spread the experts over, so meta.json's expert
  // parallelism is not applied (it had been, and refused for want of replicas).
  rewrite_meta("meta-llama/Llama-3.1-8B", "Qwen/Qwen3-30B-A3B");
  rewrite_meta("\"data_parallel_size\": 1", "\"data_parallel_size\": 2");
  rewrite_meta("\"enable_expert_parallel\": false", "\"enable_expert_parallel\": true");
  for (const char* replicas : {"2", "1"}) {
    INFO("--replicas " << replicas);
    std::vector<std::string> args{"validate", dir.string(), "--workload", workload, "--kv-budget", "1GB", "--json"};
    if (std::string(replicas) == "1") args.insert(args.end(), {"--replicas", "1"});
    r = test::run_cli(args);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(Json::parse(r.out)["kvsim"]["replicas"] == std::stoi(replicas));
  }
  // On a model without experts vLLM's enable_expert_parallel changes nothing: two replicas of
  // Llama-3.1-8B, replayed as data parallelism alone (it had been refused for want of experts).
  rewrite_meta("Qwen/Qwen3-30B-A3B", "meta-llama/Llama-3.1-8B");
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--kv-budget", "1GB", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(Json::parse(r.out)["kvsim"]["replicas"] == 2);
  rewrite_meta("\"enable_expert_parallel\": true", "\"enable_expert_parallel\": false");
  rewrite_meta("\"data_parallel_size\": 2", "\"data_parallel_size\": 1");
  rewrite_meta("\"0.19.0\"", "\"banana\"");
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--kv-budget", "1GB"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("meta.json") && Catch::Contains("vllm_version"));
  // A timestamp no run of started_at to finished_at (1 s here) could have recorded: bench-1's
  // last token 100 s after it was queued.
  rewrite_meta("\"banana\"", "\"0.19.0\"");
  rewrite_meta("\"tick_seconds\"", "\"finished_at\": \"2026-01-01T00:00:01Z\", \"tick_seconds\"");
  {
    std::string requests = test::slurp(dir / "requests.jsonl");
    requests.replace(requests.find("500.95"), 6, "600.5");
    std::ofstream(dir / "requests.jsonl") << requests;
  }
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--kv-budget", "1GB"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("requests.jsonl:2: last_token_ts") && Catch::Contains("longer than the run"));
  rewrite_meta("\"meta-llama/Llama-3.1-8B\"", "\"example/unknown-model\"");
  // The dataset is not beside the run nor above it.
  r = test::run_cli({"validate", dir.string(), "--kv-budget", "1GB"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("dataset_path") && Catch::Contains("--workload"));
  std::filesystem::remove_all(dir.parent_path());
}

TEST_CASE("validate: meta.json's engine settings are replayed, and the ones it cannot model are named") {
  // The tiny run with engine_kwargs a memory-bound run might set. Llama-3.1-8B stores
  // 32 layers x 8 KV heads x 128 dims x 2 (K and V) = 65,536 values a token: 131,072 bytes
  // in bf16, 65,536 in fp8. 400 blocks of 32 tokens in fp8: 400 x 32 x 65,536 = 838,860,800
  // bytes per device, the pool vLLM sizes for num_gpu_blocks_override, of which the first
  // block is its null block (vllm/v1/core/block_pool.py), never handed out: 399 blocks,
  // 838,860,800 - 32 x 65,536 = 836,763,648 bytes to replay. block_size 32 and
  // prefix caching off make the allocator paged:block=32; chunked prefill off is kept (a
  // step's 4,096 tokens hold a whole prompt of max_model_len, as vLLM then requires);
  // swap_space and a made-up key are neither modelled nor known to be harmless: named.
  const auto base = test::scratch_dir("validate-settings");
  const auto dir = copy_tiny_run(base);
  const std::string workload = kData + "/tiny/workloads/tiny.jsonl";
  const auto write_meta = [&](const std::string& extra) {
    std::ofstream(dir / "meta.json") << R"({"model": "meta-llama/Llama-3.1-8B", "vllm_version": "0.19.0",
  "engine_kwargs": {"tensor_parallel_size": 1, "data_parallel_size": 1, "max_num_seqs": 128,
    "max_num_batched_tokens": 4096, "max_model_len": 4096, "seed": 42)" + extra + R"(},
  "dataset_path": "workloads/tiny.jsonl", "started_at": "2026-01-01T00:00:00Z", "tick_seconds": 0.25})";
    std::ofstream(dir / "peer_cluster_config.json")
        << R"({"nodes": [{"instances": [{"hardware": "RTXPRO6000"}]}]})";
  };
  write_meta(R"(, "block_size": 32, "enable_prefix_caching": false, "enable_chunked_prefill": false,
    "kv_cache_dtype": "fp8", "num_gpu_blocks_override": 400, "swap_space": 4, "made_up": "x")");
  auto r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  Json doc = Json::parse(r.out);
  CHECK(doc["kvsim"]["allocator"] == "paged:block=32");
  CHECK(doc["kvsim"]["chunked_prefill"] == false);
  CHECK(doc["kvsim"]["kv_budget_bytes"] == 836763648);
  CHECK_THAT(doc["kvsim"]["kv_budget"].get<std::string>(),
             Catch::Contains("num_gpu_blocks_override") && Catch::Contains("less the null block (2,097,152 bytes)"));
  CHECK(doc["unmodelled_settings"] == Json::array({"made_up=\"x\"", "swap_space=4"}));
  // The table says the same.
  r = test::run_cli({"validate", dir.string(), "--workload", workload});
  CHECK_THAT(r.out, Catch::Contains("(no chunked prefill)") && Catch::Contains("836,763,648 bytes") &&
                        Catch::Contains("not modelled (meta.json engine_kwargs, or the resolved_config named): made_up=\"x\", swap_space=4"));
  // A setting beside engine_kwargs rather than in it is read nowhere: named, not replayed as
  // if absent in silence (a null is no value, as everywhere in meta.json).
  replace_in_file(dir / "meta.json", R"("dataset_path")", R"("block_size": 64, "notes": null, "host": "gpu7", "dataset_path")");
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json"});
  REQUIRE(r.exit_code == 0);
  doc = Json::parse(r.out);
  CHECK(doc["kvsim"]["allocator"] == "paged:block=32");
  CHECK(doc["unread_fields"] == Json::array({"block_size", "host"}));
  r = test::run_cli({"validate", dir.string(), "--workload", workload});
  CHECK_THAT(r.out, Catch::Contains("not read (meta.json's top level, where the recorder writes no setting; "
                                    "engine_kwargs, kv_cache and resolved_config hold vLLM's): block_size, host"));
  // So is a key of requests.jsonl beside the recorder's eight, given on any line (a finish
  // reason, say): named once, sorted, a null again no value.
  CHECK(doc["unread_request_fields"] == Json::array());
  replace_in_file(dir / "requests.jsonl", R"("last_token_ts": 500.3})",
                  R"("last_token_ts": 500.3, "finish_reason": "length", "note": null})");
  replace_in_file(dir / "requests.jsonl", R"("last_token_ts": 500.95})",
                  R"("last_token_ts": 500.95, "finish_reason": "stop", "generated": 5})");
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK(Json::parse(r.out)["unread_request_fields"] == Json::array({"finish_reason", "generated"}));
  r = test::run_cli({"validate", dir.string(), "--workload", workload});
  CHECK_THAT(r.out, Catch::Contains("not read (requests.jsonl, beside the recorder's eight fields): finish_reason, "
                                    "generated"));

  // gpu_memory_utilization 0.5 on the RTX PRO 6000 preset (102,641,958,912 bytes): the
  // subtraction starts from 51,320,979,456 bytes. The rest is vLLM's start-up rule, which
  // `kvsim size --engine vllm` prints with the run's settings (its own tests check it against
  // vLLM's logs); validate replays that pool less the null block: one 16-token block of
  // 131,072 bf16 bytes a token, 2,097,152 bytes.
  write_meta(R"(, "gpu_memory_utilization": 0.5)");
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json"});
  REQUIRE(r.exit_code == 0);
  doc = Json::parse(r.out);
  CHECK_THAT(doc["kvsim"]["kv_budget"].get<std::string>(),
             Catch::Contains("vLLM's start-up rule on RTX-PRO-6000: total 102,641,958,912 x 0.5 - weights"));
  const auto sized = test::run_cli({"size", "--model", "llama-3.1-8b", "--engine", "vllm", "--device", "RTX-PRO-6000",
                                    "--gpu-memory-utilization", "0.5", "--max-num-seqs", "128",
                                    "--max-num-batched-tokens", "4096", "--max-model-len", "4096", "--json"});
  REQUIRE(sized.exit_code == 0);
  const std::int64_t startup = Json::parse(sized.out)["budget"]["kv_budget_bytes"].get<std::int64_t>();
  CHECK(doc["kvsim"]["kv_budget_bytes"] == startup - 2097152);
  // The double just below 0.5, as a Python script's arithmetic may leave it: to the nearest
  // part per billion it is 0.5, and the same pool (before, its 17 decimals were refused).
  write_meta(R"(, "gpu_memory_utilization": 0.49999999999999994)");
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK(Json::parse(r.out)["kvsim"]["kv_budget_bytes"] == startup - 2097152);
  // Below one part per billion kvsim cannot hold it: said of meta.json's field, not of the
  // number's format.
  write_meta(R"(, "gpu_memory_utilization": 1e-300)");
  r = test::run_cli({"validate", dir.string(), "--workload", workload});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("meta.json: engine_kwargs.gpu_memory_utilization: expected a fraction of at least 1e-9"));
  write_meta(R"(, "gpu_memory_utilization": 0.5)");
  // The options given win over meta.json's, in the start-up rule too: a step of 8,192 tokens
  // profiles a larger activation peak, as size says. A 32-token block's null block is twice
  // the bytes; an allocator that is not vLLM's paged pool has none.
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json", "--max-batched-tokens", "8192",
                     "--no-chunked-prefill", "--allocator", "paged:block=32"});
  REQUIRE(r.exit_code == 0);
  const auto sized_8k = test::run_cli({"size", "--model", "llama-3.1-8b", "--engine", "vllm", "--device", "RTX-PRO-6000",
                                       "--gpu-memory-utilization", "0.5", "--max-num-seqs", "128",
                                       "--max-num-batched-tokens", "8192", "--max-model-len", "4096", "--json"});
  REQUIRE(sized_8k.exit_code == 0);
  const std::int64_t startup_8k = Json::parse(sized_8k.out)["budget"]["kv_budget_bytes"].get<std::int64_t>();
  CHECK(startup_8k < startup);
  CHECK(Json::parse(r.out)["kvsim"]["kv_budget_bytes"] == startup_8k - 2 * 2097152);
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json", "--allocator", "dynamic"});
  REQUIRE(r.exit_code == 0);
  CHECK(Json::parse(r.out)["kvsim"]["kv_budget_bytes"] == startup);
  // A pool given on the command line is replayed as given, timed on the run's GPU.
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--kv-budget", "1GB"});
  CHECK_THAT(r.out, Catch::Contains("1,000,000,000 bytes, --kv-budget") && Catch::Contains("cost roofline RTX-PRO-6000"));
  // The start-up rule that leaves nothing names where the utilisation came from.
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--gpu-memory-utilization", "0.1"});
  CHECK(r.exit_code == 2);  // an option's value: a usage error
  CHECK_THAT(r.err, Catch::Contains("--gpu-memory-utilization") && Catch::Contains("leaves nothing for the KV cache"));
  write_meta(R"(, "gpu_memory_utilization": 0.1)");
  r = test::run_cli({"validate", dir.string(), "--workload", workload});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("meta.json") && Catch::Contains("gpu_memory_utilization"));
  // kv_cache_memory_bytes fixes the memory: floor(123,456,789 / 2,097,152) = 58 blocks, of
  // which 57 are handed out; 123,456,789 - 2,097,152 = 121,359,637 bytes hold exactly 57.
  write_meta(R"(, "kv_cache_memory_bytes": 123456789, "dtype": "bfloat16")");
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json"});
  REQUIRE(r.exit_code == 0);
  doc = Json::parse(r.out);
  CHECK(doc["kvsim"]["kv_budget_bytes"] == 121359637);
  CHECK(doc["kvsim"]["allocator"] == "paged:block=16,prefix-caching=on");
  CHECK(doc["unmodelled_settings"].empty());

  // What it cannot read is an error naming the file and the field.
  write_meta(R"(, "kv_cache_dtype": "int3")");
  r = test::run_cli({"validate", dir.string(), "--workload", workload});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("meta.json") && Catch::Contains("kv_cache_dtype"));
  write_meta(R"(, "gpu_memory_utilization": 1.5)");
  r = test::run_cli({"validate", dir.string(), "--workload", workload});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("gpu_memory_utilization"));
  write_meta(R"(, "block_size": "16")");
  r = test::run_cli({"validate", dir.string(), "--workload", workload});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("block_size"));
  std::filesystem::remove_all(base);
}

TEST_CASE("validate: a data-parallel run is two engines behind vLLM's router, their states summed") {
  // meta.json: data_parallel_size 2, so --replicas 2. 10 ms steps, free prefill, so a request
  // arriving at an idle replica has its first token one step later. The router
  // (include/kvsim/replicas.h: vLLM 0.19's DPLBAsyncMPClient) has no counts from a dense
  // model's engines, only the requests it sent, so it goes round robin from replica 0:
  //   a at   0 ms (30 tokens) -> replica 0; steps 0, 10, ..: tokens 10..300 ms
  //   b at 100 ms (30 tokens) -> replica 1; idle, steps from 100: 110..400 ms
  //   c at 155 ms (10 tokens) -> replica 0; admitted at its 160 ms step: 170..260 ms
  //   d at 205 ms (10 tokens) -> replica 1; its 210 ms step: 220..310 ms
  // Running, summed over the replicas (replica 0 + replica 1) as each last reported before the
  // tick (synchronous: as its step ends, less the step's completions), at each tick:
  //   0.05 s: a + none = 1;  0.12 s: a + b = 2;  0.18 s: a, c + b = 3;  0.23 s: a, c + b, d = 4;
  //   0.35 s: none + b = 1 (replica 0's last step, reported at 0.30 s, ends a);  0.45 s: 0.
  //   Nothing waits (each admitted at the next step).
  // Measured running 1, 2, 2, 4, 1, 0 and waiting 0, 0, 0, 1, 0, 0: MAE 1/6 each. (Replica 0
  // alone would give 1, 1, 2, 2, 0, 0: running MAE 4/6.)
  // The measured requests carry the simulated times, so every figure differs by 0%. vLLM
  // records queued_ts as its engine loop takes a request in, between steps (validate's
  // taken_in_ns): c, arriving at 155 ms during replica 0's step of 150-160 ms, is queued at
  // 160 ms, d at 210 ms; a and b reach idle replicas, queued at once. Both sides count from
  // there: TTFT 10 ms each, TPOT 10 ms, latency 300, 300, 100, 100 ms (mean 200),
  // makespan 0.4 s. (From the arrivals, c's and d's TTFT would be 15 ms.)
  const auto base = test::scratch_dir("validate-dp");
  std::filesystem::create_directories(base / "run");
  std::filesystem::create_directories(base / "workloads");
  {
    std::ofstream(base / "run" / "meta.json") << R"({"model": "meta-llama/Llama-3.1-8B", "vllm_version": "0.19.0",
  "engine_kwargs": {"tensor_parallel_size": 1, "data_parallel_size": 2, "enable_expert_parallel": false,
    "max_num_seqs": 128, "max_num_batched_tokens": 2048, "max_model_len": null},
  "dataset_path": "workloads/dp.jsonl", "started_at": "2026-01-01T00:00:00Z", "tick_seconds": 0.05})";
    std::ofstream workload(base / "workloads" / "dp.jsonl");
    std::ofstream requests(base / "run" / "requests.jsonl");
    requests << std::fixed << std::setprecision(3);  // seconds to the millisecond, all digits
    struct Row {
      const char* id;
      int arrival_ms, queued_ms, output, first_ms, last_ms;
    };
    for (const Row& q : {Row{"a", 0, 0, 30, 10, 300}, Row{"b", 100, 100, 30, 110, 400},
                         Row{"c", 155, 160, 10, 170, 260}, Row{"d", 205, 210, 10, 220, 310}}) {
      workload << R"({"input_toks": 20, "output_toks": )" << q.output << R"(, "arrival_time_ns": )"
               << q.arrival_ms * 1'000'000LL << "}\n";
      requests << R"({"request_id": ")" << q.id << R"(", "input_toks": 20, "output_toks": )" << q.output
               << R"(, "arrival_time": )" << 1767225600 + q.arrival_ms / 1000.0 << R"(, "queued_ts": )"
               << 500 + q.queued_ms / 1000.0 << R"(, "scheduled_ts": )" << 500 + q.queued_ms / 1000.0
               << R"(, "first_token_ts": )" << 500 + q.first_ms / 1000.0 << R"(, "last_token_ts": )"
               << 500 + q.last_ms / 1000.0 << "}\n";
    }
    std::ofstream(base / "run" / "timeseries.csv") << "t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct\n"
                                                       "0.05,0,0,1,0,0\n0.12,0,0,2,0,0\n0.18,0,0,2,0,0\n"
                                                       "0.23,0,0,4,1,0\n0.35,0,0,1,0,0\n0.45,0,0,0,0,0\n";
  }
  const std::string per_request = test::scratch_path("validate-dp-per-request.csv");
  // The schedule above is synchronous (--async-scheduling off); the run's vLLM 0.19 would
  // default to asynchronous scheduling, checked at the end.
  const auto r = test::run_cli({"validate", (base / "run").string(), "--kv-budget", "1GB", "--cost",
                                "constant:step=10ms,prefill-token=0ps", "--per-request", per_request, "--json",
                                "--async-scheduling", "off"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const Json doc = Json::parse(r.out);
  CHECK(doc["kvsim"]["replicas"] == 2);
  CHECK(doc["completed"] == 4);
  CHECK(doc["ticks"] == 6);
  CHECK(doc["running_mae"].get<double>() == Approx(1.0 / 6));
  CHECK(doc["waiting_mae"].get<double>() == Approx(1.0 / 6));
  CHECK(doc["ttft"]["simulated"]["mean_s"].get<double>() == Approx(0.010));
  CHECK(doc["ttft"]["measured"]["mean_s"].get<double>() == Approx(0.010));
  CHECK(doc["tpot"]["simulated"]["p99_s"].get<double>() == Approx(0.010));
  CHECK(doc["latency"]["simulated"]["mean_s"].get<double>() == Approx(0.200));
  CHECK(doc["latency"]["diff_percent"]["p50"].get<double>() == Approx(0.0).margin(1e-6));
  CHECK(doc["makespan_s"]["simulated"].get<double>() == Approx(0.4));
  // One record per request from whichever replica served it, numbered by the trace (c and d
  // are each their replica's second request), finish times as above.
  const std::string rows = test::slurp(per_request);
  CHECK_THAT(rows, Catch::Contains(",1,0.000000000,0.000000000,0.010000000,0.300000000,") &&
                       Catch::Contains(",2,0.100000000,0.100000000,0.110000000,0.400000000,") &&
                       Catch::Contains(",3,0.155000000,0.160000000,0.170000000,0.260000000,") &&
                       Catch::Contains(",4,0.205000000,0.210000000,0.220000000,0.310000000,"));
  CHECK(rows.find(",1,0.0") < rows.find(",2,0.1"));
  CHECK(rows.find(",3,0.155") < rows.find(",4,0.205"));
  // Each row carries requests.jsonl's id and, after replay's columns, the replica, when it
  // was taken in, and TTFT, TPOT and latency measured beside simulated, as the table counts
  // them: c's TTFT 10 ms from 160 ms (replay's ttft_s, from the arrival, is 15 ms).
  CHECK_THAT(rows, Catch::StartsWith("allocator,id,ordinal,") &&
                       Catch::Contains(",outcome,replica,queued_s,measured_ttft_s,simulated_ttft_s,measured_tpot_s,"
                                       "simulated_tpot_s,measured_latency_s,simulated_latency_s\n"));
  const std::string tail_a = ",completed,0,0.000000000,0.010000000,0.010000000,0.010000000,0.010000000,0.300000000,0.300000000\n";
  const std::string tail_b = ",completed,1,0.100000000,0.010000000,0.010000000,0.010000000,0.010000000,0.300000000,0.300000000\n";
  const std::string tail_c = ",completed,0,0.160000000,0.010000000,0.010000000,0.010000000,0.010000000,0.100000000,0.100000000\n";
  const std::string tail_d = ",completed,1,0.210000000,0.010000000,0.010000000,0.010000000,0.010000000,0.100000000,0.100000000\n";
  CHECK_THAT(rows, Catch::Contains(",a,1,0.000000000,") && Catch::Contains(tail_a) &&
                       Catch::Contains(",b,2,0.100000000,") && Catch::Contains(tail_b) &&
                       Catch::Contains(",c,3,0.155000000,0.160000000,0.170000000,0.260000000,0.015000000,") &&
                       Catch::Contains(tail_c) && Catch::Contains(",d,4,0.205000000,") && Catch::Contains(tail_d));
  CHECK(rows.find(",c,3,") < rows.find(tail_c));
  CHECK(rows.find(tail_c) < rows.find(",d,4,"));
  // By default, a vLLM 0.19 run is replayed with asynchronous scheduling: c (155 ms) and d
  // (205 ms) arrive during a step of their replica's running request, whose next step was
  // planned before they came, so each starts a step later, at 170 and 220 ms: TTFT 20 ms each
  // from the step boundary that took them in (mean (10 + 10 + 20 + 20) / 4 = 15 ms) and
  // latency 110 ms each (mean 205 ms).
  const auto async = test::run_cli({"validate", (base / "run").string(), "--kv-budget", "1GB", "--cost",
                                    "constant:step=10ms,prefill-token=0ps", "--json"});
  REQUIRE(async.exit_code == 0);
  const Json a = Json::parse(async.out);
  CHECK(a["ttft"]["simulated"]["mean_s"].get<double>() == Approx(0.015));
  CHECK(a["latency"]["simulated"]["mean_s"].get<double>() == Approx(0.205));
  CHECK(a["kvsim"]["async_scheduling"] == true);
  CHECK_THAT(test::run_cli({"validate", "--help"}).out,
             Catch::Contains("--async-scheduling on and --cuda-graphs on (off with enforce_eager)"));
  // And with CUDA graphs up to min(2 x 128, 512, 2,048) = 256 tokens (vLLM's default, as
  // enforce_eager is not set); the constant cost has no token term for the padding to show in.
  CHECK(a["kvsim"]["cuda_graph_max_tokens"] == 256);
  CHECK(doc["kvsim"]["cuda_graph_max_tokens"] == 256);
  const auto text = test::run_cli({"validate", (base / "run").string(), "--kv-budget", "1GB", "--cost",
                                   "constant:step=10ms,prefill-token=0ps", "--cuda-graphs", "off"});
  REQUIRE(text.exit_code == 0);
  CHECK_THAT(text.out, Catch::Contains("policy vllm (recompute, whole sequence must fit, watermark 0), asynchronous scheduling\n"));
  // enforce_eager in meta.json: no graphs.
  replace_in_file(base / "run" / "meta.json", R"("max_model_len": null)",
                  R"("max_model_len": null, "enforce_eager": true)");
  const auto eager = test::run_cli({"validate", (base / "run").string(), "--kv-budget", "1GB", "--cost",
                                    "constant:step=10ms,prefill-token=0ps"});
  REQUIRE(eager.exit_code == 0);
  CHECK_THAT(eager.out, Catch::Contains("asynchronous scheduling\n"));
  CHECK_THAT(eager.out, !Catch::Contains("CUDA graphs"));
  // KV usage per tick as the recorder averages it: over the engines that reported in the tick
  // [t - 0.05 s, t), an engine reporting as its steps end (synchronous schedule as above).
  // 16-token blocks, each replica a pool of C blocks, a report holding its step's blocks as
  // the step began (the prompt and the tokens produced before it, one more by kvsim's
  // accounting convention). 0.05 s: only replica 0 reports, last at 40 ms for its step from
  // 30 ms, a holding 20 + 3 + 1 = 24 positions, 2 blocks: 2/C. 0.12 s: both report, at 110 ms;
  // a holds 32 (2 blocks), b 20 + 0 + 1 = 21 (2 blocks): 4/(2C), the same. 0.36 s: only replica
  // 1 reports (replica 0's last report, a's end, was at 0.30 s), at 350 ms for its step from
  // 340 ms, b holding 20 + 24 + 1 = 45 (3 blocks): 3/C, 1.5 times the first. Summing both pools'
  // bytes over both capacities halved the ticks with an idle replica: 0.12 s was twice 0.05 s.
  // 0.45 s: replica 1's last report, at 0.40 s, ends b, and nothing is held: 0.
  std::ofstream(base / "run" / "timeseries.csv") << "t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct\n"
                                                     "0.05,0,0,1,0,1\n0.12,0,0,2,0,1\n0.18,0,0,2,0,1\n"
                                                     "0.23,0,0,4,1,1\n0.36,0,0,1,0,1\n0.45,0,0,0,0,0\n";
  const std::string per_tick = test::scratch_path("validate-dp-per-tick.csv");
  const auto kv = test::run_cli({"validate", (base / "run").string(), "--kv-budget", "1GB", "--cost",
                                 "constant:step=10ms,prefill-token=0ps", "--async-scheduling", "off", "--per-tick",
                                 per_tick});
  INFO(kv.err);
  REQUIRE(kv.exit_code == 0);
  std::map<std::string, double> simulated_kv;
  std::istringstream ticks(test::slurp(per_tick));
  std::string line;
  std::getline(ticks, line);
  while (std::getline(ticks, line)) simulated_kv[line.substr(0, line.find(','))] = std::stod(line.substr(line.rfind(',') + 1));
  REQUIRE(simulated_kv.count("0.05") == 1);
  CHECK(simulated_kv["0.05"] > 0);
  CHECK(simulated_kv["0.12"] == Approx(simulated_kv["0.05"]));
  CHECK(simulated_kv["0.36"] == Approx(1.5 * simulated_kv["0.05"]));
  CHECK(simulated_kv["0.45"] == 0);
  std::filesystem::remove_all(base);
}

TEST_CASE("validate: a tick's counts are vLLM's last report before it, a request arriving mid-step not yet waiting") {
  // vLLM reports its scheduler's state as each step's output is processed (update_from_output
  // -> make_stats), and takes in requests that arrived during a step only between steps
  // (vllm/v1/engine/core.py run_busy_loop); LLMServingSim's recorder keeps each engine's last
  // report in the tick [t - tick, t). One engine, max_num_seqs 1, 10 ms steps, free prefill:
  //   a at 0 ms, 20 tokens: steps from 0 to 200 ms;
  //   b at 15 ms, during the step of 10-20 ms: taken in at 20 ms, and it waits for a.
  // Synchronous: a step is reported as it ends, with the waiting requests its own plan saw.
  //   t = 0.025: the step of 10-20 ms, reported at 20 ms, planned at 10 ms: 1 running, 0 waiting;
  //   t = 0.035: the step of 20-30 ms, reported at 30 ms, planned at 20 ms: 1 running, 1 waiting.
  // Asynchronous: the step of 20-30 ms is planned as the step of 10-20 ms begins, seeing
  // arrivals up to 10 ms, and reported as it begins (when the 10-20 ms step's output is
  // processed): at 0.025 s, 1 running, 0 waiting; the step of 30-40 ms, planned seeing up to
  // 20 ms, reported at 30 ms: at 0.035 s, 1 running, 1 waiting.
  // Measured 1, 1 running and 0, 1 waiting: both MAEs 0 either way. (Counting b from its
  // arrival, as validate did until 2026-12-07, gave 1 waiting at 0.025 s: MAE 0.5.)
  const auto base = test::scratch_dir("validate-reports");
  std::filesystem::create_directories(base / "run");
  std::filesystem::create_directories(base / "workloads");
  std::ofstream(base / "run" / "meta.json") << R"({"model": "meta-llama/Llama-3.1-8B", "vllm_version": "0.19.0",
  "engine_kwargs": {"tensor_parallel_size": 1, "data_parallel_size": 1, "max_num_seqs": 1,
    "max_num_batched_tokens": 2048, "max_model_len": null},
  "dataset_path": "workloads/w.jsonl", "started_at": "2026-01-01T00:00:00Z", "tick_seconds": 0.01})";
  std::ofstream(base / "workloads" / "w.jsonl") << R"({"input_toks": 20, "output_toks": 20, "arrival_time_ns": 0})"
                                                   "\n"
                                                << R"({"input_toks": 20, "output_toks": 5, "arrival_time_ns": 15000000})"
                                                   "\n";
  std::ofstream(base / "run" / "requests.jsonl")
      << R"({"request_id": "a", "input_toks": 20, "output_toks": 20, "arrival_time": 1767225600.0, "queued_ts": 500.0,)"
         R"( "scheduled_ts": 500.0, "first_token_ts": 500.01, "last_token_ts": 500.2})"
         "\n"
      << R"({"request_id": "b", "input_toks": 20, "output_toks": 5, "arrival_time": 1767225600.015, "queued_ts": 500.02,)"
         R"( "scheduled_ts": 500.2, "first_token_ts": 500.21, "last_token_ts": 500.25})"
         "\n";
  std::ofstream(base / "run" / "timeseries.csv") << "t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct\n"
                                                     "0.025,0,0,1,0,0\n0.035,0,0,1,1,0\n";
  for (const char* mode : {"off", "on"}) {
    const std::string per_tick = (base / (std::string("ticks-") + mode + ".csv")).string();
    const auto r = test::run_cli({"validate", (base / "run").string(), "--kv-budget", "1GB", "--cost",
                                  "constant:step=10ms,prefill-token=0ps", "--async-scheduling", mode, "--per-tick",
                                  per_tick, "--json"});
    INFO(mode << ": " << r.err);
    REQUIRE(r.exit_code == 0);
    const Json doc = Json::parse(r.out);
    CHECK(doc["running_mae"].get<double>() == 0);
    CHECK(doc["waiting_mae"].get<double>() == 0);
    CHECK(test::slurp(per_tick) ==
          "t_s,measured_running,simulated_running,measured_waiting,simulated_waiting,measured_kv_usage_percent,"
          "simulated_kv_usage_percent\n"
          "0.025,1,1,0,0,,\n0.035,1,1,1,1,,\n");
  }
  std::filesystem::remove_all(base);
}

TEST_CASE("validate: a pool from vLLM's start-up rule that the replay fills, or that vLLM would refuse, is named") {
  // meta.json records no kv_cache, so the pool is vLLM's start-up rule's: RTX PRO 6000
  // Server Edition (102,641,958,912 bytes) x gpu_memory_utilization 0.16288 = 16,718,322,267
  // bytes, less Llama-3.1-8B's weights (16,094,076,928), activation peak (460,029,952),
  // buffers (8,519,680) and non-torch memory (104,857,600): 50,838,107 bytes, less the null
  // block (2 MiB): 48,740,955, whole blocks of 2 MiB: 23 blocks, 48,234,496 bytes. Four
  // requests of 100 + 50 tokens at 0 s need 10 blocks each, 40 in all: the replay preempts.
  // - the rule's pool decides every figure, and it is an estimate: named, with the way out;
  // - one sequence of max model len 131,072 (x 131,072 bytes = 17,179,869,184) does not fit
  //   it, so vLLM would not have started: named too, as for a pool the user gives.
  const auto base = test::scratch_dir("validate-startup-pool");
  std::filesystem::create_directories(base / "run");
  std::filesystem::create_directories(base / "workloads");
  std::ofstream(base / "run" / "meta.json") << R"({"model": "meta-llama/Llama-3.1-8B", "vllm_version": "0.19.0",
  "engine_kwargs": {"tensor_parallel_size": 1, "data_parallel_size": 1, "max_num_seqs": 128,
    "max_num_batched_tokens": 2048, "max_model_len": null, "gpu_memory_utilization": 0.16288},
  "hardware": {"device_name": "NVIDIA RTX PRO 6000 Blackwell Server Edition"},
  "dataset_path": "workloads/w.jsonl", "started_at": "2026-01-01T00:00:00Z", "tick_seconds": 1.0})";
  {
    std::ofstream workload(base / "workloads" / "w.jsonl");
    std::ofstream requests(base / "run" / "requests.jsonl");
    for (int i = 0; i < 4; ++i) {
      workload << R"({"input_toks": 100, "output_toks": 50, "arrival_time_ns": 0})" << "\n";
      requests << R"({"request_id": "r)" << i << R"(", "input_toks": 100, "output_toks": 50, "arrival_time": 1767225600.0,)"
               << R"( "queued_ts": 500.0, "scheduled_ts": 500.0, "first_token_ts": 500.1, "last_token_ts": 501.0})"
               << "\n";
    }
  }
  std::ofstream(base / "run" / "timeseries.csv") << "t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct\n"
                                                     "1.0,0,0,4,0,0\n";
  const auto r = test::run_cli({"validate", (base / "run").string(), "--cost", "constant:step=10ms,prefill-token=0ps",
                                "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const Json doc = Json::parse(r.out);
  CHECK(doc["preemptions"].get<std::int64_t>() > 0);
  const std::string warnings = doc["warnings"].dump();
  CHECK_THAT(warnings, Catch::Contains("the KV pool (48,234,496 bytes) comes from vLLM's start-up rule, as meta.json "
                                       "records no kv_cache, and the replay fills it"));
  CHECK_THAT(warnings, Catch::Contains("the KV pool replayed (48,234,496 bytes) cannot hold one sequence of max model "
                                       "len 131072 (17,179,869,184 bytes)"));
  // A pool meta.json records is the one vLLM ran with: neither warning (kv_cache of 23 blocks
  // and the null block).
  replace_in_file(base / "run" / "meta.json", R"("tick_seconds": 1.0})",
                  R"("tick_seconds": 1.0, "kv_cache": {"num_gpu_blocks": 24, "block_size": 16}})");
  const auto recorded = test::run_cli({"validate", (base / "run").string(), "--cost",
                                       "constant:step=10ms,prefill-token=0ps", "--json"});
  REQUIRE(recorded.exit_code == 0);
  const Json rec = Json::parse(recorded.out);
  CHECK(rec["preemptions"].get<std::int64_t>() > 0);
  CHECK_THAT(rec["warnings"].dump(), !Catch::Contains("start-up rule") && !Catch::Contains("cannot hold"));
  std::filesystem::remove_all(base);
}

TEST_CASE("validate: what vLLM resolved at start-up, as newer runs record it in meta.json, sizes the pool") {
  // Newer recorders add to meta.json what vLLM resolved after boot: "kv_cache" (its
  // cache_config: num_gpu_blocks, block_size, ...) and "hardware" (the GPU as CUDA names it,
  // its total memory), and a "resolved_config" validate does not need. num_gpu_blocks is the
  // pool vLLM allocated, null block included: 300 blocks of 16 tokens x 131,072 bytes a token
  // (Llama-3.1-8B in bf16) = 629,145,600 bytes, of which 299 blocks, 627,048,448 bytes, are
  // handed out. It wins over the kv_cache_memory_bytes it was derived from.
  const auto base = test::scratch_dir("validate-resolved");
  const auto dir = copy_tiny_run(base);
  std::filesystem::remove(dir / "peer_cluster_config.json");
  const std::string workload = kData + "/tiny/workloads/tiny.jsonl";
  const auto write_meta = [&](const std::string& kwargs, const std::string& top, int dp = 1) {
    std::ofstream(dir / "meta.json") << R"({"model": "meta-llama/Llama-3.1-8B", "vllm_version": "0.19.0",
  "engine_kwargs": {"tensor_parallel_size": 1, "data_parallel_size": )" + std::to_string(dp) + R"(, "max_num_seqs": 128,
    "max_num_batched_tokens": 4096, "max_model_len": 4096, "seed": 42, "skip_tokenizer_init": false,
    "compilation_config": {"pass_config": {"fuse_allreduce_rms": false}})" + kwargs + R"(},
  "dataset_path": "workloads/tiny.jsonl", "started_at": "2026-01-01T00:00:00Z", "tick_seconds": 0.25,
  "resolved_config": {"cache_config": {"block_size": 16, "cache_dtype": "auto"}, "model_config": "<ModelConfig>"})" +
                                           top + "}";
  };
  const std::string rtx4090 =
      R"(, "hardware": {"torch_version": "2.9.0", "device_count": 1, "device_name": "NVIDIA GeForce RTX 4090",
    "device_total_memory_bytes": 25000000000, "device_capability": "8.9"})";
  write_meta(R"(, "kv_cache_memory_bytes": 123456789)",
             R"(, "kv_cache": {"num_gpu_blocks": 300, "num_cpu_blocks": null, "block_size": 16,
    "gpu_memory_utilization": 0.9, "enable_prefix_caching": true, "kv_cache_memory_bytes": 123456789,
    "num_kv_tokens": 4800})" + rtx4090);
  auto r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  Json doc = Json::parse(r.out);
  CHECK(doc["kvsim"]["kv_budget_bytes"] == 627048448);
  CHECK_THAT(doc["kvsim"]["kv_budget"].get<std::string>(),
             Catch::Contains("kv_cache.num_gpu_blocks") && Catch::Contains("300 blocks of 16 tokens"));
  // No peer_cluster_config.json: the recorded device name finds the preset that times the steps.
  CHECK_THAT(doc["kvsim"]["cost_model"].get<std::string>(), Catch::Contains("RTX-4090"));
  // The run's timeseries has no preempted column, so none is claimed; with one (newer
  // recorders), the table and the JSON set its sum beside kvsim's count.
  CHECK(doc["preemptions_measured"].is_null());
  std::ofstream(dir / "timeseries.csv")
      << "t,prompt_throughput,prompt_compute_throughput,prompt_cached_throughput,gen_throughput,running,waiting,"
         "preempted,kv_cache_pct\n0.25,400.0,400.0,0.0,8.0,1,0,3,0.0\n0.75,80.0,80.0,0.0,12.0,1,0,0,0.0\n"
         "1.0,0.0,0.0,0.0,0.0,0,0,2,0.0\n";
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json"});
  REQUIRE(r.exit_code == 0);
  doc = Json::parse(r.out);
  CHECK(doc["preemptions_measured"] == 5);
  CHECK(doc["preemptions"] == 0);
  r = test::run_cli({"validate", dir.string(), "--workload", workload});
  CHECK_THAT(r.out, Catch::Contains("Preemptions                         5            0"));
  // The user's terms of a rule win over the recorded pool: --gpu-memory-utilization the
  // start-up rule's, --reserve replay's own.
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json", "--gpu-memory-utilization", "0.95"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(Json::parse(r.out)["kvsim"]["kv_budget"].get<std::string>(),
             Catch::Contains("start-up rule on RTX-4090: total 25,000,000,000 x 0.95"));
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json", "--reserve", "1GiB"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(Json::parse(r.out)["kvsim"]["kv_budget"].get<std::string>(), !Catch::Contains("num_gpu_blocks"));
  // Nested settings are named, not misread; skip_tokenizer_init changes nothing.
  CHECK(doc["unmodelled_settings"] == Json::array({R"(compilation_config={"pass_config":{"fuse_allreduce_rms":false}})"}));

  // Without kv_cache, vLLM's start-up rule from the device total CUDA reported (25,000,000,000
  // bytes, not the preset's), as `kvsim size --engine vllm` computes it for that total, less
  // the 2,097,152-byte null block.
  write_meta("", rtx4090);
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json"});
  REQUIRE(r.exit_code == 0);
  doc = Json::parse(r.out);
  CHECK_THAT(doc["kvsim"]["kv_budget"].get<std::string>(),
             Catch::Contains("start-up rule on RTX-4090: total 25,000,000,000 x 0.9") &&
                 Catch::Contains("hardware.device_total_memory_bytes"));
  const auto sized = test::run_cli({"size", "--model", "llama-3.1-8b", "--engine", "vllm", "--device", "RTX-4090",
                                    "--device-memory", "25000000000", "--max-num-seqs", "128",
                                    "--max-num-batched-tokens", "4096", "--max-model-len", "4096", "--json"});
  REQUIRE(sized.exit_code == 0);
  CHECK(doc["kvsim"]["kv_budget_bytes"] ==
        Json::parse(sized.out)["budget"]["kv_budget_bytes"].get<std::int64_t>() - 2097152);

  // peer_cluster_config.json's name for the card, as LLMServingSim's configs write it.
  write_meta("", "");
  std::ofstream(dir / "peer_cluster_config.json") << R"({"nodes": [{"instances": [{"hardware": "RTX4090"}]}]})";
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(Json::parse(r.out)["kvsim"]["kv_budget"].get<std::string>(), Catch::Contains("start-up rule on RTX-4090"));
  // And the other GPUs LLMServingSim's profiler names (A6000, RTX3090), by that name or by CUDA's.
  std::ofstream(dir / "peer_cluster_config.json") << R"({"nodes": [{"instances": [{"hardware": "A6000"}]}]})";
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(Json::parse(r.out)["kvsim"]["kv_budget"].get<std::string>(), Catch::Contains("start-up rule on RTX-A6000"));
  std::filesystem::remove(dir / "peer_cluster_config.json");
  write_meta("", R"(, "hardware": {"device_name": "NVIDIA GeForce RTX 3090"})");
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(Json::parse(r.out)["kvsim"]["kv_budget"].get<std::string>(), Catch::Contains("start-up rule on RTX-3090:"));

  // The block size vLLM ran with wins over the one asked for: 300 blocks of 32 tokens,
  // 1,258,291,200 bytes, less a 32-token null block of 4,194,304.
  write_meta(R"(, "block_size": 16)", R"(, "kv_cache": {"num_gpu_blocks": 300, "block_size": 32})" + rtx4090);
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json"});
  REQUIRE(r.exit_code == 0);
  doc = Json::parse(r.out);
  CHECK(doc["kvsim"]["allocator"] == "paged:block=32,prefix-caching=on");
  CHECK(doc["kvsim"]["kv_budget_bytes"] == 1254096896);
  // With data parallelism vLLM's front end records the engines' sum (vllm/v1/engine/utils.py:
  // "Sum values from all engines in DP case"): 600 over two engines is 300 each, as above.
  write_meta("", R"(, "kv_cache": {"num_gpu_blocks": 600, "block_size": 16})" + rtx4090, 2);
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json"});
  REQUIRE(r.exit_code == 0);
  doc = Json::parse(r.out);
  CHECK(doc["kvsim"]["replicas"] == 2);
  CHECK(doc["kvsim"]["kv_budget_bytes"] == 627048448);
  CHECK_THAT(doc["kvsim"]["kv_budget"].get<std::string>(), Catch::Contains("300 an engine"));
  // CUDA's names for the two RTX PRO 6000 cards are the two presets' product names: the
  // server card (1,597 GB/s) and the workstation card (1,792 GB/s).
  write_meta("", R"(, "hardware": {"device_name": "NVIDIA RTX PRO 6000 Blackwell Server Edition"})");
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(Json::parse(r.out)["kvsim"]["kv_budget"].get<std::string>(), Catch::Contains("start-up rule on RTX-PRO-6000:"));
  write_meta("", R"(, "hardware": {"device_name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"})");
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(Json::parse(r.out)["kvsim"]["kv_budget"].get<std::string>(), Catch::Contains("start-up rule on RTX-PRO-6000-WS:"));
  // A GPU kvsim has no preset for, with the pool recorded: the pool is replayed (the default
  // timing device, named in the cost line); without the pool, an error (below).
  write_meta("", R"(, "kv_cache": {"num_gpu_blocks": 300}, "hardware": {"device_name": "Example GPU 9000"})");
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json"});
  REQUIRE(r.exit_code == 0);
  doc = Json::parse(r.out);
  CHECK(doc["kvsim"]["kv_budget_bytes"] == 627048448);
  // ... and says on which device its steps are timed, not silently.
  const std::string untimed_gpu = "the run's GPU, \"Example GPU 9000\", is no kvsim device preset: the steps are "
                                  "timed on H100-80GB (give --timing-device, or --cost from kvsim calibrate)";
  CHECK(doc["warnings"] == Json::array({untimed_gpu}));
  CHECK_THAT(r.err, Catch::Contains(untimed_gpu));
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json", "--timing-device", "L4"});
  REQUIRE(r.exit_code == 0);
  CHECK(Json::parse(r.out)["warnings"].empty());
  // A recorded pool and no GPU named at all: the same warning, saying so.
  write_meta("", R"(, "kv_cache": {"num_gpu_blocks": 300})");
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK(Json::parse(r.out)["warnings"] ==
        Json::array({"the run names no GPU: the steps are timed on H100-80GB (give --timing-device, or --cost from "
                     "kvsim calibrate)"}));
  // The card CUDA named wins over the peer's family name: its "A100" says neither 40 nor 80 GB.
  write_meta("", R"(, "hardware": {"device_name": "NVIDIA A100-SXM4-40GB"})");
  std::ofstream(dir / "peer_cluster_config.json") << R"({"nodes": [{"instances": [{"hardware": "A100"}]}]})";
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(Json::parse(r.out)["kvsim"]["kv_budget"].get<std::string>(), Catch::Contains("start-up rule on A100-40GB:"));
  std::filesystem::remove(dir / "peer_cluster_config.json");

  // What cannot be a pool, or names no known GPU: an error naming the file and the field.
  write_meta("", R"(, "kv_cache": {"num_gpu_blocks": 1})" + rtx4090);
  r = test::run_cli({"validate", dir.string(), "--workload", workload});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("meta.json") && Catch::Contains("num_gpu_blocks"));
  write_meta("", R"(, "kv_cache": [])");
  r = test::run_cli({"validate", dir.string(), "--workload", workload});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("kv_cache") && Catch::Contains("object"));
  write_meta("", R"(, "hardware": {"device_name": "Example GPU 9000"})");
  r = test::run_cli({"validate", dir.string(), "--workload", workload});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("hardware.device_name") && Catch::Contains("--device-memory"));
  std::filesystem::remove_all(base);
}

TEST_CASE("validate: settings engine_kwargs leaves null or -1 are what vLLM resolved, and a request past the length "
          "is served up to it") {
  // LLMServingSim's recorder writes ten engine arguments; newer vLLMs' resolved_config holds
  // what the engine ran with. The tiny run: request 1 is 100 prompt + 3 output tokens,
  // request 2 is 20 + 5.
  const auto base = test::scratch_dir("validate-resolved-config");
  const auto dir = copy_tiny_run(base);
  std::filesystem::create_directories(base / "workloads");
  std::filesystem::copy(kData + "/tiny/workloads/tiny.jsonl", base / "workloads" / "tiny.jsonl");
  const auto write_meta = [&](const std::string& max_model_len, const std::string& resolved_model,
                              const std::string& dataset = "workloads/tiny.jsonl", int dp = 1) {
    std::ofstream(dir / "meta.json") << R"({"model": "meta-llama/Llama-3.1-8B", "vllm_version": "0.19.0",
  "engine_kwargs": {"tensor_parallel_size": null, "data_parallel_size": )" + std::to_string(dp) + R"(,
    "max_num_seqs": null, "max_num_batched_tokens": null, "max_model_len": )" + max_model_len + R"(},
  "dataset_path": ")" + dataset + R"(", "started_at": "2026-01-01T00:00:00Z", "tick_seconds": 0.25,
  "kv_cache": {"num_gpu_blocks": )" + std::to_string(300 * dp) + R"(, "block_size": 16},
  "hardware": {"device_name": "NVIDIA GeForce RTX 4090"},
  "resolved_config": {"parallel_config": {"tensor_parallel_size": 1},
    "scheduler_config": {"max_num_seqs": 64, "max_num_batched_tokens": 512, "async_scheduling": false},
    "model_config": {"enforce_eager": true)" + resolved_model + "}}}";
  };
  // max_model_len -1 (vLLM's "auto") and no resolved length: vLLM's _auto_fit_max_model_len
  // finds the longest sequence whose blocks fit the KV memory, capped at the model's own:
  // 300 blocks (the null block is memory too) x 16 tokens = 4,800 < 131,072. The scheduler's
  // limits are the resolved ones, and so are eager mode (no CUDA graphs) and synchronous
  // scheduling, which version 0.19's defaults would have turned on. Requests found in the
  // workloads folder above the run, although dataset_path names another place.
  write_meta("-1", "", "/home/bench/LLMServingSim/workloads/tiny.jsonl");
  auto r = test::run_cli({"validate", dir.string(), "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  Json doc = Json::parse(r.out);
  CHECK(doc["kvsim"]["max_running"] == 64);
  CHECK(doc["kvsim"]["max_batched_tokens"] == 512);
  CHECK(doc["kvsim"]["async_scheduling"] == false);
  CHECK(doc["kvsim"]["cuda_graph_max_tokens"] == 0);
  CHECK(doc["kvsim"]["max_model_len"] == 4800);
  CHECK(doc["kvsim"]["capped_at_max_model_len"] == 0);
  CHECK(doc["completed"] == 2);
  // A resolved length wins over -1. At 102 tokens request 1 (100 + 3) is longer: vLLM's
  // check_stop ends it at 102 tokens (2 generated, FINISHED_LENGTH_CAPPED) where an API server
  // would have refused it; request 2 is untouched. Both complete.
  write_meta("-1", R"(, "max_model_len": 102)");
  r = test::run_cli({"validate", dir.string(), "--json"});
  REQUIRE(r.exit_code == 0);
  doc = Json::parse(r.out);
  CHECK(doc["kvsim"]["max_model_len"] == 102);
  CHECK(doc["kvsim"]["capped_at_max_model_len"] == 1);
  CHECK(doc["completed"] == 2);
  // The run generated 2 tokens of request 1, whatever output_toks says (3, as LLMServingSim's
  // recorder writes the workload's): its measured TPOT is (500.3 - 500.1) / (2 - 1) = 0.2 s,
  // not 0.1; request 2's is 0.4 / 4 = 0.1 s; their mean 0.15 s.
  CHECK(doc["tpot"]["measured"]["mean_s"].get<double>() == Approx(0.15).epsilon(1e-9));
  // Replayed with a longer length (a what-if), the workload still matches the run's record.
  r = test::run_cli({"validate", dir.string(), "--json", "--max-model-len", "4096"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(Json::parse(r.out)["kvsim"]["capped_at_max_model_len"] == 0);
  r = test::run_cli({"validate", dir.string()});
  CHECK_THAT(r.out, Catch::Contains("1 requests longer than max model len served up to it"));
  // With two data-parallel engines the count is their sum (request 1 goes to one of them).
  write_meta("-1", R"(, "max_model_len": 102)", "workloads/tiny.jsonl", 2);
  r = test::run_cli({"validate", dir.string(), "--json"});
  REQUIRE(r.exit_code == 0);
  doc = Json::parse(r.out);
  CHECK(doc["kvsim"]["replicas"] == 2);
  CHECK(doc["kvsim"]["capped_at_max_model_len"] == 1);
  CHECK(doc["completed"] == 2);
  // A prompt of the whole length is still refused (kvsim would hold a position past it), and
  // the warning says so, in the JSON and on standard error.
  write_meta("100", "");
  r = test::run_cli({"validate", dir.string(), "--json"});
  REQUIRE(r.exit_code == 0);
  doc = Json::parse(r.out);
  CHECK(doc["completed"] == 1);
  const std::string refused = "1 of 2 requests did not complete in the simulation (1 refused: a prompt not shorter "
                              "than max model len 100): the figures are over the rest only";
  CHECK(doc["warnings"] == Json::array({refused}));
  CHECK_THAT(r.err, Catch::Contains("kvsim validate: warning: " + refused));
  // The run itself served request 1's prompt of the whole length one token, as vLLM does: it
  // has no measured TPOT; request 2's is 0.4 / 4 = 0.1 s.
  CHECK(doc["tpot"]["measured"]["count"] == 1);
  CHECK(doc["tpot"]["measured"]["mean_s"].get<double>() == Approx(0.1).epsilon(1e-9));
  // A version that is not one (a recorder writes "unknown" when it cannot tell) is an error
  // naming the option that gives it; given, the run replays.
  std::ofstream(dir / "meta.json") << R"({"model": "meta-llama/Llama-3.1-8B", "vllm_version": "unknown",
  "engine_kwargs": {"tensor_parallel_size": 1, "data_parallel_size": 1, "max_num_seqs": 8,
    "max_num_batched_tokens": 512, "max_model_len": 4096}, "dataset_path": "workloads/tiny.jsonl",
  "tick_seconds": 0.25, "kv_cache": {"num_gpu_blocks": 300}})";
  r = test::run_cli({"validate", dir.string()});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("meta.json: vllm_version: \"unknown\" is not a version such as \"0.19.0\"; give "
                                    "the version the run used with --vllm-version"));
  r = test::run_cli({"validate", dir.string(), "--vllm-version", "0.19.0", "--json"});
  CHECK(r.exit_code == 0);
  CHECK(Json::parse(r.out)["kvsim"]["async_scheduling"] == true);
  // A setting neither object gives is an error naming both places.
  std::ofstream(dir / "meta.json") << R"({"model": "meta-llama/Llama-3.1-8B", "vllm_version": "0.19.0",
  "engine_kwargs": {"tensor_parallel_size": 1, "data_parallel_size": 1, "max_num_seqs": null,
    "max_num_batched_tokens": 512}, "dataset_path": "workloads/tiny.jsonl", "tick_seconds": 0.25})";
  r = test::run_cli({"validate", dir.string()});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("meta.json: engine_kwargs.max_num_seqs: missing or null, and no "
                                    "resolved_config.scheduler_config.max_num_seqs"));
  std::filesystem::remove_all(base);
}

TEST_CASE("validate: a recorded block count on a model with sliding-window layers is vLLM's blocks, a page of a group") {
  // Gemma-3-27B: 62 layers, 10 of full attention and 52 of a 1,024-token window, 16 KV heads of
  // 128 at 2 bytes, K and V: 8,192 bytes a layer a position. vLLM's hybrid allocator puts the
  // layers in KV-cache groups of 10 (the full layers' count; the windowed ones fill six groups,
  // padded), and one block id is a 16-token page in every layer of a group:
  // 16 x 8,192 x 10 = 1,310,720 bytes (`kvsim size --model gemma-3-27b` says so).
  // 300 recorded blocks are then 393,216,000 bytes, less the null block: 391,905,280, not
  // 300 blocks of 16 tokens across all 62 layers (2.4 GB).
  const auto base = test::scratch_dir("validate-hybrid-blocks");
  const auto dir = copy_tiny_run(base);
  const std::string workload = kData + "/tiny/workloads/tiny.jsonl";
  std::ofstream(dir / "meta.json") << R"({"model": "meta-llama/Llama-3.1-8B", "vllm_version": "0.19.0",
  "engine_kwargs": {"tensor_parallel_size": 1, "data_parallel_size": 1, "max_num_seqs": 128,
    "max_num_batched_tokens": 2048, "max_model_len": 4096},
  "dataset_path": "workloads/tiny.jsonl", "started_at": "2026-01-01T00:00:00Z", "tick_seconds": 0.25,
  "kv_cache": {"num_gpu_blocks": 300, "block_size": 16}})";
  const auto sized = test::run_cli({"size", "--model", "gemma-3-27b", "--kv-budget", "1GiB", "--json"});
  REQUIRE(sized.exit_code == 0);
  CHECK(Json::parse(sized.out)["paged"]["block_bytes"] == 1310720);
  const auto r = test::run_cli({"validate", dir.string(), "--workload", workload, "--model", "gemma-3-27b", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(Json::parse(r.out)["kvsim"]["kv_budget_bytes"] == 391905280);
  std::filesystem::remove_all(base);
}

TEST_CASE("validate: a model with sliding windows is replayed on vLLM v1's hybrid manager, which frees what a "
          "window leaves, unless the run turned it off") {
  // vLLM v1 hands a sliding-window layer's blocks out through SlidingWindowManager, which
  // frees the blocks its window has passed (remove_skipped_blocks): replay's sliding-window
  // allocator. disable_hybrid_kv_cache_manager turns a model with both kinds of layers into
  // full attention (unify_hybrid_kv_cache_specs): paged. A model whose layers all slide has
  // one kind of layer, so its window manager stays. A full-attention model is paged either way.
  const auto base = test::scratch_dir("validate-hybrid-manager");
  const auto dir = copy_tiny_run(base);
  const std::string workload = kData + "/tiny/workloads/tiny.jsonl";
  std::int64_t budget = 0;  // the last replay's KV pool, bytes
  const auto allocator = [&](const std::string& model, const std::string& disable, const std::string& preset = "",
                             const std::string& section = "scheduler_config", const std::string& engine = "",
                             const std::string& version = "0.19.0", bool caching = false) {
    std::ofstream(dir / "meta.json") << R"({"model": ")" + model + R"(", "vllm_version": ")" + version + R"(",
  "engine_kwargs": {"tensor_parallel_size": 1, "data_parallel_size": 1, "max_num_seqs": 128,
    "max_num_batched_tokens": 2048, "max_model_len": 4096)" + (caching ? "" : R"(, "enable_prefix_caching": false)") +
                                            engine + R"(},
  "dataset_path": "workloads/tiny.jsonl", "started_at": "2026-01-01T00:00:00Z", "tick_seconds": 0.25,
  "kv_cache": {"num_gpu_blocks": 300, "block_size": 16},
  "resolved_config": {")" + section + R"(": {)" + disable + "}}}";
    std::vector<std::string> args{"validate", dir.string(), "--workload", workload, "--json"};
    if (!preset.empty()) args.insert(args.end(), {"--model", preset});
    const auto r = test::run_cli(args);
    INFO(model << " " << disable << " " << preset << "\n" << r.err);
    REQUIRE(r.exit_code == 0);
    const Json doc = Json::parse(r.out);
    budget = doc["kvsim"]["kv_budget_bytes"].get<std::int64_t>();
    return doc["kvsim"]["allocator"].get<std::string>();
  };
  const std::string off = R"("disable_hybrid_kv_cache_manager": true)";
  const std::string on = R"("disable_hybrid_kv_cache_manager": false)";
  // Every layer slides (4,096 and 2,047 tokens).
  CHECK(allocator("mistralai/Mistral-7B-v0.1", "") == "sliding-window:block=16");
  CHECK(allocator("mistralai/Mistral-7B-v0.1", off) == "sliding-window:block=16");
  CHECK(allocator("microsoft/Phi-mini-MoE-instruct", on) == "sliding-window:block=16");
  // Both kinds (Gemma 3: 10 full layers, 52 of a 1,024-token window).
  CHECK(allocator("meta-llama/Llama-3.1-8B", "", "gemma-3-27b") == "sliding-window:block=16");
  CHECK(allocator("meta-llama/Llama-3.1-8B", on, "gemma-3-27b") == "sliding-window:block=16");
  CHECK(allocator("meta-llama/Llama-3.1-8B", off, "gemma-3-27b") == "paged:block=16");
  // Its pool then is one group of all 62 layers: a block id is 16 positions of 507,904 bytes
  // (`kvsim models`), 8,126,464 bytes; 300 recorded blocks less the null block are
  // 299 x 8,126,464 = 2,429,812,736 bytes. With the hybrid manager a block id is a page of a
  // group of 10 layers (the test above): 391,905,280.
  CHECK(budget == 2429812736);
  CHECK(allocator("meta-llama/Llama-3.1-8B", on, "gemma-3-27b") == "sliding-window:block=16");
  CHECK(budget == 391905280);
  // Full attention only.
  CHECK(allocator("meta-llama/Llama-3.1-8B", "") == "paged:block=16");
  CHECK(allocator("meta-llama/Llama-3.1-8B", on) == "paged:block=16");
  // disable_sliding_window serves every window as full attention.
  CHECK(allocator("mistralai/Mistral-7B-v0.1", R"("disable_sliding_window": true)", "", "model_config") ==
        "paged:block=16");
  // KV events (or a KV connector) turn the hybrid manager off when nothing says otherwise; a
  // version before 0.10 has none for a mixed model.
  CHECK(allocator("meta-llama/Llama-3.1-8B", "", "gemma-3-27b", "scheduler_config", R"(, "kv_events_config": {})") ==
        "paged:block=16");
  CHECK(allocator("meta-llama/Llama-3.1-8B", "", "gemma-3-27b", "scheduler_config", "", "0.9.0") == "paged:block=16");
  CHECK(allocator("mistralai/Mistral-7B-v0.1", "", "", "scheduler_config", "", "0.9.0") == "sliding-window:block=16");
  // vLLM's default, prefix caching on, is kept on either allocator.
  CHECK(allocator("microsoft/Phi-mini-MoE-instruct", "", "", "scheduler_config", "", "0.19.0", true) ==
        "sliding-window:block=16,prefix-caching=on");
  std::filesystem::remove_all(base);
}

TEST_CASE("validate: KV usage per tick as vLLM counts it, the pool less its null block, cached blocks free") {
  // vLLM's kv_cache_usage is 1 - free blocks / (num_gpu_blocks - 1) (vllm/v1/core/block_pool.py
  // get_usage), a block cached but unreferenced counting as free. meta.json's
  // kv_cache.num_gpu_blocks 11 leaves 10 blocks of 16 tokens to hand out. With 10 ms steps:
  //   bench-0 (100 prompt tokens, 3 output) holds ceil(100 / 16) = 7 blocks from 0 to 30 ms
  //   (its context never passes 102 tokens, 7 blocks' 112), then they stay cached, free;
  //   bench-1 (20 prompt tokens, 5 output) holds 2 blocks from 500 to 550 ms (24 tokens at most).
  // Ticks at 25 ms (70%), 525 ms (20%, bench-0's cached blocks free) and 1 s (0%) against a
  // recorded 75, 20 and 0: MAE (5 + 0 + 0) / 3 = 5/3 percentage points.
  const auto base = test::scratch_dir("validate-kv-usage");
  const auto dir = copy_tiny_run(base);
  std::ofstream(dir / "meta.json") << R"({"model": "meta-llama/Llama-3.1-8B", "vllm_version": "0.19.0",
  "engine_kwargs": {"tensor_parallel_size": 1, "data_parallel_size": 1, "max_num_seqs": 128,
    "max_num_batched_tokens": 2048, "max_model_len": null},
  "kv_cache": {"num_gpu_blocks": 11, "block_size": 16},
  "dataset_path": "workloads/tiny.jsonl", "started_at": "2026-01-01T00:00:00Z", "tick_seconds": 0.25})";
  std::ofstream(dir / "timeseries.csv") << "t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct\n"
                                           "0.025,0,0,1,0,75.0\n0.525,0,0,1,0,20.0\n1.0,0,0,0,0,0.0\n";
  const auto r = test::run_cli({"validate", dir.string(), "--workload", kData + "/tiny/workloads/tiny.jsonl", "--cost",
                                "constant:step=10ms,prefill-token=0ps", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const Json doc = Json::parse(r.out);
  CHECK(doc["kvsim"]["kv_budget_bytes"] == 10 * 2097152);
  CHECK(doc["running_mae"].get<double>() == Approx(0.0));
  CHECK(doc["kv_usage_mae_percent"].get<double>() == Approx(5.0 / 3.0));
  const auto table = test::run_cli({"validate", dir.string(), "--workload", kData + "/tiny/workloads/tiny.jsonl",
                                    "--cost", "constant:step=10ms,prefill-token=0ps"});
  CHECK_THAT(table.out, Catch::Contains("KV usage, MAE per tick    1.67 percentage points"));
  // --per-tick: the three ticks side by side, the figures the MAEs above are the means of.
  const std::string per_tick = (base / "ticks.csv").string();
  const auto written = test::run_cli({"validate", dir.string(), "--workload", kData + "/tiny/workloads/tiny.jsonl",
                                      "--cost", "constant:step=10ms,prefill-token=0ps", "--per-tick", per_tick});
  REQUIRE(written.exit_code == 0);
  CHECK(test::slurp(per_tick) ==
        "t_s,measured_running,simulated_running,measured_waiting,simulated_waiting,measured_kv_usage_percent,"
        "simulated_kv_usage_percent\n"
        "0.025,1,1,0,0,75,70\n0.525,1,1,0,0,20,20\n1,0,0,0,0,0,0\n");
  // Never over the run it reads: the measured timeseries stays as it was.
  const std::string series = test::slurp(dir / "timeseries.csv");
  const auto over = test::run_cli({"validate", dir.string(), "--workload", kData + "/tiny/workloads/tiny.jsonl",
                                   "--cost", "constant:step=10ms,prefill-token=0ps", "--per-tick",
                                   (dir / "timeseries.csv").string()});
  CHECK(over.exit_code != 0);
  CHECK_THAT(over.err, Catch::Contains("timeseries.csv") && Catch::Contains("same file as the input"));
  CHECK(test::slurp(dir / "timeseries.csv") == series);
  std::filesystem::remove_all(base);
}

TEST_CASE("validate and calibrate: outputs never over the run or each other, '-' in place of the table, no idle device") {
  const auto base = test::scratch_dir("validate-outputs");
  const auto dir = copy_tiny_run(base);
  std::filesystem::create_directories(base / "workloads");
  std::filesystem::copy_file(kData + "/tiny/workloads/tiny.jsonl", base / "workloads" / "tiny.jsonl",
                             std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir / "peer_cluster_config.json") << R"({"nodes": [{"instances": [{"hardware": "RTXPRO6000"}]}]})";
  const std::vector<std::string> run{"validate", dir.string(), "--kv-budget", "1GB", "--cost",
                                     "constant:step=10ms,prefill-token=0ps"};
  const auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = run;
    args.insert(args.end(), extra.begin(), extra.end());
    return test::run_cli(args);
  };
  // peer_cluster_config.json is read too: never written over.
  const std::string peer = test::slurp(dir / "peer_cluster_config.json");
  auto r = with({"--per-tick", (dir / "peer_cluster_config.json").string()});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--per-tick") && Catch::Contains("same file as the input") &&
                        Catch::Contains("Usage: kvsim validate"));
  CHECK(test::slurp(dir / "peer_cluster_config.json") == peer);
  // Two outputs to one file, and two to standard output.
  r = with({"--per-request", (base / "out.csv").string(), "--per-tick", (base / "out.csv").string()});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--per-request and --per-tick both write"));
  CHECK_FALSE(std::filesystem::exists(base / "out.csv"));
  r = with({"--per-request", "-", "--per-tick", "-"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("both write standard output"));
  r = with({"--json", "--per-tick", "-"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--json and --per-tick both write standard output"));
  // '-' takes standard output in place of the table: the tiny run's three ticks and nothing else.
  r = with({"--per-tick", "-"});
  REQUIRE(r.exit_code == 0);
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 4);
  CHECK_THAT(r.out, Catch::StartsWith("t_s,measured_running,"));
  // A device to time a roofline that a named cost, or calibrate's fit, never uses.
  r = with({"--timing-device", "H100-80GB"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--timing-device") && Catch::Contains("would have no effect"));
  r = test::run_cli({"calibrate", dir.string(), "--timing-device", "H100-80GB"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--timing-device") && Catch::Contains("would have no effect"));
  std::filesystem::remove_all(base);
}

TEST_CASE("validate: a request vLLM returned no metrics for is replayed but in no measured figure") {
  // LLMServingSim's recorder writes every timestamp null when vLLM gave a request no metrics.
  // tiny's two requests plus bench-2 (20 prompt tokens, 2 output, at 0.7 s), untimed. With
  // 10 ms steps bench-2 runs from 0.70 to 0.72 s in the replay; the figures stay those of the
  // other two (measured_run_test.cc, and "measured against simulated" above): TTFT 75 ms
  // measured, 10 ms simulated; makespan 0.95 s and 0.55 s (not bench-2's 0.72 s). The clocks'
  // mapping is over the two timed requests, so the ticks land as before: running MAE 2/3.
  const auto base = test::scratch_dir("validate-untimed");
  copy_tiny_run(base);
  std::filesystem::create_directories(base / "workloads");
  std::filesystem::copy(kData + "/tiny/workloads/tiny.jsonl", base / "workloads" / "tiny.jsonl");
  std::ofstream(base / "run" / "requests.jsonl", std::ios::app)
      << R"({"request_id": "bench-2", "input_toks": 20, "output_toks": 2, "arrival_time": null, "queued_ts": null, "scheduled_ts": null, "first_token_ts": null, "last_token_ts": null})" "\n";
  std::ofstream(base / "workloads" / "tiny.jsonl", std::ios::app)
      << R"({"input_toks": 20, "output_toks": 2, "arrival_time_ns": 700000000})" "\n";
  const auto r = test::run_cli({"validate", (base / "run").string(), "--kv-budget", "1GB", "--cost",
                                "constant:step=10ms,prefill-token=0ps", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const Json doc = Json::parse(r.out);
  CHECK(doc["requests"] == 3);
  CHECK(doc["completed"] == 3);
  CHECK(doc["untimed_requests"] == 1);
  CHECK(doc["ttft"]["measured"]["count"] == 2);
  CHECK(doc["ttft"]["simulated"]["count"] == 2);
  CHECK(doc["ttft"]["measured"]["mean_s"].get<double>() == Approx(0.075));
  CHECK(doc["ttft"]["simulated"]["mean_s"].get<double>() == Approx(0.010));
  CHECK(doc["makespan_s"]["measured"].get<double>() == Approx(0.95));
  CHECK(doc["makespan_s"]["simulated"].get<double>() == Approx(0.55));
  CHECK(doc["running_mae"].get<double>() == Approx(2.0 / 3.0));
  const std::string per_request = (base / "per-request.csv").string();
  const auto table = test::run_cli({"validate", (base / "run").string(), "--kv-budget", "17GiB", "--cost",
                                    "constant:step=10ms,prefill-token=0ps", "--per-request", per_request});
  CHECK_THAT(table.out, Catch::Contains("1 of 3 requests carry no timestamps") && !Catch::Contains("WARNING"));
  // --per-request: bench-2's measured cells are empty; simulated, taken in at 0.70 s (the
  // engine idle), first token 0.71 s, last 0.72 s: TTFT 10 ms, TPOT 10 ms, latency 20 ms.
  CHECK_THAT(test::slurp(per_request),
             Catch::Contains(",bench-2,3,0.700000000,") &&
                 Catch::EndsWith(",completed,0,0.700000000,,0.010000000,,0.010000000,,0.020000000\n"));
  std::filesystem::remove_all(base);
}

TEST_CASE("validate: vLLM's admission rules follow the run's version and its resolved scheduler_config") {
  // vLLM v1 keeps no watermark (0.19's configs have none; later ones default it to 0), v0's is
  // 0.01. scheduler_reserve_full_isl (vllm#37307) is on by default in 0.19; engine_kwargs, else
  // the resolved scheduler_config, say otherwise. The policy line names what was replayed.
  const auto base = test::scratch_dir("validate-admission");
  const auto dir = copy_tiny_run(base);
  const std::string workload = kData + "/tiny/workloads/tiny.jsonl";
  const auto policy_line = [&](const std::string& version, const std::string& kwargs, const std::string& top) {
    std::ofstream(dir / "meta.json") << R"({"model": "meta-llama/Llama-3.1-8B", "vllm_version": ")" + version + R"(",
  "engine_kwargs": {"tensor_parallel_size": 1, "data_parallel_size": 1, "max_num_seqs": 128,
    "max_num_batched_tokens": 4096, "max_model_len": 4096)" + kwargs + R"(},
  "dataset_path": "workloads/tiny.jsonl", "started_at": "2026-01-01T00:00:00Z", "tick_seconds": 0.25)" + top + "}";
    const auto r = test::run_cli({"validate", dir.string(), "--workload", workload, "--kv-budget", "1GiB"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const auto at = r.out.find("policy ");
    REQUIRE(at != std::string::npos);
    return r.out.substr(at, r.out.find(')', at) + 1 - at);
  };
  CHECK(policy_line("0.19.0", "", "") == "policy vllm (recompute, whole sequence must fit, watermark 0)");
  CHECK(policy_line("0.19.0", "", R"(, "resolved_config": {"scheduler_config": {"scheduler_reserve_full_isl": false}})") ==
        "policy vllm (recompute, watermark 0)");
  CHECK(policy_line("0.19.0", R"(, "scheduler_reserve_full_isl": false)",
                    R"(, "resolved_config": {"scheduler_config": {"scheduler_reserve_full_isl": true}})") ==
        "policy vllm (recompute, watermark 0)");
  CHECK(policy_line("0.11.0", "", "") == "policy vllm (recompute, watermark 0)");
  CHECK(policy_line("0.7.3", "", "") == "policy vllm (recompute)");
  CHECK(policy_line("0.7.3", R"(, "scheduler_reserve_full_isl": true)", "") == "policy vllm (recompute, whole sequence must fit)");
  // Without chunked prefill the check cannot act (replay refuses it given by hand): a run that
  // records both is still replayed, under the version's default.
  CHECK(policy_line("0.19.0", R"(, "scheduler_reserve_full_isl": true, "enable_chunked_prefill": false)", "") ==
        "policy vllm (recompute, whole sequence must fit, watermark 0)");
  // Given on the command line, the user's choice wins.
  std::ofstream(dir / "meta.json") << R"({"model": "meta-llama/Llama-3.1-8B", "vllm_version": "0.19.0",
  "engine_kwargs": {"tensor_parallel_size": 1, "data_parallel_size": 1, "max_num_seqs": 128,
    "max_num_batched_tokens": 4096, "max_model_len": 4096},
  "dataset_path": "workloads/tiny.jsonl", "started_at": "2026-01-01T00:00:00Z", "tick_seconds": 0.25})";
  const auto r = test::run_cli({"validate", dir.string(), "--workload", workload, "--kv-budget", "1GiB",
                                "--reserve-full-isl", "off", "--watermark", "0.02"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("policy vllm (recompute, watermark 0.02)"));
  // The user's --no-chunked-prefill beside a run that records the check: the run's setting is
  // left unapplied, as when the run itself records chunked prefill off (it was refused, and
  // blamed on meta.json).
  std::ofstream(dir / "meta.json") << R"({"model": "meta-llama/Llama-3.1-8B", "vllm_version": "0.19.0",
  "engine_kwargs": {"tensor_parallel_size": 1, "data_parallel_size": 1, "max_num_seqs": 128,
    "max_num_batched_tokens": 4096, "max_model_len": 4096},
  "dataset_path": "workloads/tiny.jsonl", "started_at": "2026-01-01T00:00:00Z", "tick_seconds": 0.25,
  "resolved_config": {"scheduler_config": {"scheduler_reserve_full_isl": true}}})";
  const auto unchunked = test::run_cli({"validate", dir.string(), "--workload", workload, "--kv-budget", "1GiB",
                                        "--no-chunked-prefill"});
  INFO(unchunked.err);
  REQUIRE(unchunked.exit_code == 0);
  CHECK_THAT(unchunked.out, Catch::Contains("policy vllm (recompute, whole sequence must fit, watermark 0)"));
  std::filesystem::remove_all(base);
}

TEST_CASE("validate: another run's workload of the same size is refused, request by request") {
  // tiny's workload has prompts of 100 and 20 tokens; requests.jsonl's second says 21. (The
  // check sits in the replay calibrate shares; tiny is too short for calibrate to reach it.)
  const auto base = test::scratch_dir("validate-wrong-workload");
  const auto dir = copy_tiny_run(base);
  std::ifstream in(dir / "requests.jsonl");
  std::string first, second;
  std::getline(in, first);
  std::getline(in, second);
  in.close();
  const auto at = second.find(R"("input_toks": 20)");
  REQUIRE(at != std::string::npos);
  second.replace(at, 16, R"("input_toks": 21)");
  std::ofstream(dir / "requests.jsonl") << first << "\n" << second << "\n";
  const std::string workload = kData + "/tiny/workloads/tiny.jsonl";
  const auto r = test::run_cli({"validate", dir.string(), "--workload", workload, "--kv-budget", "1GiB"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("requests.jsonl:2: input_toks: 21 prompt tokens, but request 2 of the workload") &&
                        Catch::Contains("has 20: not this run's workload"));
  // The same prompts, and the second request recorded with 6 output tokens where the
  // workload asks for 5 (no max_model_len cuts it): its TPOT would be compared with a replay
  // of another length.
  second.replace(at, 16, R"("input_toks": 20)");
  const auto out_at = second.find(R"("output_toks": 5)");
  REQUIRE(out_at != std::string::npos);
  second.replace(out_at, 16, R"("output_toks": 6)");
  std::ofstream(dir / "requests.jsonl") << first << "\n" << second << "\n";
  const auto o = test::run_cli({"validate", dir.string(), "--workload", workload, "--kv-budget", "1GiB"});
  CHECK(o.exit_code == 1);
  CHECK_THAT(o.err, Catch::Contains("requests.jsonl:2: output_toks: 6 output tokens, but request 2 of the workload") &&
                        Catch::Contains("has 5: not this run's workload"));
  std::filesystem::remove_all(base);
}

TEST_CASE("validate: a key given twice in meta.json or in a line of requests.jsonl is refused") {
  // A JSON reader keeps the last of two equal keys: "max_num_seqs": 128, "max_num_seqs": 4
  // would replay with 4 running at most, and say nothing.
  const auto base = test::scratch_dir("validate-duplicate-keys");
  const auto dir = copy_tiny_run(base);
  const std::string workload = kData + "/tiny/workloads/tiny.jsonl";
  replace_in_file(dir / "meta.json", R"("max_num_seqs": 128,)", R"("max_num_seqs": 4, "max_num_seqs": 128,)");
  auto r = test::run_cli({"validate", dir.string(), "--workload", workload, "--kv-budget", "1GiB"});
  CHECK(r.exit_code == 1);
  CHECK(r.err == "kvsim: error: " + (dir / "meta.json").string() +
                     ": engine_kwargs.max_num_seqs: given twice in one object (a JSON reader keeps one of them "
                     "silently, so kvsim refuses to choose)\n");
  std::filesystem::copy_file(kData + "/tiny/run/meta.json", dir / "meta.json",
                             std::filesystem::copy_options::overwrite_existing);
  replace_in_file(dir / "requests.jsonl", R"({"request_id": "bench-1",)",
                  R"({"output_toks": 9, "request_id": "bench-1",)");
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--kv-budget", "1GiB"});
  CHECK(r.exit_code == 1);
  CHECK(r.err.find((dir / "requests.jsonl").string() + ":2: output_toks: given twice in one object") !=
        std::string::npos);
  std::filesystem::remove_all(base);
}

TEST_CASE("validate: timestamps out of order are named by the stamp that comes too early") {
  // tiny's second request: first token at 500.55 s, last put back to 500.5 s, 0.05 s before.
  const auto base = test::scratch_dir("validate-stamp-order");
  const auto dir = copy_tiny_run(base);
  replace_in_file(dir / "requests.jsonl", R"("last_token_ts": 500.95)", R"("last_token_ts": 500.5)");
  const auto r = test::run_cli({"validate", dir.string(), "--workload", kData + "/tiny/workloads/tiny.jsonl"});
  CHECK(r.exit_code == 1);
  CHECK(r.err == "kvsim: error: " + (dir / "requests.jsonl").string() +
                     ":2: last_token_ts: 500.5 comes before first_token_ts (0.05 s earlier): expected queued_ts <= "
                     "scheduled_ts <= first_token_ts <= last_token_ts\n");
  std::filesystem::remove_all(base);
}

TEST_CASE("validate: against a measured 0 the difference is n/a (null), not +0.0%") {
  // tiny's requests with their first tokens at their queueing instants: a measured TTFT of 0
  // at every percentile, against a simulated one that is not.
  const auto base = test::scratch_dir("validate-zero-ttft");
  const auto dir = copy_tiny_run(base);
  std::ofstream(dir / "requests.jsonl")
      << R"({"request_id": "bench-0", "input_toks": 100, "output_toks": 3, "arrival_time": 1767225600.0, )"
         R"("queued_ts": 500.0, "scheduled_ts": 500.0, "first_token_ts": 500.0, "last_token_ts": 500.3})" "\n"
      << R"({"request_id": "bench-1", "input_toks": 20, "output_toks": 5, "arrival_time": 1767225600.5, )"
         R"("queued_ts": 500.5, "scheduled_ts": 500.5, "first_token_ts": 500.5, "last_token_ts": 500.95})" "\n";
  const std::string workload = kData + "/tiny/workloads/tiny.jsonl";
  const auto t = test::run_cli({"validate", dir.string(), "--workload", workload, "--kv-budget", "1GiB"});
  REQUIRE(t.exit_code == 0);
  const auto at = t.out.find("TTFT Mean (ms)");
  REQUIRE(at != std::string::npos);
  const std::string row = t.out.substr(at, t.out.find('\n', at) - at);
  CHECK(row.rfind("n/a") == row.size() - 3);
  CHECK(row.find("0.0") != std::string::npos);
  const auto j = test::run_cli({"validate", dir.string(), "--workload", workload, "--kv-budget", "1GiB", "--json"});
  REQUIRE(j.exit_code == 0);
  const auto doc = nlohmann::json::parse(j.out);
  CHECK(doc["ttft"]["measured"]["mean_s"] == 0.0);
  CHECK(doc["ttft"]["diff_percent"]["mean"].is_null());
  CHECK(doc["ttft"]["diff_percent"]["p99"].is_null());
  CHECK(doc["tpot"]["diff_percent"]["mean"].is_number());
  std::filesystem::remove_all(base);
}

TEST_CASE("validate and calibrate: a workload from a FIFO or standard input is refused, as they read it more than once") {
  // Nobody writes the FIFO: the refusal comes before any read, so nothing waits on it.
  const auto base = test::scratch_dir("validate-fifo-workload");
  const auto dir = copy_tiny_run(base);
  const std::string fifo = (base / "workload.fifo").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (const std::string command : {"validate", "calibrate"}) {
    for (const std::string& workload : {fifo, std::string("-")}) {
      const auto r = test::run_cli({command, dir.string(), "--workload", workload}, 20);
      CHECK(r.exit_code == 1);
      CHECK(r.err == "kvsim: error: " + workload +
                         ": a workload is read more than once (replayed, and checked against the run): give a regular "
                         "file, not a pipe, a FIFO or standard input\n");
    }
  }
  std::filesystem::remove_all(base);
}

TEST_CASE("validate: a workload longer than the run is replayed to its first rows, as the recorder's cap takes them") {
  // LLMServingSim's bench/core/runner.py --num-reqs N replays the dataset's first N rows and
  // records meta.json's dataset_path unchanged. tiny's run has 2 requests (prompts 100 and
  // 20); its workload gains a third row, a 50-token prompt at 1 s, which the run never saw.
  const auto base = test::scratch_dir("validate-capped-workload");
  const auto dir = copy_tiny_run(base);
  std::filesystem::create_directories(base / "workloads");
  {
    std::ifstream in(kData + "/tiny/workloads/tiny.jsonl");
    std::ofstream out(base / "workloads" / "tiny.jsonl");
    out << in.rdbuf();
    out << R"({"input_toks": 50, "output_toks": 2, "arrival_time_ns": 1000000000})" "\n";
  }
  auto r = test::run_cli({"validate", dir.string(), "--kv-budget", "1GiB", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(Json::parse(r.out)["requests"] == 2);
  // Its first rows are still checked against the run's prompts: the rows swapped, the first
  // row's 20 tokens are not the run's first request's 100.
  {
    std::ifstream in(base / "workloads" / "tiny.jsonl");
    std::string first, second, third;
    std::getline(in, first);
    std::getline(in, second);
    std::getline(in, third);
    in.close();
    const auto swap_arrival = [](std::string row, const std::string& from, const std::string& to) {
      return row.replace(row.find(from), from.size(), to);
    };
    std::ofstream(base / "workloads" / "tiny.jsonl")
        << swap_arrival(second, R"("arrival_time_ns": 500000000)", R"("arrival_time_ns": 0)") << "\n"
        << swap_arrival(first, R"("arrival_time_ns": 0)", R"("arrival_time_ns": 500000000)") << "\n"
        << third << "\n";
  }
  r = test::run_cli({"validate", dir.string(), "--kv-budget", "1GiB"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("requests.jsonl:1: input_toks: 100 prompt tokens, but request 1 of the workload"));
  std::filesystem::remove_all(base);
}

TEST_CASE("validate: a run that names no GPU is refused, naming the file that should have") {
  // tiny's meta.json records no hardware and there is no peer_cluster_config.json beside it.
  const auto base = test::scratch_dir("validate-no-gpu");
  const auto dir = copy_tiny_run(base);
  const std::string workload = kData + "/tiny/workloads/tiny.jsonl";
  auto r = test::run_cli({"validate", dir.string(), "--workload", workload});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("meta.json: hardware.device_name: absent, and there is no peer_cluster_config.json"));
  // With the peer's description present but naming no GPU, that file is the one blamed.
  std::ofstream(dir / "peer_cluster_config.json") << R"({"num_nodes": 1, "nodes": [{"instances": [{}]}]})";
  r = test::run_cli({"validate", dir.string(), "--workload", workload});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("peer_cluster_config.json: hardware: names no GPU, nor does meta.json"));
  std::filesystem::remove_all(base);
}

TEST_CASE("validate: a model loaded from a path is found by its last component, and resolved settings kvsim does not "
          "model are named") {
  // Newer recorders write the path vLLM loaded ("/data/model/Qwen3-32B"), not the Hub name.
  // The tiny run on an RTX 4090, its pool recorded: 300 blocks of 16 tokens.
  const auto base = test::scratch_dir("validate-model-path");
  const auto dir = copy_tiny_run(base);
  const std::string workload = kData + "/tiny/workloads/tiny.jsonl";
  const auto write_meta = [&](const std::string& model, const std::string& resolved) {
    std::ofstream(dir / "meta.json") << R"({"model": ")" + model + R"(", "vllm_version": "0.28.0",
  "engine_kwargs": {"tensor_parallel_size": 1, "data_parallel_size": 1, "max_num_seqs": 8,
    "max_num_batched_tokens": 512, "max_model_len": 4096, "disable_custom_all_reduce": true},
  "dataset_path": "workloads/tiny.jsonl", "started_at": "2026-01-01T00:00:00Z", "tick_seconds": 0.25,
  "kv_cache": {"num_gpu_blocks": 300, "block_size": 16},
  "hardware": {"device_name": "NVIDIA GeForce RTX 4090"},
  "resolved_config": {)" + resolved + "}}";
  };
  // At vLLM's defaults nothing is named: fcfs, every step admits prefills, no watermark (0.0
  // and 0 alike), no quantization, one pipeline stage. disable_custom_all_reduce is named
  // once, from engine_kwargs, although resolved_config gives it too.
  write_meta("/data/model/Llama-3.1-8B/",
             R"("scheduler_config": {"policy": "fcfs", "prefill_schedule_interval": 1.0, "watermark": 0.0,
    "long_prefill_token_threshold": 0}, "model_config": {"quantization": null},
    "parallel_config": {"pipeline_parallel_size": 1, "disable_custom_all_reduce": true}, "speculative_config": null)");
  auto r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  Json doc = Json::parse(r.out);
  CHECK(doc["kvsim"]["model"] == "llama-3.1-8b");
  CHECK(doc["unmodelled_settings"] == Json::array({"disable_custom_all_reduce=true"}));
  write_meta("/data/model/Llama-3.1-8B/", R"("scheduler_config": {"watermark": 0})");
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK(Json::parse(r.out)["unmodelled_settings"] == Json::array({"disable_custom_all_reduce=true"}));
  // Away from the defaults, each is named with where it was read, in the table too.
  write_meta("models/Llama-3.1-8B",
             R"("scheduler_config": {"policy": "priority", "prefill_schedule_interval": 4, "watermark": 0.01},
    "model_config": {"quantization": "fp8"}, "parallel_config": {"pipeline_parallel_size": 2},
    "speculative_config": {"method": "ngram"})");
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json"});
  REQUIRE(r.exit_code == 0);
  doc = Json::parse(r.out);
  CHECK(doc["kvsim"]["model"] == "llama-3.1-8b");
  CHECK(doc["unmodelled_settings"] ==
        Json::array({"disable_custom_all_reduce=true", "resolved_config.scheduler_config.policy=\"priority\"",
                     "resolved_config.scheduler_config.prefill_schedule_interval=4",
                     "resolved_config.scheduler_config.watermark=0.01", "resolved_config.model_config.quantization=\"fp8\"",
                     "resolved_config.parallel_config.pipeline_parallel_size=2",
                     "resolved_config.speculative_config={\"method\":\"ngram\"}"}));
  r = test::run_cli({"validate", dir.string(), "--workload", workload});
  CHECK_THAT(r.out, Catch::Contains("resolved_config.scheduler_config.prefill_schedule_interval=4"));
  // A setting engine_kwargs gives (under the engine argument's own name: scheduling_policy) is
  // named once, from there; a null there is no setting, and the resolved value is named.
  replace_in_file(dir / "meta.json", R"("disable_custom_all_reduce": true)",
                  R"("disable_custom_all_reduce": true, "scheduling_policy": "priority", "quantization": null,
    "speculative_config": {"method": "ngram"})");
  r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK(Json::parse(r.out)["unmodelled_settings"] ==
        Json::array({"disable_custom_all_reduce=true", "scheduling_policy=\"priority\"",
                     "speculative_config={\"method\":\"ngram\"}",
                     "resolved_config.scheduler_config.prefill_schedule_interval=4",
                     "resolved_config.scheduler_config.watermark=0.01", "resolved_config.model_config.quantization=\"fp8\"",
                     "resolved_config.parallel_config.pipeline_parallel_size=2"}));
  // Paths as a recorder may write them (JSON text: a Windows path's backslashes escaped): any
  // case, Windows separators, a "." component, and
  // Hugging Face's cache folder (models--ORG--NAME/snapshots/COMMIT).
  for (const char* model : {"/models/llama-3.1-8b", R"(C:\\models\\Llama-3.1-8B)", "/data/model/Llama-3.1-8B/.",
                            "/root/.cache/huggingface/hub/models--meta-llama--Llama-3.1-8B/snapshots/0e9e39f2"}) {
    write_meta(model, "");
    r = test::run_cli({"validate", dir.string(), "--workload", workload, "--json"});
    INFO(model << "\n" << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(Json::parse(r.out)["kvsim"]["model"] == "llama-3.1-8b");
  }
  // A directory no Hub name in the table ends with, or a bare name, is still an error naming
  // the field; a name is matched whole, not by a prefix.
  for (const char* model : {"/data/model/Llama-3.1-8B-Sparse", "Llama-3.1-8B", "/data/model/", "/", ""}) {
    write_meta(model, "");
    r = test::run_cli({"validate", dir.string(), "--workload", workload});
    INFO(model);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains("meta.json: model:") && Catch::Contains("has no kvsim preset in validate's table"));
  }
  std::filesystem::remove_all(base);
}

TEST_CASE("validate: every model and device its table maps to is a preset this kvsim has") {
  // The table at the end of validate's help ("  NAME -> PRESET"), against 'kvsim models'
  // and 'kvsim size --help''s device list: a row naming a missing preset would fail every
  // run of that model or GPU.
  const auto help = test::run_cli({"validate", "--help"});
  REQUIRE(help.exit_code == 0);
  const auto models = test::run_cli({"models"});
  REQUIRE(models.exit_code == 0);
  const auto devices = test::run_cli({"size", "--help"});
  REQUIRE(devices.exit_code == 0);
  std::istringstream lines(help.out.substr(help.out.find("meta.json's model -> --model")));
  std::string line;
  int model_rows = 0, device_rows = 0;
  std::getline(lines, line);
  while (std::getline(lines, line) && line.rfind("  ", 0) == 0 && line.find(" -> ") != std::string::npos) {
    const auto arrow = line.find(" -> ");
    std::string preset = line.substr(arrow + 4);
    preset = preset.substr(0, preset.find(' '));
    INFO(line);
    if (line.find('/') != std::string::npos) {  // a Hub name: a model preset, first in its row
      CHECK(models.out.find("\n" + preset + " ") != std::string::npos);
      ++model_rows;
    } else {
      CHECK(devices.out.find(preset) != std::string::npos);
      ++device_rows;
    }
  }
  CHECK(model_rows == 38);  // the rows of src/cli/run_models.cc, all parsed
  CHECK(device_rows == 7);
}
