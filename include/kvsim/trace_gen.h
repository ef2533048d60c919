// Synthetic request traces: what `kvsim trace gen` writes.
//
// A TraceGenerator draws requests from an arrival process and from distributions of
// prompt and output lengths, max_tokens, cancellations, parallel samples, shared system
// prompts and multi-turn sessions. It is deterministic: the same options and seed give the
// same requests, and so the same bytes once written, on every platform (its randomness is
// spelled out in src/random.h: xoshiro256** and hand-written distributions, never
// std::*_distribution). Each kind of draw has its own random stream, so adding, say, a
// cancellation model does not move the arrivals or the lengths.
//
// Every option has a text form, parsed by the parse_* functions below, which throw
// InputError naming the option (`field`) and saying what was expected:
//
//   counts (prompt, output, n, session turns, caps):
//     512 | constant:512 | uniform:8000..32000 | lognormal:mean=1155,p99=4142[,min=1][,max=14050]
//     | choice:1=0.9,4=0.1 (value=weight) | empirical:FILE (prompt/output: that column of
//     another trace, in any format kvsim reads)
//   durations: 5s | uniform:1s..30s | exp:20s (mean) | lognormal:mean=5s,p99=60s
//   arrivals:  poisson:rate=5.5 | gamma:rate=2.6,cv=3 | onoff:rate=20,on=10s,off=50s[,off_rate=0.5]
//   max_tokens: none | output | factor:1.5 | fixed:1024 | cap:SPEC (a count)
//   cancel:    p=0.05,after=DURATION           (repeatable; probabilities add up)
//   system prompt: tokens=1024,share=0.3       (repeatable; shares add up)
//   sessions:  share=0.3,turns=COUNT,gap=DURATION[,user=COUNT][,max_context=N]
//   probabilities and shares: 0.05 or 5%
//
// Lognormal by mean and p99: with z = 2.3263478740408408 (the standard normal's 0.99
// quantile) and r = p99 / mean, sigma = z - sqrt(z^2 - 2 ln r) and mu = ln(mean) -
// sigma^2 / 2, so that exp(mu + sigma^2 / 2) = mean and exp(mu + z sigma) = p99. This
// needs 1 < r < exp(z^2 / 2) (about 14.97). Samples are rounded to the nearest integer
// and clamped to [min, max] (min defaults to 1).
#ifndef KVSIM_TRACE_GEN_H_
#define KVSIM_TRACE_GEN_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvsim/request.h"
#include "kvsim/trace.h"
#include "kvsim/trace_writer.h"

