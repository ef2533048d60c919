// The replay engine's internals: one Engine per run, driving one allocator.
//
// engine.cc holds the accounting and the simulated schedule (continuous batching, the
// admission and preemption policies); engine_measured.cc the schedule a trace's own service
// timestamps dictate; engine_report.cc the figures at the end. kvsim::replay() is the only
// way in.
#ifndef KVSIM_SRC_ENGINE_H_
#define KVSIM_SRC_ENGINE_H_

#include <deque>
#include <limits>
#include <queue>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvsim/cost_model.h"
#include "kvsim/replay.h"
#include "block_hash.h"
#include "hash_table.h"
#include "ledger.h"
#include "recorder.h"
#include "scheduler.h"
#include "step_wheel.h"

namespace kvsim::detail {

inline constexpr std::int64_t kUnlimited = std::numeric_limits<std::int64_t>::max();

enum class Phase : std::uint8_t { free, queued, running, swapped };

// A request's whole stay, from arrival until it completes, is cancelled or is refused. It is
// small on purpose: under a budget that is too small, most of a trace can be waiting at
// once, and a waiting request holds only its ticket. What it needs while running (a
// Flight, an allocator slot) exists only while it runs.
struct Ticket {
  std::int64_t arrival_ns = 0;
  std::int64_t ordinal = 0;        // 1-based position in the trace, for messages
  std::int64_t prompt = 0;
  std::int64_t output = 0;
  std::int64_t n = 1;
  std::int64_t planned = 0;        // output tokens a planner must allow for
  std::int64_t first_token_ns = -1;
  std::int64_t admitted_ns = -1;   // first admission
  // What survives a preemption: tokens generated (recompute prefills them again), prompt
  // positions already counted in the report, positions held when swapped out.
  std::int64_t base_generated = 0;
  std::int64_t prompt_counted = 0;
  std::int64_t swapped_tokens = 0;
  std::int64_t swapped_bytes = 0;  // what went to host memory, and what comes back
  std::int32_t preemptions = 0;
  std::int32_t slot = -1;          // its Flight while running, else -1
  std::uint32_t generation = 0;    // bumped when the ticket is freed: stale entries skip
  Phase phase = Phase::free;
};

// The service timestamps of a measured schedule, by ticket; empty in simulated runs.
struct ServiceTimes {
  std::int64_t start_ns = 0;
  std::int64_t first_token_ns = 0;
  std::int64_t finish_ns = 0;
  std::int64_t stop_ns = 0;        // finish, or the cancellation if that comes first
  bool cancelled = false;
};

// A running request: what the engine tracks step by step, in a slot it shares with the
// allocator.
struct Flight {
  bool live = false;
  // Bumped whenever the request stops running (released, preempted, swapped out): its
  // pending step events and list entries (SlotRef) go stale and are skipped.
  std::uint32_t generation = 0;
  std::uint32_t ticket = 0;
  std::int64_t prompt = 0;         // copied from the ticket: read on every event
  std::int64_t output = 0;
  std::int64_t n = 1;
  std::int64_t planned = 0;
  // The prefill under way: positions per sequence it must reach (the prompt, or for a
  // request preempted by recompute, prompt + the tokens it had generated) and reached so far.
  std::int64_t target = 0;
  std::int64_t prefilled = 0;
  std::int64_t base_generated = 0; // tokens generated before this prefill (recompute)
  bool decoding = false;           // grows one token per step on its own
  // The first step in which it decodes: the step after its prefill's last (which samples its
  // first token), or, swapped back in, the step that resumes it.
  std::int64_t decode_from = 0;
  std::int64_t tokens_at = 0;      // positions per sequence as of step_at
  std::int64_t step_at = 0;
  std::uint64_t admit_order = 0;   // running order: vLLM preempts the latest
  std::int64_t produced = 0;       // output tokens produced so far (measured schedule)
  std::int64_t held_prefix = 0;    // prefix blocks counted in the engine's live prefix books

