// The timeline's sampling with a row limit (ReplayOptions::timeline_max_rows, kvsim replay's
// default): rows merge in pairs and the interval doubles, the maximum and the mean staying
// exact. Worked out by hand.
#include <catch2/catch.hpp>

#include "kvsim/replay.h"
#include "test_support.h"

using namespace kvsim;

namespace {

constexpr std::int64_t kMs = 1'000'000;

std::vector<TimelineRow> sampled(std::int64_t every_ns, std::int64_t max_rows) {
  ReplayOptions o;
  o.layout = test::unit_layout();
  o.cost.name = "test";
  o.cost.base_ps = 1000 * kMs;  // 1 ms steps
  o.cost.prefill_token_ps = 0;
  o.sample_every_ns = every_ns;
  o.timeline_max_rows = max_rows;
  return test::replay_under_budget("paged:block=16", {test::request("r1", 0, 100, 50)}, o).rows;
}

}  // namespace

TEST_CASE("timeline: with a row limit, rows merge in pairs keeping the later state, the larger maximum and the exact mean") {
  // One request, 100 + 50 tokens, paged blocks of 16 (1 byte per position), 1 ms steps from
  // t = 0: step k (1..50) runs over [k - 1, k) ms holding 100 + k positions in whole blocks:
  // steps 1..12 112 slots, 13..28 128, 29..44 144, 45..50 160. Every 10 ms without a limit
  // the rows are at 0, 10, 20, 30, 40 ms and, steps having run since, at the end, 50 ms
  // (tests/plain_answers_test.cc).
  const auto all = sampled(10 * kMs, 0);
  REQUIRE(all.size() == 6);
  // With at most 3 rows: rows 0, 10, 20 are held; row 30 makes 4: (0, 10) and (20, 30) merge
  // into rows at 10 and 30 ms, and the interval becomes 20 ms. Row 40 (due at 30 + 10: the
  // interval in force when row 30 was taken) makes 3. The end row, 50 ms, makes 4:
  // (10', 30') -> a row at 30 ms, (40, 50) -> a row at 50 ms.
  const auto rows = sampled(10 * kMs, 3);
  REQUIRE(rows.size() == 2);
  // Row at 30 ms: its state is step 31's, 131 positions in 144 slots; the maximum over
  // [0, 30] ms, its own state included, is 144; the mean over steps 1..30:
  // (12 x 112 + 16 x 128 + 2 x 144) / 30 = 3680 / 30.
  CHECK(rows[0].time_ns == 30 * kMs);
  CHECK(rows[0].allocated_bytes == 144);
  CHECK(rows[0].allocated_bytes_max == 144);
  CHECK(rows[0].allocated_bytes_mean == Approx(3680.0 / 30).epsilon(1e-12));
  // Row at 50 ms (the end, the request released): maximum 160, the run's peak; mean over
  // steps 31..50: (14 x 144 + 6 x 160) / 20 = 148.8.
  CHECK(rows[1].time_ns == 50 * kMs);
  CHECK(rows[1].allocated_bytes == 0);
  CHECK(rows[1].allocated_bytes_max == 160);
  CHECK(rows[1].allocated_bytes_mean == Approx(148.8).epsilon(1e-12));
  // The same figures, merged by hand from the unlimited rows: the later row's state, the
  // larger maximum, means weighted by their intervals (10 ms each, 0 for the first row).
  CHECK(rows[0].allocated_bytes == all[3].allocated_bytes);
  CHECK(rows[0].allocated_bytes_max == std::max({all[0].allocated_bytes_max, all[1].allocated_bytes_max,
                                                 all[2].allocated_bytes_max, all[3].allocated_bytes_max}));
  CHECK(rows[0].allocated_bytes_mean ==
        Approx((all[1].allocated_bytes_mean + all[2].allocated_bytes_mean + all[3].allocated_bytes_mean) / 3).epsilon(1e-12));
  CHECK(rows[1].allocated_bytes_max == std::max(all[4].allocated_bytes_max, all[5].allocated_bytes_max));
}

