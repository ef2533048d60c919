// Trace statistics: a small trace computed by hand, the percentile definition, and the
// figures of the real production traces (issue 3 and ../shared/traces/README.md).
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "kvsim/trace.h"
#include "kvsim/trace_stats.h"
#include "cli_util.h"
#include "trace_test_util.h"

using namespace kvsim;

TEST_CASE("nearest-rank percentiles") {
  const std::vector<std::int64_t> ten = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  CHECK(nearest_rank_percentile(ten, 50) == 5);   // ceil(0.5 * 10) = 5th
  CHECK(nearest_rank_percentile(ten, 90) == 9);   // 9th
  CHECK(nearest_rank_percentile(ten, 99) == 10);  // ceil(9.9) = 10th
  CHECK(nearest_rank_percentile(ten, 100) == 10);
  CHECK(nearest_rank_percentile({1, 2}, 50) == 1);
  CHECK(nearest_rank_percentile({7}, 99) == 7);
}

TEST_CASE("statistics of a small trace, computed by hand") {
  // Arrivals 0, 1, 3, 6 s: gaps 1, 2, 3 s, mean 2, population sd sqrt(2/3).
  // Prefix hashes at 2 tokens per block: a [1 2], b [1 3], c [1 2 4], d none.
  // Seen before: b's 1; c's 1 and 2: 3 of 7 blocks, 6 tokens (each a full block of 2).
  const auto path = test::write_file("small.csv",
                                     "id,arrival,prompt_tokens,output_tokens,max_tokens,cancel_at,n,session,"
                                     "prefix_block_tokens,prefix_hashes\n"
                                     "a,0,4,10,,,1,x,2,1 2\n"
                                     "b,1,3,20,30,,3,x,2,1 3\n"
                                     "c,3,6,30,,4,1,y,2,1 2 4\n"
                                     "d,6,40,40,,,1,,,\n");
  auto reader = open_trace(path);
  const TraceStats s = compute_trace_stats(*reader);
  CHECK(s.requests == 4);
  CHECK(s.duration_ns == 6'000'000'000);
  CHECK(s.rate_per_s.value() == Approx(0.5));  // 3 gaps in 6 s
  CHECK(s.interarrival_cv.value() == Approx(std::sqrt(2.0 / 3.0) / 2.0));
  CHECK(s.prompt_tokens.mean == Approx(53.0 / 4));
  CHECK(s.prompt_tokens.min == 3);
  CHECK(s.prompt_tokens.p50 == 4);   // sorted 3 4 6 40: the 2nd
  CHECK(s.prompt_tokens.p90 == 40);  // the 4th
  CHECK(s.prompt_tokens.max == 40);
  CHECK(s.prompt_tokens.total == 53);
  CHECK(s.output_tokens.mean == Approx(25.0));
  CHECK(s.output_tokens.p50 == 20);
  CHECK(s.cancelled == 1);
  CHECK(s.with_max_tokens == 1);
  CHECK(s.parallel_requests == 1);
  CHECK(s.samples == 6);
  CHECK(s.session_requests == 3);
  CHECK(s.sessions == 2);
  CHECK(s.prefix_block_tokens == 2);
  CHECK(s.prefix_requests == 3);
  CHECK(s.prefix_blocks == 7);
  CHECK(s.prefix_blocks_seen == 3);
  CHECK(s.prefix_block_reuse() == Approx(3.0 / 7));
  CHECK(s.prefix_tokens == 13);
  CHECK(s.prefix_tokens_seen == 6);

  const auto text = format_trace_stats(s);
  CHECK_THAT(text, Catch::Contains("42.9% of 7 prompt blocks seen before (2 tokens per block)"));
  const auto j = nlohmann::json::parse(trace_stats_json(s));
  CHECK(j["requests"] == 4);
  CHECK(j["prompt_tokens"]["p90"] == 40);
  CHECK(j["prefix_blocks_seen"] == 3);
}

TEST_CASE("a trace whose arrivals fall at one instant has no rate, not a rate of 0") {
  // Four requests at t = 0: no gap between arrivals, so no mean gap to invert.
  const auto path = test::write_file("burst.csv", "id,arrival,prompt_tokens,output_tokens\n1,0,100,10\n2,0,100,10\n"
                                                  "3,0,100,10\n4,0,100,10\n");
  auto reader = open_trace(path);
  const TraceStats s = compute_trace_stats(*reader);
  CHECK(s.requests == 4);
  CHECK(s.duration_ns == 0);
  CHECK_FALSE(s.rate_per_s.has_value());
  CHECK_FALSE(s.interarrival_cv.has_value());
  auto r = test::run_cli({"trace", "stats", path, "--json"});
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["stats"]["rate_per_s"].is_null());
  CHECK(j["stats"]["interarrival_cv"].is_null());
  r = test::run_cli({"trace", "stats", path});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("n/a (every arrival at one instant)"));
  CHECK_THAT(r.out, !Catch::Contains("0.000 requests/s"));
}

