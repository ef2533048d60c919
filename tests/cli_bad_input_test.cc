// The bad-input corpus for the command line (tests/data/cli/, plus 10 MB lines generated
// here): for every trace reader, malformed files (binary garbage, truncated UTF-8, numbers
// that overflow 64 bits, negative and NaN values, empty and header-only files, inconsistent
// column counts), each run through both `kvsim trace stats` and `kvsim replay` under a
// 20-second timeout, so that a hang fails the test. Each must exit 1 with its message, print
// nothing on stdout, and never crash, hang, report an internal error or a sanitizer finding.
// tests/trace_bad_test.cc's corpus (tests/data/traces/bad/) is replayed here too; its
// messages are checked there. Option errors exit 2 with the usage.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_util.h"
#include "kvsim/trace.h"

namespace {

using kvsim::test::CliResult;
using kvsim::test::run_cli;

constexpr int kTimeoutS = 20;

struct BadInput {
  const char* file;                // in tests/data/cli/
  std::vector<std::string> args;   // after the file, for both commands
  int line;                        // 0: the message is about the file as a whole
  const char* message;             // what follows "kvsim: error: FILE[:LINE]: "
};

std::string cli_data(const std::string& name) { return std::string(KVSIM_SOURCE_DIR) + "/tests/data/cli/" + name; }

const std::vector<std::string> kRate = {"--rate", "2"};

const BadInput kCases[] = {
    // Binary garbage: detection gives up on it; each reader named with --format refuses it.
    {"garbage.bin", {}, 1, "unrecognised trace format: the first line \"\\xA5M\\xCA\\x18%0"},
    {"garbage.bin", {"--format", "native-csv"}, 1, "unknown column '\\xA5M\\xCA\\x18%0"},
    {"garbage.bin", {"--format", "native-jsonl"}, 0, "2 bad rows:\n"},
    {"garbage.bin", {"--format", "azure"}, 1,
     "missing column 'TIMESTAMP' (Azure traces have columns TIMESTAMP,ContextTokens,GeneratedTokens)"},
    {"garbage.bin", {"--format", "burstgpt"}, 1, "missing column 'Timestamp'"},
    {"garbage.bin", {"--format", "mooncake"}, 0, "2 bad rows:\n"},
    {"garbage.bin", {"--format", "vidur"}, 1, "missing column 'arrived_at'"},
    {"garbage.bin", {"--format", "lengths", "--rate", "2"}, 1, "a trace of lengths needs a prompt column"},
    {"garbage.bin", {"--format", "token-ids"}, 0, "2 bad rows:\n"},
    // A trace of another format read as lengths only: the arrivals and the native columns
    // it would drop are refused at the header, not replaced by Poisson arrivals in silence.
    {"native-csv-huge-n.csv", {"--format", "lengths", "--rate", "2"}, 1,
     "column 'arrival': a trace of lengths takes its prompt and output lengths only (arrivals from --rate), so this "
     "column would be dropped"},
    {"vidur-nan.csv", {"--format", "lengths", "--rate", "2"}, 1, "column 'arrived_at': a trace of lengths"},

    // Truncated UTF-8: in a name (CSV cells must be text, as JSONL's are), in JSON, at the
    // end of a file cut short, in a byte-order mark.
    {"native-csv-truncated-utf8-id.csv", {}, 2, "column 'id': not valid UTF-8 at byte 4 of \"caf\\xC3\""},
    {"native-csv-truncated-utf8-at-end.csv", {}, 4,
     "expected 4 columns, as in the header, got 1 (the file ends in the middle of this line: was it cut short?)"},
    {"native-csv-truncated-bom.csv", {}, 1, "unknown column '\\xEF\\xBBid'"},
    {"native-jsonl-truncated-utf8.jsonl", {}, 1, "malformed JSON in the first record: cannot tell the trace's format"},
    {"native-jsonl-truncated-utf8.jsonl", {"--format", "native-jsonl"}, 1,
     "malformed JSON at column 12: syntax error while parsing value - invalid string: ill-formed UTF-8 byte; "
     "last read: '\"caf\\xC3\"'"},

    // Numbers that overflow 64 bits (as text, or as nanoseconds once scaled), and one that
    // fits but whose product with anything would not (n).
    {"native-csv-arrival-overflow.csv", {}, 2,
     "column 'arrival': \"9223372037\" seconds is too large (does not fit in 64-bit nanoseconds, about 292 years)"},
    {"native-csv-huge-n.csv", {}, 2, "column 'n': 9223372036854775807 parallel samples is implausible (at most 65536"},
    {"native-csv-huge-length.csv", {}, 2,
     "column 'prompt_tokens': 9223372036854775807 tokens is implausible (at most 1099511627776 are accepted)"},
    {"native-jsonl-huge-max-tokens.jsonl", {}, 1,
     "field 'max_tokens': 1099511627777 tokens is implausible (at most 1099511627776 are accepted)"},
    {"native-jsonl-overflow.jsonl", {}, 1, "field 'prompt_tokens': 18446744073709551616 is too large (does not fit in 64 bits)"},
    {"native-jsonl-int64-overflow.jsonl", {}, 1, "field 'prompt_tokens': 9223372036854775808 is too large (does not fit in 64 bits)"},
    {"azure-overflow.csv", {}, 2, "column 'ContextTokens': \"99999999999999999999\" is too large (does not fit in 64 bits)"},
    {"burstgpt-overflow.csv", {}, 2, "column 'Timestamp': \"99999999999.5\" seconds is too large"},
    {"mooncake-overflow.jsonl", {}, 1,
     "field 'timestamp': 9223372036854775807 milliseconds is too large (does not fit in 64-bit nanoseconds)"},
    {"mooncake-hash-overflow.jsonl", {}, 1, "field 'hash_ids': expected an array of non-negative integers, found 18446744073709551616"},
    {"vidur-overflow.csv", {}, 2, "column 'num_decode_tokens': \"18446744073709551616\" is too large (does not fit in 64 bits)"},
    {"lengths-overflow.csv", kRate, 2, "column 'num_prefill_tokens': \"100000000000000000000\" is too large"},
    {"token-ids-overflow.jsonl", {}, 1, "field 'arrival_time_ns': 18446744073709551616 nanoseconds is too large"},

    // Negative values, -0 included.
    {"native-csv-negative-zero.csv", {}, 2, "column 'arrival': expected seconds (a non-negative decimal number), got a negative one: \"-0\""},
    {"native-jsonl-negative.jsonl", {}, 1, "field 'output_tokens': expected a non-negative integer, got -5"},
    {"azure-negative.csv", {}, 2, "column 'GeneratedTokens': expected a non-negative integer, got a negative one: \"-44\""},
    {"burstgpt-negative.csv", {}, 2, "column 'Request tokens': expected a non-negative integer, got a negative one: \"-100\""},
    {"mooncake-negative.jsonl", {}, 1, "field 'timestamp': expected milliseconds (a non-negative number), got -1"},
    {"vidur-negative.csv", {}, 2, "column 'arrived_at': expected seconds (a non-negative decimal number), got a negative one: \"-0.5\""},
    {"lengths-negative.csv", kRate, 2, "column 'num_decode_tokens': expected a non-negative integer, got a negative one: \"-5\""},
    {"token-ids-negative.jsonl", {}, 1, "field 'input_tok_ids': expected an array of non-negative integers, found -2"},

    // NaN and infinity: not numbers in CSV; not even JSON in JSONL (unless quoted).
    {"native-csv-infinity.csv", {}, 2, "column 'arrival': expected seconds (a non-negative decimal number), got \"inf\""},
    {"native-jsonl-nan.jsonl", {"--format", "native-jsonl"}, 1,
     "malformed JSON at column 21: syntax error while parsing value - invalid literal; last read: '\"arrival\":N'"},
    {"native-jsonl-nan-string.jsonl", {}, 1, "field 'arrival': expected seconds (a non-negative number), got the string \"NaN\""},
    {"azure-nan.csv", {}, 2, "column 'TIMESTAMP': expected a date and time such as \"2023-11-16 18:15:46.6805900\", got \"NaN\""},
    {"burstgpt-nan.csv", {}, 2, "column 'Timestamp': expected seconds (a non-negative decimal number), got \"nan\""},
    {"mooncake-nan.jsonl", {}, 1, "malformed JSON in the first record: cannot tell the trace's format"},
    {"mooncake-nan.jsonl", {"--format", "mooncake"}, 1, "malformed JSON at column 15: syntax error while parsing value"},
    {"vidur-nan.csv", {}, 2, "column 'arrived_at': expected seconds (a non-negative decimal number), got \"NaN\""},
    {"lengths-nan.csv", kRate, 2, "column 'num_prefill_tokens': expected a non-negative integer, got \"nan\""},
    {"token-ids-nan.jsonl", {"--format", "token-ids"}, 1, "malformed JSON at column"},

    // Empty (or blank) and header-only files.
    {"native-jsonl-blank-lines-only.jsonl", {}, 0, "empty file: no header and no requests"},
    {"native-jsonl-blank-lines-only.jsonl", {"--format", "native-jsonl"}, 0, "no requests in the file"},
    {"azure-header-only.csv", {}, 0, "no requests in the file"},
    {"burstgpt-header-only.csv", {}, 0, "no requests in the file"},
    {"vidur-header-only.csv", {}, 0, "no requests in the file"},
    {"lengths-header-only.csv", kRate, 0, "no requests in the file"},

    // Rows whose column count differs from the header's.
    {"native-csv-extra-column.csv", {}, 3, "expected 4 columns, as in the header, got 5"},
    {"azure-column-count.csv", {}, 3, "expected 3 columns, as in the header, got 4"},
    {"burstgpt-column-count.csv", {}, 2, "expected 6 columns, as in the header, got 5"},
    {"vidur-column-count.csv", {}, 2, "expected 3 columns, as in the header, got 2"},
    {"lengths-column-count.csv", kRate, 2, "expected 2 columns, as in the header, got 3"},

    // Other mistakes readers must catch.
    {"native-jsonl-not-an-object.jsonl", {"--format", "native-jsonl"}, 1, "expected a JSON object on each line"},
    {"azure-before-first-row.csv", {}, 3, "column 'TIMESTAMP': arrival -1.68059 s is before the arrival 0 s on line 2"},
    {"token-ids-count-mismatch.jsonl", {}, 1, "field 'input_toks': 3 tokens, but input_tok_ids has 2"},
    // Mooncake gives one hash id per 512 prompt tokens: 1,025 tokens are ceil(1025 / 512) = 3
    // blocks, so 2 ids would leave the third block without identity.
    {"mooncake-hash-count.jsonl", {}, 1,
     "field 'hash_ids': 2 ids, but an input_length of 1025 tokens has 3 blocks of 512"},
    // A misspelt key would drop the prefix identity without a word.
    {"mooncake-unknown-key.jsonl", {}, 1,
     "field 'hash_id': unknown field (a mooncake record has fields timestamp, input_length, output_length, hash_ids)"},
    // A gzip file (its magic number 1F 8B) is named as such, not quoted byte by byte.
    {"compressed.csv.gz", {}, 1, "a compressed file (gzip, zstd, bzip2 or xz): kvsim reads traces as text"},
    // A native column in an imported format would be dropped.
    {"azure-native-column.csv", {}, 1, "column 'max_tokens': the Azure format has no such column, so it would be dropped"},
    {"vidur-native-column.csv", {}, 1, "column 'cancel_at': the Vidur format has no such column, so it would be dropped"},
};

// What every failing run must look like, whatever the input: exit 1 and one message, no
// output, no crash, no sanitizer report, no internal error.
void check_input_error(const CliResult& r, const std::string& starts_with) {
  CHECK(r.exit_code == 1);
  CHECK(r.out.empty());
  CHECK_THAT(r.err, Catch::StartsWith(starts_with));
  CHECK_THAT(r.err, !Catch::Contains("internal error") && !Catch::Contains("Sanitizer") &&
                        !Catch::Contains("runtime error"));
}

std::vector<std::string> command(std::initializer_list<std::string> head, const std::string& path,
                                 const std::vector<std::string>& args) {
  std::vector<std::string> out(head);
  out.push_back(path);
  out.insert(out.end(), args.begin(), args.end());
  return out;
}

// Runs `trace stats` and `replay` (the program's two readers of traces) on `path`.
void check_both(const std::string& path, const std::vector<std::string>& args, const std::string& starts_with) {
  {
    INFO("kvsim trace stats");
    check_input_error(run_cli(command({"trace", "stats"}, path, args), kTimeoutS), starts_with);
  }
  {
    INFO("kvsim replay");
    std::vector<std::string> replay_args = args;
    replay_args.insert(replay_args.end(), {"--quiet", "--allocator", "dense-static,dynamic,paged,sliding-window"});
    check_input_error(run_cli(command({"replay"}, path, replay_args), kTimeoutS), starts_with);
  }
}

}  // namespace

