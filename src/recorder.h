// The recorder: everything a run measures, kept apart from how the run is driven.
//
// The engine tells the recorder what changed (a request's share of a layer group, the pool
// after an allocator operation, the queue length, a first token, a completion) and when the
// clock moves; the recorder keeps each request's current share, the sums over them as
// lines in steps (ledger.h), their time integrals, histograms and peaks, external
// fragmentation, the timeline and the latency samples, and turns them into the report's
// figures at the end. Adding an output touches the recorder and the renderers only.
//
// Time is the engine's: the recorder reads `now` (start of the current span, ns), `step` and
// the clock of the spans before, through references it is given once.
#ifndef KVSIM_SRC_RECORDER_H_
#define KVSIM_SRC_RECORDER_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kvsim/allocator.h"
#include "kvsim/error.h"
#include "kvsim/replay.h"
#include "ledger.h"

namespace kvsim::detail {

enum Quantity { kEffective, kAllocated, kTail, kReservation, kPadding, kDuplicate, kOutside, kQuantities };

// One request's share of one layer group, as of `step`, with slopes per step after it.
struct Contribution {
  std::int64_t step = 0;
  std::int64_t value[kQuantities] = {};
  std::int64_t slope[kQuantities] = {};
};

struct GroupSums {
  LinearSum q[kQuantities];
  TimeHistogram effective_hist;
  TimeHistogram allocated_hist;
  Peak effective_peak;
  Peak allocated_peak;
};

// Nearest-rank percentiles, mean and max of `values` (reordered in place).
Latency summarize(std::vector<std::int64_t>& values);

class Recorder {
 public:
  Recorder(const ReplayOptions& options, const std::int64_t& now_ns, const std::int64_t& step, const Clock& clock);
  // The allocator keeps cached blocks that no request references (prefix caching): their
  // bytes are tracked over time too.
  void track_evictable() { track_evictable_ = true; }
  // The run starts at `now_ns`: integrals, histograms and the timeline count from there.
  void start_at(std::int64_t now_ns) {
    hist_mark_ns_ = queue_mark_ns_ = next_sample_ns_ = now_ns;
    every_ns_ = opt_.sample_every_ns;
  }

  // --- requests' shares, by slot (slots are the engine's, reused after release)
  void ensure_slots(std::size_t slots) { contributions_.resize(slots * groups_); }
  // The slot holds nothing yet (a new occupant).
  void clear(std::uint32_t slot) {
    for (std::size_t g = 0; g < groups_; ++g) contributions_[slot * groups_ + g] = Contribution{};
  }
  const Contribution& share(std::uint32_t slot, std::size_t group) const { return contributions_[slot * groups_ + group]; }
  // The request's share of `group` becomes `next`. `correction_ns`: the change happened that
  // far into the current span, so it counts for the rest of the span only.
  void apply(std::uint32_t slot, std::size_t group, const Contribution& next, std::int64_t correction_ns) {
    update(contributions_[slot * groups_ + group], group, next, correction_ns);
  }
  // The pool's shared account: positions several live requests' shares count alike, held
  // once (prefix caching). `next` has allocated = -(positions the pool holds once for
  // several requests), effective = -(positions the engine counts once), and the
  // difference as duplicate (the same prefix held twice). Zero when nothing is shared.
  void apply_shared(std::size_t group, const Contribution& next, std::int64_t correction_ns) {
    update(shared_[group], group, next, correction_ns);
  }
  const Contribution& shared(std::size_t group) const { return shared_[group]; }
  // Bytes the request holds now, all groups.
  std::int64_t held_bytes(std::uint32_t slot) const;

  // --- the pool, after every allocator operation
  // Checks the two accounts agree (footprints against the pool) and offers the peaks;
  // `transient_bytes` were held during the operation only.
  inline void after_op(const Allocator& allocator, std::int64_t transient_bytes);

