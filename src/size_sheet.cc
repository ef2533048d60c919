#include "kvsim/size_sheet.h"

#include <utility>

#include "kvsim/units.h"

namespace kvsim {
namespace {

__extension__ typedef __int128 Wide;

// The stage with the lowest concurrency at each token count: a/b < c/d <=> a*d < c*b, exactly.
std::size_t least_concurrent_stage(const std::vector<StagePool>& pools, std::size_t k) {
  std::size_t worst = 0;
  for (std::size_t i = 1; i < pools.size(); ++i) {
    const StagePool& w = pools[worst];
    const StagePool& c = pools[i];
    if (Wide{c.pool.num_blocks} * w.request_blocks[k] < Wide{w.pool.num_blocks} * c.request_blocks[k]) worst = i;
  }
  return worst;
}

SequenceBytes sequence_bytes(const SizeSheet& sheet, std::int64_t tokens) {
  SequenceBytes r{tokens, kv_bytes_for_tokens(sheet.layout(), tokens), 0, 0};
  r.bytes = checked_mul(r.bytes_per_sequence, sheet.seqs, "bytes for all sequences");
  std::int64_t every = 0;
  for (const auto& s : sheet.stages) every = checked_add(every, kv_bytes_for_tokens(s, tokens), "bytes on all devices");
  r.bytes_all_devices = checked_mul(checked_mul(every, sheet.kv.tensor_parallel, "bytes on all devices"), sheet.seqs,
                                    "bytes on all devices");
  return r;
}

}  // namespace

std::size_t binding_stage(const std::vector<KvLayout>& stages) {
  std::size_t binding = 0;
  for (std::size_t i = 1; i < stages.size(); ++i) {
    if (stages[i].bytes_per_token() > stages[binding].bytes_per_token()) binding = i;
  }
  return binding;
}

SizeSheet size_sheet(const ModelSpec& model, const KvOptions& kv, const SizeQuery& query) {
  SizeSheet sheet;
  sheet.model = model;
  sheet.kv = kv;
  sheet.devices = checked_mul(kv.tensor_parallel, kv.pipeline_parallel, "device count");
  sheet.stages = kv_stage_layouts(model, kv);
  sheet.binding_stage = binding_stage(sheet.stages);
  sheet.seqs = query.seqs;
  sheet.paging = query.paging;

  // The budget and the pools first, so that their errors come before the sequences' overflow.
  if (query.budget) {
    if (query.startup && !query.budget->kv_budget_bytes) {
      sheet.startup = startup_memory(model, kv, *query.startup, *query.budget);
      sheet.budget = startup_budget(*sheet.startup);
    } else {
      sheet.budget = derive_budget(model, kv, *query.budget);
    }
    std::vector<std::int64_t> at = query.tokens;
    const std::int64_t max_model_len =
        sheet.startup && sheet.startup->max_model_len > 0 ? sheet.startup->max_model_len : model.max_position_embeddings;
    if (at.empty() && max_model_len > 0) at.push_back(max_model_len);
    for (const auto& s : sheet.stages) {
      StagePool sp{paged_pool(s, sheet.budget->kv_budget_bytes, query.paging), {}};
      for (std::int64_t t : at) sp.request_blocks.push_back(request_blocks(s, sp.pool, t, query.paging));
      sheet.stage_pools.push_back(std::move(sp));
    }
    for (std::size_t k = 0; k < at.size(); ++k) {
      const std::size_t stage = least_concurrent_stage(sheet.stage_pools, k);
      const StagePool& w = sheet.stage_pools[stage];
      sheet.concurrency.push_back({at[k], stage, w.pool.num_blocks, w.request_blocks[k]});
    }
  }
  for (std::int64_t t : query.tokens) sheet.sequences.push_back(sequence_bytes(sheet, t));
  return sheet;
}

}  // namespace kvsim
