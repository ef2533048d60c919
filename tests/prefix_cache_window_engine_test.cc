// The engine with prefix caching on sliding-window layer groups: effective tokens count
// once what several requests' windows keep of a shared prefix (docs/replay.md, "Sharing
// across requests"), on schedules worked out by hand. One layer group of window W = 40 at
// one byte per position (a mistral-7b-v0.1-like model, every layer sliding), blocks of 16.
#include <catch2/catch.hpp>

#include "kvsim/replay.h"
#include "prefix_test_util.h"
#include "test_support.h"

using namespace kvsim;

using kvsim::test::with_prefix;

namespace {

constexpr std::int64_t kMs = 1'000'000;

ReplayOptions sliding_steps() {  // 1 ms a step
  ReplayOptions o;
  o.layout.groups = {test::group("sliding 40", 1, 40)};
  o.layout.max_model_len = 4096;
  o.cost.base_ps = kMs * 1000;
  return o;
}

// A (prompt 40 = blocks h11, h12 + 8 positions, output 20) at 0: step 0 prefills it and
// its first token, so after step k it holds 41 + k positions. B, the same prompt, at
// 0.5 ms: admitted at step 1, it finds h11, h12 cached (at most min(2, floor(39 / 16)) = 2
// blocks; W = 40 needs ceil(39 / 16) = 3 blocks, more than there are, so the sliding rule
// takes the leading run), skips nothing (32 - 40 + 1 < 0), computes 8 tokens and holds
// 40 + k positions after step k.
std::vector<Request> two_sharing() {
  return {with_prefix("a", 0, 40, 20, {11, 12}), with_prefix("b", kMs / 2, 40, 20, {11, 12})};
}

}  // namespace

TEST_CASE("window prefix sharing: what two windows keep of one prefix counts once, as the windows slide") {
  const auto r = test::replay_under_budget("sliding-window:block=16,prefix-caching=on", two_sharing(), sliding_steps());
  const ReplayReport& rep = r.report;
  CHECK(rep.completed == 2);
  CHECK(rep.prefix_hit_tokens == 32);
  CHECK(rep.leak_free);
  REQUIRE(r.rows.size() >= 17);
  // Each request keeps its last 40 positions: from s = t - 40, so of block 0 (positions
  // 0..15) it keeps 16 - s, of block 1 all 16 while s <= 16. Counted once, the shared
  // prefix is what the longer-kept of the two keeps.
  // After step 1: A 42 (s = 2), B 41 (s = 1). Shared, once: block 0 from 1 (15) + block 1
  // (16) = 31; A's own 32..41 (10), B's 32..40 (9): 50. Allocated: A's 3 blocks and B's 3,
  // blocks 0 and 1 held once: 48 + 48 - 32 = 64 (nothing is behind a window yet: A's step
  // started at 41, keeping from 41 - 40 + 1 = 2, in block 0).
  CHECK(r.rows[1].effective_bytes == 50);
  CHECK(r.rows[1].allocated_bytes == 64);
  // After step 10: A 51 (s = 11), B 50 (s = 10): block 0 from 10 (6) + 16 + A's 32..50
  // (19) + B's 32..49 (18) = 59. Each holds 4 blocks, 2 shared: 64 + 64 - 32 = 96.
  CHECK(r.rows[10].effective_bytes == 59);
  CHECK(r.rows[10].allocated_bytes == 96);
  // After step 15: A 56 (its step started at 55: keeps from 16, so block 0 went), B 55
  // (from 15: keeps block 0). Once: block 0 from 15 (1) + 16 + A's 32..55 (24) + B's
  // 32..54 (23) = 64. Allocated: A's blocks 1..3 (48), B's 0..3 (64), block 1 once: 96.
  CHECK(r.rows[15].effective_bytes == 64);
  CHECK(r.rows[15].allocated_bytes == 96);
  CHECK(r.rows[15].cached_bytes == 0);
  // After step 16: A 57 (s = 17), B 56 (s = 16; its step started at 55, keeping from 16, so
  // block 0 went: no request holds it, it stays cached, evictable). Once: block 1 from 16
  // (16, B's) + A's 32..56 (25) + B's 32..55 (24) = 65. Allocated: blocks 1..3 each, block
  // 1 once: 48 + 48 - 16 = 80.
  CHECK(r.rows[16].effective_bytes == 65);
  CHECK(r.rows[16].allocated_bytes == 80);
  CHECK(r.rows[16].cached_bytes == 16);
}

