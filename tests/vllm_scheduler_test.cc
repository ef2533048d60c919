// kvsim's vLLM schedule against vLLM v1's scheduler (vllm/v1/core/sched/scheduler.py,
// Scheduler.schedule), one hand-worked schedule per rule that is not pinned elsewhere
// (preempting the newest, the watermark and the last-token prefix rule are in
// memory_budget_test.cc and prefix_cache_engine_test.cc). Layouts of one byte per
// position; blocks of 16; every step 1 ms whatever it holds.
#include <catch2/catch.hpp>

#include <map>

#include "kvsim/budget.h"
#include "kvsim/replay.h"
#include "prefix_test_util.h"
#include "test_support.h"

using namespace kvsim;

using kvsim::test::with_prefix;

namespace {

constexpr std::int64_t kMs = 1'000'000;

ReplayOptions one_ms_steps() {
  ReplayOptions o;
  o.layout = test::unit_layout(4096);
  o.cost.base_ps = kMs * 1000;
  o.cost.prefill_token_ps = 0;
  return o;
}

// Each request's record by id.
// One-millisecond steps under vLLM's policy, a budget of `blocks` blocks of 16 positions, no
// watermark.
ReplayOptions one_ms_steps_in_blocks(std::int64_t blocks) {
  ReplayOptions o = one_ms_steps();
  o.memory.kv_budget_bytes = blocks * 16;
  o.memory.policy = Policy::vllm;
  o.memory.watermark_ppb = 0;
  return o;
}

std::map<std::string, RequestRecord> records_of(const std::string& spec, std::vector<Request> trace, ReplayOptions o) {
  std::map<std::string, RequestRecord> out;
  o.per_request = [&out](const RequestRecord& r) { out[r.id] = r; };
  test::replay_under_budget(spec, std::move(trace), o);
  return out;
}

}  // namespace

TEST_CASE("vllm v1: running requests' decodes take the token budget first, then the chunked prefill") {
  // scheduler.py schedule(): "First, schedule the RUNNING requests": each decode takes 1 of
  // token_budget (max_num_batched_tokens); a waiting request gets min(its tokens, what is
  // left). Budget 32. A (prompt 10, output 10) prefills in step 0 and decodes in steps 1-9.
  // B (prompt 96) arrives at 0.5 ms: steps 1, 2, 3 give it 32 - 1 = 31 tokens each (93),
  // step 4 the last 3, with its first token at the end of step 4: 5 ms, TTFT 4.5 ms. (Were
  // decodes not counted, 32 + 32 + 32 would finish in step 3.)
  ReplayOptions o = one_ms_steps();
  o.max_batched_tokens = 32;
  const auto r = records_of("paged:block=16", {test::request("a", 0, 10, 10), test::request("b", kMs / 2, 96, 2)}, o);
  CHECK(r.at("a").first_token_ns == 1 * kMs);
  CHECK(r.at("b").first_scheduled_ns == 1 * kMs);
  CHECK(r.at("b").first_token_ns == 5 * kMs);
}

TEST_CASE("vllm v1: waiting requests start only while fewer than max_num_seqs run") {
  // scheduler.py: "if len(self.running) == self.max_num_running_reqs: break". One at a time:
  // A (prompt 10, output 3) runs steps 0-2 and leaves at 3 ms; B, waiting since 0.5 ms,
  // starts at 3 ms and has its first token at 4 ms.
  ReplayOptions o = one_ms_steps();
  o.max_running = 1;
  const auto r = records_of("paged:block=16", {test::request("a", 0, 10, 3), test::request("b", kMs / 2, 10, 2)}, o);
  CHECK(r.at("a").finish_ns == 3 * kMs);
  CHECK(r.at("b").first_scheduled_ns == 3 * kMs);
  CHECK(r.at("b").first_token_ns == 4 * kMs);
}

