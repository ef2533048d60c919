// Internal: checks of the per-layer fields of a ModelSpec (layer kinds, per-layer KV heads,
// the state-space state), shared by validate_model().
#ifndef KVSIM_SRC_HYBRID_MODEL_H_
#define KVSIM_SRC_HYBRID_MODEL_H_

#include <string>

#include "kvsim/model.h"

namespace kvsim {

// Throws InputError naming `file` and the field when layer_kinds or layer_kv_heads has the
// wrong length or an impossible entry, when a state layer has no StateDims, or when the
// StateDims are incomplete.
void validate_layer_kinds(const ModelSpec& model, const std::string& file);

}  // namespace kvsim

#endif  // KVSIM_SRC_HYBRID_MODEL_H_
