// libFuzzer target for one trace reader, chosen at compile time by KVSIM_FUZZ_FORMAT (a
// kvsim::TraceFormat enumerator). The input is a whole trace file; fuzz_checks.h says what
// is checked.
#include <cstdint>

#include "fuzz_checks.h"
#include "fuzz_input_file.h"

#ifndef KVSIM_FUZZ_FORMAT
#error "define KVSIM_FUZZ_FORMAT as a kvsim::TraceFormat enumerator, e.g. native_csv"
#endif

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kvsim::fuzz::check_trace(kvsim::TraceFormat::KVSIM_FUZZ_FORMAT, kvsim::fuzz::write_input(data, size));
  return 0;
}
