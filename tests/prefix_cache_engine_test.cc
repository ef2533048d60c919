// The engine with an allocator that shares prompt blocks across requests (vLLM's automatic
// prefix caching, paged:block=16,prefix-caching=on), on schedules worked out by hand. Layouts
// of one byte per position make bytes and positions the same number.
#include <catch2/catch.hpp>

#include "kvsim/replay.h"
#include "prefix_test_util.h"
#include "test_support.h"

using namespace kvsim;

using kvsim::test::with_prefix;

namespace {

constexpr std::int64_t kMs = 1'000'000;
constexpr const char* kCaching = "paged:block=16,prefix-caching=on";

test::BudgetRun run(const std::string& spec, std::vector<Request> requests, const ReplayOptions& o) {
  return test::replay_under_budget(spec, std::move(requests), o);
}

// Steps of `base_ms`, plus `prefill_ms` per prompt token computed.
ReplayOptions steps(std::int64_t base_ms, std::int64_t prefill_ms = 0) {
  ReplayOptions o;
  o.layout = test::unit_layout(4096);
  o.cost.base_ps = base_ms * kMs * 1000;
  o.cost.prefill_token_ps = prefill_ms * kMs * 1000;
  return o;
}

}  // namespace

TEST_CASE("prefix cache: the second request computes only what is not cached, and its first token comes sooner") {
  // 1 ms a step plus 1 ms a prompt token computed. A (prompt 40 = blocks h11, h12 and 8
  // positions, output 2): step 0 computes 40 tokens, 41 ms, first token at 41 ms; step 1
  // (1 ms) the last, at 42 ms. Its two full prompt blocks stay cached when it leaves. B (the
  // same prompt, at 100 ms) finds 2 blocks = 32 tokens (min(2, floor(39 / 16)) blocks): its
  // step computes 8 tokens, 9 ms, first token at 109 ms; its last at 110 ms.
  const auto r = run(kCaching,
                     {with_prefix("a", 0, 40, 2, {11, 12}), with_prefix("b", 100 * kMs, 40, 2, {11, 12})},
                     steps(1, 1));
  const ReplayReport& rep = r.report;
  CHECK(rep.completed == 2);
  CHECK(rep.prefix_block_tokens == 16);
  CHECK(rep.prefix_queried_tokens == 80);
  CHECK(rep.prefix_hit_tokens == 32);
  // In full blocks: 2 of A's looked up, none found; 2 of B's, both found.
  CHECK(rep.prefix_queried_blocks == 4);
  CHECK(rep.prefix_hit_blocks == 2);
  CHECK(rep.prefix_preempted_queried_tokens == 0);
  CHECK(rep.evicted_bytes == 0);
  CHECK(rep.ttft.max_ns == 41 * kMs);  // A
  CHECK(rep.ttft.p50_ns == 9 * kMs);   // B
  CHECK(rep.e2e.p50_ns == 10 * kMs);
  CHECK(rep.end_ns == 110 * kMs);
  // Cached and unreferenced from 42 ms to 100 ms (A's 2 blocks, 32 bytes), held by B until
  // 110 ms, cached again at the end (a zero-length tail of the run).
  CHECK(rep.evictable_bytes.peak == 32);
  CHECK(rep.evictable_bytes.mean == Approx(32.0 * 58 / 110).epsilon(1e-12));
  CHECK(rep.leak_free);
}

