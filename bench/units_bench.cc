#include <benchmark/benchmark.h>

#include "decimal.h"

// Exact decimal parsing sits under every trace reader's timestamp column.
static void BM_ParseScaledDecimal(benchmark::State& state) {
  std::int64_t out = 0;
  for (auto _ : state) {
    auto status = kvsim::detail::parse_scaled_decimal("3217.9951690", 9, out);
    benchmark::DoNotOptimize(status);
    benchmark::DoNotOptimize(out);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ParseScaledDecimal);
