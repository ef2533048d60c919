// The radix allocator (SGLang's RadixCache over its token pool), driven directly, against
// hand-derived page counts. One full-attention group of 1 byte per position, so bytes and
// positions are the same number. The rules are radix_cache.py's (cited in the allocator's
// header): match_prefix at admission up to prompt - 1 tokens, cache_unfinished_req after
// every prefill step, cache_finished_req at release, LRU eviction of unlocked leaves.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "block_hash.h"
#include "kvsim/error.h"
#include "paged_allocator.h"
#include "radix_allocator.h"
#include "test_support.h"

using namespace kvsim;
using namespace kvsim::detail;

namespace {

RadixAllocator radix(std::int64_t page = 1, std::int64_t capacity = 0) {
  RadixAllocatorOptions o;
  o.page_tokens = page;
  o.capacity_bytes = capacity;
  return RadixAllocator(test::unit_layout(), o);
}

AdmitInfo info_of(std::int64_t prompt, const std::vector<std::uint64_t>& hashes, std::int64_t n = 1) {
  AdmitInfo info;
  info.prompt_tokens = prompt;
  info.planned_output_tokens = 10;
  info.output_tokens = 10;
  info.n = n;
  info.prefix_hashes = hashes;
  return info;
}

// Page identities for page 1: position i of family f is f * 1'000'000 + i, so two prompts of
// one family agree exactly on their common length (what a hash chain per token gives).
std::vector<std::uint64_t> family(std::uint64_t f, std::int64_t tokens) {
  std::vector<std::uint64_t> out;
  for (std::int64_t i = 0; i < tokens; ++i) out.push_back(f * 1'000'000 + static_cast<std::uint64_t>(i));
  return out;
}

// The first `common` identities of family `a`, then family `b`'s from there on.
std::vector<std::uint64_t> forked(std::uint64_t a, std::uint64_t b, std::int64_t common, std::int64_t tokens) {
  std::vector<std::uint64_t> out = family(a, common);
  const std::vector<std::uint64_t> rest = family(b, tokens);
  out.insert(out.end(), rest.begin() + common, rest.end());
  return out;
}

std::int64_t allocated(const Allocator& a) { return a.pool().reserved_bytes - a.pool().free_bytes; }

std::vector<std::uint64_t> hashes_at(const std::vector<std::uint64_t>& tokens, std::int64_t page) {
  std::vector<std::uint64_t> out;
  BlockHasher h(page, &out);
  for (const std::uint64_t t : tokens) h.add(t);
  return out;
}

}  // namespace

TEST_CASE("radix: the second request with the same prompt hits all but its last token") {
  auto a = radix();
  CHECK(a.name() == "radix:page=1");
  CHECK(a.prefix_block_tokens() == 1);
  const auto h = family(1, 40);
  // A: prompt 40, nothing cached. Prefill + first token: 41 positions, no tail at page 1.
  CHECK(a.cached_tokens(info_of(40, h)) == 0);
  REQUIRE(a.admit(0, info_of(40, h)) == Outcome::ok);
  REQUIRE(a.grow(0, 41, 41) == Outcome::ok);
  CHECK(a.footprint(0, 0, 41).allocated == 41);
  CHECK(a.footprint(0, 0, 41).tail == 0);
  // cache_unfinished_req after the prefill put the 40 prompt tokens in the tree, locked.
  CHECK(a.tree_pages() == 40);
  CHECK(a.evictable_pages() == 0);
  CHECK(allocated(a) == 41);
  // cache_finished_req: the prompt is unlocked, 40 evictable, nothing allocated. The 41st
  // position (a generated token) carries no identity: unbounded, it is freed (bounded, it
  // would join the tree as a leaf no one can match; see the eviction tests).
  a.release(0);
  CHECK(a.tree_pages() == 40);
  CHECK(a.pool().evictable_bytes == 40);
  CHECK(allocated(a) == 0);
  CHECK(a.pool().reserved_bytes == 41);
  // B, same prompt: adjust_max_prefix_ids caps the match at 40 - 1 = 39 tokens (vLLM with
  // blocks of 16 would give 32).
  CHECK(a.cached_tokens(info_of(40, h)) == 39);
  REQUIRE(a.admit(1, info_of(40, h)) == Outcome::ok);
  CHECK(a.footprint(1, 0, 39).allocated == 39);
  CHECK(a.next_event_tokens(1) == 40);
  // The match split A's 40-token node at 39: 39 locked; token 40 stays evictable.
  CHECK(allocated(a) == 39);
  CHECK(a.pool().evictable_bytes == 1);
  // B computes token 40 and its first token: 2 new slots (the pool peaks at 40 + 2 = 42),
  // then cache_unfinished_req finds token 40 in the tree already and frees B's copy of it:
  // B holds 40 tree tokens + 1 of its own.
  REQUIRE(a.grow(1, 41, 2) == Outcome::ok);
  CHECK(a.footprint(1, 0, 41).allocated == 41);
  CHECK(allocated(a) == 41);
  CHECK(a.pool().evictable_bytes == 0);
  CHECK(a.pool().reserved_bytes == 42);
  a.check_invariants();
  a.release(1);
  CHECK(allocated(a) == 0);
  CHECK(a.pool().evictable_bytes == 40);
  a.check_invariants();
}

