// Issue 17, files and messages: how kvsim writes its outputs (through a temporary beside a
// regular OUT, directly into anything else, never over an input, every write checked), how
// it reads streams and oversized input (once, with bounded memory), options that would have
// no effect, and what its messages show. Each case runs the built program through sh, so
// that pipes, FIFOs, links, signals and /dev/full are the real thing.
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/scratch_file.h"
#include "cli_util.h"
#include "kvsim/model.h"
#include "kvsim/output_file.h"
#include "trace_read.h"

namespace {

namespace fs = std::filesystem;
using kvsim::test::CliResult;
using kvsim::test::run_cli;
using kvsim::test::shell_quote;
using kvsim::test::slurp;

const std::string kChat = std::string(KVSIM_SOURCE_DIR) + "/traces/chat-mix.csv";

// Runs `script` with sh, $KVSIM naming the program and the working directory `dir`,
// capturing stdout and stderr; killed after 60 s (exit 124), so a hang fails.
CliResult run_sh(const fs::path& dir, const std::string& script) {
  const fs::path out = dir / ".stdout";
  const fs::path err = dir / ".stderr";
  std::string command = "cd ";
  command.append(shell_quote(dir.string()));
  command.append(" && KVSIM=");
  command.append(shell_quote(KVSIM_BINARY));
  command.append(" timeout 60 sh -c ");
  command.append(shell_quote(script));
  command.append(" >");
  command.append(shell_quote(out.string()));
  command.append(" 2>");
  command.append(shell_quote(err.string()));
  const int status = std::system(command.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  fs::remove(out);
  fs::remove(err);
  return r;
}

fs::path fresh_dir(const std::string& tag) {
  const fs::path dir = kvsim::test::scratch_dir("files-" + tag);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// The names in `dir`, hidden ones included, sorted.
std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// What `kvsim trace convert chat-mix.csv x.csv` writes, taken from the program itself but
// compared only with what other ways of writing the same conversion give.
std::string converted_chat() {
  const auto r = run_cli({"trace", "convert", kChat, "-", "--to", "csv"});
  REQUIRE(r.exit_code == 0);
  REQUIRE(r.out.rfind("id,arrival,prompt_tokens,output_tokens,max_tokens,cancel_at\n", 0) == 0);
  return r.out;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Output files

TEST_CASE("a FIFO given as OUT is written into, not replaced by a regular file", "[files]") {
  const auto dir = fresh_dir("fifo-out");
  const auto r = run_sh(dir, "mkfifo out.csv && (cat out.csv > got.csv &) && $KVSIM trace convert " +
                                 shell_quote(kChat) + " out.csv && wait");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(fs::is_fifo(dir / "out.csv"));
  CHECK(slurp(dir / "got.csv") == converted_chat());
  // No temporary was left beside it.
  CHECK(names_in(dir) == std::vector<std::string>{"got.csv", "out.csv"});
}

TEST_CASE("outputs written in place are opened only when written, one after another", "[files]") {
  // Two FIFOs read one after the other: the first must be closed before the second is opened,
  // or its reader never sees its end and the run deadlocks (killed at 60 s: exit 124).
  const auto dir = fresh_dir("fifo-two");
  const std::string chat = shell_quote(kChat);
  const auto r = run_sh(dir, "mkfifo a b && ((cat a > a.csv; cat b > b.csv) &) && $KVSIM replay " + chat +
                                 " --requests 20 --quiet --csv a --per-request b && wait && $KVSIM replay " + chat +
                                 " --requests 20 --quiet --csv a2.csv --per-request b2.csv");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(slurp(dir / "a.csv") == slurp(dir / "a2.csv"));
  CHECK(slurp(dir / "b.csv") == slurp(dir / "b2.csv"));
  // A run that fails before its outputs are written touches none of them: a FIFO nobody reads
  // does not block it (the error comes at once), and a dangling link's target is not created.
  write_file(dir / "bad.csv", "id,arrival,prompt_tokens,output_tokens\n1,0,10,10\n2,x,1,1\n");
  fs::create_symlink("target.csv", dir / "link.csv");
  for (const char* out : {"a", "link.csv"}) {
    INFO(out);
    const auto failed = run_sh(dir, std::string("$KVSIM replay bad.csv --csv ") + out);
    CHECK(failed.exit_code == 1);
    CHECK_THAT(failed.err, Catch::Contains("bad.csv:3: column 'arrival'"));
  }
  CHECK(!fs::exists(dir / "target.csv"));
}

TEST_CASE("a symbolic link given as OUT stays a link, the file it points to gets the output", "[files]") {
  const auto dir = fresh_dir("link-out");
  fs::create_directories(dir / "real");
  write_file(dir / "real" / "target.csv", "old\n");
  fs::create_symlink("real/target.csv", dir / "link.csv");
  const auto r = run_sh(dir, "$KVSIM trace convert " + shell_quote(kChat) + " link.csv");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(fs::is_symlink(dir / "link.csv"));
  CHECK(slurp(dir / "real" / "target.csv") == converted_chat());
  CHECK(names_in(dir / "real") == std::vector<std::string>{"target.csv"});
}

TEST_CASE("an input named like the old temporary (OUT.kvsim-tmp) is left alone", "[files]") {
  const auto dir = fresh_dir("tmp-name");
  fs::copy_file(kChat, dir / "out.csv.kvsim-tmp");
  const auto r = run_sh(dir, "$KVSIM trace convert out.csv.kvsim-tmp out.csv");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(slurp(dir / "out.csv.kvsim-tmp") == slurp(kChat));
  CHECK(slurp(dir / "out.csv") == converted_chat());
}

TEST_CASE("trace gen that generates no request fails and writes no file", "[files]") {
  // Poisson arrivals at 1 a second: the first falls after 1 ns with certainty up to 1e-9.
  const auto dir = fresh_dir("gen-none");
  const auto r = run_sh(dir, "$KVSIM trace gen --duration 1ns --arrivals poisson:rate=1 -o none.csv");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("none.csv: no request was generated"));
  CHECK(names_in(dir).empty());
}

TEST_CASE("OUT that is the input under another name (a hard link) is refused, the input untouched", "[files]") {
  const auto dir = fresh_dir("same-file");
  fs::copy_file(kChat, dir / "in.csv");
  fs::create_hard_link(dir / "in.csv", dir / "alias.csv");
  // A mistake in the command line: refused before any work, with the usage (exit 2).
  const auto convert = run_sh(dir, "$KVSIM trace convert in.csv alias.csv");
  CHECK(convert.exit_code == 2);
  CHECK(convert.err.rfind("kvsim trace convert: OUT alias.csv is the same file as the input in.csv: write the output "
                          "elsewhere\n",
                          0) == 0);
  // The same rule for every output: replay's --csv and --timeline, gen's --out over a trace
  // it draws lengths from.
  for (const char* option : {"--csv", "--timeline"}) {
    const auto replay = run_sh(dir, std::string("$KVSIM replay in.csv --model llama-3.1-8b ") + option + " alias.csv");
    CHECK(replay.exit_code == 2);
    CHECK(replay.err.rfind(std::string("kvsim replay: ") + option +
                               " alias.csv is the same file as the input in.csv: write the output elsewhere\n",
                           0) == 0);
  }
  // Two outputs to one file, by the same path or by two names of it: refused, or the one
  // written last would replace the other.
  fs::copy_file(kChat, dir / "out.csv");
  fs::create_hard_link(dir / "out.csv", dir / "out-alias.csv");
  for (const char* timeline : {"out.csv", "./out.csv", "out-alias.csv"}) {
    const auto both = run_sh(dir, std::string("$KVSIM replay in.csv --model llama-3.1-8b --csv out.csv --timeline ") +
                                      timeline);
    CHECK(both.exit_code == 2);
    // The outputs in --help's order (the output registry's): --csv's path is named.
    CHECK(both.err.rfind("kvsim replay: --csv and --timeline both write out.csv: give each its own file", 0) == 0);
  }
  CHECK(slurp(dir / "out.csv") == slurp(kChat));  // untouched
  fs::remove(dir / "out.csv");
  fs::remove(dir / "out-alias.csv");
  // A link to a file the run would create: the same file once written, so refused too (the
  // timeline went through the link and the per-request file replaced it).
  fs::create_symlink("new.csv", dir / "link.csv");
  const auto dangling = run_sh(dir, "$KVSIM replay in.csv --model llama-3.1-8b --csv new.csv --timeline link.csv");
  CHECK(dangling.exit_code == 2);
  CHECK(dangling.err.rfind("kvsim replay: --csv and --timeline both write new.csv: give each its own file", 0) == 0);
  CHECK_FALSE(fs::exists(dir / "new.csv"));
  fs::remove(dir / "link.csv");
  const auto gen = run_sh(dir, "$KVSIM trace gen --lengths-from in.csv -o alias.csv");
  CHECK(gen.exit_code == 2);
  CHECK(gen.err.rfind("kvsim trace gen: --out alias.csv is the same file as the input in.csv", 0) == 0);
  // Every file gen reads is an input, the sessions' user= lengths included.
  const auto user = run_sh(dir, "$KVSIM trace gen --requests 5 --sessions share=1,turns=2,gap=1s,user=empirical:in.csv "
                                "-o alias.csv");
  CHECK(user.exit_code == 2);
  CHECK(user.err.rfind("kvsim trace gen: --out alias.csv is the same file as the input in.csv", 0) == 0);
  // The writer itself refuses too, whoever calls it (exit 1: the library does not know the
  // command line).
  const std::string inputs[] = {(dir / "in.csv").string()};
  CHECK_THROWS_WITH(kvsim::OutputFile((dir / "alias.csv").string(), inputs),
                    Catch::Contains("alias.csv: is the same file as the input "));
  CHECK(slurp(dir / "in.csv") == slurp(kChat));
  CHECK(names_in(dir) == std::vector<std::string>{"alias.csv", "in.csv"});
}

TEST_CASE("standard output redirected into the input is refused, the input untouched", "[files]") {
  // `kvsim replay in.csv >> in.csv` would append the table to the trace it reads, and exit 0.
  const auto dir = fresh_dir("stdout-input");
  fs::copy_file(kChat, dir / "in.csv");
  for (const std::string command : {"replay in.csv --model llama-3.1-8b --json", "trace stats in.csv",
                                    "plan in.csv --model llama-3.1-8b --ttft-p99 1s",
                                    "trace convert in.csv - --to csv", "sweep in.csv --vary allocator=paged,dense-static"}) {
    CAPTURE(command);
    const auto r = run_sh(dir, "$KVSIM " + command + " >> in.csv");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("standard output is the input in.csv (redirected to it): redirect the output "
                                      "elsewhere"));
    CHECK(slurp(dir / "in.csv") == slurp(kChat));
  }
  CHECK(names_in(dir) == std::vector<std::string>{"in.csv"});
  // A command that writes only the file it is given prints nothing there: not refused.
  const auto convert = run_sh(dir, "$KVSIM trace convert in.csv out.jsonl >> in.csv");
  CHECK(convert.exit_code == 0);
  CHECK(slurp(dir / "in.csv") == slurp(kChat));
}

TEST_CASE("one output that cannot be written leaves every other output of the command as it was", "[files]") {
  // replay, sweep and validate each write several files: all are opened before the work and
  // replaced together, so a bad path (a directory, a missing folder) or a write error
  // (/dev/full, written in place) in one leaves the others' old bytes, and no temporary.
  const auto dir = fresh_dir("together");
  const std::string chat = shell_quote(kChat);
  const std::string run =
      shell_quote(std::string(KVSIM_SOURCE_DIR) + "/tests/data/measured/tiny/run") + " --device H100-80GB";
  fs::create_directories(dir / "adir");
  const std::string few = " --requests 20 --quiet";
  const std::string scripts[] = {
      "$KVSIM replay " + chat + few + " --csv a.csv --timeline b.csv --per-request c.csv --html adir",
      "$KVSIM replay " + chat + few + " --csv a.csv --timeline b.csv --html missing/x.html",
      "$KVSIM replay " + chat + few + " --csv a.csv --timeline b.csv --per-request /dev/full",
      "$KVSIM sweep " + chat + " --requests 20 --vary rate-scale=1,2 --csv a.csv --jsonl missing/x.jsonl",
      "$KVSIM sweep " + chat + " --requests 20 --vary rate-scale=1,2 --csv a.csv --jsonl /dev/full",
      "$KVSIM validate " + run + " --per-request a.csv --per-tick missing/x.csv",
      "$KVSIM validate " + run + " --per-request a.csv --per-tick /dev/full",
  };
  for (const auto& script : scripts) {
    INFO(script);
    for (const char* name : {"a.csv", "b.csv", "c.csv"}) write_file(dir / name, std::string("old ") + name + "\n");
    const auto r = run_sh(dir, script);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::StartsWith("kvsim: error: "));
    for (const char* name : {"a.csv", "b.csv", "c.csv"}) CHECK(slurp(dir / name) == std::string("old ") + name + "\n");
    CHECK(names_in(dir) == std::vector<std::string>{"a.csv", "adir", "b.csv", "c.csv"});
  }
}

TEST_CASE("a full disk is an error naming the file, for every output and standard output", "[files]") {
  const auto dir = fresh_dir("full");
  const std::string chat = shell_quote(kChat);
  const std::string full = ": write error: No space left on device\n";
  struct Case {
    std::string script;
    std::string message;
  };
  const Case cases[] = {
      {"$KVSIM trace convert " + chat + " /dev/full --to csv", "kvsim: error: /dev/full" + full},
      {"$KVSIM trace gen --requests 10 -o /dev/full --to csv", "kvsim: error: /dev/full" + full},
      {"$KVSIM replay " + chat + " --model llama-3.1-8b --csv /dev/full", "kvsim: error: /dev/full" + full},
      {"$KVSIM replay " + chat + " --model llama-3.1-8b --timeline /dev/full", "kvsim: error: /dev/full" + full},
      {"$KVSIM replay " + chat + " --model llama-3.1-8b --json >/dev/full", "kvsim: error: standard output" + full},
      {"$KVSIM trace convert " + chat + " - --to jsonl >/dev/full", "kvsim: error: standard output" + full},
      {"$KVSIM trace stats " + chat + " >/dev/full", "kvsim: error: standard output" + full},
      {"$KVSIM size --model llama-3.1-8b >/dev/full", "kvsim: error: standard output" + full},
      {"$KVSIM models >/dev/full", "kvsim: error: standard output" + full},
      {"$KVSIM replay --help >/dev/full", "kvsim: error: standard output" + full},
  };
  for (const auto& c : cases) {
    INFO(c.script);
    const auto r = run_sh(dir, c.script);
    CHECK(r.exit_code == 1);
    CHECK(r.err == c.message);
  }
}

TEST_CASE("an output named as standard output under another name is written there, as '-' is", "[files]") {
  const auto dir = fresh_dir("stdout-alias");
  const std::string chat = std::string(KVSIM_SOURCE_DIR) + "/traces/chat-mix.csv";
  // /dev/stdout beside --json would interleave the CSV with the JSON: refused as '-' is.
  auto r = run_sh(dir, "$KVSIM replay " + chat + " --model llama-3.1-8b --allocator paged --json --csv /dev/stdout");
  CHECK(r.exit_code == 2);
  CHECK(r.out.empty());
  CHECK_THAT(r.err, Catch::StartsWith("kvsim replay: --json and --csv both write standard output ('-')"));
  // Alone, it takes standard output in place of the table, as '-' does.
  const auto dash = run_sh(dir, "$KVSIM replay " + chat + " --model llama-3.1-8b --allocator paged --csv -");
  r = run_sh(dir, "$KVSIM replay " + chat + " --model llama-3.1-8b --allocator paged --csv /dev/stdout");
  CHECK(r.exit_code == 0);
  CHECK(r.out == dash.out);
  CHECK_THAT(r.out, Catch::StartsWith("allocator,"));
  // The file standard output is redirected to, under its own name, gets the output once.
  r = run_sh(dir, "$KVSIM replay " + chat + " --model llama-3.1-8b --allocator paged --csv out.csv > out.csv");
  CHECK(r.exit_code == 0);
  CHECK(slurp((dir / "out.csv").string()) == dash.out);
  // Two outputs on it are two on standard output.
  r = run_sh(dir, "$KVSIM replay " + chat + " --model llama-3.1-8b --allocator paged --csv /dev/stdout --timeline -");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--timeline and --csv both write standard output") ||
                        Catch::Contains("--csv and --timeline both write standard output"));
  // A command that prints nothing else writes it as the file it is.
  r = run_sh(dir, "$KVSIM trace convert " + chat + " /dev/stdout --to jsonl | head -c 1");
  CHECK(r.exit_code == 0);
  CHECK(r.out == "{");
}

