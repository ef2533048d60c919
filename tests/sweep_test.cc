// kvsim sweep and kvsim sweep merge: the grid's order and columns, figures derived by hand
// on a tiny trace, sharded-then-merged output equal to the unsharded one byte for byte,
// --jobs not changing a byte, and the errors (replay's own for a bad varied value).
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_util.h"
#include "trace_test_util.h"

using kvsim::test::run_cli;
using kvsim::test::scratch_path;
using kvsim::test::slurp;
using kvsim::test::write_file;

namespace {

// Three requests far apart (1 s between arrivals; each takes milliseconds), so at most one
// is live at a time: 10 prompt tokens + 1 generated = 11 positions, one block at 16 or 32.
const char kThree[] =
    "id,arrival,prompt_tokens,output_tokens\n"
    "a,0,10,1\n"
    "b,1,10,1\n"
    "c,2,10,1\n";

std::string three() { return write_file("sweep-three.csv", kThree); }

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  for (std::size_t at = 0; at < text.size();) {
    const auto end = text.find('\n', at);
    out.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

std::vector<std::string> fields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (char c : line) {
    if (c == '"') quoted = !quoted;
    else if (c == ',' && !quoted) out.emplace_back();
    else out.back() += c;
  }
  return out;
}

std::size_t column(const std::string& header, const std::string& name) {
  const auto f = fields(header);
  for (std::size_t i = 0; i < f.size(); ++i) {
    if (f[i] == name) return i;
  }
  FAIL("no column " << name << " in " << header);
  return 0;
}

// The 6-point grid the shard tests use: 2 block sizes x 3 request counts.
std::vector<std::string> six_point_sweep(const std::string& trace) {
  return {"sweep", trace, "--model", "llama-3.1-8b", "--vary", "allocator=paged:block=16,paged:block=32",
          "--vary", "requests=1,2,3", "--jobs", "1"};
}

std::vector<std::string> with(std::vector<std::string> args, std::initializer_list<std::string> more) {
  args.insert(args.end(), more);
  return args;
}

}  // namespace

TEST_CASE("sweep: grid order (last axis fastest), columns named as the options, figures by hand") {
  const std::string out = scratch_path("sweep-grid.csv");
  const auto r = run_cli(with(six_point_sweep(three()), {"--csv", out}));
  REQUIRE(r.exit_code == 0);
  const auto rows = lines(slurp(out));
  REQUIRE(rows.size() == 7);  // header + 6 points, one allocator each
  // Leading columns (point_rows: the rows of the point, one per allocator here), then the
  // axes (allocator and requests are also replay's columns, so their axes are
  // allocator_option and requests_option), then replay's CSV columns.
  CHECK(rows[0].rfind("point,points,grid,point_rows,allocator_option,requests_option,allocator,requests,completed,", 0) ==
        0);
  const auto peak = column(rows[0], "allocated_bytes_peak");
  const auto requests = column(rows[0], "requests");
  // llama-3.1-8b: 32 layers x 8 KV heads x 128 x (K + V) x 2 bytes = 131,072 bytes a
  // position. One request live at a time, 11 positions: one block, 16 x 131,072 =
  // 2,097,152 bytes at block 16 and 4,194,304 at block 32.
  const std::vector<std::string> block = {"paged:block=16", "paged:block=16", "paged:block=16",
                                          "paged:block=32", "paged:block=32", "paged:block=32"};
  const std::vector<std::string> count = {"1", "2", "3", "1", "2", "3"};
  for (std::size_t p = 0; p < 6; ++p) {
    const auto f = fields(rows[p + 1]);
    CHECK(f[0] == std::to_string(p));
    CHECK(f[1] == "6");
    // g and 16 hex digits: never a number to pandas.
    CHECK(f[2].size() == 17);
    CHECK(f[2][0] == 'g');
    CHECK(f[2].find_first_not_of("0123456789abcdef", 1) == std::string::npos);
    CHECK(f[3] == "1");
    CHECK(f[4] == block[p]);
    CHECK(f[5] == count[p]);
    CHECK(f[requests] == count[p]);  // --requests N keeps the first N
    CHECK(f[peak] == (p < 3 ? "2097152" : "4194304"));
  }
  // Every row carries the same grid fingerprint.
  CHECK(fields(rows[1])[2] == fields(rows[6])[2]);
}

