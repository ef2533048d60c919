// The synthetic trace generator. Everything random goes through detail::Rng, one stream
// per kind of draw (see the Stream enum), in a fixed order per request.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <queue>

#include "block_hash.h"
#include "kvsim/error.h"
#include "kvsim/option_names.h"
#include "kvsim/trace_gen.h"
#include "kvsim/units.h"
#include "random.h"
#include "trace_gen_internal.h"
#include "trace_read.h"

namespace kvsim {
namespace {

using detail::Rng;

constexpr std::int64_t kBillion = 1'000'000'000;

// Stream numbers: part of the output's definition. Never renumber them.
enum Stream : std::uint64_t {
  kPromptStream = 1,
  kOutputStream = 2,
  kMaxTokensStream = 3,
  kCancelStream = 4,
  kSamplesStream = 5,
  kSystemStream = 6,
  kSessionStream = 7,
};

[[noreturn]] void bad(std::string_view field, const std::string& problem) {
  throw InputError(Location{"", 0, std::string(field)}, problem);
}

// The smallest value a count distribution can produce (for options that must be >= 1).
std::int64_t smallest(const CountDistribution& d) {
  switch (d.kind) {
    case CountDistribution::Kind::constant: return d.value;
    case CountDistribution::Kind::uniform: return d.low;
    case CountDistribution::Kind::lognormal: return d.min;
    case CountDistribution::Kind::choice: {
      std::int64_t least = std::numeric_limits<std::int64_t>::max();
      for (const auto& [value, weight] : d.choices) {
        if (weight > 0) least = std::min(least, value);
      }
      return least;
    }
    case CountDistribution::Kind::empirical: return 0;
  }
  return 0;
}

// The largest value a count distribution can produce, when it has one (a lognormal
// without max= has none; empirical lengths come from a trace already read).
std::optional<std::int64_t> largest(const CountDistribution& d) {
  switch (d.kind) {
    case CountDistribution::Kind::constant: return d.value;
    case CountDistribution::Kind::uniform: return d.high;
    case CountDistribution::Kind::lognormal:
      if (d.max == std::numeric_limits<std::int64_t>::max()) return std::nullopt;
      return d.max;
    case CountDistribution::Kind::choice: {
      std::int64_t most = 0;
      for (const auto& [value, weight] : d.choices) {
        if (weight > 0) most = std::max(most, value);
      }
      return most;
    }
    case CountDistribution::Kind::empirical: return std::nullopt;
  }
  return std::nullopt;
}

void validate_count(const CountDistribution& d, std::string_view field, std::int64_t at_least, bool empirical_ok) {
  switch (d.kind) {
    case CountDistribution::Kind::uniform:
      if (d.low > d.high) bad(field, "uniform: the range's low end is above its high end");
      break;
    case CountDistribution::Kind::lognormal: {
      double mu = 0;
      double sigma = 0;
      if (!detail::lognormal_from_mean_p99(d.mean, d.p99, mu, sigma)) {
        bad(field, "lognormal: p99 / mean must be above 1 and below 14.97");
      }
      if (d.min > d.max) bad(field, "lognormal: min is above max");
      break;
    }
    case CountDistribution::Kind::choice: {
      std::int64_t total = 0;
      for (const auto& [value, weight] : d.choices) {
        if (value < 0 || weight < 0 || __builtin_add_overflow(total, weight, &total)) {
          bad(field, "choice: values and weights must be non-negative");
        }
      }
      if (total == 0) bad(field, "choice: the weights add up to 0");
      break;
    }
    case CountDistribution::Kind::empirical:
      if (!empirical_ok) bad(field, std::string("empirical lengths are only for ") + kOptPrompt + " and " + kOptOutput);
      return;
    case CountDistribution::Kind::constant: break;
  }
  if (smallest(d) < at_least) {
    bad(field, "\"" + d.text + "\" can give " + std::to_string(smallest(d)) + "; this needs at least " +
                   std::to_string(at_least));
  }
}

void validate_duration(const DurationDistribution& d, std::string_view field) {
  if (d.value_ns < 0 || d.low_ns < 0 || d.low_ns > d.high_ns || d.p99_ns < 0) bad(field, "invalid duration range");
  if (d.kind == DurationDistribution::Kind::lognormal) {
    double mu = 0;
    double sigma = 0;
    if (!detail::lognormal_from_mean_p99(static_cast<double>(d.value_ns), static_cast<double>(d.p99_ns), mu, sigma)) {
      bad(field, "lognormal: p99 / mean must be above 1 and below 14.97");
    }
  }
}

// Draws from a CountDistribution.
class CountSampler {
 public:
  CountSampler() = default;
  CountSampler(const CountDistribution& d, std::vector<std::int64_t> empirical) : d_(d), empirical_(std::move(empirical)) {
    if (d_.kind == CountDistribution::Kind::lognormal) detail::lognormal_from_mean_p99(d_.mean, d_.p99, mu_, sigma_);
    for (const auto& [value, weight] : d_.choices) total_weight_ += weight;
  }