  std::int64_t tokens(std::int64_t step) const { return decoding ? tokens_at + (step - step_at) : tokens_at; }
  // Output tokens produced per sample before step `step` runs.
  std::int64_t produced_before(std::int64_t step) const {
    return decoding ? tokens(step) - 1 - prompt : base_generated;
  }
};

struct Cancellation {
  std::int64_t at_ns;
  std::int64_t ordinal;
  std::uint32_t ticket;
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
  std::uint32_t ticket;
  std::uint32_t generation;
  bool operator>(const TimedEvent& o) const {
    if (at_ns != o.at_ns) return at_ns > o.at_ns;
    if (kind != o.kind) return kind > o.kind;
    return order > o.order;
  }
};

// A flight (slot) or a ticket, valid while its generation is unchanged.
struct SlotRef {
  std::uint32_t slot;
  std::uint32_t generation;
};
struct TicketRef {
  std::uint32_t ticket;
  std::uint32_t generation;
};

// What the allocator learns of a request at admission, identity aside (Engine::admit_info_of
// adds it): on a re-admission, the tokens generated before, which its prefill computes again.
inline AdmitInfo admit_info(const Ticket& t) {
  AdmitInfo info{t.prompt, t.planned, t.output, t.n};
  info.resumed_tokens = t.base_generated;
  return info;
}

class Engine {
 public:
  Engine(TraceReader& trace, Allocator& allocator, const ReplayOptions& options);
  ReplayReport run();

  // Lockstep use, for data-parallel replicas (replicas.cc), simulated schedules only: the
  // router adds each request to this engine's trace when it routes it. begin_at() starts the
  // clock at the first arrival; advance_before(t) runs every step that starts before `t`
  // (the last one may end after it); offered() takes up a request just added to the trace;
  // finish() runs to the end and reports. waiting()/in_flight() are what vLLM's router reads.
  void begin_at(std::int64_t start_ns);
  void advance_before(std::int64_t t_ns);
  void offered() {
    if (!have_next_) fetch();
  }
  ReplayReport finish();
  std::int64_t waiting() const { return queued_; }
  std::int64_t running() const { return running_; }
  // Running requests as a router sees them at `t_ns`: those the step under way at `t_ns`
  // ends count until its output is processed, at its end.
  std::int64_t running_seen_at(std::int64_t t_ns) const {
    return running_ + (last_step_end_ > t_ns ? ended_in_last_step_ : 0);
  }
  // Waiting requests a step's plan has already passed over (docs/replay.md, "Overload"): all
  // but those that arrived after the last plan was made (during the step in progress, or with
  // asynchronous scheduling the one before), which have not yet had their chance.
  std::int64_t passed_over() const;
  std::int64_t in_flight() const { return queued_ + running_ + static_cast<std::int64_t>(swapped_.size()) + fetched(); }
  // The next request, taken from the trace and not yet in the queue (it joins at a step's
  // start): 0 or 1.
  std::int64_t fetched() const { return have_next_ ? 1 : 0; }
  std::int64_t now() const { return now_; }

  // Aligned steps, for the data-parallel replicas of a mixture-of-experts model
  // (replicas.cc), which take every step together: at_boundary() takes up what arrives or
  // is cancelled at now(); has_work() says whether a step would run something; begin_step()
  // schedules the step at now() and returns how long its own work takes; end_step(d) ends
  // it after d >= that; wait_until(t) moves an engine that runs nothing to t, taking up what
  // arrives before t (it waits for the next aligned step). next_arrival(): the arrival time
  // of the next request routed here, or -1.
  void at_boundary() { process_span_events(now_, false); }
  bool has_work() const { return running_ != 0 || queued_ != 0 || !swapped_.empty(); }
  std::int64_t next_arrival() const { return have_next_ ? next_.arrival_ns : -1; }
  std::int64_t begin_step();
  // The tokens of the step begun: its prompt (and recomputed) positions and its decodes.
  std::int64_t step_tokens() const { return step_prefill_tokens_ + step_decode_seqs_; }
  // The step begun, timed again with `peer_tokens` of the other replicas' tokens sent
  // through this device's MoE experts too (StepWork::peer_tokens), and run padded to
  // `graph_tokens` (StepWork::graph_tokens; at most step_tokens() for no padding).
  std::int64_t retime_step(std::int64_t peer_tokens, std::int64_t graph_tokens);
  void end_step(std::int64_t duration_ns);
  void wait_until(std::int64_t t_ns);

