// TensorRT-LLM's GUARANTEED_NO_EVICT capacity scheduler (docs/replay.md cites the code):
// every running request may still grow to its planned end (prompt + max_tokens); a waiting
// request is admitted only if its whole life fits beside all of theirs, so nothing is ever
// preempted for lack of room. If placement fails anyway (a fragmented arena), the newest
// running request is preempted, as vLLM would.
#include <string>
#include <vector>

#include "engine.h"
#include "scheduler.h"

namespace kvsim::detail {
namespace {

class ReserveScheduler final : public Scheduler {
 public:
  std::string name() const override { return "reserve (never preempts)"; }

  bool admits(const EngineView& engine, const Ticket& t, const AdmitInfo&, std::int64_t, std::int64_t) override {
    return planned_sum_ + planned_peak(engine, t) <= engine.capacity_bytes;
  }

  void on_admitted(const EngineView& engine, std::uint32_t slot, const Ticket& t) override {
    if (slot >= planned_.size()) planned_.resize(slot + 1, 0);
    planned_[slot] = planned_peak(engine, t);
    planned_sum_ += planned_[slot];
  }

  void on_stopped(const EngineView& /*engine*/, std::uint32_t slot) override {
    if (slot >= planned_.size()) return;
    planned_sum_ -= planned_[slot];
    planned_[slot] = 0;
  }

  std::uint32_t choose_victim(const EngineView& engine, std::uint32_t) const override {
    return engine.newest_running();
  }

 private:
  static std::int64_t planned_peak(const EngineView& engine, const Ticket& t) {
    return engine.allocator.peak_bytes(admit_info(t), t.prompt + t.planned);
  }

  std::vector<std::int64_t> planned_;  // by slot: the most the running request may hold
  std::int64_t planned_sum_ = 0;
};

std::unique_ptr<Scheduler> make_reserve_scheduler(const EngineView&) { return std::make_unique<ReserveScheduler>(); }

}  // namespace

// "--policy reserve": its row of the policy registry (policies.def names it).
extern constinit const SchedulerEntry kReservePolicy{
    "reserve", "TensorRT-LLM's guaranteed-no-evict: admit only when prompt + max_tokens fits, never preempt", false,
    make_reserve_scheduler};

}  // namespace kvsim::detail
