// Device presets, the KV budget subtraction, the parameter estimate and vLLM's paged pool.
#include "kvsim/budget.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <string>

#include "decimal.h"
#include "kvsim/error.h"
#include "kvsim/option_names.h"
#include "kvsim/units.h"

namespace kvsim {
namespace {

__extension__ typedef __int128 Wide;  // exact products of a byte count and a ppb fraction

constexpr std::int64_t kMiB = std::int64_t{1} << 20;
constexpr std::int64_t kGBps = 1'000'000'000;         // spec sheets quote decimal GB/s
constexpr std::int64_t kTflops = 1'000'000'000'000;   // and decimal TFLOPS

// Totals are nvidia-smi's memory.total, an exact MiB count that does not change with the
// driver. CUDA's own total (cudaMemGetInfo, torch.cuda.mem_get_info()[1], deviceQuery), which
// vLLM multiplies by --gpu-memory-utilization, is 0.5-2% lower and moves with the driver version
// (the figures quoted below); pass --device-memory to use the one your machine prints.
// Bandwidth and dense BF16 throughput are the vendors' spec-sheet peaks.
// Achievable shares (DevicePreset::compute_permille, memory_permille) and their sources.
// Compute: the BF16 "Maximum Achievable Matmul FLOPS" table of stas00/ml-engineering
// (compute/accelerator/README.md; mamf-finder.py, best shape, mean of 100 iterations), MAMF /
// spec: A100 SXM 271.2/312 = 86.9%, H100 SXM 794.5/989 = 80.3% ("H200 is the same"), B200 SXM
// 1745/2250 = 77.6%, MI300X 668.4/1300 = 51.4%, A100 PCIe 252.9/312 = 81.1%. A device without
// a row takes the measured device closest to it, named in its row. Memory: a streaming copy
// sustains 90% of the spec bandwidth (H100 SXM: 3,024 GB/s device-to-device copy of 3,350,
// 90.3%).
constexpr std::int64_t kMemoryPermille = 900;

// Links, for the roofline's collectives (DevicePreset::link_*). Between RTX PRO 6000 cards over
// PCIe 5.0 x16, peer-to-peer writes sustain 53-56 GB/s one way of the link's 63 on one NUMA
// node (voipmonitor/rtx6kpro, hardware/pcie-bandwidth.md, five systems), so 53 GB/s, 84%; on
// the same page a one-shot all-reduce kernel (PCIe switches) takes 7.5 us for 1 KB, against
// NCCL's 24 us. vLLM's own one-shot kernel is used below 8 MiB between two such cards. Devices
// without such a measurement take their link's spec-sheet rate one way (NVLink: half the
// bidirectional figure NVIDIA quotes; PCIe 4.0 x16: 32 GB/s) at the same 84%, and NVLink
// devices 9 us for a small all-reduce (vLLM's custom all-reduce at tensor parallelism 2 on H100
// SXM, sgl-project/sglang#2904).
constexpr std::int64_t kLinkPermille = 840;
constexpr std::int64_t kPcieLatencyNs = 7'500;
constexpr std::int64_t kNvlinkLatencyNs = 9'000;
// Sources several presets share: Ampere PCIe cards without a MAMF row of their own, and
// GeForce cards' PCIe link.
constexpr const char* kAmperePcieEfficiency =
    "compute: A100 PCIe MAMF 252.9 of 312 (81.1%), the closest Ampere PCIe card; memory: 90%";
constexpr const char* kGeForcePcieLink =
    "PCIe 4.0 x16: 32 GB/s one way, at 84% (GeForce cards have no peer-to-peer: NCCL goes through host memory, "
    "slower than this)";
constexpr std::int64_t link(std::int64_t spec_gb_per_s) { return spec_gb_per_s * kGBps / 1000 * kLinkPermille; }

const std::vector<DevicePreset>& presets() {
  static const std::vector<DevicePreset> list = {
      {"A100-40GB", "NVIDIA A100-SXM4-40GB", 40960 * kMiB, 1555 * kGBps, 312 * kTflops,
       "total: nvidia-smi 40960MiB (modal-labs/modal-client PR #2797; CUDA reports 42,298,834,944 "
       "bytes under driver 12.2, bottlerocket-os/bottlerocket PR #3873 deviceQuery); NVIDIA A100 "
       "datasheet: 1,555 GB/s HBM2 (SXM4 40GB), 312 TFLOPS BF16 dense (624 with sparsity)",
       869, kMemoryPermille, "compute: A100 SXM MAMF 271.2 of 312 TFLOPS (86.9%); memory: 90%", 42'298'834'944, 80,
       link(300), kNvlinkLatencyNs, "NVLink 3: 600 GB/s both ways, 300 one way, at 84%"},
      {"A100-80GB", "NVIDIA A100-SXM4-80GB", 81920 * kMiB, 2039 * kGBps, 312 * kTflops,
       "total: nvidia-smi 81920MiB (modal-labs/modal-client PR #2797; CUDA reports 84,987,740,160 "
       "bytes under driver 12.2 and 85,100,068,864 under 12.5 in published deviceQuery logs); "
       "NVIDIA A100 datasheet: 2,039 GB/s HBM2e (SXM4 80GB), 312 TFLOPS BF16 dense",
       869, kMemoryPermille, "compute: A100 SXM MAMF 271.2 of 312 TFLOPS (86.9%); memory: 90%", 85'100'068'864, 80,
       link(300), kNvlinkLatencyNs, "NVLink 3: 600 GB/s both ways, 300 one way, at 84%"},
      {"A100-PCIe-40GB", "NVIDIA A100-PCIE-40GB", 40960 * kMiB, 1555 * kGBps, 312 * kTflops,
       "total: nvidia-smi 40960MiB (nvidia-smi --query-gpu output quoted in many public logs, e.g. "
       "\"NVIDIA A100-PCIE-40GB, 40960 MiB\"; CUDA reports 42,297,786,368 bytes under driver 12.3 and "
       "42,405,855,232 under 13.0, felicepantaleo/gpu_training cuda.md deviceQuery); NVIDIA A100 datasheet: "
       "1,555 GB/s HBM2 (PCIe 40GB), 312 TFLOPS BF16 dense (624 with sparsity)",
       811, kMemoryPermille, "compute: A100 PCIe MAMF 252.9 of 312 TFLOPS (81.1%), its own row; memory: 90%",
       42'405'855'232, 80,
       link(32), kPcieLatencyNs,
       "PCIe 4.0 x16: 32 GB/s one way, at 84% (an NVLink bridge pairing two cards, 600 GB/s both ways, is optional "
       "and not modelled)"},
      {"A100-PCIe-80GB", "NVIDIA A100 80GB PCIe", 81920 * kMiB, 1935 * kGBps, 312 * kTflops,
       "total: nvidia-smi 81920MiB (nvidia-smi --query-gpu output quoted in many public logs, e.g. "
       "\"NVIDIA A100 80GB PCIe, 81920 MiB, 8.0\"; CUDA reports 84,974,239,744 bytes under driver 12.4 in a "
       "published deviceQuery log); NVIDIA A100 datasheet: 1,935 GB/s HBM2e (PCIe 80GB), 312 TFLOPS BF16 dense",
       811, kMemoryPermille, "compute: A100 PCIe MAMF 252.9 of 312 TFLOPS (81.1%), its own row; memory: 90%",
       84'974'239'744, 80,
       link(32), kPcieLatencyNs,
       "PCIe 4.0 x16: 32 GB/s one way, at 84% (an NVLink bridge pairing two cards, 600 GB/s both ways, is optional "
       "and not modelled)"},
      {"H100-80GB", "NVIDIA H100 80GB HBM3", 81559 * kMiB, 3350 * kGBps, 989'500 * (kTflops / 1000),
       "total: nvidia-smi 81559MiB = 85,520,809,984 bytes (modal-labs/modal-client PR #2797; CUDA "
       "reports 85,045,477,376 under driver 12.7 and 85,017,755,648 under 13.0 in deviceQuery "
       "logs); NVIDIA H100 datasheet (SXM5): 3.35 TB/s HBM3, 1,979 TFLOPS BF16 with sparsity = "
       "989.5 dense",
       803, kMemoryPermille, "compute: H100 SXM MAMF 794.5 of 989 TFLOPS (80.3%); memory: 90%", 85'017'755'648, 90,
       link(450), kNvlinkLatencyNs, "NVLink 4: 900 GB/s both ways, 450 one way, at 84%"},
      {"H100-PCIe", "NVIDIA H100 PCIe", 81559 * kMiB, 2000 * kGBps, 756'500 * (kTflops / 1000),
       "total: nvidia-smi 81559MiB (nvidia-smi --query-gpu output quoted in many public logs, e.g. "
       "\"NVIDIA H100 PCIe, 81559 MiB\"; no published CUDA total found); NVIDIA H100 datasheet (PCIe column) "
       "and product brief PB-11133-001: 80 GB HBM2e at 2 TB/s, 1,513 TFLOPS BF16 with sparsity = 756.5 dense",
       660, kMemoryPermille,
       "compute: mamf-finder measures 499.5 of 756.5 TFLOPS (66.0%, mag-/gpu_benchmark README; a torch bf16 "
       "matmul sweep gives 495.9, zzc0721/torch-performance-test-data issue 95); the 350 W card does not reach "
       "H100 SXM's 80.3%; memory: 90%",
       0, 90,
       link(63), kPcieLatencyNs,
       "PCIe 5.0 x16: 63 GB/s one way (NVIDIA quotes 128 GB/s both ways), at 84% (an NVLink bridge, 600 GB/s both "
       "ways, is optional and not modelled)"},
      {"H100-NVL", "NVIDIA H100 NVL", 95830 * kMiB, 3938 * kGBps, 835'500 * (kTflops / 1000),
       "total: nvidia-smi 95830MiB (thamada/nvidia-smi nvsim/H100NVLx2_smi.py, driver 550.54.14; CUDA reports "
       "99,861,594,112 bytes under driver 12.4, gls/H100NVLx2_deviceQuery.py); NVIDIA H100 NVL product brief "
       "PB-11773-001, table 2: 94 GB HBM3 at 3,938 GB/s; H100 NVL datasheet: 1,671 TFLOPS BF16 with sparsity "
       "= 835.5 dense",
       585, kMemoryPermille,
       "compute: mamf-finder measures 488.5 of 835.5 TFLOPS on one card (58.5%, mag-/gpu_benchmark README); "
       "memory: 90%",
       99'861'594'112, 90,
       link(300), kNvlinkLatencyNs,
       "NVLink bridge of an H100 NVL pair: 600 GB/s both ways, 300 one way, at 84% (only the two bridged cards; "
       "a larger group crosses PCIe 5.0)"},
      {"H200-141GB", "NVIDIA H200", 143771 * kMiB, 4800 * kGBps, 989'500 * (kTflops / 1000),
       "total: nvidia-smi 143771MiB (nvidia-smi --query-gpu output quoted in many public logs); "
       "NVIDIA H200 datasheet (SXM): 4.8 TB/s HBM3e, 1,979 TFLOPS BF16 with sparsity = 989.5 dense",
       803, kMemoryPermille, "compute: the MAMF table's H100 SXM row, 80.3% (\"H200 is the same\"); memory: 90%", 0, 90,
       link(450), kNvlinkLatencyNs, "NVLink 4: 900 GB/s both ways, 450 one way, at 84%"},
      {"L4", "NVIDIA L4", 23034 * kMiB, 300 * kGBps, 121 * kTflops,
       "total: nvidia-smi 23034MiB (modal-labs/modal-client PR #2797; CUDA reports 23,612,293,120 "
       "bytes under driver 12.0 in a published deviceQuery log); NVIDIA L4 datasheet: 300 GB/s "
       "GDDR6, 242 TFLOPS BF16 with sparsity = 121 dense",
       803, kMemoryPermille, "compute: no Ada row in the MAMF table; H100 SXM's 80.3% stands in; memory: 90%", 23'612'293'120, 89,
       link(32), kPcieLatencyNs, "PCIe 4.0 x16: 32 GB/s one way, at 84%"},
      {"T4", "Tesla T4", 15360 * kMiB, 300 * kGBps, 65 * kTflops,
       "total: nvidia-smi 15360MiB (modal-labs/modal-client PR #2797; CUDA reports 15,843,721,216 bytes under "
       "driver 11.2 and 15,642,329,088 under 12.5 in published deviceQuery logs); NVIDIA T4 datasheet: 16 GB "
       "GDDR6 at 300 GB/s (the product page says 320+), 65 TFLOPS FP16 mixed precision (FP32 accumulate, dense): "
       "Turing has no BF16, so this is the FP16 tensor figure and the card serves in FP16",
       811, kMemoryPermille,
       "compute: no Turing row in the MAMF table; A100 PCIe's 252.9 of 312 (81.1%), the closest measured PCIe card "
       "with pre-Hopper (mma.sync) tensor cores; the 70 W cap may keep a T4 below it; memory: 90%",
       15'642'329'088, 75,
       link(16), kPcieLatencyNs, "PCIe 3.0 x16: 16 GB/s one way (NVIDIA quotes 32 GB/s), at 84%"},
      {"RTX-4090", "NVIDIA GeForce RTX 4090", 24564 * kMiB, 1008 * kGBps, 165'200 * (kTflops / 1000),
       "total: nvidia-smi 24564MiB (nvidia-smi --query-gpu output quoted in public logs; CUDA "
       "reports 25,386,352,640 bytes on Linux under driver 12.4); NVIDIA Ada whitepaper: 1,008 GB/s "
       "GDDR6X (21 Gbps x 384 bit), 165.2 TFLOPS BF16 dense with FP32 accumulate",
       1000, kMemoryPermille,
       "compute: mamf-finder measures 178.5 TFLOPS (mag-/gpu_benchmark README), above the FP32-accumulate "
       "spec, so 100%; memory: 90%", 25'386'352'640, 89,
       link(32), kPcieLatencyNs, kGeForcePcieLink},
      {"RTX-3090", "NVIDIA GeForce RTX 3090", 24576 * kMiB, 936 * kGBps, 71 * kTflops,
       "total: nvidia-smi 24576MiB (nvidia-smi output quoted in public logs); NVIDIA Ampere GA102 "
       "whitepaper, appendix A: 936 GB/s GDDR6X (19.5 Gbps x 384 bit), 71 TFLOPS BF16 dense with FP32 "
       "accumulate (142 with sparsity; GeForce runs FP32 accumulation at half the FP16 rate)",
       811, kMemoryPermille, kAmperePcieEfficiency, 0, 86,
       link(32), kPcieLatencyNs, kGeForcePcieLink},
      {"RTX-A6000", "NVIDIA RTX A6000", 49140 * kMiB, 768 * kGBps, 154'800 * (kTflops / 1000),
       "total: nvidia-smi 49140MiB (nvidia-smi output quoted in public logs); NVIDIA RTX A6000 "
       "datasheet and GA102 whitepaper, appendix C: 48 GB GDDR6, 768 GB/s (16 Gbps x 384 bit), 154.8 "
       "TFLOPS BF16 dense with FP32 accumulate (309.7 with sparsity)",
       811, kMemoryPermille, kAmperePcieEfficiency, 0, 86,
       link(32), kPcieLatencyNs, "PCIe 4.0 x16: 32 GB/s one way, at 84% (an NVLink bridge, 112.5 GB/s both ways, is optional)"},
      {"RTX-6000-Ada", "NVIDIA RTX 6000 Ada Generation", 49140 * kMiB, 960 * kGBps, 364'250 * (kTflops / 1000),
       "total: nvidia-smi 49140MiB with ECC off, the default (thamada/nvidia-smi gls/RTX6000Ada_x8_smi.py, driver "
       "550.127.05; CUDA reports 51,002,867,712 bytes under driver 12.4, gls/RTX6000Ada_x8_deviceQuery.py); NVIDIA "
       "RTX 6000 Ada datasheet: 48 GB GDDR6 at 960 GB/s, 1,457 TFLOPS tensor (FP8 with sparsity) = 364.25 TFLOPS "
       "BF16 dense with FP32 accumulate (142 SMs x 2,505 MHz x 1,024)",
       803, kMemoryPermille, "compute: no Ada row in the MAMF table; H100 SXM's 80.3% stands in, as for L40S; memory: 90%",
       51'002'867'712, 89,
       link(32), kPcieLatencyNs, "PCIe 4.0 x16: 32 GB/s one way, at 84% (no NVLink on Ada)"},
      {"RTX-PRO-6000", "NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887 * kMiB, 1597 * kGBps,
       500 * kTflops,
       "total: nvidia-smi 97887MiB (published nvidia-smi logs of the Server Edition); NVIDIA's RTX PRO "
       "6000 Blackwell Server Edition product page: 96 GB GDDR7, 1,597 GB/s, FP16/BF16 tensor 1 PFLOPS "
       "with sparsity = 500 TFLOPS dense. The passively cooled data-centre card that clouds rent (AWS "
       "g7e) and the measured runs used (LLMServingSim's cluster config and issue 13: 1,597 GB/s)",
       776, kMemoryPermille, "compute: no row for it; B200's 77.6%, the same Blackwell generation; memory: 90%", 0, 120,
       53 * kGBps, kPcieLatencyNs, "PCIe 5.0 x16: 53 GB/s one way measured between two cards (voipmonitor/rtx6kpro)"},
      {"RTX-PRO-6000-WS", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 97887 * kMiB, 1792 * kGBps,
       503'800 * (kTflops / 1000),
       "total: nvidia-smi 97887MiB (published nvidia-smi logs; 4 cards report 391,548 MiB); NVIDIA RTX "
       "PRO 6000 Blackwell datasheet: 96 GB GDDR7, 1,792 GB/s (28 Gbps x 512 bit), 4,000 AI TOPS "
       "(FP4 with sparsity) = 503.8 TFLOPS BF16 dense with FP32 accumulate: the actively cooled "
       "desk-side card, whose memory runs faster than the Server Edition's (RTX-PRO-6000)",
       776, kMemoryPermille, "compute: no row for it; B200's 77.6%, the same Blackwell generation; memory: 90%", 0, 120,
       53 * kGBps, kPcieLatencyNs, "PCIe 5.0 x16: 53 GB/s one way measured between two cards (voipmonitor/rtx6kpro)"},
      {"L40S", "NVIDIA L40S", 46068 * kMiB, 864 * kGBps, 362'050 * (kTflops / 1000),
       "total: nvidia-smi 46068MiB (published nvidia-smi logs, e.g. AWS g6e.xlarge); NVIDIA L40S "
       "datasheet: 48 GB GDDR6, 864 GB/s, 362.05 TFLOPS BF16 dense (733 with sparsity)",
       803, kMemoryPermille, "compute: no Ada row in the MAMF table; H100 SXM's 80.3% stands in; memory: 90%", 0, 89,
       link(32), kPcieLatencyNs, "PCIe 4.0 x16: 32 GB/s one way, at 84%"},
      {"L40", "NVIDIA L40", 46068 * kMiB, 864 * kGBps, 181'050 * (kTflops / 1000),
       "total: nvidia-smi 46068MiB (nvidia-smi --query-gpu output quoted in many public logs, e.g. "
       "\"NVIDIA L40, 46068 MiB\"; no published CUDA total found); NVIDIA L40 datasheet: 48 GB GDDR6 with ECC at "
       "864 GB/s, 181.05 TFLOPS BF16 dense (362.1 with sparsity)",
       803, kMemoryPermille, "compute: no Ada row in the MAMF table; H100 SXM's 80.3% stands in, as for L40S; memory: 90%",
       0, 89,
       link(32), kPcieLatencyNs, "PCIe 4.0 x16: 32 GB/s one way, at 84% (no NVLink)"},
      {"A10G", "NVIDIA A10G", 23028 * kMiB, 600 * kGBps, 70 * kTflops,
       "total: nvidia-smi 23028MiB (published nvidia-smi logs of AWS g5 instances); 24 GB GDDR6 at "
       "600 GB/s and 70 TFLOPS BF16 dense tensor (AWS's A10G variant of the A10, whose datasheet "
       "gives 125; Baseten, \"NVIDIA A10 vs A10G for ML model inference\")",
       811, kMemoryPermille, kAmperePcieEfficiency, 0, 86,
       link(32), kPcieLatencyNs, "PCIe 4.0 x16: 32 GB/s one way, at 84%"},
      {"A10", "NVIDIA A10", 23028 * kMiB, 600 * kGBps, 125 * kTflops,
       "total: nvidia-smi 23028MiB (NVML total 24,146,608,128 bytes under driver 535.129.03, mayooot/detect-gpu "
       "issue 3; CUDA reports 23,609,475,072 bytes under driver 12.2 and 23,696,375,808 under 12.8 in published "
       "deviceQuery logs); NVIDIA A10 datasheet: 24 GB GDDR6 at 600 GB/s, BFLOAT16 Tensor Core 125 TFLOPS dense "
       "(250 with sparsity)",
       811, kMemoryPermille, kAmperePcieEfficiency, 23'696'375'808, 86,
       link(32), kPcieLatencyNs, "PCIe 4.0 x16: 32 GB/s one way, at 84%"},
      {"H20", "NVIDIA H20", 97871 * kMiB, 4000 * kGBps, 148 * kTflops,
       "total: nvidia-smi 97871MiB (published nvidia-smi logs); NVIDIA H20: 96 GB HBM3, 4.0 TB/s, "
       "148 TFLOPS BF16 dense (296 INT8 TOPS)",
       803, kMemoryPermille, "compute: Hopper, the MAMF table's H100 SXM row, 80.3%; memory: 90%", 0, 90,
       link(450), kNvlinkLatencyNs, "NVLink: 900 GB/s both ways, 450 one way, at 84%"},
      {"B200", "NVIDIA B200", 183359 * kMiB, 8000 * kGBps, 2250 * kTflops,
       "total: nvidia-smi 183359MiB (published nvidia-smi logs); NVIDIA HGX B200 datasheet: 180 GB "
       "HBM3e per GPU at 8 TB/s, 2.25 PFLOPS BF16 dense (4.5 with sparsity)",
       776, kMemoryPermille, "compute: B200 SXM MAMF 1745 of 2250 TFLOPS (77.6%); memory: 90%", 0, 100,
       link(900), kNvlinkLatencyNs, "NVLink 5: 1.8 TB/s both ways, 900 one way, at 84%"},
      {"MI300X", "AMD Instinct MI300X", 205'822'885'888, 5300 * kGBps, 1'307'400 * (kTflops / 1000),
       "total: rocm-smi --showmeminfo vram 205,822,885,888 bytes (published logs); AMD Instinct "
       "MI300X datasheet: 192 GB HBM3, 5.3 TB/s, 1,307.4 TFLOPS BF16 dense (2,614.9 with sparsity)",
       514, kMemoryPermille, "compute: MI300X MAMF 668.4 of 1300 TFLOPS (51.4%, ROCm 6.3, TunableOp on); memory: 90%", 0, 0,
       link(64), kPcieLatencyNs, "Infinity Fabric: 128 GB/s both ways per peer link, 64 one way, at 84% (one link: a larger group's mesh is faster)"},
  };
  return list;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::int64_t mul(std::int64_t a, std::int64_t b) { return checked_mul(a, b, "parameter count"); }
std::int64_t add(std::int64_t a, std::int64_t b) { return checked_add(a, b, "parameter count"); }

std::int64_t require_field(const ModelSpec& model, std::int64_t value, const char* field) {
  if (value <= 0) {
    throw InputError(Location{model.name, 0, "field '" + std::string(field) + "'"},
                     std::string("unknown, so the parameter count cannot be estimated; pass ") + kOptParams + " or " +
                         kOptWeightsBytes);
  }
  return value;
}

std::int64_t bits_of(std::string_view dtype) {
  if (auto d = try_parse_kv_dtype(dtype)) return kv_dtype_info(*d).bits;
  return 0;
}

// Blocks one request of `tokens` keeps in one KV-cache group of this kind, per vLLM's
// kv_cache_interface.py: FullAttentionSpec.max_memory_usage_bytes is cdiv(max_model_len,
// block_size) pages; SlidingWindowSpec's is cdiv(min(sliding_window - 1 + max_num_batched_tokens,
// max_model_len), block_size) + 1 pages (the window need not start on a block boundary, and a
// chunked prefill step adds up to max_num_batched_tokens new tokens to the W - 1 kept ones).
std::int64_t spec_blocks(const LayerGroup& g, std::int64_t tokens, const PagedOptions& o) {
  if (tokens <= 0) return 0;
  if (g.window_tokens == 0) return ceil_div(tokens, o.block_tokens);
  const std::int64_t kept = std::min(
      checked_add(g.window_tokens - 1, o.max_num_batched_tokens, "sliding-window tokens"), tokens);
  return checked_add(ceil_div(kept, o.block_tokens), 1, "blocks per request");
}

}  // namespace

std::string_view device_total_tool(const DevicePreset& preset) {
  return preset.product.starts_with("AMD") ? "rocm-smi VRAM total" : "nvidia-smi memory.total";
}

const std::vector<DevicePreset>& device_presets() { return presets(); }

const DevicePreset& find_device_preset(std::string_view name, std::string_view field) {
  const std::string key = lower(name);
  std::string known;
  for (const auto& d : presets()) {
    if (lower(d.name) == key) return d;
    known += (known.empty() ? "" : ", ") + std::string(d.name);
  }
  // Only a budget's device can be replaced by a memory size.
  const std::string or_memory = field == kOptDevice ? std::string("; or give ") + kOptDeviceMemory + " BYTES" : "";
  throw InputError(Location{"", 0, std::string(field)},
                   "no device named \"" + std::string(name) + "\" (known: " + known + or_memory + ")");
}

const DevicePreset* find_device_preset_by_product(std::string_view product) {
  const std::string key = lower(product);
  for (const auto& d : presets()) {
    if (lower(d.product) == key) return &d;
  }
  return nullptr;
}

std::int64_t parse_gpu_memory_utilization(std::string_view text, std::string_view field) {
  const Location where{"", 0, std::string(field)};
  std::int64_t ppb = 0;
  const auto status = detail::parse_scaled_decimal(text, 9, ppb);
  if (status != detail::DecimalStatus::ok) {
    throw InputError(where, detail::describe(status, "\"" + std::string(text) + "\"") +
                                " (expected a fraction such as 0.9, with at most 9 decimals)");
  }
  if (ppb <= 0 || ppb > kPartsPerBillion) {
    throw InputError(where, "expected a fraction in (0, 1], got " + std::string(text));
  }
  return ppb;
}

std::string format_ppb(std::int64_t ppb) {
  std::string text = format_ratio(ppb, kPartsPerBillion, 9);
  while (!text.empty() && text.back() == '0') text.pop_back();
  if (!text.empty() && text.back() == '.') text.pop_back();
  return text;
}

ParameterSplit split_parameters(const ModelSpec& m) {
  const std::int64_t hidden = require_field(m, m.hidden_size, "hidden_size");
  const std::int64_t vocab = require_field(m, m.vocab_size, "vocab_size");
  const std::int64_t heads = m.num_attention_heads;

  std::int64_t attention = 0;
  if (m.mla) {
    const MlaDims& d = *m.mla;
    const std::int64_t qk = add(d.qk_nope_head_dim, d.qk_rope_head_dim);
    attention = d.q_lora_rank > 0
                    ? add(add(mul(hidden, d.q_lora_rank), d.q_lora_rank), mul(d.q_lora_rank, mul(heads, qk)))
                    : mul(hidden, mul(heads, qk));
    attention = add(attention, mul(hidden, add(d.kv_lora_rank, d.qk_rope_head_dim)));  // kv_a_proj_with_mqa
    attention = add(attention, d.kv_lora_rank);                                     // kv_a_layernorm
    attention = add(attention, mul(d.kv_lora_rank, mul(heads, add(d.qk_nope_head_dim, d.v_head_dim))));
    attention = add(attention, mul(mul(heads, d.v_head_dim), hidden));              // o_proj
  } else {
    const std::int64_t q = mul(heads, m.head_dim);
    const std::int64_t kv = mul(m.num_key_value_heads, m.head_dim);
    attention = add(add(mul(hidden, q), mul(2, mul(hidden, kv))), mul(q, hidden));
  }
  const std::int64_t norms = mul(2, hidden);

  std::int64_t dense_mlp = 0;
  const std::int64_t dense_layers = dense_mlp_layers(m);
  std::int64_t moe_mlp = 0;
  std::int64_t moe_mlp_per_token = 0;
  std::int64_t routed_expert_params = 0;  // per MoE layer
  if (m.moe) {
    const MoeDims& e = *m.moe;
    const std::int64_t expert = mul(3, mul(hidden, require_field(m, e.expert_intermediate_size, "moe_intermediate_size")));
    const std::int64_t router = mul(e.routed_experts, hidden);
    moe_mlp = add(mul(add(e.routed_experts, e.shared_experts), expert), router);
    routed_expert_params = mul(e.routed_experts, expert);
    moe_mlp_per_token = add(mul(add(routed_experts_used(e), e.shared_experts), expert), router);
    if (dense_layers > 0) dense_mlp = mul(3, mul(hidden, require_field(m, m.intermediate_size, "intermediate_size")));
  } else {
    dense_mlp = mul(3, mul(hidden, require_field(m, m.intermediate_size, "intermediate_size")));
  }
  const std::int64_t moe_layers = m.num_hidden_layers - dense_layers;

  ParameterSplit p;
  p.routed_experts = mul(moe_layers, routed_expert_params);
  p.embedding = mul(vocab, hidden);
  p.lm_head = mul(vocab, hidden);
  p.per_token = add(mul(dense_layers, add(attention, dense_mlp)), mul(moe_layers, add(attention, moe_mlp_per_token)));
  p.total = p.embedding;                                             // embed_tokens
  if (!m.tie_word_embeddings) p.total = add(p.total, p.lm_head);     // lm_head
  p.total = add(p.total, hidden);                                    // final norm
  p.total = add(p.total, mul(dense_layers, add(add(attention, dense_mlp), norms)));
  p.total = add(p.total, mul(moe_layers, add(add(attention, moe_mlp), norms)));
  return p;
}

std::int64_t estimate_parameter_count(const ModelSpec& m) { return split_parameters(m).total; }

bool can_split_parameters(const ModelSpec& m) {
  return m.hidden_size > 0 && m.vocab_size > 0 && (m.moe || m.intermediate_size > 0);
}

ModelWeights model_weights(const ModelSpec& model, const KvOptions& kv, const BudgetOptions& o) {
  ModelWeights w;
  w.devices = checked_mul(kv.tensor_parallel, kv.pipeline_parallel, "device count");
  if (o.weights_bytes) {
    if (*o.weights_bytes < 0) throw InputError(Location{"", 0, kOptWeightsBytes}, "expected a non-negative size");
    w.weights_bytes = *o.weights_bytes;
    w.parameter_source = kOptWeightsBytes;
  } else {
    if (o.parameter_count > 0) {
      w.parameter_count = o.parameter_count;
      w.parameter_source = kOptParams;
    } else if (model.parameter_count > 0) {
      w.parameter_count = model.parameter_count;
      w.parameter_source = model.parameter_count_source.empty() ? "published" : model.parameter_count_source;
    } else {
      w.parameter_count = estimate_parameter_count(model);
      w.parameter_source = "estimated from the config";
    }
    if (o.weight_bits == 0) require_weight_bits_known(model);
    if (o.weight_bits > 0) {
      w.weight_bits = o.weight_bits;
      w.weight_bits_source = kOptWeightDtype;
    } else if (model.weight_bits > 0) {
      w.weight_bits = model.weight_bits;
      w.weight_bits_source = "quantization_config";
    } else if (const std::int64_t bits = bits_of(model.weight_dtype); bits > 0) {
      // vLLM serves a float32 checkpoint in 16 bits (vllm/config/model.py _resolve_auto_dtype).
      w.weight_bits = std::min<std::int64_t>(bits, 16);
      w.weight_bits_source = "torch_dtype " + model.weight_dtype + (bits > 16 ? ", served in 16 bits" : "");
    } else if (!model.weight_dtype.empty()) {
      throw InputError(Location{model.name, 0, "field 'torch_dtype'"},
                       "\"" + printable(model.weight_dtype) + "\" is not a dtype kvsim knows the width of, so the weights "
                       "cannot be sized: give --weight-dtype or --weights-bytes");
    } else {
      w.weight_bits = 16;
      w.weight_bits_source = "assumed 16-bit (no torch_dtype)";
    }
    w.weights_bytes = ceil_div(checked_mul(w.parameter_count, w.weight_bits, "weight bits"), 8);
  }
  // Expert parallelism over N ranks: a device holds whole experts, ceil(E / N) of each MoE
  // layer's E routed experts (rank 0's share under vLLM's determine_expert_map, the largest:
  // the first E mod N ranks take one more), and all the other parameters.
  std::int64_t spread_bytes = 0;
  const std::int64_t experts = model.moe ? split_parameters(model).routed_experts : 0;
  const std::int64_t bits = w.weight_bits > 0 ? w.weight_bits : 16;
  const std::int64_t ranks = std::max<std::int64_t>(1, o.expert_parallel_ranks);
  std::int64_t held = experts;
  if (ranks > 1 && model.moe && model.moe->routed_experts > 0) {
    const std::int64_t e = model.moe->routed_experts;
    held = checked_mul(experts / e, ceil_div(e, ranks), "expert parameters");  // experts is a multiple of e
    spread_bytes = ceil_div(checked_mul(experts - held, bits, "expert bits"), 8);
  }
  w.weights_bytes_per_device = ceil_div(std::max<std::int64_t>(0, w.weights_bytes - spread_bytes), w.devices);
  if (w.parameter_count > 0 && experts > 0) {
    w.routed_expert_bytes_per_device = std::min(
        w.weights_bytes_per_device, ceil_div(ceil_div(checked_mul(held, bits, "expert bits"), 8), w.devices));
  }
  if (w.parameter_count > 0 && can_split_parameters(model) && !model.tie_word_embeddings) {
    // Only when the count holds the table and the LM head beside it (a --params below that
    // describes some other split, and nothing is taken out).
    const std::int64_t embedding = split_parameters(model).embedding;
    if (w.parameter_count > 2 * embedding) {
      const std::int64_t table = ceil_div(ceil_div(checked_mul(embedding, bits, "embedding bits"), 8), w.devices);
      w.embedding_bytes_per_device = std::min(w.weights_bytes_per_device - w.routed_expert_bytes_per_device, table);
    }
  }
  return w;
}

Budget derive_budget(const ModelSpec& model, const KvOptions& kv, const BudgetOptions& o) {
  Budget b;
  if (kv.tensor_parallel < 1 || kv.pipeline_parallel < 1) {
    throw InputError(Location{"", 0, std::string(kOptTp) + "/" + kOptPp}, "expected at least 1 device");
  }
  b.devices = checked_mul(kv.tensor_parallel, kv.pipeline_parallel, "device count");
  // A named device is checked even when its total is overridden or the budget is direct: the
  // replay engine reads its bandwidth and FLOP/s, and a typo should not pass silently.
  const DevicePreset* preset = o.device.empty() ? nullptr : &find_device_preset(o.device);
  if (preset != nullptr) b.device = std::string(preset->name);
  if (o.kv_budget_bytes) {
    if (*o.kv_budget_bytes <= 0) {
      throw InputError(Location{"", 0, kOptKvBudget}, "expected a positive number of bytes");
    }
    b.direct = true;
    b.kv_budget_bytes = *o.kv_budget_bytes;
    return b;
  }

  if (o.device_memory_bytes > 0) {
    b.device_total_bytes = o.device_memory_bytes;
    b.device_total_source = kOptDeviceMemory;
  } else if (preset != nullptr) {
    b.device_total_bytes = preset->total_bytes;
    b.device_total_source = std::string(preset->name) + " preset (" + std::string(device_total_tool(*preset)) + ")";
  } else {
    throw InputError(Location{"", 0, kOptDevice},
                     std::string("a KV budget needs a device (") + kOptDevice + " or " + kOptDeviceMemory + ") or " +
                         kOptKvBudget);
  }
  if (o.gpu_memory_utilization_ppb <= 0 || o.gpu_memory_utilization_ppb > kPartsPerBillion) {
    throw InputError(Location{"", 0, kOptGpuMemoryUtilization}, "expected a fraction in (0, 1]");
  }
  b.gpu_memory_utilization_ppb = o.gpu_memory_utilization_ppb;
  b.usable_bytes = static_cast<std::int64_t>(Wide{b.device_total_bytes} * o.gpu_memory_utilization_ppb /
                                             kPartsPerBillion);

  const ModelWeights w = model_weights(model, kv, o);
  b.parameter_count = w.parameter_count;
  b.parameter_source = w.parameter_source;
  b.weight_bits = w.weight_bits;
  b.weight_bits_source = w.weight_bits_source;
  b.weights_bytes = w.weights_bytes;
  b.weights_bytes_per_device = w.weights_bytes_per_device;
  if (o.reserve_bytes < 0) throw InputError(Location{"", 0, kOptReserve}, "expected a non-negative size");
  b.reserve_bytes = o.reserve_bytes;
  b.kv_budget_bytes = b.usable_bytes - b.weights_bytes_per_device - b.reserve_bytes;
  if (b.kv_budget_bytes <= 0) {
    throw InputError(Location{"", 0, "KV budget"},
                     "nothing is left for the KV cache on each device: " + with_commas(b.device_total_bytes) +
                         " bytes x " + format_ppb(b.gpu_memory_utilization_ppb) + " = " +
                         with_commas(b.usable_bytes) + ", - weights " + with_commas(b.weights_bytes) + " / " +
                         std::to_string(b.devices) + " device(s) = " + with_commas(b.weights_bytes_per_device) +
                         ", - reserve " + with_commas(b.reserve_bytes) + " = " + with_commas(b.kv_budget_bytes) +
                         " bytes. Use more devices (" + kOptTp + ", " + kOptPp + "), a larger device, or give " +
                         kOptKvBudget);
  }
  return b;
}

namespace {

// The whole model's layers of the kind of `stage_group` (layer groups of one kind share a name).
std::int64_t model_layers_of(const KvLayout& model, const LayerGroup& stage_group) {
  for (const auto& g : model.groups) {
    if (g.name == stage_group.name) return g.layers;
  }
  check(false, "paged_pool: a stage's layer group is not in the model's layout");
  return 0;
}

}  // namespace

KvLayout whole_model_layout(const std::vector<KvLayout>& stages) {
  check(!stages.empty(), "whole_model_layout: no stages");
  KvLayout whole = stages.front();
  whole.end_layer = stages.back().end_layer;
  for (std::size_t i = 1; i < stages.size(); ++i) {
    for (const auto& g : stages[i].groups) {
      const auto same = std::find_if(whole.groups.begin(), whole.groups.end(),
                                     [&](const LayerGroup& w) { return w.name == g.name; });
      if (same == whole.groups.end()) {
        whole.groups.push_back(g);
        continue;
      }
      same->layers = checked_add(same->layers, g.layers, "layers");
      same->bytes_per_position = checked_add(same->bytes_per_position, g.bytes_per_position, "bytes per position");
    }
    whole.state_layers += stages[i].state_layers;
    whole.kv_reused_layers += stages[i].kv_reused_layers;
  }
  return whole;
}

PagedPool paged_pool(const KvLayout& layout, std::int64_t kv_budget_bytes, const PagedOptions& o,
                     const KvLayout* model_layout) {
  if (o.block_tokens <= 0) throw InputError(Location{"", 0, kOptBlockSize}, "expected a positive number of tokens");
  if (o.max_num_batched_tokens <= 0) {
    throw InputError(Location{"", 0, kOptMaxNumBatchedTokens}, "expected a positive number of tokens");
  }
  check(!layout.groups.empty(), "paged_pool: a layout with no layer groups");
  const KvLayout& model = model_layout != nullptr ? *model_layout : layout;
  PagedPool p;
  p.block_tokens = o.block_tokens;
  const std::int64_t layer_bytes = layout.groups.front().bytes_per_layer_position;
  p.uniform_page = std::all_of(model.groups.begin(), model.groups.end(),
                               [&](const LayerGroup& g) { return g.bytes_per_layer_position == layer_bytes; });
  // Layers of one attention type that differ only in KV shape (a draft's beside its target's,
  // per-layer head counts): vLLM's get_kv_cache_groups makes them one group before it looks
  // at page sizes (UniformTypeKVCacheSpecs, vllm/v1/kv_cache_interface.py), whose page holds
  // every layer's: the layout below, exactly.
  const std::int64_t window = model.groups.front().window_tokens;
  p.uniform_type = model.groups.size() > 1 && std::all_of(model.groups.begin(), model.groups.end(), [&](const LayerGroup& g) {
                     return g.window_tokens == window;
                   });
  if (p.uniform_type) p.uniform_page = false;
  if (!p.uniform_page) {
    // Otherwise vLLM needs one page size for all groups; with differing widths it re-blocks
    // (unify_kv_cache_spec_page_size) or refuses. Approximate: one block id holds
    // block_tokens positions of every layer.
    p.page_bytes = 0;
    p.group_size = 0;
    for (const auto& g : layout.groups) p.group_size += g.layers;
    p.model_group_size = p.group_size;
    p.cache_groups = 1;
    p.block_bytes = checked_mul(o.block_tokens, layout.bytes_per_token(), "block bytes");
  } else {
    // vllm/v1/core/kv_cache_utils.py, over the whole model's layers: one attention type -> one
    // group of all layers; several -> group size = the smallest type's layer count, or the
    // largest's when max < 1.5 x min (to avoid padding), each type split into cdiv(layers,
    // size) groups (_get_kv_cache_groups_uniform_page_size).
    std::int64_t min_layers = std::numeric_limits<std::int64_t>::max();
    std::int64_t max_layers = 0;
    for (const auto& g : model.groups) {
      min_layers = std::min(min_layers, g.layers);
      max_layers = std::max(max_layers, g.layers);
    }
    p.model_group_size = 2 * max_layers < 3 * min_layers ? max_layers : min_layers;
    for (const auto& g : model.groups) p.cache_groups += ceil_div(g.layers, p.model_group_size);
    // On this stage (get_kv_cache_config_from_groups): a block holds a page in each of as many
    // layers as the fullest projected group has. A type's n groups take its layers in stride
    // (layers[i::n]), so a stage's run of c of them puts at most cdiv(c, n) in any one group;
    // the whole model's groups hold model_group_size.
    std::int64_t stage_layers = 0;
    for (const auto& g : layout.groups) {
      const std::int64_t n = ceil_div(model_layers_of(model, g), p.model_group_size);
      p.group_size = std::max(p.group_size, ceil_div(g.layers, n));
      stage_layers += g.layers;
    }
    p.padding_layers = p.cache_groups * p.group_size - stage_layers;
    p.page_bytes = checked_mul(o.block_tokens, layer_bytes, "page bytes");
    p.block_bytes = checked_mul(p.page_bytes, p.group_size, "block bytes");
  }
  // get_num_blocks: available_memory // page_size // num_layers (the group size).
  p.num_blocks = kv_budget_bytes > 0 ? kv_budget_bytes / p.block_bytes : 0;
  // _report_kv_cache_config: num_blocks // len(kv_cache_groups) * block_size tokens.
  p.kv_cache_tokens = checked_mul(p.num_blocks / p.cache_groups, o.block_tokens, "KV cache tokens");
  return p;
}

std::int64_t request_blocks(const KvLayout& layout, const PagedPool& pool, std::int64_t tokens,
                            const PagedOptions& o, const KvLayout* model) {
  std::int64_t blocks = 0;
  if (pool.uniform_page) {
    // Every group of the model, on every stage (its block table is the scheduler's).
    for (const auto& g : (model != nullptr ? *model : layout).groups) {
      blocks = checked_add(blocks, checked_mul(ceil_div(g.layers, pool.model_group_size), spec_blocks(g, tokens, o),
                                               "blocks per request"),
                           "blocks per request");
    }
    return blocks;
  }
  std::int64_t bytes = 0;
  for (const auto& g : layout.groups) {
    const std::int64_t positions = checked_mul(spec_blocks(g, tokens, o), o.block_tokens, "positions");
    bytes = checked_add(bytes, checked_mul(g.bytes_per_position, positions, "bytes per request"),
                        "bytes per request");
  }
  return ceil_div(bytes, pool.block_bytes);
}

}  // namespace kvsim
