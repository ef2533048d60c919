// Allocator throughput: what one call into an allocator costs, for every allocator kind,
// with a Llama-3.1-8B layout (one full-attention group, 131,072 bytes per position) and a
// Gemma-3-27B layout (10 full + 52 sliding-window-1024 layers: two groups), at 16, 1,024
// and 65,536 live sequences.
//
// Every benchmark keeps a fleet of `live` requests in the allocator, each admitted with a
// 1,000-token prompt and decoding up to 512 tokens past it before it is released and
// admitted again (so the pool, arena and tables are in a steady state; the starting
// lengths are staggered so that block boundaries do not line up). Only the calls being
// measured are timed, with steady_clock around a whole pass over the fleet (the clock's
// own cost is measured once and subtracted); bookkeeping between passes is not. The Time
// column is per pass (one benchmark iteration); ns_per_op and items_per_second are per
// allocator call (per request for BM_Cycle); heap_allocs is the number of calls to the
// global operator new per op (heap_counter.cc counts them), 0 when no call allocates.
//
//   BM_GrowToken  grow(slot, t + 1, 1) where t + 1 is *not* the allocator's next event (for
//                 paged: no new block): the common per-token case. Not registered where every
//                 token is an event (paged:block=1, dynamic:growth=exact). BM_GrowToken/null
//                 is the harness alone (loop, array update, virtual call to an empty grow).
//   BM_GrowEvent  grow(slot, next_event_tokens(slot), 1): the call the replay engine makes at
//                 a request's next event (a block boundary, a full buffer, a block leaving the
//                 window), jumping over the tokens in between as the engine does.
//                 next_event_ns is the cost of the next_event_tokens() call that follows.
//   BM_GrowBlock  grow(slot, t + B, B) with B the allocator's block (16 for the others): one
//                 block's worth of tokens in one step, like a chunk of a chunked prefill.
//   BM_Cycle      release + admit + the prefill step grow(slot, 1001, 1001) for a batch of
//                 the oldest requests: items are requests; release_ns, admit_ns and prefill_ns
//                 split the time.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "heap_counter.h"
#include "kvsim/allocator.h"
#include "kvsim/model.h"

namespace {

using kvsim::Allocator;
using kvsim::Outcome;
using kvsim::RequestSlot;
using SteadyClock = std::chrono::steady_clock;

constexpr std::int64_t kPrompt = 1000;
constexpr std::int64_t kDecode = 512;                   // tokens past the prompt's first token
constexpr std::int64_t kLimit = kPrompt + 1 + kDecode;  // a request is recycled at this length

void must(Outcome o, const char* what) {
  if (o != Outcome::ok) {
    std::fprintf(stderr, "allocator_bench: %s failed in an unbounded allocator\n", what);
    std::abort();
  }
}

// The cost of reading steady_clock twice, subtracted from every timed pass.
double clock_overhead_ns() {
  static const double overhead = [] {
    std::vector<double> samples;
    for (int i = 0; i < 2001; ++i) {
      const auto a = SteadyClock::now();
      const auto b = SteadyClock::now();
      samples.push_back(std::chrono::duration<double, std::nano>(b - a).count());
    }
    std::nth_element(samples.begin(), samples.begin() + 1000, samples.end());
    return samples[1000];
  }();
  return overhead;
}

// Times a pass and accumulates its nanoseconds and heap allocations.
struct Timer {
  double ns = 0;
  std::uint64_t allocs = 0;
  template <typename F>
  void run(F&& f) {
    const std::uint64_t a0 = kvsim::bench::heap_allocations();
    const auto t0 = SteadyClock::now();
    f();
    const auto t1 = SteadyClock::now();
    allocs += kvsim::bench::heap_allocations() - a0;
    ns += std::max(0.0, std::chrono::duration<double, std::nano>(t1 - t0).count() - clock_overhead_ns());
  }
};

std::int64_t block_of(const kvsim::AllocatorSpec& spec) {
  for (const auto& [k, v] : spec.params) {
    if (k == "block") return std::stoll(v);
  }
  return 16;  // paged's default; the other kinds have no block
}

// The harness's floor: an allocator whose calls do nothing but return. BM_GrowToken/null is
// the cost of the benchmark loop and the virtual call, included in every other figure.
class NullAllocator final : public Allocator {
 public:
  NullAllocator() = default;
  std::string name() const override { return "null"; }
  Outcome admit(RequestSlot, const kvsim::AdmitInfo&) override { return Outcome::ok; }
  Outcome grow(RequestSlot, std::int64_t, std::int64_t) override { return Outcome::ok; }
  void release(RequestSlot) override {}
  kvsim::Footprint footprint(RequestSlot, std::size_t, std::int64_t) const override { return {}; }
  std::int64_t next_event_tokens(RequestSlot) const override { return kNoEvent; }
  kvsim::PoolState pool() const override { return {}; }
  std::int64_t peak_bytes(const kvsim::AdmitInfo&, std::int64_t) const override { return 0; }
  void check_invariants() const override {}
};

// `live` requests held in one allocator.
class Fleet {
 public:
  Fleet(const std::string& spec_text, const std::string& model, std::int64_t live)
      : layout_(kvsim::kv_layout(kvsim::find_model_preset(model), kvsim::KvOptions{})),
        tokens_(static_cast<std::size_t>(live)),
        next_event_(static_cast<std::size_t>(live)) {
    if (spec_text == "null") {
      alloc_ = std::make_unique<NullAllocator>();
    } else {
      const kvsim::AllocatorSpec spec = kvsim::parse_allocator_spec(spec_text, "bench");
      alloc_ = kvsim::make_allocator(spec, layout_);
      block_ = block_of(spec);
    }
    for (std::size_t s = 0; s < tokens_.size(); ++s) start(static_cast<RequestSlot>(s), stagger(s));
  }

