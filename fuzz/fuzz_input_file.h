// The trace readers read a path, not a buffer: each fuzz input is written to one scratch
// file per process and read back from there. The file lives in /dev/shm when there is one
// (memory, not disk: rewriting it costs about a microsecond), else in $TMPDIR or /tmp.
#ifndef KVSIM_FUZZ_FUZZ_INPUT_FILE_H_
#define KVSIM_FUZZ_FUZZ_INPUT_FILE_H_

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace kvsim::fuzz {

// The scratch file's path, removed when the process exits normally.
inline const std::string& input_path() {
  static const std::string path = [] {
    std::string dir = "/tmp";
    if (const char* tmp = std::getenv("TMPDIR"); tmp != nullptr && *tmp != '\0') dir = tmp;
    if (::access("/dev/shm", W_OK) == 0) dir = "/dev/shm";
    std::string p = dir + "/kvsim-fuzz-" + std::to_string(::getpid()) + ".input";
    std::atexit([] { std::remove(input_path().c_str()); });
    return p;
  }();
  return path;
}

// Replaces the scratch file's contents with `data`. Aborts (a harness failure, not a
// finding in kvsim) when it cannot.
inline const std::string& write_input(const std::uint8_t* data, std::size_t size) {
  const std::string& path = input_path();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
  return path;
}

}  // namespace kvsim::fuzz

#endif  // KVSIM_FUZZ_FUZZ_INPUT_FILE_H_
