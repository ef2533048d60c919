// Every allocator against a small reference model, over long seeded random sequences of
// admit / grow / release.
//
// The reference computes, from a request's prompt, n, tokens, window, block size and policy
// (plus, where the rule depends on history, the one number that carries it: the sliding
// window's freed blocks, a growing buffer's capacity), what the allocator must hold per
// layer group:
//   paged, radix    ceil(t / B) blocks per sequence; once the samples fork (n > 1 and t >
//                   P), the prompt's floor(P / B) full blocks once and every later block
//                   (the partial prompt block's copies included) n times;
//   sliding-window  the same, less the blocks wholly before position c - W + 1 on a window
//                   group, where c = t - step_tokens is what the step started with (vLLM's
//                   rule, src/paged_allocator.h); freed blocks never come back;
//   dense-static    n rows of the reservation (max-model-len, min(P + max_tokens, L), the
//                   next power of two of P + m, or P + m), min(W, row) on a window group;
//   dynamic         n buffers whose capacity grows by the policy when t (min(t, W) on a
//                   window group) outgrows it: to t, to max(t, 2 x capacity), or to whole
//                   chunks, capped at W; a copy holds the old n buffers for the operation.
// After every operation it checks, for every live request and group, the allocated
// positions and the unfilled ones (tail or reservation) against the reference, that the
// footprint's parts add up to the effective tokens of src/effective.h, that figures carried
// by the slopes hold until next_event_tokens() and the holding would have been the same had
// the allocator been called at every step, that the pool's allocated bytes are the sum of
// the footprints, and the allocator's own check_invariants(). A bounded run checks that an
// operation refused for lack of room changes nothing and is refused exactly when the
// reference says it cannot fit.
#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "effective.h"
#include "kvsim/allocator.h"
#include "kvsim/units.h"
#include "test_support.h"

using namespace kvsim;

