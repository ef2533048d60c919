// The overload rule (docs/replay.md, "Overload") on hand-made traces.
#include <catch2/catch.hpp>

#include "kvsim/replay.h"
#include "test_support.h"

using namespace kvsim;

namespace {

constexpr std::int64_t kMs = 1'000'000;

// `requests` in steps of 100 ms with no prompt cost, at most `max_running` at once (0: no
// limit), without a budget.
ReplayReport serve(std::vector<Request> requests, std::int64_t max_running, bool async_scheduling = false) {
  RequestVectorReader trace(std::move(requests));
  ReplayOptions o;
  o.layout = test::unit_layout();
  o.cost.name = "test";
  o.cost.base_ps = 100 * kMs * 1000;
  o.cost.prefill_token_ps = 0;
  o.max_running = max_running;
  o.async_scheduling = async_scheduling;
  auto allocator = make_allocator(parse_allocator_spec("paged:block=16", "test"), o.layout);
  return replay(trace, *allocator, o);
}

// 20 requests of 10 output tokens, one every `gap_ms`, served one at a time: each request
// takes 10 steps = 1 s.
ReplayReport serve_twenty(std::int64_t gap_ms) {
  std::vector<Request> requests;
  for (int i = 0; i < 20; ++i) requests.push_back(test::request("r" + std::to_string(i), i * gap_ms * kMs, 10, 10));
  return serve(std::move(requests), 1);
}

}  // namespace