TEST_CASE("vllm v1: a preempted request goes back to the front of the waiting queue, and nobody overtakes it") {
  // scheduler.py _preempt_request(): freed, num_computed_tokens = 0,
  // self.waiting.prepend_request(request); waiting requests are taken in order and the loop
  // breaks at the first that does not fit (first come, first served).
  // 4 blocks (64 positions), no watermark. A (prompt 16, output 20) and B (prompt 16, output
  // 40) start at 0 with 17 positions each (2 blocks each: the pool is full). C (prompt 16,
  // output 2: 2 blocks) arrives at 0.5 ms and waits. At step 16 both reach 33 positions; A
  // needs a 3rd block: the newest, B, is preempted, having generated 16 tokens,
  // and A takes one of its blocks. The queue is [B, C]. (The step admits nothing new either:
  // scheduler.py takes waiting requests only "if not preempted_reqs".)
  //   Steps 17-19: B needs 16 + 16 + 1 = 33 positions, 3 blocks, with 1 free: it waits, and
  //   C (2 blocks) may not pass it. A's 20th token ends step 19: it leaves at 20 ms.
  //   Step 20: B recomputes into 3 blocks; C still does not fit (1 free). B's 24 remaining
  //   tokens end with step 43 (it takes the 4th block at step 36, 49 positions): 44 ms.
  //   Step 44: C starts; its first token at 45 ms.
  // Were B requeued at the back, C would start at 20 ms instead.
  ReplayOptions o = one_ms_steps_in_blocks(4);
  const auto r = records_of("paged:block=16",
                            {test::request("a", 0, 16, 20), test::request("b", 0, 16, 40), test::request("c", kMs / 2, 16, 2)}, o);
  CHECK(r.at("a").finish_ns == 20 * kMs);
  CHECK(r.at("a").preemptions == 0);
  CHECK(r.at("b").preemptions == 1);
  CHECK(r.at("b").first_scheduled_ns == 0);  // its first admission
  CHECK(r.at("b").finish_ns == 44 * kMs);
  CHECK(r.at("c").first_scheduled_ns == 44 * kMs);
  CHECK(r.at("c").first_token_ns == 45 * kMs);
  CHECK(r.at("c").outcome == RequestRecord::Outcome::completed);
}

TEST_CASE("vllm v1: asynchronous scheduling plans a step while the previous one runs") {
  // vllm/v1/engine/core.py step_with_batch_queue (batch queue of 2 with async scheduling, on
  // by default in vLLM 0.19): step k + 1 is scheduled as soon as step k is launched, so it
  // sees neither requests that arrive during step k nor what step k finishes; those reach the
  // scheduler when step k's outputs are processed, in time for step k + 2.
  ReplayOptions o = one_ms_steps();
  o.async_scheduling = true;
  SECTION("an arrival during a step starts two steps later") {
    // C (prompt 10, output 10) prefills in step 0 (0-1 ms). B arrives at 0.5 ms: step 1 (1-2
    // ms) was planned at 0 ms without it; step 2 (2-3 ms), planned at 1 ms, prefills it: first
    // token at 3 ms, TTFT 2.5 ms (1.5 ms synchronously: started at 1 ms, token at 2 ms).
    const auto r = records_of("paged:block=16", {test::request("c", 0, 10, 10), test::request("b", kMs / 2, 10, 2)}, o);
    CHECK(r.at("b").first_scheduled_ns == 2 * kMs);
    CHECK(r.at("b").first_token_ns == 3 * kMs);
    o.async_scheduling = false;
    const auto sync = records_of("paged:block=16", {test::request("c", 0, 10, 10), test::request("b", kMs / 2, 10, 2)}, o);
    CHECK(sync.at("b").first_token_ns == 2 * kMs);
  }
  SECTION("a finished request holds its place under max_num_seqs one step longer") {
    // max_num_seqs 2. A (output 2) and C (output 10) prefill in step 0 and decode in step 1;
    // A's last token ends step 1 (2 ms). B, waiting since 0.1 ms, would start at step 2
    // synchronously; step 2 was planned at 1 ms, while A still ran, so B starts in step 3
    // (3-4 ms), planned at 2 ms after A's output: first token at 4 ms.
    o.max_running = 2;
    const auto r = records_of("paged:block=16",
                              {test::request("a", 0, 10, 2), test::request("c", 0, 10, 10), test::request("b", kMs / 10, 10, 2)}, o);
    CHECK(r.at("a").finish_ns == 2 * kMs);
    CHECK(r.at("b").first_scheduled_ns == 3 * kMs);
    CHECK(r.at("b").first_token_ns == 4 * kMs);
  }
  SECTION("with nothing else running there is no lag") {
    // A (output 2) alone leaves at 2 ms; B arrives at 1.5 ms, during A's last step. vLLM's
    // step planned at 1 ms holds nothing for A (it has reached max_tokens), so it plans again
    // at once when A's output arrives: B starts at 2 ms, as synchronously.
    o.max_running = 1;
    const auto r = records_of("paged:block=16", {test::request("a", 0, 10, 2), test::request("b", 3 * kMs / 2, 10, 2)}, o);
    CHECK(r.at("b").first_scheduled_ns == 2 * kMs);
    CHECK(r.at("b").first_token_ns == 3 * kMs);
  }
}

