// KV-cache allocators: the strategies kvsim compares, behind one small interface.
//
// The replay engine drives every allocator through the same few operations on the same
// schedule: admit a request, grow it to a token count, release it. An allocator answers in
// positions per layer group (KvLayout's groups), and says honestly where its room goes:
// for each live request and group it reports a Footprint that splits the positions it
// allocated into the effective tokens the engine computes independently and five kinds of
// internal fragmentation. The engine checks, at every operation, that the split adds up.
//
// Allocators act only at their own boundaries (a new block, a buffer's capacity, a block
// leaving the window), never per token: between two calls a decoding request grows by one
// token per engine step, and the Footprint's slopes say how each figure changes meanwhile.
// next_event_tokens() tells the engine when the allocator next needs to be called.
//
// Running out of memory is an outcome, not an error: operations return Outcome.
#ifndef KVSIM_ALLOCATOR_H_
#define KVSIM_ALLOCATOR_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvsim/model.h"

namespace kvsim {

// A live request inside one allocator: a small integer the engine chooses, reused after
// release. Allocators index their own per-request state with it.
using RequestSlot = std::uint32_t;

// What an allocator learns about a request when it is admitted.
struct AdmitInfo {
  std::int64_t prompt_tokens = 0;
  std::int64_t planned_output_tokens = 0;  // max_tokens, else output_tokens: what reservers plan for
  std::int64_t output_tokens = 0;          // what the request really generates (the oracle's length)
  std::int64_t n = 1;                      // parallel samples sharing the prompt
  // The prompt's identity, for allocators that share blocks across requests (prefix
  // caching), at their prefix_block_tokens() B: prefix_hashes[i] identifies prompt positions
  // [0, (i + 1) x B), so two requests whose hashes agree up to i hold the same tokens there.
  // Full blocks only; empty when the trace gives no identity or the allocator shares nothing.
  // Valid during admit() and cached_tokens() only: copy what must outlive the call.
  std::span<const std::uint64_t> prefix_hashes = {};
  // Tokens already generated that a re-admission after preemption computes again with the
  // prompt (0 on first admission): they count towards the tokens a cache hit may cover.
  std::int64_t resumed_tokens = 0;
  // A number no other request of the run carries (the engine gives the request's ordinal).
  // A prefix cache derives from it the identity of the blocks prefix_hashes does not name
  // (generated tokens, prompt blocks past the given hashes), so that only this request can
  // find them again: after a preemption by recompute, as vLLM's re-admitted request does.
  std::uint64_t request_key = 0;

  // Positions the request holds once its prefill completes: all the prefill computes (the
  // prompt, and on a re-admission the tokens generated before it) and the token it samples,
  // if one is left to generate.
  std::int64_t prefilled_positions() const {
    return prompt_tokens + resumed_tokens + (output_tokens > resumed_tokens ? 1 : 0);
  }
};

enum class Outcome {
  ok,
  no_room,     // not enough free capacity in total
  no_extent,   // enough free capacity in total, but no contiguous extent large enough
};

// One layer group's share of one request, in positions, at the request's current length,
// with how each figure changes per engine step while the request decodes (all its samples
// gaining one token) until its next event. Invariant, checked by the engine:
//   allocated == effective + tail + reservation + padding + duplicate + outside_window
// for the figures and for the slopes, where effective is computed by the engine alone.
struct Footprint {
  std::int64_t allocated = 0;       // positions assigned to the request (constant between events)
  // Internal fragmentation, in five parts that name where the room goes:
  std::int64_t tail = 0;            // unfilled end of partially filled blocks
  std::int64_t reservation = 0;     // room reserved ahead for tokens not yet (or never) generated,
                                    // up to the request's limit (prompt + planned output)
  std::int64_t padding = 0;         // room past that limit, which no token of the request can
                                    // ever fill: a fixed shape's or a round-up's excess
  std::int64_t duplicate = 0;       // extra copies of a shared prompt (one per further sample)
  std::int64_t outside_window = 0;  // tokens still held that fell out of a sliding window
  std::int64_t tail_slope = 0;
  std::int64_t reservation_slope = 0;
  std::int64_t padding_slope = 0;
  std::int64_t duplicate_slope = 0;
  std::int64_t outside_window_slope = 0;
  // Positions held only during the last operation (a buffer copied on growth holds old and
  // new at once). Counted for peak occupancy, gone when the operation returns.
  std::int64_t transient = 0;
};

// Whole-allocator figures that are not per request.
struct PoolState {
  std::int64_t reserved_bytes = 0;   // held from the device, assigned or not (pool, arena high-water)
  std::int64_t capacity_bytes = 0;   // the allocator's bound; 0 when unbounded (demand mode)
  // The bytes it holds memory in when bounded: one block of every layer group for a block
  // pool whose groups take blocks in step, a page for radix, 1 for byte-addressed arenas.
  // Its capacity is then a whole number of them, and a share of it (vLLM's watermark) is
  // counted in them.
  std::int64_t unit_bytes = 1;
  std::int64_t free_bytes = 0;       // reserved but not allocated
  std::int64_t largest_free_extent_bytes = 0;  // == free_bytes where contiguity does not matter
  std::int64_t failed_placements = 0;  // allocations refused (or forced to extend the arena)
                                       // while enough free room existed in total
  std::int64_t copied_bytes = 0;     // bytes copied on growth so far
  // The part of free_bytes that still holds cached blocks no live request references (prefix
  // caching): kept for reuse, evicted least recently used first when a new block is needed.
  // Free for admission and in block-level usage, as vLLM's kv_cache_usage counts them.
  std::int64_t evictable_bytes = 0;
  // Bytes of cached blocks evicted so far (taken for new tokens while still cached).
  std::int64_t evicted_bytes = 0;
  // Reservations are placed as extents in an arena (dense-static with placement): the
  // replay then reports the share of capacity each part takes, external fragmentation
  // included (docs/replay.md, "Contiguous placement").
  bool places_reservations = false;
};

class Allocator {
 public:
  static constexpr std::int64_t kNoEvent = std::numeric_limits<std::int64_t>::max();

