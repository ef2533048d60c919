// The paged and sliding-window allocators, against hand-computed block counts.
#include "paged_allocator.h"

#include "footprint.h"
#include "kvsim/units.h"

#include <catch2/catch.hpp>

#include "test_support.h"

using namespace kvsim;
using namespace kvsim::detail;

namespace {

AdmitInfo admit_info(std::int64_t prompt, std::int64_t output, std::int64_t n = 1) {
  return AdmitInfo{prompt, output, output, n};
}

PagedAllocator paged(const KvLayout& layout, std::int64_t block, bool sliding = false, std::int64_t capacity = 0) {
  PagedAllocatorOptions o;
  o.block_tokens = block;
  o.free_outside_window = sliding;
  o.capacity_bytes = capacity;
  return PagedAllocator(layout, o);
}

}  // namespace

TEST_CASE("paged: prompt 100, output 50, block 16 ends with 10 blocks = 160 slots, 10 of them tail") {
  auto a = paged(test::unit_layout(), 16);
  REQUIRE(a.admit(0, admit_info(100, 50)) == Outcome::ok);
  // The prefill step stores the prompt and the first generated token: 101 positions,
  // ceil(101 / 16) = 7 blocks = 112 slots, so 11 slots of tail.
  REQUIRE(a.grow(0, 101, 101) == Outcome::ok);
  Footprint f = a.footprint(0, 0, 101);
  CHECK(f.allocated == 112);
  CHECK(f.tail == 11);
  CHECK(f.tail_slope == -1);  // one token fills one tail slot per step
  // The next block is needed at token 7 * 16 + 1 = 113.
  CHECK(a.next_event_tokens(0) == 113);
  for (std::int64_t t = 113; t <= 150; t += 16) REQUIRE(a.grow(0, t, 1) == Outcome::ok);
  REQUIRE(a.grow(0, 150, 1) == Outcome::ok);
  f = a.footprint(0, 0, 150);
  CHECK(f.allocated == 160);  // ceil(150 / 16) = 10 blocks
  CHECK(f.tail == 10);        // 160 - 150
  CHECK(f.reservation == 0);
  CHECK(f.duplicate == 0);
  CHECK(a.pool().reserved_bytes - a.pool().free_bytes == 160);
  a.check_invariants();
  a.release(0);
  CHECK(a.pool().free_bytes == a.pool().reserved_bytes);
  CHECK(a.pool().reserved_bytes == 160);  // the pool's high-water mark, in demand mode
  a.check_invariants();
}

TEST_CASE("paged: n = 4 samples of a 100-token prompt share its 6 full blocks copy-on-write") {
  auto a = paged(test::unit_layout(), 16);
  REQUIRE(a.admit(0, admit_info(100, 20, 4)) == Outcome::ok);
  REQUIRE(a.grow(0, 100, 100) == Outcome::ok);  // a chunk that ends exactly at the prompt's end
  CHECK(a.footprint(0, 0, 100).allocated == 112);  // one sequence so far: 7 blocks
  // The first generated token forks the samples: 100 = 6 * 16 + 4, so the 6 full blocks
  // stay shared and the block holding prompt positions 96..99 is copied for 3 samples.
  REQUIRE(a.grow(0, 101, 1) == Outcome::ok);
  const auto t0 = a.block_table(0, 0, 0);
  for (std::int64_t s = 1; s < 4; ++s) {
    const auto ts = a.block_table(0, 0, s);
    REQUIRE(ts.size() == 7);
    CHECK(std::equal(ts.begin(), ts.begin() + 6, t0.begin()));  // shared prompt blocks
    CHECK(ts[6] != t0[6]);                                       // own copy of the partial block
  }
  const Footprint f = a.footprint(0, 0, 101);
  // 10 blocks = 160 slots: effective 100 + 4 * 1 = 104, tail 4 * (112 - 101) = 44, and the
  // 3 extra copies of prompt positions 96..99 are 12 duplicate slots.
  CHECK(f.allocated == 160);
  CHECK(f.tail == 44);
  CHECK(f.duplicate == 12);
  CHECK(f.tail_slope == -4);
  CHECK(a.pool().copied_bytes == 3 * 16);
  a.check_invariants();
  a.release(0);
  a.check_invariants();
  CHECK(a.pool().free_bytes == a.pool().reserved_bytes);
}

