// libFuzzer target for one trace reader, chosen at compile time by KVSIM_FUZZ_FORMAT (the
// format's --format name, e.g. "native-csv"; fuzz/CMakeLists.txt makes one target per
// fuzz/corpus/trace_<format>/). The input is a whole trace file; fuzz_checks.h says what is
// checked.
#include <cstdint>

#include "fuzz_checks.h"
#include "fuzz_input_file.h"

#ifndef KVSIM_FUZZ_FORMAT
#error "define KVSIM_FUZZ_FORMAT as a trace format's name, e.g. \"native-csv\""
#endif

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // A name the registry does not know throws here, on the first input: the target fails at once.
  static const kvsim::TraceFormat format = kvsim::parse_trace_format(KVSIM_FUZZ_FORMAT, "KVSIM_FUZZ_FORMAT");
  kvsim::fuzz::check_trace(format, kvsim::fuzz::write_input(data, size));
  return 0;
}
