#include "paged_allocator.h"

#include <algorithm>
#include <string>

#include "footprint.h"
#include "invariant_checks.h"
#include "kvsim/error.h"
#include "kvsim/units.h"

namespace kvsim::detail {

PagedAllocator::PagedAllocator(const KvLayout& layout, const PagedAllocatorOptions& options)
    : block_tokens_(options.block_tokens),
      free_outside_window_(options.free_outside_window),
      prefix_caching_(options.prefix_caching),
      decode_shortcut_(!options.free_outside_window && !options.prefix_caching),
      pool_(options.capacity_bytes),
      own_ids_(options.prefix_caching && options.capacity_bytes != 0) {
  for (const LayerGroup& g : layout.groups) {
    groups_.push_back({g.window_tokens, options.free_outside_window && g.window_tokens > 0});
    windows_free_ = windows_free_ || groups_.back().frees;
    pool_.add_group(checked_mul(block_tokens_, g.bytes_per_position, "bytes per block"));
    bytes_per_block_all_groups_ += pool_.block_bytes(pool_.group_count() - 1);
  }
  // With sliding-window, groups of different windows do not take blocks in step: under a
  // budget they draw on its bytes block by block, and with prefix caching on one free queue,
  // as vLLM's (block_pool.h, one_queue).
  const bool one_window = std::all_of(groups_.begin(), groups_.end(), [&](const Group& g) {
    return g.window_tokens == groups_.front().window_tokens;
  });
  const bool in_step = !free_outside_window_ || one_window;
  bool one_size = pool_.group_count() > 0;
  for (std::size_t g = 1; g < pool_.group_count(); ++g) one_size = one_size && pool_.block_bytes(g) == pool_.block_bytes(0);
  // The whole blocks the budget holds (of mixed sizes, no unit: the budget as given).
  pool_.round_capacity(in_step ? bytes_per_block_all_groups_ : one_size ? pool_.block_bytes(0) : 0);
  if (prefix_caching_) pool_.enable_prefix_caching(free_outside_window_ && !one_window);
}

std::string PagedAllocator::name() const {
  return std::string(free_outside_window_ ? "sliding-window" : "paged") + ":block=" + std::to_string(block_tokens_) +
         (prefix_caching_ ? ",prefix-caching=on" : "");
}

Outcome PagedAllocator::admit(RequestSlot slot, const AdmitInfo& info) {
  if (slot >= requests_.size()) {
    requests_.resize(slot + 1);
    tables_.resize(requests_.size() * groups_.size());
  }
  Request& r = requests_[slot];
  check(!r.live, "paged: admitting a live request slot");
  r = Request{true, false, info.prompt_tokens, info.n, 0, 0, info.resumed_tokens};
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    Tables& t = tables(slot, g);
    t.shared.clear();
    for (auto& s : t.samples) s.clear();
    t.dropped = 0;
  }
  if (prefix_caching_) admit_cached(slot, r, info);
  return Outcome::ok;
}

std::int64_t PagedAllocator::droppable_blocks(std::size_t g, std::int64_t tokens_before) const {
  if (!groups_[g].frees) return 0;
  // vLLM's SlidingWindowManager: get_num_skipped_tokens = num_computed - window + 1, and
  // remove_skipped_blocks frees the blocks wholly before that position.
  const std::int64_t keep_from = std::max<std::int64_t>(0, tokens_before - groups_[g].window_tokens + 1);
  return keep_from / block_tokens_;
}

std::int64_t PagedAllocator::range_bytes(const Request& r, std::size_t g, std::int64_t from,
                                         std::int64_t to) const {
  to = std::min(to, r.blocks);
  if (to <= from) return 0;
  std::int64_t blocks = to - from;
  if (r.forked) {
    const std::int64_t s = shared_blocks(r);
    const std::int64_t per_sample = overlap(from, to, s, to);
    blocks += per_sample * (r.n - 1);  // each sample's own copy of those logical blocks
  }
  return blocks * pool_.block_bytes(g);
}

