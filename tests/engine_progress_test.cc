// The engine's progress guarantee and its time arithmetic (issue 17: internal errors,
// livelocks, lost requests and wrong time). Each case was a reproducer before its fix: an
// internal error (exit 3) on valid input, a replay that spun forever, a request that ended
// no way at all, or a time that wrapped negative. Layouts of one byte per position make
// bytes and slots the same number; steps last exactly 1 ms.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "cli_util.h"
#include "kvsim/error.h"
#include "kvsim/replay.h"
#include "test_support.h"

using namespace kvsim;

namespace {

constexpr std::int64_t kMs = 1'000'000;
constexpr std::int64_t kMaxNs = std::numeric_limits<std::int64_t>::max();

ReplayOptions one_ms_steps(std::int64_t max_model_len = 4096) {
  ReplayOptions o;
  o.layout = test::unit_layout(max_model_len);
  o.cost.base_ps = kMs * 1000;
  o.cost.prefill_token_ps = 0;
  return o;
}

ReplayOptions budget_of(std::int64_t bytes) {
  ReplayOptions o = one_ms_steps();
  o.memory.kv_budget_bytes = bytes;
  o.memory.watermark_ppb = 0;
  return o;
}

// Every request ends exactly one way (the identity the engine now checks itself).
void check_accounted(const ReplayReport& r) {
  CHECK(r.completed + r.cancelled_queued + r.cancelled_running + r.rejected_too_long + r.rejected_too_large + r.rejected_too_many_samples ==
        r.requests);
  CHECK(r.leak_free);
}

}  // namespace

TEST_CASE("progress: an output alone above the maximum length is refused, prompt 0 included, by every allocator") {
  // max_model_len 100. Before the fix the check was prompt > max - min(output, max): with
  // prompt 0 and output 200 that is 0 > 0, false, so dense-static outgrew its 100-position
  // row (exit 3) and the others "completed" a 200-token sequence.
  for (const char* spec : {"dense-static", "paged", "dynamic", "sliding-window"}) {
    INFO(spec);
    const auto r = test::replay_under_budget(spec,
                                             {test::request("zero-prompt", 0, 0, 200), test::request("over", 0, 1, 100),
                                              test::request("exact", 0, 0, 100)},
                                             one_ms_steps(100));
    // 0 + 200 > 100 and 1 + 100 > 100 are refused; 0 + 100 = 100 is exactly the limit.
    CHECK(r.report.rejected_too_long == 2);
    CHECK(r.report.completed == 1);
    CHECK(r.report.generated_tokens == 100);
    check_accounted(r.report);
  }
}

TEST_CASE("progress: swap preemption under a budget too small for two requests ends, refusing what never fits") {
  // 4 blocks of 16 (64 bytes). A and B (prompt 10, output 60) both start at step 0 with one
  // block each. At 17 positions each takes a 2nd block (4 in use); at 33 (step 22) A needs a
  // 3rd: none is free, so the newest, B (decoding), is swapped out holding 2 blocks (32
  // bytes). A takes blocks 3 and 4; at 65 positions (step 54) it needs a 5th, and with B
  // swapped out it swaps itself out (64 bytes). B comes back the next step; at 65 positions
  // it too needs a 5th block, and swaps itself out (64 bytes) since A is swapped out.
  // Neither can come back now (65 positions = 5 blocks > 4) with nothing running: before
  // the fix the engine retried them every step forever at flat memory. Now each is refused.
  ReplayOptions o = budget_of(4 * 16);
  o.memory.preemption = Preemption::swap;
  const auto r = test::replay_under_budget("paged:block=16",
                                           {test::request("a", 0, 10, 60), test::request("b", 0, 10, 60)}, o);
  CHECK(r.report.rejected_too_large == 2);
  CHECK(r.report.completed == 0);
  CHECK(r.report.preemptions == 3);
  CHECK(r.report.swapped_out_bytes == 32 + 64 + 64);
  check_accounted(r.report);
  // Each refusal also leaves its per-request row, as every request does.
  REQUIRE(r.records.size() == 2);
  for (const RequestRecord& rec : r.records) CHECK(rec.outcome == RequestRecord::Outcome::refused);

  SECTION("requests that fit alone all complete") {
    // Output 40: 50 positions = 4 blocks, the whole budget. B is swapped out as above, A
    // grows to 4 blocks and completes; B comes back and completes.
    const auto ok = test::replay_under_budget("paged:block=16",
                                              {test::request("a", 0, 10, 40), test::request("b", 0, 10, 40)}, o);
    CHECK(ok.report.completed == 2);
    CHECK(ok.report.rejected_too_large == 0);
    CHECK(ok.report.generated_tokens == 80);
    check_accounted(ok.report);
  }
}

