// Reading a measured run directory (meta.json, requests.jsonl, timeseries.csv) and the
// figures it is scored by. See include/kvsim/measured_run.h.
#include "kvsim/measured_run.h"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "civil_time.h"
#include "sha256.h"
#include "json_keys.h"
#include "kvsim/error.h"
#include "kvsim/option_names.h"
#include "kvsim/replicas.h"
#include "kvsim/request.h"
#include "kvsim/trace.h"

namespace kvsim {
namespace {

// The longest run kvsim reads, in seconds (10^7, about 116 days): far beyond any benchmark,
// and its times in nanoseconds stay far inside 64 bits.
constexpr double kLongestRunS = 1e7;

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string join(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

// Whether `p` exists. A path the system cannot look up (a name too long, a folder it may not
// read) is an InputError naming it, where fs::exists would throw filesystem_error.
bool path_exists(const fs::path& p) {
  std::error_code ec;
  const bool found = fs::exists(p, ec);
  if (ec) throw InputError(Location{p.string(), 0, ""}, "cannot look it up: " + ec.message());
  return found;
}

std::ifstream open_file(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw InputError(Location{path, 0, ""}, "is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(Location{path, 0, ""}, "cannot open the file (is this a measured run directory?)");
  return in;
}

json parse_json(const std::string& text, const std::string& path, std::int64_t line) {
  json out;
  try {
    out = detail::parse_json_keys_once(text, Location{path, line, ""});
  } catch (const json::exception& e) {  // a syntax error, or a number beyond a double (1e400)
    throw InputError(Location{path, line, ""}, std::string("not valid JSON: ") + e.what());
  }
  // After the parse, which stops at a NUL byte: an error before the byte is reported first.
  refuse_nul_bytes(text, Location{path, line, ""});
  return out;
}

// Whether `obj` gives `key` a value (absent and null leave the engine's default).
bool gives(const json& obj, const char* key) { return obj.is_object() && obj.contains(key) && !obj[key].is_null(); }

// A JSON object and where it is: its file, its line there (0 for a whole-file document) and
// its dotted path in the document ("" at the top, "engine_kwargs", "resolved_config.model_config"),
// so that an error names a field as "engine_kwargs.block_size" rather than "block_size".
struct Obj {
  const json& value;
  const std::string& file;
  std::int64_t line = 0;
  std::string path;

  std::string field(const std::string& key) const { return path.empty() ? key : path + "." + key; }
  Location at(const std::string& key) const { return Location{file, line, field(key)}; }
  bool gives(const char* key) const { return kvsim::gives(value, key); }
  // The member `key`, where it is; an InputError naming it when it is missing.
  Obj child(const char* key) const;
};

// A member of `obj` of the wanted kind, or an InputError naming the file, line and field.
const json& member(const Obj& obj, const char* key) {
  if (!obj.value.is_object()) throw InputError(Location{obj.file, obj.line, obj.path}, "expected a JSON object");
  const auto it = obj.value.find(key);
  if (it == obj.value.end()) throw InputError(obj.at(key), "missing");
  return *it;
}

Obj Obj::child(const char* key) const { return Obj{member(*this, key), file, line, field(key)}; }

std::int64_t integer_member(const Obj& obj, const char* key, std::int64_t min_value,
                            std::int64_t max_value = std::numeric_limits<std::int64_t>::max()) {
  const json& v = member(obj, key);
  // An unsigned beyond 2^63 - 1 would read back negative.
  const bool fits = v.is_number_integer() &&
                    !(v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(max_value));
  if (!fits || v.get<std::int64_t>() < min_value || v.get<std::int64_t>() > max_value) {
    throw InputError(obj.at(key), "expected an integer from " + std::to_string(min_value) + " to " +
                                      std::to_string(max_value) + ", got " + v.dump());
  }
  return v.get<std::int64_t>();
}

double number_member(const Obj& obj, const char* key) {
  const json& v = member(obj, key);
  if (!v.is_number() || !std::isfinite(v.get<double>())) throw InputError(obj.at(key), "expected a number, got " + v.dump());
  return v.get<double>();
}

std::string string_member(const Obj& obj, const char* key) {
  const json& v = member(obj, key);
  if (!v.is_string()) throw InputError(obj.at(key), "expected a string, got " + v.dump());
  return v.get<std::string>();
}

bool bool_member(const Obj& obj, const char* key) {
  const json& v = member(obj, key);
  if (!v.is_boolean()) throw InputError(obj.at(key), "expected true or false, got " + v.dump());
  return v.get<bool>();
}

// obj's gpu_memory_utilization, a fraction in (0, 1] of at least 1e-9 (kvsim counts it in
// parts per billion).
double utilisation_member(const Obj& obj) {
  const char* const key = "gpu_memory_utilization";
  const double u = number_member(obj, key);
  if (!(u > 0 && u <= 1)) throw InputError(obj.at(key), "expected a fraction in (0, 1], got " + obj.value[key].dump());
  if (u < 1e-9) {
    throw InputError(obj.at(key), "expected a fraction of at least 1e-9 (kvsim counts it in parts per billion), got " +
                                      obj.value[key].dump());
  }
  return u;
}

// engine_kwargs beyond the ones read_meta() requires. Every key is either used, known to
// change neither the schedule nor the KV budget, or listed in run.unmodelled_settings.
void read_engine_settings(MeasuredRun& run, const Obj& engine) {
  const json& kw = engine.value;
  // The settings a later object may give instead (read_resolved_cache, read_resolved_scheduler)
  // note where they were read.
  if (gives(kw, "block_size")) {
    run.block_size = integer_member(engine, "block_size", 1);
    run.read_from["block_size"] = engine.field("block_size");
  }
  if (gives(kw, "enable_prefix_caching")) {
    run.prefix_caching = bool_member(engine, "enable_prefix_caching");
    run.read_from["enable_prefix_caching"] = engine.field("enable_prefix_caching");
  }
  if (gives(kw, "gpu_memory_utilization")) {
    run.gpu_memory_utilization = utilisation_member(engine);
    run.read_from["gpu_memory_utilization"] = engine.field("gpu_memory_utilization");
  }
  if (gives(kw, "dtype")) run.dtype = string_member(engine, "dtype");
  if (gives(kw, "kv_cache_dtype")) run.kv_cache_dtype = string_member(engine, "kv_cache_dtype");
  if (gives(kw, "num_gpu_blocks_override")) {
    run.num_gpu_blocks_override = integer_member(engine, "num_gpu_blocks_override", 1);
  }
  if (gives(kw, "kv_cache_memory_bytes")) {
    run.kv_cache_memory_bytes = integer_member(engine, "kv_cache_memory_bytes", 1);
    run.read_from["kv_cache_memory_bytes"] = engine.field("kv_cache_memory_bytes");
  }
  // Switches resolved_config may give instead (read_resolved_config): noted as read here.
  const auto flag = [&](auto& out, const char* key) {
    if (!gives(kw, key)) return;
    out = bool_member(engine, key);
    run.read_from[key] = engine.field(key);
  };
  flag(run.enforce_eager, "enforce_eager");
  flag(run.async_scheduling, "async_scheduling");
  flag(run.chunked_prefill, "enable_chunked_prefill");
  flag(run.reserve_full_isl, "scheduler_reserve_full_isl");
  flag(run.disable_hybrid_kv_cache_manager, "disable_hybrid_kv_cache_manager");
  // Read for the allocator's choice, and still named as not modelled: the length's cap at the
  // window is what vLLM resolved (max_model_len), not worked out here.
  if (gives(kw, "disable_sliding_window")) run.disable_sliding_window = bool_member(engine, "disable_sliding_window");
  // Read above or by read_meta(), or known to change neither the schedule nor the KV
  // budget (where the weights come from, logging, the sampling seed, the served name).
  static const char* const kKnown[] = {
      "model", "tensor_parallel_size", "data_parallel_size", "enable_expert_parallel", "max_num_seqs",
      "max_num_batched_tokens", "max_model_len", "block_size", "enable_prefix_caching", "enable_chunked_prefill",
      "gpu_memory_utilization", "dtype", "kv_cache_dtype", "num_gpu_blocks_override", "kv_cache_memory_bytes",
      "enforce_eager", "async_scheduling", "scheduler_reserve_full_isl", "disable_hybrid_kv_cache_manager", "seed", "tokenizer", "tokenizer_mode", "revision",
      "tokenizer_revision", "code_revision", "trust_remote_code", "download_dir", "load_format",
      "served_model_name", "disable_log_stats", "disable_log_requests", "enable_log_requests", "skip_tokenizer_init"};
  for (auto it = kw.begin(); it != kw.end(); ++it) {
    const std::string& key = it.key();
    const json& value = it.value();
    if (value.is_null()) continue;
    if (std::find_if(std::begin(kKnown), std::end(kKnown), [&](const char* k) { return key == k; }) != std::end(kKnown)) {
      continue;
    }
    run.unmodelled_settings.push_back(key + "=" + value.dump());
  }
}

// meta.json's "kv_cache": what vLLM resolved at start-up (cache_config after boot). Where
// engine_kwargs is silent it also gives the settings vLLM ran with, and its block size is the
// one vLLM used. Absent, null or {} (the recorder could not read the engine): nothing.
void read_resolved_cache(MeasuredRun& run, const Obj& meta, const json& kw) {
  if (!meta.gives("kv_cache")) return;
  const Obj cache = meta.child("kv_cache");
  const json& kv = cache.value;
  if (!kv.is_object()) throw InputError(meta.at("kv_cache"), "expected a JSON object, got " + kv.dump());
  if (gives(kv, "num_gpu_blocks")) {
    // vLLM's pool needs its null block and at least one block to hand out.
    run.resolved_gpu_blocks = integer_member(cache, "num_gpu_blocks", 2);
  }
  // The block size vLLM ran with wins over the one asked for: vLLM may change it (an attention
  // backend's own, a hybrid model's common page size).
  if (gives(kv, "block_size")) {
    run.block_size = integer_member(cache, "block_size", 1);
    run.read_from["block_size"] = cache.field("block_size");
  }
  if (gives(kv, "enable_prefix_caching") && !gives(kw, "enable_prefix_caching")) {
    run.prefix_caching = bool_member(cache, "enable_prefix_caching");
    run.read_from["enable_prefix_caching"] = cache.field("enable_prefix_caching");
  }
  if (gives(kv, "gpu_memory_utilization") && !gives(kw, "gpu_memory_utilization")) {
    run.gpu_memory_utilization = utilisation_member(cache);
    run.read_from["gpu_memory_utilization"] = cache.field("gpu_memory_utilization");
  }
  if (gives(kv, "kv_cache_memory_bytes") && !gives(kw, "kv_cache_memory_bytes")) {
    run.kv_cache_memory_bytes = integer_member(cache, "kv_cache_memory_bytes", 1);
    run.read_from["kv_cache_memory_bytes"] = cache.field("kv_cache_memory_bytes");
  }
}

// meta.json's resolved_config.<section> (newer runs: the whole VllmConfig after start-up, one
// object per sub-config), or nothing when it has none. A section the recorder could not write
// as JSON is its repr, a string ("<ModelConfig>"): that gives nothing either.
std::optional<Obj> resolved_section(const Obj& meta, const char* section) {
  if (!meta.gives("resolved_config")) return std::nullopt;
  const Obj config = meta.child("resolved_config");
  if (!config.gives(section) || !config.value[section].is_object()) return std::nullopt;
  return config.child(section);
}

// What vLLM resolved, where engine_kwargs is silent (absent or null): the scheduler's
// settings kvsim models, the parallel sizes, the model's length and eager mode. A recorder
// that writes only some engine arguments (LLMServingSim's writes ten) leaves the rest to
// vLLM's defaults, which resolved_config records as they were applied.
void read_resolved_config(MeasuredRun& run, const Obj& meta, const Obj& engine) {
  const json& kw = engine.value;
  // An integer setting: engine_kwargs' if given, else the resolved one, else (required) an
  // error naming both places.
  const auto integer = [&](std::int64_t& out, const char* key, const std::optional<Obj>& section,
                           const char* section_name, std::int64_t min_value, bool required) {
    if (gives(kw, key)) {
      out = integer_member(engine, key, min_value);
      return;
    }
    if (section && section->gives(key)) {
      out = integer_member(*section, key, min_value);
      run.read_from[key] = section->field(key);
      return;
    }
    if (required) {
      throw InputError(engine.at(key), std::string("missing or null, and no resolved_config.") + section_name + "." +
                                           key + " gives what vLLM ran with");
    }
  };
  const std::optional<Obj> scheduler = resolved_section(meta, "scheduler_config");
  const std::optional<Obj> parallel = resolved_section(meta, "parallel_config");
  const std::optional<Obj> model = resolved_section(meta, "model_config");
  integer(run.tensor_parallel, "tensor_parallel_size", parallel, "parallel_config", 1, true);
  integer(run.data_parallel, "data_parallel_size", parallel, "parallel_config", 1, true);
  integer(run.max_num_seqs, "max_num_seqs", scheduler, "scheduler_config", 1, true);
  integer(run.max_num_batched_tokens, "max_num_batched_tokens", scheduler, "scheduler_config", 1, true);
  // max_model_len: a length, null (the model's own) or -1 (vLLM's "auto": fit to the KV pool).
  // What vLLM resolved wins over null and -1.
  if (gives(kw, "max_model_len")) {
    const json& v = kw["max_model_len"];
    if (v.is_number_integer() && v.get<std::int64_t>() == -1) run.max_model_len_auto = true;
    else run.max_model_len = integer_member(engine, "max_model_len", 1, kMaxRequestTokens);
  }
  if (run.max_model_len == 0 && model && model->gives("max_model_len")) {
    run.max_model_len = integer_member(*model, "max_model_len", 1, kMaxRequestTokens);
    run.read_from["max_model_len"] = model->field("max_model_len");
    run.max_model_len_auto = false;
  }
  const auto flag = [&](auto& out, const char* key, const std::optional<Obj>& section) {
    if (!section || run.read_from.count(key) != 0 || !section->gives(key)) return;
    out = bool_member(*section, key);
    run.read_from[key] = section->field(key);
  };
  flag(run.enforce_eager, "enforce_eager", model);
  flag(run.async_scheduling, "async_scheduling", scheduler);
  flag(run.chunked_prefill, "enable_chunked_prefill", scheduler);
  flag(run.reserve_full_isl, "scheduler_reserve_full_isl", scheduler);
  flag(run.disable_hybrid_kv_cache_manager, "disable_hybrid_kv_cache_manager", scheduler);
  // vLLM turns the hybrid manager off itself when KV events or a KV connector are configured
  // and the flag was not given (VllmConfig.__post_init__, vllm/config/vllm.py); a recorder
  // that writes no resolved_config leaves only engine_kwargs to tell.
  if (!run.disable_hybrid_kv_cache_manager && (gives(kw, "kv_events_config") || gives(kw, "kv_transfer_config"))) {
    run.disable_hybrid_kv_cache_manager = true;
  }
  if (!gives(kw, "disable_sliding_window") && model && model->gives("disable_sliding_window")) {
    run.disable_sliding_window = bool_member(*model, "disable_sliding_window");
  }
}

// The settings in resolved_config that change the schedule, the KV pool or the steps' cost
// when they leave vLLM's defaults, and that kvsim does not model: named in
// run.unmodelled_settings as "resolved_config.<section>.<key>=value", unless engine_kwargs
// gives the same setting (under `engine_key`, the engine argument's name), which is named
// already. At the default value (or null), nothing.
void note_unmodelled_resolved(MeasuredRun& run, const Obj& meta, const json& kw) {
  struct Setting {
    const char* section;        // "" for a top-level object of resolved_config
    const char* key;
    const char* engine_key;     // the engine argument that sets it
    const char* default_value;  // the value as JSON, which leaves the schedule as kvsim models it
  };
  static const Setting kSettings[] = {
      // vllm/config/scheduler.py: the queue's order, the prefills' cadence and share of a step,
      // admission's reserve.
      {"scheduler_config", "policy", "scheduling_policy", R"("fcfs")"},
      {"scheduler_config", "prefill_schedule_interval", "prefill_schedule_interval", "1"},
      {"scheduler_config", "long_prefill_token_threshold", "long_prefill_token_threshold", "0"},
      {"scheduler_config", "max_num_partial_prefills", "max_num_partial_prefills", "1"},
      {"scheduler_config", "watermark", "watermark", "0"},
      // vllm/config/cache.py: KV blocks offloaded to the host.
      {"cache_config", "kv_offloading_size", "kv_offloading_size", "null"},
      // vllm/config/model.py: the weights' format (the steps' cost, and the pool's size when
      // kv_cache does not record it); sliding windows turned off (and max_model_len capped
      // to the window: what vLLM resolved gives the length).
      {"model_config", "quantization", "quantization", "null"},
      {"model_config", "disable_sliding_window", "disable_sliding_window", "false"},
      // vllm/config/parallel.py: the other ways of splitting a model kvsim does not model.
      {"parallel_config", "pipeline_parallel_size", "pipeline_parallel_size", "1"},
      {"parallel_config", "decode_context_parallel_size", "decode_context_parallel_size", "1"},
      {"parallel_config", "prefill_context_parallel_size", "prefill_context_parallel_size", "1"},
      {"parallel_config", "enable_dbo", "enable_dbo", "false"},
      {"parallel_config", "enable_eplb", "enable_eplb", "false"},
      {"parallel_config", "disable_custom_all_reduce", "disable_custom_all_reduce", "false"},
      // A draft model or n-gram speculation proposes tokens kvsim's steps do not hold.
      {"", "speculative_config", "speculative_config", "null"},
  };
  if (!meta.gives("resolved_config") || !meta.value["resolved_config"].is_object()) return;
  const Obj config = meta.child("resolved_config");
  for (const Setting& s : kSettings) {
    const std::optional<Obj> section = *s.section == '\0' ? std::optional<Obj>(config) : resolved_section(meta, s.section);
    if (!section || !section->gives(s.key) || gives(kw, s.engine_key)) continue;
    const json& value = section->value[s.key];
    if (value == json::parse(s.default_value)) continue;  // numbers compare by value: 0 == 0.0
    run.unmodelled_settings.push_back(section->field(s.key) + "=" + value.dump());
  }
}

// meta.json's "hardware" (newer runs): the GPU as CUDA reported it. Absent, null or without
// the fields (the recorder found no GPU): nothing.
void read_recorded_device(MeasuredRun& run, const Obj& meta) {
  if (!meta.gives("hardware")) return;
  const Obj hw = meta.child("hardware");
  if (!hw.value.is_object()) throw InputError(meta.at("hardware"), "expected a JSON object, got " + hw.value.dump());
  if (hw.gives("device_name")) run.device_name = string_member(hw, "device_name");
  if (hw.gives("device_total_memory_bytes")) run.device_total_bytes = integer_member(hw, "device_total_memory_bytes", 1);
}

// The keys of JSON object `o` that hold a value (not null) and are not among `known`, in the
// object's order: what a recorder wrote that kvsim reads nowhere.
std::vector<std::string> keys_not_in(const json& o, std::span<const char* const> known) {
  std::vector<std::string> out;
  if (!o.is_object()) return out;
  for (auto it = o.begin(); it != o.end(); ++it) {
    if (!it.value().is_null() && std::ranges::find(known, std::string_view(it.key())) == known.end()) out.push_back(it.key());
  }
  return out;
}

void read_meta(MeasuredRun& run, bool find_workload) {
  const std::string path = join(run.dir, "meta.json");
  std::ifstream in = open_file(path);
  std::stringstream text;
  text << in.rdbuf();
  const json parsed = parse_json(text.str(), path, 0);
  const Obj meta{parsed, path, 0, ""};
  run.model = string_member(meta, "model");
  // Absent or null: not recorded (validate then says which defaults it replayed with).
  if (meta.gives("vllm_version")) run.vllm_version = string_member(meta, "vllm_version");
  const Obj engine = meta.child("engine_kwargs");
  const json& kw = engine.value;
  if (!kw.is_object()) throw InputError(meta.at("engine_kwargs"), "expected a JSON object, got " + kw.dump());
  read_engine_settings(run, engine);
  read_resolved_cache(run, meta, kw);
  read_recorded_device(run, meta);
  read_resolved_config(run, meta, engine);
  note_unmodelled_resolved(run, meta, kw);
  if (run.data_parallel > kMaxReplicas) {
    const auto from = run.read_from.find("data_parallel_size");
    throw InputError(from != run.read_from.end() ? Location{path, 0, from->second} : engine.at("data_parallel_size"),
                     std::to_string(run.data_parallel) + " replicas; kvsim simulates at most " +
                         std::to_string(kMaxReplicas) + " (each is a whole engine)");
  }
  // A null is vLLM's default (off), as for every engine setting.
  if (gives(kw, "enable_expert_parallel")) run.expert_parallel = bool_member(engine, "enable_expert_parallel");
  // Optional fields: absent or null alike.
  if (meta.gives("tick_seconds")) {
    run.tick_s = number_member(meta, "tick_seconds");
    if (run.tick_s <= 0 || run.tick_s > kLongestRunS) {
      throw InputError(meta.at("tick_seconds"), fmt::format("expected a positive number of seconds up to {:.0f}", kLongestRunS));
    }
  }
  for (const auto& [key, field] : {std::pair{"started_at", &MeasuredRun::started_at_s},
                                    std::pair{"finished_at", &MeasuredRun::finished_at_s}}) {
    if (!meta.gives(key)) continue;
    std::int64_t ns = 0;
    if (!parsed[key].is_string() || !detail::parse_datetime_ns(parsed[key].get<std::string>(), ns)) {
      throw InputError(Location{path, 0, key}, "expected a UTC datetime such as \"2026-04-25T18:47:18.27Z\"");
    }
    run.*field = static_cast<double>(ns) / 1e9;
  }
  if (run.started_at_s != 0 && run.finished_at_s != 0 && run.finished_at_s < run.started_at_s) {
    throw InputError(Location{path, 0, "finished_at"}, "before started_at");
  }
  if (meta.gives("num_requests")) run.num_requests = integer_member(meta, "num_requests", 1);
  static const char* const kRecorded[] = {"schema_version", "model",        "vllm_version", "engine_kwargs",
                                          "dataset_path",   "dataset_hash", "num_requests", "started_at",
                                          "finished_at",    "tick_seconds", "kv_cache",     "resolved_config",
                                          "hardware"};
  run.unread_fields = keys_not_in(parsed, kRecorded);
  if (parsed.contains("dataset_path") && parsed["dataset_path"].is_string()) run.dataset_path = parsed["dataset_path"];
  if (meta.gives("dataset_hash")) run.dataset_hash = string_member(meta, "dataset_hash");
  // Checked but never refused: a run a later recorder wrote still replays, with a warning.
  if (meta.gives("schema_version")) {
    const json& v = parsed["schema_version"];
    run.schema_version = v.is_number_integer() && v.get<std::int64_t>() >= 1 ? v.get<std::int64_t>() : -1;
  }
  if (find_workload && run.workload.empty()) {
    string_member(meta, "dataset_path");  // present, a string
    run.workload = locate_workload(run);
    if (run.workload.empty()) throw InputError(Location{path, 0, "dataset_path"}, workload_not_found(run));
  }
}

// The places a workload named dataset_path is looked for: relative to the folder above the
// run (an absolute path as it is), else the same file name in the workloads folder beside the
// run (the layout the measured runs' README describes, whatever path the recorder was given),
// else beside the run. The folder above is the run's as written, made absolute and normal
// ("run/", "run/." and "." name the run itself, not a folder inside it), and, when the run is
// reached through a symbolic link, also the one above where it really is.
std::vector<fs::path> workload_places(const MeasuredRun& run) {
  std::error_code ec;
  fs::path dir = fs::absolute(run.dir, ec).lexically_normal();
  if (ec) dir = fs::path(run.dir).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();  // a trailing separator
  std::vector<fs::path> above{dir.parent_path()};
  const fs::path real = fs::canonical(dir, ec);
  if (!ec && real != dir) above.push_back(real.parent_path());
  const fs::path name = fs::path(run.dataset_path).filename();
  std::vector<fs::path> places;
  for (const fs::path& a : above) places.push_back(a / run.dataset_path);
  for (const fs::path& a : above) {
    if (std::find(places.begin(), places.end(), a / "workloads" / name) == places.end()) {
      places.push_back(a / "workloads" / name);
    }
  }
  places.push_back(dir / name);
  return places;
}

void read_hardware(MeasuredRun& run) {
  // Optional: the peer's cluster description names the GPU.
  const std::string path = join(run.dir, "peer_cluster_config.json");
  if (!path_exists(path)) return;
  std::ifstream in = open_file(path);
  std::stringstream text;
  text << in.rdbuf();
  const json config = parse_json(text.str(), path, 0);
  const json* nodes = config.contains("nodes") && config["nodes"].is_array() ? &config["nodes"] : nullptr;
  if (nodes == nullptr) return;
  for (std::size_t i = 0; i < nodes->size(); ++i) {
    const json& node = (*nodes)[i];
    if (!node.contains("instances") || !node["instances"].is_array()) continue;
    for (std::size_t j = 0; j < node["instances"].size(); ++j) {
      const json& inst = node["instances"][j];
      if (!inst.contains("hardware") || inst["hardware"].is_null()) continue;
      if (!inst["hardware"].is_string()) {
        throw InputError(Location{path, 0, fmt::format("nodes[{}].instances[{}].hardware", i, j)},
                         "expected the GPU's name, a string, got " + inst["hardware"].dump());
      }
      run.hardware = inst["hardware"].get<std::string>();
      return;
    }
  }
}

constexpr double kLargestStampS = 1e12;

void read_requests(MeasuredRun& run) {
  const std::string path = join(run.dir, "requests.jsonl");
  std::ifstream in = open_file(path);
  std::string text;
  static const char* const kRecorded[] = {"request_id",   "input_toks",     "output_toks",   "arrival_time",
                                          "queued_ts",    "scheduled_ts",   "first_token_ts", "last_token_ts"};
  std::set<std::string> unread;
  for (std::int64_t line = 1; std::getline(in, text); ++line) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json parsed = parse_json(text, path, line);
    const Obj r{parsed, path, line, ""};
    for (std::string& key : keys_not_in(parsed, kRecorded)) unread.insert(std::move(key));
    MeasuredRequest m;
    m.line = line;
    m.id = string_member(r, "request_id");
    m.input_tokens = integer_member(r, "input_toks", 0);
    m.output_tokens = m.recorded_output_tokens = integer_member(r, "output_toks", 1);
    // The recorder writes every timestamp null when vLLM returned no metrics for a request: it
    // was served (and is replayed) but is in no measured figure. Some null and some not is a
    // damaged record.
    const char* const stamps[] = {"arrival_time", "queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts"};
    const auto nulls = std::count_if(std::begin(stamps), std::end(stamps),
                                     [&](const char* key) { return member(r, key).is_null(); });
    if (nulls == std::ssize(stamps)) {
      m.timed = false;
      ++run.untimed_requests;
      run.requests.push_back(std::move(m));
      continue;
    }
    m.arrival_time_s = number_member(r, "arrival_time");
    m.queued_s = number_member(r, "queued_ts");
    m.scheduled_s = number_member(r, "scheduled_ts");
    m.first_token_s = number_member(r, "first_token_ts");
    m.last_token_s = number_member(r, "last_token_ts");
    // Seconds since the epoch or since boot: far below 10^12 (31,700 years). Beyond it a
    // stamp is damaged, and differences of such stamps overflow to infinite latencies.
    for (const char* key : stamps) {
      if (std::abs(parsed.at(key).get<double>()) > kLargestStampS) {
        throw InputError(Location{path, line, key}, "expected seconds of at most 1e12 either way, got " + parsed.at(key).dump());
      }
    }
    // Named by the first stamp that comes before the one ahead of it.
    const std::pair<const char*, double> order[] = {{"queued_ts", m.queued_s},
                                                    {"scheduled_ts", m.scheduled_s},
                                                    {"first_token_ts", m.first_token_s},
                                                    {"last_token_ts", m.last_token_s}};
    for (std::size_t k = 1; k < std::size(order); ++k) {
      if (!(order[k - 1].second <= order[k].second)) {
        throw InputError(Location{path, line, order[k].first},
                         fmt::format("{} comes before {} ({:.6g} s earlier): expected queued_ts <= scheduled_ts "
                                     "<= first_token_ts <= last_token_ts",
                                     parsed.at(order[k].first).dump(), order[k - 1].first,
                                     order[k - 1].second - order[k].second));
      }
    }
    run.requests.push_back(std::move(m));
  }
  if (run.requests.empty()) throw InputError(Location{path, 0, ""}, "no requests");
  run.unread_request_fields.assign(unread.begin(), unread.end());
  // The recorder writes a record per request it submitted, and their count as meta.json's
  // num_requests (LLMServingSim's bench/core/runner.py: num_requests=len(records)): fewer
  // lines is a file cut short, more a file another run's records were added to.
  const auto count = std::ssize(run.requests);
  if (run.num_requests > 0 && run.num_requests != count) {
    const std::string meta = join(run.dir, "meta.json");
    if (count < run.num_requests) {
      throw InputError(Location{path, run.requests.back().line, ""},
                       "the last of " + std::to_string(count) + " requests, but " + meta + " gives num_requests " +
                           std::to_string(run.num_requests) + ": the file is cut short");
    }
    throw InputError(Location{path, run.requests[static_cast<std::size_t>(run.num_requests)].line, ""},
                     "request " + std::to_string(run.num_requests + 1) + " of " + std::to_string(count) + ", but " +
                         meta + " gives num_requests " + std::to_string(run.num_requests));
  }
  // Each request once: the recorder numbers them (bench-0, bench-1, ...), and a run's records
  // are paired with the workload's rows by their order.
  std::unordered_map<std::string_view, std::int64_t> first_line;
  for (const MeasuredRequest& m : run.requests) {
    const auto [it, fresh] = first_line.emplace(m.id, m.line);
    if (!fresh) {
      throw InputError(Location{path, m.line, "request_id"},
                       "\"" + m.id + "\" is also the request_id on line " + std::to_string(it->second) +
                           ": each request is recorded once");
    }
  }
  if (run.untimed_requests == std::ssize(run.requests)) {
    throw InputError(Location{path, 0, "first_token_ts"}, "no request carries timestamps (all are null)");
  }
}

// No request outlasts the run that recorded it: a latency longer than started_at to
// finished_at (plus a second for the clocks' mapping and the recorder's own start and stop)
// is a damaged timestamp, which would otherwise pass into every figure.
std::string short_number(double v) {
  std::ostringstream out;
  out << std::setprecision(6) << v;
  return out.str();
}

// The wall clock (arrival_time) and vLLM's monotonic one (queued_ts) differ by one offset,
// give or take the milliseconds between a request's arrival and its intake. A request whose
// difference is a minute away from the median's is a damaged record: the offset, a mean over
// the requests, would move every tick of the comparison.
constexpr double kClockSkewLimitS = 60.0;

void check_clock_offsets(const MeasuredRun& run) {
  std::vector<double> offsets;
  for (const MeasuredRequest& r : run.requests) {
    if (r.timed) offsets.push_back(r.arrival_time_s - r.queued_s);
  }
  if (offsets.empty()) return;
  auto middle = offsets.begin() + static_cast<std::ptrdiff_t>(offsets.size() / 2);
  std::nth_element(offsets.begin(), middle, offsets.end());
  const double median = *middle;
  for (const MeasuredRequest& r : run.requests) {
    if (r.timed && std::abs(r.arrival_time_s - r.queued_s - median) > kClockSkewLimitS) {
      throw InputError(Location{join(run.dir, "requests.jsonl"), r.line, "arrival_time"},
                       fmt::format("arrival_time - queued_ts is {:.3f} s, {:.3f} s from the other requests' "
                                   "median of {:.3f} s: the two clocks of one run differ by one offset",
                                   r.arrival_time_s - r.queued_s, r.arrival_time_s - r.queued_s - median, median));
    }
  }
}

void check_within_run(const MeasuredRun& run) {
  check_clock_offsets(run);
  if (run.started_at_s == 0 || run.finished_at_s == 0) return;
  const double longest = run.finished_at_s - run.started_at_s + 1.0;
  const std::string path = join(run.dir, "requests.jsonl");
  for (const MeasuredRequest& r : run.requests) {
    if (!r.timed) continue;
    if (r.last_token_s - r.queued_s > longest) {
      throw InputError(Location{path, r.line, "last_token_ts"},
                       "the request would last " + short_number(r.last_token_s - r.queued_s) +
                           " s, longer than the run (meta.json started_at to finished_at, " +
                           short_number(longest - 1.0) + " s)");
    }
    // Within the second the checks above allow, as the recorder's clocks are read apart.
    if (r.arrival_time_s < run.started_at_s - 1.0 || r.arrival_time_s > run.finished_at_s + 1.0) {
      throw InputError(Location{path, r.line, "arrival_time"},
                       "arrives " + short_number(r.arrival_time_s - run.started_at_s) +
                           " s after meta.json's started_at, outside the run (" + short_number(longest - 1.0) + " s)");
    }
    const double finish = r.arrival_time_s + (r.last_token_s - r.queued_s);
    if (finish > run.finished_at_s + 1.0) {
      throw InputError(Location{path, r.line, "last_token_ts"},
                       "finishes " + short_number(finish - run.finished_at_s) +
                           " s after meta.json's finished_at (arrival_time plus last_token_ts - queued_ts)");
    }
  }
}

double csv_number(const std::string& cell, const std::string& path, std::int64_t line, const std::string& column) {
  double v = 0;
  const char* end = cell.data() + cell.size();
  const auto [ptr, ec] = std::from_chars(cell.data(), end, v);
  if (ec != std::errc() || ptr != end || !std::isfinite(v)) {
    throw InputError(Location{path, line, column}, "expected a number, got \"" + cell + "\"");
  }
  return v;
}

std::int64_t csv_count(const std::string& cell, const std::string& path, std::int64_t line, const std::string& column) {
  const double v = csv_number(cell, path, line, column);
  // Up to 2^53, where doubles still hold every whole number: far more requests than any
  // engine runs, and the sum over a run's ticks stays within 64 bits.
  if (v < 0 || v != std::floor(v) || v > 0x1p53) {
    throw InputError(Location{path, line, column},
                     "expected a non-negative whole number up to 2^53, got \"" + cell + "\"");
  }
  return static_cast<std::int64_t>(v);
}

void read_ticks(MeasuredRun& run) {
  const std::string path = join(run.dir, "timeseries.csv");
  std::ifstream in = open_file(path);
  std::string text;
  const std::vector<std::string> wanted = {"t", "prompt_throughput", "gen_throughput", "running", "waiting"};
  auto split = [](const std::string& s) {
    std::vector<std::string> cells;
    std::string cell;
    std::stringstream ss(s);
    while (std::getline(ss, cell, ',')) {
      if (!cell.empty() && cell.back() == '\r') cell.pop_back();
      cells.push_back(cell);
    }
    if (!s.empty() && s.back() == ',') cells.emplace_back();  // getline drops a last, empty cell
    return cells;
  };
  if (!std::getline(in, text)) throw InputError(Location{path, 1, ""}, "empty file: expected a header line");
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);  // a UTF-8 byte order mark, as trace files allow
  const std::vector<std::string> header = split(text);
  for (std::size_t i = 0; i < header.size(); ++i) {
    if (std::find(header.begin(), header.begin() + static_cast<std::ptrdiff_t>(i), header[i]) !=
        header.begin() + static_cast<std::ptrdiff_t>(i)) {
      throw InputError(Location{path, 1, header[i]}, "column given twice: kvsim refuses to choose");
    }
  }
  std::vector<std::size_t> at(wanted.size());
  for (std::size_t i = 0; i < wanted.size(); ++i) {
    const auto it = std::find(header.begin(), header.end(), wanted[i]);
    if (it == header.end()) throw InputError(Location{path, 1, wanted[i]}, "missing column");
    at[i] = static_cast<std::size_t>(it - header.begin());
  }
  // Optional columns (newer recorders): their index, or -1.
  const auto optional_column = [&](const char* name) {
    const auto it = std::find(header.begin(), header.end(), name);
    return it == header.end() ? std::ptrdiff_t{-1} : it - header.begin();
  };
  // kv_cache_pct: absent, as 0 throughout (not recorded): calibrate does not need it, and
  // validate then says KV usage was not recorded.
  const std::ptrdiff_t kv_at = optional_column("kv_cache_pct");
  const std::ptrdiff_t computed_at = optional_column("prompt_compute_throughput");
  const std::ptrdiff_t preempted_at = optional_column("preempted");
  run.preemptions_recorded = preempted_at >= 0;
  double last_t = -1;
  // A recorder's last tick may close one tick after the run's last request.
  const double span = run.started_at_s != 0 && run.finished_at_s != 0 ? run.finished_at_s - run.started_at_s
                                                                       : kLongestRunS;
  // vLLM runs at most max_num_seqs requests per engine (no bound if the product overflows).
  // (Not bounded by requests.jsonl's count: vLLM v1 schedules each of a request's n samples
  // as a request of its own.)
  std::int64_t most_running = std::numeric_limits<std::int64_t>::max();
  if (__builtin_mul_overflow(run.max_num_seqs, run.data_parallel, &most_running)) {
    most_running = std::numeric_limits<std::int64_t>::max();
  }
  for (std::int64_t line = 2; std::getline(in, text); ++line) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::vector<std::string> cells = split(text);
    if (cells.size() != header.size()) {
      throw InputError(Location{path, line, ""}, "expected " + std::to_string(header.size()) + " cells, got " +
                                                     std::to_string(cells.size()));
    }
    MeasuredTick t;
    t.t_s = csv_number(cells[at[0]], path, line, wanted[0]);
    if (t.t_s < 0) throw InputError(Location{path, line, "t"}, "negative: expected seconds since the run started");
    if (t.t_s <= last_t) throw InputError(Location{path, line, "t"}, "times must increase");
    if (t.t_s > span + run.tick_s + 1.0) {
      throw InputError(Location{path, line, "t"},
                       fmt::format("{:.6g} s is past the run's end ({:.6g} s{})", t.t_s, span,
                                   span == kLongestRunS ? ", the longest run kvsim reads" : ", meta.json started_at to finished_at"));
    }
    last_t = t.t_s;
    t.prompt_tokens_per_s = csv_number(cells[at[1]], path, line, wanted[1]);
    t.generated_tokens_per_s = csv_number(cells[at[2]], path, line, wanted[2]);
    if (t.prompt_tokens_per_s < 0 || t.generated_tokens_per_s < 0) {
      throw InputError(Location{path, line, t.prompt_tokens_per_s < 0 ? wanted[1] : wanted[2]}, "negative throughput");
    }
    // A billion tokens a second is hundreds of times what any GPU serves.
    for (const auto& [value, column] : {std::pair{t.prompt_tokens_per_s, 1}, std::pair{t.generated_tokens_per_s, 2}}) {
      if (value > 1e9) {
        throw InputError(Location{path, line, wanted[static_cast<std::size_t>(column)]},
                         fmt::format("{:.6g} tokens per second is implausible (at most 10^9 are accepted)", value));
      }
    }
    t.running = csv_count(cells[at[3]], path, line, wanted[3]);
    t.waiting = csv_count(cells[at[4]], path, line, wanted[4]);
    if (t.running > most_running) {
      throw InputError(Location{path, line, wanted[3]},
                       fmt::format("{} running, more than max_num_seqs x data_parallel_size ({} x {}) allow", t.running,
                                   run.max_num_seqs, run.data_parallel));
    }

    if (kv_at >= 0) {
      const std::string& kv = cells[static_cast<std::size_t>(kv_at)];
      t.kv_cache_percent = csv_number(kv, path, line, "kv_cache_pct");
      if (t.kv_cache_percent < 0 || t.kv_cache_percent > 100) {
        throw InputError(Location{path, line, "kv_cache_pct"}, "expected a percentage from 0 to 100, got \"" + kv + "\"");
      }
    }
    if (t.kv_cache_percent > 0) run.kv_usage_recorded = true;
    if (computed_at >= 0) {
      t.computed_prompt_tokens_per_s =
          csv_number(cells[static_cast<std::size_t>(computed_at)], path, line, "prompt_compute_throughput");
      if (t.computed_prompt_tokens_per_s < 0 || t.computed_prompt_tokens_per_s > t.prompt_tokens_per_s + 0.5) {
        throw InputError(Location{path, line, "prompt_compute_throughput"},
                         "expected between 0 and prompt_throughput (the computed part of those prompts)");
      }
    }
    if (preempted_at >= 0) {
      t.preempted = csv_count(cells[static_cast<std::size_t>(preempted_at)], path, line, "preempted");
      if (__builtin_add_overflow(run.preemptions, t.preempted, &run.preemptions)) {
        throw InputError(Location{path, line, "preempted"}, "the preemptions summed over the ticks overflow 64 bits");
      }
    }
    run.ticks.push_back(t);
  }
}

}  // namespace

