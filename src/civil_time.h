// Exact wall-clock datetimes for the importers: "2023-11-16 18:15:46.6805900" becomes
// integer nanoseconds since 1970-01-01 00:00:00 UTC, by integer arithmetic only, so the
// difference between two rows is exact across day, month and year boundaries.
#ifndef KVSIM_SRC_CIVIL_TIME_H_
#define KVSIM_SRC_CIVIL_TIME_H_

#include <cstdint>
#include <string_view>

namespace kvsim::detail {

// Days from 1970-01-01 to the proleptic Gregorian date y-m-d (negative before it).
// Howard Hinnant's days_from_civil. REQUIRES: 1 <= m <= 12, 1 <= d <= 31.
constexpr std::int64_t days_from_civil(std::int64_t y, int m, int d) {
  y -= m <= 2 ? 1 : 0;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const std::int64_t yoe = y - era * 400;                                      // [0, 399]
  const std::int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;    // [0, 365]
  const std::int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;              // [0, 146096]
  return era * 146097 + doe - 719468;
}

constexpr int days_in_month(std::int64_t y, int m) {
  constexpr int kDays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : kDays[m - 1];
}

// Parses "YYYY-MM-DD HH:MM:SS" with an optional fraction of up to 9 digits (more are
// accepted when they are zeros), 'T' instead of the space, and an optional zone suffix
// "Z" or "+HH:MM" / "-HH:MM" (applied, so the result is UTC). Returns false when `text`
// is not such a datetime or names an impossible date or time.
bool parse_datetime_ns(std::string_view text, std::int64_t& ns_since_epoch);

// The same, remembering the last date seen: consecutive rows of a trace share their date,
// and parsing it once per day instead of once per row is what keeps an importer fast.
struct DateCache {
  char date[10] = {};
  std::int64_t days = 0;
  bool valid = false;
};
bool parse_datetime_ns(std::string_view text, std::int64_t& ns_since_epoch, DateCache& cache);

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_CIVIL_TIME_H_
