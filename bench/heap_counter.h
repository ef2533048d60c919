// Counts calls to the global operator new in the benchmark binary, so that a benchmark can
// report heap allocations per operation next to its time (heap_counter.cc replaces the
// global operator new and delete; the benchmarks are single-threaded).
#ifndef KVSIM_BENCH_HEAP_COUNTER_H_
#define KVSIM_BENCH_HEAP_COUNTER_H_

#include <cstdint>

namespace kvsim::bench {

// Calls to the replaceable global operator new so far (all forms funnel through the
// single-object, unaligned and aligned replacements in heap_counter.cc).
std::uint64_t heap_allocations();

}  // namespace kvsim::bench

#endif  // KVSIM_BENCH_HEAP_COUNTER_H_
