// The engine with the radix allocator (SGLang's RadixCache) and the sglang policy's
// --schedule-policy lpm, on schedules worked out by hand. One byte per position, so bytes
// and positions are the same number.
#include <catch2/catch.hpp>

#include "cli_util.h"
#include "kvsim/replay.h"
#include "test_support.h"

using namespace kvsim;

namespace {

constexpr std::int64_t kMs = 1'000'000;

ReplayOptions steps(std::int64_t base_ms, std::int64_t prefill_ms = 0) {
  ReplayOptions o;
  o.layout = test::unit_layout(4096);
  o.cost.base_ps = base_ms * kMs * 1000;
  o.cost.prefill_token_ps = prefill_ms * kMs * 1000;
  return o;
}

// A request whose prompt carries one identity per token (what a token-id trace hashed at
// page 1 gives): the first `common` of family `f`, the rest its own (family `own`).
Request with_tokens(std::string id, std::int64_t arrival_ns, std::int64_t prompt, std::int64_t output,
                    std::uint64_t f, std::int64_t common, std::uint64_t own) {
  Request r = test::request(std::move(id), arrival_ns, prompt, output);
  r.prefix_block_tokens = 1;
  for (std::int64_t i = 0; i < prompt; ++i) {
    r.prefix_hashes.push_back((i < common ? f : own) * 1'000'000 + static_cast<std::uint64_t>(i));
  }
  return r;
}

}  // namespace

TEST_CASE("radix engine: the second request computes only its last prompt token") {
  // 1 ms a step plus 1 ms a prompt token computed. A (prompt 40, output 2): step 0 computes
  // 40 tokens, 41 ms, first token at 41 ms; step 1 (1 ms) the last, at 42 ms. Its prompt
  // stays in the tree. B (the same 40 tokens, at 100 ms) finds 39 (the match stops at
  // prompt - 1): its step computes 1 token, 2 ms, first token at 102 ms; its last at 103 ms.
  const auto r = test::replay_under_budget(
      "radix", {with_tokens("a", 0, 40, 2, 1, 40, 1), with_tokens("b", 100 * kMs, 40, 2, 1, 40, 1)}, steps(1, 1));
  const ReplayReport& rep = r.report;
  CHECK(rep.completed == 2);
  CHECK(rep.prefix_block_tokens == 1);
  CHECK(rep.prefix_queried_tokens == 80);
  CHECK(rep.prefix_hit_tokens == 39);
  CHECK(rep.ttft.max_ns == 41 * kMs);  // A
  CHECK(rep.ttft.p50_ns == 2 * kMs);   // B
  CHECK(rep.end_ns == 103 * kMs);
  CHECK(rep.leak_free);
}

TEST_CASE("radix engine: hashes given per 512 tokens match at page 1 at block boundaries only") {
  // A: 1,100 tokens with hash_ids {7, 8}; B: {7, 9}; C: {7, 8}. At page 1 token k has an
  // identity iff floor(k / 512) < 2 (rehash_prefix): B shares tokens 0..511 with A (512 hits),
  // C tokens 0..1023 (1,024), the 76 past the last hash having no identity.
  Request a = test::request("a", 0, 1100, 2);
  Request b = test::request("b", 100 * kMs, 1100, 2);
  Request c = test::request("c", 200 * kMs, 1100, 2);
  a.prefix_hashes = {7, 8};
  b.prefix_hashes = {7, 9};
  c.prefix_hashes = {7, 8};
  for (Request* x : {&a, &b, &c}) x->prefix_block_tokens = 512;
  const auto r = test::replay_under_budget("radix", {a, b, c}, steps(1));
  CHECK(r.report.prefix_hit_tokens == 512 + 1024);
  CHECK(r.report.prefix_queried_tokens == 3300);
}

