// What the engine fuzz target checks (fuzz/engine_fuzzer.cc), shared with the regression
// tests that replay its findings (tests/fuzz_regression_test.cc).
//
// The fuzz bytes are decoded into a small trace (up to 12 requests: lengths, n, max_tokens,
// cancellations, prefix hashes, arrivals from 0 to the largest representable time) and a
// random option set (allocator and its parameters, layer groups and a sliding window,
// maximum length, budget down to a few bytes, policy and SGLang's queue order, preemption
// mode, watermark, whole-sequence admission, token and running limits, chunked prefill, cost
// model, swap bandwidth), and replayed. Checked:
//
//  - the run ends in a report or a kvsim::InputError; never an InternalError (the engine's
//    own invariants, its livelock watchdog and its leak check all throw one) nor anything
//    else;
//  - every request ends exactly one way: completed + cancelled + refused = requests read,
//    and nothing is held at the end;
//  - simulated time never goes backwards (the timeline, row by row) and every reported
//    instant lies between the first arrival and the end;
//  - the run ends within a step bound derived from the input: each step decodes or
//    prefills at least one token of work (or is one of at most 64 idle steps in a row), and
//    no request's work is done more than once per request in the trace;
//  - memory stays within a bound derived from the input: at most the capacity under a
//    budget (or arena); in demand mode at most three times each request's largest
//    footprint (doubling growth and the copy made while growing) plus 256 positions.
//
// A broken promise throws Finding; the fuzz target lets it escape, so libFuzzer reports it.
#ifndef KVSIM_FUZZ_ENGINE_CHECKS_H_
#define KVSIM_FUZZ_ENGINE_CHECKS_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "allocator_registry.h"
#include "fuzz_checks.h"
#include "kvsim/allocator.h"
#include "kvsim/error.h"
#include "kvsim/model.h"
#include "kvsim/replay.h"
#include "kvsim/request.h"
#include "kvsim/trace.h"