TEST_CASE("a run killed part-way leaves OUT as it was and no temporary behind", "[files]") {
  const auto dir = fresh_dir("killed");
  write_file(dir / "out.csv", "old\n");
  for (const char* sig : {"INT", "TERM"}) {
    INFO(sig);
    // Ten million requests take seconds; the signal comes after half a second. (Run in the
    // foreground: sh starts a background job with SIGINT ignored, and kvsim leaves an
    // ignored signal ignored.)
    const auto r = run_sh(dir, std::string("timeout --preserve-status -s ") + sig +
                                   " 0.5 $KVSIM trace gen --requests 10000000 -o out.csv; echo $?");
    CHECK(r.out == std::to_string(128 + (std::string(sig) == "INT" ? SIGINT : SIGTERM)) + "\n");
    CHECK(slurp(dir / "out.csv") == "old\n");
    CHECK(names_in(dir) == std::vector<std::string>{"out.csv"});
  }
}

TEST_CASE("two runs writing one OUT at once leave one complete output", "[files]") {
  const auto dir = fresh_dir("concurrent");
  const auto expected = run_cli({"trace", "gen", "--requests", "20000", "--to", "csv"});
  REQUIRE(expected.exit_code == 0);
  const auto r = run_sh(dir,
                        "$KVSIM trace gen --requests 20000 -o out.csv & $KVSIM trace gen --requests 20000 -o out.csv & "
                        "wait");
  REQUIRE(r.exit_code == 0);
  CHECK(slurp(dir / "out.csv") == expected.out);
  CHECK(names_in(dir) == std::vector<std::string>{"out.csv"});
}

