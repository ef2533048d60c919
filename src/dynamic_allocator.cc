#include "dynamic_allocator.h"

#include <algorithm>
#include <limits>
#include <string>

#include "footprint.h"
#include "invariant_checks.h"
#include "kvsim/error.h"
#include "kvsim/units.h"

namespace kvsim::detail {
namespace {
constexpr std::int64_t kMaxTokens = std::numeric_limits<std::int64_t>::max();
}  // namespace

DynamicAllocator::DynamicAllocator(const KvLayout& layout, const DynamicOptions& options)
    : groups_(layout.groups), max_model_len_(layout.max_model_len), options_(options), arena_(options.capacity_bytes) {}

std::string DynamicAllocator::name() const {
  std::string name = "dynamic";
  switch (options_.growth) {
    case Growth::exact: name += ":growth=exact"; break;
    case Growth::doubling: name += ":growth=double"; break;
    case Growth::chunk: name += ":growth=chunk,chunk=" + std::to_string(options_.chunk_tokens); break;
  }
  // An arena of its own bounds the run as a budget does: two arenas are two allocators.
  if (options_.arena_option > 0) name += ",arena=" + std::to_string(options_.arena_option);
  return name;
}

std::int64_t DynamicAllocator::needed(std::size_t g, std::int64_t tokens) const {
  const std::int64_t w = groups_[g].window_tokens;
  return w > 0 ? std::min(tokens, w) : tokens;
}

std::int64_t DynamicAllocator::grown_capacity(std::size_t g, std::int64_t capacity, std::int64_t need) const {
  std::int64_t grown = need;
  switch (options_.growth) {
    case Growth::exact: break;
    // Near 2^63 (absurd lengths) the capacity saturates; its bytes then fail a checked product.
    case Growth::doubling: grown = std::max(need, capacity > kMaxTokens / 2 ? kMaxTokens : 2 * capacity); break;
    case Growth::chunk: {
      const std::int64_t chunks = ceil_div(need, options_.chunk_tokens);
      grown = chunks > kMaxTokens / options_.chunk_tokens ? kMaxTokens : chunks * options_.chunk_tokens;
      break;
    }
  }
  const std::int64_t w = groups_[g].window_tokens;
  return w > 0 ? std::min(grown, w) : grown;
}

Outcome DynamicAllocator::admit(RequestSlot slot, const AdmitInfo& info) {
  if (slot >= requests_.size()) requests_.resize(slot + 1);
  Request& r = requests_[slot];
  check(!r.live, "dynamic: admitting a live request slot");
  r.live = true;
  r.prompt_tokens = info.prompt_tokens;
  r.limit_tokens = limit_tokens(info, max_model_len_);
  r.n = info.n;
  r.tokens = 0;
  r.buffers.assign(groups_.size() * static_cast<std::size_t>(info.n), Buffer{});
  r.transient.assign(groups_.size(), 0);
  return Outcome::ok;
}

Outcome DynamicAllocator::grow(RequestSlot slot, std::int64_t tokens, std::int64_t step_tokens) {
  Request& r = requests_[slot];
  check(r.live && tokens >= r.tokens && step_tokens >= 1, "dynamic: grow outside its contract");
  // Every buffer that must grow gets its new place while the old ones still hold their
  // contents; only when all fit are they copied and the old ones freed. When their sum
  // exceeds the free room, the step cannot fit however the arena is laid out (no_room);
  // when it does not, a placement can fail only for want of a contiguous extent
  // (no_extent). Either way nothing changes: a failure undoes the placements made so far.
  moves_.clear();
  std::int64_t need_bytes = 0;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const std::int64_t need = needed(g, tokens);
    for (std::int64_t s = 0; s < r.n; ++s) {
      const std::size_t index = g * static_cast<std::size_t>(r.n) + static_cast<std::size_t>(s);
      const Buffer& b = r.buffers[index];
      if (need <= b.capacity) continue;
      const std::int64_t capacity = grown_capacity(g, b.capacity, need);
      moves_.push_back({index, -1, capacity});
      need_bytes = checked_add(need_bytes, checked_mul(capacity, groups_[g].bytes_per_position, "dynamic: a buffer's bytes"),
                               "dynamic: the bytes a step places");
    }
  }
  if (options_.capacity_bytes != 0 && need_bytes > arena_.free_bytes()) return Outcome::no_room;
  for (std::size_t i = 0; i < moves_.size(); ++i) {
    Move& m = moves_[i];
    const auto placed = arena_.allocate(m.capacity * groups_[m.index / static_cast<std::size_t>(r.n)].bytes_per_position);
    if (placed.fragmented) ++failed_placements_;
    if (placed.offset < 0) {
      for (std::size_t j = 0; j < i; ++j) {
        const Move& undo = moves_[j];
        arena_.free(undo.offset, undo.capacity * groups_[undo.index / static_cast<std::size_t>(r.n)].bytes_per_position);
      }
      return placed.fragmented ? Outcome::no_extent : Outcome::no_room;
    }
    m.offset = placed.offset;
  }
  std::fill(r.transient.begin(), r.transient.end(), 0);
  for (const Move& m : moves_) {
    const std::size_t g = m.index / static_cast<std::size_t>(r.n);
    Buffer& b = r.buffers[m.index];
    if (b.offset >= 0) {
      const std::int64_t old_bytes = b.capacity * groups_[g].bytes_per_position;
      copied_bytes_ += old_bytes;
      r.transient[g] += b.capacity;
      arena_.free(b.offset, old_bytes);
    }
    b = Buffer{m.offset, m.capacity};
  }
  r.tokens = tokens;
  check_after_operation(*this);
  return Outcome::ok;
}

