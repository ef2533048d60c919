// The JSON Lines readers: kvsim's native JSONL, Mooncake, and traces with token ids.
//
// One JSON object per line. Records are parsed with nlohmann::json's SAX interface rather
// than into a DOM: it hands over the text of every decimal number, so "arrival": 3217.9951690
// becomes exactly 3,217,995,169,000 ns (a DOM would have rounded it through a double), and
// long arrays (hash ids, token ids) are consumed element by element without being stored.
#include <nlohmann/json.hpp>

#include "block_hash.h"
#include "trace_native.h"
#include "trace_read.h"

namespace kvsim::detail {
namespace {

using json = nlohmann::json;

// A top-level value of a record, as the parser reported it.
struct JsonValue {
  enum class Kind { absent, null, boolean, unsigned_int, negative_int, decimal, string, array, object };
  Kind kind = Kind::absent;
  std::uint64_t u = 0;
  std::string text;  // a decimal's or negative integer's digits, a string's value, "true"/"false"
};

std::string describe(const JsonValue& v) {
  switch (v.kind) {
    case JsonValue::Kind::absent: return "nothing";
    case JsonValue::Kind::null: return "null";
    case JsonValue::Kind::boolean: return v.text;
    case JsonValue::Kind::unsigned_int: return std::to_string(v.u);
    case JsonValue::Kind::negative_int:
    case JsonValue::Kind::decimal: return v.text;
    case JsonValue::Kind::string: return "the string " + quote_text(v.text);
    case JsonValue::Kind::array: return "an array";
    case JsonValue::Kind::object: return "an object";
  }
  return "?";
}

// The skeleton of a JSONL reader: a table of keys, the values of one record, and the SAX
// callbacks that fill them.
class JsonlReader : public RowReader {
 public:
  struct Key {
    std::string_view name;
    bool integer_array = false;  // an array of unsigned integers, passed to on_array_value()
  };

  // nlohmann's SAX interface, called while a line is parsed. Returning false stops it.
  bool null() { return scalar(JsonValue::Kind::null, 0, {}); }
  bool boolean(bool b) { return scalar(JsonValue::Kind::boolean, 0, b ? "true" : "false"); }
  bool number_integer(json::number_integer_t v) {
    // nlohmann reports only integers written with a minus sign here: 0 was "-0", and a
    // message must show what the file says.
    return scalar(JsonValue::Kind::negative_int, 0, v == 0 ? "-0" : std::to_string(v));
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (depth_ == 2 && array_slot_ >= 0) return on_array_value(array_slot_, v);
    return scalar(JsonValue::Kind::unsigned_int, v, {});
  }
  bool number_float(json::number_float_t, const json::string_t& text) {
    return scalar(JsonValue::Kind::decimal, 0, text);
  }
  bool string(json::string_t& s) { return scalar(JsonValue::Kind::string, 0, s); }
  bool binary(json::binary_t&) { return scalar(JsonValue::Kind::string, 0, "binary"); }
  bool start_object(std::size_t) {
    if (depth_ == 0) {
      ++depth_;
      return true;
    }
    if (!container(JsonValue::Kind::object)) return false;
    ++depth_;
    return true;
  }
  bool end_object() {
    --depth_;
    return true;
  }
  bool start_array(std::size_t) {
    if (depth_ == 0) return not_an_object();
    if (!container(JsonValue::Kind::array)) return false;
    if (depth_ == 1 && slot_ >= 0 && keys_[static_cast<std::size_t>(slot_)].integer_array) array_slot_ = slot_;
    ++depth_;
    return true;
  }
  bool end_array() {
    if (--depth_ == 1) array_slot_ = -1;
    return true;
  }
  bool key(json::string_t& name) {
    if (depth_ != 1) return true;  // keys of nested objects are not ours
    slot_ = -1;
    for (std::size_t i = 0; i < keys_.size(); ++i) {
      if (keys_[i].name == name) slot_ = static_cast<int>(i);
    }
    if (slot_ < 0) {
      if (!unknown_keys_are_errors_) return true;
      std::string known;
      for (const auto& k : keys_) {
        if (!known.empty()) known += ", ";
        known.append(k.name);
      }
      return stop(label(name),
                  "unknown field (a " + std::string(trace_format_name(format())) + " record has fields " + known + ")");
    }
    if (values_[static_cast<std::size_t>(slot_)].kind != JsonValue::Kind::absent) {
      return stop(label(name), "appears twice in this record");
    }
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
    // nlohmann's message reads "[json.exception.parse_error.101] parse error at line 1,
    // column 7: syntax error while parsing ..."; keep what is after the colon (the line is
    // ours to report, and `position` is the column).
    std::string what = e.what();
    const auto colon = what.find(": ");
    if (colon != std::string::npos) what = what.substr(colon + 2);
    // nlohmann ends with the token it last read, which may be a whole 10 MB line: keep its
    // ends, as quote_text() does for our own messages.
    const auto last_read = what.find("; last read: ");
    if (last_read != std::string::npos && what.size() - last_read > 120) {
      const std::size_t token = last_read + 13;
      what = what.substr(0, token) + quote_text(std::string_view(what).substr(token));
    }
    const std::string hint =
        lines_.line_terminated() ? "" : " (the file ends in the middle of this line: was it cut short?)";
    return stop("", "malformed JSON at column " + std::to_string(position) + ": " + printable(what) + hint);
  }

