// Serving policies behind one interface: what an engine does when KV memory is bounded.
//
// The engine loop (engine.cc) owns time, events, the waiting queue and the running set, and
// runs every step in the same order: due decode events, prefills under way, swapped-out
// requests, then waiting ones. A Scheduler makes the decisions in which serving engines
// differ, and keeps the state those decisions need:
//
//   admits()            may the head of the waiting queue start with this chunk?
//   choose_victim()     a running request cannot grow: which request makes room?
//   swaps(), requeue_at_back()   what happens to the victim
//   next_event_tokens() extra points at which the engine must call back for a decoding request
//   on_*(), end_step()  notifications that keep the policy's own books
//
// Without a memory budget nothing is ever refused, and the engine uses the demand scheduler
// (admit everything, never preempt). Each policy is one file (scheduler_*.cc) that defines
// its class, its factory and its SchedulerEntry, registered by one line of policies.def;
// docs/architecture.md has the checklist.
#ifndef KVSIM_SRC_SCHEDULER_H_
#define KVSIM_SRC_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvsim/allocator.h"
#include "kvsim/budget.h"
#include "kvsim/replay.h"
#include "ledger.h"

namespace kvsim::detail {

struct Ticket;
struct Flight;
struct TicketRef;

// What a scheduler may read of the engine: live references, valid for the whole run.
struct EngineView {
  const ReplayOptions& options;
  const Allocator& allocator;
  const std::vector<Ticket>& tickets;
  const std::vector<Flight>& flights;
  // The running requests in admission order: (admit order, slot).
  const std::set<std::pair<std::uint64_t, std::uint32_t>>& running_order;
  const std::int64_t& step;
  const bool& planned;                // this step's admissions are done
  const std::int64_t& running;        // requests running now
  const LinearSum& allocated_bytes;   // all requests' allocated bytes, as a line in steps
  std::int64_t capacity_bytes;        // the budget, or the allocator's smaller bound
  std::int64_t capacity_unit_bytes;   // what the capacity is a whole number of (PoolState::unit_bytes)
  std::int64_t bytes_per_token;       // all layer groups

  std::int64_t free_bytes() const { return capacity_bytes - allocated_bytes.at(step); }
  // The request admitted last: the end of vLLM's running queue, the victim most engines pick.
  // REQUIRES: running > 0.
  std::uint32_t newest_running() const { return running_order.rbegin()->second; }
};

class Scheduler {
 public:
  virtual ~Scheduler() = default;

  // The report's name for the policy, with its mode: "vllm (recompute)".
  virtual std::string name() const = 0;

  // A new admission phase begins (once per step, before the first admits()).
  virtual void begin_admission() {}

  // Whether waiting request `t` may start now, holding `positions` positions per sequence
  // after its first chunk (the `cached` prompt positions found cached, plus its whole
  // remaining prefill or what the step's token budget leaves). `info` is what the allocator
  // will be told at admission (with the prefix hashes, for Allocator::roomless_hit_bytes()).
  // The allocation itself may still fail after a yes.
  virtual bool admits(const EngineView& engine, const Ticket& t, const AdmitInfo& info, std::int64_t cached,
                      std::int64_t positions) = 0;
  // Whether admits() would refuse `t` even with nothing else on the device (the whole
  // capacity free): then it never starts, and the engine refuses it as soon as it heads the
  // queue rather than letting it block everyone behind it until nothing else runs (vLLM v0's
  // AllocStatus.NEVER, FINISHED_IGNORED). `positions` as for admits(), at a whole step's token
  // budget. false (the default): the policy cannot tell, and the request is refused once alone.
  virtual bool never_admits(const EngineView&, const Ticket&, const AdmitInfo&, std::int64_t) const { return false; }

  // Whether the policy orders the waiting queue itself (order_queue()); asked once.
  virtual bool orders_queue() const { return false; }
  // Once per step, before the first admits(): the policy may reorder the engine's waiting
  // queue (front first). It may hold entries of requests cancelled while waiting (their
  // ticket's generation or phase no longer matches), which the engine skips; `cached(ticket)`
  // is what the allocator would find cached for that request now.
  virtual void order_queue(const EngineView& /*engine*/, std::deque<TicketRef>& /*queue*/,
                           const std::function<std::int64_t(std::uint32_t)>& /*cached*/) {}

