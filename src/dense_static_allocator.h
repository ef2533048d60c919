// The dense static allocator: every sample of an admitted request reserves a fixed length
// up front and keeps it until the request ends (Hugging Face StaticCache, early
// FasterTransformer and Orca).
//
// The reserved length per sample is the model's maximum length, the request's max_tokens
// (prompt + max_tokens), the next power of two of its final length, or its true final
// length (an oracle no real system has). A sliding-window layer group holds at most W
// positions, as a ring (Hugging Face's static sliding-window layer holds
// min(W, max_cache_len)). The n samples of a request each hold a full row, prompt included,
// as a batch expanded for num_return_sequences does.
//
// Placement (under a budget only): by default (none) reservations are only counted against
// the budget, as in a preallocated table, so there is no external fragmentation. With
// placement=first-fit or placement=buddy each request's reservation (all its samples and
// groups) is one contiguous extent in one arena the size of the budget, as the vLLM
// paper's Orca baselines placed theirs (its section 6.1): admission can then fail with
// enough room free in total (Outcome::no_extent), and the pool reports the largest free
// extent and the failed placements, as the dynamic allocator does. The buddy arena's unit
// is the bytes of one position in every layer group, so its blocks are powers of two of
// positions.
#ifndef KVSIM_SRC_DENSE_STATIC_ALLOCATOR_H_
#define KVSIM_SRC_DENSE_STATIC_ALLOCATOR_H_

#include <variant>
#include <vector>

#include "arena.h"
#include "buddy_arena.h"
#include "kvsim/allocator.h"

namespace kvsim::detail {

// pow2_output: the prompt exactly, the output rounded up to a power of two (the vLLM
// paper's Orca (Pow2): "if the true output length is 25, it reserves 32 positions").
enum class Reserve { max_model_len, max_tokens, pow2, pow2_output, oracle };

// Where a reservation goes under a budget: nowhere (counted only), or one extent in an
// arena of the budget's size, first-fit or buddy.
enum class Placement { none, first_fit, buddy };

struct DenseStaticOptions {
  Reserve reserve = Reserve::max_model_len;
  Placement placement = Placement::none;
  std::int64_t capacity_bytes = 0;  // 0 = unbounded (placement then has nothing to place in)
};

class DenseStaticAllocator final : public Allocator {
 public:
  DenseStaticAllocator(const KvLayout& layout, const DenseStaticOptions& options);

  std::string name() const override;
  Outcome admit(RequestSlot slot, const AdmitInfo& info) override;
  Outcome grow(RequestSlot slot, std::int64_t tokens, std::int64_t step_tokens) override;
  void release(RequestSlot slot) override;
  Footprint footprint(RequestSlot slot, std::size_t group, std::int64_t tokens) const override;
  std::int64_t next_event_tokens(RequestSlot slot) const override;
  PoolState pool() const override;
  std::int64_t peak_bytes(const AdmitInfo& info, std::int64_t tokens) const override;
  void check_invariants() const override;

  // The positions one sample reserves in each group (before the window cap).
  std::int64_t reservation_tokens(const AdmitInfo& info) const;
  // The reservation's place in the arena, for tests; -1 when not placed.
  std::int64_t offset(RequestSlot slot) const { return requests_[slot].offset; }

 private:
  struct Request {
    bool live = false;
    std::int64_t prompt_tokens = 0;
    std::int64_t n = 1;
    std::int64_t tokens = 0;
    std::int64_t row_tokens = 0;   // reserved positions per sample (before the window cap)
    std::int64_t bytes = 0;        // all samples, all groups
    std::int64_t limit_tokens = 0; // prompt + planned output: room past it is padding
    std::int64_t offset = -1;      // in the arena; -1 when not placed
  };
  std::int64_t row_in_group(const Request& r, std::size_t g) const;
  // A rounded-up row of a request whose final length is `final_tokens`, capped at the
  // model's maximum length (never below the final length).
  std::int64_t capped_row(std::int64_t final_tokens, std::int64_t row) const;

  std::vector<LayerGroup> groups_;
  std::int64_t max_model_len_;
  DenseStaticOptions options_;
  std::vector<Request> requests_;
  std::int64_t allocated_bytes_ = 0;
  std::int64_t high_water_bytes_ = 0;
  std::variant<std::monostate, FirstFitArena, BuddyArena> arena_;
  std::int64_t failed_placements_ = 0;
};

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_DENSE_STATIC_ALLOCATOR_H_
