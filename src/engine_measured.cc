// The measured schedule: a trace's own start / first_token / finish timestamps (a
// production request log) fix when each request holds what, and the engine only follows
// them. The prompt is stored at start; output token k of m appears at
// first_token + (k - 1)(finish - first_token)/(m - 1), rounded down; everything is freed at
// finish, or at the cancellation if that comes first. Every token is an explicit event.
#include "engine.h"
#include "kvsim/error.h"

namespace kvsim::detail {

void Engine::pull_arrivals(std::int64_t now) {
  while (have_next_ && next_.arrival_ns <= now) {
    ++report_.requests;
    if (next_.prompt_tokens + next_.output_tokens > max_tokens_) {
      ++report_.rejected_too_long;  // an engine refuses these at its API
      fetch();
      continue;
    }
    if (!next_.has_service_times()) {
      throw InputError(Location{trace_.path(), 0, "request #" + std::to_string(ordinal_) + " ('" + next_.id + "')"},
                       "has no start, first_token and finish times, but the schedule is measured (the trace's "
                       "first request has them; use --schedule simulate to ignore them)");
    }
    const std::uint32_t slot = take_slot();
    Flight& f = flights_[slot];
    ++queued_;
    f.start_ns = *next_.start_ns;
    f.first_token_ns = *next_.first_token_ns;
    f.finish_ns = *next_.finish_ns;
    f.cancelled = next_.cancel_ns && *next_.cancel_ns < f.finish_ns;
    f.stop_ns = f.cancelled ? *next_.cancel_ns : f.finish_ns;
    if (!(f.arrival_ns <= f.start_ns && f.start_ns <= f.first_token_ns && f.first_token_ns <= f.finish_ns)) {
      throw InputError(Location{trace_.path(), 0, "request #" + std::to_string(ordinal_) + " ('" + next_.id + "')"},
                       "service times out of order: expected arrival <= start <= first_token <= finish");
    }
    const bool before_start = f.cancelled && f.stop_ns <= f.start_ns;
    push_timed(before_start ? f.stop_ns : f.start_ns, before_start ? TimedEvent::release : TimedEvent::start, slot);
    fetch();
  }
}

std::int64_t Engine::token_time(const Flight& f, std::int64_t k) const {
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
      f.admitted_ns = e.at_ns;
      waiting_.push_back(f.start_ns - f.arrival_ns);
      if (alloc_.admit(e.slot, admit_info(f)) != Outcome::ok) broken(f, "admission failed in a run without a memory budget");
      if (f.prompt > 0 && alloc_.grow(e.slot, f.prompt, f.prompt) != Outcome::ok) {
        broken(f, "allocation failed in a run without a memory budget");
      }
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
      if (alloc_.grow(e.slot, f.tokens_at, 1) != Outcome::ok) broken(f, "allocation failed in a run without a memory budget");
      refresh(e.slot, f.tokens_at, false);
      next_token_or_release();
      break;
    }
    case TimedEvent::release: {
      if (f.phase == Phase::queued) {  // cancelled before it started
        ++report_.cancelled_queued;
        --queued_;
        free_slot(e.slot);
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
    note_queue(now_);
    pull_arrivals(now_);
    while (!timed_.empty() && timed_.top().at_ns == now_) {
      const TimedEvent e = timed_.top();
      timed_.pop();
      handle_timed(e);
    }
    report_.queue_max = std::max(report_.queue_max, queued_);
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

}  // namespace kvsim::detail
