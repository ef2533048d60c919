// vLLM's policy, after v1's scheduler (vllm/v1/core/sched/scheduler.py, Scheduler.schedule
// and _preempt_request; kv_cache_manager.py allocate_slots for the watermark and the whole
// sequence): admit in arrival order while the next chunk's blocks fit and leave the watermark
// free, and with --reserve-full-isl while the whole sequence's blocks fit too; when a
// running request cannot grow, preempt the newest running request, by recompute (requeued
// at the front of the waiting queue), or by swapping its blocks to host memory (v0 only;
// decoding requests only; a swapped request comes back before anything new starts). The
// loop around it (running requests first, the token budget, max_num_seqs, no admission in a
// step that preempted) is the engine's. docs/fidelity.md lists each rule with its place in
// vLLM's code and its test.
#include <string>

#include "engine.h"
#include "kvsim/budget.h"
#include "scheduler.h"

namespace kvsim::detail {
namespace {

// Whether a request's bytes fit `room` once the cache hits that take no free block are taken
// off: get_num_blocks_to_allocate (single_type_kv_cache_manager.py) counts the blocks at the
// length asked for, less the hits, plus only the hits nobody references (ref_cnt == 0, taken
// out of the free queue), and a sliding-window group's hits behind the window not at all
// (null blocks). The hits are looked up only when the whole count does not fit, and once.
class RoomCheck {
 public:
  RoomCheck(const EngineView& engine, const AdmitInfo& info, std::int64_t room)
      : engine_(engine), info_(info), room_(room) {}
  bool fits(std::int64_t bytes) {
    if (bytes <= room_) return true;
    if (roomless_ < 0) roomless_ = engine_.allocator.roomless_hit_bytes(info_);
    return bytes - roomless_ <= room_;
  }

 private:
  const EngineView& engine_;
  const AdmitInfo& info_;
  std::int64_t room_;
  std::int64_t roomless_ = -1;
};

class VllmScheduler final : public Scheduler {
 public:
  explicit VllmScheduler(const EngineView& engine)
      : swap_(engine.options.memory.preemption == Preemption::swap),
        reserve_full_isl_(engine.options.memory.reserve_full_isl),
        watermark_ppb_(engine.options.memory.watermark_ppb),
        // In whole units (blocks): vLLM's watermark_blocks = int(watermark * num_gpu_blocks)
        // (v0's BlockSpaceManager), in bytes for a byte-addressed arena. Python multiplies in
        // double precision and truncates, so 0.29 x 100 blocks is 28 (28.999999999999996),
        // not the exact product's 29; the watermark, read as a decimal, is the double
        // nearest it, as Python's float() gives.
        watermark_bytes_(static_cast<std::int64_t>(static_cast<double>(engine.options.memory.watermark_ppb) /
                                                   static_cast<double>(kPartsPerBillion) *
                                                   static_cast<double>(engine.capacity_bytes / engine.capacity_unit_bytes)) *
                         engine.capacity_unit_bytes) {}

  std::string name() const override {
    std::string out = swap_ ? "vllm (swap" : "vllm (recompute";
    if (reserve_full_isl_) out += ", whole sequence must fit";
    if (watermark_ppb_ != MemoryOptions{}.watermark_ppb) out += ", watermark " + format_ppb(watermark_ppb_);
    return out + ")";
  }
  bool tracks_requests() const override { return false; }

  bool admits(const EngineView& engine, const Ticket& t, const AdmitInfo& info, std::int64_t,
              std::int64_t positions) override {
    // The blocks for this chunk, less the hits that take none, leaving the watermark free.
    RoomCheck room(engine, info, room_above_watermark(engine));
    // scheduler_reserve_full_isl: allocate_slots(full_sequence_must_fit=True) first asks for
    // the blocks of request.num_tokens (prompt and generated so far) and returns None, which
    // stops admission, when they do not fit.
    if (reserve_full_isl_ && !room.fits(engine.allocator.peak_bytes(info, t.prompt + t.base_generated))) return false;
    return room.fits(chunk_bytes(engine, t, positions));
  }
  // Alone, no watermark is kept and the whole capacity is free: what admits() asks for must
  // exceed it. Less every hit that takes no free block now (a sliding window's hits behind
  // the window take none even alone; those a running request holds might, once it is gone):
  // refused here only what is refused alone too.
  bool never_admits(const EngineView& engine, const Ticket& t, const AdmitInfo& info,
                    std::int64_t positions) const override {
    RoomCheck alone(engine, info, engine.capacity_bytes);
    return (reserve_full_isl_ && !alone.fits(engine.allocator.peak_bytes(info, t.prompt + t.base_generated))) ||
           !alone.fits(chunk_bytes(engine, t, positions));
  }

  std::uint32_t choose_victim(const EngineView& engine, std::uint32_t) const override {
    return engine.newest_running();  // the last of the running queue
  }
  bool victim_is_newest() const override { return true; }

  bool swaps(const Flight& victim) const override { return swap_ && victim.decoding; }
  // v0's BlockSpaceManager.can_swap_in -> _can_swap: the blocks it touches must leave the
  // watermark free, as an admission's must (none kept while nothing else runs).
  bool swaps_in(const EngineView& engine, const AdmitInfo& info, std::int64_t positions) const override {
    if (engine.running == 0 || watermark_bytes_ == 0) return true;
    return RoomCheck(engine, info, room_above_watermark(engine)).fits(engine.allocator.peak_bytes(info, positions));
  }

 private:
  // The free bytes less the watermark, which is kept while others run (v0's can_allocate and
  // _can_swap; allocate_slots' watermark_blocks for WAITING and PREEMPTED requests).
  std::int64_t room_above_watermark(const EngineView& engine) const {
    return engine.free_bytes() - (engine.running > 0 ? watermark_bytes_ : 0);
  }

  bool swap_;
  bool reserve_full_isl_;
  std::int64_t watermark_ppb_;
  std::int64_t watermark_bytes_;
};

std::unique_ptr<Scheduler> make_vllm_scheduler(const EngineView& engine) {
  return std::make_unique<VllmScheduler>(engine);
}

}  // namespace

// "--policy vllm": its row of the policy registry (policies.def names it).
extern constinit const SchedulerEntry kVllmPolicy{
    "vllm", "admit while the next chunk fits above the watermark, preempt the newest when a running request "
    "cannot grow", true, make_vllm_scheduler};

}  // namespace kvsim::detail