  std::int64_t sample(Rng& rng) const {
    switch (d_.kind) {
      case CountDistribution::Kind::constant: return d_.value;
      case CountDistribution::Kind::uniform: return rng.uniform_int(d_.low, d_.high);
      case CountDistribution::Kind::lognormal: {
        const std::int64_t v = detail::round_to_int64(detail::det_exp(mu_ + sigma_ * rng.normal()));
        return std::clamp(v, d_.min, d_.max);
      }
      case CountDistribution::Kind::choice: {
        std::int64_t u = rng.uniform_int(0, total_weight_ - 1);
        for (const auto& [value, weight] : d_.choices) {
          if (u < weight) return value;
          u -= weight;
        }
        return d_.choices.back().first;
      }
      case CountDistribution::Kind::empirical:
        return empirical_[static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(empirical_.size()) - 1))];
    }
    return 0;
  }

 private:
  CountDistribution d_;
  std::vector<std::int64_t> empirical_;
  double mu_ = 0;
  double sigma_ = 0;
  std::int64_t total_weight_ = 0;
};

class DurationSampler {
 public:
  DurationSampler() = default;
  explicit DurationSampler(const DurationDistribution& d) : d_(d) {
    if (d_.kind == DurationDistribution::Kind::lognormal) {
      detail::lognormal_from_mean_p99(static_cast<double>(d_.value_ns), static_cast<double>(d_.p99_ns), mu_, sigma_);
    }
  }

  std::int64_t sample(Rng& rng) const {
    switch (d_.kind) {
      case DurationDistribution::Kind::constant: return d_.value_ns;
      case DurationDistribution::Kind::uniform: return rng.uniform_int(d_.low_ns, d_.high_ns);
      case DurationDistribution::Kind::exponential:
        return detail::round_to_int64(rng.exponential() * static_cast<double>(d_.value_ns));
      case DurationDistribution::Kind::lognormal:
        return std::max<std::int64_t>(0, detail::round_to_int64(detail::det_exp(mu_ + sigma_ * rng.normal())));
    }
    return 0;
  }

 private:
  DurationDistribution d_;
  double mu_ = 0;
  double sigma_ = 0;
};

// The times of new arrivals (sessions' later turns are scheduled separately).
class ArrivalClock {
 public:
  ArrivalClock(const ArrivalProcess& p, std::uint64_t seed) : p_(p), rng_(seed, detail::kArrivalStream) {}

