// The dense static allocator's reservations, against hand computation.
#include "dense_static_allocator.h"

#include <catch2/catch.hpp>

#include "test_support.h"

using namespace kvsim;
using namespace kvsim::detail;

namespace {

DenseStaticAllocator dense(const KvLayout& layout, Reserve reserve) {
  DenseStaticOptions o;
  o.reserve = reserve;
  return DenseStaticAllocator(layout, o);
}

}  // namespace

TEST_CASE("dense-static reserves the whole row at admission") {
  const KvLayout layout = test::unit_layout(4096);
  const AdmitInfo info{100, 50, 50, 1};  // prompt 100, max_tokens 50, output 50
  SECTION("reserve=max-tokens holds prompt + max_tokens = 150 from admission") {
    auto a = dense(layout, Reserve::max_tokens);
    REQUIRE(a.admit(0, info) == Outcome::ok);
    CHECK(a.footprint(0, 0, 0).allocated == 150);
    CHECK(a.footprint(0, 0, 0).reservation == 150);
    REQUIRE(a.grow(0, 101, 101) == Outcome::ok);
    const Footprint f = a.footprint(0, 0, 101);
    CHECK(f.allocated == 150);
    CHECK(f.reservation == 49);   // room for the 49 tokens still to come
    CHECK(f.reservation_slope == -1);
    CHECK(a.next_event_tokens(0) == Allocator::kNoEvent);  // nothing changes until release
  }
  SECTION("reserve=max-model-len holds the model's 4096 from admission") {
    auto a = dense(layout, Reserve::max_model_len);
    REQUIRE(a.admit(0, info) == Outcome::ok);
    CHECK(a.footprint(0, 0, 0).allocated == 4096);
    // Room up to prompt + max_tokens = 150 is reservation; past it, padding.
    CHECK(a.footprint(0, 0, 0).reservation == 150);
    CHECK(a.footprint(0, 0, 0).padding == 4096 - 150);
    REQUIRE(a.grow(0, 120, 120) == Outcome::ok);
    const Footprint f = a.footprint(0, 0, 120);
    CHECK(f.reservation == 30);
    CHECK(f.reservation_slope == -1);
    CHECK(f.padding == 4096 - 150);
    CHECK(f.padding_slope == 0);
    REQUIRE(a.grow(0, 150, 30) == Outcome::ok);
    CHECK(a.footprint(0, 0, 150).reservation == 0);
    CHECK(a.footprint(0, 0, 150).padding == 4096 - 150);
  }
  SECTION("reserve=pow2 rounds the final length 150 up to 256: 106 slots of padding") {
    auto a = dense(layout, Reserve::pow2);
    REQUIRE(a.admit(0, info) == Outcome::ok);
    CHECK(a.footprint(0, 0, 0).allocated == 256);
    CHECK(a.footprint(0, 0, 0).reservation == 150);
    CHECK(a.footprint(0, 0, 0).padding == 106);
  }
  SECTION("reserve=pow2 never passes the model's length") {
    auto a = dense(layout, Reserve::pow2);
    CHECK(a.reservation_tokens(AdmitInfo{3000, 1000, 1000, 1}) == 4096);
    const KvLayout short_model = test::unit_layout(3000);
    // 2100 rounds to 4096, past a 3000-token model: the row is the model's 3000.
    CHECK(dense(short_model, Reserve::pow2).reservation_tokens(AdmitInfo{2000, 100, 100, 1}) == 3000);
    // 1000 rounds to 1024, within it: unchanged.
    CHECK(dense(short_model, Reserve::pow2).reservation_tokens(AdmitInfo{900, 100, 100, 1}) == 1024);
  }
  SECTION("reserve=oracle holds exactly the final length") {
    auto a = dense(layout, Reserve::oracle);
    REQUIRE(a.admit(0, info) == Outcome::ok);
    REQUIRE(a.grow(0, 150, 150) == Outcome::ok);
    CHECK(a.footprint(0, 0, 150).allocated == 150);
    CHECK(a.footprint(0, 0, 150).reservation == 0);
  }
}