namespace {

// Under a large budget, one request at a time (max_running 1), 1 ms steps. A (prompt 20 of
// family 1, output 5) runs steps 0-4, done at 5 ms; its prompt is in the tree from its
// prefill on. During step 0 arrive `others` requests of prompt 8 and output 2 with no
// common prefix (each runs 2 steps holding 9 then 10 positions), then C: prompt 30 whose
// first 20 tokens are A's (20 cached), output 2 (31, then 32 positions). Returns the
// effective positions of each run after A, in order, one entry per request.
std::vector<std::int64_t> order_after_a(int others, bool lpm) {
  std::vector<Request> reqs = {with_tokens("a", 0, 20, 5, 1, 20, 1)};
  for (int i = 0; i < others; ++i) {
    reqs.push_back(with_tokens("b" + std::to_string(i), kMs / 2 + i, 8, 2, 0, 0, 100 + static_cast<std::uint64_t>(i)));
  }
  reqs.push_back(with_tokens("c", kMs - 1000, 30, 2, 1, 20, 2));
  ReplayOptions o = steps(1);
  o.max_running = 1;
  o.memory.kv_budget_bytes = 1'000'000;
  o.memory.policy = Policy::sglang;
  o.memory.sglang_lpm = lpm;
  const auto r = test::replay_under_budget("radix", reqs, o);
  REQUIRE(r.report.completed == others + 2);
  // Each request after A shows first with prompt + 1 effective positions (9 or 31).
  std::vector<std::int64_t> out;
  for (const TimelineRow& row : r.rows) {
    if (row.time_ns < 5 * kMs || row.running != 1) continue;
    if (row.effective_bytes == 9 || row.effective_bytes == 31) out.push_back(row.effective_bytes);
  }
  return out;
}

}  // namespace

TEST_CASE("sglang lpm: the waiting request with the longest cached prefix goes first, FCFS past 128 waiting") {
  // fcfs (SGLang's default): the first of the others goes before C.
  auto fcfs = order_after_a(3, false);
  REQUIRE(!fcfs.empty());
  CHECK(fcfs.front() == 9);
  // lpm with 4 waiting: C (20 cached) is sorted before the others (0 cached).
  auto lpm = order_after_a(3, true);
  REQUIRE(!lpm.empty());
  CHECK(lpm.front() == 31);
  // 127 others + C = 128 waiting: still sorted (the limit is "more than 128").
  CHECK(order_after_a(127, true).front() == 31);
  // 128 others + C = 129 waiting when A leaves: lpm falls back to fcfs, which sorts
  // nothing, so the first other goes first; once it runs 128 wait, the queue is sorted again
  // and C goes second.
  const auto fallback = order_after_a(128, true);
  REQUIRE(fallback.size() >= 2);
  CHECK(fallback[0] == 9);
  CHECK(fallback[1] == 31);
}