TEST_CASE("trace stats counts samples and parallel requests in the singular when there is one") {
  // One request of n = 2 and one of n = 1: 1 request with n > 1 and 3 samples; a lone request
  // of n = 1: 0 requests with n > 1 and 1 sample.
  const auto two = test::write_file("one-parallel.csv", "id,arrival,prompt_tokens,output_tokens,n\n1,0,100,10,2\n2,1,100,10,1\n");
  auto r = test::run_cli({"trace", "stats", two});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("1 request with n > 1; 3 samples in all"));
  const auto one = test::write_file("one-request.csv", "id,arrival,prompt_tokens,output_tokens\n1,0,100,10\n");
  r = test::run_cli({"trace", "stats", one});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("0 requests with n > 1; 1 sample in all"));
}

TEST_CASE("a partial last block that is reused counts only its tokens") {
  // Mooncake-style: 1025 tokens in blocks of 512 is 512 + 512 + 1; the second request
  // repeats all three hashes, reusing 1025 tokens.
  const auto path = test::write_file("partial.jsonl",
                                     "{\"timestamp\": 0, \"input_length\": 1025, \"output_length\": 1, "
                                     "\"hash_ids\": [1, 2, 3]}\n"
                                     "{\"timestamp\": 1, \"input_length\": 1025, \"output_length\": 1, "
                                     "\"hash_ids\": [1, 2, 3]}\n");
  auto reader = open_trace(path);
  const TraceStats s = compute_trace_stats(*reader);
  CHECK(s.prefix_blocks == 6);
  CHECK(s.prefix_blocks_seen == 3);
  CHECK(s.prefix_tokens_seen == 1025);
  CHECK(s.prefix_token_reuse() == Approx(0.5));
}

TEST_CASE("a hash is a prefix of its own block size: 16- and 32-token blocks never match") {
  // 1 and 3 in blocks of 16 tokens; 2 in blocks of 32 (traces/README.md: each request's hashes
  // are of its own prefix_block_tokens). 2's hash 1 names tokens [0, 32), not 1's [0, 16):
  // seen before are 3's four blocks only, 4 of 10 blocks and 64 of 192 tokens.
  const auto path = test::write_file("mixed-blocks.csv",
                                     "id,arrival,prompt_tokens,output_tokens,prefix_block_tokens,prefix_hashes\n"
                                     "1,0,64,5,16,1 2 3 4\n"
                                     "2,1,64,5,32,1 2\n"
                                     "3,2,64,5,16,1 2 3 4\n");
  auto reader = open_trace(path);
  const TraceStats s = compute_trace_stats(*reader);
  CHECK(s.prefix_blocks == 10);
  CHECK(s.prefix_blocks_seen == 4);
  CHECK(s.prefix_tokens_seen == 64);
  const auto j = nlohmann::json::parse(trace_stats_json(s));
  CHECK(j["prefix_block_tokens"].is_null());  // mixed: the table says so
  CHECK(j["prefix_block_reuse"].get<double>() == Approx(0.4));
  CHECK_THAT(format_trace_stats(s), Catch::Contains("mixed block sizes"));
  // No hashes at all: no reuse figure, null rather than 0.
  auto plain = open_trace(test::write_file("no-hashes.csv", "id,arrival,prompt_tokens,output_tokens\n1,0,64,5\n"));
  const auto k = nlohmann::json::parse(trace_stats_json(compute_trace_stats(*plain)));
  CHECK(k["prefix_block_tokens"].is_null());
  CHECK(k["prefix_block_reuse"].is_null());
  CHECK(k["prefix_token_reuse"].is_null());
}

