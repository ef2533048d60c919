// The paged allocator (vLLM's PagedAttention) and its sliding-window variant (vLLM's hybrid
// allocator).
//
// Each sequence has a block table per layer group; blocks of `block_tokens` positions come
// from one shared pool. The n samples of a request share the prompt's full blocks
// copy-on-write: when the prompt completes, the block holding its partial tail is copied
// once per further sample, and each sample then owns the blocks it fills itself.
//
// With `free_outside_window`, a sliding-window group frees the blocks that lie wholly before
// the window as the sequence advances, using vLLM's rule: at a step that starts with c
// tokens computed, positions before c - W + 1 are skipped, so a decoding sequence holds at
// most ceil((W - 1) / block) + 1 blocks there. Full-attention groups keep everything.
// Without it (plain paged), sliding-window layers are stored like full attention, as vLLM
// does when its hybrid allocator is off, and the tokens behind the window show up as
// "outside window" fragmentation.
//
// With `prefix_caching` (vLLM v1's automatic prefix caching; vllm/v1/core/kv_cache_manager.py,
// block_pool.py, single_type_kv_cache_manager.py), the full blocks a request computes are
// registered under their identity and outlive it, evictable, in the pool's free queue; a
// later request with the same leading identities takes them at admission instead of
// computing them (cached_tokens()). Prompt blocks carry the prefix hashes the trace gives;
// under a budget every other full block (generated tokens, prompt blocks the trace does not
// identify) carries an identity only its own request can produce (own_block_hash), so a
// request preempted by recompute finds its prompt and its generated tokens again, as in
// vLLM, until they are evicted. Unbounded nothing is preempted, so those blocks could never
// be found again and are not cached. Each request's Footprint still counts every block it
// references as its own; shared_positions() reports the blocks several live requests hold.
//
// With both (the sliding-window allocator with prefix caching), vLLM's hybrid rules
// (paged_allocator_window_prefix.cc): a sliding-window group needs only the last
// ceil((W - 1) / block) blocks before a hit's end cached, searched from the right; the
// hit is the longest length every group accepts; a hit request holds no block of a
// sliding group that is already behind its window; and blocks that fall behind the window
// are freed into the free queue still cached, evictable. Under a capacity, groups of
// different windows do not take blocks in step, and the pool then draws them all from one
// queue, as vLLM does (BlockPool::enable_prefix_caching's one_queue).
#ifndef KVSIM_SRC_PAGED_ALLOCATOR_H_
#define KVSIM_SRC_PAGED_ALLOCATOR_H_

#include <span>
#include <vector>

#include "block_pool.h"
#include "kvsim/allocator.h"

namespace kvsim::detail {

// The allocator's settings (kvsim::PagedOptions, in kvsim/budget.h, is something else: the
// paged pool `kvsim size` sizes).
struct PagedAllocatorOptions {
  std::int64_t block_tokens = 16;      // vLLM's default block size
  bool free_outside_window = false;    // true: the sliding-window allocator
  std::int64_t capacity_bytes = 0;     // 0 = unbounded
  bool prefix_caching = false;         // true: vLLM's automatic prefix caching
};

class PagedAllocator final : public Allocator {
 public:
  PagedAllocator(const KvLayout& layout, const PagedAllocatorOptions& options);

  std::string name() const override;
  Outcome admit(RequestSlot slot, const AdmitInfo& info) override;
  Outcome grow(RequestSlot slot, std::int64_t tokens, std::int64_t step_tokens) override;
  void release(RequestSlot slot) override;
  Footprint footprint(RequestSlot slot, std::size_t group, std::int64_t tokens) const override;
  std::int64_t next_event_tokens(RequestSlot slot) const override;
  PoolState pool() const override;
  std::int64_t peak_bytes(const AdmitInfo& info, std::int64_t tokens) const override;
  std::int64_t prefix_block_tokens() const override { return prefix_caching_ ? block_tokens_ : 0; }
  std::int64_t cached_tokens(const AdmitInfo& info) const override;
  std::int64_t roomless_hit_bytes(const AdmitInfo& info) const override;
  std::int64_t shared_positions(std::size_t group) const override {
    return pool_.shared_blocks(group) * block_tokens_;
  }
  // Only blocks with an identity of the request's own (under a budget) hold generated
  // tokens: without them nothing cached is ever one plan late.
  void set_async_scheduling(bool on) override { outputs_lag_ = on && own_ids_; }
  void outputs_processed(RequestSlot slot) override;
  void check_invariants() const override;

  // The block ids a sequence's table holds for a group (kNullBlock where freed), for tests.
  std::vector<BlockId> block_table(RequestSlot slot, std::size_t group, std::int64_t sample) const;

