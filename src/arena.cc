#include "arena.h"

#include <algorithm>
#include <limits>

#include "kvsim/error.h"

namespace kvsim::detail {
namespace {
constexpr std::int64_t kMaxBytes = std::numeric_limits<std::int64_t>::max();
}  // namespace

FirstFitArena::FirstFitArena(std::int64_t capacity_bytes) : capacity_(capacity_bytes) {
  if (bounded()) insert(0, capacity_);
}

FirstFitArena::Node FirstFitArena::make(std::int64_t offset, std::int64_t size) {
  rng_ ^= rng_ << 13;
  rng_ ^= rng_ >> 7;
  rng_ ^= rng_ << 17;
  const Extent e{offset, size, size, static_cast<std::uint32_t>(rng_ >> 32), kNil, kNil};
  ++live_nodes_;
  if (!spare_.empty()) {
    const Node n = spare_.back();
    spare_.pop_back();
    nodes_[static_cast<std::size_t>(n)] = e;
    return n;
  }
  nodes_.push_back(e);
  return static_cast<Node>(nodes_.size() - 1);
}

void FirstFitArena::update(Node n) {
  Extent& e = nodes_[static_cast<std::size_t>(n)];
  e.max_size = std::max({e.size, max_of(e.left), max_of(e.right)});
}

void FirstFitArena::split(Node n, std::int64_t key, Node& lower, Node& upper) {
  if (n == kNil) {
    lower = upper = kNil;
    return;
  }
  Extent& e = nodes_[static_cast<std::size_t>(n)];
  if (e.offset < key) {
    split(e.right, key, e.right, upper);
    lower = n;
  } else {
    split(e.left, key, lower, e.left);
    upper = n;
  }
  update(n);
}

FirstFitArena::Node FirstFitArena::merge(Node a, Node b) {
  if (a == kNil) return b;
  if (b == kNil) return a;
  Extent& ea = nodes_[static_cast<std::size_t>(a)];
  Extent& eb = nodes_[static_cast<std::size_t>(b)];
  if (ea.priority > eb.priority) {
    ea.right = merge(ea.right, b);
    update(a);
    return a;
  }
  eb.left = merge(a, eb.left);
  update(b);
  return b;
}

void FirstFitArena::insert(std::int64_t offset, std::int64_t size) {
  Node lower, upper;
  split(root_, offset, lower, upper);
  root_ = merge(merge(lower, make(offset, size)), upper);
}

void FirstFitArena::erase(std::int64_t offset) {
  Node lower, middle, upper;
  split(root_, offset, lower, upper);
  split(upper, offset + 1, middle, upper);
  kvsim::check(middle != kNil && nodes_[static_cast<std::size_t>(middle)].left == kNil &&
            nodes_[static_cast<std::size_t>(middle)].right == kNil,
        "arena: erasing an extent that is not free");
  spare_.push_back(middle);
  --live_nodes_;
  root_ = merge(lower, upper);
}

FirstFitArena::Node FirstFitArena::first_fit(std::int64_t bytes) {
  path_.clear();
  Node n = root_;
  while (n != kNil && max_of(n) >= bytes) {
    path_.push_back(n);
    const Extent& e = nodes_[static_cast<std::size_t>(n)];
    if (max_of(e.left) >= bytes) n = e.left;
    else if (e.size >= bytes) return n;
    else n = e.right;
  }
  return kNil;
}

FirstFitArena::Node FirstFitArena::rightmost(Node n) const {
  while (n != kNil && nodes_[static_cast<std::size_t>(n)].right != kNil) n = nodes_[static_cast<std::size_t>(n)].right;
  return n;
}

FirstFitArena::Node FirstFitArena::leftmost(Node n) const {
  while (n != kNil && nodes_[static_cast<std::size_t>(n)].left != kNil) n = nodes_[static_cast<std::size_t>(n)].left;
  return n;
}

FirstFitArena::Placement FirstFitArena::allocate(std::int64_t bytes) {
  kvsim::check(bytes > 0, "arena: allocating nothing");
  Placement p;
  const Node n = first_fit(bytes);
  if (n != kNil) {
    Extent& e = nodes_[static_cast<std::size_t>(n)];
    p.offset = e.offset;
    if (e.size > bytes) {
      // The extent keeps its place in the address order when its front is taken: shrink it
      // where it is and refresh the subtree maxima on the way back to the root.
      e.offset += bytes;
      e.size -= bytes;
      for (auto it = path_.rbegin(); it != path_.rend(); ++it) update(*it);
    } else {
      erase(e.offset);
    }
  } else if (!bounded()) {
    // Grow at the end; the free space just below the end joins the new extent. (An arena
    // past 2^63 bytes takes requests of absurd lengths: the input's fault, reported so.)
    if (bytes > kMaxBytes - tail_start_) throw InputError("dynamic: the arena's size overflows 64 bits");
    // Counted when the arena had to grow although enough was free: a placement that ends
    // within the high-water mark takes room the arena already holds.
    p.fragmented = tail_start_ + bytes > high_water_ && free_bytes() >= bytes;
    p.offset = tail_start_;
    tail_start_ += bytes;
    high_water_ = std::max(high_water_, tail_start_);
  } else {
    p.fragmented = free_bytes() >= bytes;
    return p;
  }
  allocated_ += bytes;
  return p;
}

void FirstFitArena::free(std::int64_t offset, std::int64_t bytes) {
  kvsim::check(bytes > 0 && offset >= 0 && bytes <= allocated_, "arena: freeing an extent it never placed");
  allocated_ -= bytes;
  Node lower, upper;
  split(root_, offset, lower, upper);
  const Node before = rightmost(lower);
  const Node after = leftmost(upper);
  std::int64_t start = offset;
  std::int64_t end = offset + bytes;
  root_ = merge(lower, upper);
  if (before != kNil) {
    const Extent& e = nodes_[static_cast<std::size_t>(before)];
    kvsim::check(e.offset + e.size <= offset, "arena: freed extent overlaps a free one");
    if (e.offset + e.size == offset) {
      start = e.offset;
      erase(e.offset);
    }
  }
  if (after != kNil) {
    const Extent& e = nodes_[static_cast<std::size_t>(after)];
    kvsim::check(end <= e.offset, "arena: freed extent overlaps a free one");
    if (e.offset == end) {
      end = e.offset + e.size;
      erase(e.offset);
    }
  }
  if (!bounded() && end == tail_start_) {
    tail_start_ = start;  // the space returns to the arena's open end
  } else {
    insert(start, end - start);
  }
}

std::int64_t FirstFitArena::largest_free_extent() const {
  std::int64_t largest = max_of(root_);
  if (!bounded()) largest = std::max(largest, high_water_ - tail_start_);
  return largest;
}

void FirstFitArena::check() const {
  std::int64_t free_total = 0;
  std::int64_t previous_end = -1;
  std::int64_t count = 0;
  // In-order walk with an explicit stack: extents ordered, disjoint and never adjacent.
  std::vector<Node> stack;
  Node n = root_;
  while (n != kNil || !stack.empty()) {
    while (n != kNil) {
      stack.push_back(n);
      n = nodes_[static_cast<std::size_t>(n)].left;
    }
    n = stack.back();
    stack.pop_back();
    const Extent& e = nodes_[static_cast<std::size_t>(n)];
    kvsim::check(e.size > 0, "arena: empty free extent");
    kvsim::check(e.offset > previous_end, "arena: free extents overlap or are not coalesced");
    kvsim::check(e.max_size == std::max({e.size, max_of(e.left), max_of(e.right)}), "arena: stale subtree maximum");
    previous_end = e.offset + e.size;
    free_total += e.size;
    ++count;
    n = e.right;
  }
  kvsim::check(count == live_nodes_, "arena: free extent count drifted");
  if (bounded()) {
    kvsim::check(previous_end <= capacity_, "arena: free extent beyond capacity");
  } else {
    kvsim::check(previous_end < tail_start_, "arena: free extent touches or passes the open end");
    free_total += high_water_ - tail_start_;
  }
  kvsim::check(free_total + allocated_ == reserved_bytes(), "arena: free and allocated bytes do not add up");
}

}  // namespace kvsim::detail
