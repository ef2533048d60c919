// Plain answers from the real program (issue 16): `kvsim --version`; the warnings a replay
// gives when its figures would otherwise mislead (every request refused, a budget smaller than
// the smallest request, an overloaded device); swap in against out; and a sampled timeline that
// keeps the peak. Each on a hand-made trace.
#include <catch2/catch.hpp>
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "cli_util.h"
#include "trace_test_util.h"

using namespace kvsim;
using Json = nlohmann::json;

namespace {

// Llama-3.1-8B in bf16: 32 layers x 8 KV heads x (128 + 128) values x 2 bytes.
constexpr std::int64_t kLlamaBytesPerToken = 32 * 8 * (128 + 128) * 2;

// The version CMakeLists.txt declares, read from the file itself: project(kvsim VERSION X.Y.Z ...).
std::string declared_version() {
  const std::string cmake = test::slurp(std::string(KVSIM_SOURCE_DIR) + "/CMakeLists.txt");
  // No <regex>: GCC 12 with ASan warns falsely inside it (see tests/CMakeLists.txt).
  const std::string key = "project(kvsim VERSION ";
  const auto at = cmake.find(key);
  REQUIRE(at != std::string::npos);
  const auto from = at + key.size();
  const auto to = cmake.find_first_not_of("0123456789.", from);
  const std::string version = cmake.substr(from, to - from);
  REQUIRE(std::count(version.begin(), version.end(), '.') == 2);
  return version;
}

std::vector<std::string> warnings_of(const std::string& json) {
  const Json doc = Json::parse(json);
  if (!doc.contains("warnings")) return {};
  return doc["warnings"].get<std::vector<std::string>>();
}

}  // namespace

TEST_CASE("version: kvsim --version and kvsim version print the project's version") {
  const std::string expected = "kvsim " + declared_version() + "\n";
  for (const char* spelling : {"--version", "version"}) {
    const auto r = test::run_cli({spelling});
    CHECK(r.exit_code == 0);
    CHECK(r.out == expected);
    CHECK(r.err.empty());
  }
  // It takes nothing after it; the command list names it.
  CHECK(test::run_cli({"--version", "extra"}).exit_code == 2);
  CHECK_THAT(test::run_cli({"--help"}).out, Catch::Contains("version"));
  CHECK_THAT(test::run_cli({"version", "--help"}).out, Catch::Contains("kvsim X.Y.Z"));
}

