// The contract every allocator keeps, run against each of them. Every kind in the allocator
// registry (src/allocator_registry.h) gets the whole suite, at its defaults, without a line
// here; kVariants adds further parameter settings worth running.
#include <catch2/catch.hpp>
#include <map>

#include "allocator_registry.h"
#include "kvsim/error.h"
#include "kvsim/replay.h"
#include "test_support.h"

using namespace kvsim;

namespace {

constexpr std::int64_t kMs = 1'000'000;

const std::vector<std::string> kVariants = {
    "paged:block=1",
    "paged:block=64",
    "paged:block=16,prefix-caching=on",
    "sliding-window:block=16,prefix-caching=on",
    "radix:page=16",
    "sliding-window:block=5",
    "dense-static:reserve=max-tokens",
    "dense-static:reserve=pow2",
    "dense-static:reserve=oracle",
    "dense-static:reserve=pow2-output,placement=buddy",
    "dense-static:reserve=oracle,placement=first-fit",
    "dynamic:growth=exact",
    "dynamic:growth=chunk,chunk=48",
};

// Every registered kind at its defaults ("paged:block=16"), then the variants.
std::vector<std::string> all_specs() {
  std::vector<std::string> out;
  for (const auto& kind : detail::allocator_kinds()) out.push_back(detail::default_spec(kind));
  out.insert(out.end(), kVariants.begin(), kVariants.end());
  return out;
}

const std::vector<std::string> kSpecs = all_specs();

// A small deterministic generator, so the traffic is varied but the same on every run.
struct Lcg {
  std::uint64_t state;
  std::int64_t below(std::int64_t bound) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<std::int64_t>((state >> 33) % static_cast<std::uint64_t>(bound));
  }
};

std::vector<Request> traffic(std::uint64_t seed, int count) {
  Lcg rng{seed};
  std::vector<Request> out;
  std::int64_t t = 0;
  for (int i = 0; i < count; ++i) {
    t += rng.below(8 * kMs);
    Request r = test::request(std::to_string(i), t, rng.below(300), rng.below(120), 1 + rng.below(4) / 3);
    r.max_tokens = r.output_tokens + rng.below(64);
    if (rng.below(6) == 0) r.cancel_ns = t + rng.below(150 * kMs);
    out.push_back(r);
  }
  return out;
}

// The same traffic, with prompts from three families that share their first blocks (of
// 16): a prompt's first m full blocks carry its family's hashes, the rest its own.
std::vector<Request> traffic_with_prefixes(std::uint64_t seed, int count) {
  std::vector<Request> out = traffic(seed, count);
  Lcg rng{seed + 1};
  for (std::size_t i = 0; i < out.size(); ++i) {
    Request& r = out[i];
    const std::int64_t blocks = r.prompt_tokens / 16;
    const std::int64_t family = rng.below(3);
    const std::int64_t shared = rng.below(blocks + 1);
    r.prefix_block_tokens = 16;
    for (std::int64_t k = 0; k < blocks; ++k) {
      r.prefix_hashes.push_back(k < shared ? static_cast<std::uint64_t>(family * 1000 + k)
                                           : static_cast<std::uint64_t>(1'000'000 + i * 1000 + static_cast<std::size_t>(k)));
    }
  }
  return out;
}

bool shares_prefixes(const std::string& spec) {
  return spec.find("prefix-caching=on") != std::string::npos || spec.rfind("radix", 0) == 0;
}

KvLayout layout_named(const std::string& name) {
  KvLayout l;
  l.max_model_len = 1024;
  if (name == "full") l.groups = {test::group("full", 2)};
  if (name == "hybrid") l.groups = {test::group("full", 3), test::group("sliding 40", 5, 40)};
  if (name == "all-sliding") l.groups = {test::group("sliding 100", 1, 100)};
  return l;
}

struct Run {
  ReplayReport report;
  std::vector<TimelineRow> rows;
};

