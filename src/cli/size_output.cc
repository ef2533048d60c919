#include "json_text.h"
#include "size_output.h"

#include <fmt/core.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "kvsim/option_names.h"
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

// What a fit verdict counts and against what: the paged pool's blocks, or (a static cache)
// bytes of the KV budget.
struct VerdictTerms {
  std::string need;    // what they need, spelled as the sheet computes it: "112 x 256 blocks"
  const char* unit;    // "blocks" or "bytes"
  const char* room;    // "the pool has" or "the KV budget is"
  const char* many;    // what "at most N such ..." counts: "sequences", "sets of requests"
};

// A verdict in the paged pool's blocks ("many": what "at most N such ..." counts), or in bytes
// of the KV budget (a static cache).
VerdictTerms pool_terms(const FitVerdict& v, const char* many) {
  return {with_commas(v.needed) + " blocks", "blocks", "the pool has", many};
}
VerdictTerms budget_terms(const FitVerdict& v) {
  return {with_commas(v.needed) + " bytes", "bytes", "the KV budget is", "sequences"};
}

// Why a verdict is NO (empty when it fits): a request past the context limit, or not enough
// room for what stays on the device.
std::string why_not(const SizeSheet& s, const FitVerdict& v, const VerdictTerms& t) {
  if (v.fits) return "";
  if (v.over_context) {
    return fmt::format("{} tokens exceed the context limit ({} {}): the engine refuses such a request",
                       with_commas(v.longest_tokens), s.context_limit_source, with_commas(v.context_limit));
  }
  const std::string held =
      s.offload_ppb == 0 ? fmt::format("they need {}", t.need)
                         : fmt::format("of the {} they need, {} stay on the device (the host holds {})", t.need,
                                       with_commas(v.on_device), format_ppb(s.offload_ppb));
  return fmt::format("{} and {} {}; at most {} such {} fit", held, t.room, with_commas(v.available),
                     with_commas(v.most), t.many);
}