  // The next arrival, or past_end() when it falls after the largest representable time.
  std::int64_t next() {
    if (past_end_) return now_;
    switch (p_.kind) {
      case ArrivalProcess::Kind::poisson:
        // The same draws as the length-only importer's, so that both give the same times.
        advance(detail::poisson_gap_ns(rng_, p_.rate_per_s));
        break;
      case ArrivalProcess::Kind::gamma: {
        // Gaps with mean 1 / rate and coefficient of variation cv: shape 1 / cv^2.
        const double shape = 1.0 / (p_.cv * p_.cv);
        advance(detail::round_to_int64(rng_.gamma(shape) / (shape * p_.rate_per_s) * 1e9));
        break;
      }
      case ArrivalProcess::Kind::onoff:
        advance_onoff();
        break;
    }
    return now_;
  }
  bool past_end() const { return past_end_; }

 private:
  // A gap (saturated at the largest 64-bit value for a tiny rate) that would carry time past
  // the largest representable instant ends the clock instead of wrapping it negative.
  void advance(std::int64_t gap_ns) {
    if (gap_ns > std::numeric_limits<std::int64_t>::max() - now_) {
      past_end_ = true;
      now_ = std::numeric_limits<std::int64_t>::max();
    } else {
      now_ += gap_ns;
    }
  }

  // A Poisson process whose rate switches between on and off periods: one unit-rate
  // exponential draw is the expected arrivals to wait for, spent window by window at each
  // window's rate (the inverse of the cumulative rate), whole cycles at once. Each arrival
  // takes one draw and a few steps however short the on period or slow the off rate; drawing
  // candidates at the peak rate and thinning them took (on + off) / on candidates an arrival,
  // which never ended for a nanosecond's on period.
  void advance_onoff() {
    const std::int64_t cycle = p_.on_ns + p_.off_ns;  // validated: on > 0, off >= 0
    const double cycle_expected = (p_.rate_per_s * static_cast<double>(p_.on_ns) +
                                   p_.off_rate_per_s * static_cast<double>(p_.off_ns)) / 1e9;
    double need = rng_.exponential();
    while (!past_end_) {
      const std::int64_t at = now_ % cycle;
      if (at == 0) {  // a cycle's start: skip the whole cycles the draw spans
        const double whole = std::floor(need / cycle_expected);
        if (whole >= static_cast<double>(std::numeric_limits<std::int64_t>::max() / cycle)) {
          advance(std::numeric_limits<std::int64_t>::max());
          break;
        }
        if (whole >= 1) {
          advance(static_cast<std::int64_t>(whole) * cycle);
          need -= whole * cycle_expected;  // at least one cycle's worth less: this ends
          continue;
        }
      }
      const bool on = at < p_.on_ns;
      const std::int64_t left_ns = on ? p_.on_ns - at : cycle - at;
      const double rate = on ? p_.rate_per_s : p_.off_rate_per_s;
      const double window_expected = rate * static_cast<double>(left_ns) / 1e9;
      if (rate > 0 && need <= window_expected) {
        // Inside the window: its end belongs to the next one.
        advance(std::min(left_ns - 1, detail::round_to_int64(need / rate * 1e9)));
        break;
      }
      need -= window_expected;
      advance(left_ns);
    }
  }

  ArrivalProcess p_;
  Rng rng_;
  std::int64_t now_ = 0;
  bool past_end_ = false;
};

// The prefix-hash state of a prompt's text so far. Text is made of segments (a system
// prompt, a user message, a model answer), each with its own id; the token at offset j of
// segment s stands for id s * 2^32 + j, and blocks are hashed as in block_hash.h.
//
// The trace writes block numbers, not the 64-bit hashes: 0, 1, 2, ... in the order blocks
// are first written. A block is shared only by copying the Prefix that holds it (a system
// prompt's, a session's context), so each block's number travels with it, and no table of
// every block ever written is kept (at 16 tokens a block that table had grown by 3.4 KB a
// request, 6.8 GB for 2M). The hasher appends each full block's hash to `blocks`; writing
// the block replaces the hash, which nothing reads, by the number.
struct Prefix {
  std::vector<std::uint64_t> blocks;  // [0, numbered): numbers; the rest: hashes
  std::size_t numbered = 0;
  detail::BlockHasher hasher{1, nullptr};
  std::int64_t tokens = 0;

