// The open-addressing maps and set (src/hash_table.h, and the prefix cache's
// src/block_index.h) against std::map and std::set, the references: the same operations must
// leave the same contents, through growth, wrap-around probe runs and erasures that shift
// runs back.
#include "hash_table.h"

#include "block_index.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "random.h"

namespace kvsim::detail {
namespace {

TEST_CASE("hash table: find, insert and erase agree with std::map through growth and erasure", "[hash_table]") {
  HashTable<std::int64_t> table;
  std::map<std::uint64_t, std::int64_t> reference;
  std::uint64_t state = 7;
  // Keys from a small range, so that inserts hit present keys and erases hit absent ones
  // often, and probe runs grow long enough to wrap around the end of the slot array.
  for (int op = 0; op < 200000; ++op) {
    state = splitmix64(state);
    const std::uint64_t key = state % 3000;
    const std::uint64_t what = (state >> 32) % 3;
    if (what == 0) {
      const auto [value, inserted] = table.try_emplace(key, op);
      const auto [it, ref_inserted] = reference.try_emplace(key, op);
      REQUIRE(inserted == ref_inserted);
      REQUIRE(*value == it->second);
    } else if (what == 1) {
      const bool present = reference.erase(key) == 1;
      if ((state >> 40) % 2 == 0) {
        REQUIRE(table.erase(key) == present);
      } else {  // the engine's way: look up, then erase at the slot found
        const std::size_t slot = table.slot(key);
        REQUIRE((slot != HashTable<std::int64_t>::kAbsent) == present);
        if (present) table.erase_at(slot);
      }
    } else {
      const std::int64_t* value = table.find(key);
      const auto it = reference.find(key);
      REQUIRE((value != nullptr) == (it != reference.end()));
      if (value != nullptr) REQUIRE(*value == it->second);
    }
    REQUIRE(table.size() == reference.size());
  }
  std::map<std::uint64_t, std::int64_t> contents;
  table.for_each([&](std::uint64_t key, std::int64_t value) { contents.emplace(key, value); });
  CHECK(contents == reference);
}

TEST_CASE("hash table: consecutive small keys, as trace-given hashes are, and the key 0", "[hash_table]") {
  HashTable<std::uint32_t> table;
  for (std::uint32_t k = 0; k < 1000; ++k) table[k] = k + 1;
  CHECK(table.size() == 1000);
  // Erase the even keys; every odd key is still found with its value.
  for (std::uint32_t k = 0; k < 1000; k += 2) REQUIRE(table.erase(k));
  CHECK(table.size() == 500);
  for (std::uint32_t k = 0; k < 1000; ++k) {
    const std::uint32_t* v = table.find(k);
    if (k % 2 == 0) REQUIRE(v == nullptr);
    else REQUIRE((v != nullptr && *v == k + 1));
  }
  CHECK_FALSE(table.erase(0));
}

TEST_CASE("hash set: insert and contains agree with std::set through growth, the empty slot's key included",
          "[hash_table]") {
  HashSet64 set;
  std::set<std::uint64_t> reference;
  std::uint64_t state = 11;
  // Small keys, so that half the inserts find their key present; 0 (the value an empty slot
  // holds) among them, and the largest key, which must not be confused with it.
  for (int op = 0; op < 100000; ++op) {
    state = splitmix64(state);
    std::uint64_t key = state % 5000;
    if (key == 4999) key = ~std::uint64_t{0};
    if ((state >> 32) % 2 == 0) {
      REQUIRE(set.insert(key) == reference.insert(key).second);
    } else {
      REQUIRE(set.contains(key) == (reference.count(key) == 1));
    }
    REQUIRE(set.size() == reference.size());
  }
  CHECK(reference.count(0) == 1);
  for (std::uint64_t key = 0; key < 5000; ++key) REQUIRE(set.contains(key) == (reference.count(key) == 1));
  CHECK_FALSE(set.contains(5000));
}

// BlockIndex keeps 32 bits of each mixed key and asks hash_of(id) for the rest: keys[id].
struct KeysOf {
  const std::vector<std::uint64_t>* keys;
  std::uint64_t operator()(BlockId id) const { return (*keys)[id]; }
};

TEST_CASE("block index: find, insert and erase agree with std::map through growth and erasure", "[hash_table]") {
  BlockIndex index;
  std::map<std::uint64_t, BlockId> reference;
  std::vector<std::uint64_t> keys;  // by id: each id is stored under one key
  const KeysOf hash_of{&keys};
  std::uint64_t state = 11;
  for (int op = 0; op < 200000; ++op) {
    state = splitmix64(state);
    const std::uint64_t key = state % 3000;
    const std::uint64_t what = (state >> 32) % 3;
    if (what == 0) {
      const auto id = static_cast<BlockId>(keys.size());
      keys.push_back(key);
      const auto [stored, inserted] = index.try_emplace(key, id, hash_of);
      const auto [it, ref_inserted] = reference.try_emplace(key, id);
      REQUIRE(inserted == ref_inserted);
      REQUIRE(*stored == it->second);
    } else if (what == 1) {
      const auto it = reference.find(key);
      const std::size_t slot = index.slot(key, hash_of);
      REQUIRE((slot != BlockIndex::kAbsent) == (it != reference.end()));
      if (it != reference.end()) {
        if ((state >> 40) % 2 == 0) {
          index.erase(key, hash_of);
        } else {  // the pool's way: look up, read the id there, erase at the slot found
          REQUIRE(index.id_at(slot) == it->second);
          index.erase_at(slot);
        }
        reference.erase(it);
      }
    } else {
      const BlockId* id = index.find(key, hash_of);
      const auto it = reference.find(key);
      REQUIRE((id != nullptr) == (it != reference.end()));
      if (id != nullptr) REQUIRE(*id == it->second);
    }
    REQUIRE(index.size() == reference.size());
  }
  std::map<std::uint64_t, BlockId> contents;
  index.for_each([&](BlockId id) { contents.emplace(keys[id], id); });
  CHECK(contents == reference);
}

TEST_CASE("block index: keys whose 32 kept bits are equal are told apart by their full hash", "[hash_table]") {
  // The index keeps the top 32 bits of key x C (mod 2^64), C = 0x9E3779B97F4A7C15. With
  // C' its inverse mod 2^64 (C is odd), key + j C' mixes to key x C + j: for j < 2^16 from a
  // mixed value whose low 32 bits are 0, all 64 keys share their tag and their home slot.
  const std::uint64_t c = 0x9E3779B97F4A7C15ull;
  std::uint64_t inverse = c;  // Newton's iteration: each step doubles the correct low bits
  for (int i = 0; i < 6; ++i) inverse *= 2 - c * inverse;
  REQUIRE(c * inverse == 1);
  const std::uint64_t base = (std::uint64_t{0x12345678} << 32) * inverse;  // mixes to 0x12345678'00000000
  std::vector<std::uint64_t> keys;
  for (std::uint64_t j = 0; j < 64; ++j) keys.push_back(base + j * inverse);
  for (const std::uint64_t k : keys) REQUIRE(((k * c) >> 32) == 0x12345678u);
  const KeysOf hash_of{&keys};
  BlockIndex index;
  for (BlockId id = 0; id < 64; ++id) REQUIRE(index.try_emplace(keys[id], id, hash_of).second);
  for (BlockId id = 0; id < 64; ++id) REQUIRE(*index.find(keys[id], hash_of) == id);
  // Erase every third; the others are still found at the end of the shifted run.
  for (BlockId id = 0; id < 64; id += 3) index.erase(keys[id], hash_of);
  for (BlockId id = 0; id < 64; ++id) {
    const BlockId* found = index.find(keys[id], hash_of);
    if (id % 3 == 0) REQUIRE(found == nullptr);
    else REQUIRE((found != nullptr && *found == id));
  }
  CHECK(index.size() == 64 - 22);
  CHECK(index.find(base + 64 * inverse, hash_of) == nullptr);  // same tag, never stored
}

}  // namespace
}  // namespace kvsim::detail
