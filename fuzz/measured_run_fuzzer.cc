// libFuzzer target for a measured vLLM run's folder, as `kvsim validate` and `kvsim calibrate`
// read it. The input is the folder's files one after another, each ended by a line "#####"
// (fuzz_input_file.h, write_run_dir()); fuzz_checks.h says what is checked.
#include <cstdint>

#include "fuzz_checks.h"
#include "fuzz_input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kvsim::fuzz::check_measured_run(kvsim::fuzz::write_run_dir(data, size));
  return 0;
}