 private:
  ReplayReport run_simulated();
  ReplayReport run_measured();
  ReplayReport finish_report();
  void name_report();                      // allocator, trace and capacity
  void start_clock(std::int64_t start_ns); // the schedule's name and the first instant

  // --- arrivals, queue, cancellations
  bool fetch();
  // A ticket for next_, or -1 when it is refused for its length (counted).
  std::int64_t take_ticket();
  // The per-request record of the request being read (next_), refused before it has a ticket.
  void refused_at_arrival();
  void free_ticket(std::uint32_t ticket);
  // A running slot for the ticket's request; end_flight gives it back.
  std::uint32_t start_flight(std::uint32_t ticket);
  void end_flight(std::uint32_t slot);
  void enqueue_arrival();          // next_ joins the queue (or is refused)
  void note_plan(std::int64_t seen_until);  // a plan saw the arrivals up to seen_until
  // Whether this step was planned when the last one began (asynchronous scheduling), seeing
  // the arrivals up to that instant only; and that instant (now_ when it does not lag).
  bool plan_lags() const;
  std::int64_t plan_seen_until() const;
  void pull_arrivals(std::int64_t now);  // measured schedule
  // Arrivals and cancellations up to `until_ns` in time order: inclusive at an iteration
  // boundary, exclusive inside an iteration (mid_span), whose memory changes then count
  // only for the rest of it.
  void process_span_events(std::int64_t until_ns, bool mid_span);
  void cancel(const Cancellation& c, bool mid_span);
  // The running request in `slot` produces its last token in the step under way (finishing_).
  bool finishes_in_step(std::uint32_t slot) const;
  void note_queue(std::int64_t at_ns) { recorder_.queue_until(at_ns, queued_); }

