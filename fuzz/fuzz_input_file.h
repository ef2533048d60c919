// The trace readers read a path, not a buffer: each fuzz input is written to one scratch
// file per process and read back from there. The file lives in $KVSIM_FUZZ_TMPDIR (which
// tools/fuzz makes, in memory, and removes), else in /dev/shm when there is one (memory,
// not disk: rewriting it costs about a microsecond), else in $TMPDIR or /tmp.
#ifndef KVSIM_FUZZ_FUZZ_INPUT_FILE_H_
#define KVSIM_FUZZ_FUZZ_INPUT_FILE_H_

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <string>
#include <string_view>
#include <system_error>

namespace kvsim::fuzz {

// The scratch file's path, removed when the process exits normally (a crash leaves it for
// tools/fuzz to remove with its directory).
inline const std::string& input_path() {
  // Never destroyed: the exit handler that removes the file runs after static destructors
  // of objects constructed before it was registered, and must still read the path.
  static const std::string* const path = [] {
    std::string dir = "/tmp";
    if (const char* tmp = std::getenv("TMPDIR"); tmp != nullptr && *tmp != '\0') dir = tmp;
    if (::access("/dev/shm", W_OK) == 0) dir = "/dev/shm";
    if (const char* own = std::getenv("KVSIM_FUZZ_TMPDIR"); own != nullptr && *own != '\0') dir = own;
    return new std::string(dir + "/kvsim-fuzz-" + std::to_string(::getpid()) + ".input");
  }();
  static const bool removed_at_exit = std::atexit([] { std::remove(path->c_str()); }) == 0;
  (void)removed_at_exit;
  return *path;
}

// Replaces the contents of the file at `path` with `bytes`. Aborts (a harness failure, not a
// finding in kvsim) when it cannot.
inline void write_or_abort(const std::string& path, std::string_view bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) ||
      std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
}

// Replaces the scratch file's contents with `data`.
inline const std::string& write_input(const std::uint8_t* data, std::size_t size) {
  const std::string& path = input_path();
  write_or_abort(path, std::string_view(reinterpret_cast<const char*>(data), size));
  return path;
}

// The files of a measured run's folder, in the order a measured_run input gives them, parted
// by a line of kRunFileSeparator: meta.json, requests.jsonl, timeseries.csv, and
// peer_cluster_config.json. A file the input does not reach is absent; text after the fourth
// part's end belongs to it.
inline constexpr const char* kRunFiles[] = {"meta.json", "requests.jsonl", "timeseries.csv", "peer_cluster_config.json"};
inline constexpr std::string_view kRunFileSeparator = "\n#####\n";

// Writes `data` as a measured run's folder beside the scratch file (its path plus ".run"),
// replacing the previous input's files, and returns the folder. Aborts, as write_input()
// does, when it cannot.
inline std::string write_run_dir(const std::uint8_t* data, std::size_t size) {
  const std::string dir = input_path() + ".run";
  static const bool made = [&dir] {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      std::fprintf(stderr, "%s: %s\n", dir.c_str(), ec.message().c_str());
      std::abort();
    }
    return std::atexit([] { std::filesystem::remove_all(input_path() + ".run"); }) == 0;
  }();
  (void)made;
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  for (std::size_t i = 0; i < std::size(kRunFiles); ++i) {
    const std::string path = dir + "/" + kRunFiles[i];
    std::filesystem::remove(path);
    if (rest.data() == nullptr) continue;
    const std::size_t end = i + 1 == std::size(kRunFiles) ? rest.npos : rest.find(kRunFileSeparator);
    write_or_abort(path, rest.substr(0, end));
    rest = end == rest.npos ? std::string_view() : rest.substr(end + kRunFileSeparator.size());
  }
  return dir;
}

}  // namespace kvsim::fuzz

#endif  // KVSIM_FUZZ_FUZZ_INPUT_FILE_H_