TEST_CASE("prefix cache: a prefix two running requests share is counted once, effective and allocated") {
  // 1 ms a step. A (prompt 40 = h11, h12 + 8, output 20) holds 41 + k positions at step k,
  // in 3 blocks (48 slots) until 48 positions. B (same prompt) arrives at 0.5 ms and starts
  // at step 1, finding A's 2 full blocks cached: it computes 8 tokens and holds 41 positions,
  // 2 blocks shared with A and 1 of its own. After step 1: effective = 42 + 41 - 32 = 51
  // (the shared 32 once), allocated = 48 + 48 - 32 = 64 (the 2 shared blocks once).
  const auto r = run(kCaching,
                     {with_prefix("a", 0, 40, 20, {11, 12}), with_prefix("b", kMs / 2, 40, 20, {11, 12})},
                     steps(1));
  REQUIRE(r.rows.size() >= 2);
  CHECK(r.rows[1].effective_bytes == 51);
  CHECK(r.rows[1].allocated_bytes == 64);
  // Without caching both hold their own copies, and effective tokens are per request.
  const auto plain = run("paged:block=16",
                         {with_prefix("a", 0, 40, 20, {11, 12}), with_prefix("b", kMs / 2, 40, 20, {11, 12})},
                         steps(1));
  REQUIRE(plain.rows.size() >= 2);
  CHECK(plain.rows[1].effective_bytes == 42 + 41);
  CHECK(plain.rows[1].allocated_bytes == 96);
  CHECK(r.report.leak_free);
}

TEST_CASE("prefix cache: a block computed again for the last-token rule is a duplicate") {
  // 1 ms a step. A (prompt 32 = exactly h11, h12; output 10) holds 33 + (k) positions at
  // step k in 3 blocks. B (the same prompt) arrives at 0.5 ms, starts at step 1 and finds
  // only 1 block cached: min(2, floor(31 / 16)) = 1, as vLLM always computes the last prompt
  // token. It computes positions 16-31 into a new block that carries h12 too, the same
  // tokens as A's second block: held twice, counted once. After step 1: effective
  // = 34 + 33 - 32 = 35; allocated = 48 + 48 - 16 = 80; of the 45 wasted, 16 duplicate and
  // 29 tail (48 - 34 and 48 - 33).
  const auto r = run(kCaching,
                     {with_prefix("a", 0, 32, 10, {11, 12}), with_prefix("b", kMs / 2, 32, 10, {11, 12})},
                     steps(1));
  const ReplayReport& rep = r.report;
  REQUIRE(r.rows.size() >= 2);
  CHECK(r.rows[1].effective_bytes == 35);
  CHECK(r.rows[1].allocated_bytes == 80);
  CHECK(rep.prefix_hit_tokens == 16);
  // Both run steps 1-9 together (A ends after step 9, B after step 10): the duplicate block is
  // held from step 1 to the end of step 9, 9 ms of the 11 ms run.
  CHECK(rep.end_ns == 11 * kMs);
  CHECK(rep.mean_bytes.duplicate == Approx(16.0 * 9 / 11).epsilon(1e-12));
  CHECK(rep.leak_free);
}

TEST_CASE("prefix cache: hashes given at 512 tokens share 16-token blocks exactly within them") {
  // Mooncake gives one hash per 512 tokens. A prompt of 1,100 tokens with hashes H0, H1
  // (blocks [0, 512) and [512, 1024)) has 68 full blocks of 16; those ending by 1,024 (64)
  // get an identity from H0 or H1; the 4 in [1024, 1088) have none (no hash covers them).
  // A second request with the same H0 and H1 therefore finds 64 blocks = 1,024 tokens.
  Request a = test::request("a", 0, 1100, 2);
  Request b = test::request("b", 100 * kMs, 1100, 2);
  for (Request* r : {&a, &b}) {
    r->prefix_block_tokens = 512;
    r->prefix_hashes = {7, 8};
  }
  const auto r = run(kCaching, {a, b}, steps(1));
  CHECK(r.report.prefix_hit_tokens == 1024);
  CHECK(r.report.prefix_queried_tokens == 2200);
}

