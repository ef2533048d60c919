#include "kvsim/size_sheet.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "kvsim/error.h"
#include "kvsim/option_names.h"
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

// The stage whose device holds the most KV for one sequence of `tokens`, and those bytes:
// with sliding windows in some stages only, not always the stage with the most bytes a token.
std::pair<std::size_t, std::int64_t> fullest_stage(const SizeSheet& sheet, std::int64_t tokens) {
  std::pair<std::size_t, std::int64_t> most{0, 0};
  for (std::size_t i = 0; i < sheet.stages.size(); ++i) {
    const std::int64_t held = kv_bytes_for_tokens(sheet.stages[i], tokens);
    if (i == 0 || held > most.second) most = {i, held};
  }
  return most;
}

SequenceBytes sequence_bytes(const SizeSheet& sheet, std::int64_t tokens) {
  SequenceBytes r;
  r.tokens = tokens;
  std::tie(r.stage, r.bytes_per_sequence) = fullest_stage(sheet, tokens);
  r.state_bytes = checked_mul(sheet.layout().state_bytes_per_sequence(), sheet.seqs, "state bytes");
  r.bytes = checked_mul(r.bytes_per_sequence, sheet.seqs, "bytes for all sequences");
  std::int64_t every = 0;
  for (const auto& s : sheet.stages) every = checked_add(every, kv_bytes_for_tokens(s, tokens), "bytes on all devices");
  r.bytes_all_devices = checked_mul(checked_mul(every, sheet.kv.tensor_parallel, "bytes on all devices"), sheet.seqs,
                                    "bytes on all devices");
  return r;
}

// The KV budget stage i's pool uses: its own with per-stage weights, else the budget's.
std::int64_t stage_kv_budget(const SizeSheet& sheet, std::size_t i) {
  return sheet.stage_weights.empty() ? sheet.budget->kv_budget_bytes : sheet.stage_weights[i].kv_budget_bytes;
}

// `units` copies of what unit(i) costs on stage i (blocks or bytes) against available(i), each
// stage's device keeping device_share() of it; the stage with the least room left reports.
template <typename Unit, typename Available>
FitVerdict fit_verdict(const SizeSheet& sheet, std::int64_t units, Unit unit, Available available) {
  FitVerdict v;
  v.fits = true;
  Wide least_room = 0;
  for (std::size_t i = 0; i < sheet.stages.size(); ++i) {
    const std::int64_t one = unit(i);
    const std::int64_t room_for = available(i);
    const std::int64_t need = checked_mul(one, units, "what the sequences need");
    const std::int64_t on_device = device_share(need, sheet.offload_ppb);
    const Wide room = Wide{room_for} - on_device;
    if (i == 0 || room < least_room) {
      least_room = room;
      v.stage = i;
      v.needed = need;
      v.on_device = on_device;
      v.available = room_for;
    }
    const std::int64_t most = most_that_fit(one, room_for, sheet.offload_ppb);
    v.most = i == 0 ? most : std::min(v.most, most);
    v.fits = v.fits && on_device <= room_for;
  }
  return v;
}

// Held to the context limit: a request longer than it is refused whatever the room.
void hold_to_context(const SizeSheet& sheet, FitVerdict& v, std::int64_t longest_tokens) {
  v.context_limit = sheet.context_limit;
  v.longest_tokens = longest_tokens;
  v.over_context = v.context_limit > 0 && longest_tokens > v.context_limit;
  v.fits = v.fits && !v.over_context;
}

// The slots a sequence of `tokens` tokens holds: its tokens and, under speculative decoding,
// the lookahead slots, within max_model_len.
std::int64_t slots_held(const SizeSheet& sheet, std::int64_t tokens) {
  if (sheet.lookahead_slots == 0) return tokens;
  const std::int64_t slots = checked_add(tokens, sheet.lookahead_slots, "slots per sequence");
  return sheet.context_limit > 0 ? std::min(slots, std::max(tokens, sheet.context_limit)) : slots;
}

