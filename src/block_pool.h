// A pool of fixed-size KV blocks: integer ids with reference counts, one id space per
// layer group, and one byte budget shared by all groups (as vLLM's hybrid allocator shares
// one pool of pages). A block is metadata: an id, never an object graph.
//
// Unbounded (capacity 0), the pool grows on demand and its reserved bytes are the
// high-water mark of allocated bytes: what a pool sized for this run would have needed.
// Bounded, it holds exactly `capacity` bytes from the start.
#ifndef KVSIM_SRC_BLOCK_POOL_H_
#define KVSIM_SRC_BLOCK_POOL_H_

#include <cstdint>
#include <vector>

namespace kvsim::detail {

using BlockId = std::uint32_t;
inline constexpr BlockId kNullBlock = 0xFFFFFFFFu;  // a table entry whose block was freed

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
  void drop_many(std::size_t group, const BlockId* first, const BlockId* last, std::uint32_t refs);

  std::uint32_t refs(std::size_t group, BlockId id) const { return groups_[group].refs[id]; }
  std::int64_t allocated_bytes() const { return allocated_bytes_; }
  std::int64_t reserved_bytes() const { return capacity_bytes_ != 0 ? capacity_bytes_ : high_water_bytes_; }
  std::int64_t capacity_bytes() const { return capacity_bytes_; }
  std::int64_t live_blocks(std::size_t group) const { return groups_[group].live; }

  // Checks that every id is either free (no references, on the free list once) or live,
  // that the live count and the allocated bytes agree, and that `expected_refs[g][id]`
  // (counted by the caller from its block tables) equals each block's reference count.
  // Throws InternalError.
  void check(const std::vector<std::vector<std::uint32_t>>& expected_refs) const;

 private:
  struct Group {
    std::int64_t block_bytes = 0;
    std::vector<std::uint32_t> refs;  // by id; 0 = free
    std::vector<BlockId> free;        // ids with no references, reused last-in first-out
    std::int64_t live = 0;
  };
  std::vector<Group> groups_;
  std::int64_t capacity_bytes_;
  std::int64_t allocated_bytes_ = 0;
  std::int64_t high_water_bytes_ = 0;
};

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_BLOCK_POOL_H_