TEST_CASE("radix: under a bounded pool a new request evicts the cached prefix, which then misses") {
  // 64 slots. A (prompt 40, grown to 41, released) leaves a 40-token node and its 1-token
  // generated leaf, 41 evictable.
  auto a = radix(1, 64);
  const auto h = family(1, 40);
  REQUIRE(a.admit(0, info_of(40, h)) == Outcome::ok);
  REQUIRE(a.grow(0, 41, 41) == Outcome::ok);
  a.release(0);
  CHECK(a.pool().evictable_bytes == 41);
  CHECK(a.pool().free_bytes == 64);  // evictable is free room
  CHECK(a.cached_tokens(info_of(40, h)) == 39);
  // C (no identity) takes 60 slots: 64 - 41 = 23 are free, so 37 must be evicted. The only
  // unlocked leaf is the generated token (1); its parent, the prompt node, then becomes a
  // leaf and goes whole (40): 41 evicted, more than the 37 needed.
  REQUIRE(a.admit(1, info_of(60, {})) == Outcome::ok);
  REQUIRE(a.grow(1, 60, 60) == Outcome::ok);
  CHECK(a.evicted_pages() == 41);
  CHECK(a.pool().evicted_bytes == 41);  // what the report and the timeline read
  CHECK(a.tree_pages() == 0);
  CHECK(a.pool().evictable_bytes == 0);
  CHECK(a.cached_tokens(info_of(40, h)) == 0);  // a miss after eviction
  // 4 free slots and nothing evictable: 5 more do not fit, and nothing changes.
  CHECK(a.grow(1, 65, 5) == Outcome::no_room);
  CHECK(allocated(a) == 60);
  a.release(1);
  a.check_invariants();
}

TEST_CASE("radix: a retracted request inserts nothing, touches nothing, and frees its generated tokens") {
  // SGLang's retract_decode releases with cache_finished_req(req, is_insert=False): what the
  // tree holds of the request (the prompt its prefill inserted) stays cached and is unlocked;
  // everything else it computed goes back to the pool, and no node's access time moves.
  // 90 slots, page 1.
  auto a = radix(1, 90);
  const auto ha = family(1, 30);
  const auto hb = family(2, 30);
  // A: prompt 30, prefilled (the node of 30 inserted and locked at this clock), 1 generated.
  REQUIRE(a.admit(0, info_of(30, ha)) == Outcome::ok);
  REQUIRE(a.grow(0, 31, 31) == Outcome::ok);
  // B: prompt 30, prefilled, completed with 1 generated: its 30 and a 1-token leaf cached,
  // touched later than A's node.
  REQUIRE(a.admit(1, info_of(30, hb)) == Outcome::ok);
  REQUIRE(a.grow(1, 31, 31) == Outcome::ok);
  a.release(1);
  CHECK(a.pool().evictable_bytes == 31);
  // A decodes to 35 and is retracted: its 30 prompt tokens stay (now unlocked), its 5 other
  // positions are freed, not cached.
  REQUIRE(a.grow(0, 35, 1) == Outcome::ok);
  a.preempted(0);
  a.release(0);
  CHECK(a.pool().evictable_bytes == 30 + 31);
  CHECK(a.tree_pages() == 61);
  CHECK(allocated(a) == 0);
  CHECK(a.pool().free_bytes == 90);
  CHECK(a.evicted_pages() == 0);
  CHECK(a.cached_tokens(info_of(30, ha)) == 29);  // back, it finds its prompt
  // C (no identity) takes 30: 90 - 61 = 29 are free, so evict(30). A's node was last touched
  // at A's prefill, before B's release, so it is the least recently used leaf and goes alone.
  REQUIRE(a.admit(2, info_of(30, {})) == Outcome::ok);
  REQUIRE(a.grow(2, 30, 30) == Outcome::ok);
  CHECK(a.evicted_pages() == 30);
  CHECK(a.cached_tokens(info_of(30, ha)) == 0);
  CHECK(a.cached_tokens(info_of(30, hb)) == 29);
  a.release(2);
  a.check_invariants();
}

