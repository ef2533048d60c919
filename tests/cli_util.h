// Runs the built kvsim program from a test and captures what it printed and its exit code.
#ifndef KVSIM_TESTS_CLI_UTIL_H_
#define KVSIM_TESTS_CLI_UTIL_H_

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

namespace kvsim::test {

struct CliResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

inline std::string shell_quote(const std::string& arg) {
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

inline std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A fresh scratch directory under the system temp dir, named after `tag`.
inline std::filesystem::path scratch_dir(const std::string& tag) {
  auto dir = std::filesystem::temp_directory_path() / ("kvsim-test-" + tag + "-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

// Runs `kvsim args...` with stdin from /dev/null. With `timeout_s` > 0 the program is
// killed after that many seconds, and the exit code is then timeout(1)'s 124.
inline CliResult run_cli(const std::vector<std::string>& args, int timeout_s = 0) {
  const auto dir = scratch_dir("cli");
  const auto out_path = dir / "stdout";
  const auto err_path = dir / "stderr";
  // Appended piece by piece: GCC 12 at -O3 warns (-Wrestrict, falsely) on "literal" + string.
  std::string command;
  if (timeout_s > 0) {
    command.append("timeout ");
    command.append(std::to_string(timeout_s));
    command.append(" ");
  }
  command.append(shell_quote(KVSIM_BINARY));
  for (const auto& a : args) {
    command.append(" ");
    command.append(shell_quote(a));
  }
  command.append(" </dev/null >");
  command.append(shell_quote(out_path.string()));
  command.append(" 2>");
  command.append(shell_quote(err_path.string()));
  const int status = std::system(command.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  return r;
}

// The shared production traces (../shared/traces), or "" when that folder is absent.
inline std::string shared_trace(const std::string& relative) {
  const std::filesystem::path p = std::filesystem::path(KVSIM_SHARED_TRACES_DIR) / relative;
  return std::filesystem::exists(p) ? p.string() : std::string{};
}

}  // namespace kvsim::test

// Skips the rest of a test case, with a message, when a shared trace is absent.
#define KVSIM_REQUIRE_SHARED_TRACE(var, relative)                                        \
  const std::string var = ::kvsim::test::shared_trace(relative);                         \
  if (var.empty()) {                                                                     \
    WARN("skipped: ../shared/traces/" relative " is absent (tests that replay the real " \
         "production traces need it)");                                                  \
    return;                                                                              \
  }

#endif  // KVSIM_TESTS_CLI_UTIL_H_
