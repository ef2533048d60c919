// Small fixtures shared by the allocator and engine tests.
#ifndef KVSIM_TESTS_TEST_SUPPORT_H_
#define KVSIM_TESTS_TEST_SUPPORT_H_

#include <memory>
#include <string>
#include <vector>

#include "kvsim/allocator.h"
#include "kvsim/error.h"
#include "kvsim/model.h"
#include "kvsim/replay.h"
#include "kvsim/request.h"
#include "kvsim/trace.h"

namespace kvsim::test {

// The message of the InputError `load_hf_config(path)` throws, or "" when it does not throw.
inline std::string load_error(const std::string& path) {
  try {
    load_hf_config(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// A request with the given lengths (and n samples).
inline Request request(std::string id, std::int64_t arrival_ns, std::int64_t prompt, std::int64_t output,
                       std::int64_t n = 1) {
  Request r;
  r.id = std::move(id);
  r.arrival_ns = arrival_ns;
  r.prompt_tokens = prompt;
  r.output_tokens = output;
  r.n = n;
  return r;
}

// A layer group costing `bytes_per_position` per position; window 0 = full attention.
inline LayerGroup group(std::string name, std::int64_t bytes_per_position, std::int64_t window = 0) {
  LayerGroup g;
  g.name = std::move(name);
  g.window_tokens = window;
  g.layers = 1;
  g.kv_heads = 1;
  g.k_head_dim = bytes_per_position / 2;
  g.bytes_per_layer_position = bytes_per_position;
  g.bytes_per_position = bytes_per_position;
  return g;
}

// One full-attention group at 1 byte per position: slots and bytes are the same number.
// `count` replicas' allocators of `spec`, each its own pool (of `limits`), and the pointers
// replay_replicas() takes.
struct ReplicaAllocators {
  std::vector<std::unique_ptr<Allocator>> owned;
  std::vector<Allocator*> pointers;
};
inline ReplicaAllocators replica_allocators(const std::string& spec, const KvLayout& layout,
                                            const AllocatorLimits& limits, int count) {
  ReplicaAllocators r;
  for (int i = 0; i < count; ++i) {
    r.owned.push_back(make_allocator(parse_allocator_spec(spec, "test"), layout, limits));
    r.pointers.push_back(r.owned.back().get());
  }
  return r;
}

inline KvLayout unit_layout(std::int64_t max_model_len = 4096) {
  KvLayout l;
  l.groups = {group("full", 1)};
  l.max_model_len = max_model_len;
  return l;
}

// A replay of `requests` through the allocator `spec` names, bounded by the options' budget,
// with every timeline row kept.
struct BudgetRun {
  ReplayReport report;
  std::vector<TimelineRow> rows;
  std::vector<RequestRecord> records;  // per request, as each left the run
};
inline BudgetRun replay_under_budget(const std::string& spec, std::vector<Request> requests, ReplayOptions o) {
  const bool measured = o.schedule == Schedule::measured ||
                        (o.schedule == Schedule::automatic && !requests.empty() && requests.front().has_service_times());
  RequestVectorReader trace(std::move(requests));
  AllocatorLimits limits;
  limits.capacity_bytes = o.memory.kv_budget_bytes;
  auto allocator = make_allocator(parse_allocator_spec(spec, "test"), o.layout, limits);
  BudgetRun r;
  o.timeline = [&r](const TimelineRow& row) { r.rows.push_back(row); };
  // Per-request rows for simulated schedules (a measured one refuses them), after the
  // caller's own callback, if any.
  if (!measured) {
    o.per_request = [&r, own = o.per_request](const RequestRecord& rec) {
      if (own) own(rec);
      r.records.push_back(rec);
    };
  }
  r.report = replay(trace, *allocator, o);
  return r;
}

}  // namespace kvsim::test

#endif  // KVSIM_TESTS_TEST_SUPPORT_H_
