#include "trace_read.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include <sys/stat.h>
#include <unistd.h>

#include "kvsim/option_names.h"
#include "kvsim/units.h"
#include "trace_native.h"

namespace kvsim::detail {
namespace {

// Large enough that a read costs little per row; small enough to stay in cache-friendly range.
constexpr std::size_t kInitialBuffer = std::size_t{1} << 20;

bool is_blank(std::string_view line) {
  for (char c : line) {
    if (c != ' ' && c != '\t') return false;
  }
  return true;
}

// 64 MiB, or 100 bytes (a limit a test sets).
std::string limit_text(std::size_t bytes) {
  return bytes % (std::size_t{1} << 20) == 0 ? std::to_string(bytes >> 20) + " MiB" : std::to_string(bytes) + " bytes";
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// LineReader

LineReader::LineReader(const std::string& path, std::size_t max_line_bytes)
    : path_(path), max_line_bytes_(max_line_bytes) {
  if (path == kStandardInput) {
    // A duplicate of standard input, so that closing this reader leaves it open.
    const int fd = ::dup(STDIN_FILENO);
    file_ = fd >= 0 ? ::fdopen(fd, "rb") : nullptr;
    if (fd >= 0 && file_ == nullptr) ::close(fd);
  } else {
    file_ = std::fopen(path.c_str(), "rb");
  }
  if (file_ == nullptr) {
    throw InputError(Location{path, 0, ""}, std::string("cannot open: ") + std::strerror(errno));
  }
  // The size of a regular file only: a pipe or a device has none (and seeking one could lose
  // what it holds).
  struct stat info {};
  const bool stated = ::fstat(::fileno(file_), &info) == 0;
  if (stated && S_ISDIR(info.st_mode)) {
    std::fclose(file_);
    file_ = nullptr;
    throw InputError(Location{path, 0, ""}, "is a directory, not a file");
  }
  if (stated && S_ISREG(info.st_mode)) total_ = info.st_size;
  // A file smaller than the buffer fits whole in one just large enough (one more byte, so
  // that the read which finds the end does not have to grow it): detecting a format and
  // reading a small file then costs kilobytes, not 2 MiB (which dominated fuzzing).
  capacity_ = total_ > 0 ? std::min(kInitialBuffer, static_cast<std::size_t>(total_) + 1) : kInitialBuffer;
  capacity_ = std::min(capacity_, max_line_bytes_ + 1);
  buffer_ = std::make_unique_for_overwrite<char[]>(capacity_);
}

LineReader::LineReader(LineReader&& other) noexcept
    : path_(std::move(other.path_)),
      file_(std::exchange(other.file_, nullptr)),
      buffer_(std::move(other.buffer_)),
      capacity_(other.capacity_),
      max_line_bytes_(other.max_line_bytes_),
      begin_(other.begin_),
      end_(other.end_),
      eof_(other.eof_),
      terminated_(other.terminated_),
      keeping_(other.keeping_),
      line_number_(other.line_number_),
      consumed_(other.consumed_),
      total_(other.total_) {}

LineReader::~LineReader() {
  if (file_ != nullptr) std::fclose(file_);
}

void LineReader::rewind() {
  check(keeping_, "LineReader::rewind without keep_for_rewind");
  keeping_ = false;
  begin_ = 0;
  line_number_ = 0;
  consumed_ = 0;
  terminated_ = true;
}

bool LineReader::refill() {
  // Keep the unread tail at the front (everything, while keeping for a rewind), and grow
  // only when one line fills the buffer.
  if (begin_ > 0 && !keeping_) {
    const std::size_t unread = end_ - begin_;
    std::memmove(buffer_.get(), buffer_.get() + begin_, unread);
    begin_ = 0;
    end_ = unread;
  }
  if (end_ == capacity_) {
    // The buffer holds one line and one byte more than the limit, so that a line of exactly
    // the limit still finds its line break.
    if (capacity_ > max_line_bytes_) {
      throw InputError(Location{path_, line_number_ + 1, ""},
                       "line longer than the limit of " + limit_text(max_line_bytes_) +
                           " (kvsim reads a trace a line at a time: is this a trace?)");
    }
    const std::size_t grown = std::min(capacity_ * 2, max_line_bytes_ + 1);
    auto bigger = std::make_unique_for_overwrite<char[]>(grown);
    std::memcpy(bigger.get(), buffer_.get(), end_);
    buffer_ = std::move(bigger);
    capacity_ = grown;
  }
  const std::size_t got = std::fread(buffer_.get() + end_, 1, capacity_ - end_, file_);
  if (got == 0) {
    if (std::ferror(file_)) {
      throw InputError(Location{path_, line_number_ + 1, ""}, std::string("read error: ") + std::strerror(errno));
    }
    eof_ = true;
    return false;
  }
  end_ += got;
  return true;
}

namespace {
thread_local const std::string* t_adopted_path = nullptr;
thread_local LineReader* t_adopted = nullptr;
}  // namespace

AdoptedLines::AdoptedLines(const std::string& path, LineReader lines) {
  check(t_adopted == nullptr, "AdoptedLines nested");
  t_adopted_path = &path;
  t_adopted = new LineReader(std::move(lines));
}

AdoptedLines::~AdoptedLines() {
  delete t_adopted;
  t_adopted = nullptr;
  t_adopted_path = nullptr;
}

LineReader open_lines(const std::string& path) {
  if (t_adopted != nullptr && *t_adopted_path == path) {
    LineReader taken(std::move(*t_adopted));
    delete t_adopted;
    t_adopted = nullptr;
    return taken;
  }
  return LineReader(path);
}

bool LineReader::next(std::string_view& line) {
  for (;;) {
    const char* start = buffer_.get() + begin_;
    const std::size_t avail = end_ - begin_;
    const void* newline = avail > 0 ? std::memchr(start, '\n', avail) : nullptr;
    std::size_t length = 0;
    if (newline != nullptr) {
      length = static_cast<std::size_t>(static_cast<const char*>(newline) - start);
      begin_ += length + 1;
      consumed_ += static_cast<std::int64_t>(length + 1);
      terminated_ = true;
    } else if (eof_ || (!refill() && eof_)) {
      if (end_ == begin_) return false;
      // The last line, without a line break. refill() may have moved it: look again.
      start = buffer_.get() + begin_;
      length = end_ - begin_;
      begin_ = end_;
      consumed_ += static_cast<std::int64_t>(length);
      terminated_ = false;
    } else {
      continue;
    }
    line = std::string_view(start, length);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (++line_number_ == 1 && line.substr(0, 3) == "\xEF\xBB\xBF") line.remove_prefix(3);
    return true;
  }
}

// ---------------------------------------------------------------------------------------
// ErrorList

ErrorList::ErrorList(std::string path, std::int64_t max_errors)
    : path_(std::move(path)), max_errors_(static_cast<std::size_t>(max_errors < 1 ? 1 : max_errors)) {}

void ErrorList::add(std::int64_t line, std::string field, std::string problem) {
  errors_.emplace_back(Location{path_, line, std::move(field)}, problem);
  if (errors_.size() >= max_errors_) throw_all();
}

void ErrorList::throw_if_any() const {
  if (!errors_.empty()) throw_all();
}

void ErrorList::throw_all() const {
  if (errors_.size() == 1) throw errors_.front();
  std::string summary = std::to_string(errors_.size()) + " bad rows";
  if (errors_.size() >= max_errors_) summary += " (reading stopped at the " + std::to_string(max_errors_) + "th)";
  summary += ':';
  for (const auto& e : errors_) summary += "\n  " + std::string(e.what());
  throw InputError(Location{path_, 0, ""}, summary);
}

// ---------------------------------------------------------------------------------------
// Small helpers

std::size_t utf8_sequence_length(std::string_view text, std::size_t at) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  unsigned char low = 0x80;  // the second byte's range excludes overlong forms and surrogates
  unsigned char high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (at + length > text.size()) return 0;
  if (byte(at + 1) < low || byte(at + 1) > high) return 0;
  for (std::size_t i = at + 2; i < at + length; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  }
  return length;
}

std::size_t invalid_utf8_at(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t length = utf8_sequence_length(text, i);
    if (length == 0) return i;
    i += length;
  }
  return std::string_view::npos;
}

namespace {

// The code point of a three-byte UTF-8 sequence that prints as nothing, or moves the text
// around it, so that a message would hide it: a byte-order mark (U+FEFF) inside a header,
// zero-width spaces and joiners (U+200B-U+200F), line and paragraph separators and the
// bidirectional overrides (U+2028-U+202E). 0 for any other.
std::uint32_t invisible_code_point(std::string_view sequence) {
  const auto b = [&](std::size_t i) { return static_cast<std::uint32_t>(static_cast<unsigned char>(sequence[i])); };
  const std::uint32_t code = ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
  const bool invisible = code == 0xFEFF || (code >= 0x200B && code <= 0x200F) || (code >= 0x2028 && code <= 0x202E);
  return invisible ? code : 0;
}

// Appends `text` with control characters and bytes that are not UTF-8 written as \xNN, so
// that a message about a binary file prints as text and cannot drive the terminal.
void append_printable(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const std::size_t length = utf8_sequence_length(text, i);
    if (length == 0 || c < 0x20 || c == 0x7F) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
      ++i;
    } else if (const std::uint32_t code = length == 3 ? invisible_code_point(text.substr(i, 3)) : 0; code != 0) {
      out += "\\u";
      for (int shift = 12; shift >= 0; shift -= 4) out += static_cast<char>(std::tolower(kHex[(code >> shift) & 0xF]));
      i += length;
    } else {
      out.append(text.substr(i, length));
      i += length;
    }
  }
}

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  append_printable(out, text);
  return out;
}

