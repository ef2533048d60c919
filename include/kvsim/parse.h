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
#include <utility>
#include <vector>

namespace kvsim {

// A positive integer without sign, spaces or fraction: "1", "4096".
std::int64_t parse_positive_integer(std::string_view text, std::string_view field);

// A share in [0, 1) such as "0.01", in parts per billion: "0.01" -> 10,000,000.
std::int64_t parse_fraction_ppb(std::string_view text, std::string_view field);

// A parameter count: "8030261248", "8.03B" (10^9) or "350M" (10^6); fractional parameters
// are rounded down. Must be positive and fit 64 bits.
std::int64_t parse_parameter_count(std::string_view text, std::string_view field);

// "block=16,reserve=oracle" split at commas into (key, value) pairs, views into `text`.
// Throws InputError naming `field`, its message starting with `context` (such as
// "'paged:block=16': "), when an item is not key=value with a key and a value, or when a
// key is given twice (one of the two would otherwise be dropped silently).
std::vector<std::pair<std::string_view, std::string_view>> parse_key_values(std::string_view text,
                                                                            std::string_view field,
                                                                            std::string_view context = "");

}  // namespace kvsim

#endif  // KVSIM_PARSE_H_
