// The dynamic allocator: each sample owns one contiguous buffer per layer group that grows
// with its tokens (Hugging Face DynamicCache), placed first-fit in one arena.
//
// Growth is exact (capacity = tokens: a copy at every token, like torch.cat), by doubling,
// or by fixed chunks. Growing allocates the new buffer while the old one still holds its
// contents, copies, then frees the old one: the copy peak holds both at once, and the
// arena's holes are real, so external fragmentation is measured, not assumed. A
// sliding-window group's buffer stops growing at W positions and is reused as a ring.
// (Hugging Face's dynamic sliding-window layer re-concatenates every step instead; that
// costs copies and a transient per step, not room.) The copy is modelled for the group's
// whole buffer at once, an upper bound on the transient of an engine that copies layer
// by layer.
#ifndef KVSIM_SRC_DYNAMIC_ALLOCATOR_H_
#define KVSIM_SRC_DYNAMIC_ALLOCATOR_H_

#include <boost/container/small_vector.hpp>
#include <vector>

#include "arena.h"
#include "kvsim/allocator.h"

namespace kvsim::detail {

enum class Growth { exact, doubling, chunk };

struct DynamicOptions {
  Growth growth = Growth::doubling;
  std::int64_t chunk_tokens = 256;   // for Growth::chunk
  std::int64_t capacity_bytes = 0;   // arena size; 0 = unbounded
  std::int64_t arena_option = 0;     // arena=BYTES as the spec gave it (0: none), part of the name
};

class DynamicAllocator final : public Allocator {
 public:
  DynamicAllocator(const KvLayout& layout, const DynamicOptions& options);

  std::string name() const override;
  Outcome admit(RequestSlot slot, const AdmitInfo& info) override;
  Outcome grow(RequestSlot slot, std::int64_t tokens, std::int64_t step_tokens) override;
  void release(RequestSlot slot) override;
  Footprint footprint(RequestSlot slot, std::size_t group, std::int64_t tokens) const override;
  std::int64_t next_event_tokens(RequestSlot slot) const override;
  PoolState pool() const override;
  std::int64_t peak_bytes(const AdmitInfo& info, std::int64_t tokens) const override;
  void check_invariants() const override;

  // The capacity in positions of a sample's buffer in a group, for tests.
  std::int64_t capacity_tokens(RequestSlot slot, std::size_t group, std::int64_t sample) const;
  const FirstFitArena& arena() const { return arena_; }

 private:
  struct Buffer {
    std::int64_t offset = -1;       // in the arena; -1 while empty
    std::int64_t capacity = 0;      // positions
  };
  struct Request {
    bool live = false;
    std::int64_t prompt_tokens = 0;
    std::int64_t n = 1;
    std::int64_t tokens = 0;
    std::int64_t limit_tokens = 0;  // prompt + planned output: room past it is padding
    // Inline for the common one or two groups and one sample: a request's buffers sit next
    // to its other state instead of behind two more pointers.
    boost::container::small_vector<Buffer, 2> buffers;           // [group * n + sample]
    // Per group: positions copied in the last grow, all samples together.
    boost::container::small_vector<std::int64_t, 2> transient;
  };
  // The capacity a buffer grows to when it must hold `need` positions.
  std::int64_t grown_capacity(std::size_t g, std::int64_t capacity, std::int64_t need) const;
  std::int64_t needed(std::size_t g, std::int64_t tokens) const;

  std::vector<LayerGroup> groups_;
  std::int64_t max_model_len_ = 0;  // the layout's: no sequence grows past it (0: none)
  DynamicOptions options_;
  FirstFitArena arena_;
  std::vector<Request> requests_;
  std::int64_t failed_placements_ = 0;
  std::int64_t copied_bytes_ = 0;
  struct Move {
    std::size_t index;
    std::int64_t offset;
    std::int64_t capacity;
  };
  std::vector<Move> moves_;   // scratch for grow()
};

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_DYNAMIC_ALLOCATOR_H_