std::string quote_text(std::string_view text) {
  constexpr std::size_t kMax = 80;
  // Built by appending: GCC 12 at -O3 warns (-Wrestrict, a false positive) on
  // "literal" + std::string temporaries here.
  std::string out = "\"";
  if (text.size() <= kMax) {
    append_printable(out, text);
    out += '"';
    return out;
  }
  append_printable(out, text.substr(0, 40));
  out += "...";
  append_printable(out, text.substr(text.size() - 37));
  out += "\" (";
  out += std::to_string(text.size());
  out += " bytes)";
  return out;
}

std::string exponent_hint(std::string_view text) {
  const auto e = text.find_first_of("eE");
  if (e == std::string_view::npos || e == 0 || text[e - 1] < '0' || text[e - 1] > '9') return {};
  return " (write it without an exponent)";
}

std::string seconds_text(std::int64_t ns) {
  const bool negative = ns < 0;
  const std::uint64_t magnitude = negative ? 0 - static_cast<std::uint64_t>(ns) : static_cast<std::uint64_t>(ns);
  std::string out = negative ? "-" : "";
  out += std::to_string(magnitude / 1'000'000'000);
  std::uint64_t frac = magnitude % 1'000'000'000;
  if (frac != 0) {
    char digits[10] = "000000000";
    for (int i = 8; i >= 0; --i) {
      digits[i] = static_cast<char>('0' + frac % 10);
      frac /= 10;
    }
    int last = 8;
    while (digits[last] == '0') --last;
    out += '.';
    out.append(digits, static_cast<std::size_t>(last + 1));
  }
  return out;
}

DecimalStatus parse_u64(std::string_view text, std::uint64_t& out) {
  if (text.empty()) return DecimalStatus::empty;
  if (text.front() == '-') return DecimalStatus::negative;
  std::uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return DecimalStatus::not_a_number;
    const auto digit = static_cast<std::uint64_t>(c - '0');
    if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) return DecimalStatus::overflow;
    value = value * 10 + digit;
  }
  out = value;
  return DecimalStatus::ok;
}