TEST_CASE("vllm v1: with asynchronous scheduling a completed request holds its blocks through the next plan") {
  // vllm/v1/engine/core.py step_with_batch_queue schedules step k + 1 before it processes step
  // k's output, and Scheduler.update_from_output frees a finished request's blocks
  // (_free_request) only then: while step k + 1 is planned, a request whose last token step k
  // produced still holds its blocks and its place in self.running, whose last entry is what
  // a failed allocation preempts (self.running.pop()).
  // Under kvsim's accounting (a step producing token j holds prompt + j positions; vLLM holds
  // one fewer, docs/fidelity.md), so these schedules pin kvsim's model of the rule: vLLM
  // reaches each block boundary a step later.
  // 8 blocks of 16, no watermark, 1 ms steps. Both arrive at 0 and prefill in step 0: B
  // (prompt 62, output 50) 63 positions, A (prompt 60, output 2) 61: 4 blocks each, the pool
  // full. A's last token ends step 1 (2 ms). B holds 62 + 3 = 65 positions in step 2: a 5th
  // block, with A's 4 still held.
  ReplayOptions o = one_ms_steps_in_blocks(8);
  o.async_scheduling = true;
  SECTION("the completed request, the newest, is preempted for nothing") {
    // A was admitted after B: running.pop() takes A, counted as a preemption; its blocks go
    // to B and its token still arrives. Synchronously A is gone before step 2 is planned.
    const auto r = records_of("paged:block=16", {test::request("b", 0, 62, 50), test::request("a", 0, 60, 2)}, o);
    CHECK(r.at("a").outcome == RequestRecord::Outcome::completed);
    CHECK(r.at("a").finish_ns == 2 * kMs);
    CHECK(r.at("a").preemptions == 1);
    CHECK(r.at("b").preemptions == 0);
    CHECK(r.at("b").finish_ns == 50 * kMs);
    o.async_scheduling = false;
    const auto sync = records_of("paged:block=16", {test::request("b", 0, 62, 50), test::request("a", 0, 60, 2)}, o);
    CHECK(sync.at("a").preemptions == 0);
    CHECK(sync.at("b").finish_ns == 50 * kMs);
  }
  SECTION("behind an older completed request, the one that cannot grow preempts itself") {
    // A was admitted first: running.pop() takes B itself, which goes back to the queue having
    // generated 2 tokens, and A's blocks are freed once step 2's plan is done. That plan holds
    // nothing: vLLM skips the empty step's forward pass and plans again when step 1's output
    // is processed, which kvsim does at once, within step 2: B recomputes its 62 + 2 positions
    // there and produces its 3rd token at 3 ms; its 50th ends step 49: 50 ms, as without the
    // preemption, which cost only the recomputation.
    const auto r = records_of("paged:block=16", {test::request("a", 0, 60, 2), test::request("b", 0, 62, 50)}, o);
    CHECK(r.at("a").finish_ns == 2 * kMs);
    CHECK(r.at("a").preemptions == 0);
    CHECK(r.at("b").preemptions == 1);
    CHECK(r.at("b").finish_ns == 50 * kMs);
    o.async_scheduling = false;
    const auto sync = records_of("paged:block=16", {test::request("a", 0, 60, 2), test::request("b", 0, 62, 50)}, o);
    CHECK(sync.at("b").preemptions == 0);
    CHECK(sync.at("b").finish_ns == 50 * kMs);
  }
}

