// SGLang's radix cache over its token pool (python/sglang/srt/mem_cache/radix_cache.py,
// allocator.py; the scheduler's calls in managers/scheduler.py and
// scheduler_output_processor_mixin.py), as an allocator.
//
// The pool holds pages of `page_tokens` positions (SGLang's --page-size, 1 by default: a
// token pool with no partial-page tail). Every page a live request holds is either its own
// or a page of the radix tree, whose nodes hold runs of pages keyed by their identity (the
// prompt's prefix hashes at the page size, src/block_hash.h; a chained hash identifies the
// whole prefix up to its page, so comparing hashes is comparing token runs). The rules:
//
// - admit (match_prefix): the longest run of the prompt's leading pages found in the tree,
//   at most floor((prompt - 1) / page) pages so that the last prompt token is computed
//   (schedule_batch.py, adjust_max_prefix_ids: input_len - 1). A match ending inside a node
//   splits it. Every node on the path gets the current access time; the path is locked
//   (inc_lock_ref) while the request uses it. The hit pages exist already: they need no room.
// - after every prefill step (cache_unfinished_req; the scheduler calls it for a chunked
//   request before its next chunk and for every request whose prefill completed): the
//   request's full hashed prompt pages computed so far are inserted; pages some other request
//   inserted meanwhile are the tree's, and the request frees its own copies of them
//   (duplicates); the lock moves to the new end of the path.
// - release (cache_finished_req): the same insert, then the rest of what each sequence holds,
//   page-aligned (generated tokens, prompt pages without identity), is inserted too, as a leaf
//   no later request can match (generated tokens carry no identity in a trace); the partial
//   last page is freed; the path is unlocked. A preempted request (preempted(): SGLang's
//   retraction, cache_finished_req with is_insert=False; or a swap-out, which takes its pages
//   along) inserts nothing and touches nothing: its path stays in the tree, unlocked, and the
//   rest it holds is freed. Unbounded, the unmatchable pages are freed instead: nothing is
//   ever evicted there, and pages no request can match would only inflate reserved bytes.
// - eviction (evict): only when a new page does not fit, the unlocked leaves by least recent
//   access (LRUStrategy: last_access_time; ties, which a monotonic clock never makes, by the
//   node's creation), a whole leaf at a time, its parent becoming a leaf when its last child
//   goes; until enough pages are free. Locked nodes are never evicted. Unbounded, the pool
//   grows instead and nothing is evicted (reserved bytes count the cached pages too).
//
// Unlocked tree pages are free (SGLang's available_size() + evictable_size()) and reported as
// evictable bytes. The n samples of a request share the prompt's full pages; each sample holds
// its own pages from the prompt's partial last page on (page > 1 copies that page per sample).
// All layer groups share one page table (SGLang's token pool spans every layer): sliding-
// window layers are stored like full attention and show "outside window".
#ifndef KVSIM_SRC_RADIX_ALLOCATOR_H_
#define KVSIM_SRC_RADIX_ALLOCATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvsim/allocator.h"

namespace kvsim::detail {

struct RadixAllocatorOptions {
  std::int64_t page_tokens = 1;    // SGLang's default --page-size
  std::int64_t capacity_bytes = 0;  // 0 = unbounded
};

class RadixAllocator final : public Allocator {
 public:
  RadixAllocator(const KvLayout& layout, const RadixAllocatorOptions& options);

  std::string name() const override;
  Outcome admit(RequestSlot slot, const AdmitInfo& info) override;
  Outcome grow(RequestSlot slot, std::int64_t tokens, std::int64_t step_tokens) override;
  void release(RequestSlot slot) override;
  void preempted(RequestSlot slot) override;
  Footprint footprint(RequestSlot slot, std::size_t group, std::int64_t tokens) const override;
  std::int64_t next_event_tokens(RequestSlot slot) const override;
  PoolState pool() const override;
  std::int64_t peak_bytes(const AdmitInfo& info, std::int64_t tokens) const override;
  std::int64_t prefix_block_tokens() const override { return page_tokens_; }
  std::int64_t cached_tokens(const AdmitInfo& info) const override;
  std::int64_t roomless_hit_bytes(const AdmitInfo& info) const override;
  std::int64_t shared_positions(std::size_t /*group*/) const override { return shared_pages_ * page_tokens_; }
  void check_invariants() const override;

  // For tests: pages in the tree (locked or not), and those no live request locks.
  std::int64_t tree_pages() const { return tree_pages_; }
  std::int64_t evictable_pages() const { return evictable_pages_; }
  // Pages evicted so far.
  std::int64_t evicted_pages() const { return evicted_pages_; }
  // Whether the tree holds the page run identified by `hashes` (all of them, from the root).
  bool holds(const std::vector<std::uint64_t>& hashes) const;

