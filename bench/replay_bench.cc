// A whole replay in process: kvsim::replay() over a trace file, as `kvsim replay FILE
// --model llama-3.1-8b --allocator X --jobs 1` runs it (roofline cost model on an H100, demand
// mode), without the command line's option parsing, its thread and its output. Registered only
// when the environment names a trace (bench/replay_e2e.sh sets it):
//
//   KVSIM_BENCH_TRACE=FILE                 the trace
//   KVSIM_BENCH_ALLOCATORS="paged ..."     allocators, one benchmark each (default: paged)
//
// items_per_second is requests per second; generated_tokens_per_s the simulated output
// tokens per second; engine_steps the iterations the engine simulated.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <sstream>
#include <string>

#include "kvsim/cost_model.h"
#include "kvsim/allocator.h"
#include "kvsim/budget.h"
#include "kvsim/model.h"
#include "kvsim/replay.h"
#include "kvsim/trace.h"

namespace {

void BM_Replay(benchmark::State& state, const std::string& path, const std::string& spec) {
  const kvsim::ModelSpec& model = kvsim::find_model_preset("llama-3.1-8b");
  const kvsim::KvOptions kv;
  kvsim::ReplayOptions options;
  options.layout = kvsim::kv_layout(model, kv);
  options.cost = kvsim::roofline_cost_model(model, options.layout, kvsim::find_device_preset("H100-80GB"),
                                            kvsim::model_weights(model, kv, kvsim::BudgetOptions{}));
  kvsim::ReplayReport report;
  for (auto _ : state) {
    auto trace = kvsim::open_trace(path);
    auto allocator = kvsim::make_allocator(kvsim::parse_allocator_spec(spec, "bench"), options.layout);
    report = kvsim::replay(*trace, *allocator, options);
  }
  const auto runs = static_cast<double>(state.iterations());
  state.SetItemsProcessed(state.iterations() * report.requests);
  state.counters["generated_tokens_per_s"] =
      benchmark::Counter(runs * static_cast<double>(report.generated_tokens), benchmark::Counter::kIsRate);
  state.counters["engine_steps"] = static_cast<double>(report.iterations);
}

[[maybe_unused]] const bool registered = [] {
  const char* path = std::getenv("KVSIM_BENCH_TRACE");
  if (path == nullptr || *path == '\0') return false;
  const char* list = std::getenv("KVSIM_BENCH_ALLOCATORS");
  std::istringstream specs(list != nullptr && *list != '\0' ? list : "paged");
  for (std::string spec; specs >> spec;) {
    benchmark::RegisterBenchmark(("BM_Replay/" + spec).c_str(), BM_Replay, std::string(path), spec)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->Iterations(1);
  }
  return true;
}();

}  // namespace