  // --- time
  // The state stays as it is until `until_ns`: histograms and time integrals catch up.
  void flush(std::int64_t until_ns);
  // An iteration's state is final: offers the step's peaks and samples the timeline.
  // `work()`: what the step computed (TimelineRow::work), asked for only when a row is written.
  // `duration_ns`: TimelineRow's; `queued_seen()` its queued_seen, asked for only when a
  // row is written, as `work()` is.
  template <typename Seen, typename Work>
  void end_of_step_state(std::int64_t running, std::int64_t queued, std::int64_t duration_ns, const Seen& queued_seen,
                         const Work& work) {
    offer_step_peaks(step_, now_);
    sample_step(running, queued, duration_ns, queued_seen, work);
  }
  // end_of_step_state's two parts. The peaks of step `step`, which began at `at_ns`: the
  // current step's, or an earlier one's while no share has changed since.
  void offer_step_peaks(std::int64_t step, std::int64_t at_ns) {
    effective_peak_.offer(effective_bytes_.at(step), at_ns);
    for (auto& g : sums_) {
      g.effective_peak.offer(g.q[kEffective].at(step), at_ns);
      g.allocated_peak.offer(g.q[kAllocated].at(step), at_ns);
    }
  }
  // The timeline's row for the step, if one is due.
  template <typename Seen, typename Work>
  void sample_step(std::int64_t running, std::int64_t queued, std::int64_t duration_ns, const Seen& queued_seen,
                   const Work& work) {
    if (opt_.timeline && now_ >= next_sample_ns_) {
      sample(running, queued, queued_seen(), duration_ns, work());
    } else {
      unsampled_ = true;
    }
  }
  // The engine has nothing to run until `until_ns` (its next arrival). With a row per step,
  // one row at this instant gives the state it holds meanwhile (nothing running; a prefix
  // cache's evictable blocks), once per idle spell: otherwise the last step's row would seem
  // to hold through the gap. Sampled rows need none: their means cover it.
  void idle(std::int64_t queued) {
    if (!opt_.timeline || opt_.sample_every_ns > 0 || idle_row_) return;
    sample(0, queued, queued, 0, StepCounts{}, true);
    idle_row_ = true;
  }
  // A prefill computed `positions` again that a preemption by recompute had discarded.
  void recomputed(std::int64_t positions) { recomputed_since_row_ += positions; }
  // The waiting queue held `queued` requests until `at_ns`.
  void queue_until(std::int64_t at_ns, std::int64_t queued);
  // The waiting queue goes from `queued` requests to `queued + delta` at `at_ns`. A change
  // before the time integrated so far (a replica's request routed after its step began, or
  // its cancellation) is counted from its own instant.
  void queue_change(std::int64_t at_ns, std::int64_t queued, std::int64_t delta);

  // --- requests' latencies
  void waited(std::int64_t ns) { waiting_.push_back(ns); }
  void first_token(std::int64_t ttft_ns) { ttft_.push_back(ttft_ns); }
  void completed(std::int64_t e2e_ns) { e2e_.push_back(e2e_ns); }
  // A completed request's time per output token (output >= 2 tokens only).
  void per_output_token(std::int64_t tpot_ns) { tpot_.push_back(tpot_ns); }
  // A step of `duration_ns` decoded `sequences` sequences: as many inter-token gaps. Kept in
  // a histogram (a 1,000,000-request replay has tens of millions of steps), exact in count,
  // mean and max.
  void decode_step(std::int64_t duration_ns, std::int64_t sequences) {
    if (sequences <= 0) return;
    itl_hist_.add(duration_ns, sequences);
    itl_count_ += sequences;
    itl_sum_ += Int128{duration_ns} * sequences;
    itl_max_ = std::max(itl_max_, duration_ns);
  }

  const LinearSum& allocated_bytes() const { return allocated_bytes_; }

  // Fills the report's figures (occupancy, fragmentation, usage, latencies, queue mean) at
  // the end of the run. `running`: requests still running (0 unless something leaked);
  // `queued`: requests still waiting.
  void finish(ReplayReport& report, const Allocator& allocator, std::int64_t running, std::int64_t queued);

 private:
  void sample(std::int64_t running, std::int64_t queued, std::int64_t queued_seen, std::int64_t duration_ns,
              const StepCounts& work, bool idle = false);
  static double interval_mean(Int128 integral, Int128 span_ns, std::int64_t state);
  void merge_held_rows();
  // `old` becomes `next`, and the sums, totals and integrals follow.
  inline void update(Contribution& old, std::size_t group, const Contribution& next, std::int64_t correction_ns);

  std::int64_t recomputed_since_row_ = 0;  // positions computed again since the last timeline row
  const ReplayOptions& opt_;
  const std::int64_t& now_;
  const std::int64_t& step_;
  const Clock& clock_;
  std::size_t groups_;
  std::vector<std::int64_t> bytes_per_position_;
  bool track_evictable_ = false;