TEST_CASE("sweep: several allocators in one point give one row each, and a bracketed value keeps its commas") {
  const std::string out = scratch_path("sweep-multi.csv");
  const auto r = run_cli({"sweep", three(), "--model", "llama-3.1-8b", "--vary",
                          "allocator=[paged:block=16,paged:block=32],paged:block=64", "--csv", out});
  REQUIRE(r.exit_code == 0);
  const auto rows = lines(slurp(out));
  REQUIRE(rows.size() == 4);  // point 0: two allocators, point 1: one
  CHECK(rows[1].rfind("0,2,", 0) == 0);
  CHECK(rows[2].rfind("0,2,", 0) == 0);
  CHECK(rows[3].rfind("1,2,", 0) == 0);
  CHECK(fields(rows[1])[3] == "2");  // point_rows: two allocators at point 0, one at point 1
  CHECK(fields(rows[3])[3] == "1");
  CHECK(fields(rows[1])[4] == "paged:block=16,paged:block=32");
  const auto peak = column(rows[0], "allocated_bytes_peak");
  CHECK(fields(rows[1])[peak] == "2097152");
  CHECK(fields(rows[2])[peak] == "4194304");
  CHECK(fields(rows[3])[peak] == "8388608");  // 64 x 131,072
}

TEST_CASE("sweep: sharded into 3 and merged equals the unsharded sweep byte for byte, CSV and JSONL") {
  const std::string trace = three();
  const std::string whole_csv = scratch_path("sweep-whole.csv");
  const std::string whole_jsonl = scratch_path("sweep-whole.jsonl");
  REQUIRE(run_cli(with(six_point_sweep(trace), {"--csv", whole_csv, "--jsonl", whole_jsonl})).exit_code == 0);
  std::vector<std::string> csv_parts;
  std::vector<std::string> jsonl_parts;
  for (int i = 1; i <= 3; ++i) {
    csv_parts.push_back(scratch_path("sweep-part" + std::to_string(i) + ".csv"));
    jsonl_parts.push_back(scratch_path("sweep-part" + std::to_string(i) + ".jsonl"));
    const std::string shard = std::to_string(i) + "/3";
    REQUIRE(run_cli(with(six_point_sweep(trace), {"--shard", shard, "--csv", csv_parts.back(), "--jsonl",
                                                   jsonl_parts.back()})).exit_code == 0);
  }
  // Shard 2/3 holds points 1 and 4 (p % 3 == 1).
  const auto part2 = lines(slurp(csv_parts[1]));
  REQUIRE(part2.size() == 3);
  CHECK(part2[1].rfind("1,6,", 0) == 0);
  CHECK(part2[2].rfind("4,6,", 0) == 0);

  const std::string merged_csv = scratch_path("sweep-merged.csv");
  const std::string merged_jsonl = scratch_path("sweep-merged.jsonl");
  // Parts in any order.
  auto r = run_cli({"sweep", "merge", csv_parts[2], csv_parts[0], csv_parts[1], "--csv", merged_csv});
  REQUIRE(r.exit_code == 0);
  CHECK(slurp(merged_csv) == slurp(whole_csv));
  r = run_cli({"sweep", "merge", jsonl_parts[1], jsonl_parts[2], jsonl_parts[0], "--jsonl", merged_jsonl});
  REQUIRE(r.exit_code == 0);
  CHECK(slurp(merged_jsonl) == slurp(whole_jsonl));
  // To standard output, of the parts' kind.
  r = run_cli({"sweep", "merge", csv_parts[0], csv_parts[1], csv_parts[2]});
  REQUIRE(r.exit_code == 0);
  CHECK(r.out == slurp(whole_csv));
  // An empty part (a shard with no point) can only be JSONL, listed first or not.
  const std::string empty = write_file("sweep-part-empty.jsonl", "");
  r = run_cli({"sweep", "merge", empty, jsonl_parts[0], jsonl_parts[1], jsonl_parts[2]});
  REQUIRE(r.exit_code == 0);
  CHECK(r.out == slurp(whole_jsonl));

  // Each JSONL line is one object: point, points, grid, point_rows, the axes, then replay's run.
  const auto first = nlohmann::ordered_json::parse(lines(slurp(whole_jsonl))[0]);
  std::vector<std::string> keys;
  for (const auto& item : first.items()) keys.push_back(item.key());
  REQUIRE(keys.size() > 7);
  CHECK(std::vector<std::string>(keys.begin(), keys.begin() + 7) ==
        std::vector<std::string>{"point", "points", "grid", "point_rows", "allocator_option", "requests_option",
                                 "allocator"});
  CHECK(first["memory_bytes"]["allocated_slots"]["peak"] == 2097152);
}

