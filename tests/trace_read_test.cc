// The trace readers: every format's values, exact times, streaming details (CRLF, BOM,
// lines longer than the read buffer), error collection and sorting.
#include <catch2/catch.hpp>

#include "civil_time.h"
#include "kvsim/error.h"
#include "kvsim/trace.h"
#include "kvsim/trace_gen.h"
#include "trace_test_util.h"

using namespace kvsim;
using test::write_file;

namespace {

constexpr std::int64_t kS = 1'000'000'000;

std::vector<Request> read(const std::string& path, TraceOptions options = {}) { return read_trace(path, options); }

}  // namespace

TEST_CASE("native CSV: named columns in any order, quoted ids, empty cells are absent") {
  const auto path = write_file(
      "all.csv",
      "session,id,prompt_tokens,arrival,output_tokens,max_tokens,cancel_after,n,start,first_token,finish,"
      "prefix_block_tokens,prefix_hashes\n"
      "s1,\"a,\"\"1\"\"\",100,1.5,20,64,0.25,2,1.6,1.7,2.5,16,11 22 33 44 55 66\n"
      ",b,5,2,0,,,,,,,,\n");
  const auto rs = read(path);
  REQUIRE(rs.size() == 2);
  const Request& a = rs[0];
  CHECK(a.id == "a,\"1\"");
  CHECK(a.session == "s1");
  CHECK(a.arrival_ns == 1'500'000'000);
  CHECK(a.prompt_tokens == 100);
  CHECK(a.output_tokens == 20);
  CHECK(a.max_tokens == 64);
  CHECK(a.cancel_ns == 1'750'000'000);  // arrival 1.5 s + 0.25 s
  CHECK(a.n == 2);
  CHECK(a.start_ns == 1'600'000'000);
  CHECK(a.first_token_ns == 1'700'000'000);
  CHECK(a.finish_ns == 2'500'000'000);
  CHECK(a.prefix_block_tokens == 16);
  CHECK(a.prefix_hashes == std::vector<std::uint64_t>{11, 22, 33, 44, 55, 66});
  const Request& b = rs[1];
  CHECK(b.id == "b");
  CHECK(b.arrival_ns == 2 * kS);
  CHECK(b.output_tokens == 0);
  CHECK_FALSE(b.max_tokens);
  CHECK_FALSE(b.cancel_ns);
  CHECK(b.n == 1);
  CHECK(b.session.empty());
  CHECK_FALSE(b.start_ns);
  CHECK(b.prefix_hashes.empty());
}

TEST_CASE("native CSV: CRLF, a byte-order mark, blank lines, spaces and no final line break") {
  const auto path = write_file("crlf.csv",
                               "\xEF\xBB\xBFid,arrival,prompt_tokens,output_tokens\r\n"
                               "1, 0 ,5,6\r\n\r\n"
                               "2,0.000000001,7,8");
  const auto rs = read(path);
  REQUIRE(rs.size() == 2);
  CHECK(rs[0].arrival_ns == 0);
  CHECK(rs[0].prompt_tokens == 5);
  CHECK(rs[1].id == "2");
  CHECK(rs[1].arrival_ns == 1);
  CHECK(rs[1].output_tokens == 8);
}

TEST_CASE("native CSV: rows spanning many read buffers arrive intact") {
  // 200,000 rows of about 30 bytes: several 1 MiB buffers, with rows cut at their ends.
  std::string text = "id,arrival,prompt_tokens,output_tokens\n";
  std::int64_t expected_prompt = 0;
  for (int i = 0; i < 200'000; ++i) {
    text += "req" + std::to_string(i) + "," + std::to_string(i) + ".25," + std::to_string(i % 997) + ",1\n";
    expected_prompt += i % 997;
  }
  auto reader = open_trace(write_file("big.csv", text));
  Request r;
  std::int64_t rows = 0;
  std::int64_t prompt = 0;
  while (reader->next(r)) {
    CHECK(r.id == "req" + std::to_string(rows));
    CHECK(r.arrival_ns == rows * kS + kS / 4);
    prompt += r.prompt_tokens;
    ++rows;
  }
  CHECK(rows == 200'000);
  CHECK(prompt == expected_prompt);
  CHECK(reader->bytes_read() == static_cast<std::int64_t>(text.size()));
  CHECK(reader->total_bytes() == static_cast<std::int64_t>(text.size()));
}

TEST_CASE("native JSONL: decimal seconds are exact, null is absent, ids may be numbers") {
  const auto path = write_file(
      "n.jsonl",
      "{\"id\": \"x\", \"arrival\": 3217.9951690, \"prompt_tokens\": 10, \"output_tokens\": 5, \"cancel_at\": null}\n"
      "\n"
      "{\"arrival\": 3218, \"id\": 7, \"prompt_tokens\": 32, \"output_tokens\": 1, \"n\": 3, \"session\": \"c\", "
      "\"prefix_block_tokens\": 16, \"prefix_hashes\": [18446744073709551615, 0], \"cancel_after\": 0.5, "
      "\"start\": 3218.1, \"first_token\": 3218.2, \"finish\": 3219}\n");
  const auto rs = read(path);
  REQUIRE(rs.size() == 2);
  // Through a double, 3217.9951690 s would not come out as a whole number of nanoseconds.
  CHECK(rs[0].arrival_ns == 3'217'995'169'000);
  CHECK_FALSE(rs[0].cancel_ns);
  CHECK(rs[1].id == "7");
  CHECK(rs[1].n == 3);
  CHECK(rs[1].session == "c");
  CHECK(rs[1].prefix_hashes == std::vector<std::uint64_t>{18'446'744'073'709'551'615ULL, 0});
  CHECK(rs[1].cancel_ns == 3'218'500'000'000);
  CHECK(rs[1].start_ns == 3'218'100'000'000);
  CHECK(rs[1].finish_ns == 3'219'000'000'000);
}

TEST_CASE("civil dates become exact day counts") {
  // Checked against Python's datetime.date arithmetic.
  CHECK(detail::days_from_civil(1970, 1, 1) == 0);
  CHECK(detail::days_from_civil(1969, 12, 31) == -1);
  CHECK(detail::days_from_civil(2000, 3, 1) == 11'017);
  CHECK(detail::days_from_civil(2023, 11, 16) == 19'677);
  CHECK(detail::days_from_civil(2024, 2, 29) == 19'782);
  std::int64_t ns = 0;
  REQUIRE(detail::parse_datetime_ns("1970-01-02 00:00:01.5", ns));
  CHECK(ns == 86'401'500'000'000);
  REQUIRE(detail::parse_datetime_ns("1970-01-02T01:00:01.5+01:00", ns));
  CHECK(ns == 86'401'500'000'000);
  REQUIRE(detail::parse_datetime_ns("1970-01-01 00:00:00Z", ns));
  CHECK(ns == 0);
  CHECK_FALSE(detail::parse_datetime_ns("2023-02-29 00:00:00", ns));  // not a leap year
  CHECK_FALSE(detail::parse_datetime_ns("2023-11-16 24:00:00", ns));
  CHECK_FALSE(detail::parse_datetime_ns("2023-11-16 18:15:46.", ns));
  CHECK_FALSE(detail::parse_datetime_ns("2023-11-16 18:15:46.12345678901", ns));  // finer than 1 ns
  CHECK(detail::parse_datetime_ns("2023-11-16 18:15:46.12345678900", ns));       // zeros are fine
}

TEST_CASE("Azure: arrival is the exact time since the first row, across day, month and year") {
  const auto path = write_file("azure.csv",
                               "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
                               "2023-11-16 18:15:46.6805900,374,44\r\n"
                               "2023-11-16 18:15:50.9951690,396,109\r\n"
                               "2023-12-31 23:59:59.9999999,1,2\r\n"
                               "2024-01-01 00:00:00.0000001,3,4\r\n"
                               "2024-02-28 23:00:00,5,6\r\n"
                               "2024-03-01 01:00:00,7,8\r\n");
  const auto rs = read(path);
  REQUIRE(rs.size() == 6);
  CHECK(rs[0].id == "1");
  CHECK(rs[0].arrival_ns == 0);
  CHECK(rs[0].prompt_tokens == 374);
  CHECK(rs[0].output_tokens == 44);
  // 50.9951690 - 46.6805900 = 4.3145790 s.
  CHECK(rs[1].arrival_ns == 4'314'579'000);
  CHECK(rs[1].id == "2");
  // New Year: 0.0000001 + 0.0000001 s = 200 ns apart.
  CHECK(rs[3].arrival_ns - rs[2].arrival_ns == 200);
  // 2024 is a leap year: Feb 28 23:00 to Mar 1 01:00 is 26 hours.
  CHECK(rs[5].arrival_ns - rs[4].arrival_ns == 26 * 3600 * kS);
  // From 2023-11-16 18:15:46.68059 to 2023-12-31 23:59:59.9999999: 45 days, 5:44:13.3194099.
  CHECK(rs[2].arrival_ns == (45 * 86'400 + 5 * 3600 + 44 * 60 + 13) * kS + 319'409'900);
  CHECK(rs[5].id == "6");
}

TEST_CASE("Mooncake: milliseconds, hash ids at 512 tokens per block, the last block partial") {
  const auto path = write_file("mc.jsonl",
                               "{\"timestamp\": 1500, \"input_length\": 1025, \"output_length\": 3, "
                               "\"hash_ids\": [7, 8, 9]}\n"
                               "{\"timestamp\": 3000, \"input_length\": 512, \"output_length\": 1, \"hash_ids\": [7]}\n");
  const auto rs = read(path);
  REQUIRE(rs.size() == 2);
  CHECK(rs[0].id == "1");
  CHECK(rs[0].arrival_ns == 1'500'000'000);
  CHECK(rs[0].prompt_tokens == 1025);  // two full blocks and one of a single token
  CHECK(rs[0].prefix_block_tokens == 512);
  CHECK(rs[0].prefix_hashes == std::vector<std::uint64_t>{7, 8, 9});
  CHECK(rs[1].arrival_ns == 3 * kS);
  CHECK(rs[1].prefix_hashes == std::vector<std::uint64_t>{7});
  // A fourth hash would describe tokens the prompt does not have.
  const auto bad = write_file("mc-bad.jsonl",
                              "{\"timestamp\": 0, \"input_length\": 1025, \"output_length\": 3, "
                              "\"hash_ids\": [1, 2, 3, 4]}\n");
  CHECK_THROWS_WITH(read(bad), Catch::Contains(":1: field 'hash_ids': 4 ids, but an input_length of 1025 tokens has 3"));
  // So would too few leave blocks without identity: Mooncake gives every block of the prompt one.
  const auto few = write_file("mc-few.jsonl",
                              "{\"timestamp\": 0, \"input_length\": 1025, \"output_length\": 3, \"hash_ids\": [1, 2]}\n");
  CHECK_THROWS_WITH(read(few), Catch::Contains(":1: field 'hash_ids': 2 ids, but an input_length of 1025 tokens has 3"));
  // And a key Mooncake does not have (here a misspelt hash_ids) is refused, not ignored.
  const auto extra = write_file("mc-extra.jsonl",
                                "{\"timestamp\": 0, \"input_length\": 512, \"output_length\": 1, \"hash_id\": [7]}\n");
  CHECK_THROWS_WITH(read(extra), Catch::Contains(":1: field 'hash_id': unknown field"));
}

TEST_CASE("BurstGPT: failed requests are dropped, or kept as cancelled at arrival") {
  const auto path = write_file("burst.csv",
                               "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                               "5.0000000004,ChatGPT,100,20,120,Conversation log\n"
                               "6.0000000005,ChatGPT,30,0,30,Conversation log\n"
                               "7,GPT-4,40,8,48,API log\n");
  const auto dropped = read(path);
  REQUIRE(dropped.size() == 2);
  CHECK(dropped[0].id == "1");
  CHECK(dropped[0].arrival_ns == 5 * kS);  // the tenth decimal (4) rounds down
  CHECK(dropped[1].id == "3");             // ids are row numbers, so they still match the file
  CHECK(dropped[1].prompt_tokens == 40);

  TraceOptions keep;
  keep.keep_failed = true;
  const auto kept = read(path, keep);
  REQUIRE(kept.size() == 3);
  CHECK(kept[1].id == "2");
  CHECK(kept[1].arrival_ns == 6 * kS + 1);  // the tenth decimal (5) rounds up
  CHECK(kept[1].output_tokens == 0);
  CHECK(kept[1].cancel_ns == kept[1].arrival_ns);
  CHECK_FALSE(kept[0].cancel_ns);
}

TEST_CASE("Vidur: arrived_at seconds printed from doubles round to the nanosecond") {
  const auto path = write_file("vidur.csv",
                               "arrived_at,num_prefill_tokens,num_decode_tokens,extra\n"
                               "0.1,3772,54,x\n"
                               "4.3145790000000005,2015,156,y\n");
  const auto rs = read(path);
  REQUIRE(rs.size() == 2);
  CHECK(detect_trace_format(path) == TraceFormat::vidur);
  CHECK(rs[0].arrival_ns == 100'000'000);
  CHECK(rs[1].arrival_ns == 4'314'579'000);
  CHECK(rs[1].prompt_tokens == 2015);
  CHECK(rs[1].output_tokens == 156);
}

TEST_CASE("length-only traces need a rate, and then get the generator's Poisson arrivals") {
  std::string text = "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n";
  for (int i = 1; i <= 50; ++i) text += std::to_string(i * 10) + "," + std::to_string(i) + ",0,1.5\n";
  const auto path = write_file("lengths.csv", text);
  CHECK(detect_trace_format(path) == TraceFormat::lengths);
  CHECK_THROWS_WITH(read(path), Catch::Contains("lengths only") && Catch::Contains("--rate"));

  TraceOptions options;
  options.synthetic_rate_per_s = 2;
  options.synthetic_seed = 7;
  const auto rs = read(path, options);
  REQUIRE(rs.size() == 50);
  CHECK(rs[4].prompt_tokens == 50);
  CHECK(rs[4].output_tokens == 5);
  CHECK(rs[4].id == "5");
  // The same rate and seed as `trace gen --arrivals poisson:rate=2 --seed 7`.
  GenOptions gen;
  gen.seed = 7;
  gen.arrivals.rate_per_s = 2;
  gen.requests = 50;
  TraceGenerator generator(gen);
  Request g;
  for (const auto& r : rs) {
    REQUIRE(generator.next(g));
    CHECK(r.arrival_ns == g.arrival_ns);
  }
  CHECK(rs.back().arrival_ns > rs.front().arrival_ns);
}

TEST_CASE("token-id traces: chained prefix hashes over full blocks only") {
  // Block size 4. Record 2 shares record 1's first block only; record 3 has record 1's
  // second block's tokens but after a different first block, so chaining makes it differ.
  const auto path = write_file(
      "tok.jsonl",
      "{\"input_toks\": 10, \"output_toks\": 2, \"arrival_time_ns\": 10, "
      "\"input_tok_ids\": [1,2,3,4,5,6,7,8,9,10], \"output_tok_ids\": [100, 101]}\n"
      "{\"output_toks\": 1, \"arrival_time_ns\": 20, \"input_tok_ids\": [1,2,3,4,9,9,9,9,5], \"session_id\": 3}\n"
      "{\"output_toks\": 1, \"arrival_time_ns\": 20, \"input_tok_ids\": [9,9,9,9,5,6,7,8]}\n"
      "{\"input_toks\": 7, \"output_toks\": 1, \"arrival_time_ns\": 30}\n");
  TraceOptions options;
  options.hash_block_tokens = 4;
  const auto rs = read(path, options);
  REQUIRE(rs.size() == 4);
  CHECK(detect_trace_format(path) == TraceFormat::token_ids);
  CHECK(rs[0].arrival_ns == 10);
  CHECK(rs[0].prompt_tokens == 10);
  CHECK(rs[0].prefix_block_tokens == 4);
  REQUIRE(rs[0].prefix_hashes.size() == 2);  // 10 tokens: two full blocks, the rest unhashed
  CHECK(rs[1].prompt_tokens == 9);           // counted from the ids
  CHECK(rs[1].session == "3");
  REQUIRE(rs[1].prefix_hashes.size() == 2);
  CHECK(rs[1].prefix_hashes[0] == rs[0].prefix_hashes[0]);
  CHECK(rs[1].prefix_hashes[1] != rs[0].prefix_hashes[1]);
  REQUIRE(rs[2].prefix_hashes.size() == 2);
  CHECK(rs[2].prefix_hashes[0] != rs[0].prefix_hashes[0]);
  CHECK(rs[2].prefix_hashes[1] != rs[0].prefix_hashes[1]);
  CHECK(rs[3].prompt_tokens == 7);
  CHECK(rs[3].prefix_hashes.empty());

  const auto mismatch = write_file("tok-bad.jsonl",
                                   "{\"input_toks\": 3, \"output_toks\": 2, \"arrival_time_ns\": 10, "
                                   "\"input_tok_ids\": [1,2]}\n");
  CHECK_THROWS_WITH(read(mismatch), Catch::Contains(":1: field 'input_toks': 3 tokens, but input_tok_ids has 2"));
}

TEST_CASE("a line longer than the read buffer is read whole") {
  // About 2.4 MB of token ids on one line: the buffer has to grow past its 1 MiB.
  std::string ids;
  for (int i = 0; i < 400'000; ++i) {
    if (i > 0) ids += ',';
    ids += std::to_string(i % 50'000);
  }
  const auto path = write_file("long.jsonl", "{\"output_toks\": 1, \"arrival_time_ns\": 0, \"input_tok_ids\": [" +
                                                 ids + "]}\n{\"input_toks\": 5, \"output_toks\": 1, "
                                                 "\"arrival_time_ns\": 1}\n");
  const auto rs = read(path);
  REQUIRE(rs.size() == 2);
  CHECK(rs[0].prompt_tokens == 400'000);
  CHECK(rs[0].prefix_hashes.size() == 400'000 / 16);
  CHECK(rs[1].prompt_tokens == 5);
}

TEST_CASE("formats are detected from the header or the first record") {
  CHECK(detect_trace_format(write_file("d1.csv", "id,arrival,prompt_tokens,output_tokens\n1,0,1,1\n")) ==
        TraceFormat::native_csv);
  CHECK(detect_trace_format(write_file("d2.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\r\n")) ==
        TraceFormat::azure);
  CHECK(detect_trace_format(write_file(
            "d3.csv", "Timestamp,Session ID,Model,Request tokens,Response tokens,Total tokens,Log Type\n")) ==
        TraceFormat::burstgpt);
  CHECK(detect_trace_format(write_file("d4.jsonl", "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1}\n")) ==
        TraceFormat::mooncake);
  CHECK(detect_trace_format(write_file("d5.jsonl", "\n{\"id\": \"a\", \"arrival\": 0}\n")) == TraceFormat::native_jsonl);
  CHECK_THROWS_WITH(detect_trace_format(write_file("d6.csv", "a,b\n")), Catch::Contains("unrecognised trace format"));
  // traces/README.md: prompt_tokens and output_tokens alone are lengths (with --rate); with
  // id or arrival they are the native format, whose reader names what is missing.
  CHECK(detect_trace_format(write_file("d7.csv", "prompt_tokens,output_tokens\n10,5\n")) == TraceFormat::lengths);
  CHECK(detect_trace_format(write_file("d8.csv", "id,prompt_tokens,output_tokens\n1,10,5\n")) ==
        TraceFormat::native_csv);
  // A native column the lengths reader would drop names the format that keeps it, not
  // --format (which would only lead back here).
  TraceOptions rate;
  rate.synthetic_rate_per_s = 2;
  // An id column is kept when the file is read as lengths (the native reader, missing the
  // arrivals, points there): ids were replaced by row numbers.
  {
    TraceOptions lengths = rate;
    lengths.format = TraceFormat::lengths;
    const auto requests = read(write_file("d8b.csv", "id,prompt_tokens,output_tokens\nreq-a,100,10\nreq-b,200,20\n"), lengths);
    REQUIRE(requests.size() == 2);
    CHECK(requests[0].id == "req-a");
    CHECK(requests[1].id == "req-b");
    CHECK(requests[1].prompt_tokens == 200);
    CHECK_THROWS_WITH(read(write_file("d8c.csv", "id,prompt_tokens,output_tokens\n,100,10\n"), lengths),
                      Catch::Contains("d8c.csv:2: column 'id': expected a request id, got nothing"));
  }
  CHECK_THROWS_WITH(read(write_file("d9.csv", "prompt_tokens,output_tokens,max_tokens\n10,5,6\n"), rate),
                    Catch::Contains("d9.csv:1: column 'max_tokens'") &&
                        Catch::Contains("kvsim's native format keeps it, with id and arrival columns"));
  CHECK(parse_trace_format("mooncake", "--format") == TraceFormat::mooncake);
  CHECK(trace_format_name(TraceFormat::token_ids) == "token-ids");
  CHECK_THROWS_WITH(parse_trace_format("excel", "--format"), Catch::Contains("--format") && Catch::Contains("azure"));
}

TEST_CASE("a reader returns the good rows, then throws the bad ones together") {
  const auto path = write_file("mixed.csv",
                               "id,arrival,prompt_tokens,output_tokens\n"
                               "a,0,1,1\n"
                               "b,1,x,1\n"
                               "c,2,3,1\n"
                               "d,3,4,-1\n"
                               "e,4,5,1\n");
  auto reader = open_trace(path);
  Request r;
  std::vector<std::string> ids;
  try {
    while (reader->next(r)) ids.push_back(r.id);
    FAIL("no error thrown");
  } catch (const InputError& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("2 bad rows"));
    CHECK_THAT(what, Catch::Contains("mixed.csv:3: column 'prompt_tokens'"));
    CHECK_THAT(what, Catch::Contains("mixed.csv:5: column 'output_tokens'"));
  }
  CHECK(ids == std::vector<std::string>{"a", "c", "e"});
}

TEST_CASE("a reader stops at max_errors bad rows") {
  std::string text = "id,arrival,prompt_tokens,output_tokens\n";
  for (int i = 1; i <= 30; ++i) text += "r,0,bad" + std::to_string(i) + ",1\n";
  const auto path = write_file("many.csv", text);
  try {
    read(path);
    FAIL("no error thrown");
  } catch (const InputError& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("20 bad rows (reading stopped at the 20th)"));
    CHECK_THAT(what, Catch::Contains("many.csv:21: column 'prompt_tokens': expected a non-negative integer, got \"bad20\""));
    CHECK_THAT(what, !Catch::Contains("bad21"));
  }
  TraceOptions three;
  three.max_errors = 3;
  CHECK_THROWS_WITH(read(path, three), Catch::Contains("3 bad rows") && !Catch::Contains("bad4\""));
}

TEST_CASE("sorting accepts arrivals out of order, and Azure rows before the first shift the trace") {
  const auto path = write_file("unordered.csv",
                               "id,arrival,prompt_tokens,output_tokens,cancel_at\n"
                               "a,5,1,1,6\n"
                               "b,1,1,1,\n"
                               "c,5,1,1,\n"
                               "d,0.5,1,1,\n");
  CHECK_THROWS_WITH(read(path), Catch::Contains("unordered.csv:3: column 'arrival': arrival 1 s is before the arrival 5 s on line 2"));
  TraceOptions sorted;
  sorted.sort = true;
  const auto rs = read(path, sorted);
  REQUIRE(rs.size() == 4);
  CHECK(rs[0].id == "d");
  CHECK(rs[1].id == "b");
  CHECK(rs[2].id == "a");  // a tie keeps file order
  CHECK(rs[3].id == "c");
  CHECK(rs[2].cancel_ns == 6 * kS);

  const auto azure = write_file("azure-unordered.csv",
                                "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                "2023-11-16 18:00:10,1,1\n"
                                "2023-11-16 18:00:00,2,2\n");
  const auto az = read(azure, sorted);
  REQUIRE(az.size() == 2);
  CHECK(az[0].prompt_tokens == 2);
  CHECK(az[0].arrival_ns == 0);
  CHECK(az[1].arrival_ns == 10 * kS);
}

TEST_CASE("the real Azure trace reads exactly") {
  KVSIM_REQUIRE_SHARED_TRACE(path, "azure2023/AzureLLMInferenceTrace_conv.csv");
  const auto rs = read(path);
  REQUIRE(rs.size() == 19'366);
  CHECK(rs[1].arrival_ns == 4'314'579'000);
  // The last row, 2023-11-16 19:14:08.4025270, minus the first, 18:15:46.6805900.
  CHECK(rs.back().arrival_ns == 3'501'721'937'000);
  CHECK(rs.back().id == "19366");
}

TEST_CASE("JSONL values of the wrong kind are named with their field") {
  const auto path = write_file("kinds.jsonl",
                               "{\"id\":\"a\",\"arrival\":1e3,\"prompt_tokens\":1,\"output_tokens\":1}\n"
                               "{\"id\":\"b\",\"arrival\":1,\"prompt_tokens\":\"7\",\"output_tokens\":1}\n"
                               "{\"id\":\"c\",\"arrival\":2,\"prompt_tokens\":99999999999999999999,\"output_tokens\":1}\n"
                               "[1]\n"
                               "{\"id\":\"d\",\"arrival\":3,\"prompt_tokens\":1,\"output_tokens\":1,\"id\":\"e\"}\n"
                               "{\"id\":\"f\",\"arrival\":4,\"prompt_tokens\":1}\n");
  try {
    read(path);
    FAIL("no error thrown");
  } catch (const InputError& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("kinds.jsonl:1: field 'arrival': expected seconds (a non-negative number), got 1e3 "
                                     "(write it without an exponent)"));
    CHECK_THAT(what, Catch::Contains("kinds.jsonl:2: field 'prompt_tokens': expected a non-negative integer, got the "
                                     "string \"7\""));
    CHECK_THAT(what, Catch::Contains("kinds.jsonl:3: field 'prompt_tokens': 99999999999999999999 is too large"));
    CHECK_THAT(what, Catch::Contains("kinds.jsonl:4: expected a JSON object on each line"));
    CHECK_THAT(what, Catch::Contains("kinds.jsonl:5: field 'id': appears twice in this record"));
    CHECK_THAT(what, Catch::Contains("kinds.jsonl:6: field 'output_tokens': missing from this record"));
  }
}