TEST_CASE("overload: arrivals at 100/s against a device that serves 1/s") {
  // Arrivals 10 ms apart over 190 ms: 19 / 0.19 s = 100 requests/s. The first runs from 0; the
  // other 19 are all waiting when the last arrives at 190 ms. The step planned at 100 ms saw
  // the ten that arrived at 10..100 ms and admitted none (one runs at a time): those ten have
  // been passed over; the nine of 110..190 ms arrived during the step in progress and have not
  // had their chance yet. 10 >= the threshold max(2, 20/10) = 2.
  // All 20 are served one after the other, 1 s each: the run ends at 20 s, 20 / 20 s = 1/s.
  const ReplayReport r = serve_twenty(10);
  CHECK(r.end_ns == 20'000 * kMs);
  CHECK(r.queue_at_last_arrival == 10);
  CHECK(r.overload.overloaded);
  CHECK(r.overload.arrival_rate_per_s == Approx(100.0));
  CHECK(r.overload.service_rate_per_s == Approx(1.0));
  CHECK_THAT(r.overload.reason, Catch::Contains("10 of 20 requests were waiting, passed over by a step's plan"));
}

TEST_CASE("overload: arrivals every 2 s against a device that serves one in 1 s are not") {
  // Each request is done 1 s after it arrives, before the next: nobody waits. The last arrives
  // at 38 s and ends at 39 s; 39 s is not more than twice the 38 s arrival span either.
  const ReplayReport r = serve_twenty(2'000);
  CHECK(r.end_ns == 39'000 * kMs);
  CHECK(r.queue_at_last_arrival == 0);  // it arrives to an idle device: no plan has passed it over
  CHECK_FALSE(r.overload.overloaded);
  CHECK(r.overload.arrival_rate_per_s == Approx(19.0 / 38.0));
  CHECK(r.overload.service_rate_per_s == Approx(20.0 / 39.0));
  CHECK(r.overload.reason.empty());
}

TEST_CASE("overload: a run far longer than its arrivals is not overload by itself") {
  // Two requests 10 ms apart, served one at a time, 1 s each: the second arrives during the
  // first step, planned at 0 before it came (0 passed over, under the threshold 2), and the run
  // lasts 2 s, 200 times its 10 ms of arrivals.
  const ReplayReport r = serve({test::request("a", 0, 10, 10), test::request("b", 10 * kMs, 10, 10)}, 1);
  CHECK(r.end_ns == 2'000 * kMs);
  CHECK(r.queue_at_last_arrival == 0);
  CHECK_FALSE(r.overload.overloaded);
  CHECK(r.overload.arrival_rate_per_s == Approx(100.0));
  CHECK(r.overload.service_rate_per_s == Approx(1.0));
}

namespace {

// a (10 output tokens) at 0, then b and c at the given times, with no limit on how many run:
// nothing ever waits for room, only for the next plan.
ReplayReport three_unlimited(std::int64_t b_ms, std::int64_t c_ms, bool async_scheduling) {
  return serve({test::request("a", 0, 10, 10), test::request("b", b_ms * kMs, 10, 10),
                test::request("c", c_ms * kMs, 10, 10)},
               0, async_scheduling);
}

}  // namespace

TEST_CASE("overload: requests that arrive during a step wait for its end, which is not overload") {
  // b at 150 ms and c at 160 ms arrive during the step of 100..200 ms, planned at 100 ms before
  // either came: both wait, and neither has been passed over. Counting every waiting request,
  // 2 of 3 reached the threshold max(2, ceil(3/10)) = 2, and a device idle but for a's decode
  // was called overloaded.
  const ReplayReport r = three_unlimited(150, 160, false);
  CHECK(r.queue_at_last_arrival == 0);
  CHECK_FALSE(r.overload.overloaded);
}

TEST_CASE("overload: with asynchronous scheduling, a request waits out the step planned before it came") {
  // Steps 0, 100, 200 ms. Asynchronously the step of 200 ms is planned when the one of 100 ms
  // begins, seeing the arrivals up to 100 ms: b (150 ms) is still waiting when c comes at
  // 260 ms, with c. No plan has seen either: 0 passed over. Synchronously the plan at 200 ms
  // admits b, and c waits alone: 0 too.
  for (const bool async_scheduling : {true, false}) {
    CAPTURE(async_scheduling);
    const ReplayReport r = three_unlimited(150, 260, async_scheduling);
    CHECK(r.queue_at_last_arrival == 0);
    CHECK_FALSE(r.overload.overloaded);
  }
}

TEST_CASE("overload: a request cancelled before any plan saw it leaves the count right") {
  // Two at a time (max_running 2), 100 ms steps, 10 output tokens each: a and b run from 0 to
  // 1 s. c arrives at 50 ms and is cancelled at 60 ms; d at 150 ms, e at 250 ms, f at 350 ms.
  // When f arrives the plans at 100, 200 and 300 ms have seen d and e and admitted neither (no
  // place): 2 passed over, the threshold max(2, ceil(6/10)) = 2. Had c's cancellation not been
  // counted among the unplanned ones, the count would be 1 (3 waiting, 2 unplanned).
  std::vector<Request> requests{test::request("a", 0, 10, 10),          test::request("b", 0, 10, 10),
                                test::request("c", 50 * kMs, 10, 10),  test::request("d", 150 * kMs, 10, 10),
                                test::request("e", 250 * kMs, 10, 10), test::request("f", 350 * kMs, 10, 10)};
  requests[2].cancel_ns = 60 * kMs;
  const ReplayReport r = serve(std::move(requests), 2);
  CHECK(r.cancelled_queued == 1);
  CHECK(r.queue_at_last_arrival == 2);
  CHECK(r.overload.overloaded);
}

TEST_CASE("overload: requests a plan passed over while others were swapped out count") {
  // vLLM's policy with swap, 6 blocks of 16 one-byte positions, 1 ms steps, no watermark. A
  // (20, 60) at 0; B (20, 60) at 10.25 ms starts at step 11 (2 + 2 blocks). C at 20.25 ms
  // finds 1 block free and waits. At step 28 A needs its 4th block with all 6 taken: B, the
  // newest, is swapped out, and while it is, each plan tries it first and admits no waiting
  // request. D (30.25 ms), E (40.25 ms) and F (50.25 ms) join C. When F arrives, the plans
  // since 21 ms have seen C, D and E and admitted none: 3 passed over (F's own step was planned
  // before it came), against the threshold max(2, 1) = 2. Counting only the plans that came to
  // admission, only C would count.
  std::vector<Request> requests;
  for (int i = 0; i < 6; ++i) {
    requests.push_back(test::request(std::string(1, static_cast<char>('a' + i)), i == 0 ? 0 : i * 10 * kMs + kMs / 4, 20, 60));
  }
  RequestVectorReader trace(std::move(requests));
  ReplayOptions o;
  o.layout = test::unit_layout(4096);
  o.cost.base_ps = kMs * 1000;
  o.cost.prefill_token_ps = 0;
  o.memory.kv_budget_bytes = 6 * 16;
  o.memory.watermark_ppb = 0;
  o.memory.preemption = Preemption::swap;
  AllocatorLimits limits;
  limits.capacity_bytes = o.memory.kv_budget_bytes;
  auto allocator = make_allocator(parse_allocator_spec("paged:block=16", "test"), o.layout, limits);
  const ReplayReport r = replay(trace, *allocator, o);
  CHECK(r.swapped_out_bytes > 0);
  CHECK(r.queue_at_last_arrival == 3);
  CHECK(r.overload.overloaded);
}