 protected:
  JsonlReader(const std::string& path, const TraceOptions& options, TraceFormat format, std::vector<Key> keys,
              bool unknown_keys_are_errors)
      : RowReader(path, options, format),
        keys_(std::move(keys)),
        values_(keys_.size()),
        unknown_keys_are_errors_(unknown_keys_are_errors) {
    value_kind_ = "field";
  }

  // One element of an integer-array field. Returns false after stop() to reject the record.
  virtual bool on_array_value(int slot, std::uint64_t value) = 0;

  // Parses `line` into values_ (and the array callbacks). False after recording an error.
  bool parse_record(std::string_view line) {
    for (auto& v : values_) v.kind = JsonValue::Kind::absent;
    depth_ = 0;
    slot_ = -1;
    array_slot_ = -1;
    stopped_ = false;
    const bool ok = json::sax_parse(line.data(), line.data() + line.size(), this);
    if (stopped_) {
      fail(stop_field_, std::move(stop_problem_));
      return false;
    }
    if (!ok) {
      fail("", "malformed JSON");
      return false;
    }
    return true;
  }

  const JsonValue& value(int slot) const { return values_[static_cast<std::size_t>(slot)]; }
  bool present(int slot) const {
    const auto kind = value(slot).kind;
    return kind != JsonValue::Kind::absent && kind != JsonValue::Kind::null;
  }
  std::string slot_label(int slot) const { return label(keys_[static_cast<std::size_t>(slot)].name); }

  // Records an error from inside a SAX callback and stops the parser.
  bool stop(std::string field, std::string problem) {
    if (!stopped_) {
      stopped_ = true;
      stop_field_ = std::move(field);
      stop_problem_ = std::move(problem);
    }
    return false;
  }

  Row missing(int slot) { return fail(slot_label(slot), "missing from this record (it is required)"); }

  // A required or optional non-negative integer (null counts as absent).
  bool get_count(int slot, std::int64_t& out) {
    const JsonValue& v = value(slot);
    if (v.kind == JsonValue::Kind::unsigned_int) {
      if (v.u > static_cast<std::uint64_t>(INT64_MAX)) {
        fail(slot_label(slot), std::to_string(v.u) + " is too large (does not fit in 64 bits)");
        return false;
      }
      out = static_cast<std::int64_t>(v.u);
      return true;
    }
    if (v.kind == JsonValue::Kind::decimal && parse_non_negative(v.text, out) == DecimalStatus::overflow) {
      fail(slot_label(slot), v.text + " is too large (does not fit in 64 bits)");
      return false;
    }
    fail(slot_label(slot), "expected a non-negative integer, got " + describe(v));
    return false;
  }

