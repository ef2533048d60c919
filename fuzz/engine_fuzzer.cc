// libFuzzer target for the replay engine: the input decodes to a small trace and an option
// set, which are replayed; engine_checks.h says how and what is checked.
#include <cstdint>

#include "engine_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kvsim::fuzz::check_engine_case(kvsim::fuzz::decode_engine_case(data, size));
  return 0;
}
