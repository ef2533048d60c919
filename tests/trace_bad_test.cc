// The corpus of bad traces (tests/data/traces/bad/): each one, read by `kvsim trace stats`,
// exits 1 with its own message naming the file and line, and never crashes.
#include <catch2/catch.hpp>

#include "kvsim/error.h"
#include "kvsim/trace.h"
#include "trace_test_util.h"

namespace {

struct BadCase {
  const char* file;
  int line;             // 0: the message is about the file as a whole
  const char* message;  // what the message must say after "FILE:LINE: "
};

const BadCase kCases[] = {
    {"wrong_type.csv", 3, "column 'prompt_tokens': expected a non-negative integer, got \"12x\""},
    {"negative.csv", 3, "column 'output_tokens': expected a non-negative integer, got a negative one: \"-5\""},
    {"missing_column.csv", 1, "missing column 'output_tokens'"},
    {"truncated_last_line.csv", 4,
     "expected 4 columns, as in the header, got 3 (the file ends in the middle of this line"},
    {"empty.csv", 0, "empty file"},
    {"header_only.csv", 0, "no requests in the file"},
    {"time_backwards.csv", 4, "column 'arrival': arrival 1 s is before the arrival 2 s on line 3"},
    {"malformed.jsonl", 2, "malformed JSON at column 48: syntax error while parsing object - unexpected end of input"},
    {"unknown_format.csv", 1, "unrecognised trace format: the first line \"when,how_long\" matches none of"},
    {"overflow.csv", 2, "column 'prompt_tokens': \"99999999999999999999\" is too large (does not fit in 64 bits)"},
    {"nan.csv", 2, "column 'arrival': expected seconds (a non-negative decimal number), got \"NaN\""},
    {"n_zero.csv", 3, "column 'n': expected at least 1 parallel sample, got \"0\""},
    {"cancel_before_arrival.csv", 2, "column 'cancel_at': cancellation at 1 s is before the arrival at 2 s"},
    {"unknown_column.csv", 1, "unknown column 'promt_tokens' (a native CSV trace has columns id, arrival,"},
    {"max_tokens_below_output.csv", 2, "column 'max_tokens': 256 is less than output_tokens 500"},
    {"service_times_out_of_order.csv", 2, "column 'first_token': 1.2 s is before start 1.5 s"},
    {"azure_bad_date.csv", 3,
     "column 'TIMESTAMP': expected a date and time such as \"2023-11-16 18:15:46.6805900\", got \"2023-11-31"},
    {"too_precise.csv", 2, "column 'arrival': \"1.0000000001\" is finer than 1 ns"},
    {"mooncake_bad_hash.jsonl", 1,
     "field 'hash_ids': expected an array of non-negative integers, found the string \"x\""},
    {"unknown_field.jsonl", 1, "field 'promt_tokens': unknown field"},
    {"lengths_without_rate.csv", 0, "this trace has lengths only, no arrival times"},
    {"too_many_hashes.csv", 2, "column 'prefix_hashes': 8 hashes, but a prompt of 100 tokens has only 7 blocks of 16"},
    {"burstgpt_all_failed.csv", 0, "no requests: all 2 rows are failed requests (0 response tokens)"},
    {"many_errors.csv", 0, "20 bad rows (reading stopped at the 20th)"},
};

}  // namespace

TEST_CASE("every bad trace gives its own message with file and line, and exit 1") {
  for (const auto& c : kCases) {
    const std::string path = kvsim::test::bad_trace(c.file);
    const std::string where = c.line > 0 ? path + ":" + std::to_string(c.line) + ": " : path + ": ";
    INFO(c.file);
    const auto r = kvsim::test::run_cli({"trace", "stats", path});
    CHECK(r.exit_code == 1);
    CHECK(r.out.empty());
    CHECK_THAT(r.err, Catch::StartsWith("kvsim: error: " + where + c.message));
    CHECK_THAT(r.err, !Catch::Contains("internal error"));
  }
}

TEST_CASE("the bad-trace corpus has a test for every file in it") {
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kvsim::test::bad_trace(""))) {
    ++files;
    bool listed = false;
    for (const auto& c : kCases) listed = listed || entry.path().filename() == c.file;
    INFO(entry.path().filename());
    CHECK(listed);
  }
  CHECK(files == std::size(kCases));
}

TEST_CASE("many bad rows: the first 20 are listed, each with its line") {
  const auto r = kvsim::test::run_cli({"trace", "stats", kvsim::test::bad_trace("many_errors.csv")});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("many_errors.csv:2: column 'prompt_tokens': expected a non-negative integer, got \"x1\""));
  CHECK_THAT(r.err, Catch::Contains("many_errors.csv:21: column 'prompt_tokens': expected a non-negative integer, got \"x20\""));
  CHECK_THAT(r.err, !Catch::Contains("\"x21\""));
}

