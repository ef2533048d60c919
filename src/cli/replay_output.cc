#include "json_text.h"
#include "replay_output.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <nlohmann/json.hpp>

#include "kvsim/option_names.h"
#include "kvsim/trace_writer.h"
#include "kvsim/units.h"
#include "layout_json.h"
#include "sheet_table.h"

namespace kvsim::cli {
namespace {

using Json = nlohmann::ordered_json;

// Means are exact rationals; three decimals of a byte or position are plenty.
double rounded(double x) { return std::round(x * 1000.0) / 1000.0; }

std::string gib(double bytes) {
  return format_ratio(static_cast<std::int64_t>(std::llround(bytes)), kBytesPerGiB, 2);
}
std::string gib(std::int64_t bytes) { return format_ratio(bytes, kBytesPerGiB, 2); }
std::string seconds(std::int64_t ns) { return format_seconds(ns, 3); }
// A duration in picoseconds in the largest unit that keeps it at least 1: "4.794 ms".
std::string picoseconds(std::int64_t ps) {
  if (ps >= 1'000'000'000) return format_ratio(ps, 1'000'000'000, 3) + " ms";
  if (ps >= 1'000'000) return format_ratio(ps, 1'000'000, 3) + " us";
  if (ps >= 1'000) return format_ratio(ps, 1'000, 3) + " ns";
  return std::to_string(ps) + " ps";
}

std::string percent(double ratio) { return fmt::format("{:.1f}%", ratio * 100.0); }
std::string percent_or_na(std::optional<double> rate) { return rate ? percent(*rate) : std::string("n/a"); }
Json number_or_null(std::optional<double> rate) { return rate ? Json(*rate) : Json(nullptr); }

// "dense-static:reserve=oracle" -> {"dense-static", "reserve=oracle"}
std::pair<std::string, std::string> split_name(const std::string& name) {
  const auto colon = name.find(':');
  if (colon == std::string::npos) return {name, ""};
  return {name.substr(0, colon), name.substr(colon + 1)};
}

Json occupancy_json(const Occupancy& o, const char* unit) {
  Json j;
  j["mean"] = rounded(o.mean);
  j["peak"] = o.peak;
  // Trace time, as the arrivals and the timeline; null when the quantity never rose above 0.
  // Null too where it is unknown (-1: a sum over replicas, whose peaks and quantiles over
  // time do not add up).
  j["peak_at_s"] = o.peak > 0 && o.peak_at_ns >= 0 ? Json(static_cast<double>(o.peak_at_ns) / 1e9) : Json(nullptr);
  j["p50"] = o.p50 >= 0 ? Json(o.p50) : Json(nullptr);
  j["p99"] = o.p99 >= 0 ? Json(o.p99) : Json(nullptr);
  j["quantile_resolution"] = o.quantile_resolution;
  j["at_end"] = o.at_end;
  j["unit"] = unit;
  return j;
}

// Means as decimals; `at_instant` (the allocated peak): every part is a whole number of
// bytes or positions, JSON integers as the other byte counts are.
Json fragmentation_json(const Fragmentation& f, bool at_instant = false) {
  const auto value = [at_instant](double v) {
    return at_instant ? Json(static_cast<std::int64_t>(std::llround(v))) : Json(rounded(v));
  };
  return Json{{"tail", value(f.tail)},
              {"reservation", value(f.reservation)},
              {"padding", value(f.padding)},
              {"duplicate", value(f.duplicate)},
              {"outside_window", value(f.outside_window)},
              {"total", value(f.total())}};
}

// Null figures when nothing was measured: 0 s would read as instant service.
Json latency_json(const Latency& l) {
  const auto s = [&](double ns) { return l.count > 0 ? Json(ns / 1e9) : Json(nullptr); };
  return Json{{"count", l.count},
              {"mean_s", s(l.mean_ns)},
              {"p50_s", s(static_cast<double>(l.p50_ns))},
              {"p99_s", s(static_cast<double>(l.p99_ns))},
              {"max_s", s(static_cast<double>(l.max_ns))}};
}

std::string p50_p99(const Latency& l) {
  return l.count > 0 ? seconds(l.p50_ns) + " / " + seconds(l.p99_ns) : std::string("n/a");
}

// Per-token latencies are tens of milliseconds: shown in ms, two decimals.
std::string p50_p99_ms(const Latency& l) {
  const auto ms = [](std::int64_t ns) { return fmt::format("{:.2f}", static_cast<double>(ns) / 1e6); };
  return l.count > 0 ? ms(l.p50_ns) + " / " + ms(l.p99_ns) : std::string("n/a");
}

}  // namespace

std::string refusal_causes(const ReplayReport& r, std::int64_t max_model_len) {
  std::string out;
  if (r.rejected_too_long > 0) {
    out = fmt::format("{} longer than the maximum length of {} tokens", with_commas(r.rejected_too_long),
                      with_commas(max_model_len));
  }
  if (r.rejected_too_large > 0) {
    out += fmt::format("{}{} never fit the capacity of {} bytes even alone", out.empty() ? "" : ", ",
                       with_commas(r.rejected_too_large), with_commas(r.capacity_bytes));
  }
  if (r.rejected_too_many_samples > 0) {
    out += fmt::format("{}{} with more samples (n) than can run at once", out.empty() ? "" : ", ",
                       with_commas(r.rejected_too_many_samples));
  }
  return out;
}

std::optional<std::string> timing_device_warning(const std::vector<ReplayReport>& reports, const std::string& device,
                                                 std::int64_t kv_bytes) {
  // The traffic's own peak (effective tokens, the same under every allocator of a demand
  // run), on one device: not a total over replicas.
  std::int64_t effective_peak = 0;
  for (const ReplayReport& r : reports) {
    if (r.capacity_bytes == 0 && (r.replicas == 0 || r.replica >= 0)) {
      effective_peak = std::max(effective_peak, r.effective_bytes.peak);
    }
  }
  if (kv_bytes <= 0 || effective_peak <= kv_bytes) return std::nullopt;
  return fmt::format("the traffic's effective tokens peak at {} GiB, more than the {} GiB KV budget of the {} whose "
                     "times this demand run assumes: on it requests would wait or be preempted, so the run's "
                     "latencies are not that device's (add --device {} to serve under its budget)",
                     gib(effective_peak), gib(kv_bytes), device, device);
}

std::string run_name(const ReplayReport& r) {
  if (r.replicas == 0) return r.allocator;
  if (r.replica < 0) return fmt::format("{} [{} replicas]", r.allocator, r.replicas);
  return fmt::format("{} [replica {}: {} routed]", r.allocator, r.replica, with_commas(r.requests));
}

namespace {

// An overloaded run, in one sentence (src/overload.cc decides; this only words it).
std::string overload_text(const ReplayReport& r) {
  return fmt::format("{}: the device cannot keep up: {:.2f} requests/s arrive, {:.2f}/s are served; {}", run_name(r),
                     r.overload.arrival_rate_per_s, r.overload.service_rate_per_s, r.overload.reason);
}

}  // namespace

// What went wrong in one run, one sentence each: every request refused (and why, from the
// refusal counts), a budget smaller than the smallest request of the trace, and (with
// `overload`) an overloaded device. Without these a run that served nothing reads as a
// throughput of 0.0.
std::vector<std::string> run_warnings(const KvLayout& layout, const ReplayReport& r, bool overload) {
  std::vector<std::string> out;
  if (r.requests > 0 && r.refused() == r.requests) {
    out.push_back(fmt::format("{}: refused every request ({}): {}; nothing was served, so throughput and latencies "
                              "say nothing",
                              run_name(r), with_commas(r.requests), refusal_causes(r, layout.max_model_len)));
  }
  // The smallest request's effective tokens at its full length (one sample, sliding
  // windows capped): no allocator holds a request in less.
  if (r.capacity_bytes > 0 && r.shortest_request_tokens > 0) {
    const std::int64_t need = kv_bytes_for_tokens(layout, r.shortest_request_tokens);
    if (need > r.capacity_bytes) {
      out.push_back(fmt::format("{}: the capacity of {} bytes cannot hold one request of the trace: the shortest, "
                                "{} tokens (prompt + output), needs at least {} bytes of effective tokens",
                                run_name(r), with_commas(r.capacity_bytes), with_commas(r.shortest_request_tokens),
                                with_commas(need)));
    }
  }
  // Contiguous placement acts only on a bounded arena (docs/replay.md, "Contiguous placement").
  if (r.capacity_bytes == 0 && r.allocator.find("placement=") != std::string::npos) {
    out.push_back(fmt::format("{}: placement without a budget changes nothing: the arena is unbounded, so every "
                              "reservation finds an extent (give --kv-budget or --device)",
                              run_name(r)));
  }
  // Refused for their samples: kvsim runs a request's n samples together (vLLM would run them
  // in turns), so say so even when other requests were served.
  if (r.rejected_too_many_samples > 0 && r.refused() < r.requests) {
    out.push_back(fmt::format("{}: refused {} {} with more samples (n) than --max-running (or, without it, "
                              "--max-batched-tokens) lets run at once",
                              run_name(r), with_commas(r.rejected_too_many_samples),
                              r.rejected_too_many_samples == 1 ? "request" : "requests"));
  }
  // A reservation planned for max_tokens where the trace gives none: the true output, which
  // no engine knows in advance (reserve=oracle's figures under another name).
  if (r.allocator.find("reserve=max-tokens") != std::string::npos && r.planned_at_output_requests > 0) {
    out.push_back(fmt::format("{}: {} of {} requests have no max_tokens in the trace, so their rows reserve their "
                              "true output, as reserve=oracle does (give --default-max-tokens N to plan for a "
                              "limit)",
                              run_name(r), with_commas(r.planned_at_output_requests), with_commas(r.requests)));
  }
  // The same for a policy that plans each request's whole life (reserve, sglang): without a
  // limit it admits as if it knew each output, which no engine does (TensorRT-LLM and SGLang
  // plan such a request to the model's length).
  if ((r.policy.starts_with("reserve") || r.policy.starts_with("sglang")) && r.planned_at_output_requests > 0) {
    out.push_back(fmt::format("{}: {} of {} requests have no max_tokens in the trace, so the {} policy planned their "
                              "true output, which no engine knows in advance (give --default-max-tokens N to plan "
                              "for a limit; TensorRT-LLM and SGLang plan the context left)",
                              run_name(r), with_commas(r.planned_at_output_requests), with_commas(r.requests),
                              r.policy.substr(0, r.policy.find(' '))));
  }
  // A prefix cache on a trace that identifies no prompt block (Azure's, BurstGPT's, lengths
  // only): its hit rate of 0 says nothing about caching.
  // Judged on the whole trace: one engine's run, or the replicas' total (a replica may have
  // been routed none of the requests that carry identity).
  if (r.prefix_block_tokens > 0 && r.requests > 0 && r.prefix_identified_requests == 0 &&
      (r.replicas == 0 || r.replica < 0)) {
    // paged's cache keys the blocks no identity names by the request's own key; radix keys
    // pages by the trace's identity alone (docs/replay.md, the allocators' table).
    const bool radix = r.allocator.rfind("radix", 0) == 0;
    out.push_back(fmt::format("{}: the trace identifies no prompt block of {} token{} (no prefix hashes, Mooncake "
                              "hash_ids or token ids, or no prompt that long), so no request can find another's "
                              "prompt in the cache ({}); 'kvsim trace stats' says what a trace carries",
                              run_name(r), with_commas(r.prefix_block_tokens), r.prefix_block_tokens == 1 ? "" : "s",
                              radix ? "nor a retracted or preempted one its own, which SGLang's token-keyed tree "
                                      "would find"
                                    : "a preempted one can still find its own blocks"));
  }
  if (overload && r.overload.overloaded) out.push_back(overload_text(r));
  return out;
}

namespace {

// Every run's warnings, in the order of the runs.
std::vector<std::string> warnings(const ReplayContext& c, const std::vector<ReplayReport>& reports, bool overload) {
  std::vector<std::string> out;
  for (const ReplayReport& r : reports) {
    for (auto& w : run_warnings(c.layout, r, overload)) out.push_back(std::move(w));
  }
  if (auto w = timing_device_warning(reports, c.timing_device, c.timing_device_kv_bytes)) out.push_back(std::move(*w));
  std::int64_t dropped = 0;
  for (const ReplayReport& r : reports) dropped = std::max(dropped, r.trace_dropped);
  if (dropped > 0) {
    out.push_back(fmt::format("{} failed requests (0 response tokens) of the trace were dropped and are in no figure; "
                              "{} replays them as cancelled at arrival",
                              with_commas(dropped), kOptKeepFailed));
  }
  return out;
}

// What the runs share, above the table: trace, model, schedule, budget.
std::string run_header(const ReplayContext& c, const std::vector<ReplayReport>& reports) {
  std::string out;
  out += fmt::format("kvsim replay {}\n", c.trace);
  out += fmt::format("model    {} ({}), KV {}, {} bytes per token, {}\n", c.model_name, c.model_source, c.kv_dtype,
                     with_commas(c.layout.bytes_per_token()), c.placement);
  if (c.layout.groups.size() > 1) {
    for (const auto& g : c.layout.groups) {
      out += fmt::format("         layer group {:<14} {} layers, {} bytes per position\n", g.name, g.layers,
                         with_commas(g.bytes_per_position));
    }
  }
  if (!reports.empty()) {
    // The run that read the most requests (the first, unless --replicas split the trace: then
    // the replicas' total).
    const ReplayReport& r = *std::max_element(reports.begin(), reports.end(),
                                              [](const auto& a, const auto& b) { return a.requests < b.requests; });
    out += fmt::format("schedule {}; cost model {}\n", r.schedule, r.cost_model);
    // An MoE model's routed experts: their read, charged by the share of them a step reaches.
    const std::string experts =
        c.cost.expert_weights_ps > 0
            ? fmt::format(" + {} x the share of the {} routed experts ({} a token) reached", picoseconds(c.cost.expert_weights_ps),
                          c.cost.routed_experts, c.cost.experts_per_token)
            : std::string();
    if (r.schedule == "simulated" && c.cost.roofline) {
      // FlashAttention 2's query tiles: what a decode's KV position costs, apart from the pairs.
      const std::string attention =
          c.cost.attention_tile_position_ps > 0
              ? fmt::format("{} per attention pair of a prefill + {} per KV position a decode reads ({} in a "
                            "decode-only step)",
                            picoseconds(c.cost.attention_pair_ps), picoseconds(c.cost.attention_tile_position_ps),
                            picoseconds(c.cost.attention_packed_position_ps))
              : fmt::format("{} per attention pair", picoseconds(c.cost.attention_pair_ps));
      out += fmt::format("         a step costs {} + max({} per token + {} per sampled token, {} of weights{} + {} per "
                         "token + {} per sampled token) + max({}, {} per KV position)\n"
                         "         + element-wise kernels: {} per token + {} per sampled token\n",
                         picoseconds(c.cost.overhead_ps), picoseconds(c.cost.prefill_token_ps),
                         picoseconds(c.cost.sample_token_ps), picoseconds(c.cost.weights_ps), experts,
                         picoseconds(c.cost.matmul_io_token_ps), picoseconds(c.cost.matmul_io_sample_ps), attention,
                         picoseconds(c.cost.kv_position_ps), picoseconds(c.cost.elementwise_token_ps),
                         picoseconds(c.cost.elementwise_sample_ps));
      if (c.cost.collective_token_ps > 0) {
        out += fmt::format("         + tensor-parallel collectives: {} per step + {} per token + {} per sampled token\n",
                           picoseconds(c.cost.collective_step_ps), picoseconds(c.cost.collective_token_ps),
                           picoseconds(c.cost.collective_sample_ps));
      }
      if (c.cost.replica_collective_token_ps > 0) {
        out += fmt::format("         + the replicas' MoE gathers, per aligned step: {} + {} per token of all replicas\n",
                           picoseconds(c.cost.replica_collective_step_ps),
                           picoseconds(c.cost.replica_collective_token_ps));
      }
    } else if (r.schedule == "simulated") {
      out += fmt::format("         a step costs {} + {} per prompt token + {} per decoding sequence + {} per position read{}\n",
                         picoseconds(c.cost.base_ps), picoseconds(c.cost.prefill_token_ps),
                         picoseconds(c.cost.decode_seq_ps), picoseconds(c.cost.context_token_ps), experts);
    }
    out += fmt::format("budget   {}; {}\n", c.budget,
                       r.schedule == "simulated" ? c.scheduler : std::string("no batching (measured schedule)"));
    // Each allocator's run has its own schedule under a budget, so its own span: all of them
    // when they differ, not the first one's alone.
    std::string spans;
    bool differ = false;
    for (const ReplayReport& run : reports) {
      if (run.requests != r.requests) continue;  // a replica's share
      differ = differ || run.end_ns - run.start_ns != r.end_ns - r.start_ns;
      spans += fmt::format("{}{} s ({})", spans.empty() ? "" : ", ", seconds(run.end_ns - run.start_ns), run_name(run));
    }
    out += fmt::format("trace    {} request{} over {} {}\n", with_commas(r.requests), r.requests == 1 ? "" : "s",
                       differ ? spans : seconds(r.end_ns - r.start_ns) + " s",
                       r.schedule == "simulated" ? "simulated" : "as measured");
  }
  for (const ReplayReport& r : reports) {
    if (r.overload.overloaded) out += "OVERLOAD " + overload_text(r) + "\n";
  }
  return out + "\n";
}

// The side-by-side table: a column per run, headed by its allocator's kind and parameters,
// and a row per figure, filled by one function per section below.
class RunColumns {
 public:
  explicit RunColumns(const std::vector<ReplayReport>& reports) : reports_(reports), table_(headers(reports)) {
    std::vector<std::string> params{""};
    for (const auto& r : reports) params.push_back(split_name(run_name(r)).second);
    table_.add(std::move(params));
  }