  void feed(std::uint64_t segment, std::int64_t count) {
    // Every token is hashed and every block's hash written: past the limit a prompt would
    // cost gigabytes and hours (2^40 tokens), so it is refused instead.
    if (count > kMaxHashedPromptTokens - tokens) {
      throw InputError(Location{"", 0, std::string(kOptSystemPrompt) + "/" + kOptSessions},
                       "a prompt with prefix hashes would hold more than " + std::to_string(kMaxHashedPromptTokens) +
                           " tokens, the most trace gen hashes: use shorter system prompts, turns or a max_context");
    }
    hasher.set_output(&blocks);
    for (std::int64_t j = 0; j < count; ++j) hasher.add((segment << 32) + static_cast<std::uint64_t>(j));
    tokens += count;
  }
};

struct Session {
  std::string name;
  std::int64_t turns_left = 0;
  Prefix context;  // every prompt and answer so far
};

struct Pending {
  std::int64_t arrival_ns;
  std::uint64_t sequence;  // ties resolve in scheduling order
  std::uint64_t session;
  bool operator>(const Pending& o) const {
    return arrival_ns != o.arrival_ns ? arrival_ns > o.arrival_ns : sequence > o.sequence;
  }
};

std::vector<std::pair<std::int64_t, std::int64_t>> load_pairs(const std::string& path) {
  TraceOptions options;
  options.sort = true;                 // order does not matter for lengths
  options.synthetic_rate_per_s = 1;    // lengths-only files need some arrival process
  std::vector<std::pair<std::int64_t, std::int64_t>> pairs;
  auto reader = open_trace(path, options);
  Request r;
  while (reader->next(r)) pairs.emplace_back(r.prompt_tokens, r.output_tokens);
  return pairs;
}

}  // namespace

GenOptions::GenOptions() {
  // Defaults shaped like Azure's 2023 conversation trace (../shared/traces/README.md).
  arrivals.rate_per_s = 5.5;
  prompt_tokens = parse_count_distribution("lognormal:mean=1155,p99=4142,max=14050", kOptPrompt);
  output_tokens = parse_count_distribution("lognormal:mean=211,p99=601,max=1000", kOptOutput);
  n = parse_count_distribution("1", kOptN);
}