TEST_CASE("sliding-window: window 64, block 16 holds at most 5 window blocks, full layers keep 63") {
  KvLayout layout;
  layout.groups = {test::group("full", 1), test::group("sliding 64", 1, 64)};
  layout.max_model_len = 4096;
  auto a = paged(layout, 16, /*sliding=*/true);
  REQUIRE(a.admit(0, admit_info(1, 999)) == Outcome::ok);
  REQUIRE(a.grow(0, 2, 2) == Outcome::ok);
  for (std::int64_t t = 3; t <= 1000; ++t) {
    REQUIRE(a.grow(0, t, 1) == Outcome::ok);
    const std::int64_t window_blocks = a.footprint(0, 1, t).allocated / 16;
    if (t >= 64) {
      // vLLM's bound: ceil((W - 1) / block) + 1 = ceil(63 / 16) + 1 = 5. The kept positions
      // [t - 64, t) span 4 whole blocks when t is a multiple of 16, 5 otherwise.
      CHECK(window_blocks <= 5);
      CHECK(window_blocks == (t % 16 == 0 ? 4 : 5));
    }
  }
  CHECK(a.footprint(0, 0, 1000).allocated == 63 * 16);  // ceil(1000 / 16) = 63 blocks
  a.check_invariants();
  a.release(0);
  a.check_invariants();
}

TEST_CASE("paged without freeing counts the tokens behind the window as outside window") {
  KvLayout layout;
  layout.groups = {test::group("sliding 64", 1, 64)};
  layout.max_model_len = 4096;
  auto a = paged(layout, 16);
  REQUIRE(a.admit(0, admit_info(10, 200)) == Outcome::ok);
  REQUIRE(a.grow(0, 11, 11) == Outcome::ok);
  REQUIRE(a.grow(0, 100, 1) == Outcome::ok);
  const Footprint f = a.footprint(0, 0, 100);
  // 100 tokens in ceil(100 / 16) = 7 blocks = 112 slots: 64 effective (the window),
  // 36 outside it, 12 tail.
  CHECK(f.allocated == 112);
  CHECK(f.outside_window == 36);
  CHECK(f.tail == 12);
  CHECK(f.outside_window_slope == 1);
  CHECK(f.tail_slope == -1);
}

TEST_CASE("paged: a grow that does not fit the pool changes nothing") {
  // Capacity of 3 blocks of 16 one-byte positions.
  auto a = paged(test::unit_layout(), 16, false, 48);
  REQUIRE(a.admit(0, admit_info(40, 10)) == Outcome::ok);
  REQUIRE(a.grow(0, 41, 41) == Outcome::ok);  // 3 blocks
  REQUIRE(a.admit(1, admit_info(5, 5)) == Outcome::ok);
  CHECK(a.grow(1, 6, 6) == Outcome::no_room);
  CHECK(a.footprint(1, 0, 0).allocated == 0);
  CHECK(a.pool().free_bytes == 0);
  a.check_invariants();
  a.release(1);
  a.release(0);
  a.check_invariants();
}

TEST_CASE("paged: the closed-form footprint of full-attention groups equals the general classification") {
  // Every state a request passes through, for several prompts, sample counts and block
  // sizes: the fast path must agree with classify() on the same regions.
  for (std::int64_t block : {1, 5, 16}) {
    for (std::int64_t n : {1, 3}) {
      for (std::int64_t prompt : {1, 16, 37}) {
        auto a = paged(test::unit_layout(), block);
        REQUIRE(a.admit(0, admit_info(prompt, 40, n)) == Outcome::ok);
        REQUIRE(a.grow(0, prompt + 1, prompt + 1) == Outcome::ok);
        for (std::int64_t t = prompt + 1; t <= prompt + 40; ++t) {
          if (t > prompt + 1) REQUIRE(a.grow(0, t, 1) == Outcome::ok);
          INFO("block " << block << ", n " << n << ", prompt " << prompt << ", tokens " << t);
          const Footprint f = a.footprint(0, 0, t);
          const std::int64_t hi = ceil_div(t, block) * block;
          const std::int64_t split = n > 1 ? (prompt / block) * block : hi;
          const auto at = [&](std::int64_t len) {
            return classify({{0, split, 1}, {split, hi, n}}, {len, prompt, 0}, Unfilled::tail);
          };
          const Footprint ref = with_slopes(at(t), at(t + 1));
          CHECK(f.allocated == ref.allocated);
          CHECK(f.tail == ref.tail);
          CHECK(f.duplicate == ref.duplicate);
          CHECK(f.outside_window == 0);
          if (t + 1 <= hi) {  // slopes matter only until the next block
            CHECK(f.tail_slope == ref.tail_slope);
            CHECK(f.duplicate_slope == ref.duplicate_slope);
          }
        }
      }
    }
  }
}
