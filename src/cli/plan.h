// `kvsim plan`'s search: the boundary between loads that meet the targets and loads that
// miss them, found by expanding and then bisecting over an integer parameter. It relies on
// one monotonicity: moving towards the harder side (a larger rate-scale, fewer replicas)
// never turns a miss into a meet. It does not hide where that fails: every pair of points
// tried that contradicts it is reported, and the search checks points on the easy side of
// its answer for that purpose.
#ifndef KVSIM_SRC_CLI_PLAN_H_
#define KVSIM_SRC_CLI_PLAN_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace kvsim::cli {

struct SearchSpec {
  std::int64_t start = 1;               // the first value tried
  std::int64_t min = 1;                 // the search's bounds, inclusive
  std::int64_t max = 1;
  bool harder_up = true;                // true: larger values are harder (rate-scale); false: replicas
  std::int64_t tolerance_ppm = 20'000;  // stop when |missed - met| <= met x this / 10^6 (or 1)
  int max_points = 20;                  // evaluations, verification included
};

struct SearchPoint {
  std::int64_t value = 0;
  bool met = false;
  const char* role = "";  // "expand", "bisect" or "verify": why it was tried
};

struct SearchResult {
  std::vector<SearchPoint> tried;       // in the order tried
  std::optional<std::int64_t> met;      // the hardest value that met the targets
  std::optional<std::int64_t> missed;   // the easiest value harder than it that missed them
  bool converged = false;               // met and missed within the tolerance
  // Pairs (met, missed) where `missed` is on the easy side of `met`: the monotonicity fails.
  std::vector<std::pair<std::int64_t, std::int64_t>> non_monotone;
};

// Expands from spec.start away from its first outcome (doubling or halving) until the
// outcome flips or a bound is reached, bisects the bracket to the tolerance, then tries up
// to two points on the easy side of the answer not yet tried (half way to it and 10% short
// of it for a rate; one more replica) to look for a contradiction. At most spec.max_points
// calls of `meets`, each value at most once; deterministic.
SearchResult bracket_search(const SearchSpec& spec, const std::function<bool(std::int64_t)>& meets);

}  // namespace kvsim::cli

#endif  // KVSIM_SRC_CLI_PLAN_H_
