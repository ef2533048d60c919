// The KV-cache capacity sheet, as numbers: what `kvsim size` prints, computed once so that a
// program can ask the same questions without the command line.
//
// size_sheet() places a model's KV cache on its devices (per pipeline stage, per device after
// tensor parallelism), costs B sequences of T tokens, and, given a budget, keeps every term of
// derive_budget()'s subtraction and vLLM's paged pool with its "Maximum concurrency for T
// tokens per request" (see kvsim/budget.h). Bytes are exact integers; nothing here formats.
#ifndef KVSIM_SIZE_SHEET_H_
#define KVSIM_SIZE_SHEET_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvsim/budget.h"
#include "kvsim/model.h"
#include "kvsim/size_cases.h"
#include "kvsim/speculative.h"
#include "kvsim/stage_weights.h"
#include "kvsim/startup_memory.h"

namespace kvsim {

// What to size. Every field has the default `kvsim size` uses.
struct SizeQuery {
  std::int64_t seqs = 1;                 // sequences held at once (--seqs)
  std::vector<std::int64_t> tokens;      // positions per sequence, one row each (--tokens); may be empty
  PagedOptions paging;                   // vLLM's block size and scheduler chunk
  std::optional<BudgetOptions> budget;   // none: no budget terms and no paged pool
  std::optional<RequestShape> request;   // --prompt/--max-tokens (with --n or --beams): one request
  std::int64_t static_cache_tokens = 0;  // --static-cache L: seqs x L reserved (0: not asked)
  std::optional<ModelSpec> draft;        // speculative decoding's draft (kvsim/speculative.h)
  std::int64_t speculative_tokens = 0;   // K drafts a step (--num-speculative-tokens; 0: not given)
  std::int64_t offload_ppb = 0;          // --offload-fraction: share of the KV on the host (0: none)
  std::int64_t link_bytes_per_second = 0;  // the host link's bandwidth, for the offload's transfer time
  std::string link_source;               // where that bandwidth comes from ("--link-bandwidth", "assumed: ...")
  std::vector<CheckCase> checks;         // --check: the seed's three validation cases (needs a budget)
  // With a budget from a device: the engine's start-up rules (kvsim/startup_memory.h) instead
  // of the flat reserve. Its max_model_len, when set, is the T of vLLM's concurrency line.
  std::optional<EngineSettings> startup;
};

// B sequences of T tokens.
struct SequenceBytes {
  std::int64_t tokens = 0;               // T
  // One sequence on one device of the stage that holds the most at T (`stage`): with sliding
  // windows in some stages only, not always the stage with the most bytes per token.
  std::int64_t bytes_per_sequence = 0;
  std::size_t stage = 0;
  std::int64_t bytes = 0;                // B sequences on that device
  std::int64_t bytes_all_devices = 0;    // B sequences summed over every stage and tensor-parallel rank
  std::int64_t state_bytes = 0;          // B x the binding stage's constant per-sequence state (hybrid models)
};

// vLLM's paged pool on one pipeline stage's device, and the blocks one request needs there at
// each of SizeSheet::concurrency's token counts.
struct StagePool {
  PagedPool pool;                        // num_blocks already shrunk to the smallest stage's (below)
  std::vector<std::int64_t> request_blocks;
  // What this stage's own budget holds, before vLLM shrinks every rank to the smallest
  // num_blocks among them (get_kv_cache_configs, vllm/v1/core/kv_cache_utils.py).
  std::int64_t own_num_blocks = 0;
};

// vLLM's "Maximum concurrency for T tokens per request": num_blocks / blocks_per_request on
// the stage where that ratio is lowest.
struct Concurrency {
  std::int64_t tokens = 0;               // T
  std::size_t stage = 0;                 // the stage that binds at T
  std::int64_t num_blocks = 0;
  std::int64_t blocks_per_request = 0;
  FitVerdict seqs;                       // --seqs B requests of T tokens held at once
};

struct SizeSheet {
  ModelSpec model;
  KvOptions kv;
  std::int64_t devices = 1;              // tensor_parallel x pipeline_parallel
  std::vector<KvLayout> stages;          // per pipeline stage, per device
  KvLayout model_layout;                 // the stages' layer groups added up: the layers vLLM
                                         // groups into KV-cache groups (whole_model_layout)
  std::size_t binding_stage = 0;         // see binding_stage() below
  std::int64_t seqs = 1;
  std::vector<SequenceBytes> sequences;  // one per SizeQuery::tokens, in order
  // The sum of the rows when there are several (requests of different lengths held at once;
  // tokens is the sum of the T's): the seed's "B x T replaced by the positions actually kept".
  std::optional<SequenceBytes> total;
  std::optional<RequestBytes> request;   // SizeQuery::request on the binding stage's device
  std::int64_t static_cache_tokens = 0;
  // Speculative decoding: the draft's name, its KV layers and bytes per token (on the last
  // stage's device, already in `stages`); 0 layers when there is no draft.
  std::string draft;
  std::int64_t draft_layers = 0;
  std::int64_t draft_bytes_per_token = 0;
  // Slots a decoding sequence holds past its tokens: 2K with K drafts a step. vLLM's scheduler
  // asks allocate_slots for the last token and the K drafts to verify (num_new_tokens) plus K
  // lookahead slots for the next drafts (num_lookahead_tokens, set for EAGLE and draft models),
  // capped at max_model_len (vllm/v1/core/sched/scheduler.py, kv_cache_manager.py). The
  // blocks a request needs, and so the fits verdicts, count them; the bytes of T tokens do not.
  std::int64_t lookahead_slots = 0;
  // Offloading: the split of each sequences row (and of the request, when there is one).
  std::int64_t offload_ppb = 0;
  std::int64_t link_bytes_per_second = 0;
  std::string link_source;
  std::vector<OffloadSplit> offload_rows;          // one per `sequences` row
  std::optional<OffloadSplit> offload_request;
  std::vector<CheckResult> checks;                 // one per SizeQuery::checks
  // Hugging Face StaticCache: seqs x static_cache_tokens positions (min(W, L) on a sliding
  // layer) reserved on every layer up front, whatever the sequences hold (binding stage).
  std::int64_t static_reserved_bytes = 0;
  // With a budget: the reservation against each stage's KV budget in bytes (not paged).
  std::optional<FitVerdict> static_fit;
  // The rest only with a budget.
  std::optional<Budget> budget;
  std::optional<StartupMemory> startup;  // set when SizeQuery::startup was
  PagedOptions paging;
  std::vector<StagePool> stage_pools;    // per stage
  // Under pipeline parallelism with a derived budget: each stage's weights and KV budget
  // (kvsim/stage_weights.h), which its pool uses; empty, with the note saying why, when the
  // split cannot be made (then every stage has budget->kv_budget_bytes).
  std::vector<StageWeights> stage_weights;
  std::string stage_weights_note;
  // At each SizeQuery::tokens or, when none was asked, at max_position_embeddings (as vLLM
  // logs it; none when the model does not say).
  std::vector<Concurrency> concurrency;
  // With a budget and several --tokens: the rows' requests all held at once, --seqs of each
  // (the blocks of every length summed) against the pool.
  std::optional<FitVerdict> total_fit;
  // The longest request the engine takes: --max-model-len when given, else the model's
  // max_position_embeddings (0: unknown); every fit verdict holds requests to it.
  std::int64_t context_limit = 0;
  std::string context_limit_source;      // "max_model_len" or "max_position_embeddings"

  const KvLayout& layout() const { return stages[binding_stage]; }
};

// The stage whose device holds the most bytes per token (the first of equals): the one whose
// layout a single-device figure describes.
// REQUIRES: !stages.empty().
std::size_t binding_stage(const std::vector<KvLayout>& stages);

// Sizes `model` stored and placed as `kv` says. Throws InputError when the layout or the budget
// cannot be derived (see kv_stage_layouts(), derive_budget(), paged_pool()) and when a byte
// count overflows 64 bits, naming it.
SizeSheet size_sheet(const ModelSpec& model, const KvOptions& kv, const SizeQuery& query);

}  // namespace kvsim

#endif  // KVSIM_SIZE_SHEET_H_
