// Iteration cost models for the replay engine, and the roofline defaults they start from.
#ifndef KVSIM_COST_MODEL_H_
#define KVSIM_COST_MODEL_H_

#include <cstdint>

#include "kvsim/budget.h"
#include "kvsim/model.h"
#include "kvsim/replay.h"

namespace kvsim {

// What one engine step does, as the roofline counts it.
struct StepWork {
  std::int64_t prefill_tokens = 0;   // prompt (and recomputed) positions processed
  std::int64_t decode_seqs = 0;      // sequences decoding one token
  std::int64_t context = 0;          // positions the decoding sequences attend to (their tokens)
  std::int64_t prefill_pairs = 0;    // (query, key) pairs of the prefill chunks: c x s + c(c+1)/2
                                     // for a chunk of c positions after s already in the cache
  std::int64_t prefill_context = 0;  // KV positions the prefill chunks read and write: s + c each
  std::int64_t sampled = 0;          // tokens sampled: decoding sequences + prompts completed
  std::int64_t longest_chunk = 0;    // the most positions one prefill chunk computes (its query
                                     // length; a decoding sequence's is 1)
  std::int64_t prefill_tile_pairs = 0;  // FlashAttention 2's (query row, key) pairs of the prefill
                                        // chunks: 64-row tiles whole (prefill_tile_pairs())
  std::int64_t peer_tokens = 0;      // an MoE model's replicas stepping together: the other
                                     // replicas' tokens (their CUDA graphs' padding included),
                                     // which this device's experts serve too
  std::int64_t graph_tokens = 0;     // the tokens the step's kernels run with CUDA graphs: the
                                     // step's own padded up to a captured size (at least
                                     // prefill_tokens + decode_seqs; 0 = no padding)

