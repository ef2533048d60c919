// The overload rule (docs/replay.md, "Overload"): did the device keep up with the arrivals?
//
// A run is overloaded when the trace has at least two requests over a positive arrival span
// and the queue grew through the arrivals: at least max(2, ceil(requests / 10)) requests were
// waiting just after the last one arrived that a step's plan had already passed over (one that
// arrived during the step in progress, or with asynchronous scheduling the one before, has not
// had its chance yet; Engine::passed_over). A run much longer than its arrivals is not by itself
// overload (two requests a millisecond apart that each generate for a minute keep a device
// busy for two minutes without it ever falling behind); the message gives both spans.
// Rates: arrivals (requests - 1) / arrival span; service completed / (end - first arrival).
#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "kvsim/replay.h"
#include "kvsim/units.h"

namespace kvsim {

void judge_overload(ReplayReport& r) {
  Overload o;
  const std::int64_t arrival_span_ns = r.last_arrival_ns - r.start_ns;
  const std::int64_t span_ns = r.end_ns - r.start_ns;
  if (span_ns > 0) o.service_rate_per_s = static_cast<double>(r.completed) * 1e9 / static_cast<double>(span_ns);
  if (r.requests >= 2 && arrival_span_ns > 0) {
    o.arrival_rate_per_s = static_cast<double>(r.requests - 1) * 1e9 / static_cast<double>(arrival_span_ns);
    const std::int64_t threshold = std::max<std::int64_t>(2, ceil_div(r.requests, std::int64_t{10}));
    if (r.queue_at_last_arrival >= threshold) {
      o.overloaded = true;
      o.reason = fmt::format("{} of {} requests were waiting, passed over by a step's plan, when the last one arrived "
                             "(the rule's threshold is {}); "
                             "the run lasted {:.3f} s against {:.3f} s of arrivals",
                             r.queue_at_last_arrival, r.requests, threshold, static_cast<double>(span_ns) / 1e9,
                             static_cast<double>(arrival_span_ns) / 1e9);
    }
  }
  r.overload = o;
}

}  // namespace kvsim