  virtual ~Allocator() = default;
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // The allocator's canonical name with its parameters: "paged:block=16".
  virtual std::string name() const = 0;

  // Takes request `slot` in, holding no tokens yet. Reserving strategies reserve here.
  // REQUIRES: `slot` is not live.
  virtual Outcome admit(RequestSlot slot, const AdmitInfo& info) = 0;

  // Makes the request hold `tokens` positions per sequence: the prompt processed so far,
  // then (once the prompt is complete) prompt + generated tokens of each of its n samples.
  // `step_tokens` of them are produced in the current engine step (a prefill chunk, plus
  // the first generated token when the chunk completes the prompt; 1 for a decode step):
  // sliding windows drop history as of the step's start, as vLLM does. Between calls a
  // decoding request grows one token per step without telling the allocator; the engine
  // calls again at next_event_tokens(). On failure nothing changes.
  // REQUIRES: live; tokens >= the tokens of the previous call; step_tokens >= 1.
  virtual Outcome grow(RequestSlot slot, std::int64_t tokens, std::int64_t step_tokens) = 0;

  // Frees everything the request holds. REQUIRES: live.
  virtual void release(RequestSlot slot) = 0;

  // The request's share of layer group `group` when it holds `tokens` positions per
  // sequence, with slopes to the next token. REQUIRES: live; `tokens` between the count of
  // the last admit/grow and next_event_tokens() - 1.
  virtual Footprint footprint(RequestSlot slot, std::size_t group, std::int64_t tokens) const = 0;

  // The token count at which the allocator must next be called for this decoding request
  // (a new block, a full buffer, a block leaving the window), or kNoEvent.
  virtual std::int64_t next_event_tokens(RequestSlot slot) const = 0;

  virtual PoolState pool() const = 0;

  // The most bytes a request admitted with `info` can hold at any moment while it grows
  // from nothing to `tokens` positions per sequence (its prompt prefilled whole, then
  // decoded), transients included: what a scheduler that plans ahead must set aside for
  // it. An upper bound where the exact figure depends on chunking; independent of the
  // pool's state.
  virtual std::int64_t peak_bytes(const AdmitInfo& info, std::int64_t tokens) const = 0;

  // --- Sharing blocks across requests (prefix caching). The defaults share nothing.
  //
  // A sharing allocator keeps the full prompt blocks requests leave behind, keyed by their
  // prefix hashes, and hands them to later requests with the same prefix. Each request's
  // Footprint still counts every block it references as its own (its figures are what it
  // would hold alone); the blocks several live requests reference at once are reported by
  // shared_positions(), and the engine accounts them to the pool once (docs/replay.md,
  // "Sharing across requests").

  // The block size at which prompt blocks are shared across requests (the engine derives
  // each request's prefix hashes at it), or 0 when the allocator shares nothing.
  virtual std::int64_t prefix_block_tokens() const { return 0; }