  // A waiting request started running in `slot` (admits() said yes and it got its memory).
  virtual void on_admitted(const EngineView& /*engine*/, std::uint32_t /*slot*/, const Ticket& /*t*/) {}
  // The head of the queue waits for a place under max_running (admits() is not asked).
  virtual void on_count_limit(const EngineView& /*engine*/) {}

  // Whether the policy keeps books per running request. When false, the engine skips
  // begin_admission(), on_admitted(), on_count_limit(), on_decoding(), on_stopped(),
  // next_event_tokens() and end_step() (they run once per step or per event, on the hot path
  // of every replay).
  virtual bool tracks_requests() const { return true; }

  // The request in `slot` is decoding and at an event (or just started decoding): its
  // produced count is up to date.
  virtual void on_decoding(const EngineView& /*engine*/, std::uint32_t /*slot*/) {}

  // The request in `slot` stops holding memory (completed, cancelled, preempted, swapped),
  // told before the engine updates its flight (whose `decoding` says whether it stops in a
  // decode). A completion is told at the start of the next step (engine.step is that step's).
  virtual void on_stopped(const EngineView& /*engine*/, std::uint32_t /*slot*/) {}

  // The request in `failed` cannot grow: the running request to preempt (`failed` itself
  // is allowed). REQUIRES: at least one request is running.
  virtual std::uint32_t choose_victim(const EngineView& engine, std::uint32_t failed) const = 0;
  // Whether the victim is always the last of vLLM's running list (the newest admitted), which
  // under asynchronous scheduling still holds the requests the previous step completed: the
  // engine then preempts such a request when it is the newest (Engine::grow_or_preempt).
  virtual bool victim_is_newest() const { return false; }

  // Whether `victim` goes to host memory (swap) rather than being recomputed.
  virtual bool swaps(const Flight& /*victim*/) const { return false; }
  // Whether a swapped-out request admitted with `info` may come back now at `positions` per
  // sequence: the policy's room check before the allocation, which may still fail after a yes.
  virtual bool swaps_in(const EngineView& /*engine*/, const AdmitInfo& /*info*/, std::int64_t /*positions*/) const {
    return true;
  }
  // Whether a recomputed victim waits at the back of the queue (else at the front).
  virtual bool requeue_at_back() const { return false; }
  // A victim has been preempted and the running set no longer holds it.
  virtual void after_preemption(const EngineView& /*engine*/) {}

  // The step is over: it preempted or not, and decoded `decode_seqs` sequences.
  virtual void end_step(const EngineView& /*engine*/, bool /*preempted*/, std::int64_t /*decode_seqs*/) {}

  // Nothing runs or waits, and time passes before the next arrival: an engine's loop turns
  // over with nothing to schedule meanwhile (SGLang's idle iterations).
  virtual void on_idle() {}

  // A further token count (> `tokens`) at which the engine must call on_decoding() for this
  // decoding request, or Allocator::kNoEvent.
  virtual std::int64_t next_event_tokens(const Flight& /*f*/, std::int64_t /*tokens*/) const { return Allocator::kNoEvent; }
};

// A registered policy: `--policy NAME`. Each is defined `extern constinit const` in its own
// file and named by one line of policies.def.
struct SchedulerEntry {
  std::string_view name;            // "vllm"
  std::string_view help;            // one line for --help
  bool supports_swap;               // --preemption swap is meaningful
  std::unique_ptr<Scheduler> (*make)(const EngineView& engine);
};

// Every registered policy, in the order --help lists them.
std::span<const SchedulerEntry> scheduler_registry();

// The entry named `name`. Throws InputError naming `field` and listing the known names.
const SchedulerEntry& find_scheduler(std::string_view name, std::string_view field);

// The scheduler a run uses: the demand scheduler without a budget, else the policy's.
std::unique_ptr<Scheduler> make_scheduler(const EngineView& engine);

// What the allocator would hold for waiting request `t` after a first chunk of `positions`
// (with the first token, when the chunk completes its prefill).
std::int64_t chunk_bytes(const EngineView& engine, const Ticket& t, std::int64_t positions);

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_SCHEDULER_H_
