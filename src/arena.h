// A first-fit arena: contiguous extents placed at the lowest address where they fit.
//
// Free extents live in a treap ordered by address whose nodes also know the largest extent
// in their subtree, so first fit, coalescing on free, and the largest free extent each cost
// O(log n), however fragmented the arena is. Bounded, the arena is one free extent of
// `capacity` bytes to begin with; unbounded, it grows at its end when no hole fits, and its
// high-water mark is what it reserved from the device.
#ifndef KVSIM_SRC_ARENA_H_
#define KVSIM_SRC_ARENA_H_

#include <cstdint>
#include <vector>

namespace kvsim::detail {

class FirstFitArena {
 public:
  // capacity_bytes: 0 = unbounded.
  explicit FirstFitArena(std::int64_t capacity_bytes);

  struct Placement {
    std::int64_t offset = -1;      // -1: not placed
    bool fragmented = false;       // total free room sufficed but no single extent did (bounded:
                                   // refused; unbounded: the arena had to grow instead)
  };
  // Places `bytes` (> 0) first-fit.
  Placement allocate(std::int64_t bytes);
  // Returns [offset, offset + bytes) to the free extents, merging with its neighbours.
  // REQUIRES: exactly an extent allocate() returned and not yet freed.
  void free(std::int64_t offset, std::int64_t bytes);

  std::int64_t allocated_bytes() const { return allocated_; }
  // Bytes held from the device: the capacity, or (unbounded) the high-water mark.
  std::int64_t reserved_bytes() const { return bounded() ? capacity_ : high_water_; }
  std::int64_t free_bytes() const { return reserved_bytes() - allocated_; }
  // The largest free extent inside the reserved bytes.
  std::int64_t largest_free_extent() const;
  std::int64_t free_extents() const { return live_nodes_; }

  // Checks that free extents are ordered, disjoint, coalesced, inside the reserved bytes,
  // and add up with the allocated bytes. Throws InternalError.
  void check() const;

 private:
  using Node = std::int32_t;
  static constexpr Node kNil = -1;
  struct Extent {
    std::int64_t offset;
    std::int64_t size;
    std::int64_t max_size;   // largest size in this subtree
    std::uint32_t priority;
    Node left;
    Node right;
  };
  bool bounded() const { return capacity_ != 0; }
  Node make(std::int64_t offset, std::int64_t size);
  void update(Node n);
  std::int64_t max_of(Node n) const { return n == kNil ? 0 : nodes_[static_cast<std::size_t>(n)].max_size; }
  // Splits `n` into extents with offset < key and offset >= key.
  void split(Node n, std::int64_t key, Node& lower, Node& upper);
  Node merge(Node a, Node b);
  void insert(std::int64_t offset, std::int64_t size);
  // Removes the extent starting at `offset` (which must exist).
  void erase(std::int64_t offset);
  // The lowest extent of at least `bytes`, or kNil; path_ holds the nodes from the root
  // down to it.
  Node first_fit(std::int64_t bytes);
  Node rightmost(Node n) const;
  Node leftmost(Node n) const;

  std::vector<Extent> nodes_;
  std::vector<Node> spare_;
  std::vector<Node> path_;
  Node root_ = kNil;
  std::int64_t live_nodes_ = 0;
  std::int64_t capacity_;
  std::int64_t allocated_ = 0;
  std::int64_t high_water_ = 0;   // unbounded: end of the highest extent ever placed
  // Unbounded: the free space from tail_start_ to infinity is not in the treap.
  std::int64_t tail_start_ = 0;
  std::uint64_t rng_ = 0x9E3779B97F4A7C15ULL;  // fixed seed: placement is deterministic
};

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_ARENA_H_
