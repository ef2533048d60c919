// kvsim's native CSV traces (traces/README.md): named columns in any order, the four
// required ones and any of the optional ones; an empty cell is an absent value.
#include <array>

#include "kvsim/option_names.h"
#include "kvsim/units.h"
#include "trace_formats.h"
#include "trace_native.h"
#include "trace_read.h"

namespace kvsim::detail {
namespace {

using F = NativeField;

class NativeCsvReader final : public CsvReader {
 public:
  NativeCsvReader(const std::string& path, const TraceOptions& options)
      : CsvReader(path, options, TraceFormat::native_csv) {
    col_.fill(-1);
    for (std::size_t i = 0; i < header_.size(); ++i) {
      const int known = native_field_index(header_[i]);
      if (known < 0) {
        // A typo such as "promt_tokens" would otherwise silently drop a value.
        fail_file(header_line_, "unknown column '" + printable(header_[i]) + "' (a native CSV trace has columns " +
                                    native_field_list() + ")");
      }
      col_[static_cast<std::size_t>(known)] = static_cast<int>(i);
    }
    for (F required : {F::id, F::arrival, F::prompt_tokens, F::output_tokens}) {
      if (col(required) < 0) {
        std::string hint;
        if (required == F::arrival) hint = "; for a file of lengths only, read it as " + std::string(kOptFormat) + " lengths with " + kOptRate;
        fail_file(header_line_, "missing column '" + std::string(native_name(required)) +
                                    "' (required: id, arrival, prompt_tokens, output_tokens" + hint + ")");
      }
    }
    if ((col(F::prefix_hashes) < 0) != (col(F::prefix_block_tokens) < 0)) {
      fail_file(header_line_, "columns 'prefix_hashes' and 'prefix_block_tokens' go together: give both or neither");
    }
  }

 private:
  int col(F f) const { return col_[static_cast<std::size_t>(f)]; }
  // The cell of `f`, or "" when the file has no such column.
  std::string_view cell(F f) const { return col(f) < 0 ? std::string_view{} : field(col(f)); }

  bool optional_count(F f, std::optional<std::int64_t>& out) {
    const std::string_view text = cell(f);
    if (text.empty()) return true;
    std::int64_t value = 0;
    if (!parse_count(native_name(f), text, value)) return false;
    out = value;
    return true;
  }

  bool optional_time(F f, std::optional<std::int64_t>& out) {
    const std::string_view text = cell(f);
    if (text.empty()) return true;
    std::int64_t value = 0;
    if (!parse_time(native_name(f), text, value, false)) return false;
    out = value;
    return true;
  }


  Row parse_line(std::string_view line, Request& out) override {
    if (!split_row(line)) return Row::bad;
    const std::string_view id = field(col(F::id));
    if (id.empty()) return fail(label("id"), "expected a request id, got nothing");
    if (!text_is_utf8("id", id)) return Row::bad;
    out.id.assign(id.data(), id.size());
    if (!parse_time("arrival", field(col(F::arrival)), out.arrival_ns, false)) return Row::bad;
    if (!parse_count("prompt_tokens", field(col(F::prompt_tokens)), out.prompt_tokens)) return Row::bad;
    if (!parse_count("output_tokens", field(col(F::output_tokens)), out.output_tokens)) return Row::bad;
    if (header_.size() == 4) return Row::ok;  // the common case: nothing optional

    if (!optional_count(F::max_tokens, out.max_tokens)) return Row::bad;
    if (!optional_time(F::cancel_at, out.cancel_ns)) return Row::bad;
    if (!cell(F::cancel_after).empty()) {
      if (out.cancel_ns) return fail(label("cancel_after"), "give cancel_at or cancel_after, not both");
      std::int64_t after = 0;
      if (!parse_time("cancel_after", cell(F::cancel_after), after, false)) return Row::bad;
      std::int64_t at = 0;
      if (__builtin_add_overflow(out.arrival_ns, after, &at)) {
        return fail(label("cancel_after"), "arrival + cancel_after does not fit in 64-bit nanoseconds");
      }
      out.cancel_ns = at;
    }
    if (!cell(F::n).empty()) {
      if (!parse_count("n", cell(F::n), out.n)) return Row::bad;
      if (out.n < 1) return fail(label("n"), "expected at least 1 parallel sample, got " + quote_text(cell(F::n)));
    }
    if (!text_is_utf8("session", cell(F::session))) return Row::bad;
    out.session.assign(cell(F::session));
    if (!optional_time(F::start, out.start_ns)) return Row::bad;
    if (!optional_time(F::first_token, out.first_token_ns)) return Row::bad;
    if (!optional_time(F::finish, out.finish_ns)) return Row::bad;
    if (!cell(F::prefix_block_tokens).empty()) {
      if (!parse_count("prefix_block_tokens", cell(F::prefix_block_tokens), out.prefix_block_tokens)) return Row::bad;
      if (out.prefix_block_tokens < 1) {
        return fail(label("prefix_block_tokens"),
                    "expected at least 1 token per block, got " + quote_text(cell(F::prefix_block_tokens)));
      }
    }
    if (!parse_hash_list("prefix_hashes", cell(F::prefix_hashes), out.prefix_hashes)) return Row::bad;
    return Row::ok;
  }

  std::array<int, kNativeFieldNames.size()> col_{};
};

}  // namespace

// The fallback of CSV detection: any header naming a native column.
extern constinit const TraceFormatInfo kNativeCsvFormat{
    TraceFormat::native_csv, "native-csv", TraceSyntax::csv, true,
    "native CSV (id,arrival,prompt_tokens,output_tokens,...)",
    [](const FirstRecord& first) {
      for (const auto& name : *first.header) {
        if (native_field_index(name) >= 0) return true;
      }
      return false;
    },
    make_reader<NativeCsvReader>};

}  // namespace kvsim::detail