TEST_CASE("cli bad input: every malformed file exits 1 with its message, through trace stats and replay") {
  for (const BadInput& c : kCases) {
    const std::string path = cli_data(c.file);
    std::string args_text;
    for (const auto& a : c.args) args_text += " " + a;
    INFO(c.file << args_text);
    const std::string where = c.line > 0 ? path + ":" + std::to_string(c.line) + ": " : path + ": ";
    check_both(path, c.args, "kvsim: error: " + where + c.message);
  }
}

TEST_CASE("cli bad input: every registered trace format refuses binary garbage, with no row of its own needed") {
  // The rows above give each built-in format's own message; this covers a format added to
  // the registry (kvsim/trace_formats.def) before anyone writes its rows. A first line that
  // is not text fails every format: a CSV header names no column it knows, a JSON record
  // does not parse.
  const std::string path = cli_data("garbage.bin");
  for (const auto name : kvsim::trace_format_names()) {
    if (name == "auto") continue;
    INFO(name);
    check_both(path, {"--format", std::string(name)}, "kvsim: error: " + path);
  }
}

TEST_CASE("cli bad input: the corpus has a case for every file in it") {
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(cli_data(""))) {
    const std::string name = entry.path().filename().string();
    bool listed = false;
    for (const auto& c : kCases) listed = listed || name == c.file;
    INFO(name);
    CHECK(listed);
    ++files;
  }
  CHECK(files >= 40);
}

