// SGLang's scheduling under memory pressure (docs/replay.md cites the code):
//
// - admission (PrefillAdder): the remaining tokens of the requests running when the round
//   began, each clipped at CLIP_MAX_NEW_TOKENS_ESTIMATION and scaled by the adaptive new-token
//   ratio, plus this round's admissions unscaled (the first into an empty batch too), plus the
//   newcomer's extend tokens (its prompt less the cached prefix) and clipped limit must stay
//   below the free token positions;
// - a refusal for room (AddReqResult.NO_TOKEN), or no place under max_running, marks the
//   running batch full (scheduler.py get_new_batch_prefill: running_batch.batch_is_full), and
//   no waiting request is tried again until the batch shrinks: update_running_batch clears the
//   mark when filter_batch drops a finished or aborted request or retract_decode retracts one,
//   after that iteration's admission (a prefill batch, tried first, found the batch still
//   full). So a completion at the end of step k, or a cancellation within it, reopens admission
//   at step k + 2, a retraction (which admits nothing in its own step) at the next; a round
//   that begins with nothing running admits whatever fits; and a refusal by the first plan to
//   see a stop, with nothing admitted yet, leaves the mark clear (that iteration's filter
//   clears it at once); a request that ends without decoding leaves with the last prefill
//   batch, filtered before the next plan, so its stop clears the mark at once; a gap in which
//   nothing runs or waits spends a stop (SGLang's idle iterations filter the batch). Not modelled:
//   a request finished in a decode still counts against max_running until that filter, and
//   an abort runs one more decode pass before it frees;
// - the ratio starts at its initial value, falls linearly every decode step that needed no
//   retraction, starts afresh when idle, and is recomputed after a retraction from the requests
//   that keep decoding;
// - retraction (retract_decode): the decoding request with the fewest generated tokens, the
//   longest prompt among those, the latest in running order among those; requeued at the back.
// - the waiting queue's order (--schedule-policy; schedule_policy.py, SchedulePolicy): fcfs,
//   SGLang's default, leaves it alone; lpm (calc_priority -> _compute_prefix_matches,
//   _sort_by_longest_prefix) sorts it before each admission round, stably, by the prompt
//   tokens each request would find cached (match_prefix, at most prompt - 1), longest first;
//   with more than 128 requests waiting (_determine_active_policy) it falls back to fcfs,
//   which sorts nothing, so the queue keeps the order it had. Not modelled: the in-batch
//   prefix check that defers a request whose prefix another waiting request will compute
//   (IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD), and the access-time refresh SGLang's
//   match_prefix gives the nodes waiting requests match (cached_tokens() changes nothing).
#include <algorithm>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "engine.h"
#include "scheduler.h"

namespace kvsim::detail {
namespace {

// SGLang clips its estimate of a request's future tokens (CLIP_MAX_NEW_TOKENS_ESTIMATION).
constexpr std::int64_t kClipTokens = 4096;
// lpm sorts the waiting queue only while at most this many requests wait
// (SchedulePolicy._determine_active_policy).
constexpr std::size_t kLpmQueueLimit = 128;
// Its retraction assumes each surviving request decodes this many more steps
// (SGLANG_RETRACT_DECODE_STEPS) when it recomputes the new-token ratio.
constexpr std::int64_t kRetractDecodeSteps = 20;

class SglangScheduler final : public Scheduler {
 public:
  explicit SglangScheduler(const EngineView& engine) : memory_(engine.options.memory),
                                                       ratio_ppb_(memory_.sglang_init_ratio_ppb) {}

  std::string name() const override { return memory_.sglang_lpm ? "sglang (retract, lpm)" : "sglang (retract)"; }

  bool orders_queue() const override { return memory_.sglang_lpm; }

