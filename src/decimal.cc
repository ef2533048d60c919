#include "decimal.h"

#include <limits>

namespace kvsim::detail {
namespace {

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

// out = out * 10 + digit, reporting overflow instead of wrapping.
bool push_digit(std::int64_t& out, int digit) {
  if (out > (kMax - digit) / 10) return false;
  out = out * 10 + digit;
  return true;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

DecimalStatus parse_scaled_decimal(std::string_view text, int scale, std::int64_t& out) {
  if (text.empty()) return DecimalStatus::empty;
  if (text.front() == '-') return DecimalStatus::negative;
  if (text.front() == '+') text.remove_prefix(1);
  const auto dot = text.find('.');
  const std::string_view whole = text.substr(0, dot);
  const std::string_view frac = dot == std::string_view::npos ? std::string_view{} : text.substr(dot + 1);
  if (whole.empty() && frac.empty()) return DecimalStatus::not_a_number;
  std::int64_t value = 0;
  for (char c : whole) {
    if (!is_digit(c)) return DecimalStatus::not_a_number;
    if (!push_digit(value, c - '0')) return DecimalStatus::overflow;
  }
  int used = 0;
  for (char c : frac) {
    if (!is_digit(c)) return DecimalStatus::not_a_number;
    if (used < scale) {
      if (!push_digit(value, c - '0')) return DecimalStatus::overflow;
      ++used;
    } else if (c != '0') {
      return DecimalStatus::too_precise;
    }
  }
  for (; used < scale; ++used) {
    if (!push_digit(value, 0)) return DecimalStatus::overflow;
  }
  out = value;
  return DecimalStatus::ok;
}

DecimalStatus parse_non_negative(std::string_view text, std::int64_t& out) {
  if (text.empty()) return DecimalStatus::empty;
  if (text.front() == '-') return DecimalStatus::negative;
  std::int64_t value = 0;
  bool overflow = false;  // only once every character is a digit: "99...9x" is not a number
  for (char c : text) {
    if (!is_digit(c)) return DecimalStatus::not_a_number;
    overflow = overflow || !push_digit(value, c - '0');
  }
  if (overflow) return DecimalStatus::overflow;
  out = value;
  return DecimalStatus::ok;
}

std::string describe(DecimalStatus status, const std::string& quoted) {
  switch (status) {
    case DecimalStatus::ok: return "ok";
    case DecimalStatus::empty: return "expected a value, got nothing";
    case DecimalStatus::not_a_number: return "expected a non-negative decimal number (no exponent), got " + quoted;
    case DecimalStatus::negative: return "expected a non-negative number, got a negative one: " + quoted;
    case DecimalStatus::too_precise: return quoted + " has more decimal places than the unit can hold exactly";
    case DecimalStatus::overflow: return quoted + " is too large (overflows 64 bits)";
  }
  return "invalid";
}

}  // namespace kvsim::detail
