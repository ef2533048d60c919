#include "kvsim/parse.h"

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
  if (detail::parse_scaled_decimal(text, 9, ppb) != detail::DecimalStatus::ok || ppb >= 1'000'000'000) {
    throw InputError(where(field),
                     "expected a fraction from 0 up to (not including) 1, got \"" + std::string(text) + "\"");
  }
  return ppb;
}

std::int64_t parse_parameter_count(std::string_view text, std::string_view field) {
  std::int64_t scale = 1;
  std::string_view number = text;
  if (!number.empty() && (number.back() == 'B' || number.back() == 'b')) {
    scale = 1'000'000'000;
    number.remove_suffix(1);
  } else if (!number.empty() && (number.back() == 'M' || number.back() == 'm')) {
    scale = 1'000'000;
    number.remove_suffix(1);
  }
  std::int64_t fixed = 0;  // value x 10^9
  if (detail::parse_scaled_decimal(number, 9, fixed) != detail::DecimalStatus::ok) {
    throw InputError(where(field),
                     "expected a count such as 8030261248, 8.03B or 350M, got \"" + std::string(text) + "\"");
  }
  if (scale == 1 && fixed % 1'000'000'000 != 0) {
    throw InputError(where(field),
                     "a count of parameters is whole, got \"" + std::string(text) + "\" (8.03B is 8.03 billion)");
  }
  const Wide value = Wide{fixed} * scale / 1'000'000'000;
  if (value <= 0 || value > Wide{std::numeric_limits<std::int64_t>::max()}) {
    throw InputError(where(field), "expected a positive count that fits 64 bits, got \"" + std::string(text) + "\"");
  }
  return static_cast<std::int64_t>(value);
}

std::vector<std::pair<std::string_view, std::string_view>> parse_key_values(std::string_view text,
                                                                            std::string_view field,
                                                                            std::string_view context) {
  std::vector<std::pair<std::string_view, std::string_view>> out;
  while (!text.empty()) {
    const auto comma = text.find(',');
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
