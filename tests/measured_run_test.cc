// Measured runs: reading them, the figures they are scored by, and the cost model's fit.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli_util.h"
#include "kvsim/calibrate.h"
#include "kvsim/cost_model.h"
#include "kvsim/error.h"
#include "kvsim/measured_run.h"

using namespace kvsim;

namespace {

const std::string kData = std::string(KVSIM_SOURCE_DIR) + "/tests/data/measured";

// The InputError reading the run in `dir` raises; a failed test when it raises none.
InputError read_error(const std::filesystem::path& dir) {
  try {
    read_measured_run(dir.string(), std::nullopt, false);
  } catch (const InputError& e) {
    return e;
  }
  FAIL("no error");
  return InputError("no error");
}

// meta.json of a one-engine vLLM 0.19 run of Llama-3.1-8B with 1 s ticks, started at
// 2026-01-01T00:00:00Z (arrival_time 1767225600 in requests.jsonl).
void write_one_engine_meta(const std::filesystem::path& dir) {
  std::ofstream(dir / "meta.json") << R"({"model": "meta-llama/Llama-3.1-8B", "vllm_version": "0.19.0",
  "engine_kwargs": {"tensor_parallel_size": 1, "data_parallel_size": 1, "max_num_seqs": 128,
    "max_num_batched_tokens": 2048, "max_model_len": null},
  "dataset_path": "workloads/none.jsonl", "started_at": "2026-01-01T00:00:00Z", "tick_seconds": 1.0})";
}

// meta.json (write_one_engine_meta) and four requests, all queued at 0 (monotonic 1000), first
// token at 0.5 s, last at 10.5 s, 100 prompt and 101 output tokens each.
void write_four_decoding_requests(const std::filesystem::path& dir) {
  write_one_engine_meta(dir);
  std::ofstream requests(dir / "requests.jsonl");
  for (int i = 0; i < 4; ++i) {
    requests << R"({"request_id": "p-)" << i << R"(", "input_toks": 100, "output_toks": 101, "arrival_time": 1767225600.0, "queued_ts": 1000.0, "scheduled_ts": 1000.0, "first_token_ts": 1000.5, "last_token_ts": 1010.5})" "\n";
  }
}

// The run of the engines simulated step by step below: six requests with 100-token prompts,
// all first tokens at 0 s (monotonic 1000), request k leaving after leave_after[k] decode
// steps at last_token[k]; ticks 1.. up to one past `now`, each with its prompt and decoded
// tokens as given and the requests not yet finished as running. Returns the ticks written.
std::size_t write_decoders_run(const std::filesystem::path& dir, const char* id_prefix, const int (&leave_after)[6],
                               const std::vector<double>& last_token, const std::vector<double>& prompt_in_tick,
                               const std::vector<double>& tokens_in_tick, double now) {
  write_one_engine_meta(dir);
  std::ofstream requests(dir / "requests.jsonl");
  for (std::size_t k = 0; k < 6; ++k) {
    requests << R"({"request_id": ")" << id_prefix << k << R"(", "input_toks": 100, "output_toks": )"
             << leave_after[k] + 1
             << R"(, "arrival_time": 1767225600.0, "queued_ts": 1000.0, "scheduled_ts": 1000.0, "first_token_ts": 1000.0, "last_token_ts": )"
             << std::setprecision(17) << 1000.0 + last_token[k] << "}\n";
  }
  std::ofstream ticks(dir / "timeseries.csv");
  ticks << "t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct\n";
  std::size_t written = 0;
  for (std::size_t t = 1; static_cast<double>(t) <= now + 1; ++t, ++written) {
    int running = 0;
    for (const double end : last_token) running += end > static_cast<double>(t) ? 1 : 0;
    ticks << t << ".0," << prompt_in_tick[t] << ".0," << tokens_in_tick[t] << ".0," << running << ",0,0.0\n";
  }
  return written;
}

}  // namespace

TEST_CASE("measured run: TTFT, TPOT, latency and the clock mapping of a hand-made run") {
  // tests/data/measured/tiny/run: two requests (README definitions):
  //   bench-0: queued 500.0, first token 500.1, last 500.3, 3 tokens: TTFT 0.1, TPOT 0.2/2 = 0.1, latency 0.3
  //   bench-1: queued 500.5, first token 500.55, last 500.95, 5 tokens: TTFT 0.05, TPOT 0.4/4 = 0.1, latency 0.45
  const MeasuredRun run = read_measured_run(kData + "/tiny/run", std::nullopt, true);
  CHECK(run.model == "meta-llama/Llama-3.1-8B");
  CHECK(run.max_num_seqs == 128);
  CHECK(run.max_num_batched_tokens == 2048);
  CHECK(run.max_model_len == 0);
  CHECK(run.workload == kData + "/tiny/workloads/tiny.jsonl");  // dataset_path, from the folder above the run
  CHECK(run.ticks.size() == 3);
  CHECK_FALSE(run.kv_usage_recorded);
  const MeasuredLatencies s = measured_latencies(run);
  const Distribution ttft = distribution(s.ttft);
  CHECK(ttft.mean == Approx(0.075));
  CHECK(ttft.p50 == Approx(0.075));
  // Linear between the order statistics 0.05 and 0.1: p90 at rank 0.9, p99 at rank 0.99.
  CHECK(ttft.p90 == Approx(0.05 + 0.05 * 0.9));
  CHECK(ttft.p99 == Approx(0.05 + 0.05 * 0.99));
  const Distribution tpot = distribution(s.tpot);
  CHECK(tpot.mean == Approx(0.1));
  CHECK(tpot.p99 == Approx(0.1));
  const Distribution latency = distribution(s.latency);
  CHECK(latency.mean == Approx(0.375));
  CHECK(latency.p90 == Approx(0.3 + 0.15 * 0.9));
  // arrival_time - queued_ts is 1767225600 - 500 for both; started_at is 1767225600 (2026-01-01).
  CHECK(monotonic_to_wall_s(run) == Approx(1767225600.0 - 500.0));
  CHECK(tick_origin_monotonic_s(run) == Approx(500.0));
  CHECK(measured_makespan_s(run) == Approx(0.95));
}

TEST_CASE("measured run: an optional field given as null reads as absent") {
  // A recorder that writes every field writes null where it has no value: tiny's run with
  // tick_seconds, started_at, finished_at and enable_expert_parallel null reads as the same
  // run without them (1 s ticks, the clock's origin from the requests, no expert parallelism).
  const auto base = test::scratch_dir("measured-nulls");
  std::filesystem::copy(kData + "/tiny/run", base, std::filesystem::copy_options::recursive);
  const auto read_with = [&](const std::string& ep, const std::string& top) {
    std::ofstream(base / "meta.json") << R"({"model": "meta-llama/Llama-3.1-8B", "vllm_version": "0.19.0",
  "engine_kwargs": {"tensor_parallel_size": 1, "data_parallel_size": 1,)" + ep + R"( "max_num_seqs": 128,
    "max_num_batched_tokens": 2048, "max_model_len": null}, )" + top + R"("dataset_path": "workloads/tiny.jsonl"})";
    return read_measured_run(base.string(), std::nullopt, false);
  };
  const MeasuredRun nulls = read_with(R"( "enable_expert_parallel": null,)",
                                      R"("started_at": null, "finished_at": null, "tick_seconds": null, )");
  const MeasuredRun absent = read_with("", "");
  CHECK(nulls.tick_s == 1.0);
  CHECK(nulls.tick_s == absent.tick_s);
  CHECK(nulls.started_at_s == absent.started_at_s);
  CHECK(nulls.finished_at_s == absent.finished_at_s);
  CHECK_FALSE(nulls.expert_parallel);
  std::filesystem::remove_all(base);
}

