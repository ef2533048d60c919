// Fitting the linear iteration cost model (kvsim/replay.h's CostModel) to a measured run.
//
// The engine's rule, the same one kvsim's engine follows: every step decodes one token for
// every decoding request and spends the rest of max_num_batched_tokens on prefill chunks,
// and a step lasts base + prefill_token x (prompt tokens) + decode_seq x (decoding
// sequences) + context_token x (positions they read). Over one tick of the run's timeseries
// (a second during which the engine was busy the whole time):
//
//   tick = S x base + P x prefill_token + G x decode_seq + S x C x context_token
//
// with P the prompt tokens of the tick (timeseries.csv), G its generated tokens less the
// first tokens of requests (a prefill step produces those), D the mean number of requests
// decoding and C the mean sum of their context lengths over the tick (from
// requests.jsonl: a request decodes from its first token to its last, its context growing
// by one position a token), and S = G / D the steps the tick held. A request preempted
// between its first and last token waits for part of that span without decoding, and every
// decoding request is in vLLM's running list: where D exceeds the larger running count at the
// tick's two ends (timeseries.csv) by more than one request an engine (the count is a
// snapshot of each engine's last iteration in the tick), D is lowered to that count plus the
// engines and C with it in proportion; not when the timeseries counts preemptions and has
// none. Least squares gives the coefficients, over blocks of consecutive busy ticks (each
// equation a block's length against the sum of its ticks' terms) holding at least 100 steps:
// a tick counts whole steps, each in the tick it ends in, and the errors that leaves at its
// ends cancel inside a block. A term stays only when the data supports it: a term
// whose coefficient comes out non-positive is dropped (the most negative first) and the rest
// fitted again; context_token (then, for an MoE model, expert_weights, below) is tried on
// top and kept only when it lowers the fit's residual RMS by at least 5%. With data parallelism (dp engines, meta.json's data_parallel_size) the
// timeseries sums the engines and the fit is per engine: each engine has D / dp requests
// decoding over C / dp positions and decodes G / dp tokens in the tick, so it too takes
// G / D steps, and
//
//   tick = S x base + P_e x prefill_token + (G / dp) x decode_seq + S x (C / dp) x context_token
//
// with P_e = P / dp for engines that step independently (each prefills its own share), and
// P_e = P for the replicas of a mixture-of-experts model, which take every step together, a
// step as long as the busier replica's (docs/replay.md, "Data-parallel replicas"): the
// replica prefilling a prompt holds the other's step as long. Where calibrate's replay of
// the run has steps in a tick (ReplayEstimate::steps), the fit charges the slowest replica's
// share instead, as the replay times a step: P_e = P x (the slowest replica's prompt tokens
// / all the replicas', summed over the replay's steps in the tick), and G / dp and C / dp
// times its decodes and context against the replicas' mean (StepEstimate).
//
// A mixture-of-experts model reads, each step, only the routed experts its tokens reach
// (vLLM's fused MoE kernels skip an expert no token is routed to), so its fit tries one more
// term, expert_weights x X, X the sum over the tick's steps of the expected share of the
// experts a step's T tokens reach, 1 - (1 - k/E)^T (routed_expert_share; T counts every
// replica's tokens when they step together): from the replay's steps in the tick (their
// mean share times S), else from the tick (min(S, first tokens) steps each with P / that
// many prompt tokens beside the D decodes, the rest with D). Like context_token it is kept
// only when it lowers the residual RMS by at least 5%.
#ifndef KVSIM_CALIBRATE_H_
#define KVSIM_CALIBRATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kvsim/measured_run.h"
#include "kvsim/replay.h"