TEST_CASE("dense-static: n = 4 samples hold 4 full rows, prompt copied in each") {
  auto a = dense(test::unit_layout(4096), Reserve::max_tokens);
  REQUIRE(a.admit(0, AdmitInfo{100, 50, 50, 4}) == Outcome::ok);
  REQUIRE(a.grow(0, 101, 101) == Outcome::ok);
  const Footprint f = a.footprint(0, 0, 101);
  // 4 rows of 150 = 600 slots: effective 100 + 4 * 1 = 104, duplicate 3 * 100 = 300
  // prompt copies, reservation 4 * (150 - 101) = 196.
  CHECK(f.allocated == 600);
  CHECK(f.duplicate == 300);
  CHECK(f.reservation == 196);
  CHECK(f.reservation_slope == -4);
}

TEST_CASE("dense-static: a sliding-window group holds min(W, row) as a ring") {
  KvLayout layout;
  layout.groups = {test::group("full", 1), test::group("sliding 64", 1, 64)};
  layout.max_model_len = 4096;
  auto a = dense(layout, Reserve::oracle);
  REQUIRE(a.admit(0, AdmitInfo{10, 190, 190, 1}) == Outcome::ok);
  CHECK(a.footprint(0, 0, 0).allocated == 200);
  CHECK(a.footprint(0, 1, 0).allocated == 64);
  REQUIRE(a.grow(0, 11, 11) == Outcome::ok);
  CHECK(a.next_event_tokens(0) == 64);  // the ring fills
  REQUIRE(a.grow(0, 64, 1) == Outcome::ok);
  const Footprint full_ring = a.footprint(0, 1, 64);
  CHECK(full_ring.reservation == 0);
  CHECK(full_ring.outside_window == 0);  // a ring overwrites what leaves the window
  CHECK(full_ring.reservation_slope == 0);
}

TEST_CASE("dense-static under a capacity refuses what does not fit") {
  DenseStaticOptions o;
  o.reserve = Reserve::max_model_len;
  o.capacity_bytes = 2 * 4096 + 100;
  DenseStaticAllocator a(test::unit_layout(4096), o);
  CHECK(a.admit(0, AdmitInfo{10, 10, 10, 1}) == Outcome::ok);
  CHECK(a.admit(1, AdmitInfo{10, 10, 10, 1}) == Outcome::ok);
  CHECK(a.admit(2, AdmitInfo{10, 10, 10, 1}) == Outcome::no_room);  // floor(8292 / 4096) = 2
  a.check_invariants();
}

TEST_CASE("dense-static: reserve=pow2-output keeps the prompt exact and rounds the output up") {
  const KvLayout layout = test::unit_layout(4096);
  SECTION("the paper's example: an output of 25 reserves 32 positions; prompt 100 -> 132") {
    auto a = dense(layout, Reserve::pow2_output);
    const AdmitInfo info{100, 25, 25, 1};
    CHECK(a.reservation_tokens(info) == 132);
    // reserve=pow2 rounds the whole 125 instead: 128.
    CHECK(dense(layout, Reserve::pow2).reservation_tokens(info) == 128);
    REQUIRE(a.admit(0, info) == Outcome::ok);
    const Footprint f = a.footprint(0, 0, 0);
    CHECK(f.allocated == 132);
    CHECK(f.reservation == 125);  // up to prompt + output
    CHECK(f.padding == 7);        // 32 - 25 positions no token can fill
  }
  SECTION("an output that is a power of two is not rounded; no output reserves the prompt alone") {
    auto a = dense(layout, Reserve::pow2_output);
    CHECK(a.reservation_tokens(AdmitInfo{100, 64, 64, 1}) == 164);
    CHECK(a.reservation_tokens(AdmitInfo{100, 0, 0, 1}) == 100);
    CHECK(a.reservation_tokens(AdmitInfo{100, 1, 1, 1}) == 101);
  }
  SECTION("a row never passes the model's length: 3900 + 256 = 4156 is capped at 4096") {
    auto a = dense(layout, Reserve::pow2_output);
    CHECK(a.reservation_tokens(AdmitInfo{3900, 150, 150, 1}) == 4096);
  }
  SECTION("the name says the rule") {
    CHECK(dense(layout, Reserve::pow2_output).name() == "dense-static:reserve=pow2-output");
  }
}

