// Helpers for the trace tests: small trace files written to a scratch directory.
#ifndef KVSIM_TESTS_TRACE_TEST_UTIL_H_
#define KVSIM_TESTS_TRACE_TEST_UTIL_H_

#include <fstream>
#include <string>

#include "cli_util.h"
#include "kvsim/request.h"

namespace kvsim::test {

// Writes `content` byte for byte to a file called `name` in this test's scratch directory.
inline std::string write_file(const std::string& name, const std::string& content) {
  const auto path = scratch_dir("trace") / name;
  std::ofstream out(path, std::ios::binary);
  out << content;
  return path.string();
}

inline std::string scratch_path(const std::string& name) { return (scratch_dir("trace") / name).string(); }

inline std::string bad_trace(const std::string& name) {
  return std::string(KVSIM_SOURCE_DIR) + "/tests/data/traces/bad/" + name;
}

// Every member, for comparing requests read back after a conversion.
inline bool same_request(const Request& a, const Request& b) {
  return a.id == b.id && a.arrival_ns == b.arrival_ns && a.prompt_tokens == b.prompt_tokens &&
         a.output_tokens == b.output_tokens && a.max_tokens == b.max_tokens && a.cancel_ns == b.cancel_ns &&
         a.n == b.n && a.prefix_block_tokens == b.prefix_block_tokens && a.prefix_hashes == b.prefix_hashes &&
         a.session == b.session && a.start_ns == b.start_ns && a.first_token_ns == b.first_token_ns &&
         a.finish_ns == b.finish_ns;
}

}  // namespace kvsim::test

#endif  // KVSIM_TESTS_TRACE_TEST_UTIL_H_
