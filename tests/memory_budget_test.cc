// Serving under a memory budget: admission, queueing, preemption and the engines' policies,
// on schedules worked out by hand. Layouts of one byte per position make bytes and slots the
// same number; blocks are 16 positions.
#include <catch2/catch.hpp>
#include <map>

#include "kvsim/replay.h"
#include "test_support.h"

using namespace kvsim;

namespace {

constexpr std::int64_t kMs = 1'000'000;

test::BudgetRun run(const std::string& spec, std::vector<Request> requests, const ReplayOptions& o) {
  return test::replay_under_budget(spec, std::move(requests), o);
}

// Steps of exactly 1 ms whatever the batch, so every time below is a whole step.
ReplayOptions budget_of(std::int64_t bytes, Policy policy = Policy::vllm) {
  ReplayOptions o;
  o.layout = test::unit_layout(4096);
  o.cost.base_ps = kMs * 1000;
  o.cost.prefill_token_ps = 0;
  o.memory.kv_budget_bytes = bytes;
  o.memory.policy = policy;
  return o;
}

// SGLang's policy with a new-token ratio of 0: the running requests' futures count for nothing.
ReplayOptions sglang_ratio_0(std::int64_t bytes) {
  ReplayOptions o = budget_of(bytes, Policy::sglang);
  o.memory.sglang_init_ratio_ppb = 0;
  o.memory.sglang_min_ratio_ppb = 0;
  return o;
}

}  // namespace

TEST_CASE("budget: a request that does not fit waits exactly until the running one frees") {
  // 20 blocks. A (prompt 200, output 5) holds ceil(201/16) = 13 blocks from step 0 and
  // finishes at the end of step 4 (5 ms). B (prompt 150, output 1) arrives at 0.5 ms and
  // needs ceil(151/16) = 10 blocks: 208 + 160 > 320, so it waits, and starts at step 5
  // (5 ms), the instant A frees. Its one token comes at 6 ms.
  Request a = test::request("a", 0, 200, 5);
  Request b = test::request("b", kMs / 2, 150, 1);
  const auto r = run("paged:block=16", {a, b}, budget_of(20 * 16));
  const ReplayReport& rep = r.report;
  CHECK(rep.completed == 2);
  CHECK(rep.preemptions == 0);
  CHECK(rep.end_ns == 6 * kMs);
  CHECK(rep.waiting.max_ns == 5 * kMs - kMs / 2);   // B: 0.5 ms to 5 ms
  CHECK(rep.ttft.max_ns == 6 * kMs - kMs / 2);      // B's first token at 6 ms
  CHECK(rep.memory_bound_ns == 4 * kMs);            // steps 1-4 refused B
  CHECK(rep.queue_max == 1);
  CHECK(rep.queue_mean == Approx(4.5 / 6.0).epsilon(1e-12));  // B queued 4.5 of 6 ms
  CHECK(rep.allocated_bytes.peak == 13 * 16);       // never both at once
}

TEST_CASE("budget: a block pool reserves its whole blocks, and block-level usage is against them") {
  // A budget of 1,000 bytes in blocks (or radix pages) of 16 one-byte positions: 62 blocks,
  // 992 bytes; the 8 left over can hold no block, so no one reserves them (vLLM's pool is
  // num_gpu_blocks x page size). A (prompt 200, output 5) holds 201 + k positions at step k,
  // 13 blocks (208 bytes) from step 0 to the end of step 4: block-level usage 208 / 992.
  for (const char* spec : {"paged:block=16", "radix:page=16"}) {
    INFO(spec);
    const auto r = run(spec, {test::request("a", 0, 200, 5)}, budget_of(1000));
    CHECK(r.report.completed == 1);
    CHECK(r.report.capacity_bytes == 992);
    CHECK(r.report.reserved_bytes.peak == 992);
    CHECK(r.report.reserved_bytes.mean == Approx(992).epsilon(1e-12));
    CHECK(r.report.allocated_bytes.peak == 208);
    CHECK(r.report.block_usage == Approx(208.0 / 992).epsilon(1e-12));
    for (const auto& row : r.rows) CHECK(row.reserved_bytes == 992);
  }
  // A budget below one block holds no block: it stays as given, and the request is refused.
  const auto none = run("paged:block=16", {test::request("a", 0, 200, 5)}, budget_of(10));
  CHECK(none.report.capacity_bytes == 10);
  CHECK(none.report.rejected_too_large == 1);
}

TEST_CASE("budget: SGLang retracts, among requests with equal tokens generated, the longest prompt") {
  // 10 blocks, a ratio of 0 (the running requests' future counts for nothing). A (prompt 40,
  // output 50) starts alone at step 0. B (prompt 20, output 20) and C (prompt 30, output 20)
  // arrive during it and start together at step 1: B against 160 - 48 = 112 free (20 + 20 <
  // 112), C against 112 - 32 less B's 20 (30 + 20 < 60). At step k A holds 41 + k positions,
  // B 21 + (k - 1), C 31 + (k - 1): 3 + 2 + 2 blocks, C's 3rd at step 3, A's 4th at step 8,
  // B's 3rd at step 13, and at step 19 C needs its 4th with all 10 taken. B and C have each
  // generated 18 (A 19): the fewest, and of those the longest prompt, C, is retracted
  // (retract_decode's sort), recomputing 30 + 18 = 48 positions.
  const std::vector<Request> trace = {test::request("a", 0, 40, 50), test::request("b", kMs / 2, 20, 20),
                                      test::request("c", kMs / 2 + kMs / 10, 30, 20)};
  ReplayOptions o = sglang_ratio_0(10 * 16);
  const auto r = run("paged:block=16", trace, o);
  CHECK(r.report.preemptions == 1);
  CHECK(r.report.recomputed_tokens == 48);
  CHECK(r.report.completed == 3);
}

