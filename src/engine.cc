// The replay engine: continuous batching on integer time, driving one allocator.
//
// The loop is: at the start of each iteration (step s, time T) take the arrivals and
// cancellations due, call the allocator for the requests whose next event is due at this
// step, continue and admit prefills, then let the iteration run for the duration the cost
// model gives; cancellations inside it free their requests at their own instant, and the
// requests that produced their last token are released at its end. A decoding request is
// touched only at its events; in between, its figures follow the slopes it reported.
#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <queue>
#include <string>

#include "effective.h"
#include "kvsim/error.h"
#include "kvsim/replay.h"
#include "kvsim/units.h"
#include "ledger.h"
#include "step_wheel.h"

namespace kvsim {
namespace {

using detail::Clock;
using detail::Int128;
using detail::LinearSum;
using detail::Peak;
using detail::StepEvent;
using detail::TimeHistogram;

constexpr std::int64_t kUnlimited = std::numeric_limits<std::int64_t>::max();

// One request's share of one layer group, as of `step`, with slopes per step after it.
struct Contribution {
  std::int64_t step = 0;
  std::int64_t value[6] = {};  // indexed by Quantity
  std::int64_t slope[6] = {};
};

enum Quantity { kEffective, kAllocated, kTail, kReservation, kDuplicate, kOutside, kQuantities };

struct GroupSums {
  LinearSum q[kQuantities];
  TimeHistogram effective_hist;
  TimeHistogram allocated_hist;
  Peak effective_peak;
  Peak allocated_peak;
};

enum class Phase : std::uint8_t { free, queued, running };

// A request from arrival to release.
struct Flight {
  Phase phase = Phase::free;
  std::uint32_t generation = 0;
  std::int64_t ordinal = 0;        // 1-based position in the trace, for messages
  std::int64_t arrival_ns = 0;
  std::int64_t prompt = 0;
  std::int64_t output = 0;
  std::int64_t n = 1;
  std::int64_t planned = 0;
  std::int64_t prefilled = 0;      // prompt tokens processed
  bool decoding = false;           // grows one token per step on its own
  std::int64_t tokens_at = 0;      // tokens per sequence as of step_at
  std::int64_t step_at = 0;
  std::int64_t first_token_ns = -1;
  // Measured schedule: the service timestamps, and when the request stops holding memory
  // (its finish, or its cancellation if that comes first).
  std::int64_t start_ns = 0;
  std::int64_t finish_ns = 0;
  std::int64_t stop_ns = 0;
  bool cancelled = false;
  std::int64_t produced = 0;       // output tokens produced so far (measured schedule)
  std::int64_t tokens(std::int64_t step) const { return decoding ? tokens_at + (step - step_at) : tokens_at; }
};

struct Cancellation {
  std::int64_t at_ns;
  std::int64_t ordinal;
  std::uint32_t slot;
  std::uint32_t generation;
  bool operator>(const Cancellation& o) const { return at_ns != o.at_ns ? at_ns > o.at_ns : ordinal > o.ordinal; }
};

// An event of the measured schedule. At one instant, releases come first (freed memory is
// free for what starts at that instant), then tokens, then starts.
struct TimedEvent {
  enum Kind : std::uint8_t { release = 0, token = 1, start = 2 };
  std::int64_t at_ns;
  Kind kind;
  std::uint64_t order;
  std::uint32_t slot;
  std::uint32_t generation;
  bool operator>(const TimedEvent& o) const {
    if (at_ns != o.at_ns) return at_ns > o.at_ns;
    if (kind != o.kind) return kind > o.kind;
    return order > o.order;
  }
};

struct SlotRef {
  std::uint32_t slot;
  std::uint32_t generation;
};

Latency summarize(std::vector<std::int64_t>& values) {
  Latency l;
  l.count = static_cast<std::int64_t>(values.size());
  if (values.empty()) return l;
  std::sort(values.begin(), values.end());
  // Nearest rank: the p-th percentile is the value at rank ceil(p/100 * N).
  auto rank = [&](int p) { return values[static_cast<std::size_t>((p * l.count + 99) / 100 - 1)]; };
  l.p50_ns = rank(50);
  l.p99_ns = rank(99);
  l.max_ns = values.back();
  Int128 sum = 0;
  for (auto v : values) sum += v;
  l.mean_ns = static_cast<double>(sum) / static_cast<double>(l.count);
  return l;
}

class Engine {
 public:
  Engine(TraceReader& trace, Allocator& allocator, const ReplayOptions& options)
      : trace_(trace), alloc_(allocator), opt_(options), groups_(options.layout.groups.size()) {
    for (const auto& g : options.layout.groups) bytes_per_position_.push_back(g.bytes_per_position);
    bytes_per_token_ = options.layout.bytes_per_token();
    max_tokens_ = options.layout.max_model_len > 0 ? options.layout.max_model_len : kUnlimited;
    if (opt_.max_batched_tokens > 0 && !opt_.chunked_prefill && opt_.max_batched_tokens < max_tokens_) {
      // As vLLM insists: without chunking, a prompt must fit in one iteration's budget.
      throw InputError(Location{"", 0, "--max-batched-tokens"},
                       "without chunked prefill it must be at least the model's maximum length (" +
                           std::to_string(max_tokens_) + ")");
    }
  }