void validate_gen_options(const GenOptions& o) {
  if (o.requests < 0) bad(kOptRequests, "must not be negative");
  if (o.duration_ns < 0) bad(kOptDuration, "must not be negative");
  if (o.requests == 0 && o.duration_ns == 0) bad(kOptRequests, std::string("give ") + kOptRequests + " N, " + kOptDuration + " D, or both");
  const auto& a = o.arrivals;
  if (!(a.rate_per_s > 0)) bad(kOptArrivals, "the rate must be above 0");
  if (a.kind == ArrivalProcess::Kind::gamma && !(a.cv > 0)) bad(kOptArrivals, "gamma: cv must be above 0");
  if (a.kind == ArrivalProcess::Kind::onoff && (a.on_ns <= 0 || a.off_ns < 0 || a.off_rate_per_s < 0)) {
    bad(kOptArrivals, "onoff: on must be above 0, off and off_rate not negative");
  }
  if (o.lengths_from.empty()) {
    validate_count(o.prompt_tokens, kOptPrompt, 0, true);
    validate_count(o.output_tokens, kOptOutput, 0, true);
  }
  validate_count(o.n, kOptN, 1, false);
  // What the readers would refuse (trace_read.h), refused before anything is written.
  if (const auto most = largest(o.n); most && *most > detail::kMaxSamples) {
    bad(kOptN, "\"" + o.n.text + "\" can give " + std::to_string(*most) + "; a trace holds at most " +
                   std::to_string(detail::kMaxSamples) + " parallel samples");
  }
  if (o.max_tokens.kind == MaxTokensPolicy::Kind::factor && o.max_tokens.factor_ppb < kBillion) {
    bad(kOptMaxTokens, "factor: must be at least 1");
  }
  // Engines require max_tokens >= 1: a cap that can give 0 is refused (lognormal: its min).
  if (o.max_tokens.kind == MaxTokensPolicy::Kind::cap) validate_count(o.max_tokens.cap, kOptMaxTokens, 1, false);
  if (o.max_tokens.share_ppb < 0 || o.max_tokens.share_ppb > kBillion) bad(kOptMaxTokensShare, "must be in [0, 1]");
  // A share of 0 asks for something no request gets: it would change nothing (a usage error,
  // as every option that would have no effect), here and for the clauses below.
  constexpr const char* kNone = " is 0: no request would get it, so it would have no effect";
  if (o.max_tokens.kind != MaxTokensPolicy::Kind::none && o.max_tokens.share_ppb == 0) {
    bad(kOptMaxTokensShare, std::string("the share") + kNone);
  }
  std::int64_t cancel_total = 0;
  for (const auto& c : o.cancel) {
    if (c.probability_ppb < 0) bad(kOptCancel, "p must not be negative");
    if (c.probability_ppb == 0) bad(kOptCancel, std::string("p") + kNone);
    cancel_total += c.probability_ppb;
    validate_duration(c.after, kOptCancel);
  }
  if (cancel_total > kBillion) bad(kOptCancel, std::string("the probabilities of the ") + kOptCancel + " clauses add up to more than 1");
  std::int64_t system_total = 0;
  for (const auto& s : o.system_prompts) {
    if (s.tokens < 1 || s.share_ppb < 0) bad(kOptSystemPrompt, "tokens must be at least 1 and share not negative");
    if (s.share_ppb == 0) bad(kOptSystemPrompt, std::string("share") + kNone);
    if (s.tokens > kMaxHashedPromptTokens) {
      bad(kOptSystemPrompt, "tokens=" + std::to_string(s.tokens) + " is more than " +
                                std::to_string(kMaxHashedPromptTokens) + ", the most trace gen hashes in one prompt");
    }
    system_total += s.share_ppb;
  }
  if (system_total > kBillion) bad(kOptSystemPrompt, "the shares of the system prompts add up to more than 1");
  if (o.sessions) {
    const auto& s = *o.sessions;
    if (s.share_ppb < 0 || s.share_ppb > kBillion) bad(kOptSessions, "share must be in [0, 1]");
    if (s.share_ppb == 0) bad(kOptSessions, std::string("share") + kNone);
    validate_count(s.turns, kOptSessions, 1, false);
    validate_duration(s.gap, kOptSessions);
    if (s.user_tokens) validate_count(*s.user_tokens, kOptSessions, 0, true);
    // A later turn's lengths come from the file as (prompt, output) pairs, whose prompt is
    // the new user message: a user= distribution would not be drawn from.
    if (s.user_tokens && !o.lengths_from.empty()) {
      bad(kOptSessions, std::string("user= sets a later turn's new message, which ") + kOptLengthsFrom +
                            " gives with its (prompt, output) pairs: it would have no effect");
    }
    if (s.max_context_tokens < 0) bad(kOptSessions, "max_context must not be negative");
  }
  if (o.block_tokens < 1) bad(kOptBlockTokens, "must be at least 1");
}

struct TraceGenerator::State {
  explicit State(const GenOptions& options)
      : o(options),
        clock(options.arrivals, options.seed),
        prompt_rng(options.seed, kPromptStream),
        output_rng(options.seed, kOutputStream),
        max_rng(options.seed, kMaxTokensStream),
        cancel_rng(options.seed, kCancelStream),
        n_rng(options.seed, kSamplesStream),
        system_rng(options.seed, kSystemStream),
        session_rng(options.seed, kSessionStream) {}