TEST_CASE("timeline: a row limit never exceeded, and the peak kept, on a long run") {
  // 50 steps sampled every 1 ms: a row at each step's start, 0..49 ms, and one at the end,
  // 50 ms, for the last step's span [49, 50) ms; at most 8 with the limit, the last row kept
  // (a merge keeps the later row of a pair); the largest maximum is the peak, 160.
  const auto all = sampled(kMs, 0);
  const auto rows = sampled(kMs, 8);
  CHECK(all.size() == 51);
  // The rows' means, each over the millisecond before it, add up to the run's integral:
  // 12 x 112 + 16 x 128 + 16 x 144 + 6 x 160 = 6,656 byte-milliseconds (the first row's
  // span is empty). Without the end row the last step's 160 was missing.
  double integral = 0;
  for (std::size_t i = 1; i < all.size(); ++i) integral += all[i].allocated_bytes_mean;
  CHECK(integral == Approx(6656).epsilon(1e-12));
  CHECK(all.back().time_ns == 50 * kMs);
  CHECK(all.back().allocated_bytes_mean == 160);
  CHECK(rows.size() <= 8);
  CHECK(rows.size() >= 4);  // a merge halves 9 rows to 5; never fewer than half the limit
  std::int64_t top = 0;
  for (const auto& r : rows) top = std::max(top, r.allocated_bytes_max);
  CHECK(top == 160);
  CHECK(rows.back().time_ns == 50 * kMs);
}

TEST_CASE("timeline: a row per step says when the engine goes idle, so that each row holds until the next") {
  // a and b (prompt 100, 5 tokens each) at 0 and 20 ms, 1 ms steps, paged blocks of 16 (1
  // byte per position): a's prefill and 4 decodes are steps 0..4 over [0, 5) ms, each row
  // (the state after the step's allocations) 101..105 positions in 112 slots. a ends at 5 ms
  // and nothing runs until b: one row at 5 ms (step 5, the next to run) holds nothing; b's
  // steps 5..9 run over [20, 25) ms. Each row's state times the time to the next row (the
  // run's end for the last) adds up to the run's: 112 x 5 + 0 x 15 + 112 x 5 = 1,120 byte-ms
  // over 25 ms. Without the idle row, a's last row would hold to 20 ms: 2,800.
  ReplayOptions o;
  o.layout = test::unit_layout();
  o.cost.name = "test";
  o.cost.base_ps = 1000 * kMs;
  o.cost.prefill_token_ps = 0;
  o.sample_every_ns = 0;  // --sample-every step
  o.timeline_max_rows = 0;
  const auto run = test::replay_under_budget("paged:block=16",
                                             {test::request("a", 0, 100, 5), test::request("b", 20 * kMs, 100, 5)}, o);
  const auto& rows = run.rows;
  REQUIRE(rows.size() == 11);
  CHECK(rows[4].time_ns == 4 * kMs);
  CHECK(rows[4].allocated_bytes == 112);
  CHECK(rows[5].time_ns == 5 * kMs);
  CHECK(rows[5].step == 5);
  CHECK(rows[5].running == 0);
  CHECK(rows[5].queued == 0);
  CHECK(rows[5].allocated_bytes == 0);
  CHECK(rows[5].effective_bytes == 0);
  CHECK(rows[6].time_ns == 20 * kMs);
  CHECK(rows[6].step == 5);
  CHECK(rows[6].allocated_bytes == 112);
  double integral = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::int64_t until = i + 1 < rows.size() ? rows[i + 1].time_ns : run.report.end_ns;
    integral += static_cast<double>(rows[i].allocated_bytes) * static_cast<double>(until - rows[i].time_ns);
  }
  CHECK(run.report.end_ns == 25 * kMs);
  CHECK(integral == 1120.0 * kMs);
  CHECK(run.report.allocated_bytes.mean * 25 == Approx(1120.0));
}
