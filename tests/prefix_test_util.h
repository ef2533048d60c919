// Requests for the engine's prefix-caching tests.
#ifndef KVSIM_TESTS_PREFIX_TEST_UTIL_H_
#define KVSIM_TESTS_PREFIX_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kvsim/request.h"
#include "test_support.h"

namespace kvsim::test {

// A request whose prompt's full blocks of 16 carry the given hashes.
inline Request with_prefix(std::string id, std::int64_t arrival_ns, std::int64_t prompt, std::int64_t output,
                           std::vector<std::uint64_t> hashes) {
  Request r = request(std::move(id), arrival_ns, prompt, output);
  r.prefix_block_tokens = 16;
  r.prefix_hashes = std::move(hashes);
  return r;
}

}  // namespace kvsim::test

#endif  // KVSIM_TESTS_PREFIX_TEST_UTIL_H_