TEST_CASE("progress: a request with more samples than a step's token budget is refused at arrival") {
  // n = 64. A preempted request is recomputed, and each generated position it prefills
  // again costs n tokens of the step's budget: with max-batched-tokens below 64 not one
  // fits, so before the fix the prefill stood still forever. vLLM itself refuses
  // max_num_batched_tokens < max_num_seqs (vllm/config.py, SchedulerConfig._verify_args):
  // without max_running, a step holds at most max_batched_tokens sequences, and 64 samples
  // are more.
  for (std::int64_t max_batched : {2, 32, 63}) {
    INFO("max batched tokens " << max_batched);
    ReplayOptions o = budget_of(1 << 20);
    o.max_batched_tokens = max_batched;
    const auto r = test::replay_under_budget("paged:block=16", {test::request("wide", 0, 10, 100, 64)}, o);
    CHECK(r.report.rejected_too_many_samples == 1);
    CHECK(r.report.completed == 0);
    check_accounted(r.report);
    REQUIRE(r.records.size() == 1);
    CHECK(r.records[0].outcome == RequestRecord::Outcome::refused);
  }
  // At 64 one recomputed position fits a step: it runs. (10 prompt tokens in one step, then
  // 100 tokens each for 64 samples.)
  ReplayOptions o = budget_of(1 << 20);
  o.max_batched_tokens = 64;
  const auto r = test::replay_under_budget("paged:block=16", {test::request("wide", 0, 10, 100, 64)}, o);
  CHECK(r.report.completed == 1);
  CHECK(r.report.generated_tokens == 64 * 100);
}

TEST_CASE("progress: a recomputed prefill larger than an unchunked step's budget is refused, not retried forever") {
  // No chunked prefill; max model length = max-batched-tokens = 100; 12 blocks of 16.
  // B (prompt 10, output 60) and A (prompt 60, output 40, n 2) start at step 0, B first:
  // 10 + 60 = 70 <= 100 tokens. A holds 3 shared prompt blocks and 1 per sample (5), B 1.
  // At step k, A has 61 + k positions per sample, B 11 + k. Blocks: A +2 at k = 4 (65) and
  // k = 20 (81); B +1 at k = 6 (17) and k = 22 (33): 12 in use. At k = 36 A needs 2 more
  // (97): none free, and the newest running request, A itself, is preempted, having
  // generated 36 tokens per sample. Recomputing it costs 60 + 2 x 36 = 132 tokens > 100: it
  // can never be admitted again, so it recomputes nothing. B completes alone at k = 59 (70
  // positions, 5 blocks).
  // Before the fix A then sat at the head of the queue forever (every step: budget too
  // small, break); now, alone, it is refused.
  ReplayOptions o = budget_of(12 * 16);
  o.layout.max_model_len = 100;
  o.max_batched_tokens = 100;
  o.chunked_prefill = false;
  const auto r = test::replay_under_budget("paged:block=16",
                                           {test::request("b", 0, 10, 60), test::request("a", 0, 60, 40, 2)}, o);
  CHECK(r.report.completed == 1);
  CHECK(r.report.rejected_too_large == 1);
  CHECK(r.report.preemptions == 1);
  CHECK(r.report.recomputed_tokens == 0);
  CHECK(r.report.generated_tokens == 60 + 2 * 36);
  check_accounted(r.report);
}

