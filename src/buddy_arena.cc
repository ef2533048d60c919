#include "buddy_arena.h"

#include <bit>

#include "kvsim/error.h"
#include "kvsim/units.h"

namespace kvsim::detail {
namespace {
constexpr int kOrders = 63;  // a block of 2^62 units is past any 64-bit capacity
}  // namespace

BuddyArena::BuddyArena(std::int64_t capacity_bytes, std::int64_t unit_bytes)
    : capacity_(capacity_bytes), unit_(unit_bytes), usable_units_(capacity_bytes / unit_bytes), free_(kOrders) {
  kvsim::check(capacity_bytes > 0 && unit_bytes > 0, "buddy arena: needs a positive capacity and unit");
  // Largest top block first: each then starts at a multiple of its own size.
  std::int64_t at = 0;
  for (int k = kOrders - 1; k >= 0; --k) {
    if ((usable_units_ >> k) & 1) {
      free_[static_cast<std::size_t>(k)].insert(at);
      at += std::int64_t{1} << k;
    }
  }
}

int BuddyArena::order_of(std::int64_t bytes) const {
  const std::uint64_t units = static_cast<std::uint64_t>(ceil_div(bytes, unit_));
  return std::bit_width(units - 1);  // 1 unit: order 0; 2: 1; 3 or 4: 2; ...
}

std::int64_t BuddyArena::block_bytes(std::int64_t bytes) const {
  const int k = order_of(bytes);
  return k >= kOrders - 1 ? -1 : checked_mul(unit_, std::int64_t{1} << k, "buddy arena: a block's bytes");
}

BuddyArena::Placement BuddyArena::allocate(std::int64_t bytes) {
  kvsim::check(bytes > 0, "buddy arena: allocating nothing");
  Placement p;
  const int want = order_of(bytes);
  int k = want;
  while (k < kOrders && free_[static_cast<std::size_t>(k)].empty()) ++k;
  if (k >= kOrders) {
    p.fragmented = bytes <= free_bytes();
    return p;
  }
  auto& from = free_[static_cast<std::size_t>(k)];
  const std::int64_t unit_offset = *from.begin();
  from.erase(from.begin());
  // Split down to the size wanted: the upper half of each split stays free.
  while (k > want) {
    --k;
    free_[static_cast<std::size_t>(k)].insert(unit_offset + (std::int64_t{1} << k));
  }
  allocated_ += bytes;
  allocated_block_units_ += std::int64_t{1} << want;
  p.offset = unit_offset * unit_;
  return p;
}

void BuddyArena::free(std::int64_t offset, std::int64_t bytes) {
  kvsim::check(bytes > 0 && offset >= 0 && offset % unit_ == 0 && bytes <= allocated_,
               "buddy arena: freeing an extent it never placed");
  int k = order_of(bytes);
  std::int64_t u = offset / unit_;
  kvsim::check(u % (std::int64_t{1} << k) == 0, "buddy arena: freeing a misaligned block");
  allocated_ -= bytes;
  allocated_block_units_ -= std::int64_t{1} << k;
  // Merge while the buddy is free. A top block's buddy address lies past the end of the
  // smaller top blocks that follow it, where no free block of its order can start.
  while (k + 1 < kOrders) {
    auto& same = free_[static_cast<std::size_t>(k)];
    const auto buddy = same.find(u ^ (std::int64_t{1} << k));
    if (buddy == same.end()) break;
    same.erase(buddy);
    u &= ~(std::int64_t{1} << k);
    ++k;
  }
  kvsim::check(free_[static_cast<std::size_t>(k)].insert(u).second, "buddy arena: freeing a block twice");
}

std::int64_t BuddyArena::largest_free_extent() const {
  for (int k = kOrders - 1; k >= 0; --k) {
    if (!free_[static_cast<std::size_t>(k)].empty()) return unit_ * (std::int64_t{1} << k);
  }
  return 0;
}

std::int64_t BuddyArena::free_blocks() const {
  std::int64_t count = 0;
  for (const auto& s : free_) count += static_cast<std::int64_t>(s.size());
  return count;
}

void BuddyArena::check() const {
  // Every free block aligned to its size, inside the usable units, and with its buddy not
  // free too (else they would have merged); the free units and the allocated blocks' units
  // add up to the usable units, so nothing overlaps unnoticed.
  std::int64_t free_units = 0;
  std::set<std::pair<std::int64_t, std::int64_t>> spans;  // (start, end) in units
  for (int k = 0; k < kOrders; ++k) {
    const std::int64_t size = std::int64_t{1} << k;
    for (const std::int64_t u : free_[static_cast<std::size_t>(k)]) {
      kvsim::check(u % size == 0 && u + size <= usable_units_, "buddy arena: a free block misaligned or out of range");
      kvsim::check(free_[static_cast<std::size_t>(k)].count(u ^ size) == 0, "buddy arena: two free buddies not merged");
      spans.insert({u, u + size});
      free_units += size;
    }
  }
  std::int64_t previous_end = 0;
  for (const auto& [start, end] : spans) {
    kvsim::check(start >= previous_end, "buddy arena: free blocks overlap");
    previous_end = end;
  }
  kvsim::check(free_units + allocated_block_units_ == usable_units_, "buddy arena: free and allocated blocks do not add up");
  kvsim::check(allocated_ <= allocated_block_units_ * unit_, "buddy arena: more bytes allocated than its blocks hold");
}

}  // namespace kvsim::detail
