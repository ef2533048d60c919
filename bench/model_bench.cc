#include <benchmark/benchmark.h>

#include "kvsim/budget.h"
#include "kvsim/model.h"

// kv_layout runs once per `kvsim size` but once per configuration in a replay sweep; the
// hybrid Gemma 3 layout (62 layers into two groups) is the most work a preset asks for.
static void BM_KvLayoutGemma3(benchmark::State& state) {
  const kvsim::ModelSpec& model = kvsim::find_model_preset("gemma-3-27b");
  kvsim::KvOptions options;
  options.pipeline_parallel = state.range(0);
  for (auto _ : state) {
    auto layout = kvsim::kv_layout(model, options);
    benchmark::DoNotOptimize(layout);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_KvLayoutGemma3)->Arg(1)->Arg(4);

// The replay engine asks how many bytes a sequence holds at every event.
static void BM_KvBytesForTokens(benchmark::State& state) {
  const kvsim::KvLayout layout = kvsim::kv_layout(kvsim::find_model_preset("gemma-3-27b"), kvsim::KvOptions{});
  std::int64_t tokens = 1;
  for (auto _ : state) {
    benchmark::DoNotOptimize(kvsim::kv_bytes_for_tokens(layout, tokens));
    tokens = tokens % 65536 + 1;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_KvBytesForTokens);
