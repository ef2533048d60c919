// The KV budget: how many bytes of one device are left for the KV cache once the engine has
// taken its share, and how a paged cache of that many bytes serves requests.
//
// derive_budget() does, per device, the subtraction a serving engine does at start-up and keeps
// every term so a sheet can print it:
//   device total x gpu-memory-utilization - weights / (tp x pp) - reserve = KV budget
// or takes a KV budget given directly. Nothing here is measured: the reserve for activations,
// CUDA graphs and the runtime is an option with a documented default, and the weights are a
// parameter count times bytes per weight, spread evenly over the devices.
//
// paged_pool() and request_blocks() follow vLLM's v1 KV-cache manager (vllm/v1/core/
// kv_cache_utils.py and vllm/v1/kv_cache_interface.py): layers are put in KV-cache groups of
// equal size, one block id reserves one page in every layer of a group, a full-attention group
// needs ceil(T / block) blocks per request and a sliding-window group at most
// ceil(min(W - 1 + max_num_batched_tokens, T) / block) + 1. "Maximum concurrency for T tokens
// per request" is num_blocks / blocks_per_request, as vLLM logs it. All byte counts are exact
// integers.
#ifndef KVSIM_BUDGET_H_
#define KVSIM_BUDGET_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvsim/option_names.h"
#include "kvsim/model.h"
#include "kvsim/vllm_defaults.h"

