// Classifying the positions an allocator holds for one request into effective tokens and
// the five parts of internal fragmentation. Every allocator describes what it holds as a
// few regions of the request's sequence; this one function turns them into a Footprint, so
// the rules for "tail", "reservation", "padding", "duplicate" and "outside window" live in
// one place.
#ifndef KVSIM_SRC_FOOTPRINT_H_
#define KVSIM_SRC_FOOTPRINT_H_

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>

#include "kvsim/allocator.h"

namespace kvsim::detail {

// Positions [lo, hi) of a sequence, held `copies` times: 1 for positions stored once (a
// single sequence, or blocks all samples share), n when each of n samples holds its own.
struct HeldRegion {
  std::int64_t lo = 0;
  std::int64_t hi = 0;
  std::int64_t copies = 1;
};

// What unfilled room (positions at or past the sequence's length) is called.
enum class Unfilled { tail, reservation };

// The request's state the classification needs.
struct SequenceState {
  std::int64_t tokens = 0;          // positions per sequence
  std::int64_t prompt_tokens = 0;
  std::int64_t window_tokens = 0;   // of the layer group; 0 = keeps everything
  std::int64_t limit_tokens = 0;    // prompt + planned output: the most the sequence can reach
};

// prompt + planned output, saturating, and at most `max_model_len` (0: none), where the
// engine stops a sequence: the most positions a sequence can ever reach.
inline std::int64_t limit_tokens(const AdmitInfo& info, std::int64_t max_model_len) {
  const std::int64_t planned = info.planned_output_tokens > std::numeric_limits<std::int64_t>::max() - info.prompt_tokens
                                   ? std::numeric_limits<std::int64_t>::max()
                                   : info.prompt_tokens + info.planned_output_tokens;
  return max_model_len > 0 ? std::min(planned, max_model_len) : planned;
}

inline std::int64_t overlap(std::int64_t a0, std::int64_t a1, std::int64_t b0, std::int64_t b1) {
  return std::max<std::int64_t>(0, std::min(a1, b1) - std::max(a0, b0));
}

// Classifies the held regions at the sequence's current length. Slopes are left zero: the
// caller gets them by classifying again one token later (see with_slopes).
//   - positions at or past `tokens` are unfilled: tail, per `unfilled`, or else reservation
//     before `limit_tokens` and padding from it on;
//   - positions before `tokens - window` hold tokens outside the window;
//   - within the window, a prompt position held more than once counts once as effective,
//     and each further copy is a duplicate.
// What remains is effective; the caller does not need it (the engine computes it alone).
inline Footprint classify(std::initializer_list<HeldRegion> regions, const SequenceState& s,
                          Unfilled unfilled) {
  Footprint f;
  const std::int64_t window_lo = s.window_tokens > 0 ? std::max<std::int64_t>(0, s.tokens - s.window_tokens) : 0;
  std::int64_t unfilled_slots = 0, past_limit = 0;
  for (const HeldRegion& r : regions) {
    if (r.hi <= r.lo) continue;
    f.allocated += (r.hi - r.lo) * r.copies;
    unfilled_slots += overlap(r.lo, r.hi, s.tokens, r.hi) * r.copies;
    past_limit += overlap(r.lo, r.hi, std::max(s.tokens, s.limit_tokens), r.hi) * r.copies;
    f.outside_window += overlap(r.lo, r.hi, 0, std::min(window_lo, s.tokens)) * r.copies;
    const std::int64_t prompt_in_window =
        overlap(std::max(r.lo, window_lo), std::min(r.hi, s.tokens), 0, s.prompt_tokens);
    f.duplicate += prompt_in_window * (r.copies - 1);
  }
  if (unfilled == Unfilled::tail) {
    f.tail = unfilled_slots;
  } else {
    f.padding = past_limit;
    f.reservation = unfilled_slots - past_limit;
  }
  return f;
}

// `at` with its slopes set to the change from `at` to `next` (the same holding one token
// later, with no event in between).
inline Footprint with_slopes(Footprint at, const Footprint& next) {
  at.tail_slope = next.tail - at.tail;
  at.reservation_slope = next.reservation - at.reservation;
  at.padding_slope = next.padding - at.padding;
  at.duplicate_slope = next.duplicate - at.duplicate;
  at.outside_window_slope = next.outside_window - at.outside_window;
  return at;
}

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_FOOTPRINT_H_
