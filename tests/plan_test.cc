// kvsim plan: the search (bracket_search) on predicates whose boundary is known, and the
// command on a trace where the rate-scale at which preemption starts is derived by hand.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_util.h"
#include "cli/plan.h"
#include "trace_test_util.h"

using kvsim::cli::bracket_search;
using kvsim::cli::SearchSpec;
using kvsim::test::run_cli;
using kvsim::test::write_file;

namespace {

// `kvsim plan` on `trace` as "brackets the rate-scale at which preemption starts" derives it:
// llama-3.1-8b, paged blocks of 16 positions, a budget of exactly 3 blocks, no watermark,
// every step 10 ms, preemption not allowed; then `extra`.
kvsim::test::CliResult plan_three_blocks(const std::string& trace, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args{"plan", trace, "--model", "llama-3.1-8b", "--allocator", "paged:block=16",
                                "--kv-budget", "6291456", "--watermark", "0", "--cost",
                                "constant:step=10ms,prefill-token=0s", "--no-preemption"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_cli(args);
}

}  // namespace

TEST_CASE("plan search: expands from the start, bisects to the tolerance, verifies below, within max points") {
  // Met for values up to 10,000 (of a 1,000-per-unit scale: rate-scale 10): starting at
  // 1,000 it doubles 2,000, 4,000, 8,000 (met), 16,000 (missed), then bisects 12,000 (missed),
  // 10,000 (met), 11,000 (missed), 10,500 (missed), 10,250 (missed), 10,125 (missed): the gap
  // 125 is within 2% of 10,000 (200) and it stops; then it verifies 5,000 and 9,000 (met).
  SearchSpec spec;
  spec.start = 1'000;
  spec.min = 1;
  spec.max = 1'000'000;
  spec.tolerance_ppm = 20'000;
  spec.max_points = 20;
  int calls = 0;
  const auto r = bracket_search(spec, [&](std::int64_t v) {
    ++calls;
    return v <= 10'000;
  });
  REQUIRE(r.met);
  REQUIRE(r.missed);
  CHECK(*r.met == 10'000);
  CHECK(*r.missed == 10'125);
  CHECK(r.converged);
  CHECK(r.non_monotone.empty());
  std::vector<std::int64_t> order;
  for (const auto& p : r.tried) order.push_back(p.value);
  CHECK(order == std::vector<std::int64_t>{1'000, 2'000, 4'000, 8'000, 16'000, 12'000, 10'000, 11'000, 10'500,
                                           10'250, 10'125, 5'000, 9'000});
  CHECK(calls == 13);
  CHECK(std::string(r.tried.back().role) == "verify");

  // A budget of 6 points: 1,000 .. 16,000 and one bisection; not converged.
  spec.max_points = 6;
  const auto short_run = bracket_search(spec, [](std::int64_t v) { return v <= 10'000; });
  CHECK(short_run.tried.size() == 6);
  CHECK_FALSE(short_run.converged);
  CHECK(*short_run.met == 8'000);
  CHECK(*short_run.missed == 12'000);
}

TEST_CASE("plan search: replicas, the smallest that meets, and a contradiction is reported") {
  SearchSpec spec;
  spec.start = 1;
  spec.min = 1;
  spec.max = 64;
  spec.harder_up = false;
  spec.tolerance_ppm = 0;  // as kvsim plan searches replicas: down to adjacent counts
  // Met from 5 replicas up: 1, 2, 4 missed, 8 met, then 6 met, 5 met (adjacent to 4: done),
  // then 6 is already known, so the verification has nothing to add.
  auto r = bracket_search(spec, [](std::int64_t n) { return n >= 5; });
  CHECK(*r.met == 5);
  CHECK(*r.missed == 4);
  CHECK(r.converged);
  CHECK(r.tried.size() == 6);
  CHECK(r.non_monotone.empty());
  // Met at 5 but missed at 6 (not monotone): 1, 2, 4 missed, 8 met, 6 missed, 7 met, then 8
  // is known; the answer is 7 and nothing contradicts it among the points tried...
  r = bracket_search(spec, [](std::int64_t n) { return n >= 5 && n != 6; });
  CHECK(*r.met == 7);
  CHECK(r.non_monotone.empty());
  // ... while met at 2 only (and at 8 and up): 1 missed, 2 met (expansion flips), then the
  // verification tries 3, which misses: reported, and the bracket stays (2 met, 1 missed).
  r = bracket_search(spec, [](std::int64_t n) { return n == 2 || n >= 8; });
  CHECK(*r.met == 2);
  CHECK(*r.missed == 1);
  REQUIRE(r.non_monotone.size() == 1);
  CHECK(r.non_monotone.front() == std::pair<std::int64_t, std::int64_t>{2, 3});
}

TEST_CASE("kvsim plan: brackets the rate-scale at which preemption starts, derived by hand") {
  // Two requests 1 s apart, each a 15-token prompt and 12 output tokens; llama-3.1-8b
  // (131,072 bytes a position), paged blocks of 16 positions (2,097,152 bytes), a budget of
  // exactly 3 blocks (6,291,456 bytes), no watermark, every step 10 ms (constant cost).
  //
  // By docs/replay.md's accounting, a step allocates at its start a slot for each token it
  // produces, and the prefill step produces the first output token: a request holds 16
  // positions (1 block) after its first step and needs its 2nd block at its 2nd step
  // (position 17); at most 15 + 12 = 27 positions, 2 blocks. A arrives at 0 and runs steps
  // 1..12 in [0, 120 ms), holding 2 blocks from its step 2. B arrives at d = 1 s / X (X the
  // rate-scale) and is admitted at the first step start j x 10 ms at or after d (1 block free
  // while A holds 2). B's 2nd step starts at (j + 1) x 10 ms and needs a 4th block: if A is
  // still running then (its step 12 starts at 110 ms: j + 1 <= 11), nothing is free and B,
  // the newest, is preempted. So preemption iff j <= 10 iff d <= 100 ms (at exactly 100 ms,
  // an arrival on a step's start, either rule of admitting it there gives the bracket below)
  // iff X >= 10. The largest rate-scale without preemption is just under 10: plan must
  // bracket 10 within its 2% tolerance.
  const std::string trace = write_file("plan-two.csv",
                                       "id,arrival,prompt_tokens,output_tokens\n"
                                       "a,0,15,12\n"
                                       "b,1,15,12\n");
  const auto r = plan_three_blocks(trace, {"--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["converged"] == true);
  const double met = std::stod(j["met"].get<std::string>());
  const double missed = std::stod(j["missed"].get<std::string>());
  CHECK(met <= 10.0);
  CHECK(missed >= 10.0);
  CHECK(met < missed);
  CHECK((missed - met) / met <= 0.02);
  // The answer's load as a number: two arrivals 1 s apart, scaled by X, are X requests a
  // second by the overload rule's (requests - 1) / arrival span.
  CHECK(j["met_arrival_rate_per_s"].get<double>() == Approx(met));
  CHECK(j["missed_arrival_rate_per_s"].get<double>() == Approx(missed));
  CHECK(j["non_monotone"].empty());
  // The bracketing points are in the table of points, marked; the answer's sentence first.
  int marked = 0;
  for (const auto& p : j["points"]) {
    if (p["bracket"] == "largest met") {
      ++marked;
      CHECK(p["preemptions"] == 0);
    }
    if (p["bracket"] == "smallest missed") {
      ++marked;
      CHECK(p["preemptions"].get<int>() >= 1);
    }
  }
  CHECK(marked == 2);
  CHECK(j["answer"].get<std::string>().rfind("The largest rate-scale meeting the targets (--no-preemption)", 0) == 0);

  // The table: the sentence first, then the points.
  const auto t = plan_three_blocks(trace);
  REQUIRE(t.exit_code == 0);
  CHECK(t.out.rfind("The largest rate-scale meeting the targets", 0) == 0);
  CHECK(t.out.find("largest met") != std::string::npos);
  CHECK(t.out.find("smallest missed") != std::string::npos);
}

TEST_CASE("kvsim plan --search replicas: the fewest replicas without preemption, derived by hand") {
  // The two requests of the test above at rate-scale 16: B arrives at d = 62.5 ms <= 100 ms,
  // so one replica preempts (as derived there). With two, the router (kvsim/replicas.h,
  // after vLLM's DP load balancer) scores replica 0 at 1 (A in flight) and replica 1 at 0,
  // so B goes to the idle replica and each runs alone: no preemption. The search tries 1
  // (missed), 2 (met), then verifies 3 (met): the answer is 2.
  const std::string trace = write_file("plan-two-replicas.csv",
                                       "id,arrival,prompt_tokens,output_tokens\n"
                                       "a,0,15,12\n"
                                       "b,1,15,12\n");
  const auto r = plan_three_blocks(trace, {"--rate-scale", "16", "--search", "replicas", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["met"] == "2");
  CHECK(j["missed"] == "1");
  CHECK(j["converged"] == true);
  CHECK(j["tolerance"].is_null());  // the rate search's bound: replicas go to adjacent counts
  REQUIRE(j["points"].size() == 3);
  CHECK(j["points"][0]["replicas"] == "1");
  CHECK(j["points"][0]["preemptions"] == 1);
  CHECK(j["points"][2]["role"] == "verify");
  CHECK(j["answer"].get<std::string>().rfind("The smallest number of replicas meeting the targets", 0) == 0);
}

TEST_CASE("kvsim plan: --kv-usage-max holds on every replica, the fullest one's peak the point's") {
  // Three blocks of 16 a replica. a (prompt 15, output 12) and b (prompt 1, output 2), both at
  // 0. A prefill holds the prompt and its first token's slot, and each step one more: a holds
  // 16 + k positions at step k (2 blocks from step 1), b 2 + k (1 block) until it ends after
  // step 1. So one replica peaks at 3 of 3 blocks, at step 1. Two replicas take one each (a ->
  // 0, b -> 1, as the router's first test derives): peaks of 2 and 1 blocks of 3. Their
  // total, 3 of 6 blocks (50%), would meet a bound of 60%; replica 0, at 2/3, does not, nor
  // does any count of replicas, one of which holds a.
  const std::string trace = write_file("plan-fullest-replica.csv",
                                       "id,arrival,prompt_tokens,output_tokens\n"
                                       "a,0,15,12\n"
                                       "b,0,1,2\n");
  const auto r = plan_three_blocks(trace, {"--kv-usage-max", "0.6", "--search", "replicas", "--max-replicas", "3",
                                           "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["met"].is_null());
  REQUIRE(j["points"].size() == 3);
  for (const auto& p : j["points"]) {
    INFO(p.dump());
    CHECK(p["met"] == false);
    CHECK(p["kv_usage_peak"].get<double>() == Approx(p["replicas"] == "1" ? 1.0 : 2.0 / 3.0));
  }
  // Without a budget there is no usage: n/a, not 0%.
  const auto free = run_cli({"plan", trace, "--model", "llama-3.1-8b", "--cost", "constant:step=10ms,prefill-token=0s",
                             "--ttft-p99", "1s", "--search", "replicas", "--json"});
  INFO(free.err);
  REQUIRE(free.exit_code == 0);
  const auto unbudgeted = nlohmann::json::parse(free.out);
  for (const auto& p : unbudgeted["points"]) CHECK(p["kv_usage_peak"].is_null());
}

TEST_CASE("kvsim plan --search replicas: one replica meeting the targets is the answer, settled") {
  // The two requests above at their own rate: A ends after 12 steps of 10 ms, long before B
  // arrives at 1 s, so one replica never preempts. 1 is the fewest there can be: the search
  // tries it (met) and verifies 2, and the answer is 1, not a search that ran out of points.
  const std::string trace = write_file("plan-one-replica.csv",
                                       "id,arrival,prompt_tokens,output_tokens\n"
                                       "a,0,15,12\n"
                                       "b,1,15,12\n");
  const auto r = plan_three_blocks(trace, {"--search", "replicas", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["met"] == "1");
  CHECK(j["missed"].is_null());
  CHECK(j["converged"] == true);
  CHECK(j["answer"] == "The smallest number of replicas meeting the targets (--no-preemption) for paged:block=16 is 1.");
}

TEST_CASE("kvsim plan --search replicas: measured times in the trace are simulated over at every point") {
  // The trace's own times hold for one engine at its own load only: every point plan tries is
  // simulated, so the plan is the one of the same trace without them (before, the one-replica
  // point replayed the measured times and the others simulated). The arrivals are those of the
  // hand-derived case above at rate-scale 16 (0 and 1/16 s): one replica preempts, two do not.
  const std::string plain = write_file("plan-plain.csv",
                                       "id,arrival,prompt_tokens,output_tokens\n"
                                       "a,0,15,12\n"
                                       "b,0.0625,15,12\n");
  const std::string timed = write_file("plan-timed.csv",
                                       "id,arrival,prompt_tokens,output_tokens,start,first_token,finish\n"
                                       "a,0,15,12,0.5,0.6,9\n"
                                       "b,0.0625,15,12,1.5,1.6,9.5\n");
  const auto plan = [](const std::string& trace) {
    const auto r = plan_three_blocks(trace, {"--search", "replicas", "--json"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    auto j = nlohmann::json::parse(r.out);
    j.erase("trace");
    return j;
  };
  const auto timed_plan = plan(timed);
  CHECK(timed_plan == plan(plain));
  CHECK(timed_plan["met"] == "2");
  const auto r = run_cli({"plan", timed, "--queue-stable", "--search", "replicas", "--schedule", "measured"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--schedule: kvsim plan simulates every point it tries"));
}

TEST_CASE("kvsim plan: refuses what it cannot answer") {
  const std::string trace = write_file("plan-two-bad.csv",
                                       "id,arrival,prompt_tokens,output_tokens\n"
                                       "a,0,15,12\n"
                                       "b,1,15,12\n");
  auto r = run_cli({"plan", trace});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("give at least one target") != std::string::npos);
  r = run_cli({"plan", trace, "--no-preemption"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--no-preemption: needs a memory budget") != std::string::npos);
  r = run_cli({"plan", trace, "--kv-budget", "1GiB", "--no-preemption", "--rate-scale", "2"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--rate-scale: is what kvsim plan searches") != std::string::npos);
  r = run_cli({"plan", trace, "--ttft-p99", "soon"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--ttft-p99") != std::string::npos);
  // Each search's bound given to the other search is refused, not ignored.
  r = run_cli({"plan", trace, "--queue-stable", "--max-replicas", "8"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--max-replicas: bounds --search replicas; this search is rate-scale") != std::string::npos);
  r = run_cli({"plan", trace, "--queue-stable", "--search", "replicas", "--tolerance", "0.1"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--tolerance: bounds --search rate-scale") != std::string::npos);
  // Bounds no search could reach are refused before the first replay: more replicas than
  // replay takes, and a KV usage of 0 (every run allocates something at its peak).
  r = run_cli({"plan", trace, "--kv-budget", "1GiB", "--no-preemption", "--search", "replicas", "--max-replicas", "1025"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--max-replicas: at most 1024") != std::string::npos);
  CHECK(r.out.empty());
  // Expert parallelism needs two replicas: a bound of one leaves nothing to search (it was an
  // internal error, the search starting outside its bounds).
  r = run_cli({"plan", trace, "--model", "qwen3-30b-a3b", "--expert-parallel", "--search", "replicas",
               "--max-replicas", "1", "--ttft-p99", "1s"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--max-replicas: 1 replica allows no search: --expert-parallel spreads the experts over 2 "
                   "replicas or more") != std::string::npos);
  CHECK(r.out.empty());
  r = run_cli({"plan", trace, "--kv-budget", "1GiB", "--kv-usage-max", "0"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--kv-usage-max: expected a positive share") != std::string::npos);
  CHECK(r.out.empty());
  // Arrivals all at one instant have no gaps for a rate-scale to divide: every point would be
  // the same run, so the rate search is refused; the replicas search still has an answer.
  const std::string burst = write_file("plan-burst.csv",
                                       "id,arrival,prompt_tokens,output_tokens\n"
                                       "a,5,15,12\n"
                                       "b,5,15,12\n");
  r = run_cli({"plan", burst, "--queue-stable"});
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("plan-burst.csv: all 2 requests arrive at the same instant, so no --rate-scale changes the "
                   "load") != std::string::npos);
  CHECK(r.out.empty());
  r = plan_three_blocks(burst, {"--search", "replicas"});
  CHECK(r.exit_code == 0);
  // One request has no gap either.
  const std::string one = write_file("plan-one.csv", "id,arrival,prompt_tokens,output_tokens\na,5,15,12\n");
  r = run_cli({"plan", one, "--queue-stable"});
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("plan-one.csv: the trace has one request, so no --rate-scale changes the load") != std::string::npos);
  // The search bisects in millionths and makes at most 10,000 replays: a finer tolerance or
  // more points would be claimed in the answer, not applied.
  r = run_cli({"plan", trace, "--queue-stable", "--tolerance", "0.0000009"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--tolerance: at least 0.000001") != std::string::npos);
  r = run_cli({"plan", trace, "--queue-stable", "--max-points", "10001"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--max-points: at most 10,000") != std::string::npos);
  // Arrivals 1 ns apart are spread, however large a rate-scale rounds that gap to 0 ns: the
  // search runs to its bound (every rate-scale meets a TTFT of 100 s) and says so.
  const std::string close = write_file("plan-close.csv",
                                       "id,arrival,prompt_tokens,output_tokens\n"
                                       "a,1,15,2\n"
                                       "b,1.000000001,15,2\n");
  r = run_cli({"plan", close, "--ttft-p99", "100s", "--cost", "constant:step=10ms,prefill-token=0s"});
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("Every rate-scale tried meets the targets") != std::string::npos);
}

TEST_CASE("kvsim plan: a TPOT nobody has is said so and is null, and a miss shows the places that tell it") {
  // Requests of one output token have no TPOT (it needs two tokens): every point misses
  // --tpot-p99 for that reason, and the JSON's p99 is null, as replay's is.
  const std::string one_token = write_file("plan-one-token.csv",
                                           "id,arrival,prompt_tokens,output_tokens\n"
                                           "a,0,15,1\n"
                                           "b,1,15,1\n");
  auto r = run_cli({"plan", one_token, "--tpot-p99", "1s", "--max-points", "2", "--cost",
                    "constant:step=10ms,prefill-token=1ms", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  REQUIRE(!j["points"].empty());
  CHECK(j["points"][0]["misses"][0] == "no request generated two tokens or more, so no TPOT");
  CHECK(j["points"][0]["tpot_p99_s"].is_null());
  CHECK(j["points"][0]["ttft_p99_s"] == 0.025);
  // Each TTFT is one step of 10 ms + 15 prompt tokens x 1 ms = 25 ms. Against 24.999 ms
  // the miss needs six places to show the two apart (0.025 and 0.025 at three).
  const std::string two = write_file("plan-two-ttft.csv",
                                     "id,arrival,prompt_tokens,output_tokens\n"
                                     "a,0,15,2\n"
                                     "b,1,15,2\n");
  r = run_cli({"plan", two, "--ttft-p99", "24.999ms", "--max-points", "2", "--cost",
               "constant:step=10ms,prefill-token=1ms", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  j = nlohmann::json::parse(r.out);
  CHECK(j["points"][0]["misses"][0] == "TTFT p99 0.025000 s > 0.024999 s");
  // A target of 1 us is 0.000001 s, not rounded away to 0.000 at the first three places that
  // already tell 25 ms from it.
  r = run_cli({"plan", two, "--ttft-p99", "1us", "--max-points", "2", "--cost", "constant:step=10ms,prefill-token=1ms",
               "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK(nlohmann::json::parse(r.out)["points"][0]["misses"][0] == "TTFT p99 0.025000 s > 0.000001 s");
}

TEST_CASE("kvsim plan: refused requests miss every target, and a search cut by --max-points says so") {
  // Two requests of 15 + 12 = 27 tokens, 1 s apart. With --max-model-len 20 both are refused
  // at every load (prompt + output beyond the maximum length), and a run that served nothing
  // must not meet --no-preemption: the search halves from 1 down to its bound, 0.001
  // (1, 0.5, ..., 0.001953125, then 0.001: 11 points), every one missed. One request a
  // second at scale 1, so s a second at scale s, in three significant digits below 1/s.
  const std::string trace = write_file("plan-two-refused.csv",
                                       "id,arrival,prompt_tokens,output_tokens\n"
                                       "a,0,15,12\n"
                                       "b,1,15,12\n");
  const std::vector<std::string> base = {"plan", trace, "--model", "llama-3.1-8b", "--kv-budget", "1GiB",
                                         "--cost", "constant:step=10ms,prefill-token=0ps"};
  auto with = [&](std::initializer_list<std::string> more) {
    std::vector<std::string> args = base;
    args.insert(args.end(), more);
    return run_cli(args);
  };
  auto r = with({"--no-preemption", "--max-model-len", "20", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["met"].is_null());
  CHECK(j["missed"] == "0.001");
  CHECK(j["points"].size() == 11);
  CHECK(j["points"][0]["misses"][0] == "refused 2 of 2 requests (2 longer than the maximum length of 20 tokens)");
  CHECK_THAT(j["answer"].get<std::string>(),
             Catch::StartsWith("No rate-scale tried meets the targets (--no-preemption) for paged:block=16, down to "
                               "0.001 (0.00100 requests/s)") &&
                 Catch::EndsWith("): refused 2 of 2 requests (2 longer than the maximum length of 20 tokens)."));
  // A generous target met at 1, 2 and 4 with --max-points 3: the search stopped there, far
  // below its bound of 1000, and says so instead of "no limit found".
  r = with({"--e2e-p99", "1000s", "--max-points", "3"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::StartsWith("Not settled: --max-points 3 ran out: every rate-scale tried meets the targets "
                                      "(--e2e-p99 1000s) for paged:block=16, up to 4 (") &&
                        !Catch::Contains("no limit found"));
  // Likewise a target missed at 1 and 0.5 with --max-points 2.
  r = with({"--e2e-p99", "1ms", "--max-points", "2"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::StartsWith("Not settled: --max-points 2 ran out: no rate-scale tried meets the targets "
                                      "(--e2e-p99 1ms) for paged:block=16, down to 0.5 (0.500 requests/s)"));
}