namespace kvsim {

// A GPU model: its memory as the driver reports it and, for the replay engine's roofline cost
// model, its spec-sheet bandwidth and dense BF16 tensor throughput.
//
// The roofline reaches only part of the spec sheet's peaks: `compute_permille` is the share of
// the dense BF16 peak that large BF16 matmuls reach on this device (its "maximum achievable
// matmul FLOPS", MAMF, or a stated stand-in), `memory_permille` the share of the bandwidth a
// streaming read sustains. `efficiency_source` says where both come from (docs/size.md lists
// them side by side).
struct DevicePreset {
  std::string_view name;               // "H100-80GB"
  std::string_view product;            // "NVIDIA H100 80GB HBM3", as nvidia-smi names it
  std::int64_t total_bytes;            // nvidia-smi memory.total (MiB, exact) in bytes
  std::int64_t hbm_bytes_per_second;   // spec-sheet memory bandwidth
  std::int64_t bf16_dense_flops;       // spec-sheet dense BF16 tensor FLOP/s (no 2:4 sparsity)
  std::string_view source;             // where the numbers come from
  std::int64_t compute_permille;       // achievable share of bf16_dense_flops, in 1/1000
  std::int64_t memory_permille;        // achievable share of hbm_bytes_per_second, in 1/1000
  std::string_view efficiency_source;  // where the two shares come from
  // CUDA's own total (torch.cuda.mem_get_info()[1], what vLLM multiplies by
  // gpu_memory_utilization) as a published log prints it with the newest driver found; 0 when
  // none is documented (the start-up model then uses total_bytes and says so).
  std::int64_t cuda_total_bytes = 0;
  // CUDA compute capability, major x 10 + minor (80 Ampere A100, 86/89 other Ampere and Ada,
  // 90 Hopper, 100 and 120 Blackwell); 0 for a device that is not NVIDIA's.
  std::int64_t compute_capability = 0;
  // The link between two devices of a tensor- or expert-parallel group, for the roofline's
  // collectives: the bandwidth one direction sustains (achievable, not the spec sheet's), the
  // time of one small collective, and where both come from. 0: not known (no collective cost).
  std::int64_t link_bytes_per_second = 0;
  std::int64_t link_latency_ns = 0;
  std::string_view link_source = "";
};

// A100-40GB, A100-80GB, A100-PCIe-40GB, A100-PCIe-80GB, H100-80GB, H100-PCIe, H100-NVL,
// H200-141GB, L4, T4, RTX-4090, RTX-3090, RTX-A6000, RTX-6000-Ada, RTX-PRO-6000, RTX-PRO-6000-WS,
// L40S, L40, A10G, A10, H20, B200, MI300X, in that order.
const std::vector<DevicePreset>& device_presets();

// A device preset by name (case-insensitive). Throws InputError naming `field` (the option
// the name came from, --device unless said) and listing the known names.
const DevicePreset& find_device_preset(std::string_view name, std::string_view field = kOptDevice);

// The preset whose product name (as nvidia-smi and CUDA name the card) is `product`, case
// aside; nullptr when none is.
const DevicePreset* find_device_preset_by_product(std::string_view product);

// The tool whose figure a preset's total_bytes is: "nvidia-smi memory.total", or for an AMD
// card "rocm-smi VRAM total".
std::string_view device_total_tool(const DevicePreset& preset);

inline constexpr std::int64_t kPartsPerBillion = 1'000'000'000;
// vLLM's default --gpu-memory-utilization, 0.9.
inline constexpr std::int64_t kDefaultGpuMemoryUtilizationPpb = 900'000'000;
// A round default for activations, CUDA graphs and the runtime of a 7-8B model at vLLM's
// default batch of 8,192 tokens; vLLM measures it by profiling, so pass what your engine logs.
inline constexpr std::int64_t kDefaultReserveBytes = std::int64_t{1} << 30;  // 1 GiB

// What the user said about the budget. Every field has a default; the KV budget is either
// given directly (kv_budget_bytes) or derived from a device.
struct BudgetOptions {
  std::string device;                  // device preset name; "" if device_memory_bytes or direct
  std::int64_t device_memory_bytes = 0;  // overrides the preset's total (e.g. torch.cuda.mem_get_info()[1])
  std::int64_t gpu_memory_utilization_ppb = kDefaultGpuMemoryUtilizationPpb;  // (0, 1e9]
  std::int64_t parameter_count = 0;    // overrides the model's; 0: the model's, else estimated
  std::int64_t weight_bits = 0;        // bits per weight; 0: what the model stores
  std::optional<std::int64_t> weights_bytes;   // all weights on all devices; overrides the two above
  std::int64_t reserve_bytes = kDefaultReserveBytes;  // per device
  // vLLM --enable-expert-parallel over this many data-parallel ranks: an MoE model's routed
  // experts are spread over them (each device holds 1/N of them: FusedMoE's local experts,
  // vllm/model_executor/layers/fused_moe/layer.py), everything else is on every rank.
  std::int64_t expert_parallel_ranks = 1;
  std::optional<std::int64_t> kv_budget_bytes;        // per device; skips the subtraction
};

// Every term of the subtraction, per device.
struct Budget {
  bool direct = false;                 // the KV budget was given; the terms below are not used
  std::string device;                  // preset name, or "" when none was named
  std::int64_t device_total_bytes = 0;
  std::string device_total_source;     // "H100-80GB preset (nvidia-smi memory.total)", "--device-memory"
  std::int64_t gpu_memory_utilization_ppb = 0;
  std::int64_t usable_bytes = 0;       // floor(device_total_bytes x utilization)
  std::int64_t parameter_count = 0;    // 0 when weights_bytes was given directly
  std::string parameter_source;        // "published", "estimated from the config", "--params"
  std::int64_t weight_bits = 0;
  std::string weight_bits_source;      // "torch_dtype bfloat16", "quantization_config", "--weight-dtype"
  std::int64_t weights_bytes = 0;      // all weights, all devices: ceil(parameters x bits / 8)
  std::int64_t devices = 1;            // tensor_parallel x pipeline_parallel
  std::int64_t weights_bytes_per_device = 0;  // ceil(weights_bytes / devices)
  std::int64_t reserve_bytes = 0;
  std::int64_t kv_budget_bytes = 0;    // what is left for the KV cache on one device
};

// The model's weights and how they spread over the devices: parameters (from the options,
// the published count, or estimated from the config) times bits per weight (from the
// options, the config's quantization_config, or its torch_dtype), split evenly over
// tensor_parallel x pipeline_parallel devices. Throws InputError when the parameter count
// cannot be known.
struct ModelWeights {
  std::int64_t parameter_count = 0;    // 0 when weights_bytes was given directly
  std::string parameter_source;
  std::int64_t weight_bits = 0;
  std::string weight_bits_source;
  std::int64_t weights_bytes = 0;      // all devices
  std::int64_t devices = 1;
  std::int64_t weights_bytes_per_device = 0;
  // Of those, the routed experts of an MoE model (its parameters' share at the weights' bits:
  // 1 / N of them a device with N expert-parallel ranks, else split over the devices); 0 for
  // a dense model and when the weights were given in bytes (their split is not known).
  std::int64_t routed_expert_bytes_per_device = 0;
  // Of those, the input embedding's table when the LM head does not share it (vocab x hidden
  // at the weights' bits, split over the devices as the rest): a step looks up only its
  // tokens' rows in it (vLLM's VocabParallelEmbedding is a gather), so the roofline does not
  // read it whole. 0 when tied, when the weights were given in bytes, when the parameter
  // count is not above the table and the LM head, or when the config lacks the fields.
  std::int64_t embedding_bytes_per_device = 0;
};
ModelWeights model_weights(const ModelSpec& model, const KvOptions& kv, const BudgetOptions& options);

// The KV budget per device for serving `model` with `kv` on the device `options` names. The
// replay engine calls this with the same options as `kvsim size`. Throws InputError when the
// options are inconsistent (no device and no direct budget, utilisation outside (0, 1]), when
// the weights cannot be known (no published count and the config lacks the fields to estimate
// it), and when the budget comes out <= 0 (the message shows every term).
Budget derive_budget(const ModelSpec& model, const KvOptions& kv, const BudgetOptions& options);

// Parses a utilisation such as "0.9" or "0.875" exactly (never through a double) into parts
// per billion; throws InputError naming `field` unless 0 < value <= 1.
std::int64_t parse_gpu_memory_utilization(std::string_view text, std::string_view field);

// Parts per billion as the shortest exact decimal: 900000000 -> "0.9".
std::string format_ppb(std::int64_t ppb);

// The parameter count of a decoder-only transformer from its config:
//   embeddings V x H (twice unless tied) + final norm H
//   + per layer: attention + MLP + 2 x H of norms, where
//     attention = H x heads x d + 2 x H x kv_heads x d + heads x d x H           (d = head_dim)
//       or, for MLA: [H x q_lora + q_lora + q_lora x heads x (nope + rope) | H x heads x (nope + rope)]
//                    + H x (kv_lora + rope) + kv_lora + kv_lora x heads x (nope + v) + heads x v x H
//     MLP = 3 x H x I (gated), or for MoE layers (routed + shared) x 3 x H x I_expert + routed x H.
// Biases and extra norm vectors are left out (Qwen's QKV bias, Gemma's four norms per layer):
// exact for Llama, Mistral and Phi-3, within 0.01% for the others. Throws InputError naming
// the missing field (hidden_size, intermediate_size, vocab_size) when it cannot estimate.
std::int64_t estimate_parameter_count(const ModelSpec& model);

// The same parameters split the way a token's compute sees them (the roofline's FLOPs):
// `embedding` is looked up, not multiplied; `lm_head` (vocab x hidden, tied or not) multiplies
// only tokens that sample; `per_token` is every other matrix a token goes through: attention
// projections and, in an MoE layer, the router, the shared experts and the
// `experts_per_token` routed experts it is sent to (all of them when that is unknown);
// `total` is estimate_parameter_count (every expert, what the weights' memory holds). Norms
// are in `total` only. Throws as estimate_parameter_count does.
struct ParameterSplit {
  std::int64_t embedding = 0;
  std::int64_t lm_head = 0;
  std::int64_t per_token = 0;
  std::int64_t total = 0;
  std::int64_t routed_experts = 0;  // of `total`, the routed experts of every MoE layer (what
                                    // expert parallelism spreads over the replicas)
};
ParameterSplit split_parameters(const ModelSpec& model);
// Whether `model` has the fields split_parameters needs (hidden and vocabulary sizes, and an
// MLP width or MoE dimensions), so that it splits rather than throws.
bool can_split_parameters(const ModelSpec& model);

// How vLLM's paged cache is laid out on one device.
struct PagedOptions {
  std::int64_t block_tokens = 16;             // --block-size: tokens per block (vLLM default 16)
  std::int64_t max_num_batched_tokens = kVllmMaxNumBatchedTokens;  // vLLM's scheduler chunk; caps sliding windows
};

struct PagedPool {
  std::int64_t block_tokens = 0;
  std::int64_t page_bytes = 0;        // one block of one layer: block_tokens x bytes per layer position
  std::int64_t group_size = 0;        // layers per KV-cache group on this device (the most any holds)
  std::int64_t model_group_size = 0;  // layers per KV-cache group of the whole model (the same
                                      // but under pipeline parallelism, where a stage holds a share)
  std::int64_t cache_groups = 0;      // KV-cache groups (block tables), the same on every device
  std::int64_t padding_layers = 0;    // empty layer slots vLLM pads the groups with
  std::int64_t block_bytes = 0;       // memory behind one block id: page_bytes x group_size
  std::int64_t num_blocks = 0;        // kv_budget_bytes / block_bytes, rounded down
  std::int64_t kv_cache_tokens = 0;   // vLLM's "GPU KV cache size": num_blocks / cache_groups x block_tokens
  bool uniform_page = true;           // false: one block holds every layer's page; an approximation
                                      // (vLLM would re-block or refuse) unless uniform_type
  bool uniform_type = false;          // several layer groups of one attention type (same window):
                                      // vLLM's one group of them, exact (uniform_page is false)
};

// The pool of blocks `kv_budget_bytes` buys on the device `layout` describes, one pipeline stage
// of the model whose layers `model` counts (null: the stage is the whole model). vLLM groups the
// whole model's layers once and projects the groups onto each stage (get_kv_cache_configs,
// _project_kv_cache_groups_to_worker), so every stage has the model's groups, some holding
// fewer of its layers than others or none.
// REQUIRES: options.block_tokens > 0 (else InputError).
PagedPool paged_pool(const KvLayout& layout, std::int64_t kv_budget_bytes, const PagedOptions& options,
                     const KvLayout* model = nullptr);

// Blocks one request of `tokens` tokens can hold at most, summed over the KV-cache groups of
// the stage `layout` of `model` (null: the stage is the whole model), as paged_pool() groups them.
std::int64_t request_blocks(const KvLayout& layout, const PagedPool& pool, std::int64_t tokens,
                            const PagedOptions& options, const KvLayout* model = nullptr);

// The whole model's layout from its stages': each layer group's layers added up over them.
KvLayout whole_model_layout(const std::vector<KvLayout>& stages);

}  // namespace kvsim

#endif  // KVSIM_BUDGET_H_