void PagedAllocator::drop_range(const Request& r, Tables& t, std::size_t g, std::int64_t from, std::int64_t to) {
  to = std::min(to, r.blocks);
  if (to <= from) return;
  const std::int64_t s = r.forked ? shared_blocks(r) : r.blocks;
  const auto null_out = [](std::vector<BlockId>& table, std::int64_t a, std::int64_t b) {
    std::fill(table.begin() + a, table.begin() + b, kNullBlock);
  };
  if (from < s) {
    const std::int64_t end = std::min(to, s);
    pool_.drop_many(g, t.shared.data() + from, t.shared.data() + end, r.forked ? static_cast<std::uint32_t>(r.n) : 1);
    null_out(t.shared, from, end);
  }
  if (to > s) {
    const std::int64_t a = std::max(from, s) - s;
    const std::int64_t b = to - s;
    for (auto& sample : t.samples) {
      pool_.drop_many(g, sample.data() + a, sample.data() + b, 1);
      null_out(sample, a, b);
    }
  }
}

Outcome PagedAllocator::grow(RequestSlot slot, std::int64_t tokens, std::int64_t step_tokens) {
  Request& r = requests_[slot];
  check(r.live && tokens >= r.tokens && step_tokens >= 1, "paged: grow outside its contract");
  // The common case, a decode step with nothing to drop or fork, takes at most one block
  // per sequence and group without the general bookkeeping (not with a window to drop
  // behind, nor with prefix caching, whose bookkeeping is in grow_step).
  const bool plain_decode =
      step_tokens == 1 && decode_shortcut_ && (r.forked || r.n == 1 || tokens <= r.prompt_tokens);
  const Outcome outcome = plain_decode ? grow_decode(slot, r, tokens) : grow_step(slot, r, tokens, step_tokens);
  if (outcome == Outcome::ok) check_after_operation(*this);
  return outcome;
}

Outcome PagedAllocator::grow_decode(RequestSlot slot, Request& r, std::int64_t tokens) {
  const std::int64_t new_blocks = blocks_for_tokens(tokens);
  if (new_blocks > r.blocks) {
    const std::int64_t copies = r.forked ? r.n : 1;
    if (!pool_.fits((new_blocks - r.blocks) * copies * bytes_per_block_all_groups_)) return Outcome::no_room;
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      Tables& t = tables(slot, g);
      if (r.forked) {
        for (auto& sample : t.samples) pool_.take_many(g, new_blocks - r.blocks, sample);
      } else {
        pool_.take_many(g, new_blocks - r.blocks, t.shared);
      }
    }
    r.blocks = new_blocks;
  }
  r.tokens = tokens;
  return Outcome::ok;
}

Outcome PagedAllocator::grow_step(RequestSlot slot, Request& r, std::int64_t tokens, std::int64_t step_tokens) {
  const bool fork = !r.forked && r.n > 1 && tokens > r.prompt_tokens;
  const std::int64_t new_blocks = blocks_for_tokens(tokens);
  // First what the step needs and frees, so that a step that does not fit changes nothing.
  if (!pool_.fits(plan_step(slot, r, tokens - step_tokens, new_blocks, fork))) return Outcome::no_room;
  drop_behind_window(slot);
  if (fork) fork_samples(slot, r);
  append_blocks(slot, r, new_blocks);
  r.tokens = tokens;
  r.blocks = new_blocks;
  if (prefix_caching_) cache_full_blocks(slot, r, cacheable_tokens(r, false));
  return Outcome::ok;
}

