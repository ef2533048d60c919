// The buddy arena against blocks split and merged by hand.
#include "buddy_arena.h"

#include <catch2/catch.hpp>

using namespace kvsim::detail;

TEST_CASE("buddy: split down to the size asked, lowest address first, merge back on free") {
  BuddyArena a(16, 1);  // one top block of 16 units at 0
  // 3 bytes take a block of 4: 16 splits into [0,8)+[8,16), [0,8) into [0,4)+[4,8); [0,4) is
  // handed out, [4,8) and [8,16) stay free.
  CHECK(a.block_bytes(3) == 4);
  CHECK(a.allocate(3).offset == 0);
  CHECK(a.free_blocks() == 2);
  CHECK(a.largest_free_extent() == 8);
  CHECK(a.free_bytes() == 13);  // the block's fourth byte is free in the count, in no free block
  // 5 bytes take a block of 8: the free [8,16).
  CHECK(a.allocate(5).offset == 8);
  CHECK(a.largest_free_extent() == 4);
  CHECK(a.free_bytes() == 8);
  // 4 bytes take the last free block, [4,8).
  CHECK(a.allocate(4).offset == 4);
  CHECK(a.largest_free_extent() == 0);
  CHECK(a.free_bytes() == 4);  // the round-ups: 1 in [0,4) and 3 in [8,16)
  // 2 bytes: 4 bytes are free in total, but no free block: a failed placement with room free.
  const auto failed = a.allocate(2);
  CHECK(failed.offset == -1);
  CHECK(failed.fragmented);
  // 5 bytes: more than is free, not a fragmentation failure.
  CHECK_FALSE(a.allocate(5).fragmented);
  a.check();
  // Freeing [4,8): its buddy [0,4) is taken, so it stays a block of 4.
  a.free(4, 4);
  CHECK(a.largest_free_extent() == 4);
  CHECK(a.free_blocks() == 1);
  // Freeing [0,4): merges with [4,8) into [0,8); its buddy [8,16) is taken.
  a.free(0, 3);
  CHECK(a.largest_free_extent() == 8);
  CHECK(a.free_blocks() == 1);
  // Freeing [8,16): merges with [0,8) into the whole arena.
  a.free(8, 5);
  CHECK(a.largest_free_extent() == 16);
  CHECK(a.free_blocks() == 1);
  CHECK(a.free_bytes() == 16);
  a.check();
}

TEST_CASE("buddy: a capacity that is not a power of two is cut into top blocks that never merge") {
  // 25 bytes in units of 2: 12 whole units (the 25th byte is never handed out), cut into
  // top blocks of 8 units at unit 0 and 4 units at unit 8, i.e. bytes [0,16) and [16,24).
  BuddyArena a(25, 2);
  CHECK(a.free_blocks() == 2);
  CHECK(a.largest_free_extent() == 16);
  CHECK(a.free_bytes() == 25);
  // 17 bytes are 9 units, a block of 16 units: larger than any top block, though 25 are free.
  CHECK(a.block_bytes(17) == 32);
  const auto too_big = a.allocate(17);
  CHECK(too_big.offset == -1);
  CHECK(too_big.fragmented);
  // 16 bytes take the top block of 8 units whole.
  CHECK(a.allocate(16).offset == 0);
  // 1 byte takes one unit: the top block at unit 8 splits into 8+9 (2 units at 10 stays
  // free), then unit 8 and unit 9 (free): byte offset 16.
  CHECK(a.allocate(1).offset == 16);
  CHECK(a.free_blocks() == 2);  // unit 9, and units [10,12)
  CHECK(a.largest_free_extent() == 4);
  a.check();
  // Freed, unit 8 merges with 9, then with [10,12), back into the top block at unit 8; its
  // would-be buddy, unit 12, is past the end, so it does not merge with the block at 0.
  a.free(16, 1);
  CHECK(a.free_blocks() == 1);
  CHECK(a.largest_free_extent() == 8);
  a.free(0, 16);
  CHECK(a.free_blocks() == 2);
  CHECK(a.largest_free_extent() == 16);
  a.check();
}