namespace {

// ---------------------------------------------------------------------------------------
// The configurations and the layouts they run on

enum class Kind { paged, sliding, dense, dynamic };
enum class Reserve { max_model_len, max_tokens, pow2, oracle };
enum class Growth { exact, doubling, chunk };

struct Config {
  std::string spec;  // as make_allocator() takes it
  Kind kind;
  std::int64_t block = 0;
  Reserve reserve = Reserve::max_model_len;
  Growth growth = Growth::exact;
  std::int64_t chunk = 0;
  std::int64_t capacity_bytes = 0;  // the bounded run's limit for this allocator
};

const Config kConfigs[] = {
    {"paged:block=16", Kind::paged, 16, {}, {}, 0, 9'000},
    {"paged:block=7", Kind::paged, 7, {}, {}, 0, 9'000},
    {"paged:block=1", Kind::paged, 1, {}, {}, 0, 9'000},
    // The radix cache holds what paged does per request (pages of `page`, the prompt's
    // full pages shared by the samples, sliding-window layers stored whole); without prefix
    // hashes it never shares, and what requests leave behind is evictable, free room.
    {"radix:page=1", Kind::paged, 1, {}, {}, 0, 9'000},
    {"radix:page=16", Kind::paged, 16, {}, {}, 0, 9'000},
    {"sliding-window:block=16", Kind::sliding, 16, {}, {}, 0, 9'000},
    {"sliding-window:block=5", Kind::sliding, 5, {}, {}, 0, 9'000},
    {"sliding-window:block=1", Kind::sliding, 1, {}, {}, 0, 9'000},
    // With prefix caching on but no prefix hashes, the sliding-window allocator frees
    // through the cache's queue, block by block, and must hold exactly what it holds
    // without caching; under a budget its groups of different windows draw on one queue.
    {"sliding-window:block=16,prefix-caching=on", Kind::sliding, 16, {}, {}, 0, 9'000},
    {"dense-static:reserve=max-model-len", Kind::dense, 0, Reserve::max_model_len, {}, 0, 10'000},
    {"dense-static:reserve=max-tokens", Kind::dense, 0, Reserve::max_tokens, {}, 0, 4'000},
    {"dense-static:reserve=pow2", Kind::dense, 0, Reserve::pow2, {}, 0, 4'000},
    {"dense-static:reserve=oracle", Kind::dense, 0, Reserve::oracle, {}, 0, 3'000},
    {"dynamic:growth=exact", Kind::dynamic, 0, {}, Growth::exact, 0, 9'000},
    {"dynamic:growth=double", Kind::dynamic, 0, {}, Growth::doubling, 0, 9'000},
    {"dynamic:growth=chunk,chunk=48", Kind::dynamic, 0, {}, Growth::chunk, 48, 9'000},
};

constexpr std::int64_t kMaxModelLen = 600;

// A full-attention group and sliding windows that are and are not multiples of the blocks.
KvLayout hybrid_layout(int which) {
  KvLayout l;
  l.max_model_len = kMaxModelLen;
  if (which == 0) {
    l.groups = {test::group("full", 3), test::group("sliding 40", 5, 40)};
  } else {
    l.groups = {test::group("full", 2), test::group("sliding 16", 7, 16), test::group("sliding 100", 1, 100)};
  }
  return l;
}

// ---------------------------------------------------------------------------------------
// The reference model

struct RefRequest {
  std::int64_t prompt = 0;
  std::int64_t output = 0;
  std::int64_t planned = 0;
  std::int64_t n = 1;
  std::int64_t tokens = 0;
  std::vector<std::int64_t> dropped;   // sliding-window: blocks freed per group
  std::vector<std::int64_t> capacity;  // dynamic: per group, every sample's buffer
  std::vector<std::int64_t> copied;    // dynamic: per group, positions copied by the last grow
  std::int64_t final_tokens() const { return prompt + output; }
};

class Reference {
 public:
  Reference(const Config& c, const KvLayout& layout) : c_(c), layout_(layout) {}

  RefRequest admit(const AdmitInfo& info) const {
    RefRequest r;
    r.prompt = info.prompt_tokens;
    r.output = info.output_tokens;
    r.planned = info.planned_output_tokens;
    r.n = info.n;
    r.dropped.assign(layout_.groups.size(), 0);
    r.capacity.assign(layout_.groups.size(), 0);
    r.copied.assign(layout_.groups.size(), 0);
    return r;
  }

  // The request after a step that ends with `tokens` tokens, `step_tokens` of them new.
  RefRequest grow(RefRequest r, std::int64_t tokens, std::int64_t step_tokens) const {
    const std::int64_t started_with = tokens - step_tokens;
    for (std::size_t g = 0; g < layout_.groups.size(); ++g) {
      const std::int64_t w = window(g);
      if (c_.kind == Kind::sliding && w > 0) {
        r.dropped[g] = std::max(r.dropped[g], std::max<std::int64_t>(0, started_with - w + 1) / c_.block);
      }
      r.copied[g] = 0;
      if (c_.kind == Kind::dynamic && needed(g, tokens) > r.capacity[g]) {
        r.copied[g] = r.capacity[g];
        r.capacity[g] = grown(g, r.capacity[g], needed(g, tokens));
      }
    }
    r.tokens = tokens;
    return r;
  }

  // The request had the allocator been called at every decode step up to `tokens`.
  RefRequest stepped(RefRequest r, std::int64_t tokens) const {
    if (tokens == r.tokens) return r;
    for (std::size_t g = 0; g < layout_.groups.size(); ++g) {
      const std::int64_t w = window(g);
      if (c_.kind == Kind::sliding && w > 0) {
        r.dropped[g] = std::max(r.dropped[g], std::max<std::int64_t>(0, tokens - 1 - w + 1) / c_.block);
      }
      if (c_.kind == Kind::dynamic) {
        // One token a step: a buffer grows whenever it is one short.
        while (needed(g, tokens) > r.capacity[g]) r.capacity[g] = grown(g, r.capacity[g], r.capacity[g] + 1);
      }
    }
    r.tokens = tokens;
    return r;
  }

  // Positions the request holds in group g, all samples.
  std::int64_t allocated(const RefRequest& r, std::size_t g) const {
    switch (c_.kind) {
      case Kind::paged:
      case Kind::sliding: {
        const std::int64_t b = c_.block;
        const std::int64_t blocks = ceil_div(r.tokens, b);
        const std::int64_t d = r.dropped[g];
        if (!forked(r)) return b * (blocks - d);
        const std::int64_t s = r.prompt / b;  // the prompt's full blocks, shared
        return b * (std::max<std::int64_t>(0, s - d) + r.n * (blocks - std::max(s, d)));
      }
      case Kind::dense: return r.n * row_in_group(r, g);
      case Kind::dynamic: return r.n * r.capacity[g];
    }
    return -1;
  }

  // Positions at or past the sequence's end, all samples: the paged tail (the last block is
  // always held) or the reservation ahead.
  std::int64_t unfilled(const RefRequest& r, std::size_t g) const {
    switch (c_.kind) {
      case Kind::paged:
      case Kind::sliding:
        return (forked(r) ? r.n : 1) * (ceil_div(r.tokens, c_.block) * c_.block - r.tokens);
      case Kind::dense: return r.n * std::max<std::int64_t>(0, row_in_group(r, g) - r.tokens);
      case Kind::dynamic: return r.n * std::max<std::int64_t>(0, r.capacity[g] - r.tokens);
    }
    return -1;
  }

  // Of those, the positions past prompt + planned output (or max_model_len, where the engine
  // stops a sequence), which the request can never reach: padding (dense rows and dynamic
  // buffers; 0 for paged, whose unfilled room is tail).
  std::int64_t padding(const RefRequest& r, std::size_t g) const {
    const std::int64_t limit = layout_.max_model_len > 0 ? std::min(r.prompt + r.planned, layout_.max_model_len)
                                                         : r.prompt + r.planned;
    const std::int64_t reach = std::max(r.tokens, limit);
    switch (c_.kind) {
      case Kind::paged:
      case Kind::sliding: return 0;
      case Kind::dense: return r.n * std::max<std::int64_t>(0, row_in_group(r, g) - reach);
      case Kind::dynamic: return r.n * std::max<std::int64_t>(0, r.capacity[g] - reach);
    }
    return -1;
  }

  // Positions held only while the last grow copied buffers.
  std::int64_t transient(const RefRequest& r, std::size_t g) const {
    return c_.kind == Kind::dynamic ? r.n * r.copied[g] : 0;
  }

  std::int64_t bytes(const RefRequest& r) const {
    std::int64_t total = 0;
    for (std::size_t g = 0; g < layout_.groups.size(); ++g) total += allocated(r, g) * layout_.groups[g].bytes_per_position;
    return total;
  }

  // What a grow must find free: the paged pool frees what leaves the window first and
  // then takes (net); a dynamic buffer is placed while the old one still holds its
  // contents (the new buffers in full).
  std::int64_t grow_needs_bytes(const RefRequest& before, const RefRequest& after) const {
    if (c_.kind != Kind::dynamic) return bytes(after) - bytes(before);
    std::int64_t total = 0;
    for (std::size_t g = 0; g < layout_.groups.size(); ++g) {
      if (after.capacity[g] != before.capacity[g]) {
        total += after.n * after.capacity[g] * layout_.groups[g].bytes_per_position;
      }
    }
    return total;
  }

  std::int64_t window(std::size_t g) const { return layout_.groups[g].window_tokens; }

 private:
  bool forked(const RefRequest& r) const { return r.n > 1 && r.tokens > r.prompt; }

  std::int64_t row(const RefRequest& r) const {
    const std::int64_t final_tokens = r.final_tokens();
    switch (c_.reserve) {
      case Reserve::max_model_len: return layout_.max_model_len;
      case Reserve::max_tokens: return std::min(r.prompt + r.planned, layout_.max_model_len);
      case Reserve::pow2: {
        // The next power of two, but no row past the model's length (replay.md).
        const auto rounded = static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(std::max<std::int64_t>(final_tokens, 1))));
        return std::max(final_tokens, std::min(rounded, layout_.max_model_len));
      }
      case Reserve::oracle: return final_tokens;
    }
    return -1;
  }
  std::int64_t row_in_group(const RefRequest& r, std::size_t g) const {
    return window(g) > 0 ? std::min(window(g), row(r)) : row(r);
  }

  std::int64_t needed(std::size_t g, std::int64_t tokens) const {
    return window(g) > 0 ? std::min(tokens, window(g)) : tokens;
  }
  std::int64_t grown(std::size_t g, std::int64_t capacity, std::int64_t need) const {
    std::int64_t to = need;
    if (c_.growth == Growth::doubling) to = std::max(need, 2 * capacity);
    if (c_.growth == Growth::chunk) to = ceil_div(need, c_.chunk) * c_.chunk;
    return window(g) > 0 ? std::min(to, window(g)) : to;
  }

  const Config& c_;
  const KvLayout& layout_;
};

// ---------------------------------------------------------------------------------------
// The random driver

// SplitMix64: fixed seeds give the same sequence on every platform.
struct Rng {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  std::int64_t below(std::int64_t bound) { return static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(bound)); }
  std::int64_t between(std::int64_t lo, std::int64_t hi) { return lo + below(hi - lo + 1); }  // inclusive
  bool percent(int p) { return below(100) < p; }
};

struct Stats {
  std::int64_t ops = 0;
  std::int64_t admits = 0;
  std::int64_t grows = 0;
  std::int64_t releases = 0;  // completed or cancelled
  std::int64_t cancels = 0;   // released before the request's final length
  std::int64_t forks = 0;
  std::int64_t jumps = 0;     // grows that skipped the allocator's next event
  std::int64_t refused = 0;
};

class Driver {
 public:
  Driver(const Config& c, int layout_index, std::uint64_t seed, bool bounded)
      : c_(c),
        layout_(hybrid_layout(layout_index)),
        ref_(c, layout_),
        rng_{seed},
        bounded_(bounded),
        alloc_(make_allocator(parse_allocator_spec(c.spec, "test"), layout_,
                              AllocatorLimits{bounded ? c.capacity_bytes : 0})),
        live_(kMaxLive) {
    std::ostringstream s;
    s << c.spec << " on layout " << layout_index << ", seed " << seed << (bounded ? ", bounded" : "");
    name_ = s.str();
  }

  Stats run(std::int64_t ops) {
    while (stats_.ops < ops) step();
    for (RequestSlot slot = 0; slot < kMaxLive; ++slot) {
      if (live_[slot]) release(slot);
    }
    const PoolState p = alloc_->pool();
    expect(p.free_bytes == p.reserved_bytes, "the pool is not empty after every request was released");
    return stats_;
  }

 private:
  static constexpr RequestSlot kMaxLive = 10;
  std::uint64_t request_keys_ = 0;

  // Reports a disagreement with everything needed to replay it.
  template <typename Describe>
  void expect(bool ok, Describe&& describe) {
    if (ok) return;
    std::ostringstream s;
    s << name_ << ", operation " << stats_.ops << ": ";
    if constexpr (std::is_convertible_v<Describe, std::string>) {
      s << describe;
    } else {
      describe(s);
    }
    FAIL(s.str());
  }

  void step() {
    const std::int64_t live_count = std::count_if(live_.begin(), live_.end(), [](const auto& r) { return r.has_value(); });
    if (live_count == 0 || (live_count < kMaxLive && rng_.percent(12))) {
      admit();
      return;
    }
    RequestSlot slot = static_cast<RequestSlot>(rng_.below(kMaxLive));
    while (!live_[slot]) slot = (slot + 1) % kMaxLive;
    const RefRequest& r = *live_[slot];
    const bool done = r.tokens == r.final_tokens();
    if (done || rng_.percent(2)) {
      if (!done) ++stats_.cancels;  // a cancellation: before, during or after the prefill
      release(slot);
      return;
    }
    grow(slot);
  }

  void admit() {
    RequestSlot slot = static_cast<RequestSlot>(rng_.below(kMaxLive));
    while (live_[slot]) slot = (slot + 1) % kMaxLive;
    AdmitInfo info;
    // Prompts of every shape: empty, inside one block, long, and sometimes exactly whole blocks.
    switch (rng_.below(6)) {
      case 0: info.prompt_tokens = rng_.percent(30) ? 0 : rng_.between(1, 8); break;
      case 1: info.prompt_tokens = 16 * rng_.between(1, 12); break;
      case 2: info.prompt_tokens = rng_.between(200, 520); break;
      default: info.prompt_tokens = rng_.between(1, 150); break;
    }
    info.output_tokens = rng_.between(0, std::min<std::int64_t>(kMaxModelLen - info.prompt_tokens, rng_.percent(70) ? 60 : 400));
    info.planned_output_tokens = info.output_tokens + (rng_.percent(50) ? 0 : rng_.between(1, 200));
    info.n = rng_.percent(60) ? 1 : rng_.between(2, 4);
    // As the engine does (the request's ordinal): no two requests share a key, so under a
    // budget a prefix cache's own identities (own_block_hash) never let one request hit
    // another's blocks.
    info.request_key = ++request_keys_;
    const PoolState before = alloc_->pool();
    const Snapshot snapshot = bounded_ ? take_snapshot() : Snapshot{};
    RefRequest r = ref_.admit(info);
    ++stats_.ops;
    const Outcome o = alloc_->admit(slot, info);
    const std::int64_t need = ref_.bytes(r);
    if (bounded_) {
      const bool fits = need <= before.free_bytes;
      expect(fits == (o == Outcome::ok), [&](std::ostream& s) {
        s << "admit of " << need << " bytes with " << before.free_bytes << " free returned " << static_cast<int>(o);
      });
    } else {
      expect(o == Outcome::ok, "admit refused without a bound");
    }
    if (o != Outcome::ok) {
      ++stats_.refused;
      check_unchanged(snapshot, o, "a refused admit");
      return;
    }
    ++stats_.admits;
    live_[slot] = std::move(r);
    check_all(slot);
  }

  void grow(RequestSlot slot) {
    const RefRequest& r = *live_[slot];
    std::int64_t tokens = 0;
    std::int64_t step_tokens = 1;
    const std::int64_t next_event = alloc_->next_event_tokens(slot);
    if (r.tokens < r.prompt) {
      // A prefill chunk; the one that completes the prompt usually produces the first token.
      const std::int64_t chunk = rng_.percent(40) ? r.prompt - r.tokens : rng_.between(1, r.prompt - r.tokens);
      tokens = r.tokens + chunk;
      step_tokens = chunk;
      if (tokens == r.prompt && r.output > 0 && rng_.percent(80)) {
        ++tokens;
        ++step_tokens;
      }
    } else if (rng_.percent(90)) {
      // Decode: the next token, or (as the engine does) straight to the next event.
      tokens = rng_.percent(50) ? r.tokens + 1 : std::min(next_event, r.final_tokens());
    } else {
      // A jump, possibly past events the allocator asked to be called at, sometimes with
      // several tokens produced in one step.
      tokens = rng_.between(r.tokens + 1, r.final_tokens());
      if (rng_.percent(20)) step_tokens = rng_.between(1, tokens - r.tokens);
    }
    if (tokens > next_event) ++stats_.jumps;
    if (r.n > 1 && r.tokens <= r.prompt && tokens > r.prompt) ++stats_.forks;

    const RefRequest after = ref_.grow(r, tokens, step_tokens);
    const PoolState before = alloc_->pool();
    const Snapshot snapshot = bounded_ ? take_snapshot() : Snapshot{};
    ++stats_.ops;
    const Outcome o = alloc_->grow(slot, tokens, step_tokens);
    if (bounded_ && c_.kind != Kind::dynamic) {
      const bool fits = ref_.grow_needs_bytes(r, after) <= before.free_bytes;
      expect(fits == (o == Outcome::ok), [&](std::ostream& s) {
        s << "grow of slot " << slot << " from " << r.tokens << " to " << tokens << " needs "
          << ref_.grow_needs_bytes(r, after) << " bytes with " << before.free_bytes << " free, returned "
          << static_cast<int>(o);
      });
    } else if (bounded_) {
      // Contiguity decides too: enough room in total is necessary, not sufficient.
      const bool room = ref_.grow_needs_bytes(r, after) <= before.free_bytes;
      expect(o != Outcome::ok || room, "a dynamic grow succeeded without enough free room");
      expect(o != Outcome::no_extent || room, "no_extent, but there was not enough free room in total");
    } else {
      expect(o == Outcome::ok, "grow refused without a bound");
    }
    if (o != Outcome::ok) {
      ++stats_.refused;
      check_unchanged(snapshot, o, "a refused grow");
      return;
    }
    ++stats_.grows;
    live_[slot] = after;
    check_all(slot);
    for (std::size_t g = 0; g < layout_.groups.size(); ++g) {
      const Footprint f = alloc_->footprint(slot, g, tokens);
      expect(f.transient == ref_.transient(after, g), [&](std::ostream& s) {
        s << "slot " << slot << " group " << g << " grown to " << tokens << ": transient " << f.transient
          << ", expected " << ref_.transient(after, g) << " (n " << after.n << ")";
      });
    }
  }

  void release(RequestSlot slot) {
    ++stats_.ops;
    ++stats_.releases;
    alloc_->release(slot);
    live_[slot].reset();
    check_all(std::nullopt);
  }

  // What a refused operation must leave as it was.
  struct Snapshot {
    PoolState pool;
    std::vector<Footprint> footprints;  // every live request and group, at its length
    std::vector<std::int64_t> next_events;
  };
  Snapshot take_snapshot() const {
    Snapshot s;
    s.pool = alloc_->pool();
    for (RequestSlot slot = 0; slot < kMaxLive; ++slot) {
      if (!live_[slot]) continue;
      for (std::size_t g = 0; g < layout_.groups.size(); ++g) s.footprints.push_back(alloc_->footprint(slot, g, live_[slot]->tokens));
      s.next_events.push_back(alloc_->next_event_tokens(slot));
    }
    return s;
  }
  static bool same(const Footprint& a, const Footprint& b) {
    return a.allocated == b.allocated && a.tail == b.tail && a.reservation == b.reservation &&
           a.padding == b.padding && a.duplicate == b.duplicate && a.outside_window == b.outside_window &&
           a.tail_slope == b.tail_slope && a.reservation_slope == b.reservation_slope &&
           a.padding_slope == b.padding_slope && a.duplicate_slope == b.duplicate_slope &&
           a.outside_window_slope == b.outside_window_slope && a.transient == b.transient;
  }
  void check_unchanged(const Snapshot& before, Outcome o, const char* what) {
    const Snapshot after = take_snapshot();
    const PoolState& p = before.pool;
    const PoolState& q = after.pool;
    // A placement refused while enough room was free in total is counted as such.
    const std::int64_t counted = o == Outcome::no_extent ? 1 : 0;
    expect(p.reserved_bytes == q.reserved_bytes && p.capacity_bytes == q.capacity_bytes &&
               p.free_bytes == q.free_bytes && p.largest_free_extent_bytes == q.largest_free_extent_bytes &&
               p.copied_bytes == q.copied_bytes && q.failed_placements == p.failed_placements + counted,
           std::string(what) + " changed the pool");
    expect(before.footprints.size() == after.footprints.size(), std::string(what) + " changed the live requests");
    for (std::size_t i = 0; i < before.footprints.size(); ++i) {
      expect(same(before.footprints[i], after.footprints[i]), [&](std::ostream& s) {
        s << what << " changed footprint " << i << ": transient " << before.footprints[i].transient << " -> "
          << after.footprints[i].transient << ", allocated " << before.footprints[i].allocated << " -> "
          << after.footprints[i].allocated;
      });
    }
    expect(before.next_events == after.next_events, std::string(what) + " changed a next event");
    alloc_->check_invariants();
  }

  // Checks every live request against the reference, and `operated` (the request just
  // admitted or grown) also between now and its next event.
  void check_all(std::optional<RequestSlot> operated) {
    alloc_->check_invariants();
    std::int64_t footprint_bytes = 0;
    for (RequestSlot slot = 0; slot < kMaxLive; ++slot) {
      if (!live_[slot]) continue;
      const RefRequest& r = *live_[slot];
      for (std::size_t g = 0; g < layout_.groups.size(); ++g) {
        const Footprint f = check_footprint(slot, g, r, r.tokens);
        footprint_bytes += f.allocated * layout_.groups[g].bytes_per_position;
      }
      if (operated == slot) check_until_next_event(slot, r);
    }
    const PoolState p = alloc_->pool();
    expect(p.reserved_bytes - p.free_bytes == footprint_bytes, [&](std::ostream& s) {
      s << "the pool holds " << p.reserved_bytes - p.free_bytes << " bytes, the footprints " << footprint_bytes;
    });
    expect(p.free_bytes >= 0 && p.largest_free_extent_bytes <= p.free_bytes && p.largest_free_extent_bytes >= 0,
           "free bytes or the largest free extent out of range");
    if (c_.kind != Kind::dynamic) expect(p.largest_free_extent_bytes == p.free_bytes, "a block pool is fragmented");
    if (bounded_) {
      expect(p.reserved_bytes == bounded_reserved() && p.capacity_bytes == bounded_reserved(), [&](std::ostream& s) {
        s << "a bounded pool reserves " << p.reserved_bytes << " bytes (capacity " << p.capacity_bytes << "), not "
          << bounded_reserved();
      });
    }
  }

  // What a bounded pool reserves: the whole units of its budget, a unit being one block (or
  // radix page) of every group for paged and radix, whose groups take blocks in step. Both
  // layouts' sliding-window groups differ in window and in block bytes, so they draw on the
  // budget block by block and it stays as given; so do the byte-addressed kinds.
  std::int64_t bounded_reserved() const {
    if (c_.kind != Kind::paged) return c_.capacity_bytes;
    std::int64_t unit = 0;
    for (const LayerGroup& g : layout_.groups) unit += c_.block * g.bytes_per_position;
    return c_.capacity_bytes / unit * unit;
  }

  // The footprint at `tokens` against the reference for request `r` (held at that length).
  Footprint check_footprint(RequestSlot slot, std::size_t g, const RefRequest& r, std::int64_t tokens) {
    const Footprint f = alloc_->footprint(slot, g, tokens);
    const std::int64_t w = ref_.window(g);
    const std::int64_t effective = detail::effective_tokens(tokens, r.prompt, r.n, w);
    const std::int64_t want_allocated = ref_.allocated(r, g);
    const std::int64_t want_unfilled = ref_.unfilled(r, g);
    const std::int64_t want_padding = ref_.padding(r, g);
    const bool paged = c_.kind == Kind::paged || c_.kind == Kind::sliding;
    const std::int64_t unfilled = paged ? f.tail : f.reservation + f.padding;
    const std::int64_t other_unfilled = paged ? f.reservation + f.padding : f.tail;
    const bool adds_up =
        f.allocated == effective + f.tail + f.reservation + f.padding + f.duplicate + f.outside_window;
    const bool parts_ok =
        f.tail >= 0 && f.reservation >= 0 && f.padding >= 0 && f.duplicate >= 0 && f.outside_window >= 0;
    expect(f.allocated == want_allocated && unfilled == want_unfilled && f.padding == want_padding &&
               other_unfilled == 0 && adds_up && parts_ok,
           [&](std::ostream& s) {
             s << "slot " << slot << " (prompt " << r.prompt << ", output " << r.output << ", n " << r.n << ") group "
               << g << " (window " << w << ") at " << tokens << " tokens: allocated " << f.allocated << " (reference "
               << want_allocated << "), effective " << effective << ", tail " << f.tail << ", reservation "
               << f.reservation << ", padding " << f.padding << " (reference unfilled " << want_unfilled
               << ", padding " << want_padding << "), duplicate " << f.duplicate
               << ", outside window " << f.outside_window;
           });
    return f;
  }

  // Between two calls a decoding request grows one token per step and the engine carries
  // its figures by their slopes: they must hold until the next event, and the allocator
  // must hold what it would have held had it been called at every step.
  void check_until_next_event(RequestSlot slot, const RefRequest& r) {
    if (r.tokens < r.prompt) return;  // mid-prefill: lengths change only by explicit steps
    const std::int64_t next_event = alloc_->next_event_tokens(slot);
    expect(next_event > r.tokens, "the next event is not ahead of the request's length");
    const std::int64_t end = std::min(next_event, r.final_tokens() + 1);  // lengths [r.tokens, end)
    std::vector<std::int64_t> lengths;
    for (std::int64_t t = r.tokens; t < end && t < r.tokens + 3; ++t) lengths.push_back(t);
    for (std::int64_t t = std::max(r.tokens + 3, end - 2); t < end; ++t) lengths.push_back(t);
    if (end - r.tokens > 5) lengths.push_back(rng_.between(r.tokens + 3, end - 3));
    for (std::int64_t t : lengths) {
      const RefRequest at = ref_.stepped(r, t);
      for (std::size_t g = 0; g < layout_.groups.size(); ++g) {
        const Footprint f = check_footprint(slot, g, at, t);
        if (t + 1 >= end) continue;
        const Footprint next = alloc_->footprint(slot, g, t + 1);
        expect(next.tail - f.tail == f.tail_slope && next.reservation - f.reservation == f.reservation_slope &&
                   next.padding - f.padding == f.padding_slope &&
                   next.duplicate - f.duplicate == f.duplicate_slope &&
                   next.outside_window - f.outside_window == f.outside_window_slope,
               [&](std::ostream& s) { s << "slot " << slot << " group " << g << ": slopes at " << t << " do not carry to " << t + 1; });
      }
    }
  }

  const Config& c_;
  KvLayout layout_;
  Reference ref_;
  Rng rng_;
  bool bounded_;
  std::unique_ptr<Allocator> alloc_;
  std::vector<std::optional<RefRequest>> live_;  // by slot
  Stats stats_;
  std::string name_;
};

}  // namespace

// Operations per allocator configuration: 60,000 on each of two layouts, unbounded, plus
// 20,000 bounded: 140,000 in all.
constexpr std::int64_t kUnboundedOps = 60'000;
constexpr std::int64_t kBoundedOps = 20'000;

TEST_CASE("differential: every allocator holds what the reference model says, after every operation") {
  for (const Config& c : kConfigs) {
    Stats total;
    for (int layout = 0; layout < 2; ++layout) {
      const Stats s = Driver(c, layout, 1000 + static_cast<std::uint64_t>(layout), false).run(kUnboundedOps);
      total.ops += s.ops;
      total.forks += s.forks;
      total.jumps += s.jumps;
      total.cancels += s.cancels;
    }
    INFO(c.spec << ": " << total.ops << " operations, " << total.forks << " forks, " << total.jumps << " jumps past an event, "
                << total.cancels << " cancellations");
    // The driver's random operations reached what the comparison is about.
    CHECK(total.jumps > 0);
    CHECK(total.cancels > 0);
    CHECK(total.forks > 1000);
    CHECK(total.jumps > 1000);
    CHECK(total.cancels > 1000);
  }
}

TEST_CASE("differential: a bounded allocator refuses exactly what does not fit, and a refusal changes nothing") {
  for (const Config& c : kConfigs) {
    const Stats s = Driver(c, 0, 2000, true).run(kBoundedOps);
    INFO(c.spec << ": " << s.ops << " operations, " << s.refused << " refused");
    CHECK(s.refused > 500);
    CHECK(s.admits + s.grows > 5000);
  }
}
