// The replay engine: continuous batching on integer time, driving one allocator.
//
// Each iteration (step s, starting at time T): arrivals and cancellations due are taken;
// the allocator is called for the running requests whose next event falls on this step;
// prefills under way continue; then, unless memory ran short this step, swapped-out and
// waiting requests are admitted. The iteration lasts what the cost model gives; arrivals and
// cancellations inside it happen at their own instants, and the requests that produced
// their last token are released at its end. A decoding request is touched only at its
// events; in between its figures follow the slopes it reported (ledger.h). A step in which
// nothing but decoding happens (quiet_step_ahead) skips the scheduling passes, which would
// find nothing to do; it is timed and ended as every step is.
#include "engine.h"

#include <algorithm>
#include <limits>
#include <string>

#include "effective.h"
#include "footprint.h"
#include "invariant_checks.h"
#include "kvsim/error.h"
#include "kvsim/option_names.h"
#include "kvsim/units.h"

namespace kvsim {
namespace detail {
Engine::Engine(TraceReader& trace, Allocator& allocator, const ReplayOptions& options)
    : trace_(trace),
      alloc_(allocator),
      opt_(options),
      groups_(options.layout.groups.size()),
      recorder_(options, now_, step_, clock_),
      view_{options, allocator, tickets_, flights_, running_order_, step_, step_planned_, running_, recorder_.allocated_bytes(),
            options.memory.kv_budget_bytes, 1, options.layout.bytes_per_token()} {
  for (const auto& g : options.layout.groups) bytes_per_position_.push_back(g.bytes_per_position);
  bytes_per_token_ = options.layout.bytes_per_token();
  max_tokens_ = options.layout.max_model_len > 0 ? options.layout.max_model_len : kUnlimited;
  whole_step_budget_ = options.max_batched_tokens > 0 ? options.max_batched_tokens : kUnlimited;
  if (opt_.max_batched_tokens > 0 && !opt_.chunked_prefill && opt_.max_batched_tokens < max_tokens_) {
    // As vLLM insists: without chunking, a prompt must fit in one iteration's budget.
    throw InputError(Location{"", 0, kOptMaxBatchedTokens},
                     "without chunked prefill it must be at least the model's maximum length (" +
                         std::to_string(max_tokens_) + ")");
  }
  check_scheduler_limits(opt_);
  max_seqs_ = opt_.max_running > 0 ? opt_.max_running : opt_.max_batched_tokens;
  // The run is bounded by the budget, or by the allocator's own bound (dynamic:arena=BYTES)
  // when that is smaller or there is no budget: the scheduler must plan against the memory
  // that really exists, or it admits what the allocator then refuses.
  capacity_bytes_ = opt_.memory.kv_budget_bytes;
  const PoolState own = allocator.pool();
  if (own.capacity_bytes > 0 && (capacity_bytes_ <= 0 || own.capacity_bytes < capacity_bytes_)) {
    capacity_bytes_ = own.capacity_bytes;
  }
  view_.capacity_bytes = capacity_bytes_;
  // The allocator's unit when its bound is the run's, else bytes.
  view_.capacity_unit_bytes = own.capacity_bytes > 0 && own.capacity_bytes == capacity_bytes_ ? own.unit_bytes : 1;
  prefix_block_ = allocator.prefix_block_tokens();
  if (sharing()) {
    recorder_.track_evictable();
    setup_window_shares();
  }
  scheduler_ = make_scheduler(view_);
  scheduler_tracks_requests_ = scheduler_->tracks_requests();
  scheduler_orders_queue_ = scheduler_->orders_queue();
  linger_ = opt_.async_scheduling && bounded() && scheduler_->victim_is_newest();
  alloc_.set_async_scheduling(opt_.async_scheduling);
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

void Engine::refused_at_arrival() {
  if (!opt_.per_request) return;
  RequestRecord r;
  r.id = next_.id;
  r.ordinal = ordinal_;
  r.arrival_ns = next_.arrival_ns;
  r.prompt_tokens = next_.prompt_tokens;
  r.output_tokens = next_.output_tokens;
  r.outcome = RequestRecord::Outcome::refused;
  opt_.per_request(r);
}

std::int64_t Engine::take_ticket() {
  ++report_.requests;
  // vLLM's engine ends such a request at max_model_len tokens. (A prompt of exactly
  // max_model_len, which vLLM gives one token, stays refused: kvsim would hold one position
  // past the length for it, its accounting convention's extra position.)
  if (opt_.cap_at_max_model_len && next_.prompt_tokens < max_tokens_ &&
      next_.output_tokens > max_tokens_ - next_.prompt_tokens) {
    next_.output_tokens = max_tokens_ - next_.prompt_tokens;
    if (next_.max_tokens) next_.max_tokens = std::min(*next_.max_tokens, next_.output_tokens);
    ++report_.capped_at_max_model_len;
  }
  // prompt + output > max, without overflow for lengths near 2^63 (an output alone above
  // the maximum is too long whatever the prompt, 0 included).
  if (next_.output_tokens > max_tokens_ || next_.prompt_tokens > max_tokens_ - next_.output_tokens) {
    ++report_.rejected_too_long;  // an engine refuses these at its API
    refused_at_arrival();
    return -1;
  }
  // Its n samples run together, each a sequence: more than max_running (which is at most
  // max_batched_tokens) could never run at once, and a recomputed position past the prompt,
  // which costs n tokens of a step, could never be scheduled. (vLLM runs the n samples as n
  // requests, and refuses max_num_batched_tokens < max_num_seqs at start-up.)
  if (max_seqs_ > 0 && next_.n > max_seqs_) {
    ++report_.rejected_too_many_samples;
    refused_at_arrival();
    return -1;
  }
  // A request whose n samples at full length do not fit 64 bits of bytes cannot be replayed.
  const std::int64_t full_length = next_.prompt_tokens + next_.output_tokens;
  if (report_.shortest_request_tokens == 0 || full_length < report_.shortest_request_tokens) {
    report_.shortest_request_tokens = full_length;
  }
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
  // than what the request really generates, nor past the model's length: the engines cut
  // max_tokens there (TensorRT-LLM's LlmRequest::validate, SGLang's init_req_max_new_tokens),
  // and prompt + output is within it (checked above).
  t.planned = next_.max_tokens ? *next_.max_tokens : std::max(opt_.default_max_tokens, next_.output_tokens);
  t.planned = std::min(t.planned, max_tokens_ - t.prompt);
  if (!next_.max_tokens && opt_.default_max_tokens == 0) ++report_.planned_at_output_requests;
  if (opt_.per_request) {
    if (request_id_.size() <= index) {
      request_id_.resize(index + 1);
      cached_at_admission_.resize(index + 1);
    }
    request_id_[index] = next_.id;
    cached_at_admission_[index] = 0;
  }
  if (sharing()) {
    if (prefix_of_.size() <= index) prefix_of_.resize(index + 1);
    if (!next_.prefix_hashes.empty()) {
      rehasher_.rehash(next_.prefix_hashes, next_.prefix_block_tokens, t.prompt, prefix_block_, prefix_of_[index]);
      if (!prefix_of_[index].empty()) ++report_.prefix_identified_requests;
    }
  }
  return index;
}

void Engine::free_ticket(std::uint32_t ticket) {
  Ticket& t = tickets_[ticket];
  t.phase = Phase::free;
  t.slot = -1;
  ++t.generation;
  if (sharing()) prefix_of_[ticket].clear();
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
    recorder_.ensure_slots(flights_.size());
  }
  Flight& f = flights_[slot];
  const Ticket& t = tickets_[ticket];
  const std::uint32_t generation = f.generation;  // the last occupant's entries must stay stale
  f = Flight{};
  f.generation = generation;
  f.live = true;
  f.ticket = ticket;
  f.prompt = t.prompt;
  f.output = t.output;
  f.n = t.n;
  f.planned = t.planned;
  f.base_generated = t.base_generated;
  f.target = t.prompt + t.base_generated;
  f.step_at = step_;
  recorder_.clear(slot);
  tickets_[ticket].slot = static_cast<std::int32_t>(slot);
  return slot;
}

void Engine::end_flight(std::uint32_t slot) {
  Flight& f = flights_[slot];
  tickets_[f.ticket].slot = -1;
  f.live = false;
  f.decoding = false;
  ++f.generation;
  free_slots_.push_back(slot);
}

void Engine::enqueue_arrival() {
  report_.last_arrival_ns = next_.arrival_ns;
  const std::int64_t index = take_ticket();
  if (index >= 0) {
    const auto ticket = static_cast<std::uint32_t>(index);
    const Ticket& t = tickets_[ticket];
    recorder_.queue_change(t.arrival_ns, queued_, 1);  // replicas: routed after its step began
    queue_.push_back({ticket, t.generation});
    unplanned_.push_back({ticket, t.generation});
    ++queued_;
    report_.queue_max = std::max(report_.queue_max, queued_);
    if (next_.cancel_ns) cancellations_.push({*next_.cancel_ns, t.ordinal, ticket, t.generation});
  }
  report_.queue_at_last_arrival = passed_over();
}

std::int64_t Engine::passed_over() const {
  return queued_ - (static_cast<std::int64_t>(unplanned_.size()) - unplanned_cancelled_);
}

bool Engine::plan_lags() const { return opt_.async_scheduling && last_step_end_ == now_ && running_ > 0; }

std::int64_t Engine::plan_seen_until() const { return plan_lags() ? last_step_start_ : now_; }

void Engine::note_plan(std::int64_t seen_until) {
  // What any plan saw stays seen (cancel() tests an arrival against the same instant).
  plan_seen_until_ = std::max(plan_seen_until_, seen_until);
  // unplanned_ is in arrival order: what the plans saw is at its front.
  while (!unplanned_.empty()) {
    const TicketRef ref = unplanned_.front();
    const Ticket& t = tickets_[ref.ticket];
    const bool cancelled = t.generation != ref.generation || t.phase != Phase::queued;
    if (!cancelled && t.arrival_ns > plan_seen_until_) return;
    if (cancelled) --unplanned_cancelled_;
    unplanned_.pop_front();
  }
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
  // A request that lingers (below) is recorded when it is freed: a plan may still preempt it.
  const bool lingers = t.phase == Phase::running && opt_.async_scheduling && mid_span && linger_;
  if (!lingers) leaves(c.ticket, RequestRecord::Outcome::cancelled, c.at_ns);
  switch (t.phase) {
    case Phase::queued:
      recorder_.queue_change(c.at_ns, queued_, -1);
      --queued_;  // its queue entry goes stale
      if (t.arrival_ns > plan_seen_until_) ++unplanned_cancelled_;  // and its unplanned_ entry
      report_.generated_tokens += t.n * t.base_generated;
      free_ticket(c.ticket);
      return;
    case Phase::swapped: {
      report_.generated_tokens += t.n * (t.swapped_tokens - t.prompt);
      // Out of the swapped queue at once (its few entries): a stale one would keep an idle
      // engine stepping, and count in flight for a router.
      const auto entry = std::find_if(swapped_.begin(), swapped_.end(), [&](const TicketRef& ref) {
        return ref.ticket == c.ticket && ref.generation == t.generation;
      });
      if (entry != swapped_.end()) swapped_.erase(entry);
      free_ticket(c.ticket);
      return;
    }
    case Phase::running: {
      // The tokens it holds at this step include the one it is (or would next be)
      // producing; the ones before were generated.
      const auto slot = static_cast<std::uint32_t>(t.slot);
      const Flight& f = flights_[slot];
      report_.generated_tokens += t.n * f.produced_before(step_);
      // Decoding in the step it is cancelled in: that step's token for it never comes.
      if (mid_span && f.decoding && f.decode_from <= step_) step_cancelled_decodes_ += f.n;
      if (mid_span) recorder_.flush(at);
      // Asynchronous scheduling: vLLM planned the next step as this one began, and that plan
      // cached what this step computes (allocate_slots, request.num_tokens by then holding the
      // token this step reads), unless this step completes the request (that plan skips a
      // request at max_tokens): the abort, processed when the step ends, frees it cached.
      const bool cache_step = opt_.async_scheduling && !finishes_in_step(slot);
      if (opt_.async_scheduling && mid_span) {
        // And that plan still counted the request: its place under max_running, and (where
        // completions linger) its blocks, as a request completed in this step.
        cancelled_in_step_seqs_ += f.n;
        if (lingers) {
          linger(slot, c.at_ns, true, cache_step);
          return;
        }
      }
      if (cache_step) alloc_.outputs_processed(slot);
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
    recorder_.apply(slot, g, c, 0);
    op_transient_bytes_ += fp.transient * bytes_per_position_[g];
  }
  if (sharing()) hold_prefix(slot, tokens);
  after_op();
}

void Engine::after_op(std::int64_t correction_ns) {
  if (sharing()) update_shared(correction_ns);
  recorder_.after_op(alloc_, op_transient_bytes_);
  check_after_operation(alloc_);
}

void Engine::stop_running(std::uint32_t slot) {
  Flight& f = flights_[slot];
  // Told first, so that the policy sees the flight as it ran (decoding or not).
  if (scheduler_tracks_requests_) scheduler_->on_stopped(view_, slot);
  if (f.decoding) {
    decoding_seqs_ -= f.n;
    context_base_ -= f.n * f.tokens_at - f.n * f.step_at;
    context_slope_ -= f.n;
    f.tokens_at = f.tokens(step_);
    f.step_at = step_;
    f.decoding = false;
  }
}

void Engine::free_holding(std::uint32_t slot, std::int64_t correction_ns) {
  for (std::size_t g = 0; g < groups_; ++g) recorder_.apply(slot, g, Contribution{step_, {}, {}}, correction_ns);
  if (sharing()) drop_prefix(slot);
  alloc_.release(slot);
  op_transient_bytes_ = 0;
  after_op(correction_ns);
}

void Engine::leave_running(std::uint32_t slot) {
  const Flight& f = flights_[slot];
  running_order_.erase({f.admit_order, slot});
  --running_;
  running_seqs_ -= f.n;
}

void Engine::drop_holding(std::uint32_t slot, std::int64_t correction_ns) {
  stop_running(slot);
  free_holding(slot, correction_ns);
  leave_running(slot);
  // With nothing left running, vLLM's next plan comes after the last step's outputs were
  // processed (an empty planned step, then a plan at once): nothing lingers into it.
  if (running_ == 0 && !lingering_.empty()) free_lingering();
}

bool Engine::finishes_in_step(std::uint32_t slot) const {
  const std::uint32_t generation = flights_[slot].generation;
  return std::any_of(finishing_.begin(), finishing_.end(),
                     [&](const SlotRef& ref) { return ref.slot == slot && ref.generation == generation; });
}

void Engine::linger(std::uint32_t slot, std::int64_t left_ns, bool cancelled, bool cache_step) {
  // It stops running now: no decode, no place in running_order_ or the running counts
  // (those places are completed_in_last_step_'s). What it holds stays, unchanged: it is
  // freed within the next step's planning, at this same step and instant.
  stop_running(slot);
  leave_running(slot);
  ++tickets_[flights_[slot].ticket].generation;  // completed: a cancellation due now finds it gone
  // Cancelled within its step: that step's events for it (its completion, its first token,
  // its next growth, a prefill chunk) go stale with the flight's generation.
  if (cancelled) ++flights_[slot].generation;
  lingering_.push_back({slot, left_ns, cancelled, cache_step});
}

void Engine::free_lingering(std::size_t index, bool outputs_processed) {
  const Lingering l = lingering_[index];
  lingering_.erase(lingering_.begin() + static_cast<std::ptrdiff_t>(index));
  const std::uint32_t ticket = flights_[l.slot].ticket;
  if (outputs_processed && l.cache_step) alloc_.outputs_processed(l.slot);
  free_holding(l.slot, 0);
  end_flight(l.slot);
  leaves(ticket, l.cancelled ? RequestRecord::Outcome::cancelled : RequestRecord::Outcome::completed, l.finish_ns);
  free_ticket(ticket);
}

void Engine::free_lingering() {
  // Oldest first, in the order they completed, as vLLM processes a step's finished requests:
  // with a prefix cache, the order decides which freed blocks are evicted first.
  while (!lingering_.empty()) free_lingering(0, true);
}

bool Engine::preempt_lingering() {
  if (lingering_.empty() || !scheduler_->victim_is_newest()) return false;
  // Its place in vLLM's running list: the admission order its flight keeps until it is freed.
  const auto order = [&](std::size_t i) { return flights_[lingering_[i].slot].admit_order; };
  std::size_t newest = 0;
  for (std::size_t i = 1; i < lingering_.size(); ++i) {
    if (order(i) > order(newest)) newest = i;
  }
  if (running_ > 0 && running_order_.rbegin()->first > order(newest)) return false;
  // vLLM's _preempt_request on a request whose last token is in flight: counted as a
  // preemption, its blocks freed; the token still arrives and completes it, but the blocks
  // it computed last are not cached (a preempted request is not running when it does).
  count_preemption(tickets_[flights_[lingering_[newest].slot].ticket]);
  free_lingering(newest, false);
  return true;
}

// --- sharing across requests ----------------------------------------------------------------

AdmitInfo Engine::admit_info_of(std::uint32_t ticket) const {
  const Ticket& t = tickets_[ticket];
  AdmitInfo info = admit_info(t);
  info.request_key = static_cast<std::uint64_t>(t.ordinal);
  if (sharing()) info.prefix_hashes = prefix_of_[ticket];
  return info;
}

void Engine::count_prefix_lookup(std::int64_t prompt, std::int64_t queried, std::int64_t cached, bool preempted) {
  if (preempted) {
    report_.prefix_preempted_queried_tokens += queried;
    report_.prefix_preempted_hit_tokens += cached;
    return;
  }
  report_.prefix_queried_tokens += queried;
  report_.prefix_hit_tokens += cached;
  report_.prefix_queried_blocks += prompt / prefix_block_;
  report_.prefix_hit_blocks += cached / prefix_block_;
}

void Engine::hold_prefix(std::uint32_t slot, std::int64_t tokens) {
  if (!window_shares_.empty()) hold_window_prefix(slot, tokens);
  Flight& f = flights_[slot];
  const auto& hashes = prefix_of_[f.ticket];
  const std::int64_t held = std::min<std::int64_t>(static_cast<std::int64_t>(hashes.size()),
                                                   std::min(tokens, f.prompt) / prefix_block_);
  for (; f.held_prefix < held; ++f.held_prefix) {
    if (live_prefix_[hashes[static_cast<std::size_t>(f.held_prefix)]]++ > 0) ++shared_prefix_blocks_;
  }
}

void Engine::drop_prefix(std::uint32_t slot) {
  if (!window_shares_.empty()) drop_window_prefix(slot);
  Flight& f = flights_[slot];
  const auto& hashes = prefix_of_[f.ticket];
  for (; f.held_prefix > 0; --f.held_prefix) {
    const std::size_t at = live_prefix_.slot(hashes[static_cast<std::size_t>(f.held_prefix - 1)]);
    if (--live_prefix_.value_at(at) > 0) --shared_prefix_blocks_;
    else live_prefix_.erase_at(at);
  }
}

void Engine::update_shared(std::int64_t correction_ns) {
  // The engine counts a prefix block that several live requests hold once; the allocator
  // may hold it once too (a cache hit) or twice (two requests computed it at the same time:
  // a duplicate). It can never share what the engine does not see as the same tokens.
  const std::int64_t counted_once = shared_prefix_blocks_ * prefix_block_;
  for (std::size_t g = 0; g < groups_; ++g) {
    const std::int64_t held_once = alloc_.shared_positions(g);
    if (held_once < 0 || held_once > counted_once) {
      throw InternalError(alloc_.name() + ": at step " + std::to_string(step_) + ", layer group " + std::to_string(g) +
                          " holds " + std::to_string(held_once) + " positions once for several requests, but only " +
                          std::to_string(counted_once) + " are the same prompt tokens");
    }
    // On a sliding-window group the engine counts once what several windows keep alike
    // (docs/replay.md); what the allocator holds once beyond that lies behind windows.
    const std::int64_t once = group_window_.empty() ? counted_once : counted_once_in_window(g);
    const std::int64_t duplicate = std::max<std::int64_t>(0, once - held_once);
    const std::int64_t outside = std::min<std::int64_t>(0, once - held_once);
    const Contribution& old = recorder_.shared(g);
    if (old.value[kAllocated] == -held_once && old.value[kEffective] == -once && old.value[kOutside] == outside) continue;
    Contribution c;
    c.step = step_;
    c.value[kAllocated] = -held_once;
    c.value[kEffective] = -once;
    c.value[kDuplicate] = duplicate;
    c.value[kOutside] = outside;
    recorder_.apply_shared(g, c, correction_ns);
  }
}

void Engine::release(std::uint32_t slot, std::int64_t correction_ns) {
  const std::uint32_t ticket = flights_[slot].ticket;
  drop_holding(slot, correction_ns);
  end_flight(slot);
  free_ticket(ticket);
}

void Engine::end_span(std::int64_t duration_ns) {
  recorder_.flush(now_ + duration_ns);
  clock_.duration_ns += duration_ns;
  clock_.step_weighted += Int128{step_} * duration_ns;
  now_ += duration_ns;
}

// --- growth, preemption and the policies ---------------------------------------------------

std::int64_t Engine::schedule_next(std::uint32_t slot, std::int64_t tokens) {
  const Flight& f = flights_[slot];
  std::int64_t next = std::min(alloc_.next_event_tokens(slot), f.prompt + f.output);
  for (const auto& g : opt_.layout.groups) {
    next = std::min(next, effective_share(tokens, f.prompt, f.n, g.window_tokens).next_change);
  }
  if (scheduler_tracks_requests_) next = std::min(next, scheduler_->next_event_tokens(f, tokens));
  if (!window_shares_.empty()) next = std::min(next, window_prefix_next(f, tokens));
  if (next <= tokens) broken(f, "next event at " + std::to_string(next) + " tokens is not ahead of " + std::to_string(tokens));
  wheel_.push(step_ + (next - tokens), slot, f.generation);
  return next;
}

void Engine::start_decoding(std::uint32_t slot, std::int64_t tokens, std::int64_t decode_from) {
  Flight& f = flights_[slot];
  f.decoding = true;
  f.decode_from = decode_from;
  f.tokens_at = tokens;
  f.step_at = step_;
  decoding_seqs_ += f.n;
  context_base_ += f.n * tokens - f.n * step_;
  context_slope_ += f.n;
  if (scheduler_tracks_requests_) scheduler_->on_decoding(view_, slot);
}

std::int64_t Engine::prefill_cost(const PrefillState& p, std::int64_t from, std::int64_t to) {
  return overlap(from, to, 0, p.prompt) + p.n * overlap(from, to, p.prompt, to);
}

std::pair<std::int64_t, std::int64_t> Engine::chunk_for(const PrefillState& p, std::int64_t budget) const {
  // Negative when the decoding samples alone exceed the step's tokens (no memory budget
  // refuses n > max_batched_tokens in demand mode): nothing is left for a prefill.
  budget = std::max<std::int64_t>(budget, 0);
  const std::int64_t prompt_part = std::min(std::max<std::int64_t>(0, p.prompt - p.prefilled), budget);
  const std::int64_t rest_budget = budget - prompt_part;
  const std::int64_t own_from = std::max(p.prefilled, p.prompt);
  const std::int64_t own_part = std::min(p.target - own_from, rest_budget / p.n);
  const std::int64_t positions = std::min(prompt_part + std::max<std::int64_t>(0, own_part), p.target - p.prefilled);
  return {positions, prefill_cost(p, p.prefilled, p.prefilled + positions)};
}

void Engine::count_preemption(Ticket& t) {
  ++report_.preemptions;
  if (++t.preemptions == 1) ++report_.preempted_requests;
  report_.max_preemptions_per_request = std::max<std::int64_t>(report_.max_preemptions_per_request, t.preemptions);
  step_memory_bound_ = true;
  step_preempted_ = true;
}

void Engine::preempt(std::uint32_t victim) {
  Flight& v = flights_[victim];
  const std::uint32_t ticket = v.ticket;
  Ticket& t = tickets_[ticket];
  count_preemption(t);
  const std::int64_t produced = v.produced_before(step_);
  alloc_.preempted(victim);
  if (scheduler_->swaps(v)) {
    // The request's blocks go to host memory and come back before anything new is
    // admitted. What it holds is what the previous step left.
    const std::int64_t bytes = recorder_.held_bytes(victim);
    report_.swapped_out_bytes += bytes;
    step_swap_bytes_ += bytes;
    t.swapped_bytes = bytes;
    t.swapped_tokens = v.tokens(step_) - 1;
    drop_holding(victim, 0);
    end_flight(victim);
    t.phase = Phase::swapped;
    swapped_.push_back({ticket, t.generation});
    return;
  }
  // Recompute: everything computed so far is discarded and will be computed again.
  drop_holding(victim, 0);
  end_flight(victim);
  t.base_generated = produced;
  t.phase = Phase::queued;
  note_queue(now_);
  ++queued_;
  report_.queue_max = std::max(report_.queue_max, queued_);
  if (scheduler_->requeue_at_back()) queue_.push_back({ticket, t.generation});
  else queue_.push_front({ticket, t.generation});
  scheduler_->after_preemption(view_);
}

bool Engine::grow_or_preempt(std::uint32_t slot, std::int64_t tokens, std::int64_t step_tokens) {
  for (;;) {
    const Outcome o = alloc_.grow(slot, tokens, step_tokens);
    if (o == Outcome::ok) return true;
    if (!bounded()) broken(flights_[slot], "allocation failed in a run without a memory bound");
    if (preempt_lingering()) continue;
    const std::uint32_t victim = scheduler_->choose_victim(view_, slot);
    if (victim == slot && running_ == 1 && swapped_.empty() && lingering_.empty()) {
      // Alone, with the whole budget, and still short: it never fits. Preempting it would
      // only start it over, forever. (With others swapped out it swaps itself out: coming
      // back it is placed afresh, which may fit where growing in place did not; if it
      // cannot come back with nothing running, resume_swapped refuses it.)
      ++report_.rejected_too_large;
      report_.generated_tokens += flights_[slot].n * flights_[slot].produced_before(step_);
      leaves(flights_[slot].ticket, RequestRecord::Outcome::refused, now_);
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
  // The prompt counts once, however often a preemption makes it be computed again; the rest
  // of the chunk's cost is computed again (the timeline's recomputed tokens).
  Ticket& ticket = ticket_of(f);
  const std::int64_t prompt_done = std::min(prefilled, f.prompt);
  // Of the chunk's prompt positions, those never computed before (not those a cache hit
  // skipped in between).
  const std::int64_t first_time = std::max<std::int64_t>(0, prompt_done - std::max(ticket.prompt_counted, f.prefilled));
  if (prompt_done > ticket.prompt_counted) {
    report_.prompt_tokens += prompt_done - ticket.prompt_counted;
    ticket.prompt_counted = prompt_done;
  }
  // Counted as computed, chunk by chunk: a request cancelled or refused before it comes back
  // recomputes nothing, and what it finds cached again is skipped.
  const std::int64_t recomputed = prefill_cost({f.prompt, f.n, f.target, f.prefilled}, f.prefilled, prefilled) - first_time;
  report_.recomputed_tokens += recomputed;
  recorder_.recomputed(recomputed);
  // Attention of a chunk of `positions` after `f.prefilled` cached: each query attends to the
  // cached positions and to the chunk's own up to itself.
  step_work_.prefill_pairs += positions * f.prefilled + positions * (positions + 1) / 2;
  step_work_.prefill_context += f.prefilled + positions;
  step_work_.longest_chunk = std::max(step_work_.longest_chunk, positions);
  step_work_.prefill_tile_pairs += prefill_tile_pairs(positions, f.prefilled);
  if (complete && first != 0) ++step_work_.sampled;
  f.prefilled = prefilled;
  f.tokens_at = t;
  f.step_at = step_;
  bool with_slopes = false;
  if (complete) {
    if (first != 0 && f.base_generated == 0) first_token_.push_back({slot, f.generation});
    if (f.output - f.base_generated <= 1) {
      finishing_.push_back({slot, f.generation});
    } else {
      start_decoding(slot, t, step_ + 1);
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
      const Contribution& c = recorder_.share(slot, g);
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
  if (scheduler_tracks_requests_) scheduler_->on_decoding(view_, slot);
  if (t == f.prompt + f.output) {
    finishing_.push_back({slot, f.generation});
    refresh(slot, t, false);
  } else {
    refresh(slot, t, schedule_next(slot, t) > t + 1);
  }
}

bool Engine::never_admits_uncached(const Ticket& t, const AdmitInfo& info) const {
  // No identity: neither the prompt's hashes nor a key any request's own blocks carry.
  AdmitInfo bare = info;
  bare.prefix_hashes = {};
  bare.request_key = std::numeric_limits<std::uint64_t>::max();
  const std::int64_t target = t.prompt + t.base_generated;
  return scheduler_->never_admits(view_, t, bare, chunk_for({t.prompt, t.n, target, 0}, whole_step_budget_).first);
}

void Engine::refuse_too_large(std::uint32_t ticket) {
  // Nothing else holds memory, and this request still does not fit: it never will.
  ++report_.rejected_too_large;
  report_.generated_tokens += tickets_[ticket].n * tickets_[ticket].base_generated;
  leaves(ticket, RequestRecord::Outcome::refused, now_);
  queue_.pop_front();
  note_queue(now_);
  --queued_;
  free_ticket(ticket);
}

void Engine::leaves(std::uint32_t ticket, RequestRecord::Outcome outcome, std::int64_t at_ns) {
  if (!opt_.per_request) return;
  const Ticket& t = tickets_[ticket];
  RequestRecord r;
  r.id = request_id_[ticket];
  r.ordinal = t.ordinal;
  r.arrival_ns = t.arrival_ns;
  r.first_scheduled_ns = t.admitted_ns;
  r.first_token_ns = t.first_token_ns;
  r.finish_ns = outcome == RequestRecord::Outcome::refused ? -1 : at_ns;
  r.prompt_tokens = t.prompt;
  r.cached_prompt_tokens = cached_at_admission_[ticket];
  r.output_tokens = t.output;
  r.preemptions = t.preemptions;
  r.outcome = outcome;
  opt_.per_request(r);
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

void Engine::resume_swapped(std::int64_t& budget, std::int64_t& decode_seqs) {
  while (!swapped_.empty()) {
    const TicketRef ref = swapped_.front();
    Ticket& t = tickets_[ref.ticket];
    if (t.generation != ref.generation || t.phase != Phase::swapped) {
      swapped_.pop_front();
      continue;
    }
    // Its sequences take places under max_running and, decoding in this step, a token each
    // of the step's budget (vLLM's _schedule_swapped checks and charges both).
    if (max_seqs_ > 0 && running_seqs_ + t.n > max_seqs_) return;
    if (budget < t.n) return;
    // It comes back holding what it held, and decodes in this step.
    const std::int64_t tokens = t.swapped_tokens + 1;
    const std::uint32_t slot = start_flight(ref.ticket);
    // Its generated tokens come back with it: a prefix cache may find their full blocks as
    // it finds the prompt's (v0's _swap_block_table reuses every cached block), and the
    // last-token rule of a first admission does not cap what it finds at its prompt.
    AdmitInfo info = admit_info_of(ref.ticket);
    info.resumed_tokens = t.swapped_tokens - t.prompt;
    bool back = scheduler_->swaps_in(view_, info, tokens) && alloc_.admit(slot, info) == Outcome::ok;
    if (back && alloc_.grow(slot, tokens, 1) != Outcome::ok) {
      alloc_.release(slot);
      back = false;
    }
    if (!back) {
      end_flight(slot);
      if (running_ == 0) {
        // Nothing else is on the device and it still cannot come back: it never will.
        ++report_.rejected_too_large;
        report_.generated_tokens += t.n * (t.swapped_tokens - t.prompt);
        leaves(ref.ticket, RequestRecord::Outcome::refused, now_);
        swapped_.pop_front();
        free_ticket(ref.ticket);
        continue;
      }
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
    running_seqs_ += f.n;
    start_decoding(slot, tokens, step_);
    decode_seqs += f.n;
    budget -= f.n;
    const bool last = tokens == f.prompt + f.output;
    if (last) finishing_.push_back({slot, f.generation});
    refresh(slot, tokens, last ? false : schedule_next(slot, tokens) > tokens + 1);
    // Swapped in counts what it holds back on the device; the link carries only what went
    // out (the block for its next token, or a regrown buffer, is new on the device).
    report_.swapped_in_bytes += recorder_.held_bytes(slot);
    step_swap_bytes_ += t.swapped_bytes;
  }
}

void Engine::admit_waiting(std::int64_t& budget, std::int64_t& prefill_tokens) {
  if (scheduler_tracks_requests_) scheduler_->begin_admission();
  if (scheduler_orders_queue_ && !queue_.empty()) {
    scheduler_->order_queue(view_, queue_, [this](std::uint32_t ticket) {
      return sharing() ? alloc_.cached_tokens(admit_info_of(ticket)) : 0;
    });
  }
  // Asynchronous scheduling: this step was planned when the last one began, so it sees
  // neither what arrived since then nor the places the last step's completions freed. Only
  // while something else runs: otherwise vLLM's planned step is empty and it plans again at once.
  const std::int64_t seen_until = plan_seen_until();
  const std::int64_t held = plan_lags() ? completed_in_last_step_ : 0;
  note_plan(seen_until);
  while (!queue_.empty()) {
    const TicketRef ref = queue_.front();
    Ticket& t = tickets_[ref.ticket];
    if (t.generation != ref.generation || t.phase != Phase::queued) {
      queue_.pop_front();  // cancelled while waiting
      continue;
    }
    if (t.arrival_ns > seen_until) {  // arrived after this step was planned
      // In arrival order everything behind it came later too; a queue the policy ordered
      // (lpm) may hold requests the plan saw behind it, which it does not hold up.
      if (!scheduler_orders_queue_) break;
      unseen_.push_back(ref);
      queue_.pop_front();
      continue;
    }
    // Places under max_running are sequences: n for a request of n samples.
    if (max_seqs_ > 0 && running_seqs_ + held + t.n > max_seqs_) {
      if (scheduler_tracks_requests_) scheduler_->on_count_limit(view_);
      break;
    }
    const std::int64_t target = t.prompt + t.base_generated;
    // Alone, the request has the whole budget and the whole step: what it cannot start
    // with now it can never start with (the progress guarantee: refused, not retried).
    const bool alone = running_ == 0 && swapped_.empty();
    if (budget <= 0 && target > 0) break;  // never alone: alone, the step's budget is whole
    // Blocks another request left behind (its prompt's), or this one before a preemption
    // (prompt and generated), are not computed again.
    const AdmitInfo info = admit_info_of(ref.ticket);
    const std::int64_t cached = sharing() ? alloc_.cached_tokens(info) : 0;
    if (!alone) {
      // What it could not start with alone (the whole step's token budget, the whole
      // capacity) it can never start with: refused now, rather than blocking the queue
      // behind it until nothing else runs.
      const std::int64_t whole = chunk_for({t.prompt, t.n, target, cached}, whole_step_budget_).first;
      if ((cached + whole < target && (!opt_.chunked_prefill || whole == 0)) ||
          (scheduler_->never_admits(view_, t, info, cached + whole) && (cached == 0 || never_admits_uncached(t, info)))) {
        refuse_too_large(ref.ticket);
        continue;
      }
    }
    const auto [positions, cost] = chunk_for({t.prompt, t.n, target, cached}, budget);
    if (cached + positions < target && (!opt_.chunked_prefill || positions == 0)) {
      // Its prefill (a recomputed one costs n tokens per generated position) does not fit a
      // step's token budget, or not even one position of it does.
      if (!alone) break;
      refuse_too_large(ref.ticket);
      continue;
    }
    const bool was_memory_bound = step_memory_bound_;
    bool started = scheduler_->admits(view_, t, info, cached, cached + positions);
    std::uint32_t slot = 0;
    if (started) {
      slot = start_flight(ref.ticket);
      flights_[slot].prefilled = cached;
      if (alloc_.admit(slot, info) != Outcome::ok) {
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
    running_seqs_ += t.n;
    Flight& f = flights_[slot];
    f.admit_order = next_admit_order_++;
    running_order_.insert({f.admit_order, slot});
    const bool first_admission = t.admitted_ns < 0;
    if (first_admission) {
      t.admitted_ns = now_;
      recorder_.waited(now_ - t.arrival_ns);
      if (opt_.per_request) cached_at_admission_[ref.ticket] = cached;
    }
    if (scheduler_tracks_requests_) scheduler_->on_admitted(view_, slot, t);
    if (sharing()) count_prefix_lookup(t.prompt, target, cached, !first_admission);
    budget -= cost;
    prefill_tokens += cost;
    if (f.prefilled < f.target) prefilling_.push_back({slot, f.generation});
  }
  // The requests this plan could not see go back to the front, in the order they had.
  for (auto it = unseen_.rbegin(); it != unseen_.rend(); ++it) queue_.push_front(*it);
  unseen_.clear();
}

std::int64_t Engine::decode_step_ps(const StepWork& work) {
  decode_line_work_.context = work.context;  // the one count the line does not fix
  if (!have_decode_line_ || work != decode_line_work_) {
    decode_line_ = decode_step_line(opt_.cost, work);
    decode_line_work_ = work;
    have_decode_line_ = true;
  }
  return decode_line_ps(work);
}

std::int64_t Engine::decode_line_ps(const StepWork& work) const {
  constexpr std::int64_t kSaturated = std::numeric_limits<std::int64_t>::max();
  const Int128 line = Int128{decode_line_.fixed_ps} + Int128{decode_line_.per_position_ps} * work.context;
  const std::int64_t ps =
      decode_line_.fixed_ps == kSaturated || line > kSaturated ? kSaturated : static_cast<std::int64_t>(line);
#if KVSIM_EXPENSIVE_CHECKS
  if (ps != step_time_ps(opt_.cost, work)) {
    throw InternalError("engine: step " + std::to_string(step_) + "'s time from its batch's line (" +
                        std::to_string(ps) + " ps) is not the cost model's (" +
                        std::to_string(step_time_ps(opt_.cost, work)) + " ps)");
  }
#endif
  return ps;
}

std::int64_t Engine::step_duration(std::int64_t model_ps, const StepWork& work) const {
  // step_time_ps saturated: the step's true cost is unknown, not 2^63 ps.
  if (model_ps == std::numeric_limits<std::int64_t>::max()) [[unlikely]] step_cost_saturated(work);
  // Whole nanoseconds, rounded up, at least 1; in 64 bits, where a step's own time always fits
  // (a 128-bit division is a call).
  Int128 ns = model_ps > 0 ? (model_ps - 1) / 1000 + 1 : 1;
  if (step_swap_bytes_ > 0) {
    ns += ceil_div(Int128{step_swap_bytes_} * kNsPerSecond, Int128{opt_.memory.swap_bytes_per_second});
  }
  // Time only moves forward, and stays within the 64-bit nanoseconds every figure uses: a
  // trace whose requests arrive so late that their service would end past the largest
  // representable time (about 292 years after time 0) cannot be replayed.
  if (ns <= 0 || ns > std::numeric_limits<std::int64_t>::max() - now_) [[unlikely]] step_out_of_time(ns);
  return static_cast<std::int64_t>(ns);
}

void Engine::step_cost_saturated(const StepWork& work) const {
  throw InputError(Location{trace_.path(), 0, ""},
                   "step " + std::to_string(step_) + " (" + std::to_string(work.prefill_tokens) + " prompt tokens, " +
                       std::to_string(work.decode_seqs) + " decoding sequences, " + std::to_string(work.context) +
                       " context positions) would take 2^63 ps (about 107 days) or more under the cost model \"" +
                       opt_.cost.name + "\": check the trace's lengths or --cost");
}

void Engine::step_out_of_time(Int128 ns) const {
  if (ns <= 0) {
    throw InternalError(alloc_.name() + ": step " + std::to_string(step_) + " at " + std::to_string(now_) +
                        " ns would last no time");
  }
  if (step_swap_bytes_ > 0) {
    // The transfer, not the trace, is what takes that long: a link of a few bytes a second.
    throw InputError(Location{"", 0, kOptSwapBandwidth},
                     "step " + std::to_string(step_) + " swaps " + std::to_string(step_swap_bytes_) + " bytes at " +
                         std::to_string(opt_.memory.swap_bytes_per_second) +
                         " bytes a second and would end past the largest representable time (" +
                         std::to_string(std::numeric_limits<std::int64_t>::max()) + " ns); give a faster link");
  }
  throw InputError(Location{trace_.path(), 0, ""},
                   "step " + std::to_string(step_) + " starts at " + std::to_string(now_) + " ns and would end past " +
                       "the largest representable time (" + std::to_string(std::numeric_limits<std::int64_t>::max()) +
                       " ns); shift the trace's arrivals earlier");
}

void Engine::deliver_step() {
  for (const SlotRef ref : first_token_) {
    const Flight& f = flights_[ref.slot];
    if (f.generation != ref.generation) continue;  // cancelled or preempted in the step
    tickets_[f.ticket].first_token_ns = now_;
  }
  first_token_.clear();
  for (const SlotRef ref : finishing_) {
    const Flight& f = flights_[ref.slot];
    if (f.generation != ref.generation) continue;
    ++report_.completed;
    completed_seqs_ += f.n;
    const Ticket& t = tickets_[f.ticket];
    // Latencies are over completed requests: a request cancelled after its first token has a
    // TTFT in no figure, as in the per-request output (nor has one of 0 output tokens).
    if (t.first_token_ns >= 0) recorder_.first_token(t.first_token_ns - t.arrival_ns);
    recorder_.completed(now_ - t.arrival_ns);
    if (f.output >= 2) recorder_.per_output_token((now_ - t.first_token_ns) / (f.output - 1));
    report_.generated_tokens += f.n * f.output;
    if (linger_) {
      linger(ref.slot, now_);
    } else {
      leaves(f.ticket, RequestRecord::Outcome::completed, now_);
      alloc_.outputs_processed(ref.slot);
      release(ref.slot, 0);
    }
  }
  finishing_.clear();
  if (running_ == 0 && !lingering_.empty()) free_lingering();
}

void Engine::run_iteration() { end_step(begin_step()); }

std::int64_t Engine::retime_step(std::int64_t peer_tokens, std::int64_t graph_tokens) {
  step_work_.peer_tokens = peer_tokens;
  step_work_.graph_tokens = graph_tokens;
  return step_duration(step_work_);
}

void Engine::open_step() {
  step_memory_bound_ = false;
  step_preempted_ = false;
  step_swap_bytes_ = 0;
  step_work_ = StepWork{};
}

std::int64_t Engine::time_step(std::int64_t decode_seqs, std::int64_t prefill_tokens, std::int64_t context) {
  step_work_.prefill_tokens = prefill_tokens;
  step_work_.decode_seqs = decode_seqs;
  step_work_.context = context;
  step_work_.sampled += decode_seqs;
  step_decode_seqs_ = decode_seqs;
  step_prefill_tokens_ = prefill_tokens;
  if (opt_.cuda_graph_max_tokens > 0) {
    step_work_.graph_tokens = cuda_graph_tokens(opt_.cuda_graph_max_tokens, decode_seqs + prefill_tokens);
  }
  // A step that computes nothing runs no forward pass, only its swaps: vLLM's model runner
  // returns at once when no token is scheduled (v1 GPUModelRunner.execute_model; v0's worker
  // after its cache operations, LocalOrDistributedWorkerBase.execute_model). A step that
  // samples a first token (a prompt of 0 tokens, which vLLM never sees) runs one.
  if (decode_seqs == 0 && prefill_tokens == 0 && step_work_.sampled == 0) return step_duration(0, step_work_);
  if (prefill_tokens == 0 && step_work_.prefill_pairs == 0 && step_work_.prefill_context == 0 &&
      step_work_.prefill_tile_pairs == 0 && step_work_.longest_chunk <= 1) {
    return step_duration(decode_step_ps(step_work_), step_work_);
  }
  return step_duration(step_work_);
}

bool Engine::quiet_step_ahead() const {
  // Stale entries (a cancelled prefill or waiting request) make a step look busy: the full
  // path drops them.
  return decoding_seqs_ > 0 && prefilling_.empty() && queue_.empty() && swapped_.empty() &&
         !scheduler_tracks_requests_ && !wheel_.due(step_);
}

std::int64_t Engine::run_quiet_steps(std::int64_t start_before_ns) {
  if (now_ >= start_before_ns || !quiet_step_ahead()) return 0;
  // A stretch of quiet steps. What made the first one quiet holds for every step after it
  // but the wheel, since a quiet step admits, prefills, swaps and stops nothing, and takes
  // up no arrival or cancellation: only an event due, or one arriving or cancelled within a
  // step, ends the stretch. Its steps decode one batch, so their work is the first step's
  // but the context, and their time comes from one line (decode_step_ps).
  open_step();
  free_lingering();
  std::int64_t duration = time_step(decoding_seqs_, 0, context_base_ + context_slope_ * step_);
  std::int64_t steps = 0;
  for (;;) {
    // What arrives or is cancelled within the step (or at its start: the loop around takes
    // up those at a boundary) leaves it to the full path, which times it the same way.
    const std::int64_t end_ns = now_ + duration;
    if ((have_next_ && next_.arrival_ns < end_ns) || (!cancellations_.empty() && cancellations_.top().at_ns < end_ns)) {
      break;
    }
    wheel_.take(step_, due_);  // nothing due: the wheel only moves on to the next step
    end_quiet_step(duration, steps == 0);
    ++steps;
    if (now_ >= start_before_ns || wheel_.due(step_)) break;
    step_work_.context = context_base_ + context_slope_ * step_;
    duration = step_duration(decode_line_ps(step_work_), step_work_);
  }
  // Each figure a step's peaks offer is a linear sum, which no quiet step changes: over the
  // stretch it is largest, and first so, at its first step or its last. end_quiet_step
  // offered the first; the last is offered here, which leaves every peak as offering each
  // step would.
  if (steps > 1) recorder_.offer_step_peaks(step_ - 1, last_step_start_);
  return steps;
}

void Engine::sort_running_order(std::vector<StepEvent>& events) {
  if (events.size() < 2) return;
  const auto rank = [&](const StepEvent& e) {
    const Flight& f = flights_[e.slot];
    return f.generation == e.generation && f.live ? f.admit_order : std::numeric_limits<std::uint64_t>::max();
  };
  const auto before = [](const RankedEvent& a, const RankedEvent& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.event.order < b.event.order;
  };
  // Usually in order already: one look at each flight says so, with nothing copied.
  bool sorted = true;
  RankedEvent last{rank(events[0]), events[0]};
  for (std::size_t i = 1; sorted && i < events.size(); ++i) {
    const RankedEvent next{rank(events[i]), events[i]};
    sorted = !before(next, last);
    last = next;
  }
  if (sorted) return;
  // Otherwise each rank read once more, into the scratch vector, and the sort compares those.
  ranked_.clear();
  for (const StepEvent& e : events) ranked_.push_back({rank(e), e});
  std::sort(ranked_.begin(), ranked_.end(), before);
  for (std::size_t i = 0; i < events.size(); ++i) events[i] = ranked_[i].event;
}

std::int64_t Engine::begin_step() {
  open_step();
  // Asynchronous scheduling: the last step's completions still hold their blocks while this
  // step is planned, if it was planned as the last one began (something else ran).
  const bool lingering = !lingering_.empty() && last_step_end_ == now_ && running_ > 0;
  if (!lingering) free_lingering();
  // Requests whose next event falls on this step, taken in running order as vLLM's
  // scheduler walks self.running: each allocate_slots first frees what its own window has
  // passed, so an older request's freed block is there for a newer one's growth, and a
  // request short of a block preempts only after those before it have grown.
  wheel_.take(step_, due_);
  sort_running_order(due_);
  for (const StepEvent& e : due_) {
    if (flights_[e.slot].generation == e.generation && flights_[e.slot].live) handle_event(e.slot);
  }
  // The decoding batch is fixed before new prefills join it (they decode from the next step).
  std::int64_t decode_seqs = decoding_seqs_;
  const std::int64_t context = context_base_ + context_slope_ * step_;
  std::int64_t budget = opt_.max_batched_tokens > 0 ? whole_step_budget_ - decoding_seqs_ : kUnlimited;
  std::int64_t prefill_tokens = 0;
  continue_prefills(budget, prefill_tokens);
  // The plan passes over what it can see and does not admit, whether it admits at all or not
  // (the overload rule's count, passed_over()).
  note_plan(plan_seen_until());
  // vLLM admits nothing new in a step that had to preempt.
  if (!step_preempted_) {
    resume_swapped(budget, decode_seqs);
    if (swapped_.empty()) admit_waiting(budget, prefill_tokens);
  }
  free_lingering();  // the last step's outputs are processed while this one runs
  if (lingering && step_preempted_ && running_ == 0 && decode_seqs == 0 && prefill_tokens == 0) {
    // The plan holds nothing: behind a completion's blocks, every running request preempted
    // itself. vLLM's empty step skips the forward pass, and it plans again as soon as the
    // last step's output is processed, which frees those blocks: at this same instant, with
    // nothing running, so with no lag and admissions allowed.
    step_preempted_ = false;
    budget = whole_step_budget_;
    resume_swapped(budget, decode_seqs);
    if (swapped_.empty()) admit_waiting(budget, prefill_tokens);
  }

  step_planned_ = true;
  return time_step(decode_seqs, prefill_tokens, context);
}

void Engine::count_step(std::int64_t decode_seqs, std::int64_t prefill_tokens) {
  ++report_.iterations;
  // The scheduler's limits, checked: a step's tokens (a decode is one per sequence) within
  // max_batched_tokens, its sequences within max_running.
  kvsim::check((opt_.max_batched_tokens == 0 || decode_seqs + prefill_tokens <= opt_.max_batched_tokens) &&
                   (max_seqs_ == 0 || running_seqs_ <= max_seqs_),
               "engine: a step went past max_batched_tokens or max_running");
  // The progress guarantee, checked: a step that decodes nothing, prefills nothing and
  // ends no request only starts what takes its first step next (a prompt of 0 tokens); many
  // in a row mean a livelock, which is a bug, not a result.
  const std::int64_t ended = requests_ended();
  if (decode_seqs > 0 || prefill_tokens > 0 || ended != ended_before_) {
    idle_steps_ = 0;
    ended_before_ = ended;
  } else if (++idle_steps_ > kMaxIdleSteps) [[unlikely]] {
    livelock();
  }
}

void Engine::livelock() const {
  throw InternalError(alloc_.name() + ": no progress for " + std::to_string(idle_steps_) + " steps up to step " +
                      std::to_string(step_) + " (" + std::to_string(running_) + " running, " +
                      std::to_string(queued_) + " waiting, " + std::to_string(swapped_.size()) +
                      " swapped out): a livelock");
}

StepCounts Engine::step_counts() const {
  return StepCounts{step_prefill_tokens_, step_decode_seqs_, step_work_.context, step_work_.sampled,
                    step_work_.peer_tokens, step_work_.graph_tokens};
}

void Engine::close_step(std::int64_t duration, std::int64_t decoded) {
  // One inter-token sample per token the step's decodes produced.
  recorder_.decode_step(duration, decoded);
  end_span(duration);
  ++step_;
  step_planned_ = false;
}

void Engine::report_progress() {
  // Every 64 steps: a step of long prompts under a radix tree can take milliseconds, and a
  // run of a few thousand steps must still move the bar. The share of the trace read, times
  // the share of the requests read that have ended: an overloaded run still draining its
  // queue after the last arrival is not done.
  if (opt_.progress && report_.iterations % 64 == 0 && trace_.total_bytes() > 0) {
    const double read = static_cast<double>(trace_.bytes_read()) / static_cast<double>(trace_.total_bytes());
    const double ended =
        report_.requests > 0 ? static_cast<double>(requests_ended()) / static_cast<double>(report_.requests) : 1.0;
    opt_.progress(read * ended);
  }
}

void Engine::end_step(std::int64_t duration) {
  const std::int64_t decode_seqs = step_decode_seqs_;
  count_step(decode_seqs, step_prefill_tokens_);
  if (step_memory_bound_) report_.memory_bound_ns += duration;
  if (scheduler_tracks_requests_) scheduler_->end_step(view_, step_preempted_, decode_seqs);
  recorder_.end_of_step_state(running_, queued_, duration, [this] { return passed_over(); },
                              [this] { return step_counts(); });
  // Arrivals and cancellations inside the iteration happen at their own instants.
  last_step_start_ = now_;
  process_span_events(now_ + duration, true);
  close_step(duration, decode_seqs - step_cancelled_decodes_);
  step_cancelled_decodes_ = 0;
  const std::int64_t completed_before = completed_seqs_, running_before = running_;
  deliver_step();
  last_step_end_ = now_;
  completed_in_last_step_ = completed_seqs_ - completed_before + cancelled_in_step_seqs_;
  cancelled_in_step_seqs_ = 0;
  ended_in_last_step_ = running_before - running_;
  report_progress();
}

void Engine::end_quiet_step(std::int64_t duration, bool offer_peaks) {
  count_step(step_decode_seqs_, 0);
  if (offer_peaks) recorder_.offer_step_peaks(step_, now_);
  recorder_.sample_step(running_, queued_, duration, [this] { return passed_over(); },
                        [this] { return step_counts(); });
  last_step_start_ = now_;
  close_step(duration, step_decode_seqs_);
  last_step_end_ = now_;
  completed_in_last_step_ = 0;
  ended_in_last_step_ = 0;
  report_progress();
}

ReplayReport Engine::run() {
  name_report();
  if (!fetch()) return finish_report();
  measured_ = opt_.schedule == Schedule::measured ||
              (opt_.schedule == Schedule::automatic && next_.has_service_times());
  if (measured_ && opt_.per_request && opt_.per_request_required) {
    throw InputError(Location{trace_.path(), 0, ""},
                     "its start/first_token/finish times fix the schedule, and its per-request times are the "
                     "trace's own; for per-request output of a simulation, replay it with " +
                         std::string(kOptSchedule) + " simulate");
  }
  if (measured_ && !opt_.simulation_options.empty()) {
    std::string names;
    for (const std::string& o : opt_.simulation_options) names += (names.empty() ? "" : ", ") + o;
    throw InputError(Location{trace_.path(), 0, ""},
                     "its start/first_token/finish times fix the schedule, on which " + names +
                         " would not act; replay it without " +
                         (opt_.simulation_options.size() == 1 ? "it" : "them") + ", or with " +
                         std::string(kOptSchedule) + " simulate");
  }
  if (measured_ && bounded()) {
    throw InputError(Location{trace_.path(), 0, ""},
                     "its start/first_token/finish times fix the schedule, which a memory budget would have to "
                     "change; replay it without a budget, or with " + std::string(kOptSchedule) + " simulate");
  }
  start_clock(next_.arrival_ns);
  return measured_ ? run_measured() : run_simulated();
}

void Engine::name_report() {
  report_.allocator = alloc_.name();
  report_.trace = trace_.path();
  report_.capacity_bytes = capacity_bytes_;
}

void Engine::start_clock(std::int64_t start_ns) {
  report_.schedule = measured_ ? "measured" : "simulated";
  report_.cost_model = measured_ ? "none (measured schedule)" : opt_.cost.name;
  now_ = start_ns;
  report_.start_ns = now_;
  recorder_.start_at(now_);
}

void Engine::begin_at(std::int64_t start_ns) {
  name_report();
  measured_ = false;
  start_clock(start_ns);
}

void Engine::advance_before(std::int64_t t_ns) {
  for (;;) {
    process_span_events(now_, false);
    if (!has_work()) {
      if (!have_next_ || next_.arrival_ns >= t_ns) return;
      idle_until(next_.arrival_ns);
      continue;
    }
    if (now_ >= t_ns) return;
    if (run_quiet_steps(t_ns) == 0) run_iteration();
  }
}

void Engine::wait_until(std::int64_t t_ns) {
  kvsim::check(running_ == 0 && t_ns >= now_, "engine: waiting with requests running, or back in time");
  process_span_events(t_ns, true);
  idle_until(t_ns);
}

void Engine::idle_until(std::int64_t t_ns) {
  if (t_ns > now_) {
    recorder_.idle(queued_);
    if (scheduler_tracks_requests_ && !has_work()) scheduler_->on_idle();
  }
  end_span(t_ns - now_);
}

ReplayReport Engine::finish() { return run_simulated(); }

ReplayReport Engine::run_simulated() {
  for (;;) {
    process_span_events(now_, false);
    if (!has_work()) {
      if (!have_next_) break;
      idle_until(next_.arrival_ns);
      continue;
    }
    if (run_quiet_steps(kUnlimited) == 0) run_iteration();
  }
  report_.end_ns = now_;
  return finish_report();
}

std::int64_t Engine::requests_ended() const {
  return report_.completed + report_.cancelled_queued + report_.cancelled_running + report_.refused();
}

void Engine::check_accounted() const {
  // Every request ends exactly one way. (A request still running or waiting at the end is
  // the recorder's leak check.)
  const std::int64_t ended = requests_ended();
  if (ended != report_.requests) {
    throw InternalError(alloc_.name() + ": of " + std::to_string(report_.requests) + " requests, " +
                        std::to_string(report_.completed) + " completed, " +
                        std::to_string(report_.cancelled_queued + report_.cancelled_running) + " cancelled and " +
                        std::to_string(report_.refused()) +
                        " refused: some were lost or counted twice");
  }
}

}  // namespace detail

ReplayReport replay(TraceReader& trace, Allocator& allocator, const ReplayOptions& options) {
  detail::Engine engine(trace, allocator, options);
  return engine.run();
}

}  // namespace kvsim
