// The dynamic allocator and its first-fit arena, against hand-placed extents.
#include "dynamic_allocator.h"

#include <catch2/catch.hpp>

#include "arena.h"
#include "kvsim/error.h"
#include "test_support.h"

using namespace kvsim;
using namespace kvsim::detail;

TEST_CASE("arena: first fit takes the lowest hole that fits and coalesces on free") {
  FirstFitArena arena(100);
  CHECK(arena.allocate(10).offset == 0);
  CHECK(arena.allocate(20).offset == 10);
  CHECK(arena.allocate(30).offset == 30);
  arena.free(0, 10);                        // hole [0, 10)
  arena.free(30, 30);                       // hole [30, 100) after coalescing with the end
  CHECK(arena.largest_free_extent() == 70);
  CHECK(arena.allocate(15).offset == 30);   // [0, 10) is too small
  CHECK(arena.allocate(5).offset == 0);     // the lowest hole that fits
  arena.free(10, 20);                       // merges [5, 10) and [10, 30) into [5, 30)
  CHECK(arena.free_extents() == 2);         // [5, 30) and [45, 100)
  CHECK(arena.largest_free_extent() == 55);
  arena.check();
}

TEST_CASE("arena: a refusal while enough total room is free is fragmentation") {
  FirstFitArena arena(10);
  CHECK(arena.allocate(4).offset == 0);
  CHECK(arena.allocate(2).offset == 4);
  CHECK(arena.allocate(4).offset == 6);
  arena.free(0, 4);
  arena.free(6, 4);
  // 8 bytes free in two extents of 4: 5 fits in total but in no extent.
  const auto p = arena.allocate(5);
  CHECK(p.offset == -1);
  CHECK(p.fragmented);
  CHECK(arena.free_bytes() == 8);
  CHECK(arena.largest_free_extent() == 4);
  // And when the total is short too, it is plain lack of room.
  CHECK_FALSE(arena.allocate(9).fragmented);
  arena.check();
}

TEST_CASE("arena, unbounded: growing although enough was free is fragmentation, and room it already holds is not") {
  // docs/replay.md, "The figures": placements that forced the arena to grow while enough
  // free room existed. Freed room at the open end returns to it; the high-water mark stays.
  FirstFitArena arena(0);
  CHECK(arena.allocate(4).offset == 0);   // [0, 4)
  CHECK(arena.allocate(4).offset == 4);   // [4, 8), high water 8
  arena.free(4, 4);                       // the end moves back to 4; 8 bytes still held
  const auto within = arena.allocate(4);  // [4, 8): inside the high-water mark, no growth
  CHECK(within.offset == 4);
  CHECK_FALSE(within.fragmented);
  CHECK(arena.allocate(2).offset == 8);   // [8, 10): grows, nothing free
  arena.free(0, 4);                       // a hole [0, 4)
  arena.free(8, 2);                       // the end back to 8; free: 4 + 2 below 10
  const auto grows = arena.allocate(5);   // no hole holds 5: [8, 13) grows past 10
  CHECK(grows.offset == 8);
  CHECK(grows.fragmented);                // while 6 were free
  CHECK(arena.reserved_bytes() == 13);
  arena.check();
}

TEST_CASE("dynamic with doubling: capacities 1, 2, 4, 8 and the copy peak holds old and new") {
  DynamicOptions o;
  o.growth = Growth::doubling;
  DynamicAllocator a(test::unit_layout(), o);
  REQUIRE(a.admit(0, AdmitInfo{1, 9, 9, 1}) == Outcome::ok);
  REQUIRE(a.grow(0, 1, 1) == Outcome::ok);
  CHECK(a.capacity_tokens(0, 0, 0) == 1);
  CHECK(a.footprint(0, 0, 1).transient == 0);  // nothing to copy the first time
  REQUIRE(a.grow(0, 2, 1) == Outcome::ok);
  CHECK(a.capacity_tokens(0, 0, 0) == 2);
  CHECK(a.footprint(0, 0, 2).transient == 1);  // the old buffer of 1 while copying
  REQUIRE(a.grow(0, 3, 1) == Outcome::ok);
  CHECK(a.capacity_tokens(0, 0, 0) == 4);
  CHECK(a.footprint(0, 0, 3).transient == 2);
  CHECK(a.next_event_tokens(0) == 5);
  REQUIRE(a.grow(0, 5, 1) == Outcome::ok);
  CHECK(a.capacity_tokens(0, 0, 0) == 8);
  // Placement, by hand: 1 at [0,1); 2 at [1,3) then [0,1) freed; 4 does not fit the hole
  // [0,1) and goes to [3,7), freeing [1,3) (hole [0,3)); 8 goes to [7,15), hole [0,7).
  CHECK(a.arena().reserved_bytes() == 15);
  CHECK(a.arena().allocated_bytes() == 8);
  CHECK(a.arena().largest_free_extent() == 7);
  CHECK(a.pool().copied_bytes == 1 + 2 + 4);
  const Footprint f = a.footprint(0, 0, 5);
  CHECK(f.allocated == 8);
  CHECK(f.reservation == 3);
  a.check_invariants();
  a.release(0);
  CHECK(a.arena().allocated_bytes() == 0);
  a.check_invariants();
}

