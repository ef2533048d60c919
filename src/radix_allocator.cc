#include "radix_allocator.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <string>
#include <tuple>

#include "allocator_registry.h"
#include "footprint.h"
#include "invariant_checks.h"
#include "kvsim/error.h"
#include "kvsim/units.h"

namespace kvsim::detail {

RadixAllocator::RadixAllocator(const KvLayout& layout, const RadixAllocatorOptions& options)
    : page_tokens_(options.page_tokens), capacity_bytes_(options.capacity_bytes) {
  check(page_tokens_ >= 1, "radix: page size below 1");
  std::int64_t bytes_per_position = 0;
  for (const LayerGroup& g : layout.groups) {
    window_tokens_.push_back(g.window_tokens);
    windows_ = windows_ || g.window_tokens > 0;
    bytes_per_position += g.bytes_per_position;
  }
  bytes_per_page_ = checked_mul(page_tokens_, bytes_per_position, "bytes per page");
  if (capacity_bytes_ > 0) capacity_pages_ = bytes_per_page_ > 0 ? capacity_bytes_ / bytes_per_page_ : 0;
  // What the pool holds from the device is its whole pages (SGLang sizes its token pool so):
  // the budget's remainder is reserved by no one. A budget below one page stays as given (the
  // pool holds nothing, and every request is refused).
  if (capacity_pages_ > 0) capacity_bytes_ = capacity_pages_ * bytes_per_page_;
  nodes_.emplace_back();
  nodes_[kRoot].alive = true;
}

std::string RadixAllocator::name() const { return "radix:page=" + std::to_string(page_tokens_); }

std::int64_t RadixAllocator::held_pages(const Request& r, std::int64_t tokens, bool forked) const {
  if (!forked) return pages_for(tokens);
  // The prompt's full pages once; each sample's own pages from the prompt's partial page on.
  const std::int64_t shared = r.prompt_tokens / page_tokens_;
  return shared + r.n * (pages_for(tokens) - shared);
}

// --- the tree ------------------------------------------------------------------------------

RadixAllocator::NodeId RadixAllocator::new_node(NodeId parent, bool matchable) {
  NodeId id;
  if (!free_nodes_.empty()) {
    id = free_nodes_.back();
    free_nodes_.pop_back();
  } else {
    id = static_cast<NodeId>(nodes_.size());
    nodes_.emplace_back();
  }
  Node& n = nodes_[id];
  n = Node{};
  n.parent = parent;
  n.alive = true;
  n.matchable = matchable;
  n.created = created_++;
  n.last_access = clock_;  // a new TreeNode's last_access_time is now
  return id;
}

std::int64_t RadixAllocator::match_length(const std::uint64_t* hashes, std::int64_t limit, std::int64_t* locked) const {
  NodeId node = kRoot;
  std::int64_t i = 0;
  while (i < limit) {
    const auto it = nodes_[node].children.find(hashes[i]);
    if (it == nodes_[node].children.end()) break;
    const Node& c = nodes_[it->second];
    std::int64_t m = 0;
    while (m < c.pages && i + m < limit && c.key[static_cast<std::size_t>(m)] == hashes[i + m]) ++m;
    i += m;
    if (locked != nullptr && c.lock_ref > 0) *locked += m;
    if (m < c.pages) break;
    node = it->second;
  }
  return i;
}

std::int64_t RadixAllocator::match_length(const std::vector<std::uint64_t>& hashes, std::int64_t limit) const {
  return match_length(hashes.data(), std::min<std::int64_t>(limit, static_cast<std::int64_t>(hashes.size())));
}

bool RadixAllocator::holds(const std::vector<std::uint64_t>& hashes) const {
  return match_length(hashes, static_cast<std::int64_t>(hashes.size())) == static_cast<std::int64_t>(hashes.size());
}

RadixAllocator::NodeId RadixAllocator::split(NodeId id, std::int64_t at) {
  // radix_cache.py _split_node: the new node takes the first `at` pages and the child's lock
  // count (every request locking the child locks the path through it).
  const NodeId parent = nodes_[id].parent;
  const NodeId top = new_node(parent, true);
  Node& c = nodes_[id];
  Node& t = nodes_[top];
  t.key.assign(c.key.begin(), c.key.begin() + at);
  t.pages = at;
  t.lock_ref = c.lock_ref;
  c.key.erase(c.key.begin(), c.key.begin() + at);
  c.pages -= at;
  c.parent = top;
  t.children.emplace(c.key.front(), id);
  nodes_[parent].children[t.key.front()] = top;
  return top;
}

RadixAllocator::NodeId RadixAllocator::match_prefix(const std::vector<std::uint64_t>& hashes, std::int64_t limit,
                                                    std::int64_t& matched) {
  // radix_cache.py _match_prefix_helper: every node on the way gets the access time; a match
  // ending inside a node splits it there.
  NodeId node = kRoot;
  nodes_[kRoot].last_access = clock_;
  std::int64_t i = 0;
  while (i < limit) {
    const auto it = nodes_[node].children.find(hashes[static_cast<std::size_t>(i)]);
    if (it == nodes_[node].children.end()) break;
    NodeId child = it->second;
    nodes_[child].last_access = clock_;
    std::int64_t m = 0;
    while (m < nodes_[child].pages && i + m < limit &&
           nodes_[child].key[static_cast<std::size_t>(m)] == hashes[static_cast<std::size_t>(i + m)]) {
      ++m;
    }
    i += m;
    const bool inside = m < nodes_[child].pages;
    if (inside) child = split(child, m);
    node = child;
    if (inside) break;
  }
  matched = i;
  return node;
}

void RadixAllocator::inc_lock_ref(NodeId id) {
  for (; id != kRoot; id = nodes_[id].parent) {
    Node& n = nodes_[id];
    if (n.lock_ref == 0) evictable_pages_ -= n.pages;
    else shared_pages_ += n.pages;
    ++n.lock_ref;
  }
}

void RadixAllocator::dec_lock_ref(NodeId id) {
  for (; id != kRoot; id = nodes_[id].parent) {
    Node& n = nodes_[id];
    if (n.lock_ref == 1) evictable_pages_ += n.pages;
    else shared_pages_ -= n.pages;
    --n.lock_ref;
  }
}

void RadixAllocator::cache_prompt(Request& r) {
  // cache_unfinished_req: insert the request's page-aligned computed prompt (the full pages
  // with an identity), free its copies of pages the tree already had (another request
  // inserted them meanwhile), and lock the new end of its path instead of the old.
  const std::int64_t upto = std::min<std::int64_t>(static_cast<std::int64_t>(r.hashes.size()),
                                                   std::min(r.tokens, r.prompt_tokens) / page_tokens_);
  // _insert_helper: walk the matching nodes from the root, touching them, splitting the last
  // one where the request's pages part from it.
  NodeId node = kRoot;
  nodes_[kRoot].last_access = clock_;
  std::int64_t i = 0;
  while (i < upto) {
    const auto it = nodes_[node].children.find(r.hashes[static_cast<std::size_t>(i)]);
    if (it == nodes_[node].children.end()) break;
    NodeId child = it->second;
    nodes_[child].last_access = clock_;
    std::int64_t m = 0;
    while (m < nodes_[child].pages && i + m < upto &&
           nodes_[child].key[static_cast<std::size_t>(m)] == r.hashes[static_cast<std::size_t>(i + m)]) {
      ++m;
    }
    if (m < nodes_[child].pages) child = split(child, m);
    i += m;
    node = child;
  }
  check(i >= r.tree_pages, "radix: a request's locked path is missing from the tree");
  own_pages_ -= i - r.tree_pages;  // duplicates: the tree's pages replace the request's copies
  if (i < upto) {
    const NodeId leaf = new_node(node, true);
    Node& n = nodes_[leaf];
    n.key.assign(r.hashes.begin() + i, r.hashes.begin() + upto);
    n.pages = upto - i;
    nodes_[node].children.emplace(n.key.front(), leaf);
    tree_pages_ += n.pages;
    evictable_pages_ += n.pages;  // a new node is unlocked until the request locks it below
    own_pages_ -= n.pages;
    node = leaf;
  }
  inc_lock_ref(node);
  dec_lock_ref(r.last_node);
  r.last_node = node;
  r.tree_pages = upto;
}

void RadixAllocator::add_unmatchable(NodeId parent, std::int64_t pages) {
  const NodeId leaf = new_node(parent, false);
  nodes_[leaf].pages = pages;
  ++nodes_[parent].unmatchable_children;
  tree_pages_ += pages;
  // Unlocked from the start; dec_lock_ref of its parent's path cannot reach it.
  evictable_pages_ += pages;
}

void RadixAllocator::delete_leaf(NodeId id) {
  Node& n = nodes_[id];
  Node& parent = nodes_[n.parent];
  if (n.matchable) parent.children.erase(n.key.front());
  else --parent.unmatchable_children;
  tree_pages_ -= n.pages;
  evictable_pages_ -= n.pages;
  n = Node{};
  free_nodes_.push_back(id);
}

std::int64_t RadixAllocator::evict(std::int64_t pages) {
  // radix_cache.py evict: a heap of the unlocked leaves by last access; pop one, free all its
  // pages, delete it, and push its parent if that became an unlocked leaf.
  using Entry = std::tuple<std::uint64_t, std::uint64_t, NodeId>;  // (last access, created, id)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  for (NodeId id = 1; id < nodes_.size(); ++id) {
    const Node& n = nodes_[id];
    if (n.alive && n.lock_ref == 0 && is_leaf(n)) heap.emplace(n.last_access, n.created, id);
  }
  std::int64_t freed = 0;
  while (freed < pages && !heap.empty()) {
    const NodeId id = std::get<2>(heap.top());
    heap.pop();
    const NodeId parent = nodes_[id].parent;
    freed += nodes_[id].pages;
    delete_leaf(id);
    const Node& p = nodes_[parent];
    if (parent != kRoot && p.lock_ref == 0 && is_leaf(p)) heap.emplace(p.last_access, p.created, parent);
  }
  evicted_pages_ += freed;
  return freed;
}

