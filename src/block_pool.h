// A pool of fixed-size KV blocks: integer ids with reference counts, one id space per
// layer group, and one byte budget shared by all groups (as vLLM's hybrid allocator shares
// one pool of pages). A block is metadata: an id, never an object graph.
//
// Unbounded (capacity 0), the pool grows on demand and its reserved bytes are the
// high-water mark of allocated bytes: what a pool sized for this run would have needed.
// Bounded, it holds exactly `capacity` bytes from the start.
//
// With prefix caching enabled (vLLM v1's BlockPool, vllm/v1/core/block_pool.py), a full
// block can carry a prefix hash and stay in a hash -> block map after its last reference
// is dropped: it is then "evictable", free for the byte budget but kept for reuse. Free
// blocks wait in a queue (vLLM's FreeKVCacheBlockQueue, vllm/v1/core/kv_cache_utils.py):
// never-used blocks first in id order, then freed blocks least recently freed first; a
// block taken from it that still carries a hash is evicted then. Unbounded, the pool grows
// instead of evicting, so nothing cached is ever lost, and reserved bytes count the
// evictable blocks too. Every group keeps its own ids and map; the paged allocator
// operates all groups alike, so their blocks and caches stay in step, unless sliding
// windows of different sizes free them apart (then one queue serves all: one_queue). Without caching
// none of this exists and the free list is last-in first-out, as before.
#ifndef KVSIM_SRC_BLOCK_POOL_H_
#define KVSIM_SRC_BLOCK_POOL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "block_index.h"
#include "kvsim/error.h"

namespace kvsim::detail {

class BlockPool {
 public:
  // capacity_bytes: 0 = unbounded.
  explicit BlockPool(std::int64_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}

  // Adds a layer group whose blocks cost `block_bytes` each; returns its index.
  std::size_t add_group(std::int64_t block_bytes);

  // Whether `extra_bytes` more bytes of blocks fit.
  bool fits(std::int64_t extra_bytes) const {
    return capacity_bytes_ == 0 || extra_bytes <= capacity_bytes_ - allocated_bytes_;
  }
  std::int64_t block_bytes(std::size_t group) const { return groups_[group].block_bytes; }
  // Bounded, after the groups are added: the capacity becomes the whole units of `unit` bytes
  // it holds (one block of every group when the groups take blocks in step, else one block),
  // which is what the pool reserves from the device, as vLLM's num_gpu_blocks x page size; the
  // budget's remainder can hold no block, so no allocation changes. A budget below one unit
  // stays as given (nothing ever fits).
  void round_capacity(std::int64_t unit) {
    if (unit <= 0 || capacity_bytes_ < unit) return;
    capacity_bytes_ -= capacity_bytes_ % unit;
    unit_bytes_ = unit;
  }
  // What round_capacity() counted the capacity in (1: bytes).
  std::int64_t unit_bytes() const { return unit_bytes_; }
  std::size_t group_count() const { return groups_.size(); }

  // Takes a free block of `group` with one reference. REQUIRES: fits(block_bytes(group)).
  BlockId take(std::size_t group);
  // Appends `count` fresh blocks of `group` to `out`, one reference each: a prefill's
  // blocks in one pass. REQUIRES: fits(count * block_bytes(group)).
  void take_many(std::size_t group, std::int64_t count, std::vector<BlockId>& out);
  // Adds `refs` references to a live block (sharing it copy-on-write).
  void share(std::size_t group, BlockId id, std::uint32_t refs);
  // Drops `refs` references; the block returns to the free list when none remain.
  void drop(std::size_t group, BlockId id, std::uint32_t refs = 1);

  // Drops `refs` references from every block in [first, last) that is not kNullBlock.
  // REQUIRES: no prefix caching (its caller frees block by block through drop(), in the
  // order the free queue must see).
  void drop_many(std::size_t group, const BlockId* first, const BlockId* last, std::uint32_t refs);