TEST_CASE("vllm v1: with asynchronous scheduling an abort during a step frees its room two plans later") {
  // vLLM takes an abort in from its input queue between steps and processes it when the step's
  // output comes back (vllm/v1/engine/core.py step_with_batch_queue: _process_aborts_queue,
  // then update_from_output), after it has planned the next step: like a completion in that
  // step, the aborted request keeps its place in self.running and its blocks through that
  // plan. Synchronously the plan comes after the abort (step: schedule, execute, aborts).
  // 1 ms steps. A and C (prompt 31, output 30) prefill in step 0; B (prompt 20, output 2)
  // arrives at 0.1 ms and waits; A is cancelled at 5.5 ms, within step 5 (5-6 ms).
  std::vector<Request> trace{test::request("a", 0, 31, 30), test::request("c", 0, 31, 30),
                             test::request("b", kMs / 10, 20, 2)};
  trace[0].cancel_ns = 5 * kMs + kMs / 2;
  // Its place under max_num_seqs: with max_num_seqs 2, step 6 was planned at 5 ms with A still
  // running, so B starts in step 7 (7 ms), as it would after A completing in step 5;
  // synchronously in step 6.
  ReplayOptions by_place = one_ms_steps();
  by_place.max_running = 2;
  // Its blocks: 6 blocks of 16, no watermark. A and C hold 31 + 2 = 33 positions from step 1
  // on, 3 blocks each, until step 17 (49 positions), so B (21 positions, 2 blocks) waits for
  // room. A's 3 blocks are held through step 6's plan: B starts in step 7; synchronously in
  // step 6. Nobody is preempted.
  for (ReplayOptions o : {by_place, one_ms_steps_in_blocks(6)}) {
    INFO((o.max_running > 0 ? "max_num_seqs" : "blocks"));
    o.async_scheduling = true;
    const auto r = records_of("paged:block=16", trace, o);
    CHECK(r.at("a").outcome == RequestRecord::Outcome::cancelled);
    CHECK(r.at("a").preemptions + r.at("c").preemptions == 0);
    CHECK(r.at("b").first_scheduled_ns == 7 * kMs);
    o.async_scheduling = false;
    CHECK(records_of("paged:block=16", trace, o).at("b").first_scheduled_ns == 6 * kMs);
  }
  // Held through the plan, it may be the newest running request when another cannot grow:
  // preempted for nothing, as a completion would be, and its record says so. 4 blocks of 16:
  // A and B (prompt 20, output 20) hold 21 positions, 2 blocks each, from step 0; B is
  // cancelled at 11.5 ms, within step 11; at step 12's plan A holds 20 + 13 = 33 positions and
  // needs a third block: B, the newest, is preempted. Synchronously B is gone by then.
  std::vector<Request> pair{test::request("a", 0, 20, 20), test::request("b", 0, 20, 20)};
  pair[1].cancel_ns = 11 * kMs + kMs / 2;
  ReplayOptions o = one_ms_steps_in_blocks(4);
  o.async_scheduling = true;
  const auto r = records_of("paged:block=16", pair, o);
  CHECK(r.at("b").outcome == RequestRecord::Outcome::cancelled);
  CHECK(r.at("b").finish_ns == 11 * kMs + kMs / 2);
  CHECK(r.at("b").preemptions == 1);
  CHECK(r.at("a").preemptions == 0);
  CHECK(r.at("a").finish_ns == 20 * kMs);
  o.async_scheduling = false;
  CHECK(records_of("paged:block=16", pair, o).at("b").preemptions == 0);
}

TEST_CASE("vllm v1: asynchronous scheduling frees a step's completed requests in the order they completed") {
  // Scheduler.update_from_output frees a step's finished requests in order; with prefix caching
  // the order is the free queue's, so it decides whose cached blocks are evicted first.
  // 10 blocks of 16, no watermark, 1 ms steps. In step 0: Z (prompt 16, output 100, no
  // identity) takes 2 blocks, Y (32 tokens in blocks 201, 202, output 2) and X (blocks 101,
  // 102, output 2) 3 each. Y and X complete at 2 ms and are freed, in that order, once step 2
  // is planned: the free queue holds the 2 never-used blocks, then Y's 3 and X's 3, each
  // request's tail first. W (80 tokens, no identity) arrives at 2.5 ms and starts at 4 ms
  // (planned at 3 ms, when step 3 began): 81 positions, 6 blocks, which take the never-used 2,
  // Y's 3 and X's uncached tail. V (X's prompt) then finds block 101 (at most 31 of its 32
  // tokens are looked up), U (Y's) nothing. Freed in the reverse order, V would find nothing
  // and U 16 tokens.
  ReplayOptions o = one_ms_steps_in_blocks(10);
  o.async_scheduling = true;
  const auto with = [](Request r, std::vector<std::uint64_t> hashes) {
    r.prefix_block_tokens = 16;
    r.prefix_hashes = std::move(hashes);
    return r;
  };
  const auto r = records_of("paged:block=16,prefix-caching=on",
                            {test::request("z", 0, 16, 100), with(test::request("y", 0, 32, 2), {201, 202}),
                             with(test::request("x", 0, 32, 2), {101, 102}), test::request("w", 5 * kMs / 2, 80, 2),
                             with(test::request("v", 10 * kMs, 32, 2), {101, 102}),
                             with(test::request("u", 11 * kMs, 32, 2), {201, 202})},
                            o);
  CHECK(r.at("w").first_scheduled_ns == 4 * kMs);
  CHECK(r.at("v").cached_prompt_tokens == 16);
  CHECK(r.at("u").cached_prompt_tokens == 0);
}

