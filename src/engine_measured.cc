// The measured schedule: a trace's own start / first_token / finish timestamps (a
// production request log) fix when each request holds what, and the engine only follows
// them. The prompt is stored at start; output token k of m appears at
// first_token + (k - 1)(finish - first_token)/(m - 1), rounded down; everything is freed at
// finish, or at the cancellation if that comes first. Every token is an explicit event.
#include "engine.h"
#include "kvsim/error.h"
#include "kvsim/option_names.h"

namespace kvsim::detail {

void Engine::pull_arrivals(std::int64_t now) {
  while (have_next_ && next_.arrival_ns <= now) {
    const Location where{trace_.path(), 0, "request #" + std::to_string(ordinal_) + " ('" + next_.id + "')"};
    if (!next_.has_service_times()) {
      throw InputError(where, opt_.schedule == Schedule::measured
                                  ? "has no start, first_token and finish times, which " + std::string(kOptSchedule) + " measured needs "
                                    "for every request"
                                  : "has no start, first_token and finish times, but the trace's first request "
                                    "has them, so the schedule is measured and every request needs them (use "
                                    + std::string(kOptSchedule) + " simulate to ignore them)");
    }
    const std::int64_t index = take_ticket();
    if (index < 0) {
      fetch();
      continue;
    }
    const auto ticket = static_cast<std::uint32_t>(index);
    if (service_.size() <= ticket) service_.resize(ticket + 1);
    ServiceTimes& s = service_[ticket];
    s.start_ns = *next_.start_ns;
    s.first_token_ns = *next_.first_token_ns;
    s.finish_ns = *next_.finish_ns;
    s.cancelled = next_.cancel_ns && *next_.cancel_ns < s.finish_ns;
    s.stop_ns = s.cancelled ? *next_.cancel_ns : s.finish_ns;
    if (!(next_.arrival_ns <= s.start_ns && s.start_ns <= s.first_token_ns && s.first_token_ns <= s.finish_ns)) {
      throw InputError(where, "service times out of order: expected arrival <= start <= first_token <= finish");
    }
    ++queued_;
    const bool before_start = s.cancelled && s.stop_ns <= s.start_ns;
    push_timed(before_start ? s.stop_ns : s.start_ns, before_start ? TimedEvent::release : TimedEvent::start, ticket);
    fetch();
  }
}

std::int64_t Engine::token_time(const Ticket& t, const ServiceTimes& s, std::int64_t k) const {
  if (k <= 1 || t.output <= 1) return s.first_token_ns;
  return s.first_token_ns + static_cast<std::int64_t>(Int128{k - 1} * (s.finish_ns - s.first_token_ns) / (t.output - 1));
}

void Engine::push_timed(std::int64_t at_ns, TimedEvent::Kind kind, std::uint32_t ticket) {
  timed_.push({at_ns, kind, timed_order_++, ticket, tickets_[ticket].generation});
}

void Engine::handle_timed(const TimedEvent& e) {
  Ticket& t = tickets_[e.ticket];
  if (t.generation != e.generation) return;
  const ServiceTimes& s = service_[e.ticket];
  const auto next_token_or_release = [&](const Flight& f) {
    const std::int64_t k = f.produced + 1;
    const std::int64_t at = token_time(t, s, k);
    if (k <= t.output && at < s.stop_ns) push_timed(at, TimedEvent::token, e.ticket);
    else push_timed(s.stop_ns, TimedEvent::release, e.ticket);
  };
  switch (e.kind) {
    case TimedEvent::start: {
      --queued_;
      ++running_;
      running_seqs_ += t.n;
      t.phase = Phase::running;
      t.admitted_ns = e.at_ns;
      recorder_.waited(s.start_ns - t.arrival_ns);
      const std::uint32_t slot = start_flight(e.ticket);
      Flight& f = flights_[slot];
      const AdmitInfo info = admit_info_of(e.ticket);
      if (sharing()) {
        // Held, though the measured times stand.
        count_prefix_lookup(t.prompt, t.prompt, alloc_.cached_tokens(info), false);
      }
      if (alloc_.admit(slot, info) != Outcome::ok) broken(f, "admission failed in a run without a memory budget");
      if (t.prompt > 0 && alloc_.grow(slot, t.prompt, t.prompt) != Outcome::ok) {
        broken(f, "allocation failed in a run without a memory budget");
      }
      f.prefilled = t.prompt;
      report_.prompt_tokens += t.prompt;
      f.tokens_at = t.prompt;
      refresh(slot, t.prompt, false);
      next_token_or_release(f);
      break;
    }
    case TimedEvent::token: {
      const auto slot = static_cast<std::uint32_t>(t.slot);
      Flight& f = flights_[slot];
      ++f.produced;
      f.tokens_at = t.prompt + f.produced;
      if (alloc_.grow(slot, f.tokens_at, 1) != Outcome::ok) broken(f, "allocation failed in a run without a memory budget");
      refresh(slot, f.tokens_at, false);
      next_token_or_release(f);
      break;
    }
    case TimedEvent::release: {
      if (t.phase == Phase::queued) {  // cancelled before it started
        ++report_.cancelled_queued;
        --queued_;
        free_ticket(e.ticket);
        break;
      }
      const auto slot = static_cast<std::uint32_t>(t.slot);
      if (s.cancelled) {
        ++report_.cancelled_running;
        report_.generated_tokens += t.n * flights_[slot].produced;
      } else {
        ++report_.completed;
        report_.generated_tokens += t.n * t.output;
        if (t.output > 0) recorder_.first_token(s.first_token_ns - t.arrival_ns);
        recorder_.completed(s.finish_ns - t.arrival_ns);
        if (t.output >= 2) {
          // Its tokens are spread evenly from first_token to finish: every gap is the TPOT.
          const std::int64_t tpot = (s.finish_ns - s.first_token_ns) / (t.output - 1);
          recorder_.per_output_token(tpot);
          recorder_.decode_step(tpot, t.n * (t.output - 1));
        }
      }
      release(slot, 0);
      break;
    }
  }
}

ReplayReport Engine::run_measured() {
  for (;;) {
    // The largest time is a real instant (a finish there still releases): no sentinel.
    if (!have_next_ && timed_.empty()) break;
    std::int64_t at = have_next_ ? next_.arrival_ns : timed_.top().at_ns;
    if (!timed_.empty()) at = std::min(at, timed_.top().at_ns);
    if (at > now_) end_span(at - now_);
    note_queue(now_);
    pull_arrivals(now_);
    while (!timed_.empty() && timed_.top().at_ns == now_) {
      const TimedEvent e = timed_.top();
      timed_.pop();
      handle_timed(e);
    }
    report_.queue_max = std::max(report_.queue_max, queued_);
    recorder_.end_of_step_state(running_, queued_, 0, [this] { return queued_; }, [] { return StepCounts{}; });
  }
  report_.end_ns = now_;
  return finish_report();
}

}  // namespace kvsim::detail
