// vLLM's policy, after v1's scheduler (vllm/v1/core/sched/scheduler.py, Scheduler.schedule
// and _preempt_request; kv_cache_manager.py allocate_slots for the watermark): admit in
// arrival order while the next chunk's blocks fit and leave the watermark free; when a
// running request cannot grow, preempt the newest running request, by recompute (requeued
// at the front of the waiting queue), or by swapping its blocks to host memory (v0 only;
// decoding requests only; a swapped request comes back before anything new starts). The
// loop around it (running requests first, the token budget, max_num_seqs, no admission in a
// step that preempted) is the engine's. docs/fidelity.md lists each rule with its place in
// vLLM's code and its test.
#include <string>

#include "engine.h"
#include "scheduler.h"

namespace kvsim::detail {
namespace {

class VllmScheduler final : public Scheduler {
 public:
  explicit VllmScheduler(const EngineView& engine)
      : swap_(engine.options.memory.preemption == Preemption::swap),
        watermark_bytes_(static_cast<std::int64_t>(Int128{engine.capacity_bytes} *
                                                   engine.options.memory.watermark_ppb / kPartsPerBillion)) {}

  std::string name() const override { return swap_ ? "vllm (swap)" : "vllm (recompute)"; }
  bool tracks_requests() const override { return false; }

  bool admits(const EngineView& engine, const Ticket& t, std::int64_t positions) override {
    // v0's can_allocate: the blocks for this chunk, leaving the watermark free.
    return chunk_bytes(engine, t, positions) + (engine.running > 0 ? watermark_bytes_ : 0) <= engine.free_bytes();
  }

  std::uint32_t choose_victim(const EngineView& engine, std::uint32_t) const override {
    return engine.newest_running();  // the last of the running queue
  }

  bool swaps(const Flight& victim) const override { return swap_ && victim.decoding; }

 private:
  bool swap_;
  std::int64_t watermark_bytes_;
};

}  // namespace

std::unique_ptr<Scheduler> make_vllm_scheduler(const EngineView& engine) {
  return std::make_unique<VllmScheduler>(engine);
}

}  // namespace kvsim::detail