TEST_CASE("help: kvsim help COMMAND [SUBCOMMAND] prints that command's help, as --help does") {
  for (const std::vector<std::string>& path :
       {std::vector<std::string>{"replay"}, {"trace", "convert"}, {"trace"}, {"size"}}) {
    std::vector<std::string> spelled{"help"};
    spelled.insert(spelled.end(), path.begin(), path.end());
    std::vector<std::string> flagged = path;
    flagged.push_back("--help");
    const auto by_word = test::run_cli(spelled);
    const auto by_flag = test::run_cli(flagged);
    CHECK(by_word.exit_code == 0);
    CHECK(by_word.out == by_flag.out);
    CHECK_THAT(by_word.out, Catch::StartsWith("Usage: kvsim " + path.front()));
  }
  // Alone it lists the commands; a command that does not exist is a usage error naming it.
  CHECK(test::run_cli({"help"}).out == test::run_cli({"--help"}).out);
  // "help --help" asks help's own help: the same list, not "unknown command '--help'".
  const auto help_help = test::run_cli({"help", "--help"});
  CHECK(help_help.exit_code == 0);
  CHECK(help_help.out == test::run_cli({"--help"}).out);
  CHECK(test::run_cli({"help", "-h"}).out == help_help.out);
  const auto r = test::run_cli({"help", "replai"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("unknown command 'replai'"));
}

TEST_CASE("warnings: dense-static refusing every request says why, paged beside it serving all does not") {
  // Two requests of 30 + 10 and 50 + 10 tokens. dense-static reserves the model's maximum
  // length, 131,072 positions x 131,072 B = 16 GiB per request, against a budget of 8 GiB: each
  // is refused even alone. paged needs ceil(60 / 16) = 4 blocks = 64 positions = 8 MiB at most:
  // both complete. The smallest request, 40 tokens x 131,072 B = 5,242,880 B, fits 8 GiB: no
  // budget warning.
  const std::string trace =
      test::write_file("warn-dense.csv", "id,arrival,prompt_tokens,output_tokens\nr1,0,30,10\nr2,0,50,10\n");
  const std::vector<std::string> args{"replay", trace, "--model", "llama-3.1-8b", "--allocator", "paged,dense-static",
                                      "--kv-budget", "8GiB", "--cost", "constant:step=1ms,prefill-token=0ps"};
  auto with_json = args;
  with_json.push_back("--json");
  const auto r = test::run_cli(with_json);
  REQUIRE(r.exit_code == 0);
  const Json doc = Json::parse(r.out);
  REQUIRE(doc["runs"][1]["serving"]["refused_too_large"] == 2);
  REQUIRE(doc["runs"][0]["requests"]["completed"] == 2);
  const auto w = warnings_of(r.out);
  REQUIRE(w.size() == 1);
  CHECK(w[0] == "dense-static:reserve=max-model-len: refused every request (2): 2 never fit the capacity of "
                "8,589,934,592 bytes even alone; nothing was served, so throughput and latencies say nothing");
  CHECK(r.err == "kvsim replay: warning: " + w[0] + "\n");
  // The table starts with it, one line.
  const auto table = test::run_cli(args);
  REQUIRE(table.exit_code == 0);
  CHECK(table.out.rfind("WARNING " + w[0] + "\nkvsim replay ", 0) == 0);
}

TEST_CASE("warnings: a budget that cannot hold the smallest request, and the reasons counted apart") {
  static_assert(kLlamaBytesPerToken == 131'072);
  // Budget: 2 blocks of 16 = 32 positions = 4,194,304 B. r1 (200,000 + 1 tokens) is longer than
  // Llama-3.1-8B's 131,072: refused at arrival. r2 (30 + 10 = 40 tokens) prefills into 2 blocks,
  // grows to 32 positions and cannot take a 33rd alone: refused as too large. The shortest request
  // within the maximum length is r2: 40 x 131,072 = 5,242,880 B > 4,194,304 B.
  const std::string trace =
      test::write_file("warn-budget.csv", "id,arrival,prompt_tokens,output_tokens\nr1,0,200000,1\nr2,0,30,10\n");
  const auto r = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--allocator", "paged:block=16",
                                "--kv-budget", std::to_string(32 * kLlamaBytesPerToken), "--cost",
                                "constant:step=1ms,prefill-token=0ps", "--json"});
  REQUIRE(r.exit_code == 0);
  const auto w = warnings_of(r.out);
  REQUIRE(w.size() == 2);
  CHECK(w[0] == "paged:block=16: refused every request (2): 1 longer than the maximum length of 131,072 tokens, 1 "
                "never fit the capacity of 4,194,304 bytes even alone; nothing was served, so throughput and "
                "latencies say nothing");
  CHECK(w[1] == "paged:block=16: the capacity of 4,194,304 bytes cannot hold one request of the trace: the shortest, "
                "40 tokens (prompt + output), needs at least 5,242,880 bytes of effective tokens");

  // Three blocks (48 positions = 6,291,456 B) hold r2's 40: it completes, and neither warning is given.
  const auto ok = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--allocator", "paged:block=16",
                                 "--kv-budget", std::to_string(48 * kLlamaBytesPerToken), "--cost",
                                 "constant:step=1ms,prefill-token=0ps", "--json"});
  REQUIRE(ok.exit_code == 0);
  CHECK(Json::parse(ok.out)["runs"][0]["requests"]["completed"] == 1);
  CHECK_FALSE(Json::parse(ok.out).contains("warnings"));
  CHECK(ok.err.empty());
}

