// Reading request traces.
//
// A TraceReader streams requests one at a time, in arrival order, from a file in the native
// format (traces/README.md) or one of the imported formats; memory does not grow with the
// trace's length (except with TraceOptions::sort, which must see everything to sort it).
// Every row is validated as it is read: non-negative integers, 1 <= n <= 65,536, max_tokens >=
// output_tokens, cancellation not before arrival, arrival <= start <= first_token <=
// finish, prefix hashes no more than the prompt's blocks, and arrivals that never go
// backwards. Unique ids are *not* checked: that would need memory that grows with the trace.
//
// A bad row does not stop the reader at once: it records the problem (file, line, field
// and offending text) and goes on, so that one run shows up to the first
// TraceOptions::max_errors problems. It throws one InputError listing them when it has
// that many, or at the end of the file if it has any; the requests returned before then
// came from good rows. A file without any request is an error too.
#ifndef KVSIM_TRACE_H_
#define KVSIM_TRACE_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvsim/request.h"

namespace kvsim {

// kvsim/trace_formats.def lists the formats, each with a comment on what it reads.
enum class TraceFormat {
  automatic,  // detect from the header / first record
#define KVSIM_TRACE_FORMAT(format, row) format,
#include "kvsim/trace_formats.def"
#undef KVSIM_TRACE_FORMAT
};

// A format's --format name: its enumerator with '-' for '_' ("native-csv", "token-ids"),
// and "auto" for TraceFormat::automatic.
std::string_view trace_format_name(TraceFormat format);
// The inverse of trace_format_name. Throws InputError naming `field` for unknown names,
// listing the known ones.
TraceFormat parse_trace_format(std::string_view text, std::string_view field);
// Every name parse_trace_format accepts: "auto", then each format's in TraceFormat's order.
std::vector<std::string_view> trace_format_names();

struct TraceOptions {
  TraceFormat format = TraceFormat::automatic;
  // Accept arrivals that go backwards (the reader then buffers and sorts the whole trace,
  // so memory grows with it; ties keep file order). Off: a backwards arrival is an error.
  bool sort = false;
  // BurstGPT rows with 0 response tokens are failed requests: drop them (default), or
  // replay them as cancelled at arrival (output_tokens 0, cancel_ns == arrival_ns).
  bool keep_failed = false;
  // Arrival process for length-only traces: a Poisson process of this many requests per
  // second, seeded with synthetic_seed. 0 means "not given", an error for such traces.
  // (The same rate and seed give the same arrivals as `kvsim trace gen --arrivals
  // poisson:rate=R --seed S`.)
  double synthetic_rate_per_s = 0;
  std::uint64_t synthetic_seed = 1;
  // Block size at which prefix hashes are computed from token ids (token_ids format).
  std::int64_t hash_block_tokens = 16;
  // How many bad rows a reader collects before it stops and throws them all.
  std::int64_t max_errors = 20;

  // Load scaling (docs/replay.md, "Load scaling"), applied in this order after sorting:
  // 1. Keep requests whose arrival, in the trace's own time (before scaling), lies in
  //    [window_from_ns, window_to_ns). Arrivals never go backwards, so reading stops at the
  //    first arrival at or after window_to_ns; rows after it are not read (nor validated).
  // 2. Keep the first max_requests of those (0: all); reading stops after the last.
  // 3. Divide arrivals by the rate scale X = rate_scale_ppb / 10^9, measured from time 0 (not
  //    from the first arrival), rounded to the nearest nanosecond, halves up:
  //    arrival' = floor(arrival * 10^9 / rate_scale_ppb + 1/2). A cancellation keeps its
  //    patience (cancel_ns - arrival_ns), so the client waits as long as before. Sessions
  //    are ids and their think times are gaps between arrivals: those scale with them.
  //    A request with measured start/first_token/finish times is refused (they were
  //    measured at the trace's own load, and no rule turns them into another load's).
  // A window or count that keeps no request is an error (InputError naming the option).
  std::int64_t rate_scale_ppb = 1'000'000'000;  // X in parts per billion: 1.0 = unscaled
  std::int64_t window_from_ns = 0;
  std::int64_t window_to_ns = std::numeric_limits<std::int64_t>::max();  // max: no end
  std::int64_t max_requests = 0;

