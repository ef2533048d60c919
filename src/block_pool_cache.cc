// The block pool's prefix cache (block_pool.h): vLLM v1's BlockPool
// (vllm/v1/core/block_pool.py) and its FreeKVCacheBlockQueue (vllm/v1/core/kv_cache_utils.py),
// apart from the plain pool, which reaches them through one branch on the cache pointer
// in take(), take_many() and drop().
#include <algorithm>
#include <string>

#include "block_pool.h"
#include "kvsim/error.h"

namespace kvsim::detail {

void BlockPool::enable_prefix_caching(bool one_queue) {
  std::int64_t row_bytes = 0;
  for (const Group& g : groups_) {
    kvsim::check(g.refs.empty(), "block pool: prefix caching enabled after blocks were taken");
    row_bytes += g.block_bytes;
  }
  cache_ = std::make_unique<Cache>();
  cache_->groups.resize(groups_.size());
  cache_->blocks_per_group = capacity_bytes_ != 0 && row_bytes > 0 ? capacity_bytes_ / row_bytes : 0;
  cache_->one_queue = one_queue && capacity_bytes_ != 0;
}

BlockId BlockPool::take_one_queue(std::size_t group) {
  Group& g = groups_[group];
  CacheGroup& c = cache_->groups[group];
  BlockId id = kNullBlock;
  while (id == kNullBlock && cache_->existing_bytes + g.block_bytes > capacity_bytes_) {
    // get_new_blocks: popleft from the one queue, the least recently freed of all groups.
    std::size_t from = groups_.size();
    for (std::size_t h = 0; h < groups_.size(); ++h) {
      const CacheGroup& q = cache_->groups[h];
      if (q.queue_head == kNullBlock) continue;
      if (from == groups_.size() ||
          q.freed_at[q.queue_head] < cache_->groups[from].freed_at[cache_->groups[from].queue_head]) {
        from = h;
      }
    }
    kvsim::check(from < groups_.size(), "block pool: no free block although the budget has room");
    CacheGroup& v = cache_->groups[from];
    const BlockId victim = v.queue_head;
    dequeue(v, victim);
    if (v.entries[victim].hashed) evict(from, victim);
    if (from == group) {
      id = victim;
    } else {
      v.entries[victim].retired = true;
      v.retired.push_back(victim);
      cache_->existing_bytes -= groups_[from].block_bytes;
    }
  }
  if (id == kNullBlock) {  // room for one more block of this group: a retired id, or a new one
    if (!c.retired.empty()) {
      id = c.retired.back();
      c.retired.pop_back();
      c.entries[id].retired = false;
    } else {
      kvsim::check(g.refs.size() < kNullBlock, "block pool: block ids exhausted");
      id = static_cast<BlockId>(g.refs.size());
      g.refs.push_back(0);
      c.entries.emplace_back();
      c.freed_at.push_back(0);
    }
    cache_->existing_bytes += g.block_bytes;
  }
  g.refs[id] = 1;
  ++g.live;
  allocated_bytes_ += g.block_bytes;  // within the capacity: no overflow
  high_water_bytes_ = std::max(high_water_bytes_, allocated_bytes_ + evictable_bytes_);
  return id;
}

BlockId BlockPool::take_cached(std::size_t group) {
  if (cache_->one_queue) return take_one_queue(group);
  Group& g = groups_[group];
  CacheGroup& c = cache_->groups[group];
  // vLLM's queue starts with every block in id order, so never-used blocks go first; here
  // they are created on demand, up to the group's share of the budget. Unbounded, a new
  // block is created whenever no uncached block is free: cached ones are never evicted.
  const bool fresh = capacity_bytes_ != 0 ? static_cast<std::int64_t>(g.refs.size()) < cache_->blocks_per_group
                                          : c.queue_head == kNullBlock;
  BlockId id;
  if (fresh) {
    kvsim::check(g.refs.size() < kNullBlock, "block pool: block ids exhausted");
    id = static_cast<BlockId>(g.refs.size());
    g.refs.push_back(0);
    c.entries.emplace_back();
  } else {
    // get_new_blocks: popleft, and _maybe_evict_cached_block on what comes out.
    id = c.queue_head;
    kvsim::check(id != kNullBlock, "block pool: no free block although the budget has room");
    dequeue(c, id);
    if (c.entries[id].hashed) evict(group, id);
  }
  g.refs[id] = 1;
  ++g.live;
  if (__builtin_add_overflow(allocated_bytes_, g.block_bytes, &allocated_bytes_)) {
    throw InputError("paged: the bytes of the blocks in use overflow 64 bits");
  }
  high_water_bytes_ = std::max(high_water_bytes_, allocated_bytes_ + evictable_bytes_);
  return id;
}

// Flattened, as release_run(): take_cached() and evict() inline into the loop.
[[gnu::flatten]] void BlockPool::take_many_cached(std::size_t group, std::int64_t count, std::vector<BlockId>& out) {
  for (std::int64_t i = 0; i < count; ++i) out.push_back(take_cached(group));
}

void BlockPool::release_cached(std::size_t group, BlockId id) {
  Group& g = groups_[group];
  CacheGroup& c = cache_->groups[group];
  --g.live;
  allocated_bytes_ -= g.block_bytes;
  const bool hashed = c.entries[id].hashed;
  if (hashed) evictable_bytes_ += g.block_bytes;
  // free_blocks: to the back of the queue, cached or not; unbounded, a cached block stays
  // out of it, as nothing is ever evicted.
  if (cache_->one_queue) c.freed_at[id] = cache_->next_freed_at++;
  if (capacity_bytes_ != 0 || !hashed) enqueue(c, id);
}

void BlockPool::enqueue(CacheGroup& c, BlockId id) {
  CacheEntry& e = c.entries[id];
  e.queued = true;
  e.prev = c.queue_tail;
  e.next = kNullBlock;
  if (c.queue_tail != kNullBlock) c.entries[c.queue_tail].next = id;
  else c.queue_head = id;
  c.queue_tail = id;
}

void BlockPool::dequeue(CacheGroup& c, BlockId id) {
  CacheEntry& e = c.entries[id];
  if (e.prev != kNullBlock) c.entries[e.prev].next = e.next;
  else c.queue_head = e.next;
  if (e.next != kNullBlock) c.entries[e.next].prev = e.prev;
  else c.queue_tail = e.prev;
  e.prev = e.next = kNullBlock;
  e.queued = false;
}

void BlockPool::evict(std::size_t group, BlockId id) {
  ++cache_version_;
  CacheGroup& c = cache_->groups[group];
  CacheEntry& e = c.entries[id];
  const std::size_t slot = c.by_hash.slot(e.hash, hash_of(c));
  kvsim::check(slot != BlockIndex::kAbsent, "block pool: a cached block is missing from the hash map");
  BlockId& first = c.by_hash.id_at(slot);
  if (first == id) {
    if (e.next_same_hash == kNullBlock) c.by_hash.erase_at(slot);
    else first = e.next_same_hash;
  } else {
    BlockId at = first;
    while (c.entries[at].next_same_hash != id) at = c.entries[at].next_same_hash;
    c.entries[at].next_same_hash = e.next_same_hash;
  }
  e.next_same_hash = kNullBlock;
  e.hashed = false;
  evictable_bytes_ -= groups_[group].block_bytes;
  evicted_bytes_ += groups_[group].block_bytes;
}

BlockId BlockPool::cached_block(std::size_t group, std::uint64_t hash) const {
  const CacheGroup& c = cache_->groups[group];
  const BlockId* const first = c.by_hash.find(hash, hash_of(c));
  return first == nullptr ? kNullBlock : *first;
}

void BlockPool::touch(std::size_t group, BlockId id) {
  Group& g = groups_[group];
  CacheGroup& c = cache_->groups[group];
  CacheEntry& e = c.entries[id];
  kvsim::check(e.hashed, "block pool: touching a block that is not cached");
  if (g.refs[id] == 0) {
    // An evictable block becomes allocated again: it was free room, so it always fits.
    if (e.queued) dequeue(c, id);
    evictable_bytes_ -= g.block_bytes;
    allocated_bytes_ += g.block_bytes;
    ++g.live;
  }
  ++g.refs[id];
  if (++e.requests >= 2) ++c.shared_blocks;
}

void BlockPool::cache_block(std::size_t group, BlockId id, std::uint64_t hash) {
  CacheGroup& c = cache_->groups[group];
  CacheEntry& e = c.entries[id];
  kvsim::check(!e.hashed && groups_[group].refs[id] > 0, "block pool: caching a block twice, or a free one");
  ++cache_version_;
  e.hashed = true;
  e.hash = hash;
  e.requests = 1;
  e.next_same_hash = kNullBlock;
  const auto [first, inserted] = c.by_hash.try_emplace(hash, id, hash_of(c));
  if (!inserted) {
    // Two requests computed the same block: both stay cached, lookups find the first.
    BlockId at = *first;
    while (c.entries[at].next_same_hash != kNullBlock) at = c.entries[at].next_same_hash;
    c.entries[at].next_same_hash = id;
  }
}

// Flattened, as release_run(): cache_block() inlines into the loop.
[[gnu::flatten]] void BlockPool::cache_run(std::size_t group, const BlockId* first, const BlockId* last,
                                           const std::uint64_t* hashes) {
  for (const BlockId* p = first; p != last; ++p, ++hashes) {
    if (*p != kNullBlock) cache_block(group, *p, *hashes);
  }
}

void BlockPool::leave(std::size_t group, BlockId id) {
  CacheGroup& c = cache_->groups[group];
  CacheEntry& e = c.entries[id];
  kvsim::check(e.requests > 0, "block pool: a request leaves a cached block it did not hold");
  if (--e.requests >= 1) --c.shared_blocks;
}

// Flattened: leave(), release_cached() and the queue's enqueue() are inlined into the loop,
// instead of three calls per block.
[[gnu::flatten]] void BlockPool::release_run(std::size_t group, const BlockId* first, const BlockId* last,
                                             std::int64_t cached, std::uint32_t refs) {
  Group& g = groups_[group];
  for (const BlockId* p = last; p != first;) {
    const BlockId id = *--p;
    if (id == kNullBlock) return;
    if (p - first < cached) leave(group, id);
    if (drop_refs(g, id, refs)) release_cached(group, id);  // drop(), with prefix caching
  }
}

void BlockPool::check_cache(std::size_t group, const std::vector<std::uint32_t>& expected_requests) const {
  const Group& g = groups_[group];
  const CacheGroup& c = cache_->groups[group];
  const std::size_t size = g.refs.size();
  kvsim::check(c.entries.size() == size && (!cache_->one_queue || c.freed_at.size() == size),
               "block pool: cache entries and blocks disagree");
  kvsim::check(capacity_bytes_ == 0 || cache_->one_queue || static_cast<std::int64_t>(size) <= cache_->blocks_per_group,
               "block pool: more blocks than the budget holds");
  // The queue: well linked, free blocks only, each once.
  std::vector<char> in_queue(size, 0);
  BlockId prev = kNullBlock;
  for (BlockId id = c.queue_head; id != kNullBlock; id = c.entries[id].next) {
    kvsim::check(id < size && in_queue[id] == 0, "block pool: the free queue holds an unknown id, or one twice");
    kvsim::check(c.entries[id].prev == prev && c.entries[id].queued, "block pool: the free queue's links are broken");
    kvsim::check(g.refs[id] == 0, "block pool: a referenced block is in the free queue");
    in_queue[id] = 1;
    prev = id;
  }
  kvsim::check(prev == c.queue_tail, "block pool: the free queue's tail is wrong");
  // The map: each entry a chain of blocks carrying its hash, every cached block in one.
  std::vector<char> in_map(size, 0);
  c.by_hash.for_each([&](BlockId first) {
    kvsim::check(first < size, "block pool: the hash map holds an unknown block");
    const std::uint64_t hash = c.entries[first].hash;
    const BlockId* const found = c.by_hash.find(hash, hash_of(c));
    kvsim::check(found != nullptr && *found == first, "block pool: a hash map entry is not found under its block's hash");
    for (BlockId id = first; id != kNullBlock; id = c.entries[id].next_same_hash) {
      kvsim::check(id < size && in_map[id] == 0, "block pool: the hash map holds an unknown block, or one twice");
      kvsim::check(c.entries[id].hashed && c.entries[id].hash == hash,
                   "block pool: a hash map entry names a block without that hash");
      in_map[id] = 1;
    }
  });
  std::int64_t shared = 0;
  for (std::size_t id = 0; id < size; ++id) {
    const CacheEntry& e = c.entries[id];
    kvsim::check(e.queued == (in_queue[id] == 1), "block pool: a block's queued flag is wrong");
    kvsim::check(e.hashed == (in_map[id] == 1), "block pool: a cached block is missing from the hash map");
    kvsim::check(!e.retired || (g.refs[id] == 0 && !e.hashed && !e.queued), "block pool: a retired block is in use");
    if (g.refs[id] == 0) {
      const bool should_queue = (capacity_bytes_ != 0 || !e.hashed) && !e.retired;
      kvsim::check(in_queue[id] == should_queue, "block pool: a free block is missing from the free queue, or an "
                                                 "unbounded pool queued a cached one");
    }
    const std::uint32_t want = id < expected_requests.size() ? expected_requests[id] : 0;
    if (e.requests != want) {
      throw InternalError("block pool: group " + std::to_string(group) + " block " + std::to_string(id) + " is held by " +
                          std::to_string(e.requests) + " requests but block tables say " + std::to_string(want));
    }
    kvsim::check(e.requests == 0 || (e.hashed && g.refs[id] >= e.requests),
                 "block pool: requests hold a block that is not cached, or more requests than references");
    if (e.requests >= 2) shared += e.requests - 1;
  }
  kvsim::check(shared == c.shared_blocks, "block pool: the count of blocks shared across requests drifted");
}

}  // namespace kvsim::detail