  // --- one iteration
  void run_iteration();
  // A quiet step only decodes: no request has an event on it, no prefill is under way,
  // nobody waits or is swapped out, and the policy keeps no per-request books. Most steps
  // of a long generation are quiet, and all begin_step() would do for one is time its
  // decoding batch.
  bool quiet_step_ahead() const;
  // Runs steps that start before `start_before_ns` while they are quiet and nothing
  // arrives or is cancelled before they end (the full path takes those up at their own
  // instants). Returns how many it ran.
  std::int64_t run_quiet_steps(std::int64_t start_before_ns);
  // end_step for a quiet step, which needs less: nothing arrives or is cancelled within it
  // (run_quiet_steps stops before such a step), nothing is delivered at its end (first
  // tokens and completions come from events and prefills), it decodes, no memory was
  // refused and the policy keeps no books. It offers the step's peaks if `offer_peaks`
  // (run_quiet_steps offers those of a stretch's ends only).
  void end_quiet_step(std::int64_t duration, bool offer_peaks);
  // end_step's parts that every step shares: its count and the checks on it (count_step);
  // what the timeline's row says it computed (step_counts); the recorder's per-step figures
  // and the clock moved to its end (close_step, `decoded`: sequences whose token came); the
  // progress bar (report_progress). A new per-step figure goes in one of them or in the
  // recorder.
  [[gnu::always_inline]] inline void count_step(std::int64_t decode_seqs, std::int64_t prefill_tokens);
  [[noreturn, gnu::cold, gnu::noinline]] void livelock() const;  // count_step's error
  StepCounts step_counts() const;
  [[gnu::always_inline]] inline void close_step(std::int64_t duration, std::int64_t decoded);
  [[gnu::always_inline]] inline void report_progress();
  // begin_step()'s first and last parts, shared with quiet steps: a step starts with none
  // of the previous step's flags, and its work and duration are fixed from its batch.
  void open_step();
  std::int64_t time_step(std::int64_t decode_seqs, std::int64_t prefill_tokens, std::int64_t context);
  // The step has ended (now_ is its end): first tokens are timed, and the requests that
  // produced their last token complete and leave.
  [[gnu::always_inline]] inline void deliver_step();
  // How long this step lasts: the cost model's time for its work plus the swap transfers,
  // in whole nanoseconds, always > 0.
  std::int64_t step_duration(const StepWork& work) const { return step_duration(step_time_ps(opt_.cost, work), work); }
  // The same, from the cost model's time for `work` (saturated as step_time_ps saturates).
  std::int64_t step_duration(std::int64_t ps, const StepWork& work) const;
  // step_duration's errors, out of its way: a cost model's time that saturated, and a step
  // of `ns` that lasts no time or would end past the largest time.
  [[noreturn, gnu::cold, gnu::noinline]] void step_cost_saturated(const StepWork& work) const;
  [[noreturn, gnu::cold, gnu::noinline]] void step_out_of_time(Int128 ns) const;
  // A step that computes no prompt: its time from the line of the last such step's batch,
  // made again only when the batch changes (decode_step_line). Most steps are such steps.
  std::int64_t decode_step_ps(const StepWork& work);
  // The time of a step whose work is the line's but for its context: the line at `work`'s
  // context (decode_step_ps, once it made the line for `work`).
  std::int64_t decode_line_ps(const StepWork& work) const;
  void handle_event(std::uint32_t slot);
  void continue_prefills(std::int64_t& budget, std::int64_t& prefill_tokens);
  void resume_swapped(std::int64_t& budget, std::int64_t& decode_seqs);
  // Nothing runs until `t_ns`: the clock moves on, and a per-step timeline says so.
  void idle_until(std::int64_t t_ns);
  void admit_waiting(std::int64_t& budget, std::int64_t& prefill_tokens);
  // Positions a prefill can advance within `budget` tokens, and what they cost: prompt
  // positions 1 each, positions past the prompt (recomputed samples) n each.
  struct PrefillState {
    std::int64_t prompt, n, target, prefilled;
  };
  std::pair<std::int64_t, std::int64_t> chunk_for(const PrefillState& p, std::int64_t budget) const;
  static std::int64_t prefill_cost(const PrefillState& p, std::int64_t from, std::int64_t to);
  // Advances the request's prefill by `positions`. A running request short of memory
  // preempts (may_preempt); an admission does not. False when it did not happen.
  bool prefill(std::uint32_t slot, std::int64_t positions, bool may_preempt);
  // Grows the request, preempting others (or itself) per the policy until it fits. False
  // when the request itself was preempted.
  bool grow_or_preempt(std::uint32_t slot, std::int64_t tokens, std::int64_t step_tokens);
  std::uint32_t choose_victim(std::uint32_t failed) const;
  void preempt(std::uint32_t victim);
  // The report's and the request's preemption counts, and the step's flags, for one preemption.
  void count_preemption(Ticket& t);
  void start_decoding(std::uint32_t slot, std::int64_t tokens, std::int64_t decode_from);
  // Schedules the request's next event and returns the token count it falls at.
  std::int64_t schedule_next(std::uint32_t slot, std::int64_t tokens);
  void refuse_too_large(std::uint32_t ticket);
  // Whether the scheduler would refuse `t` alone with no prefix hit at all (never_admits()
  // at a whole step's first chunk from position 0). A hit can make a request need more room
  // alone, not less: its first chunk starts past the hit, so ends further in (under a
  // sliding window it may complete the prefill, holding every position at once), and an
  // unreferenced hit's blocks count. The hit moves while others run, so a request is
  // refused early only when it fits neither way. Rare: kept out of admit_waiting.
  [[gnu::cold, gnu::noinline]] bool never_admits_uncached(const Ticket& t, const AdmitInfo& info) const;
  // --per-request: the ticket's request leaves with `outcome` at `at_ns` (nothing when the
  // option is off).
  void leaves(std::uint32_t ticket, RequestRecord::Outcome outcome, std::int64_t at_ns);

