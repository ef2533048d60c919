#include "kvsim/trace_stats.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_set>

#include "block_hash.h"
#include "hash_table.h"
#include "kvsim/error.h"
#include "kvsim/option_names.h"
#include "kvsim/units.h"

namespace kvsim {

struct TraceStatsBuilder::State {
  std::vector<std::int64_t> prompts;
  std::vector<std::int64_t> outputs;
  std::int64_t first_arrival_ns = 0;
  std::int64_t last_arrival_ns = 0;
  // Welford's running mean and sum of squared deviations of the inter-arrival gaps (ns).
  std::int64_t gaps = 0;
  double gap_mean = 0;
  double gap_m2 = 0;
  TraceStats counts;
  detail::HashSet64 hashes;  // the chains of every prompt block seen
  std::unordered_set<std::string> sessions;
};

namespace {

LengthSummary summarize(std::vector<std::int64_t> values, std::string_view name) {
  LengthSummary s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  for (auto v : values) s.total = checked_add(s.total, v, name);
  // Means are computed from the exact total; the division is the only rounding.
  s.mean = static_cast<double>(s.total) / static_cast<double>(values.size());
  s.min = values.front();
  s.p50 = nearest_rank_percentile(values, 50);
  s.p90 = nearest_rank_percentile(values, 90);
  s.p99 = nearest_rank_percentile(values, 99);
  s.max = values.back();
  return s;
}

// 1154.697 -> "1,154.7" (fixed decimals, thousands separated).
std::string fixed(double value, int decimals) {
  std::string text = fmt::format("{:.{}f}", value, decimals);
  const auto dot = text.find('.');
  std::string whole = text.substr(0, dot);
  const std::string frac = dot == std::string::npos ? "" : text.substr(dot);
  const bool negative = !whole.empty() && whole.front() == '-';
  if (negative) whole.erase(0, 1);
  std::string grouped;
  for (std::size_t i = 0; i < whole.size(); ++i) {
    if (i > 0 && (whole.size() - i) % 3 == 0) grouped += ',';
    grouped += whole[i];
  }
  return (negative ? "-" : "") + grouped + frac;
}

std::string percent(std::int64_t part, std::int64_t whole) {
  if (whole == 0) return "0.0%";
  return fixed(100.0 * static_cast<double>(part) / static_cast<double>(whole), 1) + "%";
}

}  // namespace

std::int64_t nearest_rank_percentile(const std::vector<std::int64_t>& sorted, int p) {
  check(!sorted.empty() && p > 0 && p <= 100, "nearest_rank_percentile: empty input or p out of (0, 100]");
  const auto n = static_cast<std::int64_t>(sorted.size());
  const std::int64_t rank = ceil_div(p * n, 100);  // ceil(p / 100 * n), in integers
  return sorted[static_cast<std::size_t>(rank - 1)];
}

double TraceStats::prefix_block_reuse() const {
  return prefix_blocks == 0 ? 0.0 : static_cast<double>(prefix_blocks_seen) / static_cast<double>(prefix_blocks);
}

double TraceStats::prefix_token_reuse() const {
  return prefix_tokens == 0 ? 0.0 : static_cast<double>(prefix_tokens_seen) / static_cast<double>(prefix_tokens);
}

TraceStatsBuilder::TraceStatsBuilder() : state_(std::make_unique<State>()) {}
TraceStatsBuilder::~TraceStatsBuilder() = default;

void TraceStatsBuilder::add(const Request& r) {
  State& s = *state_;
  TraceStats& c = s.counts;
  if (c.requests == 0) {
    s.first_arrival_ns = r.arrival_ns;
  } else {
    const double gap = static_cast<double>(r.arrival_ns - s.last_arrival_ns);
    ++s.gaps;
    const double delta = gap - s.gap_mean;
    s.gap_mean += delta / static_cast<double>(s.gaps);
    s.gap_m2 += delta * (gap - s.gap_mean);
  }
  s.last_arrival_ns = r.arrival_ns;
  ++c.requests;
  s.prompts.push_back(r.prompt_tokens);
  s.outputs.push_back(r.output_tokens);
  if (r.cancel_ns) ++c.cancelled;
  if (r.max_tokens) ++c.with_max_tokens;
  if (r.n > 1) ++c.parallel_requests;
  c.samples = checked_add(c.samples, r.n, "the sum of n over the trace");
  if (!r.session.empty()) {
    ++c.session_requests;
    s.sessions.insert(r.session);
  }
  if (r.has_service_times()) ++c.with_service_times;
  // A request carries prefix identity when its block size is given, even with no full block
  // to hash (a token-id prompt shorter than --hash-block-tokens): its tokens are prompt tokens
  // that could have been reused, and the share below is of all of them.
  if (r.prefix_block_tokens > 0) {
    if (c.prefix_block_tokens == 0) {
      c.prefix_block_tokens = r.prefix_block_tokens;
    } else if (c.prefix_block_tokens != r.prefix_block_tokens) {
      c.prefix_block_tokens = -1;
    }
    ++c.prefix_requests;
    c.prefix_tokens = checked_add(c.prefix_tokens, r.prompt_tokens, "the sum of prompt_tokens over the trace");
    // A block is seen before when its whole prefix was: the chain of the hashes up to it
    // (block_hash.h), as the replay's prefix caches compare them. The chain starts from the
    // block size: a 32-token block's hash and a 16-token block's hash name different prefixes
    // even when the numbers are equal.
    auto chain = static_cast<std::uint64_t>(r.prefix_block_tokens);
    for (std::size_t i = 0; i < r.prefix_hashes.size(); ++i) {
      ++c.prefix_blocks;
      chain = detail::chain_given_hash(chain, r.prefix_hashes[i]);
      if (!s.hashes.insert(chain)) {
        ++c.prefix_blocks_seen;
        const std::int64_t block_start = static_cast<std::int64_t>(i) * r.prefix_block_tokens;
        c.prefix_tokens_seen += std::min(r.prefix_block_tokens, r.prompt_tokens - block_start);  // <= prefix_tokens
      }
    }
  }
}

TraceStats TraceStatsBuilder::finish() const {
  const State& s = *state_;
  TraceStats out = s.counts;
  out.first_arrival_ns = s.first_arrival_ns;
  out.last_arrival_ns = s.last_arrival_ns;
  out.duration_ns = s.last_arrival_ns - s.first_arrival_ns;
  if (s.gaps > 0 && out.duration_ns > 0) {
    out.rate_per_s = static_cast<double>(s.gaps) * 1e9 / static_cast<double>(out.duration_ns);
    out.interarrival_cv = std::sqrt(s.gap_m2 / static_cast<double>(s.gaps)) / s.gap_mean;
  }
  out.prompt_tokens = summarize(s.prompts, "the sum of prompt_tokens over the trace");
  out.output_tokens = summarize(s.outputs, "the sum of output_tokens over the trace");
  out.sessions = static_cast<std::int64_t>(s.sessions.size());
  return out;
}

TraceStats compute_trace_stats(TraceReader& reader) {
  TraceStatsBuilder builder;
  Request r;
  try {
    while (reader.next(r)) builder.add(r);
    TraceStats stats = builder.finish();
    stats.dropped = reader.dropped();
    return stats;
  } catch (const InputError& e) {
    // A total that does not fit (lengths near 2^63) is the file's fault: say which file.
    if (!e.where().file.empty()) throw;
    throw InputError(Location{reader.path(), 0, ""}, e.problem());
  }
}

std::string format_trace_stats(const TraceStats& s) {
  std::string out;
  const auto line = [&](std::string_view name, const std::string& value) {
    out += fmt::format("{:<18} {}\n", name, value);
  };
  line("requests", with_commas(s.requests));
  if (s.dropped > 0) {
    line("dropped", with_commas(s.dropped) + " failed requests (0 response tokens), in no figure below; " +
                        kOptKeepFailed + " keeps them as cancelled at arrival");
  }
  line("duration", fixed(static_cast<double>(s.duration_ns) / 1e9, 3) + " s (first to last arrival)");
  const std::string at_once = "n/a (every arrival at one instant)";
  line("rate", s.rate_per_s ? fixed(*s.rate_per_s, 3) + " requests/s (1 / mean inter-arrival gap)" : at_once);
  line("inter-arrival CV",
       s.interarrival_cv ? fixed(*s.interarrival_cv, 3) + " (1 for Poisson arrivals, above 1 for bursts)" : at_once);
  out += fmt::format("{:<18} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8}\n", "lengths (tokens)", "mean", "min", "p50", "p90",
                     "p99", "max");
  for (const auto& [name, l] : {std::pair{"  prompt", &s.prompt_tokens}, std::pair{"  output", &s.output_tokens}}) {
    out += fmt::format("{:<18} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8}\n", name, fixed(l->mean, 1), with_commas(l->min),
                       with_commas(l->p50), with_commas(l->p90), with_commas(l->p99), with_commas(l->max));
  }
  line("", "(percentiles nearest-rank; output per sample)");
  line("cancelled", with_commas(s.cancelled) + " (" + percent(s.cancelled, s.requests) + ")");
  line("max_tokens given", with_commas(s.with_max_tokens) + " (" + percent(s.with_max_tokens, s.requests) + ")");
  line("parallel samples",
       with_commas(s.parallel_requests) + (s.parallel_requests == 1 ? " request" : " requests") + " with n > 1; " +
           with_commas(s.samples) + (s.samples == 1 ? " sample" : " samples") + " in all");
  line("sessions", s.sessions == 0 ? "none"
                                   : with_commas(s.sessions) + " (" + with_commas(s.session_requests) + " requests)");
  line("service times", with_commas(s.with_service_times) + " requests");
  if (s.prefix_requests == 0) {
    line("prefix reuse", "no prefix hashes");
  } else if (s.prefix_blocks == 0) {
    line("prefix reuse", s.prefix_block_tokens > 0
                             ? "no prompt holds a full block of " + with_commas(s.prefix_block_tokens) + " tokens"
                             : "no prompt holds a full block");
  } else {
    const std::string block =
        s.prefix_block_tokens > 0 ? with_commas(s.prefix_block_tokens) + " tokens per block" : "mixed block sizes";
    line("prefix reuse", percent(s.prefix_blocks_seen, s.prefix_blocks) + " of " + with_commas(s.prefix_blocks) +
                             " prompt blocks seen before (" + block + ")");
    line("", percent(s.prefix_tokens_seen, s.prefix_tokens) + " of " + with_commas(s.prefix_tokens) +
                 " prompt tokens in those blocks");
  }
  return out;
}

std::string trace_stats_json(const TraceStats& s) {
  using json = nlohmann::ordered_json;
  const auto lengths = [](const LengthSummary& l) {
    return json{{"mean", l.mean}, {"min", l.min}, {"p50", l.p50}, {"p90", l.p90},
                {"p99", l.p99},   {"max", l.max}, {"total", l.total}};
  };
  json j;
  j["requests"] = s.requests;
  j["dropped_failed_requests"] = s.dropped;
  j["first_arrival_ns"] = s.first_arrival_ns;
  j["last_arrival_ns"] = s.last_arrival_ns;
  j["duration_ns"] = s.duration_ns;
  j["rate_per_s"] = s.rate_per_s ? json(*s.rate_per_s) : json(nullptr);
  j["interarrival_cv"] = s.interarrival_cv ? json(*s.interarrival_cv) : json(nullptr);
  j["prompt_tokens"] = lengths(s.prompt_tokens);
  j["output_tokens"] = lengths(s.output_tokens);
  j["percentiles"] = "nearest-rank";
  j["cancelled"] = s.cancelled;
  j["with_max_tokens"] = s.with_max_tokens;
  j["parallel_requests"] = s.parallel_requests;
  j["samples"] = s.samples;
  j["session_requests"] = s.session_requests;
  j["sessions"] = s.sessions;
  j["with_service_times"] = s.with_service_times;
  // Null where there is no figure: no prefix hashes (and no reuse to give), or block sizes
  // that differ between requests (the table says "mixed block sizes").
  const auto or_null = [](bool known, auto v) { return known ? json(v) : json(); };
  j["prefix_block_tokens"] = or_null(s.prefix_block_tokens > 0, s.prefix_block_tokens);
  j["prefix_requests"] = s.prefix_requests;
  j["prefix_blocks"] = s.prefix_blocks;
  j["prefix_blocks_seen"] = s.prefix_blocks_seen;
  j["prefix_block_reuse"] = or_null(s.prefix_blocks > 0, s.prefix_block_reuse());
  j["prefix_tokens"] = s.prefix_tokens;
  j["prefix_tokens_seen"] = s.prefix_tokens_seen;
  j["prefix_token_reuse"] = or_null(s.prefix_tokens > 0, s.prefix_token_reuse());
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace kvsim
