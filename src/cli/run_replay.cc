// A measured run replayed as kvsim validate replays it: meta.json's engine settings as the
// defaults of replay's options (see run_replay.h).
#include "run_replay.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "kvsim/allocator.h"
#include "kvsim/budget.h"
#include "kvsim/cost_model.h"
#include "kvsim/error.h"
#include "kvsim/model.h"
#include "kvsim/option_names.h"
#include "kvsim/replicas.h"
#include "kvsim/startup_memory.h"
#include "kvsim/trace.h"
#include "kvsim/units.h"
#include "model_options.h"
#include "replay_output.h"
#include "run_models.h"

namespace kvsim::cli {
namespace {

// How far requests.jsonl's arrivals may drift from the workload's before validate says so.
constexpr double kArrivalSpreadS = 1.0;

bool has_model_preset(std::string_view name) {
  const auto& all = model_presets();
  return std::any_of(all.begin(), all.end(), [&](const ModelSpec& m) { return m.name == name; });
}
bool has_device_preset(std::string_view name) {
  const auto& all = device_presets();
  return std::any_of(all.begin(), all.end(), [&](const DevicePreset& d) { return d.name == name; });
}

// The option takes `value` unless the user gave it.
void default_to(po::variables_map& vm, const char* key, const std::string& value) {
  if (given(vm, key)) return;
  vm.erase(key);
  vm.insert({key, po::variable_value(boost::any(value), false)});
}

// Replay's options as fill_in_run_settings() fills them in from a measured run, each with the
// place its value came from (meta.json's field, or peer_cluster_config.json's): an error about
// such an option is that place's (blaming_meta()), not a usage error about an option the user
// never typed.
class RunDefaults {
 public:
  explicit RunDefaults(po::variables_map& vm) : vm_(vm) {}
  po::variables_map& vm() { return vm_; }

  // `flag` takes `value` from `from` unless the user gave it (or an earlier default did);
  // `from` empty for a value that is validate's own choice.
  void set(const char* flag, const std::string& value, const Location& from) {
    if (given(vm_, option_key(flag))) return;
    default_to(vm_, option_key(flag), value);
    if (!from.file.empty()) from_.insert({flag, from});
  }
  // The switch `flag` (an option without a value) on, from `from`, unless the user gave it.
  void set_switch(const char* flag, const Location& from) {
    if (given(vm_, option_key(flag))) return;
    vm_.insert({option_key(flag), po::variable_value(boost::any(), false)});
    from_.insert({flag, from});
  }
  // `flag` no longer given: what replaced it (the KV pool) carries its place.
  void erase(const char* flag) {
    vm_.erase(option_key(flag));
    from_.erase(flag);
  }
  // The KV pool is vLLM's start-up rule's, computed from meta.json's settings (not a pool the
  // run recorded, nor one the user's options size).
  bool startup_pool = false;
  // Where `flag`'s value came from; nullptr when the user gave it or kvsim chose it.
  const Location* from(const std::string& flag) const {
    const auto it = from_.find(flag);
    return it == from_.end() ? nullptr : &it->second;
  }