Run replay_with(const std::string& spec, const std::vector<Request>& reqs, const KvLayout& layout,
                    std::int64_t max_batched_tokens) {
  RequestVectorReader trace(reqs);
  auto allocator = make_allocator(parse_allocator_spec(spec, "test"), layout);
  ReplayOptions o;
  o.layout = layout;
  o.cost.base_ps = 2'000'000'000;  // 2 ms
  o.cost.prefill_token_ps = 3'000'000;
  o.cost.decode_seq_ps = 50'000'000;
  o.max_batched_tokens = max_batched_tokens;
  Run out;
  o.timeline = [&out](const TimelineRow& row) { out.rows.push_back(row); };
  out.report = replay(trace, *allocator, o);
  return out;
}

}  // namespace

TEST_CASE("allocator contract: every allocator, every layout, same schedule, nothing leaks") {
  for (const std::string layout_name : {"full", "hybrid", "all-sliding"}) {
    for (std::int64_t budget : {std::int64_t{0}, std::int64_t{96}}) {
      const KvLayout layout = layout_named(layout_name);
      const auto reqs = traffic(7 + static_cast<std::uint64_t>(budget), 150);
      std::map<std::string, Run> runs;
      for (const auto& spec : kSpecs) {
        INFO(spec << " on " << layout_name << ", token budget " << budget);
        Run out = replay_with(spec, reqs, layout, budget);
        const ReplayReport& r = out.report;
        CHECK(r.leak_free);
        CHECK(r.allocated_bytes.at_end == 0);
        CHECK(r.requests == 150);
        CHECK(r.completed + r.cancelled_queued + r.cancelled_running + r.rejected_too_long == r.requests);
        for (const auto& row : out.rows) {
          REQUIRE(row.effective_bytes <= row.allocated_bytes);
          REQUIRE(row.allocated_bytes <= row.reserved_bytes);
        }
        CHECK(r.allocated_bytes.peak >= r.effective_bytes.peak);
        // Ratios of what was allocated (and reserved): there whenever anything was.
        CHECK(r.token_usage.has_value() == (r.allocated_bytes.mean > 0));
        CHECK(r.token_usage.value_or(0) <= 1.0);
        CHECK(r.block_usage.value_or(0) <= 1.0);
        // Internal fragmentation's parts add up to allocated - effective, on average too.
        CHECK(r.mean_bytes.total() == Approx(r.allocated_bytes.mean - r.effective_bytes.mean).margin(1e-6));
        runs.emplace(spec, std::move(out));
      }
      // Demand mode: every allocator sees one schedule, so the engine's own figures agree.
      const Run& first = runs.begin()->second;
      for (const auto& [spec, out] : runs) {
        INFO(spec << " on " << layout_name);
        CHECK(out.report.iterations == first.report.iterations);
        CHECK(out.report.end_ns == first.report.end_ns);
        CHECK(out.report.effective_bytes.mean == first.report.effective_bytes.mean);
        CHECK(out.report.e2e.p99_ns == first.report.e2e.p99_ns);
        REQUIRE(out.rows.size() == first.rows.size());
      }
      // Orderings that follow from the strategies' definitions, row by row.
      for (std::size_t i = 0; i < first.rows.size(); ++i) {
        const auto at = [&](const std::string& spec) { return runs.at(spec).rows[i].allocated_bytes; };
        CHECK(at("sliding-window:block=16") <= at("paged:block=16"));
        CHECK(at("dense-static:reserve=oracle") <= at("dense-static:reserve=pow2"));
        CHECK(at("dense-static:reserve=oracle") <= at("dense-static:reserve=max-tokens"));
        CHECK(at("dense-static:reserve=max-tokens") <= at("dense-static:reserve=max-model-len"));
        CHECK(at("paged:block=1") <= at("paged:block=16"));
      }
    }
  }
}

TEST_CASE("allocator contract: single-sample full-attention traffic fits exactly in one-slot blocks") {
  // With blocks of one position and no sharing or window, paged holds exactly the
  // effective tokens, as does a buffer that grows exactly.
  auto reqs = traffic(99, 80);
  for (auto& r : reqs) r.n = 1;
  for (const std::string spec : {"paged:block=1", "dynamic:growth=exact"}) {
    INFO(spec);
    const auto out = replay_with(spec, reqs, layout_named("full"), 0);
    for (const auto& row : out.rows) CHECK(row.allocated_bytes == row.effective_bytes);
    CHECK(out.report.token_usage == 1.0);
  }
}