  ReplayReport run();

 private:
  ReplayReport run_simulated();
  ReplayReport run_measured();
  // --- measured schedule
  void push_timed(std::int64_t at_ns, TimedEvent::Kind kind, std::uint32_t slot);
  void handle_timed(const TimedEvent& e);
  std::int64_t token_time(const Flight& f, std::int64_t k) const;
  // --- arrivals, queue, cancellations
  bool fetch();
  void pull_arrivals(std::int64_t now);
  void process_cancellations(std::int64_t until_ns, bool mid_span);
  // --- one iteration
  void run_iteration();
  void handle_event(std::uint32_t slot);
  void schedule_prefills(std::int64_t& prefill_tokens);
  void prefill(std::uint32_t slot, std::int64_t chunk);
  // Schedules the request's next event and returns the token count it falls at.
  std::int64_t schedule_next(std::uint32_t slot, std::int64_t tokens);
  void grow(std::uint32_t slot, std::int64_t tokens, std::int64_t step_tokens);
  // --- accounting
  // Re-reads the request's footprints at `tokens`. `with_slopes`: the request will take
  // steps before its next event, so its figures must carry their per-step change.
  void refresh(std::uint32_t slot, std::int64_t tokens, bool with_slopes);
  void apply(std::uint32_t slot, std::int64_t group, const Contribution& next, std::int64_t correction_ns);
  void after_op();
  void release(std::uint32_t slot, std::int64_t correction_ns);
  void flush_histograms(std::int64_t until_ns);
  void end_span(std::int64_t duration_ns);
  void sample_timeline();
  ReplayReport finish_report();
  [[noreturn]] void broken(const Flight& f, const std::string& what) const;

  TraceReader& trace_;
  Allocator& alloc_;
  const ReplayOptions& opt_;
  std::vector<std::int64_t> bytes_per_position_;
  std::int64_t bytes_per_token_ = 0;  // all groups
  std::int64_t max_tokens_;

  // The trace.
  Request next_;
  bool have_next_ = false;
  std::int64_t ordinal_ = 0;

  // Requests.
  std::vector<Flight> flights_;
  std::vector<Contribution> contributions_;  // [slot * groups + group]
  std::vector<std::uint32_t> free_slots_;
  std::deque<SlotRef> queue_;
  std::int64_t queued_ = 0;
  std::int64_t running_ = 0;
  std::vector<SlotRef> prefilling_;   // admitted, prompt incomplete (chunked prefill)
  std::vector<SlotRef> finishing_;    // produce their last token in this iteration
  std::vector<SlotRef> first_token_;  // produce their first token in this iteration
  std::priority_queue<Cancellation, std::vector<Cancellation>, std::greater<>> cancellations_;
  detail::StepWheel wheel_;
  std::vector<StepEvent> due_;
  bool measured_ = false;
  std::priority_queue<TimedEvent, std::vector<TimedEvent>, std::greater<>> timed_;
  std::uint64_t timed_order_ = 0;

  // Time.
  std::int64_t now_ = 0;           // start of the current span
  std::int64_t step_ = 0;
  std::int64_t span_ns_ = 0;       // duration of the iteration in progress
  Clock clock_;                    // spans before the current one
  std::int64_t hist_mark_ns_ = 0;

  // Sums.
  std::size_t groups_;
  std::vector<GroupSums> sums_ = std::vector<GroupSums>(groups_);
  LinearSum effective_bytes_;
  LinearSum allocated_bytes_;
  LinearSum reserved_bytes_;
  std::int64_t decoding_seqs_ = 0;
  std::int64_t context_base_ = 0;  // sum of n * tokens over decoding requests: base + slope * s
  std::int64_t context_slope_ = 0;
  TimeHistogram effective_hist_, allocated_hist_, reserved_hist_;
  Peak effective_peak_, allocated_peak_, reserved_peak_;
  std::int64_t op_transient_bytes_ = 0;
  std::vector<Fragmentation> at_peak_slots_ = std::vector<Fragmentation>(groups_);
  // External fragmentation, integrated over time between allocator operations.
  double ext_ratio_ = 0;
  double ext_integral_ = 0;
  double ext_max_ = 0;
  std::int64_t next_sample_ns_ = 0;