TEST_CASE("budget: SGLang charges a round's admissions once, unscaled, the first into an empty batch too") {
  // 1,000 one-position pages, SGLang's default ratio 0.7. R1 (100, 400), R2 (100, 300) and R3
  // (50, 10) arrive at 0. R1 starts alone and is charged its 400 unscaled; R2: 899 free less
  // 400 leaves 499 > 100 + 300; R3: 899 - 101 = 798 free less 400 + 300 leaves 98 > 50 + 10.
  // All three start at step 0. Charging each again at 0.7 once its prefill was done (and R1
  // only at 0.7) left R3 8 positions, so it waited a step.
  const std::vector<Request> trace = {test::request("r1", 0, 100, 400), test::request("r2", 0, 100, 300),
                                      test::request("r3", 0, 50, 10)};
  const auto r = run("radix:page=1", trace, budget_of(1000, Policy::sglang));
  CHECK(r.report.waiting.max_ns == 0);
  CHECK(r.report.preemptions == 0);
  CHECK(r.report.completed == 3);
}

TEST_CASE("budget: SGLang tries the waiting again only once the batch has shrunk, a step after") {
  // 10 blocks, a ratio of 0. A (40, 50) and S (10, 5) start at step 0 (S against 160 - 48
  // free less A's 50: 15 < 62); B (20, 30) is refused beside them (96 - 55 = 41 <= 50) and the
  // batch is marked full, so B is not tried at step 1, where A's and S's futures count for
  // nothing. S ends at step 4; update_running_batch clears the mark in step 5's decode, after
  // that iteration found the batch still full, so B starts at step 6.
  const std::vector<Request> trace = {test::request("a", 0, 40, 50), test::request("s", 0, 10, 5),
                                      test::request("b", 0, 20, 30)};
  ReplayOptions o = sglang_ratio_0(10 * 16);
  const auto r = run("paged:block=16", trace, o);
  CHECK(r.report.waiting.max_ns == 6 * kMs);
  CHECK(r.report.preemptions == 0);
  CHECK(r.report.completed == 3);
}

TEST_CASE("budget: SGLang's mark full, reopened by an emptied batch, a cancellation and max_running") {
  // 1,500 one-position pages, SGLang's default ratio. All arrive at 0.
  SECTION("a round that begins with nothing running admits every request that fits") {
    // A (600, 5) starts alone, charged 5; B (100, 1000) against 899 free less 5 is refused and
    // the batch marked full. A ends at step 4; at step 5 nothing runs (SGLang's
    // update_running_batch cleared the mark as the batch emptied), and B starts, then C (10,
    // 10) against 1,500 - 101 = 1,399 free less B's 1,000: 20 < 399, in the same round.
    const auto r = run("radix:page=1",
                       {test::request("a", 0, 600, 5), test::request("b", 0, 100, 1000), test::request("c", 0, 10, 10)},
                       budget_of(1500, Policy::sglang));
    CHECK(r.report.waiting.max_ns == 5 * kMs);  // B and C, both from step 5
    CHECK(r.report.memory_bound_ns == 5 * kMs);  // steps 0-4 refused B
    CHECK(r.report.preemptions == 0);
  }
  SECTION("a cancellation reopens admission as late as a completion") {
    // A (600, 50) and D (10, 200) start at step 0 (D: 10 + 200 < 899 - 50); B (100, 700) is
    // refused (800 >= 888 - 250) and the batch marked full. A is cancelled at 3.5 ms, within
    // step 3, and kvsim frees it at once: the plan of step 4 still finds the batch full (SGLang
    // filters an aborted request after that iteration's prefill attempt, as a finished one),
    // and B starts at step 5, as it would had A completed at the end of step 3. (SGLang's abort
    // runs one more decode pass first, which kvsim does not model: there B would start at 6.)
    std::vector<Request> trace = {test::request("a", 0, 600, 50), test::request("d", 0, 10, 200),
                                  test::request("b", 0, 100, 700)};
    trace[0].cancel_ns = 3 * kMs + kMs / 2;
    const auto r = run("radix:page=1", trace, budget_of(1500, Policy::sglang));
    CHECK(r.report.cancelled_running == 1);
    CHECK(r.report.waiting.max_ns == 5 * kMs);
  }
  SECTION("a refusal by the plan that sees a stop, with nothing admitted, leaves the batch unmarked") {
    // 1,200 positions; a ratio of 1 falling by 0.1 a decode step (steps 1-4: 0.6 at step 5).
    // R (10, 1000) starts alone, charged 1,000; S (10, 5) beside it (15 < 1,189 - 1,000). S
    // ends at step 4. W (40, 600) arrives at 4.5 ms; step 5's plan, the first to see S gone,
    // refuses it: 640 >= 1,184 free - 0.6 x R's 995 = 587. SGLang's update_running_batch then
    // filters S out in that same iteration, clearing the mark the refusal set, so step 6 tries
    // again: 1,183 - 0.5 x 994 = 686 > 640, and W starts at 6 ms (it would otherwise wait for R).
    ReplayOptions o = budget_of(1200, Policy::sglang);
    o.memory.sglang_init_ratio_ppb = 1'000'000'000;
    o.memory.sglang_min_ratio_ppb = 0;
    o.memory.sglang_decay_steps = 10;
    const auto r = run("radix:page=1",
                       {test::request("r", 0, 10, 1000), test::request("s", 0, 10, 5),
                        test::request("w", 4 * kMs + kMs / 2, 40, 600)},
                       o);
    CHECK(r.report.waiting.max_ns == kMs + kMs / 2);  // W: 4.5 ms to 6 ms (first admissions)
  }
  SECTION("a request done in its prefill step leaves the batch before the next plan") {
    // 1,000 positions. R (10, 100) starts alone. A (400, 1) and B (550, 10) arrive at 0.5 ms.
    // Step 1: R is charged 0.7 x 99 = 69; A: 401 < 988 - 69, admitted; B: 560 >= 587 - 69 - 1,
    // refused, the batch marked full. A ends in its prefill step; SGLang drops it from the last
    // prefill batch before it plans step 2 (get_next_batch_to_run), clearing the mark, and B
    // (560 < 987 - 68) starts at step 2: 1.5 ms of waiting, not 2.5.
    const auto r = run("radix:page=1",
                       {test::request("r", 0, 10, 100), test::request("a", kMs / 2, 400, 1),
                        test::request("b", kMs / 2, 550, 10)},
                       budget_of(1000, Policy::sglang));
    CHECK(r.report.waiting.max_ns == kMs + kMs / 2);
  }
  SECTION("a chunked request's last chunk is charged whole, unscaled, in its round") {
    // 2,200 positions, 512 tokens a step. C (1000, 1000) prefills 512 at step 0 and its last
    // 488 at step 1, before that step's round, where SGLang charges it as its in-flight chunked
    // request: 1,000 unscaled (add_chunked_req), not 0.7 x 1,000. W (100, 150), arrived at
    // 0.5 ms: 250 >= 1,199 - 1,000, refused, the batch marked full, and it waits for C's end
    // (its 1,000th token at step 1,000): admitted at step 1,001, 1,000.5 ms after it came.
    ReplayOptions o = budget_of(2200, Policy::sglang);
    o.max_batched_tokens = 512;
    const auto r = run("radix:page=1", {test::request("c", 0, 1000, 1000), test::request("w", kMs / 2, 100, 150)}, o);
    CHECK(r.report.waiting.max_ns == 1000 * kMs + kMs / 2);
  }
  SECTION("a stop at max_running marks the batch full too") {
    // Two at a time. A (10, 5) and B (10, 50) start at 0; C (10, 5) finds no place, which
    // marks the batch full (get_num_allocatable_reqs). A ends at step 4; step 5's plan still
    // finds the batch full, and C starts at step 6 (at 5 ms had only the place counted).
    ReplayOptions o = budget_of(1500, Policy::sglang);
    o.max_running = 2;
    const auto r = run("radix:page=1",
                       {test::request("a", 0, 10, 5), test::request("b", 0, 10, 50), test::request("c", 0, 10, 5)}, o);
    CHECK(r.report.waiting.max_ns == 6 * kMs);
  }
}