namespace kvsim {

// The longest prompt trace gen writes prefix hashes for (with system prompts or sessions):
// 2^24 = 16,777,216 tokens, a million blocks of 16. Every token is hashed and every block's
// hash written, so a longer one is refused rather than costing gigabytes.
inline constexpr std::int64_t kMaxHashedPromptTokens = std::int64_t{1} << 24;

// A distribution of non-negative integers (tokens, samples, turns).
struct CountDistribution {
  enum class Kind { constant, uniform, lognormal, choice, empirical };
  Kind kind = Kind::constant;
  std::int64_t value = 0;                 // constant
  std::int64_t low = 0;                   // uniform, both ends included
  std::int64_t high = 0;
  double mean = 0;                        // lognormal
  double p99 = 0;
  std::int64_t min = 1;                   // lognormal: samples are clamped to [min, max]
  std::int64_t max = std::numeric_limits<std::int64_t>::max();
  // choice: (value, weight); weights are decimals scaled by 1e9 and need not add to 1.
  std::vector<std::pair<std::int64_t, std::int64_t>> choices;
  std::string path;                       // empirical: the trace to take the column from
  std::string text;                       // as written, for messages
};

// A distribution of durations, in integer nanoseconds.
struct DurationDistribution {
  enum class Kind { constant, uniform, exponential, lognormal };
  Kind kind = Kind::constant;
  std::int64_t value_ns = 0;  // constant; the mean for exponential and lognormal
  std::int64_t low_ns = 0;    // uniform
  std::int64_t high_ns = 0;
  std::int64_t p99_ns = 0;    // lognormal
  std::string text;
};

struct ArrivalProcess {
  enum class Kind { poisson, gamma, onoff };
  Kind kind = Kind::poisson;
  double rate_per_s = 1;      // requests per second (onoff: while on)
  double cv = 1;              // gamma: coefficient of variation of the gaps
  std::int64_t on_ns = 0;     // onoff: a period of `on` followed by one of `off`, repeated
  std::int64_t off_ns = 0;
  double off_rate_per_s = 0;  // onoff: the rate while off
};

struct MaxTokensPolicy {
  enum class Kind {
    none,    // no max_tokens column
    output,  // max_tokens = output_tokens (the client asked for exactly what it got)
    factor,  // max_tokens = ceil(output_tokens * factor)
    cap,     // max_tokens drawn from `cap`; output_tokens is cut to it (generation stops there)
  };
  Kind kind = Kind::none;
  std::int64_t factor_ppb = 1'000'000'000;  // factor * 1e9, exact
  CountDistribution cap;
  // The share of requests that carry max_tokens at all (parts per 1e9).
  std::int64_t share_ppb = 1'000'000'000;
};

// With probability `probability_ppb` / 1e9 a request is cancelled `after` its arrival.
// Several clauses model several behaviours (short delays: users who give up before the
// first token; long ones: users who stop a generation midway; which of the two it turns
// out to be is up to the replay's schedule). Their probabilities add up (at most 1).
struct CancelClause {
  std::int64_t probability_ppb = 0;
  DurationDistribution after;
};

// A system prompt of `tokens` tokens that `share_ppb` / 1e9 of the requests (and of the
// sessions) start with, before their own prompt tokens.
struct SystemPrompt {
  std::int64_t tokens = 0;
  std::int64_t share_ppb = 0;
};

// Multi-turn conversations. A new arrival starts a session with probability share_ppb /
// 1e9. The session's first turn is an ordinary request; each later turn arrives `gap`
// after the previous turn's arrival (the generator does not know when the replay will
// have answered), and its prompt is the previous prompt + the previous output + `user`
// new tokens, so its prefix hashes extend the previous turn's. A session ends after
// `turns` turns, when a turn is cancelled, or when the next prompt would exceed
// max_context_tokens (0: no limit).
struct SessionModel {
  std::int64_t share_ppb = 0;
  CountDistribution turns;
  DurationDistribution gap;
  std::optional<CountDistribution> user_tokens;  // default: the prompt distribution
  std::int64_t max_context_tokens = 0;
};

struct GenOptions {
  std::uint64_t seed = 1;
  std::int64_t requests = 1000;  // stop after this many requests (0: no limit)
  std::int64_t duration_ns = 0;  // stop at this arrival time (0: no limit)
  ArrivalProcess arrivals;
  CountDistribution prompt_tokens;
  CountDistribution output_tokens;
  // When set, (prompt, output) pairs are drawn jointly from the rows of this trace, and
  // prompt_tokens / output_tokens are ignored.
  std::string lengths_from;
  MaxTokensPolicy max_tokens;
  std::vector<CancelClause> cancel;
  CountDistribution n;  // parallel samples; default constant 1
  std::vector<SystemPrompt> system_prompts;
  std::optional<SessionModel> sessions;
  // Block size of the prefix hashes written when there are system prompts or sessions.
  // Hashes are numbered 0, 1, 2, ... in order of first appearance (like Mooncake's), one
  // per *full* block of a prompt: two requests share hash i exactly when their first
  // (i + 1) * block_tokens tokens are the same text.
  std::int64_t block_tokens = 16;

  GenOptions();
};

CountDistribution parse_count_distribution(std::string_view text, std::string_view field);
DurationDistribution parse_duration_distribution(std::string_view text, std::string_view field);
ArrivalProcess parse_arrival_process(std::string_view text, std::string_view field);
MaxTokensPolicy parse_max_tokens_policy(std::string_view text, std::string_view field);
CancelClause parse_cancel_clause(std::string_view text, std::string_view field);
SystemPrompt parse_system_prompt(std::string_view text, std::string_view field);
SessionModel parse_session_model(std::string_view text, std::string_view field);
// "0.05" or "5%" as parts per billion, at most 1e9.
std::int64_t parse_probability_ppb(std::string_view text, std::string_view field);
// A positive decimal number of requests per second ("5.5"), parsed exactly then divided.
double parse_rate_per_s(std::string_view text, std::string_view field);
// An unsigned 64-bit seed.
std::uint64_t parse_seed(std::string_view text, std::string_view field);
// An integer >= 1.
std::int64_t parse_positive_count(std::string_view text, std::string_view field);

// Throws InputError (naming the option) when the options contradict themselves:
// probabilities or shares above 1, impossible lognormals, n that can be 0, no stopping
// rule. TraceGenerator's constructor calls it too.
void validate_gen_options(const GenOptions& options);

class TraceGenerator {
 public:
  // Loads any empirical length files (InputError when they cannot be read).
  explicit TraceGenerator(const GenOptions& options);
  ~TraceGenerator();
  TraceGenerator(const TraceGenerator&) = delete;
  TraceGenerator& operator=(const TraceGenerator&) = delete;

  // The next request, in arrival order; false once `requests` or `duration_ns` is reached.
  bool next(Request& out);
  // The optional columns the generated requests use.
  TraceColumns columns() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace kvsim

#endif  // KVSIM_TRACE_GEN_H_