TEST_CASE("radix: eviction takes unlocked leaves least recently used first, never a locked node") {
  auto a = radix(1, 30);
  // R1: prompt a0..a9, grown to exactly 10 (no generated token), released: node N1 = a0..a9.
  REQUIRE(a.admit(0, info_of(10, family(1, 10))) == Outcome::ok);
  REQUIRE(a.grow(0, 10, 10) == Outcome::ok);
  a.release(0);
  // R2: a0..a4 then b5..b9. Its match (5 tokens, at time t2) splits N1 into T = a0..a4 and
  // N1' = a5..a9, both touched at t2; its prefill inserts N2 = b5..b9 under T; its release
  // (t3) walks T and N2 again. Tree: T(5) -> {N1'(5) at t2, N2(5) at t3}.
  const auto r2 = forked(1, 2, 5, 10);
  REQUIRE(a.admit(1, info_of(10, r2)) == Outcome::ok);
  CHECK(a.footprint(1, 0, 5).allocated == 5);
  REQUIRE(a.grow(1, 10, 5) == Outcome::ok);
  a.release(1);
  CHECK(a.tree_pages() == 15);
  CHECK(a.pool().evictable_bytes == 15);
  // R3: prompt 11 = R2's 10 and one more: the match (at most 10) locks T and N2.
  auto r3 = r2;
  r3.push_back(999);
  CHECK(a.cached_tokens(info_of(11, r3)) == 10);
  REQUIRE(a.admit(2, info_of(11, r3)) == Outcome::ok);
  CHECK(a.pool().evictable_bytes == 5);  // only N1'
  // R4 (no identity) takes 20: 30 - 15 = 15 free, so 5 are evicted: the only unlocked leaf,
  // N1'. The locked T and N2 stay.
  REQUIRE(a.admit(3, info_of(20, {})) == Outcome::ok);
  REQUIRE(a.grow(3, 20, 20) == Outcome::ok);
  CHECK(a.evicted_pages() == 5);
  CHECK_FALSE(a.holds(family(1, 10)));
  CHECK(a.holds(family(1, 5)));
  CHECK(a.holds(r2));
  // Full: 20 own + 10 locked = 30, nothing evictable. One more slot is refused, and the
  // locked nodes are not touched.
  CHECK(a.grow(3, 21, 1) == Outcome::no_room);
  CHECK(a.holds(r2));
  // R3 leaves without computing (t5: T and N2 touched), then R4 leaves (t6): its 20 tokens
  // are one unmatchable leaf U under the root. Tree: T(5, t5) -> N2(5, t5); U(20, t6).
  a.release(2);
  a.release(3);
  CHECK(a.pool().evictable_bytes == 30);
  // R5 takes 8 with nothing free: the least recent leaf is N2 (t5 < t6): 5 freed, and T,
  // now a childless unlocked node, joins the heap with t5 and goes next (10 >= 8). U,
  // accessed later, stays.
  REQUIRE(a.admit(4, info_of(8, {})) == Outcome::ok);
  REQUIRE(a.grow(4, 8, 8) == Outcome::ok);
  CHECK(a.evicted_pages() == 5 + 10);
  CHECK_FALSE(a.holds(family(1, 1)));
  CHECK(a.tree_pages() == 20);
  CHECK(a.pool().evictable_bytes == 20);
  a.release(4);
  a.check_invariants();
}

