// The other CSV importers: BurstGPT, Vidur, and length-only files paired with a synthetic
// Poisson arrival process. None of these formats names its requests: a request's id is
// its row number among the data rows, from 1. Their columns are found by name, and
// columns they do not use are ignored (BurstGPT's later releases insert columns).
#include <fmt/core.h>

#include "kvsim/option_names.h"
#include "random.h"
#include "trace_formats.h"
#include "trace_native.h"
#include "trace_read.h"

namespace kvsim::detail {
namespace {

// BurstGPT (Wang et al., 2024): Timestamp is seconds since the trace's start, as printed
// by Python (digits past the ninth decimal place are rounded to the nearest nanosecond).
// A row with 0 response tokens is a request that failed.
class BurstGptReader final : public LengthColumnsReader {
 public:
  BurstGptReader(const std::string& path, const TraceOptions& options)
      : LengthColumnsReader(path, options, TraceFormat::burstgpt, "BurstGPT",
                            {"Timestamp", "Request tokens", "Response tokens"}) {}

 private:
  Row parse_line(std::string_view line, Request& out) override {
    if (!begin_row(line, out)) return Row::bad;
    if (!parse_time(column_names_.time, time_text(), out.arrival_ns, true)) return Row::bad;
    if (!parse_lengths(out)) return Row::bad;
    if (out.output_tokens == 0) {
      if (!options_.keep_failed) return Row::skip;
      // Replayed as a request the client gave up on the moment it arrived: it is admitted
      // (and its prompt counted) only if the replay processes arrivals before cancellations.
      out.cancel_ns = out.arrival_ns;
    }
    return Row::ok;
  }

  std::string no_requests_problem() const override {
    if (dropped() == 0) return RowReader::no_requests_problem();
    return "no requests: all " + std::to_string(dropped()) +
           " rows are failed requests (0 response tokens), which are dropped; "
           "keep them as cancelled at arrival with " + kOptKeepFailed;
  }
};

// Vidur's trace-replay CSVs: arrived_at in seconds (printed from doubles: rounded to the
// nanosecond like BurstGPT), num_prefill_tokens, num_decode_tokens.
class VidurReader final : public LengthColumnsReader {
 public:
  VidurReader(const std::string& path, const TraceOptions& options)
      : LengthColumnsReader(path, options, TraceFormat::vidur, "Vidur",
                            {"arrived_at", "num_prefill_tokens", "num_decode_tokens"}) {}

 private:
  Row parse_line(std::string_view line, Request& out) override {
    if (!begin_row(line, out)) return Row::bad;
    if (!parse_time(column_names_.time, time_text(), out.arrival_ns, true)) return Row::bad;
    return parse_lengths(out) ? Row::ok : Row::bad;
  }
};

// The arrival columns of the other formats' CSVs (Vidur, Azure, BurstGPT, and a lowercase
// timestamp): a lengths trace draws its own arrivals, so it refuses them.
constexpr std::string_view kOtherArrivalColumns[] = {"arrived_at", "TIMESTAMP", "Timestamp", "timestamp"};

// A CSV of lengths only (Vidur's processed traces: num_prefill_tokens,num_decode_tokens,...;
// or prompt_tokens,output_tokens). Arrivals come from a Poisson process at
// TraceOptions::synthetic_rate_per_s, seeded with synthetic_seed.
class LengthsReader final : public CsvReader {
 public:
  LengthsReader(const std::string& path, const TraceOptions& options)
      : CsvReader(path, options, TraceFormat::lengths), rng_(options.synthetic_seed, kArrivalStream) {
    for (auto name : {"num_prefill_tokens", "prompt_tokens", "input_tokens", "input_length"}) {
      if (prompt_col_ < 0 && column(name) >= 0) {
        prompt_col_ = column(name);
        prompt_name_ = name;
      }
    }
    for (auto name : {"num_decode_tokens", "output_tokens", "output_length"}) {
      if (output_col_ < 0 && column(name) >= 0) {
        output_col_ = column(name);
        output_name_ = name;
      }
    }
    if (prompt_col_ < 0 || output_col_ < 0) {
      fail_file(header_line_,
                "a trace of lengths needs a prompt column (num_prefill_tokens or prompt_tokens) and an output "
                "column (num_decode_tokens or output_tokens)");
    }
    // An id column names the requests (the native reader, which needs arrivals too, sends
    // such a file here); without one they are named by their row.
    id_col_ = column("id");
    // Columns this reader would drop without a word: arrivals (it draws its own), and the
    // native format's generation limits, cancellations, samples, sessions and prefixes.
    for (std::string_view name : kNativeFieldNames) {
      if (name == "id" || name == "prompt_tokens" || name == "output_tokens") continue;
      refuse_dropped(name);
    }
    for (std::string_view name : kOtherArrivalColumns) refuse_dropped(name);
    if (!(options.synthetic_rate_per_s > 0)) {
      fail_file(0,
                "this trace has lengths only, no arrival times: give a synthetic Poisson arrival rate "
                "(" + std::string(kOptRate) + " R requests per second; " + kOptSeed + " S picks the process)");
    }
    message_names_.prompt = prompt_name_;
    message_names_.output = output_name_;
  }

