// The prefix cache's map from a block's hash to the first block cached under it, in 8 bytes
// a slot (HashTable<BlockId> takes 16).
//
// Evicting and caching a block each probe this map once, at a random slot: on a long trace
// that is a cache miss per block, and the replay's speed is the map's footprint
// (bench/README.md). A slot here holds the top 32 bits of the mixed hash (the tag) and the
// block id; the full hash is the block's own (the pool's CacheEntry::hash), so a slot whose
// tag matches is confirmed by `hash_of(id)`, a read the callers make anyway for the block
// they find. The home slot is the tag's top bits, so growing and erasing need no hash_of.
// Linear probing, at most a quarter full (half full, the probe runs that evicting and
// caching walk were long enough to cost a tenth of a prefix-caching replay's time:
// bench/README.md), erasing by shifting the run that follows back.
#ifndef KVSIM_SRC_BLOCK_INDEX_H_
#define KVSIM_SRC_BLOCK_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kvsim/error.h"

namespace kvsim::detail {

using BlockId = std::uint32_t;
inline constexpr BlockId kNullBlock = 0xFFFFFFFFu;  // a table entry whose block was freed

class BlockIndex {
 public:
  std::size_t size() const { return size_; }

  // The id stored under `key`, or null. hash_of(id) is the full hash of block `id`.
  template <class HashOf>
  BlockId* find(std::uint64_t key, HashOf hash_of) {
    const std::size_t i = slot_of(key, hash_of);
    return i == kAbsent ? nullptr : &slots_[i].id;
  }
  template <class HashOf>
  const BlockId* find(std::uint64_t key, HashOf hash_of) const {
    const std::size_t i = slot_of(key, hash_of);
    return i == kAbsent ? nullptr : &slots_[i].id;
  }

  // Stores `id` under `key` unless the key is present; returns the stored id and whether it
  // was inserted. The pointer stays valid until the next insertion or erasure.
  template <class HashOf>
  std::pair<BlockId*, bool> try_emplace(std::uint64_t key, BlockId id, HashOf hash_of) {
    if (4 * (size_ + 1) > slots_.size()) grow();
    const std::uint32_t t = tag(key);
    std::size_t i = home(t);
    for (; slots_[i].id != kNullBlock; i = (i + 1) & mask_) {
      if (slots_[i].tag == t && hash_of(slots_[i].id) == key) return {&slots_[i].id, false};
    }
    slots_[i] = Slot{t, id};
    ++size_;
    return {&slots_[i].id, true};
  }

  // The slot holding `key`, or kAbsent: a handle for id_at() and erase_at(), valid until the
  // next insertion or erasure. Evicting a block looks its hash up once, then erases there.
  static constexpr std::size_t kAbsent = ~std::size_t{0};
  template <class HashOf>
  std::size_t slot(std::uint64_t key, HashOf hash_of) const {
    return slot_of(key, hash_of);
  }
  BlockId& id_at(std::size_t slot) { return slots_[slot].id; }

  // Erases `key`, which must be present.
  template <class HashOf>
  void erase(std::uint64_t key, HashOf hash_of) {
    erase_at(slot_of(key, hash_of));
  }
  // Erases the entry in `slot` (from slot()).
  void erase_at(std::size_t slot) {
    std::size_t hole = slot;
    // Each later slot of the probe run moves back into the hole unless its home lies
    // cyclically in (hole, slot]: there it is still reached without passing the hole.
    for (std::size_t j = (hole + 1) & mask_; slots_[j].id != kNullBlock; j = (j + 1) & mask_) {
      const std::size_t h = home(slots_[j].tag);
      const bool stays = hole < j ? (hole < h && h <= j) : (hole < h || h <= j);
      if (stays) continue;
      slots_[hole] = slots_[j];
      hole = j;
    }
    slots_[hole].id = kNullBlock;
    --size_;
  }

  // Calls f(id) for every stored id, in slot order (not an order to report).
  template <class F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_) {
      if (s.id != kNullBlock) f(s.id);
    }
  }

 private:
  struct Slot {
    std::uint32_t tag = 0;
    BlockId id = kNullBlock;
  };
  static_assert(sizeof(Slot) == 8);

  template <class HashOf>
  std::size_t slot_of(std::uint64_t key, HashOf hash_of) const {
    if (size_ == 0) return kAbsent;
    const std::uint32_t t = tag(key);
    for (std::size_t i = home(t);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id == kNullBlock) return kAbsent;
      if (s.tag == t && hash_of(s.id) == key) return i;
    }
  }

  // Fibonacci hashing: trace-given hashes can be small consecutive integers.
  static std::uint32_t tag(std::uint64_t key) { return static_cast<std::uint32_t>((key * 0x9E3779B97F4A7C15ull) >> 32); }
  std::size_t home(std::uint32_t t) const { return static_cast<std::size_t>(t >> shift_) & mask_; }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    const std::size_t capacity = old.empty() ? 16 : 2 * old.size();
    // The home is a tag's top bits: 2^32 slots at most, 2^31 blocks (16 GiB of index).
    if (capacity > (std::size_t{1} << 32)) throw InputError("paged: more than 2^31 blocks cached at once");
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    shift_ = 32;
    for (std::size_t c = capacity; c > 1; c >>= 1) --shift_;
    for (const Slot& s : old) {
      if (s.id == kNullBlock) continue;
      std::size_t i = home(s.tag);
      while (slots_[i].id != kNullBlock) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  int shift_ = 32;
  std::size_t size_ = 0;
};

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_BLOCK_INDEX_H_
