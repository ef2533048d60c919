// Writing traces in kvsim's native format (traces/README.md), as CSV or JSON Lines.
//
// What is written reads back as the same Requests: times are printed as exact decimal
// seconds (integer nanoseconds with trailing zeros trimmed: 1500000000 -> "1.5"), and a
// cancellation is always written as the absolute `cancel_at`. The output is canonical:
// columns (CSV) and fields (JSONL) in one fixed order, so writing what was read from a
// written file gives the same bytes again.
#ifndef KVSIM_TRACE_WRITER_H_
#define KVSIM_TRACE_WRITER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "kvsim/output_file.h"
#include "kvsim/request.h"

namespace kvsim {

enum class NativeFormat { csv, jsonl };

// "csv" or "jsonl". Throws InputError naming `field` otherwise.
NativeFormat parse_native_format(std::string_view text, std::string_view field);
// From a file name's extension: .csv -> csv; .jsonl, .ndjson, .json -> jsonl. Throws
// InputError naming `field` for anything else.
NativeFormat native_format_for_path(std::string_view path, std::string_view field);

// The optional columns a CSV trace lists (a JSONL record simply leaves out what is absent).
// id, arrival, prompt_tokens and output_tokens are always written.
struct TraceColumns {
  bool max_tokens = false;
  bool cancel_at = false;
  bool n = false;              // written when some request has n != 1
  bool session = false;
  bool service_times = false;  // start, first_token, finish
  bool prefix = false;         // prefix_block_tokens, prefix_hashes

  // Adds the columns `r` needs.
  void include(const Request& r);
};

// Integer nanoseconds as exact decimal seconds, trailing zeros trimmed: 0 -> "0",
// 4314579000 -> "4.314579".
std::string format_trace_seconds(std::int64_t ns);

// A CSV cell that kvsim's readers, and RFC 4180's, read back as `text`: quoted (a quote
// doubled) when it holds a comma, a quote or a line break, or starts or ends with a space or
// a tab, which a reader trims from a bare cell.
std::string csv_cell(std::string_view text);

class TraceWriter {
 public:
  // Opens `path` for writing ("-": standard output) through an OutputFile (output_file.h):
  // nothing replaces a regular OUT until close() succeeds, and OUT must not be one of
  // `inputs`. CSV writes its header at once. Throws InputError when the file cannot be
  // created.
  TraceWriter(const std::string& path, NativeFormat format, const TraceColumns& columns,
              std::span<const std::string> inputs = {});
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Appends one request. Throws InputError when CSV cannot hold it (a line break in its id
  // or session). REQUIRES: `columns` has every column `r` needs (else InternalError:
  // a value would be lost silently).
  void write(const Request& r);
  // Flushes, closes and puts the file in place. Throws InputError on a write error. Without
  // it the destructor discards what was written, leaving OUT as it was.
  void close();

 private:
  void flush();
  void write_csv(const Request& r);
  void write_jsonl(const Request& r);

  std::string path_;
  NativeFormat format_;
  TraceColumns columns_;
  std::unique_ptr<OutputFile> file_;
  std::string buffer_;
};

}  // namespace kvsim

#endif  // KVSIM_TRACE_WRITER_H_