// A validation case against every stage's pool.
CheckResult check_case(const SizeSheet& sheet, const CheckCase& c) {
  CheckResult r;
  r.c = c;
  r.kv_bytes = checked_mul(fullest_stage(sheet, c.tokens).second, c.sequences, "KV bytes of the case");
  r.fit = fit_verdict(
      sheet, c.sequences,
      [&](std::size_t i) {
        return request_blocks(sheet.stages[i], sheet.stage_pools[i].pool, slots_held(sheet, c.tokens), sheet.paging,
                              &sheet.model_layout);
      },
      [&](std::size_t i) { return sheet.stage_pools[i].pool.num_blocks; });
  hold_to_context(sheet, r.fit, c.tokens);
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
  if (query.draft) {
    const std::int64_t before = sheet.stages.back().bytes_per_token();
    add_draft_kv(sheet.stages, *query.draft, kv);
    sheet.draft = query.draft->name;
    for (const auto& g : draft_layout(*query.draft, kv).groups) sheet.draft_layers += g.layers;
    sheet.draft_bytes_per_token = sheet.stages.back().bytes_per_token() - before;
    sheet.lookahead_slots = checked_mul(2, query.speculative_tokens, "lookahead slots");
  }
  sheet.model_layout = whole_model_layout(sheet.stages);
  sheet.binding_stage = binding_stage(sheet.stages);
  sheet.seqs = query.seqs;
  sheet.paging = query.paging;

  // The budget and the pools first, so that their errors come before the sequences' overflow.
  bool state = false;
  for (const auto& stage : sheet.stages) state = state || stage.state_layers > 0;
  if (query.budget && state) {
    // vLLM pads attention pages to the size of a state page and gives each state layer pages of
    // its own (HybridAttentionMambaModelConfig); kvsim does not model that pool yet, so it sizes
    // the cache of such a model but not what fits in a budget.
    throw InputError(Location{model.name, 0, ""},
                     "this model has state-space layers; kvsim does not model vLLM's hybrid page layout, so it "
                     "cannot say how many blocks fit: size it without a budget");
  }
  if (query.budget) {
    for (const auto& stage : sheet.stages) {
      if (stage.groups.empty()) {
        throw InputError(Location{"", 0, kOptPp}, "a pipeline stage (layers " + std::to_string(stage.first_layer) + "-" +
                                                      std::to_string(stage.end_layer - 1) +
                                                      ") holds no KV, so it has no paged pool to size: use fewer stages");
      }
    }
    if (query.startup && !query.budget->kv_budget_bytes) {
      sheet.startup = startup_memory(model, kv, *query.startup, *query.budget);
      sheet.budget = startup_budget(*sheet.startup);
    } else {
      sheet.budget = derive_budget(model, kv, *query.budget);
    }
    std::vector<std::int64_t> at = query.tokens;
    const bool given_max_model_len = query.startup && query.startup->max_model_len > 0;
    const std::int64_t max_model_len =
        sheet.startup && sheet.startup->max_model_len > 0 ? sheet.startup->max_model_len : context_length(model);
    sheet.context_limit = max_model_len;
    sheet.context_limit_source = given_max_model_len ? "max_model_len" : context_length_source(model);
    if (at.empty() && max_model_len > 0) at.push_back(max_model_len);
    // The flat budget's weights per pipeline stage; the start-up model sizes its stages itself
    // and gives the budget of the stage that binds.
    if (!sheet.startup) sheet.stage_weights = stage_weights(model, kv, *sheet.budget, sheet.stage_weights_note);
    // vLLM groups the whole model's layers, then gives each stage its share of every group.
    for (std::size_t i = 0; i < sheet.stages.size(); ++i) {
      const KvLayout& s = sheet.stages[i];
      // Each stage's own weights when they are known (embeddings first, LM head last).
      const std::int64_t kv_budget = stage_kv_budget(sheet, i);
      StagePool sp{paged_pool(s, kv_budget, query.paging, &sheet.model_layout), {}};
      for (std::int64_t t : at) {
        sp.request_blocks.push_back(request_blocks(s, sp.pool, slots_held(sheet, t), query.paging, &sheet.model_layout));
      }
      sp.own_num_blocks = sp.pool.num_blocks;
      sheet.stage_pools.push_back(std::move(sp));
    }
    // One scheduler and one block table serve every stage: vLLM shrinks each rank's pool to
    // the smallest num_blocks among them and logs that (get_kv_cache_configs).
    std::int64_t least = sheet.stage_pools.front().pool.num_blocks;
    for (const auto& sp : sheet.stage_pools) least = std::min(least, sp.pool.num_blocks);
    for (auto& sp : sheet.stage_pools) {
      sp.pool.num_blocks = least;
      sp.pool.kv_cache_tokens = checked_mul(least / sp.pool.cache_groups, sp.pool.block_tokens, "KV cache tokens");
    }
    for (std::size_t k = 0; k < at.size(); ++k) {
      const std::size_t stage = least_concurrent_stage(sheet.stage_pools, k);
      const StagePool& w = sheet.stage_pools[stage];
      sheet.concurrency.push_back({at[k], stage, w.pool.num_blocks, w.request_blocks[k], {}});
    }
  }
  if (!query.checks.empty() && !query.budget) {
    throw InputError(Location{"", 0, kOptCheck},
                     std::string("needs a budget (") + kOptDevice + " or " + kOptKvBudget + ") to say which cases fit");
  }
  for (std::int64_t t : query.tokens) sheet.sequences.push_back(sequence_bytes(sheet, t));
  if (sheet.sequences.size() > 1) {
    SequenceBytes sum;
    for (const auto& r : sheet.sequences) {
      sum.tokens = checked_add(sum.tokens, r.tokens, "total tokens");
      sum.bytes_all_devices = checked_add(sum.bytes_all_devices, r.bytes_all_devices, "total bytes");
      sum.state_bytes = checked_add(sum.state_bytes, r.state_bytes, "total bytes");
    }
    // All the lengths on one device: the stage that holds the most of their sum.
    for (std::size_t i = 0; i < sheet.stages.size(); ++i) {
      std::int64_t held = 0;
      for (const auto& r : sheet.sequences) held = checked_add(held, kv_bytes_for_tokens(sheet.stages[i], r.tokens), "total bytes");
      if (i == 0 || held > sum.bytes_per_sequence) {
        sum.bytes_per_sequence = held;
        sum.stage = i;
      }
    }
    sum.bytes = checked_mul(sum.bytes_per_sequence, sheet.seqs, "total bytes");
    sheet.total = sum;
  }
  if (query.request) {
    // On the stage that holds the most of it.
    for (const auto& stage : sheet.stages) {
      const RequestBytes r = request_bytes(stage, *query.request);
      if (!sheet.request || r.kv_bytes > sheet.request->kv_bytes) sheet.request = r;
    }
  }
  if (query.offload_ppb > 0) {
    sheet.offload_ppb = query.offload_ppb;
    sheet.link_bytes_per_second = query.link_bytes_per_second;
    sheet.link_source = query.link_source;
    for (const auto& r : sheet.sequences) {
      sheet.offload_rows.push_back(offload_split(r.bytes, query.offload_ppb, query.link_bytes_per_second));
    }
    if (sheet.request) {
      sheet.offload_request = offload_split(sheet.request->kv_bytes, query.offload_ppb, query.link_bytes_per_second);
    }
  }
  if (query.static_cache_tokens > 0) {
    sheet.static_cache_tokens = query.static_cache_tokens;
    sheet.static_reserved_bytes =
        checked_mul(fullest_stage(sheet, query.static_cache_tokens).second, sheet.seqs, "static cache bytes");
  }
  if (!sheet.budget) return sheet;

  // The verdicts, each on what stays on the device (all of it without offloading).
  for (const CheckCase& c : query.checks) sheet.checks.push_back(check_case(sheet, c));
  auto num_blocks = [&](std::size_t i) { return sheet.stage_pools[i].pool.num_blocks; };
  for (std::size_t k = 0; k < sheet.concurrency.size(); ++k) {
    Concurrency& c = sheet.concurrency[k];
    c.seqs = fit_verdict(sheet, sheet.seqs, [&](std::size_t i) { return sheet.stage_pools[i].request_blocks[k]; },
                         num_blocks);
    hold_to_context(sheet, c.seqs, c.tokens);
  }
  if (query.tokens.size() > 1) {
    // One request of each length, --seqs times: the blocks of every length summed.
    sheet.total_fit = fit_verdict(
        sheet, sheet.seqs,
        [&](std::size_t i) {
          std::int64_t blocks = 0;
          for (std::int64_t b : sheet.stage_pools[i].request_blocks) blocks = checked_add(blocks, b, "blocks of all the lengths");
          return blocks;
        },
        num_blocks);
    hold_to_context(sheet, *sheet.total_fit, *std::max_element(query.tokens.begin(), query.tokens.end()));
  }
  if (sheet.static_cache_tokens > 0) {
    // A static cache is not paged: its reservation against each stage's KV budget in bytes. (Its
    // length is the user's max_cache_len, not a request: not held to the context limit.)
    sheet.static_fit = fit_verdict(
        sheet, sheet.seqs, [&](std::size_t i) { return kv_bytes_for_tokens(sheet.stages[i], sheet.static_cache_tokens); },
        [&](std::size_t i) { return stage_kv_budget(sheet, i); });
  }
  return sheet;
}

}  // namespace kvsim