std::optional<std::string> workload_digest_mismatch(const MeasuredRun& run) {
  const std::string& want = run.dataset_hash;
  const bool sha256 = want.size() == 64 && std::all_of(want.begin(), want.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  });
  std::error_code ec;
  if (!sha256 || run.workload.empty() || !fs::is_regular_file(run.workload, ec)) return std::nullopt;
  std::ifstream in(run.workload, std::ios::binary);
  if (!in) return std::nullopt;  // reading it for the replay says why
  const std::string got = detail::sha256_hex(in);
  std::string lower = want;
  for (char& c : lower) c = static_cast<char>(c >= 'A' && c <= 'F' ? c - 'A' + 'a' : c);
  if (got == lower) return std::nullopt;
  return fmt::format("{}: its SHA-256 is {}, but {}/meta.json's dataset_hash is {}: not the workload this run "
                     "replayed, so what it is compared with was measured on other requests",
                     run.workload, got, run.dir, want);
}

MeasuredRun read_measured_run(const std::string& dir, const std::optional<std::string>& workload, bool find_workload) {
  MeasuredRun run;
  run.dir = dir;
  if (!path_exists(dir)) throw InputError(Location{dir, 0, ""}, "no such directory (a measured run's folder)");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw InputError(Location{dir, 0, ""}, "not a directory (a measured run's folder)");
  if (workload) {
    if (*workload != kStandardInput && !path_exists(*workload)) {
      throw InputError(Location{*workload, 0, ""}, "no such workload file");
    }
    std::error_code dir_ec;
    if (!trace_can_be_reread(*workload) && !fs::is_directory(*workload, dir_ec)) {
      // A pipe would be empty (or a FIFO block) the second time, and say nothing true.
      throw InputError(Location{*workload, 0, ""},
                       "a workload is read more than once (replayed, and checked against the run): give a regular "
                       "file, not a pipe, a FIFO or standard input");
    }
    run.workload = *workload;
  }
  read_meta(run, find_workload);
  read_hardware(run);
  read_requests(run);
  // A request asked past max_model_len generated only up to it: a recorder may write the
  // output it asked for (LLMServingSim's runner writes the workload's), and its TPOT would
  // divide the decoding span by tokens never generated. A prompt of exactly the length is
  // served one token (vLLM refuses only a longer one); a longer one has no timestamps.
  if (run.max_model_len > 0) {
    for (MeasuredRequest& r : run.requests) {
      if (r.input_tokens <= run.max_model_len) {
        r.output_tokens = std::min(r.output_tokens, std::max<std::int64_t>(1, run.max_model_len - r.input_tokens));
      }
    }
  }
  check_within_run(run);
  read_ticks(run);
  run.started_at_recorded = run.started_at_s != 0;
  if (run.started_at_s == 0) {
    run.started_at_s = std::numeric_limits<double>::infinity();
    for (const MeasuredRequest& r : run.requests) {
      if (r.timed) run.started_at_s = std::min(run.started_at_s, r.arrival_time_s);
    }
  }
  return run;
}