TEST_CASE("cli bad input: 10 MB single lines are read, rejected and quoted short, without hanging") {
  const auto dir = kvsim::test::scratch_dir("cli-bad-input");
  const std::size_t ten_mb = std::size_t{10} << 20;
  const auto write = [&](const std::string& name, const std::string& head, char fill, const std::string& tail) {
    const auto path = (dir / name).string();
    std::ofstream out(path, std::ios::binary);
    out << head << std::string(ten_mb, fill) << tail;
    return path;
  };
  const std::string size = std::to_string(ten_mb);
  {
    INFO("one 10 MB line, no line break: no format matches");
    const auto path = write("ten-mb-line.txt", "", 'x', "");
    check_both(path, {}, "kvsim: error: " + path + ":1: unrecognised trace format: the first line \"xxxx");
    check_both(path, {}, "kvsim: error: " + path + ":1: unrecognised trace format: the first line \"" +
                             std::string(40, 'x') + "..." + std::string(37, 'x') + "\" (" + size + " bytes)");
  }
  {
    INFO("a native CSV row whose prompt_tokens is 10 MB of digits");
    const auto path = write("ten-mb-number.csv", "id,arrival,prompt_tokens,output_tokens\na,0,", '7', ",5\n");
    check_both(path, {}, "kvsim: error: " + path + ":2: column 'prompt_tokens': \"" + std::string(40, '7') + "..." +
                             std::string(37, '7') + "\" (" + size + " bytes) is too large (does not fit in 64 bits)");
  }
  {
    INFO("a JSONL record with a 10 MB id that never ends");
    const auto path = write("ten-mb-string.jsonl", "{\"arrival\": 0, \"prompt_tokens\": 1, \"output_tokens\": 1, \"id\": \"", 'a', "");
    // nlohmann's message ends with the whole token it read: kept short, like kvsim's own.
    check_both(path, {"--format", "native-jsonl"},
               "kvsim: error: " + path + ":1: malformed JSON at column " + std::to_string(ten_mb + 63) +
                   ": syntax error while parsing value - invalid string: missing closing quote; last read: \"'\"" +
                   std::string(38, 'a') + "..." + std::string(36, 'a') + "'\" (" + std::to_string(ten_mb + 3) +
                   " bytes) (the file ends in the middle of this line: was it cut short?)\n");
  }
  {
    INFO("a 10 MB Azure row of commas");
    const auto path = write("ten-mb-commas.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n", ',', "\n");
    check_both(path, {}, "kvsim: error: " + path + ":2: expected 3 columns, as in the header, got " +
                             std::to_string(ten_mb + 1));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("cli bad input: the bad-trace corpus fails replay exactly as it fails trace stats") {
  // tests/trace_bad_test.cc checks each file's message through `trace stats`; replay reads
  // traces the same way and must stop at the same place with the same words.
  for (const auto& entry : std::filesystem::directory_iterator(std::string(KVSIM_SOURCE_DIR) + "/tests/data/traces/bad")) {
    const std::string path = entry.path().string();
    INFO(entry.path().filename());
    const auto stats = run_cli({"trace", "stats", path}, kTimeoutS);
    const auto replay = run_cli({"replay", path, "--quiet"}, kTimeoutS);
    check_input_error(stats, "kvsim: error: " + path);
    check_input_error(replay, "kvsim: error: " + path);
    CHECK(replay.err == stats.err);
  }
}

TEST_CASE("cli bad input: each bad config.json fails replay exactly as it fails size") {
  for (const auto& entry : std::filesystem::directory_iterator(std::string(KVSIM_SOURCE_DIR) + "/tests/data/configs/bad")) {
    const std::string path = entry.path().string();
    INFO(entry.path().filename());
    const auto size = run_cli({"size", "--config", path}, kTimeoutS);
    const auto replay = run_cli({"replay", std::string(KVSIM_SOURCE_DIR) + "/traces/chat-mix.csv", "--config", path, "--quiet"},
                                kTimeoutS);
    check_input_error(size, "kvsim: error: " + path);
    check_input_error(replay, "kvsim: error: " + path);
    CHECK(replay.err == size.err);
  }
}

TEST_CASE("cli bad input: a request whose bytes overflow 64 bits is an error, not a wrapped number") {
  // 65,536 samples of 2^40 - 5 tokens, each of Llama's 131,072 = 2^17 bytes: about 2^73 bytes.
  // Every length is within the readers' limits and the longest --max-model-len (2^40), so
  // nothing refuses the request: the replay must say it cannot count it.
  const auto dir = kvsim::test::scratch_dir("cli-bad-input");
  const std::string huge = (dir / "huge-request.csv").string();
  std::ofstream(huge) << "id,arrival,prompt_tokens,output_tokens,n\na,0,1099511627766,5,65536\n";
  for (const char* allocator : {"dense-static:reserve=oracle", "dynamic", "paged", "sliding-window"}) {
    INFO(allocator);
    check_input_error(run_cli({"replay", huge, "--quiet", "--allocator", allocator, "--max-model-len", "1099511627776"},
                              kTimeoutS),
                      "kvsim: error: " + huge + ": request #1 ('a'): n x (prompt + output tokens) x 131072 bytes per "
                                                "token overflows 64 bits");
  }
  // A short request, but a maximum length whose row of bytes would not fit in 64 bits: the
  // option is refused before any allocator is built (a row of 2^40 positions of 2^17 bytes,
  // 2^57, fits).
  const auto row = run_cli({"replay", std::string(KVSIM_SOURCE_DIR) + "/traces/chat-mix.csv", "--quiet", "--allocator",
                            "dense-static", "--max-model-len", "9223372036854775807"},
                           kTimeoutS);
  CHECK(row.exit_code == 2);
  CHECK(row.out.empty());
  CHECK_THAT(row.err, Catch::StartsWith("kvsim replay: --max-model-len: 9223372036854775807 tokens is implausible"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("cli bad input: Poisson arrivals for a trace of lengths that pass 2^63 ns are an error naming --rate") {
  // At --rate 0.000000001 a gap averages 10^9 s = 10^18 ns, so twenty rows pass the largest
  // 64-bit nanosecond (about 9.2 x 10^18) with near certainty; the clock must not wrap to
  // negative arrivals (which were then reported as unsorted rows of an 'arrival' column the
  // file does not have).
  const auto dir = kvsim::test::scratch_dir("cli-bad-input-rate");
  const std::string lengths = (dir / "lengths.csv").string();
  std::string rows = "num_prefill_tokens,num_decode_tokens\n";
  for (int i = 0; i < 20; ++i) rows += "10,5\n";
  std::ofstream(lengths) << rows;
  for (const bool sort : {false, true}) {
    std::vector<std::string> args{"replay", lengths, "--quiet", "--rate", "0.000000001"};
    if (sort) args.emplace_back("--sort");
    const auto r = run_cli(args, kTimeoutS);
    check_input_error(r, "kvsim: error: " + lengths + ":");
    CHECK_THAT(r.err, Catch::Contains("the Poisson arrivals at --rate 1e-09 requests per second pass the largest time "
                                      "kvsim represents (about 292 years)") &&
                          !Catch::Contains("arrival'"));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("cli bad input: option errors print the usage and exit 2") {
  const std::string trace = std::string(KVSIM_SOURCE_DIR) + "/traces/chat-mix.csv";
  struct UsageCase {
    std::vector<std::string> args;
    const char* message;   // after "kvsim <command>: "
    const char* synopsis;  // the usage line that must follow
  };
  const UsageCase cases[] = {
      {{"replay", trace, "--frobnicate"}, "unrecognised option '--frobnicate'", "Usage: kvsim replay TRACE"},
      {{"replay", trace, "--jobs", "many"}, "--jobs: expected a positive integer, got \"many\"", "Usage: kvsim replay TRACE"},
      // One allocator twice (its default block written out): two rows of one name.
      {{"replay", trace, "--allocator", "paged,paged:block=16"},
       "--allocator: 'paged' and 'paged:block=16' are the same allocator (paged:block=16): give it once",
       "Usage: kvsim replay TRACE"},
      {{"replay", trace, "--max-model-len", "-5"}, "--max-model-len: expected a positive integer, got \"-5\"",
       "Usage: kvsim replay TRACE"},
      // A trailing comma names no parameter, in every key=value list as in a list of numbers.
      {{"replay", trace, "--allocator", "paged:block=16,"},
       "--allocator: 'paged:block=16,': a ',' with nothing after it: expected an allocator or key=value",
       "Usage: kvsim replay TRACE"},
      {{"replay", trace, "--allocator", "paged,,paged"},
       "--allocator: 'paged,,paged': a ',' with nothing after it: expected an allocator or key=value",
       "Usage: kvsim replay TRACE"},
      {{"replay", trace, "--allocator", "paged:block=16,,prefix-caching=on"},
       "--allocator: 'paged:block=16,,prefix-caching=on': a ',' with nothing after it: expected an allocator or key=value",
       "Usage: kvsim replay TRACE"},
      {{"replay", trace, "--allocator", ",paged"},
       "--allocator: ',paged': a ',' with nothing before it: expected an allocator or key=value",
       "Usage: kvsim replay TRACE"},
      // Lengths are held to a trace's longest request, 2^40 tokens: beyond, sums overflowed.
      {{"replay", trace, "--default-max-tokens", "1099511627777"},
       "--default-max-tokens: 1099511627777 tokens is implausible (at most 2^40 = 1,099,511,627,776",
       "Usage: kvsim replay TRACE"},
      {{"replay", trace, "--max-model-len", "4611686018427387904"},
       "--max-model-len: 4611686018427387904 tokens is implausible", "Usage: kvsim replay TRACE"},
      {{"size", "--model", "llama-3.1-8b", "--device", "H100-80GB", "--weights-bytes", "0"},
       "--weights-bytes: expected a positive byte count", "Usage: kvsim size"},
      // The parameter's name is checked before its value, and roofline's list like the others.
      {{"replay", trace, "--cost", "linear:base=1ms,bogus=1"},
       "--cost: unknown parameter 'bogus' for linear (base, prefill-token, decode-seq, context-token, expert-weights)",
       "Usage: kvsim replay TRACE"},
      {{"replay", trace, "--cost", "roofline:overhead=1ms,overhead=2ms"},
       "--cost: 'overhead' is given twice (overhead=1ms and overhead=2ms): give it once", "Usage: kvsim replay TRACE"},
      {{"size", "--model", "llama-3.1-8b", "--kv-budget", "1GiB", "--check", "usual=2000,long=4000,concurrency=8,"},
       "--check: a ',' with nothing after it: expected key=value", "Usage: kvsim size"},
      {{"replay", trace, "--max-batched-tokens", "99999999999999999999"},
       "--max-batched-tokens: \"99999999999999999999\" is too large (the largest is 9223372036854775807)", "Usage: kvsim replay TRACE"},
      {{"replay", trace, "--max-running", "99999999999999999999x"},
       "--max-running: expected a positive integer, got \"99999999999999999999x\"", "Usage: kvsim replay TRACE"},
      {{"replay", trace, "--sample-every", "1e3"}, "--sample-every: expected a duration such as 250ms",
       "Usage: kvsim replay TRACE"},
      {{"replay", trace, "--rate", "NaN"}, "--rate: expected a positive decimal number of requests per second (no exponent), got \"NaN\"",
       "Usage: kvsim replay TRACE"},
      // Too large or too precise is said as such, not as "not a positive number".
      {{"replay", trace, "--device", "H100-80GB", "--watermark", "0.0000000001"},
       "--watermark: \"0.0000000001\" has more than 9 decimal places (fractions are kept in billionths)",
       "Usage: kvsim replay TRACE"},
      {{"replay", trace, "--rate", "9223372037"},
       "--rate: \"9223372037\" is too large (the largest is 9223372036 requests per second)", "Usage: kvsim replay TRACE"},
      {{"replay", trace, "--rate", "0.0000000001"},
       "--rate: \"0.0000000001\" has more than 9 decimal places (the rate is kept in billionths)",
       "Usage: kvsim replay TRACE"},
      {{"replay", trace, "--allocator", "paged:block=18446744073709551616"},
       "parameter 'block': \"18446744073709551616\" is too large (the largest is 9223372036854775807)",
       "Usage: kvsim replay TRACE"},
      {{"replay", trace, "--schedule", "sometimes"}, "--schedule: expected auto, simulate or measured, got \"sometimes\"",
       "Usage: kvsim replay TRACE"},
      {{"replay", trace, "--format", "excel"}, "--format: unknown trace format \"excel\"", "Usage: kvsim replay TRACE"},
      {{"trace", "convert", trace, "out.csv", "--to", "xml"}, "--to: expected csv or jsonl, got \"xml\"",
       "Usage: kvsim trace convert IN OUT"},
      {{"trace", "gen", "--requests", "-1"}, "--requests: expected an integer of at least 1, got \"-1\"", "Usage: kvsim trace gen"},
      {{"trace", "gen", "--requests", "3", "--max-tokens", "fixed:0"},
       "--max-tokens: a generation limit of 0 tokens: engines require max_tokens >= 1", "Usage: kvsim trace gen"},
      {{"trace", "gen", "--requests", "3", "--max-tokens", "cap:uniform:0..10"},
       "--max-tokens: a generation limit of 0 tokens", "Usage: kvsim trace gen"},
      // Any cap that can give 0, and a limit of 0 from a request of 0 output tokens.
      {{"trace", "gen", "--requests", "3", "--max-tokens", "cap:lognormal:mean=2,p99=20,min=0"},
       "--max-tokens: \"lognormal:mean=2,p99=20,min=0\" can give 0; this needs at least 1", "Usage: kvsim trace gen"},
      {{"trace", "gen", "--requests", "3", "--output", "0", "--max-tokens", "output"},
       "--max-tokens: request 1 has 0 output tokens, so its generation limit (output or factor) would be 0",
       "Usage: kvsim trace gen"},
      // Too large or too precise is said as such; a lognormal of durations in seconds.
      {{"trace", "gen", "--requests", "3", "--prompt", "lognormal:mean=500000000000,p99=600000000000"},
       "--prompt: lognormal mean: \"500000000000\" is too large (overflows 64 bits)", "Usage: kvsim trace gen"},
      {{"trace", "gen", "--requests", "3", "--max-tokens", "factor:1.3333333333"},
       "--max-tokens: factor: \"1.3333333333\" has more decimal places than the unit can hold exactly",
       "Usage: kvsim trace gen"},
      {{"trace", "gen", "--requests", "3", "--cancel", "p=0.5,after=lognormal:mean=1s,p99=100s"},
       "--cancel: lognormal: p99 / mean must be above 1 and below 14.97 (the most a lognormal's p99 can exceed its mean), "
       "got p99 100s and mean 1s",
       "Usage: kvsim trace gen"},
      // A share or probability of 0 gives nothing to any request: it would have no effect.
      {{"trace", "gen", "--requests", "3", "--cancel", "p=0,after=1s"},
       "--cancel: p is 0: no request would get it, so it would have no effect", "Usage: kvsim trace gen"},
      {{"trace", "gen", "--requests", "3", "--system-prompt", "tokens=100,share=0"},
       "--system-prompt: share is 0: no request would get it", "Usage: kvsim trace gen"},
      {{"trace", "gen", "--requests", "3", "--sessions", "share=0,turns=2,gap=1s"},
       "--sessions: share is 0: no request would get it", "Usage: kvsim trace gen"},
      {{"trace", "gen", "--requests", "3", "--max-tokens", "fixed:10", "--max-tokens-share", "0"},
       "--max-tokens-share: the share is 0: no request would get it", "Usage: kvsim trace gen"},
      // A later turn's new message is the lengths file's prompt: user= would not be drawn.
      {{"trace", "gen", "--requests", "3", "--lengths-from", trace, "--sessions", "share=1,turns=2,gap=1s,user=5"},
       "--sessions: user= sets a later turn's new message, which --lengths-from gives", "Usage: kvsim trace gen"},
      {{"trace", "stats", trace, "--seed", "18446744073709551616"},
       "--seed: expected an unsigned 64-bit integer, got \"18446744073709551616\"", "Usage: kvsim trace stats FILE"},
      {{"trace", "stats", trace, "--hash-block-tokens", "0"}, "--hash-block-tokens: expected an integer of at least 1",
       "Usage: kvsim trace stats FILE"},
      {{"size", "--model", "llama-3.1-8b", "--dtype", "fp12"}, "--dtype: expected one of fp32, fp16", "Usage: kvsim size"},
      {{"models", "--frob"}, "unrecognised option '--frob'", "Usage: kvsim models"},
      // A missing positional argument goes by its synopsis name.
      {{"trace", "stats"}, "FILE is required", "Usage: kvsim trace stats FILE"},
      {{"trace", "convert", trace}, "OUT is required", "Usage: kvsim trace convert IN OUT"},
      // Options that would be silently ignored, or that contradict each other.
      {{"size", "--model", "llama-3.1-8b", "--kv-budget", "10GiB", "--device", "H100-80GB"},
       "--kv-budget: gives the KV budget directly, so --device (a term of the budget derived from a device) has no "
       "effect",
       "Usage: kvsim size"},
      {{"replay", trace, "--kv-budget", "10GiB", "--reserve", "2GiB"},
       "--kv-budget: gives the KV budget directly, so --reserve", "Usage: kvsim replay TRACE"},
      {{"replay", trace, "--kv-budget", "10GiB", "--schedule", "measured"},
       "--schedule measured replays the trace's own timestamps, which a memory budget would have to change",
       "Usage: kvsim replay TRACE"},
      {{"replay", trace, "--cost", "constant:step=0ms"}, "--cost: every engine step takes time",
       "Usage: kvsim replay TRACE"},
      // Durations are exact decimals: an exponent is refused as such, not as "not a number".
      {{"replay", trace, "--cost", "linear:base=1e7s"},
       "--cost base: expected a non-negative decimal number (no exponent), got \"1e7s\"", "Usage: kvsim replay TRACE"},
      // An empty value is not the option left out (a shell variable never set): refused,
      // by the option's name or the positional argument's synopsis name.
      {{"trace", "stats", trace, "--requests", ""}, "--requests: expected a value, got an empty string",
       "Usage: kvsim trace stats FILE"},
      {{"trace", "gen", "--duration", ""}, "--duration: expected a value, got an empty string", "Usage: kvsim trace gen"},
      {{"trace", "gen", "--requests", "3", "--cancel", "p=0.5,after=1s", "--cancel", ""},
       "--cancel: expected a value, got an empty string", "Usage: kvsim trace gen"},
      {{"trace", "convert", "", "out.csv"}, "IN: expected a value, got an empty string", "Usage: kvsim trace convert IN OUT"},
      {{"replay", trace, "--allocator", ""}, "--allocator: expected a value, got an empty string", "Usage: kvsim replay TRACE"},
      // --duration 0s was taken for no --duration, and the message named --requests.
      {{"trace", "gen", "--duration", "0s"}, "--duration: expected a positive duration", "Usage: kvsim trace gen"},
      // Commands that do not exist point to the --help of the command that does.
      {{"frobnicate"}, "unknown command 'frobnicate' (commands: replay, calibrate, validate, sweep, plan, report, size, models, trace, version)", "Usage: kvsim <command>"},
      {{"trace", "frob"}, "unknown command 'frob' (commands: stats, convert, gen)", "Usage: kvsim trace <command>"},
  };
  for (const auto& c : cases) {
    std::string line = "kvsim";
    for (const auto& a : c.args) line += " " + a;
    INFO(line);
    const auto r = run_cli(c.args, kTimeoutS);
    CHECK(r.exit_code == 2);
    CHECK(r.out.empty());
    CHECK_THAT(r.err, Catch::Contains(std::string(": ") + c.message));
    CHECK_THAT(r.err, Catch::Contains(std::string("\n") + c.synopsis));
    CHECK_THAT(r.err, Catch::Contains("--help'."));
    CHECK_THAT(r.err, !Catch::Contains("kvsim frobnicate --help") && !Catch::Contains("kvsim trace frob --help"));
  }
}

TEST_CASE("cli bad input: --replicas beyond 1024 is a usage error, before anything is simulated") {
  // Each replica is a whole engine simulated step by step: 5,000 idle ones on a 50-request
  // trace took minutes and 19 GB before the bound.
  const std::string trace = std::string(KVSIM_SOURCE_DIR) + "/traces/chat-mix.csv";
  const auto over = run_cli({"replay", trace, "--quiet", "--replicas", "1025"}, kTimeoutS);
  CHECK(over.exit_code == 2);
  CHECK(over.err.find("--replicas: at most 1024 replicas") != std::string::npos);
  CHECK(over.out.empty());
}