  // --- accounting
  // Re-reads the request's footprints at `tokens`. `with_slopes`: the request will take
  // steps before its next event, so its figures must carry their per-step change.
  void refresh(std::uint32_t slot, std::int64_t tokens, bool with_slopes);
  // correction_ns: how far into the current span the operation happened.
  void after_op(std::int64_t correction_ns = 0);
  // Frees everything the request holds on the device (correction_ns: how far into the
  // current span that happens). The request keeps its slot.
  void drop_holding(std::uint32_t slot, std::int64_t correction_ns);
  // drop_holding's three parts: the request stops decoding, what it holds is freed, it leaves
  // the running counts and order.
  void stop_running(std::uint32_t slot);
  void free_holding(std::uint32_t slot, std::int64_t correction_ns);
  void leave_running(std::uint32_t slot);
  // The request leaves for good (completed or cancelled): its holding, slot and ticket.
  void release(std::uint32_t slot, std::int64_t correction_ns);
  // Asynchronous scheduling: the request in `slot`, completed (or `cancelled` within the step)
  // at `left_ns`, keeps its blocks until the next step has been planned (Lingering), and is
  // recorded then; free_lingering() frees what they hold, one or all. `cache_step`: what its
  // last step computed is cached then (not for a cancelled request that step would have
  // completed).
  void linger(std::uint32_t slot, std::int64_t left_ns, bool cancelled = false, bool cache_step = true);
  // `outputs_processed`: it completed, and its last output caches what it computed; not when
  // it is preempted for nothing.
  void free_lingering(std::size_t index, bool outputs_processed);
  void free_lingering();
  // The newest lingering request, if it is newer than every running one (vLLM's running.pop()
  // would take it): preempted for nothing (its tokens are all computed); true if there was one.
  bool preempt_lingering();
  // Puts a step's due events in running order (admission order; stale ones last), as vLLM's
  // scheduler walks self.running.
  void sort_running_order(std::vector<StepEvent>& events);
  void end_span(std::int64_t duration_ns);

  // --- sharing across requests (allocators with prefix_block_tokens() > 0)
  // What the allocator learns at admission: the request's prefix hashes at its block size.
  AdmitInfo admit_info_of(std::uint32_t ticket) const;
  // The request holds `tokens` positions per sequence: its full prompt blocks with an
  // identity enter the engine's own count of live prefix blocks (hold_prefix), or all leave
  // it (drop_prefix). The count says how many positions several live requests hold alike.
  void hold_prefix(std::uint32_t slot, std::int64_t tokens);
  // Counts one admission's prefix lookup: `queried` tokens looked up, `cached` found; a
  // re-admission after preemption apart, as vLLM's PrefixCacheStats.record does.
  void count_prefix_lookup(std::int64_t prompt, std::int64_t queried, std::int64_t cached, bool preempted);
  void drop_prefix(std::uint32_t slot);
  // The pool's shared account in the recorder: what the allocator holds once for several
  // requests against what the engine counts once.
  void update_shared(std::int64_t correction_ns);
  bool sharing() const { return prefix_block_ > 0; }
  // Sharing on sliding-window layer groups (engine_window_share.cc): per distinct window,
  // the positions of each live prefix block inside the windows of the requests holding it,
  // so that what several windows keep alike counts once. Kept up to date by hold_prefix and
  // drop_prefix; window_prefix_next says when a decoding request's window next moves over
  // its prefix blocks (the count changes every step while it does).
  void setup_window_shares();
  void hold_window_prefix(std::uint32_t slot, std::int64_t tokens);
  void drop_window_prefix(std::uint32_t slot);
  std::int64_t window_prefix_next(const Flight& f, std::int64_t tokens) const;
  std::int64_t counted_once_in_window(std::size_t group) const;
  // Bounded by a budget or by the allocator's own bound (capacity_bytes_).
  bool bounded() const { return capacity_bytes_ > 0; }
  // Every request completed, was cancelled or was refused, once; else InternalError.
  void check_accounted() const;
  std::int64_t requests_ended() const;  // completed, cancelled or refused so far
  [[noreturn]] void broken(const Flight& f, const std::string& what) const;
  Ticket& ticket_of(const Flight& f) { return tickets_[f.ticket]; }

