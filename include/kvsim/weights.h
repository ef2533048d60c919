// The bytes a serving engine holds for a model's weights on one device, tensor group by
// tensor group, as vLLM's model loaders lay them out.
//
// Counting parameters x bits misses two things that matter (issue 14): quantised checkpoints
// leave the embeddings and the LM head in 16 bits, and every quantised matrix carries scales
// (and zero points) besides its packed values. device_weights() counts, for one device of one
// pipeline stage, each group of tensors from the config's shapes after tensor-parallel
// sharding:
//   embeddings   vocab padded to a multiple of 64 (vLLM's VocabParallelEmbedding), / tp rows
//   LM head      the same shape, 0 when tied to the embeddings on the same device
//   attention    q/k/v and o projections (+ q/k/v biases), heads split over tp
//   MLP/experts  gate/up and down projections (/ tp), the MoE router unquantised
//   norms        two per layer and a final one, replicated
// A quantised matrix of K inputs and N outputs (per device) costs
//   AWQ    K x N x bits / 8 + ceil(K / g) x N x (2 + bits / 8)    (fp16 scales, packed zeros)
//   GPTQ   the same, with one group when group_size is -1
//   fp8    K x N + 4 (per-tensor fp32 scale) | + N x 4 (per channel) | + blocks x 4 (blocked)
//   int    K x N x bits / 8 + N x 4 (per channel) | ceil(K / g) x N x 2 (grouped)
// docs/size.md cites the loaders each rule comes from. Everything is an exact integer.
#ifndef KVSIM_WEIGHTS_H_
#define KVSIM_WEIGHTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kvsim/model.h"

namespace kvsim {

// One group of tensors on one device.
struct WeightGroup {
  std::string name;                  // "embeddings", "attention", "mlp", "experts", ...
  std::int64_t parameters = 0;       // logical weights on this device (unpacked)
  std::int64_t bytes = 0;            // what they occupy, scales and zero points included
  std::string rule;                  // "bf16", "AWQ 4-bit, group 128: +scales +zeros", ...
};

struct DeviceWeights {
  std::int64_t stage = 0;            // pipeline stage
  std::vector<WeightGroup> groups;   // in the order above; empty groups left out
  std::int64_t bytes = 0;            // sum of groups
};

// How the weights are served.
struct WeightServing {
  std::int64_t dtype_bytes = 2;      // unquantised tensors (vLLM serves float32 checkpoints in 16 bits)
  // Bits per weight for every tensor instead of the checkpoint's scheme (--weight-dtype); 0:
  // the checkpoint's quantization_config, else dtype_bytes.
  std::int64_t override_bits = 0;
  // Ranks the routed experts are spread over (vLLM's enable_expert_parallel: data x tensor
  // parallel ranks); 1: none, every device holds a tensor-parallel slice of every expert.
  std::int64_t expert_parallel_ranks = 1;
};

// The weights one device of each pipeline stage holds, stage 0 first. Throws InputError
// naming the config field that is missing (hidden_size, intermediate_size, vocab_size) or
// that tensor parallelism does not divide.
std::vector<DeviceWeights> device_weights(const ModelSpec& model, const KvOptions& kv, const WeightServing& serving);

// vLLM's padded vocabulary: vocab_size rounded up to a multiple of 64
// (vllm/model_executor/layers/vocab_parallel_embedding.py, DEFAULT_VOCAB_PADDING_SIZE).
std::int64_t padded_vocab(std::int64_t vocab_size);

}  // namespace kvsim

#endif  // KVSIM_WEIGHTS_H_