std::int64_t PagedAllocator::plan_step(RequestSlot slot, const Request& r, std::int64_t tokens_before,
                                       std::int64_t new_blocks, bool fork) {
  const std::int64_t s = shared_blocks(r);
  const bool partial_prompt_block = r.prompt_tokens % block_tokens_ != 0;
  const bool forked_after = r.forked || fork;
  std::int64_t need_bytes = 0;
  std::int64_t freed_bytes = 0;
  drop_to_.resize(groups_.size());
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const Tables& t = tables(slot, g);
    const std::int64_t block_bytes = pool_.block_bytes(g);
    drop_to_[g] = std::max(t.dropped, droppable_blocks(g, tokens_before));
    freed_bytes += prefix_caching_ ? range_bytes_cached(slot, g, t.dropped, drop_to_[g])
                                   : range_bytes(r, g, t.dropped, drop_to_[g]);
    // The fork copies the block holding the prompt's partial tail, unless the window has
    // passed it by the end of this step's drop.
    if (fork && partial_prompt_block && s < r.blocks && drop_to_[g] <= s) need_bytes += (r.n - 1) * block_bytes;
    const std::int64_t first_new = std::max(r.blocks, drop_to_[g]);
    if (first_new < new_blocks) {
      // Checked: the engine refuses requests whose bytes overflow, but not the rounding up
      // to whole blocks of n samples near that edge.
      const std::int64_t copies_past_prompt = forked_after ? r.n : 1;
      const std::int64_t shared_new = forked_after ? overlap(first_new, new_blocks, 0, s) : new_blocks - first_new;
      const std::int64_t own_new = (new_blocks - first_new) - shared_new;
      const char* what = "paged: the bytes of a request's new blocks";
      need_bytes = checked_add(
          need_bytes,
          checked_mul(checked_add(shared_new, checked_mul(own_new, copies_past_prompt, what), what), block_bytes, what),
          what);
    }
  }
  return need_bytes - freed_bytes;
}

void PagedAllocator::drop_behind_window(RequestSlot slot) {
  const Request& r = requests_[slot];
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    Tables& t = tables(slot, g);
    if (prefix_caching_) drop_range_cached(slot, g, t.dropped, drop_to_[g]);
    else drop_range(r, t, g, t.dropped, drop_to_[g]);
    t.dropped = drop_to_[g];
  }
}

void PagedAllocator::fork_samples(RequestSlot slot, Request& r) {
  const std::int64_t s = shared_blocks(r);
  const auto extra_refs = static_cast<std::uint32_t>(r.n - 1);
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    Tables& t = tables(slot, g);
    t.samples.resize(static_cast<std::size_t>(r.n));
    for (auto& sample : t.samples) sample.clear();
    if (s < r.blocks) {
      // Copy-on-write of the block holding the prompt's partial tail: the first sample
      // keeps it, every further sample writes its first token into a copy. A step that
      // starts inside the prompt keeps it; one that starts a whole window past the
      // prompt (a call that skipped the decode steps between) has freed it already, and
      // then no sample holds it.
      const BlockId partial = t.shared[static_cast<std::size_t>(s)];
      t.samples[0].push_back(partial);
      t.shared.resize(static_cast<std::size_t>(s));
      for (std::int64_t j = 1; j < r.n; ++j) {
        t.samples[static_cast<std::size_t>(j)].push_back(partial == kNullBlock ? kNullBlock : pool_.take(g));
        if (partial != kNullBlock) copied_bytes_ += pool_.block_bytes(g);
      }
    }
    for (BlockId id : t.shared) {
      if (id != kNullBlock) pool_.share(g, id, extra_refs);
    }
  }
  r.forked = true;
}