void RadixAllocator::note_high_water() { high_water_pages_ = std::max(high_water_pages_, own_pages_ + tree_pages_); }

// --- the allocator's operations -------------------------------------------------------------

std::int64_t RadixAllocator::match_limit(const AdmitInfo& info) const {
  if (info.prompt_tokens <= 0) return 0;
  // adjust_max_prefix_ids: max_prefix_len = len(fill_ids) - 1, where fill_ids is the prompt
  // and, for a request back from retraction, the tokens it had generated.
  return std::min<std::int64_t>((info.prompt_tokens + info.resumed_tokens - 1) / page_tokens_,
                                static_cast<std::int64_t>(info.prefix_hashes.size()));
}

std::int64_t RadixAllocator::cached_tokens(const AdmitInfo& info) const {
  return match_length(info.prefix_hashes.data(), match_limit(info)) * page_tokens_;
}

std::int64_t RadixAllocator::roomless_hit_bytes(const AdmitInfo& info) const {
  // A matched page some live request locks is in use already: locking it again takes no free
  // room. An unlocked one is evictable, counted free, and locking it takes that room.
  std::int64_t locked = 0;
  match_length(info.prefix_hashes.data(), match_limit(info), &locked);
  return checked_mul(locked, bytes_per_page_, "radix: hit bytes");
}