TEST_CASE("a new OUT gets the permissions the umask allows, a replaced one keeps its own", "[files]") {
  const auto dir = fresh_dir("modes");
  write_file(dir / "old.csv", "old\n");
  fs::permissions(dir / "old.csv", fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  const auto r = run_sh(dir, "umask 022 && $KVSIM trace gen --requests 3 -o new.csv && $KVSIM trace gen --requests 3 -o old.csv");
  REQUIRE(r.exit_code == 0);
  // 0666 & ~022 = 0644; the old file's 0640 is kept.
  CHECK((fs::status(dir / "new.csv").permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read));
  CHECK((fs::status(dir / "old.csv").permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read));
}

// ---------------------------------------------------------------------------------------
// Reading streams and oversized input

TEST_CASE("a FIFO, a pipe and /dev/stdin are read once, as the file would be", "[files]") {
  const auto dir = fresh_dir("streams");
  const std::string chat = shell_quote(kChat);
  const auto from_file = run_cli({"trace", "stats", kChat, "--json"});
  REQUIRE(from_file.exit_code == 0);
  // Everything after the "trace" name: the statistics of the same 2,000 requests.
  const auto stats_of = [](const std::string& json) { return nlohmann::json::parse(json).at("stats"); };
  const auto fifo = run_sh(dir, "mkfifo in && (cat " + chat + " > in &) && $KVSIM trace stats in --json");
  INFO(fifo.err);
  REQUIRE(fifo.exit_code == 0);
  CHECK(stats_of(fifo.out) == stats_of(from_file.out));
  const auto pipe = run_sh(dir, "cat " + chat + " | $KVSIM trace stats /dev/stdin --json");
  REQUIRE(pipe.exit_code == 0);
  CHECK(stats_of(pipe.out) == stats_of(from_file.out));
  // convert reads its input twice; a pipe once, its requests kept.
  const auto convert = run_sh(dir, "cat " + chat + " | $KVSIM trace convert /dev/stdin - --to csv");
  INFO(convert.err);
  REQUIRE(convert.exit_code == 0);
  CHECK(convert.out == converted_chat());
  // replay reads its trace once per allocator; a pipe once, for all of them.
  const auto replay_of = [](const std::string& json) {
    auto j = nlohmann::json::parse(json);
    j.erase("trace");
    return j;
  };
  const auto replay_file = run_cli({"replay", kChat, "--model", "llama-3.1-8b", "--allocator", "paged,dense-static", "--json"});
  REQUIRE(replay_file.exit_code == 0);
  const auto replay_pipe =
      run_sh(dir, "cat " + chat + " | $KVSIM replay /dev/stdin --model llama-3.1-8b --allocator paged,dense-static --json");
  INFO(replay_pipe.err);
  REQUIRE(replay_pipe.exit_code == 0);
  CHECK(replay_of(replay_pipe.out) == replay_of(replay_file.out));
  // "-" is standard input for every command that reads a trace, even beside a file named
  // "-" (here an empty one, which would be an error if it were read).
  write_file(dir / "-", "");
  const auto dash_stats = run_sh(dir, "cat " + chat + " | $KVSIM trace stats - --json");
  INFO(dash_stats.err);
  REQUIRE(dash_stats.exit_code == 0);
  CHECK(stats_of(dash_stats.out) == stats_of(from_file.out));
  CHECK(nlohmann::json::parse(dash_stats.out).at("trace") == "-");
  const auto dash_convert = run_sh(dir, "cat " + chat + " | $KVSIM trace convert - - --to csv");
  REQUIRE(dash_convert.exit_code == 0);
  CHECK(dash_convert.out == converted_chat());
  const auto dash_replay =
      run_sh(dir, "cat " + chat + " | $KVSIM replay - --model llama-3.1-8b --allocator paged,dense-static --json");
  REQUIRE(dash_replay.exit_code == 0);
  CHECK(replay_of(dash_replay.out) == replay_of(replay_file.out));
  // --replicas reads the trace once per allocator: a stream is read whole first (it used to
  // be opened again, and found empty).
  const auto replicas_file = run_cli({"replay", kChat, "--allocator", "paged", "--replicas", "2", "--json"});
  REQUIRE(replicas_file.exit_code == 0);
  const auto replicas_pipe = run_sh(dir, "cat " + chat + " | $KVSIM replay - --allocator paged --replicas 2 --json");
  INFO(replicas_pipe.err);
  REQUIRE(replicas_pipe.exit_code == 0);
  CHECK(replay_of(replicas_pipe.out) == replay_of(replicas_file.out));
  // A bad row names "-" and its line, as it would the file.
  const auto dash_bad = run_sh(dir, "printf 'id,arrival,prompt_tokens,output_tokens\\n1,0,x,5\\n' | $KVSIM replay -");
  CHECK(dash_bad.exit_code == 1);
  CHECK(dash_bad.err == "kvsim: error: -:2: column 'prompt_tokens': expected a non-negative integer, got \"x\"\n");
}

TEST_CASE("/dev/zero as a trace or a config fails at the limit instead of filling memory", "[files]") {
  const auto dir = fresh_dir("zero");
  const auto stats = run_sh(dir, "$KVSIM trace stats /dev/zero");
  CHECK(stats.exit_code == 1);
  CHECK(stats.err ==
        "kvsim: error: /dev/zero:1: line longer than the limit of 64 MiB (kvsim reads a trace a line at a time: is "
        "this a trace?)\n");
  const auto format = run_sh(dir, "$KVSIM trace stats /dev/zero --format native-jsonl");
  CHECK(format.exit_code == 1);
  CHECK(format.err == stats.err);
  const auto size = run_sh(dir, "$KVSIM size --config /dev/zero");
  CHECK(size.exit_code == 1);
  CHECK(size.err ==
        "kvsim: error: /dev/zero: larger than the limit of 16 MiB for a model config: is this a config.json?\n");
}

TEST_CASE("LineReader: a line of the limit is read, one byte more is an error naming file, line and limit", "[files]") {
  const auto dir = fresh_dir("line-limit");
  // Line 1 is 5 bytes, line 2 exactly the limit of 100, line 3 101 bytes.
  write_file(dir / "t", "short\n" + std::string(100, 'a') + "\n" + std::string(101, 'b') + "\n");
  kvsim::detail::LineReader lines((dir / "t").string(), 100);
  std::string_view line;
  REQUIRE(lines.next(line));
  CHECK(line == "short");
  REQUIRE(lines.next(line));
  CHECK(line.size() == 100);
  try {
    lines.next(line);
    FAIL("expected an error");
  } catch (const kvsim::InputError& e) {
    CHECK(std::string(e.what()) == (dir / "t").string() +
                                       ":3: line longer than the limit of 100 bytes (kvsim reads a trace a line at a "
                                       "time: is this a trace?)");
  }
}

TEST_CASE("LineReader: rewind() starts again from the first line without reading the file again", "[files]") {
  const auto dir = fresh_dir("rewind");
  const auto r = run_sh(dir, "mkfifo f && (printf '\\n\\nid,arrival\\n1,0\\n' > f &) && echo ok");
  REQUIRE(r.exit_code == 0);
  kvsim::detail::LineReader lines((dir / "f").string());
  lines.keep_for_rewind();
  const auto first = kvsim::detail::first_line(lines);
  CHECK(first.text == "id,arrival");
  CHECK(first.line == 3);
  lines.rewind();
  std::string_view line;
  std::vector<std::string> all;
  while (lines.next(line)) all.emplace_back(line);
  CHECK(all == std::vector<std::string>{"", "", "id,arrival", "1,0"});
  CHECK(lines.line_number() == 4);
}

TEST_CASE("ScratchFile: rows come back by offset and in order, and a failed read names the output", "[files]") {
  const auto dir = fresh_dir("scratch");
  const std::string output = (dir / "pr.csv").string();
  kvsim::cli::ScratchFile scratch(output, "the per-request rows");
  // Offsets are the bytes appended before: 0, then 4 ("a,1\n"), then 10 ("bb,22\n").
  CHECK(scratch.append("a,1\n") == 0);
  CHECK(scratch.append("bb,22\n") == 4);
  CHECK(scratch.append("c,3\n") == 10);
  std::string row;
  scratch.read(4, 6, row);
  CHECK(row == "bb,22\n");
  scratch.read(0, 4, row);
  CHECK(row == "a,1\n");
  // Reading by offset leaves the whole copy from the start.
  {
    kvsim::OutputFile out(output);
    scratch.copy_to(out);
    out.commit();
  }
  CHECK(slurp(output) == "a,1\nbb,22\nc,3\n");
  // 14 bytes were written: 6 from offset 10 reach past the end.
  try {
    scratch.read(10, 6, row);
    FAIL("expected an error");
  } catch (const kvsim::InputError& e) {
    CHECK(std::string(e.what()) == output + ": cannot read back the per-request rows from a scratch file");
  }
}

TEST_CASE("trace gen refuses a system prompt longer than it hashes", "[files]") {
  const auto r = run_cli({"trace", "gen", "--requests", "1", "--system-prompt", "tokens=1099511627776,share=1"}, 20);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--system-prompt: tokens=1099511627776 is more than 16777216, the most trace gen hashes in one "
                   "prompt") != std::string::npos);
  // Up to 2^24 tokens in all is accepted: a system prompt of 16,777,116 and a fresh prompt
  // of 100 make 16,777,216 (1,048,576 hashes of 16 tokens); one more token is refused.
  const auto at_limit = run_cli({"trace", "gen", "--requests", "1", "--system-prompt", "tokens=16777116,share=1",
                                 "--prompt", "100", "--output", "1", "--to", "jsonl"},
                                60);
  CHECK(at_limit.exit_code == 0);
  CHECK(std::count(at_limit.out.begin(), at_limit.out.end(), ',') == 5 + (1'048'576 - 1));  // 5 between the fields, the rest between hashes
  const auto over = run_cli({"trace", "gen", "--requests", "1", "--system-prompt", "tokens=16777116,share=1",
                             "--prompt", "101", "--output", "1", "--to", "jsonl"},
                            60);
  CHECK(over.exit_code == 2);
  CHECK(over.err.find("a prompt with prefix hashes would hold more than 16777216 tokens") != std::string::npos);
}

