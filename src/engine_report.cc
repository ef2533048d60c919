// The figures a run ends with: the recorder's, under the policy's name.
#include "engine.h"

namespace kvsim::detail {

ReplayReport Engine::finish_report() {
  report_.policy = scheduler_->name();
  report_.prefix_block_tokens = prefix_block_;
  report_.trace_dropped = trace_.dropped();
  recorder_.finish(report_, alloc_, running_, queued_);
  judge_overload(report_);
  if (!has_work()) check_accounted();
  return report_;
}

}  // namespace kvsim::detail
