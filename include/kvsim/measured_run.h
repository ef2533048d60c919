// A measured serving run, as LLMServingSim's benchmark records one from vLLM, and the figures
// a simulator's prediction is scored against.
//
// A run directory holds meta.json (the engine's arguments, the workload's path), requests.jsonl
// (one request per line with vLLM's own timestamps) and timeseries.csv (the scheduler's state
// once per tick). Figures follow the definitions of ../shared/measured/README.md:
//   TTFT    = first_token_ts - queued_ts
//   TPOT    = (last_token_ts - first_token_ts) / (output_toks - 1)   (output_toks >= 2 only)
//   latency = last_token_ts - queued_ts
// and percentiles interpolate linearly between order statistics (numpy's default, which the
// peer's summaries use: its "vLLM" column reproduces this way, to 0.1 ms).
//
// Reading never produces numbers from bad input: every problem is an InputError naming the
// file, the line and the field.
#ifndef KVSIM_MEASURED_RUN_H_
#define KVSIM_MEASURED_RUN_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kvsim {

// One line of requests.jsonl. Wall-clock arrival (s since the epoch) and vLLM's monotonic
// timestamps (s).
struct MeasuredRequest {
  std::string id;
  std::int64_t input_tokens = 0;
  // What the run generated: output_toks, cut at meta.json's max_model_len, where vLLM's
  // engine stops a request (check_stop: FINISHED_LENGTH_CAPPED) whatever the recorder wrote.
  // TPOT divides by this.
  std::int64_t output_tokens = 0;
  std::int64_t recorded_output_tokens = 0;  // output_toks as requests.jsonl gives it
  double arrival_time_s = 0;
  double queued_s = 0;
  double scheduled_s = 0;
  double first_token_s = 0;
  double last_token_s = 0;
  std::int64_t line = 0;  // in requests.jsonl, for messages
  // False when every timestamp is null: the recorder writes that when vLLM returned no
  // metrics for the request. It was served (a replay includes it) but is in no measured
  // figure, and its timestamps above are 0.
  bool timed = true;
};

// One row of timeseries.csv: the state at `t_s` seconds after the run's start.
struct MeasuredTick {
  double t_s = 0;
  double prompt_tokens_per_s = 0;
  double generated_tokens_per_s = 0;
  std::int64_t running = 0;
  std::int64_t waiting = 0;
  double kv_cache_percent = 0;
  // Columns newer recorders add (-1 when the file has none): the prompt tokens computed rather
  // than served by the prefix cache (prompt_compute_throughput, credited like
  // prompt_throughput at a request's first token), and the preemptions in the tick, summed
  // over the engines (preempted).
  double computed_prompt_tokens_per_s = -1;
  std::int64_t preempted = -1;
};

struct MeasuredRun {
  std::string dir;
  std::string model;                 // meta.json "model" (a Hugging Face name)
  std::string vllm_version;
  std::string hardware;              // peer_cluster_config.json's, "" when absent
  std::int64_t tensor_parallel = 1;
  std::int64_t data_parallel = 1;
  bool expert_parallel = false;
  std::int64_t max_num_seqs = 0;
  std::int64_t max_num_batched_tokens = 0;
  std::int64_t max_model_len = 0;    // 0: null in meta.json (the model's own)
  // max_model_len -1 (vLLM's "auto", vllm#29431) with no resolved length recorded: vLLM fit
  // the length to its KV pool (kv_cache_utils.py, _auto_fit_max_model_len).
  bool max_model_len_auto = false;
  // Further engine_kwargs that change what a replay of the run must model, when meta.json
  // gives them (absent or null: vLLM's default).
  std::int64_t block_size = 16;                // vLLM's default when meta.json gives none
  std::optional<bool> prefix_caching;          // enable_prefix_caching (vLLM v1: on)
  std::optional<bool> chunked_prefill;         // enable_chunked_prefill (vLLM v1: on)
  double gpu_memory_utilization = 0;           // 0: vLLM's 0.9
  std::string dtype;                           // the weights' ("auto", "bfloat16", ...), "" when absent
  std::string kv_cache_dtype;                  // "auto", "fp8", ..., "" when absent
  std::int64_t num_gpu_blocks_override = 0;    // 0: none; else the KV pool's blocks per device
  std::int64_t kv_cache_memory_bytes = 0;      // 0: none; else the KV budget per device
  bool enforce_eager = false;                  // no CUDA graphs
  std::optional<bool> async_scheduling;        // absent: the version's default
  // scheduler_reserve_full_isl, from engine_kwargs or else the resolved scheduler_config
  // (newer runs' meta.json "resolved_config"); absent: the version's default.
  std::optional<bool> reserve_full_isl;
  // disable_hybrid_kv_cache_manager, from engine_kwargs or else the resolved scheduler_config;
  // absent: vLLM v1's default, the hybrid manager on (sliding windows free what they leave).
  std::optional<bool> disable_hybrid_kv_cache_manager;
  // disable_sliding_window (engine_kwargs, else the resolved model_config): vLLM serves the
  // windowed layers as full attention (and caps max_model_len at the window).
  bool disable_sliding_window = false;
  // What vLLM resolved at start-up, when meta.json records it (newer runs: its "kv_cache"
  // object, read from the front end's cache_config after boot): the blocks of the KV pool on
  // each device, null block included, summed over the data-parallel engines (vLLM's start-up
  // handshake adds theirs up); 0 when not recorded.
  std::int64_t resolved_gpu_blocks = 0;
  // The GPU as CUDA reported it (meta.json "hardware", newer runs): its name
  // (torch.cuda.get_device_name) and total memory (get_device_properties().total_memory);
  // "" and 0 when not recorded.
  std::string device_name;
  std::int64_t device_total_bytes = 0;
  // engine_kwargs kvsim does not model and that are not known to leave the schedule and the
  // KV budget alone, as "key=value", then the resolved_config settings that leave vLLM's
  // defaults in ways kvsim does not model, as "resolved_config.<section>.<key>=value"
  // (validate names them rather than ignore them silently).
  std::vector<std::string> unmodelled_settings;
  // meta.json's top-level keys the recorder does not write (a setting put beside engine_kwargs
  // rather than in it, say), given a value: read nowhere, and named by validate so that a
  // misplaced block_size is not replayed as the default in silence.
  std::vector<std::string> unread_fields;
  // requests.jsonl's keys other than the recorder's eight (a finish reason, a count of the
  // tokens generated), given a value on some line, sorted: read nowhere, and named by validate.
  std::vector<std::string> unread_request_fields;
  // Where meta.json gave the settings that more than one of its objects may give (the
  // scheduler's, the model's length and eager mode also from "resolved_config", the cache's
  // from "kv_cache"): the path read, e.g. "kv_cache.block_size" or
  // "resolved_config.scheduler_config.max_num_seqs". A setting not listed comes from
  // engine_kwargs.
  std::map<std::string, std::string> read_from;
  std::int64_t num_requests = 0;     // meta.json's, 0 when absent: requests.jsonl's lines
  std::string dataset_path;          // meta.json's, "" when absent
  std::int64_t schema_version = 0;   // meta.json's, 0 when absent, -1 when not a version (kvsim reads 1)
  std::string dataset_hash;          // meta.json's (the workload's SHA-256 in hex), "" when absent
  std::string workload;              // the path the workload was found at ("" when not looked up)
  double started_at_s = 0;           // meta.json started_at (wall clock, s); else the first arrival
  bool started_at_recorded = false;  // false: started_at_s is the first arrival
  double finished_at_s = 0;          // meta.json finished_at (wall clock, s); 0 when absent
  double tick_s = 1.0;
  std::vector<MeasuredRequest> requests;
  std::int64_t untimed_requests = 0; // of them, the ones without timestamps (never all)
  std::vector<MeasuredTick> ticks;
  bool kv_usage_recorded = false;    // some tick has kv_cache_pct > 0
  bool preemptions_recorded = false; // timeseries.csv has a preempted column
  std::int64_t preemptions = 0;      // its sum
};

