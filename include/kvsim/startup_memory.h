// What a serving engine leaves for the KV cache when it starts, term by term, from what a
// user knows before start-up: the model's config, the device, the engine's settings.
//
// vLLM (v1, vllm/v1/worker/gpu_worker.py determine_available_memory):
//   KV = device total x gpu_memory_utilization
//        - weights (the loaded model's torch memory)
//        - torch peak increase of the profile run (activations of max_num_batched_tokens
//          tokens, or the sampler's logits for min(max_num_seqs, max_num_batched_tokens)
//          requests, whichever is larger)
//        - persistent buffers (cuBLAS's workspace; the runner's input buffers in 0.7.1)
//        - non-torch increase (memory CUDA allocates outside torch during the profile run)
//   CUDA graphs are captured after the KV cache is allocated (compile_or_warm_up_model), so
//   they come out of the (1 - utilisation) margin, not out of the KV cache.
// SGLang (python/sglang/srt/model_executor/model_runner.py profile_max_num_token):
//   KV = free memory after the weights - device memory x (1 - mem_fraction_static)
// TensorRT-LLM (tensorrt_llm/_torch/pyexecutor/_util.py, KvCacheConfig):
//   KV = free memory after the weights and a profile forward pass x free_gpu_memory_fraction
//
// Each term keeps the rule and the source it comes from, so a sheet can print them; terms
// with no closed form in the engine's code are constants named as assumptions (docs/size.md).
// Bytes are exact integers; nothing here is measured.
#ifndef KVSIM_STARTUP_MEMORY_H_
#define KVSIM_STARTUP_MEMORY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvsim/budget.h"
#include "kvsim/model.h"
#include "kvsim/vllm_defaults.h"
#include "kvsim/weights.h"