TEST_CASE("prefix cache: a full pool evicts the tail of the last request first, so its head still hits") {
  // A budget of 4 blocks of 16 (64 bytes), 1 ms a step, one request at a time. A (prompt 32
  // = h11 h12, output 2) takes never-used blocks 0, 1, 2 in id order (33 positions); it
  // leaves after 2 ms and frees its blocks tail first: the free queue is then [3 (never
  // used), 2 (no hash), 1 (h12), 0 (h11)]. B (prompt 32 = h21 h22, at 100 ms) takes 3, 2 and
  // 1, evicting h12: 1 block. It leaves the queue as [0 (h11), 1 (no hash), 2 (h22), 3 (h21)].
  // C (the same prompt as A, at 200 ms) finds h11 (block 0) but not h12: a hit of 16 tokens.
  // It takes 2 more blocks from the head: 1 (no hash) and 2 (evicting h22). Evicted in all:
  // 2 blocks, 32 bytes. Looked up: 3 x 32 tokens, 3 x 2 full blocks; found 16 tokens, 1 block.
  ReplayOptions o = steps(1);
  o.memory.kv_budget_bytes = 64;
  const auto r = run(kCaching,
                     {with_prefix("a", 0, 32, 2, {11, 12}), with_prefix("b", 100 * kMs, 32, 2, {21, 22}),
                      with_prefix("c", 200 * kMs, 32, 2, {11, 12})},
                     o);
  const ReplayReport& rep = r.report;
  CHECK(rep.completed == 3);
  CHECK(rep.prefix_queried_tokens == 96);
  CHECK(rep.prefix_hit_tokens == 16);
  CHECK(rep.prefix_queried_blocks == 6);
  CHECK(rep.prefix_hit_blocks == 1);
  CHECK(rep.evicted_bytes == 32);
  CHECK(rep.preemptions == 0);
  CHECK(rep.leak_free);
}

TEST_CASE("prefix cache: a preempted request's new lookup is counted apart, as vLLM's metric does") {
  // A budget of 4 blocks of 16, 1 ms a step, vLLM's policy (recompute). A (prompt 16 = h11,
  // output 30) holds 17 + k positions after step k (at most 46: 3 blocks); B (prompt 16 =
  // h21, output 40, at 0.5 ms) starts at step 1 and holds 16 + k. Both fit in 2 blocks each
  // until A needs its 33rd position at step 16: the pool is full, so the newest, B, is
  // preempted, having generated 15 tokens (steps 1-15). It frees its blocks tail first: its
  // partial block, then h21; A takes the partial one, so h21 stays cached, as A never needs
  // a fourth block. B comes back when A has finished and
  // looks up its prompt and 15 generated tokens, 31 positions, finding h21: 16 tokens
  // (vLLM's PrefixCacheStats.record counts that in preempted_queries / preempted_hits, not in
  // the hit rate); a hit may cover the whole prompt, as vLLM's limit (num_tokens - 1) counts
  // the generated tokens being recomputed. First admissions: 32 tokens looked up, 2 full
  // blocks, nothing found. Evictions: A leaves [A's 3rd, 2nd, h11] in the queue behind h21,
  // which B takes back; B's new blocks come from the head: A's 3rd (partial, never cached),
  // A's 2nd (positions 16-31, all generated: cached under A's own identity, as vLLM caches
  // every full block, so taking it evicts it) and, for B's 49th position (16 + 40 positions
  // in all), h11: two blocks evicted, 32 bytes.
  ReplayOptions o = steps(1);
  o.memory.kv_budget_bytes = 64;
  const auto r = run(kCaching, {with_prefix("a", 0, 16, 30, {11}), with_prefix("b", kMs / 2, 16, 40, {21})}, o);
  const ReplayReport& rep = r.report;
  CHECK(rep.completed == 2);
  CHECK(rep.preemptions == 1);
  CHECK(rep.prefix_queried_tokens == 32);
  CHECK(rep.prefix_hit_tokens == 0);
  CHECK(rep.prefix_queried_blocks == 2);
  CHECK(rep.prefix_hit_blocks == 0);
  CHECK(rep.prefix_preempted_queried_tokens == 31);
  CHECK(rep.prefix_preempted_hit_tokens == 16);
  CHECK(rep.evicted_bytes == 32);
  CHECK(rep.leak_free);
}

