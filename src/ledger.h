// Bookkeeping for quantities summed over live requests and integrated over simulated time.
//
// The engine advances in spans: an iteration (step s, lasting d_s ns) or an idle gap.
// Between events, a decoding request's figures change by a fixed slope per step, so a sum
// over requests is base + slope * s. Its time integral sum_s (base + slope * s) * d_s is
// kept lazily: when a contribution changes at step s, the integral's offset absorbs what
// the change would have contributed to the spans before s. No quantity is touched on a
// step where it does not change, which is what keeps long generations cheap.
#ifndef KVSIM_SRC_LEDGER_H_
#define KVSIM_SRC_LEDGER_H_

#include <cstdint>
#include <vector>

namespace kvsim::detail {

__extension__ typedef __int128 Int128;  // time integrals of byte counts overflow 64 bits

// Running sums over the spans so far.
struct Clock {
  Int128 duration_ns = 0;    // sum of d
  Int128 step_weighted = 0;  // sum of s * d
};

// sum over contributions of (value + slope * (s - s0)), with its time integral.
class LinearSum {
 public:
  std::int64_t at(std::int64_t step) const { return static_cast<std::int64_t>(base_ + Int128{slope_} * step); }
  std::int64_t slope() const { return slope_; }

  // Adds `value` at step `step`, changing by `slope` per step from then on; `clock` holds
  // the spans before `step`.
  void add(std::int64_t value, std::int64_t slope, std::int64_t step, const Clock& clock) {
    const Int128 base = Int128{value} - Int128{slope} * step;
    base_ += base;
    slope_ += slope;
    offset_ -= base * clock.duration_ns + Int128{slope} * clock.step_weighted;
  }
  // Adds `value_ns` to the integral directly: a correction for a change that happened
  // part-way through a span.
  void adjust_integral(Int128 value_ns) { offset_ += value_ns; }

  Int128 integral(const Clock& clock) const {
    return base_ * clock.duration_ns + Int128{slope_} * clock.step_weighted + offset_;
  }

 private:
  Int128 base_ = 0;   // the sum extrapolated to step 0: slope * step can pass 2^63
  std::int64_t slope_ = 0;
  Int128 offset_ = 0;
};

// A time-weighted distribution of a non-negative quantity, for quantiles over time. Values
// fall in buckets of width 2^shift; the width doubles (merging neighbours) when a value
// would not fit, so memory stays fixed. A quantile is reported as its bucket's lower edge
// with the width as its resolution: exact whenever every value is a multiple of the width.
class TimeHistogram {
 public:
  static constexpr std::size_t kBuckets = 1 << 16;

  // Records that the quantity held `value` for `duration_ns`. Consecutive spans of one value
  // are merged before they touch the buckets: most quantities hold still for many steps.
  void add(std::int64_t value, std::int64_t duration_ns) {
    if (value == pending_value_) {
      pending_ns_ += duration_ns;
      return;
    }
    commit();
    pending_value_ = value;
    pending_ns_ = duration_ns;
  }
  // The smallest bucket edge v such that the quantity was below v + resolution() for at
  // least percent% of the time. 0 when nothing was recorded.
  std::int64_t quantile(int percent) const;
  // The bucket width quantile() works at, the pending span included: a large last value
  // widens the buckets when it is committed.
  std::int64_t resolution() const { return std::int64_t{1} << settled_shift(); }
  // The buckets, the pending span included, and their width 2^shift: what add_buckets()
  // of another histogram takes (the inter-token latencies of data-parallel replicas).
  std::vector<std::int64_t> buckets(int& shift) const;
  void add_buckets(const std::vector<std::int64_t>& weights, int shift);

 private:
  // The pending span into its bucket. Inline for the common case, where the value fits the
  // buckets as they are; the rest (widening, the check for a negative value) out of line.
  void commit() {
    if (pending_ns_ <= 0) return;
    const auto bucket = static_cast<std::uint64_t>(pending_value_ >> shift_);  // negative: huge
    if (bucket >= kBuckets) {
      commit_widening();
      return;
    }
    weight_ns_[bucket] += pending_ns_;
    pending_ns_ = 0;
  }
  void commit_widening();
  int settled_shift() const;
  void coarsen_to(int shift);

  std::vector<std::int64_t> weight_ns_ = std::vector<std::int64_t>(kBuckets, 0);
  int shift_ = 0;
  std::int64_t pending_value_ = 0;
  std::int64_t pending_ns_ = 0;
};

// The maximum of a quantity and when it first reached it: a value equal to the maximum
// changes nothing. Engine::run_quiet_steps relies on that, offering a stretch of steps'
// linear figures at its two ends only.
struct Peak {
  std::int64_t value = 0;
  std::int64_t at_ns = 0;
  bool offer(std::int64_t v, std::int64_t now_ns) {
    if (v <= value) return false;
    value = v;
    at_ns = now_ns;
    return true;
  }
};

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_LEDGER_H_
