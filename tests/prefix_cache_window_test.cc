// The sliding-window allocator with prefix caching on (vLLM v1's hybrid rules, cited in
// src/paged_allocator_window_prefix.cc), driven directly, against hand-derived block
// tables. Layer groups of 1 byte per position, so bytes and positions are the same number;
// blocks of B = 16 positions; a sliding window of W = 40, for which vLLM's
// SlidingWindowManager needs ceil((W - 1) / B) = ceil(39 / 16) = 3 contiguous cached
// blocks ending at a hit's end.
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
constexpr BlockId N = kNullBlock;

AdmitInfo prefix_info(std::int64_t prompt, std::int64_t output, const std::vector<std::uint64_t>& hashes) {
  AdmitInfo info;
  info.prompt_tokens = prompt;
  info.planned_output_tokens = output;
  info.output_tokens = output;
  info.prefix_hashes = hashes;
  return info;
}

KvLayout sliding_only() {  // a mistral-7b-v0.1-like model: every layer slides
  KvLayout l;
  l.groups = {test::group("sliding 40", 1, 40)};
  l.max_model_len = 4096;
  return l;
}

KvLayout hybrid() {  // a gemma-3-like model: full and sliding layer groups
  KvLayout l;
  l.groups = {test::group("full", 1), test::group("sliding 40", 1, 40)};
  l.max_model_len = 4096;
  return l;
}

PagedAllocator caching(const KvLayout& layout, std::int64_t capacity = 0, bool sliding = true) {
  PagedAllocatorOptions o;
  o.block_tokens = kBlock;
  o.capacity_bytes = capacity;
  o.prefix_caching = true;
  o.free_outside_window = sliding;
  return PagedAllocator(layout, o);
}

std::int64_t allocated(const Allocator& a) { return a.pool().reserved_bytes - a.pool().free_bytes; }

// A's prompt: 100 tokens = 6 full blocks (hashes h1..h6) + 4 positions.
const std::vector<std::uint64_t> kSix = {1, 2, 3, 4, 5, 6};

// A: prefill with the first token (101 tokens, ceil(101 / 16) = 7 blocks, ids 0..6, the 6
// full ones cached), then one decode step to 102. That step starts with c = 101 computed:
// get_num_skipped_tokens = 101 - 40 + 1 = 62, so blocks 0..floor(62 / 16) - 1 = 0..2 go,
// into the free queue last first (2, 1, 0), still cached.
void run_a(PagedAllocator& a) {
  REQUIRE(a.admit(0, prefix_info(100, 10, kSix)) == Outcome::ok);
  REQUIRE(a.grow(0, 101, 101) == Outcome::ok);
  REQUIRE(a.grow(0, 102, 1) == Outcome::ok);
}

}  // namespace

TEST_CASE("sliding-window prefix cache: a second request hits on a sliding-only model, holding only its window") {
  auto a = caching(sliding_only());
  CHECK(a.name() == "sliding-window:block=16,prefix-caching=on");
  CHECK(a.prefix_block_tokens() == kBlock);
  run_a(a);
  CHECK(a.block_table(0, 0, 0) == std::vector<BlockId>{N, N, N, 3, 4, 5, 6});
  CHECK(a.pool().evictable_bytes == 3 * kBlock);  // blocks 0..2: free, cached
  // B, the same prompt: at most min(floor(99 / 16), 6) = 6 blocks. From the right, h6, h5,
  // h4 are cached: a run of 3 ends at block 6, so the hit is 6 blocks = 96 tokens.
  CHECK(a.cached_tokens(prefix_info(100, 10, kSix)) == 96);
  REQUIRE(a.admit(1, prefix_info(100, 10, kSix)) == Outcome::ok);
  // add_local_computed_blocks: skipped = floor((96 - 40 + 1) / 16) = 3, so B takes A's
  // blocks 3, 4, 5 only; the 3 evictable ones stay where they are.
  CHECK(a.block_table(1, 0, 0) == std::vector<BlockId>{N, N, N, 3, 4, 5});
  CHECK(a.pool().evictable_bytes == 3 * kBlock);
  CHECK(a.shared_positions(0) == 3 * kBlock);  // blocks 3..5, held by A and B
  // B at 96 tokens: holds positions 48..95 (48); its window is 56..95 (40 effective), so
  // 48..55 are outside it (8).
  const Footprint f = a.footprint(1, 0, 96);
  CHECK(f.allocated == 48);
  CHECK(f.outside_window == 8);
  CHECK(f.tail == 0);
  // The rest of the prompt and the first token: the step starts at 96 (nothing more to
  // skip) and needs block 6, a new one (id 7): the queue holds no uncached free block.
  REQUIRE(a.grow(1, 101, 5) == Outcome::ok);
  CHECK(a.block_table(1, 0, 0) == std::vector<BlockId>{N, N, N, 3, 4, 5, 7});
  a.check_invariants();
  // Both leave, tail first: 6 and 7 had no hash (free), 3..5 become evictable: 3 + 3.
  a.release(0);
  CHECK(a.shared_positions(0) == 0);
  a.release(1);
  CHECK(allocated(a) == 0);
  CHECK(a.pool().evictable_bytes == 6 * kBlock);
  a.check_invariants();
}

