#include "kvsim/cost_model.h"

#include <string>
#include <vector>

#include "decimal.h"

#include <limits>

#include "kvsim/error.h"
#include "kvsim/option_names.h"
#include "kvsim/parse.h"
#include "kvsim/units.h"

namespace kvsim {
namespace {

__extension__ typedef __int128 Int128;

constexpr Int128 kPsPerSecond = 1'000'000'000'000;

// ceil(numerator / denominator) as int64, for durations in picoseconds.
std::int64_t ceil_ps(Int128 numerator, Int128 denominator) {
  return static_cast<std::int64_t>((numerator + denominator - 1) / denominator);
}

}  // namespace

CostModel roofline_cost_model(const KvLayout& layout, const DevicePreset& device, const ModelWeights& weights) {
  check(device.hbm_bytes_per_second > 0 && device.bf16_dense_flops > 0, "roofline: device without bandwidth or FLOP/s");
  CostModel c;
  c.name = "roofline " + std::string(device.name) + " (weights/bandwidth + 2 x params/(" +
           std::to_string(kRooflineComputePercent) + "% of peak FLOP/s) per token + KV bytes/bandwidth per context token)";
  c.base_ps = ceil_ps(Int128{weights.weights_bytes_per_device} * kPsPerSecond, device.hbm_bytes_per_second);
  // With the weights given in bytes, the parameters follow from their width (16 bits unless known).
  const std::int64_t parameters =
      weights.parameter_count > 0 ? weights.parameter_count
                                  : weights.weights_bytes * 8 / (weights.weight_bits > 0 ? weights.weight_bits : 16);
  const Int128 params_per_device = ceil_div(parameters, weights.devices);
  const Int128 effective_flops = Int128{device.bf16_dense_flops} * kRooflineComputePercent / 100;
  c.prefill_token_ps = ceil_ps(2 * params_per_device * kPsPerSecond, effective_flops);
  c.decode_seq_ps = c.prefill_token_ps;
  c.context_token_ps = ceil_ps(Int128{layout.bytes_per_token()} * kPsPerSecond, device.hbm_bytes_per_second);
  return c;
}

std::int64_t parse_duration_ps(std::string_view text, std::string_view field) {
  static constexpr std::pair<std::string_view, std::int64_t> kUnits[] = {
      {"ps", 1}, {"ns", 1'000}, {"us", 1'000'000}, {"ms", 1'000'000'000}, {"s", 1'000'000'000'000}};
  const Location where{"", 0, std::string(field)};
  for (const auto& [unit, scale] : kUnits) {
    if (text.size() <= unit.size() || text.substr(text.size() - unit.size()) != unit) continue;
    const std::string_view number = text.substr(0, text.size() - unit.size());
    if (!number.empty() && (number.back() < '0' || number.back() > '9') && number.back() != '.') continue;  // "ms" vs "s"
    // Up to 12 fractional digits exactly, then the unit's picoseconds, then back to whole ps.
    std::int64_t fixed = 0;
    const auto status = detail::parse_scaled_decimal(number, 12, fixed);
    if (status != detail::DecimalStatus::ok) {
      throw InputError(where, "\"" + std::string(text) + "\" " + detail::describe(status));
    }
    const Int128 ps = Int128{fixed} * scale;
    if (ps % kPsPerSecond != 0) throw InputError(where, "\"" + std::string(text) + "\" is finer than 1 ps");
    if (ps / kPsPerSecond > std::numeric_limits<std::int64_t>::max()) {
      throw InputError(where, "\"" + std::string(text) + "\" is too large");
    }
    return static_cast<std::int64_t>(ps / kPsPerSecond);
  }
  throw InputError(where, "expected a duration with a unit (ps, ns, us, ms, s), got \"" + std::string(text) + "\"");
}

CostModel parse_cost_model(std::string_view text, const CostModel& roofline, std::string_view field) {
  const auto colon = text.find(':');
  const std::string_view kind = text.substr(0, colon);
  const Location where{"", 0, std::string(field)};
  CostModel c;
  if (kind == "roofline") {
    if (colon != std::string_view::npos) throw InputError(where, std::string("roofline takes no parameters (it follows ") + kOptDevice + ")");
    return roofline;
  }
  if (kind != "constant" && kind != "linear") {
    throw InputError(where, "expected roofline, constant:... or linear:..., got \"" + std::string(text) + "\"");
  }
  // Both start from the roofline's coefficients, so an unnamed one has a stated source:
  // constant keeps its step and per-prompt-token cost and drops the rest; linear keeps all four.
  c.base_ps = roofline.base_ps;
  c.prefill_token_ps = roofline.prefill_token_ps;
  c.decode_seq_ps = kind == "linear" ? roofline.decode_seq_ps : 0;
  c.context_token_ps = kind == "linear" ? roofline.context_token_ps : 0;
  const std::string_view rest = colon == std::string_view::npos ? std::string_view{} : text.substr(colon + 1);
  for (const auto& [key, value] : parse_key_values(rest, field)) {
    const std::int64_t ps = parse_duration_ps(value, std::string(field) + " " + std::string(key));
    if (kind == "constant" && key == "step") c.base_ps = ps;
    else if (kind == "linear" && key == "base") c.base_ps = ps;
    else if (key == "prefill-token") c.prefill_token_ps = ps;
    else if (kind == "linear" && key == "decode-seq") c.decode_seq_ps = ps;
    else if (kind == "linear" && key == "context-token") c.context_token_ps = ps;
    else throw InputError(where, "unknown parameter '" + std::string(key) + "' for " + std::string(kind) + " (" +
                                     (kind == "constant" ? "step, prefill-token" : "base, prefill-token, decode-seq, context-token") + ")");
  }
  // A step that takes no time would make every latency 0 and every rate infinite.
  if (c.base_ps <= 0) {
    throw InputError(where, "every engine step takes time: " + std::string(kind == "constant" ? "step" : "base") +
                                " must be positive, got \"" + std::string(text) + "\"");
  }
  c.name = std::string(text);
  return c;
}

}  // namespace kvsim