TEST_CASE("allocator contract: admit, grow and release through the interface return every byte") {
  for (const auto& spec : kSpecs) {
    INFO(spec);
    const KvLayout layout = layout_named("hybrid");
    auto a = make_allocator(parse_allocator_spec(spec, "test"), layout);
    CHECK(a->name().rfind(spec.substr(0, spec.find(':')), 0) == 0);
    REQUIRE(a->admit(0, AdmitInfo{50, 60, 60, 3, {}}) == kvsim::Outcome::ok);
    REQUIRE(a->admit(1, AdmitInfo{7, 3, 3, 1, {}}) == kvsim::Outcome::ok);
    REQUIRE(a->grow(0, 30, 30) == kvsim::Outcome::ok);  // a prefill chunk
    REQUIRE(a->grow(1, 8, 8) == kvsim::Outcome::ok);
    REQUIRE(a->grow(0, 51, 21) == kvsim::Outcome::ok);  // the rest, and the first token
    for (std::int64_t t = 52; t <= 110; ++t) REQUIRE(a->grow(0, t, 1) == kvsim::Outcome::ok);
    a->check_invariants();
    for (std::size_t g = 0; g < layout.groups.size(); ++g) {
      const Footprint f = a->footprint(0, g, 110);
      CHECK(f.allocated >= f.tail + f.reservation + f.duplicate + f.outside_window);
    }
    const PoolState held = a->pool();
    CHECK(held.largest_free_extent_bytes >= 0);
    CHECK(held.largest_free_extent_bytes <= held.free_bytes);
    a->release(1);
    a->release(0);
    a->check_invariants();
    const PoolState p = a->pool();
    CHECK(p.free_bytes == p.reserved_bytes);
    // An empty pool is one free extent: no external fragmentation is left once everything is
    // back (an allocator that never sets the field reports all its room as fragmented).
    CHECK(p.free_bytes > 0);
    CHECK(p.largest_free_extent_bytes == p.free_bytes);
  }
}

