// Fitting the linear cost model to a measured run: see include/kvsim/calibrate.h.
#include "kvsim/calibrate.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "kvsim/cost_model.h"
#include "kvsim/error.h"
#include "kvsim/replicas.h"

namespace kvsim {
namespace {

enum Term { kBase, kPrefill, kDecode, kContext, kExperts, kTerms };
const char* const kTermNames[kTerms] = {"base", "prefill-token", "decode-seq", "context-token", "expert-weights"};

// How much of [a0, a1] overlaps [b0, b1].
double overlap(double a0, double a1, double b0, double b1) { return std::max(0.0, std::min(a1, b1) - std::max(a0, b0)); }

// X, the expected share of the device's routed experts the tick's steps reach, summed over
// them: from the replay's steps in the tick where it has any (their mean share, times S),
// else from the tick itself: min(S, first tokens) steps each prefill P / that many prompt
// tokens beside the D decodes, and the rest decode D tokens. D counts every engine's decodes,
// which is what each device's experts serve when the replicas step together (with
// independent engines, the MoE model's each serves its own D / dp). With CUDA graphs the
// engines' steps are padded as the replay pads them (replica_tokens): each engine's share of
// the step, the one prefilling taking the prompt tokens, every engine padded to the largest.
double expert_steps(const CalibrationTick& t, const CalibrationModel& m, double engines, double replay_share) {
  if (m.routed_experts <= 0) return 0;
  if (replay_share >= 0) return t.steps * replay_share;
  const double decoding = m.replicas_step_together ? t.decoding_mean : t.decoding_mean / engines;
  const double prompts = m.replicas_step_together ? t.prompt_tokens : t.prompt_tokens / engines;
  const auto share = [&](double tokens) {
    std::int64_t reached = std::llround(tokens);
    if (m.cuda_graph_max_tokens > 0 && m.replicas_step_together) {
      const std::int64_t each = std::llround(decoding / engines);
      std::vector<std::int64_t> scheduled(static_cast<std::size_t>(engines), each);
      scheduled[0] += reached - each * static_cast<std::int64_t>(scheduled.size());
      reached = 0;
      for (const std::int64_t r : replica_tokens(scheduled, m.cuda_graph_max_tokens)) reached += r;
    } else if (m.cuda_graph_max_tokens > 0) {
      reached = cuda_graph_tokens(m.cuda_graph_max_tokens, reached);
    }
    return routed_expert_share(m.routed_experts, m.experts_per_token, reached);
  };
  const double prefill_steps = std::min(t.steps, t.generated_tokens - t.decoded_tokens);
  if (prefill_steps <= 0) return t.steps * share(decoding);
  return prefill_steps * share(decoding + prompts / prefill_steps) + (t.steps - prefill_steps) * share(decoding);
}

// The busy ticks with their P, G, D, C, S and X.
std::vector<CalibrationTick> busy_ticks(const MeasuredRun& run, const CalibrationModel& model,
                                        const ReplayEstimate& estimate) {
  const std::vector<std::int64_t>& served_by_cache = estimate.served_by_cache;
  const bool take_out_cached = !served_by_cache.empty() && credits_cached_prompt_tokens(run);
  const double origin = tick_origin_monotonic_s(run);
  const auto [first_queued, last_token] = measured_span_s(run);
  // A run whose timeseries counts preemptions and has none needs no bound on D (below).
  const bool may_preempt = !run.preemptions_recorded || run.preemptions > 0;
  std::vector<CalibrationTick> ticks;
  for (std::size_t i = 0; i < run.ticks.size(); ++i) {
    const MeasuredTick& m = run.ticks[i];
    const double t1 = origin + m.t_s, t0 = t1 - run.tick_s;
    // The engine must have had work for the whole tick.
    if (t0 < first_queued || t1 > last_token || m.running == 0) continue;
    CalibrationTick t;
    t.t_s = m.t_s;
    // The prompt tokens computed, where the run says (newer recorders): prompt_throughput
    // also credits what the prefix cache served, which no step computes.
    t.prompt_tokens =
        (m.computed_prompt_tokens_per_s >= 0 ? m.computed_prompt_tokens_per_s : m.prompt_tokens_per_s) * run.tick_s;
    if (!estimate.recomputed.empty()) t.prompt_tokens += static_cast<double>(estimate.recomputed[i]);
    t.generated_tokens = m.generated_tokens_per_s * run.tick_s;
    // vLLM credits a prompt at its first token, what the prefix cache served included.
    for (std::size_t k = 0; take_out_cached && k < run.requests.size(); ++k) {
      const MeasuredRequest& r = run.requests[k];
      if (r.timed && r.first_token_s > t0 && r.first_token_s <= t1) {
        t.prompt_tokens = std::max(0.0, t.prompt_tokens - static_cast<double>(served_by_cache[k]));
      }
    }
    const auto [decoding, context, first_tokens] = decoding_integrals(run.requests, t0, t1);
    t.decoding_mean = decoding / run.tick_s;
    t.context_mean = context / run.tick_s;
    // Every decoding request is in vLLM's running list: a request preempted between its first
    // and last token waits, without decoding, for part of that span. The larger running count
    // at the tick's two ends (the row before, when it directly precedes this one, t being
    // rounded to milliseconds; without it, no bound) bounds the mean, plus one request an
    // engine: each engine's count is a snapshot of its last iteration in the tick, which can
    // be a step before its end. Above the bound, the decoders and their context are scaled
    // down to it, the preempted taken to hold the mean context.
    const bool previous = i > 0 && std::abs(run.ticks[i - 1].t_s - (m.t_s - run.tick_s)) < 2e-3;
    const auto cap = static_cast<double>(std::max(m.running, previous ? run.ticks[i - 1].running : 0) +
                                         run.data_parallel);
    if (!estimate.steps.empty()) t.from_replay = estimate.steps[i];
    if (t.from_replay.decoding_ratio >= 0) {
      // The replay's steps say how many of those requests a step decodes, and over what context.
      t.decoding_mean *= t.from_replay.decoding_ratio;
      t.context_mean *= t.from_replay.context_ratio >= 0 ? t.from_replay.context_ratio : t.from_replay.decoding_ratio;
    } else if (previous && may_preempt && t.decoding_mean > cap) {
      t.context_mean *= cap / t.decoding_mean;
      t.decoding_mean = cap;
      t.bounded_by_running = true;
    }
    if (t.decoding_mean < 1 || t.generated_tokens <= 0) continue;
    // Every step decodes one token for each decoding request, so the tick held G / D steps;
    // with data parallelism each of the dp engines, D / dp of them decoding on each, took
    // (G / dp) / (D / dp) = G / D steps too.
    t.decoded_tokens = std::max(0.0, t.generated_tokens - first_tokens);
    t.steps = t.decoded_tokens / t.decoding_mean;
    t.expert_steps = expert_steps(t, model, static_cast<double>(run.data_parallel), t.from_replay.expert_share);
    ticks.push_back(t);
  }
  return ticks;
}

// One engine's tick: its steps, and its share of the tick's work. Each engine decodes G / dp
// tokens over contexts of C / dp; independent engines each prefill P / dp of the prompt
// tokens, while engines that step together wait for the one prefilling, so a step's length
// carries all of P (prompts rarely reach two replicas in the same step).
std::vector<double> features(const CalibrationTick& t, double engines, bool together) {
  const auto factor = [&](double f) { return together && f >= 0 ? f : 1.0; };
  return {t.steps, together ? t.prompt_tokens * factor(t.from_replay.prompt_factor) : t.prompt_tokens / engines,
          t.decoded_tokens / engines * factor(t.from_replay.decode_factor),
          t.steps * t.context_mean / engines * factor(t.from_replay.context_factor), t.expert_steps};
}

struct Fit {
  double coef[kTerms] = {};
  double standard_error[kTerms] = {-1, -1, -1, -1, -1};
  double correlation[kTerms][kTerms] = {};
  double rms = 0;
  std::size_t equations = 0;
};

// Ticks per equation: the timeseries counts whole steps in a tick (a step across the tick's
// end counts in the next one), so a tick's steps and tokens are off by up to a step at each
// end, several percent when a tick holds a dozen steps. Those errors sit in the features, not
// in the time (which is exact), and bias a fit made tick by tick: on the runs in
// docs/fidelity.md its replays ran 2-5% fast. Summed over consecutive ticks, the errors
// inside a block cancel and those at its two ends weigh less. A block holds at least
// kCalibrationStepsPerBlock steps (by the ticks' median), its step count then right to about
// 2%, while there stay at least twice as many blocks as terms. Running sums over the whole
// run would cancel them all, but would also carry one stalled tick into every later equation.
std::size_t block_ticks(const std::vector<CalibrationTick>& ticks, int terms) {
  std::vector<double> steps;
  for (const CalibrationTick& t : ticks) steps.push_back(t.steps);
  if (steps.empty()) return 1;
  std::nth_element(steps.begin(), steps.begin() + static_cast<std::ptrdiff_t>(steps.size() / 2), steps.end());
  const double median = steps[steps.size() / 2];
  const auto wanted = median > 0 ? static_cast<std::size_t>(std::ceil(kCalibrationStepsPerBlock / median)) : 1;
  return std::clamp<std::size_t>(wanted, 1, std::max<std::size_t>(1, ticks.size() / (2 * static_cast<std::size_t>(terms))));
}

// Least squares over blocks of `block` consecutive busy ticks (shorter where the run's busy
// ticks stop, at a gap or at the end: the errors at a gap's two sides do not cancel): each
// equation is a block's length against the sum of its ticks' features. `rms` is the fit's own
// residual, per tick of a block.
Fit fit_terms(const std::vector<CalibrationTick>& ticks, const bool use[kTerms], double tick_s, double engines,
              bool together, std::size_t block) {
  std::vector<std::vector<double>> rows;
  std::vector<double> y;
  // Ticks are tick_s apart; a busy tick more than half a tick beyond the next one's place
  // starts a block of its own.
  const auto adjacent = [&](std::size_t j) { return ticks[j].t_s - ticks[j - 1].t_s < 1.5 * tick_s; };
  for (std::size_t first = 0, end = 0; first < ticks.size(); first = end) {
    end = first + 1;
    while (end < ticks.size() && end - first < block && adjacent(end)) ++end;
    std::vector<double> row(kTerms, 0.0);
    double length = 0;
    for (std::size_t j = first; j < end; ++j) {
      const std::vector<double> f = features(ticks[j], engines, together);
      for (std::size_t k = 0; k < row.size(); ++k) row[k] += f[k];
      length += tick_s;
    }
    std::vector<double> used;
    for (int k = 0; k < kTerms; ++k) {
      if (use[k]) used.push_back(row[static_cast<std::size_t>(k)]);
    }
    rows.push_back(used);
    y.push_back(length);
  }
  const LeastSquaresFit solved = least_squares_fit(rows, y);
  Fit fit;
  fit.equations = rows.size();
  std::size_t index[kTerms] = {};
  std::size_t i = 0;
  for (int k = 0; k < kTerms; ++k) {
    if (!use[k]) continue;
    index[k] = i++;
    fit.coef[k] = solved.x[index[k]];
    fit.standard_error[k] = solved.standard_error[index[k]];
  }
  for (int a = 0; a < kTerms; ++a) {
    for (int b = 0; b < kTerms; ++b) {
      if (use[a] && use[b]) fit.correlation[a][b] = solved.correlation[index[a]][index[b]];
    }
  }
  fit.rms = std::sqrt(solved.sse / static_cast<double>(ticks.size()));
  return fit;
}

// Picoseconds as an exact decimal number of microseconds ("11747.368304us", "0us"): --cost
// reads up to 12 fractional digits of its unit, so this stays exact for any step length.
std::string microseconds(std::int64_t ps) {
  const std::uint64_t magnitude = ps < 0 ? 0 - static_cast<std::uint64_t>(ps) : static_cast<std::uint64_t>(ps);
  std::string frac = fmt::format("{:06}", magnitude % 1'000'000);
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
  return fmt::format("{}{}{}{}us", ps < 0 ? "-" : "", magnitude / 1'000'000, frac.empty() ? "" : ".", frac);
}

}  // namespace

double predicted_tick_s(const Calibration& c, const CalibrationTick& t, double engines) {
  const std::vector<double> f = features(t, engines, c.steps_together);
  double s = 0;
  for (std::size_t k = 0; k < c.terms.size() && k < f.size(); ++k) {
    if (c.terms[k].kept) s += c.terms[k].seconds * f[k];
  }
  return s;
}

DecodingIntegrals decoding_integrals(const std::vector<MeasuredRequest>& requests, double t0, double t1) {
  DecodingIntegrals in;
  for (const MeasuredRequest& r : requests) {
    if (!r.timed) continue;
    if (r.first_token_s > t0 && r.first_token_s <= t1) ++in.first_tokens;  // produced by a prefill step
    const double span = r.last_token_s - r.first_token_s;
    const double o0 = std::max(t0, r.first_token_s), o1 = std::min(t1, r.last_token_s);
    const double len = overlap(t0, t1, r.first_token_s, r.last_token_s);
    if (len <= 0 || span <= 0) continue;
    in.decoding += len;
    // Context grows linearly from input + 1 at the first token to input + output at the last.
    const double mid = (o0 + o1) / 2;
    const double tokens = 1 + static_cast<double>(r.output_tokens - 1) * (mid - r.first_token_s) / span;
    in.context += len * (static_cast<double>(r.input_tokens) + tokens);
  }
  return in;
}

std::vector<double> least_squares(const std::vector<std::vector<double>>& rows, const std::vector<double>& y) {
  return least_squares_fit(rows, y).x;
}

LeastSquaresFit least_squares_fit(const std::vector<std::vector<double>>& rows, const std::vector<double>& y) {
  const std::size_t n = rows.empty() ? 0 : rows.front().size();
  if (n == 0 || rows.size() < n) throw InputError("least squares: fewer observations than unknowns");
  // A handful of cost terms; the bound also keeps every size below computed from n small.
  if (n > 64) throw InputError("least squares: more than 64 unknowns");
  // Scale every column to unit RMS: the features differ by orders of magnitude.
  std::vector<double> scale(n, 0.0);
  for (const auto& r : rows) {
    for (std::size_t j = 0; j < n; ++j) scale[j] += r[j] * r[j];
  }
  for (double& s : scale) {
    s = std::sqrt(s / static_cast<double>(rows.size()));
    if (s == 0) throw InputError("least squares: a term is zero in every observation");
  }
  // Normal equations (A'A) x = A'y on the scaled columns, solved with partial pivoting
  // (Gauss-Jordan), the identity carried beside them to give (A'A)^-1.
  std::vector<std::vector<double>> m(n, std::vector<double>(2 * n + 1, 0.0));
  for (std::size_t i = 0; i < rows.size(); ++i) {
    for (std::size_t a = 0; a < n; ++a) {
      const double va = rows[i][a] / scale[a];
      for (std::size_t b = 0; b < n; ++b) m[a][b] += va * rows[i][b] / scale[b];
      m[a][n] += va * y[i];
    }
  }
  for (std::size_t a = 0; a < n; ++a) m[a][n + 1 + a] = 1;
  for (std::size_t c = 0; c < n; ++c) {
    std::size_t pivot = c;
    for (std::size_t r = c + 1; r < n; ++r) {
      if (std::abs(m[r][c]) > std::abs(m[pivot][c])) pivot = r;
    }
    if (std::abs(m[pivot][c]) < 1e-12 * static_cast<double>(rows.size())) {
      throw InputError("least squares: the terms cannot be told apart in these observations");
    }
    std::swap(m[c], m[pivot]);
    for (std::size_t r = 0; r < n; ++r) {
      if (r == c) continue;
      const double f = m[r][c] / m[c][c];
      for (std::size_t k = c; k <= 2 * n; ++k) m[r][k] -= f * m[c][k];
    }
  }
  LeastSquaresFit fit;
  fit.x.resize(n);
  for (std::size_t j = 0; j < n; ++j) fit.x[j] = m[j][n] / m[j][j] / scale[j];
  // (A'A)^-1 of the scaled columns; the estimates' covariance is s^2 times it, divided by
  // the two columns' scales.
  const auto inverse = [&](std::size_t j, std::size_t k) { return m[j][n + 1 + k] / m[j][j]; };
  for (std::size_t i = 0; i < rows.size(); ++i) {
    double p = 0;
    for (std::size_t j = 0; j < n; ++j) p += fit.x[j] * rows[i][j];
    fit.sse += (p - y[i]) * (p - y[i]);
  }
  const std::size_t spare = rows.size() - n;
  fit.standard_error.assign(n, -1.0);
  fit.correlation.assign(n, std::vector<double>(n, 0.0));
  for (std::size_t j = 0; j < n; ++j) {
    if (spare > 0) fit.standard_error[j] = std::sqrt(fit.sse / static_cast<double>(spare) * inverse(j, j)) / scale[j];
    for (std::size_t k = 0; k < n; ++k) {
      fit.correlation[j][k] = inverse(j, k) / std::sqrt(inverse(j, j) * inverse(k, k));
    }
  }
  return fit;
}

std::vector<CorrelatedTerms> correlated_terms(const std::vector<std::string>& names,
                                              const std::vector<std::vector<double>>& correlation) {
  std::vector<CorrelatedTerms> out;
  for (std::size_t a = 0; a < names.size(); ++a) {
    for (std::size_t b = a + 1; b < names.size(); ++b) {
      if (std::abs(correlation[a][b]) >= kCalibrationCorrelated) out.push_back({names[a], names[b], correlation[a][b]});
    }
  }
  return out;
}

bool credits_cached_prompt_tokens(const MeasuredRun& run) {
  return std::none_of(run.ticks.begin(), run.ticks.end(),
                      [](const MeasuredTick& t) { return t.computed_prompt_tokens_per_s >= 0; });
}

Calibration calibrate(const MeasuredRun& run, const CalibrationModel& model, const ReplayEstimate& estimate) {
  if (!estimate.served_by_cache.empty() && estimate.served_by_cache.size() != run.requests.size()) {
    throw InputError(Location{run.dir + "/requests.jsonl", 0, ""},
                     "prefix-cache hits for " + std::to_string(estimate.served_by_cache.size()) +
                         " requests, but the run has " + std::to_string(run.requests.size()));
  }
  for (const std::size_t size : {estimate.recomputed.size(), estimate.steps.size()}) {
    if (size != 0 && size != run.ticks.size()) {
      throw InputError(Location{run.dir + "/timeseries.csv", 0, ""},
                       "replay estimates for " + std::to_string(size) + " ticks, but the run has " +
                           std::to_string(run.ticks.size()));
    }
  }
  Calibration c;
  c.steps_together = model.replicas_step_together && run.data_parallel > 1;
  c.tick_s = run.tick_s;
  c.ticks_in_run = static_cast<std::int64_t>(run.ticks.size());
  CalibrationModel as_run = model;
  as_run.replicas_step_together = c.steps_together;
  c.ticks = busy_ticks(run, as_run, estimate);
  const std::string where = run.dir + "/timeseries.csv";
  // The terms every model has (the experts' is tried on top, when the ticks allow it).
  const int terms = kExperts;
  if (c.ticks.size() < static_cast<std::size_t>(terms) + 2) {
    throw InputError(Location{where, 0, ""}, "only " + std::to_string(c.ticks.size()) +
                                                 " ticks were busy from start to end: too few to fit the cost model");
  }
  // A run that computed no prompt token in its busy ticks cannot fit the prefill-token term:
  // name the column that left it at 0, rather than let the solver say only that "a term is
  // zero in every observation".
  if (std::all_of(c.ticks.begin(), c.ticks.end(), [](const CalibrationTick& t) { return t.prompt_tokens <= 0; })) {
    const bool computed = !credits_cached_prompt_tokens(run);
    const bool hits_out = !computed && !estimate.served_by_cache.empty();
    throw InputError(Location{where, 0, computed ? "prompt_compute_throughput" : "prompt_throughput"},
                     "0 in all " + std::to_string(c.ticks.size()) + " busy ticks" +
                         (hits_out ? " once the prefix cache's hits are taken out" : "") +
                         " (no prompt token computed), so the prefill-token term cannot be fitted");
  }
  const auto engines = static_cast<double>(run.data_parallel);
  c.block_ticks = static_cast<std::int64_t>(block_ticks(c.ticks, terms));
  // A coefficient no rule allows to be negative means the data cannot see that term: the
  // most negative one goes, and the rest are fitted again, until all are positive.
  const auto prune = [&](bool (&use)[kTerms], std::string (&why)[kTerms]) {
    for (;;) {
      const Fit f = fit_terms(c.ticks, use, c.tick_s, engines, c.steps_together,
                              static_cast<std::size_t>(c.block_ticks));
      int worst = -1;
      for (int k = kPrefill; k < kTerms; ++k) {
        if (use[k] && f.coef[k] <= 0 && (worst < 0 || f.coef[k] < f.coef[worst])) worst = k;
      }
      if (worst < 0) return f;
      use[worst] = false;
      why[worst] = "fitted non-positive";
    }
  };
  bool use[kTerms] = {true, true, true, false, false};
  std::string why[kTerms];
  Fit fit;
  try {
    fit = prune(use, why);
  } catch (const InputError& e) {
    if (!e.where().file.empty()) throw;
    throw InputError(Location{where, 0, ""}, e.problem() + " (the busy ticks' throughputs)");
  }
  // Context, then (for a model with routed experts) their share reached: each only when it
  // pays for itself.
  for (const int term : {kContext, kExperts}) {
    if (term == kExperts && model.routed_experts <= 0) continue;
    bool use_more[kTerms];
    std::copy(std::begin(use), std::end(use), std::begin(use_more));
    use_more[term] = true;
    std::string why_more[kTerms];
    std::copy(std::begin(why), std::end(why), std::begin(why_more));
    Fit richer;
    try {
      richer = prune(use_more, why_more);
    } catch (const InputError&) {
      // Too few blocks for one more unknown, or a term that moves with another in every
      // block (a share of the experts that every step saturates is a multiple of the steps).
      why[term] = "cannot be told apart from the other terms in these ticks";
      continue;
    }
    if (fit.rms < 1e-9 * c.tick_s) {
      why[term] = "the ticks are explained exactly without it";
    } else if (!use_more[term]) {
      why[term] = why_more[term];
    } else if (richer.rms > 0.95 * fit.rms) {
      why[term] = "lowers the residual RMS by less than 5%";
    } else {
      fit = richer;
      std::copy(std::begin(use_more), std::end(use_more), std::begin(use));
      std::copy(std::begin(why_more), std::end(why_more), std::begin(why));
    }
  }
  if (fit.coef[kBase] <= 0) {
    throw InputError(Location{where, 0, ""}, "the fit gives no positive time per step; the ticks do not describe "
                                             "a busy engine");
  }
  c.equations = static_cast<std::int64_t>(fit.equations);
  for (int k = 0; k < kTerms; ++k) {
    if (k != kExperts || model.routed_experts > 0) {
      c.terms.push_back({kTermNames[k], fit.coef[k], use[k] ? fit.standard_error[k] : -1.0, use[k], why[k]});
    }
  }
  std::vector<std::string> kept;
  std::vector<int> kept_terms;
  for (int k = 0; k < kTerms; ++k) {
    if (!use[k]) continue;
    kept.push_back(kTermNames[k]);
    kept_terms.push_back(k);
  }
  std::vector<std::vector<double>> correlation(kept.size(), std::vector<double>(kept.size(), 0.0));
  for (std::size_t a = 0; a < kept.size(); ++a) {
    for (std::size_t b = 0; b < kept.size(); ++b) correlation[a][b] = fit.correlation[kept_terms[a]][kept_terms[b]];
  }
  c.correlated = correlated_terms(kept, correlation);
  double sse = 0, worst = 0;
  for (auto& t : c.ticks) {
    t.predicted_s = predicted_tick_s(c, t, engines);
    const double e = t.predicted_s - c.tick_s;
    sse += e * e;
    worst = std::max(worst, std::abs(e));
  }
  c.residual_rms_s = std::sqrt(sse / static_cast<double>(c.ticks.size()));
  c.residual_max_s = worst;
  // Picoseconds, as the engine keeps them; the spec names every term so none falls back to
  // the roofline's.
  auto ps = [&](double s) {
    // A coefficient of days a token is no engine's: the throughputs it came from are not a
    // run's (and past 2^63 ps, 107 days, it would wrap negative).
    if (!(std::abs(s) < 1e6)) {
      throw InputError(Location{where, 0, ""}, fmt::format("the fitted cost model has a term of {:.6g} s, which no "
                                                           "engine takes: check the throughputs", s));
    }
    return static_cast<std::int64_t>(std::llround(s * 1e12));
  };
  c.cost.name = "calibrated from " + run.dir;
  c.cost.base_ps = ps(fit.coef[kBase]);
  c.cost.prefill_token_ps = ps(fit.coef[kPrefill]);
  c.cost.decode_seq_ps = ps(fit.coef[kDecode]);
  c.cost.context_token_ps = ps(fit.coef[kContext]);
  c.cost.expert_weights_ps = ps(fit.coef[kExperts]);
  c.cost.routed_experts = model.routed_experts;
  c.cost.experts_per_token = model.experts_per_token;
  c.cost_spec = "linear:base=" + microseconds(c.cost.base_ps) + ",prefill-token=" +
                microseconds(c.cost.prefill_token_ps) + ",decode-seq=" + microseconds(c.cost.decode_seq_ps) +
                ",context-token=" + microseconds(c.cost.context_token_ps);
  // For an MoE model, named even when not kept, so that the roofline's never stands in.
  if (model.routed_experts > 0) c.cost_spec += ",expert-weights=" + microseconds(c.cost.expert_weights_ps);
  return c;
}

}  // namespace kvsim
