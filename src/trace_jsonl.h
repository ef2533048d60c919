// The base of the JSON Lines readers (trace_jsonl.cc: native JSONL, Mooncake, token ids), for
// a JSONL format in a file of its own.
//
// A subclass lists its record's keys; JsonlReader parses each line with nlohmann::json's SAX
// interface into one value per key (the text of every decimal number kept, so times stay
// exact; long integer arrays handed to on_array_value() element by element, never stored),
// and its getters turn a value into a count, a time or a name, with the messages kvsim's
// readers give.
#ifndef KVSIM_SRC_TRACE_JSONL_H_
#define KVSIM_SRC_TRACE_JSONL_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "decimal.h"
#include "trace_read.h"

namespace kvsim::detail {

// A top-level value of a record, as the parser reported it.
struct JsonValue {
  enum class Kind { absent, null, boolean, unsigned_int, negative_int, decimal, string, array, object };
  Kind kind = Kind::absent;
  std::uint64_t u = 0;
  std::string text;  // a decimal's or negative integer's digits, a string's value, "true"/"false"
};

inline std::string describe(const JsonValue& v) {
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
  using json = nlohmann::json;

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

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_TRACE_JSONL_H_