// ---------------------------------------------------------------------------------------
// Options that would have no effect, and values that would be silently wrong

TEST_CASE("an allocator or cost-model parameter given twice is an error", "[files]") {
  const auto twice = run_cli({"replay", kChat, "--model", "llama-3.1-8b", "--allocator", "paged:block=16,block=32"});
  CHECK(twice.exit_code == 2);
  CHECK(twice.err.find("--allocator: 'paged:block=16,block=32': 'block' is given twice (block=16 and block=32): give "
                       "it once") != std::string::npos);
  const auto cost = run_cli({"replay", kChat, "--model", "llama-3.1-8b", "--cost", "constant:step=1ms,step=2ms"});
  CHECK(cost.exit_code == 2);
  CHECK(cost.err.find("'step' is given twice (step=1ms and step=2ms)") != std::string::npos);
}

TEST_CASE("options that change nothing for this input are refused", "[files]") {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{"trace", "stats", kChat, "--rate", "2"},
       "--rate: applies to length-only traces (which have no arrival times) only, and this trace is native-csv"},
      {{"trace", "stats", kChat, "--seed", "3"}, "--seed: applies to the arrivals of length-only traces only"},
      {{"trace", "stats", kChat, "--keep-failed"}, "--keep-failed: applies to BurstGPT traces only"},
      {{"trace", "convert", kChat, "-", "--to", "csv", "--hash-block-tokens", "32"},
       "--hash-block-tokens: applies to token-id traces only"},
      {{"replay", kChat, "--model", "llama-3.1-8b", "--rate", "2"}, "--rate: applies to length-only traces"},
      {{"replay", kChat, "--model", "llama-3.1-8b", "--sample-every", "1s"},
       "--sample-every: samples the timeline of --timeline or --html, and none is written: it would have no effect"},
      {{"size", "--model", "llama-3.1-8b", "--dtype", "fp16", "--kv-group-size", "32"},
       "--kv-group-size: sets the scale groups of an int8, int4 or int2 cache, and the KV dtype is fp16"},
      {{"size", "--model", "llama-3.1-8b", "--kv-group-size", "32"}, "the KV dtype is bf16"},
      {{"size", "--model", "llama-3.1-8b", "--mla-form", "latent"},
       "--mla-form: chooses how an MLA model's cache is laid out, and llama-3.1-8b has no MLA"},
      {{"trace", "gen", "--requests", "2", "--max-tokens-share", "0.5"},
       "--max-tokens-share is the share of requests given max_tokens, and --max-tokens is none"},
      {{"trace", "gen", "--requests", "2", "--block-tokens", "32"},
       "--block-tokens sizes the prefix hashes, which are written only with --system-prompt or --sessions"},
  };
  for (const auto& c : cases) {
    INFO(c.message);
    const auto r = run_cli(c.args);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(c.message) != std::string::npos);
    CHECK(r.out.empty());
  }
  // With an int dtype the group size is taken: an int8 cache of llama-3.1-8b, 32 layers x 8
  // KV heads x 128 dims x (K, V): 65,536 values of 1 byte, plus a 2-byte scale and zero-point
  // per group of 32 (2,048 groups x 4 bytes = 8,192): 73,728 bytes per token.
  const auto ok = run_cli({"size", "--model", "llama-3.1-8b", "--dtype", "int8", "--kv-group-size", "32", "--json"});
  REQUIRE(ok.exit_code == 0);
  CHECK(ok.out.find("73728") != std::string::npos);
}