TEST_CASE("radix: page 1 hits the whole 40-token shared prefix, page 16 only its 32 in whole pages") {
  // Two 50-token prompts with the same first 40 token ids, hashed from the ids at each page
  // size (src/block_hash.h). Page 1: 40 equal per-token hashes, a hit of 40 (below the
  // 49-token cap). Page 16: pages 0 and 1 (tokens 0..31) are equal; page 2 (32..47) holds
  // tokens 40..47 that differ: a hit of 32. vLLM's prefix caching at block 16 also gives 32.
  std::vector<std::uint64_t> first, second;
  for (std::uint64_t t = 0; t < 50; ++t) {
    first.push_back(1000 + t);
    second.push_back(t < 40 ? 1000 + t : 5000 + t);
  }
  for (const std::int64_t page : {std::int64_t{1}, std::int64_t{16}}) {
    INFO("page " << page);
    auto a = radix(page);
    const auto h1 = hashes_at(first, page);
    const auto h2 = hashes_at(second, page);
    REQUIRE(a.admit(0, info_of(50, h1)) == Outcome::ok);
    REQUIRE(a.grow(0, 51, 51) == Outcome::ok);
    a.release(0);
    CHECK(a.cached_tokens(info_of(50, h2)) == (page == 1 ? 40 : 32));
    a.check_invariants();
  }
  PagedAllocatorOptions o;
  o.prefix_caching = true;
  PagedAllocator vllm(test::unit_layout(), o);
  const auto h1 = hashes_at(first, 16);
  REQUIRE(vllm.admit(0, info_of(50, h1)) == Outcome::ok);
  REQUIRE(vllm.grow(0, 51, 51) == Outcome::ok);
  vllm.release(0);
  CHECK(vllm.cached_tokens(info_of(50, hashes_at(second, 16))) == 32);
}

TEST_CASE("radix: page 16 holds whole pages, caches only full ones, and frees the partial tail") {
  auto a = radix(16, 1000);  // bounded (62 pages), so generated pages are cached too
  CHECK(a.name() == "radix:page=16");
  const std::vector<std::uint64_t> h = {11, 12};  // prompt 40: two full pages
  REQUIRE(a.admit(0, info_of(40, h)) == Outcome::ok);
  REQUIRE(a.grow(0, 41, 41) == Outcome::ok);
  // ceil(41 / 16) = 3 pages = 48 positions: 7 of tail.
  CHECK(a.footprint(0, 0, 41).allocated == 48);
  CHECK(a.footprint(0, 0, 41).tail == 7);
  CHECK(a.next_event_tokens(0) == 48);  // the last page fills: a release then caches it
  a.release(0);
  // The 2 prompt pages stay (32); 41 / 16 = 2 full pages, so no generated page; the
  // partial third page is freed.
  CHECK(a.pool().evictable_bytes == 32);
  CHECK(a.tree_pages() == 2);
  // A request grown to 48 tokens fills its third page: released, that page is cached too.
  REQUIRE(a.admit(1, info_of(40, {21, 22})) == Outcome::ok);
  REQUIRE(a.grow(1, 41, 41) == Outcome::ok);
  REQUIRE(a.grow(1, 48, 1) == Outcome::ok);
  a.release(1);
  CHECK(a.pool().evictable_bytes == 32 + 48);
  a.check_invariants();
}

TEST_CASE("radix: identity given per 512-token block matches at page 1 only at block boundaries") {
  // Mooncake's hash_ids identify 512-token blocks; the engine converts them to the
  // allocator's page size (rehash_prefix): token k gets an identity iff its block
  // floor(k / 512) has a given hash, derived from that hash and k. A: 1100 tokens, hash_ids
  // {1, 2} (1024 tokens identified; tokens 1024..1099 have none). B: {1, 3}.
  std::vector<std::uint64_t> a_ids, b_ids, c_ids;
  rehash_prefix({1, 2}, 512, 1100, 1, a_ids);
  rehash_prefix({1, 3}, 512, 1100, 1, b_ids);
  rehash_prefix({1, 2}, 512, 1100, 1, c_ids);
  CHECK(a_ids.size() == 1024);
  auto a = radix();
  REQUIRE(a.admit(0, info_of(1100, a_ids)) == Outcome::ok);
  REQUIRE(a.grow(0, 1101, 1101) == Outcome::ok);
  a.release(0);
  // B agrees on block 0 only: 512 tokens, not one more, although its tokens 512.. may be
  // the same ids: the trace does not say.
  CHECK(a.cached_tokens(info_of(1100, b_ids)) == 512);
  // C, the same blocks as A: 1024, the identified part; the last 76 tokens have no identity.
  CHECK(a.cached_tokens(info_of(1100, c_ids)) == 1024);
  a.check_invariants();
}