 private:
  struct Request {
    bool live = false;
    bool forked = false;          // samples own their blocks past the shared prompt blocks
    std::int64_t prompt_tokens = 0;
    std::int64_t n = 1;
    std::int64_t tokens = 0;      // as of the last grow
    std::int64_t blocks = 0;      // logical blocks per sequence (ceil(tokens / block))
    std::int64_t resumed = 0;     // generated tokens recomputed after a preemption (AdmitInfo)
  };
  // One request's tables for one group. Before the fork, `shared` is the only sequence's
  // table. After it, `shared` holds the prompt's full blocks (referenced by every sample)
  // and samples[j] holds sample j's blocks from logical index shared_blocks() on.
  struct Tables {
    std::vector<BlockId> shared;
    std::vector<std::vector<BlockId>> samples;
    std::int64_t dropped = 0;     // logical blocks [0, dropped) freed (behind the window)
  };

  Tables& tables(RequestSlot slot, std::size_t group) { return tables_[slot * groups_.size() + group]; }
  const Tables& tables(RequestSlot slot, std::size_t group) const {
    return tables_[slot * groups_.size() + group];
  }
  std::int64_t shared_blocks(const Request& r) const { return r.prompt_tokens / block_tokens_; }
  // Blocks that hold `tokens` positions: ceil(tokens / block_tokens_), without overflow.
  std::int64_t blocks_for_tokens(std::int64_t tokens) const {
    return tokens / block_tokens_ + (tokens % block_tokens_ != 0);
  }

  // grow()'s two paths. grow_decode: one decode token with nothing to drop or fork, which
  // takes at most one block per sequence and group. grow_step: any other step (and every
  // step with prefix caching, which then registers the prompt blocks it filled), in four
  // named steps: plan_step, drop_behind_window, fork_samples (at the first token past the
  // prompt of an n > 1 request), append_blocks. Both update r.tokens and r.blocks on success
  // and change nothing when the step does not fit. Declared inline and defined in
  // paged_allocator.cc, their only caller's TU; the three on every step are forced inline
  // so that grow(), the replay's hot path, compiles as the one function it was.
  [[gnu::always_inline]] inline Outcome grow_decode(RequestSlot slot, Request& r, std::int64_t tokens);
  [[gnu::always_inline]] inline Outcome grow_step(RequestSlot slot, Request& r, std::int64_t tokens,
                                                 std::int64_t step_tokens);
  // The bytes a step that starts with `tokens_before` tokens computed and ends with
  // `new_blocks` logical blocks takes from the pool, net of what its window drop frees.
  // Fills drop_to_; changes nothing else.
  [[gnu::always_inline]] inline std::int64_t plan_step(RequestSlot slot, const Request& r, std::int64_t tokens_before,
                                                       std::int64_t new_blocks, bool fork);
  // Frees, in every group, the logical blocks plan_step() found wholly behind the window.
  inline void drop_behind_window(RequestSlot slot);
  // Gives each of the n samples its own table: the block holding the prompt's partial tail
  // is copied for every sample but the first (copy-on-write), and the prompt's full blocks
  // gain n - 1 references. Sets r.forked.
  inline void fork_samples(RequestSlot slot, Request& r);
  // Takes blocks for logical blocks [r.blocks, new_blocks) in every group, leaving null
  // those already behind the window.
  inline void append_blocks(RequestSlot slot, const Request& r, std::int64_t new_blocks);
  // Logical blocks of group g wholly before the window when a step starts with
  // `tokens_before` tokens computed (0 where nothing is freed).
  std::int64_t droppable_blocks(std::size_t g, std::int64_t tokens_before) const;
  // Drops every reference the request holds to logical blocks [from, to) of group g.
  void drop_range(const Request& r, Tables& t, std::size_t g, std::int64_t from, std::int64_t to);
  // Block bytes freed by dropping logical blocks [from, to) of group g.
  std::int64_t range_bytes(const Request& r, std::size_t g, std::int64_t from, std::int64_t to) const;

