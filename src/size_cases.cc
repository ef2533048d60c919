#include "kvsim/size_cases.h"

#include <algorithm>
#include <limits>

#include "kvsim/error.h"
#include "kvsim/units.h"

namespace kvsim {
namespace {

std::int64_t kv_bytes(const KvLayout& layout, const RequestShape& shape) {
  std::int64_t total = 0;
  for (const auto& g : layout.groups) {
    total = checked_add(total, checked_mul(g.bytes_per_position, request_positions(g, shape), "KV bytes per request"),
                        "KV bytes per request");
  }
  return total;
}

}  // namespace

std::int64_t RequestBytes::total_bytes() const { return checked_add(kv_bytes, state_bytes, "bytes per request"); }

std::int64_t request_positions(const LayerGroup& group, const RequestShape& shape) {
  const std::int64_t p = shape.prompt_tokens;
  const std::int64_t g = shape.max_tokens;
  const std::int64_t n = shape.sequences;
  const std::int64_t whole = checked_add(p, g, "prompt + max tokens");
  if (!shape.prompt_shared) return checked_mul(n, kept_positions(group, whole), "positions per request");
  if (group.window_tokens == 0) return checked_add(p, checked_mul(n, g, "generated positions"), "positions per request");
  const std::int64_t w = group.window_tokens;
  const std::int64_t shared = std::min(p, std::max<std::int64_t>(0, w - g));
  return checked_add(shared, checked_mul(n, std::min(g, w), "generated positions"), "positions per request");
}

RequestBytes request_bytes(const KvLayout& layout, const RequestShape& shape) {
  RequestBytes r;
  r.shape = shape;
  r.kv_bytes = kv_bytes(layout, shape);
  RequestShape one = shape;
  one.sequences = 1;
  r.single_kv_bytes = kv_bytes(layout, one);
  r.state_bytes = checked_mul(shape.sequences, layout.state_bytes_per_sequence(), "state bytes per request");
  return r;
}

std::int64_t device_share(std::int64_t amount, std::int64_t host_share_ppb) {
  __extension__ typedef __int128 Wide;
  return amount - static_cast<std::int64_t>(Wide{amount} * host_share_ppb / 1'000'000'000);
}

std::int64_t most_that_fit(std::int64_t unit, std::int64_t available, std::int64_t host_share_ppb) {
  __extension__ typedef __int128 Wide;
  if (unit <= 0 || available < 0) return 0;
  // device_share(x) = ceil(x (10^9 - share) / 10^9), and for an integer `available`,
  // ceil(y) <= available exactly when y <= available.
  const Wide most = Wide{available} * 1'000'000'000 / (Wide{unit} * (1'000'000'000 - host_share_ppb));
  return most > Wide{std::numeric_limits<std::int64_t>::max()} ? std::numeric_limits<std::int64_t>::max()
                                                               : static_cast<std::int64_t>(most);
}

OffloadSplit offload_split(std::int64_t bytes, std::int64_t host_share_ppb, std::int64_t link_bytes_per_second) {
  __extension__ typedef __int128 Wide;
  OffloadSplit o;
  o.device_bytes = device_share(bytes, host_share_ppb);
  o.host_bytes = bytes - o.device_bytes;
  const Wide ns = (Wide{o.host_bytes} * 1'000'000'000 + link_bytes_per_second - 1) / link_bytes_per_second;
  if (ns > Wide{std::numeric_limits<std::int64_t>::max()}) {
    throw InputError("the transfer time per step overflows 64 bits of nanoseconds: give a faster link");
  }
  o.transfer_ns = static_cast<std::int64_t>(ns);
  return o;
}

}  // namespace kvsim
