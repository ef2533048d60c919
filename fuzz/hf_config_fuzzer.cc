// libFuzzer target for the Hugging Face config.json loader. The input is the file's text;
// fuzz_checks.h says what is checked.
#include <cstdint>
#include <string_view>

#include "fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kvsim::fuzz::check_hf_config(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
