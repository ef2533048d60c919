// The paged allocator with prefix caching on (vLLM v1's automatic prefix caching), driven
// directly, against hand-derived block counts. One full-attention group of 1 byte per
// position, so bytes and positions are the same number; blocks of 16 positions.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "allocator_registry.h"
#include "kvsim/error.h"
#include "paged_allocator.h"
#include "test_support.h"

using namespace kvsim;
using namespace kvsim::detail;

namespace {

constexpr std::int64_t kBlock = 16;

AdmitInfo prefix_info(std::int64_t prompt, std::int64_t output, const std::vector<std::uint64_t>& hashes,
                      std::int64_t n = 1) {
  AdmitInfo info;
  info.prompt_tokens = prompt;
  info.planned_output_tokens = output;
  info.output_tokens = output;
  info.n = n;
  info.prefix_hashes = hashes;
  return info;
}

PagedAllocator caching(std::int64_t capacity = 0, const KvLayout& layout = test::unit_layout()) {
  PagedAllocatorOptions o;
  o.block_tokens = kBlock;
  o.capacity_bytes = capacity;
  o.prefix_caching = true;
  return PagedAllocator(layout, o);
}

std::int64_t allocated(const Allocator& a) { return a.pool().reserved_bytes - a.pool().free_bytes; }

const std::vector<std::uint64_t> kTwo = {101, 102};
const std::vector<std::uint64_t> kThree = {101, 102, 103};

}  // namespace

TEST_CASE("prefix cache: a released prompt's full blocks are hits for the next request with its hashes") {
  auto a = caching();
  CHECK(a.prefix_block_tokens() == kBlock);
  CHECK(a.name() == "paged:block=16,prefix-caching=on");
  // A: prompt 40 = 2 full blocks (hashes h1, h2) + 8 positions. Nothing is cached yet.
  CHECK(a.cached_tokens(prefix_info(40, 10, kTwo)) == 0);
  REQUIRE(a.admit(0, prefix_info(40, 10, kTwo)) == Outcome::ok);
  REQUIRE(a.grow(0, 41, 41) == Outcome::ok);  // prefill + first token: ceil(41 / 16) = 3 blocks
  a.release(0);
  // B, same two hashes, prompt 40: both blocks hit; min(2, floor(39 / 16) = 2) = 2 -> 32.
  CHECK(a.cached_tokens(prefix_info(40, 10, kTwo)) == 32);
  // Prompt 32 with the same hashes: the last token must be computed, so at most
  // floor(31 / 16) = 1 block -> 16 (vLLM recomputes the whole last block).
  CHECK(a.cached_tokens(prefix_info(32, 10, kTwo)) == 16);
  // A different first hash misses everything, even with the second one cached.
  CHECK(a.cached_tokens(prefix_info(40, 10, {999, 102})) == 0);
  // Admitted, B holds the 32 cached positions already: 2 blocks, no tail, and its next
  // event is the first token past them.
  REQUIRE(a.admit(1, prefix_info(40, 10, kTwo)) == Outcome::ok);
  CHECK(a.footprint(1, 0, 32).allocated == 32);
  CHECK(a.footprint(1, 0, 32).tail == 0);
  CHECK(a.next_event_tokens(1) == 33);
  CHECK(allocated(a) == 32);
  // Its first grow continues from 32: the rest of the prompt and the first token take
  // one new block (positions 32..47), so 3 blocks as A had, and the pool never grew past
  // A's 3 blocks (B reused A's two cached blocks and its freed tail).
  REQUIRE(a.grow(1, 41, 9) == Outcome::ok);
  CHECK(a.footprint(1, 0, 41).allocated == 48);
  CHECK(a.pool().reserved_bytes == 48);
  a.check_invariants();
  a.release(1);
  CHECK(allocated(a) == 0);
  a.check_invariants();
}