namespace {

// The schedule the three tests below share, worked out by hand. A budget of 6 blocks of 16
// (96 bytes), vLLM's policy, 1 ms a step plus 1 ms a token computed. A (prompt 16 = h11,
// output `a_output`) is admitted at step 0 (17 ms: 16 tokens) and holds 17 + k positions
// after step k; B (prompt 16 = h21, output 40, at 0.5 ms) is admitted at step 1 (17 ms) and
// holds 16 + k; every later step is a 1 ms decode step until B comes back. A takes its 3rd
// block at step 16, B at step 17: the pool is full. At step 32 A needs a 4th block (its
// 49th position): B, the newest, is preempted, having generated 31 tokens (its first at
// step 1, one a step since): 47 positions in blocks B0 (h21), B1 (positions 16-31, all
// generated, full and computed, so cached under B's own identity, as vLLM caches every
// full block) and B2 (32-46, partial). B frees them tail first: the free queue is [B2, B1,
// B0], and A's 4th block is B2 (uncached). B cannot come back while A runs (it needs 3
// blocks, only B1 and B0 are free), so A takes B1 at step 48 (its 65th position) and B0 at
// step 64 (its 81st) if it lives that long, evicting them, tail first. A finishes after
// step a_output - 1; B is re-admitted at the next step and looks up its prompt and its 31
// generated tokens, 47 positions, at most floor(46 / 16) = 2 blocks (vLLM's
// max_cache_hit_length = num_tokens - 1); it computes the rest of the 47 and samples its
// 32nd token (a step of 1 + computed ms), then decodes its last 8 tokens in 8 steps. The
// positions computed again are all in that one step, and the timeline's row for it says so
// (kvsim calibrate reads them from there).
ReplayReport preempted_b(std::int64_t a_output) {
  ReplayOptions o = steps(1, 1);
  o.memory.kv_budget_bytes = 96;
  const auto r = run(kCaching, {with_prefix("a", 0, 16, a_output, {11}), with_prefix("b", kMs / 2, 16, 40, {21})}, o);
  std::vector<std::int64_t> recomputed;
  for (const TimelineRow& row : r.rows) {
    if (row.recomputed_tokens != 0) recomputed.push_back(row.recomputed_tokens);
  }
  CHECK(recomputed == std::vector<std::int64_t>{r.report.recomputed_tokens});
  return r.report;
}

}  // namespace

TEST_CASE("prefix cache: a request preempted by recompute finds its prompt and its generated blocks again") {
  // A output 34: A finishes after step 33, at 34 + 32 = 66 ms, never having needed B1 or
  // B0. B comes back at step 34 and finds both: 32 tokens, its prompt block and its first
  // generated block. It computes 47 - 32 = 15 tokens (16 ms, to 82 ms) and ends 8 steps
  // later, at 90 ms. With prompt blocks alone cached it would find 16 and compute 31 (32
  // ms), ending at 106 ms.
  const ReplayReport rep = preempted_b(34);
  CHECK(rep.completed == 2);
  CHECK(rep.preemptions == 1);
  CHECK(rep.prefix_queried_tokens == 32);  // first admissions: A's and B's prompts
  CHECK(rep.prefix_hit_tokens == 0);
  CHECK(rep.prefix_preempted_queried_tokens == 47);
  CHECK(rep.prefix_preempted_hit_tokens == 32);
  // Discarded at the preemption: 47 positions; found again: 32; computed again: 15.
  CHECK(rep.recomputed_tokens == 15);
  CHECK(rep.end_ns == 90 * kMs);
  // A leaves its 4th block (partial), its 3rd and 2nd (its own generated blocks, cached) and
  // its 1st (h11), in that order, behind B1 and B0 (which B takes back); B's new block at
  // step 34 is A's 4th, and its 4th (for its 49th position, at step 35) is A's 3rd, cached:
  // one block evicted, 16 bytes.
  CHECK(rep.evicted_bytes == 16);
  CHECK(rep.leak_free);
}

