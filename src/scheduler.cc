// The registry of serving policies, and the demand scheduler used without a budget.
#include "scheduler.h"

#include <string>

#include "engine.h"
#include "kvsim/error.h"
#include "kvsim/option_names.h"

namespace kvsim::detail {

// The registry, policies.def: one line per policy, naming a SchedulerEntry defined
// `extern constinit const` in the policy's own file. Declared here.
#define KVSIM_POLICY(policy) extern const SchedulerEntry policy;
#include "policies.def"
#undef KVSIM_POLICY

namespace {

// Without a budget nothing is refused and nothing is preempted.
class DemandScheduler final : public Scheduler {
 public:
  std::string name() const override { return "none (demand)"; }
  bool tracks_requests() const override { return false; }
  bool admits(const EngineView&, const Ticket&, const AdmitInfo&, std::int64_t, std::int64_t) override { return true; }
  std::uint32_t choose_victim(const EngineView&, std::uint32_t failed) const override { return failed; }
};

}  // namespace

std::span<const SchedulerEntry> scheduler_registry() {
  static const SchedulerEntry entries[] = {
#define KVSIM_POLICY(policy) policy,
#include "policies.def"
#undef KVSIM_POLICY
  };
  return entries;
}

const SchedulerEntry& find_scheduler(std::string_view name, std::string_view field) {
  const std::span<const SchedulerEntry> all = scheduler_registry();
  std::string known;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (all[i].name == name) return all[i];
    known += i == 0 ? "" : i + 1 == all.size() ? " or " : ", ";
    known += all[i].name;
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
