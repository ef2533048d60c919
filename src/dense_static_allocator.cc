#include "dense_static_allocator.h"

#include <algorithm>
#include <bit>
#include <string>
#include <type_traits>

#include "footprint.h"
#include "invariant_checks.h"
#include "kvsim/error.h"
#include "kvsim/units.h"

namespace kvsim::detail {
namespace {

const char* reserve_name(Reserve r) {
  switch (r) {
    case Reserve::max_model_len: return "max-model-len";
    case Reserve::max_tokens: return "max-tokens";
    case Reserve::pow2: return "pow2";
    case Reserve::pow2_output: return "pow2-output";
    case Reserve::oracle: return "oracle";
  }
  return "?";
}

const char* placement_name(Placement p) {
  switch (p) {
    case Placement::none: return "none";
    case Placement::first_fit: return "first-fit";
    case Placement::buddy: return "buddy";
  }
  return "?";
}

std::int64_t pow2_ceil(std::int64_t tokens) {
  if (tokens > (std::int64_t{1} << 62)) throw InputError("dense-static: a request's length rounded up to a power of two overflows 64 bits");
  return static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(std::max<std::int64_t>(tokens, 1))));
}

}  // namespace

DenseStaticAllocator::DenseStaticAllocator(const KvLayout& layout, const DenseStaticOptions& options)
    : groups_(layout.groups), max_model_len_(layout.max_model_len), options_(options) {
  // Without a budget every reservation fits: there is nothing to place it in.
  if (options_.capacity_bytes == 0) return;
  if (options_.placement == Placement::first_fit) arena_.emplace<FirstFitArena>(options_.capacity_bytes);
  if (options_.placement == Placement::buddy) {
    // One position in every group: a row of P positions (no window) is P units.
    std::int64_t unit = 0;
    for (const LayerGroup& g : groups_) unit = checked_add(unit, g.bytes_per_position, "dense-static: a position's bytes");
    arena_.emplace<BuddyArena>(options_.capacity_bytes, std::max<std::int64_t>(unit, 1));
  }
}

std::string DenseStaticAllocator::name() const {
  std::string out = std::string("dense-static:reserve=") + reserve_name(options_.reserve);
  // placement=none is what the bare name has always meant: names stay as they were.
  if (options_.placement != Placement::none) out += std::string(",placement=") + placement_name(options_.placement);
  return out;
}

std::int64_t DenseStaticAllocator::reservation_tokens(const AdmitInfo& info) const {
  // Lengths may come from a trace near 2^63 (the engine refuses what exceeds the model's
  // maximum length, but a model may not give one): sums are checked, not wrapped.
  const std::int64_t final_tokens = checked_add(info.prompt_tokens, info.output_tokens, "dense-static: a request's length");
  switch (options_.reserve) {
    case Reserve::max_model_len: return max_model_len_;
    case Reserve::max_tokens:
      // A request cannot plan past the model's length: an engine caps (or refuses) it there.
      if (max_model_len_ > 0 && info.planned_output_tokens >= max_model_len_ - info.prompt_tokens) return max_model_len_;
      return checked_add(info.prompt_tokens, info.planned_output_tokens, "dense-static: a request's planned length");
    // Rounded rows are capped at the model's length: no row passes it (the engine refuses
    // requests whose final length exceeds it, so the cap never cuts a request short).
    case Reserve::pow2: return capped_row(final_tokens, pow2_ceil(final_tokens));
    case Reserve::pow2_output:
      // No output, nothing to round.
      return capped_row(final_tokens,
                        info.output_tokens == 0 ? info.prompt_tokens
                                                : checked_add(info.prompt_tokens, pow2_ceil(info.output_tokens),
                                                              "dense-static: a request's reserved length"));
    case Reserve::oracle: return final_tokens;
  }
  return final_tokens;
}

std::int64_t DenseStaticAllocator::capped_row(std::int64_t final_tokens, std::int64_t row) const {
  return max_model_len_ > 0 ? std::max(final_tokens, std::min(row, max_model_len_)) : row;
}

std::int64_t DenseStaticAllocator::row_in_group(const Request& r, std::size_t g) const {
  const std::int64_t w = groups_[g].window_tokens;
  return w > 0 ? std::min(w, r.row_tokens) : r.row_tokens;
}

Outcome DenseStaticAllocator::admit(RequestSlot slot, const AdmitInfo& info) {
  if (slot >= requests_.size()) requests_.resize(slot + 1);
  Request& r = requests_[slot];
  check(!r.live, "dense-static: admitting a live request slot");
  const Request next{true, info.prompt_tokens, info.n, 0, reservation_tokens(info), peak_bytes(info, 0),
                     limit_tokens(info, max_model_len_)};
  if (options_.capacity_bytes != 0 && next.bytes > options_.capacity_bytes - allocated_bytes_) {
    return Outcome::no_room;
  }
  std::int64_t offset = -1;
  if (next.bytes > 0 && !std::holds_alternative<std::monostate>(arena_)) {
    // The free bytes suffice (checked above): a failure here is for want of an extent.
    const FirstFitArena::Placement placed =
        std::visit([&](auto& a) -> FirstFitArena::Placement {
          if constexpr (std::is_same_v<std::decay_t<decltype(a)>, std::monostate>) return {};
          else return a.allocate(next.bytes);
        }, arena_);
    if (placed.offset < 0) {
      ++failed_placements_;
      return Outcome::no_extent;
    }
    offset = placed.offset;
  }
  r = next;
  r.offset = offset;
  allocated_bytes_ = checked_add(allocated_bytes_, r.bytes, "dense-static: the reserved bytes of the requests in flight");
  high_water_bytes_ = std::max(high_water_bytes_, allocated_bytes_);
  check_after_operation(*this);
  return Outcome::ok;
}