TEST_CASE("measured run: requests.jsonl holds num_requests records, each request once") {
  // LLMServingSim's recorder writes meta.json's num_requests as len(records), the lines of
  // requests.jsonl (bench/core/runner.py), and numbers the requests bench-0, bench-1, ...
  // tiny's run has two requests and no num_requests.
  const auto dir = test::scratch_dir("measured-count");
  std::filesystem::copy(kData + "/tiny/run", dir, std::filesystem::copy_options::recursive);
  const std::string meta = test::slurp(dir / "meta.json");
  const auto with_meta = [&](const std::string& fields) {
    std::string text = meta;
    text.replace(text.find(R"("dataset_path")"), 0, fields);
    std::ofstream(dir / "meta.json") << text;
  };
  with_meta(R"("num_requests": 2, )");
  CHECK(read_measured_run(dir.string(), std::nullopt, false).requests.size() == 2);
  // Three written, two read: the file was cut short after its second line.
  with_meta(R"("num_requests": 3, )");
  {
    const InputError e = read_error(dir);
    CHECK(e.where().file == (dir / "requests.jsonl").string());
    CHECK(e.where().line == 2);
    CHECK_THAT(e.what(), Catch::Contains("the last of 2 requests") && Catch::Contains("num_requests 3") &&
                             Catch::Contains("cut short"));
  }
  // One written, two read: the second line is the one too many.
  with_meta(R"("num_requests": 1, )");
  {
    const InputError e = read_error(dir);
    CHECK(e.where().line == 2);
    CHECK_THAT(e.what(), Catch::Contains("request 2 of 2") && Catch::Contains("num_requests 1"));
  }
  // The second request under the first one's id.
  with_meta("");
  std::string requests = test::slurp(dir / "requests.jsonl");
  requests.replace(requests.find("bench-1"), 7, "bench-0");
  std::ofstream(dir / "requests.jsonl") << requests;
  {
    const InputError e = read_error(dir);
    CHECK(e.where().line == 2);
    CHECK(e.where().field == "request_id");
    CHECK_THAT(e.what(), Catch::Contains("\"bench-0\" is also the request_id on line 1"));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("measured run: vllm_version is a string, or absent") {
  // A version written as a number (0.19) would otherwise be dropped without a word, and the
  // run replayed with no version's defaults.
  const auto dir = test::scratch_dir("measured-version");
  std::filesystem::copy(kData + "/tiny/run", dir, std::filesystem::copy_options::recursive);
  std::string meta = test::slurp(dir / "meta.json");
  const std::string given = R"("vllm_version": "0.19.0")";
  REQUIRE(meta.find(given) != std::string::npos);
  const auto with_version = [&](const std::string& v) {
    std::string text = meta;
    text.replace(text.find(given), given.size(), R"("vllm_version": )" + v);
    std::ofstream(dir / "meta.json") << text;
  };
  with_version("0.19");
  {
    const InputError e = read_error(dir);
    CHECK(e.where().file == (dir / "meta.json").string());
    CHECK(e.where().field == "vllm_version");
  }
  with_version("null");
  CHECK(read_measured_run(dir.string(), std::nullopt, false).vllm_version.empty());
  std::filesystem::remove_all(dir);
}

TEST_CASE("measured run: percentiles as numpy.percentile gives them") {
  // numpy.percentile([1, 2, 3, 4, 10], 90) = 4 + (10 - 4) x 0.6 = 7.6 (rank 0.9 x 4 = 3.6).
  const Distribution d = distribution({10, 1, 3, 2, 4});
  CHECK(d.mean == Approx(4.0));
  CHECK(d.p50 == Approx(3.0));
  CHECK(d.p90 == Approx(7.6));
  CHECK(d.p95 == Approx(8.8));
  CHECK(d.count == 5);
}

TEST_CASE("measured run: the folder above is the run's own however it is named: run/, run/. and a link to it") {
  // tests/data/measured/tiny: run/meta.json names workloads/tiny.jsonl, relative to tiny/.
  const std::filesystem::path tiny = std::filesystem::path(kData) / "tiny";
  const std::string workload = (tiny / "workloads" / "tiny.jsonl").string();
  CHECK(read_measured_run((tiny / "run").string() + "/", std::nullopt, true).workload == workload);
  CHECK(read_measured_run((tiny / "run").string() + "/.", std::nullopt, true).workload == workload);
  // A link elsewhere to the run: the folder above it holds no workloads/, the run's real one does.
  const auto dir = test::scratch_dir("measured-link");
  std::filesystem::remove(dir / "run");
  std::filesystem::create_directory_symlink(tiny / "run", dir / "run");
  CHECK(read_measured_run((dir / "run").string(), std::nullopt, true).workload == workload);
  std::filesystem::remove_all(dir);
}

TEST_CASE("measured run: a bad file is an error naming the file, line and field") {
  const auto dir = test::scratch_dir("measured-bad");
  std::filesystem::copy(kData + "/tiny/run", dir, std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
  {
    std::ofstream out(dir / "requests.jsonl");
    out << R"({"request_id": "a", "input_toks": 1, "output_toks": 2, "arrival_time": 1, "queued_ts": 1, "scheduled_ts": 1, "first_token_ts": 2, "last_token_ts": 3})" "\n"
        << R"({"request_id": "b", "input_toks": 1, "output_toks": 2, "arrival_time": 1, "queued_ts": 5, "scheduled_ts": 1, "first_token_ts": 2, "last_token_ts": 3})" "\n";
  }
  {
    const InputError e = read_error(dir);
    CHECK(e.where().file == (dir / "requests.jsonl").string());
    CHECK(e.where().line == 2);
    // The first stamp earlier than the one before it: scheduled at 1 s, queued at 5 s.
    CHECK(e.where().field == "scheduled_ts");
  }
  {
    std::ofstream out(dir / "requests.jsonl");
    out << R"({"request_id": "a", "input_toks": 1, "output_toks": 2, "arrival_time": 1, "queued_ts": 1, "scheduled_ts": 1, "first_token_ts": 2})" "\n";
  }
  {
    const InputError e = read_error(dir);
    CHECK(e.where().line == 1);
    CHECK(e.where().field == "last_token_ts");
  }
  // Every timestamp null (vLLM returned no metrics): a request in no figure. Some null and
  // some not: a damaged record. All of them null: nothing to measure.
  {
    std::ofstream out(dir / "requests.jsonl");
    out << R"({"request_id": "a", "input_toks": 1, "output_toks": 2, "arrival_time": 101, "queued_ts": 1, "scheduled_ts": 1, "first_token_ts": 2, "last_token_ts": 3})" "\n"
        << R"({"request_id": "b", "input_toks": 1, "output_toks": 2, "arrival_time": null, "queued_ts": null, "scheduled_ts": null, "first_token_ts": null, "last_token_ts": null})" "\n";
  }
  {
    const MeasuredRun run = read_measured_run(dir.string(), std::nullopt, false);
    REQUIRE(run.requests.size() == 2);
    CHECK(run.requests[0].timed);
    CHECK_FALSE(run.requests[1].timed);
    CHECK(run.untimed_requests == 1);
    CHECK(timed_requests(run) == 1);
    CHECK(measured_latencies(run).ttft == std::vector<double>{1.0});
    CHECK(measured_makespan_s(run) == Approx(2.0));
    CHECK(monotonic_to_wall_s(run) == Approx(100.0));  // a's 101 - 1 alone, not halved by b
  }
  {
    std::ofstream out(dir / "requests.jsonl");
    out << R"({"request_id": "a", "input_toks": 1, "output_toks": 2, "arrival_time": 1, "queued_ts": 1, "scheduled_ts": 1, "first_token_ts": 2, "last_token_ts": 3})" "\n"
        << R"({"request_id": "b", "input_toks": 1, "output_toks": 2, "arrival_time": 1, "queued_ts": 1, "scheduled_ts": 1, "first_token_ts": null, "last_token_ts": 3})" "\n";
  }
  {
    const InputError e = read_error(dir);
    CHECK(e.where().line == 2);
    CHECK(e.where().field == "first_token_ts");
  }
  {
    std::ofstream out(dir / "requests.jsonl");
    out << R"({"request_id": "b", "input_toks": 1, "output_toks": 2, "arrival_time": null, "queued_ts": null, "scheduled_ts": null, "first_token_ts": null, "last_token_ts": null})" "\n";
  }
  {
    const InputError e = read_error(dir);
    CHECK_THAT(e.what(), Catch::Contains("no request carries timestamps"));
  }
  std::filesystem::copy(kData + "/tiny/run/requests.jsonl", dir / "requests.jsonl",
                        std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
  // The error reading the run with `text` as its timeseries.csv.
  const auto ticks_error = [&](const std::string& text) {
    std::ofstream(dir / "timeseries.csv") << text;
    return read_error(dir);
  };
  const std::string header = "t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct\n";
  {
    const InputError e = ticks_error(header + "1.0,5,6,1.5,0,0\n");
    CHECK(e.where().line == 2);
    CHECK(e.where().field == "running");
  }
  // A column given twice (which would the counts come from?), a time before the run started,
  // and a billion tokens a second: each named, where they were read without a word.
  struct Refused {
    std::string text;
    std::int64_t line;
    const char* field;
    const char* says;
  };
  const Refused refused[] = {
      {"t,prompt_throughput,gen_throughput,running,waiting,running\n1.0,5,6,1,0,3\n", 1, "running", "column given twice"},
      {header + "-0.5,5,6,1,0,0\n", 2, "t", "negative"},
      {header + "1.0,5,6,1,0,0\n2.0,1e300,6,1,0,0\n", 3, "prompt_throughput", "implausible"},
  };
  for (const Refused& r : refused) {
    INFO(r.text);
    const InputError e = ticks_error(r.text);
    CHECK(e.where().line == r.line);
    CHECK(e.where().field == r.field);
    CHECK_THAT(e.what(), Catch::Contains(r.says));
  }
  // A share of the pool above 100% (or below 0) is not one.
  {
    const InputError e = ticks_error(header + "1.0,5,6,1,0,50\n2.0,5,6,1,0,250\n");
    CHECK(e.where().line == 3);
    CHECK(e.where().field == "kv_cache_pct");
  }
  // Without kv_cache_pct (a recorder that could not read the pool), the run is read and its
  // KV usage is not recorded; the counts calibrate and validate need are still required.
  {
    std::ofstream(dir / "timeseries.csv") << "t,prompt_throughput,gen_throughput,running,waiting\n1.0,5,6,1,0\n";
    const MeasuredRun run = read_measured_run(dir.string(), std::nullopt, false);
    CHECK(run.ticks.size() == 1);
    CHECK(run.ticks[0].waiting == 0);
    CHECK_FALSE(run.kv_usage_recorded);
    const InputError e = ticks_error("t,prompt_throughput,gen_throughput,running\n1.0,5,6,1\n");
    CHECK(e.where().field == "waiting");
  }
  // One request whose wall clock is 1,000 s off the others' offset (100 s here) would move the
  // mapping of the two clocks, a mean, by 333 s: a damaged record, named.
  {
    std::ofstream out(dir / "requests.jsonl");
    for (int i = 0; i < 3; ++i) {
      out << R"({"request_id": "ok-)" << i << R"(", "input_toks": 1, "output_toks": 2, "arrival_time": 101, "queued_ts": 1, "scheduled_ts": 1, "first_token_ts": 2, "last_token_ts": 3})" "\n";
    }
    out << R"({"request_id": "far", "input_toks": 1, "output_toks": 2, "arrival_time": 1101, "queued_ts": 1, "scheduled_ts": 1, "first_token_ts": 2, "last_token_ts": 3})" "\n";
  }
  std::filesystem::copy(kData + "/tiny/run/timeseries.csv", dir / "timeseries.csv",
                        std::filesystem::copy_options::overwrite_existing);
  {
    const InputError e = read_error(dir);
    CHECK(e.where().line == 4);
    CHECK(e.where().field == "arrival_time");
  }
  // Numbers no recorder writes. A stamp beyond 1e12 s (1e308 minus -1e308 would be an infinite
  // latency), and one beyond a double, which nlohmann's parser reports as out_of_range.
  {
    std::ofstream out(dir / "requests.jsonl");
    out << R"({"request_id": "a", "input_toks": 1, "output_toks": 2, "arrival_time": 0, "queued_ts": -1e308, "scheduled_ts": -1e308, "first_token_ts": 1e308, "last_token_ts": 1e308})" "\n";
  }
  {
    const InputError e = read_error(dir);
    CHECK(e.where().line == 1);
    CHECK(e.where().field == "queued_ts");
    CHECK_THAT(e.what(), Catch::Contains("expected seconds of at most 1e12 either way"));
  }
  {
    std::ofstream out(dir / "requests.jsonl");
    out << R"({"request_id": "a", "input_toks": 1, "output_toks": 2, "arrival_time": 1e400, "queued_ts": 1, "scheduled_ts": 1, "first_token_ts": 2, "last_token_ts": 3})" "\n";
  }
  {
    const InputError e = read_error(dir);
    CHECK(e.where().line == 1);
    CHECK_THAT(e.what(), Catch::Contains("not valid JSON") && Catch::Contains("number overflow"));
  }
  // A NUL byte after a line's object: nlohmann's parser takes it for the end of the input, so
  // the line would be read without what follows it. Line 2, column 150: the object before it
  // is 149 characters.
  {
    const std::string line = R"({"request_id": "a", "input_toks": 1, "output_toks": 2, "arrival_time": 0, "queued_ts": 1, "scheduled_ts": 1, "first_token_ts": 2, "last_token_ts": 3})";
    REQUIRE(line.size() == 149);
    std::ofstream out(dir / "requests.jsonl", std::ios::binary);
    out << line << "\n" << line << std::string(1, '\0') << R"(, "more": 1})" "\n";
  }
  {
    const InputError e = read_error(dir);
    CHECK(e.where().line == 2);
    CHECK_THAT(e.what(), Catch::Contains("requests.jsonl:2: a NUL byte at column 150: expected text"));
  }
  std::filesystem::copy(kData + "/tiny/run/requests.jsonl", dir / "requests.jsonl",
                        std::filesystem::copy_options::overwrite_existing);
  // A count past 2^53 (where a double stops holding every whole number; 1e300 would not fit
  // 64 bits at all), and preemptions whose sum passes 2^63 - 1: 2^53 in each of 1,024 ticks.
  // A row of seven cells, the last empty, under a header of six.
  {
    const InputError e = ticks_error(header + "1.0,5,6,1,0,0,\n");
    CHECK(e.where().line == 2);
    CHECK_THAT(e.what(), Catch::Contains("expected 6 cells, got 7"));
  }
  {
    const InputError e = ticks_error(header + "1.0,5,6,1e300,0,0\n");
    CHECK(e.where().line == 2);
    CHECK(e.where().field == "running");
  }
  {
    std::string text = "t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct,preempted\n";
    for (int t = 1; t <= 1024; ++t) text += std::to_string(t) + ".0,5,6,1,0,0,9007199254740992\n";
    const InputError e = ticks_error(text);
    CHECK(e.where().line == 1025);
    CHECK(e.where().field == "preempted");
    CHECK_THAT(e.what(), Catch::Contains("overflow 64 bits"));
  }
  std::filesystem::copy(kData + "/tiny/run/timeseries.csv", dir / "timeseries.csv",
                        std::filesystem::copy_options::overwrite_existing);
  // More replicas than kvsim simulates (calibrate sized its books by them).
  {
    std::string meta = test::slurp(dir / "meta.json");
    const std::string dp = "\"data_parallel_size\": 1";
    meta.replace(meta.find(dp), dp.size(), "\"data_parallel_size\": 100000000");
    std::ofstream(dir / "meta.json") << meta;
  }
  {
    const InputError e = read_error(dir);
    CHECK(e.where().file == (dir / "meta.json").string());
    CHECK(e.where().field == "engine_kwargs.data_parallel_size");
    CHECK_THAT(e.what(), Catch::Contains("kvsim simulates at most 1024"));
  }
  // A field is named by its whole path in meta.json, since block_size, max_num_seqs and
  // gpu_memory_utilization may each come from more than one object.
  {
    const std::string kwargs = R"("engine_kwargs": {"tensor_parallel_size": 1, "data_parallel_size": 1)";
    const auto meta_error = [&](const std::string& kwargs_rest, const std::string& top) {
      std::ofstream(dir / "meta.json") << R"({"model": "meta-llama/Llama-3.1-8B", )" << kwargs << kwargs_rest
                                       << R"(}, "dataset_path": "workloads/tiny.jsonl", "tick_seconds": 0.25)"
                                       << top << "}";
      return read_error(dir);
    };
    const std::string seqs = R"(, "max_num_seqs": 128, "max_num_batched_tokens": 2048)";
    CHECK(meta_error(seqs + R"(, "block_size": "16")", "").where().field == "engine_kwargs.block_size");
    CHECK(meta_error(seqs, R"(, "kv_cache": {"block_size": 0})").where().field == "kv_cache.block_size");
    CHECK(meta_error(seqs, R"(, "kv_cache": {"gpu_memory_utilization": 2})").where().field ==
          "kv_cache.gpu_memory_utilization");
    CHECK(meta_error(seqs, R"(, "hardware": {"device_total_memory_bytes": -1})").where().field ==
          "hardware.device_total_memory_bytes");
    const std::string resolved = R"(, "resolved_config": {"scheduler_config": {"max_num_seqs": 0}})";
    CHECK(meta_error(R"(, "max_num_batched_tokens": 2048)", resolved).where().field ==
          "resolved_config.scheduler_config.max_num_seqs");
    CHECK(meta_error(seqs, R"(, "resolved_config": {"model_config": {"enforce_eager": 1}})").where().field ==
          "resolved_config.model_config.enforce_eager");
    // Missing from both: named where the recorder writes it.
    const InputError missing = meta_error(R"(, "max_num_batched_tokens": 2048)", "");
    CHECK(missing.where().field == "engine_kwargs.max_num_seqs");
    CHECK_THAT(missing.what(), Catch::Contains("no resolved_config.scheduler_config.max_num_seqs gives"));
    std::filesystem::copy(kData + "/tiny/run/meta.json", dir / "meta.json",
                          std::filesystem::copy_options::overwrite_existing);
  }
  // A workload name too long to look up is an input error naming it, not filesystem_error.
  {
    std::filesystem::copy(kData + "/tiny/run/meta.json", dir / "meta.json", std::filesystem::copy_options::overwrite_existing);
    std::string meta = test::slurp(dir / "meta.json");
    const std::string name = "\"workloads/tiny.jsonl\"";  // looked up above the run, which exists
    meta.replace(meta.find(name), name.size(), "\"" + std::string(300, 'a') + ".jsonl\"");
    std::ofstream(dir / "meta.json") << meta;
    const MeasuredRun run = read_measured_run(dir.string(), std::nullopt, false);
    CHECK_THROWS_WITH(locate_workload(run), Catch::Contains("cannot look it up"));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("measured run: values no run can have are refused, naming the file, line and field") {
  // The tiny run: two requests, max_num_seqs 128, one engine, 0.25 s ticks, started at
  // 2026-01-01T00:00:00Z (arrival_time 1767225600), here ending 2 s later.
  const auto dir = test::scratch_dir("measured-impossible");
  const auto restore = [&] {
    std::filesystem::remove_all(dir);
    std::filesystem::copy(kData + "/tiny/run", dir, std::filesystem::copy_options::recursive);
    std::string meta = test::slurp(dir / "meta.json");
    const std::string started = "\"started_at\": \"2026-01-01T00:00:00Z\"";
    meta.replace(meta.find(started), started.size(), started + ", \"finished_at\": \"2026-01-01T00:00:02Z\"");
    std::ofstream(dir / "meta.json") << meta;
  };
  const auto edit = [&](const char* file, const std::string& from, const std::string& to) {
    std::string text = test::slurp(dir / file);
    REQUIRE(text.find(from) != std::string::npos);
    text.replace(text.find(from), from.size(), to);
    std::ofstream(dir / file) << text;
  };
  restore();
  CHECK_NOTHROW(read_measured_run(dir.string(), std::nullopt, false));
  const std::string header = "t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct\n";
  const auto ticks_error = [&](const std::string& rows) {
    std::ofstream(dir / "timeseries.csv") << header << rows;
    return read_error(dir);
  };
  // A tick may close one tick after the run (2 s + 0.25 s, and the second the clocks allow):
  // 3.25 s is read, 3.5 s is past the end.
  std::ofstream(dir / "timeseries.csv") << header << "3.25,0,0,0,0,0\n";
  CHECK_NOTHROW(read_measured_run(dir.string(), std::nullopt, false));
  {
    const InputError e = ticks_error("0.25,5,6,1,0,0\n3.5,0,0,0,0,0\n");
    CHECK(e.where().file == (dir / "timeseries.csv").string());
    CHECK(e.where().line == 3);
    CHECK(e.where().field == "t");
    CHECK_THAT(e.what(), Catch::Contains("past the run's end (2 s, meta.json started_at to finished_at)"));
  }
  // 1e10 s overflowed validate's nanoseconds before: past any run kvsim reads.
  CHECK(ticks_error("10000000000,0,0,0,0,0\n").where().field == "t");
  // One engine runs at most max_num_seqs (128) requests.
  {
    const InputError e = ticks_error("0.25,5,6,129,0,0\n");
    CHECK(e.where().field == "running");
    CHECK_THAT(e.what(), Catch::Contains("129 running, more than max_num_seqs x data_parallel_size (128 x 1) allow"));
  }
  restore();
  // bench-1 moved 3 s earlier on both clocks (their offset unchanged): it arrives 2.5 s
  // before started_at, outside the second allowed.
  edit("requests.jsonl", R"("arrival_time": 1767225600.5, "queued_ts": 500.5, "scheduled_ts": 500.5, "first_token_ts": 500.55, "last_token_ts": 500.95)",
       R"("arrival_time": 1767225597.5, "queued_ts": 497.5, "scheduled_ts": 497.5, "first_token_ts": 497.55, "last_token_ts": 497.95)");
  {
    const InputError e = read_error(dir);
    CHECK(e.where().file == (dir / "requests.jsonl").string());
    CHECK(e.where().line == 2);
    CHECK(e.where().field == "arrival_time");
    CHECK_THAT(e.what(), Catch::Contains("arrives -2.5 s after meta.json's started_at"));
  }
  restore();
  // bench-1 lasting 2.7 s from its arrival at 0.5 s ends 3.2 s in: 1.2 s after finished_at.
  edit("requests.jsonl", R"("last_token_ts": 500.95)", R"("last_token_ts": 503.2)");
  {
    const InputError e = read_error(dir);
    CHECK(e.where().line == 2);
    CHECK(e.where().field == "last_token_ts");
    CHECK_THAT(e.what(), Catch::Contains("finishes 1.2 s after meta.json's finished_at"));
  }
  restore();
  edit("meta.json", "\"tick_seconds\": 0.25", "\"tick_seconds\": 1e308");
  CHECK(read_error(dir).where().field == "tick_seconds");
  restore();
  // 2^64 - 1 read as an int64 is -1: named as out of range, not as too small.
  edit("meta.json", "\"max_num_seqs\": 128", "\"max_num_seqs\": 18446744073709551615");
  {
    const InputError e = read_error(dir);
    CHECK(e.where().field == "engine_kwargs.max_num_seqs");
    CHECK_THAT(e.what(), Catch::Contains("expected an integer from 1 to 9223372036854775807"));
  }
  restore();
  edit("meta.json", "\"max_model_len\": null", "\"max_model_len\": 1099511627777");
  CHECK_THAT(read_error(dir).what(), Catch::Contains("expected an integer from 1 to 1099511627776"));
  restore();
  // A directory where a file should be, and the peer's GPU name of the wrong type.
  std::filesystem::remove(dir / "timeseries.csv");
  std::filesystem::create_directory(dir / "timeseries.csv");
  CHECK_THAT(read_error(dir).what(), Catch::Contains("timeseries.csv: is a directory, not a file"));
  restore();
  std::ofstream(dir / "peer_cluster_config.json") << R"({"nodes": [{"instances": [{"hardware": 5}]}]})";
  {
    const InputError e = read_error(dir);
    CHECK(e.where().field == "nodes[0].instances[0].hardware");
    CHECK_THAT(e.what(), Catch::Contains("expected the GPU's name, a string, got 5"));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("least squares: a hand-solved overdetermined system") {
  // x1 = 1, x2 = 2, x1 + x2 = 3.3: normal equations [[2,1],[1,2]] x = [4.3, 5.3],
  // x1 = (2 x 4.3 - 5.3) / 3 = 1.1, x2 = (2 x 5.3 - 4.3) / 3 = 2.1.
  const std::vector<double> x = least_squares({{1, 0}, {0, 1}, {1, 1}}, {1, 2, 3.3});
  REQUIRE(x.size() == 2);
  CHECK(x[0] == Approx(1.1));
  CHECK(x[1] == Approx(2.1));
  CHECK_THROWS_AS(least_squares({{1, 2}, {2, 4}, {3, 6}}, {1, 2, 3}), InputError);
}

TEST_CASE("least squares: the estimates' standard errors and correlation, by hand") {
  // The system above: residuals 1.1 - 1, 2.1 - 2, 3.2 - 3.3, so s^2 = 0.03 / (3 - 2) = 0.03;
  // (A'A)^-1 = [[2, -1], [-1, 2]] / 3, so each standard error is sqrt(0.03 x 2/3) = sqrt(0.02)
  // and the correlation (-1/3) / (2/3) = -0.5.
  const LeastSquaresFit fit = least_squares_fit({{1, 0}, {0, 1}, {1, 1}}, {1, 2, 3.3});
  REQUIRE(fit.x.size() == 2);
  CHECK(fit.x[0] == Approx(1.1));
  CHECK(fit.standard_error[0] == Approx(std::sqrt(0.02)));
  CHECK(fit.standard_error[1] == Approx(std::sqrt(0.02)));
  CHECK(fit.correlation[0][1] == Approx(-0.5));
  CHECK(fit.correlation[1][0] == Approx(-0.5));
  CHECK(fit.correlation[0][0] == Approx(1));
  // Columns of other scales (x 1,000 and / 1,000) give the same fit in their units: the
  // estimates scale inversely, their errors with them, their correlation not at all.
  const LeastSquaresFit scaled = least_squares_fit({{1000, 0}, {0, 0.001}, {1000, 0.001}}, {1, 2, 3.3});
  CHECK(scaled.x[0] == Approx(1.1e-3));
  CHECK(scaled.standard_error[1] == Approx(std::sqrt(0.02) * 1000));
  CHECK(scaled.correlation[0][1] == Approx(-0.5));
  // As many equations as unknowns: an exact fit, nothing left to measure its error by.
  const LeastSquaresFit exact = least_squares_fit({{1, 0}, {1, 1}}, {1, 3});
  CHECK(exact.x[1] == Approx(2));
  CHECK(exact.standard_error[0] == -1);
  CHECK(exact.correlation[0][1] == Approx(-1 / std::sqrt(2.0)));  // A'A = [[2, 1], [1, 1]], inverse [[1, -1], [-1, 2]]
}

TEST_CASE("calibrate: the kept terms whose estimates move together are named, 0.9 or more in size") {
  const std::vector<std::string> names{"base", "prefill-token", "context-token"};
  // base and context-token at -0.95: listed; 0.89 and -0.5: not; exactly 0.9: listed.
  const std::vector<CorrelatedTerms> listed =
      correlated_terms(names, {{1, 0.89, -0.95}, {0.89, 1, -0.5}, {-0.95, -0.5, 1}});
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].first == "base");
  CHECK(listed[0].second == "context-token");
  CHECK(listed[0].correlation == -0.95);
  const std::vector<CorrelatedTerms> edge = correlated_terms({"base", "decode-seq"}, {{1, 0.9}, {0.9, 1}});
  REQUIRE(edge.size() == 1);
  CHECK(edge[0].correlation == 0.9);
}

TEST_CASE("calibrate: recovers the coefficients a synthetic run was generated with") {
  // tests/data/measured/make_synthetic.py wrote each tick's decoded tokens G from the rule
  //   1 s = (G / D) x 10 ms + P x 50 us + G x 200 us
  // (D the mean requests decoding in the tick, P its prompt tokens), plus the tick's first
  // tokens (a prefill's, not a decode's) into the generated column: the fit must give back
  // 10 ms, 50 us and 200 us, and no context term (the three explain every tick exactly).
  const MeasuredRun run = read_measured_run(kData + "/synthetic", std::nullopt, false);
  const Calibration c = calibrate(run);
  REQUIRE(c.terms.size() == 4);
  CHECK(c.terms[0].seconds == Approx(0.010).epsilon(1e-6));
  CHECK(c.terms[1].seconds == Approx(50e-6).epsilon(1e-6));
  CHECK(c.terms[2].seconds == Approx(200e-6).epsilon(1e-6));
  CHECK_FALSE(c.terms[3].kept);
  // Ticks 2..12 are busy throughout with a request decoding on average (tick 1's mean is 0.7;
  // tick 13 ends after the last token at 12.5 s).
  CHECK(c.ticks.size() == 11);
  CHECK(c.residual_max_s < 1e-6);
  // The spec names all four terms in picoseconds (rounded), so none falls back to the roofline's.
  CHECK(std::abs(c.cost.base_ps - 10'000'000'000) <= 10'000);
  CHECK(std::abs(c.cost.prefill_token_ps - 50'000'000) <= 50);
  CHECK(std::abs(c.cost.decode_seq_ps - 200'000'000) <= 200);
  CHECK(c.cost.context_token_ps == 0);
  // --cost reads the spec back to the same picoseconds.
  const CostModel back = parse_cost_model(c.cost_spec, CostModel{}, "--cost");
  CHECK(back.base_ps == c.cost.base_ps);
  CHECK(back.prefill_token_ps == c.cost.prefill_token_ps);
  CHECK(back.decode_seq_ps == c.cost.decode_seq_ps);
  CHECK(back.context_token_ps == 0);
  CHECK_THAT(c.cost_spec, Catch::EndsWith(",context-token=0us"));

  // A record without timestamps (vLLM returned no metrics) is in no tick's decoding count:
  // the same run with one more, untimed, gives the same fit, and says it has one.
  const auto dir = test::scratch_dir("calibrate-untimed");
  std::filesystem::copy(kData + "/synthetic", dir,
                        std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir / "requests.jsonl", std::ios::app)
      << R"({"request_id": "x", "input_toks": 50, "output_toks": 9, "arrival_time": null, "queued_ts": null, "scheduled_ts": null, "first_token_ts": null, "last_token_ts": null})" "\n";
  const Calibration u = calibrate(read_measured_run(dir.string(), std::nullopt, false));
  CHECK(u.cost_spec == c.cost_spec);
  CHECK(u.ticks.size() == c.ticks.size());
  const auto cli = test::run_cli({"calibrate", dir.string()});
  CHECK_THAT(cli.out, Catch::Contains("1 of 11 requests carry no timestamps"));

  // A run whose timeseries credits no prompt token leaves the prefill-token term with nothing
  // to fit: the error names the file and the column, and the 11 busy ticks above (which
  // prompt tokens do not choose).
  // The synthetic run's timeseries.csv into this run's, each data row's cells through edit().
  const auto rewrite_ticks = [&](const std::function<void(std::vector<std::string>&)>& edit) {
    std::ifstream in(kData + "/synthetic/timeseries.csv");
    std::ofstream out(dir / "timeseries.csv");
    std::string line;
    std::getline(in, line);
    out << line << '\n';
    while (std::getline(in, line)) {
      std::vector<std::string> cells;
      std::stringstream ss(line);
      for (std::string cell; std::getline(ss, cell, ',');) cells.push_back(cell);
      edit(cells);
      for (std::size_t k = 0; k < cells.size(); ++k) out << (k ? "," : "") << cells[k];
      out << '\n';
    }
  };
  rewrite_ticks([](std::vector<std::string>& cells) { cells[1] = "0"; });
  try {
    calibrate(read_measured_run(dir.string(), std::nullopt, false));
    FAIL("a run without prompt tokens was fitted");
  } catch (const InputError& e) {
    CHECK_THAT(e.what(), Catch::Contains("timeseries.csv") && Catch::Contains("prompt_throughput: 0 in all 11 busy ticks "
                                         "(no prompt token computed), so the prefill-token term cannot be fitted"));
  }
  // Throughputs a trillion times too small: a step would take about 10^10 s. The fit says so
  // and names the file, where its picoseconds wrapped past 2^63 and the spec it printed was
  // refused as a negative --cost (an option calibrate does not even take).
  rewrite_ticks([](std::vector<std::string>& cells) {
    for (std::size_t k = 1; k <= 2; ++k) cells[k] = fmt::format("{:.17g}", std::stod(cells[k]) * 1e-12);
  });
  try {
    calibrate(read_measured_run(dir.string(), std::nullopt, false));
    FAIL("throughputs a trillion times too small were fitted");
  } catch (const InputError& e) {
    CHECK_THAT(e.what(), Catch::Contains("timeseries.csv") && Catch::Contains("which no engine takes"));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("calibrate: prompt tokens the prefix cache served take no step time, though the timeseries credits them") {
  // tests/data/measured/make_synthetic.py wrote synthetic-cached/ by the rule of the test
  // above (10 ms, 50 us, 200 us), with requests 0.3 s apart whose first 96 prompt tokens are
  // the same: the prefix cache serves them to every request but the first, and no step
  // computes them, yet the timeseries credits each whole prompt at its first token, as vLLM's
  // prompt throughput does (ticks 2, 3 and 4 hold 4, 3 and 1 such first tokens: 384, 288 and
  // 96 tokens too many). Taken as computed they make the fit wrong; taken out, it is exact.
  const MeasuredRun run = read_measured_run(kData + "/synthetic-cached", std::nullopt, false);
  REQUIRE(credits_cached_prompt_tokens(run));
  const Calibration credited = calibrate(run);
  CHECK(credited.residual_rms_s > 1e-3);
  CHECK(std::abs(credited.terms[2].seconds - 200e-6) > 10e-6);
  const std::vector<std::int64_t> served = {0, 96, 96, 96, 96, 96, 96, 96, 96, 96};
  const Calibration c = calibrate(run, {}, ReplayEstimate{served, {}, {}});
  CHECK(c.terms[0].seconds == Approx(0.010).epsilon(1e-6));
  CHECK(c.terms[1].seconds == Approx(50e-6).epsilon(1e-6));
  CHECK(c.terms[2].seconds == Approx(200e-6).epsilon(1e-6));
  CHECK_FALSE(c.terms[3].kept);
  CHECK(c.residual_max_s < 1e-6);
  REQUIRE(c.ticks.front().t_s == 2.0);
  CHECK(c.ticks.front().prompt_tokens == Approx(2000.0));  // 2,384 credited, 4 x 96 served
  CHECK_THROWS_AS(calibrate(run, {}, ReplayEstimate{{0, 96}, {}, {}}), InputError);  // not one per request
}

TEST_CASE("calibrate: positions a preemption makes vLLM compute again are credited nowhere, and are added back") {
  // vLLM's prompt throughput counts a prompt once, at its first token, so what a preemption
  // by recompute computes again is in no column. The synthetic run's ticks 4, 5 and 7 (rows
  // 3, 4 and 6), which computed 1,000, 2,300 and 1,300 prompt tokens by the rule, are given
  // 500 fewer, as such a run would record them: taken as they are, the fit is wrong; with
  // 500 recomputed positions in each of those ticks, exact again.
  MeasuredRun run = read_measured_run(kData + "/synthetic", std::nullopt, false);
  REQUIRE(run.tick_s == 1.0);
  const std::size_t rows[] = {3, 4, 6};
  for (const std::size_t i : rows) {
    REQUIRE(run.ticks[i].prompt_tokens_per_s >= 1000);
    run.ticks[i].prompt_tokens_per_s -= 500;
  }
  const Calibration uncounted = calibrate(run);
  CHECK(uncounted.residual_rms_s > 1e-3);
  ReplayEstimate recomputed;
  recomputed.recomputed.assign(run.ticks.size(), 0);
  for (const std::size_t i : rows) recomputed.recomputed[i] = 500;
  const Calibration c = calibrate(run, {}, recomputed);
  CHECK(c.terms[0].seconds == Approx(0.010).epsilon(1e-6));
  CHECK(c.terms[1].seconds == Approx(50e-6).epsilon(1e-6));
  CHECK(c.terms[2].seconds == Approx(200e-6).epsilon(1e-6));
  CHECK(c.residual_max_s < 1e-6);
  recomputed.recomputed.pop_back();
  CHECK_THROWS_AS(calibrate(run, {}, recomputed), InputError);  // not one per tick
}

TEST_CASE("calibrate: two data-parallel engines, fitted per engine, stepping independently or together") {
  // make_synthetic.py wrote both runs from the per-engine rule with the same coefficients
  // (10 ms, 50 us, 200 us): each engine takes S = G / D steps a tick and decodes G / 2 of the
  // tokens; it prefills P / 2 of the prompt tokens when the engines step independently, and
  // its steps carry all P when they step together (an MoE model's replicas).
  const auto check_fit = [](const Calibration& c) {
    CHECK(c.terms[0].seconds == Approx(0.010).epsilon(1e-6));
    CHECK(c.terms[1].seconds == Approx(50e-6).epsilon(1e-6));
    CHECK(c.terms[2].seconds == Approx(200e-6).epsilon(1e-6));
    CHECK_FALSE(c.terms[3].kept);
    CHECK(c.residual_max_s < 1e-6);
  };
  const MeasuredRun independent = read_measured_run(kData + "/synthetic-dp2-independent", std::nullopt, false);
  REQUIRE(independent.data_parallel == 2);
  const Calibration apart = calibrate(independent, {});
  CHECK_FALSE(apart.steps_together);
  check_fit(apart);
  const MeasuredRun together = read_measured_run(kData + "/synthetic-dp2-together", std::nullopt, false);
  const Calibration aligned = calibrate(together, {.replicas_step_together = true});
  CHECK(aligned.steps_together);
  check_fit(aligned);
  // Tick 2 (make_synthetic.py): P = 2,000, so each aligned step carries 2,000 x 50 us = 0.1 s of
  // prefill, and S = G / D steps of 10 ms with G / 2 tokens of 200 us make up the other 0.9 s.
  const CalibrationTick& t2 = aligned.ticks.front();
  REQUIRE(t2.t_s == 2.0);
  CHECK(t2.steps * 0.010 + t2.decoded_tokens / 2 * 200e-6 == Approx(0.9).epsilon(1e-9));
  // The same run read as independent engines shares the prompt tokens out: the fit must
  // then put twice the time on a prompt token to explain the same ticks.
  const Calibration misread = calibrate(together, {});
  CHECK(misread.terms[1].seconds == Approx(100e-6).epsilon(1e-6));
  // One engine: stepping together means nothing.
  CHECK_FALSE(calibrate(read_measured_run(kData + "/synthetic", std::nullopt, false), {.replicas_step_together = true}).steps_together);
}

TEST_CASE("calibrate: whole steps counted in the tick they end in do not make the fitted steps short") {
  // An engine simulated here step by step: six requests decode from 0 s (monotonic 1000),
  // a step lasting 20 ms + 5 ms per request decoding + 50 us per prompt token, every third
  // of the first 300 steps also computing 500 prompt tokens (of prompts not in the run), the
  // requests leaving after 200, 300, .., 700 decode steps. The timeseries counts each step's tokens in the tick the step ends in,
  // as vLLM's logger counts whole iterations, so a tick holds 19 or 20 steps, 20 or 21, ..:
  // its steps are off by up to one at each end. Fitted tick by tick, those errors sit in the
  // features: the terms came out 19.75 ms, 46.5 us and 5.13 ms (-1.2%, -7.1%, +2.6%).
  // Fitted over blocks of consecutive ticks, where they cancel but at the blocks' ends: each
  // within 0.5%. A block should hold 100 steps, 6 ticks here (the median tick holds 19), but
  // the 29 busy ticks must make at least twice as many blocks as the 4 terms: 3 ticks a block.
  const auto dir = test::scratch_dir("calibrate-whole-steps");
  std::filesystem::create_directories(dir);
  const double base = 0.020, per_request = 0.005, per_prompt_token = 50e-6;
  const int leave_after[] = {200, 300, 400, 500, 600, 700};
  std::vector<double> last_token(6, 0.0);
  std::vector<double> tokens_in_tick(64, 0.0), prompt_in_tick(64, 0.0);
  double now = 0;
  for (int step = 1;; ++step) {
    int decoding = 0;
    for (const int n : leave_after) decoding += step <= n ? 1 : 0;
    if (decoding == 0) break;
    const double prompt = step <= 300 && step % 3 == 0 ? 500 : 0;
    now += base + per_request * decoding + per_prompt_token * prompt;
    const auto tick = static_cast<std::size_t>(std::ceil(now - 1e-12));
    tokens_in_tick[tick] += decoding;
    prompt_in_tick[tick] += prompt;
    for (std::size_t k = 0; k < 6; ++k) {
      if (step == leave_after[k]) last_token[k] = now;
    }
  }
  write_decoders_run(dir, "w-", leave_after, last_token, prompt_in_tick, tokens_in_tick, now);
  const Calibration c = calibrate(read_measured_run(dir.string(), std::nullopt, false));
  CHECK(c.ticks.size() == 29);
  CHECK(c.block_ticks == 3);
  CHECK(c.terms[0].seconds == Approx(base).epsilon(0.005));
  CHECK(c.terms[1].seconds == Approx(per_prompt_token).epsilon(0.005));
  CHECK(c.terms[2].seconds == Approx(per_request).epsilon(0.005));
  CHECK(c.equations == 10);  // 29 ticks, 3 a block: 9 of 3 and one of 2
  // Ticks 11 to 13 taken out of the timeseries (a recorder's gap): 26 busy ticks in two runs,
  // ticks 1-10 and 14-29. A block ends at the gap, where the steps counted at its two sides
  // do not cancel: 10 ticks make 4 blocks (3, 3, 3, 1) and 16 make 6 (five of 3, one of 1),
  // 10 equations, not the 9 that blocks of 3 taken across the gap would make.
  {
    const std::string path = (dir / "timeseries.csv").string();
    std::istringstream in(test::slurp(path));
    std::string kept, line;
    while (std::getline(in, line)) {
      const bool gap = line.rfind("11.0,", 0) == 0 || line.rfind("12.0,", 0) == 0 || line.rfind("13.0,", 0) == 0;
      if (!gap) kept += line + "\n";
    }
    std::ofstream(path, std::ios::binary) << kept;
  }
  const Calibration gapped = calibrate(read_measured_run(dir.string(), std::nullopt, false));
  CHECK(gapped.ticks.size() == 26);
  CHECK(gapped.block_ticks == 3);
  CHECK(gapped.equations == 10);
  std::filesystem::remove_all(dir);
}

TEST_CASE("calibrate: an MoE model's step reads the routed experts its tokens reach, a share fitted as a term") {
  // The engine above for a model of 16 routed experts, 2 a token: a step lasts 10 ms + 50 us
  // per prompt token + 16 ms x the share of the experts its tokens reach, 1 - (7/8)^T for T
  // tokens (decodes and prompt tokens), so 2.0 ms more for one decode but 8.8 ms more for six,
  // and 16 ms for a 500-token prompt chunk. Not linear in the decodes: the experts' term
  // recovers all three coefficients, given the share of each tick's steps as calibrate's
  // replay measures it (StepEstimate::expert_share, the mean over the steps that began in the
  // tick).
  const auto dir = test::scratch_dir("calibrate-experts");
  std::filesystem::create_directories(dir);
  const double base = 0.010, per_prompt_token = 50e-6, experts = 0.016;
  const int leave_after[] = {200, 300, 400, 500, 600, 700};
  std::vector<double> last_token(6, 0.0);
  std::vector<double> tokens_in_tick(64, 0.0), prompt_in_tick(64, 0.0), share_sum(64, 0.0), steps_begun(64, 0.0);
  double now = 0;
  for (int step = 1;; ++step) {
    int decoding = 0;
    for (const int n : leave_after) decoding += step <= n ? 1 : 0;
    if (decoding == 0) break;
    const double prompt = step <= 300 && step % 3 == 0 ? 500 : 0;
    const double share = 1 - std::pow(7.0 / 8.0, decoding + prompt);
    const auto began = static_cast<std::size_t>(std::floor(now)) + 1;  // the tick (t - 1, t] it began in
    share_sum[began] += share;
    steps_begun[began] += 1;
    now += base + per_prompt_token * prompt + experts * share;
    const auto tick = static_cast<std::size_t>(std::ceil(now - 1e-12));
    tokens_in_tick[tick] += decoding;
    prompt_in_tick[tick] += prompt;
    for (std::size_t k = 0; k < 6; ++k) {
      if (step == leave_after[k]) last_token[k] = now;
    }
  }
  const std::size_t ticks_written =
      write_decoders_run(dir, "e-", leave_after, last_token, prompt_in_tick, tokens_in_tick, now);
  const MeasuredRun run = read_measured_run(dir.string(), std::nullopt, false);
  REQUIRE(run.ticks.size() == ticks_written);
  ReplayEstimate estimate;
  for (std::size_t t = 1; t <= ticks_written; ++t) {
    StepEstimate e;
    if (steps_begun[t] > 0) e.expert_share = share_sum[t] / steps_begun[t];
    estimate.steps.push_back(e);
  }
  const Calibration c = calibrate(run, {.replicas_step_together = false, .routed_experts = 16, .experts_per_token = 2},
                                  estimate);
  REQUIRE(c.terms.size() == 5);
  CHECK(c.terms[4].name == "expert-weights");
  CHECK(c.terms[4].kept);
  CHECK(c.terms[0].seconds == Approx(base).epsilon(0.02));
  CHECK(c.terms[1].seconds == Approx(per_prompt_token).epsilon(0.02));
  CHECK(c.terms[4].seconds == Approx(experts).epsilon(0.02));
  CHECK_THAT(c.cost_spec, Catch::EndsWith(",expert-weights=" + c.cost_spec.substr(c.cost_spec.rfind('=') + 1)));
  // A share every step saturates is a multiple of the steps, which base already is: the term
  // cannot be told apart, and the fit goes on without it rather than fail.
  ReplayEstimate saturated = estimate;
  for (StepEstimate& e : saturated.steps) e.expert_share = 1;
  const Calibration flat =
      calibrate(run, {.replicas_step_together = false, .routed_experts = 16, .experts_per_token = 2}, saturated);
  REQUIRE(flat.terms.size() == 5);
  CHECK_FALSE(flat.terms[4].kept);
  CHECK(flat.terms[4].why == "cannot be told apart from the other terms in these ticks");
  // A dense model's fit has no such term, and its spec does not name it.
  const Calibration dense = calibrate(run, {}, estimate);
  CHECK(dense.terms.size() == 4);
  CHECK_THAT(dense.cost_spec, !Catch::Contains("expert-weights"));
  CHECK(dense.residual_rms_s > c.residual_rms_s);  // its decode-seq term is linear in the decodes
  std::filesystem::remove_all(dir);
}

TEST_CASE("calibrate: a request preempted between its first and last token is not counted as decoding") {
  // Four requests, all queued at 0 (monotonic 1000), first token at 0.5 s, last at 10.5 s.
  // From 5 s on, two of them are preempted and wait: vLLM's running count (timeseries.csv) is
  // 4 up to the tick ending at 5 s and 2 after. Each tick's generated tokens follow the rule
  //   1 s = S x 10 ms + P x 50 us,  S = (1 - P x 50 us) / 10 ms steps,  G = S x (requests decoding),
  // with 4 decoding from 1 s to 6 s (the tick ending at 6 s starts with 4 running) and 3 after: the
  // bound is the larger running count at a tick's two ends plus one (the snapshot can be a
  // step old), 2 + 1; the ticks are generated at that bound, as if one of the two resumed
  // after each snapshot, so that the fit is exact. The ticks' spans say 4 throughout; bounded at 3, the fit gives back
  // 10 ms and 50 us exactly; read as 4 it would see a third fewer steps in ticks 7 to 10.
  const auto dir = test::scratch_dir("calibrate-preempted");
  std::filesystem::create_directories(dir);
  {
    write_four_decoding_requests(dir);
    std::ofstream ticks(dir / "timeseries.csv");
    // Written as newer recorders write it: prompt_throughput also credits the 700 tokens a
    // tick the prefix cache served (prompt_cached_throughput); only the computed ones
    // (prompt_compute_throughput) take step time. The two preemptions are in the tick ending at 6 s.
    ticks << "t,prompt_throughput,prompt_compute_throughput,prompt_cached_throughput,gen_throughput,running,waiting,"
             "preempted,kv_cache_pct\n";
    for (int t = 1; t <= 10; ++t) {
      const double p = 1000.0 * (t % 3) + 300.0 * (t % 2);
      const double decoding = t == 1 ? 2 : t <= 6 ? 4 : 3;  // tick 1: 4 decode from 0.5 s
      const double steps = (1.0 - p * 50e-6) / 0.010;
      const double first_tokens = t == 1 ? 4 : 0;
      ticks << t << ".0," << p + 700 << "," << p << ",700," << std::setprecision(17) << steps * decoding + first_tokens
            << "," << (t <= 5 ? 4 : 2) << "," << (t <= 5 ? 0 : 2) << "," << (t == 6 ? 2 : 0) << ",0.0\n";
    }
  }
  const MeasuredRun run = read_measured_run(dir.string(), std::nullopt, false);
  CHECK(run.preemptions_recorded);
  CHECK(run.preemptions == 2);
  const Calibration c = calibrate(run);
  // Every tick is busy throughout; in the first, 4 decode for half of it.
  REQUIRE(c.ticks.size() == 10);
  CHECK(c.ticks[0].decoding_mean == Approx(2.0));
  for (const CalibrationTick& t : c.ticks) {
    if (t.t_s == 1) continue;
    INFO("tick ending at " << t.t_s);
    CHECK(t.decoding_mean == Approx(t.t_s <= 6 ? 4.0 : 3.0));
    CHECK(t.bounded_by_running == (t.t_s > 6));
    // Context: 100 prompt tokens + 1 + 100 x (mid-tick - 0.5) / 10 per request, for the
    // decoders counted (tick ending at 8: 100 + 1 + 100 x 7 / 10 = 171, x 3).
    CHECK(t.context_mean == Approx(t.decoding_mean * (101 + 10 * (t.t_s - 0.5 - 0.5))));
  }
  CHECK(c.terms[0].seconds == Approx(0.010).epsilon(1e-6));
  CHECK(c.terms[1].seconds == Approx(50e-6).epsilon(1e-6));
  CHECK(c.residual_max_s < 1e-6);
  // The same timeseries saying no request was ever preempted: no bound, the spans count.
  {
    std::string text = test::slurp(dir / "timeseries.csv");
    std::string out;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("6.0,", 0) == 0) line.replace(line.rfind(",2,"), 3, ",0,");
      out += line + "\n";
    }
    std::ofstream(dir / "timeseries.csv") << out;
  }
  const MeasuredRun calm = read_measured_run(dir.string(), std::nullopt, false);
  CHECK(calm.preemptions == 0);
  for (const CalibrationTick& t : calibrate(calm).ticks) {
    CHECK_FALSE(t.bounded_by_running);
    if (t.t_s > 1) CHECK(t.decoding_mean == Approx(4.0));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("calibrate: where a replay's steps decode fewer requests than their spans count, the fit takes the replay's") {
  // The run above, except that from 5 s on the two preempted requests stay waiting to the end:
  // 2 decode in the ticks ending at 7 to 10 s, while vLLM's running count still says 2 (the
  // bound, 2 + 1, would take 3) and the spans say 4. Ticks generated by the rule
  //   1 s = S x 10 ms + P x 50 us,  G = S x (requests decoding).
  // A replay of the run that preempted as the run did decodes, in its mean step of those ticks,
  // half the requests its own spans count, and reads half their positions: StepEstimate's
  // ratios 0.5, and 1 elsewhere. With them the fit gives back 10 ms and 50 us exactly.
  const auto dir = test::scratch_dir("calibrate-replay-decoding");
  std::filesystem::create_directories(dir);
  {
    write_four_decoding_requests(dir);
    std::ofstream ticks(dir / "timeseries.csv");
    ticks << "t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct\n";
    for (int t = 1; t <= 10; ++t) {
      const double p = 1000.0 * (t % 3) + 300.0 * (t % 2);
      const double decoding = t == 1 ? 2 : t <= 6 ? 4 : 2;
      const double steps = (1.0 - p * 50e-6) / 0.010;
      const double first_tokens = t == 1 ? 4 : 0;
      ticks << t << ".0," << p << "," << std::setprecision(17) << steps * decoding + first_tokens << ","
            << (t <= 5 ? 4 : 2) << "," << (t <= 5 ? 0 : 2) << ",0.0\n";
    }
  }
  const MeasuredRun run = read_measured_run(dir.string(), std::nullopt, false);
  // Without a replay: bounded at 3 in the ticks ending at 7 to 10 s, a third too few steps there.
  const Calibration bounded = calibrate(run);
  CHECK(bounded.residual_max_s > 0.01);
  ReplayEstimate estimate;
  for (const MeasuredTick& m : run.ticks) {
    StepEstimate e;
    e.decoding_ratio = e.context_ratio = m.t_s > 6 ? 0.5 : 1.0;
    estimate.steps.push_back(e);
  }
  const Calibration c = calibrate(run, {}, estimate);
  REQUIRE(c.ticks.size() == 10);
  for (const CalibrationTick& t : c.ticks) {
    if (t.t_s == 1) continue;
    INFO("tick ending at " << t.t_s);
    CHECK(t.decoding_mean == Approx(t.t_s <= 6 ? 4.0 : 2.0));
    CHECK_FALSE(t.bounded_by_running);
    CHECK(t.context_mean == Approx(t.decoding_mean * (101 + 10 * (t.t_s - 0.5 - 0.5))));
  }
  CHECK(c.terms[0].seconds == Approx(0.010).epsilon(1e-6));
  CHECK(c.terms[1].seconds == Approx(50e-6).epsilon(1e-6));
  CHECK(c.residual_max_s < 1e-6);
  std::filesystem::remove_all(dir);
}

TEST_CASE("calibrate: the requests decoding in a tick, and the positions they read, from first token to last") {
  // Two requests on the monotonic clock: a from 1.0 to 3.0 s (input 10, output 21: context
  // 11 at its first token, 30 at its last, a position every 0.1 s), b from 2.5 to 2.5 s (one
  // output token: no decode) and an untimed c. Over (2, 3]: a decodes all of it at a mean
  // context of 10 + 1 + 20 x 1.5 / 2 = 26, b's first token falls in it.
  std::vector<MeasuredRequest> requests(3);
  requests[0].input_tokens = 10, requests[0].output_tokens = 21, requests[0].first_token_s = 1.0, requests[0].last_token_s = 3.0;
  requests[1].input_tokens = 5, requests[1].output_tokens = 1, requests[1].first_token_s = 2.5, requests[1].last_token_s = 2.5;
  requests[2].timed = false, requests[2].first_token_s = 2.2, requests[2].last_token_s = 9.0;
  const DecodingIntegrals in = decoding_integrals(requests, 2.0, 3.0);
  CHECK(in.decoding == Approx(1.0));
  CHECK(in.context == Approx(26.0));
  CHECK(in.first_tokens == 1);
  // (0.5, 1.5]: half of a's span, at a mean context of 10 + 1 + 20 x 0.25 / 2 = 13.5.
  const DecodingIntegrals early = decoding_integrals(requests, 0.5, 1.5);
  CHECK(early.decoding == Approx(0.5));
  CHECK(early.context == Approx(0.5 * 13.5));
  CHECK(early.first_tokens == 1);
}