  std::uint32_t refs(std::size_t group, BlockId id) const { return groups_[group].refs[id]; }
  std::int64_t allocated_bytes() const { return allocated_bytes_; }
  std::int64_t reserved_bytes() const { return capacity_bytes_ != 0 ? capacity_bytes_ : high_water_bytes_; }
  std::int64_t capacity_bytes() const { return capacity_bytes_; }
  std::int64_t live_blocks(std::size_t group) const { return groups_[group].live; }
  // Ids of `group` handed out so far (live, free or cached): every id is below this.
  std::size_t id_count(std::size_t group) const { return groups_[group].refs.size(); }

  // --- Prefix caching (cached_block, touch, cache_block and leave REQUIRE
  // enable_prefix_caching(); the counters read 0 without it).

  // Switches the free list to vLLM's queue and enables the hash map. Call once, after the
  // groups are added and before any block is taken. Bounded, each group then holds at most
  // capacity / (one block of every group) blocks: the allocator takes the same count in
  // every group, and the byte budget allows no more.
  //
  // `one_queue` (bounded only): the groups do not take blocks in step (a sliding-window
  // allocator whose groups have different windows), so instead of a share of the budget
  // each, every group draws on the whole budget and a new block, once the budget is spent,
  // comes from the least recently freed block of any group, as from vLLM's one
  // FreeKVCacheBlockQueue of pages every group uses: a block of another group is evicted
  // if cached and its bytes given back (its id kept for that group's later use).
  void enable_prefix_caching(bool one_queue = false);
  bool prefix_caching() const { return cache_ != nullptr; }
  // The block of `group` cached under `hash` (the first cached, when two blocks computed
  // the same prefix), or kNullBlock.
  BlockId cached_block(std::size_t group, std::uint64_t hash) const;
  // Changes whenever a block is cached or evicted, the only changes to what cached_block()
  // answers: an answer read at one version holds while the version is unchanged.
  std::uint64_t cache_version() const { return cache_version_; }
  // A request that did not hold it takes cached block `id`: one more reference and one
  // more request; a block with no references leaves the free queue (vLLM's touch()).
  void touch(std::size_t group, BlockId id);
  // Registers a full block held by exactly one request under `hash` (vLLM's
  // cache_full_blocks); a hash already cached keeps its block and gains this one as a
  // duplicate. REQUIRES: `id` carries no hash.
  void cache_block(std::size_t group, BlockId id, std::uint64_t hash);
  // cache_block() for a run of a table, [first, last), each block under the hash beside it
  // (hashes[i] for first[i]); null entries (freed behind a sliding window before they were
  // full) are skipped, never cached. One call for a step's blocks instead of one per block.
  void cache_run(std::size_t group, const BlockId* first, const BlockId* last, const std::uint64_t* hashes);
  // A request that holds cached block `id` lets go of it (before it drops its references).
  void leave(std::size_t group, BlockId id);
  // A request lets go of a run of its table, [first, last), from the last block back (vLLM's
  // free(): its tail is evicted before its head), up to a null entry (the blocks before it
  // were freed behind a sliding window): each of the first `cached` blocks of the run, which
  // the request holds cached, leave()s, and each block drops `refs` references, as drop()
  // does. One call for a whole table instead of two or three per block.
  void release_run(std::size_t group, const BlockId* first, const BlockId* last, std::int64_t cached,
                    std::uint32_t refs);
  // Cached blocks of `group` that two or more live requests hold, each counted once per
  // request beyond the first: sum of (requests - 1).
  std::int64_t shared_blocks(std::size_t group) const { return cache_ ? cache_->groups[group].shared_blocks : 0; }
  // Whether block `id` is cached under `hash`.
  bool cached_as(std::size_t group, BlockId id, std::uint64_t hash) const {
    return cache_ && cache_->groups[group].entries[id].hashed && cache_->groups[group].entries[id].hash == hash;
  }
  // Bytes of cached blocks no request references.
  std::int64_t evictable_bytes() const { return evictable_bytes_; }
  // Bytes of cached blocks evicted so far (vLLM's _maybe_evict_cached_block).
  std::int64_t evicted_bytes() const { return evicted_bytes_; }