void PagedAllocator::append_blocks(RequestSlot slot, const Request& r, std::int64_t new_blocks) {
  const std::int64_t s = shared_blocks(r);
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    Tables& t = tables(slot, g);
    // New logical blocks [r.blocks, new_blocks): those already behind the window are never
    // allocated (null), the rest come from the pool in bulk, into the shared table up to
    // shared_end and into every sample's table after it.
    const std::int64_t shared_end = r.forked ? s : new_blocks;
    const auto append = [&](std::vector<BlockId>& table, std::int64_t from, std::int64_t to) {
      if (to <= from) return;
      const std::int64_t skipped = std::clamp<std::int64_t>(t.dropped - from, 0, to - from);
      table.insert(table.end(), static_cast<std::size_t>(skipped), kNullBlock);
      pool_.take_many(g, to - from - skipped, table);
    };
    const std::int64_t shared_from = std::min(r.blocks, shared_end);
    const std::size_t first_new_shared = t.shared.size();
    append(t.shared, shared_from, std::min(new_blocks, shared_end));
    if (r.forked) {
      for (std::size_t i = first_new_shared; i < t.shared.size(); ++i) {
        if (t.shared[i] != kNullBlock) pool_.share(g, t.shared[i], static_cast<std::uint32_t>(r.n - 1));
      }
    }
    for (auto& sample : t.samples) append(sample, std::max(r.blocks, shared_end), new_blocks);
  }
}

void PagedAllocator::release(RequestSlot slot) {
  Request& r = requests_[slot];
  check(r.live, "paged: releasing a request that is not live");
  if (prefix_caching_) {
    release_cached(slot, r);
  } else {
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      Tables& t = tables(slot, g);
      drop_range(r, t, g, t.dropped, r.blocks);
    }
  }
  r.live = false;
  check_after_operation(*this);
}

Footprint PagedAllocator::footprint(RequestSlot slot, std::size_t group, std::int64_t tokens) const {
  const Request& r = requests_[slot];
  const Tables& t = tables(slot, group);
  const std::int64_t lo = t.dropped * block_tokens_;
  const std::int64_t hi = r.blocks * block_tokens_;
  const std::int64_t split = r.forked ? std::clamp(shared_blocks(r) * block_tokens_, lo, hi) : hi;
  const std::int64_t copies = r.forked ? r.n : 1;
  if (groups_[group].window_tokens == 0) {
    if (!r.forked) {
      // One copy of every block, the commonest case (an event's footprint on every block
      // boundary): the closed form below with split == hi and copies == 1, all tail.
      const auto tail_at = [&](std::int64_t len) { return std::max<std::int64_t>(0, hi - std::max(len, lo)); };
      Footprint f;
      f.allocated = hi - lo;
      f.tail = tail_at(tokens);
      f.tail_slope = tail_at(tokens + 1) - f.tail;
      return f;
    }
    // Full attention, the common case, in closed form (classify() below gives the same):
    // the room past the sequence's end is tail, in each copy; the prompt positions in each
    // further sample's own blocks are duplicates.
    const auto tail_at = [&](std::int64_t len) {
      return std::max<std::int64_t>(0, split - std::max(len, lo)) + copies * std::max<std::int64_t>(0, hi - std::max(len, split));
    };
    const auto duplicate_at = [&](std::int64_t len) {
      return (copies - 1) * std::max<std::int64_t>(0, std::min({r.prompt_tokens, len, hi}) - split);
    };
    Footprint f;
    f.allocated = (split - lo) + copies * (hi - split);
    f.tail = tail_at(tokens);
    f.tail_slope = tail_at(tokens + 1) - f.tail;
    f.duplicate = duplicate_at(tokens);
    f.duplicate_slope = duplicate_at(tokens + 1) - f.duplicate;
    return f;
  }
  auto at = [&](std::int64_t len) {
    return classify({{lo, split, 1}, {split, hi, copies}}, {len, r.prompt_tokens, groups_[group].window_tokens},
                    Unfilled::tail);
  };
  return with_slopes(at(tokens), at(tokens + 1));
}

