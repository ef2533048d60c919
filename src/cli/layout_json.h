// The JSON both `kvsim size` and `kvsim replay` print for a model's layer groups, so a
// program reading either finds the same keys.
#ifndef KVSIM_SRC_CLI_LAYOUT_JSON_H_
#define KVSIM_SRC_CLI_LAYOUT_JSON_H_

#include <nlohmann/json.hpp>
#include <string>

#include "kvsim/model.h"

namespace kvsim::cli {

// "full", "sliding 4096" or "MLA".
inline std::string layer_group_kind(const LayerGroup& g) {
  if (g.name.rfind("mla", 0) == 0) return "MLA";
  return g.window_tokens == 0 ? "full" : "sliding " + std::to_string(g.window_tokens);
}

inline nlohmann::ordered_json layer_groups_json(const KvLayout& layout) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& g : layout.groups) {
    out.push_back({{"name", g.name},
                   {"kind", layer_group_kind(g)},
                   {"window_tokens", g.window_tokens},
                   {"layers", g.layers},
                   {"kv_heads", g.kv_heads},
                   {"k_head_dim", g.k_head_dim},
                   {"v_head_dim", g.v_head_dim},
                   {"bytes_per_layer_position", g.bytes_per_layer_position},
                   {"bytes_per_position", g.bytes_per_position}});
  }
  return out;
}

}  // namespace kvsim::cli

#endif  // KVSIM_SRC_CLI_LAYOUT_JSON_H_