TEST_CASE("torch_dtype int8 leaves the KV dtype at bf16, as docs/size.md says", "[files]") {
  kvsim::ModelSpec m;
  m.weight_dtype = "int8";
  CHECK(kvsim::default_kv_dtype(m) == kvsim::KvDtype::bf16);
  m.weight_dtype = "float8_e4m3fn";
  CHECK(kvsim::default_kv_dtype(m) == kvsim::KvDtype::bf16);
  m.weight_dtype = "float16";
  CHECK(kvsim::default_kv_dtype(m) == kvsim::KvDtype::fp16);
  // vLLM serves a float32 checkpoint in 16 bits (vllm/config/model.py _resolve_auto_dtype:
  // "Downcast for float32 models"), and its "auto" KV dtype is the served one.
  m.weight_dtype = "float32";
  CHECK(kvsim::default_kv_dtype(m) == kvsim::KvDtype::bf16);

  const auto dir = fresh_dir("int8");
  auto config = nlohmann::json::parse(slurp(std::string(KVSIM_SOURCE_DIR) + "/tests/data/configs/llama-3.1-8b.json"));
  config["torch_dtype"] = "int8";
  write_file(dir / "config.json", config.dump());
  const auto r = run_cli({"size", "--config", (dir / "config.json").string()});
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("KV dtype   bf16 (16 bits per value; default: bf16 (torch_dtype int8 is not fp16 or bf16))") !=
        std::string::npos);
  // A dtype of unknown width sizes the KV cache (bf16 by default) but not the weights: where a
  // budget needs them it is an error naming the field, not 16 bits assumed without a word.
  config["torch_dtype"] = "float8_e4m3fnuz";
  write_file(dir / "config.json", config.dump());
  const auto kv_only = run_cli({"size", "--config", (dir / "config.json").string(), "--tokens", "1000"});
  CHECK(kv_only.exit_code == 0);
  CHECK_THAT(kv_only.out, Catch::Contains("131,072,000"));  // 1,000 x 131,072 bytes
  const auto bad = run_cli({"size", "--config", (dir / "config.json").string(), "--device", "H100-80GB"});
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.err, Catch::Contains("config.json: field 'torch_dtype': \"float8_e4m3fnuz\" is not a dtype kvsim "
                                      "knows the width of, so the weights cannot be sized: give --weight-dtype or "
                                      "--weights-bytes"));
  // "torch." as some configs write it is dropped.
  config["torch_dtype"] = "torch.float16";
  write_file(dir / "config.json", config.dump());
  const auto prefixed = run_cli({"size", "--config", (dir / "config.json").string(), "--tokens", "1000"});
  CHECK(prefixed.exit_code == 0);
  CHECK_THAT(prefixed.out, Catch::Contains("default: the model's torch_dtype float16"));
  // A float32 checkpoint is served in 16 bits: its cache holds 32 layers x 8 KV heads x 128 x
  // 2 (K and V) x 2 bytes = 131,072 bytes a token, not twice that, and its weights are 16-bit.
  config["torch_dtype"] = "float32";
  write_file(dir / "config.json", config.dump());
  const auto f32 = run_cli({"size", "--config", (dir / "config.json").string(), "--tokens", "1000"});
  CHECK(f32.exit_code == 0);
  CHECK_THAT(f32.out, Catch::Contains("default: bf16 (torch_dtype float32: engines serve a float32 checkpoint in 16 "
                                      "bits)"));
  CHECK_THAT(f32.out, Catch::Contains("131,072,000"));
  const auto f32_budget = run_cli({"size", "--config", (dir / "config.json").string(), "--device", "H100-80GB"});
  CHECK(f32_budget.exit_code == 0);
  CHECK_THAT(f32_budget.out, Catch::Contains("torch_dtype float32, served in 16 bits"));
}