  bool scales_load() const {
    return rate_scale_ppb != 1'000'000'000 || window_from_ns != 0 ||
           window_to_ns != std::numeric_limits<std::int64_t>::max() || max_requests != 0;
  }
};

// Parses --rate-scale: a positive decimal with at most 9 fractional digits ("2", "0.5",
// "1.25"), in parts per billion. Throws InputError naming `field` otherwise.
std::int64_t parse_rate_scale_ppb(std::string_view text, std::string_view field);

// Parses --time-window FROM..TO, durations as kvsim/units.h reads them ("10min..20min",
// "..30s", "5min.."), into `options`' window. Throws InputError naming `field` when either
// end is malformed, the ".." is missing, or FROM >= TO.
void parse_time_window(std::string_view text, std::string_view field, TraceOptions& options);

class TraceReader {
 public:
  virtual ~TraceReader() = default;

  // Reads the next request into `out` (every member is overwritten; the capacity of its
  // strings and vectors is reused). Returns false at the end of the trace. Throws
  // InputError as described at the top of this file.
  virtual bool next(Request& out) = 0;

  virtual TraceFormat format() const = 0;
  const std::string& path() const { return path_; }
  // Bytes consumed so far and the file's size, for progress reporting.
  virtual std::int64_t bytes_read() const = 0;
  virtual std::int64_t total_bytes() const = 0;
  // Rows read so far that the format drops on purpose and never returns: BurstGPT's failed
  // requests (0 response tokens) unless TraceOptions::keep_failed. The count says how many
  // requests of the file a replay or a summary leaves out.
  virtual std::int64_t dropped() const { return 0; }

 protected:
  explicit TraceReader(std::string path) : path_(std::move(path)) {}

 private:
  std::string path_;
};

// A reader over requests already in memory, yielded in the order given: what
// TraceInMemory's readers are, and how tests and fuzzers hand the engine a hand-made trace.
// Progress counts `total_bytes` in proportion to the requests read (without it, one "byte"
// per request).
class RequestVectorReader final : public TraceReader {
 public:
  explicit RequestVectorReader(std::vector<Request> requests, std::string path = "<memory>");
  RequestVectorReader(std::shared_ptr<const std::vector<Request>> requests, std::string path, TraceFormat format,
                      std::int64_t total_bytes);
  bool next(Request& out) override;
  TraceFormat format() const override { return format_; }
  std::int64_t bytes_read() const override;
  std::int64_t total_bytes() const override { return total_bytes_; }

 private:
  std::shared_ptr<const std::vector<Request>> requests_;
  TraceFormat format_;
  std::int64_t total_bytes_;
  std::size_t next_ = 0;
};

// A trace read once and kept in memory, for an input that can be read only once (a pipe,
// a FIFO, /dev/stdin) but is needed several times (a replay per allocator). Memory grows
// with the trace, as with TraceOptions::sort.
class TraceInMemory {
 public:
  // Reads `source` to its end (its errors are thrown from here).
  explicit TraceInMemory(TraceReader& source);
  // A reader of the kept requests, as `source` gave them; any number, on any threads.
  std::unique_ptr<TraceReader> open() const;
  // The same with `load`'s load scaling (window, count, rate scale) applied on top, as
  // open_trace() applies it to a file: one trace read once, replayed at many loads.
  std::unique_ptr<TraceReader> open(const TraceOptions& load) const;

 private:
  std::string path_;
  TraceFormat format_;
  std::int64_t total_bytes_ = 0;
  std::shared_ptr<const std::vector<Request>> requests_;
};

// A trace path that names standard input, as in most command-line tools.
inline constexpr char kStandardInput[] = "-";

// True when `path` can be opened and read again from the start (a regular file), false for
// a pipe, a FIFO, a device, /dev/stdin or "-", which a reader may meet only once.
bool trace_can_be_reread(const std::string& path);

// Opens `path` ("-": standard input) and returns a reader for its format. Throws InputError when the file cannot
// be opened, its format is not recognised, or its header does not fit the format.
std::unique_ptr<TraceReader> open_trace(const std::string& path, const TraceOptions& options = {});

// The format open_trace() would pick for `path`, from its header or first record. Throws
// InputError (naming the file and the known formats) when it matches none.
TraceFormat detect_trace_format(const std::string& path);

// Reads a whole trace into memory: for tests, tools and traces known to be small.
std::vector<Request> read_trace(const std::string& path, const TraceOptions& options = {});

}  // namespace kvsim

#endif  // KVSIM_TRACE_H_
