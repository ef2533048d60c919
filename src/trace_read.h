// The machinery every trace reader shares: buffered line input, error collection,
// field parsing with the project's messages, and per-row validation.
//
// A reader that meets a bad row records one error for it (file, line, field, offending
// text) and goes on to the next row; it throws a single InputError listing what it
// collected once it has TraceOptions::max_errors of them, or at the end of the file if it
// has any. Rows are read from one large buffer filled by std::fread, as std::string_view
// into it: no allocation per row once the Request's strings and vectors have grown.
#ifndef KVSIM_SRC_TRACE_READ_H_
#define KVSIM_SRC_TRACE_READ_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "decimal.h"
#include "kvsim/error.h"
#include "kvsim/request.h"
#include "kvsim/trace.h"

namespace kvsim::detail {

// The longest line a trace may have, and the most a reader buffers while detecting a format:
// 64 MiB, some 8 times the token-id record of a million-token prompt. A longer line is not a
// trace (or not one kvsim can read a line at a time): reading stops there with a message
// naming the file, the line and the limit, instead of buffering a binary file or /dev/zero
// without bound.
inline constexpr std::size_t kMaxLineBytes = std::size_t{64} << 20;

// Lines of a file, without their "\n" or "\r\n". A line is valid until the next call.
// The buffer grows to hold the longest line (at most `max_line_bytes`), never with the
// number of lines. The file is opened once and read from start to end once, so a pipe, a
// FIFO or /dev/stdin works like a file.
class LineReader {
 public:
  // Throws InputError naming `path` when it cannot be opened.
  explicit LineReader(const std::string& path, std::size_t max_line_bytes = kMaxLineBytes);
  ~LineReader();
  LineReader(LineReader&& other) noexcept;
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;
  LineReader& operator=(LineReader&&) = delete;

  // False at the end of the file. A UTF-8 byte-order mark before the first line is skipped.
  // Throws InputError naming the file, the line and the limit when a line is longer than
  // max_line_bytes.
  bool next(std::string_view& line);
  std::int64_t line_number() const { return line_number_; }  // of the last line returned
  // False when the last line returned ended the file without a line break: if it is also
  // malformed, the file was probably cut short.
  bool line_terminated() const { return terminated_; }
  std::int64_t bytes_consumed() const { return consumed_; }
  std::int64_t total_bytes() const { return total_; }

  // Until rewind(), keeps every byte read (at most max_line_bytes in all), so that a reader
  // can look at the first lines and then start again without reading the file twice.
  void keep_for_rewind() { keeping_ = true; }
  // Starts again at the first line. REQUIRES: keep_for_rewind() before the first next().
  void rewind();

 private:
  bool refill();

  std::string path_;
  std::FILE* file_ = nullptr;
  std::unique_ptr<char[]> buffer_;
  std::size_t capacity_ = 0;
  std::size_t max_line_bytes_ = kMaxLineBytes;
  std::size_t begin_ = 0;  // first unread byte
  std::size_t end_ = 0;    // one past the last byte read from the file
  bool eof_ = false;
  bool terminated_ = true;
  bool keeping_ = false;
  std::int64_t line_number_ = 0;
  std::int64_t consumed_ = 0;
  std::int64_t total_ = 0;
};

// Format detection reads the start of the input. So that a stream is opened and read once,
// open_trace() hands the LineReader that detection used, rewound, to the reader it makes:
// an AdoptedLines holds it on this thread for the duration of the format's make() call, and
// RowReader takes it when the path matches (else it opens the file itself).
class AdoptedLines {
 public:
  AdoptedLines(const std::string& path, LineReader lines);
  ~AdoptedLines();
  AdoptedLines(const AdoptedLines&) = delete;
  AdoptedLines& operator=(const AdoptedLines&) = delete;
};
// The adopted reader of `path` if there is one, else a new LineReader of `path`.
LineReader open_lines(const std::string& path);

// Problems found in one file, thrown together.
class ErrorList {
 public:
  ErrorList(std::string path, std::int64_t max_errors);

