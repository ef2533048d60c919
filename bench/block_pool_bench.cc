// The block pool alone (src/block_pool.h): what taking and dropping a block costs, with
// `live` blocks already held. items_per_second counts pool calls (a take and a drop are
// two); heap_allocs is calls to operator new per pool call (0 in a steady state).
//
//   BM_PoolTakeDrop   take a block, drop it: the free list's last-in first-out hot path.
//   BM_PoolChurn      take a block, drop the oldest live one: the free list is a rotating
//                     queue, so the ids (and reference counts touched) wander over the pool.
//   BM_PoolShareDrop  share a live block with 3 more references, drop them one by one (the
//                     n samples of a request sharing prompt blocks copy-on-write).
//   BM_PrefixHit      prefix caching: a pool of `blocks` cached, unreferenced blocks; look
//                     one up by hash, take it (touch), let it go (leave, drop): a cache hit
//                     as admission and release see it. Four pool calls.
//   BM_PrefixEvict    prefix caching, the pool full of cached, unreferenced blocks: take a
//                     block (evicting the least recently freed one from the hash map),
//                     cache it under a new hash, let it go: a miss in a full cache. Four
//                     pool calls, one eviction.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "block_pool.h"
#include "heap_counter.h"

namespace {

using kvsim::detail::BlockId;
using kvsim::detail::BlockPool;

constexpr std::int64_t kBlockBytes = 16 * 131'072;  // 16 positions of Llama-3.1-8B

void report(benchmark::State& state, std::uint64_t allocs_before, std::int64_t calls_per_iteration) {
  const auto calls = static_cast<std::int64_t>(state.iterations()) * calls_per_iteration;
  state.SetItemsProcessed(calls);
  state.counters["heap_allocs"] =
      calls > 0 ? static_cast<double>(kvsim::bench::heap_allocations() - allocs_before) / static_cast<double>(calls) : 0;
}

void BM_PoolTakeDrop(benchmark::State& state) {
  BlockPool pool(0);
  pool.add_group(kBlockBytes);
  for (std::int64_t i = 0; i < state.range(0); ++i) pool.take(0);
  pool.drop(0, pool.take(0));  // the free list has room for one
  const std::uint64_t allocs = kvsim::bench::heap_allocations();
  for (auto _ : state) {
    const BlockId id = pool.take(0);
    benchmark::DoNotOptimize(id);
    pool.drop(0, id);
  }
  report(state, allocs, 2);
}
BENCHMARK(BM_PoolTakeDrop)->ArgName("live")->Arg(16)->Arg(1024)->Arg(65536)->Arg(1 << 20);

void BM_PoolChurn(benchmark::State& state) {
  BlockPool pool(0);
  pool.add_group(kBlockBytes);
  const auto live = static_cast<std::size_t>(state.range(0));
  std::vector<BlockId> ring(live);
  for (auto& id : ring) id = pool.take(0);
  // Scatter the free list: drop every other block and take them back, so later ids come
  // back in an order unrelated to where they sit in memory.
  for (std::size_t i = 0; i < live; i += 2) pool.drop(0, ring[i]);
  for (std::size_t i = 0; i < live; i += 2) ring[i] = pool.take(0);
  pool.drop(0, pool.take(0));
  std::size_t oldest = 0;
  const std::uint64_t allocs = kvsim::bench::heap_allocations();
  for (auto _ : state) {
    const BlockId id = pool.take(0);
    pool.drop(0, ring[oldest]);
    ring[oldest] = id;
    if (++oldest == live) oldest = 0;
  }
  report(state, allocs, 2);
}
BENCHMARK(BM_PoolChurn)->ArgName("live")->Arg(16)->Arg(1024)->Arg(65536)->Arg(1 << 20);

void BM_PoolShareDrop(benchmark::State& state) {
  BlockPool pool(0);
  pool.add_group(kBlockBytes);
  const auto live = static_cast<std::size_t>(state.range(0));
  std::vector<BlockId> ids(live);
  for (auto& id : ids) id = pool.take(0);
  std::size_t i = 0;
  const std::uint64_t allocs = kvsim::bench::heap_allocations();
  for (auto _ : state) {
    const BlockId id = ids[i];
    pool.share(0, id, 3);
    pool.drop(0, id);
    pool.drop(0, id);
    pool.drop(0, id);
    if (++i == live) i = 0;
  }
  report(state, allocs, 4);
}
BENCHMARK(BM_PoolShareDrop)->ArgName("live")->Arg(16)->Arg(1024)->Arg(65536)->Arg(1 << 20);

// A bounded pool of `blocks` blocks, each cached under hash = its index and released, so
// every one is evictable and the free queue holds them least recently freed first.
BlockPool full_cache(std::int64_t blocks) {
  BlockPool pool(blocks * kBlockBytes);
  pool.add_group(kBlockBytes);
  pool.enable_prefix_caching();
  std::vector<BlockId> ids;
  for (std::int64_t i = 0; i < blocks; ++i) {
    ids.push_back(pool.take(0));
    pool.cache_block(0, ids.back(), static_cast<std::uint64_t>(i));
  }
  for (const BlockId id : ids) {
    pool.leave(0, id);
    pool.drop(0, id);
  }
  return pool;
}

void BM_PrefixHit(benchmark::State& state) {
  const std::int64_t blocks = state.range(0);
  BlockPool pool = full_cache(blocks);
  std::uint64_t hash = 0;
  const std::uint64_t allocs = kvsim::bench::heap_allocations();
  for (auto _ : state) {
    // A stride coprime with the power-of-two pool sizes visits the blocks out of order.
    hash = (hash + 7919) % static_cast<std::uint64_t>(blocks);
    const BlockId id = pool.cached_block(0, hash);
    pool.touch(0, id);
    pool.leave(0, id);
    pool.drop(0, id);
  }
  report(state, allocs, 4);
}
BENCHMARK(BM_PrefixHit)->ArgName("blocks")->Arg(1024)->Arg(32768)->Arg(1 << 20);

void BM_PrefixEvict(benchmark::State& state) {
  const std::int64_t blocks = state.range(0);
  BlockPool pool = full_cache(blocks);
  auto hash = static_cast<std::uint64_t>(blocks);  // hashes not cached yet
  const std::uint64_t allocs = kvsim::bench::heap_allocations();
  for (auto _ : state) {
    const BlockId id = pool.take(0);
    pool.cache_block(0, id, hash++);
    pool.leave(0, id);
    pool.drop(0, id);
  }
  state.counters["evictions_per_second"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  report(state, allocs, 4);
}
BENCHMARK(BM_PrefixEvict)->ArgName("blocks")->Arg(1024)->Arg(32768)->Arg(1 << 20);

}  // namespace
