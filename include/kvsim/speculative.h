// Speculative decoding's draft KV: the drafter's attention layers cache KV for every token
// too, in the same pool as the target's (vLLM registers the drafter's attention layers with
// the KV-cache manager like the target's; vllm/v1/spec_decode/eagle.py, draft_model.py).
//
// - EAGLE and EAGLE-3 (vLLM's EagleLlamaForCausalLM, Eagle3LlamaForCausalLM): the draft head
//   is one decoder layer whose attention has the target's KV heads and head size, so it adds
//   one full-attention layer's KV at the target's dims (its config's num_hidden_layers is 1).
// - A separate draft model (draft:CONFIG): its own layers and dims, from its config.json.
// Draft layers whose KV spec equals a target group's (same window, heads and widths) join that
// group, as vLLM groups layers by spec; the others form groups named "draft ...".
#ifndef KVSIM_SPECULATIVE_H_
#define KVSIM_SPECULATIVE_H_

#include <string>
#include <vector>

#include "kvsim/model.h"

namespace kvsim {

// The draft an EAGLE or EAGLE-3 head amounts to for the KV cache: one full-attention layer at
// the target's KV heads and widths (MLA too: the draft layer caches what a target layer does).
// Throws InputError for a target whose layers differ in heads (no one count to take).
ModelSpec eagle_draft(const ModelSpec& target);

// The draft's KV on one device: all its layers, at the target's tensor parallelism.
KvLayout draft_layout(const ModelSpec& draft, const KvOptions& kv);

// Adds the draft's KV layer groups to the target's last stage, where vLLM places the whole
// drafter under pipeline parallelism. Throws InputError when the draft cannot be placed with
// the target's tensor parallelism.
void add_draft_kv(std::vector<KvLayout>& stages, const ModelSpec& draft, const KvOptions& kv);

}  // namespace kvsim

#endif  // KVSIM_SPECULATIVE_H_