  // A time in seconds (scale 9), milliseconds (scale 6) or nanoseconds (scale 0): the
  // number's digits times 10^scale, exactly.
  bool get_time(int slot, int scale, std::int64_t& ns) {
    const JsonValue& v = value(slot);
    const char* unit = scale == 9 ? "seconds" : scale == 6 ? "milliseconds" : "nanoseconds";
    DecimalStatus status = DecimalStatus::not_a_number;
    std::string text;
    if (v.kind == JsonValue::Kind::unsigned_int) {
      text = std::to_string(v.u);
    } else if (v.kind == JsonValue::Kind::decimal) {
      text = v.text;
    } else if (v.kind == JsonValue::Kind::negative_int) {
      status = DecimalStatus::negative;
    }
    if (!text.empty()) status = parse_scaled_decimal(text, scale, ns);
    switch (status) {
      case DecimalStatus::ok: return true;
      case DecimalStatus::negative:
        fail(slot_label(slot), std::string("expected ") + unit + " (a non-negative number), got " + describe(v));
        return false;
      case DecimalStatus::overflow:
        fail(slot_label(slot), text + " " + unit + " is too large (does not fit in 64-bit nanoseconds)");
        return false;
      case DecimalStatus::too_precise:
        fail(slot_label(slot), text + " " + unit + " is finer than 1 ns: times are kept as integer nanoseconds");
        return false;
      default:
        fail(slot_label(slot), std::string("expected ") + unit + " (a non-negative number), got " + describe(v) +
                                   (v.kind == JsonValue::Kind::decimal ? exponent_hint(v.text) : ""));
        return false;
    }
  }

  // A string, or an unsigned integer taken as its decimal text (ids are often numbers).
  bool get_name(int slot, std::string& out) {
    const JsonValue& v = value(slot);
    if (v.kind == JsonValue::Kind::string) {
      // \u0000 decodes to a NUL byte, which no text output (a CSV trace, --per-request) can
      // carry and every text reader refuses.
      if (v.text.find('\0') != std::string::npos) {
        fail(slot_label(slot), "holds a NUL character (\\u0000), which kvsim's text outputs cannot carry");
        return false;
      }
      out.assign(v.text);
      return true;
    }
    if (v.kind == JsonValue::Kind::unsigned_int) {
      out.assign(std::to_string(v.u));
      return true;
    }
    fail(slot_label(slot), "expected a string, got " + describe(v));
    return false;
  }

  std::vector<Key> keys_;

 private:
  bool not_an_object() { return stop("", "expected a JSON object on each line"); }

  // A value that does not belong to a tracked integer array.
  bool scalar(JsonValue::Kind kind, std::uint64_t u, std::string_view text) {
    if (depth_ == 0) return not_an_object();
    if (depth_ == 2 && array_slot_ >= 0) {
      JsonValue v;
      v.kind = kind;
      v.text = std::string(text);
      return stop(slot_label(array_slot_), "expected an array of non-negative integers, found " + describe(v));
    }
    if (depth_ != 1 || slot_ < 0) return true;  // nested or ignored
    JsonValue& v = values_[static_cast<std::size_t>(slot_)];
    v.kind = kind;
    v.u = u;
    v.text.assign(text.data(), text.size());
    return true;
  }

  bool container(JsonValue::Kind kind) {
    if (depth_ == 2 && array_slot_ >= 0) {
      JsonValue v;
      v.kind = kind;
      return stop(slot_label(array_slot_), "expected an array of non-negative integers, found " + describe(v));
    }
    if (depth_ == 1 && slot_ >= 0) values_[static_cast<std::size_t>(slot_)].kind = kind;
    return true;
  }

  std::vector<JsonValue> values_;
  bool unknown_keys_are_errors_;
  int depth_ = 0;
  int slot_ = -1;
  int array_slot_ = -1;
  bool stopped_ = false;
  std::string stop_field_;
  std::string stop_problem_;
};

// ---------------------------------------------------------------------------------------
// kvsim's native JSONL: the same names as the native CSV; numbers for times and counts,
// strings (or integers) for id and session, an array of integers for prefix_hashes, and
// null for an absent optional value.

using F = NativeField;

std::vector<JsonlReader::Key> native_keys() {
  std::vector<JsonlReader::Key> keys;
  for (auto name : kNativeFieldNames) keys.push_back({name, name == "prefix_hashes"});
  return keys;
}

class NativeJsonlReader final : public JsonlReader {
 public:
  NativeJsonlReader(const std::string& path, const TraceOptions& options)
      : JsonlReader(path, options, TraceFormat::native_jsonl, native_keys(), true) {}

 private:
  static int slot(F f) { return static_cast<int>(f); }

  bool on_array_value(int, std::uint64_t value) override {
    current_->prefix_hashes.push_back(value);
    return true;
  }

