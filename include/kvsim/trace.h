// Reading request traces.
//
// A TraceReader streams requests one at a time, in arrival order, from a file in the native
// format or one of the imported formats; memory does not grow with the trace's length.
// Every row is validated as it is read: a bad row throws InputError naming the file, line,
// field and offending text. open_trace() detects the format from the header or first record
// unless TraceOptions names one.
#ifndef KVSIM_TRACE_H_
#define KVSIM_TRACE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

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

std::string_view trace_format_name(TraceFormat format);
// "native-csv", "azure", ... Throws InputError naming `field` for unknown names.
TraceFormat parse_trace_format(std::string_view text, std::string_view field);

struct TraceOptions {
  TraceFormat format = TraceFormat::automatic;
  // Accept arrivals that go backwards (the reader then buffers and sorts the whole trace,
  // so memory grows with it). Off: a backwards arrival is an error.
  bool sort = false;
  // BurstGPT rows with 0 response tokens are failed requests: drop them (default), or
  // replay them as cancelled at arrival.
  bool keep_failed = false;
  // Arrival process for length-only traces: requests per second of a Poisson process with
  // this seed. 0 means "required but not given", which is an error for such traces.
  std::int64_t synthetic_rate_millirps = 0;
  std::uint64_t synthetic_seed = 1;
  // Block size at which prefix hashes are computed from token ids (token_ids format).
  std::int64_t hash_block_tokens = 16;
};

class TraceReader {
 public:
  virtual ~TraceReader() = default;

  // Reads the next request into `out`. Returns false at the end of the trace.
  // Throws InputError on a bad row.
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

// Opens `path` and returns a reader for its format. Throws InputError when the file cannot
// be opened or its format is not recognised.
std::unique_ptr<TraceReader> open_trace(const std::string& path, const TraceOptions& options = {});

}  // namespace kvsim

#endif  // KVSIM_TRACE_H_
