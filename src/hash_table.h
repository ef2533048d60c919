// An open-addressing hash map from 64-bit keys (prefix-block hashes) to small values.
//
// The engine's count of live prefix blocks looks up, inserts and erases one key per block:
// hundreds of millions of operations on a long trace (the block pool's own map is the
// smaller src/block_index.h, which reads the rest of a key from the pool).
// std::unordered_map allocates a node per key, and a profile of a 50,000-request
// prefix-caching replay spent a fifth of its time in malloc and free for those nodes alone
// (bench/README.md). Here the slots are one array, probed linearly,
// at most half full, and erasing shifts the run that follows back (no tombstones), so a
// lookup touches one or two cache lines and nothing is allocated except when the table
// doubles. Keys may be any 64-bit value; they are mixed (Fibonacci hashing) before use, as
// trace-given hashes can be small consecutive integers.
#ifndef KVSIM_SRC_HASH_TABLE_H_
#define KVSIM_SRC_HASH_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace kvsim::detail {

template <class V>
class HashTable {
 public:
  std::size_t size() const { return size_; }

  // The value stored under `key`, or null.
  V* find(std::uint64_t key) {
    const std::size_t i = slot(key);
    return i == kAbsent ? nullptr : &slots_[i].value;
  }
  const V* find(std::uint64_t key) const { return const_cast<HashTable*>(this)->find(key); }

  // The slot holding `key`, or kAbsent: a handle for value_at() and erase_at(), valid until
  // the next insertion or erasure, so that a count decremented to zero is erased without a
  // second look-up.
  static constexpr std::size_t kAbsent = ~std::size_t{0};
  std::size_t slot(std::uint64_t key) const {
    if (size_ == 0) return kAbsent;
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (!s.used) return kAbsent;
      if (s.key == key) return i;
    }
  }
  V& value_at(std::size_t slot) { return slots_[slot].value; }

  // Inserts `value` under `key` unless the key is present; returns the stored value and
  // whether it was inserted. The pointer stays valid until the next insertion or erasure.
  std::pair<V*, bool> try_emplace(std::uint64_t key, V value) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    std::size_t i = home(key);
    for (; slots_[i].used; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return {&slots_[i].value, false};
    }
    slots_[i] = Slot{key, std::move(value), true};
    ++size_;
    return {&slots_[i].value, true};
  }
  // The value under `key`, inserted as V{} when absent.
  V& operator[](std::uint64_t key) { return *try_emplace(key, V{}).first; }

  // Erases `key`; returns whether it was present.
  bool erase(std::uint64_t key) {
    const std::size_t i = slot(key);
    if (i == kAbsent) return false;
    erase_at(i);
    return true;
  }
  // Erases the entry in `slot` (from slot()).
  void erase_at(std::size_t slot) {
    std::size_t hole = slot;
    // Each later slot of the probe run moves back into the hole unless its home lies
    // cyclically in (hole, slot]: there it is still reached without passing the hole.
    for (std::size_t j = (hole + 1) & mask_; slots_[j].used; j = (j + 1) & mask_) {
      const std::size_t h = home(slots_[j].key);
      const bool stays = hole < j ? (hole < h && h <= j) : (hole < h || h <= j);
      if (stays) continue;
      slots_[hole] = std::move(slots_[j]);
      hole = j;
    }
    slots_[hole].used = false;
    --size_;
  }

  // Calls f(key, value) for every entry, in slot order (not an order to report).
  template <class F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_) {
      if (s.used) f(s.key, s.value);
    }
  }

 private:
  struct Slot {
    std::uint64_t key = 0;
    V value{};
    bool used = false;
  };

  std::size_t home(std::uint64_t key) const {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_) & mask_;
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    const std::size_t capacity = old.empty() ? 16 : 2 * old.size();
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    shift_ = 64;
    for (std::size_t c = capacity; c > 1; c >>= 1) --shift_;
    size_ = 0;
    for (Slot& s : old) {
      if (s.used) try_emplace(s.key, std::move(s.value));
    }
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  int shift_ = 64;
  std::size_t size_ = 0;
};

// A set of 64-bit keys in 8 bytes a slot (a HashTable<char> slot takes 16): the same
// probing, at most half full, with one key value standing for an empty slot and kept apart
// when it is itself inserted. `trace stats` counts the distinct prefix blocks of a whole
// trace in one: on a token-id trace hashed at 16 tokens that is hundreds of millions of
// keys, which std::unordered_set holds at about 40 bytes each (a node and a bucket).
class HashSet64 {
 public:
  std::size_t size() const { return size_ + (has_empty_key_ ? 1 : 0); }

  // Inserts `key`; returns whether it was absent.
  bool insert(std::uint64_t key) {
    if (key == kEmpty) {
      const bool inserted = !has_empty_key_;
      has_empty_key_ = true;
      return inserted;
    }
    if (2 * (size_ + 1) > slots_.size()) grow();
    std::size_t i = home(key);
    for (; slots_[i] != kEmpty; i = (i + 1) & mask_) {
      if (slots_[i] == key) return false;
    }
    slots_[i] = key;
    ++size_;
    return true;
  }

  bool contains(std::uint64_t key) const {
    if (key == kEmpty) return has_empty_key_;
    if (size_ == 0) return false;
    for (std::size_t i = home(key); slots_[i] != kEmpty; i = (i + 1) & mask_) {
      if (slots_[i] == key) return true;
    }
    return false;
  }

 private:
  static constexpr std::uint64_t kEmpty = 0;

  std::size_t home(std::uint64_t key) const {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_) & mask_;
  }
  void grow() {
    std::vector<std::uint64_t> old = std::move(slots_);
    const std::size_t capacity = old.empty() ? 16 : 2 * old.size();
    slots_.assign(capacity, kEmpty);
    mask_ = capacity - 1;
    shift_ = 64;
    for (std::size_t c = capacity; c > 1; c >>= 1) --shift_;
    for (const std::uint64_t key : old) {
      if (key == kEmpty) continue;
      std::size_t i = home(key);
      while (slots_[i] != kEmpty) i = (i + 1) & mask_;
      slots_[i] = key;
    }
  }

  std::vector<std::uint64_t> slots_;
  std::size_t mask_ = 0;
  int shift_ = 64;
  std::size_t size_ = 0;  // keys in slots_, the empty key apart
  bool has_empty_key_ = false;
};

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_HASH_TABLE_H_
