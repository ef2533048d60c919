#pragma once

// Whether the allocators walk their whole books after every operation. Only a build with
// KVSIM_EXPENSIVE_CHECKS has the walks at all; in such a build they run unless the
// environment says KVSIM_INVARIANT_CHECKS=off, read once per process.
//
// The switch exists for the sanitizer stage of tools/run-tests, whose tests (set in
// tests/CMakeLists.txt) are the very tests the checked stage has already walked after every
// operation (the same code, the same inputs, and kvsim is deterministic), so walking them
// again under AddressSanitizer proves nothing new and cost most of that stage (a walk is
// O(pool) per operation: 484 s of xcheck's 2 s replay). The sanitizers still watch every
// operation.

#include <cstdlib>
#include <string_view>

namespace kvsim::detail {

inline bool invariant_checks_on() {
  static const bool on = [] {
    const char* value = std::getenv("KVSIM_INVARIANT_CHECKS");
    return value == nullptr || std::string_view(value) != "off";
  }();
  return on;
}

// At the end of an allocator operation: its books walked, when this build has the walks and
// this run has not turned them off. Nothing at all in other builds.
template <class Books>
void check_after_operation(const Books& books) {
#if KVSIM_EXPENSIVE_CHECKS
  if (invariant_checks_on()) books.check_invariants();
#else
  (void)books;
#endif
}

}  // namespace kvsim::detail