DecimalStatus parse_seconds_rounded(std::string_view text, std::int64_t& ns) {
  const auto dot = text.find('.');
  if (dot == std::string_view::npos || text.size() - dot - 1 <= 9) return parse_scaled_decimal(text, 9, ns);
  const std::string_view kept = text.substr(0, dot + 10);
  for (char c : text.substr(dot + 10)) {
    if (c < '0' || c > '9') return DecimalStatus::not_a_number;
  }
  const auto status = parse_scaled_decimal(kept, 9, ns);
  if (status != DecimalStatus::ok) return status;
  if (text[dot + 10] >= '5') {
    if (ns == std::numeric_limits<std::int64_t>::max()) return DecimalStatus::overflow;
    ++ns;
  }
  return DecimalStatus::ok;
}

void reset_request(Request& r) {
  r.id.clear();
  r.arrival_ns = 0;
  r.prompt_tokens = 0;
  r.output_tokens = 0;
  r.max_tokens.reset();
  r.cancel_ns.reset();
  r.n = 1;
  r.prefix_block_tokens = 0;
  r.prefix_hashes.clear();
  r.session.clear();
  r.start_ns.reset();
  r.first_token_ns.reset();
  r.finish_ns.reset();
}

FirstLine first_line(LineReader& lines) {
  std::string_view line;
  while (lines.next(line)) {
    if (!is_blank(line)) return {line, lines.line_number()};
  }
  return {};
}