  void order_queue(const EngineView& engine, std::deque<TicketRef>& queue,
                   const std::function<std::int64_t(std::uint32_t)>& cached) override {
    // Entries of requests cancelled while waiting are not in SGLang's queue: they neither
    // count towards the limit nor take part in the sort (they go to the back, where the
    // engine drops them when it meets them).
    const auto waiting = [&](const TicketRef& ref) {
      const Ticket& t = engine.tickets[ref.ticket];
      return t.generation == ref.generation && t.phase == Phase::queued;
    };
    const auto live = static_cast<std::size_t>(std::count_if(queue.begin(), queue.end(), waiting));
    if (live > kLpmQueueLimit) return;
    keyed_.clear();
    for (const TicketRef& ref : queue) keyed_.push_back({waiting(ref) ? cached(ref.ticket) : -1, ref});
    std::stable_sort(keyed_.begin(), keyed_.end(), [](const Keyed& a, const Keyed& b) { return a.cached > b.cached; });
    for (std::size_t i = 0; i < keyed_.size(); ++i) queue[i] = keyed_[i].ref;
  }

  void begin_admission() override {
    admitted_tokens_ = 0;
    admitted_in_round_ = false;
    round_open_ = false;
  }

  bool admits(const EngineView& engine, const Ticket& t, const AdmitInfo& info, std::int64_t cached,
              std::int64_t positions) override {
    // The running batch's charge as the round began (PrefillAdder's rem_total_token_offset
    // starts from it): the requests this round admits, which may start decoding within it,
    // are charged once below, unscaled.
    if (!round_open_) {
      round_future_ = Int128{clip_base_ + clip_slope_ * engine.step} * ratio_ppb_ / kPartsPerBillion;
      // A chunked request whose last chunk ran before the round is not in SGLang's running
      // batch but its in-flight chunked request, charged unscaled (add_chunked_req).
      if (fresh_step_ == engine.step) {
        round_future_ += fresh_clip_ - Int128{fresh_clip_} * ratio_ppb_ / kPartsPerBillion;
      }
      round_began_empty_ = engine.running == 0;
      round_open_ = true;
      round_step_ = engine.step;
    }
    // The batch marked full refuses at once; a round that began with nothing running has no
    // batch to be full (update_running_batch cleared the mark as the batch emptied).
    if (!round_began_empty_ && (batch_full_ || engine.step == reopens_after_)) return false;
    const std::int64_t free_bytes = engine.free_bytes();
    // The cached pages live requests hold (locked, in use): looked up once, when needed.
    std::int64_t held = -1;
    const auto held_hits = [&] {
      if (held < 0) held = engine.allocator.roomless_hit_bytes(info);
      return held;
    };
    // The chunk's room: its pages less those held hits.
    const auto chunk_fits = [&] {
      const std::int64_t pages = chunk_bytes(engine, t, positions);
      return pages <= free_bytes || pages - held_hits() <= free_bytes;
    };
    // The extend tokens (extend_input_len: the prompt and what a retracted request had
    // generated, less its cached prefix) and the clipped remaining limit.
    const std::int64_t extend = t.prompt + t.base_generated - cached;
    const std::int64_t clipped = t.n * std::min(t.planned - t.base_generated, kClipTokens);
    if (engine.running == 0) return chunk_fits();  // nothing to estimate against
    // PrefillAdder.add_one_req checks again with the request's matched prefix locked
    // (_lock_node: "the temporary pin excludes this prefix from the evictable budget"): the
    // matched pages no running request holds were counted free as evictable, and are not
    // room for it, whose extend tokens already leave them out.
    std::int64_t own_hits = 0;
    if (cached > 0) own_hits = std::max<std::int64_t>(0, cached * engine.bytes_per_token - held_hits());
    // In token positions, as its token pool counts them.
    const Int128 rem = (free_bytes - own_hits) / engine.bytes_per_token - round_future_ - admitted_tokens_;
    if (Int128{extend + clipped} >= rem || !chunk_fits()) {
      mark_full(engine);
      return false;
    }
    return true;
  }

