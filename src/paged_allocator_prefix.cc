// The paged allocator's prefix caching (paged_allocator.h): vLLM v1's rules for admit,
// grow and release (vllm/v1/core/kv_cache_manager.py, single_type_kv_cache_manager.py),
// apart from the plain allocator, which reaches them through one branch on a flag in
// admit(), grow() and release().
//
// Identity. vLLM hashes every full block of a request, its generated tokens included
// (request.block_hashes grows in append_output_token_ids as blocks fill, each hash chained
// from the previous block's). Here a prompt block's identity is the prefix hash the trace
// gives; any other full block (a generated one, or a prompt block past the given hashes)
// gets own_block_hash, which only this request can produce: for n > 1, the prompt's full
// blocks are the samples' common blocks and every later block is one sample's own (vLLM
// runs the n samples as n child requests sharing the prompt's blocks). Own identities exist
// only under a budget: unbounded, nothing is preempted, so nobody could find them again.
#include <algorithm>
#include <cstddef>

#include "block_hash.h"
#include "invariant_checks.h"
#include "kvsim/error.h"
#include "paged_allocator.h"

namespace kvsim::detail {

std::int64_t PagedAllocator::hit_blocks(const AdmitInfo& info) const {
  LastHit& last = last_hit_;
  const std::span<const std::uint64_t> hashes = info.prefix_hashes;
  if (last.valid && last.cache_version == pool_.cache_version() && last.prompt_tokens == info.prompt_tokens &&
      last.resumed_tokens == info.resumed_tokens && last.n == info.n && last.request_key == info.request_key &&
      std::equal(hashes.begin(), hashes.end(), last.prefix_hashes.begin(), last.prefix_hashes.end())) {
    return last.hits;
  }
  last.valid = true;
  last.cache_version = pool_.cache_version();
  last.prompt_tokens = info.prompt_tokens;
  last.resumed_tokens = info.resumed_tokens;
  last.n = info.n;
  last.request_key = info.request_key;
  last.prefix_hashes.assign(hashes.begin(), hashes.end());
  last.hits = find_hit_blocks(info, last.found);
  return last.hits;
}

std::int64_t PagedAllocator::find_hit_blocks(const AdmitInfo& info, std::vector<std::vector<BlockId>>& found) const {
  found.resize(groups_.size());
  for (auto& blocks : found) blocks.clear();
  if (info.prompt_tokens <= 0) return 0;
  // kv_cache_manager.py get_computed_blocks: max_cache_hit_length = request.num_tokens - 1,
  // so a request wholly cached still computes its last token (its last block, in whole
  // blocks). num_tokens counts the generated tokens too: a request back from preemption
  // recomputes them, looks them up with its prompt, and may find both.
  const std::int64_t limit = (info.prompt_tokens + info.resumed_tokens - 1) / block_tokens_;
  const std::int64_t s = info.prompt_tokens / block_tokens_;
  const auto given = std::min<std::int64_t>(static_cast<std::int64_t>(info.prefix_hashes.size()), s);
  const auto everywhere = [&](std::uint64_t hash) {
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      if (pool_.cached_block(g, hash) == kNullBlock) return false;
    }
    return true;
  };
  // The same for an identity of the leading run, whose blocks admit_cached() takes.
  const auto found_everywhere = [&](std::uint64_t hash) {
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      const BlockId id = pool_.cached_block(g, hash);
      if (id == kNullBlock) {
        for (std::size_t h = 0; h < g; ++h) found[h].pop_back();
        return false;
      }
      found[g].push_back(id);
    }
    return true;
  };
  if (windows_free_) {
    // With sliding windows, vLLM's hybrid rules (paged_allocator_window_prefix.cc) over the
    // same chain of identities identify() builds: for an n > 1 request only its prompt's
    // full blocks (each sample's own chain past them is not searched with windows).
    std::vector<std::uint64_t> ids;
    std::uint64_t parent = 0;
    for (std::int64_t k = 0; k < limit && (k < s || info.n == 1); ++k) {
      if (k < given) parent = info.prefix_hashes[static_cast<std::size_t>(k)];
      else if (own_ids_) parent = own_block_hash(parent, info.request_key, 0, k);
      else break;
      ids.push_back(parent);
    }
    return window_hit_blocks(ids, static_cast<std::int64_t>(ids.size()));
  }
  // single_type_kv_cache_manager.py find_longest_cache_hit: the leading run of identities
  // found, in every group (vLLM keys its map by hash and group), walking the same chain
  // identify() builds.
  std::int64_t hits = 0;
  std::uint64_t parent = 0;
  for (; hits < limit && (hits < s || info.n == 1); ++hits) {
    std::uint64_t id;
    if (hits < given) id = info.prefix_hashes[static_cast<std::size_t>(hits)];
    else if (own_ids_) id = own_block_hash(parent, info.request_key, 0, hits);
    else break;
    if (!found_everywhere(id)) return hits;
    parent = id;
  }
  if (hits < s || hits >= limit || !own_ids_) return hits;
  // Past the prompt's full blocks of an n > 1 request: each sample's own chain, all of
  // which must be found (the request's sequences advance together).
  std::vector<std::uint64_t> parents(static_cast<std::size_t>(info.n), parent);
  for (; hits < limit; ++hits) {
    for (std::int64_t j = 0; j < info.n; ++j) {
      auto& p = parents[static_cast<std::size_t>(j)];
      p = own_block_hash(p, info.request_key, static_cast<std::uint64_t>(j), hits);
      if (!everywhere(p)) return hits;
    }
  }
  return hits;
}

