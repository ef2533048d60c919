// Azure LLM inference traces, 2023 (Splitwise) and 2024 (DynamoLLM):
//   TIMESTAMP,ContextTokens,GeneratedTokens
//   2023-11-16 18:15:46.6805900,374,44
// Arrival is the time since the first (good) row, exact to the 100 ns the timestamps carry.
// The files have no request ids: a request's id is its row number among the data rows,
// from 1 (the header is not counted).
#include <charconv>
#include <cstring>

#include "civil_time.h"
#include "trace_formats.h"
#include "trace_read.h"

namespace kvsim::detail {
namespace {

bool digits(std::string_view text, std::size_t pos, std::size_t count, int& out) {
  if (pos + count > text.size()) return false;
  int value = 0;
  for (std::size_t i = pos; i < pos + count; ++i) {
    const char c = text[i];
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  out = value;
  return true;
}

// "YYYY-MM-DD" -> days since 1970-01-01.
bool parse_date(std::string_view text, std::int64_t& days) {
  int y = 0;
  int m = 0;
  int d = 0;
  if (text.size() < 10 || text[4] != '-' || text[7] != '-') return false;
  if (!digits(text, 0, 4, y) || !digits(text, 5, 2, m) || !digits(text, 8, 2, d)) return false;
  if (m < 1 || m > 12 || d < 1 || d > days_in_month(y, m)) return false;
  days = days_from_civil(y, m, d);
  return true;
}

// "HH:MM:SS[.fffffffff][Z|+HH:MM|-HH:MM]" (what follows the date and its separator) ->
// nanoseconds since midnight UTC, which may be negative or exceed a day after the offset.
bool parse_clock(std::string_view text, std::int64_t& ns) {
  int h = 0;
  int mi = 0;
  int s = 0;
  if (text.size() < 8 || text[2] != ':' || text[5] != ':') return false;
  if (!digits(text, 0, 2, h) || !digits(text, 3, 2, mi) || !digits(text, 6, 2, s)) return false;
  if (h > 23 || mi > 59 || s > 59) return false;
  std::int64_t frac_ns = 0;
  std::size_t pos = 8;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    int used = 0;
    const std::size_t first = pos;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      if (used < 9) {
        frac_ns = frac_ns * 10 + (text[pos] - '0');
        ++used;
      } else if (text[pos] != '0') {
        return false;  // finer than a nanosecond
      }
      ++pos;
    }
    if (pos == first) return false;
    for (; used < 9; ++used) frac_ns *= 10;
  }
  std::int64_t offset_s = 0;
  if (pos < text.size()) {
    const char zone = text[pos];
    if (zone == 'Z' && pos + 1 == text.size()) {
      // UTC
    } else if ((zone == '+' || zone == '-') && pos + 6 == text.size() && text[pos + 3] == ':') {
      int oh = 0;
      int om = 0;
      if (!digits(text, pos + 1, 2, oh) || !digits(text, pos + 4, 2, om) || oh > 23 || om > 59) return false;
      offset_s = (oh * 3600 + om * 60) * (zone == '+' ? 1 : -1);
    } else {
      return false;
    }
  }
  ns = (std::int64_t{h} * 3600 + mi * 60 + s - offset_s) * 1'000'000'000 + frac_ns;
  return true;
}

bool combine(std::int64_t days, std::int64_t clock_ns, std::int64_t& out) {
  std::int64_t day_ns = 0;
  return !__builtin_mul_overflow(days, std::int64_t{86'400'000'000'000}, &day_ns) &&
         !__builtin_add_overflow(day_ns, clock_ns, &out);
}

}  // namespace

bool parse_datetime_ns(std::string_view text, std::int64_t& ns_since_epoch, DateCache& cache) {
  if (text.size() < 19 || (text[10] != ' ' && text[10] != 'T')) return false;
  std::int64_t days = 0;
  if (cache.valid && std::memcmp(cache.date, text.data(), 10) == 0) {
    days = cache.days;
  } else {
    if (!parse_date(text, days)) return false;
    std::memcpy(cache.date, text.data(), 10);
    cache.days = days;
    cache.valid = true;
  }
  std::int64_t clock_ns = 0;
  if (!parse_clock(text.substr(11), clock_ns)) return false;
  return combine(days, clock_ns, ns_since_epoch);
}

bool parse_datetime_ns(std::string_view text, std::int64_t& ns_since_epoch) {
  DateCache cache;
  return parse_datetime_ns(text, ns_since_epoch, cache);
}

namespace {

class AzureReader final : public LengthColumnsReader {
 public:
  AzureReader(const std::string& path, const TraceOptions& options)
      : LengthColumnsReader(path, options, TraceFormat::azure, "Azure", {"TIMESTAMP", "ContextTokens", "GeneratedTokens"}) {}

 private:
  Row parse_line(std::string_view line, Request& out) override {
    if (!begin_row(line, out)) return Row::bad;
    const std::string_view stamp = time_text();
    std::int64_t absolute_ns = 0;
    if (!parse_datetime_ns(stamp, absolute_ns, dates_)) {
      return fail(label("TIMESTAMP"),
                  "expected a date and time such as \"2023-11-16 18:15:46.6805900\", got " + quote_text(stamp));
    }
    if (!parse_lengths(out)) return Row::bad;
    // Time starts at the first good row. (Were it a bad row's, the first request returned
    // could arrive before it, at a negative time that the arrival-order check, which
    // compares with the previous request, never sees.)
    if (!have_origin_) {
      origin_ns_ = absolute_ns;
      have_origin_ = true;
    }
    // Rows before the first one give negative times; only --sort accepts them (and then
    // shifts the whole trace so that it starts at 0).
    if (__builtin_sub_overflow(absolute_ns, origin_ns_, &out.arrival_ns)) {
      return fail(label("TIMESTAMP"), quote_text(stamp) + " is too far from the first row's time");
    }
    return Row::ok;
  }

  DateCache dates_;
  bool have_origin_ = false;
  std::int64_t origin_ns_ = 0;
};

}  // namespace

extern constinit const TraceFormatInfo kAzureFormat{
    TraceFormat::azure, "azure", TraceSyntax::csv, false, "Azure (TIMESTAMP,ContextTokens,GeneratedTokens)",
    [](const FirstRecord& first) { return header_has(first, "TIMESTAMP") && header_has(first, "ContextTokens"); },
    make_reader<AzureReader>};

}  // namespace kvsim::detail