namespace kvsim::fuzz {

// Reads the fuzz input as a stream of small numbers; past its end every read is 0, so
// every input, however short, decodes to some run.
class FuzzBytes {
 public:
  FuzzBytes(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  // Each read is its own statement: the order of operands' evaluation is unspecified, and
  // a finding must decode the same with every compiler.
  std::uint16_t u16() {
    const std::uint16_t low = byte();
    const std::uint16_t high = byte();
    return static_cast<std::uint16_t>(low | (high << 8));
  }
  // A value in [0, n).
  std::uint32_t below(std::uint32_t n) { return n == 0 ? 0 : u16() % n; }
  bool flip() { return (byte() & 1) != 0; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

// An in-memory trace: the engine reads it as it reads a file.
struct EngineCase {
  std::string allocator;
  ReplayOptions options;
  std::vector<Request> requests;
};

inline EngineCase decode_engine_case(const std::uint8_t* data, std::size_t size) {
  FuzzBytes in(data, size);
  EngineCase c;
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  ReplayOptions& o = c.options;

  // Layer groups: one full-attention group, sometimes a sliding-window one beside it.
  static constexpr std::int64_t kBytesPerPosition[] = {1, 2, 3, 8, 64, 1024};
  const auto group = [&](const char* name, std::int64_t window) {
    LayerGroup g;
    g.name = name;
    g.window_tokens = window;
    g.layers = 1;
    g.kv_heads = 1;
    g.bytes_per_position = kBytesPerPosition[in.below(6)];
    g.bytes_per_layer_position = g.bytes_per_position;
    g.k_head_dim = std::max<std::int64_t>(1, g.bytes_per_position / 2);
    return g;
  };
  o.layout.groups = {group("full", 0)};
  if (in.flip()) o.layout.groups.push_back(group("window", 1 + in.below(64)));
  o.layout.max_model_len = in.flip() ? 1 + in.below(512) : 4096;

  // The allocator and its parameters.
  static constexpr const char* kBlocks[] = {"1", "2", "7", "16", "32"};
  static constexpr const char* kReserve[] = {"max-model-len", "max-tokens", "pow2", "oracle"};
  static constexpr const char* kGrowth[] = {"double", "exact", "chunk,chunk=5", "chunk=64"};
  // Radix is choice 5, added after the stored findings: each of them reads a value below 5
  // here, which picks the same kind modulo 6 as it did modulo 5. A kind registered after
  // these is choice 6 and on, built by its bare name, so that the registry's every kind is
  // fuzzed without a line here (and the findings still pick theirs, below 5 modulo any count).
  static constexpr std::string_view kWithParameters[] = {"paged", "sliding-window", "dense-static", "dynamic", "radix"};
  static const std::vector<std::string> others = [] {  // the registry does not change: once
    std::vector<std::string> out;
    for (const auto& kind : kvsim::detail::allocator_kinds()) {
      if (std::find(std::begin(kWithParameters), std::end(kWithParameters), kind.name) == std::end(kWithParameters)) {
        out.push_back(kvsim::detail::default_spec(kind));
      }
    }
    return out;
  }();
  const std::uint32_t choice = in.below(static_cast<std::uint32_t>(6 + others.size()));
  if (choice >= 6) {
    c.allocator = others[choice - 6];
  } else {
    switch (choice) {
      case 0: c.allocator = std::string("paged:block=") + kBlocks[in.below(5)]; break;
      case 1: c.allocator = std::string("paged:block=") + kBlocks[in.below(5)] + ",prefix-caching=on"; break;
      case 2: c.allocator = std::string("sliding-window:block=") + kBlocks[in.below(5)]; break;
      case 3: c.allocator = std::string("dense-static:reserve=") + kReserve[in.below(4)]; break;
      case 5: c.allocator = std::string("radix:page=") + kBlocks[in.below(5)]; break;
      default:
        c.allocator = std::string("dynamic:growth=") + kGrowth[in.below(4)];
        if (in.flip()) c.allocator += ",arena=" + std::to_string(1 + in.below(8192));
        break;
    }
  }

  // Serving: a budget from a few bytes to a few hundred KiB, or none (demand).
  if (in.flip()) {
    const std::int64_t unit = 1 + in.below(4096);
    o.memory.kv_budget_bytes = unit * (1 + in.below(64));
  }
  // Every registered policy, any added later included.
  const auto known = policies();
  const PolicyInfo& policy = known[in.below(static_cast<std::uint32_t>(known.size()))];
  o.memory.policy = Policy{std::string(policy.name)};
  if (policy.supports_swap && in.flip()) o.memory.preemption = Preemption::swap;
  o.memory.watermark_ppb = in.flip() ? 0 : in.below(500) * 1'000'000;
  o.memory.swap_bytes_per_second = in.flip() ? 1 + in.below(1000) : 25'000'000'000;
  o.max_batched_tokens = in.flip() ? 0 : 1 + in.below(600);
  o.chunked_prefill = !in.flip() || o.max_batched_tokens == 0;
  o.max_running = in.flip() ? 0 : 1 + in.below(8);
  o.default_max_tokens = in.flip() ? 0 : in.below(400);
  switch (in.below(3)) {
    case 0: o.cost.base_ps = 1'000'000'000; o.cost.prefill_token_ps = 0; break;  // 1 ms steps
    case 1:
      o.cost.base_ps = 1 + in.below(1000);
      o.cost.prefill_token_ps = in.below(1000);
      break;
    default:  // extreme: steps of hours
      o.cost.base_ps = static_cast<std::int64_t>(1 + in.below(1000)) * 3'600'000'000'000'000 / 1000;  // 1 h
      o.cost.decode_seq_ps = in.below(1000);
      o.cost.context_token_ps = in.below(1000);
      break;
  }

  // The trace: arrivals in order, from 0, sometimes jumping to near the largest time.
  const std::uint32_t count = 1 + in.below(12);
  std::int64_t arrival = 0;
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::uint32_t gap = in.below(8);
    if (gap == 7) arrival = std::max(arrival, kMax - static_cast<std::int64_t>(in.u16()) * 1'000'000'000);
    else if (gap >= 4) {
      const std::int64_t later = static_cast<std::int64_t>(in.u16()) * 1'000'000;
      arrival = later > kMax - arrival ? kMax : arrival + later;
    }
    Request r;
    r.id = std::to_string(i + 1);
    r.arrival_ns = arrival;
    r.prompt_tokens = in.below(300);
    r.output_tokens = in.below(300);
    r.n = in.below(8) == 0 ? 1 + in.below(70) : 1;
    if (in.flip()) r.max_tokens = r.output_tokens + in.below(300);
    if (in.below(4) == 0) {
      const std::int64_t after = in.flip() ? static_cast<std::int64_t>(in.u16()) * 100'000 : kMax;
      r.cancel_ns = after > kMax - arrival ? kMax : arrival + after;
    }
    // Prefix hashes (blocks of 16): requests with the same first byte share a prefix.
    if (in.flip()) {
      r.prefix_block_tokens = 16;
      const std::uint64_t family = in.below(3);
      for (std::int64_t b = 0; b < r.prompt_tokens / 16; ++b) {
        r.prefix_hashes.push_back(family * 1000 + static_cast<std::uint64_t>(b));
      }
    }
    c.requests.push_back(std::move(r));
  }
  // Read last, so that the inputs kept before it decode to the same case (with it off, as the
  // input runs out).
  o.async_scheduling = in.flip();
  o.memory.reserve_full_isl = in.flip();  // likewise
  o.memory.sglang_lpm = in.flip();         // likewise: SGLang's lpm ordering (the sglang policy reads it)
  return c;
}

// Replays one decoded case and checks the properties above. True when it ran (false: an
// InputError, the expected outcome for options or requests kvsim refuses).
inline bool check_engine_case(const EngineCase& c) {
  std::int64_t work = 1, demand_bound = 0;
  for (const Request& r : c.requests) {
    // A step advances at least one token of some request's prompt or output.
    work += r.prompt_tokens + r.output_tokens + 1;
    // The most a request can hold without a budget, generously: every sample at three
    // times its longest life (the maximum length for a max-model-len row; a doubled buffer
    // and the copy made while growing), plus room for a chunk (64) and its copy, or a
    // block (at most 32), in every layer group.
    const std::int64_t planned = r.max_tokens ? *r.max_tokens : std::max(c.options.default_max_tokens, r.output_tokens);
    const std::int64_t longest = std::max(r.prompt_tokens + planned, c.options.layout.max_model_len);
    demand_bound += r.n * c.options.layout.bytes_per_token() * (3 * longest + 256);
  }
  // No request's work done more than once per request in the trace; at most 64 idle steps
  // in a row (the engine's watchdog) around each step of work.
  const std::int64_t requests = static_cast<std::int64_t>(c.requests.size());
  const std::int64_t step_bound = 65 * work * (requests + 1);

  std::int64_t last_time = std::numeric_limits<std::int64_t>::min();
  std::int64_t capacity = 0;
  ReplayOptions o = c.options;
  o.timeline = [&](const TimelineRow& row) {
    if (row.time_ns < last_time) {
      throw Finding("time went backwards: " + std::to_string(row.time_ns) + " ns after " + std::to_string(last_time));
    }
    if (row.step > step_bound) {
      throw Finding("step " + std::to_string(row.step) + " passes the bound " + std::to_string(step_bound) +
                    " derived from the input: a livelock");
    }
    const std::int64_t bound = capacity > 0 ? capacity : demand_bound;
    if (row.allocated_bytes > bound) {
      throw Finding("allocated " + std::to_string(row.allocated_bytes) + " bytes at step " + std::to_string(row.step) +
                    ", above the bound " + std::to_string(bound));
    }
    last_time = row.time_ns;
  };
  ReplayReport report;
  try {
    RequestVectorReader trace(c.requests, "<fuzz>");
    AllocatorLimits limits;
    limits.capacity_bytes = o.memory.kv_budget_bytes;
    auto allocator = make_allocator(parse_allocator_spec(c.allocator, "allocator"), o.layout, limits);
    capacity = o.memory.kv_budget_bytes;
    const std::int64_t own = allocator->pool().capacity_bytes;
    if (own > 0 && (capacity == 0 || own < capacity)) capacity = own;
    report = replay(trace, *allocator, o);
  } catch (const InputError&) {
    return false;
  }
  const std::int64_t ended = report.completed + report.cancelled_queued + report.cancelled_running +
                             report.rejected_too_long + report.rejected_too_large +
                             report.rejected_too_many_samples;
  if (report.requests != requests || ended != requests) {
    throw Finding(std::to_string(requests) + " requests in the trace, " + std::to_string(report.requests) +
                  " read, " + std::to_string(ended) + " ended (completed, cancelled or refused)");
  }
  if (!report.leak_free) throw Finding("the run ended holding " + std::to_string(report.allocated_bytes_at_end) + " bytes");
  if (report.end_ns < report.start_ns || report.start_ns < 0) {
    throw Finding("the run ends at " + std::to_string(report.end_ns) + " ns, before it starts at " +
                  std::to_string(report.start_ns) + " ns");
  }
  for (const Occupancy* occupancy : {&report.allocated_bytes, &report.effective_bytes, &report.reserved_bytes}) {
    if (occupancy->peak > 0 && (occupancy->peak_at_ns < report.start_ns || occupancy->peak_at_ns > report.end_ns)) {
      throw Finding("a peak at " + std::to_string(occupancy->peak_at_ns) + " ns, outside the run");
    }
  }
  for (const Latency* latency : {&report.ttft, &report.e2e, &report.waiting}) {
    if (latency->count > 0 && (latency->p50_ns < 0 || latency->max_ns < 0 || latency->max_ns > report.end_ns - report.start_ns)) {
      throw Finding("a latency outside the run: max " + std::to_string(latency->max_ns) + " ns");
    }
  }
  if (report.iterations > step_bound) {
    throw Finding(std::to_string(report.iterations) + " steps, above the bound " + std::to_string(step_bound));
  }
  return true;
}

}  // namespace kvsim::fuzz

#endif  // KVSIM_FUZZ_ENGINE_CHECKS_H_