std::int64_t PagedAllocator::cached_tokens(const AdmitInfo& info) const {
  return prefix_caching_ ? hit_blocks(info) * block_tokens_ : 0;
}

std::int64_t PagedAllocator::roomless_hit_bytes(const AdmitInfo& info) const {
  if (!prefix_caching_) return 0;
  // A sliding group takes none of the hits wholly behind its window (admit_cached: null in
  // its table). Of the others, only a block with a given identity can be another request's;
  // a request's own blocks are its alone, and it holds none while it waits.
  const std::int64_t hits = hit_blocks(info);
  const std::int64_t given =
      std::min({hits, static_cast<std::int64_t>(info.prefix_hashes.size()), info.prompt_tokens / block_tokens_});
  std::int64_t bytes = 0;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const std::int64_t skipped = std::min(droppable_blocks(g, hits * block_tokens_), hits);
    bytes += skipped * pool_.block_bytes(g);
    for (std::int64_t k = skipped; k < given; ++k) {
      const BlockId id = pool_.cached_block(g, info.prefix_hashes[static_cast<std::size_t>(k)]);
      if (pool_.refs(g, id) > 0) bytes += pool_.block_bytes(g);
    }
  }
  return bytes;
}

std::int64_t PagedAllocator::identify(RequestSlot slot, const Request& r, std::int64_t upto) {
  Prefix& p = prefixes_[slot];
  const std::int64_t s = shared_blocks(r);
  const std::int64_t shared_end = r.n > 1 ? std::min(upto, s) : upto;
  while (static_cast<std::int64_t>(p.hashes.size()) < shared_end) {
    if (!own_ids_) return static_cast<std::int64_t>(p.hashes.size());
    const auto k = static_cast<std::int64_t>(p.hashes.size());
    p.hashes.push_back(own_block_hash(k == 0 ? 0 : p.hashes.back(), p.key, 0, k));
  }
  if (upto <= shared_end) return upto;
  if (!own_ids_) return s;
  p.sample_ids.resize(static_cast<std::size_t>(r.n));
  for (std::int64_t j = 0; j < r.n; ++j) {
    auto& ids = p.sample_ids[static_cast<std::size_t>(j)];
    while (s + static_cast<std::int64_t>(ids.size()) < upto) {
      const std::uint64_t parent = !ids.empty() ? ids.back() : s == 0 ? 0 : p.hashes[static_cast<std::size_t>(s - 1)];
      ids.push_back(own_block_hash(parent, p.key, static_cast<std::uint64_t>(j), s + static_cast<std::int64_t>(ids.size())));
    }
  }
  return upto;
}

std::uint64_t PagedAllocator::block_id(RequestSlot slot, const Request& r, std::int64_t k, std::int64_t j) const {
  const Prefix& p = prefixes_[slot];
  const std::int64_t s = shared_blocks(r);
  if (r.n == 1 || k < s) return p.hashes[static_cast<std::size_t>(k)];
  return p.sample_ids[static_cast<std::size_t>(j)][static_cast<std::size_t>(k - s)];
}

BlockId PagedAllocator::table_block(RequestSlot slot, const Request& r, std::size_t g, std::int64_t k,
                                    std::int64_t j) const {
  const Tables& t = tables(slot, g);
  const std::int64_t s = shared_blocks(r);
  if (!r.forked || k < s) return t.shared[static_cast<std::size_t>(k)];
  return t.samples[static_cast<std::size_t>(j)][static_cast<std::size_t>(k - s)];
}