  // Records a problem; throws everything collected when this is the max_errors'th.
  void add(std::int64_t line, std::string field, std::string problem);
  // Throws when anything was recorded.
  void throw_if_any() const;
  std::size_t size() const { return errors_.size(); }

 private:
  [[noreturn]] void throw_all() const;

  std::string path_;
  std::size_t max_errors_;
  std::vector<InputError> errors_;
};

// The most parallel samples (n) a request may ask for: far beyond any serving engine's
// limit (OpenAI's API allows 128), low enough that n x anything stays far from overflow.
inline constexpr std::int64_t kMaxSamples = 65'536;

// The length of the well-formed UTF-8 sequence starting at text[at] (1 to 4), or 0 when
// the bytes there are not one (a stray continuation byte, an overlong form, a surrogate, a
// sequence cut short).
std::size_t utf8_sequence_length(std::string_view text, std::size_t at);
// The offset of the first byte of `text` that is not well-formed UTF-8, or npos.
std::size_t invalid_utf8_at(std::string_view text);

// `text` for a message, with control characters and bytes that are not UTF-8 shown as \xNN,
// and characters that print as nothing (a byte-order mark, zero-width spaces, direction
// overrides) as \uXXXX: "\ufeffid".
std::string printable(std::string_view text);

// `text` quoted for a message, shortened when long: "12x", "aaaa...aaa" (80 bytes).
// Control characters and bytes that are not UTF-8 are shown as \xNN.
std::string quote_text(std::string_view text);

// " (write it without an exponent)" when `text` looks like 1e3 or 2.5E-4, else "": times
// are read as plain decimals so that they stay exact.
std::string exponent_hint(std::string_view text);

// Integer nanoseconds as the shortest exact decimal seconds: 1500000000 -> "1.5".
std::string seconds_text(std::int64_t ns);

// Parses an unsigned 64-bit integer without sign or spaces.
DecimalStatus parse_u64(std::string_view text, std::uint64_t& out);

// Decimal seconds from a tool that printed a double ("4.3145790000000005"): digits past
// the ninth decimal place are rounded (half up) instead of rejected.
DecimalStatus parse_seconds_rounded(std::string_view text, std::int64_t& ns);

// Resets every member of `r` to its default while keeping the capacity of its strings and
// vectors, so a reader can reuse one Request without allocating.
void reset_request(Request& r);

// The skeleton of a line-oriented reader: subclasses parse one line into a Request, the
// base skips blank lines, validates the row, checks arrival order and collects errors.
class RowReader : public TraceReader {
 public:
  bool next(Request& out) final;
  TraceFormat format() const final { return format_; }
  std::int64_t bytes_read() const final { return lines_.bytes_consumed(); }
  std::int64_t total_bytes() const final { return lines_.total_bytes(); }
  std::int64_t dropped() const final { return dropped_; }

 protected:
  enum class Row { ok, bad, skip };

  RowReader(const std::string& path, const TraceOptions& options, TraceFormat format);

  // Parses one non-blank line. Returns Row::bad after calling fail(), Row::skip for rows
  // the format drops on purpose (BurstGPT's failed requests).
  virtual Row parse_line(std::string_view line, Request& out) = 0;
  // What a file that ends without any request is told; formats may add a reason.
  virtual std::string no_requests_problem() const;

  // Records a problem with the current line. `field` is a label such as "column 'n'",
  // or "" for the whole line. Always returns Row::bad.
  Row fail(std::string_view field, std::string problem);
  // Throws one InputError about the file as a whole (bad header, empty file).
  [[noreturn]] void fail_file(std::int64_t line, std::string problem) const;

  // "column 'n'" or "field 'n'", the way this format names a value in messages.
  std::string label(std::string_view name) const;

  // Field parsers. Each returns false after recording an error naming `name`.
  bool parse_count(std::string_view name, std::string_view text, std::int64_t& out);
  // Names are text: bytes that are not UTF-8 (a file cut inside a character, or not text
  // at all) would make a converted JSONL trace that no JSON reader accepts.
  bool text_is_utf8(std::string_view name, std::string_view text);
  bool parse_time(std::string_view name, std::string_view text, std::int64_t& ns, bool rounded);
  bool parse_hash_list(std::string_view name, std::string_view text, std::vector<std::uint64_t>& out);