TEST_CASE("vllm v1: with asynchronous scheduling a generated block is cached one plan late") {
  // kv_cache_manager.py allocate_slots caches min(computed + new tokens, request.num_tokens)
  // positions. With asynchronous scheduling step k + 1 is planned before step k's token is
  // known (async_scheduler.py counts it as an output placeholder), so request.num_tokens is
  // one short and a decode caches only what step k computed; the rest is cached when step k's
  // output is processed (AsyncScheduler._update_request_with_output), and only for a request
  // still running.
  ReplayOptions o = one_ms_steps_in_blocks(5);
  o.max_batched_tokens = 64;
  o.max_running = 4;
  SECTION("a request preempted in the plan after it filled a block finds it uncached") {
    // A (prompt 15, no identity, output 20) and B (prompt 16 = block 51, output 20) prefill
    // in step 0: A holds 16 positions (1 block), B 17 (2). At step k A holds 16 + k, B 17 + k.
    // Step 16: B grows to 33 positions, a 3rd block (the pool is full) and computes position
    // 31, which fills its block 1 (generated positions 16-31). Step 17: A, older, grows to
    // 33 and needs a block: the newest, B, is preempted before its own turn. A finishes at
    // 20 ms; then B (P + g = 16 + 17) is admitted again and looks up 33 tokens, at most 32 of
    // them, 2 blocks. Synchronously its block 1 was cached at step 16 (min(32, 33) = 32
    // positions): it finds 32 and computes 1. Asynchronously step 16 cached min(32, 33 - 1 -
    // 1) = 31 positions, block 1 missing; step 17, which would have cached it, did not reach
    // B: it finds 16 and computes 17. Either way B's 3 last tokens take steps 20-22.
    const auto case_with = [&](bool async) {
      o.async_scheduling = async;
      return test::replay_under_budget("paged:block=16,prefix-caching=on",
                                       {test::request("a", 0, 15, 20), with_prefix("b", 0, 16, 20, {51})}, o)
          .report;
    };
    const ReplayReport sync = case_with(false);
    CHECK(sync.preemptions == 1);
    CHECK(sync.prefix_preempted_queried_tokens == 33);
    CHECK(sync.prefix_preempted_hit_tokens == 32);
    CHECK(sync.recomputed_tokens == 1);
    CHECK(sync.end_ns == 23 * kMs);
    const ReplayReport async = case_with(true);
    CHECK(async.preemptions == 1);
    CHECK(async.prefix_preempted_queried_tokens == 33);
    CHECK(async.prefix_preempted_hit_tokens == 16);
    CHECK(async.recomputed_tokens == 17);
    CHECK(async.end_ns == 23 * kMs);
  }
  SECTION("a completed request's last full block is cached when its output is processed") {
    // A (prompt 16 = block 51, output 17) ends holding 33 positions, 3 blocks, having computed
    // 32: its prompt block and block 1 (generated positions 16-31), filled by its last step.
    // That step's plan cached only block 0 (min(32, 33 - 1 - 1) = 31 positions); processing
    // its output caches block 1 before A is freed. Freed, both stay cached and evictable: 32
    // bytes (the 3rd block, partial, is not cached), as synchronously.
    for (const bool async : {false, true}) {
      o.async_scheduling = async;
      const auto r = test::replay_under_budget("paged:block=16,prefix-caching=on",
                                               {with_prefix("a", 0, 16, 17, {51})}, o);
      CHECK(r.report.completed == 1);
      CHECK(r.report.evictable_bytes.peak == 32);
      CHECK(r.report.leak_free);
    }
  }
  SECTION("a request cancelled in the step that fills a block frees it cached, unless that step completes it") {
    // A (prompt 16 = block 51) prefills in step 0; step j computes position 15 + j, so step 16
    // (16-17 ms) fills its block 1 (positions 16-31). A is cancelled at 16.5 ms, in that step.
    // Synchronously step 16's plan cached block 1 (min(32, 32)). Asynchronously step 17's plan
    // was made as step 16 began (docs/replay.md), and it cached block 1 (request.num_tokens is
    // 32 by then); the abort is processed when step 16 ends, so A frees both blocks cached: 32
    // bytes evictable at the end either way. With output 17, step 16 is A's last: step 17's
    // plan skips A (it has reached max_tokens) and its output is never processed, so
    // asynchronously only block 0 is cached (step 16's plan cached min(32, 31) positions).
    for (const bool async : {false, true}) {
      for (const std::int64_t output : {40, 17}) {
        o.async_scheduling = async;
        Request a = with_prefix("a", 0, 16, output, {51});
        a.cancel_ns = 16 * kMs + kMs / 2;
        const auto r = test::replay_under_budget("paged:block=16,prefix-caching=on", {a}, o);
        INFO("async " << async << ", output " << output);
        CHECK(r.report.cancelled_running == 1);
        CHECK(r.report.evictable_bytes.at_end == (async && output == 17 ? 16 : 32));
        CHECK(r.report.leak_free);
      }
    }
  }
}