namespace {

DenseStaticAllocator placed(Placement placement, std::int64_t capacity) {
  DenseStaticOptions o;
  o.reserve = Reserve::oracle;
  o.placement = placement;
  o.capacity_bytes = capacity;
  return DenseStaticAllocator(test::unit_layout(4096), o);
}

// prompt + output = `tokens` positions, one byte each in the unit layout.
AdmitInfo of_length(std::int64_t tokens) { return AdmitInfo{tokens - 1, 1, 1, 1}; }

}  // namespace

TEST_CASE("dense-static placement=first-fit: a reservation fails with enough room free in total") {
  // 100 bytes. A (30) at [0,30), B (40) at [30,70), C (30) at [70,100). A and C end: 60
  // bytes free in two holes of 30. D (40) fits the total but no hole: no_extent.
  auto a = placed(Placement::first_fit, 100);
  REQUIRE(a.admit(0, of_length(30)) == Outcome::ok);
  REQUIRE(a.admit(1, of_length(40)) == Outcome::ok);
  REQUIRE(a.admit(2, of_length(30)) == Outcome::ok);
  CHECK(a.offset(0) == 0);
  CHECK(a.offset(1) == 30);
  CHECK(a.offset(2) == 70);
  a.release(0);
  a.release(2);
  CHECK(a.admit(3, of_length(40)) == Outcome::no_extent);
  PoolState p = a.pool();
  CHECK(p.free_bytes == 60);
  CHECK(p.largest_free_extent_bytes == 30);
  CHECK(p.failed_placements == 1);
  CHECK(p.places_reservations);
  // More than is free (61 > 60) is no_room, not a failed placement.
  CHECK(a.admit(3, of_length(61)) == Outcome::no_room);
  CHECK(a.pool().failed_placements == 1);
  // 30 fits the lowest hole.
  REQUIRE(a.admit(3, of_length(30)) == Outcome::ok);
  CHECK(a.offset(3) == 0);
  a.check_invariants();
  // Counted only (placement=none), the same D is admitted: 40 <= 60 free.
  auto counted = placed(Placement::none, 100);
  REQUIRE(counted.admit(0, of_length(30)) == Outcome::ok);
  REQUIRE(counted.admit(1, of_length(40)) == Outcome::ok);
  REQUIRE(counted.admit(2, of_length(30)) == Outcome::ok);
  counted.release(0);
  counted.release(2);
  CHECK(counted.admit(3, of_length(40)) == Outcome::ok);
  CHECK(counted.pool().largest_free_extent_bytes == counted.pool().free_bytes);
  CHECK_FALSE(counted.pool().places_reservations);
  CHECK(counted.name() == "dense-static:reserve=oracle");  // the name it always had
}

