// The replay engine: continuous batching on integer time, driving one allocator.
//
// Each iteration (step s, starting at time T): arrivals and cancellations due are taken;
// the allocator is called for the running requests whose next event falls on this step;
// prefills under way continue; then, unless memory ran short this step, swapped-out and
// waiting requests are admitted. The iteration lasts what the cost model gives; arrivals and
// cancellations inside it happen at their own instants, and the requests that produced
// their last token are released at its end. A decoding request is touched only at its
// events; in between its figures follow the slopes it reported (ledger.h).
#include "engine.h"

#include <algorithm>
#include <limits>
#include <string>

#include "effective.h"
#include "footprint.h"
#include "kvsim/error.h"
#include "kvsim/option_names.h"
#include "kvsim/units.h"

namespace kvsim {
namespace detail {
namespace {

// SGLang clips its estimate of a request's future tokens (CLIP_MAX_NEW_TOKENS_ESTIMATION).
constexpr std::int64_t kSglangClipTokens = 4096;
// SGLang's retraction assumes each surviving request decodes this many more steps
// (SGLANG_RETRACT_DECODE_STEPS) when it recomputes the new-token ratio.
constexpr std::int64_t kSglangRetractDecodeSteps = 20;
constexpr std::int64_t kPpb = 1'000'000'000;

}  // namespace

Engine::Engine(TraceReader& trace, Allocator& allocator, const ReplayOptions& options)
    : trace_(trace), alloc_(allocator), opt_(options), groups_(options.layout.groups.size()) {
  for (const auto& g : options.layout.groups) bytes_per_position_.push_back(g.bytes_per_position);
  bytes_per_token_ = options.layout.bytes_per_token();
  max_tokens_ = options.layout.max_model_len > 0 ? options.layout.max_model_len : kUnlimited;
  if (opt_.max_batched_tokens > 0 && !opt_.chunked_prefill && opt_.max_batched_tokens < max_tokens_) {
    // As vLLM insists: without chunking, a prompt must fit in one iteration's budget.
    throw InputError(Location{"", 0, kOptMaxBatchedTokens},
                     "without chunked prefill it must be at least the model's maximum length (" +
                         std::to_string(max_tokens_) + ")");
  }
  capacity_bytes_ = opt_.memory.kv_budget_bytes;
  watermark_bytes_ = static_cast<std::int64_t>(Int128{capacity_bytes_} * opt_.memory.watermark_ppb / kPpb);
  sglang_ratio_ppb_ = opt_.memory.sglang_init_ratio_ppb;
}

[[noreturn]] void Engine::broken(const Flight& f, const std::string& what) const {
  throw InternalError(alloc_.name() + ": request #" + std::to_string(tickets_[f.ticket].ordinal) + " at step " +
                      std::to_string(step_) + ": " + what);
}

// --- arrivals, queue, cancellations --------------------------------------------------------

bool Engine::fetch() {
  have_next_ = trace_.next(next_);
  if (have_next_) ++ordinal_;
  return have_next_;
}

std::int64_t Engine::take_ticket() {
  ++report_.requests;
  // prompt + output > max, without overflow for lengths near 2^63.
  if (next_.prompt_tokens > max_tokens_ - std::min(next_.output_tokens, max_tokens_)) {
    ++report_.rejected_too_long;  // an engine refuses these at its API
    return -1;
  }
  // A request whose n samples at full length do not fit 64 bits of bytes cannot be replayed.
  const std::int64_t full_length = next_.prompt_tokens + next_.output_tokens;
  std::int64_t full_bytes = 0;
  if (full_length > std::numeric_limits<std::int64_t>::max() / std::max<std::int64_t>(1, next_.n) ||
      __builtin_mul_overflow(full_length * next_.n, bytes_per_token_, &full_bytes)) {
    throw InputError(Location{trace_.path(), 0, "request #" + std::to_string(ordinal_) + " ('" + next_.id + "')"},
                     "n x (prompt + output tokens) x " + std::to_string(bytes_per_token_) +
                         " bytes per token overflows 64 bits");
  }
  std::uint32_t index;
  if (!free_tickets_.empty()) {
    index = free_tickets_.back();
    free_tickets_.pop_back();
  } else {
    index = static_cast<std::uint32_t>(tickets_.size());
    tickets_.emplace_back();
  }
  Ticket& t = tickets_[index];
  const std::uint32_t generation = t.generation;
  t = Ticket{};
  t.generation = generation;
  t.phase = Phase::queued;
  t.arrival_ns = next_.arrival_ns;
  t.ordinal = ordinal_;
  t.prompt = next_.prompt_tokens;
  t.output = next_.output_tokens;
  t.n = next_.n;
  // What a planner allows for: the request's own limit, else the run's default, never less
  // than what the request really generates.
  t.planned = next_.max_tokens ? *next_.max_tokens : std::max(opt_.default_max_tokens, next_.output_tokens);
  return index;
}

void Engine::free_ticket(std::uint32_t ticket) {
  Ticket& t = tickets_[ticket];
  t.phase = Phase::free;
  t.slot = -1;
  ++t.generation;
  free_tickets_.push_back(ticket);
}

std::uint32_t Engine::start_flight(std::uint32_t ticket) {
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
  const Ticket& t = tickets_[ticket];
  const std::uint32_t generation = f.generation;
  const std::uint32_t epoch = f.epoch;  // the last occupant's stale events must stay stale
  f = Flight{};
  f.generation = generation;
  f.epoch = epoch;
  f.live = true;
  f.ticket = ticket;
  f.prompt = t.prompt;
  f.output = t.output;
  f.n = t.n;
  f.planned = t.planned;
  f.base_generated = t.base_generated;
  f.target = t.prompt + t.base_generated;
  f.step_at = step_;
  for (std::size_t g = 0; g < groups_; ++g) contributions_[slot * groups_ + g] = Contribution{};
  tickets_[ticket].slot = static_cast<std::int32_t>(slot);
  return slot;
}

void Engine::end_flight(std::uint32_t slot) {
  Flight& f = flights_[slot];
  tickets_[f.ticket].slot = -1;
  f.live = false;
  f.decoding = false;
  ++f.generation;
  ++f.epoch;
  free_slots_.push_back(slot);
}

void Engine::note_queue(std::int64_t at_ns) {
  if (at_ns > queue_mark_ns_) {
    queue_integral_ += Int128{queued_} * (at_ns - queue_mark_ns_);
    queue_mark_ns_ = at_ns;
  }
}

void Engine::enqueue_arrival() {
  const std::int64_t index = take_ticket();
  if (index < 0) return;
  const auto ticket = static_cast<std::uint32_t>(index);
  const Ticket& t = tickets_[ticket];
  note_queue(t.arrival_ns);
  queue_.push_back({ticket, t.generation});
  ++queued_;
  report_.queue_max = std::max(report_.queue_max, queued_);
  if (next_.cancel_ns) cancellations_.push({*next_.cancel_ns, t.ordinal, ticket, t.generation});
}

void Engine::process_span_events(std::int64_t until_ns, bool mid_span) {
  const auto due = [&](std::int64_t at) { return mid_span ? at < until_ns : at <= until_ns; };
  for (;;) {
    const bool arrival = have_next_ && due(next_.arrival_ns);
    const bool cancellation = !cancellations_.empty() && due(cancellations_.top().at_ns);
    if (!arrival && !cancellation) return;
    // At one instant an arrival comes first, so that a cancellation at arrival drops it.
    if (arrival && (!cancellation || next_.arrival_ns <= cancellations_.top().at_ns)) {
      enqueue_arrival();
      fetch();
    } else {
      const Cancellation c = cancellations_.top();
      cancellations_.pop();
      cancel(c, mid_span);
    }
  }
}

void Engine::cancel(const Cancellation& c, bool mid_span) {
  Ticket& t = tickets_[c.ticket];
  if (t.generation != c.generation || t.phase == Phase::free) return;  // already gone
  const std::int64_t at = mid_span ? c.at_ns : now_;
  const bool started = t.admitted_ns >= 0;
  (started ? report_.cancelled_running : report_.cancelled_queued) += 1;
  switch (t.phase) {
    case Phase::queued:
      note_queue(c.at_ns);
      --queued_;  // its queue entry goes stale
      report_.generated_tokens += t.n * t.base_generated;
      free_ticket(c.ticket);
      return;
    case Phase::swapped:
      report_.generated_tokens += t.n * (t.swapped_tokens - t.prompt);
      free_ticket(c.ticket);
      return;
    case Phase::running: {
      // The tokens it holds at this step include the one it is (or would next be)
      // producing; the ones before were generated.
      const auto slot = static_cast<std::uint32_t>(t.slot);
      report_.generated_tokens += t.n * flights_[slot].produced_before(step_);
      if (mid_span) flush_histograms(at);
      release(slot, mid_span ? at - now_ : 0);
      return;
    }
    case Phase::free:
      return;
  }
}

// --- accounting ----------------------------------------------------------------------------

void Engine::refresh(std::uint32_t slot, std::int64_t tokens, bool with_slopes) {
  const Flight& f = flights_[slot];
  op_transient_bytes_ = 0;
  for (std::size_t g = 0; g < groups_; ++g) {
    const Footprint fp = alloc_.footprint(slot, g, tokens);
    const auto e = effective_share(tokens, f.prompt, f.n, opt_.layout.groups[g].window_tokens);
    Contribution c;
    c.step = step_;
    c.value[kEffective] = e.value;
    c.value[kAllocated] = fp.allocated;
    c.value[kTail] = fp.tail;
    c.value[kReservation] = fp.reservation;
    c.value[kPadding] = fp.padding;
    c.value[kDuplicate] = fp.duplicate;
    c.value[kOutside] = fp.outside_window;
    if (with_slopes) {
      c.slope[kEffective] = e.slope;
      c.slope[kTail] = fp.tail_slope;
      c.slope[kReservation] = fp.reservation_slope;
      c.slope[kPadding] = fp.padding_slope;
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
    if (parts != fp.allocated || part_slopes != 0 ||
        std::min({fp.tail, fp.reservation, fp.padding, fp.duplicate, fp.outside_window}) < 0) {
      broken(f, "layer group " + std::to_string(g) + " at " + std::to_string(tokens) + " tokens: allocated " +
                    std::to_string(fp.allocated) + " != effective " + std::to_string(e.value) + " + tail " +
                    std::to_string(fp.tail) + " + reservation " + std::to_string(fp.reservation) + " + padding " +
                    std::to_string(fp.padding) + " + duplicate " +
                    std::to_string(fp.duplicate) + " + outside window " + std::to_string(fp.outside_window) +
                    " (slopes sum to " + std::to_string(part_slopes) + ")");
    }
    apply(slot, g, c, 0);
    op_transient_bytes_ += fp.transient * bytes_per_position_[g];
  }
  after_op();
}

void Engine::apply(std::uint32_t slot, std::size_t group, const Contribution& next, std::int64_t correction_ns) {
  Contribution& old = contributions_[slot * groups_ + group];
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
      p.padding = static_cast<double>(sums_[g].q[kPadding].at(step_));
      p.duplicate = static_cast<double>(sums_[g].q[kDuplicate].at(step_));
      p.outside_window = static_cast<double>(sums_[g].q[kOutside].at(step_));
    }
  }
  reserved_peak_.offer(pool.reserved_bytes, now_);
  ext_ratio_ = pool.largest_free_extent_bytes < pool.free_bytes
                   ? 1.0 - static_cast<double>(pool.largest_free_extent_bytes) / static_cast<double>(pool.free_bytes)
                   : 0.0;  // no holes (always, for block pools)
  ext_max_ = std::max(ext_max_, ext_ratio_);
#if KVSIM_EXPENSIVE_CHECKS
  alloc_.check_invariants();
#endif
}

std::int64_t Engine::held_bytes(std::uint32_t slot) const {
  std::int64_t bytes = 0;
  for (std::size_t g = 0; g < groups_; ++g) {
    bytes += contributions_[slot * groups_ + g].value[kAllocated] * bytes_per_position_[g];
  }
  return bytes;
}

void Engine::drop_holding(std::uint32_t slot, std::int64_t correction_ns) {
  Flight& f = flights_[slot];
  if (f.decoding) {
    decoding_seqs_ -= f.n;
    context_base_ -= f.n * f.tokens_at - f.n * f.step_at;
    context_slope_ -= f.n;
    clip_base_ -= f.clip_value - f.clip_slope * f.clip_step;
    clip_slope_ -= f.clip_slope;
    f.clip_value = f.clip_slope = 0;
  }
  planned_peak_sum_ -= f.planned_peak_bytes;
  f.planned_peak_bytes = 0;
  for (std::size_t g = 0; g < groups_; ++g) apply(slot, g, Contribution{step_, {}, {}}, correction_ns);
  alloc_.release(slot);
  op_transient_bytes_ = 0;
  after_op();
  running_order_.erase({f.admit_order, slot});
  f.decoding = false;
  --running_;
}

void Engine::release(std::uint32_t slot, std::int64_t correction_ns) {
  const std::uint32_t ticket = flights_[slot].ticket;
  drop_holding(slot, correction_ns);
  end_flight(slot);
  free_ticket(ticket);
}

void Engine::flush_histograms(std::int64_t until_ns) {
  const std::int64_t d = until_ns - hist_mark_ns_;
  if (d <= 0) return;
  effective_hist_.add(effective_bytes_.at(step_), d);
  allocated_hist_.add(allocated_bytes_.at(step_), d);
  reserved_hist_.add(reserved_bytes_.at(step_), d);
  // With one layer group its positions are the totals over its bytes per position, so
  // its quantiles come from the totals' (engine_report.cc).
  if (groups_ > 1) {
    for (auto& g : sums_) {
      g.effective_hist.add(g.q[kEffective].at(step_), d);
      g.allocated_hist.add(g.q[kAllocated].at(step_), d);
    }
  }
  ext_integral_ += ext_ratio_ * static_cast<double>(d);
  hist_mark_ns_ = until_ns;
}

void Engine::end_span(std::int64_t duration_ns) {
  flush_histograms(now_ + duration_ns);
  clock_.duration_ns += duration_ns;
  clock_.step_weighted += Int128{step_} * duration_ns;
  now_ += duration_ns;
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

// --- growth, preemption and the policies ---------------------------------------------------

std::int64_t Engine::schedule_next(std::uint32_t slot, std::int64_t tokens) {
  const Flight& f = flights_[slot];
  std::int64_t next = std::min(alloc_.next_event_tokens(slot), f.prompt + f.output);
  for (const auto& g : opt_.layout.groups) {
    next = std::min(next, effective_share(tokens, f.prompt, f.n, g.window_tokens).next_change);
  }
  if (opt_.memory.policy == Policy::sglang && bounded()) {
    // SGLang's estimate of the future stops being clipped when fewer tokens remain.
    const std::int64_t unclipped_at = f.prompt + f.planned - kSglangClipTokens + 1;
    if (unclipped_at > tokens) next = std::min(next, unclipped_at);
  }
  if (next <= tokens) broken(f, "next event at " + std::to_string(next) + " tokens is not ahead of " + std::to_string(tokens));
  wheel_.push(step_ + (next - tokens), slot, f.epoch);
  return next;
}

void Engine::update_clip(std::uint32_t slot) {
  Flight& f = flights_[slot];
  if (opt_.memory.policy != Policy::sglang || !bounded() || !f.decoding) return;
  clip_base_ -= f.clip_value - f.clip_slope * f.clip_step;
  clip_slope_ -= f.clip_slope;
  const std::int64_t remaining = std::max<std::int64_t>(0, f.planned - f.produced_before(step_));
  f.clip_value = f.n * std::min(remaining, kSglangClipTokens);
  f.clip_slope = remaining <= kSglangClipTokens && remaining > 0 ? -f.n : 0;
  f.clip_step = step_;
  clip_base_ += f.clip_value - f.clip_slope * f.clip_step;
  clip_slope_ += f.clip_slope;
}

void Engine::start_decoding(std::uint32_t slot, std::int64_t tokens) {
  Flight& f = flights_[slot];
  f.decoding = true;
  f.tokens_at = tokens;
  f.step_at = step_;
  decoding_seqs_ += f.n;
  context_base_ += f.n * tokens - f.n * step_;
  context_slope_ += f.n;
  update_clip(slot);
}

std::uint32_t Engine::choose_victim(std::uint32_t failed) const {
  if (opt_.memory.policy == Policy::sglang) {
    // SGLang's retract_decode sorts by (output tokens, -prompt tokens), descending, and pops
    // the last: the decoding request with the fewest generated tokens, the longest prompt
    // among those, the latest in running order among those.
    std::uint32_t best = failed;
    bool found = false;
    std::int64_t best_produced = 0, best_prompt = 0;
    for (const auto& [order, slot] : running_order_) {
      const Flight& f = flights_[slot];
      if (!f.decoding) continue;
      const std::int64_t produced = f.produced_before(step_);
      if (!found || produced < best_produced || (produced == best_produced && f.prompt >= best_prompt)) {
        best = slot;
        best_produced = produced;
        best_prompt = f.prompt;
        found = true;
      }
    }
    if (found) return best;
  }
  // vLLM (FCFS): the last request of the running queue. The reserve policy never runs
  // short by its own accounting; if placement fails anyway (a fragmented arena), it falls
  // back to the same rule.
  return running_order_.rbegin()->second;
}

std::int64_t Engine::prefill_cost(const PrefillState& p, std::int64_t from, std::int64_t to) {
  return overlap(from, to, 0, p.prompt) + p.n * overlap(from, to, p.prompt, to);
}

std::pair<std::int64_t, std::int64_t> Engine::chunk_for(const PrefillState& p, std::int64_t budget) const {
  const std::int64_t prompt_part = std::min(std::max<std::int64_t>(0, p.prompt - p.prefilled), budget);
  const std::int64_t rest_budget = budget - prompt_part;
  const std::int64_t own_from = std::max(p.prefilled, p.prompt);
  const std::int64_t own_part = std::min(p.target - own_from, rest_budget / p.n);
  const std::int64_t positions = std::min(prompt_part + std::max<std::int64_t>(0, own_part), p.target - p.prefilled);
  return {positions, prefill_cost(p, p.prefilled, p.prefilled + positions)};
}

void Engine::preempt(std::uint32_t victim) {
  Flight& v = flights_[victim];
  const std::uint32_t ticket = v.ticket;
  Ticket& t = tickets_[ticket];
  ++report_.preemptions;
  if (++t.preemptions == 1) ++report_.preempted_requests;
  report_.max_preemptions_per_request = std::max<std::int64_t>(report_.max_preemptions_per_request, t.preemptions);
  step_memory_bound_ = true;
  step_preempted_ = true;
  const std::int64_t produced = v.produced_before(step_);
  if (opt_.memory.preemption == Preemption::swap && opt_.memory.policy == Policy::vllm && v.decoding) {
    // vLLM v0's swap: the request's blocks go to host memory and come back before anything
    // new is admitted. What it holds is what the previous step left.
    const std::int64_t bytes = held_bytes(victim);
    report_.swapped_out_bytes += bytes;
    step_swap_bytes_ += bytes;
    t.swapped_tokens = v.tokens(step_) - 1;
    drop_holding(victim, 0);
    end_flight(victim);
    t.phase = Phase::swapped;
    swapped_.push_back({ticket, t.generation});
    return;
  }
  // Recompute: everything computed so far is discarded and will be computed again.
  const std::int64_t computed = v.decoding ? v.prompt + produced : v.prefilled;
  report_.recomputed_tokens += prefill_cost({v.prompt, v.n, v.target, 0}, 0, computed);
  drop_holding(victim, 0);
  end_flight(victim);
  t.base_generated = produced;
  t.phase = Phase::queued;
  note_queue(now_);
  ++queued_;
  report_.queue_max = std::max(report_.queue_max, queued_);
  // vLLM puts it back at the front of the waiting queue; SGLang at the back.
  if (opt_.memory.policy == Policy::sglang) queue_.push_back({ticket, t.generation});
  else queue_.push_front({ticket, t.generation});
  if (opt_.memory.policy == Policy::sglang) {
    // SGLang recomputes its new-token ratio from the requests that keep decoding.
    Int128 generated = 0, planned = 0, count = 0;
    for (const auto& [order, slot] : running_order_) {
      const Flight& f = flights_[slot];
      if (!f.decoding) continue;
      generated += f.produced_before(step_) * f.n;
      planned += f.planned * f.n;
      count += f.n;
    }
    const Int128 ratio = planned > 0 ? (generated + kSglangRetractDecodeSteps * count) * kPpb / planned : kPpb;
    sglang_ratio_ppb_ = static_cast<std::int64_t>(std::min<Int128>(ratio, kPpb));
  }
}

bool Engine::grow_or_preempt(std::uint32_t slot, std::int64_t tokens, std::int64_t step_tokens) {
  for (;;) {
    const Outcome o = alloc_.grow(slot, tokens, step_tokens);
    if (o == Outcome::ok) return true;
    if (!bounded()) broken(flights_[slot], "allocation failed in a run without a memory budget");
    const std::uint32_t victim = choose_victim(slot);
    if (victim == slot && running_ == 1 && swapped_.empty()) {
      // Alone, with the whole budget, and still short: it never fits. Preempting it would
      // only start it over, forever.
      ++report_.rejected_too_large;
      report_.generated_tokens += flights_[slot].n * flights_[slot].produced_before(step_);
      release(slot, 0);
      return false;
    }
    preempt(victim);
    if (victim == slot) return false;
  }
}

bool Engine::prefill(std::uint32_t slot, std::int64_t positions, bool may_preempt) {
  Flight& f = flights_[slot];
  const std::int64_t prefilled = f.prefilled + positions;
  const bool complete = prefilled == f.target;
  const std::int64_t first = complete && f.output > f.base_generated ? 1 : 0;
  const std::int64_t t = prefilled + first;
  if (positions + first > 0) {
    if (may_preempt) {
      if (!grow_or_preempt(slot, t, positions + first)) return false;
    } else if (alloc_.grow(slot, t, positions + first) != Outcome::ok) {
      step_memory_bound_ = true;
      return false;
    }
  }
  // The prompt counts once, however often a preemption makes it be computed again.
  Ticket& ticket = ticket_of(f);
  const std::int64_t prompt_done = std::min(prefilled, f.prompt);
  if (prompt_done > ticket.prompt_counted) {
    report_.prompt_tokens += prompt_done - ticket.prompt_counted;
    ticket.prompt_counted = prompt_done;
  }
  f.prefilled = prefilled;
  f.tokens_at = t;
  f.step_at = step_;
  bool with_slopes = false;
  if (complete) {
    if (first != 0 && f.base_generated == 0) first_token_.push_back({slot, f.generation});
    if (f.output - f.base_generated <= 1) {
      finishing_.push_back({slot, f.generation});
    } else {
      start_decoding(slot, t);
      with_slopes = schedule_next(slot, t) > t + 1;
    }
  }
  refresh(slot, t, with_slopes);
  return true;
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
          effective_tokens(t - 1, f.prompt, f.n, opt_.layout.groups[g].window_tokens),
          fp.allocated, fp.tail, fp.reservation, fp.padding, fp.duplicate, fp.outside_window};
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
  if (!grow_or_preempt(slot, t, 1)) return;
  // tokens_at and step_at move along the request's own line: the context sum is unchanged.
  f.tokens_at = t;
  f.step_at = step_;
  update_clip(slot);
  if (t == f.prompt + f.output) {
    finishing_.push_back({slot, f.generation});
    refresh(slot, t, false);
  } else {
    refresh(slot, t, schedule_next(slot, t) > t + 1);
  }
}

bool Engine::policy_admits(const Ticket& t, std::int64_t positions) {
  if (!bounded()) return true;
  const AdmitInfo info = admit_info(t);
  const std::int64_t target = t.prompt + t.base_generated;
  const std::int64_t first = positions == target && t.output > t.base_generated ? 1 : 0;
  const std::int64_t free_bytes = capacity_bytes_ - allocated_bytes_.at(step_);
  const std::int64_t chunk_bytes = alloc_.peak_bytes(info, positions + first);
  switch (opt_.memory.policy) {
    case Policy::vllm:
      // vLLM v0's can_allocate: the blocks for this chunk, leaving the watermark free.
      return chunk_bytes + (running_ > 0 ? watermark_bytes_ : 0) <= free_bytes;
    case Policy::reserve:
      // TensorRT-LLM's GUARANTEED_NO_EVICT: every running request may still grow to its
      // planned end; admit only if this one's whole life fits beside all of theirs.
      return planned_peak_sum_ + alloc_.peak_bytes(info, t.prompt + t.planned) <= capacity_bytes_;
    case Policy::sglang: {
      if (running_ == 0) return chunk_bytes <= free_bytes;  // nothing to estimate against
      // SGLang's PrefillAdder, in token positions as its token pool counts them: the
      // running requests' clipped remaining tokens scaled by the new-token ratio, this
      // step's admissions unscaled, and the newcomer's prompt plus clipped limit.
      const Int128 future = Int128{clip_base_ + clip_slope_ * step_} * sglang_ratio_ppb_ / kPpb;
      const Int128 rem = free_bytes / bytes_per_token_ - future - sglang_admitted_tokens_;
      const std::int64_t total = target + t.n * std::min(t.planned - t.base_generated, kSglangClipTokens);
      if (Int128{total} >= rem) return false;
      sglang_admitted_tokens_ += total;
      return chunk_bytes <= free_bytes;
    }
  }
  return false;
}

void Engine::refuse_too_large(std::uint32_t ticket) {
  // Nothing else holds memory, and this request still does not fit: it never will.
  ++report_.rejected_too_large;
  report_.generated_tokens += tickets_[ticket].n * tickets_[ticket].base_generated;
  queue_.pop_front();
  note_queue(now_);
  --queued_;
  free_ticket(ticket);
}

void Engine::continue_prefills(std::int64_t& budget, std::int64_t& prefill_tokens) {
  // Prefills already under way continue first, in admission order (vLLM's running queue).
  std::size_t kept = 0;
  for (std::size_t i = 0; i < prefilling_.size(); ++i) {
    const SlotRef ref = prefilling_[i];
    Flight& f = flights_[ref.slot];
    if (f.generation != ref.generation) continue;  // cancelled, preempted
    if (budget > 0) {
      const auto [positions, cost] = chunk_for({f.prompt, f.n, f.target, f.prefilled}, budget);
      if (positions > 0) {
        if (!prefill(ref.slot, positions, true)) continue;  // preempted itself
        budget -= cost;
        prefill_tokens += cost;
      }
    }
    if (f.prefilled < f.target) prefilling_[kept++] = ref;
  }
  prefilling_.resize(kept);
}

void Engine::resume_swapped(std::int64_t& decode_seqs) {
  while (!swapped_.empty() && (opt_.max_running == 0 || running_ < opt_.max_running)) {
    const TicketRef ref = swapped_.front();
    Ticket& t = tickets_[ref.ticket];
    if (t.generation != ref.generation || t.phase != Phase::swapped) {
      swapped_.pop_front();
      continue;
    }
    // It comes back holding what it held, and decodes in this step.
    const std::int64_t tokens = t.swapped_tokens + 1;
    const std::uint32_t slot = start_flight(ref.ticket);
    if (alloc_.admit(slot, admit_info(t)) != Outcome::ok) {
      end_flight(slot);
      step_memory_bound_ = true;
      return;
    }
    if (alloc_.grow(slot, tokens, 1) != Outcome::ok) {
      alloc_.release(slot);
      end_flight(slot);
      step_memory_bound_ = true;
      return;
    }
    swapped_.pop_front();
    t.phase = Phase::running;
    Flight& f = flights_[slot];
    f.prefilled = f.target = t.prompt;
    f.base_generated = t.swapped_tokens - t.prompt;
    f.admit_order = next_admit_order_++;
    running_order_.insert({f.admit_order, slot});
    ++running_;
    start_decoding(slot, tokens);
    decode_seqs += f.n;
    const bool last = tokens == f.prompt + f.output;
    if (last) finishing_.push_back({slot, f.generation});
    refresh(slot, tokens, last ? false : schedule_next(slot, tokens) > tokens + 1);
    const std::int64_t bytes = held_bytes(slot);
    report_.swapped_in_bytes += bytes;
    step_swap_bytes_ += bytes;
  }
}

void Engine::admit_waiting(std::int64_t& budget, std::int64_t& prefill_tokens) {
  sglang_admitted_tokens_ = 0;
  while (!queue_.empty() && (opt_.max_running == 0 || running_ < opt_.max_running)) {
    const TicketRef ref = queue_.front();
    Ticket& t = tickets_[ref.ticket];
    if (t.generation != ref.generation || t.phase != Phase::queued) {
      queue_.pop_front();  // cancelled while waiting
      continue;
    }
    const std::int64_t target = t.prompt + t.base_generated;
    if (budget <= 0 && target > 0) break;
    const auto [positions, cost] = chunk_for({t.prompt, t.n, target, 0}, budget);
    if (positions < target && (!opt_.chunked_prefill || positions == 0)) break;
    const bool alone = running_ == 0 && swapped_.empty();
    const bool was_memory_bound = step_memory_bound_;
    bool started = policy_admits(t, positions);
    std::uint32_t slot = 0;
    if (started) {
      slot = start_flight(ref.ticket);
      if (alloc_.admit(slot, admit_info(t)) != Outcome::ok) {
        end_flight(slot);
        started = false;
      } else if (!prefill(slot, positions, false)) {
        alloc_.release(slot);
        end_flight(slot);
        started = false;
      }
    }
    if (!started) {
      if (alone) {
        // The budget is empty, not full: refusing what can never fit is not time at capacity.
        step_memory_bound_ = was_memory_bound;
        refuse_too_large(ref.ticket);
        continue;
      }
      step_memory_bound_ = true;
      break;  // first come, first served: nobody overtakes the head of the queue
    }
    queue_.pop_front();
    note_queue(now_);
    --queued_;
    t.phase = Phase::running;
    ++running_;
    Flight& f = flights_[slot];
    f.admit_order = next_admit_order_++;
    running_order_.insert({f.admit_order, slot});
    if (t.admitted_ns < 0) {
      t.admitted_ns = now_;
      waiting_.push_back(now_ - t.arrival_ns);
    }
    if (opt_.memory.policy == Policy::reserve && bounded()) {
      f.planned_peak_bytes = alloc_.peak_bytes(admit_info(t), t.prompt + t.planned);
      planned_peak_sum_ += f.planned_peak_bytes;
    }
    budget -= cost;
    prefill_tokens += cost;
    if (f.prefilled < f.target) prefilling_.push_back({slot, f.generation});
  }
}

void Engine::run_iteration() {
  step_memory_bound_ = false;
  step_preempted_ = false;
  step_swap_bytes_ = 0;
  // Requests whose next event falls on this step.
  wheel_.take(step_, due_);
  for (const StepEvent& e : due_) {
    if (flights_[e.slot].epoch == e.generation && flights_[e.slot].live) handle_event(e.slot);
  }
  // The decoding batch is fixed before new prefills join it (they decode from the next step).
  std::int64_t decode_seqs = decoding_seqs_;
  const std::int64_t context = context_base_ + context_slope_ * step_;
  std::int64_t budget = opt_.max_batched_tokens > 0 ? opt_.max_batched_tokens - decoding_seqs_ : kUnlimited;
  std::int64_t prefill_tokens = 0;
  continue_prefills(budget, prefill_tokens);
  // vLLM admits nothing new in a step that had to preempt.
  if (!step_preempted_) {
    resume_swapped(decode_seqs);
    if (swapped_.empty()) admit_waiting(budget, prefill_tokens);
  }

  const CostModel& c = opt_.cost;
  const Int128 ps = Int128{c.base_ps} + Int128{c.prefill_token_ps} * prefill_tokens +
                    Int128{c.decode_seq_ps} * decode_seqs + Int128{c.context_token_ps} * context;
  // Whole nanoseconds, rounded up; in 64 bits when it fits (a 128-bit division is a call).
  const std::int64_t ns = ps < Int128{std::numeric_limits<std::int64_t>::max() - 999}
                              ? (static_cast<std::int64_t>(ps) + 999) / 1000
                              : static_cast<std::int64_t>((ps + 999) / 1000);
  std::int64_t duration = std::max<std::int64_t>(1, ns);
  if (step_swap_bytes_ > 0) {
    duration += static_cast<std::int64_t>(ceil_div(Int128{step_swap_bytes_} * kNsPerSecond,
                                                   opt_.memory.swap_bytes_per_second));
  }
  ++report_.iterations;
  if (step_memory_bound_) report_.memory_bound_ns += duration;
  if (opt_.memory.policy == Policy::sglang && bounded()) {
    // SGLang lowers its estimate a little every decode step that needed no retraction, and
    // starts afresh when idle.
    if (running_ == 0) {
      sglang_ratio_ppb_ = opt_.memory.sglang_init_ratio_ppb;
    } else if (!step_preempted_ && decode_seqs > 0) {
      const std::int64_t decay =
          (opt_.memory.sglang_init_ratio_ppb - opt_.memory.sglang_min_ratio_ppb) / opt_.memory.sglang_decay_steps;
      sglang_ratio_ppb_ = std::max(opt_.memory.sglang_min_ratio_ppb, sglang_ratio_ppb_ - decay);
    }
  }

  effective_peak_.offer(effective_bytes_.at(step_), now_);
  for (auto& g : sums_) {
    g.effective_peak.offer(g.q[kEffective].at(step_), now_);
    g.allocated_peak.offer(g.q[kAllocated].at(step_), now_);
  }
  sample_timeline();

  // Arrivals and cancellations inside the iteration happen at their own instants.
  process_span_events(now_ + duration, true);
  end_span(duration);
  ++step_;

  for (const SlotRef ref : first_token_) {
    const Flight& f = flights_[ref.slot];
    if (f.generation != ref.generation) continue;  // cancelled or preempted in the step
    Ticket& t = tickets_[f.ticket];
    t.first_token_ns = now_;
    ttft_.push_back(now_ - t.arrival_ns);
  }
  first_token_.clear();
  for (const SlotRef ref : finishing_) {
    const Flight& f = flights_[ref.slot];
    if (f.generation != ref.generation) continue;
    ++report_.completed;
    e2e_.push_back(now_ - tickets_[f.ticket].arrival_ns);
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
  report_.capacity_bytes = capacity_bytes_;
  if (!fetch()) return finish_report();
  measured_ = opt_.schedule == Schedule::measured ||
              (opt_.schedule == Schedule::automatic && next_.has_service_times());
  if (measured_ && bounded()) {
    throw InputError(Location{trace_.path(), 0, ""},
                     "its start/first_token/finish times fix the schedule, which a memory budget would have to "
                     "change; replay it without a budget, or with " + std::string(kOptSchedule) + " simulate");
  }
  report_.schedule = measured_ ? "measured" : "simulated";
  report_.cost_model = measured_ ? "none (measured schedule)" : opt_.cost.name;
  now_ = next_.arrival_ns;
  report_.start_ns = now_;
  hist_mark_ns_ = queue_mark_ns_ = next_sample_ns_ = now_;
  return measured_ ? run_measured() : run_simulated();
}

ReplayReport Engine::run_simulated() {
  for (;;) {
    process_span_events(now_, false);
    if (running_ == 0 && queued_ == 0 && swapped_.empty()) {
      if (!have_next_) break;
      end_span(next_.arrival_ns - now_);  // idle until the next arrival
      continue;
    }
    run_iteration();
  }
  report_.end_ns = now_;
  return finish_report();
}

}  // namespace detail

ReplayReport replay(TraceReader& trace, Allocator& allocator, const ReplayOptions& options) {
  detail::Engine engine(trace, allocator, options);
  return engine.run();
}

}  // namespace kvsim
