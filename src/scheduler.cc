// The registry of serving policies, and the demand scheduler used without a budget.
#include "scheduler.h"

#include <string>

#include "engine.h"
#include "kvsim/error.h"
#include "kvsim/option_names.h"

namespace kvsim::detail {

// One line per policy: its name, its --help text, whether it swaps, its factory (defined in
// its own file, scheduler_NAME.cc).
std::unique_ptr<Scheduler> make_vllm_scheduler(const EngineView& engine);
std::unique_ptr<Scheduler> make_reserve_scheduler(const EngineView& engine);
std::unique_ptr<Scheduler> make_sglang_scheduler(const EngineView& engine);
std::unique_ptr<Scheduler> make_max_utilization_scheduler(const EngineView& engine);

namespace {

constexpr SchedulerEntry kSchedulers[] = {
    {"vllm", "admit while the next chunk fits above the watermark, preempt the newest when a running request "
             "cannot grow", true, make_vllm_scheduler},
    {"reserve", "TensorRT-LLM's guaranteed-no-evict: admit only when prompt + max_tokens fits, never preempt", false,
     make_reserve_scheduler},
    {"sglang", "admit against an adaptive estimate of future tokens, retract the request with the fewest generated "
               "tokens", false, make_sglang_scheduler},
    {"max-utilization", "TensorRT-LLM's MAX_UTILIZATION: admit while the next chunk fits, pause the last started "
                        "request when a running one cannot grow", false, make_max_utilization_scheduler},
};

// Without a budget nothing is refused and nothing is preempted.
class DemandScheduler final : public Scheduler {
 public:
  std::string name() const override { return "none (demand)"; }
  bool tracks_requests() const override { return false; }
  bool admits(const EngineView&, const Ticket&, const AdmitInfo&, std::int64_t) override { return true; }
  std::uint32_t choose_victim(const EngineView&, std::uint32_t failed) const override { return failed; }
};

}  // namespace

std::span<const SchedulerEntry> scheduler_registry() { return kSchedulers; }

const SchedulerEntry& find_scheduler(std::string_view name, std::string_view field) {
  std::string known;
  for (std::size_t i = 0; i < std::size(kSchedulers); ++i) {
    if (kSchedulers[i].name == name) return kSchedulers[i];
    known += i == 0 ? "" : i + 1 == std::size(kSchedulers) ? " or " : ", ";
    known += kSchedulers[i].name;
  }
  throw InputError(Location{"", 0, std::string(field)}, "expected " + known + ", got \"" + std::string(name) + "\"");
}

std::unique_ptr<Scheduler> make_scheduler(const EngineView& engine) {
  if (engine.capacity_bytes == 0) return std::make_unique<DemandScheduler>();
  return find_scheduler(engine.options.memory.policy.name, kOptPolicy).make(engine);
}

}  // namespace kvsim::detail

namespace kvsim {

std::vector<PolicyInfo> policies() {
  std::vector<PolicyInfo> out;
  for (const auto& e : detail::scheduler_registry()) out.push_back({e.name, e.help, e.supports_swap});
  return out;
}

PolicyInfo find_policy(std::string_view name, std::string_view field) {
  const auto& e = detail::find_scheduler(name, field);
  return {e.name, e.help, e.supports_swap};
}

}  // namespace kvsim

namespace kvsim::detail {

std::int64_t chunk_bytes(const EngineView& engine, const Ticket& t, std::int64_t positions) {
  // A chunk that completes the prefill also holds the token it samples.
  const AdmitInfo info = admit_info(t);
  const bool completes = positions == info.prompt_tokens + info.resumed_tokens;
  return engine.allocator.peak_bytes(info, completes ? info.prefilled_positions() : positions);
}

}  // namespace kvsim::detail
