// Iteration cost models for the replay engine, and the roofline defaults they start from.
#ifndef KVSIM_COST_MODEL_H_
#define KVSIM_COST_MODEL_H_

#include <cstdint>

#include "kvsim/budget.h"
#include "kvsim/model.h"
#include "kvsim/replay.h"

namespace kvsim {

// The share of a device's dense BF16 throughput that prefill reaches, in percent. 50% is a
// round figure for large-batch prefill on Hopper-class devices; it is an assumption, stated
// in the report's cost model name, not a measurement.
inline constexpr std::int64_t kRooflineComputePercent = 50;

// A linear cost model from first principles for `model` on one `device`:
//   base          = weights on the device / HBM bandwidth     (every step streams the weights)
//   prefill_token = 2 x parameters on the device / (FLOP/s x 50%)
//   decode_seq    = the same compute for one decoded token
//   context_token = KV bytes per token on the device / HBM bandwidth (attention reads the cache)
// The terms are added, not maxed: an upper bound on a step's time where memory and compute
// overlap. Use --cost constant or explicit coefficients to model a measured engine.
CostModel roofline_cost_model(const KvLayout& layout, const DevicePreset& device, const ModelWeights& weights);

// Parses --cost: "roofline" (returns `roofline`), "constant:step=20ms,prefill-token=100us",
// or "linear:base=5ms,prefill-token=30us,decode-seq=30us,context-token=40ps". Durations take
// the units ps, ns, us, ms and s. Unnamed coefficients are the roofline's (constant has only
// step and prefill-token; its other two are zero). The step's base must be positive. Throws
// InputError naming `field`.
CostModel parse_cost_model(std::string_view text, const CostModel& roofline, std::string_view field);

// "40ps", "1.5us", "20ms" -> picoseconds, exactly. Throws InputError naming `field`.
std::int64_t parse_duration_ps(std::string_view text, std::string_view field);

}  // namespace kvsim

#endif  // KVSIM_COST_MODEL_H_
