// The trace format registry (trace_formats.h), detection, open_trace() and the sorting
// wrapper.
#include <sys/stat.h>

#include <algorithm>
#include <limits>
#include <string>
#include <nlohmann/json.hpp>

#include "kvsim/error.h"
#include "kvsim/option_names.h"
#include "kvsim/trace.h"
#include "kvsim/units.h"
#include "decimal.h"
#include "trace_formats.h"
#include "trace_read.h"

namespace kvsim {
namespace {

// The most header names detection looks at: more than any format has, and more than a CSV
// reader accepts (256), so that a header of millions of commas costs no more than its line.
constexpr std::size_t kMaxDetectedNames = 257;

// Header names, split on commas, unquoted and trimmed: enough to recognise a format.
std::vector<std::string> header_names(std::string_view line) {
  std::vector<std::string> names;
  std::string current;
  const auto end_name = [&] {
    while (!current.empty() && (current.back() == ' ' || current.back() == '\t')) current.pop_back();
    names.push_back(current);
    current.clear();
  };
  for (char c : line) {
    if (names.size() == kMaxDetectedNames) return names;
    if (c == ',') {
      end_name();
    } else if (c != '"' && !((c == ' ' || c == '\t') && current.empty())) {
      current += c;
    }
  }
  end_name();
  return names;
}

// The keys of a JSON object (values null), read without building the values: a first record
// holding a million token ids costs its line, not a document tree many times its size. Only
// the keys identify a format. False when `line` is not one well-formed JSON object.
class TopLevelKeys : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit TopLevelKeys(nlohmann::json& keys) : keys_(keys) {}
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return depth_ > 0; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return ++depth_, true; }
  bool key(string_t& name) override {
    if (depth_ == 1) keys_[name] = nullptr;
    return true;
  }
  bool end_object() override { return --depth_, true; }
  bool start_array(std::size_t) override { return depth_++ > 0; }
  bool end_array() override { return --depth_, true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  nlohmann::json& keys_;
  int depth_ = 0;
};

bool top_level_keys(std::string_view line, nlohmann::json& keys) {
  keys = nlohmann::json::object();
  TopLevelKeys sax(keys);
  return nlohmann::json::sax_parse(line, &sax) && keys.is_object();
}

// Wraps a reader of an unordered trace: reads it all, sorts by arrival (stable), and
// replays it. Importers that measure time from the first row (Azure) may then start
// below zero; the whole trace is shifted so that its earliest arrival is 0.
class SortedReader final : public TraceReader {
 public:
  explicit SortedReader(std::unique_ptr<TraceReader> inner) : TraceReader(inner->path()), format_(inner->format()) {
    Request r;
    while (inner->next(r)) requests_.push_back(r);
    total_bytes_ = inner->total_bytes();
    dropped_ = inner->dropped();
    std::stable_sort(requests_.begin(), requests_.end(),
                     [](const Request& a, const Request& b) { return a.arrival_ns < b.arrival_ns; });
    if (!requests_.empty() && requests_.front().arrival_ns < 0) {
      const std::int64_t shift = -requests_.front().arrival_ns;
      // A trace spanning more than the 64-bit nanoseconds (about 292 years) cannot start at
      // 0: refused rather than wrapped to negative times.
      const auto shifted = [&](std::int64_t& t, const Request& q) {
        if (__builtin_add_overflow(t, shift, &t)) {
          throw InputError(Location{path(), 0, "request '" + q.id + "'"},
                           "the trace spans more than the largest representable time (" +
                               std::to_string(std::numeric_limits<std::int64_t>::max()) +
                               " ns, about 292 years) from its earliest arrival");
        }
      };
      for (auto& q : requests_) {
        shifted(q.arrival_ns, q);
        for (auto* t : {&q.cancel_ns, &q.start_ns, &q.first_token_ns, &q.finish_ns}) {
          if (*t) shifted(**t, q);
        }
      }
    }
  }

  bool next(Request& out) override {
    if (next_ == requests_.size()) return false;
    out = std::move(requests_[next_++]);
    return true;
  }
  TraceFormat format() const override { return format_; }
  std::int64_t bytes_read() const override { return total_bytes_; }
  std::int64_t total_bytes() const override { return total_bytes_; }
  std::int64_t dropped() const override { return dropped_; }

 private:
  TraceFormat format_;
  std::vector<Request> requests_;
  std::size_t next_ = 0;
  std::int64_t total_bytes_ = 0;
  std::int64_t dropped_ = 0;
};

constexpr std::int64_t kUnscaledPpb = 1'000'000'000;

// TraceOptions' load scaling over another reader: the window, the count, then the rate
// scale (the rules are in kvsim/trace.h). It streams: memory does not grow with the trace.
class LoadScaleReader final : public TraceReader {
 public:
  LoadScaleReader(std::unique_ptr<TraceReader> inner, const TraceOptions& options)
      : TraceReader(inner->path()), inner_(std::move(inner)), options_(options) {}