Outcome RadixAllocator::admit(RequestSlot slot, const AdmitInfo& info) {
  if (slot >= requests_.size()) requests_.resize(slot + 1);
  Request& r = requests_[slot];
  check(!r.live, "radix: admitting a live request slot");
  ++clock_;
  r = Request{};
  r.live = true;
  r.prompt_tokens = info.prompt_tokens;
  r.n = info.n;
  const auto hashed = std::min<std::size_t>(info.prefix_hashes.size(),
                                            static_cast<std::size_t>(info.prompt_tokens / page_tokens_));
  r.hashes.assign(info.prefix_hashes.begin(), info.prefix_hashes.begin() + static_cast<std::ptrdiff_t>(hashed));
  std::int64_t matched = 0;
  r.last_node = match_prefix(r.hashes, match_limit(info), matched);
  // The matched pages exist already: locking them takes no room (an unlocked page becomes
  // allocated again).
  inc_lock_ref(r.last_node);
  r.tree_pages = matched;
  r.tokens = matched * page_tokens_;
  check_after_operation(*this);
  return Outcome::ok;
}

Outcome RadixAllocator::grow(RequestSlot slot, std::int64_t tokens, std::int64_t step_tokens) {
  Request& r = requests_[slot];
  check(r.live && tokens >= r.tokens && step_tokens >= 1, "radix: grow outside its contract");
  const bool fork = !r.forked && r.n > 1 && tokens > r.prompt_tokens;
  const std::int64_t need = held_pages(r, tokens, r.forked || fork) - held_pages(r, r.tokens, r.forked);
  if (need > 0 && capacity_bytes_ > 0) {
    // The token pool's alloc, preceded by the scheduler's evict when it lacks room
    // (mem_cache/common.py evict_from_tree_cache: with the standard allocator, fewer free
    // than num_tokens evicts num_tokens, not the shortfall; with sliding windows, SGLang's
    // SWA allocator evicts the shortfall). Nothing changes when even evicting every unlocked
    // page would not make room.
    const std::int64_t free_now = capacity_pages_ - own_pages_ - tree_pages_;
    if (need > free_now + evictable_pages_) return Outcome::no_room;
    if (need > free_now) evict(windows_ ? need - free_now : need);
  }
  ++clock_;
  own_pages_ += need;
  r.forked = r.forked || fork;
  const bool prefill = r.tokens < r.prompt_tokens;
  r.tokens = tokens;
  // The step's pages are all taken before cache_unfinished_req frees the duplicates.
  note_high_water();
  // A prefill step (one that started inside the prompt): cache_unfinished_req.
  if (prefill) cache_prompt(r);
  check_after_operation(*this);
  return Outcome::ok;
}

