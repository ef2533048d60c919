// The sliding-window allocator's prefix caching (paged_allocator.h): vLLM v1's hybrid rules
// for which cached blocks make a hit when layer groups have sliding windows, and the
// window's freeing of blocks that stay cached. Apart from the full-attention rules in
// paged_allocator_prefix.cc, which reach these through one branch on windows_free_ (a group
// that frees behind its window; with none, sliding-window is paged).
//
// The rules, from vLLM's code:
//   - SlidingWindowManager.find_longest_cache_hit (vllm/v1/core/single_type_kv_cache_manager.py):
//     a sliding group of window W needs only ceil((W - 1) / block) contiguous cached blocks
//     ending at the hit's end (the next token's window holds W - 1 earlier positions);
//     blocks before them may be missing. It searches from the right, stopping at the first
//     such run; with none, the leading run of cached blocks is the hit.
//   - FullAttentionManager.find_longest_cache_hit: the leading run of cached blocks; a
//     shorter length is a hit too (downward closed).
//   - HybridKVCacheCoordinator.find_longest_cache_hit (vllm/v1/core/kv_cache_coordinator.py):
//     full attention first, then each other group searches within the length found so far;
//     repeat until no group shortens it (one pass when there is one full and one sliding
//     spec). UnitaryKVCacheCoordinator: one group, its own rule. With one block size for
//     every group, the LCM alignment vLLM applies is the block itself.
//   - SingleTypeKVCacheManager.add_local_computed_blocks with
//     SlidingWindowManager.get_num_skipped_tokens (L - W + 1 for a hit of L tokens): a hit
//     request takes no block of a sliding group that lies wholly before that position; its
//     table holds null there.
//   - remove_skipped_blocks / _remove_blocks_in_range: blocks behind the window are freed
//     as the sequence advances, the last of them first; block_pool.py free_blocks puts a
//     block whose last reference goes at the back of the free queue, still cached, so it is
//     evictable and a later request may still hit it.
//   - block_pool.py cache_full_blocks skips null blocks: a block freed before it was full
//     is never cached.
#include <algorithm>
#include <cstddef>

#include "kvsim/units.h"
#include "paged_allocator.h"

namespace kvsim::detail {

std::int64_t PagedAllocator::window_hit_blocks(std::span<const std::uint64_t> hashes, std::int64_t limit) const {
  std::int64_t len = limit;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g].frees) continue;
    std::int64_t run = 0;
    while (run < len && pool_.cached_block(g, hashes[static_cast<std::size_t>(run)]) != kNullBlock) ++run;
    len = run;
  }
  for (bool shrunk = true; shrunk && len > 0;) {
    shrunk = false;
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      if (!groups_[g].frees) continue;
      const std::int64_t hit = group_window_hit(g, hashes, len);
      if (hit < len) {
        len = hit;
        shrunk = true;
      }
    }
  }
  return len;
}

std::int64_t PagedAllocator::group_window_hit(std::size_t g, std::span<const std::uint64_t> hashes,
                                              std::int64_t limit) const {
  const std::int64_t need = ceil_div(groups_[g].window_tokens - 1, block_tokens_);
  std::int64_t run = 0;
  for (std::int64_t i = limit - 1; i >= 0; --i) {
    if (pool_.cached_block(g, hashes[static_cast<std::size_t>(i)]) == kNullBlock) {
      run = 0;
      continue;
    }
    if (++run >= need) return i + run;
  }
  return run;  // blocks [0, run) are cached: a hit shorter than the window needs
}

void PagedAllocator::drop_range_cached(RequestSlot slot, std::size_t g, std::int64_t from, std::int64_t to) {
  const Request& r = requests_[slot];
  Tables& t = tables(slot, g);
  to = std::min(to, r.blocks);
  if (to <= from) return;
  const std::int64_t s = r.forked ? shared_blocks(r) : r.blocks;
  const std::int64_t cached = prefixes_[slot].cached_blocks;
  for (auto& sample : t.samples) {
    for (std::int64_t i = to - 1; i >= std::max(from, s); --i) {
      BlockId& id = sample[static_cast<std::size_t>(i - s)];
      if (id == kNullBlock) continue;
      if (i < cached) pool_.leave(g, id);
      pool_.drop(g, id, 1);
      id = kNullBlock;
    }
  }
  const auto refs = static_cast<std::uint32_t>(r.forked ? r.n : 1);
  for (std::int64_t i = std::min(to, s) - 1; i >= from; --i) {
    BlockId& id = t.shared[static_cast<std::size_t>(i)];
    if (id == kNullBlock) continue;
    if (i < cached) pool_.leave(g, id);
    pool_.drop(g, id, refs);
    id = kNullBlock;
  }
}

std::int64_t PagedAllocator::range_bytes_cached(RequestSlot slot, std::size_t g, std::int64_t from,
                                                std::int64_t to) const {
  // A block another request also holds stays allocated when this one drops it.
  const Request& r = requests_[slot];
  const Tables& t = tables(slot, g);
  to = std::min(to, r.blocks);
  const std::int64_t s = r.forked ? shared_blocks(r) : r.blocks;
  const auto refs = static_cast<std::uint32_t>(r.forked ? r.n : 1);
  std::int64_t blocks = 0;
  for (std::int64_t i = from; i < std::min(to, s); ++i) {
    const BlockId id = t.shared[static_cast<std::size_t>(i)];
    if (id != kNullBlock && pool_.refs(g, id) == refs) ++blocks;
  }
  for (const auto& sample : t.samples) {
    for (std::int64_t i = std::max(from, s); i < to; ++i) {
      if (sample[static_cast<std::size_t>(i - s)] != kNullBlock) ++blocks;
    }
  }
  return blocks * pool_.block_bytes(g);
}

}  // namespace kvsim::detail
