// The recorder's books: what changes, how it integrates over time, and the report's figures.
#include "recorder.h"

#include <algorithm>
#include <string>

#include "kvsim/error.h"
#include "kvsim/units.h"

namespace kvsim::detail {

Latency summarize(std::vector<std::int64_t>& values) {
  Latency l;
  l.count = static_cast<std::int64_t>(values.size());
  if (values.empty()) return l;
  // Nearest rank: the p-th percentile is the value at rank ceil(p/100 * N). Two selections
  // instead of a sort: linear, which matters for a million requests.
  auto rank = [&](int p) {
    const auto at = values.begin() + ((p * l.count + 99) / 100 - 1);
    std::nth_element(values.begin(), at, values.end());
    return *at;
  };
  l.p99_ns = rank(99);
  l.p50_ns = rank(50);
  l.max_ns = *std::max_element(values.begin(), values.end());
  Int128 sum = 0;
  for (auto v : values) sum += v;
  l.mean_ns = static_cast<double>(sum) / static_cast<double>(l.count);
  return l;
}

namespace {

Occupancy occupancy(const LinearSum& sum, const Clock& clock, const TimeHistogram& hist, const Peak& peak,
                    std::int64_t step) {
  Occupancy o;
  o.mean = clock.duration_ns > 0 ? static_cast<double>(sum.integral(clock)) / static_cast<double>(clock.duration_ns) : 0;
  o.peak = peak.value;
  o.peak_at_ns = peak.at_ns;
  o.p50 = hist.quantile(50);
  o.p99 = hist.quantile(99);
  o.quantile_resolution = hist.resolution();
  o.at_end = sum.at(step);
  return o;
}

}  // namespace

Recorder::Recorder(const ReplayOptions& options, const std::int64_t& now_ns, const std::int64_t& step, const Clock& clock)
    : opt_(options),
      now_(now_ns),
      step_(step),
      clock_(clock),
      groups_(options.layout.groups.size()),
      shared_(groups_),
      sums_(groups_),
      at_peak_slots_(groups_) {
  for (const auto& g : options.layout.groups) bytes_per_position_.push_back(g.bytes_per_position);
}

std::int64_t Recorder::held_bytes(std::uint32_t slot) const {
  std::int64_t bytes = 0;
  for (std::size_t g = 0; g < groups_; ++g) {
    bytes += contributions_[slot * groups_ + g].value[kAllocated] * bytes_per_position_[g];
  }
  return bytes;
}

void Recorder::flush(std::int64_t until_ns) {
  const std::int64_t d = until_ns - hist_mark_ns_;
  if (d <= 0) return;
  effective_hist_.add(effective_bytes_.at(step_), d);
  allocated_hist_.add(allocated_bytes_.at(step_), d);
  reserved_hist_.add(reserved_bytes_.at(step_), d);
  if (track_evictable_) evictable_hist_.add(evictable_bytes_.at(step_), d);
  // With one layer group its positions are the totals over its bytes per position, so
  // its quantiles come from the totals' (finish()).
  if (groups_ > 1) {
    for (auto& g : sums_) {
      g.effective_hist.add(g.q[kEffective].at(step_), d);
      g.allocated_hist.add(g.q[kAllocated].at(step_), d);
    }
  }
  ext_integral_ += ext_ratio_ * static_cast<double>(d);
  ext_bytes_integral_ += Int128{ext_bytes_} * d;
  hist_mark_ns_ = until_ns;
}

void Recorder::queue_until(std::int64_t at_ns, std::int64_t queued) {
  if (at_ns > queue_mark_ns_) {
    queue_integral_ += Int128{queued} * (at_ns - queue_mark_ns_);
    queue_mark_ns_ = at_ns;
  }
}

void Recorder::queue_change(std::int64_t at_ns, std::int64_t queued, std::int64_t delta) {
  if (at_ns >= queue_mark_ns_) {
    queue_until(at_ns, queued);
  } else {
    queue_integral_ += Int128{delta} * (queue_mark_ns_ - at_ns);
  }
}

void Recorder::sample(std::int64_t running, std::int64_t queued, std::int64_t queued_seen, std::int64_t duration_ns,
                      const StepCounts& work, bool idle) {
  next_sample_ns_ = every_ns_ > 0 ? now_ + every_ns_ : now_;
  TimelineRow row;
  row.idle = idle;
  row.time_ns = now_;
  row.step = step_;
  row.running = running;
  row.queued = queued;
  row.queued_seen = queued_seen;
  row.duration_ns = duration_ns;
  row.effective_bytes = effective_bytes_.at(step_);
  row.allocated_bytes = allocated_bytes_.at(step_);
  row.reserved_bytes = reserved_bytes_.at(step_);
  row.recomputed_tokens = recomputed_since_row_;
  recomputed_since_row_ = 0;
  row.work = work;
  if (track_evictable_) {
    row.cached_bytes = evictable_bytes_.at(step_);
    row.evicted_bytes = evicted_bytes_;
  }
  for (auto& g : sums_) {
    row.effective_tokens.push_back(g.q[kEffective].at(step_));
    row.allocated_slots.push_back(g.q[kAllocated].at(step_));
  }
  if (opt_.sample_every_ns > 0) {
    // The interval's maximum includes the state at this row; its mean is over the spans
    // from the previous row's time to this one's.
    row.allocated_bytes_max = std::max(interval_max_, row.allocated_bytes);
    const Int128 integral = allocated_bytes_.integral(clock_);
    const Int128 span_ns = clock_.duration_ns - sample_mark_ns_;
    row.allocated_bytes_mean = interval_mean(integral - sample_mark_integral_, span_ns, row.allocated_bytes);
    interval_max_ = row.allocated_bytes;
    if (opt_.timeline_max_rows > 0) {
      held_.push_back(HeldRow{std::move(row), integral - sample_mark_integral_, span_ns});
      if (static_cast<std::int64_t>(held_.size()) > opt_.timeline_max_rows) merge_held_rows();
    }
    sample_mark_integral_ = integral;
    sample_mark_ns_ = clock_.duration_ns;
  }
  unsampled_ = false;
  idle_row_ = false;
  if (opt_.timeline_max_rows <= 0 || opt_.sample_every_ns <= 0) opt_.timeline(row);
}

double Recorder::interval_mean(Int128 integral, Int128 span_ns, std::int64_t state) {
  return span_ns > 0 ? static_cast<double>(integral) / static_cast<double>(span_ns) : static_cast<double>(state);
}

// Rows 2k and 2k+1 become one: row 2k+1's state and time, both intervals' maximum, and the
// mean over both (integrals and lengths add). An odd last row stays as it is.
void Recorder::merge_held_rows() {
  std::size_t out = 0;
  for (std::size_t i = 0; i < held_.size(); i += 2, ++out) {
    if (i + 1 == held_.size()) {
      held_[out++] = std::move(held_[i]);
      break;
    }
    HeldRow merged = std::move(held_[i + 1]);
    merged.row.allocated_bytes_max = std::max(merged.row.allocated_bytes_max, held_[i].row.allocated_bytes_max);
    merged.row.recomputed_tokens += held_[i].row.recomputed_tokens;
    merged.integral += held_[i].integral;
    merged.span_ns += held_[i].span_ns;
    merged.row.allocated_bytes_mean = interval_mean(merged.integral, merged.span_ns, merged.row.allocated_bytes);
    held_[out] = std::move(merged);
  }
  held_.resize(out);
  every_ns_ *= 2;
}

void Recorder::finish(ReplayReport& r, const Allocator& allocator, std::int64_t running, std::int64_t queued) {
  // Steps after the last sampled row, or the last row's own step (a row is taken as its step
  // begins): one more row, at the run's end, so that no interval's maximum (the peak among
  // them) nor its span of the mean is lost.
  if (opt_.timeline && opt_.sample_every_ns > 0 && (unsampled_ || clock_.duration_ns > sample_mark_ns_)) {
    sample(running, queued, queued, 0, StepCounts{});
  }
  for (const HeldRow& h : held_) opt_.timeline(h.row);
  held_.clear();
  const double duration = static_cast<double>(clock_.duration_ns);
  auto mean = [&](const LinearSum& s) { return duration > 0 ? static_cast<double>(s.integral(clock_)) / duration : 0.0; };
  r.effective_bytes = occupancy(effective_bytes_, clock_, effective_hist_, effective_peak_, step_);
  r.allocated_bytes = occupancy(allocated_bytes_, clock_, allocated_hist_, allocated_peak_, step_);
  r.reserved_bytes = occupancy(reserved_bytes_, clock_, reserved_hist_, reserved_peak_, step_);
  if (clock_.duration_ns == 0) {
    // Nothing ran (a replica no request reached, every request refused): a bounded pool is
    // reserved all the same, from start-up, as vLLM allocates it; unbounded, this is 0.
    const std::int64_t reserved = allocator.pool().reserved_bytes;
    r.reserved_bytes = Occupancy{.mean = static_cast<double>(reserved), .peak = reserved, .peak_at_ns = now_,
                                 .p50 = reserved, .p99 = reserved, .quantile_resolution = 1, .at_end = reserved};
  }
  r.evictable_bytes = occupancy(evictable_bytes_, clock_, evictable_hist_, evictable_peak_, step_);
  for (std::size_t g = 0; g < groups_; ++g) {
    GroupReport gr;
    gr.group = opt_.layout.groups[g];
    GroupSums& s = sums_[g];
    gr.effective_tokens = occupancy(s.q[kEffective], clock_, s.effective_hist, s.effective_peak, step_);
    gr.allocated_slots = occupancy(s.q[kAllocated], clock_, s.allocated_hist, s.allocated_peak, step_);
    if (groups_ == 1) {
      // One group: positions are the total bytes over bytes per position (flush_histograms
      // keeps only the totals' histograms); the bucket edges convert downwards.
      const std::int64_t bpp = bytes_per_position_[0];
      for (auto [occ, total] : {std::pair{&gr.effective_tokens, &r.effective_bytes}, std::pair{&gr.allocated_slots, &r.allocated_bytes}}) {
        occ->p50 = total->p50 / bpp;
        occ->p99 = total->p99 / bpp;
        occ->quantile_resolution = std::max<std::int64_t>(1, ceil_div(total->quantile_resolution, bpp));
      }
    }
    gr.mean_slots = {mean(s.q[kTail]), mean(s.q[kReservation]), mean(s.q[kPadding]), mean(s.q[kDuplicate]),
                     mean(s.q[kOutside])};
    gr.at_peak_slots = at_peak_slots_[g];
    const double bpp = static_cast<double>(bytes_per_position_[g]);
    r.mean_bytes.tail += gr.mean_slots.tail * bpp;
    r.mean_bytes.reservation += gr.mean_slots.reservation * bpp;
    r.mean_bytes.padding += gr.mean_slots.padding * bpp;
    r.mean_bytes.duplicate += gr.mean_slots.duplicate * bpp;
    r.mean_bytes.outside_window += gr.mean_slots.outside_window * bpp;
    r.at_peak_bytes.tail += gr.at_peak_slots.tail * bpp;
    r.at_peak_bytes.reservation += gr.at_peak_slots.reservation * bpp;
    r.at_peak_bytes.padding += gr.at_peak_slots.padding * bpp;
    r.at_peak_bytes.duplicate += gr.at_peak_slots.duplicate * bpp;
    r.at_peak_bytes.outside_window += gr.at_peak_slots.outside_window * bpp;
    r.groups.push_back(gr);
  }
  const PoolState pool = allocator.pool();
  const Int128 allocated_integral = allocated_bytes_.integral(clock_);
  if (allocated_integral > 0) {
    r.token_usage = static_cast<double>(effective_bytes_.integral(clock_)) / static_cast<double>(allocated_integral);
  }
  const double capacity_integral = pool.capacity_bytes > 0 ? static_cast<double>(pool.capacity_bytes) * duration
                                                           : static_cast<double>(reserved_bytes_.integral(clock_));
  if (capacity_integral > 0) r.block_usage = static_cast<double>(allocated_integral) / capacity_integral;
  r.external_fragmentation_mean = duration > 0 ? ext_integral_ / duration : 0;
  r.external_fragmentation_max = ext_max_;
  r.failed_placements = pool.failed_placements;
  r.external_fragmentation_bytes_mean = duration > 0 ? static_cast<double>(ext_bytes_integral_) / duration : 0;
  r.places_reservations = pool.places_reservations;
  r.copied_bytes = pool.copied_bytes;
  r.evicted_bytes = pool.evicted_bytes;
  if (opt_.keep_latency_samples) {
    r.latency_samples = LatencySamples{ttft_, e2e_, waiting_, tpot_, {}, 0};
    r.latency_samples.itl_buckets = itl_hist_.buckets(r.latency_samples.itl_shift);
  }
  r.ttft = summarize(ttft_);
  r.e2e = summarize(e2e_);
  r.waiting = summarize(waiting_);
  r.tpot = summarize(tpot_);
  r.itl.count = itl_count_;
  if (itl_count_ > 0) {
    r.itl.mean_ns = static_cast<double>(itl_sum_) / static_cast<double>(itl_count_);
    r.itl.p50_ns = itl_hist_.quantile(50);
    r.itl.p99_ns = itl_hist_.quantile(99);
    r.itl.max_ns = itl_max_;
  }
  queue_until(now_, queued);
  r.queue_mean = duration > 0 ? static_cast<double>(queue_integral_) / duration : 0;
  r.generated_tokens_per_s = duration > 0 ? static_cast<double>(r.generated_tokens) * 1e9 / duration : 0;
  r.allocated_bytes_at_end = pool.reserved_bytes - pool.free_bytes;
  r.leak_free = r.allocated_bytes_at_end == 0 && running == 0 && r.allocated_bytes.at_end == 0;
  if (!r.leak_free) {
    throw InternalError(allocator.name() + ": the run ended holding " + std::to_string(r.allocated_bytes_at_end) +
                        " bytes (" + std::to_string(running) + " requests still running)");
  }
}

}  // namespace kvsim::detail
