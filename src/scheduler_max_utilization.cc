// TensorRT-LLM's MAX_UTILIZATION capacity scheduler (cpp/tensorrt_llm/batch_manager/
// capacityScheduler.cpp, MaxUtilizationScheduler): plan for the next step only. A request is
// scheduled when the blocks its next step needs fit what is left (no watermark, no planning
// for its later tokens); when a running request cannot get them, the request started last
// is paused: its KV cache is freed and it starts over later (recomputed), keeping its place
// ahead of requests that arrived after it.
//
// A step that paused a request admits nothing new, as TensorRT-LLM's loop ends at the request
// it paused (reqItEnd), the waiting requests coming after the started ones. Where kvsim
// differs: a prompt's blocks are taken chunk by chunk, where TensorRT-LLM takes them whole at
// the first context chunk (getNeededBlocksOneStep).
#include <string>

#include "engine.h"
#include "scheduler.h"

namespace kvsim::detail {
namespace {

class MaxUtilizationScheduler final : public Scheduler {
 public:
  std::string name() const override { return "max-utilization (pause)"; }
  bool tracks_requests() const override { return false; }

  bool admits(const EngineView& engine, const Ticket& t, const AdmitInfo&, std::int64_t, std::int64_t positions) override {
    return chunk_bytes(engine, t, positions) <= engine.free_bytes();
  }
  bool never_admits(const EngineView& engine, const Ticket& t, const AdmitInfo&, std::int64_t positions) const override {
    return chunk_bytes(engine, t, positions) > engine.capacity_bytes;
  }

  std::uint32_t choose_victim(const EngineView& engine, std::uint32_t) const override {
    return engine.newest_running();  // the last started
  }
};

std::unique_ptr<Scheduler> make_max_utilization_scheduler(const EngineView&) {
  return std::make_unique<MaxUtilizationScheduler>();
}

}  // namespace

// "--policy max-utilization": its row of the policy registry (policies.def names it).
extern constinit const SchedulerEntry kMaxUtilizationPolicy{
    "max-utilization", "TensorRT-LLM's MAX_UTILIZATION: admit while the next chunk fits, pause the last started "
    "request when a running one cannot grow", false, make_max_utilization_scheduler};

}  // namespace kvsim::detail
