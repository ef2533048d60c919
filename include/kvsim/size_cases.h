// The seed guide's sizing cases beyond B x T: one request with its prompt and generation apart,
// the extra sequences generation creates (parallel samples, beams), and a static cache's
// reservation. Each is computed once, here, from a KvLayout; `kvsim size` prints them.
//
// Positions kept on a layer group by one request of prompt P, generation G and N sequences:
//   prompt shared (vLLM: the N samples of parallel sampling, vllm/v1/engine/parallel_sampling.py,
//   and the beams of LLM.beam_search are separate requests whose prompt blocks prefix caching
//   shares; the DESIGN counts a shared prompt once):
//       full attention:   P + N x G
//       window W:         min(P, max(0, W - G)) + N x min(G, W)   (the part of the prompt
//                         still inside every sequence's window, once, and each sequence's own)
//   prompt not shared (Hugging Face generate: _expand_inputs_for_generation repeats the prompt
//   num_beams x num_return_sequences times):  N x min(P + G, W)
// With N = 1 both are min(P + G, W), the plain row of P + G tokens.
#ifndef KVSIM_SIZE_CASES_H_
#define KVSIM_SIZE_CASES_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "kvsim/model.h"

namespace kvsim {

struct RequestShape {
  std::int64_t prompt_tokens = 0;   // P (--prompt)
  std::int64_t max_tokens = 0;      // G (--max-tokens): the generation a sequence reserves
  std::int64_t sequences = 1;       // N (--n or --beams)
  bool prompt_shared = true;        // false: every sequence holds its own copy of the prompt
};

struct RequestBytes {
  RequestShape shape;
  std::int64_t kv_bytes = 0;        // one request's KV on the device `layout` describes
  std::int64_t state_bytes = 0;     // N x the layout's per-sequence state (hybrid models)
  std::int64_t single_kv_bytes = 0; // the same request with N = 1, for comparison
  std::int64_t total_bytes() const; // kv_bytes + state_bytes
};

// Positions one request keeps on `group` (the rule above). REQUIRES: non-negative P, G; N >= 1.
std::int64_t request_positions(const LayerGroup& group, const RequestShape& shape);

// One request's bytes on the device `layout` describes. Throws InputError on 64-bit overflow.
RequestBytes request_bytes(const KvLayout& layout, const RequestShape& shape);

// Offloading: a share of the KV kept in host memory. Hugging Face's OffloadedCache
// (transformers cache_utils.py) keeps offloaded layers on the host and, every forward step,
// prefetches each back to the device for its attention and evicts the previous one: the host
// share crosses the link once each way per decode step, so a step waits at least
// host_bytes / link bandwidth (a full-duplex link overlaps the two directions).
struct OffloadSplit {
  std::int64_t device_bytes = 0;   // what stays on the device
  std::int64_t host_bytes = 0;     // floor(bytes x share): what moves to the host
  std::int64_t transfer_ns = 0;    // ceil(host_bytes / link bytes per second), per decode step
};

// REQUIRES: bytes >= 0, 0 <= host_share_ppb <= 10^9, link_bytes_per_second > 0.
OffloadSplit offload_split(std::int64_t bytes, std::int64_t host_share_ppb, std::int64_t link_bytes_per_second);

// What stays on the device of `amount` (bytes or blocks) when a share of it lives on the host:
// amount - floor(amount x share), the rule offload_split() applies to bytes.
// REQUIRES: amount >= 0, 0 <= host_share_ppb <= 10^9.
std::int64_t device_share(std::int64_t amount, std::int64_t host_share_ppb);

// The most copies of `unit` (blocks or bytes) whose device share fits in `available`:
// the largest n with device_share(n x unit) <= available, which is
// floor(available x 10^9 / (unit x (10^9 - share))). 0 when unit <= 0 or available < 0.
// REQUIRES: 0 <= host_share_ppb < 10^9.
std::int64_t most_that_fit(std::int64_t unit, std::int64_t available, std::int64_t host_share_ppb);

// Whether sequences fit what the device keeps for the KV cache: the paged pool's blocks (as
// vLLM allocates them) or, for a static cache, bytes of the KV budget. Under offloading only
// what stays on the device counts (device_share()); a request longer than the context limit
// (max_model_len, else max_position_embeddings) never fits, whatever the room.
struct FitVerdict {
  std::size_t stage = 0;            // the pipeline stage with the least room left
  std::int64_t needed = 0;          // on `stage`: blocks (bytes for a static cache) of all the sequences
  std::int64_t on_device = 0;       // needed less the host share (needed itself without offloading)
  std::int64_t available = 0;       // on `stage`: blocks in the pool (bytes of its KV budget)
  std::int64_t most = 0;            // the most such sequences (sets of requests) whose device share fits every stage
  std::int64_t context_limit = 0;   // the limit the requests are held to; 0 when the model gives none
  std::int64_t longest_tokens = 0;  // the longest request held to it (0: not held, a static cache)
  bool over_context = false;        // some request is longer than context_limit
  bool fits = false;                // !over_context and on_device <= available on every stage
};

// One of the seed guide's validation cases: `sequences` requests of `tokens` tokens each held
// at once (the usual input, the long input, the maximum concurrency).
struct CheckCase {
  std::string name;
  std::int64_t sequences = 1;
  std::int64_t tokens = 0;
};

// A case against vLLM's paged pool on every pipeline stage: it fits when it is no longer than
// the context limit and every stage has the blocks all its sequences need (fit.needed:
// sequences x blocks per request).
struct CheckResult {
  CheckCase c;
  std::int64_t kv_bytes = 0;          // effective bytes of all its sequences on the binding stage's device
  FitVerdict fit;
};

}  // namespace kvsim

#endif  // KVSIM_SIZE_CASES_H_
