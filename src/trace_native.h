// The names of kvsim's native trace format (traces/README.md), shared by its CSV and JSONL
// readers and by the writer, so the three cannot drift apart.
#ifndef KVSIM_SRC_TRACE_NATIVE_H_
#define KVSIM_SRC_TRACE_NATIVE_H_

#include <array>
#include <string>
#include <string_view>

namespace kvsim::detail {

enum class NativeField {
  id,
  arrival,
  prompt_tokens,
  output_tokens,
  max_tokens,
  cancel_at,
  cancel_after,
  n,
  session,
  start,
  first_token,
  finish,
  prefix_block_tokens,
  prefix_hashes,
};

inline constexpr std::array<std::string_view, 14> kNativeFieldNames = {
    "id",      "arrival", "prompt_tokens", "output_tokens", "max_tokens",         "cancel_at",    "cancel_after",
    "n",       "session", "start",         "first_token",   "finish",             "prefix_block_tokens", "prefix_hashes",
};

inline constexpr std::string_view native_name(NativeField f) { return kNativeFieldNames[static_cast<std::size_t>(f)]; }

// Index of `name` in kNativeFieldNames, or -1.
inline int native_field_index(std::string_view name) {
  for (std::size_t i = 0; i < kNativeFieldNames.size(); ++i) {
    if (kNativeFieldNames[i] == name) return static_cast<int>(i);
  }
  return -1;
}

// "id, arrival, prompt_tokens, ..." for messages that list what is known.
inline std::string native_field_list() {
  std::string out;
  for (auto name : kNativeFieldNames) {
    if (!out.empty()) out += ", ";
    out.append(name);
  }
  return out;
}

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_TRACE_NATIVE_H_