TEST_CASE("budget: SGLang's idle loop spends a stop and resets the ratio") {
  // Found by tools/xcheck/sglang_model.py, an independent model written from docs/replay.md.
  const auto with_max = [](Request r, std::int64_t max_tokens) {
    r.max_tokens = max_tokens;
    return r;
  };
  SECTION("a stop before an idle gap is spent in it: a refusal after the gap marks the batch full") {
    // 300 positions. Z (5, 3) runs alone, steps 0-2, and ends at 3 ms; nothing runs or waits
    // until 10 ms, and SGLang's idle iterations filter Z out of its batch meanwhile. At 10 ms A
    // (10, 20; max 100) starts alone; B (10, 5; max 200): 10 + 200 >= 289 free - A's 100
    // unscaled, refused, and the batch marked full: no earlier stop is left to reopen it. A
    // ends at 30 ms (20 tokens from step 10), and B starts then, nothing running: 20 ms of
    // waiting. (Taking Z's stop as still to be filtered reopened admission at 12 ms.)
    const auto r = run("paged:block=1",
                       {test::request("z", 0, 5, 3), with_max(test::request("a", 10 * kMs, 10, 20), 100),
                        with_max(test::request("b", 10 * kMs, 10, 5), 200)},
                       budget_of(300, Policy::sglang));
    CHECK(r.report.completed == 3);
    CHECK(r.report.waiting.max_ns == 20 * kMs);
  }
  SECTION("the new-token ratio starts afresh after an idle gap") {
    // 1,000 positions; a ratio of 1 falling by 0.1 a decode step. R (10, 10) alone: its nine
    // decode steps take the ratio to 0.1. Idle from 10 ms to 20 ms: back to 1. X (10, 500; max
    // 500) starts alone at 20 ms; its decode at step 21 takes the ratio to 0.9. Y (100, 500;
    // max 500) arrives at 21.5 ms; at step 22 X has made 2 tokens and holds 13 positions:
    // 600 >= 987 - 0.9 x 498 = 539, refused, the batch marked full, and Y waits for X's end at
    // 520 ms: 498.5 ms. (With the ratio carried over the gap, 0 at step 22, Y started at once.)
    ReplayOptions o = budget_of(1000, Policy::sglang);
    o.memory.sglang_init_ratio_ppb = 1'000'000'000;
    o.memory.sglang_min_ratio_ppb = 0;
    o.memory.sglang_decay_steps = 10;
    const auto r = run("paged:block=1",
                       {test::request("r", 0, 10, 10), with_max(test::request("x", 20 * kMs, 10, 500), 500),
                        with_max(test::request("y", 21 * kMs + kMs / 2, 100, 500), 500)},
                       o);
    CHECK(r.report.completed == 3);
    CHECK(r.report.waiting.max_ns == 498 * kMs + kMs / 2);
  }
}