TEST_CASE("vllm: max_num_seqs counts sequences, so a request of n samples takes n places") {
  // vLLM runs a request's n samples as n requests (v1: one child request per sample;
  // v0 counted a group's sequences), each holding a place under max_num_seqs. Places 3. A
  // (n 2, prompt 10, output 3) runs steps 0-2 and leaves at 3 ms. B (n 2), waiting since
  // 0.5 ms, needs 2 + 2 = 4 places and waits for A; C (n 1) behind it waits too (first come,
  // first served). At 3 ms both start (2 + 1 = 3): first tokens at 4 ms. Counting requests,
  // B and C would both have started at 1 ms.
  ReplayOptions o = one_ms_steps();
  o.max_running = 3;
  const auto r = records_of("paged:block=16",
                            {test::request("a", 0, 10, 3, 2), test::request("b", kMs / 2, 10, 2, 2),
                             test::request("c", kMs / 2, 10, 2)},
                            o);
  CHECK(r.at("a").finish_ns == 3 * kMs);
  CHECK(r.at("b").first_scheduled_ns == 3 * kMs);
  CHECK(r.at("c").first_scheduled_ns == 3 * kMs);
  CHECK(r.at("b").first_token_ns == 4 * kMs);
  CHECK(r.at("c").first_token_ns == 4 * kMs);
}

TEST_CASE("vllm: a request of more samples than max_num_seqs is refused at arrival, alone or not") {
  // Its samples run together in kvsim: 4 sequences can never run under 3 places.
  ReplayOptions o = one_ms_steps();
  o.max_running = 3;
  const auto run = test::replay_under_budget("paged:block=16", {test::request("wide", 0, 10, 5, 4), test::request("ok", 0, 10, 5, 3)}, o);
  CHECK(run.report.rejected_too_many_samples == 1);
  CHECK(run.report.completed == 1);
  REQUIRE(run.records.size() == 2);
  CHECK(run.records[0].id == "wide");
  CHECK(run.records[0].outcome == RequestRecord::Outcome::refused);
}

TEST_CASE("vllm: max_num_batched_tokens below max_num_seqs is refused, as vLLM's SchedulerConfig refuses it") {
  // vllm/config/scheduler.py verify_max_model_len: "max_num_batched_tokens (...) must be
  // greater than or equal to max_num_seqs": every running sequence decodes a token a step.
  ReplayOptions o = one_ms_steps();
  o.max_running = 8;
  o.max_batched_tokens = 4;
  CHECK_THROWS_WITH(records_of("paged:block=16", {test::request("a", 0, 10, 3)}, o),
                    Catch::Contains("--max-batched-tokens") && Catch::Contains("must be at least --max-running (8)"));
  // Under a budget an unset max_running is vLLM's 256 lowered to max_batched_tokens
  // (vllm/engine/arg_utils.py _set_default_args), so 4 alone is accepted.
  ReplayOptions budgeted = one_ms_steps();
  budgeted.memory.kv_budget_bytes = 1 << 20;
  budgeted.max_batched_tokens = 4;
  apply_vllm_scheduler_defaults(budgeted);
  CHECK(budgeted.max_running == 4);
  budgeted.max_batched_tokens = 0;
  budgeted.max_running = 0;
  apply_vllm_scheduler_defaults(budgeted);
  CHECK(budgeted.max_running == kVllmMaxNumSeqs);
  CHECK(budgeted.max_batched_tokens == kVllmMaxNumBatchedTokens);
}

TEST_CASE("vllm: without max_num_seqs, a step still holds no more sequences than max_num_batched_tokens") {
  // Demand mode with a step budget of 4 tokens and no limit on running requests. A (n 2,
  // prompt 2, output 20) prefills in step 0 and decodes 2 sequences in steps 1-19, leaving at
  // 20 ms. B (n 4, at 0.5 ms) would bring the step to 2 + 4 = 6 decoding sequences: it waits
  // for A, starts at 20 ms and has its first token at 21 ms. (Before, B started at 1 ms and
  // steps decoded 6 tokens against the budget of 4.)
  ReplayOptions o = one_ms_steps();
  o.max_batched_tokens = 4;
  const auto run = test::replay_under_budget("paged:block=16", {test::request("a", 0, 2, 20, 2), test::request("b", kMs / 2, 2, 20, 4)}, o);
  std::map<std::string, RequestRecord> r;
  for (const auto& rec : run.records) r[rec.id] = rec;
  CHECK(r.at("a").finish_ns == 20 * kMs);
  CHECK(r.at("b").first_scheduled_ns == 20 * kMs);
  CHECK(r.at("b").first_token_ns == 21 * kMs);
  for (const auto& row : run.rows) CHECK(row.work.prefill_tokens + row.work.decode_seqs <= 4);
}