TEST_CASE("progress: a request cancelled while preempted (swapped out, or waiting to be recomputed) frees everything once") {
  // PITFALLS.md, "KV leaked on abort". Pool 64 positions (4 blocks of 16), 1 ms steps. A and
  // B (prompt 10, output 40) start at 0; after step k each holds 11 + k positions: 1 block,
  // 2 from k = 6 (17), 3 needed at k = 22 (33). At step 22 A, grown first, finds no block:
  // B, the newest, is preempted holding 32 positions (2 blocks) and A takes one (3 blocks,
  // 1 free). B could come back only with 3 blocks (33 positions): it waits, and is cancelled
  // at 30 ms. A takes the last block at k = 38 (49 positions) and finishes at 40 ms; under
  // swap, 2 ns later: step 22 also moved B's 32 bytes out at 25 GB/s (1.28 ns, rounded up).
  // B never came back, so nothing was recomputed.
  for (const Preemption preemption : {Preemption::swap, Preemption::recompute}) {
    INFO((preemption == Preemption::swap ? "swap" : "recompute"));
    ReplayOptions o = budget_of(64);
    o.memory.preemption = preemption;
    Request b = test::request("b", 0, 10, 40);
    b.cancel_ns = 30 * kMs;
    const auto r = test::replay_under_budget("paged:block=16", {test::request("a", 0, 10, 40), b}, o);
    CHECK(r.report.preemptions == 1);
    CHECK(r.report.completed == 1);
    CHECK(r.report.cancelled_queued + r.report.cancelled_running == 1);
    CHECK(r.report.swapped_out_bytes == (preemption == Preemption::swap ? 32 : 0));
    CHECK(r.report.swapped_in_bytes == 0);
    CHECK(r.report.recomputed_tokens == 0);
    CHECK(r.report.leak_free);
    // And the run ends with A's last step, the 40th: the cancelled request leaves nothing
    // behind that keeps the engine stepping (an empty step after it, until 2026-12-07).
    CHECK(r.report.iterations == 40);
    CHECK(r.report.end_ns == 40 * kMs + (preemption == Preemption::swap ? 2 : 0));
    check_accounted(r.report);
    REQUIRE(r.records.size() == 2);
    for (const RequestRecord& rec : r.records) {
      if (rec.id == "a") {
        CHECK(rec.outcome == RequestRecord::Outcome::completed);
        CHECK(rec.finish_ns == 40 * kMs + (preemption == Preemption::swap ? 2 : 0));
      } else {
        CHECK(rec.outcome == RequestRecord::Outcome::cancelled);
        CHECK(rec.finish_ns == 30 * kMs);
        CHECK(rec.preemptions == 1);
      }
    }
  }
}

TEST_CASE("progress: a request cancelled between two prefill chunks frees its chunk's blocks") {
  // 32 tokens a step: A (prompt 100, output 5, cancelled at 2.5 ms) prefills 32 positions in
  // steps 0, 1 and 2 (2, then 4, then 6 blocks of 16) and is cancelled during step 2, before
  // its last chunk. B (prompt 10, output 3) arrives at 0.5 ms and, behind A, starts with the
  // 32 - 32 = 0 tokens left: only at 3 ms, once A is gone, first token at 4 ms.
  ReplayOptions o = budget_of(1 << 20);
  o.max_batched_tokens = 32;
  Request a = test::request("a", 0, 100, 5);
  a.cancel_ns = 5 * kMs / 2;
  const auto r = test::replay_under_budget("paged:block=16", {a, test::request("b", kMs / 2, 10, 3)}, o);
  CHECK(r.report.cancelled_running == 1);
  CHECK(r.report.completed == 1);
  CHECK(r.report.leak_free);
  check_accounted(r.report);
  for (const RequestRecord& rec : r.records) {
    if (rec.id == "b") CHECK(rec.first_token_ns == 4 * kMs);
  }
}