 private:
  using NodeId = std::uint32_t;
  static constexpr NodeId kRoot = 0;
  static constexpr NodeId kNone = 0xFFFFFFFFu;

  struct Node {
    NodeId parent = kNone;
    std::vector<std::uint64_t> key;   // page identities; empty for an unmatchable leaf
    std::int64_t pages = 0;           // == key.size() for a matchable node
    std::int64_t lock_ref = 0;        // live requests whose path runs through the node
    std::uint64_t last_access = 0;    // the logical clock of the last match or insert through it
    std::uint64_t created = 0;        // creation order, for ties
    bool alive = false;
    bool matchable = true;
    std::unordered_map<std::uint64_t, NodeId> children;  // matchable children by first page
    std::int64_t unmatchable_children = 0;
  };
  struct Request {
    bool live = false;
    bool forked = false;
    bool retracted = false;  // preempted(): its release inserts nothing
    std::int64_t prompt_tokens = 0;
    std::int64_t n = 1;
    std::int64_t tokens = 0;          // per sequence, as of the last grow
    std::vector<std::uint64_t> hashes;  // full prompt pages with an identity
    NodeId last_node = kRoot;         // end of the locked path
    std::int64_t tree_pages = 0;      // pages of the path (the prefix the tree holds for it)
  };

  // Pages a request holds in all (tree path included) at `tokens` per sequence.
  std::int64_t held_pages(const Request& r, std::int64_t tokens, bool forked) const;
  std::int64_t pages_for(std::int64_t tokens) const { return tokens / page_tokens_ + (tokens % page_tokens_ != 0); }
  // Walks the tree along `hashes[0, limit)` without changing it: pages matched.
  std::int64_t match_length(const std::vector<std::uint64_t>& hashes, std::int64_t limit) const;
  // Also counts, in `locked`, the matched pages some live request locks (they are in use).
  std::int64_t match_length(const std::uint64_t* hashes, std::int64_t limit, std::int64_t* locked = nullptr) const;
  // The pages an admission of `info` may match (adjust_max_prefix_ids: at most input_len - 1
  // tokens, page-aligned by match_prefix; only the pages the prompt identifies).
  std::int64_t match_limit(const AdmitInfo& info) const;
  // match_prefix: the node ending the longest match of hashes[0, limit) (splitting the last
  // node when the match ends inside it), every node on the way touched now; `matched` gets
  // the pages.
  NodeId match_prefix(const std::vector<std::uint64_t>& hashes, std::int64_t limit, std::int64_t& matched);
  // Splits `id` after `at` pages: a new node takes the first `at` pages and becomes its parent.
  NodeId split(NodeId id, std::int64_t at);
  NodeId new_node(NodeId parent, bool matchable);
  void inc_lock_ref(NodeId id);
  void dec_lock_ref(NodeId id);
  // cache_unfinished_req for request `slot`: inserts its hashed prompt pages held now and
  // moves its lock to the end of them.
  void cache_prompt(Request& r);
  // Appends an unmatchable leaf of `pages` pages under `parent` (unlocked, evictable).
  void add_unmatchable(NodeId parent, std::int64_t pages);
  // Evicts unlocked leaves, least recently accessed first, until `pages` are freed (or none
  // is left). Returns the pages freed.
  std::int64_t evict(std::int64_t pages);
  void delete_leaf(NodeId id);
  bool is_leaf(const Node& n) const { return n.children.empty() && n.unmatchable_children == 0; }
  std::int64_t capacity_pages() const { return capacity_pages_; }
  void note_high_water();

  std::vector<std::int64_t> window_tokens_;  // by layer group; 0 = full attention
  bool windows_ = false;                     // some group slides
  std::int64_t page_tokens_;
  std::int64_t bytes_per_page_ = 0;  // one page in every layer group
  std::int64_t capacity_bytes_;
  std::int64_t capacity_pages_ = 0;  // 0 = unbounded
  std::vector<Node> nodes_;          // nodes_[kRoot] is the root
  std::vector<NodeId> free_nodes_;
  std::vector<Request> requests_;
  std::uint64_t clock_ = 0;          // SGLang's time.monotonic(): one tick per operation
  std::uint64_t created_ = 0;
  std::int64_t own_pages_ = 0;       // pages live requests hold outside the tree
  std::int64_t tree_pages_ = 0;      // pages in tree nodes
  std::int64_t evictable_pages_ = 0;  // tree pages of unlocked nodes
  std::int64_t shared_pages_ = 0;    // sum over nodes of max(0, lock_ref - 1) x pages
  std::int64_t high_water_pages_ = 0;
  std::int64_t evicted_pages_ = 0;
};

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_RADIX_ALLOCATOR_H_
