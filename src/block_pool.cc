#include "block_pool.h"

#include <algorithm>
#include <string>

#include "kvsim/error.h"

namespace kvsim::detail {

std::size_t BlockPool::add_group(std::int64_t block_bytes) {
  groups_.push_back(Group{block_bytes, {}, {}, 0});
  return groups_.size() - 1;
}

BlockId BlockPool::take(std::size_t group) {
  if (cache_) [[unlikely]] return take_cached(group);
  Group& g = groups_[group];
  BlockId id;
  if (!g.free.empty()) {
    id = g.free.back();
    g.free.pop_back();
  } else {
    kvsim::check(g.refs.size() < kNullBlock, "block pool: block ids exhausted");
    id = static_cast<BlockId>(g.refs.size());
    g.refs.push_back(0);
  }
  g.refs[id] = 1;
  ++g.live;
  // Past 2^63 bytes only with requests of absurd lengths: the input's fault, reported so.
  if (__builtin_add_overflow(allocated_bytes_, g.block_bytes, &allocated_bytes_)) {
    throw InputError("paged: the bytes of the blocks in use overflow 64 bits");
  }
  high_water_bytes_ = std::max(high_water_bytes_, allocated_bytes_);
  return id;
}

void BlockPool::take_many(std::size_t group, std::int64_t count, std::vector<BlockId>& out) {
  // One request's blocks of one group must have ids (checked before creating any: a prompt
  // of 2^40 tokens would otherwise allocate ids until the host runs out of memory).
  if (count >= static_cast<std::int64_t>(kNullBlock)) {
    throw InputError("paged: a request needs " + std::to_string(count) +
                     " blocks of one layer group at once, more than block ids can number (2^32 - 1)");
  }
  if (cache_) [[unlikely]] {
    take_many_cached(group, count, out);
    return;
  }
  Group& g = groups_[group];
  // Reused ids first, most recently freed first, as take() would hand them out.
  const auto reused = static_cast<std::size_t>(std::min<std::int64_t>(count, static_cast<std::int64_t>(g.free.size())));
  for (std::size_t i = 0; i < reused; ++i) {
    const BlockId id = g.free[g.free.size() - 1 - i];
    g.refs[id] = 1;
    out.push_back(id);
  }
  g.free.resize(g.free.size() - reused);
  for (std::int64_t i = static_cast<std::int64_t>(reused); i < count; ++i) {
    kvsim::check(g.refs.size() < kNullBlock, "block pool: block ids exhausted");
    out.push_back(static_cast<BlockId>(g.refs.size()));
    g.refs.push_back(1);
  }
  g.live += count;
  std::int64_t bytes = 0;
  if (__builtin_mul_overflow(count, g.block_bytes, &bytes) ||
      __builtin_add_overflow(allocated_bytes_, bytes, &allocated_bytes_)) {
    throw InputError("paged: the bytes of the blocks in use overflow 64 bits");
  }
  high_water_bytes_ = std::max(high_water_bytes_, allocated_bytes_);
}

void BlockPool::drop_many(std::size_t group, const BlockId* first, const BlockId* last, std::uint32_t refs) {
  Group& g = groups_[group];
  std::int64_t freed = 0;
  for (const BlockId* p = first; p != last; ++p) {
    const BlockId id = *p;
    if (id == kNullBlock) continue;
    if (drop_refs(g, id, refs)) {
      g.free.push_back(id);
      ++freed;
    }
  }
  g.live -= freed;
  allocated_bytes_ -= freed * g.block_bytes;
}

void BlockPool::share(std::size_t group, BlockId id, std::uint32_t refs) {
  Group& g = groups_[group];
  kvsim::check(g.refs[id] > 0, "block pool: sharing a free block");
  g.refs[id] += refs;
}

void BlockPool::drop(std::size_t group, BlockId id, std::uint32_t refs) {
  Group& g = groups_[group];
  if (drop_refs(g, id, refs)) {
    if (cache_) {
      release_cached(group, id);
      return;
    }
    g.free.push_back(id);
    --g.live;
    allocated_bytes_ -= g.block_bytes;
  }
}

void BlockPool::check(const std::vector<std::vector<std::uint32_t>>& expected_refs,
                      const std::vector<std::vector<std::uint32_t>>& expected_requests) const {
  kvsim::check(expected_refs.size() == groups_.size(), "block pool: group count mismatch");
  std::int64_t bytes = 0;
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    const Group& g = groups_[gi];
    std::vector<char> on_free_list(g.refs.size(), 0);
    for (BlockId id : g.free) {
      kvsim::check(id < g.refs.size(), "block pool: free list holds an unknown id");
      kvsim::check(on_free_list[id] == 0, "block pool: a block is on the free list twice");
      kvsim::check(g.refs[id] == 0, "block pool: a referenced block is on the free list");
      on_free_list[id] = 1;
    }
    std::int64_t live = 0;
    for (std::size_t id = 0; id < g.refs.size(); ++id) {
      const std::uint32_t want = id < expected_refs[gi].size() ? expected_refs[gi][id] : 0;
      if (g.refs[id] != want) {
        throw InternalError("block pool: group " + std::to_string(gi) + " block " + std::to_string(id) +
                            " has " + std::to_string(g.refs[id]) + " references but block tables hold " +
                            std::to_string(want));
      }
      if (g.refs[id] > 0) ++live;
      else if (!cache_) kvsim::check(on_free_list[id] == 1, "block pool: a free block is missing from the free list");
    }
    kvsim::check(expected_refs[gi].size() <= g.refs.size() ||
                     std::all_of(expected_refs[gi].begin() + static_cast<std::ptrdiff_t>(g.refs.size()),
                                 expected_refs[gi].end(), [](std::uint32_t r) { return r == 0; }),
                 "block pool: block tables reference ids the pool never handed out");
    kvsim::check(live == g.live, "block pool: live block count drifted");
    bytes += live * g.block_bytes;
  }
  kvsim::check(bytes == allocated_bytes_, "block pool: allocated bytes do not match live blocks");
  if (cache_) {
    std::int64_t evictable = 0;
    for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
      check_cache(gi, gi < expected_requests.size() ? expected_requests[gi] : std::vector<std::uint32_t>{});
      const Group& g = groups_[gi];
      for (std::size_t id = 0; id < g.refs.size(); ++id) {
        if (g.refs[id] == 0 && cache_->groups[gi].entries[id].hashed) evictable += g.block_bytes;
      }
    }
    kvsim::check(evictable == evictable_bytes_, "block pool: evictable bytes do not match the cached free blocks");
    if (cache_->one_queue) {
      std::int64_t existing = 0;
      for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
        existing += (static_cast<std::int64_t>(groups_[gi].refs.size()) -
                     static_cast<std::int64_t>(cache_->groups[gi].retired.size())) * groups_[gi].block_bytes;
      }
      kvsim::check(existing == cache_->existing_bytes && existing <= capacity_bytes_,
                   "block pool: the blocks of the one queue exceed the budget, or their count drifted");
    }
    kvsim::check(capacity_bytes_ != 0 || allocated_bytes_ + evictable_bytes_ <= high_water_bytes_,
                 "block pool: the unbounded pool reserves less than it holds");
  }
  kvsim::check(capacity_bytes_ == 0 || allocated_bytes_ <= capacity_bytes_, "block pool: over capacity");
}

}  // namespace kvsim::detail