  // --- measured schedule
  void push_timed(std::int64_t at_ns, TimedEvent::Kind kind, std::uint32_t ticket);
  void handle_timed(const TimedEvent& e);
  std::int64_t token_time(const Ticket& t, const ServiceTimes& s, std::int64_t k) const;

  TraceReader& trace_;
  Allocator& alloc_;
  const ReplayOptions& opt_;
  std::vector<std::int64_t> bytes_per_position_;
  std::int64_t bytes_per_token_ = 0;  // all groups
  std::int64_t max_tokens_;
  // A step's token budget before any decode takes from it: max_batched_tokens, or unlimited.
  std::int64_t whole_step_budget_;
  std::int64_t capacity_bytes_ = 0;

  // The trace.
  Request next_;
  bool have_next_ = false;
  std::int64_t ordinal_ = 0;

  // Requests.
  std::vector<Ticket> tickets_;
  std::vector<std::uint32_t> free_tickets_;
  std::vector<ServiceTimes> service_;        // by ticket, measured schedule only
  std::vector<Flight> flights_;
  std::vector<std::uint32_t> free_slots_;
  std::deque<TicketRef> queue_;
  std::deque<TicketRef> swapped_;
  std::int64_t queued_ = 0;
  // Arrivals no plan has seen yet (arrived after plan_seen_until_), in arrival order, and how
  // many of those were cancelled since (their entries stale): for passed_over().
  std::deque<TicketRef> unplanned_;
  std::int64_t unplanned_cancelled_ = 0;
  std::int64_t plan_seen_until_ = std::numeric_limits<std::int64_t>::min();
  std::int64_t running_ = 0;
  // Their sequences (n per request), which max_running bounds as vLLM's max_num_seqs does;
  // and that bound: max_running, else max_batched_tokens (each decodes a token a step), else
  // none (0).
  std::int64_t running_seqs_ = 0;
  std::int64_t max_seqs_ = 0;
  std::set<std::pair<std::uint64_t, std::uint32_t>> running_order_;  // (admit_order, slot)
  std::uint64_t next_admit_order_ = 0;
  std::vector<SlotRef> prefilling_;   // running, prefill incomplete (chunked)
  std::vector<SlotRef> finishing_;    // produce their last token in this iteration
  std::vector<SlotRef> first_token_;  // produce their first token in this iteration
  std::priority_queue<Cancellation, std::vector<Cancellation>, std::greater<>> cancellations_;
  StepWheel wheel_;
  std::vector<StepEvent> due_;
  struct RankedEvent {
    std::uint64_t rank;  // the flight's admit_order, or the largest value if the event is stale
    StepEvent event;
  };
  std::vector<RankedEvent> ranked_;  // sort_running_order's scratch, kept to reuse its room
  std::vector<TicketRef> unseen_;    // admit_waiting's scratch: a policy-ordered queue's unseen entries
  bool measured_ = false;
  std::priority_queue<TimedEvent, std::vector<TimedEvent>, std::greater<>> timed_;
  std::uint64_t timed_order_ = 0;

  // Steps in a row that decoded and prefilled nothing (the livelock watchdog).
  static constexpr std::int64_t kMaxIdleSteps = 64;
  std::int64_t idle_steps_ = 0;
  std::int64_t ended_before_ = 0;  // requests ended (any way) when the count last reset

