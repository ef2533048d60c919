#include "model_options.h"

#include <fmt/core.h>

#include "kvsim/error.h"
#include "kvsim/size_sheet.h"
#include "kvsim/option_names.h"
#include "kvsim/parse.h"
#include "kvsim/units.h"
#include "kvsim/request.h"

namespace kvsim::cli {
std::int64_t positive_integer(const std::string& text, const char* option) {
  return parse_positive_integer(text, option);
}

std::int64_t token_count(const std::string& text, const char* option) {
  const std::int64_t n = positive_integer(text, option);
  if (n > kMaxRequestTokens) {
    throw InputError(Location{"", 0, option},
                     fmt::format("{} tokens is implausible (at most 2^40 = {}, as for a trace's lengths)", text,
                                 with_commas(kMaxRequestTokens)));
  }
  return n;
}

std::int64_t max_model_len_option(const std::string& text, const ModelSpec& model) {
  const std::int64_t n = token_count(text, kOptMaxModelLen);
  const std::int64_t most = context_length(model);
  if (most > 0 && n > most) {
    throw InputError(Location{"", 0, kOptMaxModelLen},
                     fmt::format("{} is longer than {}'s maximum of {} tokens ({}); vLLM refuses it at start-up "
                                 "(unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1). To size a longer context, give a "
                                 "config.json whose max_position_embeddings says so",
                                 with_commas(n), model.name, with_commas(most), context_length_source(model)));
  }
  return n;
}

std::optional<std::string> option_text(const po::variables_map& vm, const char* name) {
  if (vm.count(name) == 0) return std::nullopt;
  return vm[name].as<std::string>();
}

bool given(const po::variables_map& vm, const std::string& name) {
  return vm.count(name) != 0 && !vm[name].defaulted();
}

bool on_off(const po::variables_map& vm, const char* option) {
  const std::string value = vm[option_key(option)].as<std::string>();
  if (value != "on" && value != "off") throw InputError(Location{"", 0, option}, "expected on or off, got \"" + value + "\"");
  return value == "on";
}

po::options_description model_options(const std::string& model_help) {
  po::options_description o("Model");
  o.add_options()
      (option_key(kOptModel), po::value<std::string>(), model_help.c_str())
      (option_key(kOptConfig), po::value<std::string>(), "a Hugging Face config.json instead of a preset")
      (option_key(kOptDtype), po::value<std::string>(),
       "KV dtype: fp32, fp16, bf16, fp8, int8, int4, int2 (default: the model's torch_dtype, else bf16)")
      (option_key(kOptKvGroupSize), po::value<std::string>(),
       "values per scale/zero-point group for int8/int4/int2 (default 64, as Hugging Face's QuantizedCache)")
      (option_key(kOptMlaForm), po::value<std::string>(),
       "MLA models: latent (vLLM, SGLang, llama.cpp; default) or decompressed (Hugging Face)");
  return o;
}

po::options_description placement_options() {
  po::options_description o("Placement (figures are per device)");
  o.add_options()
      (option_key(kOptTp), po::value<std::string>(), "tensor-parallel devices (split KV heads; default 1)")
      (option_key(kOptPp), po::value<std::string>(), "pipeline-parallel stages (split layers as vLLM does; default 1)");
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
      (option_key(kOptDevice), po::value<std::string>(), devices.c_str())
      (option_key(kOptDeviceMemory), po::value<std::string>(),
       "device total instead of the preset's, e.g. torch.cuda.mem_get_info()[1] (80GB, 79.2GiB, bytes)")
      (option_key(kOptGpuMemoryUtilization), po::value<std::string>(), "fraction of the device the engine may use (default 0.9)")
      (option_key(kOptParams), po::value<std::string>(), "parameter count, such as 70553706496, 8.03B, 350M or 1.2T (default: published, else estimated from the config); with --weight-dtype and "
       "--weights-bytes, the budget's weights and the weights replay's roofline reads each step (no budget needed there)")
      (option_key(kOptWeightDtype), po::value<std::string>(), "bits per weight: fp32, fp16, bf16, fp8, int8, int4 (default: as stored)")
      (option_key(kOptWeightsBytes), po::value<std::string>(), "all weights in bytes, instead of params x dtype")
      (option_key(kOptReserve), po::value<std::string>(), "activations, CUDA graphs and runtime per device (default 1GiB)")
      (option_key(kOptKvBudget), po::value<std::string>(), "the KV budget per device, directly (bytes, GiB or GB)");
  return o;
}

ModelChoice resolve_model(const po::variables_map& vm, const std::string& synopsis, const std::string& default_model) {
  const auto model_name = option_text(vm, option_key(kOptModel));
  const auto config = option_text(vm, option_key(kOptConfig));
  if (model_name && config) throw UsageError("give one of --model NAME or --config FILE, not both\nUsage: " + synopsis);
  if (!model_name && !config && default_model.empty()) {
    throw UsageError("give exactly one of --model NAME or --config FILE\nUsage: " + synopsis);
  }
  ModelChoice c;
  c.model = config ? load_hf_config(*config) : find_model_preset(model_name ? *model_name : default_model);
  KvOptions& kv = c.kv;
  kv.state_dtype = served_dtype(c.model);  // vLLM's mamba_cache_dtype "auto": the model's dtype
  if (const auto dtype = option_text(vm, option_key(kOptDtype))) {
    kv.dtype = parse_kv_dtype(*dtype, kOptDtype);
    c.dtype_reason = kOptDtype;
  } else {
    if (c.model.checkpoint_kv_dtype == "nvfp4") {
      throw InputError(Location{c.model.name, 0, "field 'quantization_config.kv_cache_quant_algo'"},
                       "the checkpoint is quantised for an NVFP4 KV cache, which kvsim does not size: give " +
                           std::string(kOptDtype));
    }
    kv.dtype = default_kv_dtype(c.model);
    const auto given = try_parse_kv_dtype(c.model.weight_dtype);
    const std::string torch_dtype = "torch_dtype " + c.model.weight_dtype;
    if (c.model.checkpoint_kv_dtype == "fp8") {
      c.dtype_reason = "default: the checkpoint's quantization_config (ModelOpt, an fp8 KV cache)";
    } else if (given == kv.dtype) {
      c.dtype_reason = "default: the model's " + torch_dtype;
    } else if (c.model.weight_dtype.empty()) {
      c.dtype_reason = "default: bf16 (no torch_dtype)";
    } else if (given == KvDtype::fp32) {
      c.dtype_reason = "default: bf16 (" + torch_dtype + ": engines serve a float32 checkpoint in 16 bits)";
    } else {
      c.dtype_reason = "default: bf16 (" + torch_dtype + " is not fp16 or bf16)";
    }
  }
  if (const auto g = option_text(vm, option_key(kOptKvGroupSize))) {
    // Only the int dtypes keep a scale per group; anywhere else the option would change nothing.
    if (!kv_dtype_info(kv.dtype).group_scales) {
      throw InputError(Location{"", 0, kOptKvGroupSize},
                       "sets the scale groups of an int8, int4 or int2 cache, and the KV dtype is " +
                           std::string(kv_dtype_info(kv.dtype).name) + ": it would have no effect");
    }
    kv.quant_group_values = positive_integer(*g, kOptKvGroupSize);
  }
  if (const auto form = option_text(vm, option_key(kOptMlaForm))) {
    if (!c.model.mla) {
      throw InputError(Location{"", 0, kOptMlaForm}, "chooses how an MLA model's cache is laid out, and " +
                                                         c.model.name + " has no MLA: it would have no effect");
    }
    if (*form == "latent") {
      kv.mla_form = MlaForm::latent;
    } else if (*form == "decompressed") {
      kv.mla_form = MlaForm::decompressed;
    } else {
      throw InputError(Location{"", 0, kOptMlaForm}, "expected latent or decompressed, got \"" + *form + "\"");
    }
  }
  if (const auto tp = option_text(vm, option_key(kOptTp))) kv.tensor_parallel = positive_integer(*tp, kOptTp);
  if (const auto pp = option_text(vm, option_key(kOptPp))) kv.pipeline_parallel = positive_integer(*pp, kOptPp);
  try {
    c.stages = kv_stage_layouts(c.model, kv);
    // The parameter count too, where the config gives what it needs: an overflow is the
    // config's (a missing field names the file, and is reported where the weights are needed).
    if (config && can_split_parameters(c.model)) {
      try {
        (void)split_parameters(c.model);
      } catch (const InputError& e) {
        if (e.where().file.empty()) throw;
      }
    }
  } catch (const InputError& e) {
    // An overflow of a product of the config's sizes names no file or field where it is
    // found: it is the config's, unless an option is named.
    if (!config || !e.where().file.empty() || e.where().field.rfind("--", 0) == 0) throw;
    throw InputError(Location{*config, 0, e.where().field},
                     e.problem() + " (the sizes in this config are implausible: check num_hidden_layers, the head "
                                   "counts and head_dim)");
  }
  c.binding_stage = binding_stage(c.stages);
  return c;
}

void reject_beside_kv_budget(const po::variables_map& vm, std::initializer_list<const char*> options) {
  if (!option_text(vm, option_key(kOptKvBudget))) return;
  for (const char* name : options) {
    if (option_text(vm, name)) {
      throw InputError(Location{"", 0, kOptKvBudget}, std::string("gives the KV budget directly, so --") + name +
                                                           " (a term of the budget derived from a device) has no "
                                                           "effect: give one or the other");
    }
  }
}

BudgetOptions weight_terms(const po::variables_map& vm) {
  const auto params = option_text(vm, option_key(kOptParams));
  const auto weight_dtype = option_text(vm, option_key(kOptWeightDtype));
  const auto weights_bytes = option_text(vm, option_key(kOptWeightsBytes));
  // The terms of the product --weights-bytes replaces (params x bits per weight) would be
  // silently ignored.
  if (weights_bytes && (params || weight_dtype)) {
    throw InputError(Location{"", 0, kOptWeightsBytes},
                     std::string("gives the weights' bytes directly, so ") + (params ? kOptParams : kOptWeightDtype) +
                         " (a term of parameters x bits per weight) has no effect: give one or the other");
  }
  BudgetOptions bo;
  if (params) bo.parameter_count = parse_parameter_count(*params, kOptParams);
  if (weight_dtype) bo.weight_bits = kv_dtype_info(parse_kv_dtype(*weight_dtype, kOptWeightDtype)).bits;
  if (weights_bytes) {
    bo.weights_bytes = parse_byte_size(*weights_bytes, kOptWeightsBytes);
    // As --params 0 is refused: a model has weights, and a budget without them is --kv-budget.
    if (bo.weights_bytes == 0) {
      throw InputError(Location{"", 0, kOptWeightsBytes},
                       "expected a positive byte count (to give the KV cache a budget of its own, use --kv-budget)");
    }
  }
  return bo;
}

std::optional<BudgetOptions> resolve_budget(const po::variables_map& vm, bool weights_time_steps) {
  const auto device = option_text(vm, option_key(kOptDevice));
  const auto device_memory = option_text(vm, option_key(kOptDeviceMemory));
  const auto kv_budget = option_text(vm, option_key(kOptKvBudget));
  const auto utilization = option_text(vm, option_key(kOptGpuMemoryUtilization));
  const auto params = option_text(vm, option_key(kOptParams));
  const auto weight_dtype = option_text(vm, option_key(kOptWeightDtype));
  const auto weights_bytes = option_text(vm, option_key(kOptWeightsBytes));
  const auto reserve = option_text(vm, option_key(kOptReserve));
  if (!device && !device_memory && !kv_budget) {
    // Named by the option given, which is the one the user must pair with a device.
    const bool weights = !weights_time_steps;
    const char* term = utilization               ? kOptGpuMemoryUtilization
                       : weights && params        ? kOptParams
                       : weights && weights_bytes ? kOptWeightsBytes
                       : weights && weight_dtype  ? kOptWeightDtype
                       : reserve                  ? kOptReserve
                                                  : nullptr;
    if (term != nullptr) {
      throw InputError(Location{"", 0, term},
                       "a term of the memory budget needs a device: give --device, --device-memory or --kv-budget");
    }
    return std::nullopt;
  }
  // The terms of the subtraction --kv-budget replaces would be silently ignored.
  reject_beside_kv_budget(vm, {option_key(kOptDeviceMemory), option_key(kOptGpuMemoryUtilization), option_key(kOptReserve)});
  BudgetOptions bo = weight_terms(vm);
  if (device) bo.device = *device;
  if (device_memory) {
    bo.device_memory_bytes = parse_byte_size(*device_memory, kOptDeviceMemory);
    if (bo.device_memory_bytes <= 0) throw InputError(Location{"", 0, kOptDeviceMemory}, "expected a positive size");
  }
  if (utilization) bo.gpu_memory_utilization_ppb = parse_gpu_memory_utilization(*utilization, kOptGpuMemoryUtilization);
  if (reserve) bo.reserve_bytes = parse_byte_size(*reserve, kOptReserve);
  if (kv_budget) bo.kv_budget_bytes = parse_byte_size(*kv_budget, kOptKvBudget);
  return bo;
}

}  // namespace kvsim::cli