TEST_CASE("sliding-window prefix cache: paged on the same sliding layout holds the whole hit, by the full rule") {
  // paged (no freeing) treats sliding layers as full attention (vLLM does so with its
  // hybrid manager off on a model with both kinds of layers; unify_hybrid_kv_cache_specs):
  // a hit is the leading run of cached blocks and all of it is held.
  auto a = caching(sliding_only(), 0, false);
  run_a(a);
  CHECK(a.block_table(0, 0, 0) == std::vector<BlockId>{0, 1, 2, 3, 4, 5, 6});
  CHECK(a.cached_tokens(prefix_info(100, 10, kSix)) == 96);
  REQUIRE(a.admit(1, prefix_info(100, 10, kSix)) == Outcome::ok);
  CHECK(a.block_table(1, 0, 0) == std::vector<BlockId>{0, 1, 2, 3, 4, 5});
  const Footprint f = a.footprint(1, 0, 96);
  CHECK(f.allocated == 96);
  CHECK(f.outside_window == 56);  // positions 0..55, behind the window 56..95
  a.check_invariants();
}

TEST_CASE("sliding-window prefix cache: with the blocks behind the window evicted, the window's blocks still hit") {
  // 8 blocks of 16 bytes. After A (7 blocks taken, ids 0..6; 0..2 freed behind its window
  // into the queue [2, 1, 0], cached), C needs 4 uncached blocks: the never-used id 7,
  // then the queue's 2 (h3), 1 (h2), 0 (h1), each evicted.
  auto a = caching(sliding_only(), 8 * kBlock);
  run_a(a);
  REQUIRE(a.admit(1, prefix_info(64, 1, {})) == Outcome::ok);
  REQUIRE(a.grow(1, 64, 64) == Outcome::ok);
  CHECK(a.block_table(1, 0, 0) == std::vector<BlockId>{7, 2, 1, 0});
  CHECK(a.pool().evicted_bytes == 3 * kBlock);
  CHECK(a.pool().evictable_bytes == 0);
  CHECK(a.pool().free_bytes == 0);
  // B, A's prompt: h1..h3 are gone, so the full-attention rule (leading run) would hit
  // nothing; the sliding rule searches from the right: h6, h4, h5 cached (A holds them), a
  // run of 3 ending at block 6: 96 tokens, all of it without taking a byte.
  CHECK(a.cached_tokens(prefix_info(100, 10, kSix)) == 96);
  REQUIRE(a.admit(2, prefix_info(100, 10, kSix)) == Outcome::ok);
  CHECK(a.block_table(2, 0, 0) == std::vector<BlockId>{N, N, N, 3, 4, 5});
  CHECK(allocated(a) == 8 * kBlock);
  // A prompt of 90 with h1..h5 may hit at most min(floor(89 / 16), 5) = 5 blocks: from the
  // right h5, h4 are cached but h3 is not, so no run of 3 ends at or before block 5, and
  // the leading run (h1 missing) is empty: no hit.
  CHECK(a.cached_tokens(prefix_info(90, 10, {1, 2, 3, 4, 5})) == 0);
  a.check_invariants();
  a.release(2);
  a.release(1);
  a.release(0);
  a.check_invariants();
}