  GenOptions o;
  ArrivalClock clock;
  Rng prompt_rng, output_rng, max_rng, cancel_rng, n_rng, system_rng, session_rng;
  CountSampler prompt, output, n, cap, turns, user;
  DurationSampler gap;
  std::vector<DurationSampler> cancel_after;
  std::vector<std::pair<std::int64_t, std::int64_t>> pairs;  // --lengths-from
  bool prefixes = false;
  std::vector<Prefix> system_prefixes;
  std::uint64_t next_block_number = 0;  // blocks written so far (Prefix::blocks)
  std::uint64_t next_segment = 0;
  std::int64_t next_new_ns = 0;
  std::int64_t emitted = 0;
  std::uint64_t sessions_started = 0;
  std::uint64_t scheduled = 0;
  std::map<std::uint64_t, Session> sessions;
  std::priority_queue<Pending, std::vector<Pending>, std::greater<>> pending;

  Prefix empty_prefix() const {
    Prefix p;
    p.hasher = detail::BlockHasher(o.block_tokens, nullptr);
    return p;
  }

  // (fresh prompt tokens, output tokens) for a new request or a session's later turn.
  std::pair<std::int64_t, std::int64_t> lengths(const CountSampler& prompt_sampler) {
    if (!pairs.empty()) {
      return pairs[static_cast<std::size_t>(prompt_rng.uniform_int(0, static_cast<std::int64_t>(pairs.size()) - 1))];
    }
    const std::int64_t p = prompt_sampler.sample(prompt_rng);
    return {p, output.sample(output_rng)};
  }

  // Numbers the blocks of `p` not numbered yet, in order.
  void number_blocks(Prefix& p) {
    for (; p.numbered < p.blocks.size(); ++p.numbered) p.blocks[p.numbered] = next_block_number++;
  }

  // Fills in what every request gets: prompt and its block numbers, output, max_tokens,
  // cancel, n.
  void finish(Request& out, Prefix& prompt, std::int64_t prompt_tokens, std::int64_t output_tokens) {
    out.prompt_tokens = prompt_tokens;
    if (prefixes) {
      out.prefix_block_tokens = o.block_tokens;
      number_blocks(prompt);
      out.prefix_hashes.assign(prompt.blocks.begin(), prompt.blocks.end());
    }
    out.output_tokens = output_tokens;
    const auto& m = o.max_tokens;
    if (m.kind != MaxTokensPolicy::Kind::none && max_rng.bernoulli_ppb(m.share_ppb)) {
      switch (m.kind) {
        case MaxTokensPolicy::Kind::output: out.max_tokens = output_tokens; break;
        case MaxTokensPolicy::Kind::factor: {
          __extension__ typedef __int128 Wide;
          const Wide scaled = Wide{output_tokens} * m.factor_ppb;
          out.max_tokens = static_cast<std::int64_t>((scaled + kBillion - 1) / kBillion);
          break;
        }
        case MaxTokensPolicy::Kind::cap: {
          const std::int64_t limit = cap.sample(max_rng);
          out.max_tokens = limit;
          out.output_tokens = std::min(output_tokens, limit);  // generation stops at the limit
          break;
        }
        case MaxTokensPolicy::Kind::none: break;
      }
      // output and factor: a request of 0 output tokens would get the limit 0.
      if (out.max_tokens == 0) {
        bad(kOptMaxTokens, "request " + out.id +
                               " has 0 output tokens, so its generation limit (output or factor) would be 0: engines "
                               "require max_tokens >= 1; give outputs of at least 1 token, or a cap");
      }
    }
    // What the readers would refuse, refused here: a trace kvsim cannot read back is no use.
    const std::pair<std::string_view, std::int64_t> lengths[] = {
        {o.sessions ? kOptSessions : kOptPrompt, out.prompt_tokens},
        {kOptOutput, out.output_tokens},
        {kOptMaxTokens, out.max_tokens.value_or(0)}};
    for (const auto& [field, value] : lengths) {
      if (value > kMaxRequestTokens) {
        bad(field, "a request of " + std::to_string(value) + " tokens; a trace holds at most " +
                       std::to_string(kMaxRequestTokens) + " per prompt, output or max_tokens");
      }
    }
    if (!o.cancel.empty()) {
      std::int64_t u = cancel_rng.uniform_int(0, kBillion - 1);
      for (std::size_t i = 0; i < o.cancel.size(); ++i) {
        if (u < o.cancel[i].probability_ppb) {
          out.cancel_ns = checked_add(out.arrival_ns, cancel_after[i].sample(cancel_rng), "cancellation time");
          break;
        }
        u -= o.cancel[i].probability_ppb;
      }
    }
    out.n = n.sample(n_rng);
    if (out.n > detail::kMaxSamples) {
      bad(kOptN, "a request of " + std::to_string(out.n) + " parallel samples; a trace holds at most " +
                     std::to_string(detail::kMaxSamples));
    }
  }