TEST_CASE("trace commands reject bad usage with exit 2 and the usage line") {
  const auto no_file = kvsim::test::run_cli({"trace", "stats"});
  CHECK(no_file.exit_code == 2);
  CHECK_THAT(no_file.err, Catch::Contains("Usage: kvsim trace stats"));
  const auto bad_format = kvsim::test::run_cli({"trace", "stats", "x.csv", "--format", "excel"});
  CHECK(bad_format.exit_code == 2);
  CHECK_THAT(bad_format.err, Catch::Contains("--format: unknown trace format \"excel\""));
  const auto bad_rate = kvsim::test::run_cli({"trace", "stats", "x.csv", "--rate", "fast"});
  CHECK(bad_rate.exit_code == 2);
  CHECK_THAT(bad_rate.err, Catch::Contains("--rate: expected a positive decimal number of requests per second (no exponent), got \"fast\""));
  const auto unknown = kvsim::test::run_cli({"trace", "frobnicate"});
  CHECK(unknown.exit_code == 2);
  const auto missing = kvsim::test::run_cli({"trace", "stats", "/nonexistent/trace.csv"});
  CHECK(missing.exit_code == 1);
  CHECK_THAT(missing.err, Catch::Contains("/nonexistent/trace.csv: cannot open"));
  for (const char* sub : {"stats", "convert", "gen"}) {
    const auto help = kvsim::test::run_cli({"trace", sub, "--help"});
    CHECK(help.exit_code == 0);
    CHECK_THAT(help.out, Catch::Contains(std::string("Usage: kvsim trace ") + sub));
  }
  const auto list = kvsim::test::run_cli({"trace", "--help"});
  CHECK(list.exit_code == 0);
  CHECK_THAT(list.out, Catch::Contains("stats") && Catch::Contains("convert") && Catch::Contains("gen"));
}

TEST_CASE("mangled traces give InputError, never a crash or another exception") {
  // Valid traces in each format, cut, spliced and sprinkled with the characters parsers
  // trip on. A fixed-seed generator keeps the cases the same on every run.
  const std::string seeds[] = {
      "id,arrival,prompt_tokens,output_tokens,max_tokens,cancel_at,n,session,start,first_token,finish,"
      "prefix_block_tokens,prefix_hashes\n\"a,1\",0.5,100,20,64,1.75,2,\"s\",0.6,0.7,2,16,1 2 3\nb,1,7,0,,,1,,,,,,\n",
      "{\"id\":\"a\",\"arrival\":0.5,\"prompt_tokens\":100,\"output_tokens\":20,\"n\":2,\"prefix_block_tokens\":16,"
      "\"prefix_hashes\":[1,2]}\n{\"id\":7,\"arrival\":1,\"prompt_tokens\":3,\"output_tokens\":1,\"cancel_at\":null}\n",
      "TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:15:46.6805900,374,44\r\n"
      "2023-11-16 18:15:50.9951690,396,109\r\n",
      "{\"timestamp\": 0, \"input_length\": 1025, \"output_length\": 3, \"hash_ids\": [7, 8, 9]}\n"
      "{\"timestamp\": 3000, \"input_length\": 10, \"output_length\": 3, \"hash_ids\": [7]}\n",
      "{\"input_toks\": 4, \"output_toks\": 2, \"arrival_time_ns\": 10, \"input_tok_ids\": [1,2,3,4]}\n",
      "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,100,20,120,x\n6,G,3,0,3,y\n",
  };
  const std::string noise = ",\"{}[]:-.+0123456789eE\n\r \t\\axZT";
  std::uint64_t state = 12345;
  const auto rand = [&](std::uint64_t bound) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state >> 33) % bound;
  };
  int errors = 0;
  int accepted = 0;
  for (const auto& seed : seeds) {
    for (int round = 0; round < 300; ++round) {
      std::string text = seed;
      const int edits = 1 + static_cast<int>(rand(4));
      for (int e = 0; e < edits && !text.empty(); ++e) {
        const std::size_t at = rand(text.size());
        switch (rand(4)) {
          case 0: text.erase(at, 1 + rand(8)); break;
          case 1: text.insert(at, 1, noise[rand(noise.size())]); break;
          case 2: text.insert(at, text.substr(rand(text.size()), rand(20))); break;
          default: text.resize(at); break;
        }
      }
      const auto path = kvsim::test::write_file("mangled.txt", text);
      for (bool sort : {false, true}) {
        kvsim::TraceOptions options;
        options.sort = sort;
        options.synthetic_rate_per_s = 1;
        try {
          kvsim::read_trace(path, options);
          ++accepted;
        } catch (const kvsim::InputError&) {
          ++errors;
        } catch (const std::exception& e) {
          FAIL("not an InputError for " << text << ": " << e.what());
        }
      }
    }
  }
  CHECK(errors > 1000);
  CHECK(accepted > 100);
}