TEST_CASE("sliding-window prefix cache: a hit shorter than the window needs every block from the start") {
  // W = 40 needs 3 blocks, but a hit of 2 blocks (32 < W - 1 = 39 tokens) has no run of 3
  // to find: it is the leading run, and nothing is skipped (floor((32 - 40 + 1) / 16) < 0).
  auto a = caching(sliding_only());
  REQUIRE(a.admit(0, prefix_info(40, 10, {1, 2})) == Outcome::ok);
  REQUIRE(a.grow(0, 41, 41) == Outcome::ok);
  a.release(0);
  CHECK(a.cached_tokens(prefix_info(40, 10, {1, 2})) == 32);
  REQUIRE(a.admit(1, prefix_info(40, 10, {1, 2})) == Outcome::ok);
  CHECK(a.block_table(1, 0, 0) == std::vector<BlockId>{0, 1});
  a.release(1);
  a.check_invariants();
}

TEST_CASE("sliding-window prefix cache: on a hybrid model the full group's leading run bounds the hit") {
  // Unbounded: both groups register the same blocks, so the sliding group accepts every
  // length the full group's leading run allows (its 3 blocks before the end are cached),
  // and the hit is the full group's: 6 blocks. The full group takes all 6, the sliding one
  // the last 3.
  auto a = caching(hybrid());
  run_a(a);
  CHECK(a.block_table(0, 0, 0) == std::vector<BlockId>{0, 1, 2, 3, 4, 5, 6});
  CHECK(a.block_table(0, 1, 0) == std::vector<BlockId>{N, N, N, 3, 4, 5, 6});
  CHECK(a.cached_tokens(prefix_info(100, 10, kSix)) == 96);
  REQUIRE(a.admit(1, prefix_info(100, 10, kSix)) == Outcome::ok);
  CHECK(a.block_table(1, 0, 0) == std::vector<BlockId>{0, 1, 2, 3, 4, 5});
  CHECK(a.block_table(1, 1, 0) == std::vector<BlockId>{N, N, N, 3, 4, 5});
  CHECK(a.shared_positions(0) == 6 * kBlock);
  CHECK(a.shared_positions(1) == 3 * kBlock);
  a.check_invariants();
}

TEST_CASE("sliding-window prefix cache: on a hybrid model under a budget the combined hit is the smaller") {
  // 14 blocks of 16 bytes for both groups together, drawn from one queue (vLLM's one
  // FreeKVCacheBlockQueue). A takes 7 new blocks in each group (0..6, 224 bytes: the budget),
  // caching h1..h6 in both; its decode step frees sliding blocks 2, 1, 0 (queue order
  // s2, s1, s0). A's release then frees tail first, full group first: f6..f0, then
  // sliding s6..s3. The one queue: s2 s1 s0 f6 f5 f4 f3 f2 f1 f0 s6 s5 s4 s3.
  auto a = caching(hybrid(), 14 * kBlock);
  run_a(a);
  a.release(0);
  CHECK(a.pool().evictable_bytes == 12 * kBlock);  // h1..h6 in each group
  // D (no hashes) takes 3 blocks in each group, full first. The budget is spent, so each
  // comes from the queue's head: the full group's three are s2, s1, s0 (evicting the
  // sliding group's h3, h2, h1; their bytes become the full group's new ids 7, 8, 9), the
  // sliding group's three are f6 (uncached), f5, f4 (evicting the full group's h6, h5;
  // their bytes reuse the sliding ids 0, 1, 2).
  REQUIRE(a.admit(1, prefix_info(48, 1, {})) == Outcome::ok);
  REQUIRE(a.grow(1, 48, 48) == Outcome::ok);
  CHECK(a.block_table(1, 0, 0) == std::vector<BlockId>{7, 8, 9});
  CHECK(a.block_table(1, 1, 0) == std::vector<BlockId>{0, 1, 2});
  CHECK(a.pool().evicted_bytes == 5 * kBlock);
  CHECK(a.pool().evictable_bytes == 7 * kBlock);  // full h1..h4, sliding h4..h6
  a.check_invariants();
  // B, A's prompt (at most 6 blocks). The full group alone would hit its leading run h1..h4
  // (4 blocks); the sliding group alone h4, h5, h6 from the right (6 blocks). Combined
  // (HybridKVCacheCoordinator): full first, 4; the sliding group within 4 needs blocks 1..3
  // cached, and h2, h3 are not; no run of 3 ends earlier and its leading run is empty
  // (h1 gone): 0. Nothing is a hit, though each group alone finds blocks.
  CHECK(a.cached_tokens(prefix_info(100, 10, kSix)) == 0);
  // The same layout unbounded keeps everything: the full group's run of 6 is the hit.
  auto u = caching(hybrid());
  run_a(u);
  u.release(0);
  CHECK(u.cached_tokens(prefix_info(100, 10, kSix)) == 96);
}