void RadixAllocator::preempted(RequestSlot slot) {
  Request& r = requests_[slot];
  check(r.live, "radix: preempting a request that is not live");
  r.retracted = true;
}

void RadixAllocator::release(RequestSlot slot) {
  Request& r = requests_[slot];
  check(r.live, "radix: releasing a request that is not live");
  ++clock_;
  // cache_finished_req: insert the prompt as cache_unfinished_req does, then every sequence's
  // further full pages (unmatchable: no identity), free the partial pages, unlock the path.
  // A preempted request (a retraction, is_insert=False, or a swap-out) inserts nothing,
  // touches nothing, and frees all it holds beyond its path: the prompt pages its prefill
  // steps inserted are the tree's.
  if (!r.retracted) cache_prompt(r);
  const std::int64_t full = r.tokens / page_tokens_;
  if (capacity_bytes_ == 0 || r.retracted) {
    // Unbounded, nothing is ever evicted: pages no request can match would only pile up in
    // the reserved bytes (the high-water mark of a pool that never needed them), so they are
    // freed. Bounded, they take room and compete in the LRU order, as in SGLang.
  } else if (!r.forked) {
    if (full > r.tree_pages) add_unmatchable(r.last_node, full - r.tree_pages);
  } else {
    const std::int64_t shared = r.prompt_tokens / page_tokens_;
    if (full > r.tree_pages) add_unmatchable(r.last_node, full - r.tree_pages);  // sample 0
    for (std::int64_t j = 1; j < r.n; ++j) {
      if (full > shared) add_unmatchable(r.last_node, full - shared);
    }
  }
  own_pages_ -= held_pages(r, r.tokens, r.forked) - r.tree_pages;
  dec_lock_ref(r.last_node);
  r.live = false;
  r.hashes.clear();
  note_high_water();
  check_after_operation(*this);
}

Footprint RadixAllocator::footprint(RequestSlot slot, std::size_t group, std::int64_t tokens) const {
  const Request& r = requests_[slot];
  // Pages are whole from the last grow until the next event: the room past the sequence's
  // end is tail (none at page 1); the prompt positions in each further sample's own pages
  // are duplicates.
  const std::int64_t hi = pages_for(r.tokens) * page_tokens_;
  const std::int64_t split = r.forked ? std::min((r.prompt_tokens / page_tokens_) * page_tokens_, hi) : hi;
  const std::int64_t copies = r.forked ? r.n : 1;
  const auto at = [&](std::int64_t len) {
    return classify({{0, split, 1}, {split, hi, copies}}, {len, r.prompt_tokens, window_tokens_[group], 0},
                    Unfilled::tail);
  };
  return with_slopes(at(tokens), at(tokens + 1));
}

std::int64_t RadixAllocator::next_event_tokens(RequestSlot slot) const {
  const Request& r = requests_[slot];
  const std::int64_t end = pages_for(r.tokens) * page_tokens_;
  std::int64_t next = end + 1;  // the first token that needs a new page
  const auto consider = [&](std::int64_t at) {
    if (at > r.tokens) next = std::min(next, at);
  };
  consider(end);  // the last page fills: a release from then on caches it whole
  if (!r.forked && r.n > 1) consider(r.prompt_tokens + 1);
  for (const std::int64_t w : window_tokens_) {
    if (w == 0) continue;
    // The window's start crossing a region boundary changes the footprint's slopes.
    consider(w);
    consider((r.prompt_tokens / page_tokens_) * page_tokens_ + w);
    consider(r.prompt_tokens + w);
  }
  return next;
}

std::int64_t RadixAllocator::peak_bytes(const AdmitInfo& info, std::int64_t tokens) const {
  // Without any hit (the bound): the prompt's full pages once, then each sample's own pages.
  std::int64_t pages = ceil_div(tokens, page_tokens_);
  if (tokens > info.prompt_tokens && info.n > 1) {
    const std::int64_t shared = info.prompt_tokens / page_tokens_;
    pages = shared + info.n * (pages - shared);
  }
  return checked_mul(pages, bytes_per_page_, "peak bytes");
}