TEST_CASE("progress: a bounded dynamic arena is the run's bound, with or without a budget") {
  // arena=64 bytes, growth=exact: alone a request of prompt 10, output 10 needs at most
  // 20 positions plus the 19 being copied from (39 <= 64). Before the fix, without a budget
  // the run had no scheduler bound and exited 3 ("allocation failed in a run without a
  // memory budget"); with a larger budget the scheduler planned against the budget, not
  // the arena. Now the arena is the capacity, and both requests complete.
  const std::vector<Request> trace = {test::request("a", 0, 10, 10), test::request("b", 0, 10, 10)};
  for (const std::int64_t budget : {std::int64_t{0}, std::int64_t{1} << 30}) {
    INFO("budget " << budget);
    ReplayOptions o = budget_of(budget);
    RequestVectorReader reader(trace);
    AllocatorLimits limits;
    limits.capacity_bytes = budget;
    auto alloc = make_allocator(parse_allocator_spec("dynamic:growth=exact,arena=64", "test"), o.layout, limits);
    const ReplayReport rep = replay(reader, *alloc, o);
    CHECK(rep.capacity_bytes == 64);
    CHECK(rep.completed == 2);
    CHECK(rep.rejected_too_large == 0);
    check_accounted(rep);
  }
  SECTION("an arena larger than the budget is refused: the two bounds would disagree") {
    AllocatorLimits limits;
    limits.capacity_bytes = 32;
    CHECK_THROWS_WITH(make_allocator(parse_allocator_spec("dynamic:arena=64", "test"), one_ms_steps().layout, limits),
                      Catch::Contains("arena (64 bytes) is larger than the memory budget (32 bytes)"));
  }
  SECTION("an arena too small for one request refuses it instead of losing it") {
    // 12 bytes: the prompt and first token (11 positions) fit, the copy to 12 does not (11 +
    // 12 > 12), alone: refused, both of them.
    ReplayOptions o = one_ms_steps();
    RequestVectorReader reader(trace);
    auto alloc = make_allocator(parse_allocator_spec("dynamic:growth=exact,arena=12", "test"), o.layout, {});
    const ReplayReport rep = replay(reader, *alloc, o);
    CHECK(rep.rejected_too_large == 2);
    check_accounted(rep);
  }
}

TEST_CASE("time: a finish at the largest representable time still releases the request") {
  // Measured schedule: start 0, first token 1 ms, finish at 2^63 - 1 ns. The loop used
  // 2^63 - 1 as "no event left", so the release never ran: "the run ended holding ...".
  Request r = test::request("late-finish", 0, 10, 2);
  r.start_ns = 0;
  r.first_token_ns = kMs;
  r.finish_ns = kMaxNs;
  const auto run = test::replay_under_budget("paged:block=16", {r}, one_ms_steps());
  CHECK(run.report.completed == 1);
  CHECK(run.report.end_ns == kMaxNs);
  check_accounted(run.report);
}

TEST_CASE("time: arrivals near the largest time replay exactly, or are an input error, never wrap") {
  // Steps of 1 ms. Prompt 1, output 2: step 0 prefills and gives token 1, step 1 gives
  // token 2; the request ends 2 ms after it arrived.
  const std::int64_t arrival = kMaxNs - 10 * kMs;
  const auto ok = test::replay_under_budget("paged:block=16", {test::request("late", arrival, 1, 2)}, one_ms_steps());
  CHECK(ok.report.completed == 1);
  CHECK(ok.report.start_ns == arrival);
  CHECK(ok.report.end_ns == arrival + 2 * kMs);
  CHECK(ok.report.allocated_bytes.peak_at_ns >= arrival);
  // 1 ms before the end of time, a 2-step request cannot finish: refused as input.
  CHECK_THROWS_AS(test::replay_under_budget("paged:block=16", {test::request("too-late", kMaxNs - kMs / 2, 1, 2)},
                                            one_ms_steps()),
                  InputError);
  try {
    test::replay_under_budget("paged:block=16", {test::request("too-late", kMaxNs - kMs / 2, 1, 2)}, one_ms_steps());
  } catch (const InputError& e) {
    CHECK_THAT(e.what(), Catch::Contains("largest representable time"));
  }
}