TEST_CASE("dynamic: room past max_model_len is padding, not reservation, whatever max_tokens plans") {
  // max_model_len 64; prompt 60, max_tokens 10 (prompt + max_tokens = 70), 4 generated. The
  // engine stops a sequence at 64 positions, so 64 is its limit, as dense-static's rows are
  // capped there. Doubling: 61 positions after the prefill, then 62 in a buffer of 122:
  // reservation [62, 64) = 2, padding [64, 122) = 58 (with the limit at 70: 8 and 52).
  DynamicOptions o;
  o.growth = Growth::doubling;
  DynamicAllocator a(test::unit_layout(64), o);
  REQUIRE(a.admit(0, AdmitInfo{60, 10, 4, 1}) == Outcome::ok);
  REQUIRE(a.grow(0, 61, 61) == Outcome::ok);
  REQUIRE(a.grow(0, 62, 1) == Outcome::ok);
  const Footprint f = a.footprint(0, 0, 62);
  CHECK(f.allocated == 122);
  CHECK(f.reservation == 2);
  CHECK(f.padding == 58);
  a.release(0);
  a.check_invariants();
}

TEST_CASE("dynamic with doubling: the most a request can hold starts from its prefill, generated tokens included after a preemption") {
  // peak_bytes follows the buffers from the prefill's first one. Prompt 100, output 300, at
  // 400 tokens: the prefill's 101 positions (prompt and first token), then 202 and 404: the
  // peak is 404 while 202 is copied, 606. Re-admitted after generating 150 tokens, its
  // prefill holds 251 (prompt, the 150 recomputed, the next token), then 502: 502 + 251 = 753.
  DynamicOptions o;
  o.growth = Growth::doubling;
  DynamicAllocator a(test::unit_layout(), o);
  AdmitInfo info{100, 300, 300, 1};
  CHECK(a.peak_bytes(info, 400) == 606);
  info.resumed_tokens = 150;
  CHECK(a.peak_bytes(info, 400) == 753);
  // At the prefill itself, nothing is being copied: the first buffer alone.
  CHECK(a.peak_bytes(info, 251) == 251);
}

TEST_CASE("dynamic: enough free room in total but no extent is a counted failure") {
  DynamicOptions o;
  o.growth = Growth::exact;
  o.capacity_bytes = 10;
  DynamicAllocator a(test::unit_layout(), o);
  for (RequestSlot s = 0; s < 3; ++s) REQUIRE(a.admit(s, AdmitInfo{4, 1, 1, 1}) == Outcome::ok);
  REQUIRE(a.grow(0, 4, 4) == Outcome::ok);  // [0, 4)
  REQUIRE(a.admit(3, AdmitInfo{2, 1, 1, 1}) == Outcome::ok);
  REQUIRE(a.grow(3, 2, 2) == Outcome::ok);  // [4, 6)
  REQUIRE(a.grow(1, 4, 4) == Outcome::ok);  // [6, 10)
  a.release(0);
  a.release(1);
  // 8 bytes free as [0, 4) and [6, 10): external fragmentation 1 - 4/8 = 0.5.
  const PoolState p = a.pool();
  CHECK(p.free_bytes == 8);
  CHECK(p.largest_free_extent_bytes == 4);
  CHECK(a.grow(2, 4, 4) == Outcome::ok);  // 4 still fits, at [0, 4)
  REQUIRE(a.admit(4, AdmitInfo{4, 1, 1, 1}) == Outcome::ok);
  CHECK(a.grow(4, 4, 4) == Outcome::ok);  // and [6, 10)
  a.release(2);
  a.release(4);
  REQUIRE(a.admit(5, AdmitInfo{5, 1, 1, 1}) == Outcome::ok);
  CHECK(a.grow(5, 5, 5) == Outcome::no_extent);
  CHECK(a.pool().failed_placements == 1);
  CHECK(a.footprint(5, 0, 0).allocated == 0);  // the failed grow changed nothing
  a.check_invariants();
}

TEST_CASE("dynamic: with n samples the copy transient is every sample's old buffer, once") {
  DynamicOptions o;
  o.growth = Growth::doubling;
  DynamicAllocator a(test::unit_layout(), o);
  REQUIRE(a.admit(0, AdmitInfo{4, 9, 9, 2}) == Outcome::ok);
  REQUIRE(a.grow(0, 4, 4) == Outcome::ok);     // two buffers of 4
  REQUIRE(a.grow(0, 5, 1) == Outcome::ok);     // both double to 8
  const Footprint f = a.footprint(0, 0, 5);
  CHECK(f.allocated == 2 * 8);
  CHECK(f.transient == 2 * 4);                 // the two old buffers of 4, during the copy
  CHECK(a.pool().copied_bytes == 2 * 4);
}

TEST_CASE("dynamic: growth=chunk=N is growth=chunk,chunk=N, and the chunk is given once") {
  const KvLayout layout = test::unit_layout(4096);
  for (const char* spec : {"dynamic:growth=chunk=48", "dynamic:growth=chunk,chunk=48"}) {
    INFO(spec);
    auto a = make_allocator(parse_allocator_spec(spec, "test"), layout);
    CHECK(a->name() == "dynamic:growth=chunk,chunk=48");
    REQUIRE(a->admit(0, AdmitInfo{100, 50, 50, 1}) == Outcome::ok);
    REQUIRE(a->grow(0, 101, 101) == Outcome::ok);
    CHECK(a->footprint(0, 0, 101).allocated == 144);  // ceil(101 / 48) = 3 chunks
  }
  for (const char* bad : {"dynamic:growth=chunk=0", "dynamic:growth=chunk=x", "dynamic:growth=chunk=48,chunk=48"}) {
    INFO(bad);
    CHECK_THROWS_AS(make_allocator(parse_allocator_spec(bad, "test"), layout), InputError);
  }
}
