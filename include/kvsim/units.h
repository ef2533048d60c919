// Units: bytes and time stay integers everywhere inside kvsim.
//
// Byte counts are std::int64_t and are converted to GiB (2^30) or GB (10^9) only when
// printed, by the functions here, which round exactly (integer arithmetic, half away from
// zero) and always name the unit. Simulated time is integer nanoseconds.
#ifndef KVSIM_UNITS_H_
#define KVSIM_UNITS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace kvsim {

inline constexpr std::int64_t kBytesPerGiB = std::int64_t{1} << 30;
inline constexpr std::int64_t kBytesPerGB = 1'000'000'000;
inline constexpr std::int64_t kNsPerUs = 1'000;
inline constexpr std::int64_t kNsPerMs = 1'000'000;
inline constexpr std::int64_t kNsPerSecond = 1'000'000'000;

// `bytes / unit` rounded half away from zero to `decimals` places, as text without a unit:
// format_ratio(4026531840, kBytesPerGiB, 2) == "3.75". Exact for every int64 input.
std::string format_ratio(std::int64_t bytes, std::int64_t unit, int decimals);

// "3.75 GiB", "4.03 GB": the number of format_ratio followed by the unit's name.
std::string format_gib(std::int64_t bytes, int decimals = 2);
std::string format_gb(std::int64_t bytes, int decimals = 2);

// 4026531840 -> "4,026,531,840".
std::string with_commas(std::int64_t value);

// Nanoseconds as seconds with `decimals` places: 1500000000 -> "1.500" (decimals = 3).
std::string format_seconds(std::int64_t ns, int decimals = 3);

// Parses a byte size: a plain integer ("12345"), or a decimal number followed by a unit
// B, KB, MB, GB, TB (powers of 10) or KiB, MiB, GiB, TiB (powers of 2), with or without a
// space: "80GB", "74.5 GiB". Fractional bytes are rounded down. Throws InputError naming
// `field` on anything else, on negatives and on values that overflow 64 bits.
std::int64_t parse_byte_size(std::string_view text, std::string_view field);

// Parses a duration: a decimal number with a unit ns, us, ms, s, min, h ("250ms", "1.5s").
// Throws InputError naming `field` when malformed, negative, or finer than 1 ns.
std::int64_t parse_duration_ns(std::string_view text, std::string_view field);

// a * b and a + b for non-negative operands, throwing InputError("... overflows 64 bits",
// naming `what`) instead of wrapping.
std::int64_t checked_mul(std::int64_t a, std::int64_t b, std::string_view what);
std::int64_t checked_add(std::int64_t a, std::int64_t b, std::string_view what);

// ceil(a / b) for a >= 0, b > 0, in the wider of the two integer types (128-bit included),
// exact over the whole range: no a + b - 1, which overflows near the type's maximum.
template <typename A, typename B>
constexpr std::common_type_t<A, B> ceil_div(A a, B b) {
  using T = std::common_type_t<A, B>;
  return static_cast<T>(a) / static_cast<T>(b) + (static_cast<T>(a) % static_cast<T>(b) != 0 ? 1 : 0);
}

}  // namespace kvsim

#endif  // KVSIM_UNITS_H_