// ---------------------------------------------------------------------------------------
// RowReader

RowReader::RowReader(const std::string& path, const TraceOptions& options, TraceFormat format)
    : TraceReader(path), lines_(open_lines(path)), options_(options), format_(format), errors_(path, options.max_errors) {}

bool RowReader::next(Request& out) {
  std::string_view line;
  while (lines_.next(line)) {
    if (is_blank(line)) continue;
    reset_request(out);
    if (const auto nul = line.find('\0'); nul != std::string_view::npos) {
      // A parser would stop at it (C strings) or skip it, and hide what follows.
      fail("", "a NUL byte at column " + std::to_string(nul + 1) + ": a trace is text (is this a binary file?)");
      continue;
    }
    const Row row = parse_line(line, out);
    // Counted only inside the --time-window (the rows a cut keeps): a skipped row's arrival
    // is parsed before it is skipped.
    if (row == Row::skip && out.arrival_ns >= options_.window_from_ns && out.arrival_ns < options_.window_to_ns) {
      ++dropped_;
    }
    if (row != Row::ok) continue;
    if (!options_.sort && rows_returned_ > 0 && out.arrival_ns < last_arrival_ns_) {
      fail(label(message_names_.arrival), "arrival " + seconds_text(out.arrival_ns) + " s is before the arrival " +
                                      seconds_text(last_arrival_ns_) + " s on line " +
                                      std::to_string(last_arrival_line_) +
                                      ": rows must be in arrival order (or pass " + kOptSort + ")");
      continue;
    }
    if (!validate(out)) continue;
    last_arrival_ns_ = out.arrival_ns;
    last_arrival_line_ = lines_.line_number();
    ++rows_returned_;
    return true;
  }
  errors_.throw_if_any();
  if (rows_returned_ == 0) fail_file(0, no_requests_problem());
  return false;
}

std::string RowReader::no_requests_problem() const {
  return lines_.line_number() == 0 ? "empty file: no header and no requests" : "no requests in the file";
}

RowReader::Row RowReader::fail(std::string_view field, std::string problem) {
  errors_.add(lines_.line_number(), std::string(field), std::move(problem));
  return Row::bad;
}

void RowReader::fail_file(std::int64_t line, std::string problem) const {
  throw InputError(Location{path(), line, ""}, problem);
}

std::string RowReader::label(std::string_view name) const {
  return std::string(value_kind_) + " '" + printable(name) + "'";
}