  bool next(Request& out) override {
    if (done_) return false;
    while (true) {
      if (options_.max_requests > 0 && kept_ == options_.max_requests) return finish();
      if (!inner_->next(out)) return finish();
      if (read_ == 0) first_arrival_ns_ = out.arrival_ns;
      ++read_;
      last_arrival_ns_ = out.arrival_ns;
      // Arrivals never go backwards here (the inner reader refuses it, or sorted them).
      if (options_.window_to_ns != std::numeric_limits<std::int64_t>::max() &&
          out.arrival_ns >= options_.window_to_ns) {
        return finish();
      }
      if (out.arrival_ns < options_.window_from_ns) continue;
      ++kept_;
      if (options_.rate_scale_ppb != kUnscaledPpb) scale(out);
      return true;
    }
  }
  TraceFormat format() const override { return inner_->format(); }
  // With a count, the share of it kept so far, when that is further on than the bytes: the
  // first N requests of a long file are a small part of its bytes.
  std::int64_t bytes_read() const override {
    if (done_) return inner_->total_bytes();
    const std::int64_t total = inner_->total_bytes();
    std::int64_t bytes = inner_->bytes_read();
    if (options_.max_requests > 0 && total > 0) {
      bytes = std::max(bytes, static_cast<std::int64_t>(static_cast<double>(total) * static_cast<double>(kept_) /
                                                        static_cast<double>(options_.max_requests)));
    }
    return std::min(bytes, total);
  }
  std::int64_t total_bytes() const override { return inner_->total_bytes(); }
  std::int64_t dropped() const override { return inner_->dropped(); }

 private:
  bool finish() {
    done_ = true;
    if (kept_ == 0) {
      // Appended piece by piece: GCC 12 warns (-Wrestrict, falsely) on "literal" + string.
      std::string window;
      if (options_.window_to_ns == std::numeric_limits<std::int64_t>::max()) {
        window.append("at or after ").append(format_seconds(options_.window_from_ns)).append(" s");
      } else {
        window.append("in [").append(format_seconds(options_.window_from_ns)).append(" s, ");
        window.append(format_seconds(options_.window_to_ns)).append(" s)");
      }
      throw InputError(Location{path(), 0, kOptTimeWindow},
                       "keeps no request: no arrival " + window + " (the arrivals read run from " +
                           format_seconds(first_arrival_ns_) + " s to " + format_seconds(last_arrival_ns_) + " s)");
    }
    return false;
  }

  void scale(Request& r) const {
    const Location where{path(), 0, "request '" + r.id + "'"};
    if (r.start_ns || r.first_token_ns || r.finish_ns) {
      throw InputError(where, std::string("carries measured start/first_token/finish times, which ") + kOptRateScale +
                                  " cannot scale (they were measured at the trace's own load); replay it at its "
                                  "own rate, or from a trace without them");
    }
    // floor(t * 10^9 / ppb + 1/2) = floor((2 t 10^9 + ppb) / (2 ppb)), in 128 bits.
    __extension__ typedef __int128 Wide;
    const Wide t = r.arrival_ns;
    const Wide ppb = options_.rate_scale_ppb;
    const Wide scaled = (2 * t * kUnscaledPpb + ppb) / (2 * ppb);
    std::int64_t arrival = 0;
    if (scaled > std::numeric_limits<std::int64_t>::max() ||
        (r.cancel_ns && __builtin_add_overflow(static_cast<std::int64_t>(scaled), *r.cancel_ns - r.arrival_ns,
                                               &arrival))) {
      throw InputError(where, std::string(kOptRateScale) + " moves it past the largest representable time (" +
                                  std::to_string(std::numeric_limits<std::int64_t>::max()) + " ns, about 292 years)");
    }
    if (r.cancel_ns) *r.cancel_ns = arrival;  // the same patience after the new arrival
    r.arrival_ns = static_cast<std::int64_t>(scaled);
  }

