// The engine with the radix allocator (SGLang's RadixCache) and the sglang policy's
// --schedule-policy lpm, on schedules worked out by hand. One byte per position, so bytes
// and positions are the same number.
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>

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

TEST_CASE("sglang lpm with asynchronous scheduling: a request the plan has not seen holds up none it has") {
  // 1 ms steps, room for all. P (prompt 20 of family 1, output 50) starts at 0 and keeps
  // running. Each step is planned as the one before begins, seeing the arrivals up to then.
  // S (prompt 8, nothing cached) arrives at 0.5 ms, L (prompt 30, its first 20 P's: 20
  // cached) at 1.5 ms. Step 2's plan sees S, not L; lpm sorts L first. L is passed by, and S
  // starts at step 2 (1.5 ms of waiting); stopping at L, S waited for step 3 (2.5 ms). L
  // starts at step 3 (1.5 ms too).
  ReplayOptions o = steps(1);
  o.memory.kv_budget_bytes = 1'000'000;
  o.memory.policy = Policy::sglang;
  o.memory.sglang_lpm = true;
  o.async_scheduling = true;
  const auto r = test::replay_under_budget("radix", {with_tokens("p", 0, 20, 50, 1, 20, 1),
                                                     with_tokens("s", kMs / 2, 8, 2, 0, 0, 2),
                                                     with_tokens("l", kMs + kMs / 2, 30, 2, 1, 20, 3)},
                                           o);
  REQUIRE(r.report.completed == 3);
  CHECK(r.report.waiting.max_ns == kMs + kMs / 2);
  CHECK(r.report.prefix_hit_tokens == 20);
}

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

namespace {

// A native CSV trace with prefix identity, written to a scratch file.
std::string prefix_trace(const std::string& name, const std::string& rows) {
  const auto path = test::scratch_dir("radix-hunt") / name;
  std::ofstream(path) << "id,arrival,prompt_tokens,output_tokens,prefix_block_tokens,prefix_hashes\n" << rows;
  return path.string();
}

// replay with 10 ms steps and 1 ms a prompt token, Llama-3.1-8B's 131,072 bytes a position.
test::CliResult replay_hand(const std::string& trace, std::vector<std::string> more) {
  std::vector<std::string> args = {"replay", trace, "--quiet", "--cost", "constant:step=10ms,prefill-token=1ms"};
  args.insert(args.end(), more.begin(), more.end());
  return test::run_cli(args);
}

}  // namespace

