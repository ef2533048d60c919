// The start-up budget term by term (kvsim/weights.h, kvsim/startup_memory.h): every expected
// number is worked by hand in the comments, from the rules docs/size.md cites.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_util.h"
#include "kvsim/error.h"
#include "kvsim/model.h"
#include "kvsim/startup_memory.h"
#include "kvsim/weights.h"

using namespace kvsim;
using kvsim::test::run_cli;

namespace {

// A tiny Llama: hidden 256, 4 heads of 64 (2 KV heads), intermediate 512, 2 layers, vocab
// 1000 (padded to 1024), untied, 2048 positions. `quant` is a quantization_config or "".
ModelSpec tiny(const std::string& quant) {
  std::string json = R"({"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
    "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1000,
    "max_position_embeddings": 2048, "tie_word_embeddings": false, "torch_dtype": "float16")";
  if (!quant.empty()) json += ", \"quantization_config\": " + quant;
  return parse_hf_config(json + "}", "tiny.json");
}

std::int64_t group_bytes(const DeviceWeights& d, const std::string& name) {
  for (const auto& g : d.groups) {
    if (g.name == name) return g.bytes;
  }
  return -1;
}

std::string startup_file(const std::string& name) { return std::string(KVSIM_SOURCE_DIR) + "/tests/data/startup/" + name; }

}  // namespace