// Reads `dir`. With `find_workload`, the workload is `workload` when given, else meta.json's
// dataset_path relative to the folder above the run, else the same file name beside the run
// (an InputError when none exists). Throws InputError.
MeasuredRun read_measured_run(const std::string& dir, const std::optional<std::string>& workload, bool find_workload);
// Where meta.json's dataset_path is found (as above), "" when nowhere; and the message saying
// where it was looked for.
std::string locate_workload(const MeasuredRun& run);
std::string workload_not_found(const MeasuredRun& run);

// When meta.json's dataset_hash is a SHA-256 and the workload found (a file) has another
// digest: the warning that says so. The run then replayed some other workload, and the
// comparison may say nothing. nullopt when they agree, or when there is nothing to compare.
std::optional<std::string> workload_digest_mismatch(const MeasuredRun& run);

// Mean and percentiles of samples, in their own unit. Percentiles interpolate linearly
// between order statistics (numpy.percentile's default).
struct Distribution {
  std::int64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p95 = 0, p99 = 0;
};
Distribution distribution(std::vector<double> samples);
// The p-th percentile (0..100) of sorted samples, linearly interpolated; samples non-empty.
double percentile_sorted(const std::vector<double>& sorted, double p);

// One request's figures as the run's README defines them, from when it was queued, its first
// token and its last (seconds, on any one clock) and its output tokens: TTFT = first - queued,
// TPOT = (last - first) / (output - 1), none below two tokens, latency = last - queued. The
// measured figures and validate's simulated ones both come from here.
struct RequestLatency {
  double ttft = 0, latency = 0;
  std::optional<double> tpot;
};
RequestLatency request_latency(double queued_s, double first_token_s, double last_token_s, std::int64_t output_tokens);

// Per-request latencies of a run, seconds, in request order, over the timed requests (TPOT
// over those with two or more output tokens only).
struct MeasuredLatencies {
  std::vector<double> ttft, tpot, latency;
};
MeasuredLatencies measured_latencies(const MeasuredRun& run);

// The requests that carry timestamps.
std::int64_t timed_requests(const MeasuredRun& run);
// The run's wall-clock time of its monotonic clock's zero: the mean of arrival_time - queued_ts
// over the timed requests (the README's clock mapping).
double monotonic_to_wall_s(const MeasuredRun& run);
// Where timeseries.csv's t = 0 falls on vLLM's monotonic clock: the run's start.
double tick_origin_monotonic_s(const MeasuredRun& run);
// The first timed request queued and the last token, on vLLM's monotonic clock (s), and the
// makespan between them.
std::pair<double, double> measured_span_s(const MeasuredRun& run);
double measured_makespan_s(const MeasuredRun& run);

}  // namespace kvsim

#endif  // KVSIM_MEASURED_RUN_H_
