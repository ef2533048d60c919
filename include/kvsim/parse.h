// Parsing the numbers users type, exactly: option values and config fields.
//
// Digits are read as integers, never through a double, so "0.01" is exactly 10,000,000 parts
// per billion. Every function throws InputError naming `field` (an option such as
// "--max-running", or a config field) when the text is not what it expects. Byte sizes and
// durations are parsed by kvsim/units.h, cost models by kvsim/cost_model.h.
#ifndef KVSIM_PARSE_H_
#define KVSIM_PARSE_H_

#include <cstdint>
#include <string_view>

namespace kvsim {

// A positive integer without sign, spaces or fraction: "1", "4096".
std::int64_t parse_positive_integer(std::string_view text, std::string_view field);

// A share in [0, 1) such as "0.01", in parts per billion: "0.01" -> 10,000,000.
std::int64_t parse_fraction_ppb(std::string_view text, std::string_view field);

// A parameter count: "8030261248", "8.03B" (10^9) or "350M" (10^6); fractional parameters
// are rounded down. Must be positive and fit 64 bits.
std::int64_t parse_parameter_count(std::string_view text, std::string_view field);

}  // namespace kvsim

#endif  // KVSIM_PARSE_H_
