// kvsim: the command-line program. It parses options and calls the library; the work is
// in libkvsim.
#include <fmt/core.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "cli.h"
#include "kvsim/error.h"

namespace {

constexpr const char* kDescription =
    "kvsim replays LLM request traces through KV-cache allocators and reports, byte-exact,\n"
    "allocated slots versus effective tokens, fragmentation and peak occupancy.";

// Prints a usage error naming the command being run, so the user knows whose --help to
// read (not a mistyped one's), and returns exit code 2.
int usage_error(const std::string& message) {
  const std::string& where = kvsim::cli::current_command();
  fmt::print(stderr, "{}: {}\nTry '{} --help'.\n", where, message, where);
  return kvsim::cli::kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kvsim::cli;
  const std::vector<Subcommand> commands = {
      {"replay", "replay a trace through one or more allocators", run_replay},
      {"calibrate", "fit the linear cost model to a measured vLLM run", run_calibrate},
      {"validate", "replay a measured vLLM run's workload and compare with what was measured", run_validate},
      {"size", "KV-cache capacity sheet for a model, dtype, placement and budget", run_size},
      {"models", "list the built-in model presets and their KV geometry", run_models},
      {"trace", "trace statistics, conversion and synthetic generation", run_trace},
  };
  Invocation inv{"kvsim", {argv + 1, argv + argc}};
  try {
    const int status = dispatch(inv, kDescription, commands);
    // Whatever stdio still holds must reach standard output, or the run failed.
    if (std::fflush(stdout) != 0 || std::ferror(stdout) != 0) {
      fmt::print(stderr, "kvsim: error: standard output: write error: {}\n", std::strerror(errno));
      return kExitInput;
    }
    return status;
  } catch (const UsageError& e) {
    return usage_error(e.what());
  } catch (const kvsim::InputError& e) {
    // A value typed on the command line is usage; a file's contents are input.
    if (e.where().file.empty() && e.where().field.rfind("--", 0) == 0) {
      return usage_error(std::string(e.what()) + "\nUsage: " + current_synopsis());
    }
    fmt::print(stderr, "kvsim: error: {}\n", e.what());
    return kExitInput;
  } catch (const kvsim::InternalError& e) {
    fmt::print(stderr, "kvsim: internal error (a bug in kvsim, please report it): {}\n", e.what());
    return kExitInternal;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "kvsim: error: out of host memory\n");
    return kExitInput;
  } catch (const std::exception& e) {
    fmt::print(stderr, "kvsim: internal error (a bug in kvsim, please report it): {}\n", e.what());
    return kExitInternal;
  }
}