std::string locate_workload(const MeasuredRun& run) {
  if (run.dataset_path.empty()) return "";
  for (const fs::path& place : workload_places(run)) {
    if (path_exists(place)) return place.string();
  }
  return "";
}

std::string workload_not_found(const MeasuredRun& run) {
  if (run.dataset_path.empty()) return std::string("meta.json names no workload (dataset_path); give it with ") + kOptWorkload;
  const std::vector<fs::path> places = workload_places(run);
  std::string where;
  for (std::size_t i = 0; i < places.size(); ++i) {
    where += (i == 0 ? "" : i + 1 == places.size() ? " nor at " : ", ") + places[i].string();
  }
  return "the workload \"" + run.dataset_path + "\" is neither at " + where + "; give it with " + kOptWorkload;
}

double percentile_sorted(const std::vector<double>& sorted, double p) {
  const double rank = (static_cast<double>(sorted.size()) - 1) * p / 100.0;
  const auto lo = static_cast<std::size_t>(std::floor(rank));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - static_cast<double>(lo));
}

Distribution distribution(std::vector<double> samples) {
  Distribution d;
  d.count = static_cast<std::int64_t>(samples.size());
  if (samples.empty()) return d;
  std::sort(samples.begin(), samples.end());
  d.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(samples.size());
  d.p50 = percentile_sorted(samples, 50);
  d.p90 = percentile_sorted(samples, 90);
  d.p95 = percentile_sorted(samples, 95);
  d.p99 = percentile_sorted(samples, 99);
  return d;
}