  // A row labelled `label` whose cell in each run's column is cell(report).
  template <typename Cell>
  void row(const std::string& label, Cell cell) {
    std::vector<std::string> cells{label};
    for (const auto& r : reports_) cells.push_back(cell(r));
    table_.add(std::move(cells));
  }
  // A section title: a row with a label and no cells.
  void section(const std::string& label) { table_.add({label}); }

  std::string render() const { return table_.render(""); }

 private:
  static SheetTable headers(const std::vector<ReplayReport>& reports) {
    std::vector<std::string> kinds{""};
    std::vector<SheetTable::Align> align{SheetTable::Align::left};
    for (const auto& r : reports) {
      kinds.push_back(split_name(run_name(r)).first);
      align.push_back(SheetTable::Align::right);
    }
    return SheetTable(kinds, align);
  }

  const std::vector<ReplayReport>& reports_;
  SheetTable table_;
};

void memory_rows(RunColumns& t) {
  t.section("memory, GiB (2^30 bytes)");
  t.row("  effective tokens, mean", [](const ReplayReport& r) { return gib(r.effective_bytes.mean); });
  t.row("  effective tokens, peak", [](const ReplayReport& r) { return gib(r.effective_bytes.peak); });
  t.row("  allocated slots, mean", [](const ReplayReport& r) { return gib(r.allocated_bytes.mean); });
  // -1: unknown (a sum over replicas).
  const auto known_gib = [](std::int64_t bytes) { return bytes >= 0 ? gib(bytes) : std::string("n/a"); };
  t.row("  allocated slots, p50 over time", [known_gib](const ReplayReport& r) { return known_gib(r.allocated_bytes.p50); });
  t.row("  allocated slots, p99 over time", [known_gib](const ReplayReport& r) { return known_gib(r.allocated_bytes.p99); });
  t.row("  allocated slots, peak", [](const ReplayReport& r) { return gib(r.allocated_bytes.peak); });
  t.row("    peak at, s (trace time)", [](const ReplayReport& r) {
    return r.allocated_bytes.peak > 0 && r.allocated_bytes.peak_at_ns >= 0 ? seconds(r.allocated_bytes.peak_at_ns)
                                                                           : std::string("n/a");
  });
  t.row("  reserved slots, peak", [](const ReplayReport& r) { return gib(r.reserved_bytes.peak); });
}

void internal_fragmentation_rows(RunColumns& t) {
  t.section("internal fragmentation, mean GiB");
  t.row("  partial-block tail", [](const ReplayReport& r) { return gib(r.mean_bytes.tail); });
  t.row("  reservation ahead", [](const ReplayReport& r) { return gib(r.mean_bytes.reservation); });
  t.row("  padding past the request's limit", [](const ReplayReport& r) { return gib(r.mean_bytes.padding); });
  t.row("  duplicate prompt copies", [](const ReplayReport& r) { return gib(r.mean_bytes.duplicate); });
  t.row("  outside the window", [](const ReplayReport& r) { return gib(r.mean_bytes.outside_window); });
  t.row("  total", [](const ReplayReport& r) { return gib(r.mean_bytes.total()); });
  t.row("  total at allocated peak", [](const ReplayReport& r) { return gib(r.at_peak_bytes.total()); });
}

void usage_rows(RunColumns& t) {
  t.section("usage");
  t.row("  token-level (effective/allocated)", [](const ReplayReport& r) { return percent_or_na(r.token_usage); });
  t.row("  block-level (allocated/capacity)", [](const ReplayReport& r) { return percent_or_na(r.block_usage); });
}

void external_fragmentation_rows(RunColumns& t) {
  t.section("external fragmentation");
  t.row("  1 - largest free/free, mean", [](const ReplayReport& r) { return percent(r.external_fragmentation_mean); });
  t.row("  1 - largest free/free, max", [](const ReplayReport& r) { return percent(r.external_fragmentation_max); });
  t.row("  no extent though room was free", [](const ReplayReport& r) { return with_commas(r.failed_placements); });
  t.row("  copied on growth, GiB", [](const ReplayReport& r) { return gib(r.copied_bytes); });
}

bool any_placement(const std::vector<ReplayReport>& reports) {
  return std::any_of(reports.begin(), reports.end(), [](const ReplayReport& r) { return r.places_reservations; });
}

// The mean share of the budget each part takes; with reservations placed contiguously the
// parts are those of the vLLM paper's Figure 2 and add up to 100%. The free bytes outside
// the largest free extent are external fragmentation; the largest free extent is free.
double share(const ReplayReport& r, double bytes) {
  return r.capacity_bytes > 0 ? bytes / static_cast<double>(r.capacity_bytes) : 0.0;
}

void capacity_share_rows(RunColumns& t) {
  t.section("share of capacity, mean (parts add up to 100%)");
  t.row("  effective tokens (token states)", [](const ReplayReport& r) { return percent(share(r, r.effective_bytes.mean)); });
  t.row("  reservation ahead", [](const ReplayReport& r) { return percent(share(r, r.mean_bytes.reservation)); });
  t.row("  padding past the request's limit", [](const ReplayReport& r) { return percent(share(r, r.mean_bytes.padding)); });
  t.row("  other internal fragmentation", [](const ReplayReport& r) {
    return percent(share(r, r.mean_bytes.tail + r.mean_bytes.duplicate + r.mean_bytes.outside_window));
  });
  t.row("  external fragmentation", [](const ReplayReport& r) { return percent(share(r, r.external_fragmentation_bytes_mean)); });
  t.row("  free (largest free extent)", [](const ReplayReport& r) {
    return percent(share(r, static_cast<double>(r.capacity_bytes) - r.allocated_bytes.mean - r.external_fragmentation_bytes_mean));
  });
}

// Mean positions per layer group, when the model has more than one.
void layer_group_rows(RunColumns& t, const KvLayout& layout) {
  if (layout.groups.size() <= 1) return;
  for (std::size_t g = 0; g < layout.groups.size(); ++g) {
    t.section("layer group " + layout.groups[g].name + ", mean positions");
    t.row("  effective tokens", [g](const ReplayReport& r) {
      return with_commas(std::llround(r.groups[g].effective_tokens.mean));
    });
    t.row("  allocated slots", [g](const ReplayReport& r) {
      return with_commas(std::llround(r.groups[g].allocated_slots.mean));
    });
  }
}

// What serving under a memory budget cost; only for bounded runs.
void serving_rows(RunColumns& t) {
  t.section("serving under the budget");
  t.row("  policy", [](const ReplayReport& r) { return r.policy; });
  t.row("  capacity, GiB", [](const ReplayReport& r) { return gib(r.capacity_bytes); });
  t.row("  preemptions", [](const ReplayReport& r) { return with_commas(r.preemptions); });
  t.row("    requests preempted / most per request", [](const ReplayReport& r) {
    return with_commas(r.preempted_requests) + " / " + with_commas(r.max_preemptions_per_request);
  });
  t.row("    tokens recomputed", [](const ReplayReport& r) { return with_commas(r.recomputed_tokens); });
  t.row("    swapped out / in, GiB", [](const ReplayReport& r) {
    return gib(r.swapped_out_bytes) + " / " + gib(r.swapped_in_bytes);
  });
  t.row("  refused (never fits the budget)", [](const ReplayReport& r) { return with_commas(r.rejected_too_large); });
  t.row("  time at full capacity, s", [](const ReplayReport& r) {
    return seconds(r.memory_bound_ns) + " (" + percent(r.end_ns > r.start_ns ? static_cast<double>(r.memory_bound_ns) /
                                                                                   static_cast<double>(r.end_ns - r.start_ns)
                                                                             : 0.0) + ")";
  });
  t.row("  queue length, mean / max", [](const ReplayReport& r) {
    return fmt::format("{:.1f}", r.queue_mean) + " / " + with_commas(r.queue_max);
  });
  t.row("  waiting p50 / p99, s", [](const ReplayReport& r) {
    return p50_p99(r.waiting);
  });
}

bool any_sharing(const std::vector<ReplayReport>& reports) {
  return std::any_of(reports.begin(), reports.end(), [](const ReplayReport& r) { return r.prefix_block_tokens > 0; });
}

// A hit rate is undefined when nothing was looked up (prompts shorter than a block, a run
// without preemption): shown as n/a, null in JSON, an empty CSV cell, never as 0%.
std::optional<double> ratio(std::int64_t part, std::int64_t whole) {
  if (whole <= 0) return std::nullopt;
  return static_cast<double>(part) / static_cast<double>(whole);
}
std::optional<double> hit_rate(const ReplayReport& r) { return ratio(r.prefix_hit_tokens, r.prefix_queried_tokens); }
std::optional<double> block_hit_rate(const ReplayReport& r) {
  return ratio(r.prefix_hit_blocks, r.prefix_queried_blocks);
}
std::optional<double> preempted_hit_rate(const ReplayReport& r) {
  return ratio(r.prefix_preempted_hit_tokens, r.prefix_preempted_queried_tokens);
}

// Sharing prompt blocks across requests; only when an allocator does.
void prefix_cache_rows(RunColumns& t) {
  t.section("prefix cache (prompt blocks shared across requests)");
  t.row("  block, tokens", [](const ReplayReport& r) {
    return r.prefix_block_tokens > 0 ? with_commas(r.prefix_block_tokens) : std::string("off");
  });
  t.row("  hit rate (tokens found / looked up)", [](const ReplayReport& r) { return percent_or_na(hit_rate(r)); });
  t.row("  hit rate, full blocks", [](const ReplayReport& r) { return percent_or_na(block_hit_rate(r)); });
  t.row("  prompt tokens not computed", [](const ReplayReport& r) { return with_commas(r.prefix_hit_tokens); });
  t.row("  after preemption: tokens found / looked up", [](const ReplayReport& r) {
    return with_commas(r.prefix_preempted_hit_tokens) + " / " + with_commas(r.prefix_preempted_queried_tokens);
  });
  t.row("  evicted, GiB", [](const ReplayReport& r) { return gib(r.evicted_bytes); });
  t.row("  cached, evictable, GiB mean / peak", [](const ReplayReport& r) {
    return gib(r.evictable_bytes.mean) + " / " + gib(r.evictable_bytes.peak);
  });
}

// `samples_refused`: some run refused requests with more samples than can run at once (a
// row only then, so that other runs' tables stay as they were).
void request_rows(RunColumns& t, bool samples_refused) {
  t.section("requests");
  t.row("  completed", [](const ReplayReport& r) { return with_commas(r.completed); });
  t.row("  cancelled", [](const ReplayReport& r) { return with_commas(r.cancelled_queued + r.cancelled_running); });
  t.row("  refused (longer than max length)", [](const ReplayReport& r) { return with_commas(r.rejected_too_long); });
  if (samples_refused) {
    t.row("  refused (n above max running)", [](const ReplayReport& r) { return with_commas(r.rejected_too_many_samples); });
  }
  t.row("  throughput, generated tokens/s", [](const ReplayReport& r) {
    return fmt::format("{:.1f}", r.generated_tokens_per_s);
  });
}

// Still under "requests": time to first token and end to end.
void latency_rows(RunColumns& t) {
  t.row("  TTFT p50 / p99, s", [](const ReplayReport& r) { return p50_p99(r.ttft); });
  t.row("  end-to-end p50 / p99, s", [](const ReplayReport& r) { return p50_p99(r.e2e); });
  t.row("  TPOT p50 / p99, ms", [](const ReplayReport& r) { return p50_p99_ms(r.tpot); });
  t.row("  inter-token latency p50 / p99, ms", [](const ReplayReport& r) { return p50_p99_ms(r.itl); });
}

void leak_check_row(RunColumns& t) {
  t.row("leak check: allocated at end", [](const ReplayReport& r) {
    return r.leak_free ? std::string("0 (ok)") : with_commas(r.allocated_bytes_at_end);
  });
}

}  // namespace

std::string replay_table(const ReplayContext& c, const std::vector<ReplayReport>& reports) {
  RunColumns t(reports);
  memory_rows(t);
  internal_fragmentation_rows(t);
  usage_rows(t);
  external_fragmentation_rows(t);
  layer_group_rows(t, c.layout);
  const bool bounded = !reports.empty() && reports.front().capacity_bytes > 0;
  if (bounded) serving_rows(t);
  // Only when reservations are placed, so that other runs' output stays as it was.
  if (bounded && any_placement(reports)) capacity_share_rows(t);
  if (any_sharing(reports)) prefix_cache_rows(t);
  request_rows(t, std::any_of(reports.begin(), reports.end(),
                              [](const ReplayReport& r) { return r.rejected_too_many_samples > 0; }));
  latency_rows(t);
  leak_check_row(t);
  // Warnings first, one line each; an overload keeps its own line in the header.
  std::string top;
  for (const auto& w : warnings(c, reports, false)) top += "WARNING " + w + "\n";
  return top + run_header(c, reports) + t.render();
}

std::string replay_figures_help() {
  return "Reading the figures (docs/replay.md, \"The figures\"):\n"
         "  block-level usage: allocated / capacity, time-weighted; without a budget (demand) it is\n"
         "    allocated / reserved: the share of what the allocator has taken from the device so far\n"
         "    (its pool or arena, grown to the high-water mark of demand, never given back) that was\n"
         "    assigned to requests.\n"
         "  swapped out / in (--preemption swap): out is what a victim held when preempted; in is\n"
         "    what it holds back on the device, where it decodes in that same step, so in includes\n"
         "    the slot for its next token: a new block whenever that token starts one. In can\n"
         "    therefore exceed out; a request that never comes back is refused, its bytes never in.\n"
         "  warnings (stderr, table top, JSON \"warnings\"): every request refused, a budget that\n"
         "    cannot hold the trace's smallest request, an overloaded device, contiguous placement\n"
         "    without a budget, requests refused for their samples (n), reserve=max-tokens on\n"
         "    requests without max_tokens, a prefix cache on a trace without prefix identity, and in\n"
         "    demand mode traffic whose peak exceeds the timing device's KV budget.";
}

void print_warnings(const ReplayContext& c, const std::vector<ReplayReport>& reports) {
  for (const auto& w : warnings(c, reports, true)) fmt::print(stderr, "kvsim replay: warning: {}\n", w);
}

namespace {

Json overload_json(const Overload& o) {
  return Json{{"overloaded", o.overloaded},
              {"reason", o.reason},
              {"arrival_rate_per_s", o.arrival_rate_per_s},
              {"service_rate_per_s", o.service_rate_per_s}};
}

}  // namespace

nlohmann::ordered_json replay_run_json(const ReplayReport& r, bool replicas) {
  Json run;
  run["allocator"] = r.allocator;
  // One of --replicas: which (null for their total); or, beside such runs, one engine's
  // (replicas 1, replica null), as the CSV row says.
  if (r.replicas > 0 || replicas) {
    run["replicas"] = std::max<std::int64_t>(1, r.replicas);
    run["replica"] = r.replica >= 0 ? Json(r.replica) : Json(nullptr);
  }
  run["schedule"] = r.schedule;
  run["cost_model"] = r.cost_model;
  run["requests"] = Json{{"total", r.requests},
                         {"dropped_failed", r.trace_dropped},
                         {"completed", r.completed},
                         {"cancelled_queued", r.cancelled_queued},
                         {"cancelled_running", r.cancelled_running},
                         {"refused_too_long", r.rejected_too_long},
                         {"refused_too_many_samples", r.rejected_too_many_samples},
                         {"prompt_tokens", r.prompt_tokens},
                         {"generated_tokens", r.generated_tokens}};
  run["time"] = Json{{"start_s", static_cast<double>(r.start_ns) / 1e9},
                     {"end_s", static_cast<double>(r.end_ns) / 1e9},
                     {"duration_ns", r.end_ns - r.start_ns},
                     {"iterations", r.iterations}};
  run["memory_bytes"] = Json{{"effective_tokens", occupancy_json(r.effective_bytes, "bytes")},
                             {"allocated_slots", occupancy_json(r.allocated_bytes, "bytes")},
                             {"reserved_slots", occupancy_json(r.reserved_bytes, "bytes")}};
  run["internal_fragmentation_bytes"] = Json{{"mean", fragmentation_json(r.mean_bytes)},
                                             {"at_allocated_peak", fragmentation_json(r.at_peak_bytes, true)}};
  run["usage"] = Json{{"token_level", number_or_null(r.token_usage)}, {"block_level", number_or_null(r.block_usage)}};
  // The bytes in every run (0 where nothing is placed in extents): a dynamic allocator's arena
  // fragments too, and `kvsim report` draws the part from here.
  run["external_fragmentation"] = Json{{"mean", r.external_fragmentation_mean},
                                       {"max", r.external_fragmentation_max},
                                       {"failed_placements_with_room_free", r.failed_placements},
                                       {"free_bytes_outside_largest_extent_mean", r.external_fragmentation_bytes_mean}};
  run["copied_bytes"] = r.copied_bytes;
  Json gs = Json::array();
  for (const auto& g : r.groups) {
    gs.push_back(Json{{"name", g.group.name},
                      {"effective_tokens", occupancy_json(g.effective_tokens, "positions")},
                      {"allocated_slots", occupancy_json(g.allocated_slots, "positions")},
                      {"internal_fragmentation_positions",
                       Json{{"mean", fragmentation_json(g.mean_slots)}, {"at_allocated_peak", fragmentation_json(g.at_peak_slots, true)}}}});
  }
  run["layer_groups"] = gs;
  run["latency"] = Json{{"ttft", latency_json(r.ttft)}, {"end_to_end", latency_json(r.e2e)},
                        {"tpot", latency_json(r.tpot)}, {"inter_token", latency_json(r.itl)}};
  run["serving"] = Json{{"policy", r.policy},
                        {"capacity_bytes", r.capacity_bytes},
                        {"preemptions", r.preemptions},
                        {"preempted_requests", r.preempted_requests},
                        {"max_preemptions_per_request", r.max_preemptions_per_request},
                        {"recomputed_tokens", r.recomputed_tokens},
                        {"swapped_out_bytes", r.swapped_out_bytes},
                        {"swapped_in_bytes", r.swapped_in_bytes},
                        {"refused_too_large", r.rejected_too_large},
                        {"time_at_full_capacity_ns", r.memory_bound_ns},
                        {"queue_length_mean", r.queue_mean},
                        {"queue_length_max", r.queue_max},
                        {"waiting", latency_json(r.waiting)},
                        {"generated_tokens_per_s", r.generated_tokens_per_s}};
  if (r.prefix_block_tokens > 0) {
    run["prefix_cache"] = Json{{"block_tokens", r.prefix_block_tokens},
                               {"queried_tokens", r.prefix_queried_tokens},
                               {"hit_tokens", r.prefix_hit_tokens},
                               {"hit_rate", number_or_null(hit_rate(r))},
                               {"queried_blocks", r.prefix_queried_blocks},
                               {"hit_blocks", r.prefix_hit_blocks},
                               {"block_hit_rate", number_or_null(block_hit_rate(r))},
                               {"preempted_queried_tokens", r.prefix_preempted_queried_tokens},
                               {"preempted_hit_tokens", r.prefix_preempted_hit_tokens},
                               {"preempted_hit_rate", number_or_null(preempted_hit_rate(r))},
                               {"evicted_bytes", r.evicted_bytes},
                               {"evictable_bytes", occupancy_json(r.evictable_bytes, "bytes")}};
  }
  run["leak_check"] = Json{{"allocated_bytes_at_end", r.allocated_bytes_at_end}, {"ok", r.leak_free}};
  // Only an overloaded run says so (docs/replay.md, "Overload"), so that other runs' JSON
  // is unchanged.
  if (r.overload.overloaded) run["overload"] = overload_json(r.overload);
  return run;
}

namespace {

// The cost model the simulated steps were timed by: its coefficients, and the roofline's
// terms when it is one.
Json cost_model_json(const CostModel& cost) {
  Json j = {{"name", cost.name},
            {"step_base_ps", cost.base_ps},
            {"per_prompt_token_ps", cost.prefill_token_ps},
            {"per_decoding_sequence_ps", cost.decode_seq_ps},
            {"per_position_read_ps", cost.context_token_ps}};
  // An MoE model's routed experts, read by the share a step reaches (absent for dense models).
  if (cost.routed_experts > 0) {
    j["routed_expert_weights_ps"] = cost.expert_weights_ps;
    j["routed_experts"] = cost.routed_experts;
    j["experts_per_token"] = cost.experts_per_token;
  }
  if (!cost.roofline) return j;
  j["roofline"] = Json{{"device", cost.device},
                       {"overhead_ps", cost.overhead_ps},
                       {"weights_ps", cost.weights_ps},
                       {"per_kv_position_ps", cost.kv_position_ps},
                       {"per_token_ps", cost.prefill_token_ps},
                       {"per_sampled_token_ps", cost.sample_token_ps},
                       {"per_attention_pair_ps", cost.attention_pair_ps},
                       {"per_token_matmul_io_ps", cost.matmul_io_token_ps},
                       {"per_sampled_token_matmul_io_ps", cost.matmul_io_sample_ps},
                       {"per_token_elementwise_ps", cost.elementwise_token_ps},
                       {"per_sampled_token_elementwise_ps", cost.elementwise_sample_ps},
                       {"collective_step_ps", cost.collective_step_ps},
                       {"per_token_collective_ps", cost.collective_token_ps},
                       {"per_sampled_token_collective_ps", cost.collective_sample_ps},
                       {"replica_collective_step_ps", cost.replica_collective_step_ps},
                       {"per_replica_token_collective_ps", cost.replica_collective_token_ps}};
  // FlashAttention 2's query tiles (absent where vLLM runs another attention kernel).
  if (cost.attention_tile_position_ps > 0) {
    j["roofline"]["per_decode_kv_position_tile_ps"] = cost.attention_tile_position_ps;
    j["roofline"]["per_decode_kv_position_packed_ps"] = cost.attention_packed_position_ps;
  }
  return j;
}

}  // namespace

std::string replay_json(const ReplayContext& c, const std::vector<ReplayReport>& reports) {
  Json j;
  j["trace"] = c.trace;
  j["model"] = Json{{"name", c.model_name}, {"source", c.model_source}, {"kv_dtype", c.kv_dtype},
                    {"placement", c.placement}, {"bytes_per_token", c.layout.bytes_per_token()},
                    {"max_model_len", c.layout.max_model_len}};
  j["model"]["layer_groups"] = layer_groups_json(c.layout);
  j["budget"] = c.budget;
  // A measured schedule takes its times from the trace: no step is costed nor batched, as
  // each run's own cost_model says.
  const bool measured = !reports.empty() && std::all_of(reports.begin(), reports.end(), [](const ReplayReport& r) {
    return r.schedule != "simulated";
  });
  j["scheduler"] = measured ? "none (measured schedule)" : c.scheduler;
  j["cost_model"] = measured ? Json{{"name", "none (measured schedule)"}} : cost_model_json(c.cost);
  Json runs = Json::array();
  for (const auto& r : reports) runs.push_back(replay_run_json(r));
  j["runs"] = runs;
  // Only when there are any, so that other runs' JSON is unchanged.
  const auto w = warnings(c, reports, true);
  if (!w.empty()) j["warnings"] = w;
  return json_text(j);
}

namespace {

using Cell = std::function<std::string(const ReplayReport&)>;

// One list names each column and says how to fill it, so header and rows cannot drift.
std::vector<std::pair<const char*, Cell>> csv_columns(const CsvShape& shape) {
  const auto integer = [](std::int64_t ReplayReport::*field) {
    return Cell([field](const ReplayReport& r) { return std::to_string(r.*field); });
  };
  const auto decimal = [](auto get, int places) {
    return Cell([get, places](const ReplayReport& r) { return fmt::format("{:.{}f}", get(r), places); });
  };
  // A share to six places, or an empty cell (NaN to pandas) for a share of nothing.
  const auto share = [](auto get) {
    return Cell([get](const ReplayReport& r) {
      const std::optional<double> value = get(r);
      return value ? fmt::format("{:.6f}", *value) : std::string();
    });
  };
  const auto secs = [](auto get) { return Cell([get](const ReplayReport& r) { return format_seconds(get(r), 9); }); };
  // An empty cell (NaN to pandas) when nothing was measured.
  const auto latency = [](Latency ReplayReport::*field, std::int64_t Latency::*figure) {
    return Cell([field, figure](const ReplayReport& r) {
      return (r.*field).count > 0 ? format_seconds((r.*field).*figure, 9) : std::string();
    });
  };
  std::vector<std::pair<const char*, Cell>> columns = {
      {"allocator", [](const ReplayReport& r) { return csv_cell(r.allocator); }},
      {"requests", integer(&ReplayReport::requests)},
      {"completed", integer(&ReplayReport::completed)},
      {"cancelled", [](const ReplayReport& r) { return std::to_string(r.cancelled_queued + r.cancelled_running); }},
      {"refused_too_long", integer(&ReplayReport::rejected_too_long)},
      {"refused_too_many_samples", integer(&ReplayReport::rejected_too_many_samples)},
      {"duration_s", secs([](const ReplayReport& r) { return r.end_ns - r.start_ns; })},
      {"iterations", integer(&ReplayReport::iterations)},
      {"effective_bytes_mean", decimal([](const ReplayReport& r) { return r.effective_bytes.mean; }, 3)},
      {"effective_bytes_peak", [](const ReplayReport& r) { return std::to_string(r.effective_bytes.peak); }},
      {"allocated_bytes_mean", decimal([](const ReplayReport& r) { return r.allocated_bytes.mean; }, 3)},
      // Empty where unknown (-1: a sum over replicas).
      {"allocated_bytes_p50", [](const ReplayReport& r) {
         return r.allocated_bytes.p50 >= 0 ? std::to_string(r.allocated_bytes.p50) : std::string();
       }},
      {"allocated_bytes_p99", [](const ReplayReport& r) {
         return r.allocated_bytes.p99 >= 0 ? std::to_string(r.allocated_bytes.p99) : std::string();
       }},
      {"allocated_bytes_peak", [](const ReplayReport& r) { return std::to_string(r.allocated_bytes.peak); }},
      {"allocated_bytes_peak_at_s", [](const ReplayReport& r) {
         return r.allocated_bytes.peak > 0 && r.allocated_bytes.peak_at_ns >= 0
                    ? format_seconds(r.allocated_bytes.peak_at_ns, 9)
                    : std::string();
       }},
      {"reserved_bytes_peak", [](const ReplayReport& r) { return std::to_string(r.reserved_bytes.peak); }},
      {"internal_frag_tail_bytes_mean", decimal([](const ReplayReport& r) { return r.mean_bytes.tail; }, 3)},
      {"internal_frag_reservation_bytes_mean", decimal([](const ReplayReport& r) { return r.mean_bytes.reservation; }, 3)},
      {"internal_frag_padding_bytes_mean", decimal([](const ReplayReport& r) { return r.mean_bytes.padding; }, 3)},
      {"internal_frag_duplicate_bytes_mean", decimal([](const ReplayReport& r) { return r.mean_bytes.duplicate; }, 3)},
      {"internal_frag_outside_window_bytes_mean",
       decimal([](const ReplayReport& r) { return r.mean_bytes.outside_window; }, 3)},
      {"token_usage", share([](const ReplayReport& r) { return r.token_usage; })},
      {"block_usage", share([](const ReplayReport& r) { return r.block_usage; })},
      {"external_frag_mean", decimal([](const ReplayReport& r) { return r.external_fragmentation_mean; }, 6)},
      {"external_frag_max", decimal([](const ReplayReport& r) { return r.external_fragmentation_max; }, 6)},
      {"failed_placements", integer(&ReplayReport::failed_placements)},
      {"copied_bytes", integer(&ReplayReport::copied_bytes)},
      {"ttft_p50_s", latency(&ReplayReport::ttft, &Latency::p50_ns)},
      {"ttft_p99_s", latency(&ReplayReport::ttft, &Latency::p99_ns)},
      {"e2e_p50_s", latency(&ReplayReport::e2e, &Latency::p50_ns)},
      {"e2e_p99_s", latency(&ReplayReport::e2e, &Latency::p99_ns)},
      {"tpot_mean_s", Cell([](const ReplayReport& r) {
         return r.tpot.count > 0 ? fmt::format("{:.9f}", r.tpot.mean_ns / 1e9) : std::string();
       })},
      {"tpot_p50_s", latency(&ReplayReport::tpot, &Latency::p50_ns)},
      {"tpot_p99_s", latency(&ReplayReport::tpot, &Latency::p99_ns)},
      {"itl_mean_s", Cell([](const ReplayReport& r) {
         return r.itl.count > 0 ? fmt::format("{:.9f}", r.itl.mean_ns / 1e9) : std::string();
       })},
      {"itl_p50_s", latency(&ReplayReport::itl, &Latency::p50_ns)},
      {"itl_p99_s", latency(&ReplayReport::itl, &Latency::p99_ns)},
      {"capacity_bytes", integer(&ReplayReport::capacity_bytes)},
      {"preemptions", integer(&ReplayReport::preemptions)},
      {"recomputed_tokens", integer(&ReplayReport::recomputed_tokens)},
      {"swapped_out_bytes", integer(&ReplayReport::swapped_out_bytes)},
      {"swapped_in_bytes", integer(&ReplayReport::swapped_in_bytes)},
      {"refused_too_large", integer(&ReplayReport::rejected_too_large)},
      {"time_at_full_capacity_s", secs([](const ReplayReport& r) { return r.memory_bound_ns; })},
      {"queue_length_mean", decimal([](const ReplayReport& r) { return r.queue_mean; }, 3)},
      {"waiting_p50_s", latency(&ReplayReport::waiting, &Latency::p50_ns)},
      {"waiting_p99_s", latency(&ReplayReport::waiting, &Latency::p99_ns)},
      {"generated_tokens_per_s", decimal([](const ReplayReport& r) { return r.generated_tokens_per_s; }, 3)},
      {"allocated_bytes_at_end", integer(&ReplayReport::allocated_bytes_at_end)},
  };
  // With --replicas: the replicas and which one the row is (empty for their total, and for
  // one engine's run in a sweep that varies --replicas: replicas 1), beside the allocator,
  // which stays the allocator alone (run_name() is for people).
  if (shape.replicas) {
    columns.insert(columns.begin() + 1,
                   {{"replicas", [](const ReplayReport& r) { return std::to_string(std::max<std::int64_t>(1, r.replicas)); }},
                    {"replica", [](const ReplayReport& r) { return r.replica >= 0 ? std::to_string(r.replica) : std::string(); }}});
  }
  if (shape.placement) {  // the same columns on every row: 0 where nothing is placed
    columns.push_back({"external_frag_bytes_mean",
                       decimal([](const ReplayReport& r) { return r.external_fragmentation_bytes_mean; }, 3)});
  }
  if (shape.sharing) {  // the same columns on every row: 0 where an allocator shares nothing
    columns.insert(columns.end(), {
        {"prefix_block_tokens", integer(&ReplayReport::prefix_block_tokens)},
        {"prefix_queried_tokens", integer(&ReplayReport::prefix_queried_tokens)},
        {"prefix_hit_tokens", integer(&ReplayReport::prefix_hit_tokens)},
        {"prefix_hit_rate", share(hit_rate)},
        {"prefix_queried_blocks", integer(&ReplayReport::prefix_queried_blocks)},
        {"prefix_hit_blocks", integer(&ReplayReport::prefix_hit_blocks)},
        {"prefix_preempted_queried_tokens", integer(&ReplayReport::prefix_preempted_queried_tokens)},
        {"prefix_preempted_hit_tokens", integer(&ReplayReport::prefix_preempted_hit_tokens)},
        {"evicted_bytes", integer(&ReplayReport::evicted_bytes)},
        {"evictable_bytes_mean", decimal([](const ReplayReport& r) { return r.evictable_bytes.mean; }, 3)},
        {"evictable_bytes_peak", [](const ReplayReport& r) { return std::to_string(r.evictable_bytes.peak); }},
    });
  }
  return columns;
}

}  // namespace

// A CSV cell: quoted (RFC 4180) when it holds a comma or a quote, as "dynamic:growth=chunk,chunk=64" does.
CsvShape csv_shape(const std::vector<ReplayReport>& reports) {
  return CsvShape{any_placement(reports), any_sharing(reports),
                  std::any_of(reports.begin(), reports.end(), [](const ReplayReport& r) { return r.replicas > 0; })};
}

std::string replay_csv_header(const CsvShape& shape) {
  const auto columns = csv_columns(shape);
  std::string out;
  for (std::size_t i = 0; i < columns.size(); ++i) {
    if (i > 0) out += ',';
    out += columns[i].first;
  }
  return out + '\n';
}

std::string replay_csv_row(const CsvShape& shape, const ReplayReport& report) {
  const auto columns = csv_columns(shape);
  std::string out;
  for (std::size_t i = 0; i < columns.size(); ++i) {
    if (i > 0) out += ',';
    out += columns[i].second(report);
  }
  return out + '\n';
}

std::string replay_csv(const std::vector<ReplayReport>& reports) {
  const CsvShape shape = csv_shape(reports);
  std::string out = replay_csv_header(shape);
  for (const auto& r : reports) out += replay_csv_row(shape, r);
  return out;
}

namespace {

std::string render_csv(const ReplayContext&, const std::vector<ReplayReport>& reports) { return replay_csv(reports); }

}  // namespace

extern constinit const ReportOutput kCsvOutput{
    .option = "csv",
    .help = "also write one CSV row per allocator to this file ('-' for any of these files: standard output, in "
            "place of the table; one of them at most)",
    .render = render_csv};

// The registry, report_outputs.def: one line per output, naming a ReportOutput defined
// `extern constinit const` (seen from here, and set before any code runs): --csv's above,
// --timeline's, --html's and --per-request's in their own files (timeline_output.cc, ...).
// Declared here.
#define KVSIM_REPORT_OUTPUT(output) extern const ReportOutput output;
#include "report_outputs.def"
#undef KVSIM_REPORT_OUTPUT

std::span<const ReportOutput> report_outputs() {
  static const ReportOutput outputs[] = {
#define KVSIM_REPORT_OUTPUT(output) output,
#include "report_outputs.def"
#undef KVSIM_REPORT_OUTPUT
  };
  return outputs;
}

std::string replay_html(const ReplayContext& c, const std::vector<ReplayReport>& reports, std::vector<HtmlRun> runs) {
  HtmlPage page;
  page.title = "kvsim replay " + c.trace;
  // The table's header, line by line, without its first line (the title).
  const std::string header = run_header(c, reports);
  for (std::size_t at = header.find('\n'); at != std::string::npos && at + 1 < header.size();) {
    const std::size_t end = header.find('\n', at + 1);
    std::string line = header.substr(at + 1, end - at - 1);
    if (!line.empty()) page.context.push_back(std::move(line));
    at = end;
  }
  runs.resize(reports.size());
  for (std::size_t i = 0; i < reports.size(); ++i) {
    HtmlRun figures = html_run(reports[i]);
    figures.timeline = std::move(runs[i].timeline);
    figures.ttft_ns = std::move(runs[i].ttft_ns);
    figures.tpot_ns = std::move(runs[i].tpot_ns);
    figures.e2e_ns = std::move(runs[i].e2e_ns);
    runs[i] = std::move(figures);
  }
  page.answers = plain_answers(runs);
  for (const auto& w : warnings(c, reports, true)) page.answers.push_back("Warning: " + w);
  page.runs = std::move(runs);
  return render_html(page);
}

std::string per_request_header() {
  return "allocator,id,ordinal,arrival_s,first_scheduled_s,first_token_s,finish_s,ttft_s,tpot_s,e2e_s,prompt_tokens,"
         "cached_prompt_tokens,output_tokens,preemptions,outcome\n";
}

std::string per_request_row(const std::string& allocator, const RequestRecord& r) {
  // An empty cell (NaN to pandas) for what never happened.
  const auto at = [](std::int64_t ns) { return ns >= 0 ? format_seconds(ns, 9) : std::string(); };
  const bool completed = r.outcome == RequestRecord::Outcome::completed;
  const bool has_first = completed && r.first_token_ns >= 0;
  const std::string ttft = has_first ? format_seconds(r.first_token_ns - r.arrival_ns, 9) : std::string();
  // TPOT as vLLM defines it: the gaps between the first and the last token, per gap.
  const std::string tpot = has_first && r.output_tokens >= 2
                               ? format_seconds((r.finish_ns - r.first_token_ns) / (r.output_tokens - 1), 9)
                               : std::string();
  const std::string e2e = completed ? format_seconds(r.finish_ns - r.arrival_ns, 9) : std::string();
  const char* outcome = completed ? "completed" : r.outcome == RequestRecord::Outcome::cancelled ? "cancelled" : "refused";
  return fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", csv_cell(allocator), csv_cell(r.id), r.ordinal,
                     at(r.arrival_ns), at(r.first_scheduled_ns), at(r.first_token_ns), at(r.finish_ns), ttft, tpot, e2e,
                     r.prompt_tokens, r.cached_prompt_tokens, r.output_tokens, r.preemptions, outcome);
}