  std::unique_ptr<TraceReader> inner_;
  TraceOptions options_;
  std::int64_t read_ = 0;
  std::int64_t kept_ = 0;
  std::int64_t first_arrival_ns_ = 0;
  std::int64_t last_arrival_ns_ = 0;
  bool done_ = false;
};

constexpr std::string_view kAutomatic = "auto";

// Every format and what identifies it, for messages: the native ones, then the CSV
// importers, then the JSONL ones.
std::string known_formats() {
  std::string out;
  const auto add = [&out](const detail::TraceFormatInfo& f) {
    if (!out.empty()) out += ", ";
    out.append(f.summary);
  };
  for (const auto& f : detail::trace_formats()) {
    if (f.native) add(f);
  }
  for (const auto syntax : {detail::TraceSyntax::csv, detail::TraceSyntax::jsonl}) {
    for (const auto& f : detail::trace_formats()) {
      if (!f.native && f.syntax == syntax) add(f);
    }
  }
  return out;
}

// The format of a first line of `syntax`: the importers in table order, then the native one.
const detail::TraceFormatInfo* detect(detail::TraceSyntax syntax, const detail::FirstRecord& first) {
  for (const bool native : {false, true}) {
    for (const auto& f : detail::trace_formats()) {
      if (f.syntax == syntax && f.native == native && f.detect(first)) return &f;
    }
  }
  return nullptr;
}

}  // namespace

namespace detail {

// The registry, kvsim/trace_formats.def: one line per format, naming a TraceFormatInfo
// defined `extern constinit const` beside its reader (seen from here, and set before any
// code runs). Declared here.
#define KVSIM_TRACE_FORMAT(format, row) extern const TraceFormatInfo row;
#include "kvsim/trace_formats.def"
#undef KVSIM_TRACE_FORMAT

std::span<const TraceFormatInfo> trace_formats() {
  static const TraceFormatInfo formats[] = {
#define KVSIM_TRACE_FORMAT(format, row) row,
#include "kvsim/trace_formats.def"
#undef KVSIM_TRACE_FORMAT
  };
  return formats;
}

bool record_has(const FirstRecord& first, const char* key) { return first.record->contains(key); }

const TraceFormatInfo* find_trace_format(TraceFormat format) {
  for (const auto& f : trace_formats()) {
    if (f.format == format) return &f;
  }
  return nullptr;
}

}  // namespace detail

std::string_view trace_format_name(TraceFormat format) {
  if (format == TraceFormat::automatic) return kAutomatic;
  const auto* f = detail::find_trace_format(format);
  return f != nullptr ? f->name : "?";
}

TraceFormat parse_trace_format(std::string_view text, std::string_view field) {
  if (text == kAutomatic) return TraceFormat::automatic;
  for (const auto& f : detail::trace_formats()) {
    if (f.name == text) return f.format;
  }
  std::string known;
  for (const auto name : trace_format_names()) {
    if (!known.empty()) known += ", ";
    known.append(name);
  }
  throw InputError(Location{"", 0, std::string(field)},
                   "unknown trace format \"" + std::string(text) + "\" (known: " + known + ")");
}

std::vector<std::string_view> trace_format_names() {
  std::vector<std::string_view> out{kAutomatic};
  for (const auto& f : detail::trace_formats()) out.push_back(f.name);
  return out;
}

namespace {

// The format of the trace `lines` reads, from its first non-blank line.
TraceFormat detect_format(detail::LineReader& lines, const std::string& path) {
  const auto first = detail::first_line(lines);
  if (first.line == 0) throw InputError(Location{path, 0, ""}, "empty file: no header and no requests");
  const Location where{path, first.line, ""};
  const std::string_view line = first.text;
  // A compressed file's magic number: say what it is rather than quote its bytes.
  if (line.starts_with("\x1F\x8B") || line.starts_with("\x28\xB5\x2F\xFD") || (line.starts_with("BZh") && line.size() > 3 && line[3] >= '1' && line[3] <= '9') ||
      line.starts_with("\xFD" "7zXZ")) {
    throw InputError(where, "a compressed file (gzip, zstd, bzip2 or xz): kvsim reads traces as text; decompress it "
                            "first, or pipe it in (e.g. zcat FILE | kvsim ... -)");
  }
  const auto start = line.find_first_not_of(" \t");
  if (line[start] == '{') {
    nlohmann::json record;
    if (!top_level_keys(line, record)) {
      throw InputError(where, "malformed JSON in the first record: cannot tell the trace's format (" +
                                  known_formats() + ")");
    }
    if (const auto* f = detect(detail::TraceSyntax::jsonl, detail::FirstRecord{nullptr, &record})) return f->format;
    throw InputError(where, "unrecognised JSONL trace: the first record's fields match no known format (" +
                                known_formats() + "); name one with " + kOptFormat);
  }
  const auto names = header_names(line);
  if (const auto* f = detect(detail::TraceSyntax::csv, detail::FirstRecord{&names, nullptr})) return f->format;
  throw InputError(where, "unrecognised trace format: the first line " + detail::quote_text(line) +
                              " matches none of " + known_formats() + "; name one with " + kOptFormat);
}

}  // namespace

TraceFormat detect_trace_format(const std::string& path) {
  detail::LineReader lines(path);
  return detect_format(lines, path);
}

