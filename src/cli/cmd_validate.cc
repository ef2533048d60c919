// kvsim validate: replays a measured vLLM run's workload closed-loop with the run's engine
// settings (meta.json) and prints measured against simulated, in the shape of the peer's
// peer_validation_summary.txt, plus the error in the per-second running and waiting counts,
// KV usage where the run recorded it, and the makespan.
//
// The run's settings become defaults of `kvsim replay`'s own options: whatever the user gives
// wins. Two small tables map what meta.json and peer_cluster_config.json name onto kvsim's
// presets; where a preset is missing the error says which and what to give instead.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "kvsim/allocator.h"
#include "kvsim/budget.h"
#include "kvsim/error.h"
#include "kvsim/measured_run.h"
#include "kvsim/model.h"
#include "kvsim/option_names.h"
#include "kvsim/replay.h"
#include "kvsim/replicas.h"
#include "kvsim/startup_memory.h"
#include "kvsim/trace.h"
#include "kvsim/units.h"
#include "model_options.h"
#include "replay_output.h"
#include "replay_plan.h"
#include "run_models.h"

namespace kvsim::cli {
namespace {

const CommandSpec kSpec{
    "kvsim validate RUN_DIR [replay options]",
    "Replays a measured vLLM run's workload (meta.json's dataset_path, or --workload) with the\n"
    "run's engine settings and compares what kvsim predicts with what was measured: TTFT, TPOT\n"
    "and latency (mean, p50, p90, p95, p99, % difference, as the peer's\n"
    "peer_validation_summary.txt), the mean absolute error of the running and waiting counts at\n"
    "each tick of timeseries.csv, KV usage when the run recorded it, and the makespan.\n\n"
    "From meta.json, unless given: --model (a preset, by the table at the end), --tp, --max-running\n"
    "(max_num_seqs), --max-batched-tokens, --max-model-len, --replicas (data_parallel_size; the\n"
    "running and waiting counts are the replicas' summed), --expert-parallel\n"
    "(enable_expert_parallel), --allocator paged:block=16,prefix-caching=on (vLLM's defaults)\n"
    "and --schedule simulate; the device from peer_cluster_config.json (--timing-device), and\n"
    "its KV pool by vLLM's start-up rule (as 'kvsim size --engine vllm', with the replay's\n"
    "options; the device's total as meta.json's hardware records it) or as meta.json fixes it\n"
    "(kv_cache.num_gpu_blocks, what vLLM allocated; kv_cache_memory_bytes; num_gpu_blocks_override),\n"
    "less vLLM's null block (--kv-budget: that pool; --reserve or --params: replay's rule). The\n"
    "device may also come from meta.json's hardware.device_name. Any option may be given;\n"
    "--cost takes the spec 'kvsim calibrate RUN_DIR' prints. Measured figures follow the run's\n"
    "README: TTFT = first_token - queued, TPOT = (last_token - first_token) / (output - 1),\n"
    "latency = last_token - queued; percentiles interpolate linearly (numpy's default).\n\n" +
        run_name_table(),
    "  kvsim validate ../shared/measured/rtxpro6000-llama-3.1-8b --device-memory 96GB\n"
    "  kvsim validate RUN --device-memory 96GB --cost \"$(kvsim calibrate RUN --json | jq -r .cost)\" --json"};

bool has_model_preset(std::string_view name) {
  const auto& all = model_presets();
  return std::any_of(all.begin(), all.end(), [&](const ModelSpec& m) { return m.name == name; });
}
bool has_device_preset(std::string_view name) {
  const auto& all = device_presets();
  return std::any_of(all.begin(), all.end(), [&](const DevicePreset& d) { return d.name == name; });
}

bool given(const po::variables_map& vm, const char* key) { return vm.count(key) != 0 && !vm[key].defaulted(); }

// The option takes `value` unless the user gave it.
void default_to(po::variables_map& vm, const char* key, const std::string& value) {
  if (given(vm, key)) return;
  vm.erase(key);
  vm.insert({key, po::variable_value(boost::any(value), false)});
}

// Whether a version string ("0.19.0", "0.19.1rc1") is major.minor or later; false when it
// does not start with two numbers.
bool vllm_at_least(const std::string& version, int major, int minor) {
  int a = 0, b = 0;
  char dot = 0;
  std::istringstream in(version);
  if (!(in >> a >> dot >> b) || dot != '.') return false;
  return a > major || (a == major && b >= minor);
}

// The KV dtype meta.json implies (kvsim's --dtype), or nothing for the model's own:
// kv_cache_dtype "auto" stores the KV cache in the model's dtype (vllm/config/cache.py).
std::optional<std::string> run_kv_dtype(const MeasuredRun& run, const std::string& meta) {
  const auto pick = [&](const std::string& name, const char* field) -> std::optional<std::string> {
    if (name.empty() || name == "auto") return std::nullopt;
    if (name == "bfloat16") return "bf16";
    if (name == "float16" || name == "half") return "fp16";
    if (name == "float32" || name == "float") return "fp32";
    // vLLM's FP8 KV caches (e4m3, e5m2, Intel Gaudi's, DeepSeek's MLA layout): a byte a value.
    if (name == "fp8" || name == "fp8_e4m3" || name == "fp8_e5m2" || name == "fp8_inc" || name == "fp8_ds_mla") {
      return "fp8";
    }
    throw InputError(Location{meta, 0, field}, "\"" + name + "\" is not a dtype validate knows; give --dtype");
  };
  if (!run.kv_cache_dtype.empty() && run.kv_cache_dtype != "auto") return pick(run.kv_cache_dtype, "kv_cache_dtype");
  return pick(run.dtype, "dtype");
}

// The KV budget per device meta.json fixes (bytes 0 when vLLM derives it from the device),
// the field it comes from and how the report says so: kv_cache_memory_bytes, or
// num_gpu_blocks_override blocks of the run's block size (vLLM sizes the KV tensors for
// exactly that many; vllm/v1/core/kv_cache_utils.py). The block's bytes are the model's per
// token on one device times the block size (one KV-cache group; models whose layer groups
// differ are sized by kvsim's layout the same way). When meta.json records what vLLM
// resolved at start-up (kv_cache.num_gpu_blocks), that count wins over both: it is the pool
// vLLM allocated, whatever derived it. With data parallelism it is the engines' sum
// (vllm/v1/engine/utils.py, the start-up handshake: "Sum values from all engines in DP
// case"), so each engine's pool is the sum / dp (the engines size theirs alike; a remainder
// is dropped).
struct FixedPool {
  std::int64_t bytes = 0;
  const char* field = "";
  std::string source;
};
FixedPool run_fixed_pool(const po::variables_map& vm, const MeasuredRun& run) {
  FixedPool pool;
  std::int64_t blocks = 0;
  if (run.resolved_gpu_blocks > 0) {
    blocks = run.resolved_gpu_blocks / run.data_parallel;
    pool.field = "kv_cache.num_gpu_blocks";
    pool.source = run.data_parallel > 1
                      ? fmt::format("meta.json kv_cache.num_gpu_blocks (what vLLM allocated, summed over its {} "
                                    "data-parallel engines): {} blocks, {} an engine, of {} tokens",
                                    run.data_parallel, run.resolved_gpu_blocks, blocks, run.block_size)
                      : fmt::format("meta.json kv_cache.num_gpu_blocks (what vLLM allocated): {} blocks of {} tokens",
                                    run.resolved_gpu_blocks, run.block_size);
  } else if (run.kv_cache_memory_bytes > 0) {
    pool.bytes = run.kv_cache_memory_bytes;
    pool.field = "kv_cache_memory_bytes";
    pool.source = "meta.json kv_cache_memory_bytes";
    return pool;
  } else if (run.num_gpu_blocks_override > 0) {
    blocks = run.num_gpu_blocks_override;
    pool.field = "num_gpu_blocks_override";
    pool.source = fmt::format("meta.json num_gpu_blocks_override: {} blocks of {} tokens", blocks, run.block_size);
  } else {
    return pool;
  }
  const ModelChoice choice = resolve_model(vm, kSpec.synopsis, "");
  pool.bytes = checked_mul(checked_mul(blocks, run.block_size, pool.field), choice.layout().bytes_per_token(), pool.field);
  return pool;
}

// The kvsim preset of the run's GPU: peer_cluster_config.json's hardware by validate's table,
// else meta.json's recorded device name (hardware.device_name, as CUDA names it) matched
// against the presets' product names (case aside) and a few other names CUDA gives the same
// cards; nullptr when neither names one.
const char* run_device(const MeasuredRun& run) {
  if (const char* preset = run_device_preset(run.hardware)) return preset;
  if (run.device_name.empty()) return nullptr;
  if (const char* preset = run_cuda_device_alias(run.device_name)) return preset;
  const DevicePreset* preset = find_device_preset_by_product(run.device_name);
  return preset == nullptr ? nullptr : preset->name.data();
}

// vLLM's first block is its null block (vllm/v1/core/block_pool.py: BlockPool.__init__ takes
// it off the free queue, a placeholder never handed out; get_usage divides by
// num_gpu_blocks - 1), so its pool holds one block fewer than its memory does. The bytes of
// that block when the replayed allocator is vLLM's paged pool: one block id's pages in every
// layer of a KV-cache group (paged_pool(): page x group size); 0 for any other allocator.
std::int64_t null_block_bytes(const po::variables_map& vm, const ModelChoice& choice) {
  const auto text = option_text(vm, option_key(kOptAllocator));
  if (!text) return 0;
  const std::vector<AllocatorSpec> specs = parse_allocator_list(*text, kOptAllocator);
  if (specs.size() != 1 || specs[0].kind != "paged") return 0;
  PagedOptions paging;
  for (const auto& [key, value] : specs[0].params) {
    if (key == "block") paging.block_tokens = positive_integer(value, kOptAllocator);
  }
  return paged_pool(choice.layout(), 0, paging).block_bytes;
}

// A pool validate sized itself, less the null block; `what` names where it came from.
std::int64_t less_null_block(std::int64_t pool, std::int64_t null_block, const Location& what) {
  if (null_block > 0 && pool < 2 * null_block) {
    throw InputError(what, fmt::format("leaves {} bytes for the KV cache, less than two blocks of {} (one is "
                                       "vLLM's null block); give --kv-budget",
                                       with_commas(pool), with_commas(null_block)));
  }
  return pool - null_block;
}

std::string null_block_text(std::int64_t null_block) {
  return null_block > 0 ? fmt::format(", less the null block ({} bytes)", with_commas(null_block)) : "";
}

// The run's KV pool by vLLM's own start-up rule (vllm/v1/worker/gpu_worker.py
// determine_available_memory, as `kvsim size --engine vllm` computes it: device total x
// gpu_memory_utilization - weights - the profile run's activation peak - persistent buffers -
// non-torch memory), with the replay's settings as they stand after meta.json's defaults
// (the user's options win): device, utilisation, weights, max_num_batched_tokens,
// max_num_seqs, max_model_len, and with expert parallelism each device's share of the routed
// experts (data x tensor parallel ranks share them).
struct StartupPool {
  std::int64_t bytes = 0;
  std::string source;
};
StartupPool vllm_startup_pool(const po::variables_map& vm, const MeasuredRun& run, const Location& utilisation_from) {
  const ModelChoice choice = resolve_model(vm, kSpec.synopsis, "");
  const BudgetOptions device = resolve_budget(vm).value();
  EngineSettings settings;
  settings.engine = ServingEngine::vllm;
  settings.memory_fraction_ppb = device.gpu_memory_utilization_ppb;
  BudgetOptions weights = device;
  weights.expert_parallel_ranks = expert_parallel_ranks(vm, choice);
  take_weight_options(settings, weights, choice.kv.tensor_parallel);
  if (run.dtype == "float32" || run.dtype == "float") settings.weights.dtype_bytes = 4;
  settings.max_num_batched_tokens = positive_integer(*option_text(vm, option_key(kOptMaxBatchedTokens)), kOptMaxBatchedTokens);
  settings.max_num_seqs = positive_integer(*option_text(vm, option_key(kOptMaxRunning)), kOptMaxRunning);
  if (const auto n = option_text(vm, option_key(kOptMaxModelLen))) settings.max_model_len = positive_integer(*n, kOptMaxModelLen);
  settings.enforce_eager = run.enforce_eager;
  const StartupMemory startup = startup_memory(choice.model, choice.kv, settings, device);
  const StartupStage& st = startup.stages[startup.binding_stage];
  const std::string terms =
      fmt::format("vLLM's start-up rule on {}: total {} x {} - weights {} - activation peak {} - buffers {} - "
                  "non-torch {} = {} bytes",
                  device.device.empty() ? std::string("the device") : device.device, with_commas(startup.device_total_bytes),
                  format_ppb(startup.memory_fraction_ppb), with_commas(st.weights.bytes),
                  with_commas(st.activation_peak_bytes), with_commas(st.buffer_bytes), with_commas(st.non_torch_bytes),
                  with_commas(st.kv_budget_bytes));
  if (st.kv_budget_bytes <= 0) {
    throw InputError(utilisation_from,
                     "vLLM's start-up rule leaves nothing for the KV cache (" + terms + "); give --kv-budget");
  }
  const std::int64_t null_block = null_block_bytes(vm, choice);
  return StartupPool{less_null_block(st.kv_budget_bytes, null_block, utilisation_from),
                     terms + null_block_text(null_block)};
}

// meta.json's settings as defaults of the replay options. Returns where the KV pool validate
// sized comes from ("" when the user's options size it: --kv-budget, or replay's rule with
// --reserve or --params).
std::string apply_run_settings(po::variables_map& vm, const MeasuredRun& run) {
  const std::string meta = run.dir + "/meta.json";
  default_to(vm, "trace", run.workload);
  if (!given(vm, option_key(kOptModel)) && !given(vm, "config")) {
    const RunModelRow* row = run_model_row(run.model);
    if (row == nullptr) {
      throw InputError(Location{meta, 0, "model"}, "\"" + run.model +
                                                       "\" has no kvsim preset in validate's table; give --model "
                                                       "PRESET or --config config.json");
    }
    if (!has_model_preset(row->preset)) {
      throw InputError(Location{meta, 0, "model"}, "\"" + run.model + "\" is the preset " + row->preset +
                                                       ", which this kvsim does not have yet; give --config "
                                                       "config.json (the model's Hugging Face config)");
    }
    default_to(vm, option_key(kOptModel), row->preset);
    if (run.max_model_len == 0 && row->max_model_len > 0) {
      default_to(vm, option_key(kOptMaxModelLen), std::to_string(row->max_model_len));
    }
  }
  // Data parallelism: one engine per replica behind vLLM's router (replay --replicas).
  if (run.data_parallel > 1) {
    default_to(vm, option_key(kOptReplicas), std::to_string(run.data_parallel));
    if (run.expert_parallel && !given(vm, option_key(kOptExpertParallel))) {
      vm.insert({option_key(kOptExpertParallel), po::variable_value(boost::any(), false)});
    }
  }
  default_to(vm, option_key(kOptTp), std::to_string(run.tensor_parallel));
  default_to(vm, option_key(kOptMaxRunning), std::to_string(run.max_num_seqs));
  // vLLM 0.19 schedules asynchronously by default (vllm/config/vllm.py: async_scheduling None
  // -> True; vllm/v1/engine/core.py step_with_batch_queue), the version whose code was read.
  if (!run.vllm_version.empty() && !vllm_at_least(run.vllm_version, 0, 0)) {
    throw InputError(Location{meta, 0, "vllm_version"},
                     "\"" + run.vllm_version + "\" is not a version such as \"0.19.0\"");
  }
  if (vllm_at_least(run.vllm_version, 0, 19)) default_to(vm, option_key(kOptAsyncScheduling), "on");
  default_to(vm, option_key(kOptMaxBatchedTokens), std::to_string(run.max_num_batched_tokens));
  if (run.max_model_len > 0) default_to(vm, option_key(kOptMaxModelLen), std::to_string(run.max_model_len));
  // vLLM's defaults unless meta.json says otherwise: 16-token blocks, prefix caching on,
  // chunked prefill on (vllm/config/cache.py, scheduler.py).
  default_to(vm, option_key(kOptAllocator),
             fmt::format("paged:block={}{}", run.block_size,
                         run.prefix_caching.value_or(true) ? ",prefix-caching=on" : ""));
  if (run.chunked_prefill == false && !vm.count(option_key(kOptNoChunkedPrefill))) {
    vm.insert({option_key(kOptNoChunkedPrefill), po::variable_value(boost::any(), false)});
  }
  if (const auto dtype = run_kv_dtype(run, meta)) default_to(vm, option_key(kOptDtype), *dtype);
  default_to(vm, option_key(kOptSchedule), "simulate");
  // The run's GPU times the steps, unless --device or --timing-device names another.
  const char* preset = run_device(run);
  const bool known = preset != nullptr && has_device_preset(preset);
  if (known && !given(vm, option_key(kOptDevice))) default_to(vm, option_key(kOptTimingDevice), preset);
  if (given(vm, option_key(kOptKvBudget))) return "";  // the pool as given
  const bool user_device = given(vm, option_key(kOptDevice)) || given(vm, option_key(kOptDeviceMemory));
  // A term of replay's own rule (--reserve, --params) or of the start-up rule
  // (--gpu-memory-utilization) given: the pool is derived, not the one meta.json fixes.
  const bool user_rule = given(vm, option_key(kOptReserve)) || given(vm, option_key(kOptParams));
  const bool user_terms = user_device || user_rule || given(vm, option_key(kOptGpuMemoryUtilization));
  // The pool's size, when meta.json fixes it: it needs no device (one named times the steps).
  if (!user_terms) {
    if (const FixedPool fixed = run_fixed_pool(vm, run); fixed.bytes > 0) {
      const std::int64_t null_block = null_block_bytes(vm, resolve_model(vm, kSpec.synopsis, ""));
      const std::int64_t pool = less_null_block(fixed.bytes, null_block, Location{meta, 0, fixed.field});
      default_to(vm, option_key(kOptKvBudget), std::to_string(pool));
      return fixed.source + null_block_text(null_block);
    }
  }
  if (!user_device) {
    const std::string where = run.dir + "/peer_cluster_config.json";
    if (run.hardware.empty() && preset == nullptr) {
      if (!run.device_name.empty()) {
        throw InputError(Location{meta, 0, "hardware.device_name"},
                         "\"" + run.device_name + "\" is not the product name of any kvsim device preset; give "
                         "--device, --device-memory or --kv-budget");
      }
      throw InputError(Location{where, 0, "hardware"},
                       "the run does not name its GPU; give --device, --device-memory or --kv-budget");
    }
    if (preset == nullptr) {
      throw InputError(Location{where, 0, "hardware"}, "\"" + run.hardware +
                                                           "\" has no kvsim device preset in validate's table; give "
                                                           "--device, --device-memory or --kv-budget");
    }
    if (!known) {
      throw InputError(Location{where, 0, "hardware"},
                       "\"" + run.hardware + "\" is the device preset " + preset +
                           ", which this kvsim does not have yet; give --device-memory (its memory, e.g. 96GB "
                           "for an RTX PRO 6000) or --kv-budget");
    }
    default_to(vm, option_key(kOptDevice), preset);
    // The device's total as CUDA reported it in the run, rather than the preset's.
    if (run.device_total_bytes > 0) default_to(vm, option_key(kOptDeviceMemory), std::to_string(run.device_total_bytes));
  }
  // Where the utilisation comes from, for an error: the user's option, else meta.json's (or
  // vLLM's default where meta.json has none).
  const Location utilisation_from = given(vm, option_key(kOptGpuMemoryUtilization))
                                        ? Location{"", 0, kOptGpuMemoryUtilization}
                                        : Location{meta, 0, "gpu_memory_utilization"};
  if (run.gpu_memory_utilization > 0) {
    default_to(vm, option_key(kOptGpuMemoryUtilization), fmt::format("{}", run.gpu_memory_utilization));
  }
  // A term of replay's own rule given: that rule, as given.
  if (user_rule) return "";
  const bool recorded_total = run.device_total_bytes > 0 && !user_device;
  StartupPool pool = vllm_startup_pool(vm, run, utilisation_from);
  if (recorded_total) pool.source += "; the device total as meta.json hardware.device_total_memory_bytes records it";
  // The pool replaces the terms it was computed from; the device (if any) still times the steps.
  vm.erase(option_key(kOptDeviceMemory));
  vm.erase(option_key(kOptGpuMemoryUtilization));
  default_to(vm, option_key(kOptKvBudget), std::to_string(pool.bytes));
  return pool.source;
}

struct Sample {
  std::int64_t time_ns;
  std::int64_t running, queued, allocated_bytes;
};

// What one engine (replica) did: its timeline, and when its requests arrived and finished.
struct EngineState {
  std::vector<Sample> samples;
  std::vector<std::int64_t> arrivals, finishes;
};

struct Comparison {
  Distribution measured, simulated;
};

double diff_percent(double measured, double simulated) {
  return measured != 0 ? (simulated - measured) / measured * 100 : 0;
}

struct Result {
  Comparison ttft, tpot, latency;
  double running_mae = 0, waiting_mae = 0;
  std::int64_t ticks = 0;
  bool kv_recorded = false;
  double kv_mae_percent = 0;
  double measured_makespan_s = 0, simulated_makespan_s = 0;
  std::int64_t completed = 0, requests = 0, preemptions = 0;
};

// The engines' samples with `records` (in trace order) as replica_of routed them (empty: one
// engine).
std::vector<EngineState> engine_states(std::vector<std::vector<Sample>> samples, const std::vector<RequestRecord>& records,
                                       const std::vector<std::uint32_t>& replica_of) {
  std::vector<EngineState> engines(samples.size());
  for (std::size_t i = 0; i < samples.size(); ++i) engines[i].samples = std::move(samples[i]);
  for (std::size_t k = 0; k < records.size(); ++k) {
    const RequestRecord& q = records[k];
    EngineState& e = engines[replica_of.empty() ? 0 : replica_of.at(k)];
    e.arrivals.push_back(q.arrival_ns);
    if (q.outcome == RequestRecord::Outcome::completed) e.finishes.push_back(q.finish_ns);
  }
  for (EngineState& e : engines) {
    std::sort(e.arrivals.begin(), e.arrivals.end());
    std::sort(e.finishes.begin(), e.finishes.end());
  }
  return engines;
}

// The engine's running and waiting counts and allocated bytes at `at_ns`. The timeline
// samples the state as each iteration begins (admissions and preemptions done); after that,
// until the next iteration, requests only arrive (and wait) or complete at the iteration's end.
// Completions after the last sample mean the engine went idle (a busy engine begins its next
// iteration, and samples, as the last one ends): with nothing running nothing holds KV (a
// waiting request holds none, a cached block is free), as vLLM's usage falls to 0 then.
Sample state_at(const EngineState& e, std::int64_t at_ns) {
  const auto count_in = [](const std::vector<std::int64_t>& v, std::int64_t after, std::int64_t upto) {
    return static_cast<std::int64_t>(std::upper_bound(v.begin(), v.end(), upto) -
                                     std::upper_bound(v.begin(), v.end(), after));
  };
  const auto it = std::upper_bound(e.samples.begin(), e.samples.end(), at_ns,
                                   [](std::int64_t x, const Sample& s) { return x < s.time_ns; });
  Sample s{std::numeric_limits<std::int64_t>::min(), 0, 0, 0};
  if (it != e.samples.begin()) s = *(it - 1);
  const std::int64_t running = s.running - count_in(e.finishes, s.time_ns, at_ns);
  return {at_ns, running, s.queued + count_in(e.arrivals, s.time_ns, at_ns), running > 0 ? s.allocated_bytes : 0};
}

Result compare(const MeasuredRun& run, const ReplayPlan& plan, const ReplayReport& report,
               std::vector<RequestRecord> records, const std::vector<EngineState>& engines) {
  if (records.size() != run.requests.size()) {
    throw InputError(Location{plan.trace_path, 0, ""},
                     "the workload has " + std::to_string(records.size()) + " requests but " + run.dir +
                         "/requests.jsonl has " + std::to_string(run.requests.size()) + ": not this run's workload");
  }
  Result r;
  r.requests = static_cast<std::int64_t>(records.size());
  r.preemptions = report.preemptions;
  const MeasuredLatencies measured = measured_latencies(run);
  MeasuredLatencies simulated;
  double first_arrival = 0, last_finish = 0, wall_offset = 0;
  bool any = false;
  // Like with like: the simulated figures are over the requests the measured ones are over
  // (those with timestamps).
  for (std::size_t i = 0; i < records.size(); ++i) {
    const RequestRecord& q = records[i];
    const bool completed = q.outcome == RequestRecord::Outcome::completed;
    r.completed += completed ? 1 : 0;
    if (!run.requests[i].timed) continue;
    wall_offset += run.requests[i].arrival_time_s - static_cast<double>(q.arrival_ns) / 1e9;
    if (!completed) continue;
    const double arrival = static_cast<double>(q.arrival_ns) / 1e9, finish = static_cast<double>(q.finish_ns) / 1e9;
    const double first = static_cast<double>(q.first_token_ns) / 1e9;
    simulated.ttft.push_back(first - arrival);
    if (q.output_tokens >= 2) simulated.tpot.push_back((finish - first) / static_cast<double>(q.output_tokens - 1));
    simulated.latency.push_back(finish - arrival);
    first_arrival = any ? std::min(first_arrival, arrival) : arrival;
    last_finish = any ? std::max(last_finish, finish) : finish;
    any = true;
  }
  // The workload's clock against the wall clock: the mean offset of the arrivals.
  wall_offset /= static_cast<double>(timed_requests(run));
  r.ttft = {distribution(measured.ttft), distribution(simulated.ttft)};
  r.tpot = {distribution(measured.tpot), distribution(simulated.tpot)};
  r.latency = {distribution(measured.latency), distribution(simulated.latency)};
  r.measured_makespan_s = measured_makespan_s(run);
  r.simulated_makespan_s = last_finish - first_arrival;
  // Each tick against the simulated state at the same instant, summed over the engines.
  double running_err = 0, waiting_err = 0, kv_err = 0;
  const double capacity = static_cast<double>(report.capacity_bytes);
  for (const MeasuredTick& t : run.ticks) {
    const double at_s = run.started_at_s + t.t_s - wall_offset;
    const auto at_ns = static_cast<std::int64_t>(std::llround(at_s * 1e9));
    std::int64_t running = 0, waiting = 0, allocated = 0;
    for (const EngineState& e : engines) {
      const Sample s = state_at(e, at_ns);
      running += s.running;
      waiting += s.queued;
      allocated += s.allocated_bytes;
    }
    running_err += std::abs(static_cast<double>(running - t.running));
    waiting_err += std::abs(static_cast<double>(waiting - t.waiting));
    if (capacity > 0) kv_err += std::abs(static_cast<double>(allocated) / capacity * 100 - t.kv_cache_percent);
  }
  r.ticks = static_cast<std::int64_t>(run.ticks.size());
  if (r.ticks > 0) {
    r.running_mae = running_err / static_cast<double>(r.ticks);
    r.waiting_mae = waiting_err / static_cast<double>(r.ticks);
    r.kv_mae_percent = kv_err / static_cast<double>(r.ticks);
  }
  r.kv_recorded = run.kv_usage_recorded && capacity > 0;
  return r;
}

std::string budget_text(const ReplayPlan& plan, const std::string& source) {
  if (!plan.budget) return "none (unbounded)";
  return source.empty() ? budget_description(*plan.budget) : budget_description(*plan.budget, source);
}

std::string table(const MeasuredRun& run, const ReplayPlan& plan, const std::string& budget_source, const ReplayReport& report,
                  const Result& r) {
  std::string out = fmt::format("validation of {} ({}, vLLM {})\n", run.dir, run.model, run.vllm_version);
  out += fmt::format("workload {}: {} requests, {} completed in the simulation, {} preemptions\n", plan.trace_path,
                     r.requests, r.completed, r.preemptions);
  out += fmt::format("kvsim: model {} (tp {}{}), {}, cost {}\n", plan.choice.model.name, plan.choice.kv.tensor_parallel,
                     plan.replicas > 1 ? fmt::format(", {} data-parallel replicas", plan.replicas) : std::string(),
                     report.allocator, report.cost_model);
  out += fmt::format("       max running {}, max batched tokens {}{}, policy {}\n", plan.options.max_running,
                     plan.options.max_batched_tokens, plan.options.chunked_prefill ? "" : " (no chunked prefill)",
                     report.policy);
  out += fmt::format("       KV budget per device {}\n", budget_text(plan, budget_source));
  if (!run.unmodelled_settings.empty()) {
    std::string list;
    for (const std::string& setting : run.unmodelled_settings) list += (list.empty() ? "" : ", ") + setting;
    out += "       not modelled (meta.json engine_kwargs): " + list + "\n";
  }
  out += "\n";
  out += fmt::format("{:<24} {:>12} {:>12} {:>9}\n", "Metric", "measured", "kvsim", "Diff%");
  out += std::string(59, '-') + "\n";
  const auto block = [&](const char* name, const Comparison& c) {
    const std::pair<const char*, double Distribution::*> rows[] = {{"Mean", &Distribution::mean},
                                                                  {"Median", &Distribution::p50},
                                                                  {"P90", &Distribution::p90},
                                                                  {"P95", &Distribution::p95},
                                                                  {"P99", &Distribution::p99}};
    for (const auto& [label, field] : rows) {
      if (c.measured.count == 0 || c.simulated.count == 0) {  // e.g. TPOT with one-token outputs only
        const auto cell = [](const Distribution& d, double v) {
          return d.count > 0 ? fmt::format("{:.1f}", v * 1e3) : std::string("n/a");
        };
        out += fmt::format("{:<24} {:>12} {:>12} {:>9}\n", fmt::format("{} {} (ms)", name, label),
                           cell(c.measured, c.measured.*field), cell(c.simulated, c.simulated.*field), "n/a");
        continue;
      }
      const double m = c.measured.*field * 1e3, s = c.simulated.*field * 1e3;
      out += fmt::format("{:<24} {:>12.1f} {:>12.1f} {:>+8.1f}%\n", fmt::format("{} {} (ms)", name, label), m, s,
                         diff_percent(m, s));
    }
    out += "\n";
  };
  block("TTFT", r.ttft);
  block("TPOT", r.tpot);
  block("Latency", r.latency);
  out += fmt::format("{:<24} {:>12.2f} {:>12.2f} {:>+8.1f}%\n", "Makespan (s)", r.measured_makespan_s,
                     r.simulated_makespan_s, diff_percent(r.measured_makespan_s, r.simulated_makespan_s));
  if (run.preemptions_recorded) {
    out += fmt::format("{:<24} {:>12} {:>12}\n", "Preemptions", run.preemptions, r.preemptions);
  }
  if (r.ticks > 0) {
    out += fmt::format("running, MAE per tick     {:.2f} requests over {} ticks\n", r.running_mae, r.ticks);
    out += fmt::format("waiting, MAE per tick     {:.2f} requests\n", r.waiting_mae);
  } else {
    out += "running, waiting MAE      n/a: no tick of timeseries.csv falls inside the run\n";
  }
  out += r.kv_recorded ? fmt::format("KV usage, MAE per tick    {:.2f} percentage points\n", r.kv_mae_percent)
                       : std::string("KV usage                  not recorded in this run\n");
  if (run.untimed_requests > 0) {
    out += fmt::format("NOTE: {} of {} requests carry no timestamps in requests.jsonl (vLLM returned no metrics): "
                       "replayed, but the latencies and the makespan above are over the other {}\n",
                       run.untimed_requests, r.requests, timed_requests(run));
  }
  if (r.completed < r.requests) {
    out += fmt::format("WARNING: {} of {} requests did not complete in the simulation: the figures above are over "
                       "the rest only\n",
                       r.requests - r.completed, r.requests);
  }
  return out;
}

std::string json_of(const MeasuredRun& run, const ReplayPlan& plan, const std::string& budget_source,
                    const ReplayReport& report, const Result& r) {
  using Json = nlohmann::ordered_json;
  // No samples: null figures, never 0.
  const auto dist = [](const Distribution& d) {
    const auto v = [&](double x) { return d.count > 0 ? Json(x) : Json(nullptr); };
    return Json{{"count", d.count}, {"mean_s", v(d.mean)}, {"p50_s", v(d.p50)},
                {"p90_s", v(d.p90)},   {"p95_s", v(d.p95)},   {"p99_s", v(d.p99)}};
  };
  const auto cmp = [&](const Comparison& c) {
    if (c.measured.count == 0 || c.simulated.count == 0) {
      return Json{{"measured", dist(c.measured)}, {"simulated", dist(c.simulated)}, {"diff_percent", nullptr}};
    }
    return Json{{"measured", dist(c.measured)},
                {"simulated", dist(c.simulated)},
                {"diff_percent", Json{{"mean", diff_percent(c.measured.mean, c.simulated.mean)},
                                      {"p50", diff_percent(c.measured.p50, c.simulated.p50)},
                                      {"p90", diff_percent(c.measured.p90, c.simulated.p90)},
                                      {"p95", diff_percent(c.measured.p95, c.simulated.p95)},
                                      {"p99", diff_percent(c.measured.p99, c.simulated.p99)}}}};
  };
  Json j{{"run", run.dir},
         {"model", run.model},
         {"workload", plan.trace_path},
         {"kvsim", Json{{"model", plan.choice.model.name},
                        {"tensor_parallel", plan.choice.kv.tensor_parallel},
                        {"replicas", plan.replicas},
                        {"allocator", report.allocator},
                        {"cost_model", report.cost_model},
                        {"max_running", plan.options.max_running},
                        {"max_batched_tokens", plan.options.max_batched_tokens},
                        {"chunked_prefill", plan.options.chunked_prefill},
                        {"policy", report.policy},
                        {"kv_budget_bytes", plan.budget ? Json(plan.budget->kv_budget_bytes) : Json(nullptr)},
                        {"kv_budget", budget_text(plan, budget_source)}}},
         {"unmodelled_settings", run.unmodelled_settings},
         {"requests", r.requests},
         {"completed", r.completed},
         {"untimed_requests", run.untimed_requests},
         {"preemptions", r.preemptions},
         {"preemptions_measured", run.preemptions_recorded ? Json(run.preemptions) : Json(nullptr)},
         {"ttft", cmp(r.ttft)},
         {"tpot", cmp(r.tpot)},
         {"latency", cmp(r.latency)},
         {"makespan_s", Json{{"measured", r.measured_makespan_s},
                             {"simulated", r.simulated_makespan_s},
                             {"diff_percent", diff_percent(r.measured_makespan_s, r.simulated_makespan_s)}}},
         {"ticks", r.ticks},
         {"running_mae", r.ticks > 0 ? Json(r.running_mae) : Json(nullptr)},
         {"waiting_mae", r.ticks > 0 ? Json(r.waiting_mae) : Json(nullptr)},
         {"kv_usage_mae_percent", r.kv_recorded ? Json(r.kv_mae_percent) : Json(nullptr)}};
  return j.dump(2) + "\n";
}

}  // namespace

int run_validate(const Invocation& inv) {
  // replay's options but its outputs: validate prints its own comparison.
  po::options_description options = replay_option_descriptions(false);
  po::options_description own("Validation");
  own.add_options()(
      "workload", po::value<std::string>(),
      "the run's workload (default: meta.json's dataset_path, relative to the folder above the run)")(
      "json", "print the comparison as JSON instead of the table")(
      "per-request", po::value<std::string>(),
      "write the simulated requests to this CSV file, one row each (as replay --per-request)");
  options.add(own);
  po::options_description hidden;
  hidden.add_options()("run", po::value<std::string>())("trace", po::value<std::string>());
  po::positional_options_description positional;
  positional.add("run", 1);
  po::variables_map vm;
  if (!parse_options(inv, kSpec, options, positional, vm, &hidden)) return kExitOk;
  const auto dir = option_text(vm, "run");
  if (!dir) throw UsageError("a run directory is required\nUsage: " + kSpec.synopsis);
  const MeasuredRun run = read_measured_run(*dir, option_text(vm, "workload"), true);
  const std::string budget_source = apply_run_settings(vm, run);
  ReplayPlan plan = plan_replay(vm);
  if (plan.allocators.size() != 1) throw UsageError("validate replays one allocator\nUsage: " + kSpec.synopsis);

  ReplayOptions options_run = plan.options;
  std::vector<RequestRecord> records;
  const std::size_t engines = plan.replicas > 1 ? static_cast<std::size_t>(plan.replicas) : 1;
  std::vector<std::vector<Sample>> samples(engines);
  options_run.per_request = [&](const RequestRecord& r) { records.push_back(r); };
  options_run.timeline = [&](const TimelineRow& row) {
    samples.at(static_cast<std::size_t>(row.replica)).push_back({row.time_ns, row.running, row.queued, row.allocated_bytes});
  };
  TraceOptions trace_options = plan.trace;
  if (plan.allocators[0]->prefix_block_tokens() > 0) {
    trace_options.hash_block_tokens = plan.allocators[0]->prefix_block_tokens();
  }
  auto trace = open_trace(plan.trace_path, trace_options);
  ReplayReport report;
  std::vector<std::uint32_t> replica_of;  // empty: one engine
  if (engines > 1) {
    std::vector<Allocator*> allocators;
    for (auto& a : plan.replica_allocators.at(0)) allocators.push_back(a.get());
    ReplicaRun dp = replay_replicas(*trace, allocators, options_run);
    report = std::move(dp.total);
    replica_of = std::move(dp.replica_of);
  } else {
    report = replay(*trace, *plan.allocators[0], options_run);
  }
  // One record per request of the trace, from whichever engine served it.
  in_trace_order(records);
  for (std::size_t k = 0; k < records.size(); ++k) {
    if (records[k].ordinal != static_cast<std::int64_t>(k) + 1) {
      throw InternalError(fmt::format("validate: request #{} of the trace has no per-request record, or two", k + 1));
    }
  }
  if (!replica_of.empty() && replica_of.size() != records.size()) {
    throw InternalError(fmt::format("validate: {} requests routed, {} recorded", replica_of.size(), records.size()));
  }
  if (plan.per_request_path) {
    std::ofstream out(*plan.per_request_path, std::ios::binary);
    if (!out) throw InputError(Location{*plan.per_request_path, 0, ""}, "cannot write the per-request file");
    out << per_request_header() << per_request_rows(report.allocator, records);
  }
  const std::vector<EngineState> states = engine_states(std::move(samples), records, replica_of);
  const Result result = compare(run, plan, report, std::move(records), states);
  fmt::print("{}", plan.json ? json_of(run, plan, budget_source, report, result)
                         : table(run, plan, budget_source, report, result));
  return kExitOk;
}

}  // namespace kvsim::cli
