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
