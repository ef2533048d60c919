// Effective tokens: the positions a request's model must keep right now, per layer group.
// Computed by the engine alone, from the request's length, and never by an allocator, so
// that an allocator's own account of what it holds can be checked against it.
//
// Each live sequence keeps the tokens it holds (the prompt processed so far, then prompt +
// generated), capped at the last W positions on a sliding-window group. The prompt shared
// by a request's n samples counts once: after the prompt completes, a request of length t
// keeps its prompt positions inside the window once, plus each sample's generated
// positions inside the window.
#ifndef KVSIM_SRC_EFFECTIVE_H_
#define KVSIM_SRC_EFFECTIVE_H_

#include <algorithm>
#include <cstdint>

#include "kvsim/allocator.h"

namespace kvsim::detail {

struct EffectiveShare {
  std::int64_t value = 0;
  std::int64_t slope = 0;        // per step while the request decodes
  std::int64_t next_change = Allocator::kNoEvent;  // the length at which the slope changes
};

inline std::int64_t effective_tokens(std::int64_t tokens, std::int64_t prompt_tokens, std::int64_t n,
                                     std::int64_t window_tokens) {
  if (tokens <= prompt_tokens) {  // one sequence: the prompt (or what of it is done)
    return window_tokens > 0 ? std::min(tokens, window_tokens) : tokens;
  }
  const std::int64_t window_lo = window_tokens > 0 ? std::max<std::int64_t>(0, tokens - window_tokens) : 0;
  const std::int64_t prompt_in_window = std::max<std::int64_t>(0, prompt_tokens - window_lo);
  const std::int64_t generated_in_window = tokens - std::max(prompt_tokens, window_lo);
  return prompt_in_window + n * generated_in_window;
}

inline EffectiveShare effective_share(std::int64_t tokens, std::int64_t prompt_tokens, std::int64_t n,
                                      std::int64_t window_tokens) {
  EffectiveShare e;
  e.value = effective_tokens(tokens, prompt_tokens, n, window_tokens);
  if (tokens <= prompt_tokens) return e;  // not decoding: changes only through explicit steps
  e.slope = effective_tokens(tokens + 1, prompt_tokens, n, window_tokens) - e.value;
  if (window_tokens > 0) {
    // The window starts passing the prompt at length W and has passed it at P + W.
    for (std::int64_t at : {window_tokens, prompt_tokens + window_tokens}) {
      if (at > tokens) e.next_change = std::min(e.next_change, at);
    }
  }
  return e;
}

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_EFFECTIVE_H_