TEST_CASE("prefix cache: blocks two live requests hold are shared positions, counted once by the pool") {
  auto a = caching();
  REQUIRE(a.admit(0, prefix_info(40, 10, kTwo)) == Outcome::ok);
  REQUIRE(a.grow(0, 41, 41) == Outcome::ok);  // A: 3 blocks, the first 2 cached while live
  CHECK(a.shared_positions(0) == 0);
  // B hits A's 2 live blocks (a running request's blocks are hits too, as in vLLM).
  CHECK(a.cached_tokens(prefix_info(40, 10, kTwo)) == 32);
  REQUIRE(a.admit(1, prefix_info(40, 10, kTwo)) == Outcome::ok);
  REQUIRE(a.grow(1, 41, 9) == Outcome::ok);
  // Each footprint counts its 3 blocks (48); 2 blocks are held by 2 requests: (2 - 1) x 2
  // blocks x 16 = 32 shared positions; the pool holds 48 + 48 - 32 = 64 = 4 blocks.
  CHECK(a.footprint(0, 0, 41).allocated == 48);
  CHECK(a.footprint(1, 0, 41).allocated == 48);
  CHECK(a.shared_positions(0) == 32);
  CHECK(allocated(a) == 48 + 48 - 32);
  a.check_invariants();
  // A leaves: its tail block is freed, the 2 shared blocks stay with B alone.
  a.release(0);
  CHECK(a.shared_positions(0) == 0);
  CHECK(allocated(a) == 48);
  CHECK(a.pool().evictable_bytes == 0);
  a.release(1);
  CHECK(a.pool().evictable_bytes == 32);
  a.check_invariants();
}

TEST_CASE("prefix cache: under a bounded pool, new blocks evict cached ones and the prefix then misses") {
  // 4 blocks of 16 bytes. A (prompt 40, 41 tokens) holds blocks 0, 1 (cached) and 2.
  auto a = caching(64);
  REQUIRE(a.admit(0, prefix_info(40, 10, kTwo)) == Outcome::ok);
  REQUIRE(a.grow(0, 41, 41) == Outcome::ok);
  a.release(0);
  CHECK(a.pool().evictable_bytes == 32);
  CHECK(a.pool().free_bytes == 64);  // evictable is free room
  // C (no hashes) needs all 4 blocks: the never-used block 3, then the queue: A's freed
  // blocks 2, 1, 0 (tail first), evicting the two cached ones.
  REQUIRE(a.admit(1, prefix_info(64, 1, {})) == Outcome::ok);
  REQUIRE(a.grow(1, 64, 64) == Outcome::ok);
  CHECK(a.pool().evictable_bytes == 0);
  CHECK(a.pool().free_bytes == 0);
  a.release(1);
  CHECK(a.cached_tokens(prefix_info(40, 10, kTwo)) == 0);
  // C's 4 full blocks had no given hashes, so under a budget they carry C's own identities
  // (vLLM hashes every full block): cached, evictable, and found by C alone.
  CHECK(a.pool().evictable_bytes == 64);
  a.check_invariants();
}

TEST_CASE("prefix cache: a released request's blocks are evicted tail first, so its prefix still hits") {
  // 3 blocks of 16 bytes. A: prompt 48 with 3 hashes, prefilled (48 tokens, 3 full
  // blocks, all cached) and released before its first token (a cancellation).
  auto a = caching(48);
  REQUIRE(a.admit(0, prefix_info(48, 10, kThree)) == Outcome::ok);
  REQUIRE(a.grow(0, 48, 48) == Outcome::ok);
  const auto table = a.block_table(0, 0, 0);
  a.release(0);
  CHECK(a.pool().evictable_bytes == 48);
  // The free queue is now A's blocks in reverse: [A2, A1, A0]. C needs one block and takes
  // A2, evicting hash h3.
  REQUIRE(a.admit(1, prefix_info(10, 1, {})) == Outcome::ok);
  REQUIRE(a.grow(1, 10, 10) == Outcome::ok);
  CHECK(a.block_table(1, 0, 0) == std::vector<BlockId>{table[2]});
  CHECK(a.pool().evictable_bytes == 32);
  // A request with A's 3 hashes and prompt 49 could hit min(3, floor(48 / 16)) = 3 blocks;
  // h1 and h2 remain: 32. (Head-first eviction would have lost h1 and with it everything.)
  CHECK(a.cached_tokens(prefix_info(49, 1, kThree)) == 32);
  // One more block evicts A1 (h2): the prefix is down to h1.
  REQUIRE(a.admit(2, prefix_info(10, 1, {})) == Outcome::ok);
  REQUIRE(a.grow(2, 10, 10) == Outcome::ok);
  CHECK(a.block_table(2, 0, 0) == std::vector<BlockId>{table[1]});
  CHECK(a.cached_tokens(prefix_info(49, 1, kThree)) == 16);
  CHECK(a.pool().evictable_bytes == 16);
  a.check_invariants();
}