TEST_CASE("sweep: --jobs 1 and --jobs 2 write the same bytes") {
  const std::string trace = three();
  const std::string one = scratch_path("sweep-j1.jsonl");
  const std::string two = scratch_path("sweep-j2.jsonl");
  const std::string one_csv = scratch_path("sweep-j1.csv");
  const std::string two_csv = scratch_path("sweep-j2.csv");
  auto args = six_point_sweep(trace);
  args.pop_back();
  args.pop_back();  // drop --jobs 1
  REQUIRE(run_cli(with(args, {"--jobs", "1", "--jsonl", one, "--csv", one_csv})).exit_code == 0);
  REQUIRE(run_cli(with(args, {"--jobs", "2", "--jsonl", two, "--csv", two_csv})).exit_code == 0);
  CHECK(slurp(one) == slurp(two));
  CHECK(slurp(one_csv) == slurp(two_csv));
  // --progress draws on a terminal only: with stderr captured (a file here), nothing, so the
  // bytes are the same and stderr holds no carriage return.
  const auto drawn = run_cli(with(args, {"--jobs", "2", "--progress", "--csv", "-"}));
  REQUIRE(drawn.exit_code == 0);
  CHECK(drawn.out == slurp(two_csv));
  CHECK(drawn.err.find('\r') == std::string::npos);
}

