#include "ledger.h"

#include <algorithm>

#include "kvsim/error.h"

namespace kvsim::detail {

void TimeHistogram::add(std::int64_t value, std::int64_t duration_ns) {
  if (duration_ns <= 0) return;
  check(value >= 0, "histogram: negative quantity");
  while (static_cast<std::uint64_t>(value >> shift_) >= kBuckets) {
    for (std::size_t i = 0; i < kBuckets / 2; ++i) weight_ns_[i] = weight_ns_[2 * i] + weight_ns_[2 * i + 1];
    std::fill(weight_ns_.begin() + kBuckets / 2, weight_ns_.end(), 0);
    ++shift_;
  }
  weight_ns_[static_cast<std::size_t>(value >> shift_)] += duration_ns;
}

std::int64_t TimeHistogram::quantile(int percent) const {
  Int128 total = 0;
  for (std::int64_t w : weight_ns_) total += w;
  if (total == 0) return 0;
  Int128 seen = 0;
  for (std::size_t i = 0; i < kBuckets; ++i) {
    seen += weight_ns_[i];
    if (seen * 100 >= total * percent) return static_cast<std::int64_t>(i) << shift_;
  }
  return static_cast<std::int64_t>(kBuckets - 1) << shift_;
}

}  // namespace kvsim::detail