std::int64_t PagedAllocator::next_event_tokens(RequestSlot slot) const {
  const Request& r = requests_[slot];
  std::int64_t next = r.blocks * block_tokens_ + 1;  // the first token that needs a new block
  auto consider = [&](std::int64_t at) {
    if (at > r.tokens) next = std::min(next, at);
  };
  // The n samples fork at the first token past the prompt: from then on each holds its own
  // blocks, so a request grown to exactly its prompt must be called again one token later.
  if (!r.forked && r.n > 1) consider(r.prompt_tokens + 1);
  // Asynchronous scheduling: a block whose last position the last grow computed is cached
  // at the next step's plan, once that position's token is known.
  if (outputs_lag_ && cacheable_tokens(r, true) / block_tokens_ > prefixes_[slot].cached_blocks) {
    consider(r.tokens + 1);
  }
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const std::int64_t w = groups_[g].window_tokens;
    if (w == 0) continue;
    const Tables& t = tables(slot, g);
    // The window's start crossing a region boundary changes the footprint's slopes.
    consider(w);
    consider(t.dropped * block_tokens_ + w);
    consider(shared_blocks(r) * block_tokens_ + w);
    consider(r.prompt_tokens + w);
    // The first held block leaves the window: a decode step to length t starts with t - 1
    // computed, so block `dropped` goes at t = (dropped + 1) * block + W, or at the very
    // next step when the last grow was a chunk that started early enough to keep it (a
    // prompt longer than the window, stored whole, loses most of it at the first decode).
    if (groups_[g].frees && t.dropped < r.blocks) {
      consider(std::max((t.dropped + 1) * block_tokens_ + w, r.tokens + 1));
    }
  }
  return next;
}

std::int64_t PagedAllocator::peak_bytes(const AdmitInfo& info, std::int64_t tokens) const {
  // Blocks of all sequences at a length: the prompt's full blocks once, and after the fork
  // each sample's own blocks.
  const auto blocks_at = [&](std::int64_t t) {
    const std::int64_t b = ceil_div(t, block_tokens_);
    if (t <= info.prompt_tokens || info.n == 1) return b;
    const std::int64_t s = info.prompt_tokens / block_tokens_;
    return s + info.n * (b - s);
  };
  std::int64_t bytes = 0;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    std::int64_t b = blocks_at(tokens);
    if (groups_[g].frees) {
      // The prefill step holds all it computes and the token it samples
      // (AdmitInfo::prefilled_positions: on a re-admission after preemption the generated
      // tokens too, as vLLM's get_num_blocks_to_allocate counts cdiv(num_tokens, block) for
      // a request freed whole). After it, each sample holds at most vLLM's
      // ceil((W - 1) / block) + 1 blocks.
      const std::int64_t window_blocks = ceil_div(groups_[g].window_tokens - 1, block_tokens_) + 1;
      b = std::min(b, std::max(blocks_at(std::min(tokens, info.prefilled_positions())), info.n * window_blocks));
    }
    bytes += b * pool_.block_bytes(g);
  }
  return bytes;
}

PoolState PagedAllocator::pool() const {
  PoolState p;
  p.reserved_bytes = pool_.reserved_bytes();
  p.capacity_bytes = pool_.capacity_bytes();
  p.unit_bytes = pool_.unit_bytes();
  p.free_bytes = p.reserved_bytes - pool_.allocated_bytes();
  p.largest_free_extent_bytes = p.free_bytes;  // any free block serves any sequence
  p.copied_bytes = copied_bytes_;
  p.evictable_bytes = pool_.evictable_bytes();
  p.evicted_bytes = pool_.evicted_bytes();
  return p;
}

std::vector<BlockId> PagedAllocator::block_table(RequestSlot slot, std::size_t group, std::int64_t sample) const {
  const Tables& t = tables(slot, group);
  std::vector<BlockId> out = t.shared;
  if (requests_[slot].forked) {
    const auto& own = t.samples[static_cast<std::size_t>(sample)];
    out.insert(out.end(), own.begin(), own.end());
  }
  return out;
}