TEST_CASE("dense-static placement=buddy: blocks are powers of two of positions") {
  // 100 bytes, one byte per position: top blocks of 64 at 0, 32 at 64, 4 at 96.
  auto a = placed(Placement::buddy, 100);
  CHECK(a.name() == "dense-static:reserve=oracle,placement=buddy");
  REQUIRE(a.admit(0, of_length(30)) == Outcome::ok);  // a block of 32: the top block at 64
  CHECK(a.offset(0) == 64);
  REQUIRE(a.admit(1, of_length(40)) == Outcome::ok);  // a block of 64: the top block at 0
  CHECK(a.offset(1) == 0);
  REQUIRE(a.admit(2, of_length(3)) == Outcome::ok);   // a block of 4: the top block at 96
  CHECK(a.offset(2) == 96);
  // 73 bytes reserved, 27 free in the count (2 + 24 + 1 of round-ups), no free block: 10
  // positions fail with room free.
  CHECK(a.admit(3, of_length(10)) == Outcome::no_extent);
  PoolState p = a.pool();
  CHECK(p.free_bytes == 27);
  CHECK(p.largest_free_extent_bytes == 0);
  CHECK(p.failed_placements == 1);
  a.check_invariants();
  // B's block returns whole: 67 free, the largest block 64.
  a.release(1);
  p = a.pool();
  CHECK(p.free_bytes == 67);
  CHECK(p.largest_free_extent_bytes == 64);
  // A reservation of 65 fits the total (67) but no block (the largest is 64).
  CHECK(a.admit(3, of_length(65)) == Outcome::no_extent);
  CHECK(a.pool().failed_placements == 2);
  a.check_invariants();
}

TEST_CASE("dense-static placement without a budget only counts (nothing bounds the arena)") {
  auto a = placed(Placement::buddy, 0);
  REQUIRE(a.admit(0, of_length(3000)) == Outcome::ok);
  CHECK(a.offset(0) == -1);
  CHECK_FALSE(a.pool().places_reservations);
}

TEST_CASE("dense-static placement=first-fit under a budget: external fragmentation over a tiny run") {
  // Capacity 100 positions at one byte, 1 ms per step, prompts cost no time, no watermark.
  // All arrive at 0, in this order; oracle rows (prompt + output). A request admitted in
  // step k with output m finishes at the end of step k + m - 1, at k + m ms:
  //   A: prompt 29, output 1 -> 30 at [0,30), done at 1 ms
  //   B: prompt 37, output 3 -> 40 at [30,70), done at 3 ms (tokens at 1, 2, 3 ms)
  //   C: prompt 29, output 1 -> 30 at [70,100), done at 1 ms
  //   D: prompt 39, output 1 -> 40: at 0 nothing is free; at 1 ms and 2 ms 60 bytes are
  //      free in holes of 30: two failed placements; at 3 ms B frees, D goes to [0,40)
  //      and is done at 4 ms.
  // 1 - largest/free: 0 over [0,1), 1 - 30/60 = 0.5 over [1,3), 0 (one free extent of 60)
  // over [3,4): mean 0.5 x 2 / 4 = 0.25, max 0.5. Free bytes outside the largest extent:
  // 30 over [1,3): mean 30 x 2 / 4 = 15 bytes, 15% of the capacity.
  ReplayOptions o;
  o.layout = test::unit_layout(4096);
  o.cost.base_ps = 1'000'000'000;  // 1 ms
  o.cost.prefill_token_ps = 0;
  o.memory.kv_budget_bytes = 100;
  o.memory.watermark_ppb = 0;
  const std::vector<Request> trace = {test::request("a", 0, 29, 1), test::request("b", 0, 37, 3),
                                      test::request("c", 0, 29, 1), test::request("d", 0, 39, 1)};
  const ReplayReport r = test::replay_under_budget("dense-static:reserve=oracle,placement=first-fit", trace, o).report;
  CHECK(r.completed == 4);
  CHECK(r.end_ns == 4'000'000);
  CHECK(r.failed_placements == 2);
  CHECK(r.external_fragmentation_mean == Approx(0.25));
  CHECK(r.external_fragmentation_max == Approx(0.5));
  CHECK(r.external_fragmentation_bytes_mean == Approx(15.0));
  CHECK(r.places_reservations);
  // Counted only, D starts at 1 ms (40 <= 60 free) and nothing is fragmented.
  const ReplayReport none = test::replay_under_budget("dense-static:reserve=oracle", trace, o).report;
  CHECK(none.failed_placements == 0);
  CHECK(none.external_fragmentation_bytes_mean == 0.0);
  CHECK(none.end_ns == 3'000'000);  // D done at 2 ms, B at 3 ms
  CHECK_FALSE(none.places_reservations);
}
