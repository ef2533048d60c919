// Replaying a trace through one allocator: the discrete-event engine and what it reports.
//
// One deterministic loop on integer nanoseconds. Arrivals join a FIFO queue; each engine
// iteration (continuous batching) admits waiting requests in arrival order, runs their
// prefill (whole, or chunked by a token budget) and decodes one token for every running
// sequence; a request finishes when it has generated its output tokens, and a cancellation
// frees everything the request holds at that instant. How long an iteration takes comes
// from a CostModel, unless the trace carries measured service timestamps, which then drive
// the schedule instead.
//
// Accounting convention (kvsim's, stated once): a step allocates, at its start, a slot for
// every token it produces, and a generated token is held from the step that produces it.
// A request with prompt P and output m therefore ends holding P + m positions per sample,
// one more than vLLM, whose last sampled token never enters the cache.
//
// Without a memory budget a run measures demand: every allocator sees the same schedule,
// so their figures compare directly.
#ifndef KVSIM_REPLAY_H_
#define KVSIM_REPLAY_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvsim/allocator.h"
#include "kvsim/model.h"
#include "kvsim/trace.h"
#include "kvsim/vllm_defaults.h"

namespace kvsim {

// How long one engine iteration takes, in picoseconds, rounded up to whole nanoseconds.
// Linear (constant and linear models, `roofline` false):
//   base + prefill_token * (prompt tokens processed) + decode_seq * (sequences decoding)
//        + context_token * (positions those sequences read)
// "constant" is the case decode_seq = context_token = 0.
// Roofline (`roofline` true; kvsim/cost_model.h derives the coefficients and says why):
//   overhead + max(matmul compute, matmul memory) + max(attention compute, KV memory)
//   + element-wise kernels + collectives, where
//   matmul compute    = prefill_token * prompt tokens + decode_seq * decoding sequences
//                       + sample_token * sampled tokens
//   matmul memory     = weights + matmul_io_token * tokens + matmul_io_sample * sampled tokens
//   element-wise      = elementwise_token * tokens + elementwise_sample * sampled tokens
//   attention compute = attention_pair * (query, key) pairs, or where vLLM runs FlashAttention 2
//                       attention_pair * the prefill chunks' pairs + attention_tile (a step with
//                       a chunk of two or more tokens) or attention_packed (decode-only) * the
//                       positions the decoding sequences read
//   KV memory         = kv_position * KV positions read or written
struct CostModel {
  std::string name = "constant";           // how it was chosen, for the report
  std::int64_t base_ps = 20'000'000;         // 20 ms per iteration
  std::int64_t prefill_token_ps = 100'000;   // 0.1 us per prompt token
  std::int64_t decode_seq_ps = 0;
  std::int64_t context_token_ps = 0;
  // A mixture-of-experts model's routed experts on the device, read only where the step's
  // tokens reach them (vLLM's fused MoE kernels skip an expert no token is routed to): each
  // step costs expert_weights_ps x the expected share of the experts its tokens reach,
  // routed_expert_share() of the `routed_experts` and `experts_per_token` below. In both
  // the linear sum and the roofline (on the matmuls' memory side); 0 for dense models.
  std::int64_t expert_weights_ps = 0;
  std::int64_t routed_experts = 0;
  std::int64_t experts_per_token = 0;
  bool roofline = false;                   // the roofline rule below instead of the linear sum
  std::string device;                      // the device the timing assumes ("" when no term is the roofline's)
  std::int64_t overhead_ps = 0;            // roofline: per step, outside the max
  std::int64_t weights_ps = 0;             // roofline memory: the weights but the routed experts, read once per step
  std::int64_t kv_position_ps = 0;         // roofline memory: one KV position read or written
  std::int64_t sample_token_ps = 0;        // roofline compute: the LM head, per sampled token
  std::int64_t attention_pair_ps = 0;      // roofline compute: one (query, key) pair, all layers
  // Roofline compute where vLLM runs FlashAttention 2 (compute capability 8.x and 12.x): a
  // decoding sequence's query fills one row of the kernel's 64-row query tile, and the tile is
  // computed whole. Per KV position a decoding sequence reads, all layers: in a step where some
  // query has more than one token (a prefill chunk), a tile per query head
  // (attention_tile_position_ps); in a decode-only step, the query heads that share a KV head
  // packed into one tile (attention_packed_position_ps). 0: the useful pairs alone
  // (attention_pair_ps), as for the other attention kernels.
  std::int64_t attention_tile_position_ps = 0;
  std::int64_t attention_packed_position_ps = 0;
  // Roofline memory: the activations the matmuls read and write (beside the weights, on their
  // memory side) per token and per sampled token, and the element-wise kernels' (norms,
  // rotary, activation, the sampler's pass over the logits; outside the maxes).
  std::int64_t matmul_io_token_ps = 0;
  std::int64_t matmul_io_sample_ps = 0;
  std::int64_t elementwise_token_ps = 0;
  std::int64_t elementwise_sample_ps = 0;
  // Roofline collectives, outside the maxes (each waits for the kernels before it). Tensor
  // parallelism: the all-reduces' latency per step and their bytes per token the step
  // processes, and the logits' all-gather per sampled token. An MoE model's data-parallel
  // replicas: the all-gather and reduce-scatter of every MoE layer, per step and per token of
  // all the replicas' step (applied where the replicas step together, replicas.cc).
  std::int64_t collective_step_ps = 0;
  std::int64_t collective_token_ps = 0;
  std::int64_t collective_sample_ps = 0;
  std::int64_t replica_collective_step_ps = 0;
  std::int64_t replica_collective_token_ps = 0;
};

// What one engine step computed, as its cost model counts it (kvsim/cost_model.h's StepWork).
struct StepCounts {
  std::int64_t prefill_tokens = 0;  // prompt (and recomputed) positions
  std::int64_t decode_seqs = 0;     // sequences decoding one token
  std::int64_t context = 0;         // positions the decoding sequences attend to
  std::int64_t sampled = 0;         // tokens sampled: the decodes and the prefills completed
  std::int64_t peer_tokens = 0;     // replicas stepping together: the others' tokens, which
                                    // this device's MoE experts serve too
  std::int64_t graph_tokens = 0;    // the tokens the step ran, CUDA graphs' padding and a
                                    // replica's dummy batch included (0: its own tokens)
};

// One row of --timeline: the state just after an iteration's operations.
struct TimelineRow {
  std::int64_t time_ns = 0;
  std::int64_t step = 0;
  std::int64_t replica = 0;           // the engine's index under replay_replicas, else 0
  std::int64_t running = 0;           // requests admitted and not finished
  std::int64_t queued = 0;
  // Of `queued`, those the step's plan saw: less the arrivals after the instant an
  // asynchronous plan sees up to (the previous step's start). Not a --timeline column:
  // kvsim validate counts waiting requests as vLLM's scheduler reports them.
  std::int64_t queued_seen = 0;
  // How long the step that began at time_ns took (0 in a row that closes a sampled run and
  // under a measured schedule). Not a --timeline column.
  std::int64_t duration_ns = 0;
  // No step: the engine runs nothing from time_ns until the next row (with a row per step, the
  // row written where it goes idle, numbered as the next step). Not a --timeline column: kvsim
  // validate and calibrate, which read the rows as vLLM's per-step reports, pass over it.
  bool idle = false;
  std::int64_t effective_bytes = 0;
  std::int64_t allocated_bytes = 0;
  std::int64_t reserved_bytes = 0;
  std::vector<std::int64_t> effective_tokens;    // per layer group, positions
  std::vector<std::int64_t> allocated_slots;     // per layer group, positions
  // With sampling (sample_every_ns > 0), over the interval since the previous row (the run's
  // start for the first): the maximum of allocated bytes, copies' transients included, and
  // their time-weighted mean; -1 and 0 without sampling (every row is then one step).
  std::int64_t allocated_bytes_max = -1;
  double allocated_bytes_mean = 0;
  // A prefix-caching allocator's cached blocks that no live request holds (free, evictable:
  // vLLM's free queue, SGLang's unlocked radix nodes) and the bytes it has evicted since the
  // run began; -1 for allocators that keep no cache. --timeline columns when any allocator
  // of the run caches.
  std::int64_t cached_bytes = -1;
  std::int64_t evicted_bytes = -1;
  // Prefill positions computed again, after preemptions by recompute, since the previous row
  // (without sampling: in the row's step), as the cost model charges them: a prompt position
  // once, a generated position once for each of the request's n samples. Not a --timeline
  // column.
  std::int64_t recomputed_tokens = 0;
  // The work of the step that began at time_ns, as the cost model charged it (with sampling
  // too: a point sample, not the interval's sum; a merged row keeps its later step's; zeros
  // in a row that closes a sampled run and under a measured schedule). Not --timeline
  // columns: kvsim calibrate reads them.
  StepCounts work;
};

// One request's stay, for --per-request: what happened to it and when (ns on the trace's
// clock; -1 where it never happened). Emitted when the request leaves, whichever way.
struct RequestRecord {
  enum class Outcome { completed, cancelled, refused };
  std::string id;                      // the trace's id, or "" when it has none
  std::int64_t ordinal = 0;            // 1-based position in the trace
  std::int64_t arrival_ns = 0;
  std::int64_t first_scheduled_ns = -1;  // first admission
  std::int64_t first_token_ns = -1;
  std::int64_t finish_ns = -1;         // completed: its last token; cancelled: the cancellation
  std::int64_t prompt_tokens = 0;
  std::int64_t cached_prompt_tokens = 0;  // found in the prefix cache at first admission
  std::int64_t output_tokens = 0;      // the trace's, per sample
  std::int64_t preemptions = 0;
  Outcome outcome = Outcome::completed;
};

// Where the schedule comes from.
enum class Schedule {
  automatic,   // measured when the trace's first request carries service timestamps
  simulate,    // continuous batching with the cost model
  measured,    // the trace's start / first_token / finish timestamps: a production
               // schedule replayed exactly (prompt stored at start, output tokens appearing
               // evenly from first_token to finish)
};

// Admission and preemption under a memory budget: a serving policy, by the name it is
// registered under (src/scheduler.cc; docs/replay.md cites the engines' code). The built-in
// ones have constants; any registered name works (Policy{"name"}), and an unknown one is an
// InputError listing the known names when the run starts.
struct Policy {
  std::string name;
  friend bool operator==(const Policy&, const Policy&) = default;