TEST_CASE("window prefix sharing: paged holds the blocks behind the windows, once, as outside-window room") {
  // The same run through paged, which keeps every block: effective tokens are the same
  // (what the windows keep), allocated is every block, shared blocks once. After step 16:
  // A holds blocks 0..3 (64), B 0..3 (64), blocks 0 and 1 held once: 128 - 32 = 96.
  const auto r = test::replay_under_budget("paged:block=16,prefix-caching=on", two_sharing(), sliding_steps());
  REQUIRE(r.rows.size() >= 17);
  CHECK(r.rows[1].effective_bytes == 50);
  CHECK(r.rows[10].effective_bytes == 59);
  CHECK(r.rows[16].effective_bytes == 65);
  CHECK(r.rows[16].allocated_bytes == 96);
  // Of the 96: 65 effective; tails 64 - 57 = 7 and 64 - 56 = 8; outside the windows,
  // block 0 (16, behind both) once and position 16 of block 1 is kept by B, so 16. Over
  // the whole run the parts add up to allocated - effective (the engine checks it at every
  // operation; here on the means).
  CHECK(r.report.mean_bytes.total() == Approx(r.report.allocated_bytes.mean - r.report.effective_bytes.mean).margin(1e-9));
  // From step 16 on block 0 is behind both windows and paged keeps it: outside-window room
  // that the sliding-window allocator frees. (Not a tail: the block is full.)
  CHECK(r.report.mean_bytes.outside_window > 0);
  CHECK(r.report.leak_free);
}

TEST_CASE("window prefix sharing: the radix cache at page 16 holds and counts what paged does") {
  // SGLang's radix cache stores sliding-window layers whole too: B matches A's two
  // inserted pages, and after step 16 each holds 4 pages, 2 of them shared: 96; the
  // windows keep the same 65 positions, counted once.
  const auto r = test::replay_under_budget("radix:page=16", two_sharing(), sliding_steps());
  REQUIRE(r.rows.size() >= 17);
  CHECK(r.report.prefix_hit_tokens == 32);
  CHECK(r.rows[1].effective_bytes == 50);
  CHECK(r.rows[16].effective_bytes == 65);
  CHECK(r.rows[16].allocated_bytes == 96);
  CHECK(r.report.leak_free);
}

TEST_CASE("window prefix sharing: vLLM's admission needs no room for hits behind the window") {
  // 6 blocks of 16 (96 bytes), W = 40, 32 tokens a step, vLLM's policy, no watermark. A
  // (prompt 96 = h1..h6, output 1) prefills in three chunks, its window freeing what falls
  // behind, and leaves its 6 prompt blocks cached. B (the same prompt, at 100 ms, alone)
  // finds 5 blocks, 80 tokens (at most floor(95 / 16)); blocks 0 and 1 lie wholly before
  // 80 - 40 + 1 = 41, so its sliding group takes null there. Its one chunk (16 tokens and
  // its first sampled position) reaches 97 positions, 7 blocks, 112 bytes, of which the 2
  // behind the window take no room (get_num_blocks_to_allocate): 80 bytes of 96. Counted
  // whole, 112 > 96 with nothing else running, B would be refused as never fitting.
  ReplayOptions o = sliding_steps();
  o.memory.kv_budget_bytes = 96;
  o.memory.watermark_ppb = 0;
  o.max_batched_tokens = 32;
  const std::vector<std::uint64_t> h = {1, 2, 3, 4, 5, 6};
  const auto r = test::replay_under_budget("sliding-window:block=16,prefix-caching=on",
                                           {with_prefix("a", 0, 96, 1, h), with_prefix("b", 100 * kMs, 96, 1, h)}, o);
  CHECK(r.report.completed == 2);
  CHECK(r.report.rejected_too_large == 0);
  CHECK(r.report.prefix_hit_tokens == 80);
  CHECK(r.report.leak_free);
}