TEST_CASE("a ModelOpt checkpoint quantised for an fp8 KV cache is sized at fp8, as vLLM's auto dtype reads it", "[files]") {
  // vllm/utils/torch_utils.py resolve_kv_cache_dtype_string -> get_kv_cache_quant_algo_string:
  // for quant_method "modelopt*", kv_cache_scheme or kv_cache_quant_algo (inside
  // "quantization" or beside it) "FP8", or a scheme of static 8-bit floats, makes "auto" fp8.
  // Llama-3.1-8B at fp8: 32 layers x 8 KV heads x 128 x 2 (K and V) x 1 byte = 65,536 bytes a
  // token, 65,536,000 for 1,000 (131,072,000 at bf16).
  const auto dir = fresh_dir("modelopt-kv");
  const auto base = nlohmann::json::parse(slurp(std::string(KVSIM_SOURCE_DIR) + "/tests/data/configs/llama-3.1-8b.json"));
  const auto size_with = [&](const nlohmann::json& quantization, std::vector<std::string> extra = {}) {
    auto config = base;
    config["quantization_config"] = quantization;
    write_file(dir / "config.json", config.dump());
    std::vector<std::string> args{"size", "--config", (dir / "config.json").string(), "--tokens", "1000"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args);
  };
  for (const auto& q : {nlohmann::json{{"quant_method", "modelopt"}, {"quant_algo", "FP8"}, {"kv_cache_quant_algo", "FP8"}},
                        nlohmann::json{{"quant_method", "modelopt"},
                                       {"quantization", {{"quant_algo", "NVFP4"}, {"kv_cache_quant_algo", "fp8"}}}},
                        nlohmann::json{{"quant_method", "modelopt"},
                                       {"kv_cache_scheme", {{"num_bits", 8}, {"type", "float"}, {"dynamic", false}}}}}) {
    const auto r = size_with(q);
    INFO(q.dump());
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.out, Catch::Contains("KV dtype   fp8 (8 bits per value; default: the checkpoint's quantization_config "
                                      "(ModelOpt, an fp8 KV cache))"));
    CHECK_THAT(r.out, Catch::Contains("65,536,000"));
  }
  // Other methods, and values vLLM does not know (it warns and serves "auto"), leave bf16.
  for (const auto& q : {nlohmann::json{{"quant_method", "compressed-tensors"}, {"kv_cache_scheme", {{"num_bits", 8}}}},
                        nlohmann::json{{"quant_method", "modelopt"}, {"kv_cache_quant_algo", "INT8"}},
                        nlohmann::json{{"quant_method", "modelopt"}, {"kv_cache_quant_algo", nullptr}}}) {
    const auto r = size_with(q);
    INFO(q.dump());
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.out, Catch::Contains("131,072,000"));
  }
  // An NVFP4 cache kvsim does not size: an error naming the field, unless --dtype says.
  const nlohmann::json nvfp4{{"quant_method", "modelopt"}, {"kv_cache_quant_algo", "NVFP4"}};
  const auto refused = size_with(nvfp4);
  CHECK(refused.exit_code == 1);
  CHECK_THAT(refused.err, Catch::Contains("field 'quantization_config.kv_cache_quant_algo': the checkpoint is quantised "
                                          "for an NVFP4 KV cache, which kvsim does not size: give --dtype"));
  const auto told = size_with(nvfp4, {"--dtype", "fp8"});
  CHECK(told.exit_code == 0);
  CHECK_THAT(told.out, Catch::Contains("65,536,000"));
}