  void schedule(std::uint64_t session, std::int64_t after_ns) {
    const std::int64_t at = checked_add(after_ns, gap.sample(session_rng), "session turn time");
    pending.push({at, scheduled++, session});
  }

  void emit_new(std::int64_t arrival_ns, Request& out) {
    out.id = std::to_string(++emitted);
    out.arrival_ns = arrival_ns;
    int system = -1;
    if (!o.system_prompts.empty()) {
      std::int64_t u = system_rng.uniform_int(0, kBillion - 1);
      for (std::size_t i = 0; i < o.system_prompts.size(); ++i) {
        if (u < o.system_prompts[i].share_ppb) {
          system = static_cast<int>(i);
          break;
        }
        u -= o.system_prompts[i].share_ppb;
      }
    }
    const bool starts_session = o.sessions && session_rng.bernoulli_ppb(o.sessions->share_ppb);
    const auto [fresh, output_tokens] = lengths(prompt);
    // A system prompt's blocks are numbered where every copy of them starts from.
    if (system >= 0 && prefixes) number_blocks(system_prefixes[static_cast<std::size_t>(system)]);
    Prefix text = system >= 0 ? system_prefixes[static_cast<std::size_t>(system)] : empty_prefix();
    if (prefixes) text.feed(next_segment++, fresh);
    const std::int64_t system_tokens = system >= 0 ? o.system_prompts[static_cast<std::size_t>(system)].tokens : 0;
    finish(out, text, checked_add(system_tokens, fresh, "prompt tokens"), output_tokens);
    if (!starts_session) return;
    const std::uint64_t id = ++sessions_started;
    out.session = 's';
    out.session += std::to_string(id);
    const std::int64_t turns_total = turns.sample(session_rng);
    if (turns_total <= 1 || out.cancel_ns) return;
    Session s{out.session, turns_total - 1, std::move(text)};
    s.context.feed(next_segment++, out.output_tokens);
    sessions.emplace(id, std::move(s));
    schedule(id, arrival_ns);
  }

  // False when the session ended instead (its next prompt would exceed max_context).
  bool emit_turn(const Pending& p, Request& out) {
    auto it = sessions.find(p.session);
    Session& s = it->second;
    const auto [user_tokens, output_tokens] = lengths(user);
    const std::int64_t prompt_tokens = checked_add(s.context.tokens, user_tokens, "prompt tokens");
    if (o.sessions->max_context_tokens > 0 && prompt_tokens > o.sessions->max_context_tokens) {
      sessions.erase(it);
      return false;
    }
    out.id = std::to_string(++emitted);
    out.arrival_ns = p.arrival_ns;
    out.session = s.name;
    Prefix text = s.context;
    text.feed(next_segment++, user_tokens);
    finish(out, text, prompt_tokens, output_tokens);
    if (--s.turns_left == 0 || out.cancel_ns) {
      sessions.erase(it);
      return true;
    }
    s.context = std::move(text);
    s.context.feed(next_segment++, out.output_tokens);
    schedule(p.session, p.arrival_ns);
    return true;
  }
};

