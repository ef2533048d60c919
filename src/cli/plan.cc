#include "plan.h"

#include <algorithm>
#include <map>
#include <string_view>

#include "kvsim/error.h"

namespace kvsim::cli {
namespace {

// a is easier than b.
bool easier(const SearchSpec& spec, std::int64_t a, std::int64_t b) { return spec.harder_up ? a < b : a > b; }

bool close_enough(const SearchSpec& spec, std::int64_t met, std::int64_t missed) {
  const std::int64_t gap = met > missed ? met - missed : missed - met;
  if (gap <= 1) return true;
  __extension__ typedef __int128 Wide;
  return static_cast<Wide>(gap) * 1'000'000 <= static_cast<Wide>(met) * spec.tolerance_ppm;
}

}  // namespace

SearchResult bracket_search(const SearchSpec& spec, const std::function<bool(std::int64_t)>& meets) {
  check(spec.min <= spec.start && spec.start <= spec.max && spec.min >= 1, "bracket_search: start outside its bounds");
  SearchResult result;
  std::map<std::int64_t, bool> seen;
  const auto budget_left = [&] { return static_cast<int>(result.tried.size()) < spec.max_points; };
  // Verification points leave the bracket as the search found it.
  const auto evaluate = [&](std::int64_t v, const char* role) {
    const bool met = meets(v);
    seen[v] = met;
    result.tried.push_back(SearchPoint{v, met, role});
    if (std::string_view(role) == "verify") return met;
    if (met && (!result.met || easier(spec, *result.met, v))) result.met = v;
    if (!met && (!result.missed || easier(spec, v, *result.missed))) result.missed = v;
    return met;
  };
  // One step away from v: harder or easier, doubling or halving, within the bounds.
  const auto step = [&](std::int64_t v, bool harder) -> std::optional<std::int64_t> {
    const bool up = harder == spec.harder_up;
    const std::int64_t next = up ? (v > spec.max / 2 ? spec.max : v * 2) : std::max(spec.min, v / 2);
    if (next == v) return std::nullopt;
    return next;
  };

  // Expand until the outcome flips.
  bool met = evaluate(spec.start, "expand");
  std::int64_t v = spec.start;
  while (budget_left()) {
    const auto next = step(v, met);
    if (!next) break;
    v = *next;
    const bool now = evaluate(v, "expand");
    if (now != met) break;
  }
  // Bisect the bracket: met (easy side) and missed (hard side), when both exist and the
  // missed one is harder (a contradiction in the expansion is reported below).
  while (result.met && result.missed && easier(spec, *result.met, *result.missed) && budget_left()) {
    if (close_enough(spec, *result.met, *result.missed)) break;
    const std::int64_t mid = *result.met + (*result.missed - *result.met) / 2;
    if (seen.count(mid) != 0) break;
    evaluate(mid, "bisect");
  }
  result.converged = result.met && result.missed && easier(spec, *result.met, *result.missed) &&
                     close_enough(spec, *result.met, *result.missed);
  // Look on the easy side of the answer for a contradiction.
  if (result.met) {
    const std::int64_t a = *result.met;
    std::vector<std::int64_t> checks;
    if (spec.harder_up) {
      checks = {a / 2, a - a / 10};
    } else {
      checks = {a + 1};
    }
    for (const std::int64_t c : checks) {
      if (c < spec.min || c > spec.max || seen.count(c) != 0 || !budget_left()) continue;
      evaluate(c, "verify");
    }
  }
  // Every contradiction among the points tried: a miss easier than a meet.
  for (const auto& [mv, m_ok] : seen) {
    if (!m_ok) continue;
    for (const auto& [xv, x_ok] : seen) {
      if (!x_ok && easier(spec, xv, mv)) result.non_monotone.emplace_back(mv, xv);
    }
  }
  return result;
}

}  // namespace kvsim::cli