TEST_CASE("an MLA config with more KV heads than attention heads is refused", "[files]") {
  const auto dir = fresh_dir("mla-heads");
  auto config = nlohmann::json::parse(slurp(std::string(KVSIM_SOURCE_DIR) + "/tests/data/configs/deepseek-v3.json"));
  config["num_key_value_heads"] = 256;  // 128 attention heads
  write_file(dir / "config.json", config.dump());
  for (const char* form : {"latent", "decompressed"}) {
    const auto r = run_cli({"size", "--config", (dir / "config.json").string(), "--mla-form", form});
    CHECK(r.exit_code == 1);
    CHECK(r.err == "kvsim: error: " + (dir / "config.json").string() +
                       ": field 'num_key_value_heads': 256 KV heads do not divide the 128 attention heads evenly "
                       "(each KV head serves a whole group)\n");
  }
}

// ---------------------------------------------------------------------------------------
// Messages

TEST_CASE("messages show what the file says: -0, a NUL byte, an invisible byte-order mark", "[files]") {
  const auto dir = fresh_dir("messages");
  write_file(dir / "minus-zero.jsonl", "{\"id\":\"a\",\"arrival\":0,\"prompt_tokens\":-0,\"output_tokens\":1}\n");
  const auto minus = run_cli({"trace", "stats", (dir / "minus-zero.jsonl").string()});
  CHECK(minus.exit_code == 1);
  CHECK(minus.err == "kvsim: error: " + (dir / "minus-zero.jsonl").string() +
                         ":1: field 'prompt_tokens': expected a non-negative integer, got -0\n");

  // The parser would stop at the NUL and take the record for complete.
  write_file(dir / "nul.jsonl", std::string("{\"id\":\"a\",\"arrival\":0,\"prompt_tokens\":1,\"output_tokens\":1}\0garbage\n", 67));
  const auto nul = run_cli({"trace", "stats", (dir / "nul.jsonl").string(), "--format", "native-jsonl"});
  CHECK(nul.exit_code == 1);
  CHECK(nul.err == "kvsim: error: " + (dir / "nul.jsonl").string() +
                       ":1: a NUL byte at column 59: a trace is text (is this a binary file?)\n");

  // A second byte-order mark (the first is skipped as the file's) is part of the first
  // column's name, and shown.
  write_file(dir / "bom.csv", "\xEF\xBB\xBF\xEF\xBB\xBFid,arrival,prompt_tokens,output_tokens\n1,0,1,1\n");
  const auto bom = run_cli({"trace", "stats", (dir / "bom.csv").string(), "--format", "native-csv"});
  CHECK(bom.exit_code == 1);
  CHECK(bom.err.find(":1: unknown column '\\ufeffid'") != std::string::npos);
}

TEST_CASE("a directory given as a trace or a config is named as one, by every reader", "[files]") {
  const auto dir = fresh_dir("a-directory");
  const std::string d = dir.string();
  const std::string expected = "kvsim: error: " + d + ": is a directory, not a file\n";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"replay", d}, {"trace", "stats", d}, {"trace", "convert", d, "-", "--to", "csv"},
        {"size", "--config", d}, {"replay", std::string(KVSIM_SOURCE_DIR) + "/traces/chat-mix.csv", "--config", d}}) {
    const auto r = run_cli(args);
    INFO(args.front() + " " + args[1]);
    CHECK(r.exit_code == 1);
    CHECK(r.err == expected);
  }
}

TEST_CASE("control characters in a file name are printed escaped", "[files]") {
  const auto r = run_cli({"trace", "stats", "/nonexistent/\x1b[31mred.csv"});
  CHECK(r.exit_code == 1);
  CHECK(r.err == "kvsim: error: /nonexistent/\\x1B[31mred.csv: cannot open: No such file or directory\n");
}