TEST_CASE("sweep merge: refuses a missing point, a duplicate point and parts of another grid, naming the file") {
  const std::string trace = three();
  std::vector<std::string> parts;
  for (int i = 1; i <= 3; ++i) {
    parts.push_back(scratch_path("sweep-m" + std::to_string(i) + ".csv"));
    REQUIRE(run_cli(with(six_point_sweep(trace), {"--shard", std::to_string(i) + "/3", "--csv", parts.back()}))
                .exit_code == 0);
  }
  SECTION("missing") {
    const auto r = run_cli({"sweep", "merge", parts[0], parts[2]});
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("2 of the grid's 6 points are in none of the 2 parts (points 1, 4)") != std::string::npos);
    CHECK(r.out.empty());
  }
  SECTION("duplicate") {
    const auto r = run_cli({"sweep", "merge", parts[0], parts[1], parts[2], parts[1]});
    CHECK(r.exit_code == 1);
    CHECK(r.err.find(parts[1] + ":2: point: point 1 appears twice: also at " + parts[1] + ":2") != std::string::npos);
  }
  SECTION("another grid: other values, same columns") {
    const std::string other = scratch_path("sweep-other.csv");
    REQUIRE(run_cli({"sweep", trace, "--model", "llama-3.1-8b", "--vary", "allocator=paged:block=16,paged:block=64",
                     "--vary", "requests=1,2,3", "--shard", "2/3", "--csv", other}).exit_code == 0);
    const auto r = run_cli({"sweep", "merge", parts[0], other, parts[2]});
    CHECK(r.exit_code == 1);
    CHECK(r.err.find(other + ":2: grid: from another grid than " + parts[0]) != std::string::npos);
  }
  SECTION("another trace under the same file name, and a copy of the same one elsewhere") {
    // The grid is fingerprinted by the trace's name and bytes: a part run on a different
    // trace that happens to share the name (day1/t.csv, day2/t.csv) is from another grid; a
    // part run on a copy of the same trace in another directory is not.
    std::filesystem::create_directories(scratch_path("sweep-elsewhere"));
    std::filesystem::create_directories(scratch_path("sweep-copy"));
    const std::string other_trace = write_file("sweep-elsewhere/sweep-three.csv", std::string(kThree) + "d,3,10,1\n");
    const std::string copy = write_file("sweep-copy/sweep-three.csv", kThree);
    const std::string other = scratch_path("sweep-other-trace.csv");
    const std::string same = scratch_path("sweep-copied-trace.csv");
    REQUIRE(run_cli(with(six_point_sweep(other_trace), {"--shard", "2/3", "--csv", other})).exit_code == 0);
    REQUIRE(run_cli(with(six_point_sweep(copy), {"--shard", "2/3", "--csv", same})).exit_code == 0);
    const auto r = run_cli({"sweep", "merge", parts[0], other, parts[2]});
    CHECK(r.exit_code == 1);
    CHECK(r.err.find(other + ":2: grid: from another grid than " + parts[0]) != std::string::npos);
    const auto ok = run_cli({"sweep", "merge", parts[0], same, parts[2], "--csv", scratch_path("sweep-copied-merged.csv")});
    CHECK(ok.exit_code == 0);
  }
  SECTION("another grid: other columns") {
    const std::string other = scratch_path("sweep-other2.csv");
    REQUIRE(run_cli({"sweep", trace, "--model", "llama-3.1-8b", "--vary", "max-running=1,2,3,4,5,6", "--shard",
                     "2/3", "--csv", other}).exit_code == 0);
    const auto r = run_cli({"sweep", "merge", parts[0], other, parts[2]});
    CHECK(r.exit_code == 1);
    CHECK(r.err.find(other + ":1: its columns differ from those of " + parts[0]) != std::string::npos);
  }
  SECTION("parts of another kind") {
    const std::string jsonl = scratch_path("sweep-kind.jsonl");
    REQUIRE(run_cli(with(six_point_sweep(trace), {"--shard", "2/3", "--jsonl", jsonl})).exit_code == 0);
    const auto r = run_cli({"sweep", "merge", parts[0], jsonl, "--csv", scratch_path("sweep-kind-out.csv")});
    CHECK(r.exit_code == 1);
    CHECK(r.err.find(jsonl + ":1: not a CSV part of kvsim sweep") != std::string::npos);
  }
  SECTION("a part cut short") {
    const std::string text = slurp(parts[1]);
    const std::string cut = write_file("sweep-cut.csv", text.substr(0, text.size() - 5));
    const auto r = run_cli({"sweep", "merge", parts[0], cut, parts[2]});
    CHECK(r.exit_code == 1);
    CHECK(r.err.find(cut + ": does not end with a newline") != std::string::npos);
  }
  SECTION("a NUL byte in a row") {
    // Rows are copied into the merged file as they stand, and a JSONL row's parser would stop
    // at the byte: refused, at its line and column (the row's first cell, 0, put after it).
    std::string text = slurp(parts[1]);
    const auto row = text.find('\n') + 1;  // line 2
    text.insert(row + 1, 1, '\0');
    const std::string nul = write_file("sweep-nul.csv", text);
    const auto r = run_cli({"sweep", "merge", parts[0], nul, parts[2]});
    CHECK(r.exit_code == 1);
    CHECK(r.err.find(nul + ":2: a NUL byte at column 2: expected text") != std::string::npos);
  }
  SECTION("a point missing one of its allocators' rows") {
    // Two allocators a point, three points (requests 1, 2, 3), one a shard: the first part's
    // point 0 loses its second row, cut at a line's end.
    std::vector<std::string> two;
    for (int i = 1; i <= 3; ++i) {
      two.push_back(scratch_path("sweep-two" + std::to_string(i) + ".csv"));
      REQUIRE(run_cli({"sweep", trace, "--model", "llama-3.1-8b", "--allocator", "paged,dense-static", "--vary",
                       "requests=1,2,3", "--shard", std::to_string(i) + "/3", "--csv", two.back()})
                  .exit_code == 0);
    }
    std::string text = slurp(two[0]);
    text.erase(text.rfind('\n', text.size() - 2) + 1);
    const std::string shorter = write_file("sweep-two-short.csv", text);
    const auto r = run_cli({"sweep", "merge", shorter, two[1], two[2]});
    CHECK(r.exit_code == 1);
    CHECK(r.err.find(shorter + ":2: point: point 0 has 1 rows where its point_rows says 2") != std::string::npos);
    CHECK(r.out.empty());
  }
  SECTION("points of different sizes merge, and CRLF parts are the same rows") {
    // Point 0 runs two allocators and point 1 one (a bracketed value), and --vary replicas=1,2
    // gives one engine's row, then two replicas' and their total: each point is whole as its
    // point_rows says, though the others have more or fewer.
    for (const std::vector<std::string>& vary :
         {std::vector<std::string>{"--vary", "allocator=[paged:block=16,paged:block=32],paged:block=64"},
          std::vector<std::string>{"--allocator", "paged", "--vary", "replicas=1,2"}}) {
      INFO(vary.back());
      std::vector<std::string> args = {"sweep", trace, "--model", "llama-3.1-8b"};
      args.insert(args.end(), vary.begin(), vary.end());
      const std::string whole = scratch_path("sweep-uneven.csv"), one = scratch_path("sweep-uneven1.csv"),
                        two = scratch_path("sweep-uneven2.csv");
      REQUIRE(run_cli(with(args, {"--csv", whole})).exit_code == 0);
      REQUIRE(run_cli(with(args, {"--shard", "1/2", "--csv", one})).exit_code == 0);
      REQUIRE(run_cli(with(args, {"--shard", "2/2", "--csv", two})).exit_code == 0);
      std::string crlf;
      for (char c : slurp(two)) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
      const auto r = run_cli({"sweep", "merge", one, write_file("sweep-uneven2-crlf.csv", crlf)});
      INFO(r.err);
      REQUIRE(r.exit_code == 0);
      CHECK(r.out == slurp(whole));
    }
  }
}

