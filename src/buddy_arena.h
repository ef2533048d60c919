// A binary buddy arena: contiguous extents of a power of two times a unit, placed at the
// lowest address of the smallest free block that holds them, split in halves on the way
// down and merged with their buddy on free (Knuth's buddy system; the vLLM paper's section
// 6.1 assumes its Orca baselines place KV reservations this way).
//
// The arena is bounded: `capacity / unit` units, cut into power-of-two top blocks largest
// first (binary decomposition), so a block of 2^k units always starts at a multiple of 2^k
// units and its buddy is found by flipping bit k of its unit offset. Bytes past the last
// whole unit are never handed out. An extent of `bytes` takes a block of
// unit x bit_ceil(ceil(bytes / unit)); the rest of that block (the round-up) is held but
// unused. allocated_bytes() counts the bytes asked for, not the blocks, so the round-up is
// part of free_bytes() while no free block contains it: it shows as
// 1 - largest_free_extent / free, external fragmentation in kvsim's terms (docs/replay.md,
// "Contiguous placement").
#ifndef KVSIM_SRC_BUDDY_ARENA_H_
#define KVSIM_SRC_BUDDY_ARENA_H_

#include <cstdint>
#include <set>
#include <vector>

#include "arena.h"

namespace kvsim::detail {

class BuddyArena {
 public:
  // REQUIRES: capacity_bytes > 0, unit_bytes > 0.
  BuddyArena(std::int64_t capacity_bytes, std::int64_t unit_bytes);

  using Placement = FirstFitArena::Placement;
  // Places `bytes` (> 0) in the lowest-addressed smallest free block that holds it; on
  // failure offset is -1 and `fragmented` says the free bytes sufficed in total.
  Placement allocate(std::int64_t bytes);
  // Returns the block holding [offset, offset + bytes), merging it with free buddies.
  // REQUIRES: exactly an extent allocate() returned and not yet freed.
  void free(std::int64_t offset, std::int64_t bytes);

  // The block an extent of `bytes` occupies: unit x the next power of two of its units.
  std::int64_t block_bytes(std::int64_t bytes) const;
  std::int64_t allocated_bytes() const { return allocated_; }
  std::int64_t reserved_bytes() const { return capacity_; }
  std::int64_t free_bytes() const { return capacity_ - allocated_; }
  // The largest free block: the largest extent an allocation can be given now.
  std::int64_t largest_free_extent() const;
  std::int64_t free_blocks() const;

  // Checks that free blocks are aligned, disjoint, not mergeable with a free buddy, and
  // add up with the allocated blocks to the usable capacity. Throws InternalError.
  void check() const;

 private:
  int order_of(std::int64_t bytes) const;   // the order of the block `bytes` takes
  std::int64_t capacity_;
  std::int64_t unit_;
  std::int64_t usable_units_;
  std::int64_t allocated_ = 0;              // bytes asked for
  std::int64_t allocated_block_units_ = 0;  // units of the blocks handed out
  // free_[k]: unit offsets of the free blocks of 2^k units, lowest first.
  std::vector<std::set<std::int64_t>> free_;
};

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_BUDDY_ARENA_H_