TEST_CASE("warnings: contiguous placement without a budget is said to change nothing") {
  // Without a budget the arena is unbounded (docs/replay.md, "Contiguous placement"): buddy and
  // first-fit place every reservation, so the run is dense-static's without placement.
  const std::string trace =
      test::write_file("warn-placement.csv", "id,arrival,prompt_tokens,output_tokens\nr1,0,30,10\nr2,0,50,10\n");
  std::vector<std::string> args{"replay", trace, "--model", "llama-3.1-8b", "--allocator",
                                "dense-static:placement=buddy,dense-static:placement=first-fit,dense-static",
                                "--cost", "constant:step=1ms,prefill-token=0ps", "--json"};
  const auto r = test::run_cli(args);
  REQUIRE(r.exit_code == 0);
  const auto w = warnings_of(r.out);
  REQUIRE(w.size() == 2);
  for (const char* placement : {"buddy", "first-fit"}) {
    CHECK_THAT(w, Catch::VectorContains("dense-static:reserve=max-model-len,placement=" + std::string(placement) +
                                        ": placement without a budget changes nothing: the arena is unbounded, so "
                                        "every reservation finds an extent (give --kv-budget or --device)"));
  }
  // Under a budget of four rows (4 x 131,072 positions x 131,072 B = 64 GiB) placement acts: no warning.
  args.insert(args.end(), {"--kv-budget", "64GiB"});
  CHECK(warnings_of(test::run_cli(args).out).empty());
}

TEST_CASE("warnings: reserve=max-tokens without max_tokens, and a prefix cache without prefix identity") {
  // Neither request gives max_tokens: reserve=max-tokens plans their true output, as the
  // oracle does. Neither carries prefix hashes: the cache can find no other request's prompt.
  const std::string trace =
      test::write_file("warn-plan.csv", "id,arrival,prompt_tokens,output_tokens\nr1,0,30,10\nr2,0,50,10\n");
  const auto r = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--allocator",
                                "dense-static:reserve=max-tokens,paged:prefix-caching=on,paged", "--cost",
                                "constant:step=1ms,prefill-token=0ps", "--json"});
  REQUIRE(r.exit_code == 0);
  const auto w = warnings_of(r.out);
  REQUIRE(w.size() == 2);
  CHECK(w[0] == "dense-static:reserve=max-tokens: 2 of 2 requests have no max_tokens in the trace, so their rows "
                "reserve their true output, as reserve=oracle does (give --default-max-tokens N to plan for a limit)");
  CHECK_THAT(w[1], Catch::StartsWith("paged:block=16,prefix-caching=on: the trace identifies no prompt block of 16 "
                                     "tokens") &&
                       Catch::Contains("(a preempted one can still find its own blocks)"));
  // radix keys its pages by the trace's identity alone: a retracted request finds nothing of
  // its own either, and the warning does not claim otherwise.
  const auto radix = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--allocator", "radix", "--cost",
                                    "constant:step=1ms,prefill-token=0ps", "--json"});
  REQUIRE(radix.exit_code == 0);
  const auto rw = warnings_of(radix.out);
  REQUIRE(rw.size() == 1);
  CHECK_THAT(rw[0], Catch::StartsWith("radix:page=1: the trace identifies no prompt block of 1 token (") &&
                        Catch::Contains("(nor a retracted or preempted one its own, which SGLang's token-keyed tree "
                                        "would find)"));
  // With --default-max-tokens the plan is a limit, and the bundled trace with prefix hashes
  // (traces/shared-prefix.csv) gives the cache something to find: no warning.
  const auto planned = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--allocator",
                                      "dense-static:reserve=max-tokens", "--default-max-tokens", "100", "--cost",
                                      "constant:step=1ms,prefill-token=0ps", "--json"});
  CHECK(warnings_of(planned.out).empty());
  // The policies that plan a request's whole life (reserve, sglang) do the same without a
  // limit; with --default-max-tokens, or under vLLM's policy, which plans nothing, no warning.
  for (const char* policy : {"reserve", "sglang"}) {
    const auto p = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--allocator", "paged", "--policy", policy,
                                  "--kv-budget", "1GiB", "--cost", "constant:step=1ms,prefill-token=0ps", "--json"});
    REQUIRE(p.exit_code == 0);
    CHECK(warnings_of(p.out) ==
          std::vector<std::string>{"paged:block=16: 2 of 2 requests have no max_tokens in the trace, so the " +
                                   std::string(policy) +
                                   " policy planned their true output, which no engine knows in advance (give "
                                   "--default-max-tokens N to plan for a limit; TensorRT-LLM and SGLang plan the "
                                   "context left)"});
  }
  for (const std::vector<std::string>& extra : {std::vector<std::string>{"--policy", "reserve", "--default-max-tokens", "100"},
                                                std::vector<std::string>{"--policy", "vllm"}}) {
    std::vector<std::string> args{"replay", trace, "--model", "llama-3.1-8b", "--allocator", "paged", "--kv-budget",
                                  "1GiB", "--cost", "constant:step=1ms,prefill-token=0ps", "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto p = test::run_cli(args);
    REQUIRE(p.exit_code == 0);
    CHECK(warnings_of(p.out).empty());
  }
  const auto shared = test::run_cli({"replay", std::string(KVSIM_SOURCE_DIR) + "/traces/shared-prefix.csv", "--model",
                                     "llama-3.1-8b", "--allocator", "paged:prefix-caching=on", "--cost",
                                     "constant:step=1ms,prefill-token=0ps", "--json"});
  CHECK(warnings_of(shared.out).empty());
}

