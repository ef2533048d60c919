// Exact decimal parsing shared by the trace readers and the command line.
//
// "1.25" with scale 9 is 1250000000: the digits are read as integers, never through a
// double, so a timestamp in a trace becomes exactly the integer nanoseconds it spells.
#ifndef KVSIM_SRC_DECIMAL_H_
#define KVSIM_SRC_DECIMAL_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace kvsim::detail {

enum class DecimalStatus {
  ok,
  empty,          // nothing to parse
  not_a_number,   // a character that is not a digit or a single '.'
  negative,       // starts with '-'
  too_precise,    // more fractional digits than `scale` that are not zeros
  overflow,       // the scaled value does not fit in int64
};

// Parses a non-negative decimal number ("12", "0.5", "7.", ".25") and returns it multiplied
// by 10^scale in `out`. Fractional digits beyond `scale` must be zeros. A leading '+' is
// accepted; exponents, spaces, "nan" and "inf" are not.
DecimalStatus parse_scaled_decimal(std::string_view text, int scale, std::int64_t& out);

// Parses a non-negative integer without sign or spaces ("0", "4096").
DecimalStatus parse_non_negative(std::string_view text, std::int64_t& out);

// A short English description of a status about `quoted` (the value, quoted), for messages:
// "expected a non-negative number, got a negative one: \"-1ms\"".
std::string describe(DecimalStatus status, const std::string& quoted);

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_DECIMAL_H_