TEST_CASE("prefix cache: the timeline carries cached and evicted bytes, step by step") {
  // The pool of the tail-first case above (4 blocks of 16, 1 ms a step): A (h11 h12) leaves
  // its 2 hashed blocks cached; at 100 ms B's admission evicts h12, leaving h11 cached (16
  // bytes, 16 evicted); B leaves h21 and h22 cached beside h11; at 200 ms C holds h11 again
  // and evicts h22 for its second block, leaving h21 (16 bytes cached, 32 evicted in all).
  ReplayOptions o = steps(1);
  o.memory.kv_budget_bytes = 64;
  const auto r = run(kCaching,
                     {with_prefix("a", 0, 32, 2, {11, 12}), with_prefix("b", 100 * kMs, 32, 2, {21, 22}),
                      with_prefix("c", 200 * kMs, 32, 2, {11, 12})},
                     o);
  auto at = [&](std::int64_t t_ns) -> const TimelineRow& {
    for (const TimelineRow& row : r.rows) {
      if (row.time_ns == t_ns) return row;
    }
    FAIL("no timeline row at " << t_ns << " ns");
    return r.rows.front();
  };
  CHECK(at(0).cached_bytes == 0);
  CHECK(at(0).evicted_bytes == 0);
  CHECK(at(100 * kMs).cached_bytes == 16);
  CHECK(at(100 * kMs).evicted_bytes == 16);
  CHECK(at(200 * kMs).cached_bytes == 16);
  CHECK(at(200 * kMs).evicted_bytes == 32);
  // An allocator that keeps no cache has neither.
  const auto plain = run("paged:block=16", {with_prefix("a", 0, 32, 2, {11, 12})}, o);
  REQUIRE_FALSE(plain.rows.empty());
  CHECK(plain.rows.front().cached_bytes == -1);
  CHECK(plain.rows.front().evicted_bytes == -1);
}

TEST_CASE("prefix cache: a preempted request's generated tail is evicted before its prompt head") {
  // A output 50: A takes B1 at step 48, evicting B's generated block, and finishes after
  // step 49, at 34 + 48 = 82 ms; B0 (h21) was freed after B1, so it is still cached. B
  // comes back at step 50 and finds 16 tokens (h21; B1 is gone, and a hit is a leading run):
  // it computes 31 (32 ms, to 114 ms) and ends at 122 ms. Evicted: B1, then, for B's new
  // blocks, A's 4th (its own generated positions 48-63: B's 2nd new block after A's
  // partial 5th) and A's 3rd (B's 4th block, at its 49th position): 48 bytes.
  const ReplayReport rep = preempted_b(50);
  CHECK(rep.preemptions == 1);
  CHECK(rep.prefix_preempted_queried_tokens == 47);
  CHECK(rep.prefix_preempted_hit_tokens == 16);
  CHECK(rep.recomputed_tokens == 31);
  CHECK(rep.end_ns == 122 * kMs);
  CHECK(rep.evicted_bytes == 48);
  CHECK(rep.leak_free);
}

TEST_CASE("prefix cache: a preempted request whose blocks were all evicted meanwhile finds nothing") {
  // A output 66: A also takes B0 at step 64, evicting h21, and finishes after step 65, at
  // 34 + 64 = 98 ms. B comes back at step 66 and finds nothing: it computes all 47 tokens
  // (48 ms, to 146 ms) and ends at 154 ms.
  const ReplayReport rep = preempted_b(66);
  CHECK(rep.preemptions == 1);
  CHECK(rep.prefix_preempted_queried_tokens == 47);
  CHECK(rep.prefix_preempted_hit_tokens == 0);
  CHECK(rep.recomputed_tokens == 47);
  CHECK(rep.end_ns == 154 * kMs);
  CHECK(rep.leak_free);
}