TEST_CASE("rehash_prefix: identities agree up to block k only when every given hash up to it agrees") {
  // Given per 4 tokens, converted to blocks of 2: block k lies in given block floor((2k + 1) / 4).
  // A {1, 2} and B {9, 2} differ in given block 0 and agree in given block 1, as hashes of a
  // block's contents alone would; their blocks 2 and 3 (in given block 1) must still differ.
  // C {1, 2} is A again: every identity equal. At the same size (given 4, blocks of 4) too.
  std::vector<std::uint64_t> a, b, c, a4, b4;
  rehash_prefix({1, 2}, 4, 8, 2, a);
  rehash_prefix({9, 2}, 4, 8, 2, b);
  rehash_prefix({1, 2}, 4, 8, 2, c);
  rehash_prefix({1, 2}, 4, 8, 4, a4);
  rehash_prefix({9, 2}, 4, 8, 4, b4);
  REQUIRE(a.size() == 4);
  REQUIRE(b.size() == 4);
  CHECK(a == c);
  for (std::size_t k = 0; k < 4; ++k) CHECK(a[k] != b[k]);
  // Blocks within one given block still differ from one another (their position is mixed in).
  CHECK(a[0] != a[1]);
  REQUIRE(a4.size() == 2);
  CHECK(a4[0] != b4[0]);
  CHECK(a4[1] != b4[1]);
  // The same values given at another size name other spans: {1, 2} per 8 tokens is no
  // evidence that the first 4 tokens are A's, at blocks of 2 or of 1.
  std::vector<std::uint64_t> d, a1, d1;
  rehash_prefix({1, 2}, 8, 8, 2, d);
  rehash_prefix({1, 2}, 4, 8, 1, a1);
  rehash_prefix({1, 2}, 8, 8, 1, d1);
  REQUIRE(d.size() == 4);
  for (std::size_t k = 0; k < 4; ++k) CHECK(d[k] != a[k]);
  REQUIRE(a1.size() == 8);
  REQUIRE(d1.size() == 8);
  for (std::size_t k = 0; k < 8; ++k) CHECK(a1[k] != d1[k]);
}

TEST_CASE("radix: two requests prefilling the same prompt at once share it after their chunks") {
  // A and B arrive with the same 48-token prompt and nothing cached; both are admitted
  // before either computes. A's first chunk (16) is inserted and locked; B's first chunk
  // computes the same 16, and cache_unfinished_req frees B's copies for the tree's: 16 held
  // by two requests, counted once (shared_positions 16).
  auto a = radix();
  const auto h = family(7, 48);
  REQUIRE(a.admit(0, info_of(48, h)) == Outcome::ok);
  REQUIRE(a.admit(1, info_of(48, h)) == Outcome::ok);
  REQUIRE(a.grow(0, 16, 16) == Outcome::ok);
  REQUIRE(a.grow(1, 16, 16) == Outcome::ok);
  CHECK(a.shared_positions(0) == 16);
  CHECK(a.footprint(0, 0, 16).allocated + a.footprint(1, 0, 16).allocated - a.shared_positions(0) == 16);
  CHECK(allocated(a) == 16);
  // The pool took both copies before the duplicate was freed: reserved 32.
  CHECK(a.pool().reserved_bytes == 32);
  // A finishes its prefill (48 + first token); B's second chunk (to 32) is in the tree
  // already: shared 32; then B completes too.
  REQUIRE(a.grow(0, 49, 33) == Outcome::ok);
  REQUIRE(a.grow(1, 32, 16) == Outcome::ok);
  CHECK(a.shared_positions(0) == 32);
  CHECK(allocated(a) == 49 + 32 - 32);
  a.release(0);
  CHECK(a.shared_positions(0) == 0);
  a.release(1);
  a.check_invariants();
}

TEST_CASE("radix: the registry builds it by name, with its page parameter") {
  const KvLayout layout = test::unit_layout();
  CHECK(make_allocator(parse_allocator_spec("radix", "t"), layout)->name() == "radix:page=1");
  CHECK(make_allocator(parse_allocator_spec("radix:page=16", "t"), layout)->name() == "radix:page=16");
  CHECK_THROWS_AS(make_allocator(parse_allocator_spec("radix:page=0", "t"), layout), InputError);
  CHECK_THROWS_AS(make_allocator(parse_allocator_spec("radix:block=16", "t"), layout), InputError);
}