bool RowReader::text_is_utf8(std::string_view name, std::string_view text) {
  const std::size_t bad = invalid_utf8_at(text);
  if (bad == std::string_view::npos) return true;
  fail(label(name), "not valid UTF-8 at byte " + std::to_string(bad + 1) + " of " + quote_text(text));
  return false;
}

bool RowReader::parse_count(std::string_view name, std::string_view text, std::int64_t& out) {
  const auto status = parse_non_negative(text, out);
  if (status == DecimalStatus::ok) return true;
  std::string problem;
  switch (status) {
    case DecimalStatus::empty: problem = "expected a non-negative integer, got nothing"; break;
    case DecimalStatus::negative: problem = "expected a non-negative integer, got a negative one: " + quote_text(text); break;
    case DecimalStatus::overflow: problem = quote_text(text) + " is too large (does not fit in 64 bits)"; break;
    default: problem = "expected a non-negative integer, got " + quote_text(text); break;
  }
  fail(label(name), std::move(problem));
  return false;
}

bool RowReader::parse_time(std::string_view name, std::string_view text, std::int64_t& ns, bool rounded) {
  const auto status = rounded ? parse_seconds_rounded(text, ns) : parse_scaled_decimal(text, 9, ns);
  if (status == DecimalStatus::ok) return true;
  std::string problem;
  switch (status) {
    case DecimalStatus::empty: problem = "expected seconds (a non-negative decimal number), got nothing"; break;
    case DecimalStatus::negative:
      problem = "expected seconds (a non-negative decimal number), got a negative one: " + quote_text(text);
      break;
    case DecimalStatus::overflow:
      problem = quote_text(text) + " seconds is too large (does not fit in 64-bit nanoseconds, about 292 years)";
      break;
    case DecimalStatus::too_precise:
      problem = quote_text(text) + " is finer than 1 ns: times are kept as integer nanoseconds, so use at most 9 decimal places";
      break;
    default:
      problem = "expected seconds (a non-negative decimal number), got " + quote_text(text) + exponent_hint(text);
      break;
  }
  fail(label(name), std::move(problem));
  return false;
}

bool RowReader::parse_hash_list(std::string_view name, std::string_view text, std::vector<std::uint64_t>& out) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    if (text[pos] == ' ') {
      ++pos;
      continue;
    }
    std::size_t end = text.find(' ', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = text.substr(pos, end - pos);
    std::uint64_t value = 0;
    const auto status = parse_u64(item, value);
    if (status != DecimalStatus::ok) {
      fail(label(name), (status == DecimalStatus::overflow
                             ? quote_text(item) + " is too large for a 64-bit hash"
                             : "expected unsigned integers separated by spaces, got " + quote_text(item)));
      return false;
    }
    out.push_back(value);
    pos = end;
  }
  return true;
}

