// Format names, detection, open_trace() and the sorting wrapper.
#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>

#include "kvsim/error.h"
#include "kvsim/trace.h"
#include "trace_native.h"
#include "trace_read.h"

namespace kvsim {
namespace {

struct FormatName {
  TraceFormat format;
  std::string_view name;
};

constexpr std::array<FormatName, 9> kFormatNames = {{
    {TraceFormat::automatic, "auto"},
    {TraceFormat::native_csv, "native-csv"},
    {TraceFormat::native_jsonl, "native-jsonl"},
    {TraceFormat::azure, "azure"},
    {TraceFormat::burstgpt, "burstgpt"},
    {TraceFormat::mooncake, "mooncake"},
    {TraceFormat::vidur, "vidur"},
    {TraceFormat::lengths, "lengths"},
    {TraceFormat::token_ids, "token-ids"},
}};

constexpr std::string_view kKnownFormats =
    "native CSV (id,arrival,prompt_tokens,output_tokens,...), native JSONL (the same fields), "
    "Azure (TIMESTAMP,ContextTokens,GeneratedTokens), BurstGPT (Timestamp,...,Request tokens,Response tokens,...), "
    "Vidur (arrived_at,num_prefill_tokens,num_decode_tokens), lengths only (num_prefill_tokens,num_decode_tokens), "
    "Mooncake JSONL (timestamp,input_length,output_length,hash_ids), "
    "token-id JSONL (input_toks,output_toks,arrival_time_ns,input_tok_ids)";

// Header names, split on commas, unquoted and trimmed: enough to recognise a format.
std::vector<std::string> header_names(const std::string& line) {
  std::vector<std::string> names;
  std::string current;
  for (char c : line + ",") {
    if (c == ',') {
      while (!current.empty() && (current.back() == ' ' || current.back() == '\t')) current.pop_back();
      names.push_back(current);
      current.clear();
    } else if (c != '"' && !((c == ' ' || c == '\t') && current.empty())) {
      current += c;
    }
  }
  return names;
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
    std::stable_sort(requests_.begin(), requests_.end(),
                     [](const Request& a, const Request& b) { return a.arrival_ns < b.arrival_ns; });
    if (!requests_.empty() && requests_.front().arrival_ns < 0) {
      const std::int64_t shift = -requests_.front().arrival_ns;
      for (auto& q : requests_) {
        q.arrival_ns += shift;
        for (auto* t : {&q.cancel_ns, &q.start_ns, &q.first_token_ns, &q.finish_ns}) {
          if (*t) **t += shift;
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

 private:
  TraceFormat format_;
  std::vector<Request> requests_;
  std::size_t next_ = 0;
  std::int64_t total_bytes_ = 0;
};

bool has(const std::vector<std::string>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool has_key(const nlohmann::json& record, const char* key) { return record.contains(key); }

}  // namespace

std::string_view trace_format_name(TraceFormat format) {
  for (const auto& f : kFormatNames) {
    if (f.format == format) return f.name;
  }
  return "?";
}

TraceFormat parse_trace_format(std::string_view text, std::string_view field) {
  for (const auto& f : kFormatNames) {
    if (f.name == text) return f.format;
  }
  std::string known;
  for (const auto& f : kFormatNames) {
    if (!known.empty()) known += ", ";
    known.append(f.name);
  }
  throw InputError(Location{"", 0, std::string(field)},
                   "unknown trace format \"" + std::string(text) + "\" (known: " + known + ")");
}

TraceFormat detect_trace_format(const std::string& path) {
  const auto first = detail::first_line(path);
  if (first.line == 0) throw InputError(Location{path, 0, ""}, "empty file: no header and no requests");
  const Location where{path, first.line, ""};
  const std::string& line = first.text;
  const auto start = line.find_first_not_of(" \t");
  if (line[start] == '{') {
    const auto record = nlohmann::json::parse(line, nullptr, false);
    if (record.is_discarded()) {
      throw InputError(where, "malformed JSON in the first record: cannot tell the trace's format (" +
                                  std::string(kKnownFormats) + ")");
    }
    if (has_key(record, "input_tok_ids") || has_key(record, "input_toks") || has_key(record, "arrival_time_ns")) {
      return TraceFormat::token_ids;
    }
    if (has_key(record, "hash_ids") || has_key(record, "input_length")) return TraceFormat::mooncake;
    if (has_key(record, "arrival") || has_key(record, "prompt_tokens")) return TraceFormat::native_jsonl;
    throw InputError(where, "unrecognised JSONL trace: the first record's fields match no known format (" +
                                std::string(kKnownFormats) + "); name one with --format");
  }
  const auto names = header_names(line);
  if (has(names, "TIMESTAMP") && has(names, "ContextTokens")) return TraceFormat::azure;
  if (has(names, "Timestamp") && has(names, "Request tokens")) return TraceFormat::burstgpt;
  if (has(names, "arrived_at")) return TraceFormat::vidur;
  if (has(names, "num_prefill_tokens")) return TraceFormat::lengths;
  for (const auto& name : names) {
    if (detail::native_field_index(name) >= 0) return TraceFormat::native_csv;
  }
  throw InputError(where, "unrecognised trace format: the first line " + detail::quote_text(line) +
                              " matches none of " + std::string(kKnownFormats) + "; name one with --format");
}

std::unique_ptr<TraceReader> open_trace(const std::string& path, const TraceOptions& options) {
  const TraceFormat format = options.format == TraceFormat::automatic ? detect_trace_format(path) : options.format;
  std::unique_ptr<TraceReader> reader;
  switch (format) {
    case TraceFormat::native_csv: reader = detail::make_native_csv_reader(path, options); break;
    case TraceFormat::native_jsonl: reader = detail::make_native_jsonl_reader(path, options); break;
    case TraceFormat::azure: reader = detail::make_azure_reader(path, options); break;
    case TraceFormat::burstgpt: reader = detail::make_burstgpt_reader(path, options); break;
    case TraceFormat::mooncake: reader = detail::make_mooncake_reader(path, options); break;
    case TraceFormat::vidur: reader = detail::make_vidur_reader(path, options); break;
    case TraceFormat::lengths: reader = detail::make_lengths_reader(path, options); break;
    case TraceFormat::token_ids: reader = detail::make_token_ids_reader(path, options); break;
    case TraceFormat::automatic: check(false, "open_trace: format left automatic after detection"); break;
  }
  if (options.sort) return std::make_unique<SortedReader>(std::move(reader));
  return reader;
}

std::vector<Request> read_trace(const std::string& path, const TraceOptions& options) {
  auto reader = open_trace(path, options);
  std::vector<Request> out;
  Request r;
  while (reader->next(r)) out.push_back(r);
  return out;
}

}  // namespace kvsim
