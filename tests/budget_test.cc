// The KV budget subtraction, the parameter estimate and vLLM's paged pool, derived by hand.
#include "kvsim/budget.h"

#include <catch2/catch.hpp>

#include <tuple>
#include <vector>

#include "cli_util.h"
#include "kvsim/error.h"
#include "kvsim/units.h"

using namespace kvsim;

namespace {

constexpr std::int64_t kMiB = std::int64_t{1} << 20;

BudgetOptions on(const char* device) {
  BudgetOptions o;
  o.device = device;
  return o;
}

}  // namespace

TEST_CASE("device presets carry nvidia-smi's totals and spec-sheet rates") {
  CHECK(find_device_preset("H100-80GB").total_bytes == 81559 * kMiB);
  CHECK(find_device_preset("h100-80gb").total_bytes == 85'520'809'984);
  CHECK(find_device_preset("A100-40GB").total_bytes == 40960 * kMiB);
  CHECK(find_device_preset("A100-80GB").total_bytes == 81920 * kMiB);
  CHECK(find_device_preset("H200-141GB").total_bytes == 143771 * kMiB);
  CHECK(find_device_preset("L4").total_bytes == 23034 * kMiB);
  CHECK(find_device_preset("RTX-4090").total_bytes == 24564 * kMiB);
  CHECK(find_device_preset("H100-80GB").hbm_bytes_per_second == 3'350'000'000'000);
  CHECK(find_device_preset("H100-80GB").bf16_dense_flops == 1979'000'000'000'000 / 2);
  CHECK(find_device_preset("A100-80GB").bf16_dense_flops == 312'000'000'000'000);
  // The measured runs' GPU, the Server Edition: nvidia-smi 97,887 MiB; NVIDIA's product page
  // 1,597 GB/s (as the issue and LLMServingSim's config) and 1 PFLOPS sparse BF16 = 500 dense;
  // 90% of 1,597 is 1,437.3 GB/s. The Workstation Edition: datasheet 1,792 GB/s and 4,000
  // sparse FP4 TOPS = 503.8 dense BF16 TFLOPS.
  const DevicePreset& pro = find_device_preset("RTX-PRO-6000");
  CHECK(pro.product == "NVIDIA RTX PRO 6000 Blackwell Server Edition");
  CHECK(pro.total_bytes == 97887 * kMiB);
  CHECK(pro.hbm_bytes_per_second == 1'597'000'000'000);
  CHECK(pro.bf16_dense_flops == 500'000'000'000'000);
  CHECK(pro.hbm_bytes_per_second * pro.memory_permille / 1000 == 1'437'300'000'000);
  const DevicePreset& workstation = find_device_preset("RTX-PRO-6000-WS");
  CHECK(workstation.product == "NVIDIA RTX PRO 6000 Blackwell Workstation Edition");
  CHECK(workstation.total_bytes == 97887 * kMiB);
  CHECK(workstation.hbm_bytes_per_second == 1'792'000'000'000);
  CHECK(workstation.bf16_dense_flops == 503'800'000'000'000);
  CHECK(find_device_preset("L40S").total_bytes == 46068 * kMiB);
  CHECK(find_device_preset("A10G").total_bytes == 23028 * kMiB);
  CHECK(find_device_preset("H20").total_bytes == 97871 * kMiB);
  CHECK(find_device_preset("B200").total_bytes == 183359 * kMiB);
  CHECK(find_device_preset("MI300X").total_bytes == 205'822'885'888);
  // MAMF / spec from the table named in budget.cc: H100 794.5 / 989, B200 1745 / 2250.
  CHECK(find_device_preset("H100-80GB").compute_permille == 803);
  CHECK(find_device_preset("B200").compute_permille == 776);
  CHECK(find_device_preset("RTX-3090").total_bytes == 24576 * kMiB);
  CHECK(find_device_preset("RTX-3090").bf16_dense_flops == 71'000'000'000'000);
  CHECK(find_device_preset("RTX-A6000").total_bytes == 49140 * kMiB);
  CHECK(find_device_preset("RTX-A6000").hbm_bytes_per_second == 768'000'000'000);
  CHECK(find_device_preset_by_product("NVIDIA RTX A6000") == &find_device_preset("RTX-A6000"));
  // The PCIe and smaller cards of inference fleets (sources in budget.cc): an A100 PCIe's 80 GB
  // at 1,935 GB/s (the SXM card's 2,039) on its own MAMF row, 252.9 of 312 = 81.1%; a T4's
  // FP16 tensor peak (Turing has no BF16) on PCIe 3.0 x16, 16 GB/s at 84% = 13.44 GB/s; an H100
  // PCIe's 1,513 sparse TFLOPS / 2, of which mamf-finder measures 499.5 = 66.0%; an H100 NVL's
  // bridge, 600 GB/s both ways, 300 one way at 84% = 252 GB/s.
  const DevicePreset& a100_pcie = find_device_preset("A100-PCIe-80GB");
  CHECK(a100_pcie.total_bytes == 81920 * kMiB);
  CHECK(a100_pcie.hbm_bytes_per_second == 1'935'000'000'000);
  CHECK(a100_pcie.compute_permille == 811);
  CHECK(find_device_preset_by_product("NVIDIA A100 80GB PCIe") == &a100_pcie);
  CHECK(find_device_preset_by_product("NVIDIA A100-PCIE-40GB") == &find_device_preset("A100-PCIe-40GB"));
  const DevicePreset& t4 = find_device_preset("t4");
  CHECK(t4.total_bytes == 15360 * kMiB);
  CHECK(t4.bf16_dense_flops == 65'000'000'000'000);
  CHECK(t4.link_bytes_per_second == 13'440'000'000);
  CHECK(t4.compute_capability == 75);
  CHECK(find_device_preset_by_product("Tesla T4") == &t4);
  const DevicePreset& h100_pcie = find_device_preset("H100-PCIe");
  CHECK(h100_pcie.bf16_dense_flops == 756'500'000'000'000);
  CHECK(h100_pcie.compute_permille == 660);
  CHECK(find_device_preset("H100-NVL").total_bytes == 95830 * kMiB);
  CHECK(find_device_preset("H100-NVL").link_bytes_per_second == 252'000'000'000);
  // A10 and A10G are two cards: the A10's datasheet gives 125 dense BF16 TFLOPS, AWS's A10G 70.
  CHECK(find_device_preset("A10").bf16_dense_flops == 125'000'000'000'000);
  CHECK(find_device_preset_by_product("NVIDIA A10") == &find_device_preset("A10"));
  CHECK(find_device_preset_by_product("NVIDIA A10G") == &find_device_preset("A10G"));
  CHECK(find_device_preset("L40").bf16_dense_flops == 181'050'000'000'000);
  CHECK(find_device_preset("RTX-6000-Ada").hbm_bytes_per_second == 960'000'000'000);
  CHECK(find_device_preset_by_product("NVIDIA RTX 6000 Ada Generation") == &find_device_preset("RTX-6000-Ada"));
  CHECK(device_presets().size() == 23);
  // Links (budget.cc): RTX PRO 6000 over PCIe 5.0 as measured, 53 GB/s and 7.5 us; H100 SXM
  // NVLink 4, 900 GB/s both ways = 450 one way, at 84% = 378 GB/s and 9 us; an L4 on PCIe 4.0
  // x16, 32 GB/s at 84% = 26.88 GB/s. Compute capabilities: Hopper 9.0, Blackwell 12.0.
  CHECK(pro.link_bytes_per_second == 53'000'000'000);
  CHECK(pro.link_latency_ns == 7'500);
  CHECK(pro.compute_capability == 120);
  CHECK(find_device_preset("H100-80GB").link_bytes_per_second == 378'000'000'000);
  CHECK(find_device_preset("H100-80GB").link_latency_ns == 9'000);
  CHECK(find_device_preset("H100-80GB").compute_capability == 90);
  CHECK(find_device_preset("L4").link_bytes_per_second == 26'880'000'000);
  for (const DevicePreset& d : device_presets()) {
    INFO(d.name);
    CHECK(d.link_bytes_per_second > 0);
    CHECK(d.link_latency_ns > 0);
    CHECK_FALSE(d.link_source.empty());
  }
  CHECK_THROWS_WITH(find_device_preset("B300"), Catch::Contains("H200-141GB") && Catch::Contains("--device"));
  CHECK_THROWS_WITH(find_device_preset("B300", "--timing-device"),
                    Catch::Contains("--timing-device") && !Catch::Contains("--device-memory"));
}

TEST_CASE("gpu-memory-utilization parses exactly") {
  CHECK(parse_gpu_memory_utilization("0.9", "--gpu-memory-utilization") == 900'000'000);
  CHECK(parse_gpu_memory_utilization("1", "--gpu-memory-utilization") == 1'000'000'000);
  CHECK(parse_gpu_memory_utilization("0.875", "u") == 875'000'000);
  CHECK(format_ppb(900'000'000) == "0.9");
  CHECK(format_ppb(875'000'000) == "0.875");
  CHECK(format_ppb(1'000'000'000) == "1");
  CHECK_THROWS_WITH(parse_gpu_memory_utilization("0", "--gpu-memory-utilization"), Catch::Contains("(0, 1]"));
  CHECK_THROWS_AS(parse_gpu_memory_utilization("1.01", "u"), InputError);
  CHECK_THROWS_AS(parse_gpu_memory_utilization("0.9x", "u"), InputError);
  CHECK_THROWS_AS(parse_gpu_memory_utilization("-0.5", "u"), InputError);
  CHECK_THROWS_AS(parse_gpu_memory_utilization("0.1234567891", "u"), InputError);  // 10 decimals
}

TEST_CASE("the budget subtraction for Llama-3.1-8B on one H100") {
  const Budget b = derive_budget(find_model_preset("llama-3.1-8b"), KvOptions{}, on("H100-80GB"));
  CHECK_FALSE(b.direct);
  CHECK(b.device_total_bytes == 85'520'809'984);
  // floor(85,520,809,984 x 9 / 10) = floor(76,968,728,985.6)
  CHECK(b.usable_bytes == 76'968'728'985);
  CHECK(b.parameter_count == 8'030'261'248);
  CHECK(b.parameter_source == "published");
  CHECK(b.weight_bits == 16);
  CHECK(b.weights_bytes == 8'030'261'248LL * 2);  // 16,060,522,496
  CHECK(b.weights_bytes_per_device == 16'060'522'496);
  CHECK(b.reserve_bytes == kBytesPerGiB);
  CHECK(b.kv_budget_bytes == 76'968'728'985 - 16'060'522'496 - 1'073'741'824);  // 59,834,464,665
}

TEST_CASE("budget terms: devices share the weights, options override the model") {
  const ModelSpec& llama = find_model_preset("llama-3.1-70b");
  KvOptions tp4;
  tp4.tensor_parallel = 4;
  Budget b = derive_budget(llama, tp4, on("A100-80GB"));
  CHECK(b.devices == 4);
  CHECK(b.weights_bytes == 70'553'706'496LL * 2);
  CHECK(b.weights_bytes_per_device == 70'553'706'496LL * 2 / 4);
  // floor(85,899,345,920 x 0.9) = 77,309,411,328
  CHECK(b.usable_bytes == 77'309'411'328);

  BudgetOptions o = on("A100-80GB");
  o.weight_bits = 8;  // fp8 weights
  o.gpu_memory_utilization_ppb = 950'000'000;
  o.reserve_bytes = 2 * kBytesPerGiB;
  b = derive_budget(llama, tp4, o);
  CHECK(b.weights_bytes == 70'553'706'496);
  CHECK(b.weights_bytes_per_device == 70'553'706'496 / 4);
  CHECK(b.usable_bytes == 85'899'345'920LL / 20 * 19);  // 0.95 is exact here: 81,604,378,624
  CHECK(b.kv_budget_bytes == 81'604'378'624 - 17'638'426'624 - 2 * kBytesPerGiB);

  o = on("L4");
  o.weights_bytes = 4'000'000'000;  // e.g. an AWQ checkpoint's size on disk
  b = derive_budget(llama, KvOptions{}, o);
  CHECK(b.weights_bytes_per_device == 4'000'000'000);
  CHECK(b.parameter_source == "--weights-bytes");
  // A preset's total is the vendor tool's: nvidia-smi's, and on an AMD card rocm-smi's.
  CHECK(b.device_total_source == "L4 preset (nvidia-smi memory.total)");
  CHECK(derive_budget(llama, KvOptions{}, on("MI300X")).device_total_source == "MI300X preset (rocm-smi VRAM total)");
  // The same in vLLM's start-up rule, which prefers a documented CUDA total where there is one.
  const auto startup = test::run_cli({"size", "--model", "llama-3.1-8b", "--device", "MI300X", "--engine", "vllm"});
  REQUIRE(startup.exit_code == 0);
  CHECK_THAT(startup.out, Catch::Contains("MI300X preset (rocm-smi VRAM total: no CUDA total documented for it"));

  o = BudgetOptions{};
  o.device_memory_bytes = 80'000'000'000;  // what torch.cuda.mem_get_info()[1] printed
  o.parameter_count = 1'000'000'000;
  b = derive_budget(llama, KvOptions{}, o);
  CHECK(b.usable_bytes == 72'000'000'000);
  CHECK(b.weights_bytes == 2'000'000'000);
  CHECK(b.device_total_source == "--device-memory");
  o.device = "H100-80GB";  // a named device keeps its name; the given total still wins
  CHECK(derive_budget(llama, KvOptions{}, o).device == "H100-80GB");
  CHECK(derive_budget(llama, KvOptions{}, o).device_total_bytes == 80'000'000'000);
  o.device = "H100-80G";
  CHECK_THROWS_WITH(derive_budget(llama, KvOptions{}, o), Catch::Contains("H100-80G"));

  // A quantised checkpoint's stored width wins over torch_dtype: DeepSeek-V3's fp8 (8 bits).
  KvOptions tp8;
  tp8.tensor_parallel = 8;
  b = derive_budget(find_model_preset("deepseek-v3"), tp8, on("H200-141GB"));
  CHECK(b.weight_bits == 8);
  CHECK(b.weights_bytes == 684'531'386'000);
  CHECK(b.weights_bytes_per_device == 684'531'386'000 / 8 + 0);  // divides exactly: 85,566,423,250
}

TEST_CASE("expert parallelism: each rank holds its share of the routed experts, the rest whole") {
  // Qwen3-30B-A3B: 48 MoE layers of 128 routed experts, each 3 x 2048 x 768 parameters:
  // 48 x 128 x 4,718,592 = 28,991,029,248 routed, of 30,532,110,336 (model_presets.cc), bf16.
  // Over 2 ranks a device holds 64 experts a layer: 61,064,220,672 - 28,991,029,248 bytes.
  const ModelSpec& qwen = find_model_preset("qwen3-30b-a3b");
  BudgetOptions o = on("RTX-PRO-6000");
  CHECK(derive_budget(qwen, KvOptions{}, o).weights_bytes_per_device == 61'064'220'672);
  o.expert_parallel_ranks = 2;
  const Budget b = derive_budget(qwen, KvOptions{}, o);
  CHECK(b.weights_bytes == 61'064'220'672);  // all of them, over all ranks
  CHECK(b.weights_bytes_per_device == 61'064'220'672 - 28'991'029'248);
  // 3 ranks: vLLM's determine_expert_map gives rank 0 43 of a layer's 128 experts (the
  // others 43 and 42), whole: 48 x 43 x 4,718,592 = 9,739,173,888 routed parameters stay,
  // 28,991,029,248 - 9,739,173,888 = 19,251,855,360 go (x 2 bytes). Not a third of the
  // routed parameters (9,663,676,416), which would be 42 2/3 experts a layer.
  o.expert_parallel_ranks = 3;
  CHECK(derive_budget(qwen, KvOptions{}, o).weights_bytes_per_device == 61'064'220'672 - 2 * 19'251'855'360);
  CHECK(derive_budget(qwen, KvOptions{}, o).weights_bytes_per_device == 22'560'509'952);
  // A dense model has no experts to spread.
  CHECK(derive_budget(find_model_preset("llama-3.1-8b"), KvOptions{}, o).weights_bytes_per_device ==
        derive_budget(find_model_preset("llama-3.1-8b"), KvOptions{}, on("RTX-PRO-6000")).weights_bytes_per_device);
}

TEST_CASE("a budget that is not positive is an error that shows the terms") {
  KvOptions tp8;
  tp8.tensor_parallel = 8;
  // 684.5B fp8 parameters over 8 H100s: 85.6 GB of weights per 85.5 GB device.
  CHECK_THROWS_WITH(derive_budget(find_model_preset("deepseek-v3"), tp8, on("H100-80GB")),
                    Catch::Contains("85,520,809,984") && Catch::Contains("85,566,423,250") &&
                        Catch::Contains("1,073,741,824") && Catch::Contains("-9,671,436,089"));
  CHECK_THROWS_WITH(derive_budget(find_model_preset("llama-3.1-8b"), KvOptions{}, BudgetOptions{}),
                    Catch::Contains("--device"));
  // The seed example publishes no parameter count and no MLP to estimate one from.
  CHECK_THROWS_WITH(derive_budget(find_model_preset("seed-example"), KvOptions{}, on("H100-80GB")),
                    Catch::Contains("--params"));
  BudgetOptions bad = on("H100-80GB");
  bad.gpu_memory_utilization_ppb = 0;
  CHECK_THROWS_AS(derive_budget(find_model_preset("llama-3.1-8b"), KvOptions{}, bad), InputError);
}

TEST_CASE("a direct KV budget skips the subtraction") {
  BudgetOptions o;
  o.kv_budget_bytes = 10 * kBytesPerGiB;
  const Budget b = derive_budget(find_model_preset("seed-example"), KvOptions{}, o);
  CHECK(b.direct);
  CHECK(b.kv_budget_bytes == 10 * kBytesPerGiB);
  o.kv_budget_bytes = 0;
  CHECK_THROWS_AS(derive_budget(find_model_preset("seed-example"), KvOptions{}, o), InputError);
}

TEST_CASE("parameter estimates reproduce the published counts of dense models") {
  // Llama-3.1-8B: embeddings 128,256 x 4,096 twice (untied), final norm 4,096, and per layer
  // q 4096x4096 + k,v 2 x 4096x1024 + o 4096x4096 + MLP 3 x 4096x14336 + 2 norms of 4096.
  const std::int64_t llama_layer = 4096LL * 4096 + 2 * 4096LL * 1024 + 4096LL * 4096 + 3 * 4096LL * 14336 + 2 * 4096;
  CHECK(estimate_parameter_count(find_model_preset("llama-3.1-8b")) ==
        2 * 128256LL * 4096 + 4096 + 32 * llama_layer);
  CHECK(estimate_parameter_count(find_model_preset("llama-3.1-8b")) == 8'030'261'248);
  CHECK(estimate_parameter_count(find_model_preset("llama-3.1-70b")) == 70'553'706'496);
  CHECK(estimate_parameter_count(find_model_preset("mistral-7b-v0.1")) == 7'241'732'096);
  // Phi-3-mini: MHA, qkv 3 x 3072x3072, o 3072x3072, MLP 3 x 3072x8192
  const std::int64_t phi_layer = 4 * 3072LL * 3072 + 3 * 3072LL * 8192 + 2 * 3072;
  CHECK(estimate_parameter_count(find_model_preset("phi-3-mini-4k")) == 2 * 32064LL * 3072 + 3072 + 32 * phi_layer);
  CHECK(estimate_parameter_count(find_model_preset("phi-3-mini-4k")) == 3'821'079'552);
  // Llama-3.2-3B, its LM head tied to the embedding: 28 layers of q and o 3072x3072, k and v
  // 3072x1024, MLP 3 x 3072x8192 and two norms, then the final norm: 3,212,749,824, the
  // Hub's 3.21B.
  const std::int64_t llama3b_layer = 2 * 3072LL * 3072 + 2 * 3072LL * 1024 + 3 * 3072LL * 8192 + 2 * 3072;
  CHECK(estimate_parameter_count(find_model_preset("llama-3.2-3b")) == 128256LL * 3072 + 3072 + 28 * llama3b_layer);
  CHECK(128256LL * 3072 + 3072 + 28 * llama3b_layer == 3'212'749'824);
  // Qwen3-8B, an LM head of its own: q and o 4096x4096, k and v 4096x1024, MLP 3 x
  // 4096x12288 and two norms a layer (36), without the q_norm/k_norm vectors (2 x 128 a layer).
  const std::int64_t qwen8b_layer = 2 * 4096LL * 4096 + 2 * 4096LL * 1024 + 3 * 4096LL * 12288 + 2 * 4096;
  CHECK(estimate_parameter_count(find_model_preset("qwen3-8b")) == 2 * 151936LL * 4096 + 4096 + 36 * qwen8b_layer);
  // Qwen2.5-7B without its QKV biases (28 layers x (3,584 + 2 x 512)): 129,024 short.
  CHECK(estimate_parameter_count(find_model_preset("qwen2.5-7b")) == 7'615'616'512 - 28 * (3584 + 1024));

  // DeepSeek-V3, main model (the MTP module is not in the config's 61 layers):
  const std::int64_t h = 7168;
  const std::int64_t mla = h * 1536 + 1536 + 1536LL * 128 * 192  // q_a, q_a_layernorm, q_b
                           + h * (512 + 64) + 512                // kv_a_proj_with_mqa, kv_a_layernorm
                           + 512LL * 128 * (128 + 128)           // kv_b
                           + 128LL * 128 * h;                    // o_proj
  const std::int64_t dense = 3 * h * 18432;
  const std::int64_t moe = (256 + 1) * 3 * h * 2048 + 256 * h;  // experts + router
  const std::int64_t expected = 2 * 129280LL * h + h + 3 * (mla + dense + 2 * h) + 58 * (mla + moe + 2 * h);
  CHECK(estimate_parameter_count(find_model_preset("deepseek-v3")) == expected);
  CHECK(expected == 671'026'404'352);

  CHECK_THROWS_WITH(estimate_parameter_count(find_model_preset("seed-example")),
                    Catch::Contains("field 'vocab_size'") && Catch::Contains("--params"));
}

TEST_CASE("paged pool: one group of every layer for a uniform model") {
  const KvLayout l = kv_layout(find_model_preset("llama-3.1-8b"), KvOptions{});
  const PagedOptions o;  // 16 tokens per block
  const PagedPool p = paged_pool(l, 59'834'464'665, o);
  CHECK(p.uniform_page);
  CHECK(p.page_bytes == 16 * 4096);  // 16 tokens x 8 heads x 256 x 2 bytes = 65,536
  CHECK(p.group_size == 32);
  CHECK(p.cache_groups == 1);
  CHECK(p.block_bytes == 32 * 65'536);           // 2,097,152
  CHECK(p.num_blocks == 59'834'464'665 / 2'097'152);  // 28,531
  CHECK(p.num_blocks == 28'531);
  CHECK(p.kv_cache_tokens == 28'531 * 16);
  CHECK(request_blocks(l, p, 4096, o) == 4096 / 16);
  CHECK(request_blocks(l, p, 4097, o) == 257);
  CHECK(format_ratio(p.num_blocks, request_blocks(l, p, 4096, o), 2) == "111.45");  // 28,531 / 256
}

TEST_CASE("paged pool: under pipeline parallelism the model's groups are projected onto each stage") {
  // vLLM groups the whole model's layers once (get_kv_cache_configs over the merged specs):
  // Gemma 3 27B, 10 full and 52 sliding layers, group size 10, so 1 full group and 6 sliding
  // ones, each taking the sliding layers in stride (layers[i::6]). Each stage keeps the 7
  // groups with its own layers in them (_project_kv_cache_groups_to_worker), and a block holds
  // a page in as many layers as its fullest group has (get_kv_cache_config_from_groups).
  // - pp 6 (11, 11, 10, 10, 10, 10 layers; a full layer every sixth): at most 2 full layers
  //   and 10 sliding ones a stage, cdiv(10, 6) = 2 in a sliding group: 2 layers a block on
  //   every stage. A page is 16 tokens x 8,192 bytes = 131,072; 10 GiB // (2 x 131,072) =
  //   40,960 blocks, 40,960 // 7 x 16 = 93,616 tokens.
  // - pp 4 (16, 16, 15, 15): 13 or 14 sliding layers a stage, cdiv(14, 6) = 3: 10 GiB // (3 x
  //   131,072) = 27,306 blocks, 27,306 // 7 x 16 = 62,400 tokens.
  // 32,768 tokens take the model's 7 groups' blocks on every stage: 2,048 + 6 x 577 = 5,510.
  const PagedOptions o;
  const ModelSpec gemma = find_model_preset("gemma-3-27b");
  for (const auto& [pp, layers_a_block, blocks] : {std::tuple{6, 2, 40'960}, std::tuple{4, 3, 27'306}}) {
    KvOptions kv;
    kv.pipeline_parallel = pp;
    const std::vector<KvLayout> stages = kv_stage_layouts(gemma, kv);
    const KvLayout model = whole_model_layout(stages);
    REQUIRE(model.groups.size() == 2);
    for (const KvLayout& stage : stages) {
      const PagedPool p = paged_pool(stage, 10 * kBytesPerGiB, o, &model);
      CHECK(p.model_group_size == 10);
      CHECK(p.cache_groups == 7);
      CHECK(p.group_size == layers_a_block);
      CHECK(p.num_blocks == blocks);
      CHECK(p.kv_cache_tokens == blocks / 7 * 16);
      CHECK(request_blocks(stage, p, 32768, o, &model) == 2048 + 6 * 577);
    }
  }
  // The stage is the model without pipeline parallelism: the same pool either way.
  const std::vector<KvLayout> one = kv_stage_layouts(gemma, KvOptions{});
  const KvLayout whole = whole_model_layout(one);
  CHECK(paged_pool(one[0], 10 * kBytesPerGiB, o, &whole).num_blocks == paged_pool(one[0], 10 * kBytesPerGiB, o).num_blocks);
}

TEST_CASE("paged pool: hybrid models are grouped and sliding groups are capped as vLLM does") {
  const PagedOptions o;  // block 16, max_num_batched_tokens 8192
  // Gemma 3: 10 full, 52 sliding -> group size 10 (52 >= 1.5 x 10), 1 + ceil(52/10) = 7 groups,
  // 8 padding slots.
  const KvLayout g3 = kv_layout(find_model_preset("gemma-3-27b"), KvOptions{});
  const PagedPool p = paged_pool(g3, 21'030'173'881, o);
  CHECK(p.group_size == 10);
  CHECK(p.cache_groups == 7);
  CHECK(p.padding_layers == 8);
  CHECK(p.block_bytes == 10 * 16 * 8192);  // 1,310,720
  CHECK(p.num_blocks == 21'030'173'881 / 1'310'720);
  CHECK(p.kv_cache_tokens == p.num_blocks / 7 * 16);
  // 32,768 tokens: full 32768/16 = 2,048 blocks; each sliding group
  // ceil(min(1024 - 1 + 8192, 32768) / 16) + 1 = ceil(9215/16) + 1 = 577.
  CHECK(request_blocks(g3, p, 32768, o) == 2048 + 6 * 577);
  // Short requests: the window cap is T itself, plus vLLM's one block of slack.
  CHECK(request_blocks(g3, p, 100, o) == 7 + 6 * (7 + 1));

  // Gemma 2: 21 and 21 -> group size 21, 2 groups. 8,192 tokens: 512 + (ceil(8192/16) + 1).
  const KvLayout g2 = kv_layout(find_model_preset("gemma-2-9b"), KvOptions{});
  const PagedPool p2 = paged_pool(g2, kBytesPerGiB, o);
  CHECK(p2.group_size == 21);
  CHECK(p2.cache_groups == 2);
  CHECK(request_blocks(g2, p2, 8192, o) == 512 + 513);

  // Mistral, every layer sliding: one group; ceil(min(4095 + 8192, 32768) / 16) + 1 = 768 + 1.
  const KvLayout m = kv_layout(find_model_preset("mistral-7b-v0.1"), KvOptions{});
  const PagedPool pm = paged_pool(m, kBytesPerGiB, o);
  CHECK(pm.cache_groups == 1);
  CHECK(request_blocks(m, pm, 32768, o) == 769);
  PagedOptions small = o;
  small.max_num_batched_tokens = 2048;  // ceil(min(6143, 32768) / 16) + 1 = 384 + 1
  CHECK(request_blocks(m, pm, 32768, small) == 385);

  // 12 sliding + 13 full: 13 < 1.5 x 12, so the group size is 13 and one slot pads.
  ModelSpec mixed = find_model_preset("seed-example");
  mixed.num_hidden_layers = 25;
  mixed.layer_window_tokens.assign(25, 0);
  for (int i = 0; i < 12; ++i) mixed.layer_window_tokens[static_cast<std::size_t>(2 * i)] = 128;
  const PagedPool pmix = paged_pool(kv_layout(mixed, KvOptions{}), kBytesPerGiB, o);
  CHECK(pmix.group_size == 13);
  CHECK(pmix.cache_groups == 2);
  CHECK(pmix.padding_layers == 1);
}

TEST_CASE("paged pool: bad block sizes are input errors") {
  const KvLayout l = kv_layout(find_model_preset("llama-3.1-8b"), KvOptions{});
  PagedOptions o;
  o.block_tokens = 0;
  CHECK_THROWS_WITH(paged_pool(l, kBytesPerGiB, o), Catch::Contains("--block-size"));
}