TEST_CASE("warnings: a demand run whose traffic peaks above the timing device's KV budget") {
  // Four prompts of 120,000 tokens at 0, one output token each, through the roofline on the
  // default H100-80GB: in demand mode all prefill in the first step, holding 4 x 120,001
  // positions x 131,072 B = 62,915,018,752 B = 58.59 GiB of effective tokens, more than the
  // 55.73 GiB the H100's budget leaves for KV (docs/size.md's subtraction). Under that budget
  // (--device) the run is the device's own: no such warning.
  std::string csv = "id,arrival,prompt_tokens,output_tokens\n";
  for (int k = 0; k < 4; ++k) csv += "r" + std::to_string(k) + ",0,120000,1\n";
  const std::string trace = test::write_file("warn-demand-peak.csv", csv);
  const auto r = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--allocator", "paged", "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(warnings_of(r.out),
             Catch::VectorContains(std::string(
                 "the traffic's effective tokens peak at 58.59 GiB, more than the 55.73 GiB KV budget of the "
                 "H100-80GB whose times this demand run assumes: on it requests would wait or be preempted, so the "
                 "run's latencies are not that device's (add --device H100-80GB to serve under its budget)")));
  const auto device = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--allocator", "paged", "--device",
                                     "H100-80GB", "--json"});
  REQUIRE(device.exit_code == 0);
  for (const auto& w : warnings_of(device.out)) CHECK(w.find("demand run") == std::string::npos);
}

TEST_CASE("warnings: requests with more samples than can run at once are refused, counted and said") {
  // --max-running 2 places: the request of n = 4 can never run (its samples run together);
  // the one of n = 2 is served. The table gains its row only in runs that refused one.
  const std::string trace = test::write_file("warn-samples.csv",
                                             "id,arrival,prompt_tokens,output_tokens,n\nwide,0,30,10,4\nok,0,30,10,2\n");
  const std::vector<std::string> args{"replay", trace, "--model", "llama-3.1-8b", "--allocator", "paged",
                                      "--max-running", "2", "--cost", "constant:step=1ms,prefill-token=0ps"};
  auto json_args = args;
  json_args.push_back("--json");
  const auto r = test::run_cli(json_args);
  REQUIRE(r.exit_code == 0);
  const auto doc = nlohmann::json::parse(r.out);
  CHECK(doc["runs"][0]["requests"]["refused_too_many_samples"] == 1);
  CHECK(doc["runs"][0]["requests"]["completed"] == 1);
  CHECK_THAT(warnings_of(r.out),
             Catch::VectorContains(std::string("paged:block=16: refused 1 request with more samples (n) than "
                                               "--max-running (or, without it, --max-batched-tokens) lets run at once")));
  const auto table = test::run_cli(args);
  CHECK_THAT(table.out, Catch::Contains("  refused (n above max running)"));
}

TEST_CASE("warnings: an overloaded device is warned about with the overload rule's own words") {
  // As tests/overload_test.cc: 20 requests 10 ms apart, 10 output tokens each, served one at a
  // time in 100 ms steps: 100 requests/s arrive, 1/s are served.
  std::string csv = "id,arrival,prompt_tokens,output_tokens\n";
  for (int i = 0; i < 20; ++i) csv += "r" + std::to_string(i) + "," + std::to_string(i * 0.01) + ",10,10\n";
  const std::string trace = test::write_file("warn-overload.csv", csv);
  const auto r = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--allocator", "paged", "--max-running",
                                "1", "--cost", "constant:step=100ms,prefill-token=0ps", "--json"});
  REQUIRE(r.exit_code == 0);
  const Json doc = Json::parse(r.out);
  REQUIRE(doc["runs"][0]["overload"]["overloaded"] == true);
  const auto w = warnings_of(r.out);
  REQUIRE(w.size() == 1);
  CHECK(w[0] == "paged:block=16: the device cannot keep up: 100.00 requests/s arrive, 1.00/s are served; " +
                    doc["runs"][0]["overload"]["reason"].get<std::string>());
  CHECK_THAT(r.err, Catch::Contains("kvsim replay: warning: paged:block=16: the device cannot keep up"));
}