  Allocator& alloc() { return *alloc_; }
  std::size_t size() const { return tokens_.size(); }
  std::int64_t block() const { return block_; }
  std::int64_t& tokens(std::size_t s) { return tokens_[s]; }
  std::int64_t next_event(std::size_t s) const { return next_event_[s]; }
  void update_event(std::size_t s) { next_event_[s] = alloc_->next_event_tokens(static_cast<RequestSlot>(s)); }

  static kvsim::AdmitInfo info() { return {kPrompt, kDecode + 64, kDecode + 64, 1}; }

  // Admits the request and runs its prefill step (the prompt and the first token), then
  // (untimed, as the engine skips them) jumps `extra` decode tokens ahead.
  void start(RequestSlot s, std::int64_t extra) {
    must(alloc_->admit(s, info()), "admit");
    must(alloc_->grow(s, kPrompt + 1, kPrompt + 1), "prefill");
    if (extra > 0) must(alloc_->grow(s, kPrompt + 1 + extra, 1), "grow");
    tokens_[s] = kPrompt + 1 + extra;
    update_event(s);
  }
  void recycle(RequestSlot s) {
    alloc_->release(s);
    start(s, 0);
  }
  // Spreads the starting lengths over [0, kDecode) so that boundaries do not line up.
  static std::int64_t stagger(std::size_t s) { return static_cast<std::int64_t>((s * 7919) % kDecode); }