// "fits (384 of 819 blocks)" or "does NOT fit: <why_not>", and the stage that binds under
// pipeline parallelism.
std::string verdict_words(const SizeSheet& s, const FitVerdict& v, const VerdictTerms& t) {
  const std::string stage = s.stages.size() > 1 ? fmt::format(" (stage {})", v.stage) : "";
  if (!v.fits) return "does NOT fit" + stage + ": " + why_not(s, v, t);
  if (s.offload_ppb == 0) return fmt::format("fits ({} of {} {}){}", with_commas(v.on_device), with_commas(v.available), t.unit, stage);
  return fmt::format("fits ({} of {} {}: what stays on the device of {}, the host holding {}){}", with_commas(v.on_device),
                     with_commas(v.available), t.unit, t.need, format_ppb(s.offload_ppb), stage);
}

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
  if (s.draft_layers > 0) {
    // Where its weights are: only a budget that subtracts weights has to say.
    std::string weights;
    if (s.budget && !s.budget->direct) {
      weights = s.budget->parameter_count == 0
                    ? "; the budget's weights are --weights-bytes as given, the draft's included only if they are in it"
                    : "; the draft's weights are not in the budget's weights term (give --weights-bytes to include them)";
    }
    const std::string lookahead =
        s.lookahead_slots > 0
            ? fmt::format("; a decoding sequence holds {} slots past its tokens ({} drafts to verify, {} lookahead), "
                          "within the context limit",
                          with_commas(s.lookahead_slots), with_commas(s.lookahead_slots / 2),
                          with_commas(s.lookahead_slots / 2))
            : s.budget ? std::string("; no lookahead slots counted (give --num-speculative-tokens)") : std::string();
    text += fmt::format("Draft      {}: {} layer{} of KV, {} bytes per token, in the same pool{}{}\n", s.draft,
                        s.draft_layers, s.draft_layers == 1 ? "" : "s", with_commas(s.draft_bytes_per_token), lookahead,
                        weights);
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

// Layers of the binding stage that hold no KV: state-space layers (their constant state per
// sequence), layers that reuse another layer's KV, and layers that hold nothing.
std::string layer_kind_lines(const SizeSheet& s) {
  const KvLayout& layout = s.layout();
  std::int64_t kv_layers = 0;
  for (const auto& g : layout.groups) kv_layers += g.layers;
  if (s.binding_stage + 1 == s.stages.size()) kv_layers -= s.draft_layers;  // the draft is on the last stage
  const std::int64_t stage_layers = layout.end_layer - layout.first_layer;
  if (kv_layers == stage_layers) return "";
  std::string text = fmt::format("  {} of {} layers hold KV", kv_layers, stage_layers);
  if (layout.state_layers > 0) {
    const std::int64_t per_layer = layout.conv_state_bytes_per_layer + layout.temporal_state_bytes_per_layer;
    text += fmt::format("; {} {} layers hold a constant state per sequence: conv {} + temporal {} = {} bytes "
                        "each ({}, vLLM's mamba_cache_dtype auto), {} bytes per sequence whatever its length",
                        layout.state_layers, s.model.state->kind, with_commas(layout.conv_state_bytes_per_layer),
                        with_commas(layout.temporal_state_bytes_per_layer), with_commas(per_layer),
                        kv_dtype_info(s.kv.state_dtype).name, with_commas(layout.state_bytes_per_sequence()));
  }
  if (layout.kv_reused_layers > 0) {
    text += fmt::format("; {} layers reuse an earlier layer's KV and hold none", layout.kv_reused_layers);
  }
  std::int64_t none = 0;
  for (std::int64_t i = layout.first_layer; i < layout.end_layer && !s.model.layer_kinds.empty(); ++i) {
    none += s.model.layer_kinds[static_cast<std::size_t>(i)] == LayerKind::none ? 1 : 0;
  }
  if (none > 0) text += fmt::format("; {} MLP/MoE-only layers hold nothing", none);
  return text + "\n";
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
  return text + t.render() + layer_kind_lines(s);
}

// B sequences at each T, with a note for each T past the model's maximum.
std::string sequences_table(const SizeSheet& s) {
  if (s.sequences.empty()) return "";
  const KvLayout& layout = s.layout();
  const bool sliding = layout.any_window();
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
  // Which stage's device holds the most at T (pipeline stages whose sliding windows differ
  // may change places as T grows).
  const bool stages = s.stages.size() > 1;
  if (stages) {
    headers.push_back("stage");
    align.push_back(A::right);
  }
  const bool state = layout.state_layers > 0;
  if (state) {
    headers.push_back(fmt::format("state bytes ({})", n));
    headers.push_back(fmt::format("KV + state bytes ({})", n));
    align.insert(align.end(), 2, A::right);
  }
  SheetTable t(headers, align);
  auto add = [&](const SequenceBytes& r, const std::string& label) {
    std::vector<std::string> row = {label, with_commas(r.bytes_per_sequence), gib(r.bytes_per_sequence),
                                    with_commas(r.bytes), gib(r.bytes), gb(r.bytes)};
    if (s.devices > 1) row.push_back(with_commas(r.bytes_all_devices));
    if (stages) row.push_back(std::to_string(r.stage));
    if (state) {
      row.push_back(with_commas(r.state_bytes));
      row.push_back(with_commas(checked_add(r.bytes, r.state_bytes, "KV + state bytes")));
    }
    t.add(row);
  };
  for (const auto& r : s.sequences) add(r, with_commas(r.tokens));
  // Requests of different lengths held at once: the positions actually kept, summed.
  if (s.total) add(*s.total, "total " + with_commas(s.total->tokens));
  text += t.render();
  for (const auto& r : s.sequences) {
    if (context_length(s.model) > 0 && r.tokens > context_length(s.model)) {
      text += fmt::format("  note: {} tokens exceed the model's {} ({})\n", with_commas(r.tokens),
                          context_length_source(s.model), with_commas(context_length(s.model)));
    }
  }
  return text;
}

// One request with its prompt and generation apart, and the sequences generation creates.
std::string request_lines(const SizeSheet& s) {
  if (!s.request) return "";
  const RequestBytes& r = *s.request;
  const RequestShape& q = r.shape;
  std::string text = fmt::format("\nOne request: prompt {} + max tokens {} = {} positions per sequence{}\n",
                                 with_commas(q.prompt_tokens), with_commas(q.max_tokens),
                                 with_commas(q.prompt_tokens + q.max_tokens), s.devices > 1 ? "; per device" : "");
  text += fmt::format("  one sequence: {} bytes ({})\n", with_commas(r.single_kv_bytes), gib(r.single_kv_bytes));
  if (q.sequences > 1) {
    text += fmt::format("  {} sequences, prompt {}: {} bytes ({}), {} one sequence's\n", q.sequences,
                        q.prompt_shared ? "shared (counted once, as effective tokens count it; vLLM's prefix caching shares its full blocks)"
                                        : "copied into each (Hugging Face generate)",
                        with_commas(r.kv_bytes), gib(r.kv_bytes),
                        format_ratio(r.kv_bytes, r.single_kv_bytes, 2) + "x");
  }
  if (r.state_bytes > 0) {
    text += fmt::format("  state: {} sequence{} x {} = {} bytes; KV + state {} bytes\n", q.sequences,
                        q.sequences == 1 ? "" : "s", with_commas(s.layout().state_bytes_per_sequence()),
                        with_commas(r.state_bytes), with_commas(r.total_bytes()));
  }
  return text;
}

// Hugging Face StaticCache's reservation beside what the sequences hold.
std::string static_cache_lines(const SizeSheet& s) {
  if (s.static_cache_tokens == 0) return "";
  std::string text = fmt::format("\nStatic cache (Hugging Face StaticCache, max_cache_len {}): {} x {} positions "
                                 "reserved up front on every layer{}\n",
                                 with_commas(s.static_cache_tokens), s.seqs, with_commas(s.static_cache_tokens),
                                 s.devices > 1 ? "; per device" : "");
  text += fmt::format("  reserved: {} bytes ({})\n", with_commas(s.static_reserved_bytes), gib(s.static_reserved_bytes));
  for (const auto& r : s.sequences) {
    if (r.tokens > s.static_cache_tokens) {
      text += fmt::format("  note: {} tokens do not fit a static cache of {} positions\n", with_commas(r.tokens),
                          with_commas(s.static_cache_tokens));
    } else {
      text += fmt::format("  at {} tokens the sequences hold {} bytes: {} bytes reserved but empty ({} of the reservation)\n",
                          with_commas(r.tokens), with_commas(r.bytes), with_commas(s.static_reserved_bytes - r.bytes),
                          format_ratio(100 * (s.static_reserved_bytes - r.bytes), s.static_reserved_bytes, 1) + "%");
    }
  }
  if (s.static_fit) {
    // Against the KV budget below, in bytes: a static cache is allocated whole, not paged.
    const FitVerdict& v = *s.static_fit;
    text += fmt::format("  --seqs {} x {} positions reserved, against the KV budget: {}\n", with_commas(s.seqs),
                        with_commas(s.static_cache_tokens),
                        verdict_words(s, v, budget_terms(v)));
  }
  return text;
}

// transfer time in milliseconds with 3 decimals, from exact nanoseconds.
std::string ms(std::int64_t ns) { return format_ratio(ns, 1'000'000, 3) + " ms"; }

// What stays on the device, what moves to the host, and the transfer every decode step.
std::string offload_lines(const SizeSheet& s) {
  if (s.offload_ppb == 0) return "";
  std::string text = fmt::format("\nOffload: {} of the KV in host memory; link {} bytes/s ({}){}\n",
                                 format_ppb(s.offload_ppb), with_commas(s.link_bytes_per_second), s.link_source,
                                 s.devices > 1 ? "; per device" : "");
  text += "  every decode step moves the host share to the device and back (Hugging Face OffloadedCache's prefetch "
          "and evict), so a step waits at least host bytes / bandwidth\n";
  if (s.budget) {
    text += "  the fit verdicts count only what stays on the device: the blocks (or bytes) needed less the host share\n";
  }
  SheetTable t({"workload", "on device", "on host", "transfer per step"}, {A::left, A::right, A::right, A::right});
  const std::string n = s.seqs == 1 ? "1 seq" : fmt::format("{} seqs", s.seqs);
  for (std::size_t i = 0; i < s.offload_rows.size(); ++i) {
    const OffloadSplit& o = s.offload_rows[i];
    t.add({fmt::format("{} x {} tokens", n, with_commas(s.sequences[i].tokens)), with_commas(o.device_bytes),
           with_commas(o.host_bytes), ms(o.transfer_ns)});
  }
  if (s.offload_request) {
    const OffloadSplit& o = *s.offload_request;
    t.add({"one request", with_commas(o.device_bytes), with_commas(o.host_bytes), ms(o.transfer_ns)});
  }
  return text + t.render();
}

// The seed guide's three validation cases, and what the verdict rests on.
std::string check_lines(const SizeSheet& s) {
  if (s.checks.empty()) return "";
  std::string text = "\nValidation cases (the seed guide's three, against vLLM's paged pool on this budget)\n";
  const bool offload = s.offload_ppb > 0;
  std::vector<std::string> headers = {"case", "sequences", "tokens each", "KV bytes", "blocks needed"};
  if (offload) headers.push_back("on device");
  headers.insert(headers.end(), {"blocks in pool", "fits"});
  std::vector<A> align(headers.size(), A::right);
  align.front() = A::left;
  align.back() = A::left;
  SheetTable t(headers, align);
  for (const CheckResult& r : s.checks) {
    const FitVerdict& v = r.fit;
    std::vector<std::string> row = {r.c.name, with_commas(r.c.sequences), with_commas(r.c.tokens), with_commas(r.kv_bytes),
                                    with_commas(v.needed)};
    if (offload) row.push_back(with_commas(v.on_device));
    // A case past the context limit says why in the table itself; a lack of blocks shows in
    // the columns beside it.
    const std::string stage = s.stages.size() > 1 ? fmt::format(" (stage {})", v.stage) : "";
    const std::string fits =
        v.fits ? "yes" + stage
        : v.over_context ? fmt::format("NO: longer than {} {}", s.context_limit_source, with_commas(v.context_limit))
                         : "NO" + stage;
    row.insert(row.end(), {with_commas(v.available), fits});
    t.add(row);
  }
  text += t.render();
  if (offload) text += "  on device: the blocks needed less the host share; the verdict counts only those\n";
  const Budget& b = *s.budget;
  text += "  what this rests on:\n";
  text += "    computed exactly: KV bytes per token and blocks per request, from the model's config\n";
  if (b.direct) {
    text += "    given: the KV budget (--kv-budget)\n";
  } else {
    text += fmt::format("    device total: {}{}\n", b.device_total_source,
                        b.device_total_source.rfind("--device-memory", 0) == 0
                            ? " (as given)"
                            : " (a spec value: CUDA reports 0.5-2% less; pass what torch.cuda.mem_get_info() prints)");
    text += fmt::format("    weights: {} ({}), {} bits ({})\n", with_commas(b.weights_bytes_per_device), b.parameter_source,
                        b.weight_bits, b.weight_bits_source);
    text += fmt::format("    reserve: {} bytes (assumed, not measured: activations, CUDA graphs and the runtime)\n",
                        with_commas(b.reserve_bytes));
  }
  text += "    measured: nothing; run each case on the device with the model, tokenizer, template and generation "
          "limit fixed (a short input that passes does not validate the maximum concurrency)\n";
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

// Under pipeline parallelism: each stage's weights and KV budget, and its pool.
std::string stage_weights_lines(const SizeSheet& s) {
  // (The start-up model shows its own stages' weights.)
  if (s.kv.pipeline_parallel <= 1 || !s.budget || s.budget->direct || s.startup) return "";
  if (s.stage_weights.empty()) return fmt::format("  note: {}\n", s.stage_weights_note);
  std::string text = "\nWeights per pipeline stage (embeddings on the first, final norm and LM head on the last; "
                     "layers as get_pp_indices splits them, taken as equal in size)\n";
  SheetTable t({"stage", "layers", "holds", "parameters", "weights/device", "KV budget/device", "blocks"},
               {A::right, A::left, A::left, A::right, A::right, A::right, A::right});
  for (std::size_t i = 0; i < s.stage_weights.size(); ++i) {
    const StageWeights& w = s.stage_weights[i];
    std::string holds = w.embedding ? "embeddings" : "";
    if (w.lm_head) holds += std::string(holds.empty() ? "" : ", ") + "LM head" + (s.model.tie_word_embeddings ? " (tied: a copy)" : "");
    t.add({std::to_string(i), fmt::format("{}-{}", w.first_layer, w.end_layer - 1), holds, with_commas(w.parameters),
           with_commas(w.bytes_per_device), with_commas(w.kv_budget_bytes), with_commas(s.stage_pools[i].own_num_blocks)});
  }
  return text + t.render() +
         fmt::format("  each stage's pool uses its own KV budget (not the even split above); vLLM then shrinks every "
                     "stage to the smallest, {} blocks\n",
                     with_commas(s.stage_pools.front().pool.num_blocks));
}

// A start-up term's rule as the sheet prints it. Weights given with --weights-bytes are not
// counted tensor by tensor (startup_memory() spreads the given total evenly): say where they
// come from instead.
std::string term_rule(const StartupMemory& m, const StartupTerm& term) {
  if (term.name != "- weights" || !m.settings.weights_bytes) return term.rule;
  return fmt::format("from {} ({} bytes, spread evenly over the devices)", kOptWeightsBytes,
                     with_commas(*m.settings.weights_bytes));
}

// The engine's start-up terms on the binding stage, then its weights tensor group by group.
std::string startup_table(const StartupMemory& m) {
  const StartupStage& st = m.stages[m.binding_stage];
  std::string text = fmt::format("\nKV budget per device at {} start-up{}\n", serving_engine_name(m.engine),
                                 m.stages.size() > 1 ? fmt::format(" (stage {} binds)", st.stage) : "");
  SheetTable t({"term", "bytes", "GiB", "rule", "source"}, {A::left, A::right, A::right, A::left, A::left});
  for (const StartupTerm& term : st.terms) {
    const bool shown = term.bytes != 0 || term.name.rfind("= ", 0) == 0 || term.name.rfind("- ", 0) == 0;
    t.add({term.name, shown ? with_commas(term.bytes) : "", shown ? gib(term.bytes) : "", term_rule(m, term), term.source});
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

// The pool's heading. The blocks are always counted by vLLM's rules; for SGLang (pages of
// one token: max_total_num_tokens = KV budget // bytes per token) and TensorRT-LLM (blocks of
// tokens_per_block) those give the same count when one group holds every layer. Otherwise
// vLLM's hybrid groups are not how those engines pool, and the heading says so.
std::string pool_heading(const SizeSheet& s, const PagedPool& p) {
  const ServingEngine engine = s.startup ? s.startup->engine : ServingEngine::vllm;
  if (is_vllm(engine)) return fmt::format("Paged cache (vLLM's layout, block size {} tokens)", p.block_tokens);
  const bool one_group = (p.uniform_page && p.cache_groups == 1 && p.padding_layers == 0) || p.uniform_type;
  return fmt::format("Paged cache ({}, block size {} token{}; counted by vLLM's rules, {})", serving_engine_name(engine),
                     p.block_tokens, p.block_tokens == 1 ? "" : "s",
                     one_group ? "which give the same count for a model whose layers are all alike"
                               : "whose grouping of unlike layers this engine does not share: an approximation");
}

// The binding stage's paged pool and vLLM's concurrency line at each T.
std::string paged_lines(const SizeSheet& s) {
  const PagedPool& p = s.stage_pools[s.binding_stage].pool;
  std::string text = "\n" + pool_heading(s, p) + "\n";
  if (p.uniform_page) {
    text += fmt::format("  {} KV-cache group{} of {} layers{}; a block is {} layers x {} tokens x {} bytes = {} bytes\n",
                        p.cache_groups, p.cache_groups == 1 ? "" : "s", p.group_size,
                        p.padding_layers > 0 ? fmt::format(" ({} padding layer slots)", p.padding_layers) : "",
                        p.group_size, p.block_tokens, with_commas(s.layout().groups.front().bytes_per_layer_position),
                        with_commas(p.block_bytes));
  } else if (p.uniform_type) {
    text += fmt::format("  1 KV-cache group of {} layers of one attention type (vLLM's UniformTypeKVCacheSpecs); a block "
                        "holds a page of each: {} tokens x {} bytes per position = {} bytes\n",
                        p.group_size, p.block_tokens, with_commas(s.layout().bytes_per_token()), with_commas(p.block_bytes));
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
                        : s.startup && s.startup->settings.max_model_len > 0
                            ? std::string("; T = max_model_len")
                            : std::string("; T = ") + context_length_source(s.model),
                        s.stages.size() > 1 ? fmt::format("; stage {}", c.stage) : "");
    // One sequence has a verdict of its own under offloading (what stays may fit where the
    // whole would not) and past the context limit; otherwise the concurrency line says it.
    if (!s.sequences.empty() && (s.seqs > 1 || s.offload_ppb > 0 || c.seqs.over_context)) {
      const VerdictTerms terms{fmt::format("{} x {} blocks", with_commas(s.seqs), with_commas(c.seqs.needed / s.seqs)),
                               "blocks", "the pool has", "sequences"};
      text += fmt::format("  --seqs {} of {} tokens: {}\n", with_commas(s.seqs), with_commas(c.tokens),
                          verdict_words(s, c.seqs, terms));
    }
    if (c.num_blocks < c.blocks_per_request) {
      text += fmt::format("  note: less than one request of {} tokens fits; vLLM refuses to start with "
                          "max_model_len {} on this budget\n",
                          with_commas(c.tokens), with_commas(c.tokens));
    }
  }
  if (s.total_fit && s.total) {
    // The rows' requests held at once (the "total" row above), in blocks as vLLM allocates them.
    const FitVerdict& v = *s.total_fit;
    text += fmt::format("  all the lengths at once, --seqs {} of each (total {} tokens): {}\n", with_commas(s.seqs),
                        with_commas(s.total->tokens), verdict_words(s, v, pool_terms(v, "sets of requests")));
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

Json sequence_row_json(const SequenceBytes& r, bool state) {
  Json row = {{"tokens", r.tokens},
              {"bytes_per_sequence", r.bytes_per_sequence},
              {"bytes", r.bytes},
              {"gib", decimal_number(format_ratio(r.bytes, kBytesPerGiB, 2))},
              {"gb", decimal_number(format_ratio(r.bytes, kBytesPerGB, 2))},
              {"bytes_all_devices", r.bytes_all_devices},
              {"stage", r.stage}};
  if (state) row["state_bytes"] = r.state_bytes;
  return row;
}

Json sequences_json(const SizeSheet& s) {
  const bool state = s.layout().state_layers > 0;
  Json rows = Json::array();
  for (const auto& r : s.sequences) rows.push_back(sequence_row_json(r, state));
  Json out = {{"count", s.seqs}, {"rows", rows}};
  if (s.total) out["total"] = sequence_row_json(*s.total, state);
  return out;
}

// The layers of the binding stage that hold no KV (only when some do not).
Json layer_kinds_json(const SizeSheet& s) {
  const KvLayout& l = s.layout();
  Json out = {{"kv_reused_layers", l.kv_reused_layers}, {"state_layers", l.state_layers}};
  if (l.state_layers > 0) {
    out["state"] = {{"kind", s.model.state->kind},
                    {"dtype", std::string(kv_dtype_info(s.kv.state_dtype).name)},
                    {"conv_bytes_per_layer", l.conv_state_bytes_per_layer},
                    {"temporal_bytes_per_layer", l.temporal_state_bytes_per_layer},
                    {"bytes_per_sequence", l.state_bytes_per_sequence()}};
  }
  return out;
}

Json request_json(const RequestBytes& r) {
  return {{"prompt_tokens", r.shape.prompt_tokens},
          {"max_tokens", r.shape.max_tokens},
          {"sequences", r.shape.sequences},
          {"prompt_shared", r.shape.prompt_shared},
          {"single_sequence_kv_bytes", r.single_kv_bytes},
          {"kv_bytes", r.kv_bytes},
          {"state_bytes", r.state_bytes},
          {"bytes", r.total_bytes()}};
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

// A fit verdict's numbers, the same keys wherever one appears; `why` is empty when it fits.
Json verdict_json(const SizeSheet& s, const FitVerdict& v, const VerdictTerms& t) {
  return {{"fits", v.fits},
          {"why", why_not(s, v, t)},
          {"unit", t.unit},
          {"stage", v.stage},
          {"needed", v.needed},
          {"on_device", v.on_device},
          {"available", v.available},
          {"max_seqs", v.most},
          {"context_limit", v.context_limit},
          {"exceeds_context", v.over_context}};
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
      // --seqs B at this T: what stays on the device of B x blocks per request must fit the pool.
      conc.back()["seqs"] = s.seqs;
      conc.back()["seqs_fit"] = c.seqs.fits;
      conc.back()["max_seqs"] = c.seqs.most;
      conc.back()["seqs_verdict"] = verdict_json(s, c.seqs, pool_terms(c.seqs, "sequences"));
    }
  }
  Json total;
  if (s.total_fit && s.total) {
    total = verdict_json(s, *s.total_fit, pool_terms(*s.total_fit, "sets of requests"));
    total["tokens"] = s.total->tokens;
    total["seqs"] = s.seqs;
  }
  Json out = {{"block_tokens", s.paging.block_tokens},
          {"max_num_batched_tokens", s.paging.max_num_batched_tokens},
          {"page_bytes", p.page_bytes},
          {"group_size", p.group_size},
          {"cache_groups", p.cache_groups},
          {"padding_layers", p.padding_layers},
          {"block_bytes", p.block_bytes},
          {"num_blocks", p.num_blocks},
          {"kv_cache_tokens", p.kv_cache_tokens},
          {"uniform_page", p.uniform_page},
          {"uniform_type", p.uniform_type},
          {"context_limit", s.context_limit},
          {"context_limit_source", s.context_limit_source},
          {"concurrency", conc}};
  // The rows' requests all at once (several --tokens).
  if (!total.is_null()) out["total"] = total;
  return out;
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
      terms.push_back({{"name", t.name}, {"bytes", t.bytes}, {"rule", term_rule(m, t)}, {"source", t.source}});
    }
    stages.push_back({{"stage", st.stage},
                      {"weights_bytes", st.weights.bytes},
                      {"weights", groups},
                      {"forward_peak_bytes", st.forward_peak_bytes},
                      {"sampler_peak_bytes", st.sampler_peak_bytes},
                      {"activation_peak_bytes", st.activation_peak_bytes},
                      {"buffer_bytes", st.buffer_bytes},
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
  text += request_lines(sheet);
  text += static_cache_lines(sheet);
  if (sheet.budget) {
    text += sheet.startup ? startup_table(*sheet.startup) : budget_table(*sheet.budget);
    text += stage_weights_lines(sheet);
    text += paged_lines(sheet);
  }
  text += offload_lines(sheet);
  text += check_lines(sheet);
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
  const KvLayout& binding = sheet.layout();
  if (binding.state_layers > 0 || binding.kv_reused_layers > 0) out["layers_without_kv"] = layer_kinds_json(sheet);
  if (sheet.request) out["request"] = request_json(*sheet.request);
  if (sheet.offload_ppb > 0) {
    Json rows = Json::array();
    for (std::size_t i = 0; i < sheet.offload_rows.size(); ++i) {
      const OffloadSplit& o = sheet.offload_rows[i];
      rows.push_back({{"tokens", sheet.sequences[i].tokens}, {"device_bytes", o.device_bytes},
                      {"host_bytes", o.host_bytes}, {"transfer_ns_per_step", o.transfer_ns}});
    }
    out["offload"] = {{"host_share", decimal_number(format_ppb(sheet.offload_ppb))},
                      {"link_bytes_per_second", sheet.link_bytes_per_second},
                      {"link_source", sheet.link_source},
                      {"rows", rows}};
    if (sheet.offload_request) {
      out["offload"]["request"] = {{"device_bytes", sheet.offload_request->device_bytes},
                                   {"host_bytes", sheet.offload_request->host_bytes},
                                   {"transfer_ns_per_step", sheet.offload_request->transfer_ns}};
    }
  }
  if (!sheet.stage_weights.empty()) {
    Json st = Json::array();
    for (std::size_t i = 0; i < sheet.stage_weights.size(); ++i) {
      const StageWeights& w = sheet.stage_weights[i];
      st.push_back({{"stage", i}, {"first_layer", w.first_layer}, {"end_layer", w.end_layer},
                    {"embedding", w.embedding}, {"lm_head", w.lm_head}, {"parameters", w.parameters},
                    {"weights_bytes_per_device", w.bytes_per_device}, {"kv_budget_bytes", w.kv_budget_bytes},
                    {"own_num_blocks", sheet.stage_pools[i].own_num_blocks}});
    }
    out["stage_weights"] = st;
  }
  if (!sheet.checks.empty()) {
    Json cases = Json::array();
    for (const CheckResult& r : sheet.checks) {
      const FitVerdict& v = r.fit;
      cases.push_back({{"case", r.c.name}, {"sequences", r.c.sequences}, {"tokens", r.c.tokens},
                       {"kv_bytes", r.kv_bytes}, {"stage", v.stage}, {"blocks_needed", v.needed},
                       {"blocks_on_device", v.on_device}, {"blocks_available", v.available}, {"fits", v.fits},
                       {"context_limit", v.context_limit}, {"exceeds_context", v.over_context},
                       {"why", why_not(sheet, v, pool_terms(v, "sequences"))}});
    }
    out["checks"] = cases;
  }
  if (sheet.draft_layers > 0) {
    out["speculative"] = {{"draft", sheet.draft},
                          {"draft_layers", sheet.draft_layers},
                          {"draft_bytes_per_token", sheet.draft_bytes_per_token},
                          {"lookahead_slots", sheet.lookahead_slots}};
  }
  if (sheet.static_cache_tokens > 0) {
    out["static_cache"] = {{"max_cache_len", sheet.static_cache_tokens}, {"reserved_bytes", sheet.static_reserved_bytes}};
    if (sheet.static_fit) {
      const FitVerdict& v = *sheet.static_fit;
      out["static_cache"]["fit"] = verdict_json(sheet, v, budget_terms(v));
    }
  }
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
  return json_text(out);
}

}  // namespace kvsim::cli