PoolState RadixAllocator::pool() const {
  PoolState p;
  p.capacity_bytes = capacity_bytes_;
  if (capacity_pages_ > 0) p.unit_bytes = bytes_per_page_;
  // Unbounded, absurd page sizes or prompts can take the bytes past 64 bits: an input error.
  p.reserved_bytes =
      capacity_bytes_ > 0 ? capacity_bytes_ : checked_mul(high_water_pages_, bytes_per_page_, "radix: reserved bytes");
  p.free_bytes = p.reserved_bytes - checked_mul(own_pages_ + tree_pages_ - evictable_pages_, bytes_per_page_,
                                                "radix: allocated bytes");
  p.largest_free_extent_bytes = p.free_bytes;  // any free slot serves any request
  p.evictable_bytes = checked_mul(evictable_pages_, bytes_per_page_, "radix: evictable bytes");
  p.evicted_bytes = checked_mul(evicted_pages_, bytes_per_page_, "evicted bytes");
  return p;
}

void RadixAllocator::check_invariants() const {
  // Lock counts from the live requests' paths, and each path spells the request's hashes.
  std::vector<std::int64_t> locks(nodes_.size(), 0);
  std::int64_t own = 0;
  for (const Request& r : requests_) {
    if (!r.live) continue;
    // Walked from its end: each node's first page must be the request's page at that depth
    // (a node's other pages follow from the chained identity; checking each of them would
    // make every operation cost the prompt's length).
    std::int64_t depth = r.tree_pages;
    check(depth <= static_cast<std::int64_t>(r.hashes.size()), "radix: a request's path is longer than its prompt");
    for (NodeId id = r.last_node; id != kRoot; id = nodes_[id].parent) {
      const Node& n = nodes_[id];
      check(n.alive && n.matchable, "radix: a request's path runs through a dead node");
      ++locks[id];
      depth -= n.pages;
      check(depth >= 0 && n.key.front() == r.hashes[static_cast<std::size_t>(depth)],
            "radix: a request's path is not its prompt's pages");
    }
    check(depth == 0, "radix: a request's path does not hold its prefix pages");
    own += held_pages(r, r.tokens, r.forked) - r.tree_pages;
  }
  check(own == own_pages_, "radix: the requests' own pages do not add up");
  std::int64_t tree = 0, evictable = 0, shared = 0;
  for (NodeId id = 1; id < nodes_.size(); ++id) {
    const Node& n = nodes_[id];
    if (!n.alive) continue;
    check(n.pages > 0, "radix: an empty node");
    check(n.lock_ref == locks[id], "radix: a node's lock count is not the requests through it");
    const Node& parent = nodes_[n.parent];
    check(parent.alive, "radix: a node's parent is dead");
    check(n.parent == kRoot || parent.lock_ref >= n.lock_ref, "radix: a parent is locked less than its child");
    if (n.matchable) {
      check(static_cast<std::int64_t>(n.key.size()) == n.pages, "radix: a node's key and pages disagree");
      const auto it = parent.children.find(n.key.front());
      check(it != parent.children.end() && it->second == id, "radix: a node is missing from its parent's children");
    } else {
      check(is_leaf(n) && n.lock_ref == 0, "radix: an unmatchable node has children or a lock");
    }
    tree += n.pages;
    if (n.lock_ref == 0) evictable += n.pages;
    else shared += (n.lock_ref - 1) * n.pages;
  }
  check(tree == tree_pages_ && evictable == evictable_pages_ && shared == shared_pages_,
        "radix: the tree's page counts do not add up");
  check(capacity_bytes_ == 0 || own_pages_ + tree_pages_ <= capacity_pages_, "radix: more pages than the pool holds");
}

namespace {

std::unique_ptr<Allocator> make_radix(AllocatorParams& p, const KvLayout& layout, const AllocatorLimits& limits) {
  RadixAllocatorOptions o;
  o.page_tokens = p.positive("page", o.page_tokens);
  o.capacity_bytes = limits.capacity_bytes;
  return std::make_unique<RadixAllocator>(layout, o);
}

}  // namespace

// "radix[:page=1]": its row of the allocator registry (allocator_kinds.def names it).
extern constinit const AllocatorKind kRadixKind{
    "radix", "radix[:page=1]",
    "      SGLang's radix cache: a token pool (pages of `page` positions) under a radix tree of\n"
    "      the prompts requests computed, matched at admission (the last prompt token is always\n"
    "      computed), inserted after every prefill chunk and at release, unlocked nodes kept\n"
    "      (evictable) and evicted whole, least recently used leaf first, only for room.\n",
    "page=1", make_radix};

}  // namespace kvsim::detail
