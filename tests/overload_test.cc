// The overload rule (docs/replay.md, "Overload") on hand-made traces.
#include <catch2/catch.hpp>

#include "kvsim/replay.h"
#include "test_support.h"

using namespace kvsim;

namespace {

constexpr std::int64_t kMs = 1'000'000;

// 20 requests of 10 output tokens, one every `gap_ms`, served one at a time (max_running 1) in
// steps of 100 ms with no prompt cost: each request takes 10 steps = 1 s.
ReplayReport serve_twenty(std::int64_t gap_ms) {
  std::vector<Request> requests;
  for (int i = 0; i < 20; ++i) requests.push_back(test::request("r" + std::to_string(i), i * gap_ms * kMs, 10, 10));
  RequestVectorReader trace(std::move(requests));
  ReplayOptions o;
  o.layout = test::unit_layout();
  o.cost.name = "test";
  o.cost.base_ps = 100 * kMs * 1000;
  o.cost.prefill_token_ps = 0;
  o.max_running = 1;
  auto allocator = make_allocator(parse_allocator_spec("paged:block=16", "test"), o.layout);
  return replay(trace, *allocator, o);
}

}  // namespace

TEST_CASE("overload: arrivals at 100/s against a device that serves 1/s") {
  // Arrivals 10 ms apart over 190 ms: 19 / 0.19 s = 100 requests/s. The first runs from 0; the
  // other 19 are all waiting when the last arrives at 190 ms (threshold max(2, 20/10) = 2).
  // All 20 are served one after the other, 1 s each: the run ends at 20 s, 20 / 20 s = 1/s.
  const ReplayReport r = serve_twenty(10);
  CHECK(r.end_ns == 20'000 * kMs);
  CHECK(r.queue_at_last_arrival == 19);
  CHECK(r.overload.overloaded);
  CHECK(r.overload.arrival_rate_per_s == Approx(100.0));
  CHECK(r.overload.service_rate_per_s == Approx(1.0));
  CHECK_THAT(r.overload.reason, Catch::Contains("19 of 20 requests were waiting"));
}

TEST_CASE("overload: arrivals every 2 s against a device that serves one in 1 s are not") {
  // Each request is done 1 s after it arrives, before the next: nobody waits. The last arrives
  // at 38 s and ends at 39 s; 39 s is not more than twice the 38 s arrival span either.
  const ReplayReport r = serve_twenty(2'000);
  CHECK(r.end_ns == 39'000 * kMs);
  CHECK(r.queue_at_last_arrival == 1);
  CHECK_FALSE(r.overload.overloaded);
  CHECK(r.overload.arrival_rate_per_s == Approx(19.0 / 38.0));
  CHECK(r.overload.service_rate_per_s == Approx(20.0 / 39.0));
  CHECK(r.overload.reason.empty());
}

TEST_CASE("overload: a run far longer than its arrivals is not overload by itself") {
  // Two requests 10 ms apart, served one at a time, 1 s each: the second waits alone (1 < the
  // threshold 2) and the run lasts 2 s, 200 times its 10 ms of arrivals.
  std::vector<Request> two{test::request("a", 0, 10, 10), test::request("b", 10 * kMs, 10, 10)};
  RequestVectorReader trace(std::move(two));
  ReplayOptions o;
  o.layout = test::unit_layout();
  o.cost.name = "test";
  o.cost.base_ps = 100 * kMs * 1000;
  o.cost.prefill_token_ps = 0;
  o.max_running = 1;
  auto allocator = make_allocator(parse_allocator_spec("paged:block=16", "test"), o.layout);
  const ReplayReport r = replay(trace, *allocator, o);
  CHECK(r.end_ns == 2'000 * kMs);
  CHECK(r.queue_at_last_arrival == 1);
  CHECK_FALSE(r.overload.overloaded);
  CHECK(r.overload.arrival_rate_per_s == Approx(100.0));
  CHECK(r.overload.service_rate_per_s == Approx(1.0));
}
