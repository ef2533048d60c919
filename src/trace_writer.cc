#include "kvsim/trace_writer.h"

#include <charconv>

#include "kvsim/error.h"
#include "kvsim/option_names.h"
#include "trace_read.h"

namespace kvsim {
namespace {

constexpr std::size_t kFlushBytes = std::size_t{1} << 20;

void append_int(std::string& out, std::int64_t v) {
  char digits[24];
  const auto written = std::to_chars(digits, digits + sizeof digits, v);
  out.append(digits, written.ptr);
}

void append_u64(std::string& out, std::uint64_t v) {
  char digits[24];
  const auto written = std::to_chars(digits, digits + sizeof digits, v);
  out.append(digits, written.ptr);
}

// A trace's CSV cell (csv_cell); a line break, which a trace's line-at-a-time reader
// cannot take even quoted, is refused.
void append_csv_text(std::string& out, std::string_view text, const std::string& path, std::string_view column) {
  if (text.find_first_of("\r\n") != std::string_view::npos) {
    throw InputError(Location{path, 0, "column '" + std::string(column) + "'"},
                     detail::quote_text(text) + " holds a line break, which a CSV trace cannot; write JSONL instead");
  }
  check(text.find('\0') == std::string_view::npos, "a trace's text holds a NUL byte, which every reader refuses");
  out += csv_cell(text);
}

void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\u00";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  out += '"';
}

}  // namespace

NativeFormat parse_native_format(std::string_view text, std::string_view field) {
  if (text == "csv") return NativeFormat::csv;
  if (text == "jsonl") return NativeFormat::jsonl;
  throw InputError(Location{"", 0, std::string(field)}, "expected csv or jsonl, got \"" + std::string(text) + "\"");
}

NativeFormat native_format_for_path(std::string_view path, std::string_view field) {
  const auto ends_with = [&](std::string_view suffix) {
    return path.size() >= suffix.size() && path.substr(path.size() - suffix.size()) == suffix;
  };
  if (ends_with(".csv")) return NativeFormat::csv;
  if (ends_with(".jsonl") || ends_with(".ndjson") || ends_with(".json")) return NativeFormat::jsonl;
  throw InputError(Location{"", 0, std::string(field)},
                   "cannot tell the output format from \"" + std::string(path) +
                       "\": name it .csv or .jsonl, or say which with " + kOptTo + " csv|jsonl");
}

void TraceColumns::include(const Request& r) {
  max_tokens = max_tokens || r.max_tokens.has_value();
  cancel_at = cancel_at || r.cancel_ns.has_value();
  n = n || r.n != 1;
  session = session || !r.session.empty();
  service_times = service_times || r.start_ns || r.first_token_ns || r.finish_ns;
  prefix = prefix || r.prefix_block_tokens != 0 || !r.prefix_hashes.empty();
}

std::string csv_cell(std::string_view text) {
  const bool quote = text.find_first_of(",\"\r\n") != std::string_view::npos ||
                     (!text.empty() && (text.front() == ' ' || text.front() == '\t' || text.back() == ' ' ||
                                        text.back() == '\t'));
  if (!quote) return std::string(text);
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + '"';
}

std::string format_trace_seconds(std::int64_t ns) { return detail::seconds_text(ns); }

TraceWriter::TraceWriter(const std::string& path, NativeFormat format, const TraceColumns& columns,
                         std::span<const std::string> inputs)
    : path_(path), format_(format), columns_(columns), file_(std::make_unique<OutputFile>(path, inputs)) {
  buffer_.reserve(kFlushBytes + 4096);
  if (format_ == NativeFormat::csv) {
    buffer_ += "id,arrival,prompt_tokens,output_tokens";
    if (columns_.max_tokens) buffer_ += ",max_tokens";
    if (columns_.cancel_at) buffer_ += ",cancel_at";
    if (columns_.n) buffer_ += ",n";
    if (columns_.session) buffer_ += ",session";
    if (columns_.service_times) buffer_ += ",start,first_token,finish";
    if (columns_.prefix) buffer_ += ",prefix_block_tokens,prefix_hashes";
    buffer_ += '\n';
  }
}

TraceWriter::~TraceWriter() = default;

