// What a measured run's meta.json and peer_cluster_config.json name, mapped onto kvsim's
// presets. `kvsim validate` replays with them; `kvsim calibrate` asks only whether the model
// has experts (data-parallel replicas of such a model take every step together).
#ifndef KVSIM_SRC_CLI_RUN_MODELS_H_
#define KVSIM_SRC_CLI_RUN_MODELS_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace kvsim::cli {

// meta.json's model (a Hugging Face name) -> kvsim's preset. max_model_len: the checkpoint's
// max_position_embeddings where it differs from the preset's (another release of the same
// geometry), the context vLLM allows when meta.json's max_model_len is null; 0: the preset's.
struct RunModelRow {
  const char* hf_name;
  const char* preset;
  std::int64_t max_model_len = 0;
};
// The row for `hf_name`, or for its last component (a local path the checkpoint was loaded
// from), or nullptr.
const RunModelRow* run_model_row(std::string_view hf_name);

// peer_cluster_config.json's hardware -> kvsim's device preset, or nullptr.
const char* run_device_preset(std::string_view hardware);

// Both tables, as --help lists them.
std::string run_name_table();

}  // namespace kvsim::cli

#endif  // KVSIM_SRC_CLI_RUN_MODELS_H_