namespace kvsim {

// What a replay's steps show of one tick, that its counts cannot: -1 where no step began in it.
struct StepEstimate {
  // An MoE model: the mean share of the device's routed experts a step reached.
  double expert_share = -1;
  // Replicas that step together, each step as long as its slowest replica's work (under the
  // fit being refined): that replica's prompt tokens against all the replicas', its decodes
  // and its context against the replicas' mean, summed over the steps. The fit's per-engine
  // terms are the tick's own counts times these.
  double prompt_factor = -1;
  double decode_factor = -1;
  double context_factor = -1;
  // The replay's requests decoding in a mean step of an engine, and the positions they read,
  // against the same requests counted from their first token to their last over the tick (as
  // the fit counts D and C from requests.jsonl). Below 1 where the replay's requests spent
  // part of that span preempted, or where its steps with few decodes outnumber the rest (a
  // time average weighs a long step more than a step average does).
  double decoding_ratio = -1;
  double context_ratio = -1;
  bool operator==(const StepEstimate&) const = default;
};

// The requests decoding during (t0, t1] of the run's monotonic clock, each from its first token
// to its last (its context growing linearly from input + 1 to input + output), integrated
// over the span: request-seconds and position-seconds; and the first tokens in it. Untimed
// requests count nowhere.
struct DecodingIntegrals {
  double decoding = 0;
  double context = 0;
  double first_tokens = 0;
};
DecodingIntegrals decoding_integrals(const std::vector<MeasuredRequest>& requests, double t0, double t1);

// One busy tick, as the fit sees it.
struct CalibrationTick {
  double t_s = 0;              // timeseries.csv's t: the tick ends here
  double prompt_tokens = 0;    // P
  double generated_tokens = 0; // as timeseries.csv gives them
  double decoded_tokens = 0;   // G: less the first tokens, which prefill steps produce
  double decoding_mean = 0;    // D
  double context_mean = 0;     // C
  double steps = 0;            // S = G / D: each engine's steps in the tick
  double expert_steps = 0;     // X: the share of the device's routed experts each step reaches, summed
  StepEstimate from_replay;    // the replay's steps in the tick (-1: none)
  bool bounded_by_running = false;  // D lowered to the running count (requests preempted)
  double predicted_s = 0;      // the fit's time for the tick
};

struct CalibrationTerm {
  std::string name;            // "base", "prefill-token", "decode-seq", "context-token",
                               // and for an MoE model "expert-weights"
  double seconds = 0;          // the coefficient, seconds (per step, per token, ...)
  // Its least-squares standard error on the fitted equations, seconds: sqrt(s^2 (A'A)^-1) with
  // s^2 the residual sum of squares over (equations - terms kept); -1 when not kept or when
  // there are no more equations than terms.
  double standard_error = -1;
  bool kept = false;
  std::string why;             // when not kept: the reason
};

// The steps a block of consecutive busy ticks holds at least (by the ticks' median), so that
// the whole steps counted at its two ends put its step count off by about 2% at most.
inline constexpr int kCalibrationStepsPerBlock = 100;

// Two kept terms whose estimates move together: in these ticks one can stand in for the
// other, so the fit pins down what they cost together on steps shaped like the run's, not how
// that splits between them. Listed when |correlation| >= kCalibrationCorrelated.
struct CorrelatedTerms {
  std::string first;
  std::string second;
  double correlation = 0;  // of the two estimates, from (A'A)^-1
};
inline constexpr double kCalibrationCorrelated = 0.9;

// The pairs of `names` (the kept terms, in order) whose estimates' correlation (a matrix
// over the same terms) is kCalibrationCorrelated or more in size, first before second.
std::vector<CorrelatedTerms> correlated_terms(const std::vector<std::string>& names,
                                              const std::vector<std::vector<double>>& correlation);

struct Calibration {
  std::vector<CalibrationTerm> terms;   // in the order above
  std::vector<CorrelatedTerms> correlated;
  std::vector<CalibrationTick> ticks;   // the ticks fitted
  std::int64_t ticks_in_run = 0;
  double tick_s = 1.0;
  bool steps_together = false;          // data-parallel replicas fitted as stepping together
  std::int64_t block_ticks = 1;         // consecutive busy ticks summed into one equation
  std::int64_t equations = 0;           // the blocks fitted (a gap in the busy ticks ends one)
  double residual_rms_s = 0;            // of predicted - tick, over the fitted ticks
  double residual_max_s = 0;            // largest |predicted - tick|
  CostModel cost;                       // name "calibrated (RUN_DIR)"
  std::string cost_spec;                // what --cost takes: "linear:base=...,..."
};

// Whether the run's prompt throughput credits the prompt tokens vLLM's prefix cache served
// (vLLM's num_prompt_tokens counts a whole prompt at its first token): true unless the
// timeseries has newer recorders' prompt_compute_throughput column, which leaves them out.
bool credits_cached_prompt_tokens(const MeasuredRun& run);

// What the timeseries does not show, estimated by a replay of the run (kvsim calibrate):
//   served_by_cache: one per request of run.requests, in order: the prompt tokens the prefix
//     cache served it at its first admission, which take no step's time; where the run
//     credits them (above), each is taken out of the prompt tokens of the tick its request's
//     first token fell in;
//   recomputed: one per tick of run.ticks: the prefill positions computed again after
//     preemptions by recompute in the tick, which vLLM's prompt throughput never credits (a
//     prompt counts once, at its first token); added to the tick's prompt tokens.
// Either may be empty (nothing known).
struct ReplayEstimate {
  std::vector<std::int64_t> served_by_cache;
  std::vector<std::int64_t> recomputed;
  //   steps: one per tick of run.ticks: what the replay's steps that began in the tick show
  //     of them (StepEstimate).
  std::vector<StepEstimate> steps;
};

// What the fit needs to know of the run's model.
struct CalibrationModel {
  // Its data-parallel replicas take every step together (an MoE model's do; it matters only
  // with data parallelism).
  bool replicas_step_together = false;
  // A mixture-of-experts model's routed experts and the experts a token is sent to (0 for a
  // dense model): the expert-weights term is tried only with them.
  std::int64_t routed_experts = 0;
  std::int64_t experts_per_token = 0;
  // The largest step run as a CUDA graph (ReplayOptions::cuda_graph_max_tokens; 0: none): a
  // tick the replay has no steps in estimates its steps' expert share with the padding.
  std::int64_t cuda_graph_max_tokens = 0;
};

// Fits `run` of `model`. Throws InputError (naming the run's timeseries.csv) when fewer busy
// ticks than terms remain, or the fit gives no positive per-step base; and when `estimate`'s
// vectors have another length than the run's requests and ticks.
Calibration calibrate(const MeasuredRun& run, const CalibrationModel& model = {}, const ReplayEstimate& estimate = {});

// The length `c` gives tick `t` (one of a calibration's ticks, perhaps another's), seconds:
// its kept terms times the tick's features, for a run of `engines` data-parallel engines.
double predicted_tick_s(const Calibration& c, const CalibrationTick& t, double engines);

// Least squares: the x minimising |A x - y|, A given by rows. Columns are scaled to unit RMS
// before the normal equations are solved. Throws InputError when A's columns are dependent.
std::vector<double> least_squares(const std::vector<std::vector<double>>& rows, const std::vector<double>& y);

// The same fit with its uncertainty: x, each estimate's standard error sqrt(s^2 (A'A)^-1_jj)
// with s^2 = |A x - y|^2 / (rows - unknowns), and the estimates' correlations
// (A'A)^-1_jk / sqrt((A'A)^-1_jj (A'A)^-1_kk). With as many rows as unknowns the errors are -1
// (nothing is left to measure them by); the correlations are known all the same.
struct LeastSquaresFit {
  std::vector<double> x;
  double sse = 0;  // |A x - y|^2
  std::vector<double> standard_error;
  std::vector<std::vector<double>> correlation;
};
LeastSquaresFit least_squares_fit(const std::vector<std::vector<double>>& rows, const std::vector<double>& y);

}  // namespace kvsim

#endif  // KVSIM_CALIBRATE_H_