  // What the round's later admissions must leave besides: SGLang adds each admitted request's
  // extend tokens and clipped limit (a chunked one's chunk only) to an offset against the room
  // as the round began (_update_prefill_budget), and allocates after the round. kvsim takes
  // each admitted chunk from the free room at once, so only the clipped limit of a request
  // admitted whole is left to add, once it has its memory.
  // The charge is the whole limit, min(max_new_tokens, CLIP), even for a retracted request,
  // whose check asked only its remaining tokens (add_one_req).
  void on_admitted(const EngineView& engine, std::uint32_t slot, const Ticket& t) override {
    admitted_in_round_ = true;
    const Flight& f = engine.flights[slot];
    if (f.prefilled >= f.target) admitted_tokens_ += t.n * std::min(t.planned, kClipTokens);
  }

  // The engine stopped at max_running: SGLang marks the batch full then too
  // (get_num_allocatable_reqs(running_bs) <= 0).
  void on_count_limit(const EngineView& engine) override { mark_full(engine); }

  // Each decoding request's min(remaining planned tokens, clip) x n, kept as a line in steps.
  void on_decoding(const EngineView& engine, std::uint32_t slot) override {
    const Flight& f = engine.flights[slot];
    if (!f.decoding) return;
    Clip& c = clip(slot);
    remove(c);
    const std::int64_t remaining = std::max<std::int64_t>(0, f.planned - f.produced_before(engine.step));
    c.value = f.n * std::min(remaining, kClipTokens);
    c.slope = remaining <= kClipTokens && remaining > 0 ? -f.n : 0;
    c.step = engine.step;
    clip_base_ += c.value - c.slope * c.step;
    clip_slope_ += c.slope;
    // Its prefill completed in this step before the admission round: a continued chunk.
    if (f.decode_from == engine.step + 1 && round_step_ != engine.step) {
      if (fresh_step_ != engine.step) fresh_clip_ = 0;
      fresh_step_ = engine.step;
      fresh_clip_ += c.value;
    }
  }

  void on_stopped(const EngineView& engine, std::uint32_t slot) override {
    Clip& c = clip(slot);
    remove(c);
    c = Clip{};
    // A request that ends without decoding (done in its prefill step, or cut off during it)
    // leaves with the last prefill batch, which get_next_batch_to_run filters before it plans.
    if (!engine.flights[slot].decoding) {
      batch_full_ = false;
      return;
    }
    // The batch shrinks: the first plan to see it (this step's, or the next one's once this
    // step is planned) still finds the batch full, and the filter after it clears the mark.
    stop_seen_at_ = engine.planned ? engine.step + 1 : engine.step;
    if (batch_full_) {
      batch_full_ = false;
      reopens_after_ = stop_seen_at_;
    }
  }

  std::uint32_t choose_victim(const EngineView& engine, std::uint32_t failed) const override {
    std::uint32_t best = failed;
    bool found = false;
    std::int64_t best_produced = 0, best_prompt = 0;
    for (const auto& [order, slot] : engine.running_order) {
      const Flight& f = engine.flights[slot];
      if (!f.decoding) continue;
      const std::int64_t produced = f.produced_before(engine.step);
      if (!found || produced < best_produced || (produced == best_produced && f.prompt >= best_prompt)) {
        best = slot;
        best_produced = produced;
        best_prompt = f.prompt;
        found = true;
      }
    }
    // No decoding request: the last of the running queue, as vLLM.
    return found ? best : engine.newest_running();
  }

  bool requeue_at_back() const override { return true; }

  void after_preemption(const EngineView& engine) override {
    Int128 generated = 0, planned = 0, count = 0;
    for (const auto& [order, slot] : engine.running_order) {
      const Flight& f = engine.flights[slot];
      if (!f.decoding) continue;
      generated += f.produced_before(engine.step) * f.n;
      planned += f.planned * f.n;
      count += f.n;
    }
    const Int128 ratio =
        planned > 0 ? (generated + kRetractDecodeSteps * count) * kPartsPerBillion / planned : kPartsPerBillion;
    ratio_ppb_ = static_cast<std::int64_t>(std::min<Int128>(ratio, kPartsPerBillion));
  }