  // vLLM: admit in arrival order while the prompt's next chunk fits above the watermark;
  // grow on demand; when a running request cannot grow, preempt the newest running request
  // (recompute: freed and requeued at the front; or swap to host memory).
  static const Policy vllm;
  // TensorRT-LLM's GUARANTEED_NO_EVICT: admit only when the request's whole life (prompt +
  // max_tokens) fits beside what the running requests may still need; never preempt.
  static const Policy reserve;
  // SGLang: admit against an estimate of the running requests' future tokens scaled by an
  // adaptive new-token ratio; when decoding runs short, retract the decoding request with
  // the fewest generated tokens (requeued at the back).
  static const Policy sglang;
};
inline const Policy Policy::vllm{"vllm"};
inline const Policy Policy::reserve{"reserve"};
inline const Policy Policy::sglang{"sglang"};

// A registered policy, as `kvsim replay --help` lists it.
struct PolicyInfo {
  std::string_view name;
  std::string_view help;       // one line
  bool supports_swap = false;  // Preemption::swap is meaningful
};

// Every registered policy, in the order --help lists them.
std::vector<PolicyInfo> policies();

// The registered policy named `name`. Throws InputError naming `field` and listing the
// known names.
PolicyInfo find_policy(std::string_view name, std::string_view field);

enum class Preemption { recompute, swap };

// How the engine behaves when memory is bounded. Ignored without a budget.
struct MemoryOptions {
  std::int64_t kv_budget_bytes = 0;     // 0: demand mode, every allocator unbounded
  Policy policy{"vllm"};
  Preemption preemption = Preemption::recompute;
  // vLLM v0's watermark: admission leaves at least this share of the capacity free, in parts
  // per billion (v0's default 0.01).
  std::int64_t watermark_ppb = 10'000'000;
  // vLLM's scheduler_reserve_full_isl (on by default from 0.19): a waiting request is
  // admitted only if the blocks of its whole sequence so far (prompt, and what it generated
  // before a preemption) fit, not only its next chunk's.
  bool reserve_full_isl = false;
  // Host link for swapping, bytes per second (about PCIe 4.0 x16 in practice).
  std::int64_t swap_bytes_per_second = 25'000'000'000;
  // SGLang's new-token ratio, in parts per billion: starts at init, decays linearly to min
  // over decay_steps decode steps, recomputed after a retraction (SGLang's defaults: 0.7,
  // 0.7 x 0.14, 600 steps).
  std::int64_t sglang_init_ratio_ppb = 700'000'000;
  std::int64_t sglang_min_ratio_ppb = 98'000'000;
  std::int64_t sglang_decay_steps = 600;
  // SGLang's --schedule-policy: false = fcfs (its default), true = lpm (longest cached prefix
  // first, FCFS when more than 128 requests wait).
  bool sglang_lpm = false;
};

struct ReplayOptions {
  KvLayout layout;                    // per device; its max_model_len bounds requests
  Schedule schedule = Schedule::automatic;
  CostModel cost;
  // The scheduler's limits. 0 is unlimited, which is what demand mode wants; under a budget
  // `kvsim replay` uses vLLM's defaults instead: see apply_vllm_scheduler_defaults below.
  std::int64_t max_batched_tokens = 0;  // per iteration, decodes included; 0 = unlimited
  bool chunked_prefill = true;          // with max_batched_tokens: split prompts across steps
  // Sequences running at once (n per request: vLLM's max_num_seqs counts each sample);
  // 0 = unlimited, though never more than max_batched_tokens when that is set. A
  // max_batched_tokens below it is refused, as vLLM refuses it.
  std::int64_t max_running = 0;
  // A request whose prompt fits the layout's max_model_len but whose prompt + output does not
  // is refused at arrival (false: an engine's API server refuses it), or served with its output
  // cut to max_model_len - prompt tokens (true: vLLM's engine, whose check_stop
  // ends a request at max_model_len tokens, FINISHED_LENGTH_CAPPED; vllm/v1/core/sched/utils.py).
  // kvsim validate replays a measured run's requests as the engine served them.
  bool cap_at_max_model_len = false;
  MemoryOptions memory;
  // The generation limit planned for requests whose trace gives none (what reservations
  // and the reserve/sglang policies plan for); 0: their real output length.
  std::int64_t default_max_tokens = 0;
  // Sampling for `timeline`: every iteration (0) or at most once per this many ns.
  std::int64_t sample_every_ns = 0;
  // With sampling: at most this many rows per run (0: no limit). Rows are then held until
  // the run ends; whenever one more would exceed the limit, adjacent rows merge in pairs
  // (the later row's state; the larger maximum; the mean over both intervals, exact) and the
  // interval doubles, so the timeline stays small however long the trace, and no peak is lost.
  std::int64_t timeline_max_rows = 0;
  std::function<void(const TimelineRow&)> timeline;  // not called when empty
  // Called once per request of the trace as it leaves (simulated schedule only; a measured
  // schedule's per-request times are the trace's own). Not called when empty.
  std::function<void(const RequestRecord&)> per_request;
  // With a measured schedule, which has no per-request records: true, the run is refused (the
  // records were the point, as for --per-request); false, it runs without calling
  // per_request (the records were extras, as --html's latency charts are).
  bool per_request_required = true;
  // Called now and then with the fraction of the trace read, for a progress bar.
  std::function<void(double)> progress;
  // The options given that only a simulated schedule acts on (--max-running, --cost, ...), by
  // name: a trace whose service times fix the schedule is refused with them, as with a budget,
  // rather than replayed as if they had acted.
  std::vector<std::string> simulation_options;
  // Keep every request's latencies in ReplayReport::latency_samples (data-parallel replicas
  // merge them into the total's percentiles).
  bool keep_latency_samples = false;
  // Data-parallel replicas (replay_replicas) take every step together, each lasting as long
  // as the slowest replica's: vLLM aligns the forward passes of a mixture-of-experts model's
  // data-parallel ranks (kvsim/replicas.h). `kvsim replay` sets it for MoE models.
  bool replicas_step_together = false;
  // How data-parallel replicas' requests are routed (kvsim/replicas.h): vLLM 0.19's rule by
  // default, or the rule vLLM's main branch has had since July 2026.
  enum class DpRouter { queue_score, in_flight };
  DpRouter dp_router = DpRouter::queue_score;
  // vLLM's asynchronous scheduling (on by default in vLLM 0.19): the scheduler plans step
  // k + 1 while step k runs, so what step k changes is seen one step late. A request arriving
  // while a step runs is first scheduled in the step after the next one, and a request that
  // finishes in a step keeps its place under max_running through the next one (docs/replay.md,
  // "Asynchronous scheduling"). No lag when nothing else runs: the engine schedules at once.
  bool async_scheduling = false;
  // vLLM's CUDA graphs (on unless enforce_eager): a step of at most this many tokens is padded
  // up to the next captured graph size (kvsim/cost_model.h cuda_graph_tokens), and the padding
  // runs through every matmul and reaches an MoE model's experts; data-parallel replicas that
  // step together all pad to the largest replica's padded size (docs/replay.md, "CUDA
  // graphs"). 0: no graphs.
  std::int64_t cuda_graph_max_tokens = 0;
};

// A quantity over the run.
struct Occupancy {
  double mean = 0;                    // time-weighted over the run's duration
  std::int64_t peak = 0;              // includes transients (a buffer copied on growth)
  std::int64_t peak_at_ns = 0;        // -1: unknown (replicas' sum: their peaks need not coincide)
  std::int64_t p50 = 0;               // time-weighted quantiles: the smallest value v such
  std::int64_t p99 = 0;               // that the quantity was <= v for that share of time,
                                      // -1: unknown (replicas' sum: quantiles do not add up)
  std::int64_t quantile_resolution = 1;  // rounded up to a multiple of this
  std::int64_t at_end = 0;
};

// The five parts of internal fragmentation (allocated - effective).
struct Fragmentation {
  double tail = 0;             // unfilled ends of partially filled blocks
  double reservation = 0;      // room reserved ahead for tokens not yet (or never) generated
  double padding = 0;          // room past the request's limit (prompt + planned output)
  double duplicate = 0;        // extra copies of a shared prompt
  double outside_window = 0;   // tokens still held behind a sliding window
  double total() const { return tail + reservation + padding + duplicate + outside_window; }
};

struct GroupReport {
  LayerGroup group;
  Occupancy effective_tokens;      // positions
  Occupancy allocated_slots;       // positions
  Fragmentation mean_slots;        // time-weighted means, positions
  Fragmentation at_peak_slots;     // when total allocated bytes peaked, positions
};

struct Latency {
  std::int64_t count = 0;
  std::int64_t p50_ns = 0;
  std::int64_t p99_ns = 0;
  std::int64_t max_ns = 0;
  double mean_ns = 0;
};

// "The device cannot keep up": the rule of docs/replay.md ("Overload") and the rates it
// compares, in requests per second.
struct Overload {
  bool overloaded = false;
  std::string reason;                // which condition held, in words; "" when not overloaded
  double arrival_rate_per_s = 0;     // (requests - 1) / (last arrival - first arrival)
  double service_rate_per_s = 0;     // completed / (end - first arrival)
};

// Per-request latencies in the order they happened, when ReplayOptions::keep_latency_samples.
struct LatencySamples {
  std::vector<std::int64_t> ttft_ns;
  std::vector<std::int64_t> e2e_ns;
  std::vector<std::int64_t> waiting_ns;
  std::vector<std::int64_t> tpot_ns;
  // The inter-token latency histogram: sequence-weighted step durations in buckets of
  // 2^itl_shift ns (ReplayReport::itl), so that replicas' histograms add up.
  std::vector<std::int64_t> itl_buckets;
  int itl_shift = 0;
};

struct ReplayReport {
  std::string allocator;            // canonical name with parameters
  // Runs of replay_replicas() (include/kvsim/replicas.h): how many replicas, and which one
  // this run is (0-based), -1 for their total. 0 and -1 for one engine's run.
  std::int64_t replicas = 0;
  std::int64_t replica = -1;
  std::string trace;                // path
  std::string cost_model;
  std::string schedule;             // "simulated" or "measured"
  // Requests.
  std::int64_t requests = 0;        // read from the trace
  std::int64_t trace_dropped = 0;   // rows the trace's format dropped (TraceReader::dropped): in no figure
  std::int64_t completed = 0;
  std::int64_t cancelled_queued = 0;   // before admission
  std::int64_t cancelled_running = 0;  // mid-prefill or mid-decode
  std::int64_t rejected_too_long = 0;  // prompt + output beyond the layout's max_model_len
  // With ReplayOptions::cap_at_max_model_len: requests served with their output cut there.
  std::int64_t capped_at_max_model_len = 0;
  std::int64_t rejected_too_large = 0; // could never fit the memory budget, even alone
  // n samples above max_running (or, without it, max_batched_tokens): the samples run
  // together, and that many could never run at once.
  std::int64_t rejected_too_many_samples = 0;
  // Requests the trace gives no max_tokens for, with no default_max_tokens either: what is
  // planned for them (dense-static's reserve=max-tokens, the reserve and sglang policies) is
  // their true output.
  std::int64_t planned_at_output_requests = 0;
  std::int64_t refused() const { return rejected_too_long + rejected_too_large + rejected_too_many_samples; }
  // prompt + output tokens of the shortest request not refused as too long (0: none): what
  // the report's warnings compare with the budget (a budget that cannot hold one request).
  std::int64_t shortest_request_tokens = 0;
  std::int64_t prompt_tokens = 0;      // processed
  std::int64_t generated_tokens = 0;   // per sample, summed
  // Time.
  std::int64_t start_ns = 0;        // first arrival
  std::int64_t end_ns = 0;          // last release
  std::int64_t iterations = 0;
  // Memory, total bytes over all layer groups.
  Occupancy effective_bytes;
  Occupancy allocated_bytes;
  Occupancy reserved_bytes;
  // Prefix caching (allocators that share blocks across requests; all zero otherwise).
  std::int64_t prefix_block_tokens = 0;   // the block size prompts are shared at
  // Requests whose prompt has a full block of that size with an identity from the trace
  // (prefix hashes, hash_ids, token ids): none, and no prompt can be found in the cache.
  std::int64_t prefix_identified_requests = 0;
  // First admissions only, as vLLM's exported metric (PrefixCacheStats.record in
  // vllm/v1/metrics/stats.py keeps a preempted request's new lookup apart).
  std::int64_t prefix_queried_tokens = 0; // prompt tokens of admitted requests looked up (vLLM's queries)
  std::int64_t prefix_hit_tokens = 0;     // of those, found cached: not computed (vLLM's hits)
  std::int64_t prefix_queried_blocks = 0; // the same in full blocks of prefix_block_tokens
  std::int64_t prefix_hit_blocks = 0;
  // Re-admissions after preemption (vLLM's preempted_queries / preempted_hits): a victim
  // finding its own blocks still cached.
  std::int64_t prefix_preempted_queried_tokens = 0;
  std::int64_t prefix_preempted_hit_tokens = 0;
  std::int64_t evicted_bytes = 0;         // cached blocks evicted to make room, in bytes
  Occupancy evictable_bytes;              // cached blocks no live request references (free, reusable)
  Fragmentation mean_bytes;
  Fragmentation at_peak_bytes;
  std::vector<GroupReport> groups;
  // Usage: token-level = effective / allocated, block-level = allocated / capacity (the
  // reserved bytes in demand mode, the budget otherwise), both as ratios of time integrals;
  // none when the denominator's integral is 0 (nothing was ever allocated, or reserved).
  std::optional<double> token_usage;
  std::optional<double> block_usage;
  // External fragmentation: 1 - largest free extent / free bytes.
  double external_fragmentation_mean = 0;   // time-weighted
  double external_fragmentation_max = 0;
  std::int64_t failed_placements = 0;
  // Time-weighted mean of the free bytes outside the largest free extent: external
  // fragmentation in bytes, so that effective + internal + this + the rest of the free
  // bytes is the capacity.
  double external_fragmentation_bytes_mean = 0;
  bool places_reservations = false;   // the allocator placed reservations in an arena
  std::int64_t copied_bytes = 0;
  // Latencies of completed requests.
  Latency ttft;
  Latency e2e;
  // Time per output token: (finish - first token) / (output tokens - 1), per completed
  // request with at least two output tokens (vLLM's TPOT).
  Latency tpot;
  // Inter-token latency: one sample per token a decode step produces (a step that decodes d
  // sequences gives d samples of its duration). The first token of a request, and a token
  // that ends a recompute after preemption, come from a prefill and are not samples. Count,
  // mean and max are exact; p50 and p99 are a histogram's bucket edges (buckets of 2^k ns,
  // the fewest keeping the longest step within 65,536 of them: 16 ns up to 1 ms steps).
  Latency itl;
  // Serving under a budget (all zero in demand mode).
  std::string policy;                  // "vllm (recompute)", ...; "none" in demand mode
  std::int64_t capacity_bytes = 0;     // the allocator's bound from the budget
  std::int64_t preemptions = 0;
  std::int64_t preempted_requests = 0; // preempted at least once
  std::int64_t max_preemptions_per_request = 0;
  std::int64_t recomputed_tokens = 0;  // positions computed again after preemption, as the
                                       // cost model charges them (a generated position n
                                       // times): what a preemption discarded, less what was
                                       // found cached again or never came back (cancelled,
                                       // refused)
  std::int64_t swapped_out_bytes = 0;
  std::int64_t swapped_in_bytes = 0;
  std::int64_t memory_bound_ns = 0;    // time in steps where an allocation was refused
  double queue_mean = 0;               // requests waiting, time-weighted
  std::int64_t queue_max = 0;
  Latency waiting;                     // arrival to first admission, completed requests
  double generated_tokens_per_s = 0;   // simulated throughput
  // The leak check: allocated == 0 at the end, per the allocator's own pool.
  bool leak_free = false;
  std::int64_t allocated_bytes_at_end = 0;
  // Whether the device kept up with the arrivals (docs/replay.md, "Overload"): filled by
  // judge_overload() from the figures below and the ones above.
  std::int64_t last_arrival_ns = 0;
  std::int64_t queue_at_last_arrival = 0;  // waiting just after the last arrival, passed over by a plan
  Overload overload;
  LatencySamples latency_samples;  // empty unless ReplayOptions::keep_latency_samples
};

// The overload rule, applied to a finished report: sets report.overload. The engine calls it;
// it is public so that combined reports (replicas) are judged by the same rule.
void judge_overload(ReplayReport& report);

// The scheduler limits `kvsim replay` uses when its options leave them unset, so that a
// library user gets the program's behaviour with one call. Under a memory budget
// (memory.kv_budget_bytes > 0) a max_batched_tokens of 0 becomes kVllmMaxNumBatchedTokens,
// or without chunked prefill max(layout.max_model_len, kVllmMinNumBatchedTokensUnchunked),
// and a max_running of 0 becomes kVllmMaxNumSeqs, or max_batched_tokens if smaller (as
// vLLM's arg_utils.py lowers an unset max_num_seqs). Without a budget nothing
// changes: demand mode batches without limits. Call it once layout, chunked_prefill and
// memory are set. replay() never applies it itself, so a 0 passed to replay() stays unlimited.
void apply_vllm_scheduler_defaults(ReplayOptions& options);

// Throws InputError naming --max-batched-tokens when it is set below max_running, as vLLM's
// SchedulerConfig refuses it: every running sequence decodes a token each step. replay()
// checks it; `kvsim replay` and its sweeps check it when they plan, to name the point.
void check_scheduler_limits(const ReplayOptions& options);

// Replays `trace` through `allocator`. Throws InputError on a bad trace row, InternalError
// when an invariant breaks (including a leak at the end).
ReplayReport replay(TraceReader& trace, Allocator& allocator, const ReplayOptions& options);

}  // namespace kvsim

#endif  // KVSIM_REPLAY_H_