TEST_CASE("swap: more bytes come back in than went out, by the block for the returning token") {
  // Budget 4 blocks of 16 positions. r1 and r2 (16 + 30 tokens each) prefill one block each and
  // take a second at position 17: 4 blocks. At position 33 r1 needs a fifth: the newest, r2, is
  // swapped out holding 2 blocks (32 positions) = 32 x 131,072 = 4,194,304 B. r1 ends at 46
  // positions (3 blocks) and frees them; r2 comes back and decodes in that same step, grown to
  // 32 + 1 = 33 positions: 3 blocks = 48 x 131,072 = 6,291,456 B in (docs/replay.md, "The figures").
  const std::string trace =
      test::write_file("swap-in-out.csv", "id,arrival,prompt_tokens,output_tokens\nr1,0,16,30\nr2,0,16,30\n");
  const auto r = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--allocator", "paged:block=16",
                                "--kv-budget", std::to_string(64 * kLlamaBytesPerToken), "--preemption", "swap",
                                "--watermark", "0", "--cost", "constant:step=1ms,prefill-token=0ps", "--json"});
  REQUIRE(r.exit_code == 0);
  const Json run = Json::parse(r.out)["runs"][0];
  CHECK(run["serving"]["preemptions"] == 1);
  CHECK(run["serving"]["swapped_out_bytes"] == 32 * kLlamaBytesPerToken);
  CHECK(run["serving"]["swapped_in_bytes"] == 48 * kLlamaBytesPerToken);
  CHECK(run["requests"]["completed"] == 2);
  // The CSV row carries both, side by side, then no request refused as too large.
  const auto csv = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--allocator", "paged:block=16",
                                  "--kv-budget", std::to_string(64 * kLlamaBytesPerToken), "--preemption", "swap",
                                  "--watermark", "0", "--cost", "constant:step=1ms,prefill-token=0ps", "--csv", "-"});
  REQUIRE(csv.exit_code == 0);
  CHECK_THAT(csv.out, Catch::Contains(",swapped_out_bytes,swapped_in_bytes,refused_too_large,") &&
                          Catch::Contains(fmt::format(",{},{},0,", 32 * kLlamaBytesPerToken, 48 * kLlamaBytesPerToken)));
}

TEST_CASE("swap: a link too slow for the clock's range is blamed on --swap-bandwidth, not on the trace") {
  // Two prompts of 80,000 tokens in a budget of 10,002 blocks of 16, each prefilled whole in
  // the first step with its first token: 80,001 positions, 5,001 blocks each, the pool full.
  // At 80,017 positions r1 needs a 5,002nd block: the newest, r2, is swapped out, 5,001 x 16 x
  // 131,072 = 10,487,857,152 bytes, which at 1 byte a second is 1.05e19 ns, past the 9.22e18 ns
  // a 64-bit clock holds.
  const std::string trace = test::write_file("swap-slow.csv",
                                             "id,arrival,prompt_tokens,output_tokens\nr1,0,80000,30\nr2,0,80000,30\n");
  const auto r = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--allocator", "paged:block=16",
                                "--kv-budget", std::to_string(10'002 * 16 * kLlamaBytesPerToken), "--preemption",
                                "swap", "--swap-bandwidth", "1", "--max-batched-tokens", "160000", "--watermark", "0",
                                "--cost", "constant:step=1ms,prefill-token=0ps", "--json"});
  CHECK(r.exit_code == 2);  // an option's value: a usage error, as the other options' are
  CHECK_THAT(r.err, Catch::Contains("--swap-bandwidth") && Catch::Contains("swaps 10487857152 bytes at 1 bytes a second") &&
                        !Catch::Contains("swap-slow.csv"));
  CHECK(r.out.empty());
}

