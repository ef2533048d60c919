#include "size_output.h"

#include <fmt/core.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "kvsim/units.h"
#include "layout_json.h"
#include "sheet_table.h"

namespace kvsim::cli {
namespace {

__extension__ typedef __int128 Wide;

using Json = nlohmann::ordered_json;
using A = SheetTable::Align;

// Bytes in `unit` with at most 3 decimals when that is exact (0.625 GiB, 18.75 GiB), else
// rounded to 2 (79.65 GiB): the seed's figures read as the guide prints them.
std::string human(std::int64_t bytes, std::int64_t unit, const char* name) {
  for (int decimals = 2; decimals <= 3; ++decimals) {
    Wide scaled = Wide{bytes < 0 ? -bytes : bytes};
    for (int i = 0; i < decimals; ++i) scaled *= 10;
    if (scaled % unit == 0) return format_ratio(bytes, unit, decimals) + " " + name;
  }
  return format_ratio(bytes, unit, 2) + " " + name;
}
std::string gib(std::int64_t bytes) { return human(bytes, kBytesPerGiB, "GiB"); }
std::string gb(std::int64_t bytes) { return human(bytes, kBytesPerGB, "GB"); }

// An exact decimal such as format_ratio() prints, as a JSON number (issue 14: no numbers as
// strings). The text is parsed as JSON, so the number printed is the decimal's shortest
// round-trip form, the same on every platform.
Json decimal_number(const std::string& text) { return Json::parse(text); }

std::string dims(std::int64_t d) { return d == 0 ? "-" : std::to_string(d); }

// ---- text sheet ---------------------------------------------------------------------------

// Model, source, KV dtype, MLA form and placement, one line each.
std::string model_lines(const SizeSheet& s, const std::string& dtype_reason) {
  const KvDtypeInfo& dtype = kv_dtype_info(s.kv.dtype);
  std::string text;
  text += fmt::format("Model      {}\n", s.model.name);
  text += fmt::format("Source     {}\n", s.model.source);
  text += fmt::format("KV dtype   {} ({} bits per value; {})", dtype.name, dtype.bits, dtype_reason);
  if (dtype.group_scales) {
    text += fmt::format("; a {}-byte scale and zero-point per {} values", s.kv.scale_bytes, s.kv.quant_group_values);
  }
  text += "\n";
  if (s.model.mla.has_value()) {
    text += fmt::format("MLA form   {}\n", s.kv.mla_form == MlaForm::latent
                                               ? "latent: one kv_lora_rank + qk_rope_head_dim vector per layer, "
                                                 "no V, on every device (vLLM, SGLang, llama.cpp)"
                                               : "decompressed: per-head K (nope + rope) and V (Hugging Face "
                                                 "transformers)");
  }
  text += fmt::format("Placement  {} device{}: tensor parallel {} x pipeline parallel {}{}\n", s.devices,
                      s.devices == 1 ? "" : "s", s.kv.tensor_parallel, s.kv.pipeline_parallel,
                      s.devices > 1 ? "; figures are per device" : "");
  return text;
}

// The pipeline stages, when there are several.
std::string stages_table(const SizeSheet& s) {
  if (s.stages.size() <= 1) return "";
  std::string text = "\nPipeline stages (vLLM's get_pp_indices split)\n";
  SheetTable t({"stage", "layers", "groups", "bytes/position", ""}, {A::right, A::left, A::left, A::right, A::left});
  for (std::size_t i = 0; i < s.stages.size(); ++i) {
    std::string groups;
    for (const auto& g : s.stages[i].groups) groups += (groups.empty() ? "" : " + ") + std::to_string(g.layers) + " " + g.name;
    t.add({std::to_string(i), fmt::format("{}-{}", s.stages[i].first_layer, s.stages[i].end_layer - 1), groups,
           with_commas(s.stages[i].bytes_per_token()), i == s.binding_stage ? "binds" : ""});
  }
  return text + t.render();
}

// The binding stage's layer groups and what one position costs in each.
std::string layer_groups_table(const SizeSheet& s) {
  const KvLayout& layout = s.layout();
  std::string text =
      fmt::format("\nLayer groups{}\n", s.stages.size() > 1 ? fmt::format(" (stage {})", s.binding_stage) : "");
  SheetTable t({"group", "kind", "layers", "KV heads", "K dim", "V dim", "bytes/position/layer", "bytes/position"},
               {A::left, A::left, A::right, A::right, A::right, A::right, A::right, A::right});
  std::int64_t layers = 0;
  for (const auto& g : layout.groups) {
    layers += g.layers;
    t.add({g.name, layer_group_kind(g), std::to_string(g.layers), std::to_string(g.kv_heads), dims(g.k_head_dim),
           dims(g.v_head_dim), with_commas(g.bytes_per_layer_position), with_commas(g.bytes_per_position)});
  }
  t.add({"total", "", std::to_string(layers), "", "", "", "", with_commas(layout.bytes_per_token())});
  return text + t.render();
}

// B sequences at each T, with a note for each T past the model's maximum.
std::string sequences_table(const SizeSheet& s) {
  if (s.sequences.empty()) return "";
  const KvLayout& layout = s.layout();
  const bool sliding = std::any_of(layout.groups.begin(), layout.groups.end(),
                                   [](const LayerGroup& g) { return g.window_tokens > 0; });
  std::string text = fmt::format("\nSequences: {} x T tokens{}{}\n", with_commas(s.seqs),
                                 sliding ? "; sliding-window groups keep at most W positions" : "",
                                 s.devices > 1 ? "; per device" : "");
  const std::string n = s.seqs == 1 ? "1 seq" : fmt::format("{} seqs", s.seqs);
  std::vector<std::string> headers = {"tokens",
                                      "bytes/sequence",
                                      "GiB/sequence",
                                      fmt::format("bytes ({})", n),
                                      fmt::format("GiB ({})", n),
                                      fmt::format("GB ({})", n)};
  std::vector<A> align(6, A::right);
  if (s.devices > 1) {
    headers.push_back("bytes, all devices");
    align.push_back(A::right);
  }
  SheetTable t(headers, align);
  for (const auto& r : s.sequences) {
    std::vector<std::string> row = {with_commas(r.tokens), with_commas(r.bytes_per_sequence), gib(r.bytes_per_sequence),
                                    with_commas(r.bytes),  gib(r.bytes),                      gb(r.bytes)};
    if (s.devices > 1) row.push_back(with_commas(r.bytes_all_devices));
    t.add(row);
  }
  text += t.render();
  for (const auto& r : s.sequences) {
    if (s.model.max_position_embeddings > 0 && r.tokens > s.model.max_position_embeddings) {
      text += fmt::format("  note: {} tokens exceed the model's max_position_embeddings ({})\n",
                          with_commas(r.tokens), with_commas(s.model.max_position_embeddings));
    }
  }
  return text;
}

// Each term of the budget's subtraction.
std::string budget_table(const Budget& budget) {
  std::string text = "\nKV budget per device\n";
  SheetTable t({"term", "bytes", "GiB", "GB"}, {A::left, A::right, A::right, A::right});
  auto row = [&](const std::string& term, std::int64_t bytes) { t.add({term, with_commas(bytes), gib(bytes), gb(bytes)}); };
  if (budget.direct) {
    row("KV budget (--kv-budget)", budget.kv_budget_bytes);
  } else {
    row("device total: " + budget.device_total_source, budget.device_total_bytes);
    row("x gpu-memory-utilization " + format_ppb(budget.gpu_memory_utilization_ppb), budget.usable_bytes);
    std::string weights;
    if (budget.parameter_source == "--weights-bytes") {
      weights = "- weights (--weights-bytes)";
    } else {
      weights = fmt::format("- weights: {} params ({}) x {} bits ({})", with_commas(budget.parameter_count),
                            budget.parameter_source, budget.weight_bits, budget.weight_bits_source);
    }
    if (budget.devices > 1) {
      weights += fmt::format(" = {} / {} devices", with_commas(budget.weights_bytes), budget.devices);
    }
    row(weights, budget.weights_bytes_per_device);
    row("- reserve: activations, CUDA graphs, runtime", budget.reserve_bytes);
    row("= KV budget", budget.kv_budget_bytes);
  }
  return text + t.render();
}

// The engine's start-up terms on the binding stage, then its weights tensor group by group.
std::string startup_table(const StartupMemory& m) {
  const StartupStage& st = m.stages[m.binding_stage];
  std::string text = fmt::format("\nKV budget per device at {} start-up{}\n", serving_engine_name(m.engine),
                                 m.stages.size() > 1 ? fmt::format(" (stage {} binds)", st.stage) : "");
  SheetTable t({"term", "bytes", "GiB", "rule", "source"}, {A::left, A::right, A::right, A::left, A::left});
  for (const StartupTerm& term : st.terms) {
    const bool shown = term.bytes != 0 || term.name.rfind("= ", 0) == 0 || term.name.rfind("- ", 0) == 0;
    t.add({term.name, shown ? with_commas(term.bytes) : "", shown ? gib(term.bytes) : "", term.rule, term.source});
  }
  text += t.render();
  text += "\nWeights on one device of that stage\n";
  SheetTable w({"tensors", "parameters", "bytes", "GiB", "stored as"}, {A::left, A::right, A::right, A::right, A::left});
  for (const WeightGroup& g : st.weights.groups) {
    w.add({g.name, g.parameters > 0 ? with_commas(g.parameters) : "", with_commas(g.bytes), gib(g.bytes), g.rule});
  }
  w.add({"total", "", with_commas(st.weights.bytes), gib(st.weights.bytes), ""});
  return text + w.render();
}

// Whether --seqs sequences of c.tokens each fit the pool at once (the product is wide: it
// never wraps).
bool seqs_fit(const SizeSheet& s, const Concurrency& c) {
  return Wide{s.seqs} * c.blocks_per_request <= c.num_blocks;
}

// The binding stage's paged pool and vLLM's concurrency line at each T.
std::string paged_lines(const SizeSheet& s) {
  const PagedPool& p = s.stage_pools[s.binding_stage].pool;
  std::string text = fmt::format("\nPaged cache (vLLM's layout, block size {} tokens)\n", p.block_tokens);
  if (p.uniform_page) {
    text += fmt::format("  {} KV-cache group{} of {} layers{}; a block is {} layers x {} tokens x {} bytes = {} bytes\n",
                        p.cache_groups, p.cache_groups == 1 ? "" : "s", p.group_size,
                        p.padding_layers > 0 ? fmt::format(" ({} padding layer slots)", p.padding_layers) : "",
                        p.group_size, p.block_tokens, with_commas(s.layout().groups.front().bytes_per_layer_position),
                        with_commas(p.block_bytes));
  } else {
    text += fmt::format("  layer groups differ in bytes per position; approximated as one group, a block of {} bytes\n",
                        with_commas(p.block_bytes));
  }
  text += fmt::format("  {} blocks; GPU KV cache size: {} tokens\n", with_commas(p.num_blocks),
                      with_commas(p.kv_cache_tokens));
  for (const Concurrency& c : s.concurrency) {
    text += fmt::format("  Maximum concurrency for {} tokens per request: {}x ({} / {} blocks{}{})\n",
                        with_commas(c.tokens), format_ratio(c.num_blocks, c.blocks_per_request, 2),
                        with_commas(c.num_blocks), with_commas(c.blocks_per_request),
                        !s.sequences.empty() ? ""
                        : s.startup && s.startup->settings.max_model_len > 0 ? "; T = max_model_len"
                                                                            : "; T = max_position_embeddings",
                        s.stages.size() > 1 ? fmt::format("; stage {}", c.stage) : "");
    if (!s.sequences.empty() && s.seqs > 1) {
      const std::int64_t most = c.blocks_per_request > 0 ? c.num_blocks / c.blocks_per_request : 0;
      text += seqs_fit(s, c)
                  ? fmt::format("  --seqs {} of {} tokens: fits ({} of {} blocks)\n", with_commas(s.seqs),
                                with_commas(c.tokens), with_commas(s.seqs * c.blocks_per_request),
                                with_commas(c.num_blocks))
                  : fmt::format("  --seqs {} of {} tokens: does NOT fit: they need {} x {} blocks and the pool has {}; "
                                "at most {} such sequences fit\n",
                                with_commas(s.seqs), with_commas(c.tokens), with_commas(s.seqs),
                                with_commas(c.blocks_per_request), with_commas(c.num_blocks), with_commas(most));
    }
    if (c.num_blocks < c.blocks_per_request) {
      text += fmt::format("  note: less than one request of {} tokens fits; vLLM refuses to start with "
                          "max_model_len {} on this budget\n",
                          with_commas(c.tokens), with_commas(c.tokens));
    }
  }
  return text;
}

// ---- JSON ---------------------------------------------------------------------------------

Json model_json(const ModelSpec& model) {
  Json m = {{"name", model.name},
            {"source", model.source},
            {"num_hidden_layers", model.num_hidden_layers},
            {"num_attention_heads", model.num_attention_heads},
            {"num_key_value_heads", model.num_key_value_heads},
            {"head_dim", model.head_dim},
            {"max_position_embeddings", model.max_position_embeddings},
            {"torch_dtype", model.weight_dtype}};
  if (model.mla) {
    m["mla"] = {{"kv_lora_rank", model.mla->kv_lora_rank},
                {"qk_rope_head_dim", model.mla->qk_rope_head_dim},
                {"qk_nope_head_dim", model.mla->qk_nope_head_dim},
                {"v_head_dim", model.mla->v_head_dim}};
  }
  return m;
}

Json kv_dtype_json(const KvOptions& kv, const std::string& dtype_reason) {
  const KvDtypeInfo& dtype = kv_dtype_info(kv.dtype);
  Json d = {{"name", std::string(dtype.name)}, {"bits", dtype.bits}, {"chosen_by", dtype_reason}};
  if (dtype.group_scales) {
    d["quant_group_values"] = kv.quant_group_values;
    d["scale_bytes"] = kv.scale_bytes;
  }
  return d;
}

Json stages_json(const SizeSheet& s) {
  Json st = Json::array();
  for (std::size_t i = 0; i < s.stages.size(); ++i) {
    st.push_back({{"stage", i},
                  {"first_layer", s.stages[i].first_layer},
                  {"end_layer", s.stages[i].end_layer},
                  {"bytes_per_token", s.stages[i].bytes_per_token()},
                  {"binding", i == s.binding_stage},
                  {"groups", layer_groups_json(s.stages[i])}});
  }
  return st;
}

Json sequences_json(const SizeSheet& s) {
  Json rows = Json::array();
  for (const auto& r : s.sequences) {
    rows.push_back({{"tokens", r.tokens},
                    {"bytes_per_sequence", r.bytes_per_sequence},
                    {"bytes", r.bytes},
                    {"gib", decimal_number(format_ratio(r.bytes, kBytesPerGiB, 2))},
                    {"gb", decimal_number(format_ratio(r.bytes, kBytesPerGB, 2))},
                    {"bytes_all_devices", r.bytes_all_devices}});
  }
  return {{"count", s.seqs}, {"rows", rows}};
}

Json budget_json(const Budget& budget) {
  if (budget.direct) return {{"direct", true}, {"kv_budget_bytes", budget.kv_budget_bytes}};
  return {{"direct", false},
          {"device", budget.device},
          {"device_total_bytes", budget.device_total_bytes},
          {"device_total_source", budget.device_total_source},
          {"gpu_memory_utilization", decimal_number(format_ppb(budget.gpu_memory_utilization_ppb))},
          {"usable_bytes", budget.usable_bytes},
          {"parameter_count", budget.parameter_count},
          {"parameter_source", budget.parameter_source},
          {"weight_bits", budget.weight_bits},
          {"weight_bits_source", budget.weight_bits_source},
          {"weights_bytes", budget.weights_bytes},
          {"devices", budget.devices},
          {"weights_bytes_per_device", budget.weights_bytes_per_device},
          {"reserve_bytes", budget.reserve_bytes},
          {"kv_budget_bytes", budget.kv_budget_bytes}};
}

Json paged_json(const SizeSheet& s) {
  const PagedPool& p = s.stage_pools[s.binding_stage].pool;
  Json conc = Json::array();
  for (const Concurrency& c : s.concurrency) {
    conc.push_back({{"tokens", c.tokens},
                    {"stage", c.stage},
                    {"num_blocks", c.num_blocks},
                    {"blocks_per_request", c.blocks_per_request},
                    {"max_concurrency", decimal_number(format_ratio(c.num_blocks, c.blocks_per_request, 2))}});
    if (!s.sequences.empty()) {
      // --seqs B at this T: B x blocks per request must fit the pool.
      conc.back()["seqs"] = s.seqs;
      conc.back()["seqs_fit"] = seqs_fit(s, c);
      conc.back()["max_seqs"] = c.blocks_per_request > 0 ? c.num_blocks / c.blocks_per_request : 0;
    }
  }
  return {{"block_tokens", s.paging.block_tokens},
          {"max_num_batched_tokens", s.paging.max_num_batched_tokens},
          {"page_bytes", p.page_bytes},
          {"group_size", p.group_size},
          {"cache_groups", p.cache_groups},
          {"padding_layers", p.padding_layers},
          {"block_bytes", p.block_bytes},
          {"num_blocks", p.num_blocks},
          {"kv_cache_tokens", p.kv_cache_tokens},
          {"uniform_page", p.uniform_page},
          {"concurrency", conc}};
}

Json startup_json(const StartupMemory& m) {
  Json stages = Json::array();
  for (const StartupStage& st : m.stages) {
    Json groups = Json::array();
    for (const WeightGroup& g : st.weights.groups) {
      groups.push_back({{"name", g.name}, {"parameters", g.parameters}, {"bytes", g.bytes}, {"rule", g.rule}});
    }
    Json terms = Json::array();
    for (const StartupTerm& t : st.terms) {
      terms.push_back({{"name", t.name}, {"bytes", t.bytes}, {"rule", t.rule}, {"source", t.source}});
    }
    stages.push_back({{"stage", st.stage},
                      {"weights_bytes", st.weights.bytes},
                      {"weights", groups},
                      {"forward_peak_bytes", st.forward_peak_bytes},
                      {"sampler_peak_bytes", st.sampler_peak_bytes},
                      {"activation_peak_bytes", st.activation_peak_bytes},
                      {"non_torch_bytes", st.non_torch_bytes},
                      {"kv_budget_bytes", st.kv_budget_bytes},
                      {"terms", terms}});
  }
  return {{"engine", std::string(serving_engine_name(m.engine))},
          {"device_total_bytes", m.device_total_bytes},
          {"device_total_source", m.device_total_source},
          {"memory_fraction", decimal_number(format_ppb(m.memory_fraction_ppb))},
          {"max_num_batched_tokens", m.settings.max_num_batched_tokens},
          {"max_num_seqs", m.settings.max_num_seqs},
          {"max_model_len", m.max_model_len},
          {"enforce_eager", m.settings.enforce_eager},
          {"cuda_graphs", m.cuda_graphs},
          {"binding_stage", m.binding_stage},
          {"kv_budget_bytes", m.kv_budget_bytes},
          {"stages", stages}};
}

}  // namespace

std::string size_table(const SizeSheet& sheet, const std::string& dtype_reason) {
  std::string text = model_lines(sheet, dtype_reason);
  text += stages_table(sheet);
  text += layer_groups_table(sheet);
  text += sequences_table(sheet);
  if (sheet.budget) {
    text += sheet.startup ? startup_table(*sheet.startup) : budget_table(*sheet.budget);
    text += paged_lines(sheet);
  }
  return text;
}

std::string size_json(const SizeSheet& sheet, const std::string& dtype_reason) {
  Json out;
  out["model"] = model_json(sheet.model);
  out["kv_dtype"] = kv_dtype_json(sheet.kv, dtype_reason);
  if (sheet.model.mla) out["mla_form"] = sheet.kv.mla_form == MlaForm::latent ? "latent" : "decompressed";
  out["placement"] = {{"tensor_parallel", sheet.kv.tensor_parallel},
                      {"pipeline_parallel", sheet.kv.pipeline_parallel},
                      {"devices", sheet.devices}};
  out["stages"] = stages_json(sheet);
  out["layer_groups"] = layer_groups_json(sheet.layout());
  out["bytes_per_token"] = sheet.layout().bytes_per_token();
  if (!sheet.sequences.empty()) out["sequences"] = sequences_json(sheet);
  if (sheet.budget) {
    out["budget"] = budget_json(*sheet.budget);
    out["paged"] = paged_json(sheet);
    if (sheet.startup) out["startup"] = startup_json(*sheet.startup);
    // vLLM's two start-up figures, as numbers: "GPU KV cache size: N tokens" and "Maximum
    // concurrency for T tokens per request" at the first T.
    out["kv_cache_tokens"] = sheet.stage_pools[sheet.binding_stage].pool.kv_cache_tokens;
    if (!sheet.concurrency.empty()) {
      const Concurrency& c = sheet.concurrency.front();
      out["max_concurrency"] = decimal_number(format_ratio(c.num_blocks, c.blocks_per_request, 2));
    }
  }
  return out.dump(2) + "\n";
}

}  // namespace kvsim::cli
