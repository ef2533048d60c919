// The paged allocator's prefix caching (paged_allocator.h): vLLM v1's rules for admit,
// grow and release (vllm/v1/core/kv_cache_manager.py, single_type_kv_cache_manager.py),
// apart from the plain allocator, which reaches them through one branch on a flag in
// admit(), grow() and release().
#include <algorithm>
#include <cstddef>

#include "kvsim/error.h"
#include "paged_allocator.h"

namespace kvsim::detail {

std::int64_t PagedAllocator::hit_blocks(const AdmitInfo& info) const {
  if (info.prompt_tokens <= 0) return 0;
  // kv_cache_manager.py get_computed_blocks: max_cache_hit_length = num_tokens - 1, so a
  // prompt wholly cached still computes its last token (its last block, in whole blocks).
  // num_tokens counts the generated tokens too: a request back from preemption recomputes
  // them, so its whole prompt may hit.
  const std::int64_t limit = std::min<std::int64_t>((info.prompt_tokens + info.resumed_tokens - 1) / block_tokens_,
                                                    static_cast<std::int64_t>(info.prefix_hashes.size()));
  // With sliding windows, vLLM's hybrid rules (paged_allocator_window_prefix.cc).
  if (free_outside_window_) return window_hit_blocks(info.prefix_hashes, limit);
  // single_type_kv_cache_manager.py find_longest_cache_hit: the leading run of hashes found,
  // in every group (vLLM keys its map by hash and group).
  std::int64_t hits = 0;
  while (hits < limit) {
    const std::uint64_t hash = info.prefix_hashes[static_cast<std::size_t>(hits)];
    bool everywhere = true;
    for (std::size_t g = 0; g < groups_.size() && everywhere; ++g) everywhere = pool_.cached_block(g, hash) != kNullBlock;
    if (!everywhere) break;
    ++hits;
  }
  return hits;
}

std::int64_t PagedAllocator::cached_tokens(const AdmitInfo& info) const {
  return prefix_caching_ ? hit_blocks(info) * block_tokens_ : 0;
}

void PagedAllocator::admit_cached(RequestSlot slot, Request& r, const AdmitInfo& info) {
  if (prefixes_.size() < requests_.size()) prefixes_.resize(requests_.size());
  Prefix& p = prefixes_[slot];
  // Only full prompt blocks have an identity; a longer list is the caller's mistake, and
  // the blocks past the prompt's full ones are never cached.
  const auto hashed = std::min<std::size_t>(info.prefix_hashes.size(), static_cast<std::size_t>(shared_blocks(r)));
  p.hashes.assign(info.prefix_hashes.begin(), info.prefix_hashes.begin() + static_cast<std::ptrdiff_t>(hashed));
  // kv_cache_manager.py allocate_slots -> block_pool.py touch(): the hit blocks join the
  // request's table, leaving the free queue when nobody held them. They exist already, so
  // they need no room: an evictable block just becomes allocated.
  const std::int64_t hits = hit_blocks(info);
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    Tables& t = tables(slot, g);
    // add_local_computed_blocks: a sliding group takes none of the hit blocks wholly
    // before L - W + 1 (get_num_skipped_tokens); its table holds null there. 0 elsewhere.
    const std::int64_t skipped = droppable_blocks(g, hits * block_tokens_);
    t.shared.assign(static_cast<std::size_t>(skipped), kNullBlock);
    t.dropped = skipped;
    for (std::int64_t i = skipped; i < hits; ++i) {
      const BlockId id = pool_.cached_block(g, p.hashes[static_cast<std::size_t>(i)]);
      pool_.touch(g, id);
      t.shared.push_back(id);
    }
  }
  p.cached_blocks = hits;
  r.tokens = hits * block_tokens_;
  r.blocks = hits;
#if KVSIM_EXPENSIVE_CHECKS
  check_invariants();
#endif
}

void PagedAllocator::cache_full_blocks(RequestSlot slot, const Request& r) {
  // block_pool.py cache_full_blocks: each prompt block the request has filled and has a
  // hash for enters the map, once (from its num_cached_blocks on). Blocks past the prompt's
  // full ones have no hash: generated tokens carry no identity here.
  Prefix& p = prefixes_[slot];
  const std::int64_t full = std::min(r.tokens / block_tokens_, static_cast<std::int64_t>(p.hashes.size()));
  if (full <= p.cached_blocks) return;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const Tables& t = tables(slot, g);
    for (std::int64_t i = p.cached_blocks; i < full; ++i) {
      // Null: freed behind a sliding window before it was registered, never cached.
      const BlockId id = t.shared[static_cast<std::size_t>(i)];
      if (id != kNullBlock) pool_.cache_block(g, id, p.hashes[static_cast<std::size_t>(i)]);
    }
  }
  p.cached_blocks = full;
}

void PagedAllocator::release_cached(RequestSlot slot, const Request& r) {
  // single_type_kv_cache_manager.py free(): blocks go back in reverse order, so that the
  // tail of a request is evicted before its head (a later request can only hit a prefix).
  // The samples' own blocks first, then the blocks they share, each sequence tail first,
  // as vLLM frees the n child requests of a parallel-sampling request one after another.
  // Blocks whose last reference goes join the back of the free queue; cached ones stay in
  // the map, evictable.
  const std::int64_t cached = prefixes_[slot].cached_blocks;
  const auto shared_refs = static_cast<std::uint32_t>(r.forked ? r.n : 1);
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const Tables& t = tables(slot, g);
    if (r.forked) {
      for (const auto& sample : t.samples) {
        for (auto it = sample.rbegin(); it != sample.rend(); ++it) {
          if (*it != kNullBlock) pool_.drop(g, *it, 1);
        }
      }
    }
    for (auto i = static_cast<std::int64_t>(t.shared.size()) - 1; i >= 0; --i) {
      const BlockId id = t.shared[static_cast<std::size_t>(i)];
      if (id == kNullBlock) break;  // the blocks behind a sliding window went already
      if (i < cached) pool_.leave(g, id);
      pool_.drop(g, id, shared_refs);
    }
  }
}

}  // namespace kvsim::detail