 private:
  kvsim::KvLayout layout_;
  std::unique_ptr<Allocator> alloc_;
  std::int64_t block_ = 16;
  std::vector<std::int64_t> tokens_;
  std::vector<std::int64_t> next_event_;
};

void finish(benchmark::State& state, const Timer& timer, std::int64_t ops) {
  state.SetItemsProcessed(ops);
  state.counters["ns_per_op"] = ops > 0 ? timer.ns / static_cast<double>(ops) : 0;
  state.counters["heap_allocs"] = ops > 0 ? static_cast<double>(timer.allocs) / static_cast<double>(ops) : 0;
}

// A pass that timed nothing would let the harness spin forever on zero manual time.
bool nothing_timed(benchmark::State& state, std::int64_t ops_this_pass, std::int64_t& idle_passes) {
  if (ops_this_pass > 0) {
    idle_passes = 0;
    return false;
  }
  if (++idle_passes < 10'000) return false;
  state.SkipWithError("no call of this kind happens for this allocator");
  return true;
}

void BM_GrowToken(benchmark::State& state, const std::string& spec, const std::string& model) {
  Fleet fleet(spec, model, state.range(0));
  Allocator& a = fleet.alloc();
  std::vector<RequestSlot> quiet, event, done;
  Timer timer;
  std::int64_t ops = 0, idle = 0;
  for (auto _ : state) {
    // One engine step: every request gains a token. Those whose token is not an event are
    // the timed pass; the others (events, finished requests) are handled untimed.
    quiet.clear();
    event.clear();
    done.clear();
    for (std::size_t s = 0; s < fleet.size(); ++s) {
      const std::int64_t t = fleet.tokens(s) + 1;
      if (t > kLimit) done.push_back(static_cast<RequestSlot>(s));
      else if (t < fleet.next_event(s)) quiet.push_back(static_cast<RequestSlot>(s));
      else event.push_back(static_cast<RequestSlot>(s));
    }
    const double before = timer.ns;
    timer.run([&] {
      for (const RequestSlot s : quiet) {
        std::int64_t& t = fleet.tokens(s);
        benchmark::DoNotOptimize(a.grow(s, ++t, 1));
      }
    });
    ops += static_cast<std::int64_t>(quiet.size());
    state.SetIterationTime((timer.ns - before) * 1e-9);
    for (const RequestSlot s : event) {
      std::int64_t& t = fleet.tokens(s);
      must(a.grow(s, ++t, 1), "grow");
      fleet.update_event(s);
    }
    for (const RequestSlot s : done) fleet.recycle(s);
    if (nothing_timed(state, static_cast<std::int64_t>(quiet.size()), idle)) break;
  }
  finish(state, timer, ops);
}

void BM_GrowEvent(benchmark::State& state, const std::string& spec, const std::string& model) {
  Fleet fleet(spec, model, state.range(0));
  Allocator& a = fleet.alloc();
  std::vector<RequestSlot> due, done;
  Timer timer, next_timer;
  std::int64_t ops = 0, idle = 0;
  for (auto _ : state) {
    due.clear();
    done.clear();
    for (std::size_t s = 0; s < fleet.size(); ++s) {
      if (fleet.next_event(s) <= kLimit) due.push_back(static_cast<RequestSlot>(s));
      else done.push_back(static_cast<RequestSlot>(s));
    }
    const double before = timer.ns;
    timer.run([&] {
      for (const RequestSlot s : due) {
        const std::int64_t t = fleet.next_event(s);
        fleet.tokens(s) = t;
        benchmark::DoNotOptimize(a.grow(s, t, 1));
      }
    });
    ops += static_cast<std::int64_t>(due.size());
    state.SetIterationTime((timer.ns - before) * 1e-9);
    next_timer.run([&] {
      for (const RequestSlot s : due) fleet.update_event(s);
    });
    for (const RequestSlot s : done) fleet.recycle(s);
    if (nothing_timed(state, static_cast<std::int64_t>(due.size()), idle)) break;
  }
  finish(state, timer, ops);
  state.counters["next_event_ns"] = ops > 0 ? next_timer.ns / static_cast<double>(ops) : 0;
}

void BM_GrowBlock(benchmark::State& state, const std::string& spec, const std::string& model) {
  Fleet fleet(spec, model, state.range(0));
  Allocator& a = fleet.alloc();
  const std::int64_t b = fleet.block();
  std::vector<RequestSlot> go, done;
  Timer timer;
  std::int64_t ops = 0, idle = 0;
  for (auto _ : state) {
    go.clear();
    done.clear();
    for (std::size_t s = 0; s < fleet.size(); ++s) {
      if (fleet.tokens(s) + b <= kLimit) go.push_back(static_cast<RequestSlot>(s));
      else done.push_back(static_cast<RequestSlot>(s));
    }
    const double before = timer.ns;
    timer.run([&] {
      for (const RequestSlot s : go) {
        std::int64_t& t = fleet.tokens(s);
        t += b;
        benchmark::DoNotOptimize(a.grow(s, t, b));
      }
    });
    ops += static_cast<std::int64_t>(go.size());
    state.SetIterationTime((timer.ns - before) * 1e-9);
    for (const RequestSlot s : go) fleet.update_event(s);
    for (const RequestSlot s : done) fleet.recycle(s);
    if (nothing_timed(state, static_cast<std::int64_t>(go.size()), idle)) break;
  }
  finish(state, timer, ops);
}

void BM_Cycle(benchmark::State& state, const std::string& spec, const std::string& model) {
  Fleet fleet(spec, model, state.range(0));
  Allocator& a = fleet.alloc();
  const std::size_t batch = std::min<std::size_t>(fleet.size(), 64);
  std::vector<RequestSlot> slots(batch);
  std::size_t oldest = 0;
  Timer release_t, admit_t, prefill_t;
  const kvsim::AdmitInfo info = Fleet::info();
  std::int64_t ops = 0;
  for (auto _ : state) {
    for (std::size_t i = 0; i < batch; ++i) slots[i] = static_cast<RequestSlot>((oldest + i) % fleet.size());
    oldest = (oldest + batch) % fleet.size();
    const double before = release_t.ns + admit_t.ns + prefill_t.ns;
    release_t.run([&] {
      for (const RequestSlot s : slots) a.release(s);
    });
    admit_t.run([&] {
      for (const RequestSlot s : slots) benchmark::DoNotOptimize(a.admit(s, info));
    });
    prefill_t.run([&] {
      for (const RequestSlot s : slots) benchmark::DoNotOptimize(a.grow(s, kPrompt + 1, kPrompt + 1));
    });
    ops += static_cast<std::int64_t>(batch);
    state.SetIterationTime((release_t.ns + admit_t.ns + prefill_t.ns - before) * 1e-9);
    // Back to a spread of lengths, untimed, as a steady stream of requests would have.
    for (const RequestSlot s : slots) {
      const std::int64_t extra = Fleet::stagger(s);
      if (extra > 0) must(a.grow(s, kPrompt + 1 + extra, 1), "grow");
      fleet.tokens(s) = kPrompt + 1 + extra;
      fleet.update_event(s);
    }
  }
  Timer all;
  all.ns = release_t.ns + admit_t.ns + prefill_t.ns;
  all.allocs = release_t.allocs + admit_t.allocs + prefill_t.allocs;
  finish(state, all, ops);
  const double n = ops > 0 ? static_cast<double>(ops) : 1;
  state.counters["release_ns"] = release_t.ns / n;
  state.counters["admit_ns"] = admit_t.ns / n;
  state.counters["prefill_ns"] = prefill_t.ns / n;
}

// Which benchmarks apply is decided from the spec text alone: registration runs before
// main, when the library's own statics may not be initialised yet.
bool every_token_is_an_event(const std::string& spec) {
  return spec == "paged:block=1" || spec == "dynamic:growth=exact";
}
bool has_events(const std::string& spec, const std::string& model) {
  return !(spec.rfind("dense-static", 0) == 0 && model == "llama-3.1-8b");  // full attention: no events
}

[[maybe_unused]] const bool registered = [] {
  const char* specs[] = {"paged:block=16",
                         "paged:block=1",
                         "paged:block=128",
                         "sliding-window:block=16",
                         "dense-static:reserve=max-model-len",
                         "dynamic:growth=double",
                         "dynamic:growth=exact"};
  const char* models[] = {"llama-3.1-8b", "gemma-3-27b"};
  using Fn = void (*)(benchmark::State&, const std::string&, const std::string&);
  struct Kind {
    const char* name;
    Fn fn;
  };
  const Kind kinds[] = {{"BM_GrowToken", BM_GrowToken},
                        {"BM_GrowEvent", BM_GrowEvent},
                        {"BM_GrowBlock", BM_GrowBlock},
                        {"BM_Cycle", BM_Cycle}};
  benchmark::RegisterBenchmark("BM_GrowToken/null/llama-3.1-8b", BM_GrowToken, std::string("null"),
                               std::string("llama-3.1-8b"))
      ->ArgName("live")->Arg(16)->Arg(1024)->Arg(65536)->UseManualTime()->Unit(benchmark::kNanosecond);
  for (const Kind& kind : kinds) {
    for (const char* model : models) {
      for (const char* spec_c : specs) {
        const std::string spec = spec_c;
        if (kind.fn == BM_GrowToken && every_token_is_an_event(spec)) continue;
        if (kind.fn == BM_GrowEvent && !has_events(spec, model)) continue;
        const std::string name = std::string(kind.name) + "/" + spec + "/" + model;
        auto* b = benchmark::RegisterBenchmark(name.c_str(), kind.fn, spec, std::string(model));
        b->ArgName("live")->Arg(16)->Arg(1024);
        // 65,536 sequences of ~1,500 positions in blocks of one would hold ~100 M block ids.
        if (spec != "paged:block=1") b->Arg(65536);
        b->UseManualTime()->Unit(benchmark::kNanosecond);
      }
    }
  }
  return true;
}();

}  // namespace