void PagedAllocator::admit_cached(RequestSlot slot, Request& r, const AdmitInfo& info) {
  if (prefixes_.size() < requests_.size()) prefixes_.resize(requests_.size());
  Prefix& p = prefixes_[slot];
  // Only full prompt blocks have a given identity; a longer list is the caller's mistake,
  // and the blocks past the prompt's full ones get their own (identify()).
  const auto hashed = std::min<std::size_t>(info.prefix_hashes.size(), static_cast<std::size_t>(shared_blocks(r)));
  p.hashes.assign(info.prefix_hashes.begin(), info.prefix_hashes.begin() + static_cast<std::ptrdiff_t>(hashed));
  p.sample_ids.clear();
  p.key = info.request_key;
  // kv_cache_manager.py allocate_slots -> block_pool.py touch(): the hit blocks join the
  // request's table, leaving the free queue when nobody held them. They exist already, so
  // they need no room: an evictable block just becomes allocated. A hit past the prompt's
  // full blocks of an n > 1 request gives each sample its own blocks from there on: the
  // request comes back forked, its prompt's full blocks referenced by every sample.
  const std::int64_t hits = hit_blocks(info);
  identify(slot, r, hits);
  const std::int64_t s = shared_blocks(r);
  const bool forked = r.n > 1 && hits > s;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    Tables& t = tables(slot, g);
    const std::int64_t shared_hits = forked ? s : hits;
    // add_local_computed_blocks: a sliding group takes none of the hit blocks wholly
    // before L - W + 1 (get_num_skipped_tokens); its table holds null there. 0 elsewhere.
    const std::int64_t skipped = std::min(droppable_blocks(g, hits * block_tokens_), shared_hits);
    t.shared.assign(static_cast<std::size_t>(skipped), kNullBlock);
    t.dropped = skipped;
    // The leading run's blocks, as hit_blocks() found them (nothing was cached or evicted
    // since); the sliding-window rules' hits are looked up.
    const std::vector<BlockId>& found = last_hit_.found[g];
    for (std::int64_t k = skipped; k < shared_hits; ++k) {
      const BlockId id = k < static_cast<std::int64_t>(found.size()) ? found[static_cast<std::size_t>(k)]
                                                                      : pool_.cached_block(g, block_id(slot, r, k, 0));
#if KVSIM_EXPENSIVE_CHECKS
      check(id == pool_.cached_block(g, block_id(slot, r, k, 0)), "paged: a hit block is not the one cached");
#endif
      pool_.touch(g, id);
      if (forked) pool_.share(g, id, static_cast<std::uint32_t>(r.n - 1));
      t.shared.push_back(id);
    }
    if (!forked) continue;
    t.samples.resize(static_cast<std::size_t>(r.n));
    for (std::int64_t j = 0; j < r.n; ++j) {
      auto& sample = t.samples[static_cast<std::size_t>(j)];
      sample.clear();
      for (std::int64_t k = s; k < hits; ++k) {
        const BlockId id = pool_.cached_block(g, block_id(slot, r, k, j));
        pool_.touch(g, id);
        sample.push_back(id);
      }
    }
  }
  r.forked = forked;
  p.cached_blocks = hits;
  r.tokens = hits * block_tokens_;
  r.blocks = hits;
  check_after_operation(*this);
}

std::int64_t PagedAllocator::cacheable_tokens(const Request& r, bool outputs_known) const {
  // kv_cache_manager.py allocate_slots caches up to num_tokens_to_cache = min(computed +
  // new tokens, request.num_tokens): the positions whose KV this step computes. The
  // request holds one position more once it samples (the token sampled, whose KV the next
  // step computes): past its prompt and the generated tokens it recomputes, its last
  // position is not computed yet.
  const std::int64_t prefilled = r.prompt_tokens + r.resumed;
  if (r.tokens <= prefilled) return r.tokens;
  const std::int64_t computed = r.tokens - 1;
  // Asynchronous scheduling: a decode is planned while the step before it runs, so
  // request.num_tokens lacks that step's token, the last position this step computes
  // (async_scheduler.py counts it as an output placeholder until its output is processed).
  return outputs_lag_ && !outputs_known && computed > prefilled ? computed - 1 : computed;
}

void PagedAllocator::outputs_processed(RequestSlot slot) {
  const Request& r = requests_[slot];
  check(r.live, "paged: outputs_processed outside its contract");
  if (outputs_lag_) cache_full_blocks(slot, r, cacheable_tokens(r, true));
}

void PagedAllocator::cache_full_blocks(RequestSlot slot, const Request& r, std::int64_t tokens) {
  // single_type_kv_cache_manager.py cache_blocks -> block_pool.py cache_full_blocks: each
  // full block with an identity enters the map, once (from num_cached_block on).
  Prefix& p = prefixes_[slot];
  const std::int64_t full = identify(slot, r, tokens / block_tokens_);
  if (full <= p.cached_blocks) return;
  const std::int64_t s = shared_blocks(r);
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    if (r.n == 1) {
      // One sequence (never forked): its table and its identities, side by side.
      const BlockId* const table = tables(slot, g).shared.data();
      pool_.cache_run(g, table + p.cached_blocks, table + full, p.hashes.data() + p.cached_blocks);
      continue;
    }
    for (std::int64_t k = p.cached_blocks; k < full; ++k) {
      const std::int64_t sequences = r.n > 1 && k >= s ? r.n : 1;
      for (std::int64_t j = 0; j < sequences; ++j) {
        // Null: freed behind a sliding window before it was registered, never cached.
        const BlockId id = table_block(slot, r, g, k, j);
        if (id != kNullBlock) pool_.cache_block(g, id, block_id(slot, r, k, j));
      }
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
  const std::int64_t s = shared_blocks(r);
  const auto shared_refs = static_cast<std::uint32_t>(r.forked ? r.n : 1);
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const Tables& t = tables(slot, g);
    if (r.forked) {
      // A sample's own table starts at logical block s.
      for (const auto& sample : t.samples) {
        pool_.release_run(g, sample.data(), sample.data() + sample.size(), cached - s, 1);
      }
    }
    pool_.release_run(g, t.shared.data(), t.shared.data() + t.shared.size(), cached, shared_refs);
  }
}

}  // namespace kvsim::detail