  // Prefix caching's side of admit, grow and release; see the .cc for vLLM's rules.
  // Leading blocks whose identities are cached in every group (and, past the prompt's full
  // blocks of an n > 1 request, for every sample), at most
  // floor((prompt + resumed - 1) / block) so that the last token is computed.
  std::int64_t hit_blocks(const AdmitInfo& info) const;
  // hit_blocks' search, filling `found` (by group) with the block cached under each identity
  // of the leading run it walks, as far as every group has it (not with sliding windows'
  // rules, nor past the prompt's full blocks of an n > 1 request).
  std::int64_t find_hit_blocks(const AdmitInfo& info, std::vector<std::vector<BlockId>>& found) const;
  void admit_cached(RequestSlot slot, Request& r, const AdmitInfo& info);
  // Makes the identities of logical blocks [0, upto) of every sequence known in the
  // request's Prefix, as far as they have one; returns how many leading blocks do.
  std::int64_t identify(RequestSlot slot, const Request& r, std::int64_t upto);
  // The identity of logical block k of sample j. REQUIRES: identify() covered k.
  std::uint64_t block_id(RequestSlot slot, const Request& r, std::int64_t k, std::int64_t j) const;
  // The block of sample j's table at logical block k.
  BlockId table_block(RequestSlot slot, const Request& r, std::size_t g, std::int64_t k, std::int64_t j) const;
  // Positions of the request whose KV is computed and whose tokens the scheduler knows as
  // of the last grow: under asynchronous scheduling, unless `outputs_known`, a decode's
  // previous token is still in flight.
  std::int64_t cacheable_tokens(const Request& r, bool outputs_known) const;
  // Registers the full blocks below `tokens` positions that have an identity and are not
  // cached yet. Called by grow_step (the only path grow() takes with prefix caching) and
  // outputs_processed().
  void cache_full_blocks(RequestSlot slot, const Request& r, std::int64_t tokens);
  void release_cached(RequestSlot slot, const Request& r);
  // The sliding-window allocator's side (paged_allocator_window_prefix.cc). The longest hit,
  // in blocks, of at most `limit` blocks that every group accepts (vLLM's
  // HybridKVCacheCoordinator / UnitaryKVCacheCoordinator find_longest_cache_hit).
  std::int64_t window_hit_blocks(std::span<const std::uint64_t> hashes, std::int64_t limit) const;
  // One sliding-window group's longest hit of at most `limit` blocks (vLLM's
  // SlidingWindowManager.find_longest_cache_hit).
  std::int64_t group_window_hit(std::size_t g, std::span<const std::uint64_t> hashes, std::int64_t limit) const;
  // With prefix caching, what drop_range() does, block by block in vLLM's free order, each
  // cached block let go of first; and the bytes that frees (blocks no other request holds).
  void drop_range_cached(RequestSlot slot, std::size_t g, std::int64_t from, std::int64_t to);
  std::int64_t range_bytes_cached(RequestSlot slot, std::size_t g, std::int64_t from, std::int64_t to) const;

  struct Group {
    std::int64_t window_tokens;  // 0 = full attention
    bool frees;                  // drops blocks behind the window
  };
  std::vector<Group> groups_;
  std::int64_t block_tokens_;
  bool free_outside_window_;
  // Some group frees behind a window: vLLM's hybrid hit rules apply. sliding-window on a
  // model with no sliding layer is paged, figure for figure.
  bool windows_free_ = false;
  bool prefix_caching_;
  bool decode_shortcut_;  // grow() may take grow_decode: neither of the two above
  BlockPool pool_;
  std::vector<Request> requests_;
  std::vector<Tables> tables_;   // requests_.size() * groups_.size()
  std::int64_t copied_bytes_ = 0;
  std::int64_t bytes_per_block_all_groups_ = 0;  // one block in every group
  std::vector<std::int64_t> drop_to_;  // scratch for grow(): per group, blocks dropped after the step
  // Under a budget, blocks the trace does not identify get an identity of their own request.
  bool own_ids_;
  // set_async_scheduling(): a decode caches one position less (cacheable_tokens()).
  bool outputs_lag_ = false;
  // Prefix caching only, by slot: the identities of the request's blocks (the given prefix
  // hashes copied at admission, then own identities as blocks fill) and how many leading
  // logical blocks of its tables are cached (hits, then the blocks it registered), in every
  // sequence alike.
  struct Prefix {
    std::vector<std::uint64_t> hashes;                    // logical blocks of the shared table:
                                                          // all of them for n == 1, the prompt's
                                                          // full ones for n > 1
    std::vector<std::vector<std::uint64_t>> sample_ids;  // n > 1: sample j's blocks from the
                                                          // prompt's full blocks on
    std::uint64_t key = 0;                                // AdmitInfo::request_key
    std::int64_t cached_blocks = 0;
  };
  std::vector<Prefix> prefixes_;
  // hit_blocks' last answer, with its question and the pool's cache_version() it was read
  // at. The engine asks cached_tokens() right before it admits the request, with nothing
  // cached or evicted in between: admit_cached() then takes the answer, and the blocks found,
  // instead of looking every block up again (three look-ups per hit block before).
  struct LastHit {
    bool valid = false;
    std::uint64_t cache_version = 0;
    std::int64_t prompt_tokens = 0;
    std::int64_t resumed_tokens = 0;
    std::int64_t n = 0;
    std::uint64_t request_key = 0;
    std::vector<std::uint64_t> prefix_hashes;
    std::int64_t hits = 0;
    std::vector<std::vector<BlockId>> found;  // find_hit_blocks'
  };
  mutable LastHit last_hit_;
};

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_PAGED_ALLOCATOR_H_