  LineReader lines_;
  TraceOptions options_;
  // How values are named in messages: "column" (CSV) or "field" (JSONL).
  std::string_view value_kind_ = "column";
  // What this format calls each value that validation checks ("input_length" in Mooncake's
  // JSONL), for its messages.
  struct MessageNames {
    std::string_view arrival = "arrival";
    std::string_view prompt = "prompt_tokens";
    std::string_view output = "output_tokens";
    std::string_view max_tokens = "max_tokens";
    std::string_view cancel = "cancel_at";
    std::string_view prefix_hashes = "prefix_hashes";
  } message_names_;

 private:
  bool validate(const Request& r);

  TraceFormat format_;
  ErrorList errors_;
  std::int64_t last_arrival_ns_ = 0;
  std::int64_t last_arrival_line_ = 0;
  std::int64_t rows_returned_ = 0;
  std::int64_t dropped_ = 0;  // rows parse_line() skipped, within the --time-window
};

// Splits one CSV line into fields. Quoted fields ("a,b", "say ""hi""") are unquoted;
// unquoted fields lose surrounding spaces and tabs. A line break inside quotes is not
// supported (a row is one line).
class CsvSplitter {
 public:
  // Returns the number of fields, or -1 with `error` set; stores at most `fields.size()`.
  int split(std::string_view line, std::vector<std::string_view>& fields, std::string& error);

 private:
  std::vector<std::string> unquoted_;
};

// Base of the CSV readers: reads and splits the header, then splits each row.
class CsvReader : public RowReader {
 protected:
  CsvReader(const std::string& path, const TraceOptions& options, TraceFormat format);

  // Index of the header column called `name`, or -1.
  int column(std::string_view name) const;
  // Throws when a column in `required` is missing, naming the format.
  void require_columns(std::initializer_list<std::string_view> required, std::string_view format_name) const;
  // Splits `line` into fields_; false (after fail()) when the count differs from the header's.
  bool split_row(std::string_view line);
  std::string_view field(int column) const { return fields_[static_cast<std::size_t>(column)]; }

  std::vector<std::string> header_;
  std::int64_t header_line_ = 0;
  std::vector<std::string_view> fields_;

 private:
  CsvSplitter splitter_;
  std::string split_error_;
};

// Names a request by its row number among the data rows, from 1, for formats without ids.
void name_by_row(Request& out, std::int64_t row);

// Base of the importers whose rows carry an arrival time, a prompt length and an output
// length in columns found by name, and whose requests are named by their row number among
// the data rows, from 1 (Azure, BurstGPT, Vidur; a length-only file has no time column).
class LengthColumnsReader : public CsvReader {
 protected:
  struct Columns {
    std::string_view time;    // "" when the format has no arrival column
    std::string_view prompt;
    std::string_view output;
  };
  // Requires the named columns, naming `format_name` when one is missing.
  LengthColumnsReader(const std::string& path, const TraceOptions& options, TraceFormat format,
                      std::string_view format_name, Columns columns);

  // Splits the next data row and names its request; false (after fail()) on a bad split.
  bool begin_row(std::string_view line, Request& out);
  // Reads the prompt and output columns into `out`; false after fail().
  bool parse_lengths(Request& out);
  std::string_view time_text() const { return field(time_col_); }

  Columns column_names_;   // the header names of the columns read, as constructed
  int time_col_ = -1;
  int prompt_col_ = -1;
  int output_col_ = -1;
  std::int64_t row_ = 0;   // data rows begun so far
};

// The first non-blank line of a LineReader (its header or first record) and its line
// number; text "" and line 0 when the file has none.
struct FirstLine {
  std::string_view text;
  std::int64_t line = 0;
};
FirstLine first_line(LineReader& lines);

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_TRACE_READ_H_