TEST_CASE("prefix cache: evictable bytes count released cached blocks, and drop when touched or evicted") {
  auto a = caching(80);  // 5 blocks
  REQUIRE(a.admit(0, prefix_info(40, 10, kTwo)) == Outcome::ok);
  REQUIRE(a.grow(0, 41, 41) == Outcome::ok);
  CHECK(a.pool().evictable_bytes == 0);  // cached, but held by A
  a.release(0);
  // The 2 cached blocks stay, evictable (32); A's third block had no hash and is just free.
  CHECK(a.pool().evictable_bytes == 32);
  CHECK(a.pool().free_bytes == 80);
  // Touched: B takes both; they are allocated again, not evictable.
  REQUIRE(a.admit(1, prefix_info(40, 10, kTwo)) == Outcome::ok);
  CHECK(a.pool().evictable_bytes == 0);
  CHECK(a.pool().free_bytes == 80 - 32);
  a.release(1);
  CHECK(a.pool().evictable_bytes == 32);
  // Evicted: C needs all 5 blocks: the 2 never used, then the queue [A2, B1, B0] -- B's
  // release queued the cached blocks tail first behind A's uncached third.
  REQUIRE(a.admit(2, prefix_info(80, 1, {})) == Outcome::ok);
  REQUIRE(a.grow(2, 64, 64) == Outcome::ok);  // 4 blocks: 3, 4, A2, then B1 (h2) evicted
  CHECK(a.pool().evictable_bytes == 16);
  CHECK(a.cached_tokens(prefix_info(40, 10, kTwo)) == 16);
  REQUIRE(a.grow(2, 80, 16) == Outcome::ok);  // the 5th: B0 (h1) evicted
  CHECK(a.pool().evictable_bytes == 0);
  CHECK(a.cached_tokens(prefix_info(40, 10, kTwo)) == 0);
  a.release(2);
  a.check_invariants();
}

TEST_CASE("prefix cache: unbounded, nothing is ever evicted and reserved bytes include the evictable blocks") {
  auto a = caching();
  REQUIRE(a.admit(0, prefix_info(40, 10, kTwo)) == Outcome::ok);
  REQUIRE(a.grow(0, 41, 41) == Outcome::ok);
  a.release(0);
  // C, no hashes, needs 4 blocks: A's uncached third block is reused, then 3 new blocks are
  // made rather than evicting h1, h2. Reserved = high-water of allocated + evictable =
  // 4 x 16 + 32 = 96.
  REQUIRE(a.admit(1, prefix_info(64, 1, {})) == Outcome::ok);
  REQUIRE(a.grow(1, 64, 64) == Outcome::ok);
  CHECK(a.pool().evictable_bytes == 32);
  CHECK(a.pool().reserved_bytes == 96);
  CHECK(a.pool().free_bytes == 32);
  CHECK(a.cached_tokens(prefix_info(40, 10, kTwo)) == 32);
  a.release(1);
  a.check_invariants();
}

TEST_CASE("prefix cache: n = 2 samples share hit blocks copy-on-write, and count as one request") {
  auto a = caching();
  REQUIRE(a.admit(0, prefix_info(40, 10, kTwo)) == Outcome::ok);
  REQUIRE(a.grow(0, 41, 41) == Outcome::ok);
  a.release(0);
  // B: n = 2, same prefix: 32 cached positions, held once before the fork.
  REQUIRE(a.cached_tokens(prefix_info(40, 10, kTwo, 2)) == 32);
  REQUIRE(a.admit(1, prefix_info(40, 10, kTwo, 2)) == Outcome::ok);
  CHECK(a.footprint(1, 0, 32).allocated == 32);
  // Prompt rest + first token: the samples fork at 41. The 2 hit blocks are the prompt's
  // full blocks (40 / 16 = 2), shared by both samples; each sample gets its own third block
  // (positions 32..47, nothing to copy: the partial prompt block did not exist yet).
  // Footprint: 32 + 2 x 16 = 64; duplicate = prompt positions 32..39 in the second copy = 8.
  REQUIRE(a.grow(1, 41, 9) == Outcome::ok);
  const Footprint f = a.footprint(1, 0, 41);
  CHECK(f.allocated == 64);
  CHECK(f.duplicate == 8);
  const auto t0 = a.block_table(1, 0, 0);
  const auto t1 = a.block_table(1, 0, 1);
  CHECK((t0[0] == t1[0] && t0[1] == t1[1] && t0[2] != t1[2]));
  CHECK(a.shared_positions(0) == 0);  // samples of one request are not several requests
  CHECK(allocated(a) == 64);
  // C (n = 1) hits the same 2 blocks while B runs: 2 requests hold them -> 32 shared;
  // the pool holds 64 + 32 - 32 = 64.
  REQUIRE(a.admit(2, prefix_info(40, 10, kTwo)) == Outcome::ok);
  CHECK(a.shared_positions(0) == 32);
  CHECK(allocated(a) == 64 + 32 - 32);
  a.check_invariants();
  a.release(1);
  CHECK(a.shared_positions(0) == 0);
  CHECK(allocated(a) == 32);
  a.release(2);
  CHECK(a.pool().evictable_bytes == 32);
  a.check_invariants();
}

