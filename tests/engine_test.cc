// The replay engine, on schedules worked out by hand.
#include <algorithm>

#include <catch2/catch.hpp>

#include "kvsim/replay.h"
#include "test_support.h"

using namespace kvsim;

namespace {

constexpr std::int64_t kMs = 1'000'000;

CostModel fixed_step(std::int64_t base_ns, std::int64_t prefill_token_ns = 0) {
  CostModel c;
  c.name = "test";
  c.base_ps = base_ns * 1000;
  c.prefill_token_ps = prefill_token_ns * 1000;
  return c;
}

struct Run {
  ReplayReport report;
  std::vector<TimelineRow> rows;
};

Run run(const std::string& spec, std::vector<Request> requests, ReplayOptions options) {
  RequestVectorReader trace(std::move(requests));
  auto allocator = make_allocator(parse_allocator_spec(spec, "test"), options.layout);
  Run r;
  options.timeline = [&r](const TimelineRow& row) { r.rows.push_back(row); };
  r.report = replay(trace, *allocator, options);
  return r;
}

ReplayOptions options(KvLayout layout, CostModel cost) {
  ReplayOptions o;
  o.layout = std::move(layout);
  o.cost = std::move(cost);
  return o;
}

}  // namespace

TEST_CASE("engine: one request, three steps of 10 ms, paged block 16") {
  // Prompt 100, output 3. Step 0 (0-10 ms) prefills and produces token 1: 101 positions in
  // ceil(101/16) = 7 blocks = 112 slots. Steps 1 and 2 produce tokens 2 and 3 (102, 103
  // positions, same blocks). The request finishes at 30 ms.
  const auto r = run("paged:block=16", {test::request("a", 0, 100, 3)},
                     options(test::unit_layout(), fixed_step(10 * kMs)));
  const ReplayReport& rep = r.report;
  CHECK(rep.iterations == 3);
  CHECK(rep.completed == 1);
  CHECK(rep.end_ns == 30 * kMs);
  CHECK(rep.ttft.p50_ns == 10 * kMs);
  CHECK(rep.e2e.p50_ns == 30 * kMs);
  CHECK(rep.allocated_bytes.mean == Approx(112.0).epsilon(1e-12));
  CHECK(rep.effective_bytes.mean == Approx((101.0 + 102.0 + 103.0) / 3).epsilon(1e-12));
  CHECK(rep.mean_bytes.tail == Approx(112.0 - 102.0).epsilon(1e-12));
  CHECK(rep.allocated_bytes.peak == 112);
  CHECK(rep.effective_bytes.peak == 103);
  CHECK(rep.effective_bytes.peak_at_ns == 20 * kMs);
  CHECK(rep.token_usage == Approx(102.0 / 112.0).epsilon(1e-12));
  CHECK(rep.generated_tokens == 3);
  CHECK(rep.leak_free);
  REQUIRE(r.rows.size() == 3);
  CHECK(r.rows[2].allocated_bytes == 112);
  CHECK(r.rows[2].effective_bytes == 103);
}

TEST_CASE("engine: prompt 100, output 50 ends holding 160 slots for 150 effective tokens") {
  const auto r = run("paged:block=16", {test::request("a", 0, 100, 50)},
                     options(test::unit_layout(), fixed_step(kMs)));
  REQUIRE(r.rows.size() == 50);
  CHECK(r.rows.back().effective_bytes == 150);
  CHECK(r.rows.back().allocated_bytes == 160);
  CHECK(r.report.allocated_bytes.peak == 160);
  // The tenth block is taken at token 145 = 9 * 16 + 1, when 15 of its slots are empty.
  CHECK(r.report.at_peak_bytes.tail == 15);
  SECTION("dense-static with max_tokens 50 holds 150 from admission, max-model-len 4096") {
    Request q = test::request("a", 0, 100, 50);
    q.max_tokens = 50;
    const auto d = run("dense-static:reserve=max-tokens", {q}, options(test::unit_layout(), fixed_step(kMs)));
    CHECK(d.rows.front().allocated_bytes == 150);
    CHECK(d.rows.back().allocated_bytes == 150);
    const auto m = run("dense-static:reserve=max-model-len", {q}, options(test::unit_layout(4096), fixed_step(kMs)));
    CHECK(m.rows.front().allocated_bytes == 4096);
    REQUIRE(m.report.token_usage);
    CHECK(*m.report.token_usage < 0.04);  // at most 150 of 4096
  }
}