namespace kvsim {

// vllm: vLLM's v1 engine (vllm/v1/worker). vllm-v0: its V0 engine (vllm/worker/worker.py,
// vLLM 0.6.5 to 0.10), whose profile run samples with logprobs and, without chunked prefill,
// runs max(max_model_len, 2048) tokens. The subtraction is the same. vllm-v0.6.4: the V0
// engine of vLLM 0.6.4 and earlier, which subtracted all of the process's non-torch memory,
// the CUDA context included, not only what the profile run added. vllm-v0.7.1: the first v1
// engine (vLLM 0.7.0 and 0.7.1), whose profile run computed the logits of every token of the
// batch and ran no sampler, and which, like 0.6.4, subtracted all non-torch memory.
enum class ServingEngine { vllm, vllm_v0, vllm_v0_legacy, vllm_v1_early, sglang, trtllm };

// Either of vLLM's V0 engines.
inline bool is_vllm_v0(ServingEngine e) { return e == ServingEngine::vllm_v0 || e == ServingEngine::vllm_v0_legacy; }

// Any of vLLM's engines (they share gpu_memory_utilization and the profile-run subtraction).
inline bool is_vllm(ServingEngine e) {
  return e == ServingEngine::vllm || e == ServingEngine::vllm_v1_early || is_vllm_v0(e);
}

// "vllm", "vllm-v0", "vllm-v0.6.4", "vllm-v0.7.1", "sglang", "trtllm". parse_serving_engine
// throws InputError naming `field`.
std::string_view serving_engine_name(ServingEngine engine);
ServingEngine parse_serving_engine(std::string_view text, std::string_view field);

// The engine's own settings, under the engine's names. Zero means "the engine's default".
struct EngineSettings {
  ServingEngine engine = ServingEngine::vllm;
  // vLLM's gpu_memory_utilization, SGLang's mem_fraction_static, TensorRT-LLM's
  // free_gpu_memory_fraction, in parts per billion; 0: the engine's default.
  std::int64_t memory_fraction_ppb = 0;
  // Tokens in the profile run; 0: vLLM's 8192, or for vllm-v0 max(max_model_len, 2048).
  std::int64_t max_num_batched_tokens = 0;
  std::int64_t max_num_seqs = kVllmMaxNumSeqs;                     // requests the sampler is profiled for
  std::int64_t max_model_len = 0;       // 0: the model's max_position_embeddings
  bool enforce_eager = false;           // no CUDA graphs
  // vLLM v1 samples top-k/top-p with FlashInfer when it is installed and
  // VLLM_USE_FLASHINFER_SAMPLER allows (no sort); the PyTorch-native sampler otherwise
  // (pip installs of vLLM ship without FlashInfer).
  bool flashinfer_sampler = false;
  WeightServing weights;                // dtype of unquantised tensors, --weight-dtype
  std::optional<std::int64_t> weights_bytes;  // all weights, all devices (--weights-bytes)
};

// One line of the subtraction.
struct StartupTerm {
  std::string name;          // "device total", "x gpu_memory_utilization 0.9", "- weights", ...
  std::int64_t bytes = 0;    // the running value (for the total and the fraction) or the amount subtracted
  std::string rule;          // how it was computed
  std::string source;        // the engine file (or the documented assumption) it follows
};

// The start-up budget of one device of one pipeline stage.
struct StartupStage {
  std::int64_t stage = 0;
  DeviceWeights weights;
  std::int64_t forward_peak_bytes = 0;   // activations of the profile forward pass
  std::int64_t sampler_peak_bytes = 0;   // logits and sampler tensors (last stage only)
  std::int64_t activation_peak_bytes = 0;
  std::int64_t buffer_bytes = 0;         // tensors kept besides the weights (cuBLAS workspace, ...)
  std::int64_t non_torch_bytes = 0;
  std::int64_t kv_budget_bytes = 0;      // may be <= 0: nothing left
  std::vector<StartupTerm> terms;
};

struct StartupMemory {
  ServingEngine engine = ServingEngine::vllm;
  EngineSettings settings;               // with the engine's defaults filled in
  std::int64_t device_total_bytes = 0;
  std::string device_total_source;
  std::int64_t memory_fraction_ppb = 0;
  std::int64_t cuda_graphs = 0;          // CUDA graphs vLLM captures (0 with enforce_eager)
  std::int64_t max_model_len = 0;
  std::vector<StartupStage> stages;      // per pipeline stage
  std::size_t binding_stage = 0;         // the stage with the smallest KV budget
  std::int64_t kv_budget_bytes = 0;      // the binding stage's
};

// The device total the engine sees: --device-memory, else the preset's CUDA total
// (torch.cuda.mem_get_info()[1]) where one is documented, else its nvidia-smi total.
// `source` says which.
std::int64_t engine_device_total(const BudgetOptions& budget, std::string& source);

// The engine's default memory fraction: vLLM 0.9 (gpu_memory_utilization), SGLang's
// mem_fraction_static by tensor parallelism, TensorRT-LLM 0.9 (free_gpu_memory_fraction).
std::int64_t default_memory_fraction_ppb(ServingEngine engine, std::int64_t tensor_parallel);

// How many CUDA graphs vLLM captures by default for max_num_seqs: 1, 2, 4 and every multiple
// of 8 up to min(2 x max_num_seqs, 512) (v1) or min(max_num_seqs, 256) (V0); vllm-v0.7.1:
// up to 512 whatever max_num_seqs (67).
std::int64_t vllm_cuda_graph_sizes(ServingEngine engine, std::int64_t max_num_seqs);

// Bytes per element of the sampler's tensors for one logit (see startup_memory.cc).
std::int64_t sampler_bytes_per_logit(ServingEngine engine, bool flashinfer, std::int64_t dtype_bytes);

// vllm-v0.7.1's profile run on the last stage: the hidden states of all `tokens` and their
// logits, in the model dtype (see startup_memory.cc).
std::int64_t all_token_logits_peak_bytes(const ModelSpec& model, const KvOptions& kv, std::int64_t tokens,
                                         std::int64_t dtype_bytes);

// The activation peak of vLLM's profile forward pass on one device: see startup_memory.cc.
std::int64_t forward_peak_bytes(const ModelSpec& model, const KvOptions& kv, std::int64_t tokens,
                                std::int64_t dtype_bytes);

// The weights `budget` describes, for the start-up rule: --weights-bytes, --weight-dtype, and
// expert parallelism (its data-parallel ranks x `tensor_parallel`: vLLM's ep_size).
void take_weight_options(EngineSettings& settings, const BudgetOptions& budget, std::int64_t tensor_parallel);

// The start-up terms of `model` served as `kv` and `settings` say on the device `budget`
// names. Throws InputError when the device or the weights cannot be known.
StartupMemory startup_memory(const ModelSpec& model, const KvOptions& kv, const EngineSettings& settings,
                             const BudgetOptions& budget);

// The Budget (kvsim/budget.h) the binding stage's terms amount to, for the paged pool:
// reserve = activation peak + persistent buffers + non-torch. Throws InputError, printing
// every term, when nothing is left for the KV cache.
Budget startup_budget(const StartupMemory& startup);

}  // namespace kvsim

#endif  // KVSIM_STARTUP_MEMORY_H_