  bool optional_count(F f, std::optional<std::int64_t>& out) {
    if (!present(slot(f))) return true;
    std::int64_t v = 0;
    if (!get_count(slot(f), v)) return false;
    out = v;
    return true;
  }
  bool optional_time(F f, std::optional<std::int64_t>& out) {
    if (!present(slot(f))) return true;
    std::int64_t v = 0;
    if (!get_time(slot(f), 9, v)) return false;
    out = v;
    return true;
  }

  Row parse_line(std::string_view line, Request& out) override {
    current_ = &out;
    if (!parse_record(line)) return Row::bad;
    for (F required : {F::id, F::arrival, F::prompt_tokens, F::output_tokens}) {
      if (!present(slot(required))) return missing(slot(required));
    }
    if (!get_name(slot(F::id), out.id)) return Row::bad;
    if (out.id.empty()) return fail(label("id"), "expected a request id, got an empty string");
    if (!get_time(slot(F::arrival), 9, out.arrival_ns)) return Row::bad;
    if (!get_count(slot(F::prompt_tokens), out.prompt_tokens)) return Row::bad;
    if (!get_count(slot(F::output_tokens), out.output_tokens)) return Row::bad;
    if (!optional_count(F::max_tokens, out.max_tokens)) return Row::bad;
    if (!optional_time(F::cancel_at, out.cancel_ns)) return Row::bad;
    if (present(slot(F::cancel_after))) {
      if (out.cancel_ns) return fail(label("cancel_after"), "give cancel_at or cancel_after, not both");
      std::int64_t after = 0;
      if (!get_time(slot(F::cancel_after), 9, after)) return Row::bad;
      std::int64_t at = 0;
      if (__builtin_add_overflow(out.arrival_ns, after, &at)) {
        return fail(label("cancel_after"), "arrival + cancel_after does not fit in 64-bit nanoseconds");
      }
      out.cancel_ns = at;
    }
    if (present(slot(F::n))) {
      if (!get_count(slot(F::n), out.n)) return Row::bad;
      if (out.n < 1) return fail(label("n"), "expected at least 1 parallel sample, got 0");
    }
    if (present(slot(F::session)) && !get_name(slot(F::session), out.session)) return Row::bad;
    if (!optional_time(F::start, out.start_ns)) return Row::bad;
    if (!optional_time(F::first_token, out.first_token_ns)) return Row::bad;
    if (!optional_time(F::finish, out.finish_ns)) return Row::bad;
    if (present(slot(F::prefix_block_tokens))) {
      if (!get_count(slot(F::prefix_block_tokens), out.prefix_block_tokens)) return Row::bad;
      if (out.prefix_block_tokens < 1) return fail(label("prefix_block_tokens"), "expected at least 1 token per block, got 0");
    }
    if (present(slot(F::prefix_hashes)) && value(slot(F::prefix_hashes)).kind != JsonValue::Kind::array) {
      return fail(label("prefix_hashes"), "expected an array of non-negative integers, got " +
                                              describe(value(slot(F::prefix_hashes))));
    }
    return Row::ok;
  }

  Request* current_ = nullptr;
};

// ---------------------------------------------------------------------------------------
// Mooncake (FAST'25 release): {"timestamp": ms, "input_length", "output_length",
// "hash_ids": [...]}, hash ids at 512 tokens per block with the last block usually
// partial. Records carry no id: a request's id is its record number, from 1.

constexpr std::int64_t kMooncakeBlockTokens = 512;

class MooncakeReader final : public JsonlReader {
 public:
  MooncakeReader(const std::string& path, const TraceOptions& options)
      : JsonlReader(path, options, TraceFormat::mooncake,
                    {{"timestamp"}, {"input_length"}, {"output_length"}, {"hash_ids", true}}, false) {
    message_names_.arrival = "timestamp";
    message_names_.prompt = "input_length";
    message_names_.output = "output_length";
    message_names_.prefix_hashes = "hash_ids";
  }

 private:
  enum Slot { kTimestamp, kInput, kOutput, kHashes };

  bool on_array_value(int, std::uint64_t value) override {
    current_->prefix_hashes.push_back(value);
    return true;
  }