void PagedAllocator::check_invariants() const {
  // Sized to the ids the pool has handed out (an id past them still counts, and the pool's
  // check names it), so that counting grows no vector.
  std::vector<std::vector<std::uint32_t>> refs(groups_.size());
  std::vector<std::vector<std::uint32_t>> requests(prefix_caching_ ? groups_.size() : 0);
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    refs[g].assign(pool_.id_count(g), 0);
    if (prefix_caching_) requests[g].assign(pool_.id_count(g), 0);
  }
  auto count = [&](std::size_t g, BlockId id, std::uint32_t n) {
    if (id == kNullBlock) return;
    if (refs[g].size() <= id) refs[g].resize(id + 1, 0);
    refs[g][id] += n;
  };
  for (RequestSlot slot = 0; slot < requests_.size(); ++slot) {
    const Request& r = requests_[slot];
    if (!r.live) continue;
    check(r.blocks == blocks_for_tokens(r.tokens), "paged: block count does not cover the tokens");
    const std::int64_t s = r.forked ? std::min(shared_blocks(r), r.blocks) : r.blocks;
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      const Tables& t = tables(slot, g);
      check(static_cast<std::int64_t>(t.shared.size()) == s, "paged: shared table has the wrong length");
      for (std::size_t i = 0; i < t.shared.size(); ++i) {
        const bool behind = static_cast<std::int64_t>(i) < t.dropped;
        check(behind == (t.shared[i] == kNullBlock), "paged: a freed block is still referenced, or a live one is missing");
        count(g, t.shared[i], r.forked ? static_cast<std::uint32_t>(r.n) : 1);
      }
      if (!r.forked) continue;
      check(static_cast<std::int64_t>(t.samples.size()) == r.n, "paged: a sample has no table");
      for (const auto& sample : t.samples) {
        check(static_cast<std::int64_t>(sample.size()) == r.blocks - s, "paged: sample table has the wrong length");
        for (std::size_t i = 0; i < sample.size(); ++i) {
          const bool behind = s + static_cast<std::int64_t>(i) < t.dropped;
          check(behind == (sample[i] == kNullBlock), "paged: a sample's freed block is still referenced");
          count(g, sample[i], 1);
        }
      }
    }
    if (!prefix_caching_) continue;
    // The leading cached blocks of every sequence carry the request's identities, and the
    // request counts once among the holders of each.
    const Prefix& p = prefixes_[slot];
    const std::int64_t prompt_full = shared_blocks(r);
    check(p.cached_blocks <= r.blocks && (r.forked || r.n == 1 || p.cached_blocks <= prompt_full),
          "paged: more cached blocks than the request holds");
    const std::int64_t shared_ids = r.n > 1 ? std::min(p.cached_blocks, prompt_full) : p.cached_blocks;
    check(static_cast<std::int64_t>(p.hashes.size()) >= shared_ids, "paged: a cached block has no identity");
    for (const auto& ids : p.sample_ids) {
      check(p.cached_blocks <= prompt_full || static_cast<std::int64_t>(ids.size()) >= p.cached_blocks - prompt_full,
            "paged: a sample's cached block has no identity");
    }
    check(p.cached_blocks <= prompt_full || r.n == 1 || static_cast<std::int64_t>(p.sample_ids.size()) == r.n,
          "paged: a sample has no identities");
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      for (std::int64_t k = 0; k < p.cached_blocks; ++k) {
        const std::int64_t sequences = r.n > 1 && k >= prompt_full ? r.n : 1;
        for (std::int64_t j = 0; j < sequences; ++j) {
          const BlockId id = table_block(slot, r, g, k, j);
          if (id == kNullBlock) continue;  // behind a sliding window: freed, checked above
          check(pool_.cached_as(g, id, block_id(slot, r, k, j)),
                "paged: a request's leading block does not carry the request's identity");
          if (requests[g].size() <= id) requests[g].resize(id + 1, 0);
          ++requests[g][id];
        }
      }
    }
  }
  pool_.check(refs, requests);
}

}  // namespace kvsim::detail