TEST_CASE("prefix cache: vLLM admits a request whose hits a running request holds without room for them") {
  // 6 blocks of 16 (96 bytes), vLLM's policy, no watermark, 1 ms a step plus 1 ms a token
  // computed. A (prompt 48 = h1 h2 h3, output 10) is admitted at step 0 (49 ms) and holds
  // 49 + k positions after step k: 4 blocks until it ends after step 9. B (the same
  // prompt, output 2, at 0.5 ms) finds h1 and h2 (its last token is computed, so 47 tokens
  // are looked up: 2 full blocks), both A's. Its chunk, 16 tokens and its first sampled
  // position, reaches position 49: 4 blocks, of which the 2 hits take no free block
  // (get_num_blocks_to_allocate: blocks at the length, less the hits, plus the hits with
  // ref_cnt 0): 2 new blocks against 6 - 4 = 2 free. So B starts at step 1 (49 ms, 1 + 16
  // ms), samples its first token at 66 ms and its second at 67 ms; A's last 7 steps end at
  // 74 ms. Counting every hit block as needing room (4 > 2), B would wait for A to end (58
  // ms) and end at 76 ms.
  ReplayOptions o = steps(1, 1);
  o.memory.kv_budget_bytes = 96;
  o.memory.watermark_ppb = 0;
  const std::vector<Request> trace = {with_prefix("a", 0, 48, 10, {1, 2, 3}),
                                      with_prefix("b", kMs / 2, 48, 2, {1, 2, 3})};
  const auto check = [](const ReplayReport& rep) {
    CHECK(rep.completed == 2);
    CHECK(rep.preemptions == 0);
    CHECK(rep.prefix_hit_tokens == 32);
    CHECK(rep.ttft.max_ns == 66 * kMs - kMs / 2);  // B's
    CHECK(rep.ttft.p50_ns == 49 * kMs);            // A's
    CHECK(rep.end_ns == 74 * kMs);
    CHECK(rep.allocated_bytes.peak == 96);  // A's 4 blocks and B's 2 own: the pool, full
  };
  SECTION("admitted on its chunk") { check(run(kCaching, trace, o).report); }
  SECTION("and with the whole sequence required to fit: 3 blocks at 48 positions, 2 of them held") {
    o.memory.reserve_full_isl = true;
    check(run(kCaching, trace, o).report);
  }
}

TEST_CASE("prefix cache: requests finishing in one step are freed in running order, the oldest's blocks first in line for eviction") {
  // vLLM's update_from_output frees a step's finished requests in the order it scheduled
  // them (running order), each tail first. A budget of 7 blocks of 16, 1 ms a step. A (prompt
  // 40 = h11 h12 and 8 positions, output 10) and B (prompt 32 = h21 h22, output 10) start at
  // step 0 and finish with step 9. A takes never-used blocks 0, 1, 2 (41 positions) and 6 at
  // step 8 (position 49); B takes 3, 4, 5 (33 positions). At the end A holds 50 positions:
  // 0 (h11), 1 (h12), 2 (full, cached under A's own identity), 6 (partial); B holds 42: 3
  // (h21), 4 (h22), 5 (partial). Freed A first: the queue is [6, 2, 1, 0, 5, 4, 3]. C (prompt
  // 47, no identity, output 1, at 20 ms) takes 6, 2 and 1, evicting A's block 2 and h12. D
  // (A's prompt, at 40 ms) finds h11 but not h12: 16 tokens, and takes 2 blocks from the head,
  // 5 and 4 (evicting h22). Evicted: 3 blocks, 48 bytes. (Freed B first, as kvsim did before
  // 2026-12-05, whose order was that of the events' scheduling (B's last event was scheduled
  // at step 0, A's at step 8), C would evict h22 and h21 and D find both of A's blocks.)
  ReplayOptions o = steps(1);
  o.memory.kv_budget_bytes = 7 * 16;
  const auto r = run(kCaching,
                     {with_prefix("a", 0, 40, 10, {11, 12}), with_prefix("b", 0, 32, 10, {21, 22}),
                      test::request("c", 20 * kMs, 47, 1), with_prefix("d", 40 * kMs, 40, 1, {11, 12})},
                     o);
  const ReplayReport& rep = r.report;
  REQUIRE(rep.completed == 4);
  CHECK(rep.preemptions == 0);
  CHECK(rep.prefix_hit_tokens == 16);
  CHECK(r.records.at(3).id == "d");
  CHECK(r.records.at(3).cached_prompt_tokens == 16);
  CHECK(rep.evicted_bytes == 48);
  CHECK(rep.leak_free);
}