TEST_CASE("AWQ weights count packed values, fp16 scales and packed zeros per group, and embeddings and head stay 16-bit") {
  const ModelSpec m = tiny(R"({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": true})");
  REQUIRE(m.quantization);
  CHECK(m.quantization->method == WeightQuantMethod::awq);
  const auto w = device_weights(m, KvOptions{}, WeightServing{});
  REQUIRE(w.size() == 1);
  // embeddings: 1024 padded rows x 256 x 2 bytes = 524,288; the LM head the same, unquantised.
  CHECK(group_bytes(w[0], "embeddings") == 524'288);
  CHECK(group_bytes(w[0], "lm_head") == 524'288);
  // attention, per layer: qkv K=256, N=(4 + 2 x 2) x 64 = 512: qweight 256 x 512 / 2 = 65,536,
  // 2 groups of 128: scales 2 x 512 x 2 = 2,048, zeros 2 x 512 / 2 = 512 -> 68,096;
  // o_proj K=256, N=256: 32,768 + 1,024 + 256 = 34,048. Two layers: 2 x 102,144 = 204,288.
  CHECK(group_bytes(w[0], "attention") == 204'288);
  // mlp, per layer: gate_up K=256, N=1,024: 131,072 + 4,096 + 1,024 = 136,192; down K=512,
  // N=256, 4 groups: 65,536 + 2,048 + 512 = 68,096. Two layers: 408,576.
  CHECK(group_bytes(w[0], "mlp") == 408'576);
  // norms: (2 x 256 per layer x 2 layers + 256 final) x 2 bytes = 2,560.
  CHECK(group_bytes(w[0], "norms") == 2'560);
  // rotary cos/sin cache: 2,048 positions x 64 x 2 bytes = 262,144.
  CHECK(group_bytes(w[0], "rotary cache") == 262'144);
  CHECK(w[0].bytes == 524'288 + 524'288 + 204'288 + 408'576 + 2'560 + 262'144);
}

TEST_CASE("w8a8, fp8 block and GPTQ scales follow their layouts") {
  // compressed-tensors int8 per channel: qkv 256 x 512 + 512 x 4 = 133,120; o_proj 65,536 +
  // 256 x 4 = 66,560; two layers: 399,360. The ignored lm_head stays 16-bit.
  const ModelSpec w8 = tiny(R"({"quant_method": "compressed-tensors", "ignore": ["lm_head"],
      "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "int", "strategy": "channel"}}}})");
  REQUIRE(w8.quantization);
  CHECK(w8.weight_bits == 8);
  const auto a = device_weights(w8, KvOptions{}, WeightServing{});
  CHECK(group_bytes(a[0], "attention") == 2 * (133'120 + 66'560));
  CHECK(group_bytes(a[0], "lm_head") == 524'288);

  // fp8 with 128 x 128 blocks: qkv 131,072 + ceil(512/128) x ceil(256/128) x 4 = 131,104;
  // o_proj 65,536 + 2 x 2 x 4 = 65,552; two layers: 393,312.
  const ModelSpec f8 = tiny(R"({"quant_method": "fp8", "weight_block_size": [128, 128]})");
  const auto b = device_weights(f8, KvOptions{}, WeightServing{});
  CHECK(group_bytes(b[0], "attention") == 2 * (131'104 + 65'552));

  // GPTQ 4-bit per channel (group_size -1): qkv 65,536 + one group: 512 x 2 + 512 / 2 = 66,816;
  // o_proj 32,768 + 256 x 2 + 128 = 33,408; two layers: 200,448. "lm_head": true quantises the
  // head: 131,072 + 1,024 x 2 + 512 = 133,632.
  const ModelSpec gq = tiny(R"({"quant_method": "gptq", "bits": 4, "group_size": -1, "lm_head": true})");
  const auto c = device_weights(gq, KvOptions{}, WeightServing{});
  CHECK(group_bytes(c[0], "attention") == 2 * (66'816 + 33'408));
  CHECK(group_bytes(c[0], "lm_head") == 133'632);
}

TEST_CASE("tensor parallelism shards every projection and the padded vocabulary") {
  KvOptions kv;
  kv.tensor_parallel = 2;
  const auto w = device_weights(tiny(""), kv, WeightServing{});
  // embeddings 512 rows x 256 x 2 = 262,144; attention per layer: qkv 256 x (2 + 2 x 1) x 64
  // x 2 = 131,072, o_proj 128 x 256 x 2 = 65,536; two layers 393,216.
  CHECK(group_bytes(w[0], "embeddings") == 262'144);
  CHECK(group_bytes(w[0], "attention") == 393'216);
  CHECK(padded_vocab(1000) == 1024);
  CHECK(padded_vocab(128256) == 128256);
  CHECK(padded_vocab(151655) == 151680);
}

TEST_CASE("expert parallelism gives each rank whole experts, the first ranks one more") {
  // A tiny MoE: hidden 256, 2 layers, 10 routed experts of intermediate 128 and one shared
  // expert of the same width (model_type qwen2_moe: shared_expert_intermediate_size 128). One
  // whole expert is gate and up 256 x 2 x 128 + down 128 x 256 = 98,304 parameters, 196,608
  // bytes in fp16; its slice under tensor parallelism 2 half that, 98,304.
  const ModelSpec moe = parse_hf_config(R"({"model_type": "qwen2_moe", "hidden_size": 256,
    "intermediate_size": 512, "moe_intermediate_size": 128, "shared_expert_intermediate_size": 128,
    "num_experts": 10, "num_experts_per_tok": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 2048,
    "tie_word_embeddings": false, "torch_dtype": "float16"})", "moe.json");
  REQUIRE(moe.moe);
  REQUIRE(moe.moe->routed_experts == 10);
  REQUIRE(moe.moe->shared_experts == 1);
  const std::int64_t router = 10 * 256 * 2;  // the gate, 10 x 256 fp16, on every device
  KvOptions kv;
  WeightServing serving;
  // No expert parallelism, one device: 11 whole experts a layer.
  CHECK(group_bytes(device_weights(moe, kv, serving)[0], "experts") == 2 * (11 * 196'608 + router));
  // Three ranks (vLLM's determine_expert_map: 10 / 3 = 3 each, the first 10 % 3 = 1 rank one
  // more): rank 0 holds 4 routed experts and the shared one.
  serving.expert_parallel_ranks = 3;
  CHECK(group_bytes(device_weights(moe, kv, serving)[0], "experts") == 2 * (5 * 196'608 + router));
  // Tensor parallelism 2 with expert parallelism over 2 ranks: 5 whole routed experts, and
  // the shared expert sliced in two.
  kv.tensor_parallel = 2;
  serving.expert_parallel_ranks = 2;
  CHECK(group_bytes(device_weights(moe, kv, serving)[0], "experts") == 2 * (5 * 196'608 + 98'304 + router));
  // Without it: a slice of every expert.
  serving.expert_parallel_ranks = 1;
  CHECK(group_bytes(device_weights(moe, kv, serving)[0], "experts") == 2 * (11 * 98'304 + router));
}

TEST_CASE("kvsim size --expert-ranks: each device holds its share of the routed experts") {
  // Qwen3-30B-A3B: 48 layers of 128 routed experts, each gate, up and down of 2,048 x 768:
  // 3 x 2,048 x 768 x 2 bytes = 9,437,184 bytes. Over 2 ranks a device holds 64 a layer, so
  // 64 x 48 x 9,437,184 = 28,991,029,248 bytes fewer; and NCCL's 256 MiB (268,435,456) of
  // buffers join the non-torch term, as with tensor parallelism. The KV budget grows by
  // 28,991,029,248 - 268,435,456 = 28,722,593,792.
  const auto size = [](std::vector<std::string> extra) {
    std::vector<std::string> args = {"size", "--model", "qwen3-30b-a3b", "--engine", "vllm", "--device",
                                     "RTX-PRO-6000", "--max-num-seqs", "128", "--max-num-batched-tokens", "2048",
                                     "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_cli(args);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return nlohmann::json::parse(r.out)["budget"];
  };
  const auto whole = size({});
  const auto spread = size({"--expert-ranks", "2"});
  CHECK(whole["weights_bytes_per_device"].get<std::int64_t>() - spread["weights_bytes_per_device"].get<std::int64_t>() ==
        28'991'029'248);
  CHECK(spread["kv_budget_bytes"].get<std::int64_t>() - whole["kv_budget_bytes"].get<std::int64_t>() == 28'722'593'792);
  // Without --engine, replay's flat rule counts the ranks beyond tensor parallelism: 4 ranks
  // at --tp 2 are 2 data-parallel ranks. Its 28,991,029,248 routed parameters (budget_test),
  // 16-bit, half of them on another rank: (61,064,220,672 - 28,991,029,248) / 2 devices =
  // 16,036,595,712 bytes a device. A rank count tensor parallelism does not divide is refused.
  auto r = run_cli({"size", "--model", "qwen3-30b-a3b", "--device", "RTX-PRO-6000", "--tp", "2", "--expert-ranks", "4",
                    "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK(nlohmann::json::parse(r.out)["budget"]["weights_bytes_per_device"] == 16'036'595'712);
  r = run_cli({"size", "--model", "qwen3-30b-a3b", "--device", "RTX-PRO-6000", "--tp", "2", "--expert-ranks", "3"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("multiple of --tp"));
  // Nothing to spread, or nothing it would change: said, not ignored.
  r = run_cli({"size", "--model", "llama-3.1-8b", "--device", "RTX-PRO-6000", "--expert-ranks", "2"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--expert-ranks") && Catch::Contains("has none"));
  r = run_cli({"size", "--model", "qwen3-30b-a3b", "--expert-ranks", "2"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--expert-ranks") && Catch::Contains("give --device"));
}

TEST_CASE("the activation peak of the profile forward pass") {
  // Tiny model, 100 tokens: per token 3 x 256 (residual, input, output) + max(attention:
  // q 256 + k, v 2 x 128 + output 256 = 768, MLP: 3 x 512 = 1,536) = 2,304 values of 2 bytes.
  CHECK(forward_peak_bytes(tiny(""), KvOptions{}, 100, 2) == 100 * 2'304 * 2);
  // Llama-3.1-8B at 20,000 tokens: 20,000 x (3 x 4,096 + 3 x 14,336) x 2 = 2,211,840,000 bytes
  // (2.06 GiB). vLLM 0.6 logged peak_torch_memory 17.06 GiB - weights 14.99 GiB = 2.07 GiB for
  // this run (vllm issue 10517).
  const ModelSpec llama = load_hf_config(startup_file("llama-3.1-8b-instruct.json"));
  CHECK(forward_peak_bytes(llama, KvOptions{}, 20'000, 2) == 2'211'840'000);
}

TEST_CASE("the sampler's logits and CUDA graph counts") {
  // Bytes per logit: v1 native 2 + 25, v1 FlashInfer 2 + 12, V0 2 + 36 (startup_memory.cc).
  CHECK(sampler_bytes_per_logit(ServingEngine::vllm, false, 2) == 27);
  CHECK(sampler_bytes_per_logit(ServingEngine::vllm, true, 2) == 14);
  CHECK(sampler_bytes_per_logit(ServingEngine::vllm_v0, false, 2) == 38);
  // vLLM 0.11 logs 67 capture sizes for max_num_seqs 256 (1, 2, 4, then 8..512 by 8); V0 logs
  // "Capturing CUDA graph shapes: 35/35" (1, 2, 4, then 8..256 by 8).
  CHECK(vllm_cuda_graph_sizes(ServingEngine::vllm, 256) == 67);
  CHECK(vllm_cuda_graph_sizes(ServingEngine::vllm_v0, 256) == 35);
  CHECK(vllm_cuda_graph_sizes(ServingEngine::vllm, 1) == 2);  // sizes 1 and 2
  // From 256 up the count stays 67; 2 x 2^62 used to wrap negative.
  CHECK(vllm_cuda_graph_sizes(ServingEngine::vllm, std::int64_t{1} << 62) == 67);
  CHECK(vllm_cuda_graph_sizes(ServingEngine::vllm, INT64_MAX) == 67);
}

TEST_CASE("the start-up subtraction, term by term") {
  const ModelSpec m = load_hf_config(startup_file("qwen2.5-7b-instruct-awq.json"));
  EngineSettings e;
  e.max_num_batched_tokens = 2048;
  BudgetOptions device;
  device.device_memory_bytes = 17'169'131'765;  // 15.99 GiB, rounded down
  const StartupMemory s = startup_memory(m, KvOptions{}, e, device);
  REQUIRE(s.stages.size() == 1);
  const StartupStage& st = s.stages[0];
  // usable = ceil(17,169,131,765 x 0.9) = ceil(15,452,218,588.5) = 15,452,218,589: vLLM's
  // request_memory rounds up (vllm/v1/worker/utils.py).
  CHECK(s.memory_fraction_ppb == 900'000'000);
  // Sampler: 256 requests x 152,064 padded vocab x 27 bytes + the 2,048 x 3,584 x 2 hidden
  // states kept alive = 1,051,066,368 + 14,680,064 = 1,065,746,432. Forward: 2,048 x (3 x
  // 3,584 + 3 x 18,944) x 2 = 276,824,064. The peak is the larger.
  CHECK(st.sampler_peak_bytes == 1'065'746'432);
  CHECK(st.forward_peak_bytes == 276'824'064);
  CHECK(st.activation_peak_bytes == 1'065'746'432);
  CHECK(st.non_torch_bytes == 100 * 1'048'576);
  // cuBLAS's workspace, from torch's caching allocator (CublasHandlePool.cpp): the device is
  // given by its memory only, so not Hopper's 32 MiB but ":4096:2:16:8", 4,096 KiB x 2 +
  // 16 KiB x 8 = 8,519,680 bytes.
  CHECK(st.buffer_bytes == 8'519'680);
  CHECK(st.kv_budget_bytes == 15'452'218'589 - st.weights.bytes - 1'065'746'432 - 8'519'680 - 104'857'600);
  CHECK(s.cuda_graphs == 67);
  // With --enforce-eager no graphs; the budget is the same (graphs are not subtracted).
  e.enforce_eager = true;
  const StartupMemory eager = startup_memory(m, KvOptions{}, e, device);
  CHECK(eager.cuda_graphs == 0);
  CHECK(eager.kv_budget_bytes == s.kv_budget_bytes);
  // SGLang: usable x mem_fraction_static (0.88 at tp 1) - weights.
  e.engine = ServingEngine::sglang;
  const StartupMemory sg = startup_memory(m, KvOptions{}, e, device);
  CHECK(sg.memory_fraction_ppb == 880'000'000);
  CHECK(sg.kv_budget_bytes == 15'108'835'953 - st.weights.bytes);  // floor(17,169,131,765 x 0.88)
  // TensorRT-LLM: (total - weights - forward peak) x 0.9.
  e.engine = ServingEngine::trtllm;
  const StartupMemory trt = startup_memory(m, KvOptions{}, e, device);
  CHECK(trt.kv_budget_bytes == (17'169'131'765 - st.weights.bytes - 276'824'064) * 9 / 10);
}

TEST_CASE("size --engine sglang and trtllm: the pool's heading says whose rules count the blocks") {
  // SGLang's max_total_num_tokens is the KV budget // bytes per token (profile_max_num_token,
  // pages of 1 token): for Llama-3.1-8B, 131,072 bytes a token, the same as vLLM's rule with
  // blocks of 1 token, and the heading says so.
  auto r = run_cli({"size", "--model", "llama-3.1-8b", "--device", "H100-80GB", "--engine", "sglang", "--json"});
  REQUIRE(r.exit_code == 0);
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  CHECK(doc["kv_cache_tokens"].get<std::int64_t>() == doc["startup"]["kv_budget_bytes"].get<std::int64_t>() / 131'072);
  r = run_cli({"size", "--model", "llama-3.1-8b", "--device", "H100-80GB", "--engine", "sglang"});
  CHECK_THAT(r.out, Catch::Contains("Paged cache (sglang, block size 1 token; counted by vLLM's rules, which give the "
                                    "same count for a model whose layers are all alike)"));
  r = run_cli({"size", "--model", "llama-3.1-8b", "--device", "H100-80GB", "--engine", "trtllm"});
  CHECK_THAT(r.out, Catch::Contains("Paged cache (trtllm, block size 32 tokens; counted by vLLM's rules, which give"));
  // Gemma-3's sliding and full layers: vLLM's padded groups are not SGLang's pools.
  r = run_cli({"size", "--model", "gemma-3-27b", "--device", "H100-80GB", "--engine", "sglang"});
  CHECK_THAT(r.out, Catch::Contains("whose grouping of unlike layers this engine does not share: an approximation"));
  r = run_cli({"size", "--model", "llama-3.1-8b", "--device", "H100-80GB", "--engine", "vllm"});
  CHECK_THAT(r.out, Catch::Contains("Paged cache (vLLM's layout, block size 16 tokens)"));
}

TEST_CASE("vllm-v0's profile batch: max(max_model_len, 2048), or 2048 when V0 chunks prefill above 32K") {
  // vllm/engine/arg_utils.py (V0): chunked prefill is on by default when max_model_len >
  // 32768 and no layer slides; SchedulerConfig then takes 2048 tokens, else max(max_model_len,
  // 2048).
  const ModelSpec qwen14 = load_hf_config(startup_file("deepseek-r1-distill-qwen-14b.json"));
  EngineSettings e;
  e.engine = ServingEngine::vllm_v0;
  BudgetOptions device;
  device.device_memory_bytes = 25'286'619'955;
  KvOptions tp2;
  tp2.tensor_parallel = 2;
  CHECK(startup_memory(qwen14, tp2, e, device).settings.max_num_batched_tokens == 2048);  // 131,072 positions
  e.max_model_len = 32768;
  CHECK(startup_memory(qwen14, tp2, e, device).settings.max_num_batched_tokens == 32768);  // not above 32K
  e.max_model_len = 1000;
  CHECK(startup_memory(qwen14, tp2, e, device).settings.max_num_batched_tokens == 2048);
  // Mistral-7B slides on every layer: no chunked prefill by default, the whole 40,000.
  const ModelSpec mistral = load_hf_config(std::string(KVSIM_SOURCE_DIR) + "/tests/data/configs/mistral-7b-v0.1.json");
  e.max_model_len = 40000;
  device.device_memory_bytes = 85'017'755'648;
  CHECK(startup_memory(mistral, KvOptions{}, e, device).settings.max_num_batched_tokens == 40000);
}

TEST_CASE("vllm-v0.7.1: logits of every batch token, no sampler, all non-torch memory") {
  // vLLM 0.7.1's v1 profile_run (vllm/v1/worker/gpu_model_runner.py): compute_logits on the
  // hidden states of all max_num_batched_tokens tokens, in the model dtype, no sampler run.
  // Tiny model, 100 tokens, tp 1: 100 x (256 hidden + 1,024 padded vocab) x 2 = 256,000.
  CHECK(all_token_logits_peak_bytes(tiny(""), KvOptions{}, 100, 2) == 256'000);
  // tp 2: the local slice 512 + the all-gathered 1,024 + its reshaped copy 1,024
  // (parallel_state.py GroupCoordinator.all_gather): 100 x (256 + 2,560) x 2 = 563,200.
  KvOptions tp2;
  tp2.tensor_parallel = 2;
  CHECK(all_token_logits_peak_bytes(tiny(""), tp2, 100, 2) == 563'200);
  // 67 CUDA graphs whatever max_num_seqs (config.py _set_cudagraph_sizes: [1, 2, 4] +
  // range(8, 513, 8)).
  CHECK(vllm_cuda_graph_sizes(ServingEngine::vllm_v1_early, 256) == 67);
  CHECK(vllm_cuda_graph_sizes(ServingEngine::vllm_v1_early, 1) == 67);

  // Llama-3.1-70B w8a8 on an H100 (85,017,755,648 bytes), 0.98, batch 2,048:
  // usable = floor(85,017,755,648 x 0.98) = 83,317,400,535.
  // forward: 2,048 x (3 x 8,192 + 3 x 28,672) x 2 = 452,984,832;
  // logits: 2,048 x (8,192 + 128,256) x 2 = 558,891,008, the larger;
  // non-torch: the CUDA context, 384 MiB = 402,653,184 (gpu_worker.py determine_available_memory
  // adds all of device used - torch allocated);
  // persistent buffers, inside torch's peak: the model runner's inputs_embeds, 2,048 x 8,192 x
  // 2 = 33,554,432 (GPUModelRunner.__init__), and cuBLAS's workspace, 8,519,680 for a device
  // given by its memory (":4096:2:16:8"): 42,074,112.
  const ModelSpec m = load_hf_config(startup_file("llama-3.1-70b-instruct-w8a8.json"));
  EngineSettings e;
  e.engine = ServingEngine::vllm_v1_early;
  e.memory_fraction_ppb = 980'000'000;
  e.max_num_batched_tokens = 2048;
  BudgetOptions device;
  device.device_memory_bytes = 85'017'755'648;
  const StartupMemory s = startup_memory(m, KvOptions{}, e, device);
  const StartupStage& st = s.stages[0];
  CHECK(st.forward_peak_bytes == 452'984'832);
  CHECK(st.sampler_peak_bytes == 558'891'008);
  CHECK(st.activation_peak_bytes == 558'891'008);
  CHECK(st.non_torch_bytes == 402'653'184);
  CHECK(st.buffer_bytes == 42'074'112);
  CHECK(st.kv_budget_bytes == 83'317'400'535 - st.weights.bytes - 558'891'008 - 42'074'112 - 402'653'184);
  CHECK(s.cuda_graphs == 67);
  // Named as an H100 (compute capability 9.0) the workspace is ":4096:8", 32 MiB: 33,554,432 +
  // 33,554,432; the preset's CUDA total is the same 85,017,755,648 bytes.
  BudgetOptions h100;
  h100.device = "H100-80GB";
  const StartupMemory hopper = startup_memory(m, KvOptions{}, e, h100);
  CHECK(hopper.stages[0].buffer_bytes == 67'108'864);
  CHECK(hopper.kv_budget_bytes == st.kv_budget_bytes - (67'108'864 - 42'074'112));
  auto r = run_cli({"size", "--config", startup_file("llama-3.1-70b-instruct-w8a8.json"), "--device", "H100-80GB",
                    "--engine", "vllm-v0.7.1", "--gpu-memory-utilization", "0.98", "--max-num-batched-tokens", "2048"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("at vllm-v0.7.1 start-up") && Catch::Contains("logits of all 2048 tokens"));
}

TEST_CASE("kvsim size --engine: options, the sheet and the JSON numbers") {
  auto r = run_cli({"size", "--config", startup_file("qwen2.5-7b-instruct-awq.json"), "--device-memory", "15.99GiB",
                    "--max-model-len", "32768", "--max-num-batched-tokens", "2048", "--engine", "vllm", "--json"});
  REQUIRE(r.exit_code == 0);
  const auto doc = nlohmann::json::parse(r.out);
  REQUIRE(doc["kv_cache_tokens"].is_number_integer());
  REQUIRE(doc["max_concurrency"].is_number());
  CHECK(doc["startup"]["engine"] == "vllm");
  CHECK(doc["startup"]["cuda_graphs"] == 67);
  // kv tokens = floor(budget / block bytes) x 16, a block being 16 tokens x 28 layers x 2 x 4
  // heads x 128 x 2 bytes = 917,504 bytes.
  const std::int64_t budget = doc["startup"]["kv_budget_bytes"].get<std::int64_t>();
  CHECK(doc["kv_cache_tokens"].get<std::int64_t>() == budget / 917'504 * 16);
  CHECK(doc["paged"]["concurrency"][0]["tokens"] == 32768);

  r = run_cli({"size", "--config", startup_file("qwen2.5-7b-instruct-awq.json"), "--device-memory", "15.99GiB", "--engine",
               "vllm"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("KV budget per device at vllm start-up") && Catch::Contains("- activation peak") &&
                        Catch::Contains("- non-torch increase") && Catch::Contains("awq 4-bit, group 128") &&
                        Catch::Contains("GPU KV cache size"));

  // Mistakes in the options are usage errors (exit 2, as every option error of kvsim size)
  // naming the option.
  r = run_cli({"size", "--model", "llama-3.1-8b", "--engine", "vllm"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--engine") && Catch::Contains("needs a device"));
  r = run_cli({"size", "--model", "llama-3.1-8b", "--device", "H100-80GB", "--engine", "sglang",
               "--gpu-memory-utilization", "0.8"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--gpu-memory-utilization") && Catch::Contains("--mem-fraction-static"));
  r = run_cli({"size", "--model", "llama-3.1-8b", "--device", "H100-80GB", "--engine", "vllm", "--reserve", "1GiB"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--reserve"));
  r = run_cli({"size", "--model", "llama-3.1-8b", "--device", "H100-80GB", "--engine", "tgi"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--engine") && Catch::Contains("vllm, vllm-v0, vllm-v0.6.4, vllm-v0.7.1, sglang or trtllm"));

  // Every new option is in --help.
  r = run_cli({"size", "--help"});
  REQUIRE(r.exit_code == 0);
  for (const char* flag : {"--engine", "--max-num-seqs", "--max-model-len", "--enforce-eager", "--mem-fraction-static",
                           "--free-gpu-memory-fraction", "--flashinfer-sampler"}) {
    CHECK_THAT(r.out, Catch::Contains(flag));
  }
}

// The independent reference: real vLLM start-up logs (tests/data/startup/vllm_startup_logs.tsv,
// sources in docs/size.md). kvsim is given what a user knows before start-up; the logged
// "GPU KV cache size" (or # GPU blocks x 16) is what it must predict. docs/size.md states the
// bound: within 3% in the median and 8% at worst over the logs kvsim's rules cover ("in"), too
// many tokens, for the reason given per log, on the others whose settings are known ("off",
// "not-modelled"); logs whose settings are not shown ("settings-unknown") are run but in no
// bound.
TEST_CASE("kvsim size predicts the KV tokens of real vLLM start-up logs") {
  std::ifstream in(startup_file("vllm_startup_logs.tsv"));
  REQUIRE(in);
  std::vector<double> in_errors;
  std::vector<double> known_errors;  // settings fully shown and modelled: "in" and "off"
  std::size_t rows = 0;
  std::size_t known_rows = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cols;
    std::size_t start = 0;
    for (std::size_t tab; (tab = line.find('\t', start)) != std::string::npos; start = tab + 1) {
      cols.push_back(line.substr(start, tab - start));
    }
    cols.push_back(line.substr(start));
    REQUIRE(cols.size() == 4);
    INFO(cols[0]);
    std::vector<std::string> args = {"size"};
    std::istringstream words(cols[3]);
    for (std::string w; words >> w;) args.push_back(w.size() > 5 && w.substr(w.size() - 5) == ".json" ? startup_file(w) : w);
    args.push_back("--json");
    const auto r = run_cli(args);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const auto doc = nlohmann::json::parse(r.out);
    const double logged = std::stod(cols[1]);
    const double error = (doc["kv_cache_tokens"].get<double>() - logged) / logged;
    INFO("predicted " << doc["kv_cache_tokens"].get<std::int64_t>() << ", logged " << cols[1] << ", error " << error);
    const std::string& status = cols[2];
    if (status == "in") {
      CHECK(std::abs(error) <= 0.08);
      in_errors.push_back(std::abs(error));
      known_errors.push_back(std::abs(error));
    } else if (status == "off") {
      CHECK(error > 0.03);  // over-predicts, for the cause docs/size.md names
      known_errors.push_back(std::abs(error));
    } else if (status == "not-modelled") {
      CHECK(error > 0.03);
    } else {
      REQUIRE(status == "settings-unknown");
    }
    known_rows += status == "in" || status == "off" ? 1 : 0;
    ++rows;
  }
  CHECK(rows >= 12);
  CHECK(known_rows >= 10);  // the issue's ten logs, counted over known settings only
  REQUIRE(!in_errors.empty());
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  // Within 3% in the median over the covered logs and over every log whose settings are known
  // and modelled (docs/size.md: 0.81% over the eleven, all of them in).
  CHECK(median(in_errors) <= 0.03);
  CHECK(median(known_errors) <= 0.03);
}