TraceGenerator::TraceGenerator(const GenOptions& options) {
  validate_gen_options(options);
  state_ = std::make_unique<State>(options);
  State& s = *state_;
  if (!options.lengths_from.empty()) {
    s.pairs = load_pairs(options.lengths_from);
  } else {
    const auto column = [](const CountDistribution& d, bool prompt) {
      std::vector<std::int64_t> values;
      if (d.kind != CountDistribution::Kind::empirical) return values;
      for (const auto& [p, o] : load_pairs(d.path)) values.push_back(prompt ? p : o);
      return values;
    };
    s.prompt = CountSampler(options.prompt_tokens, column(options.prompt_tokens, true));
    s.output = CountSampler(options.output_tokens, column(options.output_tokens, false));
  }
  s.n = CountSampler(options.n, {});
  if (options.max_tokens.kind == MaxTokensPolicy::Kind::cap) s.cap = CountSampler(options.max_tokens.cap, {});
  for (const auto& c : options.cancel) s.cancel_after.emplace_back(c.after);
  s.prefixes = !options.system_prompts.empty() || options.sessions.has_value();
  for (const auto& sp : options.system_prompts) {
    Prefix p = s.empty_prefix();
    p.feed(s.next_segment++, sp.tokens);
    s.system_prefixes.push_back(std::move(p));
  }
  if (options.sessions) {
    const auto& m = *options.sessions;
    s.turns = CountSampler(m.turns, {});
    s.gap = DurationSampler(m.gap);
    if (m.user_tokens) {
      std::vector<std::int64_t> values;
      if (m.user_tokens->kind == CountDistribution::Kind::empirical) {
        for (const auto& [p, o] : load_pairs(m.user_tokens->path)) values.push_back(p);
      }
      s.user = CountSampler(*m.user_tokens, std::move(values));
    } else {
      s.user = s.prompt;
    }
  }
  s.next_new_ns = s.clock.next();
}

TraceGenerator::~TraceGenerator() = default;

bool TraceGenerator::next(Request& out) {
  State& s = *state_;
  for (;;) {
    if (s.o.requests > 0 && s.emitted >= s.o.requests) return false;
    const bool turn = !s.pending.empty() && s.pending.top().arrival_ns <= s.next_new_ns;
    const std::int64_t at = turn ? s.pending.top().arrival_ns : s.next_new_ns;
    if (s.o.duration_ns > 0 && at > s.o.duration_ns) return false;
    if (!turn && s.clock.past_end()) {
      bad(kOptArrivals, "request " + std::to_string(s.emitted + 1) + " would arrive after the largest representable "
                        "time (" + std::to_string(std::numeric_limits<std::int64_t>::max()) +
                        " ns, about 292 years); raise the rate or ask for fewer requests");
    }
    detail::reset_request(out);
    if (turn) {
      const Pending p = s.pending.top();
      s.pending.pop();
      if (s.emit_turn(p, out)) return true;
      continue;
    }
    s.next_new_ns = s.clock.next();
    s.emit_new(at, out);
    return true;
  }
}

TraceColumns TraceGenerator::columns() const {
  const GenOptions& o = state_->o;
  TraceColumns c;
  c.max_tokens = o.max_tokens.kind != MaxTokensPolicy::Kind::none && o.max_tokens.share_ppb > 0;
  for (const auto& clause : o.cancel) c.cancel_at = c.cancel_at || clause.probability_ppb > 0;
  c.n = !(o.n.kind == CountDistribution::Kind::constant && o.n.value == 1);
  c.session = o.sessions.has_value() && o.sessions->share_ppb > 0;
  c.prefix = state_->prefixes;
  return c;
}

}  // namespace kvsim