  bool operator==(const StepWork&) const = default;
};

// The largest step vLLM runs as a CUDA graph, by its default rule (vllm/config/vllm.py
// _set_cudagraph_sizes): min(2 x max_num_seqs, 512), and no more than max_num_batched_tokens.
// 0 (unlimited) for either limit leaves the other, or 512.
std::int64_t cuda_graph_max_tokens(std::int64_t max_num_seqs, std::int64_t max_num_batched_tokens);

// The tokens a step of `tokens` runs with CUDA graphs captured up to `max_tokens` (0 = none):
// vLLM captures the sizes [1, 2, 4] + range(8, min(max + 1, 256), 8) + range(256, max + 1, 16)
// (vllm/config/vllm.py _set_cudagraph_sizes) and pads a step to the smallest of them that
// holds it; a step larger than every captured size runs without a graph, unpadded.
std::int64_t cuda_graph_tokens(std::int64_t max_tokens, std::int64_t tokens);

// The largest size captured for `max_tokens` by that rule (0 for none): the largest step that
// runs as a CUDA graph.
std::int64_t cuda_graph_largest(std::int64_t max_tokens);

// The tokens the step's kernels run: its own, or its CUDA graph's padded size.
inline std::int64_t run_tokens(const StepWork& w) {
  const std::int64_t own = w.prefill_tokens + w.decode_seqs;
  return w.graph_tokens > own ? w.graph_tokens : own;
}

// The tokens an MoE layer's routed experts see in a step: the step's own, padding included,
// and the other replicas' where they step together.
inline std::int64_t expert_tokens(const StepWork& w) { return run_tokens(w) + w.peer_tokens; }

// FlashAttention 2's query tile with a paged KV cache: kBlockM rows (vllm-project/flash-attention,
// src/flash_fwd_launch_template.h run_mha_fwd_splitkv_dispatch), for every head size.
inline constexpr std::int64_t kFlashAttention2TileRows = 64;

// FlashAttention 2's (row, key) pairs per query head for a chunk of `c` positions after `s`
// cached: ceil(c / 64) tiles of 64 rows, tile i over the keys up to its last row (s + min(c,
// 64 (i + 1))), so 64 x (m s + 32 m (m - 1) + c) for m = ceil(c / 64). A single query (c = 1)
// is one tile over s + 1 keys, like a decode's.
inline std::int64_t prefill_tile_pairs(std::int64_t c, std::int64_t s) {
  constexpr std::int64_t kRows = kFlashAttention2TileRows;
  if (c <= 0) return 0;
  const std::int64_t m = (c + kRows - 1) / kRows;
  return kRows * (m * s + kRows / 2 * m * (m - 1) + c);
}

// The counts a timeline row keeps of its step (TimelineRow::work), as the cost model takes
// them; the attention pairs and the prefill's KV positions, which the row does not keep, are 0
// (the linear model does not use them).
inline StepWork step_work_of(const StepCounts& c) {
  StepWork w;
  w.prefill_tokens = c.prefill_tokens;
  w.decode_seqs = c.decode_seqs;
  w.context = c.context;
  w.sampled = c.sampled;
  w.peer_tokens = c.peer_tokens;
  w.graph_tokens = c.graph_tokens;
  return w;
}

// The expected share of an MoE layer's routed experts that `tokens` tokens reach, each token
// sent to `per_token` distinct experts of `experts`, uniformly and independently of the
// others: 1 - (1 - per_token / experts)^tokens (a given expert is among one token's choices
// with probability per_token / experts). 0 for no tokens or no experts; 1 when a token uses
// every expert, or per_token is 0 (not known: every expert, as the roofline's compute counts).
// Computed by squaring, with multiplications only, so it is the same double on every machine.
double routed_expert_share(std::int64_t experts, std::int64_t per_token, std::int64_t tokens);

// One step's time in picoseconds (not rounded), by the model's own rule (kvsim/replay.h): the
// linear sum (with the routed experts the step reaches), or for a roofline overhead +
// max(matmul FLOPs, weights + the routed experts reached + matmul activations) +
// max(attention FLOPs, KV bytes) + element-wise kernels + collectives: the matmuls and
// attention are separate kernels run one after the other, each bounded by whichever of
// compute and memory is slower for it, the element-wise kernels between them are
// memory-bound, and the all-reduces wait for them. Saturates at the largest int64, which the
// engine refuses as an error naming the step.
std::int64_t step_time_ps(const CostModel& cost, const StepWork& work);

// A step that computes no prompt, timed as a line in its context: every term of
// step_time_ps but the context's is fixed by the step's other counts, and the context's is
// the linear model's read per position, or the roofline's attention, whose FLOPs and bytes
// are each a multiple of the context, and so is the slower of them. For every step `w` that
// differs from the one given only in its context, step_time_ps(cost, w) ==
// min(fixed_ps + per_position_ps x w.context, int64 max) (fixed_ps is already saturated).
// The engine times decode steps with it: one evaluation of the model per batch, not per step.
struct DecodeStepLine {
  std::int64_t fixed_ps = 0;         // the step at context 0: step_time_ps
  std::int64_t per_position_ps = 0;  // each context position's part
};
DecodeStepLine decode_step_line(const CostModel& cost, StepWork work);

// A roofline cost model for `model` served with `kv` on one `device`, each term from the
// model's config and the device's spec sheet (docs/replay.md, "Cost models"):
//   compute, at compute_permille of the dense BF16 peak:
//     prefill_token = decode_seq = 2 x (matmul parameters a token goes through) / devices:
//       attention projections + the MLP (for MoE: the experts a token is routed to, the
//       shared experts and the router); no embedding lookup, no LM head
//     sample_token  = 2 x vocab x hidden / devices: the LM head, for tokens that sample only
//     attention_pair = 4 x heads x head_dim x layers / tensor_parallel: QK^T and PV for one
//       (query, key) pair, so prefill is quadratic in the chunk
//   memory, at memory_permille of the bandwidth:
//     weights     = weights on the device but the routed experts / bandwidth, once per step
//     expert_weights = the routed experts on the device / bandwidth, once per step times the
//                   expected share of them the step's tokens reach (routed_expert_share; with
//                   replicas that step together, all the replicas' tokens); 0 when the
//                   weights were given as bytes, not parameters (then all are in `weights`)
//     kv_position = KV bytes per token on the device / bandwidth, per position read or written
//     matmul_io_token, matmul_io_sample = the activations the matmuls read and write besides
//       their weights (bf16), per token and per sampled token (LM head), on the matmuls'
//       memory side
//     elementwise_token, elementwise_sample = the element-wise kernels' reads and writes: two
//       residual-add RMSNorms, rotary on q and k, SiLU-and-mul (and an MoE layer's sum of its
//       experts' outputs) per layer, the embedding's row and the final norm once; the
//       sampler's float32 copy of the logits and its argmax per sampled token. Hidden-sized
//       tensors whole on every tensor-parallel rank, head- and intermediate-sized ones split.
//   overhead = 0 per step (vLLM overlaps scheduling with the GPU step, see docs/replay.md);
//     "--cost roofline:overhead=..." sets one.
//   collectives, over the device's link (DevicePreset::link_*), a ring's time for p devices
//   being latency + 2 (p - 1) / p x bytes / bandwidth for an all-reduce and latency + (p - 1)
//   / p x bytes / bandwidth for an all-gather or a reduce-scatter:
//     tensor parallelism p = tp > 1 (vLLM's RowParallelLinear after attention and after the
//       MLP, and VocabParallelEmbedding): 2 x layers per stage + 1 all-reduces of hidden x 2
//       bytes per token (bf16 activations), and the logits' all-gather (LogitsProcessor),
//       padded vocab x 2 bytes per sampled token, one more latency per step;
//     an MoE model's data-parallel replicas p = replicas > 1 (vLLM's all-gather of the
//       hidden states before each MoE layer and reduce-scatter after it): 2 per MoE layer of
//       hidden x 2 bytes per token of all the replicas' step.
// A config without hidden_size or vocab_size falls back to 2 x parameters per token (from
// `weights`) and no LM-head, attention or collective terms.
struct RooflineParallel {
  std::int64_t tensor_parallel = 1;
  std::int64_t pipeline_parallel = 1;
  std::int64_t moe_replicas = 1;  // data-parallel replicas of an MoE model (they step together)
};
CostModel roofline_cost_model(const ModelSpec& model, const KvLayout& layout, const DevicePreset& device,
                              const ModelWeights& weights, const RooflineParallel& parallel = {});

// Parses --cost: "roofline" (returns `roofline`), "roofline:overhead=1ms" (`roofline` with that
// per-step overhead), "constant:step=20ms,prefill-token=100us",
// or "linear:base=5ms,prefill-token=30us,decode-seq=30us,context-token=40ps,expert-weights=12ms".
// Durations take the units ps, ns, us, ms and s. Unnamed coefficients are the roofline's
// (constant has only step and prefill-token; its others are zero); expert-weights is the time
// to read all the device's routed experts, charged by the share a step reaches, and is refused
// for a model without routed experts. The step's base must be positive. Throws
// InputError naming `field`.
CostModel parse_cost_model(std::string_view text, const CostModel& roofline, std::string_view field);

// "40ps", "1.5us", "20ms" -> picoseconds, exactly. Throws InputError naming `field`.
std::int64_t parse_duration_ps(std::string_view text, std::string_view field);

}  // namespace kvsim

#endif  // KVSIM_COST_MODEL_H_
