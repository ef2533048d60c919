// The prefix cache's open-addressing map (src/hash_table.h) against std::map, the reference:
// the same operations must leave the same contents, through growth, wrap-around probe runs
// and erasures that shift runs back.
#include "hash_table.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <map>

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
      REQUIRE(table.erase(key) == (reference.erase(key) == 1));
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

}  // namespace
}  // namespace kvsim::detail