 private:
  Row parse_line(std::string_view line, Request& out) override {
    ++row_;
    // The clock advances for every row, good or bad, so that fixing a bad row does not
    // move the arrivals of the rows after it.
    if (__builtin_add_overflow(now_ns_, poisson_gap_ns(rng_, options_.synthetic_rate_per_s), &now_ns_)) {
      fail_file(lines_.line_number(),
                fmt::format("the Poisson arrivals at {} {} requests per second pass the largest time kvsim "
                            "represents (about 292 years) at row {}: give a higher rate, or fewer rows",
                            kOptRate, options_.synthetic_rate_per_s, row_));
    }
    if (!split_row(line)) return Row::bad;
    if (id_col_ >= 0) {
      const std::string_view id = field(id_col_);
      if (id.empty()) return fail(label("id"), "expected a request id, got nothing");
      if (!text_is_utf8("id", id)) return Row::bad;
      out.id.assign(id.data(), id.size());
    } else {
      name_by_row(out, row_);
    }
    out.arrival_ns = now_ns_;
    if (!parse_count(prompt_name_, field(prompt_col_), out.prompt_tokens)) return Row::bad;
    if (!parse_count(output_name_, field(output_col_), out.output_tokens)) return Row::bad;
    return Row::ok;
  }

  void refuse_dropped(std::string_view name) {
    if (column(name) < 0) return;
    // A trace with arrivals is read in its own format; one without them would keep the
    // column only as kvsim's native format, which needs id and arrival.
    bool timed = column("arrival") >= 0;
    for (std::string_view arrival : kOtherArrivalColumns) timed = timed || column(arrival) >= 0;
    fail_file(header_line_, "column '" + std::string(name) +
                                "': a trace of lengths takes its prompt and output lengths only (arrivals from " +
                                kOptRate + "), so this column would be dropped; " +
                                (timed ? std::string("read the trace in its own format (leave --format out)")
                                       : std::string("kvsim's native format keeps it, with id and arrival columns "
                                                     "(traces/README.md)")));
  }

  int id_col_ = -1;
  int prompt_col_ = -1;
  int output_col_ = -1;
  std::string_view prompt_name_;
  std::string_view output_name_;
  std::int64_t row_ = 0;
  Rng rng_;
  std::int64_t now_ns_ = 0;
};

}  // namespace

extern constinit const TraceFormatInfo kBurstGptFormat{
    TraceFormat::burstgpt, "burstgpt", TraceSyntax::csv, false,
    "BurstGPT (Timestamp,...,Request tokens,Response tokens,...)",
    [](const FirstRecord& first) { return header_has(first, "Timestamp") && header_has(first, "Request tokens"); },
    make_reader<BurstGptReader>};

// Listed before lengths: a Vidur header has num_prefill_tokens too.
extern constinit const TraceFormatInfo kVidurFormat{
    TraceFormat::vidur, "vidur", TraceSyntax::csv, false, "Vidur (arrived_at,num_prefill_tokens,num_decode_tokens)",
    [](const FirstRecord& first) { return header_has(first, "arrived_at"); }, make_reader<VidurReader>};

// Tried before the native format: prompt_tokens and output_tokens without id or arrival are
// lengths only, which the native reader could not read.
extern constinit const TraceFormatInfo kLengthsFormat{
    TraceFormat::lengths, "lengths", TraceSyntax::csv, false,
    "lengths only (num_prefill_tokens,num_decode_tokens, or prompt_tokens,output_tokens without id and arrival)",
    [](const FirstRecord& first) {
      return header_has(first, "num_prefill_tokens") ||
             (header_has(first, "prompt_tokens") && header_has(first, "output_tokens") && !header_has(first, "id") &&
              !header_has(first, "arrival"));
    },
    make_reader<LengthsReader>};

}  // namespace kvsim::detail
