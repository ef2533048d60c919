#include "kvsim/units.h"

#include <array>
#include <cctype>
#include <limits>
#include <string>

#include "decimal.h"
#include "kvsim/error.h"

namespace kvsim {
namespace {

__extension__ typedef __int128 Wide;  // exact products of two int64 values

std::int64_t pow10(int n) {
  std::int64_t p = 1;
  while (n-- > 0) p *= 10;
  return p;
}

std::string quoted(std::string_view text) { return "\"" + std::string(text) + "\""; }

struct NamedUnit {
  std::string_view name;
  std::int64_t scale;
};

// Parses "<decimal><spaces?><unit>" where unit is one of `units` (matched case-sensitively
// first, then case-insensitively) and returns value * unit.scale, rounded down.
std::int64_t parse_with_unit(std::string_view text, std::string_view field,
                             const NamedUnit* units, std::size_t count, std::string_view expected,
                             bool allow_bare, bool exact) {
  std::size_t split = text.size();
  while (split > 0 && std::isalpha(static_cast<unsigned char>(text[split - 1]))) --split;
  std::string_view number = text.substr(0, split);
  const std::string_view unit = text.substr(split);
  while (!number.empty() && number.back() == ' ') number.remove_suffix(1);
  std::int64_t scale = 0;
  if (unit.empty()) {
    if (allow_bare) scale = 1;
  } else {
    for (std::size_t i = 0; i < count; ++i) {
      if (units[i].name == unit) scale = units[i].scale;
    }
  }
  const Location where{"", 0, std::string(field)};
  if (scale == 0) throw InputError(where, "expected " + std::string(expected) + ", got " + quoted(text));
  // The whole part and up to 9 fractional digits are read apart, each exactly, and scaled
  // with 128-bit arithmetic: reading "12345678901" as 12345678901 x 10^9 first would refuse
  // every plain byte count above 9,223,372,036 (torch.cuda.mem_get_info() prints such numbers).
  constexpr int kFrac = 9;
  const std::size_t dot = number.find('.');
  const std::string_view whole_text = number.substr(0, dot);
  const std::string_view frac_text = dot == std::string_view::npos ? std::string_view{} : number.substr(dot);
  std::int64_t int_part = 0;
  std::int64_t frac_fixed = 0;
  auto status = detail::DecimalStatus::ok;
  if (whole_text.empty() || whole_text == "+") {
    // "", "+", "." and "+." have no digits: parse_scaled_decimal says so.
    status = frac_text.size() <= 1 ? detail::parse_scaled_decimal(number, kFrac, frac_fixed) : detail::DecimalStatus::ok;
  } else {
    status = detail::parse_scaled_decimal(whole_text, 0, int_part);
  }
  if (status == detail::DecimalStatus::ok && frac_text.size() > 1) {
    // ".5" alone is "0.5"; "7." is 7.
    status = detail::parse_scaled_decimal(frac_text, kFrac, frac_fixed);
  }
  if (status != detail::DecimalStatus::ok) {
    throw InputError(where, detail::describe(status, quoted(text)));
  }
  const Wide product = Wide{int_part} * scale * pow10(kFrac) + Wide{frac_fixed} * scale;
  const Wide whole = product / pow10(kFrac);
  if (exact && whole * pow10(kFrac) != product) {
    throw InputError(where, quoted(text) + " is finer than 1 ns");
  }
  // A fraction of a larger unit rounds down to the unit of 1 (74.3GiB); a fraction of the
  // unit of 1 itself (1.5 bytes) is a mistake, not a number to truncate.
  if (scale == 1 && frac_fixed != 0) {
    const std::string unit = units[0].name == "B" ? "bytes" : std::string(units[0].name);
    throw InputError(where, quoted(text) + " is not a whole number of " + unit);
  }
  if (whole > std::numeric_limits<std::int64_t>::max()) {
    throw InputError(where, quoted(text) + " is too large (overflows 64 bits)");
  }
  return static_cast<std::int64_t>(whole);
}

}  // namespace

std::string format_ratio(std::int64_t bytes, std::int64_t unit, int decimals) {
  const bool negative = bytes < 0;
  const Wide scaled = (negative ? -Wide{bytes} : Wide{bytes}) * pow10(decimals);
  const Wide rounded = (scaled + unit / 2) / unit;  // half away from zero
  const Wide p = pow10(decimals);
  std::string out = negative && rounded != 0 ? "-" : "";
  out += std::to_string(static_cast<std::int64_t>(rounded / p));
  if (decimals > 0) {
    std::string frac = std::to_string(static_cast<std::int64_t>(rounded % p));
    out += '.' + std::string(static_cast<std::size_t>(decimals) - frac.size(), '0') + frac;
  }
  return out;
}

std::string format_gib(std::int64_t bytes, int decimals) {
  return format_ratio(bytes, kBytesPerGiB, decimals) + " GiB";
}

std::string format_gb(std::int64_t bytes, int decimals) {
  return format_ratio(bytes, kBytesPerGB, decimals) + " GB";
}

std::string with_commas(std::int64_t value) {
  // The magnitude as unsigned, so that INT64_MIN does not overflow on negation.
  const auto magnitude = value < 0 ? 0 - static_cast<std::uint64_t>(value) : static_cast<std::uint64_t>(value);
  const std::string digits = std::to_string(magnitude);
  std::string out = value < 0 ? "-" : "";
  const std::size_t lead = digits.size() % 3 == 0 ? 3 : digits.size() % 3;
  out.append(digits, 0, lead);
  for (std::size_t i = lead; i < digits.size(); i += 3) {
    out += ',';
    out.append(digits, i, 3);
  }
  return out;
}

std::string format_seconds(std::int64_t ns, int decimals) {
  return format_ratio(ns, kNsPerSecond, decimals);
}

std::int64_t parse_byte_size(std::string_view text, std::string_view field) {
  static constexpr std::array<NamedUnit, 18> kUnits{{
      {"B", 1},
      {"KB", 1'000},
      {"MB", 1'000'000},
      {"GB", 1'000'000'000},
      {"TB", 1'000'000'000'000},
      {"KiB", std::int64_t{1} << 10},
      {"MiB", std::int64_t{1} << 20},
      {"GiB", std::int64_t{1} << 30},
      {"TiB", std::int64_t{1} << 40},
      {"kB", 1'000},
      {"k", 1'000},
      {"K", 1'000},
      {"M", 1'000'000},
      {"G", 1'000'000'000},
      {"T", 1'000'000'000'000},
      {"Ki", std::int64_t{1} << 10},
      {"Mi", std::int64_t{1} << 20},
      {"Gi", std::int64_t{1} << 30},
  }};
  return parse_with_unit(text, field, kUnits.data(), kUnits.size(),
                         "a byte size such as 80GB, 74.5GiB or 123456789", true, false);
}

std::int64_t parse_duration_ns(std::string_view text, std::string_view field) {
  static constexpr std::array<NamedUnit, 6> kUnits{{
      {"ns", 1},
      {"us", kNsPerUs},
      {"ms", kNsPerMs},
      {"s", kNsPerSecond},
      {"min", 60 * kNsPerSecond},
      {"h", 3600 * kNsPerSecond},
  }};
  return parse_with_unit(text, field, kUnits.data(), kUnits.size(),
                         "a duration such as 250ms, 1.5s or 20us", false, true);
}

std::int64_t checked_mul(std::int64_t a, std::int64_t b, std::string_view what) {
  std::int64_t out = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &out)) {
    throw InputError(std::string(what) + " overflows 64 bits");
  }
  return out;
}

std::int64_t checked_add(std::int64_t a, std::int64_t b, std::string_view what) {
  std::int64_t out = 0;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &out)) {
    throw InputError(std::string(what) + " overflows 64 bits");
  }
  return out;
}

}  // namespace kvsim
