#include "kvsim/speculative.h"

#include "kvsim/error.h"
#include "kvsim/option_names.h"
#include "kvsim/units.h"

namespace kvsim {

ModelSpec eagle_draft(const ModelSpec& target) {
  // The head's one layer has the target's KV heads; a target whose layers differ in heads
  // (OpenELM) has no one count to give it.
  if (!target.layer_kv_heads.empty() || !target.layer_attention_heads.empty()) {
    throw InputError(Location{target.name, 0, kOptSpeculative},
                     "its layers differ in KV heads, so an EAGLE head cannot take its KV heads from it: give the head's "
                     "own config.json as draft:CONFIG");
  }
  ModelSpec d = target;
  d.name = "EAGLE head of " + target.name;
  d.num_hidden_layers = 1;
  d.layer_window_tokens = {0};
  d.layer_kinds.clear();
  d.state.reset();
  return d;
}

KvLayout draft_layout(const ModelSpec& draft, const KvOptions& kv) {
  KvOptions one_stage = kv;
  one_stage.pipeline_parallel = 1;
  return kv_stage_layouts(draft, one_stage).front();
}

void add_draft_kv(std::vector<KvLayout>& stages, const ModelSpec& draft, const KvOptions& kv) {
  const KvLayout d = draft_layout(draft, kv);
  // vLLM puts the whole drafter on the last pipeline rank (GPUModelRunner.__init__ builds
  // it there only, vllm/v1/worker/gpu_model_runner.py).
  KvLayout& target = stages.back();
  for (const auto& g : d.groups) {
    bool joined = false;
    for (auto& t : target.groups) {
      if (t.window_tokens == g.window_tokens && t.kv_heads == g.kv_heads && t.k_head_dim == g.k_head_dim &&
          t.v_head_dim == g.v_head_dim && t.bytes_per_layer_position == g.bytes_per_layer_position) {
        t.layers = checked_add(t.layers, g.layers, "layers");
        t.bytes_per_position = checked_add(t.bytes_per_position, g.bytes_per_position, "bytes per position");
        joined = true;
        break;
      }
    }
    if (!joined) {
      LayerGroup added = g;
      added.name = "draft " + g.name;
      target.groups.push_back(added);
    }
  }
  // The draft's own state layers (a hybrid draft): per sequence, like the target's.
  if (d.state_layers > 0) {
    throw InputError(Location{draft.name, 0, kOptSpeculative}, "a draft model with state-space layers is not supported");
  }
}

}  // namespace kvsim
