// kvsim size: the KV-cache capacity sheet the seed guide asks for. It parses options, asks the
// library for the layout, the budget and the paged pool, and prints them; it computes nothing
// a user compares beyond formatting.
#include <fmt/core.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "layout_json.h"
#include "model_options.h"
#include "decimal.h"
#include "kvsim/budget.h"
#include "kvsim/error.h"
#include "kvsim/model.h"
#include "kvsim/units.h"
#include "sheet_table.h"

namespace kvsim::cli {
namespace {

__extension__ typedef __int128 Wide;

using json = nlohmann::ordered_json;
using A = SheetTable::Align;

const CommandSpec kSpec{
    "kvsim size (--model NAME | --config FILE) [options]",
    "Prints the KV-cache capacity sheet of a model: its layer groups and the bytes one token\n"
    "position costs in each (per device, after tensor- and pipeline-parallel placement); for\n"
    "--seqs B --tokens T the bytes per sequence and for B sequences (sliding-window groups keep\n"
    "at most W positions); for a budget (--device, or --kv-budget) each term of the subtraction\n"
    "device total x utilisation - weights - reserve, how many blocks and tokens fit, and vLLM's\n"
    "\"Maximum concurrency for T tokens per request\". Bytes are exact integers; GiB is 2^30\n"
    "bytes, GB 10^9. The rules and their sources are in docs/size.md.",
    "  kvsim size --model seed-example --dtype fp16 --seqs 6 --tokens 4096\n"
    "  kvsim size --model llama-3.1-8b --tokens 8192,32768 --device H100-80GB\n"
    "  kvsim size --model gemma-3-27b --tokens 32768 --device H100-80GB --json\n"
    "  kvsim size --model deepseek-v3 --mla-form decompressed --tokens 4096\n"
    "  kvsim size --config config.json --dtype fp8 --tp 8 --device H200-141GB"};


std::vector<std::int64_t> token_list(const std::string& text) {
  std::vector<std::int64_t> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    out.push_back(positive_integer(text.substr(start, comma - start), "--tokens"));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

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

std::string dims(std::int64_t d) { return d == 0 ? "-" : std::to_string(d); }


// One stage's vLLM pool and its concurrency at each token count.
struct StagePaging {
  PagedPool pool;
  std::vector<std::int64_t> request_blocks;  // per token count
};


}  // namespace

int run_size(const Invocation& inv) {
  po::options_description workload_opts("Workload and paging");
  workload_opts.add_options()
      ("seqs", po::value<std::string>(), "sequences held at once (default 1)")
      ("tokens", po::value<std::string>(), "positions per sequence, T or T1,T2,...")
      ("block-size", po::value<std::string>(), "tokens per paged block (default 16, as vLLM)")
      ("max-num-batched-tokens", po::value<std::string>(),
       "vLLM's scheduler chunk, which caps a sliding window's blocks (default 8192)");
  po::options_description output_opts("Output");
  output_opts.add_options()("json", "print the sheet as JSON (integers as JSON integers)");
  po::options_description options;
  options.add(model_options("a built-in preset (see 'kvsim models')"))
      .add(placement_options())
      .add(workload_opts)
      .add(budget_options())
      .add(output_opts);
  po::variables_map vm;
  if (!parse_options(inv, kSpec, options, {}, vm)) return kExitOk;
  const bool as_json = vm.count("json") != 0;

  // ---- model and KV options ------------------------------------------------------------
  const ModelChoice choice = resolve_model(vm, kSpec.synopsis, "");
  const ModelSpec& model = choice.model;
  const KvOptions& kv = choice.kv;
  const std::string& dtype_reason = choice.dtype_reason;
  const auto seqs_text = option_text(vm, "seqs");
  const auto tokens_text = option_text(vm, "tokens");
  const std::int64_t seqs = seqs_text ? positive_integer(*seqs_text, "--seqs") : 1;
  if (seqs_text && !tokens_text) throw InputError(Location{"", 0, "--seqs"}, "needs --tokens T (positions per sequence)");
  const std::vector<std::int64_t> tokens = tokens_text ? token_list(*tokens_text) : std::vector<std::int64_t>{};
  PagedOptions paging;
  if (const auto b = option_text(vm, "block-size")) paging.block_tokens = positive_integer(*b, "--block-size");
  if (const auto m = option_text(vm, "max-num-batched-tokens")) {
    paging.max_num_batched_tokens = positive_integer(*m, "--max-num-batched-tokens");
  }

  const std::vector<KvLayout>& stages = choice.stages;
  const std::size_t binding = choice.binding_stage;
  const KvLayout& layout = choice.layout();
  const std::int64_t devices = checked_mul(kv.tensor_parallel, kv.pipeline_parallel, "device count");

  // ---- budget ----------------------------------------------------------------------------
  std::optional<Budget> budget;
  // Here nothing else uses the device or the weights (replay's cost model does).
  reject_beside_kv_budget(vm, {"device", "params", "weight-dtype", "weights-bytes"});
  if (const auto bo = resolve_budget(vm)) budget = derive_budget(model, kv, *bo);

  // Concurrency is asked at each --tokens, or at the model's maximum as vLLM logs it.
  std::vector<std::int64_t> concurrency_tokens = tokens;
  if (concurrency_tokens.empty() && model.max_position_embeddings > 0) {
    concurrency_tokens.push_back(model.max_position_embeddings);
  }
  std::vector<StagePaging> paging_per_stage;
  std::vector<std::size_t> binding_for_tokens;  // the stage with the lowest concurrency per T
  if (budget) {
    for (const auto& s : stages) {
      StagePaging sp{paged_pool(s, budget->kv_budget_bytes, paging), {}};
      for (std::int64_t t : concurrency_tokens) sp.request_blocks.push_back(request_blocks(s, sp.pool, t, paging));
      paging_per_stage.push_back(std::move(sp));
    }
    for (std::size_t k = 0; k < concurrency_tokens.size(); ++k) {
      std::size_t worst = 0;
      for (std::size_t i = 1; i < paging_per_stage.size(); ++i) {
        // a/b < c/d  <=>  a*d < c*b, exactly.
        const auto& w = paging_per_stage[worst];
        const auto& c = paging_per_stage[i];
        if (Wide{c.pool.num_blocks} * w.request_blocks[k] < Wide{w.pool.num_blocks} * c.request_blocks[k]) worst = i;
      }
      binding_for_tokens.push_back(worst);
    }
  }

  // Sequence rows: per device on the binding stage, and over all devices.
  struct SeqRow {
    std::int64_t tokens;
    std::int64_t per_sequence;
    std::int64_t all_sequences;
    std::int64_t all_devices;
  };
  std::vector<SeqRow> seq_rows;
  for (std::int64_t t : tokens) {
    SeqRow r{t, kv_bytes_for_tokens(layout, t), 0, 0};
    r.all_sequences = checked_mul(r.per_sequence, seqs, "bytes for all sequences");
    std::int64_t every = 0;
    for (const auto& s : stages) every = checked_add(every, kv_bytes_for_tokens(s, t), "bytes on all devices");
    r.all_devices = checked_mul(checked_mul(every, kv.tensor_parallel, "bytes on all devices"), seqs,
                                "bytes on all devices");
    seq_rows.push_back(r);
  }

  const KvDtypeInfo& dtype = kv_dtype_info(kv.dtype);
  const bool mla = model.mla.has_value();

  // ---- JSON ------------------------------------------------------------------------------
  if (as_json) {
    json out;
    json m = {{"name", model.name},
              {"source", model.source},
              {"num_hidden_layers", model.num_hidden_layers},
              {"num_attention_heads", model.num_attention_heads},
              {"num_key_value_heads", model.num_key_value_heads},
              {"head_dim", model.head_dim},
              {"max_position_embeddings", model.max_position_embeddings},
              {"torch_dtype", model.weight_dtype}};
    if (mla) {
      m["mla"] = {{"kv_lora_rank", model.mla->kv_lora_rank},
                  {"qk_rope_head_dim", model.mla->qk_rope_head_dim},
                  {"qk_nope_head_dim", model.mla->qk_nope_head_dim},
                  {"v_head_dim", model.mla->v_head_dim}};
    }
    out["model"] = m;
    json d = {{"name", std::string(dtype.name)}, {"bits", dtype.bits}, {"chosen_by", dtype_reason}};
    if (dtype.group_scales) {
      d["quant_group_values"] = kv.quant_group_values;
      d["scale_bytes"] = kv.scale_bytes;
    }
    out["kv_dtype"] = d;
    if (mla) out["mla_form"] = kv.mla_form == MlaForm::latent ? "latent" : "decompressed";
    out["placement"] = {{"tensor_parallel", kv.tensor_parallel},
                        {"pipeline_parallel", kv.pipeline_parallel},
                        {"devices", devices}};
    json st = json::array();
    for (std::size_t i = 0; i < stages.size(); ++i) {
      st.push_back({{"stage", i},
                    {"first_layer", stages[i].first_layer},
                    {"end_layer", stages[i].end_layer},
                    {"bytes_per_token", stages[i].bytes_per_token()},
                    {"binding", i == binding},
                    {"groups", layer_groups_json(stages[i])}});
    }
    out["stages"] = st;
    out["layer_groups"] = layer_groups_json(layout);
    out["bytes_per_token"] = layout.bytes_per_token();
    if (!tokens.empty()) {
      json rows = json::array();
      for (const auto& r : seq_rows) {
        rows.push_back({{"tokens", r.tokens},
                        {"bytes_per_sequence", r.per_sequence},
                        {"bytes", r.all_sequences},
                        {"gib", format_ratio(r.all_sequences, kBytesPerGiB, 2)},
                        {"gb", format_ratio(r.all_sequences, kBytesPerGB, 2)},
                        {"bytes_all_devices", r.all_devices}});
      }
      out["sequences"] = {{"count", seqs}, {"rows", rows}};
    }
    if (budget) {
      json b;
      if (budget->direct) {
        b = {{"direct", true}, {"kv_budget_bytes", budget->kv_budget_bytes}};
      } else {
        b = {{"direct", false},
             {"device", budget->device},
             {"device_total_bytes", budget->device_total_bytes},
             {"device_total_source", budget->device_total_source},
             {"gpu_memory_utilization", format_ppb(budget->gpu_memory_utilization_ppb)},
             {"usable_bytes", budget->usable_bytes},
             {"parameter_count", budget->parameter_count},
             {"parameter_source", budget->parameter_source},
             {"weight_bits", budget->weight_bits},
             {"weight_bits_source", budget->weight_bits_source},
             {"weights_bytes", budget->weights_bytes},
             {"devices", budget->devices},
             {"weights_bytes_per_device", budget->weights_bytes_per_device},
             {"reserve_bytes", budget->reserve_bytes},
             {"kv_budget_bytes", budget->kv_budget_bytes}};
      }
      out["budget"] = b;
      const StagePaging& sp = paging_per_stage[binding];
      json conc = json::array();
      for (std::size_t k = 0; k < concurrency_tokens.size(); ++k) {
        const StagePaging& w = paging_per_stage[binding_for_tokens[k]];
        conc.push_back({{"tokens", concurrency_tokens[k]},
                        {"stage", binding_for_tokens[k]},
                        {"num_blocks", w.pool.num_blocks},
                        {"blocks_per_request", w.request_blocks[k]},
                        {"max_concurrency", format_ratio(w.pool.num_blocks, w.request_blocks[k], 2)}});
      }
      out["paged"] = {{"block_tokens", paging.block_tokens},
                      {"max_num_batched_tokens", paging.max_num_batched_tokens},
                      {"page_bytes", sp.pool.page_bytes},
                      {"group_size", sp.pool.group_size},
                      {"cache_groups", sp.pool.cache_groups},
                      {"padding_layers", sp.pool.padding_layers},
                      {"block_bytes", sp.pool.block_bytes},
                      {"num_blocks", sp.pool.num_blocks},
                      {"kv_cache_tokens", sp.pool.kv_cache_tokens},
                      {"uniform_page", sp.pool.uniform_page},
                      {"concurrency", conc}};
    }
    fmt::print("{}\n", out.dump(2));
    return kExitOk;
  }

  // ---- text sheet ------------------------------------------------------------------------
  std::string text;
  text += fmt::format("Model      {}\n", model.name);
  text += fmt::format("Source     {}\n", model.source);
  text += fmt::format("KV dtype   {} ({} bits per value; {})", dtype.name, dtype.bits, dtype_reason);
  if (dtype.group_scales) {
    text += fmt::format("; a {}-byte scale and zero-point per {} values", kv.scale_bytes, kv.quant_group_values);
  }
  text += "\n";
  if (mla) {
    text += fmt::format("MLA form   {}\n", kv.mla_form == MlaForm::latent
                                               ? "latent: one kv_lora_rank + qk_rope_head_dim vector per layer, "
                                                 "no V, on every device (vLLM, SGLang, llama.cpp)"
                                               : "decompressed: per-head K (nope + rope) and V (Hugging Face "
                                                 "transformers)");
  }
  text += fmt::format("Placement  {} device{}: tensor parallel {} x pipeline parallel {}{}\n", devices,
                      devices == 1 ? "" : "s", kv.tensor_parallel, kv.pipeline_parallel,
                      devices > 1 ? "; figures are per device" : "");

  if (stages.size() > 1) {
    text += "\nPipeline stages (vLLM's get_pp_indices split)\n";
    SheetTable t({"stage", "layers", "groups", "bytes/position", ""}, {A::right, A::left, A::left, A::right, A::left});
    for (std::size_t i = 0; i < stages.size(); ++i) {
      std::string groups;
      for (const auto& g : stages[i].groups) groups += (groups.empty() ? "" : " + ") + std::to_string(g.layers) + " " + g.name;
      t.add({std::to_string(i), fmt::format("{}-{}", stages[i].first_layer, stages[i].end_layer - 1), groups,
             with_commas(stages[i].bytes_per_token()), i == binding ? "binds" : ""});
    }
    text += t.render();
  }

  text += fmt::format("\nLayer groups{}\n", stages.size() > 1 ? fmt::format(" (stage {})", binding) : "");
  {
    SheetTable t({"group", "kind", "layers", "KV heads", "K dim", "V dim", "bytes/position/layer", "bytes/position"},
                 {A::left, A::left, A::right, A::right, A::right, A::right, A::right, A::right});
    std::int64_t layers = 0;
    for (const auto& g : layout.groups) {
      layers += g.layers;
      t.add({g.name, layer_group_kind(g), std::to_string(g.layers), std::to_string(g.kv_heads), dims(g.k_head_dim),
             dims(g.v_head_dim), with_commas(g.bytes_per_layer_position), with_commas(g.bytes_per_position)});
    }
    t.add({"total", "", std::to_string(layers), "", "", "", "", with_commas(layout.bytes_per_token())});
    text += t.render();
  }

  if (!tokens.empty()) {
    const bool sliding = std::any_of(layout.groups.begin(), layout.groups.end(),
                                     [](const LayerGroup& g) { return g.window_tokens > 0; });
    text += fmt::format("\nSequences: {} x T tokens{}{}\n", with_commas(seqs),
                        sliding ? "; sliding-window groups keep at most W positions" : "",
                        devices > 1 ? "; per device" : "");
    const std::string n = seqs == 1 ? "1 seq" : fmt::format("{} seqs", seqs);
    std::vector<std::string> headers = {"tokens",
                                        "bytes/sequence",
                                        "GiB/sequence",
                                        fmt::format("bytes ({})", n),
                                        fmt::format("GiB ({})", n),
                                        fmt::format("GB ({})", n)};
    std::vector<A> align(6, A::right);
    if (devices > 1) {
      headers.push_back("bytes, all devices");
      align.push_back(A::right);
    }
    SheetTable t(headers, align);
    for (const auto& r : seq_rows) {
      std::vector<std::string> row = {with_commas(r.tokens),        with_commas(r.per_sequence), gib(r.per_sequence),
                                      with_commas(r.all_sequences), gib(r.all_sequences),        gb(r.all_sequences)};
      if (devices > 1) row.push_back(with_commas(r.all_devices));
      t.add(row);
    }
    text += t.render();
    for (std::int64_t t_tokens : tokens) {
      if (model.max_position_embeddings > 0 && t_tokens > model.max_position_embeddings) {
        text += fmt::format("  note: {} tokens exceed the model's max_position_embeddings ({})\n",
                            with_commas(t_tokens), with_commas(model.max_position_embeddings));
      }
    }
  }

  if (budget) {
    text += "\nKV budget per device\n";
    SheetTable t({"term", "bytes", "GiB", "GB"}, {A::left, A::right, A::right, A::right});
    auto row = [&](const std::string& term, std::int64_t bytes) {
      t.add({term, with_commas(bytes), gib(bytes), gb(bytes)});
    };
    if (budget->direct) {
      row("KV budget (--kv-budget)", budget->kv_budget_bytes);
    } else {
      row("device total: " + budget->device_total_source, budget->device_total_bytes);
      row("x gpu-memory-utilization " + format_ppb(budget->gpu_memory_utilization_ppb), budget->usable_bytes);
      std::string weights;
      if (budget->parameter_source == "--weights-bytes") {
        weights = "- weights (--weights-bytes)";
      } else {
        weights = fmt::format("- weights: {} params ({}) x {} bits ({})", with_commas(budget->parameter_count),
                              budget->parameter_source, budget->weight_bits, budget->weight_bits_source);
      }
      if (budget->devices > 1) {
        weights += fmt::format(" = {} / {} devices", with_commas(budget->weights_bytes), budget->devices);
      }
      row(weights, budget->weights_bytes_per_device);
      row("- reserve: activations, CUDA graphs, runtime", budget->reserve_bytes);
      row("= KV budget", budget->kv_budget_bytes);
    }
    text += t.render();

    const StagePaging& sp = paging_per_stage[binding];
    const PagedPool& p = sp.pool;
    text += fmt::format("\nPaged cache (vLLM's layout, block size {} tokens)\n", p.block_tokens);
    if (p.uniform_page) {
      text += fmt::format("  {} KV-cache group{} of {} layers{}; a block is {} layers x {} tokens x {} bytes = {} bytes\n",
                          p.cache_groups, p.cache_groups == 1 ? "" : "s", p.group_size,
                          p.padding_layers > 0 ? fmt::format(" ({} padding layer slots)", p.padding_layers) : "",
                          p.group_size, p.block_tokens, with_commas(layout.groups.front().bytes_per_layer_position),
                          with_commas(p.block_bytes));
    } else {
      text += fmt::format("  layer groups differ in bytes per position; approximated as one group, a block of {} bytes\n",
                          with_commas(p.block_bytes));
    }
    text += fmt::format("  {} blocks; GPU KV cache size: {} tokens\n", with_commas(p.num_blocks),
                        with_commas(p.kv_cache_tokens));
    for (std::size_t k = 0; k < concurrency_tokens.size(); ++k) {
      const StagePaging& w = paging_per_stage[binding_for_tokens[k]];
      const std::int64_t blocks = w.request_blocks[k];
      text += fmt::format("  Maximum concurrency for {} tokens per request: {}x ({} / {} blocks{}{})\n",
                          with_commas(concurrency_tokens[k]), format_ratio(w.pool.num_blocks, blocks, 2),
                          with_commas(w.pool.num_blocks), with_commas(blocks),
                          tokens.empty() ? "; T = max_position_embeddings" : "",
                          stages.size() > 1 ? fmt::format("; stage {}", binding_for_tokens[k]) : "");
      if (w.pool.num_blocks < blocks) {
        text += fmt::format("  note: less than one request of {} tokens fits; vLLM refuses to start with "
                            "max_model_len {} on this budget\n",
                            with_commas(concurrency_tokens[k]), with_commas(concurrency_tokens[k]));
      }
    }
  }
  fmt::print("{}", text);
  return kExitOk;
}

}  // namespace kvsim::cli
