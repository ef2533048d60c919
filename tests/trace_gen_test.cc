// The synthetic trace generator: determinism, each distribution against its definition,
// the option grammar, and the bundled traces (which must come out of the commands that
// traces/README.md gives for them, byte for byte).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "kvsim/trace.h"
#include "kvsim/trace_gen.h"
#include "kvsim/trace_stats.h"
#include "random.h"
#include "trace_gen_internal.h"
#include "trace_test_util.h"

using namespace kvsim;
using test::run_cli;
using test::scratch_path;
using test::slurp;

namespace {

std::vector<Request> generate(const GenOptions& options) {
  TraceGenerator gen(options);
  std::vector<Request> out;
  Request r;
  while (gen.next(r)) out.push_back(r);
  return out;
}

GenOptions base(std::int64_t requests) {
  GenOptions o;
  o.requests = requests;
  return o;
}

double mean_of(const std::vector<std::int64_t>& v) {
  double sum = 0;
  for (auto x : v) sum += static_cast<double>(x);
  return sum / static_cast<double>(v.size());
}

std::int64_t p99_of(std::vector<std::int64_t> v) {
  std::sort(v.begin(), v.end());
  return nearest_rank_percentile(v, 99);
}

const std::vector<std::string> kFullOptions = {
    "--requests", "300",
    "--arrivals", "gamma:rate=3,cv=2",
    "--prompt", "lognormal:mean=500,p99=2000",
    "--output", "uniform:1..400",
    "--max-tokens", "factor:1.5",
    "--max-tokens-share", "60%",
    "--cancel", "p=0.05,after=uniform:100ms..2s",
    "--cancel", "p=0.05,after=lognormal:mean=10s,p99=60s",
    "--n", "choice:1=0.8,2=0.1,4=0.1",
    "--system-prompt", "tokens=300,share=0.3",
    "--sessions", "share=0.3,turns=uniform:2..5,gap=exp:10s,user=lognormal:mean=80,p99=300",
    "--block-tokens", "32",
};

}  // namespace

