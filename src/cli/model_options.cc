#include "model_options.h"

#include <limits>

#include "decimal.h"
#include "kvsim/error.h"
#include "kvsim/size_sheet.h"
#include "kvsim/units.h"

namespace kvsim::cli {
namespace {

__extension__ typedef __int128 Wide;

// "8030261248", "8.03B", "350M": a parameter count, fractional parameters rounded down.
std::int64_t parameter_count(const std::string& text) {
  const Location where{"", 0, "--params"};
  std::int64_t scale = 1;
  std::string number = text;
  if (!number.empty() && (number.back() == 'B' || number.back() == 'b')) {
    scale = 1'000'000'000;
    number.pop_back();
  } else if (!number.empty() && (number.back() == 'M' || number.back() == 'm')) {
    scale = 1'000'000;
    number.pop_back();
  }
  std::int64_t fixed = 0;  // value x 10^9
  const auto status = detail::parse_scaled_decimal(number, 9, fixed);
  if (status != detail::DecimalStatus::ok) {
    throw InputError(where, "expected a count such as 8030261248, 8.03B or 350M, got \"" + text + "\"");
  }
  const Wide value = Wide{fixed} * scale / 1'000'000'000;
  if (value <= 0 || value > Wide{std::numeric_limits<std::int64_t>::max()}) {
    throw InputError(where, "expected a positive count that fits 64 bits, got \"" + text + "\"");
  }
  return static_cast<std::int64_t>(value);
}

}  // namespace

std::int64_t positive_integer(const std::string& text, const char* option) {
  std::int64_t value = 0;
  const auto status = detail::parse_non_negative(text, value);
  const Location where{"", 0, option};
  if (status != detail::DecimalStatus::ok) {
    throw InputError(where, "expected a positive integer, got \"" + text + "\"");
  }
  if (value <= 0) throw InputError(where, "expected a positive integer, got " + text);
  return value;
}

std::optional<std::string> option_text(const po::variables_map& vm, const char* name) {
  if (vm.count(name) == 0) return std::nullopt;
  return vm[name].as<std::string>();
}

po::options_description model_options(const std::string& model_help) {
  po::options_description o("Model");
  o.add_options()
      ("model", po::value<std::string>(), model_help.c_str())
      ("config", po::value<std::string>(), "a Hugging Face config.json instead of a preset")
      ("dtype", po::value<std::string>(),
       "KV dtype: fp32, fp16, bf16, fp8, int8, int4, int2 (default: the model's torch_dtype, else bf16)")
      ("kv-group-size", po::value<std::string>(),
       "values per scale/zero-point group for int8/int4/int2 (default 64, as Hugging Face's QuantizedCache)")
      ("mla-form", po::value<std::string>(),
       "MLA models: latent (vLLM, SGLang, llama.cpp; default) or decompressed (Hugging Face)");
  return o;
}

po::options_description placement_options() {
  po::options_description o("Placement (figures are per device)");
  o.add_options()
      ("tp", po::value<std::string>(), "tensor-parallel devices (split KV heads; default 1)")
      ("pp", po::value<std::string>(), "pipeline-parallel stages (split layers as vLLM does; default 1)");
  return o;
}

po::options_description budget_options() {
  // "A100-40GB, A100-80GB, ... or RTX-4090": every device preset.
  std::string devices;
  const auto& presets = device_presets();
  for (std::size_t i = 0; i < presets.size(); ++i) {
    if (i > 0) devices += i + 1 == presets.size() ? " or " : ", ";
    devices += presets[i].name;
  }
  po::options_description o("Budget (per device)");
  o.add_options()
      ("device", po::value<std::string>(), devices.c_str())
      ("device-memory", po::value<std::string>(),
       "device total instead of the preset's, e.g. torch.cuda.mem_get_info()[1] (80GB, 79.2GiB, bytes)")
      ("gpu-memory-utilization", po::value<std::string>(), "fraction of the device the engine may use (default 0.9)")
      ("params", po::value<std::string>(), "parameter count (default: published, else estimated from the config)")
      ("weight-dtype", po::value<std::string>(), "bits per weight: fp32, fp16, bf16, fp8, int8, int4 (default: as stored)")
      ("weights-bytes", po::value<std::string>(), "all weights in bytes, instead of params x dtype")
      ("reserve", po::value<std::string>(), "activations, CUDA graphs and runtime per device (default 1GiB)")
      ("kv-budget", po::value<std::string>(), "the KV budget per device, directly (bytes, GiB or GB)");
  return o;
}

ModelChoice resolve_model(const po::variables_map& vm, const std::string& synopsis, const std::string& default_model) {
  const auto model_name = option_text(vm, "model");
  const auto config = option_text(vm, "config");
  if (model_name && config) throw UsageError("give one of --model NAME or --config FILE, not both\nUsage: " + synopsis);
  if (!model_name && !config && default_model.empty()) {
    throw UsageError("give exactly one of --model NAME or --config FILE\nUsage: " + synopsis);
  }
  ModelChoice c;
  c.model = config ? load_hf_config(*config) : find_model_preset(model_name ? *model_name : default_model);
  KvOptions& kv = c.kv;
  if (const auto dtype = option_text(vm, "dtype")) {
    kv.dtype = parse_kv_dtype(*dtype, "--dtype");
    c.dtype_reason = "--dtype";
  } else {
    kv.dtype = default_kv_dtype(c.model);
    c.dtype_reason = try_parse_kv_dtype(c.model.weight_dtype)
                         ? "default: the model's torch_dtype " + c.model.weight_dtype
                         : std::string("default: bf16") +
                               (c.model.weight_dtype.empty() ? " (no torch_dtype)"
                                                             : " (torch_dtype " + c.model.weight_dtype + " is no KV dtype)");
  }
  if (const auto g = option_text(vm, "kv-group-size")) kv.quant_group_values = positive_integer(*g, "--kv-group-size");
  if (const auto form = option_text(vm, "mla-form")) {
    if (*form == "latent") {
      kv.mla_form = MlaForm::latent;
    } else if (*form == "decompressed") {
      kv.mla_form = MlaForm::decompressed;
    } else {
      throw InputError(Location{"", 0, "--mla-form"}, "expected latent or decompressed, got \"" + *form + "\"");
    }
  }
  if (const auto tp = option_text(vm, "tp")) kv.tensor_parallel = positive_integer(*tp, "--tp");
  if (const auto pp = option_text(vm, "pp")) kv.pipeline_parallel = positive_integer(*pp, "--pp");
  c.stages = kv_stage_layouts(c.model, kv);
  c.binding_stage = binding_stage(c.stages);
  return c;
}

void reject_beside_kv_budget(const po::variables_map& vm, std::initializer_list<const char*> options) {
  if (!option_text(vm, "kv-budget")) return;
  for (const char* name : options) {
    if (option_text(vm, name)) {
      throw InputError(Location{"", 0, "--kv-budget"}, std::string("gives the KV budget directly, so --") + name +
                                                           " (a term of the budget derived from a device) has no "
                                                           "effect: give one or the other");
    }
  }
}

std::optional<BudgetOptions> resolve_budget(const po::variables_map& vm) {
  const auto device = option_text(vm, "device");
  const auto device_memory = option_text(vm, "device-memory");
  const auto kv_budget = option_text(vm, "kv-budget");
  const auto utilization = option_text(vm, "gpu-memory-utilization");
  const auto params = option_text(vm, "params");
  const auto weight_dtype = option_text(vm, "weight-dtype");
  const auto weights_bytes = option_text(vm, "weights-bytes");
  const auto reserve = option_text(vm, "reserve");
  if (!device && !device_memory && !kv_budget) {
    if (utilization || params || weights_bytes || weight_dtype || reserve) {
      throw InputError(Location{"", 0, "--device"},
                       "budget options need a device: give --device, --device-memory or --kv-budget");
    }
    return std::nullopt;
  }
  // The terms of the subtraction --kv-budget replaces would be silently ignored.
  reject_beside_kv_budget(vm, {"device-memory", "gpu-memory-utilization", "reserve"});
  BudgetOptions bo;
  if (device) bo.device = *device;
  if (device_memory) {
    bo.device_memory_bytes = parse_byte_size(*device_memory, "--device-memory");
    if (bo.device_memory_bytes <= 0) throw InputError(Location{"", 0, "--device-memory"}, "expected a positive size");
  }
  if (utilization) bo.gpu_memory_utilization_ppb = parse_gpu_memory_utilization(*utilization, "--gpu-memory-utilization");
  if (params) bo.parameter_count = parameter_count(*params);
  if (weight_dtype) bo.weight_bits = kv_dtype_info(parse_kv_dtype(*weight_dtype, "--weight-dtype")).bits;
  if (weights_bytes) bo.weights_bytes = parse_byte_size(*weights_bytes, "--weights-bytes");
  if (reserve) bo.reserve_bytes = parse_byte_size(*reserve, "--reserve");
  if (kv_budget) bo.kv_budget_bytes = parse_byte_size(*kv_budget, "--kv-budget");
  return bo;
}

}  // namespace kvsim::cli