  Row parse_line(std::string_view line, Request& out) override {
    ++record_;
    current_ = &out;
    if (!parse_record(line)) return Row::bad;
    for (int required : {kTimestamp, kInput, kOutput}) {
      if (!present(required)) return missing(required);
    }
    out.id.assign(std::to_string(record_));
    if (!get_time(kTimestamp, 6, out.arrival_ns)) return Row::bad;
    if (!get_count(kInput, out.prompt_tokens)) return Row::bad;
    if (!get_count(kOutput, out.output_tokens)) return Row::bad;
    if (present(kHashes)) {
      if (value(kHashes).kind != JsonValue::Kind::array) {
        return fail(label("hash_ids"), "expected an array of non-negative integers, got " + describe(value(kHashes)));
      }
      out.prefix_block_tokens = kMooncakeBlockTokens;
    }
    return Row::ok;
  }

  Request* current_ = nullptr;
  std::int64_t record_ = 0;
};

// ---------------------------------------------------------------------------------------
// Traces that carry token ids (LLMServingSim's workloads): {"input_toks", "output_toks",
// "arrival_time_ns", "input_tok_ids": [...]}, optionally "session_id". Prefix hashes are
// computed from input_tok_ids at TraceOptions::hash_block_tokens (see block_hash.h: full
// blocks only, chained). A request's id is its record number, from 1.

class TokenIdsReader final : public JsonlReader {
 public:
  TokenIdsReader(const std::string& path, const TraceOptions& options)
      : JsonlReader(path, options, TraceFormat::token_ids,
                    {{"input_toks"}, {"output_toks"}, {"arrival_time_ns"}, {"input_tok_ids", true}, {"session_id"}},
                    false) {
    if (options.hash_block_tokens < 1) fail_file(0, "the block size for hashing token ids must be at least 1");
    message_names_.arrival = "arrival_time_ns";
    message_names_.prompt = "input_toks";
    message_names_.output = "output_toks";
    message_names_.prefix_hashes = "input_tok_ids";
  }

 private:
  enum Slot { kInput, kOutput, kArrival, kTokenIds, kSession };

  bool on_array_value(int, std::uint64_t value) override {
    ++token_count_;
    hasher_.add(value);
    return true;
  }

  Row parse_line(std::string_view line, Request& out) override {
    ++record_;
    token_count_ = 0;
    hasher_ = BlockHasher(options_.hash_block_tokens, &out.prefix_hashes);
    if (!parse_record(line)) return Row::bad;
    for (int required : {kOutput, kArrival}) {
      if (!present(required)) return missing(required);
    }
    out.id.assign(std::to_string(record_));
    if (!get_time(kArrival, 0, out.arrival_ns)) return Row::bad;
    if (!get_count(kOutput, out.output_tokens)) return Row::bad;
    const bool have_ids = present(kTokenIds);
    if (have_ids && value(kTokenIds).kind != JsonValue::Kind::array) {
      return fail(label("input_tok_ids"), "expected an array of token ids, got " + describe(value(kTokenIds)));
    }
    if (present(kInput)) {
      if (!get_count(kInput, out.prompt_tokens)) return Row::bad;
      if (have_ids && out.prompt_tokens != token_count_) {
        return fail(label("input_toks"), std::to_string(out.prompt_tokens) + " tokens, but input_tok_ids has " +
                                             std::to_string(token_count_));
      }
    } else if (have_ids) {
      out.prompt_tokens = token_count_;
    } else {
      return missing(kInput);
    }
    if (have_ids) out.prefix_block_tokens = options_.hash_block_tokens;
    if (present(kSession) && !get_name(kSession, out.session)) return Row::bad;
    return Row::ok;
  }

  BlockHasher hasher_{1, nullptr};
  std::int64_t token_count_ = 0;
  std::int64_t record_ = 0;
};

}  // namespace

std::unique_ptr<TraceReader> make_native_jsonl_reader(const std::string& path, const TraceOptions& options) {
  return std::make_unique<NativeJsonlReader>(path, options);
}
std::unique_ptr<TraceReader> make_mooncake_reader(const std::string& path, const TraceOptions& options) {
  return std::make_unique<MooncakeReader>(path, options);
}
std::unique_ptr<TraceReader> make_token_ids_reader(const std::string& path, const TraceOptions& options) {
  return std::make_unique<TokenIdsReader>(path, options);
}

}  // namespace kvsim::detail