TEST_CASE("allocator contract: requests with shared prefixes, driven through the interface, keep the books") {
  // Traffic whose prompts share prefixes (three families of common leading blocks, then
  // blocks of their own), at each allocator's prefix_block_tokens(): none for those that
  // share nothing. Random admissions, prefill chunks, decode steps and releases (a grow
  // that does not fit releases the request, as a preemption would), unbounded and bounded.
  // After every operation: the cached prefix is whole blocks below the prompt and is what
  // the request holds after admission, and the footprints, less the positions several
  // requests share, add up to what the pool holds, as the engine checks.
  const KvLayout layout = layout_named("hybrid");
  for (const auto& spec : kSpecs) {
    for (std::int64_t capacity_positions : {std::int64_t{0}, std::int64_t{900}}) {
      INFO(spec << ", capacity " << capacity_positions << " positions");
      AllocatorLimits limits;
      limits.capacity_bytes = capacity_positions * layout.bytes_per_token();
      auto a = make_allocator(parse_allocator_spec(spec, "test"), layout, limits);
      const std::int64_t block = a->prefix_block_tokens();
      struct Live {
        bool live = false;
        std::int64_t tokens = 0, prompt = 0, final_tokens = 0;
        // A request released by a failed grow (a preemption) comes back next time with the
        // same identity and its generated tokens to recompute, which it may find cached.
        AdmitInfo info;
        std::vector<std::uint64_t> hashes;
        bool preempted = false;
      };
      std::vector<Live> live(12);
      Lcg rng{2024};
      std::int64_t hits = 0;
      std::int64_t resumed_hits = 0;
      const auto books = [&] {
        std::int64_t bytes = 0;
        for (std::size_t g = 0; g < layout.groups.size(); ++g) {
          const std::int64_t bpp = layout.groups[g].bytes_per_position;
          for (RequestSlot s = 0; s < live.size(); ++s) {
            if (live[s].live) bytes += a->footprint(s, g, live[s].tokens).allocated * bpp;
          }
          bytes -= a->shared_positions(g) * bpp;
        }
        const PoolState p = a->pool();
        REQUIRE(bytes == p.reserved_bytes - p.free_bytes);
        REQUIRE(p.evictable_bytes <= p.free_bytes);
        a->check_invariants();
      };
      for (int op = 0; op < 1500; ++op) {
        const auto s = static_cast<RequestSlot>(rng.below(static_cast<std::int64_t>(live.size())));
        Live& r = live[s];
        if (!r.live && r.preempted) {
          r.preempted = false;
          AdmitInfo info = r.info;
          info.prefix_hashes = r.hashes;
          // Generated so far: every position past the prompt (the last one sampled, not yet
          // computed), or what it was recomputing when it went again.
          info.resumed_tokens = std::max(info.resumed_tokens, r.tokens - info.prompt_tokens);
          r.info.resumed_tokens = info.resumed_tokens;
          const std::int64_t target = info.prompt_tokens + info.resumed_tokens;
          const std::int64_t cached = a->cached_tokens(info);
          REQUIRE((cached == 0 || (block > 0 && cached % block == 0 && cached < target)));
          if (a->admit(s, info) != kvsim::Outcome::ok) continue;
          resumed_hits += cached;
          r.live = true;
          r.tokens = cached;
          for (std::size_t g = 0; g < layout.groups.size(); ++g) {
            const std::int64_t w = layout.groups[g].window_tokens;
            REQUIRE(a->footprint(s, g, cached).allocated >= (w > 0 ? std::min(cached, w - 1) : cached));
          }
          // It recomputes up to its target (and samples), then decodes on as before.
          r.prompt = target;  // the next grows prefill up to here, one chunk at a time
        } else if (!r.live) {
          const std::int64_t prompt = 1 + rng.below(160);
          const std::int64_t family = rng.below(4);  // 3: no common prefix
          const std::int64_t common = family == 3 ? 0 : 2 + 3 * family;
          std::vector<std::uint64_t> hashes;
          for (std::int64_t i = 0; block > 0 && i < prompt / block; ++i) {
            hashes.push_back(i < common ? 1000 * static_cast<std::uint64_t>(family + 1) + static_cast<std::uint64_t>(i)
                                        : (static_cast<std::uint64_t>(op) << 20) + static_cast<std::uint64_t>(i));
          }
          AdmitInfo info{prompt, 40, 1 + rng.below(30), 1 + rng.below(4) / 3, hashes};
          info.request_key = static_cast<std::uint64_t>(op) + 1;
          const std::int64_t cached = a->cached_tokens(info);
          REQUIRE(cached >= 0);
          REQUIRE((cached == 0 || (block > 0 && cached % block == 0 && cached < prompt)));
          if (a->admit(s, info) != kvsim::Outcome::ok) continue;
          hits += cached;
          r = Live{true, cached, prompt, prompt + info.output_tokens, info, hashes, false};
          // After admission the request holds the cached positions; on a sliding-window
          // group at least those its next token's window needs (vLLM keeps W - 1).
          for (std::size_t g = 0; g < layout.groups.size(); ++g) {
            const std::int64_t w = layout.groups[g].window_tokens;
            REQUIRE(a->footprint(s, g, cached).allocated >= (w > 0 ? std::min(cached, w - 1) : cached));
          }
        } else if (r.tokens >= r.final_tokens || rng.below(25) == 0) {
          a->release(s);
          r.live = false;
        } else {
          // A prefill chunk (ending with the first token when it completes the prompt),
          // or one decode step.
          const std::int64_t next = r.tokens < r.prompt ? std::min(r.prompt + 1, r.tokens + 1 + rng.below(70))
                                                        : r.tokens + 1;
          if (a->grow(s, next, next - r.tokens) == kvsim::Outcome::ok) {
            r.tokens = next;
          } else {
            a->release(s);
            r.live = false;
            r.preempted = true;
          }
        }
        books();
      }
      for (RequestSlot s = 0; s < live.size(); ++s) {
        if (live[s].live) a->release(s);
      }
      const PoolState p = a->pool();
      CHECK(p.free_bytes == p.reserved_bytes);
      if (block > 0) CHECK(hits > 0);  // the traffic did exercise the cache
      // Under the budget, requests back from a preemption found blocks again (their prompt's,
      // and with vLLM's prefix caching their generated ones).
      if (block > 0 && capacity_positions > 0) CHECK(resumed_hits > 0);
    }
  }
}