TEST_CASE("prefix cache: two requests computing the same block both cache it, lookups find the first") {
  auto a = caching(64);  // 4 blocks
  // A and B are admitted before either has computed anything: both miss.
  REQUIRE(a.admit(0, prefix_info(20, 1, {101})) == Outcome::ok);
  REQUIRE(a.admit(1, prefix_info(20, 1, {101})) == Outcome::ok);
  REQUIRE(a.grow(0, 20, 20) == Outcome::ok);  // A: blocks 0 (cached as h1) and 1
  REQUIRE(a.grow(1, 20, 20) == Outcome::ok);  // B: blocks 2 (h1 again, a duplicate) and 3
  const BlockId a0 = a.block_table(0, 0, 0)[0];
  const BlockId b0 = a.block_table(1, 0, 0)[0];
  CHECK(a0 != b0);
  CHECK(a.shared_positions(0) == 0);  // different blocks, each held by one request
  // C, admitted while both run, takes the first block cached under h1: A's. A and C then
  // hold it: 16 shared positions.
  REQUIRE(a.admit(2, prefix_info(17, 1, {101})) == Outcome::ok);
  CHECK(a.block_table(2, 0, 0) == std::vector<BlockId>{a0});
  CHECK(a.shared_positions(0) == 16);
  a.release(2);
  CHECK(a.shared_positions(0) == 0);
  a.release(0);
  a.release(1);
  CHECK(a.pool().evictable_bytes == 32);
  // The queue is [A1, A0, B1, B0]: D's 2 blocks evict A0, and h1 is still found, in B0.
  REQUIRE(a.admit(3, prefix_info(32, 1, {})) == Outcome::ok);
  REQUIRE(a.grow(3, 32, 32) == Outcome::ok);
  CHECK(a.pool().evictable_bytes == 16);
  CHECK(a.cached_tokens(prefix_info(17, 1, {101})) == 16);
  REQUIRE(a.admit(4, prefix_info(17, 1, {101})) == Outcome::ok);
  CHECK(a.block_table(4, 0, 0) == std::vector<BlockId>{b0});
  a.release(3);
  a.release(4);
  a.check_invariants();
}

TEST_CASE("prefix cache: off, the same allocator ignores hashes and shares nothing") {
  PagedAllocatorOptions o;
  o.block_tokens = kBlock;
  PagedAllocator a(test::unit_layout(), o);
  CHECK(a.prefix_block_tokens() == 0);
  REQUIRE(a.admit(0, prefix_info(40, 10, kTwo)) == Outcome::ok);
  REQUIRE(a.grow(0, 41, 41) == Outcome::ok);
  a.release(0);
  CHECK(a.cached_tokens(prefix_info(40, 10, kTwo)) == 0);
  CHECK(a.pool().evictable_bytes == 0);
  CHECK(a.name() == "paged:block=16");
}

