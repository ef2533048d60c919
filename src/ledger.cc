#include "ledger.h"

#include <algorithm>

#include "kvsim/error.h"

namespace kvsim::detail {

int TimeHistogram::settled_shift() const {
  int shift = shift_;
  if (pending_ns_ > 0) {
    while (static_cast<std::uint64_t>(pending_value_ >> shift) >= kBuckets) ++shift;
  }
  return shift;
}

// commit() for a value beyond the buckets as they are (or negative, which is a bug).
void TimeHistogram::commit_widening() {
  check(pending_value_ >= 0, "histogram: negative quantity");
  coarsen_to(settled_shift());
  weight_ns_[static_cast<std::size_t>(pending_value_ >> shift_)] += pending_ns_;
  pending_ns_ = 0;
}

void TimeHistogram::coarsen_to(int shift) {
  while (shift_ < shift) {
    for (std::size_t i = 0; i < kBuckets / 2; ++i) weight_ns_[i] = weight_ns_[2 * i] + weight_ns_[2 * i + 1];
    std::fill(weight_ns_.begin() + kBuckets / 2, weight_ns_.end(), 0);
    ++shift_;
  }
}

std::vector<std::int64_t> TimeHistogram::buckets(int& shift) const {
  TimeHistogram all = *this;
  all.commit();
  shift = all.shift_;
  return std::move(all.weight_ns_);
}

void TimeHistogram::add_buckets(const std::vector<std::int64_t>& weights, int shift) {
  check(weights.size() == kBuckets && shift >= 0, "histogram: buckets of another shape");
  commit();
  coarsen_to(shift);
  // Bucket i of width 2^shift starts at i << shift, inside this one's bucket (i << shift) >> shift_.
  for (std::size_t i = 0; i < kBuckets; ++i) {
    if (weights[i] != 0) weight_ns_[i >> (shift_ - shift)] += weights[i];
  }
}

std::int64_t TimeHistogram::quantile(int percent) const {
  TimeHistogram all = *this;  // with the pending span in its bucket
  all.commit();
  Int128 total = 0;
  for (std::int64_t w : all.weight_ns_) total += w;
  if (total == 0) return 0;
  Int128 seen = 0;
  for (std::size_t i = 0; i < kBuckets; ++i) {
    seen += all.weight_ns_[i];
    if (seen * 100 >= total * percent) return static_cast<std::int64_t>(i) << all.shift_;
  }
  return static_cast<std::int64_t>(kBuckets - 1) << all.shift_;
}

}  // namespace kvsim::detail