void in_trace_order(std::vector<RequestRecord>& records) {
  std::sort(records.begin(), records.end(),
            [](const RequestRecord& a, const RequestRecord& b) { return a.ordinal < b.ordinal; });
}

std::string timeline_header(const KvLayout& layout, bool sampled, bool caching) {
  std::string out = "allocator,time_s,step,running,queued,effective_bytes,allocated_bytes,reserved_bytes";
  for (const auto& g : layout.groups) {
    std::string name = g.name;
    for (char& ch : name) {
      if (ch == ' ') ch = '_';
    }
    out += ",effective_tokens_" + name + ",allocated_slots_" + name;
  }
  if (sampled) out += ",allocated_bytes_max,allocated_bytes_mean";
  if (caching) out += ",cached_bytes,evicted_bytes";
  return out + "\n";
}

std::string timeline_row(const std::string& allocator, const TimelineRow& row, bool caching) {
  std::string out = fmt::format("{},{},{},{},{},{},{},{}", csv_cell(allocator), format_seconds(row.time_ns, 9), row.step,
                                row.running, row.queued, row.effective_bytes, row.allocated_bytes, row.reserved_bytes);
  for (std::size_t g = 0; g < row.effective_tokens.size(); ++g) {
    out += fmt::format(",{},{}", row.effective_tokens[g], row.allocated_slots[g]);
  }
  if (row.allocated_bytes_max >= 0) out += fmt::format(",{},{:.3f}", row.allocated_bytes_max, row.allocated_bytes_mean);
  if (caching) {
    // Empty cells for an allocator of the run that keeps no cache.
    if (row.cached_bytes >= 0) {
      out += fmt::format(",{},{}", row.cached_bytes, row.evicted_bytes);
    } else {
      out += ",,";
    }
  }
  return out + "\n";
}

}  // namespace kvsim::cli