void DynamicAllocator::release(RequestSlot slot) {
  Request& r = requests_[slot];
  check(r.live, "dynamic: releasing a request that is not live");
  for (std::size_t i = 0; i < r.buffers.size(); ++i) {
    const Buffer& b = r.buffers[i];
    if (b.offset >= 0) arena_.free(b.offset, b.capacity * groups_[i / static_cast<std::size_t>(r.n)].bytes_per_position);
  }
  r.live = false;
  check_after_operation(*this);
}

Footprint DynamicAllocator::footprint(RequestSlot slot, std::size_t group, std::int64_t tokens) const {
  const Request& r = requests_[slot];
  // Samples grow in lockstep, so all of a group's buffers have the same capacity.
  const std::int64_t capacity = r.buffers[group * static_cast<std::size_t>(r.n)].capacity;
  auto at = [&](std::int64_t len) {
    const std::int64_t lo = std::max<std::int64_t>(0, len - capacity);  // a full ring moves
    return classify({{lo, lo + capacity, r.n}}, {len, r.prompt_tokens, groups_[group].window_tokens, r.limit_tokens},
                    Unfilled::reservation);
  };
  Footprint f = with_slopes(at(tokens), at(tokens + 1));
  if (tokens == r.tokens) f.transient = r.transient[group];  // already summed over the samples
  return f;
}

std::int64_t DynamicAllocator::next_event_tokens(RequestSlot slot) const {
  const Request& r = requests_[slot];
  std::int64_t next = kNoEvent;
  auto consider = [&](std::int64_t at) {
    if (at > r.tokens) next = std::min(next, at);
  };
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const std::int64_t capacity = r.buffers[g * static_cast<std::size_t>(r.n)].capacity;
    const std::int64_t w = groups_[g].window_tokens;
    if (w == 0 || capacity < w) consider(capacity + 1);  // the buffer is full
    if (w > 0) {
      consider(w);
      consider(r.prompt_tokens + w);
    }
  }
  return next;
}

std::int64_t DynamicAllocator::peak_bytes(const AdmitInfo& info, std::int64_t tokens) const {
  // Follow each group's capacities from the prefill's first buffer to the last growth: the
  // peak is the last buffer while the one before it is still being copied.
  const std::int64_t first_tokens = std::min(tokens, info.prefilled_positions());
  std::int64_t bytes = 0;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const std::int64_t need = needed(g, tokens);
    std::int64_t capacity = grown_capacity(g, 0, needed(g, first_tokens));
    std::int64_t previous = 0;
    if (capacity < need) {
      switch (options_.growth) {
        case Growth::exact:
          previous = need - 1;
          capacity = need;
          break;
        case Growth::chunk:
          capacity = grown_capacity(g, capacity, need);
          previous = std::max(capacity - options_.chunk_tokens, needed(g, first_tokens));
          break;
        case Growth::doubling:
          while (capacity < need) {
            previous = capacity;
            capacity = grown_capacity(g, capacity, capacity + 1);
          }
          break;
      }
    }
    bytes += (capacity + previous) * info.n * groups_[g].bytes_per_position;
  }
  return bytes;
}

PoolState DynamicAllocator::pool() const {
  PoolState p;
  p.capacity_bytes = options_.capacity_bytes;
  p.reserved_bytes = arena_.reserved_bytes();
  p.free_bytes = arena_.free_bytes();
  p.largest_free_extent_bytes = arena_.largest_free_extent();
  p.failed_placements = failed_placements_;
  p.copied_bytes = copied_bytes_;
  return p;
}

std::int64_t DynamicAllocator::capacity_tokens(RequestSlot slot, std::size_t group, std::int64_t sample) const {
  const Request& r = requests_[slot];
  return r.buffers[group * static_cast<std::size_t>(r.n) + static_cast<std::size_t>(sample)].capacity;
}

void DynamicAllocator::check_invariants() const {
  arena_.check();
  std::int64_t bytes = 0;
  for (const Request& r : requests_) {
    if (!r.live) continue;
    for (std::size_t i = 0; i < r.buffers.size(); ++i) {
      const Buffer& b = r.buffers[i];
      const std::size_t g = i / static_cast<std::size_t>(r.n);
      check(b.capacity >= needed(g, r.tokens), "dynamic: a buffer is smaller than its sequence");
      check((b.offset >= 0) == (b.capacity > 0), "dynamic: a buffer without a place, or a place without a buffer");
      bytes += b.capacity * groups_[g].bytes_per_position;
    }
  }
  check(bytes == arena_.allocated_bytes(), "dynamic: buffers and arena disagree on allocated bytes");
}

}  // namespace kvsim::detail