TEST_CASE("vllm: a step that computes nothing runs no forward pass, and lasts 1 ns") {
  // vLLM's model runner returns at once when no token is scheduled. Pool 48 positions (3
  // blocks of 16); A alone, prompt 30, output 80. Its prefill holds the prompt and the slot
  // of its first token, 31 positions, and step k holds 31 + k: 48 at step 17. Steps 0-17 (1
  // ms each) compute. At step 18 its 49th position needs a 4th block, which it can never
  // have running alone: it is refused, and the step computes nothing. The run ends at 18 ms
  // + 1 ns, not after one more forward pass (19 ms).
  const auto run = test::replay_under_budget("paged:block=16", {test::request("a", 0, 30, 80)},
                                             one_ms_steps_in_blocks(3));
  CHECK(run.report.refused() == 1);
  CHECK(run.report.iterations == 19);
  CHECK(run.report.end_ns == 18 * kMs + 1);
}

TEST_CASE("vllm v0 swap: a request swapped back in takes its decodes from the step's token budget") {
  // vLLM v0's _schedule_swapped checks and charges a swapped-in group's tokens against the
  // step's budget before any new prefill. Pool 64 positions (4 blocks of 16), six requests
  // of prompt 14 and output 30 at once, swap preemption, 8 tokens a step: requests come back
  // from the CPU while others wait to prefill. Every step's tokens (prefill positions plus
  // one per decoding sequence) stay within 8; before, a swapped-in decode joined a full
  // 8-token prefill chunk (9 tokens).
  ReplayOptions o = one_ms_steps();
  o.memory.kv_budget_bytes = 64;
  o.memory.watermark_ppb = 0;
  o.memory.preemption = Preemption::swap;
  o.max_batched_tokens = 8;
  std::vector<Request> trace;
  for (const char* id : {"a", "b", "c", "d", "e", "f"}) trace.push_back(test::request(id, 0, 14, 30));
  const auto run = test::replay_under_budget("paged:block=16", trace, o);
  CHECK(run.report.completed == 6);
  CHECK(run.report.swapped_in_bytes > 0);
  for (const auto& row : run.rows) CHECK(row.work.prefill_tokens + row.work.decode_seqs <= 8);
}

TEST_CASE("vllm v0 swap: a request comes back from the CPU only if it leaves the watermark free") {
  // v0's BlockSpaceManager.can_swap_in -> _can_swap: free blocks - blocks touched >=
  // watermark_blocks, as for an admission (none kept while nothing else runs). 7 blocks of 16,
  // watermark 0.15: int(0.15 x 7) = 1 block. a (prompt 16, output 90), b (16, 90) and c (16,
  // 60) at 0; each holds 17 + s positions after its s-th step, a new block at 33, 49, 65, ...
  // A swap of B bytes adds ceil(B / 25) ns to its step (25 GB/s, one byte a position).
  // - Step 0: a takes 2 blocks (nothing runs: no watermark), b 2 (5 - 1 >= 2), c 2 (3 - 1 >= 2);
  //   1 free.
  // - Step 16: a takes the last block; b cannot grow and c, the newest, goes to the CPU (32
  //   positions, 2 ns); b takes one of its 2 blocks. 1 free: c needs 3 for 33 positions.
  // - Step 32: a takes the last block (4); b cannot grow and, the newest, goes out itself (48
  //   positions, 2 ns): 3 free, and c would take all 3, leaving 0 < 1 with a running: c stays
  //   out (it came back here before, at step 33, and a filled the pool). a grows to 7 blocks
  //   by step 80 and ends after step 89 (its 90th token): 90 ms + 4 ns.
  // - Step 90: nothing runs: c comes back (3 blocks, 4 free; 2 ns) with its 17th token and
  //   ends after step 133 (its 60th): 134 ms + 6 ns. b needs 4 for 49 positions: 4 - 4 < 1,
  //   out until c has gone; it comes back at step 134 (2 ns) with its 33rd token and ends
  //   after step 191: 192 ms + 8 ns.
  ReplayOptions o = one_ms_steps_in_blocks(7);
  o.memory.watermark_ppb = 150'000'000;
  o.memory.preemption = Preemption::swap;
  const auto r = records_of("paged:block=16",
                            {test::request("a", 0, 16, 90), test::request("b", 0, 16, 90), test::request("c", 0, 16, 60)},
                            o);
  CHECK(r.at("a").finish_ns == 90 * kMs + 4);
  CHECK(r.at("a").preemptions == 0);
  CHECK(r.at("c").preemptions == 1);
  CHECK(r.at("c").finish_ns == 134 * kMs + 6);
  CHECK(r.at("b").preemptions == 1);
  CHECK(r.at("b").finish_ns == 192 * kMs + 8);
}