  void end_step(const EngineView& engine, bool preempted, std::int64_t decode_seqs) override {
    if (engine.running == 0) {
      ratio_ppb_ = memory_.sglang_init_ratio_ppb;
    } else if (!preempted && decode_seqs > 0) {
      const std::int64_t decay = (memory_.sglang_init_ratio_ppb - memory_.sglang_min_ratio_ppb) / memory_.sglang_decay_steps;
      ratio_ppb_ = std::max(memory_.sglang_min_ratio_ppb, ratio_ppb_ - decay);
    }
  }

  // SGLang's loop keeps turning while nothing runs: the first idle iteration filters a
  // stopped request out of the running batch (update_running_batch, clearing the mark), and
  // each resets the ratio (self_check_during_idle). So a stop before an idle gap is spent by
  // the time the next request arrives, and the ratio starts afresh.
  void on_idle() override {
    ratio_ppb_ = memory_.sglang_init_ratio_ppb;
    batch_full_ = false;
    reopens_after_ = -1;
    stop_seen_at_ = -1;
  }

  // The estimate stops being clipped when fewer than the clip's tokens remain.
  std::int64_t next_event_tokens(const Flight& f, std::int64_t tokens) const override {
    const std::int64_t unclipped_at = f.prompt + f.planned - kClipTokens + 1;
    return unclipped_at > tokens ? unclipped_at : Allocator::kNoEvent;
  }

 private:
  struct Clip {
    std::int64_t value = 0, slope = 0, step = 0;
  };
  Clip& clip(std::uint32_t slot) {
    if (slot >= clips_.size()) clips_.resize(slot + 1);
    return clips_[slot];
  }
  void remove(const Clip& c) {
    clip_base_ -= c.value - c.slope * c.step;
    clip_slope_ -= c.slope;
  }

  // A refusal marks the batch full, unless a stop this plan sees will shrink it at once: in
  // this iteration's filter when the round admitted nothing (the next step tries again), else
  // in the next iteration's (the step after that tries again).
  void mark_full(const EngineView& engine) {
    if (stop_seen_at_ != engine.step) {
      batch_full_ = true;
    } else if (admitted_in_round_) {
      reopens_after_ = engine.step + 1;
    }
  }

  struct Keyed {
    std::int64_t cached;
    TicketRef ref;
  };
  std::vector<Keyed> keyed_;          // order_queue()'s scratch

  const MemoryOptions& memory_;
  std::int64_t ratio_ppb_;
  std::int64_t admitted_tokens_ = 0;  // this round's admissions' clipped limits, unscaled
  bool admitted_in_round_ = false;
  bool round_open_ = false;           // round_future_ and round_began_empty_ are this round's
  bool round_began_empty_ = false;
  std::int64_t round_step_ = -1;      // the step whose round opened last
  std::int64_t fresh_step_ = -1;      // the step of fresh_clip_
  std::int64_t fresh_clip_ = 0;       // clipped limits of the requests whose last chunk ran then
  Int128 round_future_ = 0;           // the running batch's scaled charge as the round began
  bool batch_full_ = false;           // running_batch.batch_is_full
  std::int64_t reopens_after_ = -1;   // the plan that still finds the batch full after a clear
  std::int64_t stop_seen_at_ = -1;    // the first plan to see the last stop
  std::vector<Clip> clips_;           // by slot
  std::int64_t clip_base_ = 0;        // sum of the clip lines: base + slope x step
  std::int64_t clip_slope_ = 0;
};

std::unique_ptr<Scheduler> make_sglang_scheduler(const EngineView& engine) {
  return std::make_unique<SglangScheduler>(engine);
}

}  // namespace

// "--policy sglang": its row of the policy registry (policies.def names it).
extern constinit const SchedulerEntry kSglangPolicy{
    "sglang", "admit against an adaptive estimate of future tokens, retract the request with the fewest generated "
    "tokens", false, make_sglang_scheduler};

}  // namespace kvsim::detail