  // Checks that every id is either free (no references, on the free list once) or live,
  // that the live count and the allocated bytes agree, and that `expected_refs[g][id]`
  // (counted by the caller from its block tables) equals each block's reference count.
  // Throws InternalError.
  // With prefix caching, `expected_requests[g][id]` (the live requests whose tables hold
  // cached block id) is checked too, with the queue, the map and the evictable bytes.
  void check(const std::vector<std::vector<std::uint32_t>>& expected_refs,
             const std::vector<std::vector<std::uint32_t>>& expected_requests = {}) const;

 private:
  struct Group {
    std::int64_t block_bytes = 0;
    std::vector<std::uint32_t> refs;  // by id; 0 = free
    std::vector<BlockId> free;        // ids with no references, reused last-in first-out
    std::int64_t live = 0;
  };
  // Prefix caching's state, apart from Group so that the pool without it keeps its layout
  // (grow()'s hot path touches Group): per block, per group, and for the pool.
  struct CacheEntry {
    std::uint64_t hash = 0;
    BlockId prev = kNullBlock;            // free queue links
    BlockId next = kNullBlock;
    BlockId next_same_hash = kNullBlock;  // duplicates of one hash, oldest first
    std::uint32_t requests = 0;           // live requests whose tables hold the block
    bool hashed = false;
    bool queued = false;
    bool retired = false;                 // one_queue: its bytes went to another group
  };
  // Read at random, one per block operation: half a cache line each.
  static_assert(sizeof(CacheEntry) == 32);
  struct CacheGroup {
    std::vector<CacheEntry> entries;  // by id
    std::vector<std::uint64_t> freed_at;  // one_queue, by id: order of entering the queue
    BlockId queue_head = kNullBlock;
    BlockId queue_tail = kNullBlock;
    BlockIndex by_hash;  // the first block cached under a hash
    std::int64_t shared_blocks = 0;
    std::vector<BlockId> retired;  // one_queue: ids whose bytes another group took
  };
  struct Cache {
    std::vector<CacheGroup> groups;
    std::int64_t blocks_per_group = 0;  // bounded: ids each group may create
    bool one_queue = false;
    std::int64_t existing_bytes = 0;    // one_queue: bytes of every block not retired
    std::uint64_t next_freed_at = 0;
  };
  // Drops `refs` references from block `id` of `g`: whether none remain (drop(), drop_many()
  // and release_run() then free it each their way). Inline, so the run loops keep no call.
  static bool drop_refs(Group& g, BlockId id, std::uint32_t refs) {
    kvsim::check(g.refs[id] >= refs, "block pool: dropping more references than a block has");
    g.refs[id] -= refs;
    return g.refs[id] == 0;
  }
  BlockId take_cached(std::size_t group);
  void take_many_cached(std::size_t group, std::int64_t count, std::vector<BlockId>& out);  // take_many's
  BlockId take_one_queue(std::size_t group);
  void release_cached(std::size_t group, BlockId id);
  static void enqueue(CacheGroup& c, BlockId id);
  static void dequeue(CacheGroup& c, BlockId id);
  void evict(std::size_t group, BlockId id);
  // by_hash's key of a block id: the hash the block is cached under.
  static auto hash_of(const CacheGroup& c) {
    return [&c](BlockId id) { return c.entries[id].hash; };
  }
  void check_cache(std::size_t group, const std::vector<std::uint32_t>& expected_requests) const;

  std::vector<Group> groups_;
  std::int64_t capacity_bytes_;
  std::int64_t unit_bytes_ = 1;
  std::int64_t allocated_bytes_ = 0;
  std::int64_t high_water_bytes_ = 0;
  std::unique_ptr<Cache> cache_;  // null without prefix caching
  std::int64_t evictable_bytes_ = 0;  // a plain member: pool() reads it after every operation
  // Bumped by every change to what cached_block() answers (cache_block, evict): a new such
  // change must bump it too, or PagedAllocator::hit_blocks()'s memo answers from a stale map.
  std::uint64_t cache_version_ = 0;
  std::int64_t evicted_bytes_ = 0;
};

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_BLOCK_POOL_H_