TEST_CASE("time: a swap of more than 9.2 GB in one step lasts what the bandwidth says") {
  // The swap schedule of the test above ("requests that fit alone"), at 1 GiB per position:
  // B is swapped out at step 22 holding 2 blocks, 32 GiB, and comes back at step 40 (after
  // A's last token at step 39) holding 3 blocks, 48 GiB (its 33rd position takes a new
  // block, new on the device: the link carries back the 32 GiB that went out), then decodes
  // tokens 23..40 in steps 40..57. Bytes x 1e9 ns overflow 64 bits from 9.2 GB; at 25 GB/s
  // each transfer lasts ceil(34359738368 / 25) = 1374389535 ns, on top of 58 steps of 1 ms.
  ReplayOptions o = budget_of(0);
  o.layout.groups = {test::group("full", std::int64_t{1} << 30)};
  o.memory.kv_budget_bytes = 4 * 16 * (std::int64_t{1} << 30);
  o.memory.preemption = Preemption::swap;
  o.memory.swap_bytes_per_second = 25'000'000'000;
  const auto r = test::replay_under_budget("paged:block=16",
                                           {test::request("a", 0, 10, 40), test::request("b", 0, 10, 40)}, o);
  CHECK(r.report.completed == 2);
  CHECK(r.report.swapped_out_bytes == 32 * (std::int64_t{1} << 30));
  CHECK(r.report.swapped_in_bytes == 48 * (std::int64_t{1} << 30));
  CHECK(r.report.end_ns == 58 * kMs + 2 * std::int64_t{1374389535});
}

TEST_CASE("trace gen never writes what its own reader refuses") {
  const auto dir = test::scratch_dir("engrobust-gen");
  SECTION("65,537 parallel samples") {
    const auto r = test::run_cli({"trace", "gen", "--requests", "2", "--n", "65537", "-o", (dir / "n.csv").string()});
    CHECK(r.exit_code == 2);  // an option value kvsim rejects
    CHECK_THAT(r.err, Catch::Contains("--n") && Catch::Contains("65536"));
    CHECK_FALSE(std::filesystem::exists(dir / "n.csv"));
  }
  SECTION("a rate so low that arrivals pass the largest time") {
    // At 1e-9 requests per second the mean gap is 1e18 ns (31.7 years); 2^63 ns is about
    // 292 years, so 100 requests cannot all arrive in time.
    const auto r = test::run_cli({"trace", "gen", "--requests", "100", "--arrivals", "poisson:rate=0.000000001", "-o",
                                  (dir / "slow.csv").string()});
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("--arrivals") && Catch::Contains("largest representable time"));
    CHECK_FALSE(std::filesystem::exists(dir / "slow.csv"));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("trace convert --sort refuses a trace spanning more than the largest representable time") {
  // Azure times count from the first row (2100): 1900 is 200 years before, 2250 is 150
  // after. Sorted and shifted to start at 0, the last would be at 350 years > 292: it
  // wrapped to a negative arrival before.
  const auto dir = test::scratch_dir("engrobust-sort");
  const auto in = dir / "centuries.csv";
  std::ofstream(in) << "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                       "2100-01-01 00:00:00.0000000,10,10\n"
                       "1900-01-01 00:00:00.0000000,10,10\n"
                       "2250-01-01 00:00:00.0000000,10,10\n";
  const auto r = test::run_cli({"trace", "convert", in.string(), (dir / "out.csv").string(), "--sort"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("centuries.csv") && Catch::Contains("largest representable time"));
  std::filesystem::remove_all(dir);
}
