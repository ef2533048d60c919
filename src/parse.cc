#include "kvsim/parse.h"

#include <cctype>
#include <limits>
#include <string>

#include "decimal.h"
#include "kvsim/error.h"

namespace kvsim {
namespace {

__extension__ typedef __int128 Wide;

Location where(std::string_view field) { return Location{"", 0, std::string(field)}; }

}  // namespace

std::int64_t parse_positive_integer(std::string_view text, std::string_view field) {
  std::int64_t value = 0;
  const detail::DecimalStatus status = detail::parse_non_negative(text, value);
  if (status == detail::DecimalStatus::overflow) {
    throw InputError(where(field), "\"" + std::string(text) + "\" is too large (the largest is " +
                                       std::to_string(std::numeric_limits<std::int64_t>::max()) + ")");
  }
  if (status != detail::DecimalStatus::ok) {
    throw InputError(where(field), "expected a positive integer, got \"" + std::string(text) + "\"");
  }
  if (value <= 0) throw InputError(where(field), "expected a positive integer, got " + std::string(text));
  return value;
}

std::int64_t parse_fraction_ppb(std::string_view text, std::string_view field) {
  std::int64_t ppb = 0;
  const detail::DecimalStatus status = detail::parse_scaled_decimal(text, 9, ppb);
  if (status == detail::DecimalStatus::too_precise) {
    throw InputError(where(field), "\"" + std::string(text) + "\" has more than 9 decimal places (fractions are kept "
                                   "in billionths)");
  }
  if (status != detail::DecimalStatus::ok || ppb >= 1'000'000'000) {
    throw InputError(where(field),
                     "expected a fraction from 0 up to (not including) 1, got \"" + std::string(text) + "\"");
  }
  return ppb;
}

std::int64_t parse_parameter_count(std::string_view text, std::string_view field) {
  // The number scaled by its suffix's power of ten, parsed in one step (a plain count with no
  // decimals: scaling it by 10^9 first would refuse counts above 9.2 billion).
  int digits = 0;
  std::string_view number = text;
  if (!number.empty()) {
    switch (number.back()) {
      case 'T': case 't': digits = 12; break;
      case 'B': case 'b': digits = 9; break;
      case 'M': case 'm': digits = 6; break;
      default: break;
    }
    if (digits > 0) number.remove_suffix(1);
    else if (std::isalpha(static_cast<unsigned char>(number.back())) != 0) {
      throw InputError(where(field), "expected a count whose suffix is T, B or M (1.2T, 8.03B, 350M), got \"" +
                                         std::string(text) + "\"");
    }
  }
  std::int64_t count = 0;
  const auto status = detail::parse_scaled_decimal(number, digits, count);
  if (status == detail::DecimalStatus::too_precise) {
    throw InputError(where(field), "a count of parameters is whole, got \"" + std::string(text) +
                                       "\" (8.03B is 8.03 billion, 350M 350 million, 1.2T 1.2 trillion)");
  }
  if (status == detail::DecimalStatus::overflow) {
    throw InputError(where(field), "expected a count that fits 64 bits, got \"" + std::string(text) + "\"");
  }
  if (status != detail::DecimalStatus::ok || count <= 0) {
    throw InputError(where(field),
                     "expected a positive count such as 8030261248, 8.03B, 350M or 1.2T, got \"" + std::string(text) + "\"");
  }
  return count;
}

std::vector<std::pair<std::string_view, std::string_view>> parse_key_values(std::string_view text,
                                                                            std::string_view field,
                                                                            std::string_view context) {
  std::vector<std::pair<std::string_view, std::string_view>> out;
  while (!text.empty()) {
    const auto comma = text.find(',');
    if (comma + 1 == text.size()) {  // "a=1,": as a list of numbers, a trailing comma names nothing
      throw InputError(where(field), std::string(context) + "a ',' with nothing after it: expected key=value");
    }
    const std::string_view item = text.substr(0, comma);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == item.size()) {
      throw InputError(where(field), std::string(context) + "expected key=value, got \"" + std::string(item) + "\"");
    }
    const std::string_view key = item.substr(0, eq);
    for (const auto& [seen, value] : out) {
      if (seen == key) {
        throw InputError(where(field), std::string(context) + "'" + std::string(key) + "' is given twice (" +
                                           std::string(key) + "=" + std::string(value) + " and " + std::string(item) +
                                           "): give it once");
      }
    }
    out.emplace_back(key, item.substr(eq + 1));
    if (comma == std::string_view::npos) break;
    text = text.substr(comma + 1);
  }
  return out;
}

}  // namespace kvsim
