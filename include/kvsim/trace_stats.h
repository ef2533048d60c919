// What a trace looks like: the figures `kvsim trace stats` prints.
//
// Definitions, so that the numbers can be checked by hand:
// - duration: last arrival - first arrival. rate: (requests - 1) / duration, that is
//   1 / the mean gap between consecutive arrivals (0 when undefined).
// - inter-arrival coefficient of variation: population standard deviation of the gaps
//   between consecutive arrivals over their mean (1 for a Poisson process; 0 when
//   undefined).
// - percentiles are nearest-rank: the p-th percentile of N values is the
//   ceil(p / 100 * N)-th smallest. They are exact, which needs every length in memory:
//   two int64 per request (16 bytes), the only part of the statistics that grows with the
//   trace besides the sets below.
// - prefix reuse: the share of prompt blocks (prefix hashes; a partial last block counts,
//   as in Mooncake's traces) whose hash appeared in an earlier request or earlier in the
//   same request, i.e. what an unbounded prefix cache could serve. The set of hashes seen
//   grows with the number of distinct hashes. Reused tokens count a reused block's tokens
//   (block_tokens, or what is left of the prompt for its last block).
// - sessions counts distinct non-empty session names (a set of names, growing likewise).
#ifndef KVSIM_TRACE_STATS_H_
#define KVSIM_TRACE_STATS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvsim/request.h"
#include "kvsim/trace.h"

namespace kvsim {

// The distribution of one length over the requests of a trace.
struct LengthSummary {
  double mean = 0;
  std::int64_t min = 0;
  std::int64_t p50 = 0;
  std::int64_t p90 = 0;
  std::int64_t p99 = 0;
  std::int64_t max = 0;
  std::int64_t total = 0;
};

struct TraceStats {
  std::int64_t requests = 0;
  std::int64_t first_arrival_ns = 0;
  std::int64_t last_arrival_ns = 0;
  std::int64_t duration_ns = 0;
  // Over the gaps between arrivals; none when every arrival falls at one instant (a single
  // request, a burst at t = 0): a rate there would be infinite, not 0.
  std::optional<double> rate_per_s;
  std::optional<double> interarrival_cv;
  LengthSummary prompt_tokens;
  LengthSummary output_tokens;  // per sample, as the trace gives it
  std::int64_t cancelled = 0;        // requests with a cancellation time
  std::int64_t with_max_tokens = 0;  // requests that give max_tokens
  std::int64_t parallel_requests = 0;  // requests with n > 1
  std::int64_t samples = 0;            // sum of n over all requests
  std::int64_t session_requests = 0;   // requests that belong to a session
  std::int64_t sessions = 0;           // distinct session names
  std::int64_t with_service_times = 0;  // requests with start, first_token and finish
  std::int64_t dropped = 0;             // rows the format drops (TraceReader::dropped), in no figure
  // Prefix identity. block_tokens is the trace's block size: 0 when no request gives one,
  // -1 when requests disagree on it. A request with a block size carries identity even with
  // no hash (a token-id prompt shorter than the block): its tokens count, none as seen.
  std::int64_t prefix_block_tokens = 0;
  std::int64_t prefix_requests = 0;   // requests with a prefix block size
  std::int64_t prefix_blocks = 0;     // hashes over all requests
  std::int64_t prefix_blocks_seen = 0;  // of which seen before
  std::int64_t prefix_tokens = 0;       // prompt tokens of requests with a prefix block size
  std::int64_t prefix_tokens_seen = 0;  // tokens in blocks seen before

  double prefix_block_reuse() const;  // prefix_blocks_seen / prefix_blocks, 0 when none
  double prefix_token_reuse() const;  // prefix_tokens_seen / prefix_tokens, 0 when none
};

// Accumulates statistics one request at a time, in arrival order.
class TraceStatsBuilder {
 public:
  TraceStatsBuilder();
  ~TraceStatsBuilder();
  TraceStatsBuilder(const TraceStatsBuilder&) = delete;
  TraceStatsBuilder& operator=(const TraceStatsBuilder&) = delete;

  // Throws InputError when a total (of n, of prompt tokens) no longer fits in 64 bits.
  void add(const Request& r);
  // The statistics of everything added so far. Throws InputError when a length's total
  // does not fit in 64 bits.
  TraceStats finish() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Reads the whole trace and summarises it. Throws what the reader throws, and InputError
// naming the reader's file when a total does not fit in 64 bits.
TraceStats compute_trace_stats(TraceReader& reader);

// The statistics as text for people (aligned lines, thousands separated) and as JSON
// (one object; lengths as objects with mean, min, p50, p90, p99, max, total).
std::string format_trace_stats(const TraceStats& stats);
std::string trace_stats_json(const TraceStats& stats);

// The nearest-rank p-th percentile (0 < p <= 100) of `sorted` (ascending, non-empty).
std::int64_t nearest_rank_percentile(const std::vector<std::int64_t>& sorted, int p);

}  // namespace kvsim

#endif  // KVSIM_TRACE_STATS_H_