TEST_CASE("token ids hashed at a block larger than a prompt: its tokens still count, none as seen") {
  // Blocks of 4: A (6 tokens) and B (6, the same first 4) have one full block each, C (3
  // tokens) none. Seen before: B's block, 4 tokens of all 6 + 6 + 3 = 15 prompt tokens, not
  // of A's and B's 12 alone.
  const auto path = test::write_file("short-ids.jsonl",
                                     "{\"input_toks\": 6, \"output_toks\": 1, \"arrival_time_ns\": 0, "
                                     "\"input_tok_ids\": [1, 2, 3, 4, 5, 6]}\n"
                                     "{\"input_toks\": 6, \"output_toks\": 1, \"arrival_time_ns\": 1, "
                                     "\"input_tok_ids\": [1, 2, 3, 4, 9, 9]}\n"
                                     "{\"input_toks\": 3, \"output_toks\": 1, \"arrival_time_ns\": 2, "
                                     "\"input_tok_ids\": [1, 2, 3]}\n");
  auto r = test::run_cli({"trace", "stats", path, "--hash-block-tokens", "4", "--json"});
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  const auto& stats = j.contains("stats") ? j["stats"] : j;
  CHECK(stats["prefix_requests"] == 3);
  CHECK(stats["prefix_tokens"] == 15);
  CHECK(stats["prefix_tokens_seen"] == 4);
  // At blocks of 8 no prompt has a full block: 0 of 15 tokens, said in words.
  r = test::run_cli({"trace", "stats", path, "--hash-block-tokens", "8"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("no prompt holds a full block of 8 tokens"));
}

TEST_CASE("a block is seen before only when its whole prefix was") {
  // Hashes of each block's contents alone: B's second block has A's second block's hash (2)
  // but follows a different first block (9 against 1), so it holds other KV. C repeats A.
  // Seen before: C's two blocks only (B's second is not), 2 of 6 blocks, 2 x 512 tokens.
  const auto path = test::write_file("content-hashes.jsonl",
                                     "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 1, "
                                     "\"hash_ids\": [1, 2]}\n"
                                     "{\"timestamp\": 1, \"input_length\": 1024, \"output_length\": 1, "
                                     "\"hash_ids\": [9, 2]}\n"
                                     "{\"timestamp\": 2, \"input_length\": 1024, \"output_length\": 1, "
                                     "\"hash_ids\": [1, 2]}\n");
  auto reader = open_trace(path);
  const TraceStats s = compute_trace_stats(*reader);
  CHECK(s.prefix_blocks == 6);
  CHECK(s.prefix_blocks_seen == 2);
  CHECK(s.prefix_tokens_seen == 1024);
}

TEST_CASE("the Azure 2023 conversation trace: the figures of issue 3") {
  KVSIM_REQUIRE_SHARED_TRACE(path, "azure2023/AzureLLMInferenceTrace_conv.csv");
  auto reader = open_trace(path);
  CHECK(reader->format() == TraceFormat::azure);
  const TraceStats s = compute_trace_stats(*reader);
  CHECK(s.requests == 19'366);
  CHECK(s.prompt_tokens.mean == Approx(1154.7).margin(0.05));
  CHECK(s.prompt_tokens.max == 14'050);
  CHECK(s.output_tokens.mean == Approx(211.1).margin(0.05));
  CHECK(s.output_tokens.max == 1'000);
  // ../shared/traces/README.md: ~1 h, 5.5 req/s, prompt p99 4,142, output p99 601.
  CHECK(s.prompt_tokens.p99 == 4'142);
  CHECK(s.output_tokens.p99 == 601);
  CHECK(s.rate_per_s.value() == Approx(5.5).margin(0.05));
  CHECK(s.duration_ns > 3'400'000'000'000);
  CHECK(s.duration_ns < 3'600'000'000'000);

  const auto r = test::run_cli({"trace", "stats", path});
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("19,366") && Catch::Contains("1,154.7") && Catch::Contains("14,050") &&
                        Catch::Contains("211.1") && Catch::Contains("(azure)"));
}

TEST_CASE("the Azure 2023 code trace: bursty, as its README says") {
  KVSIM_REQUIRE_SHARED_TRACE(path, "azure2023/AzureLLMInferenceTrace_code.csv");
  auto reader = open_trace(path);
  const TraceStats s = compute_trace_stats(*reader);
  CHECK(s.requests == 8'819);
  CHECK(s.prompt_tokens.mean == Approx(2048).margin(0.5));
  CHECK(s.prompt_tokens.max == 7'437);
  CHECK(s.output_tokens.mean == Approx(28).margin(0.5));
  CHECK(s.output_tokens.max == 1'899);
  CHECK(s.interarrival_cv.value() > 2);  // a 217 s gap and 67 requests in one second
}

TEST_CASE("the Mooncake conversation trace: the figures of issue 3") {
  KVSIM_REQUIRE_SHARED_TRACE(path, "mooncake/conversation_trace.jsonl");
  auto reader = open_trace(path);
  CHECK(reader->format() == TraceFormat::mooncake);
  const TraceStats s = compute_trace_stats(*reader);
  CHECK(s.requests == 12'031);
  CHECK(s.prompt_tokens.mean == Approx(12'035.1).margin(0.05));
  CHECK(s.output_tokens.mean == Approx(342.6).margin(0.05));
  CHECK(s.prefix_block_tokens == 512);
  CHECK(s.prefix_block_reuse() == Approx(0.366).margin(0.0005));
  // README: "About 37% of prompt tokens are reusable by an unbounded prefix cache."
  CHECK(s.prefix_token_reuse() == Approx(0.37).margin(0.01));

  const auto r = test::run_cli({"trace", "stats", path, "--json"});
  CHECK(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["format"] == "mooncake");
  CHECK(j["stats"]["requests"] == 12'031);
  CHECK(j["stats"]["prefix_block_reuse"].get<double>() == Approx(0.366).margin(0.0005));
}

TEST_CASE("the Vidur lengths trace needs --rate, then reads") {
  KVSIM_REQUIRE_SHARED_TRACE(path, "vidur/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv");
  const auto without = test::run_cli({"trace", "stats", path});
  CHECK(without.exit_code == 1);
  CHECK_THAT(without.err, Catch::Contains("lengths only"));
  const auto with = test::run_cli({"trace", "stats", path, "--rate", "2", "--seed", "3", "--json"});
  CHECK(with.exit_code == 0);
  const auto j = nlohmann::json::parse(with.out);
  CHECK(j["stats"]["requests"] == 28'257);
  CHECK(j["stats"]["rate_per_s"].get<double>() == Approx(2).epsilon(0.05));
}

TEST_CASE("BurstGPT's dropped failed requests are counted by trace stats and replay, and only those read") {
  // Three rows; the second has 0 response tokens: a failed request, dropped unless --keep-failed.
  const std::string path = test::write_file("burst-dropped.csv",
                                            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                                            "5,ChatGPT,100,20,120,Conversation log\n"
                                            "6,ChatGPT,30,0,30,Conversation log\n"
                                            "7,GPT-4,40,8,48,API log\n");
  auto r = test::run_cli({"trace", "stats", path});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("requests           2\ndropped            1 failed requests (0 response tokens)"));
  r = test::run_cli({"trace", "stats", path, "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK(nlohmann::json::parse(r.out)["stats"]["dropped_failed_requests"] == 1);
  // Sorted (read whole, then replayed) the count is the same.
  r = test::run_cli({"trace", "stats", path, "--json", "--sort"});
  REQUIRE(r.exit_code == 0);
  CHECK(nlohmann::json::parse(r.out)["stats"]["dropped_failed_requests"] == 1);
  // Kept, none is dropped and no line says so.
  r = test::run_cli({"trace", "stats", path, "--keep-failed"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("requests           3\n") && !Catch::Contains("\ndropped "));
  // The first request alone: the read stops before the failed row, which nothing then drops.
  r = test::run_cli({"trace", "stats", path, "--json", "--requests", "1"});
  REQUIRE(r.exit_code == 0);
  CHECK(nlohmann::json::parse(r.out)["stats"]["dropped_failed_requests"] == 0);

  // A --time-window counts the failed rows inside it only. Failed at 1, 2, 7 and 8 s, served
  // at 5, 6 and 9 s: [5 s, 8 s) keeps 5 and 6 and drops 7 alone (1 and 2 are before it, 8 is
  // read only to find the window's end); kept, 7 is the third request.
  const std::string windowed = test::write_file("burst-window.csv",
                                                "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                                                "1,ChatGPT,472,0,490,Conversation log\n"
                                                "2,ChatGPT,100,0,100,Conversation log\n"
                                                "5,GPT-4,1000,200,1200,API log\n"
                                                "6,GPT-4,10,2,12,API log\n"
                                                "7,GPT-4,10,0,12,API log\n"
                                                "8,GPT-4,10,0,12,API log\n"
                                                "9,GPT-4,10,5,12,API log\n");
  r = test::run_cli({"trace", "stats", windowed, "--json", "--time-window", "5s..8s"});
  REQUIRE(r.exit_code == 0);
  CHECK(nlohmann::json::parse(r.out)["stats"]["requests"] == 2);
  CHECK(nlohmann::json::parse(r.out)["stats"]["dropped_failed_requests"] == 1);
  r = test::run_cli({"trace", "stats", windowed, "--json", "--time-window", "5s..8s", "--keep-failed"});
  REQUIRE(r.exit_code == 0);
  CHECK(nlohmann::json::parse(r.out)["stats"]["requests"] == 3);

  // A file name that is not UTF-8 goes into the JSON with U+FFFD for its bad byte, as text
  // output prints it, instead of an internal error.
  {
    const std::string odd = (std::filesystem::path(path).parent_path() / "bad\xffname.csv").string();
    std::filesystem::copy_file(path, odd, std::filesystem::copy_options::overwrite_existing);
    r = test::run_cli({"trace", "stats", odd, "--json"});
    REQUIRE(r.exit_code == 0);
    const std::string trace = nlohmann::json::parse(r.out)["trace"];
    CHECK(trace.find("bad\xef\xbf\xbdname.csv") != std::string::npos);
    r = test::run_cli({"replay", odd, "--json", "--quiet"});
    REQUIRE(r.exit_code == 0);
    CHECK(nlohmann::json::parse(r.out)["trace"].get<std::string>().find("bad\xef\xbf\xbdname.csv") != std::string::npos);
    std::filesystem::remove(odd);
  }

  // replay: once in its warnings (standard error and the JSON), however many allocators ran.
  r = test::run_cli({"replay", path, "--allocator", "paged,dynamic", "--json"});
  REQUIRE(r.exit_code == 0);
  const auto doc = nlohmann::json::parse(r.out);
  CHECK(doc["runs"][0]["requests"]["total"] == 2);
  CHECK(doc["runs"][0]["requests"]["dropped_failed"] == 1);
  CHECK(doc["runs"][1]["requests"]["dropped_failed"] == 1);
  const std::string warning = "1 failed requests (0 response tokens) of the trace were dropped";
  CHECK(std::count(doc["warnings"].begin(), doc["warnings"].end(), nlohmann::json(warning + " and are in no figure; "
                                                                                  "--keep-failed replays them as "
                                                                                  "cancelled at arrival")) == 1);
  CHECK_THAT(r.err, Catch::Contains("kvsim replay: warning: " + warning));
  r = test::run_cli({"replay", path, "--keep-failed", "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK(nlohmann::json::parse(r.out)["runs"][0]["requests"]["dropped_failed"] == 0);
  CHECK_THAT(r.err, !Catch::Contains("dropped"));
}
