// Trace parsing speed: rows per second and bytes per second of the readers, on files of
// 1,000,000 rows written to a temporary directory the first time a benchmark needs them.
// Each iteration reads a whole file through open_trace(), as `kvsim replay` would.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "kvsim/trace.h"
#include "kvsim/trace_gen.h"
#include "kvsim/trace_writer.h"

namespace {

constexpr std::int64_t kRows = 1'000'000;

std::filesystem::path bench_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("kvsim-trace-bench-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    static const std::filesystem::path to_remove = d;
    std::atexit([] { std::filesystem::remove_all(to_remove); });
    return d;
  }();
  return dir;
}

// Native CSV and JSONL from the generator: Azure-conversation-like lengths, Poisson
// arrivals with nanosecond digits, ids "1".."1000000".
std::string native_file(kvsim::NativeFormat format) {
  const auto path = bench_dir() / (format == kvsim::NativeFormat::csv ? "native.csv" : "native.jsonl");
  if (!std::filesystem::exists(path)) {
    kvsim::GenOptions options;
    options.requests = kRows;
    kvsim::TraceGenerator gen(options);
    kvsim::TraceWriter writer(path.string(), format, gen.columns());
    kvsim::Request r;
    while (gen.next(r)) writer.write(r);
    writer.close();
  }
  return path.string();
}

// Azure 2023 layout, CRLF line ends, one request every 0.1805 s (so the file spans
// two days and the date changes), lengths cycling through realistic values.
std::string azure_file() {
  const auto path = bench_dir() / "azure.csv";
  if (!std::filesystem::exists(path)) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    std::fputs("TIMESTAMP,ContextTokens,GeneratedTokens\r\n", f);
    std::int64_t t_100ns = (18 * 3600 + 15 * 60) * 10'000'000LL;
    for (std::int64_t i = 0; i < kRows; ++i) {
      const std::int64_t day = 16 + t_100ns / (86'400LL * 10'000'000);
      const std::int64_t in_day = t_100ns % (86'400LL * 10'000'000);
      const std::int64_t s = in_day / 10'000'000;
      std::fprintf(f, "2023-11-%02lld %02lld:%02lld:%02lld.%07lld,%lld,%lld\r\n", static_cast<long long>(day),
                   static_cast<long long>(s / 3600), static_cast<long long>(s / 60 % 60),
                   static_cast<long long>(s % 60), static_cast<long long>(in_day % 10'000'000),
                   static_cast<long long>(100 + (i * 7919) % 4000), static_cast<long long>(5 + (i * 104729) % 600));
      t_100ns += 1'805'000 + (i * 31) % 1000;
    }
    std::fclose(f);
  }
  return path.string();
}

// Mooncake layout: timestamps in ms, about 24 hash ids per record (as in the real
// conversation trace), prefixes shared between neighbours.
std::string mooncake_file() {
  const auto path = bench_dir() / "mooncake.jsonl";
  if (!std::filesystem::exists(path)) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    std::int64_t next_id = 0;
    for (std::int64_t i = 0; i < kRows; ++i) {
      const std::int64_t input = 900 + (i * 7919) % 23'000;
      std::fprintf(f, "{\"timestamp\": %lld, \"input_length\": %lld, \"output_length\": %lld, \"hash_ids\": [",
                   static_cast<long long>(i / 10 * 3000), static_cast<long long>(input),
                   static_cast<long long>(1 + (i * 104729) % 700));
      const std::int64_t blocks = (input + 511) / 512;
      for (std::int64_t b = 0; b < blocks; ++b) {
        std::fprintf(f, b == 0 ? "%lld" : ", %lld", static_cast<long long>(b < 3 ? b : next_id++));
      }
      std::fputs("]}\n", f);
    }
    std::fclose(f);
  }
  return path.string();
}

// Reads the whole file once per iteration; `expected_rows` (when not negative) is checked.
void read_all(benchmark::State& state, const std::string& path, std::int64_t expected_rows) {
  const auto bytes = static_cast<std::int64_t>(std::filesystem::file_size(path));
  std::int64_t rows = 0;
  for (auto _ : state) {
    auto reader = kvsim::open_trace(path);
    kvsim::Request r;
    rows = 0;
    while (reader->next(r)) ++rows;
    benchmark::DoNotOptimize(r);
  }
  if (expected_rows >= 0 && rows != expected_rows) state.SkipWithError("wrong row count");
  state.SetItemsProcessed(state.iterations() * rows);
  state.SetBytesProcessed(state.iterations() * bytes);
}

void BM_ReadNativeCsv(benchmark::State& state) { read_all(state, native_file(kvsim::NativeFormat::csv), kRows); }
void BM_ReadAzureCsv(benchmark::State& state) { read_all(state, azure_file(), kRows); }
void BM_ReadNativeJsonl(benchmark::State& state) { read_all(state, native_file(kvsim::NativeFormat::jsonl), kRows); }
void BM_ReadMooncakeJsonl(benchmark::State& state) { read_all(state, mooncake_file(), kRows); }

// Any trace file, named by the environment variable KVSIM_BENCH_TRACE (registered only when
// it is set): bench/replay_e2e.sh uses it to time reading its generated trace alone, so
// that parsing can be told apart from simulation.
void BM_ReadFile(benchmark::State& state, const std::string& path) { read_all(state, path, -1); }

[[maybe_unused]] const bool file_registered = [] {
  if (const char* path = std::getenv("KVSIM_BENCH_TRACE"); path != nullptr && *path != '\0') {
    benchmark::RegisterBenchmark("BM_ReadFile", BM_ReadFile, std::string(path))
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  return true;
}();

}  // namespace

BENCHMARK(BM_ReadNativeCsv)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ReadAzureCsv)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ReadNativeJsonl)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ReadMooncakeJsonl)->Unit(benchmark::kMillisecond)->UseRealTime();