TEST_CASE("sweep: a bad varied value is replay's own error naming the option, or the spec file's line") {
  const std::string trace = three();
  // What replay says about --kv-budget abc ...
  const auto replay = run_cli({"replay", trace, "--kv-budget", "abc"});
  REQUIRE(replay.exit_code == 2);
  const auto first_line = replay.err.substr(0, replay.err.find('\n'));
  REQUIRE(first_line.find("--kv-budget") != std::string::npos);
  // ... the sweep says too, before any replay, with replay's exit code.
  auto r = run_cli({"sweep", trace, "--vary", "kv-budget=1GiB,abc", "--csv", scratch_path("sweep-bad.csv")});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find(first_line.substr(first_line.find("--kv-budget"))) != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(scratch_path("sweep-bad.csv")));

  // A combination replay refuses names its point: the grid is max-running major, so points
  // 0..3 are (16, 128), (16, 8192), (300, 128), (300, 8192), and 300 sequences need at least
  // 300 tokens a step (vLLM's SchedulerConfig).
  r = run_cli({"sweep", trace, "--kv-budget", "1GiB", "--vary", "max-running=16,300", "--vary",
               "max-batched-tokens=128,8192", "--csv", scratch_path("sweep-bad.csv")});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--max-batched-tokens: must be at least --max-running (300)") != std::string::npos);
  CHECK(r.err.find("(at point 2: max-running=300, max-batched-tokens=128)") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(scratch_path("sweep-bad.csv")));

  // From a spec file: the file and line.
  const std::string spec = write_file("sweep-spec.txt", "# the budget\n\nkv-budget = 1GiB, abc  # two values\n");
  r = run_cli({"sweep", trace, "--spec", spec});
  CHECK(r.exit_code == 1);
  CHECK(r.err.find(spec + ":3: --kv-budget: ") != std::string::npos);

  // A directory is not a spec; a spec that starts with a byte order mark reads as without.
  r = run_cli({"sweep", trace, "--spec", kvsim::test::scratch_dir("sweep-spec-dir").string()});
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("is a directory, not a file") != std::string::npos);
  const std::string bom_spec = write_file("sweep-spec-bom.txt", "\xEF\xBB\xBFkv-budget = 1GiB, abc\n");
  r = run_cli({"sweep", trace, "--spec", bom_spec});
  CHECK(r.exit_code == 1);
  CHECK(r.err.find(bom_spec + ":1: --kv-budget: ") != std::string::npos);

  // Unknown, doubly given, one of replay's outputs, a switch with another value.
  r = run_cli({"sweep", trace, "--vary", "kv-budgett=1GiB"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--kv-budgett is not an option of kvsim replay") != std::string::npos);
  r = run_cli({"sweep", trace, "--kv-budget", "2GiB", "--vary", "kv-budget=1GiB"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--kv-budget is both given and varied") != std::string::npos);
  r = run_cli({"sweep", trace, "--vary", "timeline=a.csv"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--timeline shapes one replay's output") != std::string::npos);
  r = run_cli({"sweep", trace, "--vary", "no-chunked-prefill=yes"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--no-chunked-prefill is a switch: vary it over on and off") != std::string::npos);
  const std::string spec2 = write_file("sweep-spec2.txt", "max-running = 1, 2\nmax-running = 3\n");
  r = run_cli({"sweep", trace, "--spec", spec2});
  CHECK(r.exit_code == 1);
  CHECK(r.err.find(spec2 + ":2: max-running: --max-running is varied twice") != std::string::npos);
  r = run_cli({"sweep", trace, "--vary", "max-running=1,,2"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("an empty value") != std::string::npos);
  // One value twice would be two points of one run.
  r = run_cli({"sweep", trace, "--vary", "rate-scale=1,2,1"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("rate-scale: \"1\" is given twice in \"rate-scale=1,2,1\"") != std::string::npos);
  r = run_cli({"sweep", trace, "--vary", "max-running=1", "--shard", "4/3"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--shard: expected I/N with 1 <= I <= N") != std::string::npos);
}

TEST_CASE("sweep: the trace is read once, so a FIFO serves every point") {
  const std::string fifo = scratch_path("sweep-fifo");
  std::filesystem::remove(fifo);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const std::string trace = three();
  // A writer that opens the FIFO once: a second open by the sweep would wait forever (the
  // timeout below ends it with 124).
  REQUIRE(std::system(("cat " + kvsim::test::shell_quote(trace) + " > " + kvsim::test::shell_quote(fifo) + " &").c_str()) == 0);
  const auto r = run_cli({"sweep", fifo, "--model", "llama-3.1-8b", "--vary", "allocator=paged:block=16,paged:block=32",
                          "--vary", "rate-scale=1,2"}, 60);
  REQUIRE(r.exit_code == 0);
  // The table: a title line, a header and one line per point.
  const auto rows = lines(r.out);
  REQUIRE(rows.size() == 6);
  CHECK(rows[0] == "4 points (2 axes), trace " + fifo);
  CHECK(rows[1].rfind("point  allocator_option  rate-scale  allocator", 0) == 0);
  CHECK(rows[5].rfind("3      paged:block=32    2           paged:block=32", 0) == 0);
}

TEST_CASE("sweep: a point that served nothing carries replay's warning, naming the point") {
  // Each request of kThree is 10 prompt + 1 output = 11 tokens: --max-model-len 10 refuses
  // all three (replay's rule: prompt + output beyond the maximum length), 11 admits them.
  const std::string jsonl = scratch_path("sweep-refused.jsonl");
  const std::vector<std::string> args = {"sweep", three(), "--model", "llama-3.1-8b", "--allocator", "paged",
                                         "--vary", "max-model-len=10,11", "--jobs", "1"};
  const std::string warning =
      "point 0 (max-model-len=10): paged:block=16: refused every request (3): 3 longer than the maximum length of 10 "
      "tokens; nothing was served, so throughput and latencies say nothing";
  const auto table = run_cli(args);
  REQUIRE(table.exit_code == 0);
  CHECK_THAT(table.out, Catch::EndsWith("WARNING " + warning + "\n"));
  CHECK(table.err == "kvsim sweep: warning: " + warning + "\n");
  const auto r = run_cli(with(args, {"--jsonl", jsonl}));
  REQUIRE(r.exit_code == 0);
  CHECK(r.err == "kvsim sweep: warning: " + warning + "\n");
  const auto rows = lines(slurp(jsonl));
  REQUIRE(rows.size() == 2);
  const auto refused = nlohmann::json::parse(rows[0]), served = nlohmann::json::parse(rows[1]);
  CHECK(refused["requests"]["completed"] == 0);
  REQUIRE(refused["warnings"].size() == 1);
  CHECK(refused["warnings"][0] == warning.substr(warning.find("paged:")));
  CHECK(served["requests"]["completed"] == 3);
  CHECK_FALSE(served.contains("warnings"));  // as replay's JSON: only when there are any
}

TEST_CASE("sweep: varying --replicas gives every row the replicas and replica columns, the allocator kept whole") {
  // kThree's requests are 1 s apart and take milliseconds: with 2 replicas of a dense model
  // vLLM 0.19's router goes round robin (docs/replay.md): a -> 0, b -> 1, c -> 0.
  const auto r = run_cli({"sweep", three(), "--model", "llama-3.1-8b", "--allocator", "paged", "--vary", "replicas=1,2",
                          "--csv", "-"});
  REQUIRE(r.exit_code == 0);
  const auto rows = lines(r.out);
  REQUIRE(rows.size() == 5);  // header, point 0 (one engine), point 1 (two replicas and their total)
  CHECK(rows[0].rfind("point,points,grid,point_rows,replicas_option,allocator,replicas,replica,requests,", 0) == 0);
  const auto cells = [&](std::size_t i) {
    const auto f = fields(rows[i]);
    return f[3] + "|" + f[5] + "|" + f[6] + "|" + f[7] + "|" + f[8];  // point_rows, allocator, replicas, replica, requests
  };
  CHECK(cells(1) == "1|paged:block=16|1||3");
  CHECK(cells(2) == "3|paged:block=16|2|0|2");
  CHECK(cells(3) == "3|paged:block=16|2|1|1");
  CHECK(cells(4) == "3|paged:block=16|2||3");
  // The JSONL rows have the same keys: one engine's run says replicas 1, replica null, as its
  // CSV row does, rather than leaving them out (which pandas reads as missing, like a total).
  const auto jsonl = run_cli({"sweep", three(), "--model", "llama-3.1-8b", "--allocator", "paged", "--vary",
                              "replicas=1,2", "--jsonl", "-"});
  REQUIRE(jsonl.exit_code == 0);
  const auto objects = lines(jsonl.out);
  REQUIRE(objects.size() == 4);
  const auto one = nlohmann::json::parse(objects[0]);
  CHECK(one["replicas"] == 1);
  CHECK(one["replica"].is_null());
  CHECK(nlohmann::json::parse(objects[1])["replica"] == 0);
  // The table says which row is which replica, and which their total; one engine's says none.
  const auto table = run_cli({"sweep", three(), "--model", "llama-3.1-8b", "--allocator", "paged", "--vary", "replicas=1,2"});
  REQUIRE(table.exit_code == 0);
  const auto shown = lines(table.out);
  REQUIRE(shown.size() == 6);  // the title, the header, four rows
  const auto words = [&](std::size_t i) {
    std::vector<std::string> out;
    std::istringstream in(shown[i]);
    for (std::string w; in >> w;) out.push_back(w);
    return out;
  };
  REQUIRE(words(1).size() >= 5);
  CHECK(words(1)[3] == "replica");
  CHECK(words(2)[3] == "3");  // one engine: no replica column value, so the next one (completed)
  CHECK(words(3)[3] == "0");
  CHECK(words(4)[3] == "1");
  CHECK(words(5)[3] == "total");
}

TEST_CASE("sweep: a file is read only as far as the points' --requests need, as replay reads it") {
  // Three good rows, then a row whose arrival is not a number. Replay with --requests 2 never
  // reads the fourth row (trace.h, load scaling); a sweep whose points need at most three rows
  // must not either, and one that needs the fourth must report it by file, line and column.
  const std::string trace = write_file("sweep-bad-fourth.csv", std::string(kThree) + "d,x,10,1\n");
  const auto ok = run_cli({"sweep", trace, "--model", "llama-3.1-8b", "--allocator", "paged:block=16", "--vary",
                           "requests=1,3", "--csv", "-"});
  REQUIRE(ok.exit_code == 0);
  const auto rows = lines(ok.out);
  REQUIRE(rows.size() == 3);
  const std::size_t completed = column(rows[0], "completed");
  CHECK(fields(rows[1])[completed] == "1");
  CHECK(fields(rows[2])[completed] == "3");

  const auto bad = run_cli({"sweep", trace, "--model", "llama-3.1-8b", "--allocator", "paged:block=16", "--vary",
                            "requests=1,4"});
  CHECK(bad.exit_code != 0);
  CHECK(bad.err.find("sweep-bad-fourth.csv:5: column 'arrival'") != std::string::npos);
}

TEST_CASE("sweep: points with different windows and counts each get their own requests from one read") {
  // Six requests 1 s apart, prompts of 10, 20, ..., 60 tokens and one output token each, so
  // at most one is live and the effective peak is the largest prompt read + 1 positions, at
  // Llama-3.1-8B's 131,072 bytes a position. The file is read once, as far as the widest
  // point needs (here to its end, for "2s.."); each point then takes its own window and count:
  //   ..3s, first 1: a (10)          -> 11 positions    2s.., first 1: c (30)          -> 31
  //   ..3s, first 3: a, b, c (<= 30) -> 31              2s.., first 3: c, d, e (<= 50) -> 51
  const std::string trace = write_file("sweep-six.csv",
                                       "id,arrival,prompt_tokens,output_tokens\na,0,10,1\nb,1,20,1\nc,2,30,1\n"
                                       "d,3,40,1\ne,4,50,1\nf,5,60,1\n");
  const auto r = run_cli({"sweep", trace, "--model", "llama-3.1-8b", "--allocator", "paged:block=16", "--vary",
                          "time-window=..3s,2s..", "--vary", "requests=1,3", "--csv", "-"});
  REQUIRE(r.exit_code == 0);
  const auto rows = lines(r.out);
  REQUIRE(rows.size() == 5);
  const std::size_t peak = column(rows[0], "effective_bytes_peak");
  const std::size_t completed = column(rows[0], "completed");
  const std::int64_t expected[][2] = {{1, 11}, {3, 31}, {1, 31}, {3, 51}};
  for (std::size_t p = 0; p < 4; ++p) {
    INFO("point " << p);
    CHECK(fields(rows[p + 1])[completed] == std::to_string(expected[p][0]));
    CHECK(fields(rows[p + 1])[peak] == std::to_string(expected[p][1] * 131072));
  }
}
