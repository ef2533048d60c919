// The engines' start-up memory rules (see kvsim/startup_memory.h and docs/size.md).
#include "kvsim/startup_memory.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>

#include "kvsim/error.h"
#include "kvsim/option_names.h"
#include "kvsim/units.h"

namespace kvsim {
namespace {

__extension__ typedef __int128 Wide;

constexpr std::int64_t kMiB = std::int64_t{1} << 20;

// vLLM's fused MoE kernel works through the batch in chunks of VLLM_FUSED_MOE_CHUNK_SIZE
// tokens (vllm/envs.py, default 32768), so its intermediate caches stop growing there.
constexpr std::int64_t kFusedMoeChunkTokens = 32768;

// V0 enables chunked prefill by default for max_model_len above this (arg_utils.py
// use_long_context).
constexpr std::int64_t kVllmV0ChunkedPrefillAboveTokens = 32768;

// Non-torch memory a profile run adds (vLLM's non_torch_increase). No closed form in vLLM's
// code: CUDA loads kernel modules lazily (CUDA_MODULE_LOADING=LAZY) and libraries allocate
// outside torch's allocator. Assumption: 100 MiB on one device, the order vLLM 0.7 logs show
// at tensor parallelism 1 (0.05-0.11 GiB, docs/size.md); with tensor or expert parallelism
// (whose all-to-all also goes through NCCL communicators), NCCL's buffers in addition:
// NCCL_BUFFSIZE (4 MiB, NCCL's documented default) for each of the two directions of its up
// to 32 channels (NCCL_MAX_NCHANNELS), 256 MiB.
constexpr std::int64_t kNonTorchBytes = 100 * kMiB;
constexpr std::int64_t kNcclBufferBytes = 4 * kMiB * 2 * 32;
// vLLM 0.6.4 and earlier, and the v1 engine of 0.7.0 and 0.7.1, subtracted all non-torch
// memory, the CUDA context included.
// Assumption: 384 MiB, the context measured on an RTX 4090 in vllm-project/vllm#12059 (it
// grows with the device: more on an H100, by a figure not documented there).
constexpr std::int64_t kCudaContextBytes = 384 * kMiB;

// PyTorch allocates cuBLAS's workspace through its caching allocator at the first matmul, and
// keeps it (aten/src/ATen/cuda/CublasHandlePool.cpp parseChosenWorkspaceSize, the default of
// CUBLAS_WORKSPACE_CONFIG): ":4096:8", 32 MiB, on compute capability 9.0 (Hopper), else
// ":4096:2:16:8", 4,096 KiB x 2 + 16 KiB x 8. That is the rule of the PyTorch releases vLLM
// 0.6 to 0.10 ran on; later ones also give Blackwell 32 MiB (not modelled).
constexpr std::int64_t kCublasWorkspaceHopperBytes = 4096 * 8 * 1024;
constexpr std::int64_t kCublasWorkspaceBytes = 4096 * 1024 * 2 + 16 * 1024 * 8;

std::int64_t mul(std::int64_t a, std::int64_t b) { return checked_mul(a, b, "start-up bytes"); }
std::int64_t add(std::int64_t a, std::int64_t b) { return checked_add(a, b, "start-up bytes"); }

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string fraction_name(ServingEngine e) {
  switch (e) {
    case ServingEngine::vllm:
    case ServingEngine::vllm_v0:
    case ServingEngine::vllm_v0_legacy:
    case ServingEngine::vllm_v1_early: return "gpu_memory_utilization";
    case ServingEngine::sglang: return "mem_fraction_static";
    case ServingEngine::trtllm: return "free_gpu_memory_fraction";
  }
  return "";
}

std::int64_t apply_ppb(std::int64_t bytes, std::int64_t ppb) {
  return static_cast<std::int64_t>(Wide{bytes} * ppb / kPartsPerBillion);
}

// The bytes the engine may use of `total`. vLLM's v1 worker rounds up:
// vllm/v1/worker/utils.py request_memory, math.ceil(total_memory x gpu_memory_utilization),
// a product in double precision (the fraction, read as a decimal, is the double nearest it,
// as Python's float() gives; a total below 2^53 converts exactly). The others keep the
// product whole or subtract from it before rounding down, which the floor gives.
std::int64_t usable_bytes(ServingEngine engine, std::int64_t total, std::int64_t ppb) {
  if (engine != ServingEngine::vllm) return apply_ppb(total, ppb);
  const double fraction = static_cast<double>(ppb) / static_cast<double>(kPartsPerBillion);
  return static_cast<std::int64_t>(std::ceil(static_cast<double>(total) * fraction));
}

}  // namespace

std::string_view serving_engine_name(ServingEngine engine) {
  switch (engine) {
    case ServingEngine::vllm: return "vllm";
    case ServingEngine::vllm_v0: return "vllm-v0";
    case ServingEngine::vllm_v0_legacy: return "vllm-v0.6.4";
    case ServingEngine::vllm_v1_early: return "vllm-v0.7.1";
    case ServingEngine::sglang: return "sglang";
    case ServingEngine::trtllm: return "trtllm";
  }
  return "";
}

ServingEngine parse_serving_engine(std::string_view text, std::string_view field) {
  const std::string key = lower(text);
  for (ServingEngine e : {ServingEngine::vllm, ServingEngine::vllm_v0, ServingEngine::vllm_v0_legacy,
                          ServingEngine::vllm_v1_early, ServingEngine::sglang, ServingEngine::trtllm}) {
    if (key == serving_engine_name(e)) return e;
  }
  throw InputError(Location{"", 0, std::string(field)},
                   "expected vllm, vllm-v0, vllm-v0.6.4, vllm-v0.7.1, sglang or trtllm, got \"" + std::string(text) +
                       "\"");
}

std::int64_t engine_device_total(const BudgetOptions& budget, std::string& source) {
  if (budget.device_memory_bytes > 0) {
    source = kOptDeviceMemory;
    return budget.device_memory_bytes;
  }
  if (budget.device.empty()) {
    throw InputError(Location{"", 0, kOptDevice},
                     std::string("the start-up budget needs a device: give ") + kOptDevice + " or " + kOptDeviceMemory);
  }
  const DevicePreset& d = find_device_preset(budget.device);
  if (d.cuda_total_bytes > 0) {
    source = std::string(d.name) + " preset (CUDA's total, torch.cuda.mem_get_info()[1])";
    return d.cuda_total_bytes;
  }
  source = std::string(d.name) + " preset (" + std::string(device_total_tool(d)) +
           ": no CUDA total documented for it; pass " + kOptDeviceMemory + ")";
  return d.total_bytes;
}

std::int64_t cublas_workspace_bytes(const BudgetOptions& budget, std::string& rule) {
  if (!budget.device.empty() && find_device_preset(budget.device).compute_capability / 10 == 9) {
    rule = "cuBLAS workspace 32 MiB (:4096:8, compute capability 9.0)";
    return kCublasWorkspaceHopperBytes;
  }
  rule = budget.device.empty()
             ? std::string("cuBLAS workspace 8.125 MiB (:4096:2:16:8; no ") + kOptDevice + ", so not Hopper's 32 MiB)"
             : std::string("cuBLAS workspace 8.125 MiB (:4096:2:16:8)");
  return kCublasWorkspaceBytes;
}

std::int64_t default_memory_fraction_ppb(ServingEngine engine, std::int64_t tp) {
  switch (engine) {
    case ServingEngine::vllm:
    case ServingEngine::vllm_v0:
    case ServingEngine::vllm_v0_legacy:
    case ServingEngine::vllm_v1_early: return kDefaultGpuMemoryUtilizationPpb;  // CacheConfig.gpu_memory_utilization
    case ServingEngine::sglang:
      // python/sglang/srt/server_args.py (v0.4): mem_fraction_static by tp_size.
      if (tp >= 16) return 790'000'000;
      if (tp >= 8) return 810'000'000;
      if (tp >= 4) return 850'000'000;
      if (tp >= 2) return 870'000'000;
      return 880'000'000;
    case ServingEngine::trtllm: return 900'000'000;  // KvCacheConfig.free_gpu_memory_fraction
  }
  return kDefaultGpuMemoryUtilizationPpb;
}

std::int64_t vllm_cuda_graph_sizes(ServingEngine engine, std::int64_t max_num_seqs) {
  // v1 (vllm/config/compilation.py, as vLLM 0.11 logs its cudagraph_capture_sizes): 1, 2, 4
  // and every multiple of 8 up to min(2 x max_num_seqs, 512); V0 (vllm/worker/model_runner.py
  // _BATCH_SIZES_TO_CAPTURE): 1, 2, 4 and every multiple of 8 up to min(max_num_seqs, 256);
  // vllm-v0.7.1 (vllm/config.py VllmConfig._set_cudagraph_sizes, v1 branch): 1, 2, 4 and
  // range(8, 513, 8), whatever max_num_seqs.
  const std::int64_t largest = engine == ServingEngine::vllm_v1_early ? 512
                               : is_vllm_v0(engine)                   ? std::min<std::int64_t>(max_num_seqs, 256)
                                                                      : 2 * std::min<std::int64_t>(max_num_seqs, 256);  // 2 x max_num_seqs, capped before it can overflow
  std::int64_t count = 0;
  for (std::int64_t s : {1, 2, 4}) count += s <= largest ? 1 : 0;
  return count + largest / 8;
}

// vLLM's sampler on the profile run's dummy requests (temperature 0.5, top_p, top_k vocab - 1,
// so top-k/top-p runs) holds at its peak, per logit of the last stage:
// v1, PyTorch-native top-k/top-p (vllm/v1/worker/gpu_model_runner.py _dummy_sampler_run,
//   vllm/v1/sample/sampler.py, vllm/v1/sample/ops/topk_topp_sampler.py apply_top_k_top_p):
//   the logits in the model dtype (compute_logits), their float32 copy, the sorted values
//   (float32) and their indices (int64), the softmax of the sorted values (float32, the
//   cumulative sum written in place), the top-p mask (bool) and the scattered result
//   (float32), alive together at the scatter:                       dtype + 4+4+8+4+1+4 = dtype + 25
// v1 with FlashInfer: the logits, their float32 copy, the top-k masked logits and the
//   probabilities flashinfer samples from (float32 each):            dtype + 12
// V0 (vllm/model_executor/layers/sampler.py; dummy requests with top_p 0.99, top_k vocab - 1):
//   the logits and their float32 copy, the sort (float32 + int64), the sorted softmax and the
//   scattered result, then the probabilities, the logprobs and the exponential noise of
//   _multinomial (float32 each):                                    dtype + 36
std::int64_t sampler_bytes_per_logit(ServingEngine engine, bool flashinfer, std::int64_t dtype_bytes) {
  if (is_vllm_v0(engine)) return dtype_bytes + 36;
  return dtype_bytes + (flashinfer ? 12 : 25);
}

// vllm-v0.7.1's profile_run (vllm/v1/worker/gpu_model_runner.py at 4078052f, the commit of
// vllm#12569; the same from 0.7.0's release to 0.7.1's) runs no sampler ("TODO(woosuk):
// Consider the memory usage of the sampler") but calls compute_logits on the hidden states of
// all max_num_batched_tokens tokens. LogitsProcessor._get_logits
// (vllm/model_executor/layers/logits_processor.py) keeps the logits in the model dtype and,
// under V1, all-gathers them across tensor parallelism: GroupCoordinator.all_gather
// (vllm/distributed/parallel_state.py) returns its input at tp 1, else allocates the gathered
// tensor and copies it once more in the final reshape (movedim then reshape of the last dim),
// with this device's slice still alive. Per token: the hidden states (H) plus the padded vocab
// V, or V / tp + 2 V with tensor parallelism, all in the model dtype.
std::int64_t all_token_logits_peak_bytes(const ModelSpec& m, const KvOptions& kv, std::int64_t tokens,
                                         std::int64_t b) {
  const std::int64_t vocab = padded_vocab(m.vocab_size);
  const std::int64_t tp = kv.tensor_parallel;
  const std::int64_t logits = tp > 1 ? add(ceil_div(vocab, tp), mul(2, vocab)) : vocab;
  return mul(mul(tokens, add(m.hidden_size, logits)), b);
}

// The activations one device holds at the peak of a forward pass of `tokens` tokens, in the
// model's dtype, per token: the residual stream, the layer's normalised input and its output
// (3 x hidden) plus the larger of
//   attention: q, k, v (heads on this device) and the attention output;
//   dense MLP: gate_up (2 x intermediate / tp) and the activated half (intermediate / tp),
//     alive together in vLLM's MergedColumnParallelLinear -> SiluAndMul;
//   MoE: router logits (experts) and, for at most 32768 tokens at a time, fused_moe's
//     caches top_k x (max(2 x expert_intermediate / tp, hidden) + expert_intermediate / tp)
//     (vllm/model_executor/layers/fused_moe/fused_moe.py: cache13 shared by caches 1 and 3,
//     cache2), plus the shared experts' MLP and the top-k weights and ids (8 bytes each).
std::int64_t forward_peak_bytes(const ModelSpec& m, const KvOptions& kv, std::int64_t tokens, std::int64_t b) {
  const std::int64_t tp = kv.tensor_parallel;
  const std::int64_t hidden = m.hidden_size;
  std::int64_t attention = 0;
  if (m.mla) {
    const MlaDims& d = *m.mla;
    const std::int64_t heads = m.num_attention_heads / tp;
    const std::int64_t qk = d.qk_nope_head_dim + d.qk_rope_head_dim;
    // q, the compressed latent, kv_b's output, the assembled k, and the attention output.
    attention = heads * qk + d.kv_lora_rank + d.qk_rope_head_dim + heads * (d.qk_nope_head_dim + d.v_head_dim) +
                heads * qk + heads * d.v_head_dim;
  } else {
    const std::int64_t q = m.num_attention_heads / tp * m.head_dim;
    const std::int64_t kvh = kv_heads_per_device(m.num_key_value_heads, m.num_attention_heads, tp) * m.head_dim;
    attention = q + 2 * kvh + q;
  }
  std::int64_t per_token = std::max<std::int64_t>(attention, m.intermediate_size > 0 && (!m.moe || m.moe->dense_layers > 0)
                                                                 ? 3 * (m.intermediate_size / tp)
                                                                 : 0);
  std::int64_t bytes = 0;
  if (m.moe) {
    const MoeDims& e = *m.moe;
    const std::int64_t inter = e.expert_intermediate_size / tp;
    const std::int64_t top_k = e.experts_per_token > 0 ? e.experts_per_token : e.routed_experts;
    const std::int64_t chunk = std::min(tokens, kFusedMoeChunkTokens);
    const std::int64_t per_token_moe = e.routed_experts + 3 * e.shared_experts * inter;
    const std::int64_t moe = add(mul(mul(tokens, add(3 * hidden, per_token_moe)), b),
                                 add(mul(mul(mul(chunk, top_k), std::max(2 * inter, hidden) + inter), b),
                                     mul(mul(tokens, top_k), 8)));
    bytes = moe;
  }
  const std::int64_t dense = mul(mul(tokens, add(3 * hidden, per_token)), b);
  return std::max(bytes, dense);
}

StartupMemory startup_memory(const ModelSpec& model, const KvOptions& kv, const EngineSettings& settings,
                             const BudgetOptions& budget) {
  StartupMemory s;
  s.engine = settings.engine;
  s.settings = settings;
  s.device_total_bytes = engine_device_total(budget, s.device_total_source);
  s.memory_fraction_ppb = settings.memory_fraction_ppb > 0 ? settings.memory_fraction_ppb
                                                           : default_memory_fraction_ppb(settings.engine, kv.tensor_parallel);
  if (s.memory_fraction_ppb <= 0 || s.memory_fraction_ppb > kPartsPerBillion) {
    throw InputError(Location{"", 0, kOptGpuMemoryUtilization}, "expected a fraction in (0, 1]");
  }
  s.max_model_len = settings.max_model_len > 0 ? settings.max_model_len : context_length(model);
  if (settings.max_num_batched_tokens < 0 || settings.max_num_seqs <= 0) {
    throw InputError(Location{"", 0, kOptMaxNumBatchedTokens}, "expected a positive number of tokens");
  }
  if (s.settings.max_num_batched_tokens == 0) {
    // vllm/config.py SchedulerConfig: without chunked prefill (V0's default up to 32K
    // tokens) one step must hold a whole prompt: max(max_model_len, 2048). V0 turns chunked
    // prefill on by itself above 32K (vllm/engine/arg_utils.py create_engine_config:
    // max_model_len > 32768 on CUDA, no sliding window, no speculative decoding, LoRA or
    // prompt adapters; checked at vLLM 14ecab5b, 2025-02-11, 0.7.2), and then the step is
    // SchedulerConfig's 2048.
    const bool sliding = std::any_of(model.layer_window_tokens.begin(), model.layer_window_tokens.end(),
                                     [](std::int64_t w) { return w > 0; });
    const bool v0_chunked = s.max_model_len > kVllmV0ChunkedPrefillAboveTokens && !sliding;
    s.settings.max_num_batched_tokens =
        is_vllm_v0(settings.engine)
            ? (v0_chunked ? kVllmMinNumBatchedTokensUnchunked : std::max(s.max_model_len, kVllmMinNumBatchedTokensUnchunked))
            : kVllmMaxNumBatchedTokens;
  }
  const std::int64_t batch = s.settings.max_num_batched_tokens;
  s.cuda_graphs = is_vllm(settings.engine) && !settings.enforce_eager
                      ? vllm_cuda_graph_sizes(settings.engine, settings.max_num_seqs)
                      : 0;
  const std::int64_t b = settings.weights.dtype_bytes;
  std::vector<DeviceWeights> weights;
  if (settings.weights_bytes) {
    // Given as a total: spread evenly, as derive_budget does.
    const std::int64_t devices = mul(kv.tensor_parallel, kv.pipeline_parallel);
    for (std::int64_t st = 0; st < kv.pipeline_parallel; ++st) {
      DeviceWeights d;
      d.stage = st;
      d.bytes = ceil_div(*settings.weights_bytes, devices);
      d.groups.push_back({"all weights", 0, d.bytes, std::string(kOptWeightsBytes) + " / " + std::to_string(devices) + " devices"});
      weights.push_back(d);
    }
  } else {
    weights = device_weights(model, kv, settings.weights);
  }
  const std::string fname = fraction_name(settings.engine);
  const std::int64_t usable = usable_bytes(settings.engine, s.device_total_bytes, s.memory_fraction_ppb);
  const std::int64_t requests = std::min(settings.max_num_seqs, batch);
  for (std::size_t i = 0; i < weights.size(); ++i) {
    StartupStage st;
    st.stage = static_cast<std::int64_t>(i);
    st.weights = weights[i];
    const bool last = i + 1 == weights.size();
    st.terms.push_back({"device total", s.device_total_bytes, "", s.device_total_source});
    switch (settings.engine) {
      case ServingEngine::vllm:
      case ServingEngine::vllm_v0:
      case ServingEngine::vllm_v0_legacy:
      case ServingEngine::vllm_v1_early: {
        const bool early = settings.engine == ServingEngine::vllm_v1_early;
        st.forward_peak_bytes = forward_peak_bytes(model, kv, batch, b);
        if (last && early) {
          st.sampler_peak_bytes = all_token_logits_peak_bytes(model, kv, batch, b);
        } else if (last) {
          // The last hidden states stay alive while the sampler runs.
          st.sampler_peak_bytes =
              add(mul(mul(batch, model.hidden_size), b),
                  mul(mul(requests, padded_vocab(model.vocab_size)), sampler_bytes_per_logit(settings.engine, settings.flashinfer_sampler, b)));
        }
        st.activation_peak_bytes = std::max(st.forward_peak_bytes, st.sampler_peak_bytes);
        // Tensors that stay allocated through the profile run besides the weights: cuBLAS's
        // workspace, and in the first v1 engine the model runner's inputs_embeds buffer, which
        // its __init__ allocated for every model (max_num_batched_tokens x hidden, model
        // dtype; later versions only for multimodal models).
        std::string buffers_rule;
        st.buffer_bytes = cublas_workspace_bytes(budget, buffers_rule);
        if (early) {
          const std::int64_t embeds = mul(mul(batch, model.hidden_size), b);
          st.buffer_bytes = add(st.buffer_bytes, embeds);
          buffers_rule += " + inputs_embeds " + std::to_string(batch) + " x " + std::to_string(model.hidden_size) +
                          " x " + std::to_string(b) + " = " + with_commas(embeds);
        }
        // Both subtracted all non-torch memory: vllm/worker/worker.py (0.6.4) and
        // vllm/v1/worker/gpu_worker.py determine_available_memory (0.7.1): device used after
        // the profile run minus torch's allocated bytes.
        const bool legacy = settings.engine == ServingEngine::vllm_v0_legacy || early;
        const bool nccl = kv.tensor_parallel > 1 || settings.weights.expert_parallel_ranks > 1;
        st.non_torch_bytes = add(legacy ? kCudaContextBytes : kNonTorchBytes, nccl ? kNcclBufferBytes : 0);
        st.terms.push_back({"x " + fname + " " + format_ppb(s.memory_fraction_ppb), usable,
                            "requested memory = total x utilisation",
                            early ? "vllm/v1/worker/gpu_worker.py (0.7.1) determine_available_memory: "
                                    "total_gpu_memory x gpu_memory_utilization"
                                  : "vllm/v1/worker/gpu_worker.py (init_device: requested_memory)"});
        st.terms.push_back({"- weights", st.weights.bytes, "tensor by tensor (see below)",
                            "vllm/model_executor/model_loader; quantization/*.py create_weights"});
        const char* activation_source =
            settings.engine == ServingEngine::vllm
                ? "vllm/v1/worker/gpu_model_runner.py profile_run (_dummy_run, _dummy_sampler_run); "
                  "torch_peak_increase in vllm/utils memory_profiling"
            : early ? "vllm/v1/worker/gpu_model_runner.py (0.7.1) profile_run: _dummy_run(max_num_tokens), then "
                      "compute_logits of every token, no sampler; torch's allocated_bytes.all.peak"
                    : "vllm/worker/model_runner.py profile_run (max_num_seqs dummy sequences, sampled); "
                      "torch_peak_increase in vllm/utils memory_profiling";
        st.terms.push_back(
            {"- activation peak", st.activation_peak_bytes,
             "max(forward of " + std::to_string(batch) + " tokens: " + with_commas(st.forward_peak_bytes) +
                 (early ? ", hidden states and logits of all " + std::to_string(batch) + " tokens: "
                        : ", sampler for " + std::to_string(requests) + " requests: ") +
                 with_commas(st.sampler_peak_bytes) + ")",
             activation_source});
        st.terms.push_back({"- persistent buffers", st.buffer_bytes, buffers_rule,
                            early ? "torch CublasHandlePool.cpp parseChosenWorkspaceSize; vllm/v1/worker/"
                                    "gpu_model_runner.py (0.7.1) GPUModelRunner.__init__ inputs_embeds"
                                  : "torch CublasHandlePool.cpp parseChosenWorkspaceSize (allocated at the profile "
                                    "run's first matmul)"});
        st.terms.push_back({"- non-torch increase", st.non_torch_bytes,
                            std::string(legacy ? "the CUDA context, 384 MiB" : "100 MiB") +
                                (nccl ? " + NCCL buffers 256 MiB" : ""),
                            "assumption (no closed form in vLLM; docs/size.md)"});
        st.kv_budget_bytes = usable - st.weights.bytes - st.activation_peak_bytes - st.buffer_bytes - st.non_torch_bytes;
        st.terms.push_back({"  (CUDA graphs: " + std::to_string(s.cuda_graphs) + " sizes)", 0,
                            s.cuda_graphs > 0 ? "captured after the KV cache is allocated: not subtracted"
                                              : "enforce_eager: none",
                            "vllm/v1/worker/gpu_worker.py compile_or_warm_up_model"});
        break;
      }
      case ServingEngine::sglang: {
        // rest = free after weights - total x (1 - mem_fraction_static) = total x f - weights
        st.terms.push_back({"x " + fname + " " + format_ppb(s.memory_fraction_ppb), usable,
                            "free memory before weights x mem_fraction_static",
                            "python/sglang/srt/model_executor/model_runner.py profile_max_num_token"});
        st.terms.push_back({"- weights", st.weights.bytes, "tensor by tensor (see below)",
                            "the CUDA context (outside both) is not modelled"});
        st.kv_budget_bytes = usable - st.weights.bytes;
        break;
      }
      case ServingEngine::trtllm: {
        st.forward_peak_bytes = forward_peak_bytes(model, kv, batch, b);
        st.activation_peak_bytes = st.forward_peak_bytes;
        st.terms.push_back({"- weights", st.weights.bytes, "tensor by tensor (see below)", ""});
        st.terms.push_back({"- activation peak", st.activation_peak_bytes,
                            "forward of " + std::to_string(batch) + " tokens (max_num_tokens)",
                            "tensorrt_llm/_torch/pyexecutor/_util.py estimate_max_kv_cache_tokens"});
        const std::int64_t free_after = s.device_total_bytes - st.weights.bytes - st.activation_peak_bytes;
        st.kv_budget_bytes = free_after > 0 ? apply_ppb(free_after, s.memory_fraction_ppb) : free_after;
        st.terms.push_back({"x " + fname + " " + format_ppb(s.memory_fraction_ppb) + " of what is free",
                            st.kv_budget_bytes, "", "tensorrt_llm/llmapi KvCacheConfig.free_gpu_memory_fraction"});
        break;
      }
    }
    st.terms.push_back({"= KV budget", st.kv_budget_bytes, "", ""});
    s.stages.push_back(std::move(st));
  }
  for (std::size_t i = 1; i < s.stages.size(); ++i) {
    if (s.stages[i].kv_budget_bytes < s.stages[s.binding_stage].kv_budget_bytes) s.binding_stage = i;
  }
  s.kv_budget_bytes = s.stages[s.binding_stage].kv_budget_bytes;
  return s;
}

void take_weight_options(EngineSettings& settings, const BudgetOptions& budget, std::int64_t tensor_parallel) {
  if (budget.weights_bytes) settings.weights_bytes = budget.weights_bytes;
  if (budget.weight_bits > 0) settings.weights.override_bits = budget.weight_bits;
  if (budget.expert_parallel_ranks > 1) {
    settings.weights.expert_parallel_ranks = mul(budget.expert_parallel_ranks, tensor_parallel);
  }
}

Budget startup_budget(const StartupMemory& s) {
  const StartupStage& st = s.stages[s.binding_stage];
  Budget b;
  b.device_total_bytes = s.device_total_bytes;
  b.device_total_source = s.device_total_source;
  b.gpu_memory_utilization_ppb = s.memory_fraction_ppb;
  b.usable_bytes = usable_bytes(s.engine, s.device_total_bytes, s.memory_fraction_ppb);
  b.parameter_source = "tensor by tensor";
  b.weights_bytes_per_device = st.weights.bytes;
  b.reserve_bytes = st.activation_peak_bytes + st.buffer_bytes + st.non_torch_bytes;
  b.kv_budget_bytes = st.kv_budget_bytes;
  if (b.kv_budget_bytes <= 0) {
    std::string terms;
    for (const auto& t : st.terms) terms += "; " + t.name + " " + with_commas(t.bytes);
    throw InputError(Location{"", 0, "KV budget"},
                     "nothing is left for the KV cache at start-up (" + std::string(serving_engine_name(s.engine)) +
                         ", stage " + std::to_string(st.stage) + terms + " bytes). Use more devices (" + kOptTp + ", " +
                         kOptPp + "), a larger device, a higher " + fraction_name(s.engine) + ", or fewer " +
                         kOptMaxNumBatchedTokens);
  }
  return b;
}

}  // namespace kvsim