void TraceWriter::flush() {
  if (buffer_.empty() || file_ == nullptr) return;
  file_->write(buffer_);
  buffer_.clear();
}

void TraceWriter::close() {
  if (file_ == nullptr) return;
  flush();
  file_->commit();
  file_.reset();
}

void TraceWriter::write(const Request& r) {
  check(file_ != nullptr, "TraceWriter::write after close");
  check((columns_.max_tokens || !r.max_tokens) && (columns_.cancel_at || !r.cancel_ns) && (columns_.n || r.n == 1) &&
            (columns_.session || r.session.empty()) &&
            (columns_.service_times || !(r.start_ns || r.first_token_ns || r.finish_ns)) &&
            (columns_.prefix || (r.prefix_block_tokens == 0 && r.prefix_hashes.empty())),
        "TraceWriter: a request has a value its columns leave out");
  if (format_ == NativeFormat::csv) {
    write_csv(r);
  } else {
    write_jsonl(r);
  }
  if (buffer_.size() >= kFlushBytes) flush();
}

void TraceWriter::write_csv(const Request& r) {
  std::string& out = buffer_;
  append_csv_text(out, r.id, path_, "id");
  out += ',';
  out += detail::seconds_text(r.arrival_ns);
  out += ',';
  append_int(out, r.prompt_tokens);
  out += ',';
  append_int(out, r.output_tokens);
  const auto optional_int = [&](const std::optional<std::int64_t>& v) {
    out += ',';
    if (v) append_int(out, *v);
  };
  const auto optional_time = [&](const std::optional<std::int64_t>& v) {
    out += ',';
    if (v) out += detail::seconds_text(*v);
  };
  if (columns_.max_tokens) optional_int(r.max_tokens);
  if (columns_.cancel_at) optional_time(r.cancel_ns);
  if (columns_.n) {
    out += ',';
    append_int(out, r.n);
  }
  if (columns_.session) {
    out += ',';
    append_csv_text(out, r.session, path_, "session");
  }
  if (columns_.service_times) {
    optional_time(r.start_ns);
    optional_time(r.first_token_ns);
    optional_time(r.finish_ns);
  }
  if (columns_.prefix) {
    out += ',';
    if (r.prefix_block_tokens != 0) append_int(out, r.prefix_block_tokens);
    out += ',';
    for (std::size_t i = 0; i < r.prefix_hashes.size(); ++i) {
      if (i > 0) out += ' ';
      append_u64(out, r.prefix_hashes[i]);
    }
  }
  out += '\n';
}

void TraceWriter::write_jsonl(const Request& r) {
  std::string& out = buffer_;
  out += "{\"id\":";
  append_json_string(out, r.id);
  out += ",\"arrival\":";
  out += detail::seconds_text(r.arrival_ns);
  out += ",\"prompt_tokens\":";
  append_int(out, r.prompt_tokens);
  out += ",\"output_tokens\":";
  append_int(out, r.output_tokens);
  if (r.max_tokens) {
    out += ",\"max_tokens\":";
    append_int(out, *r.max_tokens);
  }
  if (r.cancel_ns) {
    out += ",\"cancel_at\":";
    out += detail::seconds_text(*r.cancel_ns);
  }
  if (r.n != 1) {
    out += ",\"n\":";
    append_int(out, r.n);
  }
  if (!r.session.empty()) {
    out += ",\"session\":";
    append_json_string(out, r.session);
  }
  const std::pair<const char*, const std::optional<std::int64_t>*> stamps[] = {
      {",\"start\":", &r.start_ns}, {",\"first_token\":", &r.first_token_ns}, {",\"finish\":", &r.finish_ns}};
  for (const auto& [key, value] : stamps) {
    if (*value) {
      out += key;
      out += detail::seconds_text(**value);
    }
  }
  if (r.prefix_block_tokens != 0 || !r.prefix_hashes.empty()) {
    out += ",\"prefix_block_tokens\":";
    append_int(out, r.prefix_block_tokens);
    out += ",\"prefix_hashes\":[";
    for (std::size_t i = 0; i < r.prefix_hashes.size(); ++i) {
      if (i > 0) out += ',';
      append_u64(out, r.prefix_hashes[i]);
    }
    out += ']';
  }
  out += "}\n";
}

}  // namespace kvsim