  // Positions per sequence a request admitted now with `info` would find cached: a multiple
  // of prefix_block_tokens(), below info.prompt_tokens + info.resumed_tokens (the last token
  // is always computed, as vLLM does; a request back from preemption may find its generated
  // tokens too, so this may exceed the prompt). admit() then takes exactly these blocks: the
  // request holds that many positions, which the engine does not compute, and its first
  // grow() continues from there. No side effects.
  virtual std::int64_t cached_tokens(const AdmitInfo& /*info*/) const { return 0; }

  // Bytes of the blocks cached_tokens() would find that an admission takes without taking
  // free room: those live requests reference now, and on a sliding-window group those wholly
  // behind the window, which the request never holds (vLLM's get_num_blocks_to_allocate
  // counts only the hits nobody references, and of a sliding group's only those it keeps).
  // No side effects.
  virtual std::int64_t roomless_hit_bytes(const AdmitInfo& /*info*/) const { return 0; }

  // Positions of layer group `group` that the live requests' footprints count more than
  // once: over the blocks that k >= 2 live requests reference, the sum of (k - 1) x block
  // positions. The pool holds sum(footprints.allocated) - shared_positions positions.
  virtual std::int64_t shared_positions(std::size_t /*group*/) const { return 0; }

  // Asynchronous scheduling (vLLM's async_scheduling): the engine plans each step before the
  // previous step's sampled tokens are known. Called once, before the first admission. A
  // sharing allocator then caches a block that holds generated tokens one plan later than a
  // synchronous engine would: vLLM's allocate_slots caches no further than
  // request.num_tokens, which lacks the token still in flight. A request preempted in that
  // plan leaves the block uncached; a completed one has it cached by outputs_processed().
  virtual void set_async_scheduling(bool /*on*/) {}

  // The scheduler knows every token of the request it computed: whatever it computed can be
  // cached. Called just before release() of a request that completed (vLLM's
  // AsyncScheduler._update_request_with_output caches num_computed_tokens -
  // num_output_placeholders for a request still running, so never for a preempted one), and
  // of one cancelled after the plan that follows its last step was made (that plan cached it,
  // unless the step completes the request). REQUIRES: live.
  virtual void outputs_processed(RequestSlot /*slot*/) {}

  // The request is being preempted (recomputed later, or swapped out to come back with what
  // it holds): called just before its release(). SGLang's retraction frees what the request
  // computed beyond the prefix its tree already holds instead of inserting it
  // (`schedule_batch.py` `retract_decode` -> `cache_finished_req(req, is_insert=False)`); a
  // swapped-out request takes its pages with it. vLLM's preemption frees blocks as a
  // completion does, their hashes kept, so the default does nothing. REQUIRES: live.
  virtual void preempted(RequestSlot /*slot*/) {}

  // Checks the allocator's own books (slots conserved, reference counts, nothing owned
  // twice). Throws InternalError. Cheap enough for tests; the engine calls it after every
  // operation when built with KVSIM_EXPENSIVE_CHECKS.
  virtual void check_invariants() const = 0;

 protected:
  Allocator() = default;
};

// How the engine selects and configures an allocator, e.g. "paged:block=16".
struct AllocatorSpec {
  std::string kind;                                       // "paged"
  std::vector<std::pair<std::string, std::string>> params;  // {"block", "16"}, in given order
  std::string text;                                       // as the user wrote it
};

// Parses "kind[:key=value[,key=value...]]". Throws InputError naming `field`.
AllocatorSpec parse_allocator_spec(std::string_view text, std::string_view field);

// Splits a comma-separated list of specs where a comma starts a new spec unless what follows
// it is key=value, a parameter of the spec before: "paged:block=16,prefix-caching=on,dense-static"
// has two. An unknown kind in the list is an error naming it alone ("unknown allocator 'slab'").
std::vector<AllocatorSpec> parse_allocator_list(std::string_view text, std::string_view field);

// Memory the allocator may use, in bytes; 0 means unbounded (demand mode).
struct AllocatorLimits {
  std::int64_t capacity_bytes = 0;
};

// Makes the allocator `spec` names for `layout`. Throws InputError for unknown kinds,
// unknown or malformed parameters. The list of kinds and their parameters is in
// allocator_help().
std::unique_ptr<Allocator> make_allocator(const AllocatorSpec& spec, const KvLayout& layout,
                                          const AllocatorLimits& limits = {});

// One paragraph per allocator kind, with its parameters and defaults, for --help.
std::string allocator_help();

}  // namespace kvsim

#endif  // KVSIM_ALLOCATOR_H_
