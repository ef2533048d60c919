// kvsim models: the built-in presets and their KV geometry, as a table or as JSON.
#include <fmt/core.h>

#include <nlohmann/json.hpp>
#include <type_traits>

#include "cli.h"
#include "json_text.h"
#include "kvsim/output_file.h"
#include "kvsim/model.h"
#include "kvsim/units.h"
#include "sheet_table.h"

namespace kvsim::cli {
namespace {

// "21 full + 21 sliding 4096": the layer groups of the whole model on one device.
std::string groups_text(const KvLayout& layout) {
  std::string out;
  for (const auto& g : layout.groups) {
    out += (out.empty() ? "" : " + ") + std::to_string(g.layers) + " " + g.name;
  }
  return out;
}

std::string dims_text(const LayerGroup& g) {
  return g.v_head_dim == 0 ? std::to_string(g.k_head_dim) + "/-" : std::to_string(g.k_head_dim) + "/" +
                                                                       std::to_string(g.v_head_dim);
}

}  // namespace

int run_models(const Invocation& inv) {
  const CommandSpec spec{
      "kvsim models [--json]",
      "Lists the built-in model presets: each one's source (the Hugging Face config.json its\n"
      "numbers come from), layers, attention and KV heads, K/V head dims, layer groups (full\n"
      "attention, sliding windows, MLA), maximum positions, and the KV bytes one token costs in\n"
      "bf16 on one device (MLA in the latent form serving engines store). Use a name with\n"
      "'kvsim size --model NAME'.",
      "  kvsim models\n  kvsim models --json"};
  po::options_description options("Options");
  options.add_options()("json", "print the presets as JSON");
  po::variables_map vm;
  if (!parse_options(inv, spec, options, {}, vm)) return kExitOk;

  KvOptions bf16;
  bf16.dtype = KvDtype::bf16;
  if (vm.count("json") != 0) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& m : model_presets()) {
      const KvLayout layout = kv_layout(m, bf16);
      nlohmann::ordered_json groups = nlohmann::ordered_json::array();
      for (const auto& g : layout.groups) {
        groups.push_back({{"name", g.name},
                          {"window_tokens", g.window_tokens},
                          {"layers", g.layers},
                          {"kv_heads", g.kv_heads},
                          {"k_head_dim", g.k_head_dim},
                          {"v_head_dim", g.v_head_dim}});
      }
      // A figure a preset does not have (head_dim under MLA, an unpublished parameter count)
      // is null, which pandas reads as missing, not 0.
      const auto known = [](const auto& v) {
        return v == std::remove_cvref_t<decltype(v)>{} ? nlohmann::ordered_json() : nlohmann::ordered_json(v);
      };
      nlohmann::ordered_json entry = {{"name", m.name},
                                      {"source", m.source},
                                      {"num_hidden_layers", m.num_hidden_layers},
                                      {"num_attention_heads", m.num_attention_heads},
                                      {"num_key_value_heads", m.num_key_value_heads},
                                      {"head_dim", known(m.head_dim)}};
      if (m.mla) {
        entry["mla"] = {{"kv_lora_rank", m.mla->kv_lora_rank},
                        {"qk_rope_head_dim", m.mla->qk_rope_head_dim},
                        {"qk_nope_head_dim", m.mla->qk_nope_head_dim},
                        {"v_head_dim", m.mla->v_head_dim}};
      }
      entry["groups"] = groups;
      entry["max_position_embeddings"] = m.max_position_embeddings;
      entry["torch_dtype"] = known(m.weight_dtype);
      entry["parameter_count"] = known(m.parameter_count);
      entry["bf16_bytes_per_token"] = layout.bytes_per_token();
      out.push_back(entry);
    }
    write_stdout(json_text(out));
    return kExitOk;
  }

  using A = SheetTable::Align;
  SheetTable table({"name", "layers", "heads", "KV heads", "K/V dims", "layer groups", "max positions",
                    "bf16 bytes/token", "source"},
                   {A::left, A::right, A::right, A::right, A::right, A::left, A::right, A::right, A::left});
  for (const auto& m : model_presets()) {
    const KvLayout layout = kv_layout(m, bf16);
    table.add({m.name, std::to_string(m.num_hidden_layers), std::to_string(m.num_attention_heads),
               std::to_string(m.num_key_value_heads), dims_text(layout.groups.front()), groups_text(layout),
               with_commas(m.max_position_embeddings), with_commas(layout.bytes_per_token()), m.source});
  }
  write_stdout(table.render("") +
      "\nbf16 bytes/token: KV bytes one token position costs across all layers on one device, K and V\n"
      "in bf16; MLA in the latent form (one kv_lora_rank + qk_rope_head_dim vector per layer, no V).\n");
  return kExitOk;
}

}  // namespace kvsim::cli