TEST_CASE("budget: vLLM preempts the newest, reserve admits fewer, SGLang retracts the fewest generated") {
  // 6 blocks, no watermark. A (prompt 40, output 50) and B (prompt 20, output 20) start
  // together at step 0, A first: 3 + 2 blocks. At step k they hold 41 + k and 21 + k
  // positions. A takes its 4th block at step 8 (6 blocks in all); at step 12 B needs its
  // 3rd block (33 positions) and nothing is free. Both have generated 12 tokens.
  const std::vector<Request> trace = {test::request("a", 0, 40, 50), test::request("b", 0, 20, 20)};

  SECTION("vllm: the newest running request, B, is preempted and recomputes 20 + 12 = 32 positions") {
    ReplayOptions o = budget_of(6 * 16, Policy::vllm);
    o.memory.watermark_ppb = 0;
    const auto r = run("paged:block=16", trace, o);
    CHECK(r.report.preemptions == 1);
    CHECK(r.report.recomputed_tokens == 32);
    // The timeline says when: all 32 in step 50, the one that starts at 50 ms.
    std::vector<std::pair<std::int64_t, std::int64_t>> recomputed;  // (step start, positions)
    for (const TimelineRow& row : r.rows) {
      if (row.recomputed_tokens != 0) recomputed.emplace_back(row.time_ns, row.recomputed_tokens);
    }
    CHECK(recomputed == std::vector<std::pair<std::int64_t, std::int64_t>>{{50 * kMs, 32}});
    CHECK(r.report.completed == 2);
    // A (41 + k positions) finishes at 90 at step 49, 50 ms. B then recomputes 32 positions
    // and its 13th token at step 50 (33 positions, 3 blocks) and its 20th at step 57: 58 ms.
    CHECK(r.report.e2e.max_ns == 58 * kMs);
    CHECK(r.report.e2e.p50_ns == 50 * kMs);
    CHECK(r.report.ttft.max_ns == 1 * kMs);  // B's first token came before the preemption
    CHECK(r.report.prompt_tokens == 60);     // each prompt counts once
  }
  SECTION("sglang: B, refused beside A's unscaled charge, waits while the batch is marked full") {
    // SGLang charges a request admitted in the round unscaled, the first into an empty batch
    // too (PrefillAdder._update_prefill_budget): B's 20 + 20 against 96 - 48 free less A's
    // 50 is refused (NO_TOKEN), which marks the batch full, and no waiting request is tried
    // again until the batch shrinks, however low the ratio (0 here) falls. A ends at step 49;
    // with nothing running B starts at step 50 and ends at 70 ms, as under reserve.
    ReplayOptions o = sglang_ratio_0(6 * 16);
    const auto r = run("paged:block=16", trace, o);
    CHECK(r.report.preemptions == 0);
    CHECK(r.report.completed == 2);
    CHECK(r.report.waiting.max_ns == 50 * kMs);
    CHECK(r.report.e2e.max_ns == 70 * kMs);
  }
  SECTION("reserve: B waits until A's whole life (40 + 50 = 90 positions, 6 blocks) is over") {
    const auto r = run("paged:block=16", trace, budget_of(6 * 16, Policy::reserve));
    CHECK(r.report.preemptions == 0);
    CHECK(r.report.completed == 2);
    // A ends at 50 ms; B runs steps 50..69 and ends at 70 ms.
    CHECK(r.report.e2e.max_ns == 70 * kMs);
    CHECK(r.report.waiting.max_ns == 50 * kMs);
  }
  SECTION("vllm with swap: B's 2 blocks go to host memory and return when A is done") {
    ReplayOptions o = budget_of(6 * 16, Policy::vllm);
    o.memory.watermark_ppb = 0;
    o.memory.preemption = Preemption::swap;
    o.memory.swap_bytes_per_second = 16'000'000'000;  // 32 bytes take 2 ns
    const auto r = run("paged:block=16", trace, o);
    CHECK(r.report.preemptions == 1);
    CHECK(r.report.recomputed_tokens == 0);
    CHECK(r.report.swapped_out_bytes == 2 * 16);  // 32 positions held after step 11
    CHECK(r.report.swapped_in_bytes == 3 * 16);   // back at 33 positions, decoding token 13
    // Step 12 lasts 2 ns longer (swap out) and step 50 2 ns longer (swap in: the 32 bytes
    // that went out come back; the block for token 13 is new on the device, not carried):
    // A ends at 50 ms + 2 ns, B at 58 ms + 4 ns.
    CHECK(r.report.e2e.p50_ns == 50 * kMs + 2);
    CHECK(r.report.e2e.max_ns == 58 * kMs + 4);
  }
}