TEST_CASE("timeline: --sample-every rows carry the interval's maximum and mean, and the maximum keeps the peak") {
  // One request, 100 + 50 tokens, paged blocks of 16, 1 ms steps from t = 0: step k starts at
  // (k - 1) ms and holds 100 + k positions, ceil((100 + k) / 16) blocks. Rows at the first step
  // starting 10 ms or more after the previous row: 0, 10, 20, 30, 40 ms; steps 42..50 follow
  // unsampled, so a last row is written at the run's end, 50 ms (the request released: 0).
  //   row 10 ms: steps 1..10 (101..110 positions) all 7 blocks = 112 positions: mean 112, max
  //     112 (step 11, the row's own state, 111 positions: 112).
  //   row 20 ms: steps 11..12 (111, 112) 112 positions, steps 13..20 (113..120) 128: mean
  //     (2 x 112 + 8 x 128) / 10 = 124.8 positions; max 128 (the row's own step 21: 121 -> 128).
  //   last row, 50 ms: steps 41..44 (141..144) 144 positions, 45..50 (145..150) 160: mean
  //     (4 x 144 + 6 x 160) / 10 = 153.6 positions; max 160, the run's peak. The sampled state
  //     column never exceeds 144 (row 40 ms: 141 positions -> 144).
  const std::string trace = test::write_file("sampled.csv", "id,arrival,prompt_tokens,output_tokens\nr1,0,100,50\n");
  const std::string timeline = test::scratch_path("sampled-timeline.csv");
  const auto r = test::run_cli({"replay", trace, "--model", "llama-3.1-8b", "--allocator", "paged:block=16", "--cost",
                                "constant:step=1ms,prefill-token=0ps", "--timeline", timeline, "--sample-every", "10ms",
                                "--json"});
  REQUIRE(r.exit_code == 0);
  const std::int64_t peak = Json::parse(r.out)["runs"][0]["memory_bytes"]["allocated_slots"]["peak"];
  CHECK(peak == 160 * kLlamaBytesPerToken);
  const std::string csv = test::slurp(timeline);
  std::vector<std::vector<std::string>> rows;
  std::string line;
  std::istringstream in(csv);
  while (std::getline(in, line)) {
    std::vector<std::string> cells(1);
    for (char ch : line) {
      if (ch == ',') cells.emplace_back();
      else cells.back().push_back(ch);
    }
    rows.push_back(cells);
  }
  REQUIRE(rows.size() == 7);  // the header and six rows
  const auto& header = rows[0];
  const auto column = [&](const std::string& name) {
    const auto at = std::find(header.begin(), header.end(), name);
    REQUIRE(at != header.end());
    return static_cast<std::size_t>(at - header.begin());
  };
  const std::size_t time = column("time_s"), state = column("allocated_bytes"), max = column("allocated_bytes_max"),
                    mean = column("allocated_bytes_mean");
  const std::vector<std::string> times{"0.000000000", "0.010000000", "0.020000000", "0.030000000", "0.040000000",
                                       "0.050000000"};
  for (std::size_t i = 0; i < times.size(); ++i) CHECK(rows[i + 1][time] == times[i]);
  const auto bytes = [](double positions) { return fmt::format("{:.3f}", positions * kLlamaBytesPerToken); };
  CHECK(rows[2][max] == std::to_string(112 * kLlamaBytesPerToken));
  CHECK(rows[2][mean] == bytes(112));
  CHECK(rows[3][max] == std::to_string(128 * kLlamaBytesPerToken));
  CHECK(rows[3][mean] == bytes(124.8));
  CHECK(rows[6][state] == "0");
  CHECK(rows[6][max] == std::to_string(peak));
  CHECK(rows[6][mean] == bytes(153.6));
  std::int64_t state_max = 0, max_max = 0;
  for (std::size_t i = 1; i < rows.size(); ++i) {
    state_max = std::max(state_max, static_cast<std::int64_t>(std::stoll(rows[i][state])));
    max_max = std::max(max_max, static_cast<std::int64_t>(std::stoll(rows[i][max])));
  }
  CHECK(state_max == 144 * kLlamaBytesPerToken);
  CHECK(max_max == peak);
}