  // The step in progress.
  bool step_memory_bound_ = false;    // an allocation was refused for memory
  bool step_preempted_ = false;
  // Asynchronous scheduling (ReplayOptions::async_scheduling): when the last step began and
  // ended, and the requests it completed (still holding their places in the running count).
  std::int64_t last_step_start_ = -1;
  std::int64_t last_step_end_ = -1;
  // Their sequences, and those of requests cancelled within that step under asynchronous
  // scheduling: places a plan made as it began still counts.
  std::int64_t completed_in_last_step_ = 0;
  std::int64_t cancelled_in_step_seqs_ = 0;  // the step under way's, so far
  std::int64_t ended_in_last_step_ = 0;      // running requests its end delivered
  // ... and, under a budget, those requests' blocks: vLLM frees a request's blocks when it
  // processes the output of the step that completed it, which with asynchronous scheduling is
  // after the next step was planned. They are no longer running (no decode, no place in
  // running_order_), but hold their memory through that plan and may be its victims.
  struct Lingering {
    std::uint32_t slot;
    std::int64_t finish_ns;  // when it completed, or was cancelled
    bool cancelled = false;  // within the step, under asynchronous scheduling
    bool cache_step = true;  // what its last step computed is cached when it is freed
  };
  std::vector<Lingering> lingering_;
  // async_scheduling under a memory bound, with a policy whose victim is vLLM's
  // (Scheduler::victim_is_newest)
  bool linger_ = false;
  std::int64_t completed_seqs_ = 0;          // over the run
  // Of them, the sequences of requests cancelled within the step, whose tokens never come.
  std::int64_t step_cancelled_decodes_ = 0;
  std::int64_t step_decode_seqs_ = 0;     // the step begun (begin_step) and not yet ended
  std::int64_t step_prefill_tokens_ = 0;
  std::int64_t step_swap_bytes_ = 0;
  StepWork step_work_;  // the roofline's counts for the step under way (prefill chunks so far)
  // decode_step_ps's line, and the step it was made for (its context aside); none at first.
  DecodeStepLine decode_line_;
  StepWork decode_line_work_;
  bool have_decode_line_ = false;

  // Time.
  std::int64_t now_ = 0;           // start of the current span
  std::int64_t step_ = 0;
  bool step_planned_ = false;  // this step's admissions are done (EngineView::planned)
  Clock clock_;                    // spans before the current one

  std::size_t groups_;
  std::int64_t decoding_seqs_ = 0;
  std::int64_t context_base_ = 0;  // sum of n * tokens over decoding requests: base + slope * s
  std::int64_t context_slope_ = 0;
  std::int64_t op_transient_bytes_ = 0;

  Recorder recorder_;

  // Sharing across requests: the allocator's block size (0: it shares nothing), each live
  // ticket's prefix hashes at that size, and how many running requests hold each hash.
  std::int64_t prefix_block_ = 0;
  std::vector<std::vector<std::uint64_t>> prefix_of_;  // by ticket
  PrefixRehasher rehasher_;  // makes prefix_of_ from the trace's hashes
  HashTable<std::uint32_t> live_prefix_;  // holders: at most the live requests (32-bit slots)
  std::int64_t shared_prefix_blocks_ = 0;  // sum over live hashes of (holders - 1)
  struct WindowKept {
    std::int64_t sum = 0;                // positions kept, over the holders
    std::multiset<std::int64_t> kept;    // each holder's, where > 0
  };
  struct WindowShare {
    std::int64_t window = 0;
    std::unordered_map<std::uint64_t, WindowKept> by_hash;
    // By slot: the window start and prefix blocks entered as of the request's last refresh.
    std::vector<std::pair<std::int64_t, std::int64_t>> at;
    std::int64_t counted_once = 0;       // sum over hashes of (sum - the largest kept)
  };
  std::vector<WindowShare> window_shares_;  // one per distinct window; empty without sharing
  std::vector<int> group_window_;           // by layer group: its window_shares_ index, or -1
  ReplayReport report_;
  // --per-request only (empty otherwise), by ticket: the trace's id, prompt tokens found
  // cached at first admission.
  std::vector<std::string> request_id_;
  std::vector<std::int64_t> cached_at_admission_;

  // The serving policy: reads the engine through view_.
  EngineView view_;
  std::unique_ptr<Scheduler> scheduler_;
  bool scheduler_tracks_requests_ = false;
  bool scheduler_orders_queue_ = false;  // the policy reorders the waiting queue (SGLang's lpm)
};

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_ENGINE_H_