TEST_CASE("the same options and seed give the same bytes, another seed does not") {
  auto args = std::vector<std::string>{"trace", "gen", "--seed", "42", "-o", scratch_path("g1.csv")};
  args.insert(args.end(), kFullOptions.begin(), kFullOptions.end());
  REQUIRE(run_cli(args).exit_code == 0);
  args[5] = scratch_path("g2.csv");
  REQUIRE(run_cli(args).exit_code == 0);
  args[3] = "43";
  args[5] = scratch_path("g3.csv");
  REQUIRE(run_cli(args).exit_code == 0);
  const auto g1 = slurp(scratch_path("g1.csv"));
  CHECK(g1.size() > 10'000);
  CHECK(g1 == slurp(scratch_path("g2.csv")));
  CHECK(g1 != slurp(scratch_path("g3.csv")));
  // And what it wrote is a valid trace with every feature asked for.
  auto reader = open_trace(scratch_path("g1.csv"));
  const TraceStats s = compute_trace_stats(*reader);
  CHECK(s.requests == 300);
  CHECK(s.cancelled > 0);
  CHECK(s.with_max_tokens > 0);
  CHECK(s.parallel_requests > 0);
  CHECK(s.sessions > 0);
  CHECK(s.prefix_blocks_seen > 0);
}

TEST_CASE("deterministic maths agrees with the standard library") {
  for (double x : {1e-300, 1e-10, 0.001, 0.5, 0.7071, 1.0, 1.5, 2.0, 10.0, 1155.0, 1e10, 1e300}) {
    CHECK(detail::det_log(x) == Approx(std::log(x)).epsilon(1e-14).margin(1e-15));
  }
  for (double x : {-700.0, -20.0, -1.0, -1e-9, 0.0, 0.3, 1.0, 5.25, 8.33, 100.0, 700.0}) {
    CHECK(detail::det_exp(x) == Approx(std::exp(x)).epsilon(1e-14));
  }
}

TEST_CASE("a lognormal by mean and p99: the formula, and samples that match it") {
  // By hand, for Azure's conversation prompts (mean 1155, p99 4142): ln(4142/1155) =
  // 1.27713, z^2 = 5.41189, sigma = 2.32635 - sqrt(5.41189 - 2.55427) = 0.63587,
  // mu = ln(1155) - sigma^2 / 2 = 7.05186 - 0.20216 = 6.84970.
  double mu = 0;
  double sigma = 0;
  REQUIRE(detail::lognormal_from_mean_p99(1155, 4142, mu, sigma));
  CHECK(sigma == Approx(0.63587).margin(1e-4));
  CHECK(mu == Approx(6.84970).margin(1e-4));
  CHECK_FALSE(detail::lognormal_from_mean_p99(100, 90, mu, sigma));    // p99 below the mean
  CHECK_FALSE(detail::lognormal_from_mean_p99(100, 1500, mu, sigma));  // ratio 15 > 14.97

  GenOptions o = base(100'000);
  o.prompt_tokens = parse_count_distribution("lognormal:mean=1155,p99=4142,min=0", "--prompt");
  std::vector<std::int64_t> prompts;
  for (const auto& r : generate(o)) prompts.push_back(r.prompt_tokens);
  CHECK(mean_of(prompts) == Approx(1155).epsilon(0.02));
  CHECK(static_cast<double>(p99_of(prompts)) == Approx(4142).epsilon(0.03));
}

TEST_CASE("arrival processes: Poisson rate and CV, gamma CV, on/off silence") {
  GenOptions o = base(50'000);
  o.arrivals = parse_arrival_process("poisson:rate=5.5", "--arrivals");
  {
    TraceStatsBuilder b;
    for (const auto& r : generate(o)) b.add(r);
    const auto s = b.finish();
    CHECK(s.rate_per_s.value() == Approx(5.5).epsilon(0.02));
    CHECK(s.interarrival_cv.value() == Approx(1.0).epsilon(0.03));
  }
  o.arrivals = parse_arrival_process("gamma:rate=2.6,cv=3", "--arrivals");
  {
    TraceStatsBuilder b;
    for (const auto& r : generate(o)) b.add(r);
    const auto s = b.finish();
    CHECK(s.rate_per_s.value() == Approx(2.6).epsilon(0.05));
    CHECK(s.interarrival_cv.value() == Approx(3.0).epsilon(0.08));
  }
  o.arrivals = parse_arrival_process("onoff:rate=20,on=10s,off=50s", "--arrivals");
  const auto bursts = generate(o);
  for (const auto& r : bursts) {
    REQUIRE(r.arrival_ns % 60'000'000'000 < 10'000'000'000);  // nothing while off
  }
  // 20/s for 10 s of every 60: 200 per minute.
  const double minutes = static_cast<double>(bursts.back().arrival_ns) / 60e9;
  CHECK(static_cast<double>(bursts.size()) / minutes == Approx(200).epsilon(0.03));
  // A slower rate while off: 20/s for 10 s and 0.5/s for 50 s, 225 a minute, 25 of them off.
  o.arrivals = parse_arrival_process("onoff:rate=20,on=10s,off=50s,off_rate=0.5", "--arrivals");
  const auto murmur = generate(o);
  const double murmur_minutes = static_cast<double>(murmur.back().arrival_ns) / 60e9;
  CHECK(static_cast<double>(murmur.size()) / murmur_minutes == Approx(225).epsilon(0.03));
  const auto off = std::count_if(murmur.begin(), murmur.end(),
                                 [](const Request& r) { return r.arrival_ns % 60'000'000'000 >= 10'000'000'000; });
  CHECK(static_cast<double>(off) / murmur_minutes == Approx(25).epsilon(0.1));
  // A nanosecond on in every hour: the arrivals are the off rate's, 3.6 an hour (thinning
  // candidates at the peak rate took 3.6e12 of them an arrival, and never finished).
  o.arrivals = parse_arrival_process("onoff:rate=10,on=1ns,off=1h,off_rate=0.001", "--arrivals");
  const auto sparse = generate(o);
  CHECK(static_cast<double>(sparse.size()) / (static_cast<double>(sparse.back().arrival_ns) / 3600e9) ==
        Approx(3.6).epsilon(0.05));
}

TEST_CASE("generation stops at a time (--duration) or a count (--requests)") {
  GenOptions o = base(0);
  o.duration_ns = 100'000'000'000;  // 100 s at 5.5/s: about 550 requests
  const auto rs = generate(o);
  CHECK(rs.back().arrival_ns <= o.duration_ns);
  CHECK(static_cast<double>(rs.size()) == Approx(550).epsilon(0.15));
  CHECK(generate(base(17)).size() == 17);
}

TEST_CASE("uniform, choice and empirical counts stay in their sets") {
  const auto source = test::write_file("emp.csv",
                                       "id,arrival,prompt_tokens,output_tokens\n"
                                       "a,0,100,7\nb,1,200,8\nc,2,300,9\n");
  GenOptions o = base(2'000);
  o.prompt_tokens = parse_count_distribution("uniform:8000..32000", "--prompt");
  o.output_tokens = parse_count_distribution("empirical:" + source, "--output");
  o.n = parse_count_distribution("choice:1=0.9,4=0.1", "--n");
  std::int64_t fours = 0;
  std::set<std::int64_t> outputs;
  std::int64_t lowest = INT64_MAX;
  std::int64_t highest = 0;
  for (const auto& r : generate(o)) {
    lowest = std::min(lowest, r.prompt_tokens);
    highest = std::max(highest, r.prompt_tokens);
    outputs.insert(r.output_tokens);
    REQUIRE((r.n == 1 || r.n == 4));
    fours += r.n == 4;
  }
  CHECK(lowest >= 8000);
  CHECK(highest <= 32000);
  CHECK(highest - lowest > 23'000);
  CHECK(outputs == std::set<std::int64_t>{7, 8, 9});
  CHECK(static_cast<double>(fours) / 2000 == Approx(0.1).margin(0.03));

  // --lengths-from draws whole rows: prompt 100 always comes with output 7.
  GenOptions joint = base(500);
  joint.lengths_from = source;
  for (const auto& r : generate(joint)) REQUIRE(r.output_tokens == r.prompt_tokens / 100 + 6);
}

TEST_CASE("max_tokens policies") {
  GenOptions o = base(3'000);
  o.max_tokens = parse_max_tokens_policy("output", "--max-tokens");
  for (const auto& r : generate(o)) REQUIRE(r.max_tokens == r.output_tokens);

  o.max_tokens = parse_max_tokens_policy("factor:1.5", "--max-tokens");
  for (const auto& r : generate(o)) {
    // max = ceil(1.5 * output): 2 max >= 3 output > 2 (max - 1).
    REQUIRE(2 * *r.max_tokens >= 3 * r.output_tokens);
    REQUIRE(3 * r.output_tokens > 2 * (*r.max_tokens - 1));
  }

  o.max_tokens = parse_max_tokens_policy("fixed:150", "--max-tokens");
  o.max_tokens.share_ppb = parse_probability_ppb("0.5", "--max-tokens-share");
  std::int64_t given = 0;
  std::int64_t capped = 0;
  for (const auto& r : generate(o)) {
    if (!r.max_tokens) continue;
    ++given;
    REQUIRE(*r.max_tokens == 150);
    REQUIRE(r.output_tokens <= 150);
    capped += r.output_tokens == 150;
  }
  CHECK(static_cast<double>(given) / 3000 == Approx(0.5).margin(0.04));
  CHECK(capped > 0);  // outputs above 150 were cut to the limit
}

TEST_CASE("cancellation clauses: shares and delays") {
  GenOptions o = base(10'000);
  o.cancel.push_back(parse_cancel_clause("p=0.03,after=uniform:200ms..2s", "--cancel"));
  o.cancel.push_back(parse_cancel_clause("p=2%,after=30s", "--cancel"));
  std::int64_t early = 0;
  std::int64_t late = 0;
  for (const auto& r : generate(o)) {
    if (!r.cancel_ns) continue;
    const std::int64_t delay = *r.cancel_ns - r.arrival_ns;
    if (delay == 30'000'000'000) {
      ++late;
    } else {
      REQUIRE(delay >= 200'000'000);
      REQUIRE(delay <= 2'000'000'000);
      ++early;
    }
  }
  CHECK(static_cast<double>(early) / 10'000 == Approx(0.03).margin(0.008));
  CHECK(static_cast<double>(late) / 10'000 == Approx(0.02).margin(0.007));
}

TEST_CASE("system prompts are shared prefixes, and sessions extend their previous turn") {
  GenOptions o = base(3'000);
  o.arrivals.rate_per_s = 1;
  o.block_tokens = 16;
  o.prompt_tokens = parse_count_distribution("uniform:20..200", "--prompt");
  o.output_tokens = parse_count_distribution("uniform:1..100", "--output");
  o.system_prompts.push_back(parse_system_prompt("tokens=64,share=0.4", "--system-prompt"));
  o.sessions = parse_session_model("share=0.5,turns=uniform:2..4,gap=exp:5s,user=uniform:5..50", "--sessions");
  const auto rs = generate(o);
  std::map<std::string, std::vector<Request>> by_session;
  std::map<std::vector<std::uint64_t>, int> first_four;
  for (const auto& r : rs) {
    REQUIRE(r.prefix_block_tokens == 16);
    REQUIRE(static_cast<std::int64_t>(r.prefix_hashes.size()) == r.prompt_tokens / 16);  // full blocks only
    if (!r.session.empty()) by_session[r.session].push_back(r);
    if (r.prefix_hashes.size() >= 4) {
      ++first_four[std::vector<std::uint64_t>(r.prefix_hashes.begin(), r.prefix_hashes.begin() + 4)];
    }
  }
  // The system prompt's 4 blocks are one sequence of hashes shared by about 40% of requests
  // (first turns; later turns keep their session's system prompt too).
  int most = 0;
  for (const auto& [hashes, count] : first_four) most = std::max(most, count);
  CHECK(static_cast<double>(most) / static_cast<double>(rs.size()) > 0.3);

  int extended = 0;
  for (const auto& [name, turns] : by_session) {
    for (std::size_t i = 1; i < turns.size(); ++i) {
      const Request& prev = turns[i - 1];
      const Request& cur = turns[i];
      REQUIRE(cur.arrival_ns >= prev.arrival_ns);
      // The new prompt is the previous prompt + the previous output + new user tokens.
      REQUIRE(cur.prompt_tokens >= prev.prompt_tokens + prev.output_tokens + 5);
      REQUIRE(cur.prompt_tokens <= prev.prompt_tokens + prev.output_tokens + 50);
      // So its hashes start with all of the previous prompt's full blocks.
      REQUIRE(std::equal(prev.prefix_hashes.begin(), prev.prefix_hashes.end(), cur.prefix_hashes.begin()));
      ++extended;
    }
    REQUIRE(turns.size() <= 4);
  }
  CHECK(extended > 100);
  TraceStatsBuilder b;
  for (const auto& r : rs) b.add(r);
  CHECK(b.finish().prefix_block_reuse() > 0.3);
}

TEST_CASE("option grammar: good forms parse, bad ones name the option") {
  CHECK(parse_count_distribution("512", "--prompt").value == 512);
  CHECK(parse_count_distribution("uniform:1..2", "--prompt").high == 2);
  CHECK(parse_duration_distribution("uniform:1s..30s", "--cancel").high_ns == 30'000'000'000);
  CHECK(parse_duration_distribution("exp:mean=20s", "--cancel").value_ns == 20'000'000'000);
  CHECK(parse_probability_ppb("5%", "--cancel") == 50'000'000);
  CHECK(parse_probability_ppb("0.05", "--cancel") == 50'000'000);
  CHECK(parse_rate_per_s("5.5", "--rate") == 5.5);
  const auto cancel = parse_cancel_clause("after=lognormal:mean=5s,p99=60s,p=0.1", "--cancel");
  CHECK(cancel.probability_ppb == 100'000'000);
  CHECK(cancel.after.p99_ns == 60'000'000'000);

  CHECK_THROWS_WITH(parse_count_distribution("lognormal:mean=100,p99=5000", "--prompt"),
                    Catch::Contains("--prompt") && Catch::Contains("14.97"));
  CHECK_THROWS_WITH(parse_count_distribution("gaussian:1", "--output"), Catch::Contains("unknown distribution"));
  CHECK_THROWS_WITH(parse_count_distribution("uniform:9..3", "--output"), Catch::Contains("low end is above"));
  CHECK_THROWS_WITH(parse_arrival_process("poisson", "--arrivals"), Catch::Contains("poisson:rate=5.5"));
  CHECK_THROWS_WITH(parse_cancel_clause("p=1.5,after=1s", "--cancel"), Catch::Contains("between 0 and 1"));
  CHECK_THROWS_WITH(parse_session_model("share=0.5,turns=3", "--sessions"), Catch::Contains("missing gap="));
  // max_context=0 would read as a limit that never applies: leaving it out says "no limit".
  CHECK_THROWS_WITH(parse_session_model("share=0.5,turns=3,gap=1s,max_context=0", "--sessions"),
                    Catch::Contains("--sessions") && Catch::Contains("max_context must be at least 1"));
  // Options that could never act are refused, not ignored: sessions that never reach a second
  // turn (so gap, user and max_context never act), an on/off process without an off period
  // (off_rate never acts), and a choice value given twice (which weight?).
  for (const char* turns : {"turns=1", "turns=uniform:0..1", "turns=choice:1=0.5,4=0"}) {
    CHECK_THROWS_WITH(parse_session_model(std::string("share=0.5,") + turns + ",gap=5s,user=100", "--sessions"),
                      Catch::Contains("turns never exceed 1"));
  }
  CHECK(parse_session_model("share=0.5,turns=choice:1=0.5,2=0.5,gap=5s", "--sessions").turns.choices.size() == 2);
  CHECK_THROWS_WITH(parse_arrival_process("onoff:rate=20,on=5s,off=0s,off_rate=3", "--arrivals"),
                    Catch::Contains("the off period must be longer than 0"));
  CHECK_THROWS_WITH(parse_count_distribution("choice:1=1,1=0", "--prompt"), Catch::Contains("the value 1 is given twice"));
  CHECK_THROWS_WITH(parse_system_prompt("tokens=10,shared=0.5", "--system-prompt"),
                    Catch::Contains("keys tokens, share, got \"shared=0.5\""));

  GenOptions o = base(10);
  o.n = parse_count_distribution("uniform:0..3", "--n");
  CHECK_THROWS_WITH(validate_gen_options(o), Catch::Contains("--n") && Catch::Contains("at least 1"));
  o = base(10);
  o.cancel.push_back(parse_cancel_clause("p=0.7,after=1s", "--cancel"));
  o.cancel.push_back(parse_cancel_clause("p=0.5,after=1s", "--cancel"));
  CHECK_THROWS_WITH(validate_gen_options(o), Catch::Contains("add up to more than 1"));
}

TEST_CASE("gen: bad options exit 2 with the usage, unreadable empirical files exit 1") {
  const auto ratio = run_cli({"trace", "gen", "--prompt", "lognormal:mean=100,p99=5000"});
  CHECK(ratio.exit_code == 2);
  CHECK_THAT(ratio.err, Catch::Contains("--prompt: lognormal") && Catch::Contains("Usage: kvsim trace gen"));
  const auto n0 = run_cli({"trace", "gen", "--n", "0"});
  CHECK(n0.exit_code == 2);
  const auto both = run_cli({"trace", "gen", "--lengths-from", "x.csv", "--prompt", "5"});
  CHECK(both.exit_code == 2);
  const auto missing = run_cli({"trace", "gen", "--prompt", "empirical:/nonexistent.csv", "--requests", "3"});
  CHECK(missing.exit_code == 1);
  CHECK_THAT(missing.err, Catch::Contains("/nonexistent.csv: cannot open"));
  // 2^40 + 1 tokens: more than a reader accepts, so gen does not write it, not even in part.
  const std::string huge_path = test::scratch_path("huge.csv");
  std::filesystem::remove(huge_path);
  const auto huge = run_cli({"trace", "gen", "--requests", "3", "--prompt", "1099511627777", "-o", huge_path});
  CHECK(huge.exit_code == 2);
  CHECK_THAT(huge.err, Catch::Contains("--prompt: a request of 1099511627777 tokens"));
  CHECK_FALSE(std::filesystem::exists(huge_path));
  CHECK_FALSE(std::filesystem::exists(huge_path + ".kvsim-tmp"));
  const auto jsonl = run_cli({"trace", "gen", "--requests", "3", "--to", "jsonl"});
  CHECK(jsonl.exit_code == 0);
  CHECK_THAT(jsonl.out, Catch::StartsWith("{\"id\":\"1\",\"arrival\":"));
}

TEST_CASE("the bundled traces come out of the commands in traces/README.md, byte for byte") {
  const std::string dir = std::string(KVSIM_SOURCE_DIR) + "/traces/";
  std::ifstream readme(dir + "README.md");
  REQUIRE(readme);
  // Commands are in ```sh blocks, one per trace, possibly continued with backslashes.
  std::string line;
  std::string command;
  std::vector<std::string> commands;
  while (std::getline(readme, line)) {
    if (command.empty() && line.rfind("kvsim trace gen ", 0) != 0) continue;
    const bool continued = !line.empty() && line.back() == '\\';
    command += continued ? line.substr(0, line.size() - 1) : line;
    if (!continued) {
      commands.push_back(command);
      command.clear();
    }
  }
  std::set<std::string> made;
  for (const auto& c : commands) {
    std::istringstream words(c);
    std::vector<std::string> args;
    std::string word;
    words >> word;  // "kvsim"
    std::string target;
    while (words >> word) {
      if (!args.empty() && (args.back() == "-o" || args.back() == "--out")) {
        target = word;
        word = scratch_path("bundled-" + std::filesystem::path(word).filename().string());
      }
      args.push_back(word);
    }
    INFO(c);
    if (target.rfind("traces/", 0) != 0) continue;  // an example, not a bundled trace
    const auto r = run_cli(args);
    REQUIRE(r.exit_code == 0);
    CHECK(slurp(scratch_path("bundled-" + std::filesystem::path(target).filename().string())) ==
          slurp(std::string(KVSIM_SOURCE_DIR) + "/" + target));
    CHECK(std::filesystem::file_size(std::string(KVSIM_SOURCE_DIR) + "/" + target) < 200 * 1024);
    made.insert(target);
  }
  CHECK(made.count("traces/chat-mix.csv") == 1);
  CHECK(made.count("traces/long-context.csv") == 1);
  CHECK(made.count("traces/shared-prefix.csv") == 1);
}

TEST_CASE("the bundled chat mix looks like chat traffic with cancellations and max_tokens") {
  auto reader = open_trace(std::string(KVSIM_SOURCE_DIR) + "/traces/chat-mix.csv");
  const TraceStats s = compute_trace_stats(*reader);
  CHECK(s.requests == 2'000);
  CHECK(s.prompt_tokens.mean == Approx(1155).epsilon(0.1));
  CHECK(s.output_tokens.mean == Approx(211).epsilon(0.15));
  CHECK(static_cast<double>(s.cancelled) / 2000 == Approx(0.05).margin(0.015));
  CHECK(s.with_max_tokens > 0);
  CHECK(s.with_max_tokens < s.requests);
}