TEST_CASE("sglang: a request's own matched prefix, locked before its check, is no free room for it") {
  // 100 positions. b (30 tokens, ids 1 2 3 at 10 a block) finishes at once: its 31 positions
  // stay in the tree, unlocked. a (10 tokens, 60 out) runs from 1 s; c (40 tokens, 1 2 3 4)
  // waits from 1.001 s and matches b's 30. At step 2 (1.020 s) a holds 12: 88 free with the
  // tree's 31 evictable. PrefillAdder.add_one_req checks again with c's prefix locked
  // (_lock_node): 88 - 30 = 58 less a's 59 remaining x 0.7 = 41.3 gives 16.7 < c's extend 10
  // + limit 30; each later step a holds one more and owes 0.7 less: c waits for a to finish,
  // 59 decode steps after its first token at 1.020 s: 1.610 s, as with no prefix in common.
  // Crediting the prefix in the room too, 47 > 40 admitted c at 1.020 s, then retracted it.
  const auto shared = prefix_trace("lock.csv", "b,0,30,1,10,1 2 3\na,1,10,60,,\nc,1.001,40,30,10,1 2 3 4\n");
  const auto r = replay_hand(shared, {"--allocator", "radix", "--policy", "sglang", "--kv-budget", "13107200",
                                      "--per-request", "-"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("radix:page=1,c,3,1.001000000,1.610000000,") && Catch::Contains(",30,30,0,completed"));
}

TEST_CASE("radix: a request back from preemption matches up to its prompt and generated tokens less one") {
  // Pages of 16, 4 pages (64 positions). a and b, one 16-token page each (ids 1 and 2), 30
  // out. b is preempted at step 16 holding 16 + 15 tokens; its prompt page stays in the tree.
  // adjust_max_prefix_ids caps the match at len(prompt + output) - 1 = 30 tokens, so the page
  // is found (16 tokens); capped at the prompt's 15 as a first admission, it found nothing
  // and recomputed 31 tokens, ending at 0.513 s instead of 0.497 s, as paged with caching.
  const auto t = prefix_trace("resume.csv", "a,0,16,30,16,1\nb,0.005,16,30,16,2\n");
  for (const char* allocator : {"radix:page=16", "radix:page=1", "paged:block=16,prefix-caching=on"}) {
    INFO(allocator);
    const auto r = replay_hand(t, {"--allocator", allocator, "--kv-budget", "8388608", "--json"});
    REQUIRE(r.exit_code == 0);
    const auto run = nlohmann::json::parse(r.out)["runs"][0];
    CHECK(run["prefix_cache"]["preempted_queried_tokens"] == 31);
    CHECK(run["prefix_cache"]["preempted_hit_tokens"] == 16);
    CHECK(run["time"]["end_s"] == 0.497);
  }
}

TEST_CASE("radix: a preempted request's generated tokens go back to the pool, not into the tree") {
  // The trace above at page 1 (64 positions), 10 ms steps. At step 16 a holds 16 + 17 = 33
  // and b 16 + 15 = 31; a's next token does not fit and b, the newest, is preempted. Its
  // prompt (16) stays in the tree, unlocked; its 15 generated tokens are freed
  // (cache_finished_req with is_insert=False), so a grows to 46 by step 29 with 64 - 33 - 16
  // = 15 free and evicts nothing. a completes at 0.332 s: its prompt (16) and its 30
  // generated tokens join the tree, 62 cached, 2 free. b comes back, locks its 16-token
  // match and needs 31 + 1 - 16 = 16 more: evict(16) takes the least recently used unlocked
  // leaf, a's 30 generated tokens, whole. 30 evicted in all (45 while the 15 were cached:
  // evicted at step 17 for a's next token, then the 30); at the end a's prompt and b's 46.
  // Swapped out instead, b takes its 31 positions to the host and leaves the same behind:
  // back, it locks its prompt and needs the same 16, and the same 30 are evicted.
  const auto t = prefix_trace("retract.csv", "a,0,16,30,16,1\nb,0.005,16,30,16,2\n");
  for (const char* preemption : {"recompute", "swap"}) {
    INFO(preemption);
    const auto r = replay_hand(t, {"--allocator", "radix", "--kv-budget", "8388608", "--preemption", preemption, "--json"});
    REQUIRE(r.exit_code == 0);
    const auto run = nlohmann::json::parse(r.out)["runs"][0];
    CHECK(run["prefix_cache"]["evicted_bytes"] == 30 * 131'072);
    CHECK(run["prefix_cache"]["evictable_bytes"]["at_end"] == (16 + 46) * 131'072);
    if (std::string(preemption) == "recompute") {
      CHECK(run["prefix_cache"]["preempted_hit_tokens"] == 16);
      CHECK(run["time"]["end_s"] == 0.497);
    }
  }
}

TEST_CASE("radix: short of room, SGLang's standard pool evicts num_tokens, not the shortfall") {
  // Pages of 1, 64 positions. The tree holds a (8 + 1) and b (30 + 1), unlocked: 24 free.
  // c's extend of 30 is more: evict_from_tree_cache calls evict(30), which pops the LRU
  // leaves until 30 are freed: a's generated leaf (1), a's prompt (8), b's generated leaf
  // (1), b's prompt (30): 40. d then finds nothing of b's (evicting the shortfall, 6, kept b
  // and d found 30).
  const auto t = prefix_trace("evict.csv",
                              "a,0,8,1,2,1 2 3 4\n"
                              "b,1,30,1,2,10 11 12 13 14 15 16 17 18 19 20 21 22 23 24\n"
                              "c,2,30,1,2,30 31 32 33 34 35 36 37 38 39 40 41 42 43 44\n"
                              "d,3,32,1,2,10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 50\n");
  const auto r = replay_hand(t, {"--allocator", "radix", "--policy", "sglang", "--kv-budget", "8388608", "--json"});
  REQUIRE(r.exit_code == 0);
  const auto cache = nlohmann::json::parse(r.out)["runs"][0]["prefix_cache"];
  CHECK(cache["evicted_bytes"] == 40 * 131'072);
  CHECK(cache["hit_tokens"] == 0);
}

TEST_CASE("paged with caching: a swapped-in request finds its generated tokens' blocks, its prompt's all") {
  // 5 blocks of 16. a (32 tokens, ids 1 2) computes both its blocks; b (the same prompt) at
  // 0.045 s reuses block 1 only (the last-token rule: (32 - 1) / 16 = 1) and adds 2. At step
  // 16 a needs a 4th block: b, the newest, is swapped out, its partial block going to a and
  // its copy of block 2 left cached. At step 17 b comes back holding 32 + 15 positions (3
  // blocks): both prompt blocks are a's and found (v0's _swap_block_table reuses every
  // cached block), so it needs 1 new block, its own old copy of block 2, evicted. Looked up
  // as a first admission (1 block found) it needed 2 with 1 free, and waited for a to finish.
  const auto t = prefix_trace("swap.csv", "a,0,32,30,16,1 2\nb,0.045,32,30,16,1 2\n");
  const auto timeline = (test::scratch_dir("radix-hunt") / "swap-timeline.csv").string();
  const auto r = replay_hand(t, {"--allocator", "paged:block=16,prefix-caching=on", "--kv-budget", "10485760",
                                 "--preemption", "swap", "--timeline", timeline, "--sample-every", "step"});
  REQUIRE(r.exit_code == 0);
  // step 17: both running, 5 blocks allocated, nothing cached, b's copy of block 2 evicted.
  const std::string rows = test::slurp(timeline);
  const auto at = rows.find("\"paged:block=16,prefix-caching=on\",0.218251659,17,2,0,");
  REQUIRE(at != std::string::npos);
  const std::string row = rows.substr(at, rows.find('\n', at) - at);
  CHECK_THAT(row, Catch::Contains(",10485760,10485760,") && Catch::EndsWith(",0,2097152"));
}
