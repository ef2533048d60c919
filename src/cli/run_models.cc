#include "run_models.h"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace kvsim::cli {
namespace {

// A preset serves every checkpoint of its geometry: base and instruction-tuned releases, and
// the names the Hub gave them before (Meta-Llama-3.1-*).
constexpr RunModelRow kModels[] = {
    {"meta-llama/Llama-3.1-8B", "llama-3.1-8b"},
    {"meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"},
    {"meta-llama/Meta-Llama-3.1-8B", "llama-3.1-8b"},
    {"meta-llama/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b"},
    // Llama 3 has 3.1's geometry with 8,192 positions (no rope scaling).
    {"meta-llama/Meta-Llama-3-8B", "llama-3.1-8b", 8192},
    {"meta-llama/Meta-Llama-3-8B-Instruct", "llama-3.1-8b", 8192},
    {"meta-llama/Llama-3.1-70B", "llama-3.1-70b"},
    {"meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b"},
    {"meta-llama/Meta-Llama-3.1-70B", "llama-3.1-70b"},
    {"meta-llama/Meta-Llama-3.1-70B-Instruct", "llama-3.1-70b"},
    {"meta-llama/Meta-Llama-3-70B", "llama-3.1-70b", 8192},
    {"meta-llama/Meta-Llama-3-70B-Instruct", "llama-3.1-70b", 8192},
    // Llama 3.3 70B has 3.1 70B's geometry and positions.
    {"meta-llama/Llama-3.3-70B-Instruct", "llama-3.1-70b"},
    {"meta-llama/Llama-3.2-3B", "llama-3.2-3b"},
    {"meta-llama/Llama-3.2-3B-Instruct", "llama-3.2-3b"},
    {"mistralai/Mistral-7B-v0.1", "mistral-7b-v0.1"},
    {"mistralai/Mistral-7B-Instruct-v0.1", "mistral-7b-v0.1"},
    {"Qwen/Qwen2.5-7B", "qwen2.5-7b"},
    // The instruction-tuned release's config gives 32,768 positions, the base's 131,072.
    {"Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b", 32768},
    {"Qwen/Qwen3-4B", "qwen3-4b"},
    {"Qwen/Qwen3-8B", "qwen3-8b"},
    {"Qwen/Qwen3-14B", "qwen3-14b"},
    {"Qwen/Qwen3-32B", "qwen3-32b"},
    // The preset is the 2507 release (262,144 positions); the original has 40,960.
    {"Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b", 40960},
    {"Qwen/Qwen3-30B-A3B-Instruct-2507", "qwen3-30b-a3b"},
    {"Qwen/Qwen3-30B-A3B-Thinking-2507", "qwen3-30b-a3b"},
    // The MoE models LLMServingSim ships configs for (configs/model/), besides the ones above.
    {"mistralai/Mixtral-8x7B-v0.1", "mixtral-8x7b-v0.1"},
    {"mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b-v0.1"},
    {"microsoft/Phi-mini-MoE-instruct", "phi-mini-moe"},
    // The other presets' checkpoints: sliding-window and hybrid models, MLA.
    {"microsoft/Phi-3-mini-4k-instruct", "phi-3-mini-4k"},
    {"google/gemma-2-9b", "gemma-2-9b"},
    {"google/gemma-2-9b-it", "gemma-2-9b"},
    // The preset is the text model (text_config); the vision tower's weights are not counted.
    {"google/gemma-3-27b-it", "gemma-3-27b"},
    {"google/gemma-3-27b-pt", "gemma-3-27b"},
    {"deepseek-ai/DeepSeek-V3", "deepseek-v3"},
    {"deepseek-ai/DeepSeek-V3-0324", "deepseek-v3"},
    {"deepseek-ai/DeepSeek-R1", "deepseek-v3"},
    {"deepseek-ai/DeepSeek-R1-0528", "deepseek-v3"},
};

struct DeviceRow {
  const char* hardware;
  const char* preset;
};
constexpr DeviceRow kDevices[] = {
    {"RTXPRO6000", "RTX-PRO-6000"}, {"RTX4090", "RTX-4090"}, {"H100", "H100-80GB"}, {"A100", "A100-80GB"},
    {"L4", "L4"}, {"A6000", "RTX-A6000"}, {"RTX3090", "RTX-3090"},
};

}  // namespace

const RunModelRow* run_model_row(std::string_view hf_name) {
  const auto row = std::find_if(std::begin(kModels), std::end(kModels),
                                [&](const RunModelRow& r) { return hf_name == r.hf_name; });
  if (row != std::end(kModels)) return row;
  // A local checkpoint ("/data/model/Qwen3-32B": vLLM records the path it loaded), or another
  // organisation's copy, by its last component, in any case: the Hub repository's name when
  // downloaded under it. The repository names in the table are distinct, so the match is
  // unambiguous. Hugging Face's cache names a repository's folder "models--ORG--NAME", with
  // the files under snapshots/<commit>: that folder gives the whole Hub name.
  std::vector<std::string_view> parts;
  for (std::size_t at = 0; at <= hf_name.size();) {
    const std::size_t end = std::min(hf_name.find_first_of("/\\", at), hf_name.size());
    const std::string_view part = hf_name.substr(at, end - at);
    if (!part.empty() && part != ".") parts.push_back(part);
    at = end + 1;
  }
  if (parts.size() < 2) return nullptr;  // a bare name is not a path
  const auto same = [](std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
           });
  };
  for (const std::string_view part : parts) {
    if (!part.starts_with("models--")) continue;
    std::string hub(part.substr(8));
    const std::size_t dashes = hub.find("--");
    if (dashes == std::string::npos) continue;
    hub.replace(dashes, 2, "/");
    const auto cached = std::find_if(std::begin(kModels), std::end(kModels),
                                     [&](const RunModelRow& r) { return same(hub, r.hf_name); });
    if (cached != std::end(kModels)) return cached;
  }
  const std::string_view last = parts.back();
  const auto by_dir = std::find_if(std::begin(kModels), std::end(kModels), [&](const RunModelRow& r) {
    const std::string_view name = r.hf_name;
    return same(name.substr(name.rfind('/') + 1), last);
  });
  return by_dir == std::end(kModels) ? nullptr : by_dir;
}

const char* run_device_preset(std::string_view hardware) {
  const auto row = std::find_if(std::begin(kDevices), std::end(kDevices),
                                [&](const DeviceRow& r) { return hardware == r.hardware; });
  return row == std::end(kDevices) ? nullptr : row->preset;
}

std::string run_name_table() {
  std::string out = "meta.json's model -> --model; peer_cluster_config.json's hardware -> --device:\n";
  for (const RunModelRow& r : kModels) {
    out += "  " + std::string(r.hf_name) + " -> " + r.preset;
    if (r.max_model_len > 0) out += fmt::format(" (--max-model-len {} when meta.json's is null)", r.max_model_len);
    out += "\n";
  }
  for (const DeviceRow& r : kDevices) out += "  " + std::string(r.hardware) + " -> " + r.preset + "\n";
  out += "A model given as a path (or another organisation's copy) is found by its last component,\n"
         "in any case (/data/model/Qwen3-32B as Qwen/Qwen3-32B), or by Hugging Face's cache folder\n"
         "(.../models--Qwen--Qwen3-32B/snapshots/<commit>).\n";
  return out;
}

}  // namespace kvsim::cli