std::unique_ptr<TraceReader> open_trace(const std::string& path, const TraceOptions& options) {
  std::unique_ptr<TraceReader> reader;
  if (options.format == TraceFormat::automatic) {
    // Detection and reading share one open file: a pipe is read once.
    detail::LineReader lines(path);
    lines.keep_for_rewind();
    const auto* f = detail::find_trace_format(detect_format(lines, path));
    check(f != nullptr, "open_trace: detection returned an unregistered format");
    lines.rewind();
    const detail::AdoptedLines adopted(path, std::move(lines));
    reader = f->make(path, options);
  } else {
    const auto* f = detail::find_trace_format(options.format);
    check(f != nullptr, "open_trace: no reader for the format");
    reader = f->make(path, options);
  }
  if (options.sort) reader = std::make_unique<SortedReader>(std::move(reader));
  if (options.scales_load()) reader = std::make_unique<LoadScaleReader>(std::move(reader), options);
  return reader;
}

std::int64_t parse_rate_scale_ppb(std::string_view text, std::string_view field) {
  std::int64_t ppb = 0;
  const auto status = detail::parse_scaled_decimal(text, 9, ppb);
  if (status != detail::DecimalStatus::ok || ppb <= 0) {
    throw InputError(Location{"", 0, std::string(field)},
                     "expected a positive number with at most 9 decimal places (2 doubles the arrival rate, 0.5 "
                     "halves it), got " + detail::quote_text(text));
  }
  return ppb;
}

void parse_time_window(std::string_view text, std::string_view field, TraceOptions& options) {
  const auto dots = text.find("..");
  if (dots == std::string_view::npos || text.size() == 2) {
    throw InputError(Location{"", 0, std::string(field)},
                     "expected FROM..TO with durations, either end optional (10min..20min, ..30s, 5min..), got " +
                         detail::quote_text(text));
  }
  const auto from = text.substr(0, dots);
  const auto to = text.substr(dots + 2);
  const std::int64_t from_ns = from.empty() ? 0 : parse_duration_ns(from, field);
  const std::int64_t to_ns = to.empty() ? std::numeric_limits<std::int64_t>::max() : parse_duration_ns(to, field);
  if (from_ns >= to_ns) {
    throw InputError(Location{"", 0, std::string(field)},
                     "FROM must be before TO, got " + detail::quote_text(text) + " (" + format_seconds(from_ns) +
                         " s to " + format_seconds(to_ns) + " s): the window would keep no request");
  }
  options.window_from_ns = from_ns;
  options.window_to_ns = to_ns;
}

RequestVectorReader::RequestVectorReader(std::vector<Request> requests, std::string path)
    : TraceReader(std::move(path)),
      requests_(std::make_shared<const std::vector<Request>>(std::move(requests))),
      format_(TraceFormat::native_csv),
      total_bytes_(static_cast<std::int64_t>(requests_->size())) {}

RequestVectorReader::RequestVectorReader(std::shared_ptr<const std::vector<Request>> requests, std::string path,
                                         TraceFormat format, std::int64_t total_bytes)
    : TraceReader(std::move(path)), requests_(std::move(requests)), format_(format), total_bytes_(total_bytes) {}

bool RequestVectorReader::next(Request& out) {
  if (next_ == requests_->size()) return false;
  out = (*requests_)[next_++];
  return true;
}

std::int64_t RequestVectorReader::bytes_read() const {
  const auto count = static_cast<std::int64_t>(requests_->size());
  return count == 0 ? total_bytes_ : total_bytes_ * static_cast<std::int64_t>(next_) / count;
}

TraceInMemory::TraceInMemory(TraceReader& source) : path_(source.path()), format_(source.format()) {
  auto requests = std::make_shared<std::vector<Request>>();
  Request r;
  while (source.next(r)) requests->push_back(r);
  total_bytes_ = source.bytes_read();
  requests_ = std::move(requests);
}

std::unique_ptr<TraceReader> TraceInMemory::open() const {
  return std::make_unique<RequestVectorReader>(requests_, path_, format_, total_bytes_);
}

std::unique_ptr<TraceReader> TraceInMemory::open(const TraceOptions& load) const {
  auto reader = open();
  if (load.scales_load()) reader = std::make_unique<LoadScaleReader>(std::move(reader), load);
  return reader;
}

bool trace_can_be_reread(const std::string& path) {
  if (path == kStandardInput) return false;  // even beside a file named "-"
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

std::vector<Request> read_trace(const std::string& path, const TraceOptions& options) {
  auto reader = open_trace(path, options);
  std::vector<Request> out;
  Request r;
  while (reader->next(r)) out.push_back(r);
  return out;
}

}  // namespace kvsim
