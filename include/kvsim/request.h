// A request as the simulator replays it.
//
// Token counts are after tokenizer and chat template. Times are integer nanoseconds from
// the start of the trace; a trace's decimal seconds are parsed into them exactly.
#ifndef KVSIM_REQUEST_H_
#define KVSIM_REQUEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvsim {

// The longest prompt or output a request may have: 2^40 tokens, about 10^5 times the
// longest context any model serves, low enough that prompt + output never overflows and a
// trace of millions of such requests still sums in 64 bits. Longer is a corrupt row; the
// options that give a length (--max-model-len, --default-max-tokens) are held to it too.
inline constexpr std::int64_t kMaxRequestTokens = std::int64_t{1} << 40;

struct Request {
  std::string id;                   // as the trace names it; unique within a trace
  std::int64_t arrival_ns = 0;
  std::int64_t prompt_tokens = 0;
  std::int64_t output_tokens = 0;   // what the request really generates, per sample
  // The generation limit the client asked for: what a reserving allocator plans for.
  // Absent when the trace does not say; then the replay plans for
  // max(ReplayOptions::default_max_tokens, output_tokens).
  std::optional<std::int64_t> max_tokens;
  std::optional<std::int64_t> cancel_ns;  // absolute time the client gives up
  std::int64_t n = 1;               // parallel samples that share the prompt
  // Prefix-block hashes: prefix_hashes[i] identifies prompt tokens
  // [0, (i + 1) * prefix_block_tokens); two requests with equal hashes up to i share them.
  std::int64_t prefix_block_tokens = 0;
  std::vector<std::uint64_t> prefix_hashes;
  std::string session;              // multi-turn conversation id, "" when none
  // Service timestamps measured by a real engine, for replaying its schedule exactly.
  std::optional<std::int64_t> start_ns;
  std::optional<std::int64_t> first_token_ns;
  std::optional<std::int64_t> finish_ns;

  bool has_service_times() const { return start_ns && first_token_ns && finish_ns; }
};

}  // namespace kvsim

#endif  // KVSIM_REQUEST_H_