 private:
  po::variables_map& vm_;
  std::map<std::string, Location, std::less<>> from_;
};

// vLLM's defaults for the run's version, or --vllm-version's when given (none for a run
// whose meta.json names no version, or one that is not a version).
VllmVersionDefaults run_vllm_version_defaults(const MeasuredRun& run, const po::variables_map& vm) {
  const auto version = option_text(vm, option_key(kOptVllmVersion));
  return vllm_version_defaults(version ? *version : run.vllm_version).value_or(VllmVersionDefaults{});
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

// The bytes behind one block id of vLLM's pool on one device, for the allocator replayed:
// with the hybrid manager (sliding-window), one page of every layer of a KV-cache group
// (paged_pool(): page x group size); served as full attention (paged: no hybrid manager, or
// windows disabled), one group of every layer, a page of each (unify_hybrid_kv_cache_specs,
// vllm/v1/core/kv_cache_utils.py). The two differ only on a model with sliding windows.
std::int64_t vllm_block_bytes(const KvLayout& layout, std::int64_t block_tokens, std::string_view allocator) {
  PagedOptions paging;
  paging.block_tokens = block_tokens;
  if (allocator == "paged" && layout.any_window()) return block_tokens * layout.bytes_per_token();
  return paged_pool(layout, 0, paging).block_bytes;
}

// The one allocator --allocator names, or nothing when it names none or several.
std::optional<AllocatorSpec> replayed_allocator(const po::variables_map& vm) {
  const auto text = option_text(vm, option_key(kOptAllocator));
  if (!text) return std::nullopt;
  std::vector<AllocatorSpec> specs = parse_allocator_list(*text, kOptAllocator);
  if (specs.size() != 1) return std::nullopt;
  return std::move(specs[0]);
}

// The bytes behind one of the run's KV blocks on one device, as vLLM sizes it.
std::int64_t run_block_bytes(const po::variables_map& vm, const MeasuredRun& run, const std::string& usage) {
  const auto spec = replayed_allocator(vm);
  return vllm_block_bytes(resolve_model(vm, usage, "").layout(), run.block_size, spec ? spec->kind : "");
}

// The KV budget per device meta.json fixes (bytes 0 when vLLM derives it from the device),
// the field it comes from and how the report says so: kv_cache_memory_bytes, or
// num_gpu_blocks_override blocks of the run's block size (vLLM sizes the KV tensors for
// exactly that many; vllm/v1/core/kv_cache_utils.py). A block's bytes are vLLM's: one page of
// every layer of a KV-cache group (paged_pool(): page x group size), which on a model with
// sliding-window layers is less than a block of every layer. When meta.json records what vLLM
// resolved at start-up (kv_cache.num_gpu_blocks), that count wins over both: it is the pool
// vLLM allocated, whatever derived it. With data parallelism it is the engines' sum
// (vllm/v1/engine/utils.py, the start-up handshake: "Sum values from all engines in DP
// case"), so each engine's pool is the sum / dp (the engines size theirs alike; a remainder
// is dropped).
struct FixedPool {
  std::int64_t bytes = 0;
  std::string field;  // meta.json's, as read
  std::string source;
};
FixedPool run_fixed_pool(const po::variables_map& vm, const MeasuredRun& run, const std::string& usage) {
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
    pool.field = run.read_from.at("kv_cache_memory_bytes");
    pool.source = "meta.json kv_cache_memory_bytes";
    return pool;
  } else if (run.num_gpu_blocks_override > 0) {
    blocks = run.num_gpu_blocks_override;
    pool.field = "engine_kwargs.num_gpu_blocks_override";
    pool.source = fmt::format("meta.json num_gpu_blocks_override: {} blocks of {} tokens", blocks, run.block_size);
  } else {
    return pool;
  }
  const std::int64_t block_bytes = run_block_bytes(vm, run, usage);
  if (__builtin_mul_overflow(blocks, block_bytes, &pool.bytes)) {
    throw InputError(Location{run.dir + "/meta.json", 0, pool.field},
                     fmt::format("{} blocks of {} bytes each overflow 64 bits", blocks, block_bytes));
  }
  return pool;
}

// The kvsim preset of the run's GPU: meta.json's recorded device name (hardware.device_name,
// as CUDA names the card the run used) when it is a preset's product name (case aside), else
// peer_cluster_config.json's hardware by validate's table (the peer's own name for a family:
// its "A100" does not say 40 or 80 GB); nullptr when neither names one.
const DevicePreset* recorded_device(const MeasuredRun& run) {
  return run.device_name.empty() ? nullptr : find_device_preset_by_product(run.device_name);
}
const char* run_device(const MeasuredRun& run) {
  if (const DevicePreset* preset = recorded_device(run)) return preset->name.data();
  return run_device_preset(run.hardware);
}

// vLLM's first block is its null block (vllm/v1/core/block_pool.py: BlockPool.__init__ takes
// it off the free queue, a placeholder never handed out; get_usage divides by
// num_gpu_blocks - 1), so its pool holds one block fewer than its memory does. The bytes of
// that block when the replayed allocator is vLLM's pool (paged or sliding-window): one block
// id's bytes, vllm_block_bytes(); 0 for any other allocator.
std::int64_t null_block_bytes(const po::variables_map& vm, const ModelChoice& choice) {
  // vLLM's pool, whichever manager hands its blocks out (paged, or the hybrid manager's
  // sliding windows), keeps block 0 back.
  const auto spec = replayed_allocator(vm);
  if (!spec || (spec->kind != "paged" && spec->kind != "sliding-window")) return 0;
  std::int64_t block_tokens = PagedOptions{}.block_tokens;
  for (const auto& [key, value] : spec->params) {
    if (key == "block") block_tokens = positive_integer(value, kOptAllocator);
  }
  return vllm_block_bytes(choice.layout(), block_tokens, spec->kind);
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
StartupPool vllm_startup_pool(const po::variables_map& vm, const MeasuredRun& run, const Location& utilisation_from,
                              const std::string& usage) {
  const ModelChoice choice = resolve_model(vm, usage, "");
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
  if (const auto n = option_text(vm, option_key(kOptMaxModelLen))) settings.max_model_len = token_count(*n, kOptMaxModelLen);
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

}  // namespace

std::vector<std::string> measured_run_inputs(const MeasuredRun& run) {
  return {run.dir + "/meta.json", run.dir + "/requests.jsonl", run.dir + "/timeseries.csv",
          run.dir + "/peer_cluster_config.json", run.workload};
}

std::string vllm_version_text(const MeasuredRun& run) {
  return run.vllm_version.empty() ? std::string("version not recorded") : run.vllm_version;
}

std::int64_t run_cuda_graph_max_tokens(const MeasuredRun& run, const po::variables_map& vm) {
  const bool on = given(vm, option_key(kOptCudaGraphs)) ? on_off(vm, kOptCudaGraphs)
                                                      : run_vllm_version_defaults(run, vm).cuda_graphs && !run.enforce_eager;
  return on ? cuda_graph_max_tokens(run.max_num_seqs, run.max_num_batched_tokens) : 0;
}

std::optional<std::string> parse_run_command(const Invocation& inv, const CommandSpec& spec,
                                             po::options_description& options, po::variables_map& vm) {
  // "trace" too: replay's options refer to the trace they read by that name.
  po::options_description hidden;
  hidden.add_options()("run", po::value<std::string>())("trace", po::value<std::string>());
  // Not in --help (a measured run is replayed whole), but read, so that giving one says why
  // it is refused rather than that it is unknown.
  for (const char* key : {kOptTimeWindow, kOptRequests, kOptRateScale}) {
    if (options.find_nothrow(option_key(key), false) == nullptr) hidden.add_options()(option_key(key), po::value<std::string>());
  }
  po::positional_options_description positional;
  positional.add("run", 1);
  if (!parse_options(inv, spec, options, positional, vm, &hidden)) return std::nullopt;
  const auto dir = option_text(vm, "run");
  if (!dir) throw UsageError("a run directory is required\nUsage: " + spec.synopsis);
  // What was measured is the whole workload at its own load: a part of it, or a rescaled
  // one, would be compared with figures it did not produce.
  for (const char* key : {kOptTimeWindow, kOptRequests, kOptRateScale}) {
    if (given(vm, option_key(key))) {
      throw UsageError(std::string(key) + " selects or rescales the workload, but a measured run is replayed whole, "
                       "at the load it was measured under\nUsage: " + spec.synopsis);
    }
  }
  return dir;
}

namespace {

// f(), which reads options fill_in_run_settings() filled in: an error about an option whose
// value came from the run's files is about that file's field, and says so (a file's error, not
// a usage error).
template <class F>
auto blaming_meta(const RunDefaults& defaults, F&& f) {
  try {
    return f();
  } catch (const InputError& e) {
    const std::string& option = e.where().field;
    const Location* from = e.where().file.empty() ? defaults.from(option) : nullptr;
    if (from == nullptr) throw;
    throw InputError(*from, e.problem() + " (the replay takes this value as " + option + ")");
  }
}

// meta.json's settings as defaults of the replay options. Returns where the KV pool validate
// sized comes from ("" when the user's options size it: --kv-budget, or replay's rule with
// --reserve or --params).
std::string fill_in_run_settings(RunDefaults& defaults, const MeasuredRun& run, const std::string& usage) {
  po::variables_map& vm = defaults.vm();
  const std::string meta = run.dir + "/meta.json";
  // meta.json's `field`, or the path a setting read from more than one object was read at.
  const auto field = [&](const std::string& name) { return Location{meta, 0, name}; };
  const auto setting = [&](const std::string& name) {
    const auto it = run.read_from.find(name);
    return field(it != run.read_from.end() ? it->second : "engine_kwargs." + name);
  };
  default_to(vm, "trace", run.workload);
  // The recorder replays the workload's first rows when capped (LLMServingSim's
  // bench/core/runner.py --num-reqs): so does the replay, one per request the run recorded.
  // The prompts are then checked one by one against requests.jsonl's.
  defaults.set(kOptRequests, std::to_string(run.requests.size()), Location{});
  if (!given(vm, option_key(kOptModel)) && !given(vm, "config")) {
    const RunModelRow* row = run_model_row(run.model);
    if (row == nullptr) {
      throw NoPresetError(Location{meta, 0, "model"}, "\"" + run.model +
                                                       "\" has no kvsim preset in validate's table; give --model "
                                                       "PRESET or --config config.json");
    }
    if (!has_model_preset(row->preset)) {
      throw NoPresetError(Location{meta, 0, "model"}, "\"" + run.model + "\" is the preset " + row->preset +
                                                       ", which this kvsim does not have yet; give --config "
                                                       "config.json (the model's Hugging Face config)");
    }
    defaults.set(kOptModel, row->preset, field("model"));
    if (run.max_model_len == 0 && row->max_model_len > 0) {
      // validate's table's length for the model meta.json names
      defaults.set(kOptMaxModelLen, std::to_string(row->max_model_len), field("model"));
    }
  }
  // Data parallelism: one engine per replica behind vLLM's router (replay --replicas).
  if (run.data_parallel > 1) {
    defaults.set(kOptReplicas, std::to_string(run.data_parallel), setting("data_parallel_size"));
    // The experts are spread over the replicas; the user's --replicas 1 leaves none to spread
    // them over (and one engine, not meta.json's expert parallelism, is then what is asked).
    // On a model without experts vLLM's enable_expert_parallel changes nothing.
    const auto replicas = option_text(vm, option_key(kOptReplicas));
    if (run.expert_parallel && positive_integer(*replicas, kOptReplicas) > 1 && resolve_model(vm, usage, "").model.moe) {
      defaults.set_switch(kOptExpertParallel, setting("enable_expert_parallel"));
    }
  }
  defaults.set(kOptTp, std::to_string(run.tensor_parallel), setting("tensor_parallel_size"));
  defaults.set(kOptMaxRunning, std::to_string(run.max_num_seqs), setting("max_num_seqs"));
  // The run's vLLM version gives replay's --vllm-version (asynchronous scheduling, CUDA
  // graphs, v1's admission rules; plan_replay applies it), unless the user gives another.
  if (!run.vllm_version.empty() && !given(vm, option_key(kOptVllmVersion))) {
    if (!vllm_version_defaults(run.vllm_version)) {
      throw InputError(Location{meta, 0, "vllm_version"},
                       "\"" + run.vllm_version + "\" is not a version such as \"0.19.0\"; give the version the "
                           "run used with " + kOptVllmVersion);
    }
    defaults.set(kOptVllmVersion, run.vllm_version, field("vllm_version"));
  }
  // What meta.json records wins over the version's defaults: scheduler_reserve_full_isl set
  // either way (unless chunked prefill is off, in the run or by the user's option, where it
  // cannot act and replay refuses it), and enforce_eager (no CUDA graphs).
  const bool vllm_policy = !given(vm, option_key(kOptPolicy)) || vm[option_key(kOptPolicy)].as<std::string>() == "vllm";
  const bool chunked = run.chunked_prefill != false && !given(vm, option_key(kOptNoChunkedPrefill));
  if (vllm_policy && run.reserve_full_isl && chunked) {
    defaults.set(kOptReserveFullIsl, *run.reserve_full_isl ? "on" : "off", setting("scheduler_reserve_full_isl"));
  }
  if (run.enforce_eager) defaults.set(kOptCudaGraphs, "off", setting("enforce_eager"));
  if (run.async_scheduling) {
    defaults.set(kOptAsyncScheduling, *run.async_scheduling ? "on" : "off", setting("async_scheduling"));
  }
  defaults.set(kOptMaxBatchedTokens, std::to_string(run.max_num_batched_tokens), setting("max_num_batched_tokens"));
  if (run.max_model_len > 0) defaults.set(kOptMaxModelLen, std::to_string(run.max_model_len), setting("max_model_len"));
  // vLLM's defaults unless meta.json says otherwise: 16-token blocks, prefix caching on,
  // chunked prefill on (vllm/config/cache.py, scheduler.py). On a model with sliding-window
  // layers vLLM v1 frees the blocks a window has left (SlidingWindowManager.remove_skipped_blocks,
  // vllm/v1/core/single_type_kv_cache_manager.py): replay's sliding-window allocator. A model
  // that mixes both kinds of layers needs the hybrid manager for that (vLLM 0.10 on, unless
  // the run disabled it: unify_hybrid_kv_cache_specs, vllm/v1/core/kv_cache_utils.py, then
  // makes its windows full attention): otherwise paged. A model whose layers all slide has one
  // kind of layer and keeps its window manager either way. disable_sliding_window serves the
  // windows as full attention.
  const bool caching_recorded = run.read_from.count("block_size") == 0 && run.read_from.count("enable_prefix_caching") != 0;
  const KvLayout layout = resolve_model(vm, usage, "").layout();
  const bool all_windows = std::all_of(layout.groups.begin(), layout.groups.end(),
                                       [](const LayerGroup& g) { return g.window_tokens > 0; });
  const bool hybrid = run_vllm_version_defaults(run, vm).hybrid_kv_cache_manager &&
                      !run.disable_hybrid_kv_cache_manager.value_or(false);
  const bool windows_free = layout.any_window() && !run.disable_sliding_window && (all_windows || hybrid);
  defaults.set(kOptAllocator,
               fmt::format("{}:block={}{}", windows_free ? "sliding-window" : "paged", run.block_size,
                           run.prefix_caching.value_or(true) ? ",prefix-caching=on" : ""),
               setting(caching_recorded ? "enable_prefix_caching" : "block_size"));
  if (run.chunked_prefill == false) defaults.set_switch(kOptNoChunkedPrefill, setting("enable_chunked_prefill"));
  if (const auto dtype = run_kv_dtype(run, meta)) {
    const bool kv_dtype = !run.kv_cache_dtype.empty() && run.kv_cache_dtype != "auto";
    defaults.set(kOptDtype, *dtype, setting(kv_dtype ? "kv_cache_dtype" : "dtype"));
  }
  defaults.set(kOptSchedule, "simulate", Location{});
  // The run's GPU times the steps, unless --device or --timing-device names another.
  const char* preset = run_device(run);
  const bool known = preset != nullptr && has_device_preset(preset);
  const Location device_from = recorded_device(run) == nullptr && run_device_preset(run.hardware) != nullptr
                                   ? Location{run.dir + "/peer_cluster_config.json", 0, "hardware"}
                                   : field("hardware.device_name");
  if (known && !given(vm, option_key(kOptDevice))) defaults.set(kOptTimingDevice, preset, device_from);
  if (given(vm, option_key(kOptKvBudget))) return "";  // the pool as given
  const bool user_device = given(vm, option_key(kOptDevice)) || given(vm, option_key(kOptDeviceMemory));
  // A term of replay's own rule (--reserve, --params) or of the start-up rule
  // (--gpu-memory-utilization) given: the pool is derived, not the one meta.json fixes.
  const bool user_rule = given(vm, option_key(kOptReserve)) || given(vm, option_key(kOptParams));
  const bool user_terms = user_device || user_rule || given(vm, option_key(kOptGpuMemoryUtilization));
  // The pool's size, when meta.json fixes it: it needs no device (one named times the steps).
  if (!user_terms) {
    if (const FixedPool fixed = run_fixed_pool(vm, run, usage); fixed.bytes > 0) {
      const std::int64_t null_block = null_block_bytes(vm, resolve_model(vm, usage, ""));
      const Location from = field(fixed.field);
      defaults.set(kOptKvBudget, std::to_string(less_null_block(fixed.bytes, null_block, from)), from);
      return fixed.source + null_block_text(null_block);
    }
  }
  if (!user_device) {
    const std::string where = run.dir + "/peer_cluster_config.json";
    if (run.hardware.empty() && preset == nullptr) {
      if (!run.device_name.empty()) {
        throw NoPresetError(Location{meta, 0, "hardware.device_name"},
                         "\"" + run.device_name + "\" is not the product name of any kvsim device preset; give "
                         "--device, --device-memory or --kv-budget");
      }
      // Blame the file that should have named it: the peer's description when there is one.
      if (std::filesystem::exists(where)) {
        throw NoPresetError(Location{where, 0, "hardware"},
                         "names no GPU, nor does meta.json (hardware.device_name); give --device, "
                         "--device-memory or --kv-budget");
      }
      throw NoPresetError(Location{meta, 0, "hardware.device_name"},
                       "absent, and there is no peer_cluster_config.json beside it: the run does not name its "
                       "GPU; give --device, --device-memory or --kv-budget");
    }
    if (preset == nullptr) {
      throw NoPresetError(Location{where, 0, "hardware"}, "\"" + run.hardware +
                                                           "\" has no kvsim device preset in validate's table; give "
                                                           "--device, --device-memory or --kv-budget");
    }
    if (!known) {
      throw NoPresetError(Location{where, 0, "hardware"},
                       "\"" + run.hardware + "\" is the device preset " + preset +
                           ", which this kvsim does not have yet; give --device-memory (its memory, e.g. 96GB "
                           "for an RTX PRO 6000) or --kv-budget");
    }
    defaults.set(kOptDevice, preset, device_from);
    // The device's total as CUDA reported it in the run, rather than the preset's.
    if (run.device_total_bytes > 0) {
      defaults.set(kOptDeviceMemory, std::to_string(run.device_total_bytes), field("hardware.device_total_memory_bytes"));
    }
  }
  // Where the utilisation comes from, for an error: the user's option, else meta.json's (or
  // vLLM's default where meta.json has none).
  const Location utilisation_from = given(vm, option_key(kOptGpuMemoryUtilization))
                                        ? Location{"", 0, kOptGpuMemoryUtilization}
                                        : setting("gpu_memory_utilization");
  if (run.gpu_memory_utilization > 0) {
    // Fixed-point, as the option takes it (1e-5 is "0.000010000"), to the nearest part per billion.
    defaults.set(kOptGpuMemoryUtilization, fmt::format("{:.9f}", run.gpu_memory_utilization), utilisation_from);
  }
  // A term of replay's own rule given: that rule, as given.
  if (user_rule) return "";
  const bool recorded_total = run.device_total_bytes > 0 && !user_device;
  StartupPool pool = vllm_startup_pool(vm, run, utilisation_from, usage);
  if (recorded_total) pool.source += "; the device total as meta.json hardware.device_total_memory_bytes records it";
  // The pool replaces the terms it was computed from; the device (if any) still times the steps.
  defaults.erase(kOptDeviceMemory);
  defaults.erase(kOptGpuMemoryUtilization);
  defaults.set(kOptKvBudget, std::to_string(pool.bytes), utilisation_from);
  defaults.startup_pool = true;
  return pool.source;
}

}  // namespace

// max_model_len -1 (vLLM's "auto") with no resolved length: the longest that vLLM's
// _auto_fit_max_model_len (vllm/v1/core/kv_cache_utils.py) finds, by a binary search for
// the largest length whose one sequence fits the KV memory, capped at the model's own. For a
// full-attention model a sequence of L tokens takes ceil(L / block) blocks, so that is
// every block of the pool (vLLM's null block included: it counts the memory, not the free
// blocks) times the block size. Models with sliding windows take fewer blocks at length and
// are not fitted here: their length is asked for.
void fit_auto_max_model_len(RunDefaults& defaults, const MeasuredRun& run, const std::string& usage) {
  po::variables_map& vm = defaults.vm();
  const bool defaulted = defaults.from(kOptMaxModelLen) != nullptr;  // by validate's table of models
  if (!run.max_model_len_auto || (given(vm, option_key(kOptMaxModelLen)) && !defaulted)) return;
  const Location from{run.dir + "/meta.json", 0, "engine_kwargs.max_model_len"};
  const ModelChoice choice = resolve_model(vm, usage, "");
  const KvLayout layout = choice.layout();
  const auto budget = option_text(vm, option_key(kOptKvBudget));
  if (layout.any_window() || !budget) {
    throw InputError(from, std::string("-1 (vLLM fits the length to its KV pool) is fitted here only for a "
                                       "full-attention model whose pool validate sizes; give ") + kOptMaxModelLen);
  }
  const std::int64_t block_bytes = run_block_bytes(vm, run, usage);
  const std::int64_t pool = parse_byte_size(*budget, kOptKvBudget) + null_block_bytes(vm, choice);
  const std::int64_t blocks = pool / block_bytes;
  const std::int64_t own =
      defaulted ? token_count(*option_text(vm, option_key(kOptMaxModelLen)), kOptMaxModelLen) : layout.max_model_len;
  if (blocks < 1) throw InputError(from, "-1, but the KV pool holds no block: no length fits");
  const std::int64_t fitted = blocks > own / run.block_size ? own : blocks * run.block_size;
  defaults.erase(kOptMaxModelLen);
  defaults.set(kOptMaxModelLen, std::to_string(fitted), from);
}

// The run's settings as the replay's defaults, max_model_len -1 fitted to the pool they give;
// returns where the pool comes from. Errors about a value meta.json gave name its field.
std::string settle_run_settings(RunDefaults& defaults, const MeasuredRun& run, const std::string& usage) {
  return blaming_meta(defaults, [&] {
    std::string source = fill_in_run_settings(defaults, run, usage);
    fit_auto_max_model_len(defaults, run, usage);
    return source;
  });
}

std::string apply_run_settings(po::variables_map& vm, const MeasuredRun& run, const std::string& usage) {
  RunDefaults defaults(vm);
  return settle_run_settings(defaults, run, usage);
}

RunReplay replay_run(po::variables_map vm, const MeasuredRun& run, const std::string& usage,
                     const std::function<void(const TimelineRow&)>& timeline) {
  RunReplay out;
  // Asked before the run's settings fill in the rest: they set its GPU as the timing device.
  const bool given_timing_device = given(vm, option_key(kOptTimingDevice));
  if (run.vllm_version.empty() && !given(vm, option_key(kOptVllmVersion))) {
    out.warnings.push_back(fmt::format("{}/meta.json records no vllm_version: replayed with kvsim replay's defaults (a "
                                       "1% watermark, no asynchronous scheduling nor CUDA graphs), not a vLLM "
                                       "release's; give {} for the version's",
                                       run.dir, kOptVllmVersion));
  }
  if (auto mismatch = workload_digest_mismatch(run)) out.warnings.push_back(std::move(*mismatch));
  if (!run.started_at_recorded && !run.ticks.empty()) {
    out.warnings.push_back(fmt::format("{}/meta.json records no started_at: timeseries.csv's ticks are placed from the "
                                       "first request's arrival, which may come after the run began",
                                       run.dir));
  }
  if (run.schema_version > 1 || run.schema_version < 0) {
    out.warnings.push_back(fmt::format("{}/meta.json's schema_version is {}, and kvsim reads version 1: what another "
                                       "version added or changed is not read",
                                       run.dir, run.schema_version < 0 ? std::string("not a version number")
                                                                       : std::to_string(run.schema_version)));
  }
  // Every per-tick figure takes the rows as tick_seconds apart. Rows may be missing (a gap of
  // several ticks), never closer: the closest two rows are one tick apart, to the
  // millisecond the recorder rounds t to.
  double closest = 0;
  for (std::size_t i = 1; i < run.ticks.size(); ++i) {
    const double gap = run.ticks[i].t_s - run.ticks[i - 1].t_s;
    if (i == 1 || gap < closest) closest = gap;
  }
  if (run.ticks.size() >= 2 && std::abs(closest - run.tick_s) > 0.01 * run.tick_s + 2e-3) {
    out.warnings.push_back(fmt::format("{}/timeseries.csv: its closest rows are {:.6g} s apart, but meta.json's "
                                       "tick_seconds is {:.6g} s: the per-tick counts, MAE and throughputs are read "
                                       "as {:.6g} s apart",
                                       run.dir, closest, run.tick_s, run.tick_s));
  }
  RunDefaults defaults(vm);
  out.budget_source = settle_run_settings(defaults, run, usage);
  out.startup_pool = defaults.startup_pool;
  out.plan = blaming_meta(defaults, [&] { return plan_replay(vm, PlanScope::trace); });
  ReplayPlan& plan = out.plan;
  refuse_idle_timing_device(given_timing_device, plan);
  // A GPU the run names but no preset matches, whose pool meta.json recorded: replayed, but
  // timed on another device unless the user chose one.
  const char* known = run_device(run);
  if ((known == nullptr || !has_device_preset(known)) && !given_timing_device && !given(vm, option_key(kOptDevice)) &&
      !given(vm, option_key(kOptCost))) {
    const std::string name = run.device_name.empty() ? run.hardware : run.device_name;
    out.warnings.push_back(fmt::format("{}: the steps are timed on {} (give --timing-device, or --cost from kvsim "
                                       "calibrate)",
                                       name.empty() ? std::string("the run names no GPU")
                                                    : "the run's GPU, \"" + name + "\", is no kvsim device preset",
                                       kDefaultTimingDevice));
  }
  if (plan.allocators.size() != 1) throw UsageError("a measured run is replayed with one allocator\nUsage: " + usage);
  ReplayOptions options_run = plan.options;
  options_run.cap_at_max_model_len = true;  // the run's engine served them, to its length
  options_run.per_request = [&](const RequestRecord& r) { out.records.push_back(r); };
  if (timeline) options_run.timeline = timeline;
  TraceOptions trace_options = plan.trace;
  if (plan.allocators[0]->prefix_block_tokens() > 0) {
    trace_options.hash_block_tokens = plan.allocators[0]->prefix_block_tokens();
  }
  auto trace = open_trace(plan.trace_path, trace_options);
  // The engine checks its settings as it starts (--max-batched-tokens against
  // --no-chunked-prefill): one meta.json gave is blamed on meta.json.
  blaming_meta(defaults, [&] {
    if (plan.replicas > 1) {
      std::vector<Allocator*> allocators;
      for (auto& a : plan.replica_allocators.at(0)) allocators.push_back(a.get());
      ReplicaRun dp = replay_replicas(*trace, allocators, options_run);
      out.report = std::move(dp.total);
      out.replica_of = std::move(dp.replica_of);
    } else {
      out.report = replay(*trace, *plan.allocators[0], options_run);
    }
  });
  // One record per request of the trace, from whichever engine served it.
  in_trace_order(out.records);
  for (std::size_t k = 0; k < out.records.size(); ++k) {
    if (out.records[k].ordinal != static_cast<std::int64_t>(k) + 1) {
      throw InternalError(fmt::format("replay of {}: request #{} of the trace has no per-request record, or two",
                                      run.dir, k + 1));
    }
  }
  if (!out.replica_of.empty() && out.replica_of.size() != out.records.size()) {
    throw InternalError(fmt::format("replay of {}: {} requests routed, {} recorded", run.dir, out.replica_of.size(),
                                    out.records.size()));
  }
  if (out.records.size() != run.requests.size()) {
    throw InputError(Location{plan.trace_path, 0, ""},
                     fmt::format("the workload has {} requests but {}/requests.jsonl has {}: not this run's workload",
                                 out.records.size(), run.dir, run.requests.size()));
  }
  double least_offset = std::numeric_limits<double>::infinity(), most_offset = -least_offset;
  for (std::size_t k = 0; k < out.records.size(); ++k) {
    const MeasuredRequest& m = run.requests[k];
    if (!m.timed) continue;
    // Request by request, the workload's prompts and outputs are the run's: another run's
    // workload of the same size would otherwise be scored without a word, and a request
    // replayed with another output length would be compared by its latency as if it were
    // the same. The output replayed is the workload's, cut at max_model_len as vLLM's engine
    // stops a request there (cap_at_max_model_len); the run may record such a request with
    // the output it asked for or the one it got.
    const auto differ = [&](const char* field, std::int64_t recorded, std::int64_t replayed, const char* what) {
      throw InputError(Location{run.dir + "/requests.jsonl", m.line, field},
                       fmt::format("{} {}, but request {} of the workload {} has {}: not this run's workload (give "
                                   "the one meta.json's dataset_path names)",
                                   recorded, what, k + 1, plan.trace_path, replayed));
    };
    if (out.records[k].prompt_tokens != m.input_tokens) {
      differ("input_toks", m.input_tokens, out.records[k].prompt_tokens, "prompt tokens");
    }
    const std::int64_t max_len = plan.options.layout.max_model_len;
    const bool cut = max_len > 0 && out.records[k].prompt_tokens + out.records[k].output_tokens == max_len &&
                     m.recorded_output_tokens > out.records[k].output_tokens;
    if (out.records[k].output_tokens != m.recorded_output_tokens && !cut) {
      differ("output_toks", m.recorded_output_tokens, out.records[k].output_tokens, "output tokens");
    }
    const double offset = m.arrival_time_s - static_cast<double>(out.records[k].arrival_ns) / 1e9;
    out.wall_offset_s += offset;
    least_offset = std::min(least_offset, offset);
    most_offset = std::max(most_offset, offset);
  }
  out.wall_offset_s /= static_cast<double>(timed_requests(run));
  // The run's client sends each request at its workload time, so arrival_time less the
  // workload's arrival is one clock offset plus the sending's jitter (16-20 ms over the three
  // shared runs). Prompt and output lengths are checked above; arrivals that drift by more
  // than a second say the workload's times are not the run's (another rate, say), which no
  // digest may have caught.
  if (most_offset - least_offset > kArrivalSpreadS) {
    out.warnings.push_back(fmt::format(
        "{}/requests.jsonl: its arrival times follow the workload's {} only to within {:.3f} s (the spread of "
        "arrival_time less the workload's arrival): the workload may not be this run's, or its client fell behind",
        run.dir, plan.trace_path, most_offset - least_offset));
  }
  return out;
}

}  // namespace kvsim::cli
