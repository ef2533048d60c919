// Events keyed by engine step: a timing wheel for the near future (a request's next block
// boundary is at most a block away) with a heap behind it for the far future (a dense
// reservation's end, a doubling buffer's next growth). Pushing and taking a step's events
// cost O(1) in the common case; the order within a step is fixed by the order of pushes,
// so a run is reproducible.
#ifndef KVSIM_SRC_STEP_WHEEL_H_
#define KVSIM_SRC_STEP_WHEEL_H_

#include <cstdint>
#include <queue>
#include <vector>

#include "kvsim/error.h"

namespace kvsim::detail {

struct StepEvent {
  std::int64_t step = 0;
  std::uint64_t order = 0;       // insertion order: ties resolve the same way every run
  std::uint32_t slot = 0;
  std::uint32_t generation = 0;  // the owner's generation when pushed: stale once it has moved on
  bool operator>(const StepEvent& o) const { return step != o.step ? step > o.step : order > o.order; }
};

class StepWheel {
 public:
  static constexpr std::int64_t kSpan = 1 << 12;

  void push(std::int64_t step, std::uint32_t slot, std::uint32_t generation) {
    check(step >= next_, "step wheel: event scheduled in the past");
    const StepEvent e{step, order_++, slot, generation};
    if (step < next_ + kSpan) buckets_[static_cast<std::size_t>(step % kSpan)].push_back(e);
    else far_.push(e);
  }

  // Whether any event falls on `step`, the next step to be taken. (Far events within reach
  // of the next step have joined the wheel when the step before it was taken.)
  bool due(std::int64_t step) const {
    check(step == next_, "step wheel: steps taken out of order");
    return !buckets_[static_cast<std::size_t>(step % kSpan)].empty();
  }

  // Moves the events of `step` into `out` (replacing its contents). Steps must be taken
  // one after another, each once.
  void take(std::int64_t step, std::vector<StepEvent>& out) {
    check(step == next_, "step wheel: steps taken out of order");
    auto& bucket = buckets_[static_cast<std::size_t>(step % kSpan)];
    out.swap(bucket);
    bucket.clear();
    ++next_;
    // The far future that has come within reach joins the wheel, in its own order.
    while (!far_.empty() && far_.top().step < next_ + kSpan) {
      const StepEvent e = far_.top();
      far_.pop();
      if (e.step == step) out.push_back(e);
      else buckets_[static_cast<std::size_t>(e.step % kSpan)].push_back(e);
    }
  }

 private:
  std::vector<std::vector<StepEvent>> buckets_ = std::vector<std::vector<StepEvent>>(kSpan);
  std::priority_queue<StepEvent, std::vector<StepEvent>, std::greater<>> far_;
  std::int64_t next_ = 0;
  std::uint64_t order_ = 0;
};

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_STEP_WHEEL_H_
