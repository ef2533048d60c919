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
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvsim/request.h"

namespace kvsim {

enum class TraceFormat {
  automatic,   // detect from the header / first record
  native_csv,  // kvsim's own CSV (traces/README.md)
  native_jsonl,
  azure,       // Azure LLM inference traces 2023/2024: TIMESTAMP,ContextTokens,GeneratedTokens
  burstgpt,    // BurstGPT: Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
  mooncake,    // Mooncake JSONL: timestamp (ms), input_length, output_length, hash_ids
  vidur,       // Vidur CSV: arrived_at,num_prefill_tokens,num_decode_tokens
  lengths,     // length-only CSV (no arrival column), paired with a synthetic arrival process
  token_ids,   // JSONL with input_toks, output_toks, arrival_time_ns, input_tok_ids
};

// "native-csv", "native-jsonl", "azure", "burstgpt", "mooncake", "vidur", "lengths",
// "token-ids", and "auto" for TraceFormat::automatic.
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
};

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

 protected:
  explicit TraceReader(std::string path) : path_(std::move(path)) {}

 private:
  std::string path_;
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

 private:
  std::string path_;
  TraceFormat format_;
  std::int64_t total_bytes_ = 0;
  std::vector<Request> requests_;
};

// True when `path` can be opened and read again from the start (a regular file), false for
// a pipe, a FIFO, a device or /dev/stdin, which a reader may meet only once.
bool trace_can_be_reread(const std::string& path);

// Opens `path` and returns a reader for its format. Throws InputError when the file cannot
// be opened, its format is not recognised, or its header does not fit the format.
std::unique_ptr<TraceReader> open_trace(const std::string& path, const TraceOptions& options = {});

// The format open_trace() would pick for `path`, from its header or first record. Throws
// InputError (naming the file and the known formats) when it matches none.
TraceFormat detect_trace_format(const std::string& path);

// Reads a whole trace into memory: for tests, tools and traces known to be small.
std::vector<Request> read_trace(const std::string& path, const TraceOptions& options = {});

}  // namespace kvsim

#endif  // KVSIM_TRACE_H_
