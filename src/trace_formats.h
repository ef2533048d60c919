// The trace format registry: every format open_trace() reads, in one table.
//
// trace_format_name(), parse_trace_format(), detect_trace_format(), open_trace(), the
// messages that list the known formats and the --format help all read this table; the
// trace fuzz targets (fuzz/) are one per format and a test checks they match it. A format
// missing from the table cannot be named, detected or opened.
//
// Detection reads the first non-blank line: a JSON object is a JSONL record, anything else
// a CSV header. Among the formats of that syntax it tries the imported ones in table order,
// then kvsim's native one (whose field names others reuse); the first whose predicate holds
// wins. Where two importers' fields overlap, either the earlier row is the one meant to win
// or the predicates exclude each other (Mooncake's yields to token-id fields).
//
// To add a format: one file, src/trace_<name>.cc, holding its reader and its row, defined
// `extern constinit const TraceFormatInfo k<Name>Format{...}` in namespace kvsim::detail (as
// trace_azure.cc defines kAzureFormat); then one line, KVSIM_TRACE_FORMAT(<name>,
// k<Name>Format), in include/kvsim/trace_formats.def, which also gives the TraceFormat
// enumerator. tests/trace_formats_test.cc then asks for seed inputs in
// fuzz/corpus/trace_<name>/ (its fuzz target), and runs every format through the bad-input
// checks (docs/architecture.md).
#ifndef KVSIM_SRC_TRACE_FORMATS_H_
#define KVSIM_SRC_TRACE_FORMATS_H_

#include <algorithm>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvsim/trace.h"

namespace kvsim::detail {

enum class TraceSyntax { csv, jsonl };

// A trace's first non-blank line as detection sees it: for CSV its header names (unquoted,
// trimmed), for JSONL its record.
struct FirstRecord {
  const std::vector<std::string>* header = nullptr;  // set for CSV
  const nlohmann::json* record = nullptr;            // set for JSONL
};

// Detection predicates' helpers: whether a CSV header has the column `name`, whether a
// JSONL record has the key `key`.
inline bool header_has(const FirstRecord& first, std::string_view name) {
  return std::ranges::find(*first.header, name) != first.header->end();
}
bool record_has(const FirstRecord& first, const char* key);

struct TraceFormatInfo {
  TraceFormat format;
  std::string_view name;     // what --format takes, and what `kvsim trace stats` prints
  TraceSyntax syntax;
  bool native;               // kvsim's own: detected last, as the fallback of its syntax
  // The format and the fields that identify it, for the message of a failed detection:
  // "Azure (TIMESTAMP,ContextTokens,GeneratedTokens)".
  std::string_view summary;
  // True when a first line of this syntax is this format's header or record.
  bool (*detect)(const FirstRecord& first);
  std::unique_ptr<TraceReader> (*make)(const std::string& path, const TraceOptions& options);
};

// A row's factory: make_reader<MyReader>, for a reader constructed from (path, options).
template <class Reader>
std::unique_ptr<TraceReader> make_reader(const std::string& path, const TraceOptions& options) {
  return std::make_unique<Reader>(path, options);
}

// Every format, in the order --format lists them (TraceFormat's order).
std::span<const TraceFormatInfo> trace_formats();

// The row of `format`, or nullptr (TraceFormat::automatic has none).
const TraceFormatInfo* find_trace_format(TraceFormat format);

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_TRACE_FORMATS_H_