namespace {

// One sliding-window group of W positions at one byte per position, under vLLM's policy
// with a budget of `blocks` blocks of 16. A decode call to length t (t - 1 positions held)
// first frees the blocks wholly before t - W (docs/replay.md, "Sliding windows"): block k
// goes at t = 16(k + 1) + W. A request of prompt P holds P + j positions once it has
// produced j tokens, all of them in its prefill step.
ReplayOptions window_steps_in_blocks(std::int64_t window, std::int64_t blocks) {
  ReplayOptions o = one_ms_steps_in_blocks(blocks);
  o.layout.groups = {test::group("sliding", 1, window)};
  return o;
}

}  // namespace

TEST_CASE("vllm v1: a sliding window's block freed by an older request is there for a newer one in the same step") {
  // schedule() walks self.running in order; each allocate_slots frees its own window
  // (remove_skipped_blocks) before it counts blocks. W = 64, 8 blocks. A (prompt 80, output
  // 40) holds 81 + s positions after step s: 6 blocks at step 0, 5 from step 1 (block 0
  // is behind the window), 4 at s = 15 (t = 96: block 1 goes), 5 from s = 16 (block 6), 4
  // at s = 31 (t = 112: block 2 goes). B (prompt 17, output 32) holds 18 + s: 2 blocks, 3
  // from s = 15 (t = 33), and at s = 31 (t = 49) it needs a fourth. Held: 8, then 7, then 8
  // from step 16 (none free). Step 31: A, first in running order, frees block 2 and B
  // takes it: no preemption. B finishes with step 31 (32 ms), A with step 39 (40 ms).
  // (Taken in the order they were scheduled, as kvsim took allocator calls before
  // 2026-12-05, B's call for step 31, scheduled at step 15, comes before A's, scheduled at
  // step 16: no block is free and B, the newest, preempts itself.)
  const auto r = records_of("sliding-window:block=16",
                            {test::request("a", 0, 80, 40), test::request("b", 0, 17, 32)},
                            window_steps_in_blocks(64, 8));
  CHECK(r.at("b").preemptions == 0);
  CHECK(r.at("b").finish_ns == 32 * kMs);
  CHECK(r.at("a").preemptions == 0);
  CHECK(r.at("a").finish_ns == 40 * kMs);
}

TEST_CASE("vllm v1: a preempted sliding-window request is re-admitted only when its whole length fits") {
  // get_num_blocks_to_allocate counts cdiv(num_tokens, 16) for a request being admitted:
  // a preempted one was freed whole and computes its prompt and its generated tokens again,
  // so no window skips any of them. W = 32, 8 blocks, watermark 0.25 (int(0.25 x 8) = 2
  // blocks kept free while others run).
  // A1 (prompt 9, output 38) and A2 (prompt 9, output 60) hold 10 + s positions after step
  // s: 1 block, 2 from s = 7, 3 from s = 23 (and A2, still running, 2 at s = 38 (t = 48), 3
  // from s = 39). B (prompt 50, output 40) holds 51 + s: 4 blocks at step 0, then 3 (its
  // window passed block 0), 2 at s = 13, 3 from s = 14. Step 0: 1 + 1 + 4 = 6, each
  // admission leaving at least 2 free (7, 6, 2). Held 7 from step 14. Step 23: A1 takes the last block; A2 finds none and B, the newest, is
  // preempted after 23 tokens (prompt and generated: 73 positions, and its first token:
  // 74, 5 blocks). Steps 24-37: A1 and A2 hold 3 each, 2 free. A1 finishes with step 37.
  // Step 38: A2's window frees block 0: 2 held, 6 free, and 6 - 5 = 1 < 2: B waits. (Counted
  // as if it had prefilled its prompt whole and decoded since, max(blocks(51), 3) = 4,
  // 6 - 4 = 2 would admit it: kvsim before 2026-12-05.) A2 holds 2 or 3 until it finishes
  // with step 59; step 60 (nothing running, no watermark): B comes back, its token 24 at
  // step 60, its last (40) at step 76: finish 77 ms.
  ReplayOptions o = window_steps_in_blocks(32, 8);
  o.memory.watermark_ppb = kPartsPerBillion / 4;
  const auto r = records_of("sliding-window:block=16",
                            {test::request("a1", 0, 9, 38), test::request("a2", 0, 9, 60), test::request("b", 0, 50, 40)},
                            o);
  CHECK(r.at("a1").finish_ns == 38 * kMs);
  CHECK(r.at("a2").finish_ns == 60 * kMs);
  CHECK(r.at("a2").preemptions == 0);
  CHECK(r.at("b").preemptions == 1);
  CHECK(r.at("b").finish_ns == 77 * kMs);
}