TEST_CASE("budget: vLLM's preemptions under pressure, one victim a step, each counted once") {
  // 10 blocks, no watermark. a, b, c, d (prompt 16, output 40) start at step 0 in that order,
  // 17 positions (2 blocks) each: 8 blocks, 2 free. At step k each holds 17 + k positions.
  // - Step 16 (33 positions): a and b take the 2 free blocks; c finds none and preempts the
  //   newest running request, d (16 generated: 32 positions to recompute), then takes one of
  //   d's 2 blocks. 9 blocks held, 1 free; no admission in a step that preempted.
  // - d waits: back with 33 positions it needs 3 blocks, 1 is free.
  // - Step 32 (49 positions): a takes the free block; b finds none and preempts c, now the
  //   newest (32 generated: 48 positions), and takes one of its 3 blocks. 8 held, 2 free.
  //   c is back at the front of the queue and needs 4 blocks, so FCFS holds d behind it.
  // - a and b produce token 40 at step 39 (56 positions, 4 blocks) and leave at 40 ms.
  // - Step 40: c (48 + 1 positions, 4 blocks) and d (32 + 1, 3 blocks) are admitted
  //   together. c's token 40 comes at step 47 (48 ms), d's at step 63 (64 ms).
  std::vector<Request> trace;
  for (const char* id : {"a", "b", "c", "d"}) trace.push_back(test::request(id, 0, 16, 40));
  ReplayOptions o = budget_of(10 * 16, Policy::vllm);
  o.memory.watermark_ppb = 0;
  const auto r = run("paged:block=16", trace, o);
  const ReplayReport& rep = r.report;
  CHECK(rep.completed == 4);
  CHECK(rep.preemptions == 2);
  CHECK(rep.preempted_requests == 2);
  CHECK(rep.max_preemptions_per_request == 1);
  CHECK(rep.recomputed_tokens == 32 + 48);
  CHECK(rep.allocated_bytes.peak == 10 * 16);
  CHECK(rep.end_ns == 64 * kMs);
  CHECK(rep.leak_free);
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> finished;  // id -> (finish, preemptions)
  for (const RequestRecord& rec : r.records) finished[rec.id] = {rec.finish_ns, rec.preemptions};
  CHECK(finished["a"] == std::pair<std::int64_t, std::int64_t>{40 * kMs, 0});
  CHECK(finished["b"] == std::pair<std::int64_t, std::int64_t>{40 * kMs, 0});
  CHECK(finished["c"] == std::pair<std::int64_t, std::int64_t>{48 * kMs, 1});
  CHECK(finished["d"] == std::pair<std::int64_t, std::int64_t>{64 * kMs, 1});
  // The recomputations happen in step 40, the one that starts at 40 ms.
  std::int64_t recomputed_at_40 = 0;
  std::int64_t recomputed_elsewhere = 0;
  for (const TimelineRow& row : r.rows) {
    (row.time_ns == 40 * kMs ? recomputed_at_40 : recomputed_elsewhere) += row.recomputed_tokens;
  }
  CHECK(recomputed_at_40 == 80);
  CHECK(recomputed_elsewhere == 0);
}

TEST_CASE("budget: a request of two samples is preempted whole and resumes with both") {
  // 7 blocks, no watermark. a (prompt 40, output 20) holds 41 + k positions at step k: 3
  // blocks, its 4th at step 8. b (prompt 16, output 20, n = 2) shares its one full prompt
  // block and each sample owns the block past it: 17 + k positions per sample, 3 blocks. At
  // step 16 both samples need a block and none is free: b, the newest, preempts itself
  // (16 tokens generated per sample). Back, it needs 1 + 2 x 2 = 5 blocks with 3 free, so it
  // waits for a, which produces token 20 at step 19 and leaves at 20 ms. b returns at step
  // 20 with 16 + 16 + 1 positions per sample (80 bytes) and produces token 20 at step 23.
  Request b = test::request("b", 0, 16, 20);
  b.n = 2;
  const std::vector<Request> trace = {test::request("a", 0, 40, 20), b};
  ReplayOptions o = budget_of(7 * 16, Policy::vllm);
  o.memory.watermark_ppb = 0;
  const auto held_at = [](const test::BudgetRun& r, std::int64_t t) {
    for (const TimelineRow& row : r.rows) {
      if (row.time_ns == t) return row.allocated_bytes;
    }
    return std::int64_t{-1};
  };

  SECTION("by recompute: the prompt once and each sample's 16 tokens again") {
    const auto r = run("paged:block=16", trace, o);
    CHECK(r.report.completed == 2);
    CHECK(r.report.preemptions == 1);
    CHECK(r.report.recomputed_tokens == 16 + 2 * 16);
    CHECK(r.report.generated_tokens == 20 + 2 * 20);
    CHECK(r.report.ttft.max_ns == 1 * kMs);  // both first tokens before the preemption
    CHECK(r.report.end_ns == 24 * kMs);
    CHECK(held_at(r, 20 * kMs) == 80);
    CHECK(r.report.leak_free);
  }
  SECTION("by swapping: 3 blocks out, 5 in, each transfer lengthening its step") {
    // 48 bytes out at 25 GB/s take 1.92 ns, and the same 48 come back (the 2 blocks of the
    // 80 held back are new on the device: each sample's 33rd position), each rounded up to
    // the nanosecond: a leaves 2 ns late, and b's last step ends 2 + 2 ns late.
    o.memory.preemption = Preemption::swap;
    o.memory.swap_bytes_per_second = 25'000'000'000;
    const auto r = run("paged:block=16", trace, o);
    CHECK(r.report.completed == 2);
    CHECK(r.report.preemptions == 1);
    CHECK(r.report.swapped_out_bytes == 48);
    CHECK(r.report.swapped_in_bytes == 80);
    CHECK(r.report.recomputed_tokens == 0);
    CHECK(r.report.e2e.p50_ns == 20 * kMs + 2);
    CHECK(r.report.end_ns == 24 * kMs + 4);
    CHECK(r.report.leak_free);
  }
}

