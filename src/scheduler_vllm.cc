// vLLM's policy (its v0 block manager and scheduler, which v1 keeps in spirit; docs/replay.md
// cites the code): admit in arrival order while the next chunk's blocks fit and leave the
// watermark free; when a running request cannot grow, preempt the newest running request,
// by recompute (requeued at the front of the waiting queue) or by swapping its blocks to host
// memory (decoding requests only; a swapped request comes back before anything new starts).
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