TEST_CASE("sglang lpm: --schedule-policy takes fcfs or lpm, with the sglang policy under a budget") {
  const std::string trace = std::string(KVSIM_SOURCE_DIR) + "/traces/chat-mix.csv";
  auto r = test::run_cli({"replay", trace, "--kv-budget", "2GiB", "--policy", "sglang", "--schedule-policy", "spf"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--schedule-policy") && Catch::Contains("expected fcfs or lpm"));
  r = test::run_cli({"replay", trace, "--kv-budget", "2GiB", "--schedule-policy", "lpm"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("sglang policy only"));
  r = test::run_cli({"replay", trace, "--policy", "sglang", "--schedule-policy", "lpm"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("memory budget"));
  // Without a prefix cache every prefix is 0 and lpm would be FCFS under another name; the
  // watermark is vLLM's rule: both refused rather than silently without effect.
  r = test::run_cli({"replay", trace, "--kv-budget", "2GiB", "--allocator", "paged", "--policy", "sglang",
                     "--schedule-policy", "lpm"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--schedule-policy") && Catch::Contains("caches any"));
  r = test::run_cli({"replay", trace, "--kv-budget", "2GiB", "--allocator", "paged", "--policy", "sglang",
                     "--watermark", "0.5"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--watermark") && Catch::Contains("vllm policy only"));
  r = test::run_cli({"replay", "--help"});
  CHECK_THAT(r.out, Catch::Contains("--schedule-policy") && Catch::Contains("radix[:page=1]"));
}

namespace {

// Under `policy` and a budget of `budget` positions, 1 ms steps, A (prompt 64, output 8) at 0
// and B (the same 64 tokens, output 8) at 0.5 ms, both with one identity per token: when B
// is first scheduled. At step 1 (1 ms) A holds its 64 prompt positions, all in the tree and
// locked, and the one its first decode writes: 65.
std::int64_t b_scheduled_ns(const std::string& allocator, Policy policy, std::int64_t budget) {
  ReplayOptions o = steps(1);
  o.memory.kv_budget_bytes = budget;
  o.memory.policy = policy;
  o.memory.watermark_ppb = 0;
  const auto r = test::replay_under_budget(
      allocator, {with_tokens("a", 0, 64, 8, 1, 64, 1), with_tokens("b", kMs / 2, 64, 8, 1, 64, 1)}, o);
  REQUIRE(r.report.completed == 2);
  REQUIRE(r.report.preemptions == 0);
  REQUIRE(r.records.size() == 2);
  return r.records[0].id == "b" ? r.records[0].first_scheduled_ns : r.records[1].first_scheduled_ns;
}

}  // namespace

TEST_CASE("sglang: a waiting request's estimate counts its extend tokens, not the prefix it finds cached") {
  // SGLang's PrefillAdder.add_one_req: total = extend_input_len + min(max_new_tokens, 4096)
  // must be below the free positions less the running requests' clipped remaining tokens
  // scaled by the new-token ratio. At step 1, under 100 positions: 100 - 65 free, A's 7
  // remaining x 0.7 = 4.9, so 35 - 4.9 = 30.1 left. B finds 63 of its 64 tokens cached
  // (the match stops at prompt - 1): 1 + 8 = 9 < 30.1, admitted at step 1. Counting its whole
  // prompt (64 + 8 = 72) it would wait for A to finish, at 8 ms. Its peak beside A's, 72 + 9
  // own positions, fits: the wait would have no memory reason.
  CHECK(b_scheduled_ns("radix", Policy::sglang, 100) == kMs);
  // With no prefix in common, B's estimate is its whole prompt, 64 + 8 = 72 >= 30.1: it
  // waits until A has finished (its 8th token ends step 7, at 8 ms).
  ReplayOptions o = steps(1);
  o.memory.kv_budget_bytes = 100;
  o.memory.policy = Policy::sglang;
  const auto w = test::replay_under_budget(
      "radix", {with_tokens("a", 0, 64, 8, 1, 64, 1), with_tokens("b", kMs / 2, 64, 8, 2, 64, 2)}, o);
  REQUIRE(w.records.size() == 2);
  const RequestRecord& b = w.records[0].id == "b" ? w.records[0] : w.records[1];
  CHECK(b.first_scheduled_ns == 8 * kMs);
}

TEST_CASE("radix under vllm's policy: the hits a running request holds take no free room at admission") {
  // Pages of 16, 8 pages (128 positions), no watermark. At step 1 A holds 65 positions, 5
  // pages, its 4 prompt pages locked in the tree; 3 pages are free. B matches 3 pages (at most
  // prompt - 1 = 63 tokens: 48), all locked by A, so its first chunk of 64 positions (4
  // pages) takes 1 free page: admitted at step 1. Counting the hits as new pages (4 > 3) it
  // would wait for A to finish. Their peak together: A 5 pages, B 1 own page for its last
  // prompt page (a duplicate of A's, freed when inserted) and 1 for its output: 7 of 8.
  CHECK(b_scheduled_ns("radix:page=16", Policy::vllm, 128) == kMs);
  // paged with prefix caching takes the same rule (roomless_hit_bytes) and admits B at once too.
  CHECK(b_scheduled_ns("paged:block=16,prefix-caching=on", Policy::vllm, 128) == kMs);
}

TEST_CASE("sglang: a request admitted earlier in the step counts once, its chunk in the room and its limit beside") {
  // 1 ms steps, 150 positions, paged blocks of 1 (SGLang's token pool). R (prompt 10, output
  // 100) runs alone from 0; W1 and W2 (prompt 20, output 10, no prefix in common) arrive at
  // 0.5 ms. At step 1 R holds 12 positions and its remaining 99 tokens x the ratio (0.7, less
  // one step's decay: 0.699) are 69 left: rem = 150 - 12 - 69 = 69 > 20 + 10, W1 is admitted
  // and takes 21 positions (its prompt and its first token's slot). SGLang's offset then
  // holds W1's 20 + 10 against the room as the step began: 150 - 12 - 69 - 30 = 39 > 30, so
  // W2 is admitted in the same step. Counting W1's chunk both in the room and in the offset
  // would leave 150 - 33 - 69 - 30 = 18 and defer W2 to step 2.
  ReplayOptions o = steps(1);
  o.memory.kv_budget_bytes = 150;
  o.memory.policy = Policy::sglang;
  const auto r = test::replay_under_budget(
      "paged:block=1", {with_tokens("r", 0, 10, 100, 1, 10, 1), with_tokens("w1", kMs / 2, 20, 10, 2, 20, 2),
                        with_tokens("w2", kMs / 2, 20, 10, 3, 20, 3)}, o);
  REQUIRE(r.report.completed == 3);
  for (const RequestRecord& rec : r.records) {
    if (rec.id != "r") CHECK(rec.first_scheduled_ns == kMs);
  }
}