TEST_CASE("engine: a request that arrives during an iteration waits for the next one") {
  // Cost: 1 ms per step + 10 us per prompt token. A (prompt 100, output 2) arrives at 0:
  // step 0 lasts 1 + 1 = 2 ms. B (prompt 50, output 1) arrives at 0.5 ms and joins step 1
  // at 2 ms, which decodes A and prefills B: 1 + 0.5 = 1.5 ms, ending at 3.5 ms. Both
  // finish then: A after 3.5 ms, B 3 ms after its arrival, its first token included.
  const auto r = run("paged:block=16",
                     {test::request("a", 0, 100, 2), test::request("b", kMs / 2, 50, 1)},
                     options(test::unit_layout(), fixed_step(kMs, 10'000)));
  CHECK(r.report.iterations == 2);
  CHECK(r.report.end_ns == 3'500'000);
  CHECK(r.report.ttft.count == 2);
  CHECK(r.report.ttft.p50_ns == 2 * kMs);        // nearest rank of {2.0, 3.0} ms
  CHECK(r.report.ttft.max_ns == 3 * kMs);        // B
  CHECK(r.report.e2e.max_ns == 3'500'000);       // A
  CHECK(r.report.prompt_tokens == 150);
}

TEST_CASE("engine: after a cancellation, occupancy equals the run without the request") {
  // Steps of 1 ms that do not depend on the batch, so both runs share one schedule.
  std::vector<Request> base = {test::request("a", 0, 40, 30), test::request("c", 3 * kMs, 70, 25)};
  std::vector<Request> with = base;
  Request b = test::request("b", kMs, 200, 100);
  b.cancel_ns = 10 * kMs + kMs / 3;  // part-way through step 10
  with.insert(with.begin() + 1, b);
  for (const char* spec : {"paged:block=16", "dense-static:reserve=pow2", "dynamic:growth=double", "sliding-window"}) {
    INFO(spec);
    const auto cancelled = run(spec, with, options(test::unit_layout(), fixed_step(kMs)));
    const auto never = run(spec, base, options(test::unit_layout(), fixed_step(kMs)));
    CHECK(cancelled.report.cancelled_running == 1);
    REQUIRE(cancelled.rows.size() == never.rows.size());
    for (std::size_t i = 0; i < never.rows.size(); ++i) {
      if (never.rows[i].time_ns <= *b.cancel_ns) continue;
      INFO("row at " << never.rows[i].time_ns);
      CHECK(cancelled.rows[i].allocated_bytes == never.rows[i].allocated_bytes);
      CHECK(cancelled.rows[i].effective_bytes == never.rows[i].effective_bytes);
    }
    // b held memory for [1 ms, 10.33 ms) and nothing after: the run's integral differs by
    // exactly that, so the means differ.
    CHECK(cancelled.report.allocated_bytes.mean > never.report.allocated_bytes.mean);
  }
}

TEST_CASE("engine: a cancellation part-way through a step counts only the time before it") {
  // One request, prompt 10, output 100, steps of 1 ms, cancelled at 2.25 ms. It holds 11
  // positions in step 0, 12 in step 1, 13 from 2 ms to 2.25 ms. Dense oracle reserves 110.
  Request a = test::request("a", 0, 10, 100);
  a.cancel_ns = 2 * kMs + kMs / 4;
  const auto r = run("dense-static:reserve=oracle", {a}, options(test::unit_layout(), fixed_step(kMs)));
  CHECK(r.report.cancelled_running == 1);
  CHECK(r.report.completed == 0);
  CHECK(r.report.end_ns == 3 * kMs);  // the step in progress still ends at 3 ms
  // Over the run's 3 ms: allocated 110 for 2.25 ms; effective 11 + 12 for 1 ms each and 13
  // for 0.25 ms.
  CHECK(r.report.allocated_bytes.mean == Approx(110.0 * 2.25 / 3).epsilon(1e-12));
  CHECK(r.report.effective_bytes.mean == Approx((11.0 + 12.0 + 13.0 * 0.25) / 3).epsilon(1e-12));
  CHECK(r.report.generated_tokens == 2);  // tokens 1 and 2; token 3 was cut off
  // Token 2 is the one inter-token gap (step 1, 1 ms); step 2's never came. Latencies are over
  // completed requests, so none has a TTFT, though token 1 came at 1 ms.
  CHECK(r.report.itl.count == 1);
  CHECK(r.report.itl.max_ns == kMs);
  CHECK(r.report.ttft.count == 0);
}

TEST_CASE("engine: a request cancelled after its first token gives no TTFT, and no gap for the token it never made") {
  // a (n = 2, prompt 10, output 100) is cancelled at 2.25 ms, in step 2; b (prompt 10, output
  // 3) completes at the end of step 2, 3 ms. Steps of 1 ms; both prefill in step 0, whose end
  // (1 ms) brings both first tokens. Decode gaps, one per sequence a step decodes: step 1, a's
  // two samples and b; step 2, b only (a's two tokens never come). TTFT over the completed
  // request alone: b's 1 ms.
  Request a = test::request("a", 0, 10, 100, 2);
  a.cancel_ns = 2 * kMs + kMs / 4;
  const auto r = run("paged:block=16", {a, test::request("b", 0, 10, 3)}, options(test::unit_layout(), fixed_step(kMs)));
  CHECK(r.report.completed == 1);
  CHECK(r.report.cancelled_running == 1);
  CHECK(r.report.itl.count == 4);
  CHECK(r.report.itl.mean_ns == Approx(static_cast<double>(kMs)).epsilon(1e-15));
  CHECK(r.report.ttft.count == 1);
  CHECK(r.report.ttft.max_ns == kMs);
  CHECK(r.report.e2e.max_ns == 3 * kMs);
}

TEST_CASE("engine: chunked prefill splits a prompt across steps by the token budget") {
  // Budget 64 tokens per step: prompt 150 takes 64 + 64 + 22, the first token arrives with
  // the last chunk (step 2), so TTFT is 3 steps.
  ReplayOptions o = options(test::unit_layout(), fixed_step(kMs));
  o.max_batched_tokens = 64;
  const auto r = run("paged:block=16", {test::request("a", 0, 150, 2)}, o);
  CHECK(r.report.ttft.p50_ns == 3 * kMs);
  CHECK(r.report.iterations == 4);
  REQUIRE(r.rows.size() == 4);
  CHECK(r.rows[0].allocated_bytes == 64);      // 4 blocks
  CHECK(r.rows[1].allocated_bytes == 128);     // 8 blocks
  CHECK(r.rows[2].allocated_bytes == 160);     // 151 positions: 10 blocks
}

TEST_CASE("engine: requests longer than the model's maximum length are refused") {
  const auto r = run("paged", {test::request("a", 0, 4000, 200), test::request("b", 0, 10, 10)},
                     options(test::unit_layout(4096), fixed_step(kMs)));
  CHECK(r.report.rejected_too_long == 1);
  CHECK(r.report.completed == 1);
}

TEST_CASE("engine: a stretch of decoding-only steps is timed step by step, and an arrival cuts it") {
  // a: arrival 0, prompt 100, output 40; b: arrival 55 ms, prompt 50, output 3. Linear cost:
  // 10 ms a step plus 1.5 ns per position the decoding sequences hold, rounded up to whole
  // ns. Step 0 prefills a (nothing decodes: 10 ms). In step k >= 1, a holds 101 + k
  // positions. b arrives inside step 5, is admitted and prefilled in step 6 (its prefill adds
  // no context), and holds 51 + (k - 6) positions in steps 7 and 8, the last of which
  // completes it. Most of a's 39 decoding steps are quiet (no block boundary, nothing
  // waiting): the engine runs those on its fast path, which must time them exactly so.
  CostModel c = fixed_step(10 * kMs);
  c.context_token_ps = 1'500;
  const auto ceil_1_5 = [](std::int64_t positions) { return (3 * positions + 1) / 2; };
  std::vector<std::int64_t> itl;  // one gap per sequence decoded in a step
  std::int64_t t = 10 * kMs, b_first = 0, b_end = 0;
  for (std::int64_t k = 1; k <= 39; ++k) {
    const std::int64_t b_positions = k == 7 || k == 8 ? 51 + (k - 6) : 0;
    const std::int64_t d = 10 * kMs + ceil_1_5(101 + k + b_positions);
    t += d;
    itl.push_back(d);
    if (b_positions > 0) itl.push_back(d);
    if (k == 6) b_first = t;
    if (k == 8) b_end = t;
  }
  const auto r = run("paged:block=16", {test::request("a", 0, 100, 40), test::request("b", 55 * kMs, 50, 3)},
                     options(test::unit_layout(), c));
  const ReplayReport& rep = r.report;
  CHECK(rep.iterations == 40);
  CHECK(rep.completed == 2);
  CHECK(rep.end_ns == t);
  CHECK(rep.ttft.max_ns == b_first - 55 * kMs);
  CHECK(rep.e2e.p50_ns == b_end - 55 * kMs);
  CHECK(rep.e2e.max_ns == t);
  REQUIRE(itl.size() == 41);
  CHECK(rep.itl.count == 41);
  CHECK(rep.itl.max_ns == 10 * kMs + ceil_1_5(109 + 53));  // step 8: a and b decode
  std::int64_t sum = 0;
  for (std::int64_t d : itl) sum += d;
  CHECK(rep.itl.mean_ns == Approx(static_cast<double>(sum) / 41).epsilon(1e-15));
  // Gaps near 10^7 ns sit in buckets of 256 ns (10^7 >> 8 < 2^16 buckets); the median is the
  // 21st of 41 gaps.
  std::sort(itl.begin(), itl.end());
  CHECK(rep.itl.p50_ns == itl[20] / 256 * 256);
  CHECK(rep.leak_free);
}

TEST_CASE("engine: the same inputs give the same report") {
  std::vector<Request> reqs;
  for (int i = 0; i < 200; ++i) {
    Request q = test::request(std::to_string(i), i * 3 * kMs, 20 + (i * 37) % 300, 1 + (i * 13) % 90, 1 + i % 3);
    if (i % 7 == 0) q.cancel_ns = q.arrival_ns + 40 * kMs;
    reqs.push_back(q);
  }
  CostModel c = fixed_step(kMs, 5'000);
  c.decode_seq_ps = 20'000'000;
  c.context_token_ps = 1'000;
  for (const char* spec : {"paged:block=16", "dynamic:growth=chunk,chunk=64", "dense-static:reserve=pow2"}) {
    INFO(spec);
    const auto a = run(spec, reqs, options(test::unit_layout(), c));
    const auto b = run(spec, reqs, options(test::unit_layout(), c));
    CHECK(a.report.allocated_bytes.mean == b.report.allocated_bytes.mean);
    CHECK(a.report.end_ns == b.report.end_ns);
    CHECK(a.report.e2e.p99_ns == b.report.e2e.p99_ns);
    REQUIRE(a.rows.size() == b.rows.size());
    for (std::size_t i = 0; i < a.rows.size(); ++i) CHECK(a.rows[i].allocated_bytes == b.rows[i].allocated_bytes);
  }
}

TEST_CASE("engine: measured service timestamps drive the schedule exactly") {
  // Prompt 100, output 5: arrives at 0, starts at 2 ms, first token at 10 ms, finishes at
  // 18 ms. The prompt is stored at 2 ms; tokens 1..5 appear at 10, 12, 14, 16 and 18 ms
  // (evenly from first token to finish); everything is freed at 18 ms.
  Request a = test::request("a", 0, 100, 5);
  a.start_ns = 2 * kMs;
  a.first_token_ns = 10 * kMs;
  a.finish_ns = 18 * kMs;
  const auto r = run("paged:block=16", {a}, options(test::unit_layout(), fixed_step(kMs)));
  CHECK(r.report.schedule == "measured");
  CHECK(r.report.iterations == 0);
  CHECK(r.report.completed == 1);
  CHECK(r.report.end_ns == 18 * kMs);
  CHECK(r.report.ttft.p50_ns == 10 * kMs);
  CHECK(r.report.e2e.p50_ns == 18 * kMs);
  // 100..104 positions all fit in ceil(104 / 16) = 7 blocks = 112 slots, held 2..18 ms.
  CHECK(r.report.allocated_bytes.mean == Approx(112.0 * 16 / 18).epsilon(1e-12));
  CHECK(r.report.effective_bytes.mean ==
        Approx((100.0 * 8 + 101.0 * 2 + 102.0 * 2 + 103.0 * 2 + 104.0 * 2) / 18).epsilon(1e-12));
  CHECK(r.report.effective_bytes.peak == 104);
  CHECK(r.report.effective_bytes.peak_at_ns == 16 * kMs);

  SECTION("a request without timestamps in a measured trace is an error naming it") {
    Request b = test::request("b", kMs, 10, 2);
    RequestVectorReader trace({a, b});
    ReplayOptions o = options(test::unit_layout(), fixed_step(kMs));
    auto alloc = make_allocator(parse_allocator_spec("paged", "test"), o.layout);
    CHECK_THROWS_WITH(replay(trace, *alloc, o), Catch::Contains("request #2 ('b')") &&
                                                     Catch::Contains("no start, first_token and finish"));
  }
  SECTION("--schedule simulate ignores the timestamps") {
    ReplayOptions o = options(test::unit_layout(), fixed_step(kMs));
    o.schedule = Schedule::simulate;
    const auto s = run("paged:block=16", {a}, o);
    CHECK(s.report.schedule == "simulated");
    CHECK(s.report.iterations == 5);
  }
}

TEST_CASE("engine: quantiles come with the bucket width they were read at, the last span included") {
  // The helper's minimal case: one request, prompt 15, output 1, on Llama-3.1-8B. It holds
  // 16 positions = 2,097,152 bytes for its one step, and nothing before: that last value
  // needs buckets 2^6 wide (2,097,152 >> 5 = 65,536 is one past the 65,536 buckets), and
  // the p50 is the bucket's lower edge, 2,097,152 itself (a multiple of 64).
  ReplayOptions o;
  o.layout.groups = {test::group("full", 131'072)};  // Llama-3.1-8B's bytes per position
  o.layout.max_model_len = 131'072;
  o.cost = fixed_step(kMs);
  const auto r = run("paged:block=16", {test::request("x", 0, 15, 1)}, o);
  CHECK(r.report.allocated_bytes.p50 == 16 * 131'072);
  CHECK(r.report.allocated_bytes.quantile_resolution == 64);
  CHECK(r.report.effective_bytes.quantile_resolution == 64);
}

TEST_CASE("engine: a prompt of no tokens is admitted when a step has no tokens left") {
  // Demand mode, 2 tokens a step, 10 ms steps. A (prompt 10, output 1) prefills 2 tokens a
  // step in steps 0-4, its first token ending step 4 (50 ms). B (prompt 0, output 1) arrives
  // at 5 ms: it needs no token of the step, so it starts in step 1 (10-20 ms) although A's
  // chunk takes the whole step, and its one token ends it at 20 ms: TTFT 15 ms. (A step's
  // budget below 0 once made such a chunk -2 tokens: an internal error. Decodes can no
  // longer take a step past its tokens: a step holds at most max_batched_tokens sequences.)
  std::vector<Request> trace = {test::request("a", 0, 10, 1), test::request("b", 5 * kMs, 0, 1)};
  ReplayOptions o = options(test::unit_layout(), fixed_step(10 * kMs));
  o.max_batched_tokens = 2;
  const auto r = run("paged:block=16", trace, o);
  CHECK(r.report.completed == 2);
  CHECK(r.report.leak_free);
  CHECK(r.report.waiting.max_ns == 5 * kMs);
  CHECK(r.report.ttft.p50_ns == 15 * kMs);  // nearest rank of {15, 50} ms
  CHECK(r.report.ttft.max_ns == 50 * kMs);
}

TEST_CASE("engine: progress counts the requests still to end, not only the trace read") {
  // 100 requests at 0, one running at a time (max running 1), prompt 10 and output 10 in
  // 1 ms steps: request k runs steps 10k..10k+9. The whole trace is read at step 0, yet the
  // run is not done: every 64 steps progress reports the share read (1) times the share
  // ended, 6 of 100 after step 63, 12 after step 127, ..., 96 after step 959. (It reported
  // 1.0 from the start: a bar full while the queue drained.)
  std::vector<Request> trace;
  for (int k = 0; k < 100; ++k) trace.push_back(test::request("r" + std::to_string(k), 0, 10, 10));
  ReplayOptions o = options(test::unit_layout(), fixed_step(kMs));
  o.max_running = 1;
  std::vector<double> reported;
  o.progress = [&reported](double f) { reported.push_back(f); };
  const auto r = run("paged:block=16", trace, o);
  CHECK(r.report.completed == 100);
  REQUIRE(reported.size() == 15);  // iterations 64, 128, ..., 960 of 1,000
  for (std::size_t i = 0; i < reported.size(); ++i) {
    INFO("report " << i);
    CHECK(reported[i] == Approx(static_cast<double>(64 * (i + 1) / 10) / 100.0));
  }
}
