// Command-line options that choose a model, how its KV cache is stored and placed, and the
// device budget. `kvsim size` and `kvsim replay` share them, so both read a model, a dtype
// or a budget exactly the same way.
#ifndef KVSIM_SRC_CLI_MODEL_OPTIONS_H_
#define KVSIM_SRC_CLI_MODEL_OPTIONS_H_

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "kvsim/budget.h"
#include "kvsim/model.h"

namespace kvsim::cli {

// --model, --config, --dtype, --kv-group-size, --mla-form.
po::options_description model_options(const std::string& model_help);
// --tp, --pp.
po::options_description placement_options();
// --device, --device-memory, --gpu-memory-utilization, --params, --weight-dtype,
// --weights-bytes, --reserve, --kv-budget.
po::options_description budget_options();

// The model as the options chose it, with its KV layout on each pipeline stage.
struct ModelChoice {
  ModelSpec model;
  KvOptions kv;
  std::string dtype_reason;        // "--dtype", "default: the model's torch_dtype bfloat16", ...
  std::vector<KvLayout> stages;
  std::size_t binding_stage = 0;   // the stage with the most bytes per token
  const KvLayout& layout() const { return stages[binding_stage]; }
};

// Reads the model and placement options. With `default_model` empty, one of --model and
// --config is required (UsageError otherwise); else the preset it names is the default.
ModelChoice resolve_model(const po::variables_map& vm, const std::string& synopsis, const std::string& default_model);

// The budget options given, or nothing when none of --device, --device-memory and
// --kv-budget is. Budget details without any of those three, and --kv-budget with the
// terms it replaces (--device-memory, --gpu-memory-utilization, --reserve), are an
// InputError. `weights_time_steps` (replay): the weights' terms (--params, --weight-dtype,
// --weights-bytes) need no budget, since the roofline reads the weights every step; read
// them with weight_terms().
std::optional<BudgetOptions> resolve_budget(const po::variables_map& vm, bool weights_time_steps = false);

// The weights' terms alone (--params, --weight-dtype, --weights-bytes; the last replaces the
// product of the first two, and is refused beside them).
BudgetOptions weight_terms(const po::variables_map& vm);

// With --kv-budget given, any of `options` (names without "--") is an InputError naming
// --kv-budget: a term of the derived budget that would be silently ignored.
void reject_beside_kv_budget(const po::variables_map& vm, std::initializer_list<const char*> options);

// A positive integer option value. Throws InputError naming `option`.
std::int64_t positive_integer(const std::string& text, const char* option);
// A positive token count no longer than a trace's longest request (2^40), so that sums of
// such counts and their bytes stay far inside 64 bits.
std::int64_t token_count(const std::string& text, const char* option);

// --max-model-len's value for `model` as an engine's start-up takes it (kvsim size): a
// positive integer no longer than the model's own maximum (context_length(), when known), as
// vLLM's _get_and_verify_max_len refuses a longer one unless VLLM_ALLOW_LONG_MAX_MODEL_LEN is
// set. Throws InputError naming the option. (kvsim replay takes a longer one as a what-if.)
std::int64_t max_model_len_option(const std::string& text, const ModelSpec& model);

// The option's value, if it was given.
std::optional<std::string> option_text(const po::variables_map& vm, const char* name);

// Whether the option was given on the command line (present, and not by its default value).
bool given(const po::variables_map& vm, const std::string& name);

// An on/off option's value (`option`: its name with "--", which an InputError names when the
// value is neither).
bool on_off(const po::variables_map& vm, const char* option);

}  // namespace kvsim::cli

#endif  // KVSIM_SRC_CLI_MODEL_OPTIONS_H_
