// Data-parallel replicas: vLLM's load-balancing rule on a schedule worked out by hand.
#include "kvsim/replicas.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "test_support.h"

using namespace kvsim;

namespace {

constexpr std::int64_t kMs = 1'000'000;

// One byte a position, 10 ms steps and `prefill_token_ps` a prompt token.
ReplayOptions every_step_10_ms(std::int64_t prefill_token_ps = 0) {
  ReplayOptions o;
  o.layout = test::unit_layout();
  o.cost.name = "test";
  o.cost.base_ps = 10 * kMs * 1000;
  o.cost.prefill_token_ps = prefill_token_ps;
  return o;
}

// `trace` through `replicas` replicas, each with its own paged:block=16 pool (of `limits`).
ReplicaRun replay_paged(TraceReader& trace, const ReplayOptions& o, const AllocatorLimits& limits = {},
                        int replicas = 2) {
  const test::ReplicaAllocators allocators = test::replica_allocators("paged:block=16", o.layout, limits, replicas);
  return replay_replicas(trace, allocators.pointers, o);
}

}  // namespace

TEST_CASE("replicas: four requests routed by vLLM main's least-loaded rule, not round robin") {
  // Two replicas, 10 ms steps, prompts free. vLLM's main since July 2026 (--dp-router
  // in-flight; vllm/v1/engine/core_client.py, DPLBAsyncMPClient.get_core_engine_for_request,
  // vllm#47420 and vllm#49204): the lowest in-flight count wins, ties to the first replica
  // scanned from a start index that moves on by one per request.
  //   a at 0 ms (1 token):    both empty, scan from 0          -> replica 0; done at 10 ms
  //   b at 1 ms (100 tokens): 0 has a (1), 1 has none, from 1  -> replica 1; runs to 1,001 ms
  //   c at 20 ms (1 token):   0 is empty again, 1 has b, from 0 -> replica 0; 20-30 ms
  //   d at 35 ms (1 token):   0 empty, 1 has b, scan from 1: 1 scores 1, then 0 scores 0
  //                                                            -> replica 0 (round robin: 1)
  RequestVectorReader trace({test::request("a", 0, 10, 1), test::request("b", 1 * kMs, 10, 100),
                           test::request("c", 20 * kMs, 10, 1), test::request("d", 35 * kMs, 10, 1)});
  ReplayOptions o = every_step_10_ms();
  o.dp_router = ReplayOptions::DpRouter::in_flight;
  const ReplicaRun run = replay_paged(trace, o);
  REQUIRE(run.replicas.size() == 2);
  CHECK(run.routed == std::vector<std::int64_t>{3, 1});
  CHECK(run.replicas[0].completed == 3);
  CHECK(run.replicas[1].completed == 1);
  // Every first token comes one 10 ms step after arrival (each replica is idle when its
  // request arrives); b's 100th token ends its 100th step at 1 + 1,000 ms.
  CHECK(run.replicas[1].end_ns == 1'001 * kMs);
  CHECK(run.replicas[0].end_ns == 45 * kMs);
  CHECK(run.total.requests == 4);
  CHECK(run.total.completed == 4);
  CHECK(run.total.start_ns == 0);
  CHECK(run.total.end_ns == 1'001 * kMs);
  CHECK(run.total.ttft.count == 4);
  CHECK(run.total.ttft.p50_ns == 10 * kMs);
  CHECK(run.total.ttft.max_ns == 10 * kMs);
  CHECK(run.total.e2e.max_ns == 1'000 * kMs);
  CHECK(run.total.generated_tokens == 103);
  CHECK(run.total.leak_free);
  // Only b has two tokens or more: TPOT (1,001 - 11 ms) / 99 = 10 ms, and its 99 decode steps
  // of 10 ms are the inter-token samples; a, c and d have only the token their prefill gives.
  CHECK(run.total.tpot.count == 1);
  CHECK(run.total.tpot.p50_ns == 10 * kMs);
  CHECK(run.total.itl.count == 99);
  CHECK(run.total.itl.mean_ns == Approx(10.0 * kMs));
  CHECK(run.total.itl.max_ns == 10 * kMs);
  CHECK(run.total.itl.p50_ns <= 10 * kMs);  // a bucket's edge at or below the 10 ms every sample has
  CHECK(run.total.itl.p50_ns == run.replicas[1].itl.p50_ns);
  // The sums keep the report's identity: allocated = effective + internal fragmentation, as
  // time-weighted means over the combined span, each replica weighted by its own span.
  const double span = 1'001.0 * kMs;
  double effective = 0, allocated = 0;
  for (const ReplayReport& r : run.replicas) {
    effective += r.effective_bytes.mean * static_cast<double>(r.end_ns - r.start_ns) / span;
    allocated += r.allocated_bytes.mean * static_cast<double>(r.end_ns - r.start_ns) / span;
  }
  CHECK(run.total.effective_bytes.mean == Approx(effective));
  CHECK(run.total.allocated_bytes.mean == Approx(allocated));
  CHECK(run.total.allocated_bytes.mean == Approx(run.total.effective_bytes.mean + run.total.mean_bytes.total()));
  CHECK(run.total.token_usage == Approx(effective / allocated));
  // When the sum peaked and its quantiles over time are not the replicas' figures added.
  CHECK(run.total.allocated_bytes.peak == run.replicas[0].allocated_bytes.peak + run.replicas[1].allocated_bytes.peak);
  CHECK(run.total.allocated_bytes.peak_at_ns == -1);
  CHECK(run.total.allocated_bytes.p50 == -1);
}

TEST_CASE("replicas: vLLM 0.19's router, by queue score for an MoE model and round robin for a dense one") {
  // vLLM 0.19's DPLBAsyncMPClient.get_core_engine_for_request (the default, --dp-router
  // queue-score): score = 4 x waiting + running from the engines' published counts, plus the
  // requests the router sent since as waiting; the lowest wins, scanned from replica 0 every
  // time (vLLM's strict <: ties to replica 0). Two replicas, 10 ms steps, prompts free; the
  // trace of the first test: a (1 token) at 0, b (100 tokens) at 1 ms, c (1) at 20 ms, d (1)
  // at 35 ms.
  // An MoE model's engines publish their counts (steps together: a step of replica 1 is
  // replica 0's too):
  //   a: 0 and 0                                     -> replica 0; its step 0-10 ms
  //   b at 1 ms: 0 runs a (score 1), 1 none (0)       -> replica 1; its first step 10-20 ms
  //   c at 20 ms: 0 empty (0), 1 runs b (1)           -> replica 0
  //   d at 35 ms: 0 empty again (c ran 20-30 ms), 1 b -> replica 0
  // A dense model's engines publish none (independent since vllm#30739, until vllm#49204): the
  // router counts only what it sent, each as waiting, 4 a request, so a -> 0, b -> 1, c -> 0
  // (4 against 4: the tie to replica 0), d -> 1 (8 against 4): round robin, d behind b.
  for (const bool together : {true, false}) {
    INFO((together ? "MoE" : "dense"));
    RequestVectorReader trace({test::request("a", 0, 10, 1), test::request("b", 1 * kMs, 10, 100),
                             test::request("c", 20 * kMs, 10, 1), test::request("d", 35 * kMs, 10, 1)});
    ReplayOptions o = every_step_10_ms();
    o.replicas_step_together = together;
    const ReplicaRun run = replay_paged(trace, o);
    CHECK(run.replica_of == (together ? std::vector<std::uint32_t>{0, 1, 0, 0} : std::vector<std::uint32_t>{0, 1, 0, 1}));
    CHECK(run.total.completed == 4);
  }
  // A waiting request weighs 4 running ones. Steps together: a (100 tokens), b (1 token) and
  // c (100 tokens) at 0 ms: a -> 0; b -> 1 (a waits on 0: 4 against 0); c -> 0 (4 against 4,
  // the tie). b is done at 10 ms. d (100 tokens) at 15 ms: 0 runs a and c (2), 1 nothing (0)
  // -> 1, where it waits for the step at 20 ms (4). e at 16 ms: 2 against 4 -> replica 0.
  // vLLM main's rule counts in flight instead: 2 against 1 -> replica 1.
  for (const auto router : {ReplayOptions::DpRouter::queue_score, ReplayOptions::DpRouter::in_flight}) {
    RequestVectorReader loaded({test::request("a", 0, 10, 100), test::request("b", 0, 10, 1),
                                test::request("c", 0, 10, 100), test::request("d", 15 * kMs, 10, 100),
                                test::request("e", 16 * kMs, 10, 1)});
    ReplayOptions o = every_step_10_ms();
    o.replicas_step_together = true;
    o.dp_router = router;
    const ReplicaRun run = replay_paged(loaded, o);
    CHECK(run.replica_of == std::vector<std::uint32_t>{0, 1, 0, 1,
                                                       router == ReplayOptions::DpRouter::queue_score ? 0u : 1u});
  }
}

TEST_CASE("replicas: requests arriving at one instant each count in flight where they were routed") {
  // vLLM main's rule (--dp-router in-flight). Two replicas, 10 ms steps. a (100 tokens) at 0
  // -> replica 0. b, c, d, e at 5 ms, one
  // token each; every request routed counts in flight at once (vLLM's client counts its own),
  // the lowest count wins, ties to the first scanned from a start index moving on by one:
  //   b: from 1: replica 1 has 0, replica 0 has a (1)        -> 1
  //   c: from 0: replica 0 has a (1), replica 1 has b (1)     -> 0 (the tie's first)
  //   d: from 1: replica 1 has b (1), replica 0 has a, c (2)  -> 1
  //   e: from 0: replica 0 has a, c (2), replica 1 has b, d (2) -> 0
  // Counting only the first request routed at an instant, replica 1 would hold 1 at e and
  // take it too. When e arrives, c, b and d have arrived and wait, and e with them; all four came
  // after the last plans (at 0), so none has been passed over (the overload rule's count).
  RequestVectorReader trace({test::request("a", 0, 10, 100), test::request("b", 5 * kMs, 10, 1),
                           test::request("c", 5 * kMs, 10, 1), test::request("d", 5 * kMs, 10, 1),
                           test::request("e", 5 * kMs, 10, 1)});
  ReplayOptions o = every_step_10_ms();
  o.dp_router = ReplayOptions::DpRouter::in_flight;
  const ReplicaRun run = replay_paged(trace, o);
  CHECK(run.routed == std::vector<std::int64_t>{3, 2});
  CHECK(run.total.queue_at_last_arrival == 0);
  // Each replica's queue peaked at 2 (c and e behind a's step; b and d at 5 ms): the total's
  // maximum is their sum, an upper bound (here the two peaks coincide), never below its mean.
  CHECK(run.replicas[0].queue_max == 2);
  CHECK(run.replicas[1].queue_max == 2);
  CHECK(run.total.queue_max == 4);
}

TEST_CASE("replicas: the in-flight router's KV penalty steers a burst away from a replica whose cache is full") {
  // vLLM main's score: max(in flight, waiting + running) + waiting x 6 x max(0, KV usage -
  // 0.5), `waiting` the router's count, raised by each request it routes (current_counts).
  // Two replicas of 15 blocks of 16 one-byte positions, 10 ms steps. At 0, ten requests go
  // alternately to replica 0 and 1 (each a tie or one more in flight there): a (prompt 160,
  // 200 tokens) and c1-c4 (1, 1) to 0, s1-s5 (1, 200) to 1. The c's end in the first step; at
  // 55 ms replica 0 holds a's 166 positions (11 blocks: usage 733 per mille), replica 1 the
  // s's 7 each (5 blocks: 333). Then, at 55 ms, in the middle of a step (in thousandths):
  //   x: replica 0 1,000 (a);                                replica 1 5,000 -> 0
  //   z: replica 0 2,000 + 1 x 6 x 233 = 3,398 (x waiting); replica 1 5,000 -> 0
  //   y: replica 0 3,000 + 2 x 6 x 233 = 5,796;             replica 1 5,000 -> 1
  // Without the penalty y would see 3,000 there and go to replica 0; with one waiting request
  // counted, 4,398, the same.
  std::vector<Request> requests{test::request("a", 0, 160, 200)};
  for (int k = 1; k <= 5; ++k) {
    requests.push_back(test::request("s" + std::to_string(k), 0, 1, 200));
    if (k < 5) requests.push_back(test::request("c" + std::to_string(k), 0, 1, 1));
  }
  for (const char* id : {"x", "z", "y"}) requests.push_back(test::request(id, 55 * kMs, 1, 1));
  RequestVectorReader trace(requests);
  ReplayOptions o = every_step_10_ms();
  o.dp_router = ReplayOptions::DpRouter::in_flight;
  o.memory.kv_budget_bytes = 15 * 16;
  AllocatorLimits limits;
  limits.capacity_bytes = o.memory.kv_budget_bytes;
  const ReplicaRun run = replay_paged(trace, o, limits);
  CHECK(run.replica_of == std::vector<std::uint32_t>{0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 0, 1});
}

TEST_CASE("replicas: a request routed while its replica's step runs waits from its arrival") {
  // Two replicas of a dense model (round robin), 10 ms steps, prompts free. a and a2 (10
  // tokens each) at 0 ms -> replicas 0 and 1, each decoding until 100 ms. b (3 tokens) at
  // 41 ms -> replica 0, during its step of 40-50 ms: it waits 41-50 ms, 9 ms. c at 42 ms ->
  // replica 1, during its step of 40-50 ms, cancelled at 44 ms while waiting: 2 ms. Each
  // replica's span is 0-100 ms, so the time-weighted queue is 9 / 100 = 0.09 on replica 0,
  // 2 / 100 = 0.02 on replica 1 and (9 + 2) / 100 = 0.11 in total. (Counted from the step's
  // start, each replica's waits were lost: 0 everywhere.)
  Request c = test::request("c", 42 * kMs, 10, 3);
  c.cancel_ns = 44 * kMs;
  RequestVectorReader trace({test::request("a", 0, 10, 10), test::request("a2", 0, 10, 10),
                             test::request("b", 41 * kMs, 10, 3), c});
  const ReplicaRun run = replay_paged(trace, every_step_10_ms());
  REQUIRE(run.replica_of == std::vector<std::uint32_t>{0, 1, 0, 1});
  CHECK(run.replicas[0].end_ns == 100 * kMs);
  CHECK(run.replicas[1].end_ns == 100 * kMs);
  CHECK(run.replicas[0].queue_mean == Approx(0.09));
  CHECK(run.replicas[1].queue_mean == Approx(0.02));
  CHECK(run.total.queue_mean == Approx(0.11));
  CHECK(run.total.cancelled_queued == 1);
}

TEST_CASE("replicas: the total's block usage is its allocated mean over its capacity, a pool idle after its end") {
  // Two replicas, each a pool of 64 blocks of 16 one-byte positions (1,024 bytes). a (prompt
  // 16, 100 tokens) and b (prompt 16, 1 token) at 0 ms: round robin, a -> 0 (running to
  // 1,000 ms), b -> 1 (done at 10 ms). Replica 1's pool stays there after its end: over the
  // combined span it holds nothing, so the total's block usage is its allocated mean over the
  // 2,048 bytes of both pools, not over replica 0's pool and a tenth of a second of replica 1's.
  RequestVectorReader trace({test::request("a", 0, 16, 100), test::request("b", 0, 16, 1)});
  ReplayOptions o = every_step_10_ms();
  o.memory.kv_budget_bytes = 64 * 16;
  AllocatorLimits limits;
  limits.capacity_bytes = o.memory.kv_budget_bytes;
  const ReplicaRun run = replay_paged(trace, o, limits);
  REQUIRE(run.replica_of == std::vector<std::uint32_t>{0, 1});
  REQUIRE(run.total.capacity_bytes == 2 * 1024);
  REQUIRE(run.total.block_usage.has_value());
  CHECK(*run.total.block_usage == Approx(run.total.allocated_bytes.mean / 2048.0));
  // Replica 0 alone: its own mean over its own pool, the same span.
  CHECK(*run.replicas[0].block_usage == Approx(run.replicas[0].allocated_bytes.mean / 1024.0));
  // Reserved the same way: both pools all the time, 2,048 bytes (replica 1's is not 1,024 over
  // its 10 ms and nothing after: 1,034.24 bytes in all).
  CHECK(run.replicas[1].reserved_bytes.mean == 1024.0);
  CHECK(run.total.reserved_bytes.mean == 2048.0);
  CHECK(run.total.reserved_bytes.peak == 2048);
  CHECK(run.total.reserved_bytes.at_end == 2048);
}

TEST_CASE("replicas: a replica no request reaches reserves its pool all the same") {
  // Three replicas of 64 blocks of 16 one-byte positions (1,024 bytes each), two requests at 0
  // ms: round robin sends a to replica 0 and b to replica 1, and replica 2 runs no step. Its
  // pool is allocated at start-up as the others': 1,024 bytes reserved, 3,072 in all.
  RequestVectorReader trace({test::request("a", 0, 16, 100), test::request("b", 0, 16, 1)});
  ReplayOptions o = every_step_10_ms();
  o.memory.kv_budget_bytes = 64 * 16;
  AllocatorLimits limits;
  limits.capacity_bytes = o.memory.kv_budget_bytes;
  const ReplicaRun run = replay_paged(trace, o, limits, 3);
  REQUIRE(run.replica_of == std::vector<std::uint32_t>{0, 1});
  REQUIRE(run.replicas[2].iterations == 0);
  const Occupancy& idle = run.replicas[2].reserved_bytes;
  CHECK(idle.mean == 1024.0);
  CHECK(idle.peak == 1024);
  CHECK(idle.at_end == 1024);
  CHECK(idle.p50 == 1024);
  CHECK(run.replicas[2].allocated_bytes.peak == 0);
  CHECK(run.total.capacity_bytes == 3 * 1024);
  CHECK(run.total.reserved_bytes.mean == 3072.0);
  CHECK(run.total.reserved_bytes.peak == 3072);
  CHECK(run.total.reserved_bytes.at_end == 3072);
}

TEST_CASE("replicas: one replica is the plain replay") {
  RequestVectorReader one({test::request("a", 0, 10, 5), test::request("b", 3 * kMs, 20, 7)});
  RequestVectorReader two({test::request("a", 0, 10, 5), test::request("b", 3 * kMs, 20, 7)});
  ReplayOptions o = every_step_10_ms(1'000'000);
  auto a = make_allocator(parse_allocator_spec("paged:block=16", "test"), o.layout);
  auto b = make_allocator(parse_allocator_spec("paged:block=16", "test"), o.layout);
  const ReplayReport plain = replay(one, *a, o);
  const ReplicaRun run = replay_replicas(two, {b.get()}, o);
  CHECK(run.replicas[0].end_ns == plain.end_ns);
  CHECK(run.replicas[0].ttft.mean_ns == plain.ttft.mean_ns);
  CHECK(run.replicas[0].e2e.p99_ns == plain.e2e.p99_ns);
  CHECK(run.replicas[0].iterations == plain.iterations);
  CHECK(run.replicas[0].allocated_bytes.mean == plain.allocated_bytes.mean);
  CHECK(run.total.e2e.p50_ns == plain.e2e.p50_ns);
}

TEST_CASE("replicas: timeline rows tagged with their replica, per-request records numbered by the trace") {
  // The routing of the first test (vLLM main's rule): a -> 0, b -> 1, c -> 0, d -> 0. Replica 0 runs three
  // one-step requests (a 0-10 ms, c 20-30 ms, d 35-45 ms): 3 iterations, one timeline row each
  // with 1 running, and a row with none where it goes idle, at 10 and 30 ms; replica 1 is idle
  // from the run's start to b's arrival (a row with none at 0) and runs b's 100 steps: 100 rows
  // with 1 running. d is replica 0's third request and the trace's fourth: its record says
  // ordinal 4.
  RequestVectorReader trace({test::request("a", 0, 10, 1), test::request("b", 1 * kMs, 10, 100),
                           test::request("c", 20 * kMs, 10, 1), test::request("d", 35 * kMs, 10, 1)});
  ReplayOptions o = every_step_10_ms();
  o.dp_router = ReplayOptions::DpRouter::in_flight;
  std::vector<std::int64_t> rows(2, 0), running_other_than_1(2, 0);
  o.timeline = [&](const TimelineRow& row) {
    REQUIRE((row.replica == 0 || row.replica == 1));
    ++rows[static_cast<std::size_t>(row.replica)];
    if (row.running != 1) ++running_other_than_1[static_cast<std::size_t>(row.replica)];
  };
  std::vector<std::pair<std::string, std::int64_t>> records;
  o.per_request = [&](const RequestRecord& r) { records.emplace_back(r.id, r.ordinal); };
  const ReplicaRun run = replay_paged(trace, o);
  CHECK(run.replica_of == std::vector<std::uint32_t>{0, 1, 0, 0});
  CHECK(rows == std::vector<std::int64_t>{3 + 2, 1 + 100});
  CHECK(running_other_than_1 == std::vector<std::int64_t>{2, 1});
  std::sort(records.begin(), records.end());
  CHECK(records == std::vector<std::pair<std::string, std::int64_t>>{{"a", 1}, {"b", 2}, {"c", 3}, {"d", 4}});
}

namespace {

// 10 ms per step plus 1 ms per prefill token, the replicas stepping together or not.
ReplayOptions ten_ms_steps(bool together) {
  ReplayOptions o = every_step_10_ms(1 * kMs * 1000);
  o.replicas_step_together = together;
  return o;
}

}  // namespace

TEST_CASE("replicas: an MoE model's replicas take every step together, as long as the slowest one's") {
  // 10 ms per step plus 1 ms per prefill token. a (30-token prompt, 2 tokens out) at 0 ms goes
  // to replica 0; b (1 token, 3 out) at 1 ms to replica 1 (0 has a in flight).
  // Independent (a dense model): replica 0 prefills a in 0-40 ms and decodes it in 40-50;
  // replica 1 starts b when it arrives: 1-12 ms, then tokens at 22 and 32 ms.
  // Aligned (vLLM aligns an MoE model's data-parallel forward passes): b reaches replica 1
  // during the first step (0-40 ms, replica 0's prefill) and waits for the next, 40 ms, which
  // lasts as long as b's prefill (11 ms) rather than a's decode (10): a ends and b's first
  // token comes at 51 ms; b's two decode steps end at 61 and 71 ms.
  const auto run_with = [](bool together) {
    RequestVectorReader trace({test::request("a", 0, 30, 2), test::request("b", 1 * kMs, 1, 3)});
    return replay_paged(trace, ten_ms_steps(together));
  };
  const ReplicaRun apart = run_with(false);
  CHECK(apart.replica_of == std::vector<std::uint32_t>{0, 1});
  CHECK(apart.replicas[0].ttft.max_ns == 40 * kMs);
  CHECK(apart.replicas[0].end_ns == 50 * kMs);
  CHECK(apart.replicas[1].ttft.max_ns == 11 * kMs);
  CHECK(apart.replicas[1].e2e.max_ns == 31 * kMs);
  CHECK(apart.replicas[1].end_ns == 32 * kMs);

  const ReplicaRun together = run_with(true);
  CHECK(together.replica_of == std::vector<std::uint32_t>{0, 1});
  CHECK(together.replicas[0].ttft.max_ns == 40 * kMs);
  CHECK(together.replicas[0].e2e.max_ns == 51 * kMs);
  CHECK(together.replicas[0].end_ns == 51 * kMs);  // replica 0 idles after a: its report ends there
  CHECK(together.replicas[0].iterations == 2);
  CHECK(together.replicas[1].ttft.max_ns == 50 * kMs);  // 1 ms -> 51 ms
  CHECK(together.replicas[1].e2e.max_ns == 70 * kMs);
  CHECK(together.replicas[1].end_ns == 71 * kMs);
  CHECK(together.replicas[1].iterations == 3);
  CHECK(together.total.completed == 2);
  CHECK(together.total.end_ns == 71 * kMs);
  CHECK(together.total.leak_free);

  // Each replica's timeline row says what its step computed and the other's tokens, which its
  // experts also serve, with no experts' term in the cost too: at 40 ms, replica 0 decodes a
  // (1 token) while replica 1 prefills b (1 token): one peer token each.
  std::vector<TimelineRow> rows;
  ReplayOptions o = ten_ms_steps(true);
  o.timeline = [&](const TimelineRow& row) { rows.push_back(row); };
  RequestVectorReader trace({test::request("a", 0, 30, 2), test::request("b", 1 * kMs, 1, 3)});
  replay_paged(trace, o);
  std::vector<TimelineRow> at_40;
  for (const TimelineRow& row : rows) {
    if (row.time_ns == 40 * kMs) at_40.push_back(row);
  }
  REQUIRE(at_40.size() == 2);
  CHECK(at_40[0].replica == 0);
  CHECK(at_40[0].work.decode_seqs == 1);
  CHECK(at_40[0].work.peer_tokens == 1);
  CHECK(at_40[1].replica == 1);
  CHECK(at_40[1].work.prefill_tokens == 1);
  CHECK(at_40[1].work.sampled == 1);  // b's prompt completes: its first token
  CHECK(at_40[1].work.peer_tokens == 1);
  CHECK(rows.front().work.prefill_tokens == 30);  // 0 ms: replica 0 alone, beside replica 1's
  CHECK(rows.front().work.peer_tokens == 1);      // dummy batch of one token
}

TEST_CASE("replicas: aligned steps end with the MoE layers' gathers of all the replicas' tokens") {
  // The setup above, aligned, with 1 ms per step and 0.1 ms per token of all the replicas'
  // step for the gathers and scatters (CostModel::replica_collective_*), after the slowest
  // replica's kernels; a replica with nothing to run sends its dummy batch's one token:
  //   0 ms: a's 30-token prefill (40 ms) + 1 + (30 + 1) x 0.1 = 44.1 ms; a's first token.
  //   44.1: a's decode (10) beside b's 1-token prefill (11) + 1 + 2 x 0.1 -> 56.3 ms: a ends,
  //       b's first token (TTFT 55.3 ms).
  //   56.3: b's decode beside replica 0's dummy token: 10 + 1 + 2 x 0.1 -> 67.5; then 78.7 ms,
  //       b's third and last token.
  RequestVectorReader trace({test::request("a", 0, 30, 2), test::request("b", 1 * kMs, 1, 3)});
  ReplayOptions o = ten_ms_steps(true);
  o.cost.replica_collective_step_ps = 1 * kMs * 1000;
  o.cost.replica_collective_token_ps = kMs * 100;
  const ReplicaRun run = replay_paged(trace, o);
  CHECK(run.replicas[0].ttft.max_ns == 44'100'000);
  CHECK(run.replicas[0].end_ns == 56'300'000);
  CHECK(run.replicas[1].ttft.max_ns == 55'300'000);
  CHECK(run.replicas[1].e2e.max_ns == 77'700'000);
  CHECK(run.total.end_ns == 78'700'000);
  CHECK(run.total.completed == 2);

  // b with a 3-token prompt, and CUDA graphs up to 16 tokens. The 30-token prefill runs
  // without a graph, so nothing pads (30 + 1 tokens, 44.1 ms). At 44.1 a's decode (1 token,
  // graph 1) and b's prefill (3, graph 4) both run 4 tokens: 13 + 1 + 8 x 0.1 -> 58.9 ms, a
  // ends and b's first token comes (TTFT 57.9); then b's decodes beside the dummy token, 11.2
  // ms each: 70.1, 81.3 ms. Without graphs that step has 1 + 3 tokens: 58.5, 69.7, 80.9 ms.
  const auto with_graphs = [&](std::int64_t graph_max) {
    RequestVectorReader three({test::request("a", 0, 30, 2), test::request("b", 1 * kMs, 3, 3)});
    o.cuda_graph_max_tokens = graph_max;
    return replay_paged(three, o);
  };
  const ReplicaRun graphs = with_graphs(16);
  CHECK(graphs.replicas[0].ttft.max_ns == 44'100'000);
  CHECK(graphs.replicas[0].end_ns == 58'900'000);
  CHECK(graphs.replicas[1].ttft.max_ns == 57'900'000);
  CHECK(graphs.total.end_ns == 81'300'000);
  CHECK(with_graphs(0).total.end_ns == 80'900'000);
}

TEST_CASE("replicas: the tokens each replica runs, with vLLM's dummy batches and CUDA graphs' padding") {
  using V = std::vector<std::int64_t>;
  // No graphs: each runs what it scheduled, an idle one its dummy batch of one token.
  CHECK(replica_tokens(V{10, 3}, 0) == V{10, 3});
  CHECK(replica_tokens(V{10, 0}, 0) == V{10, 1});
  // Graphs up to 256 (max_num_seqs 128): all pad to the largest replica's graph, 10 -> 16.
  CHECK(replica_tokens(V{10, 3}, 256) == V{16, 16});
  CHECK(replica_tokens(V{10, 0}, 256) == V{16, 16});
  CHECK(replica_tokens(V{0, 0}, 256) == V{1, 1});
  CHECK(replica_tokens(V{129, 250}, 256) == V{256, 256});
  // One replica past the largest graph: none runs one, and each keeps the count it padded to
  // before the ranks agreed (dp_utils.py: the smallest mode is NONE, so no padding to the
  // largest; each rank's own padded count stands).
  CHECK(replica_tokens(V{300, 3}, 256) == V{300, 4});
  CHECK(replica_tokens(V{257, 0, 5}, 256) == V{257, 1, 8});
}