TEST_CASE("budget: a swap of more than 2^63 / 10^9 bytes lasts its transfer time, and time never runs back") {
  // Llama-3.1-8B's 131,072 bytes per position; a 20 GiB budget is 10,240 blocks of 16. A and
  // B (prompt 72,000, output 12,000) arrive at 0 and both start in step 0 holding 72,001
  // positions (4,501 blocks each). In step 9,920 each reaches 81,921 positions and needs
  // block 5,121 with all 10,240 in use: B, the newest, is swapped out holding 81,920
  // positions, 5,120 blocks = 10,737,418,240 bytes, more than 2^63 / 10^9 (the old ceil_div
  // took the 128-bit product and truncated it: the step's duration came out negative).
  // A ends after step 11,999; B comes back in step 12,000 at 81,921 positions (5,121
  // blocks = 10,739,515,392 bytes, the last new on the device: the 5,120 that went out
  // cross the link again) and produces its last token in step 14,079.
  ReplayOptions o;
  o.layout.groups = {test::group("full", 131'072)};
  o.layout.max_model_len = 131'072;
  o.cost.base_ps = kMs * 1000;
  o.cost.prefill_token_ps = 0;
  o.memory.kv_budget_bytes = std::int64_t{20} << 30;
  o.memory.watermark_ppb = 0;
  o.memory.preemption = Preemption::swap;
  o.memory.swap_bytes_per_second = 25'000'000'000;
  const auto r = run("paged:block=16", {test::request("a", 0, 72'000, 12'000), test::request("b", 0, 72'000, 12'000)}, o);
  constexpr std::int64_t kBlock = 16 * 131'072;
  CHECK(r.report.preemptions == 1);
  CHECK(r.report.swapped_out_bytes == 5'120 * kBlock);
  CHECK(r.report.swapped_in_bytes == 5'121 * kBlock);
  // Transfers at 25 GB/s: ceil(bytes / 25) ns, the same bytes each way.
  constexpr std::int64_t kOut = 429'496'730;  // 10,737,418,240 / 25 = 429,496,729.6
  constexpr std::int64_t kIn = kOut;
  CHECK(r.report.iterations == 14'080);
  CHECK(r.report.e2e.p50_ns == 12'000 * kMs + kOut);
  CHECK(r.report.end_ns == 14'080 * kMs + kOut + kIn);
  REQUIRE(r.rows.size() == 14'080);
  for (std::size_t i = 1; i < r.rows.size(); ++i) {
    if (r.rows[i].time_ns <= r.rows[i - 1].time_ns) FAIL("timeline row " << i << " goes back in time");
  }
}

TEST_CASE("budget: the victim is chosen by the policy's rule, not the request that ran short") {
  SECTION("vllm: A (older) runs short, and B, the newest, is preempted") {
    // 5 blocks. A (prompt 40, output 20) holds 41 + k positions at step k, B (prompt 10,
    // output 10) 11 + k: 3 + 1 blocks at step 0, B's 2nd at step 6 (17 positions), and A
    // needs its 4th at step 8 (49) with none free. B, having generated 8 tokens (steps
    // 0-7), goes: 10 + 8 = 18 positions to recompute. A ends at 20 ms holding 4 blocks, so
    // B (19 positions, 2 blocks, after its recompute) waits for the 5th until then; it
    // writes tokens 9 and 10 at steps 20 and 21 and ends at 22 ms.
    ReplayOptions o = budget_of(5 * 16, Policy::vllm);
    o.memory.watermark_ppb = 0;
    const auto r = run("paged:block=16", {test::request("a", 0, 40, 20), test::request("b", 0, 10, 10)}, o);
    CHECK(r.report.preemptions == 1);
    CHECK(r.report.recomputed_tokens == 18);  // A would have been 40 + 8 = 48
    CHECK(r.report.completed == 2);
    CHECK(r.report.e2e.p50_ns == 20 * kMs);
    CHECK(r.report.e2e.max_ns == 22 * kMs);
  }
  SECTION("sglang: A (older, longer prompt, more generated) runs short; B, with fewer generated, is retracted") {
    // 6 blocks, estimate ratio 0. A (prompt 44, output 30) holds 45 + k positions at step
    // k: 3 blocks, its 4th at step 4 (49), its 5th at step 20 (65). B (prompt 10, output
    // 20) arrives at 2.5 ms; at step 3 its prompt + max_tokens = 30 fits the 48 free, so it
    // starts with 11 positions (1 block) and holds 11 + (k - 3): its 2nd block at step 9
    // (17). At step 20 all 6 blocks are held and A needs one. Generated so far: A 20
    // (steps 0-19), B 17 (steps 3-19). The fewest generated goes, although A has the longer
    // prompt and is the one short: B, with 10 + 17 = 27 positions to recompute. A ends at
    // 30 ms; B comes back at step 30 and writes tokens 18-20 at steps 30-32: ends at 33 ms.
    ReplayOptions o = sglang_ratio_0(6 * 16);
    const auto r = run("paged:block=16", {test::request("a", 0, 44, 30), test::request("b", kMs * 5 / 2, 10, 20)}, o);
    CHECK(r.report.preemptions == 1);
    CHECK(r.report.recomputed_tokens == 27);  // A would have been 44 + 20 = 64
    CHECK(r.report.completed == 2);
    CHECK(r.report.e2e.p50_ns == 30 * kMs);
    CHECK(r.report.e2e.max_ns == 33 * kMs - kMs * 5 / 2);
    CHECK(r.report.ttft.max_ns == 4 * kMs - kMs * 5 / 2);  // B's first token at the end of step 3
  }
}

TEST_CASE("budget: TensorRT-LLM's max-utilization admits what fits now, vLLM also keeps its watermark free") {
  // 6 blocks of 16 (96 bytes), 1 ms steps. vLLM's watermark is whole blocks, rounded down:
  // watermark_blocks = int(watermark x num_gpu_blocks) (v0's BlockSpaceManager), so 0.4 keeps
  // int(2.4) = 2 blocks free and 0.2 int(1.2) = 1. A (prompt 40, output 10) holds 41 + k
  // positions at step k: 3 blocks until step 7, 4 from step 8, and ends after step 9 (10 ms).
  // B (prompt 30, output 1) arrives at 0.5 ms and needs ceil(31 / 16) = 2 blocks, with 3 free
  // at step 1.
  const std::vector<Request> trace = {test::request("a", 0, 40, 10), test::request("b", kMs / 2, 30, 1)};
  SECTION("vllm, watermark 0.2: 3 - 2 >= 1 block, B starts at step 1 (19.2 bytes, a share of the bytes, would not)") {
    ReplayOptions o = budget_of(6 * 16, Policy::vllm);
    o.memory.watermark_ppb = 200'000'000;
    const auto r = run("paged:block=16", trace, o);
    CHECK(r.report.completed == 2);
    CHECK(r.report.waiting.max_ns == kMs / 2);
    CHECK(r.report.e2e.p50_ns == 2 * kMs - kMs / 2);  // B, done at 2 ms
  }
  SECTION("vllm, watermark 0.4: 3 - 2 < 2 blocks (and 2 - 2 from step 8): B waits until A is done, 9.5 ms") {
    ReplayOptions o = budget_of(6 * 16, Policy::vllm);
    o.memory.watermark_ppb = 400'000'000;
    const auto r = run("paged:block=16", trace, o);
    CHECK(r.report.completed == 2);
    CHECK(r.report.waiting.max_ns == 10 * kMs - kMs / 2);
    CHECK(r.report.e2e.max_ns == 11 * kMs - kMs / 2);  // B's one step, 10-11 ms
  }
  SECTION("max-utilization: 32 <= 48, B starts at step 1 and is done at 2 ms; A's 4th block then fits") {
    ReplayOptions o = budget_of(6 * 16, Policy{"max-utilization"});
    o.memory.watermark_ppb = 200'000'000;  // not this policy's rule
    const auto r = run("paged:block=16", trace, o);
    CHECK(r.report.completed == 2);
    CHECK(r.report.preemptions == 0);
    CHECK(r.report.waiting.max_ns == kMs / 2);
    CHECK(r.report.e2e.p50_ns == 2 * kMs - kMs / 2);  // B
    CHECK(r.report.e2e.max_ns == 10 * kMs);           // A
    CHECK(r.report.policy == "max-utilization (pause)");
  }
}

TEST_CASE("budget: a planner's max_tokens is cut at the model's length, as the engines cut it") {
  // TensorRT-LLM's LlmRequest::validate cuts max_tokens to max_seq_len - prompt ("Number of
  // requested output tokens is changed to ..."), SGLang's init_req_max_new_tokens likewise. Max
  // model length 64, 4 blocks of 16. a and b (prompt 16, 16 tokens, max_tokens 100) at 0: each
  // plans 64 - 16 = 48 tokens, 16 + 48 = 64 positions, 4 blocks: a runs, b waits for all of
  // them, and runs after a (steps 16..31: 32 ms). Planned at 100 tokens, 116 positions (8
  // blocks), neither could ever run: both refused.
  ReplayOptions o = budget_of(4 * 16, Policy::reserve);
  o.layout.max_model_len = 64;
  Request a = test::request("a", 0, 16, 16);
  Request b = test::request("b", 0, 16, 16);
  a.max_tokens = b.max_tokens = 100;
  const auto r = run("paged:block=16", {a, b}, o);
  CHECK(r.report.rejected_too_large == 0);
  CHECK(r.report.completed == 2);
  CHECK(r.report.preemptions == 0);
  CHECK(r.report.waiting.max_ns == 16 * kMs);
  CHECK(r.report.end_ns == 32 * kMs);
}

TEST_CASE("budget: vLLM's scheduler_reserve_full_isl admits a request only when its whole prompt's blocks fit") {
  // 10 blocks of 16 (160 bytes), 1 ms steps, 32 tokens a step, no watermark. A (prompt 16,
  // output 40) holds 17 + k positions at step k: 2 blocks, 3 from step 16, and its last token
  // ends step 39 (40 ms). B (prompt 140, output 1) arrives at 0.5 ms: its first chunk, 31
  // tokens beside A's decode, needs 2 blocks; its whole prompt ceil(140 / 16) = 9, 144 bytes,
  // against at most 160 - 32 = 128 free while A runs.
  const std::vector<Request> trace = {test::request("a", 0, 16, 40), test::request("b", kMs / 2, 140, 1)};
  ReplayOptions o = budget_of(10 * 16);
  o.max_batched_tokens = 32;
  o.memory.watermark_ppb = 0;
  SECTION("on: B waits for A's blocks, starts at 40 ms, prefills 32 + 32 + 32 + 32 + 12 and is done at 45 ms") {
    o.memory.reserve_full_isl = true;
    const auto r = run("paged:block=16", trace, o);
    CHECK(r.report.completed == 2);
    CHECK(r.report.preemptions == 0);
    CHECK(r.report.waiting.max_ns == 40 * kMs - kMs / 2);
    CHECK(r.report.e2e.max_ns == 45 * kMs - kMs / 2);  // B
    CHECK(r.report.e2e.p50_ns == 40 * kMs);            // A, never held back
    CHECK(r.report.policy == "vllm (recompute, whole sequence must fit, watermark 0)");
  }
  SECTION("off: B starts at 1 ms on its first chunk, outgrows what A leaves, and is preempted") {
    const auto r = run("paged:block=16", trace, o);
    CHECK(r.report.completed == 2);
    CHECK(r.report.waiting.max_ns == kMs / 2);
    CHECK(r.report.preemptions > 0);
    CHECK(r.report.policy == "vllm (recompute, watermark 0)");
  }
}

TEST_CASE("budget: dense static never holds more than floor(budget / reservation) requests") {
  // Each request reserves prompt + max_tokens = 100 + 156 = 256 positions; a budget of
  // 3.5 reservations holds 3 at once.
  std::vector<Request> reqs;
  for (int i = 0; i < 10; ++i) {
    Request q = test::request(std::to_string(i), 0, 100, 50 + i);
    q.max_tokens = 156;
    reqs.push_back(q);
  }
  const auto r = run("dense-static:reserve=max-tokens", reqs, budget_of(256 * 7 / 2));
  CHECK(r.report.completed == 10);
  for (const auto& row : r.rows) {
    REQUIRE(row.running <= 3);
    REQUIRE(row.allocated_bytes <= 3 * 256);
  }
  CHECK(r.report.allocated_bytes.peak == 3 * 256);
}

TEST_CASE("budget: a request bigger than the whole budget is refused and the run finishes") {
  // 100 bytes: a 200-token prompt can never fit, even alone; a 10-token one can.
  const auto r = run("paged:block=16", {test::request("big", 0, 200, 5), test::request("small", kMs, 10, 3)},
                     budget_of(100));
  CHECK(r.report.rejected_too_large == 1);
  CHECK(r.report.completed == 1);
  SECTION("also when it fits at first and outgrows the budget alone") {
    // 4 blocks: prompt 50 fits (4 blocks at 51 positions), but it needs a 5th at 65.
    const auto g = run("paged:block=16", {test::request("grows", 0, 50, 40)}, budget_of(4 * 16));
    CHECK(g.report.rejected_too_large == 1);
    CHECK(g.report.completed == 0);
    CHECK(g.report.leak_free);
  }
}

TEST_CASE("budget: a request that can never fit is refused as it heads the queue, not when the others are done") {
  // 20 blocks of 16 one-byte positions, steps of 1 ms, at most 512 tokens a step, no
  // watermark. A (prompt 100, output 50) starts at 0 holding ceil(101/16) = 7 blocks and
  // runs to the end of step 49 (50 ms). B (prompt 400) arrives at 5 ms: its first chunk, 400
  // positions and its first token, needs ceil(401/16) = 26 blocks, more than the 20 there
  // are, so it can never start; it is refused at step 5, as it heads the queue. C (prompt 50,
  // output 20), arriving at 6 ms, then starts at once: 4 blocks, first token at 7 ms, last at
  // 26 ms. Left at the head until A finished, B would have held C back until 50 ms (TTFT
  // 45 ms) and every step between would have counted as time at full capacity.
  // Found by tools/xcheck/budget_model.py (doomed-head-blocks-queue.csv).
  for (const Policy& policy : {Policy::vllm, Policy{"max-utilization"}}) {
    ReplayOptions o = budget_of(20 * 16, policy);
    o.memory.watermark_ppb = 0;
    o.max_batched_tokens = 512;
    o.max_running = 8;
    const auto r = run("paged:block=16",
                       {test::request("a", 0, 100, 50), test::request("b", 5 * kMs, 400, 10),
                        test::request("c", 6 * kMs, 50, 20)},
                       o);
    CHECK(r.report.rejected_too_large == 1);
    CHECK(r.report.completed == 2);
    CHECK(r.report.memory_bound_ns == 0);
    CHECK(r.report.end_ns == 50 * kMs);
    std::map<std::string, RequestRecord> by_id;
    for (const RequestRecord& rec : r.records) by_id[rec.id] = rec;
    CHECK(by_id.at("b").outcome == RequestRecord::Outcome::refused);
    CHECK(by_id.at("c").first_token_ns == 7 * kMs);
    CHECK(by_id.at("c").finish_ns == 26 * kMs);
  }
}

TEST_CASE("budget: vLLM's watermark is int(watermark * blocks) in double precision, as v0's Python computes it") {
  // 100 blocks, watermark 0.29: 0.29 * 100 is 28.999999999999996 in double precision, so vLLM
  // v0 keeps 28 blocks free, not the exact product's 29. A (prompt 1000, output 50) holds
  // ceil(1001/16) = 63 blocks from step 0; B (prompt 128, output 5) arrives at 0.5 ms and
  // needs ceil(129/16) = 9 blocks: 100 - 63 - 9 = 28 left, exactly the watermark, so it
  // starts at step 1 (1 ms) beside A (a 29-block watermark would have held it until A
  // finished at 50 ms). Found by tools/xcheck/budget_model.py (watermark-float-product.csv).
  ReplayOptions o = budget_of(100 * 16);
  o.memory.watermark_ppb = 290'000'000;
  o.max_batched_tokens = 1024;
  o.max_running = 4;
  const auto r = run("paged:block=16", {test::request("a", 0, 1000, 50), test::request("b", kMs / 2, 128, 5)}, o);
  CHECK(r.report.completed == 2);
  std::map<std::string, RequestRecord> by_id;
  for (const RequestRecord& rec : r.records) by_id[rec.id] = rec;
  CHECK(by_id.at("b").first_scheduled_ns == 1 * kMs);
  CHECK(by_id.at("b").first_token_ns == 2 * kMs);
}

TEST_CASE("budget: a request that fills the pool to its last position completes, and one position more is refused") {
  // PITFALLS.md, "Off-by-one at block boundaries". Pool 64 positions (4 blocks of 16). The
  // step producing token j holds prompt + j positions (docs/replay.md, "Accounting
  // convention"): prompt 10 and output 54 end at exactly 64, the pool's last position, and
  // complete alone; output 55 ends at 65, a fifth block that can never be had: refused,
  // with every block it held freed. The same under swap, which has nowhere to swap it to.
  for (const Preemption preemption : {Preemption::recompute, Preemption::swap}) {
    INFO((preemption == Preemption::swap ? "swap" : "recompute"));
    ReplayOptions o = budget_of(64);
    o.memory.watermark_ppb = 0;
    o.memory.preemption = preemption;
    const auto fits = run("paged:block=16", {test::request("a", 0, 10, 54)}, o);
    CHECK(fits.report.completed == 1);
    CHECK(fits.report.allocated_bytes.peak == 64);
    CHECK(fits.report.generated_tokens == 54);
    const auto over = run("paged:block=16", {test::request("a", 0, 10, 55)}, o);
    CHECK(over.report.completed == 0);
    CHECK(over.report.rejected_too_large == 1);
    CHECK(over.report.allocated_bytes.peak == 64);
    CHECK(over.report.leak_free);
  }
}