TEST_CASE("allocator contract under a tight budget: every policy, every allocator, nothing leaks") {
  // Budgets of a few requests' worth force admission refusals, preemptions, swaps and
  // refusals of requests that can never fit; the engine's own checks (footprints against the
  // pool, slopes against the allocator, the allocator's books) run at every operation.
  // Every registered policy, and with swap where it supports it: a new policy runs here
  // by being registered.
  struct PolicyCase {
    Policy policy;
    Preemption preemption;
    std::string name;
  };
  std::vector<PolicyCase> policies;
  for (const PolicyInfo& info : kvsim::policies()) {
    policies.push_back({Policy{std::string(info.name)}, Preemption::recompute, std::string(info.name)});
    if (info.supports_swap) policies.push_back({Policy{std::string(info.name)}, Preemption::swap, std::string(info.name) + " swap"});
  }
  REQUIRE(policies.size() >= 4);  // vllm, vllm swap, reserve, sglang at least
  // What the budgets forced, per policy, over every layout, allocator and budget: the test
  // is about these events, so each must have happened.
  struct Forced {
    std::int64_t preemptions = 0, swapped_out_bytes = 0, refused = 0, cancelled_running = 0;
  };
  std::map<std::string, Forced> forced;
  // Traffic with shared prompt prefixes: the sharing allocators share, evict and are
  // preempted under every policy, on full attention and on sliding windows (whose windows,
  // of 40 and 100, pass over the shared prefixes of prompts up to 300); the others ignore
  // the hashes.
  for (const std::string layout_name : {"full", "hybrid", "full, shared prefixes", "hybrid, shared prefixes",
                                        "all-sliding, shared prefixes"}) {
    const std::string base = layout_name.substr(0, layout_name.find(','));
    const bool prefixes = base != layout_name;
    const KvLayout layout = layout_named(base);
    const auto reqs = prefixes ? traffic_with_prefixes(11, 120) : traffic(11, 120);
    for (const auto& p : policies) {
      for (const std::string& spec : kSpecs) {
        for (std::int64_t budget_positions : {std::int64_t{600}, std::int64_t{2500}}) {
          INFO(spec << " on " << layout_name << ", policy " << p.name << ", budget " << budget_positions << " positions");
          RequestVectorReader trace(reqs);
          ReplayOptions o;
          o.layout = layout;
          o.cost.base_ps = 2'000'000'000;
          o.cost.prefill_token_ps = 3'000'000;
          o.max_batched_tokens = 256;
          o.memory.kv_budget_bytes = budget_positions * layout.bytes_per_token();
          o.memory.policy = p.policy;
          o.memory.preemption = p.preemption;
          AllocatorLimits limits;
          limits.capacity_bytes = o.memory.kv_budget_bytes;
          auto allocator = make_allocator(parse_allocator_spec(spec, "test"), layout, limits);
          std::int64_t peak_running = 0;
          o.timeline = [&](const TimelineRow& row) {
            REQUIRE(row.allocated_bytes <= o.memory.kv_budget_bytes);
            peak_running = std::max(peak_running, row.running);
          };
          const ReplayReport r = replay(trace, *allocator, o);
          CHECK(r.leak_free);
          CHECK(r.completed + r.cancelled_queued + r.cancelled_running + r.rejected_too_long + r.rejected_too_large + r.rejected_too_many_samples ==
                r.requests);
          CHECK(r.allocated_bytes.peak <= o.memory.kv_budget_bytes);
          if (p.policy == Policy::reserve && spec.rfind("dynamic", 0) != 0) CHECK(r.preemptions == 0);
          if (prefixes && shares_prefixes(spec)) CHECK(r.prefix_hit_tokens > 0);
          Forced& f = forced[p.name];
          f.preemptions += r.preemptions;
          f.swapped_out_bytes += r.swapped_out_bytes;
          f.refused += r.rejected_too_large;
          f.cancelled_running += r.cancelled_running;
        }
      }
    }
  }
  for (const auto& p : policies) {
    INFO("policy " << p.name);
    const Forced& f = forced.at(p.name);
    // reserve admits only what fits to the end: only dynamic's copies can still preempt.
    CHECK(f.preemptions > 0);
    if (p.preemption == Preemption::swap) CHECK(f.swapped_out_bytes > 0);
    CHECK(f.refused > 0);
    CHECK(f.cancelled_running > 0);
  }
}