// W = 32 (vLLM's sliding rule: a hit needs ceil(31 / 16) = 2 contiguous cached blocks, or a
// shorter run from block 0; a request holds at most ceil(31 / 16) + 1 = 3 blocks once its
// prefill is done), 5 blocks of 16 (80 bytes), 64 tokens a step, vLLM's policy, no
// watermark. P (prompt 40 = h1, h2 + 8, output 2) leaves blocks h1, h2 cached when it
// completes after step 1. X (prompt 80 = h1..h5, output 10), arriving at 1.5 ms, finds them:
// 32 tokens. Its remaining 48 then complete the prefill in one chunk, which holds all 81
// positions at once (6 blocks, 96 bytes; none of the hit lies behind 32 - 32 + 1 = 1): it
// does not fit alone. Without the hit its first chunk is 64 tokens, 4 blocks: it does.
namespace {
ReplayOptions hit_outgrows_budget() {
  ReplayOptions o = sliding_steps();
  o.layout.groups = {test::group("sliding 32", 1, 32)};
  o.cost.prefill_token_ps = 0;  // every step 1 ms
  o.memory.kv_budget_bytes = 80;
  o.memory.watermark_ppb = 0;
  o.max_batched_tokens = 64;
  return o;
}
}  // namespace

TEST_CASE("window prefix sharing: a request that fits alone only without its hit waits while others run") {
  // A (prompt 16, output 100, no identity) and P are admitted at step 0 (56 tokens; 2 + 3
  // blocks fill the budget). At step 2 X heads the queue while A runs: refused there, as
  // never fitting, it would be refused for a hit that A's growth evicts, as vLLM's
  // scheduler, trying it again every step, would see. P's release queued its blocks tail
  // first: [b2, h2, h1]; A's blocks 3, 4 and 5 (at 33, 49 and 65 positions) take them in
  // that order, so after A's 65th position X finds nothing. Its 4 blocks still do not fit
  // beside A's 2 or 3 (at most 48 bytes free) until A completes after step 99 (its first
  // token came with the prefill). X is admitted at step 100, with no hit.
  const std::vector<std::uint64_t> h = {1, 2, 3, 4, 5};
  const auto r = test::replay_under_budget(
      "sliding-window:block=16,prefix-caching=on",
      {with_prefix("a", 0, 16, 100, {}), with_prefix("p", 0, 40, 2, {1, 2}), with_prefix("x", 3 * kMs / 2, 80, 10, h)},
      hit_outgrows_budget());
  CHECK(r.report.completed == 3);
  CHECK(r.report.rejected_too_large == 0);
  CHECK(r.report.prefix_hit_tokens == 0);
  CHECK(r.report.leak_free);
  REQUIRE(r.records.size() == 3);
  for (const RequestRecord& rec : r.records) {
    if (rec.id != "x") continue;
    CHECK(rec.outcome == RequestRecord::Outcome::completed);
    CHECK(rec.first_scheduled_ns == 100 * kMs);
    CHECK(rec.cached_prompt_tokens == 0);
  }
}

TEST_CASE("window prefix sharing: alone, a hit that outgrows the budget is refused rather than waited on") {
  // P and X as above, without A: at step 2 X is alone and its hit does not fit. vLLM would
  // keep it at the head of the queue for ever (nothing runs to evict the hit); kvsim's
  // progress guarantee refuses it, counted with the requests that never fit.
  const auto r = test::replay_under_budget(
      "sliding-window:block=16,prefix-caching=on",
      {with_prefix("p", 0, 40, 2, {1, 2}), with_prefix("x", 3 * kMs / 2, 80, 10, {1, 2, 3, 4, 5})},
      hit_outgrows_budget());
  CHECK(r.report.completed == 1);
  CHECK(r.report.rejected_too_large == 1);
  CHECK(r.report.leak_free);
}