TEST_CASE("control characters a config.json holds are printed escaped, on stdout and in errors", "[files]") {
  const auto dir = fresh_dir("config-escapes");
  auto config = nlohmann::json::parse(slurp(std::string(KVSIM_SOURCE_DIR) + "/tests/data/configs/llama-3.1-8b.json"));
  config["model_type"] = "\x1b[31mred";
  write_file(dir / "config.json", config.dump());
  auto r = run_cli({"size", "--config", (dir / "config.json").string(), "--tokens", "10"});
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find('\x1b') == std::string::npos);
  CHECK(r.out.find("model_type \\x1B[31mred") != std::string::npos);
  // A layer type quoted in an error, and the JSON parser's "last read".
  config["model_type"] = "llama";
  config["layer_types"] = std::vector<std::string>(32, "\x1b[2J");
  write_file(dir / "config.json", config.dump());
  r = run_cli({"size", "--config", (dir / "config.json").string(), "--tokens", "10"});
  CHECK(r.exit_code == 1);
  CHECK(r.err.find('\x1b') == std::string::npos);
  CHECK(r.err.find("\"\\x1B[2J\" is not a layer type") != std::string::npos);
  write_file(dir / "config.json", "{\"model_type\": \"\xff\"}");
  r = run_cli({"size", "--config", (dir / "config.json").string(), "--tokens", "10"});
  CHECK(r.exit_code == 1);
  CHECK(r.err.find('\xff') == std::string::npos);
  CHECK(r.err.find("last read: '\"\\xFF'") != std::string::npos);
}

TEST_CASE("an overflow computed from a config names the config", "[files]") {
  const auto dir = fresh_dir("overflow");
  auto config = nlohmann::json::parse(slurp(std::string(KVSIM_SOURCE_DIR) + "/tests/data/configs/llama-3.1-8b.json"));
  config["head_dim"] = 4611686018427387904;  // 2^62: 2^62 x 16 bits overflows
  write_file(dir / "config.json", config.dump());
  const auto r = run_cli({"size", "--config", (dir / "config.json").string()});
  CHECK(r.exit_code == 1);
  CHECK(r.err.rfind("kvsim: error: " + (dir / "config.json").string() + ": ", 0) == 0);
  CHECK(r.err.find("overflows 64 bits") != std::string::npos);
  // 2^40: the KV sizes fit (2^40 x 8 heads x 2 x 2 bytes x 32 layers = 2^50 per position), the
  // parameter count does not (32 layers x 4,096 x 2^40 x 32 heads x 2 bytes): replay, which
  // needs it for the roofline, names the config too.
  config["head_dim"] = 1099511627776;
  write_file(dir / "config.json", config.dump());
  const std::string chat = std::string(KVSIM_SOURCE_DIR) + "/traces/chat-mix.csv";
  const auto replay = run_cli({"replay", chat, "--config", (dir / "config.json").string()});
  CHECK(replay.exit_code == 1);
  CHECK(replay.err == "kvsim: error: " + (dir / "config.json").string() +
                          ": parameter count overflows 64 bits (the sizes in this config are implausible: check "
                          "num_hidden_layers, the head counts and head_dim)\n");
  // A block of 2^47 positions x 131,072 bytes: the allocator's spec with this model.
  const auto block = run_cli({"replay", chat, "--model", "llama-3.1-8b", "--allocator", "paged:block=140737488355328"});
  CHECK(block.exit_code == 2);
  CHECK_THAT(block.err, Catch::Contains("--allocator: 'paged:block=140737488355328': bytes per block overflows 64 bits "
                                        "with this model's bytes per position"));
  // dense-static's row of the maximum length, known before the first request: the longest
  // length taken (2^40) of a model with head_dim 2^20, 2^20 x 8 heads x 2 x 2 bytes x 32
  // layers = 2^30 bytes a position, is 2^70 bytes.
  config["head_dim"] = 1048576;
  write_file(dir / "config.json", config.dump());
  const auto row = run_cli({"replay", chat, "--config", (dir / "config.json").string(), "--allocator", "dense-static",
                            "--max-model-len", "1099511627776"});
  CHECK(row.exit_code == 2);
  CHECK_THAT(row.err, Catch::Contains("reserve=max-model-len: a row of 1099511627776 positions overflows 64 "
                                      "bits of bytes: pass a smaller --max-model-len"));
  // A sliding group's row is its window: Mistral's 4,096 positions whatever the length.
  const auto sliding = run_cli({"replay", chat, "--model", "mistral-7b-v0.1", "--allocator", "dense-static",
                                "--max-model-len", "1099511627776", "--requests", "2", "--cost",
                                "constant:step=1ms,prefill-token=0ps"});
  CHECK(sliding.exit_code == 0);
}

TEST_CASE("an overflow computed from the workload names the options", "[files]") {
  // llama-3.1-8b costs 131,072 bytes per position: 2^63 - 1 positions overflow 64 bits.
  const auto tokens = run_cli({"size", "--model", "llama-3.1-8b", "--tokens", "9223372036854775807"});
  CHECK(tokens.exit_code == 1);
  CHECK(tokens.err ==
        "kvsim: error: KV bytes per sequence overflows 64 bits for this model (from --tokens): give fewer positions or "
        "sequences\n");
  // 1,000 positions fit (131,072,000 bytes), 2^63 - 1 sequences of them do not.
  const auto seqs = run_cli({"size", "--model", "llama-3.1-8b", "--tokens", "1000", "--seqs", "9223372036854775807"});
  CHECK(seqs.exit_code == 1);
  CHECK(seqs.err ==
        "kvsim: error: bytes for all sequences overflows 64 bits for this model (from --tokens, --seqs): give fewer "
        "positions or sequences\n");
  // A page of 2^63 - 1 positions overflows with no workload at all: --tokens is not blamed.
  const auto block = run_cli({"size", "--model", "llama-3.1-8b", "--block-size", "9223372036854775807", "--tokens", "16",
                              "--device", "H100-80GB"});
  CHECK(block.exit_code == 1);
  CHECK(block.err.find("overflows 64 bits for this model alone") != std::string::npos);
  CHECK(block.err.find("from --tokens") == std::string::npos);
}