  ReplayReport report_;
  std::vector<std::int64_t> ttft_, e2e_;
};

[[noreturn]] void Engine::broken(const Flight& f, const std::string& what) const {
  throw InternalError(alloc_.name() + ": request #" + std::to_string(f.ordinal) + " at step " +
                      std::to_string(step_) + ": " + what);
}

bool Engine::fetch() {
  have_next_ = trace_.next(next_);
  if (have_next_) ++ordinal_;
  return have_next_;
}

void Engine::pull_arrivals(std::int64_t now) {
  while (have_next_ && next_.arrival_ns <= now) {
    ++report_.requests;
    // (Compared without adding: the two lengths may each be near 2^63.)
    if (next_.prompt_tokens > max_tokens_ - next_.output_tokens) {
      ++report_.rejected_too_long;  // an engine refuses these at its API
      fetch();
      continue;
    }
    // Every figure about a request is at most its n samples at full length, in bytes: when
    // that does not fit in 64 bits (lengths near 2^63 and no maximum model length to refuse
    // them), the request cannot be replayed.
    std::int64_t positions = 0;
    std::int64_t bytes = 0;
    if (__builtin_mul_overflow(next_.n, next_.prompt_tokens + next_.output_tokens, &positions) ||
        __builtin_mul_overflow(positions, bytes_per_token_, &bytes)) {
      throw InputError(Location{trace_.path(), 0, "request #" + std::to_string(ordinal_) + " ('" + next_.id + "')"},
                       "n x (prompt + output tokens) x " + std::to_string(bytes_per_token_) +
                           " bytes per token overflows 64 bits");
    }
    std::uint32_t slot;
    if (!free_slots_.empty()) {
      slot = free_slots_.back();
      free_slots_.pop_back();
    } else {
      slot = static_cast<std::uint32_t>(flights_.size());
      flights_.emplace_back();
      contributions_.resize(flights_.size() * groups_);
    }
    Flight& f = flights_[slot];
    f.phase = Phase::queued;
    f.ordinal = ordinal_;
    f.arrival_ns = next_.arrival_ns;
    f.prompt = next_.prompt_tokens;
    f.output = next_.output_tokens;
    f.n = next_.n;
    f.planned = next_.planned_output_tokens();
    f.prefilled = 0;
    f.decoding = false;
    f.tokens_at = 0;
    f.step_at = step_;
    f.first_token_ns = -1;
    for (std::size_t g = 0; g < groups_; ++g) contributions_[slot * groups_ + g] = Contribution{};
    ++queued_;
    if (measured_) {
      if (!next_.has_service_times()) {
        throw InputError(Location{trace_.path(), 0, "request #" + std::to_string(ordinal_) + " ('" + next_.id + "')"},
                         "has no start, first_token and finish times, but the schedule is measured (the trace's "
                         "first request has them; use --schedule simulate to ignore them)");
      }
      f.start_ns = *next_.start_ns;
      f.first_token_ns = *next_.first_token_ns;
      f.finish_ns = *next_.finish_ns;
      f.cancelled = next_.cancel_ns && *next_.cancel_ns < f.finish_ns;
      f.stop_ns = f.cancelled ? *next_.cancel_ns : f.finish_ns;
      f.produced = 0;
      if (!(f.arrival_ns <= f.start_ns && f.start_ns <= f.first_token_ns && f.first_token_ns <= f.finish_ns)) {
        throw InputError(Location{trace_.path(), 0, "request #" + std::to_string(ordinal_) + " ('" + next_.id + "')"},
                         "service times out of order: expected arrival <= start <= first_token <= finish");
      }
      push_timed(f.cancelled && f.stop_ns <= f.start_ns ? f.stop_ns : f.start_ns,
                 f.cancelled && f.stop_ns <= f.start_ns ? TimedEvent::release : TimedEvent::start, slot);
    } else {
      queue_.push_back({slot, f.generation});
      if (next_.cancel_ns) cancellations_.push({*next_.cancel_ns, f.ordinal, slot, f.generation});
    }
    fetch();
  }
}

void Engine::process_cancellations(std::int64_t until_ns, bool mid_span) {
  // mid_span: those strictly before until_ns, inside the iteration in progress; otherwise
  // those at or before until_ns, at an iteration boundary.
  while (!cancellations_.empty() &&
         (mid_span ? cancellations_.top().at_ns < until_ns : cancellations_.top().at_ns <= until_ns)) {
    const Cancellation c = cancellations_.top();
    cancellations_.pop();
    Flight& f = flights_[c.slot];
    if (f.generation != c.generation || f.phase == Phase::free) continue;  // already finished
    if (f.phase == Phase::queued) {
      ++report_.cancelled_queued;
      --queued_;
      f.phase = Phase::free;
      ++f.generation;
      free_slots_.push_back(c.slot);
      continue;
    }
    ++report_.cancelled_running;
    // The tokens the request holds at this step include the one it is (or would next be)
    // producing; the ones before it were generated.
    if (f.decoding) report_.generated_tokens += f.n * (f.tokens(step_) - 1 - f.prompt);
    if (mid_span) {
      flush_histograms(c.at_ns);
      release(c.slot, c.at_ns - now_);
    } else {
      release(c.slot, 0);
    }
  }
}

void Engine::grow(std::uint32_t slot, std::int64_t tokens, std::int64_t step_tokens) {
  const Outcome o = alloc_.grow(slot, tokens, step_tokens);
  // Without a budget every allocator is unbounded: running out is impossible. (Budgets,
  // admission and preemption slot in here.)
  if (o != Outcome::ok) broken(flights_[slot], "allocation failed in a run without a memory budget");
}

void Engine::refresh(std::uint32_t slot, std::int64_t tokens, bool with_slopes) {
  const Flight& f = flights_[slot];
  op_transient_bytes_ = 0;
  for (std::size_t g = 0; g < groups_; ++g) {
    const Footprint fp = alloc_.footprint(slot, g, tokens);
    const auto e = detail::effective_share(tokens, f.prompt, f.n, opt_.layout.groups[g].window_tokens);
    Contribution c;
    c.step = step_;
    c.value[kEffective] = e.value;
    c.value[kAllocated] = fp.allocated;
    c.value[kTail] = fp.tail;
    c.value[kReservation] = fp.reservation;
    c.value[kDuplicate] = fp.duplicate;
    c.value[kOutside] = fp.outside_window;
    if (with_slopes) {
      c.slope[kEffective] = e.slope;
      c.slope[kTail] = fp.tail_slope;
      c.slope[kReservation] = fp.reservation_slope;
      c.slope[kDuplicate] = fp.duplicate_slope;
      c.slope[kOutside] = fp.outside_window_slope;
    }
    // The allocator's account of where its room goes must add up to the engine's
    // independent count of effective tokens, now and per step.
    std::int64_t parts = 0, part_slopes = 0;
    for (int q = kEffective; q < kQuantities; ++q) {
      if (q == kAllocated) continue;
      parts += c.value[q];
      part_slopes += c.slope[q];
    }
    if (parts != fp.allocated || part_slopes != 0 || std::min({fp.tail, fp.reservation, fp.duplicate, fp.outside_window}) < 0) {
      broken(f, "layer group " + std::to_string(g) + " at " + std::to_string(tokens) + " tokens: allocated " +
                    std::to_string(fp.allocated) + " != effective " + std::to_string(e.value) + " + tail " +
                    std::to_string(fp.tail) + " + reservation " + std::to_string(fp.reservation) + " + duplicate " +
                    std::to_string(fp.duplicate) + " + outside window " + std::to_string(fp.outside_window) +
                    " (slopes sum to " + std::to_string(part_slopes) + ")");
    }
    apply(slot, static_cast<std::int64_t>(g), c, 0);
    op_transient_bytes_ += fp.transient * bytes_per_position_[g];
  }
  after_op();
}

void Engine::apply(std::uint32_t slot, std::int64_t group, const Contribution& next, std::int64_t correction_ns) {
  Contribution& old = contributions_[slot * groups_ + static_cast<std::size_t>(group)];
  GroupSums& sums = sums_[static_cast<std::size_t>(group)];
  const std::int64_t bpp = bytes_per_position_[static_cast<std::size_t>(group)];
  for (int q = 0; q < kQuantities; ++q) {
    const std::int64_t old_now = old.value[q] + old.slope[q] * (step_ - old.step);
    const std::int64_t dv = next.value[q] - old_now;
    const std::int64_t ds = next.slope[q] - old.slope[q];
    if (dv == 0 && ds == 0) continue;
    sums.q[q].add(dv, ds, step_, clock_);
    // A change part-way through the current span: it took effect for the rest of it only.
    if (correction_ns != 0) sums.q[q].adjust_integral(-Int128{dv} * correction_ns);
    if (q == kEffective || q == kAllocated) {
      LinearSum& total = q == kEffective ? effective_bytes_ : allocated_bytes_;
      total.add(dv * bpp, ds * bpp, step_, clock_);
      if (correction_ns != 0) total.adjust_integral(-Int128{dv} * bpp * correction_ns);
    }
  }
  old = next;
}

void Engine::after_op() {
  const PoolState pool = alloc_.pool();
  const std::int64_t allocated = allocated_bytes_.at(step_);
  // The allocator's pool and the requests' footprints are two separate accounts.
  if (allocated != pool.reserved_bytes - pool.free_bytes) {
    throw InternalError(alloc_.name() + ": footprints add up to " + std::to_string(allocated) +
                        " bytes but the pool holds " + std::to_string(pool.reserved_bytes - pool.free_bytes));
  }
  const std::int64_t reserved_delta = pool.reserved_bytes - reserved_bytes_.at(step_);
  if (reserved_delta != 0) reserved_bytes_.add(reserved_delta, 0, step_, clock_);
  if (allocated_peak_.offer(allocated + op_transient_bytes_, now_)) {
    for (std::size_t g = 0; g < groups_; ++g) {
      Fragmentation& p = at_peak_slots_[g];
      p.tail = static_cast<double>(sums_[g].q[kTail].at(step_));
      p.reservation = static_cast<double>(sums_[g].q[kReservation].at(step_));
      p.duplicate = static_cast<double>(sums_[g].q[kDuplicate].at(step_));
      p.outside_window = static_cast<double>(sums_[g].q[kOutside].at(step_));
    }
  }
  reserved_peak_.offer(pool.reserved_bytes, now_);
  const double ratio =
      pool.free_bytes > 0 ? 1.0 - static_cast<double>(pool.largest_free_extent_bytes) / static_cast<double>(pool.free_bytes)
                          : 0.0;
  if (ratio != ext_ratio_) {
    ext_ratio_ = ratio;
    ext_max_ = std::max(ext_max_, ratio);
  }
#if KVSIM_EXPENSIVE_CHECKS
  alloc_.check_invariants();
#endif
}

std::int64_t Engine::schedule_next(std::uint32_t slot, std::int64_t tokens) {
  const Flight& f = flights_[slot];
  std::int64_t next = std::min(alloc_.next_event_tokens(slot), f.prompt + f.output);
  for (const auto& g : opt_.layout.groups) {
    next = std::min(next, detail::effective_share(tokens, f.prompt, f.n, g.window_tokens).next_change);
  }
  if (next <= tokens) broken(f, "next event at " + std::to_string(next) + " tokens is not ahead of " + std::to_string(tokens));
  wheel_.push(step_ + (next - tokens), slot, f.generation);
  return next;
}

void Engine::handle_event(std::uint32_t slot) {
  Flight& f = flights_[slot];
  const std::int64_t t = f.tokens(step_);
#if KVSIM_EXPENSIVE_CHECKS
  // The figures carried forward by their slopes must equal what the allocator reports for
  // the last step before this event, when its holding was still the old one.
  if (f.step_at < step_) {
    for (std::size_t g = 0; g < groups_; ++g) {
      const Contribution& c = contributions_[slot * groups_ + g];
      const std::int64_t steps = step_ - 1 - c.step;
      const Footprint fp = alloc_.footprint(slot, g, t - 1);
      const std::int64_t expect[kQuantities] = {
          detail::effective_tokens(t - 1, f.prompt, f.n, opt_.layout.groups[g].window_tokens),
          fp.allocated, fp.tail, fp.reservation, fp.duplicate, fp.outside_window};
      for (int q = 0; q < kQuantities; ++q) {
        if (c.value[q] + c.slope[q] * steps != expect[q]) {
          broken(f, "layer group " + std::to_string(g) + ": quantity " + std::to_string(q) + " carried to " +
                        std::to_string(c.value[q] + c.slope[q] * steps) + " but is " + std::to_string(expect[q]) +
                        " at " + std::to_string(t - 1) + " tokens");
        }
      }
    }
  }
#endif
  grow(slot, t, 1);
  f.tokens_at = t;
  f.step_at = step_;
  if (t == f.prompt + f.output) {
    finishing_.push_back({slot, f.generation});
    refresh(slot, t, false);
  } else {
    refresh(slot, t, schedule_next(slot, t) > t + 1);
  }
}

void Engine::prefill(std::uint32_t slot, std::int64_t chunk) {
  Flight& f = flights_[slot];
  f.prefilled += chunk;
  report_.prompt_tokens += chunk;
  const bool complete = f.prefilled == f.prompt;
  const std::int64_t first = complete && f.output > 0 ? 1 : 0;
  const std::int64_t t = f.prefilled + first;
  if (chunk + first > 0) grow(slot, t, chunk + first);
  f.tokens_at = t;
  f.step_at = step_;
  bool with_slopes = false;
  if (complete) {
    if (first != 0) first_token_.push_back({slot, f.generation});
    if (f.output <= 1) {
      finishing_.push_back({slot, f.generation});
    } else {
      f.decoding = true;
      decoding_seqs_ += f.n;
      context_base_ += f.n * t - f.n * step_;
      context_slope_ += f.n;
      with_slopes = schedule_next(slot, t) > t + 1;
    }
  }
  refresh(slot, t, with_slopes);
}

void Engine::schedule_prefills(std::int64_t& prefill_tokens) {
  std::int64_t budget = opt_.max_batched_tokens > 0 ? opt_.max_batched_tokens - decoding_seqs_ : kUnlimited;
  // Prefills already under way continue first, in admission order (vLLM's running queue).
  std::size_t kept = 0;
  for (const SlotRef ref : prefilling_) {
    Flight& f = flights_[ref.slot];
    if (f.generation != ref.generation || f.phase != Phase::running) continue;  // cancelled
    if (budget > 0) {
      const std::int64_t chunk = std::min(f.prompt - f.prefilled, budget);
      budget -= chunk;
      prefill_tokens += chunk;
      prefill(ref.slot, chunk);
    }
    if (f.prefilled < f.prompt) prefilling_[kept++] = ref;
  }
  prefilling_.resize(kept);
  // Then waiting requests, first come first served.
  while (!queue_.empty() && (opt_.max_running == 0 || running_ < opt_.max_running)) {
    const SlotRef ref = queue_.front();
    Flight& f = flights_[ref.slot];
    if (f.generation != ref.generation || f.phase != Phase::queued) {
      queue_.pop_front();  // cancelled while waiting
      continue;
    }
    if (budget <= 0 && f.prompt > 0) break;
    const std::int64_t chunk = std::min(f.prompt, budget);
    if (chunk < f.prompt && !opt_.chunked_prefill) break;
    queue_.pop_front();
    --queued_;
    AdmitInfo info{f.prompt, f.planned, f.output, f.n};
    if (alloc_.admit(ref.slot, info) != Outcome::ok) broken(f, "admission failed in a run without a memory budget");
    f.phase = Phase::running;
    ++running_;
    budget -= chunk;
    prefill_tokens += chunk;
    prefill(ref.slot, chunk);
    if (f.prefilled < f.prompt) prefilling_.push_back(ref);
  }
}

void Engine::release(std::uint32_t slot, std::int64_t correction_ns) {
  Flight& f = flights_[slot];
  if (f.decoding) {
    decoding_seqs_ -= f.n;
    context_base_ -= f.n * f.tokens_at - f.n * f.step_at;
    context_slope_ -= f.n;
  }
  for (std::size_t g = 0; g < groups_; ++g) apply(slot, static_cast<std::int64_t>(g), Contribution{step_, {}, {}}, correction_ns);
  alloc_.release(slot);
  op_transient_bytes_ = 0;
  after_op();
  f.phase = Phase::free;
  f.decoding = false;
  ++f.generation;
  --running_;
  free_slots_.push_back(slot);
}

void Engine::flush_histograms(std::int64_t until_ns) {
  const std::int64_t d = until_ns - hist_mark_ns_;
  if (d <= 0) return;
  effective_hist_.add(effective_bytes_.at(step_), d);
  allocated_hist_.add(allocated_bytes_.at(step_), d);
  reserved_hist_.add(reserved_bytes_.at(step_), d);
  for (auto& g : sums_) {
    g.effective_hist.add(g.q[kEffective].at(step_), d);
    g.allocated_hist.add(g.q[kAllocated].at(step_), d);
  }
  ext_integral_ += ext_ratio_ * static_cast<double>(d);
  hist_mark_ns_ = until_ns;
}

void Engine::end_span(std::int64_t duration_ns) {
  flush_histograms(now_ + duration_ns);
  clock_.duration_ns += duration_ns;
  clock_.step_weighted += Int128{step_} * duration_ns;
  now_ += duration_ns;
  span_ns_ = 0;
}

void Engine::sample_timeline() {
  if (!opt_.timeline || now_ < next_sample_ns_) return;
  next_sample_ns_ = opt_.sample_every_ns > 0 ? now_ + opt_.sample_every_ns : now_;
  TimelineRow row;
  row.time_ns = now_;
  row.step = step_;
  row.running = running_;
  row.queued = queued_;
  row.effective_bytes = effective_bytes_.at(step_);
  row.allocated_bytes = allocated_bytes_.at(step_);
  row.reserved_bytes = reserved_bytes_.at(step_);
  for (auto& g : sums_) {
    row.effective_tokens.push_back(g.q[kEffective].at(step_));
    row.allocated_slots.push_back(g.q[kAllocated].at(step_));
  }
  opt_.timeline(row);
}

void Engine::run_iteration() {
  // Requests whose next event falls on this step.
  wheel_.take(step_, due_);
  for (const StepEvent& e : due_) {
    if (flights_[e.slot].generation == e.generation && flights_[e.slot].phase == Phase::running) handle_event(e.slot);
  }
  // The decoding batch is fixed before new prefills join it (they decode from the next step).
  const std::int64_t decode_seqs = decoding_seqs_;
  const std::int64_t context = context_base_ + context_slope_ * step_;
  std::int64_t prefill_tokens = 0;
  schedule_prefills(prefill_tokens);

  const CostModel& c = opt_.cost;
  const Int128 ps = Int128{c.base_ps} + Int128{c.prefill_token_ps} * prefill_tokens +
                    Int128{c.decode_seq_ps} * decode_seqs + Int128{c.context_token_ps} * context;
  const std::int64_t duration = std::max<std::int64_t>(1, static_cast<std::int64_t>((ps + 999) / 1000));
  span_ns_ = duration;
  ++report_.iterations;

  const std::int64_t effective = effective_bytes_.at(step_);
  effective_peak_.offer(effective, now_);
  for (auto& g : sums_) {
    g.effective_peak.offer(g.q[kEffective].at(step_), now_);
    g.allocated_peak.offer(g.q[kAllocated].at(step_), now_);
  }
  sample_timeline();

  // Cancellations inside the iteration free their requests at their own instant.
  process_cancellations(now_ + duration, true);
  end_span(duration);
  ++step_;

  for (const SlotRef ref : first_token_) {
    Flight& f = flights_[ref.slot];
    if (f.generation != ref.generation) continue;
    f.first_token_ns = now_;
    ttft_.push_back(now_ - f.arrival_ns);
  }
  first_token_.clear();
  for (const SlotRef ref : finishing_) {
    Flight& f = flights_[ref.slot];
    if (f.generation != ref.generation) continue;
    ++report_.completed;
    e2e_.push_back(now_ - f.arrival_ns);
    report_.generated_tokens += f.n * f.output;
    release(ref.slot, 0);
  }
  finishing_.clear();
  if (opt_.progress && report_.iterations % 4096 == 0 && trace_.total_bytes() > 0) {
    opt_.progress(static_cast<double>(trace_.bytes_read()) / static_cast<double>(trace_.total_bytes()));
  }
}

ReplayReport Engine::run() {
  report_.allocator = alloc_.name();
  report_.trace = trace_.path();
  if (!fetch()) return finish_report();
  measured_ = opt_.schedule == Schedule::measured ||
              (opt_.schedule == Schedule::automatic && next_.has_service_times());
  report_.schedule = measured_ ? "measured" : "simulated";
  report_.cost_model = measured_ ? "none (measured schedule)" : opt_.cost.name;
  now_ = next_.arrival_ns;
  report_.start_ns = now_;
  hist_mark_ns_ = next_sample_ns_ = now_;
  return measured_ ? run_measured() : run_simulated();
}

ReplayReport Engine::run_simulated() {
  for (;;) {
    pull_arrivals(now_);
    process_cancellations(now_, false);
    if (running_ == 0 && queued_ == 0) {
      if (!have_next_) break;
      end_span(next_.arrival_ns - now_);  // idle until the next arrival
      continue;
    }
    run_iteration();
  }
  report_.end_ns = now_;
  return finish_report();
}

std::int64_t Engine::token_time(const Flight& f, std::int64_t k) const {
  // Output token k (1-based) of m appears at first_token + (k - 1) / (m - 1) of the way to
  // finish, rounded down to the nanosecond.
  if (k <= 1 || f.output <= 1) return f.first_token_ns;
  return f.first_token_ns +
         static_cast<std::int64_t>(Int128{k - 1} * (f.finish_ns - f.first_token_ns) / (f.output - 1));
}

void Engine::push_timed(std::int64_t at_ns, TimedEvent::Kind kind, std::uint32_t slot) {
  timed_.push({at_ns, kind, timed_order_++, slot, flights_[slot].generation});
}

void Engine::handle_timed(const TimedEvent& e) {
  Flight& f = flights_[e.slot];
  if (f.generation != e.generation) return;
  const auto next_token_or_release = [&] {
    const std::int64_t k = f.produced + 1;
    const std::int64_t at = token_time(f, k);
    if (k <= f.output && at < f.stop_ns) push_timed(at, TimedEvent::token, e.slot);
    else push_timed(f.stop_ns, TimedEvent::release, e.slot);
  };
  switch (e.kind) {
    case TimedEvent::start: {
      --queued_;
      ++running_;
      f.phase = Phase::running;
      if (alloc_.admit(e.slot, AdmitInfo{f.prompt, f.planned, f.output, f.n}) != Outcome::ok) {
        broken(f, "admission failed in a run without a memory budget");
      }
      if (f.prompt > 0) grow(e.slot, f.prompt, f.prompt);
      f.prefilled = f.prompt;
      report_.prompt_tokens += f.prompt;
      f.tokens_at = f.prompt;
      refresh(e.slot, f.prompt, false);
      next_token_or_release();
      break;
    }
    case TimedEvent::token: {
      ++f.produced;
      f.tokens_at = f.prompt + f.produced;
      grow(e.slot, f.tokens_at, 1);
      refresh(e.slot, f.tokens_at, false);
      next_token_or_release();
      break;
    }
    case TimedEvent::release: {
      if (f.phase == Phase::queued) {  // cancelled before it started
        ++report_.cancelled_queued;
        --queued_;
        f.phase = Phase::free;
        ++f.generation;
        free_slots_.push_back(e.slot);
        break;
      }
      if (f.cancelled) {
        ++report_.cancelled_running;
        report_.generated_tokens += f.n * f.produced;
      } else {
        ++report_.completed;
        report_.generated_tokens += f.n * f.output;
        if (f.output > 0) ttft_.push_back(f.first_token_ns - f.arrival_ns);
        e2e_.push_back(f.finish_ns - f.arrival_ns);
      }
      release(e.slot, 0);
      break;
    }
  }
}

ReplayReport Engine::run_measured() {
  for (;;) {
    std::int64_t at = kUnlimited;
    if (have_next_) at = next_.arrival_ns;
    if (!timed_.empty()) at = std::min(at, timed_.top().at_ns);
    if (at == kUnlimited) break;
    if (at > now_) end_span(at - now_);
    pull_arrivals(now_);
    while (!timed_.empty() && timed_.top().at_ns == now_) {
      const TimedEvent e = timed_.top();
      timed_.pop();
      handle_timed(e);
    }
    effective_peak_.offer(effective_bytes_.at(step_), now_);
    for (auto& g : sums_) {
      g.effective_peak.offer(g.q[kEffective].at(step_), now_);
      g.allocated_peak.offer(g.q[kAllocated].at(step_), now_);
    }
    sample_timeline();
  }
  report_.end_ns = now_;
  return finish_report();
}

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

ReplayReport Engine::finish_report() {
  ReplayReport& r = report_;
  const double duration = static_cast<double>(clock_.duration_ns);
  auto mean = [&](const LinearSum& s) { return duration > 0 ? static_cast<double>(s.integral(clock_)) / duration : 0.0; };
  r.effective_bytes = occupancy(effective_bytes_, clock_, effective_hist_, effective_peak_, step_);
  r.allocated_bytes = occupancy(allocated_bytes_, clock_, allocated_hist_, allocated_peak_, step_);
  r.reserved_bytes = occupancy(reserved_bytes_, clock_, reserved_hist_, reserved_peak_, step_);
  for (std::size_t g = 0; g < groups_; ++g) {
    GroupReport gr;
    gr.group = opt_.layout.groups[g];
    GroupSums& s = sums_[g];
    gr.effective_tokens = occupancy(s.q[kEffective], clock_, s.effective_hist, s.effective_peak, step_);
    gr.allocated_slots = occupancy(s.q[kAllocated], clock_, s.allocated_hist, s.allocated_peak, step_);
    gr.mean_slots = {mean(s.q[kTail]), mean(s.q[kReservation]), mean(s.q[kDuplicate]), mean(s.q[kOutside])};
    gr.at_peak_slots = at_peak_slots_[g];
    const double bpp = static_cast<double>(bytes_per_position_[g]);
    r.mean_bytes.tail += gr.mean_slots.tail * bpp;
    r.mean_bytes.reservation += gr.mean_slots.reservation * bpp;
    r.mean_bytes.duplicate += gr.mean_slots.duplicate * bpp;
    r.mean_bytes.outside_window += gr.mean_slots.outside_window * bpp;
    r.at_peak_bytes.tail += gr.at_peak_slots.tail * bpp;
    r.at_peak_bytes.reservation += gr.at_peak_slots.reservation * bpp;
    r.at_peak_bytes.duplicate += gr.at_peak_slots.duplicate * bpp;
    r.at_peak_bytes.outside_window += gr.at_peak_slots.outside_window * bpp;
    r.groups.push_back(gr);
  }
  const PoolState pool = alloc_.pool();
  const Int128 allocated_integral = allocated_bytes_.integral(clock_);
  r.token_usage = allocated_integral > 0
                      ? static_cast<double>(effective_bytes_.integral(clock_)) / static_cast<double>(allocated_integral)
                      : 0;
  const double capacity_integral = pool.capacity_bytes > 0 ? static_cast<double>(pool.capacity_bytes) * duration
                                                           : static_cast<double>(reserved_bytes_.integral(clock_));
  r.block_usage = capacity_integral > 0 ? static_cast<double>(allocated_integral) / capacity_integral : 0;
  r.external_fragmentation_mean = duration > 0 ? ext_integral_ / duration : 0;
  r.external_fragmentation_max = ext_max_;
  r.failed_placements = pool.failed_placements;
  r.copied_bytes = pool.copied_bytes;
  r.ttft = summarize(ttft_);
  r.e2e = summarize(e2e_);
  r.allocated_bytes_at_end = pool.reserved_bytes - pool.free_bytes;
  r.leak_free = r.allocated_bytes_at_end == 0 && running_ == 0 && r.allocated_bytes.at_end == 0;
  if (!r.leak_free) {
    throw InternalError(alloc_.name() + ": the run ended holding " + std::to_string(r.allocated_bytes_at_end) +
                        " bytes (" + std::to_string(running_) + " requests still running)");
  }
  return r;
}

}  // namespace

ReplayReport replay(TraceReader& trace, Allocator& allocator, const ReplayOptions& options) {
  Engine engine(trace, allocator, options);
  return engine.run();
}

}  // namespace kvsim