Outcome DenseStaticAllocator::grow(RequestSlot slot, std::int64_t tokens, std::int64_t step_tokens) {
  Request& r = requests_[slot];
  check(r.live && tokens >= r.tokens && step_tokens >= 1, "dense-static: grow outside its contract");
  // The engine refuses requests longer than the model's maximum length, and every policy
  // reserves at least the final length, so a row never overflows.
  check(tokens <= r.row_tokens, "dense-static: a sequence outgrew its reservation");
  r.tokens = tokens;
  check_after_operation(*this);
  return Outcome::ok;
}

void DenseStaticAllocator::release(RequestSlot slot) {
  Request& r = requests_[slot];
  check(r.live, "dense-static: releasing a request that is not live");
  allocated_bytes_ -= r.bytes;
  if (r.offset >= 0) {
    std::visit([&](auto& a) {
      if constexpr (!std::is_same_v<std::decay_t<decltype(a)>, std::monostate>) a.free(r.offset, r.bytes);
    }, arena_);
  }
  r.offset = -1;
  r.live = false;
  check_after_operation(*this);
}

Footprint DenseStaticAllocator::footprint(RequestSlot slot, std::size_t group, std::int64_t tokens) const {
  const Request& r = requests_[slot];
  const std::int64_t row = row_in_group(r, group);
  auto at = [&](std::int64_t len) {
    // A full ring holds the latest `row` positions; until then, positions [0, row).
    const std::int64_t lo = std::max<std::int64_t>(0, len - row);
    return classify({{lo, lo + row, r.n}}, {len, r.prompt_tokens, groups_[group].window_tokens, r.limit_tokens},
                    Unfilled::reservation);
  };
  return with_slopes(at(tokens), at(tokens + 1));
}

std::int64_t DenseStaticAllocator::next_event_tokens(RequestSlot slot) const {
  const Request& r = requests_[slot];
  std::int64_t next = kNoEvent;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const std::int64_t w = groups_[g].window_tokens;
    if (w == 0) continue;
    // Slopes change when the ring fills and when the prompt has left the window.
    for (std::int64_t at : {row_in_group(r, g), r.prompt_tokens + w}) {
      if (at > r.tokens) next = std::min(next, at);
    }
  }
  return next;
}

std::int64_t DenseStaticAllocator::peak_bytes(const AdmitInfo& info, std::int64_t) const {
  // Everything is reserved at admission, whatever the length.
  Request r;
  r.n = info.n;
  r.row_tokens = reservation_tokens(info);
  std::int64_t bytes = 0;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const std::int64_t row_bytes =
        checked_mul(row_in_group(r, g), groups_[g].bytes_per_position, "dense-static: a reserved row's bytes");
    bytes = checked_add(bytes, checked_mul(row_bytes, r.n, "dense-static: a request's reserved bytes"),
                        "dense-static: a request's reserved bytes");
  }
  return bytes;
}

PoolState DenseStaticAllocator::pool() const {
  PoolState p;
  p.capacity_bytes = options_.capacity_bytes;
  p.reserved_bytes = options_.capacity_bytes != 0 ? options_.capacity_bytes : high_water_bytes_;
  p.free_bytes = p.reserved_bytes - allocated_bytes_;
  p.largest_free_extent_bytes = std::visit([&](const auto& a) -> std::int64_t {
    if constexpr (std::is_same_v<std::decay_t<decltype(a)>, std::monostate>) return p.free_bytes;
    else return a.largest_free_extent();
  }, arena_);
  p.failed_placements = failed_placements_;
  p.places_reservations = !std::holds_alternative<std::monostate>(arena_);
  return p;
}

void DenseStaticAllocator::check_invariants() const {
  std::int64_t bytes = 0;
  for (const Request& r : requests_) {
    if (!r.live) continue;
    check(r.tokens <= r.row_tokens, "dense-static: a sequence outgrew its reservation");
    bytes += r.bytes;
  }
  check(bytes == allocated_bytes_, "dense-static: allocated bytes do not match the live reservations");
  std::visit([&](const auto& a) {
    if constexpr (!std::is_same_v<std::decay_t<decltype(a)>, std::monostate>) {
      a.check();
      check(a.allocated_bytes() == allocated_bytes_, "dense-static: the arena and the reservations disagree on bytes");
    }
  }, arena_);
  check(options_.capacity_bytes == 0 || allocated_bytes_ <= options_.capacity_bytes, "dense-static: over capacity");
}

}  // namespace kvsim::detail