bool RowReader::validate(const Request& r) {
  if (r.n > kMaxSamples) {
    // Like a typo of 3200000000 layers in a config: an error, not an allocation of a table
    // per sample (and byte counts that overflow).
    fail(label("n"), std::to_string(r.n) + " parallel samples is implausible (at most " +
                         std::to_string(kMaxSamples) + " are accepted)");
    return false;
  }
  const std::pair<std::string_view, std::int64_t> lengths[] = {
      {message_names_.prompt, r.prompt_tokens},
      {message_names_.output, r.output_tokens},
      {message_names_.max_tokens, r.max_tokens.value_or(0)}};
  for (const auto& [name, value] : lengths) {
    if (value > kMaxRequestTokens) {
      fail(label(name), std::to_string(value) + " tokens is implausible (at most " + std::to_string(kMaxRequestTokens) +
                            " are accepted)");
      return false;
    }
  }
  if (r.max_tokens && *r.max_tokens < r.output_tokens) {
    fail(label(message_names_.max_tokens),
         std::to_string(*r.max_tokens) + " is less than " + std::string(message_names_.output) + " " +
             std::to_string(r.output_tokens) + ": a request never generates more than its limit");
    return false;
  }
  if (r.cancel_ns && *r.cancel_ns < r.arrival_ns) {
    fail(label(message_names_.cancel), "cancellation at " + seconds_text(*r.cancel_ns) +
                                           " s is before the arrival at " + seconds_text(r.arrival_ns) + " s");
    return false;
  }
  // Service times, when measured, happen in this order.
  std::string_view before_name = "arrival";
  std::int64_t before = r.arrival_ns;
  const std::pair<std::string_view, const std::optional<std::int64_t>*> stamps[] = {
      {"start", &r.start_ns}, {"first_token", &r.first_token_ns}, {"finish", &r.finish_ns}};
  for (const auto& [name, value] : stamps) {
    if (!*value) continue;
    if (**value < before) {
      fail(label(name), seconds_text(**value) + " s is before " + std::string(before_name) + " " +
                            seconds_text(before) + " s (expected arrival <= start <= first_token <= finish)");
      return false;
    }
    before_name = name;
    before = **value;
  }
  if (!r.prefix_hashes.empty()) {
    if (r.prefix_block_tokens <= 0) {
      fail(label(message_names_.prefix_hashes),
           "prefix hashes need a block size: set prefix_block_tokens to at least 1");
      return false;
    }
    const std::int64_t blocks = ceil_div(r.prompt_tokens, r.prefix_block_tokens);
    if (static_cast<std::int64_t>(r.prefix_hashes.size()) > blocks) {
      fail(label(message_names_.prefix_hashes),
           std::to_string(r.prefix_hashes.size()) + " hashes, but a prompt of " + std::to_string(r.prompt_tokens) +
               " tokens has only " + std::to_string(blocks) + " blocks of " + std::to_string(r.prefix_block_tokens));
      return false;
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------
// CSV

int CsvSplitter::split(std::string_view line, std::vector<std::string_view>& fields, std::string& error) {
  const std::size_t max = fields.size();
  if (unquoted_.size() < max) unquoted_.resize(max);
  const char* data = line.data();
  const std::size_t size = line.size();
  std::size_t pos = 0;
  int count = 0;
  for (;;) {
    std::string_view value;
    std::size_t lead = pos;
    while (lead < size && (data[lead] == ' ' || data[lead] == '\t')) ++lead;
    if (lead < size && data[lead] == '"') {
      std::string scratch;
      std::string& text = static_cast<std::size_t>(count) < max ? unquoted_[static_cast<std::size_t>(count)] : scratch;
      text.clear();
      pos = lead + 1;
      for (;;) {
        const std::size_t quote = line.find('"', pos);
        if (quote == std::string_view::npos) {
          error = "a quoted field is not closed (a line break inside quotes is not supported)";
          return -1;
        }
        text.append(data + pos, quote - pos);
        pos = quote + 1;
        if (pos < size && data[pos] == '"') {  // "" stands for one quote
          text += '"';
          ++pos;
          continue;
        }
        break;
      }
      while (pos < size && (data[pos] == ' ' || data[pos] == '\t')) ++pos;
      if (pos < size && data[pos] != ',') {
        error = "unexpected text after a closing quote";
        return -1;
      }
      value = text;
    } else {
      const void* comma = std::memchr(data + pos, ',', size - pos);
      const std::size_t end = comma != nullptr ? static_cast<std::size_t>(static_cast<const char*>(comma) - data) : size;
      value = std::string_view(data + pos, end - pos);
      if (!value.empty() && (value.front() == ' ' || value.back() == ' ' || value.front() == '\t' ||
                             value.back() == '\t')) {
        value = trim(value);
      }
      pos = end;
    }
    if (static_cast<std::size_t>(count) < max) fields[static_cast<std::size_t>(count)] = value;
    ++count;
    if (pos >= size) return count;
    ++pos;  // the comma; a trailing comma means one more, empty, field
  }
}

CsvReader::CsvReader(const std::string& path, const TraceOptions& options, TraceFormat format)
    : RowReader(path, options, format) {
  std::string_view line;
  bool found = false;
  while (lines_.next(line)) {
    if (!is_blank(line)) {
      found = true;
      break;
    }
  }
  if (!found) fail_file(0, "empty file: expected a header line naming the columns");
  header_line_ = lines_.line_number();
  std::vector<std::string_view> names(256);
  std::string error;
  const int count = splitter_.split(line, names, error);
  if (count < 0) fail_file(header_line_, "header: " + error);
  if (count > static_cast<int>(names.size())) fail_file(header_line_, "header: more than 256 columns");
  for (int i = 0; i < count; ++i) {
    const std::string name(names[static_cast<std::size_t>(i)]);
    if (name.empty()) fail_file(header_line_, "header: column " + std::to_string(i + 1) + " has no name");
    for (const auto& seen : header_) {
      if (seen == name) fail_file(header_line_, "header: column '" + printable(name) + "' appears twice");
    }
    header_.push_back(name);
  }
  // One more slot than the header has, so that split() can tell "too many fields".
  fields_.resize(header_.size() + 1);
}

LengthColumnsReader::LengthColumnsReader(const std::string& path, const TraceOptions& options, TraceFormat format,
                                         std::string_view format_name, Columns columns)
    : CsvReader(path, options, format), column_names_(columns) {
  if (!column_names_.time.empty()) {
    require_columns({column_names_.time, column_names_.prompt, column_names_.output}, format_name);
    time_col_ = column(column_names_.time);
    message_names_.arrival = column_names_.time;
  } else {
    require_columns({column_names_.prompt, column_names_.output}, format_name);
  }
  prompt_col_ = column(column_names_.prompt);
  output_col_ = column(column_names_.output);
  message_names_.prompt = column_names_.prompt;
  message_names_.output = column_names_.output;
  // A column of kvsim's native format (a generation limit, a cancellation, samples, prefixes)
  // has no place in this format, and reading on would drop it without a word.
  for (std::string_view name : kNativeFieldNames) {
    if (column(name) < 0) continue;
    fail_file(header_line_, "column '" + std::string(name) + "': the " + std::string(format_name) +
                                " format has no such column, so it would be dropped; kvsim's native format keeps it, "
                                "with id and arrival columns (traces/README.md)");
  }
}

void name_by_row(Request& out, std::int64_t row) {
  char id[24];
  const auto written = std::to_chars(id, id + sizeof id, row);
  out.id.assign(id, written.ptr);
}

bool LengthColumnsReader::begin_row(std::string_view line, Request& out) {
  ++row_;
  if (!split_row(line)) return false;
  name_by_row(out, row_);
  return true;
}

bool LengthColumnsReader::parse_lengths(Request& out) {
  return parse_count(column_names_.prompt, field(prompt_col_), out.prompt_tokens) &&
         parse_count(column_names_.output, field(output_col_), out.output_tokens);
}

int CsvReader::column(std::string_view name) const {
  for (std::size_t i = 0; i < header_.size(); ++i) {
    if (header_[i] == name) return static_cast<int>(i);
  }
  return -1;
}

void CsvReader::require_columns(std::initializer_list<std::string_view> required, std::string_view format_name) const {
  for (auto name : required) {
    if (column(name) < 0) {
      std::string all;
      for (auto n : required) {
        if (!all.empty()) all += ',';
        all.append(n);
      }
      fail_file(header_line_, "missing column '" + std::string(name) + "' (" + std::string(format_name) +
                                  " traces have columns " + all + ")");
    }
  }
}

bool CsvReader::split_row(std::string_view line) {
  const int count = splitter_.split(line, fields_, split_error_);
  const std::string hint =
      lines_.line_terminated() ? "" : " (the file ends in the middle of this line: was it cut short?)";
  if (count < 0) {
    fail("", split_error_ + hint);
    return false;
  }
  if (static_cast<std::size_t>(count) != header_.size()) {
    fail("", "expected " + std::to_string(header_.size()) + " columns, as in the header, got " + std::to_string(count) +
                 hint);
    return false;
  }
  return true;
}

}  // namespace kvsim::detail