TEST_CASE("prefix cache: the registry's parameter, its name, paged and sliding-window") {
  const KvLayout layout = test::unit_layout();
  CHECK(make_allocator(parse_allocator_spec("paged:block=16,prefix-caching=on", "test"), layout)->name() ==
        "paged:block=16,prefix-caching=on");
  CHECK(make_allocator(parse_allocator_spec("paged:prefix-caching=on", "test"), layout)->name() ==
        "paged:block=16,prefix-caching=on");
  CHECK(make_allocator(parse_allocator_spec("paged:block=32,prefix-caching=off", "test"), layout)->name() ==
        "paged:block=32");
  CHECK(make_allocator(parse_allocator_spec("sliding-window:prefix-caching=off", "test"), layout)->name() ==
        "sliding-window:block=16");
  CHECK_THROWS_WITH(make_allocator(parse_allocator_spec("paged:prefix-caching=yes", "test"), layout),
                    Catch::Contains("prefix-caching must be on or off, got \"yes\""));
  // Accepted with sliding-window too (vLLM's hybrid rules, tests/prefix_cache_window_test.cc,
  // which also has the one refusal left: under a budget, groups of different windows).
  CHECK(make_allocator(parse_allocator_spec("sliding-window:prefix-caching=on", "test"), layout)->name() ==
        "sliding-window:block=16,prefix-caching=on");
}

TEST_CASE("prefix cache: under a budget, generated blocks are cached per sample and found again by their request alone") {
  // 10 blocks of 16. X: prompt 40 (h1, h2 + 8 positions), n = 2, request key 7. Prefilled
  // with its first token (41): the samples fork, sample 1 copying the block holding the
  // prompt's tail. Decoded to 49 positions: each sample takes its 4th block. Computed: 48
  // positions (the 49th was just sampled), so logical block 2 (positions 32-47: 8 prompt
  // tokens and 8 generated) is full in both samples and cached under each sample's own
  // identity (vLLM caches every full block of each of the n child requests).
  auto a = caching(160);
  AdmitInfo x = prefix_info(40, 20, kTwo, 2);
  x.request_key = 7;
  REQUIRE(a.admit(0, x) == Outcome::ok);
  REQUIRE(a.grow(0, 41, 41) == Outcome::ok);
  REQUIRE(a.grow(0, 49, 1) == Outcome::ok);
  CHECK(allocated(a) == 6 * kBlock);  // 2 shared + 2 per sample
  a.check_invariants();
  a.release(0);  // a preemption: blocks 0, 1 (h1, h2) and each sample's block 2 stay cached
  CHECK(a.pool().evictable_bytes == 4 * kBlock);
  // Back, it looks up its prompt and 9 generated tokens (49 positions), at most
  // floor(48 / 16) = 3 blocks: all 3 found, in both samples.
  x.resumed_tokens = 9;
  CHECK(a.cached_tokens(x) == 48);
  // Another request with the same prompt and as many tokens to recompute finds the prompt's
  // 2 blocks only: the generated blocks' identity is X's.
  AdmitInfo other = x;
  other.request_key = 8;
  CHECK(a.cached_tokens(other) == 32);
  REQUIRE(a.admit(1, x) == Outcome::ok);
  // It comes back forked: blocks 0, 1 referenced by both samples, each sample its own
  // block 2. Footprint at 48: 32 + 2 x 16 = 64 allocated, of which the prompt's last 8
  // positions in the second sample's block are a duplicate; nothing else is new.
  const Footprint f = a.footprint(1, 0, 48);
  CHECK(f.allocated == 64);
  CHECK(f.duplicate == 8);
  CHECK(f.tail == 0);
  CHECK(allocated(a) == 4 * kBlock);
  CHECK(a.pool().evictable_bytes == 0);
  CHECK(a.block_table(1, 0, 0) != a.block_table(1, 0, 1));
  a.check_invariants();
  // It computes position 48 and samples the 50th: a new block per sample.
  REQUIRE(a.grow(1, 50, 2) == Outcome::ok);
  CHECK(allocated(a) == 6 * kBlock);
  a.check_invariants();
  a.release(1);
  CHECK(allocated(a) == 0);
  a.check_invariants();
}

TEST_CASE("prefix cache: unbounded, generated blocks are not cached (nothing is preempted to find them)") {
  auto a = caching();
  AdmitInfo x = prefix_info(40, 20, kTwo);
  x.request_key = 7;
  REQUIRE(a.admit(0, x) == Outcome::ok);
  REQUIRE(a.grow(0, 41, 41) == Outcome::ok);
  REQUIRE(a.grow(0, 49, 1) == Outcome::ok);  // block 2 (positions 32-47) full and computed
  a.release(0);
  CHECK(a.pool().evictable_bytes == 2 * kBlock);  // h1 and h2 only
  x.resumed_tokens = 9;
  CHECK(a.cached_tokens(x) == 32);
}