RequestLatency request_latency(double queued_s, double first_token_s, double last_token_s, std::int64_t output_tokens) {
  RequestLatency l{first_token_s - queued_s, last_token_s - queued_s, std::nullopt};
  if (output_tokens >= 2) l.tpot = (last_token_s - first_token_s) / static_cast<double>(output_tokens - 1);
  return l;
}

MeasuredLatencies measured_latencies(const MeasuredRun& run) {
  MeasuredLatencies s;
  for (const MeasuredRequest& r : run.requests) {
    if (!r.timed) continue;
    const RequestLatency l = request_latency(r.queued_s, r.first_token_s, r.last_token_s, r.output_tokens);
    s.ttft.push_back(l.ttft);
    if (l.tpot) s.tpot.push_back(*l.tpot);
    s.latency.push_back(l.latency);
  }
  return s;
}

double monotonic_to_wall_s(const MeasuredRun& run) {
  double sum = 0;
  for (const MeasuredRequest& r : run.requests) sum += r.timed ? r.arrival_time_s - r.queued_s : 0.0;
  return sum / static_cast<double>(timed_requests(run));
}

std::int64_t timed_requests(const MeasuredRun& run) { return std::ssize(run.requests) - run.untimed_requests; }

double tick_origin_monotonic_s(const MeasuredRun& run) { return run.started_at_s - monotonic_to_wall_s(run); }

std::pair<double, double> measured_span_s(const MeasuredRun& run) {
  double first = std::numeric_limits<double>::infinity(), last = -first;
  for (const MeasuredRequest& r : run.requests) {
    if (!r.timed) continue;
    first = std::min(first, r.queued_s);
    last = std::max(last, r.last_token_s);
  }
  return {first, last};
}

double measured_makespan_s(const MeasuredRun& run) {
  const auto [first, last] = measured_span_s(run);
  return last - first;
}

}  // namespace kvsim