  std::vector<Contribution> contributions_;  // [slot * groups + group]
  std::vector<Contribution> shared_;         // by group: the pool's shared account
  std::vector<GroupSums> sums_;
  LinearSum effective_bytes_;
  LinearSum allocated_bytes_;
  LinearSum reserved_bytes_;
  LinearSum evictable_bytes_;
  std::int64_t evicted_bytes_ = 0;  // the pool's count after the last operation
  TimeHistogram effective_hist_, allocated_hist_, reserved_hist_;
  Peak effective_peak_, allocated_peak_, reserved_peak_, evictable_peak_;
  TimeHistogram evictable_hist_;
  std::vector<Fragmentation> at_peak_slots_;
  double ext_ratio_ = 0;           // external fragmentation now, and integrated over time
  double ext_integral_ = 0;
  double ext_max_ = 0;
  std::int64_t ext_bytes_ = 0;     // free bytes outside the largest free extent, now
  Int128 ext_bytes_integral_ = 0;
  std::int64_t hist_mark_ns_ = 0;
  Int128 queue_integral_ = 0;
  std::int64_t queue_mark_ns_ = 0;
  std::int64_t next_sample_ns_ = 0;
  // The timeline's interval since its last row: allocated bytes' maximum (transients
  // included), the integral and clock at that row, and whether a step went unsampled since.
  std::int64_t interval_max_ = 0;
  Int128 sample_mark_integral_ = 0;
  Int128 sample_mark_ns_ = 0;
  bool unsampled_ = false;
  bool idle_row_ = false;  // the last row written is idle()'s
  // With ReplayOptions::timeline_max_rows: the rows held until the end, each with its
  // interval's integral of allocated bytes and length (so merged means stay exact), and the
  // interval, doubled at each merge.
  struct HeldRow {
    TimelineRow row;
    Int128 integral = 0;
    Int128 span_ns = 0;
  };
  std::vector<HeldRow> held_;
  std::int64_t every_ns_ = 0;
  std::vector<std::int64_t> ttft_, e2e_, waiting_, tpot_;
  TimeHistogram itl_hist_;   // step durations weighted by the sequences they decoded
  std::int64_t itl_count_ = 0;
  Int128 itl_sum_ = 0;
  std::int64_t itl_max_ = 0;
};

void Recorder::update(Contribution& old, std::size_t group, const Contribution& next, std::int64_t correction_ns) {
  GroupSums& sums = sums_[group];
  const std::int64_t bpp = bytes_per_position_[group];
  for (int q = 0; q < kQuantities; ++q) {
    const std::int64_t old_now = old.value[q] + old.slope[q] * (step_ - old.step);
    const std::int64_t dv = next.value[q] - old_now;
    const std::int64_t ds = next.slope[q] - old.slope[q];
    if (dv == 0 && ds == 0) continue;
    sums.q[q].add(dv, ds, step_, clock_);
    // A change part-way through the current span took effect for the rest of it only.
    if (correction_ns != 0) sums.q[q].adjust_integral(-Int128{dv} * correction_ns);
    if (q == kEffective || q == kAllocated) {
      LinearSum& total = q == kEffective ? effective_bytes_ : allocated_bytes_;
      total.add(dv * bpp, ds * bpp, step_, clock_);
      if (correction_ns != 0) total.adjust_integral(-Int128{dv} * bpp * correction_ns);
    }
  }
  old = next;
}

void Recorder::after_op(const Allocator& allocator, std::int64_t transient_bytes) {
  const PoolState pool = allocator.pool();
  const std::int64_t allocated = allocated_bytes_.at(step_);
  // The allocator's pool and the requests' footprints are two separate accounts.
  if (allocated != pool.reserved_bytes - pool.free_bytes) {
    throw InternalError(allocator.name() + ": footprints add up to " + std::to_string(allocated) +
                        " bytes but the pool holds " + std::to_string(pool.reserved_bytes - pool.free_bytes));
  }
  const std::int64_t reserved_delta = pool.reserved_bytes - reserved_bytes_.at(step_);
  if (reserved_delta != 0) reserved_bytes_.add(reserved_delta, 0, step_, clock_);
  interval_max_ = std::max(interval_max_, allocated + transient_bytes);
  if (allocated_peak_.offer(allocated + transient_bytes, now_)) {
    for (std::size_t g = 0; g < groups_; ++g) {
      Fragmentation& p = at_peak_slots_[g];
      p.tail = static_cast<double>(sums_[g].q[kTail].at(step_));
      p.reservation = static_cast<double>(sums_[g].q[kReservation].at(step_));
      p.padding = static_cast<double>(sums_[g].q[kPadding].at(step_));
      p.duplicate = static_cast<double>(sums_[g].q[kDuplicate].at(step_));
      p.outside_window = static_cast<double>(sums_[g].q[kOutside].at(step_));
    }
  }
  reserved_peak_.offer(pool.reserved_bytes, now_);
  if (track_evictable_) {
    const std::int64_t evictable_delta = pool.evictable_bytes - evictable_bytes_.at(step_);
    if (evictable_delta != 0) evictable_bytes_.add(evictable_delta, 0, step_, clock_);
    evictable_peak_.offer(pool.evictable_bytes, now_);
    evicted_bytes_ = pool.evicted_bytes;
  }
  ext_ratio_ = pool.largest_free_extent_bytes < pool.free_bytes
                   ? 1.0 - static_cast<double>(pool.largest_free_extent_bytes) / static_cast<double>(pool.free_bytes)
                   : 0.0;  // no holes (always, for block pools)
  ext_max_ = std::max(ext_max_, ext_ratio_);
  ext_bytes_ = pool.free_bytes - std::min(pool.free_bytes, pool.largest_free_extent_bytes);
}

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_RECORDER_H_
