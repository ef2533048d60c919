// kvsim: the command-line program. It parses options and calls the library; the work is
// in libkvsim.
#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "cli.h"
#include "kvsim/error.h"
#include "kvsim/output_file.h"

// The project's version, from project(kvsim VERSION ...) in CMakeLists.txt, which passes it
// to this target as a compile definition: no git call at run time.
#ifndef KVSIM_VERSION
#error "KVSIM_VERSION is defined by CMakeLists.txt (target_compile_definitions on kvsim)"
#endif

namespace {

constexpr const char* kDescription =
    "kvsim replays LLM request traces through KV-cache allocators and reports, byte-exact,\n"
    "allocated slots versus effective tokens, fragmentation and peak occupancy.";

// A message as the terminal shows it: each line printable (kvsim::printable), so that what a
// file or an option said (a config's model_type, a JSON parser's "last read") cannot drive the
// terminal, whichever message quotes it.
std::string shown(std::string_view message) {
  std::string out;
  for (std::size_t at = 0; at <= message.size();) {
    const std::size_t end = std::min(message.find('\n', at), message.size());
    if (at > 0) out += '\n';
    out += kvsim::printable(message.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

// Prints a usage error naming the command being run, so the user knows whose --help to
// read (not a mistyped one's), and returns exit code 2.
int usage_error(const std::string& message) {
  const std::string& where = kvsim::cli::current_command();
  fmt::print(stderr, "{}: {}\nTry '{} --help'.\n", where, shown(message), where);
  return kvsim::cli::kExitUsage;
}

// `kvsim version` (and `kvsim --version`): one line, "kvsim X.Y.Z".
int run_version(const kvsim::cli::Invocation& inv) {
  using namespace kvsim::cli;
  po::options_description options("Options");
  po::variables_map vm;
  const CommandSpec spec{"kvsim version", "Prints the version of kvsim, as \"kvsim X.Y.Z\".", ""};
  if (!parse_options(inv, spec, options, po::positional_options_description{}, vm)) return kExitOk;
  kvsim::write_stdout(fmt::format("kvsim {}\n", KVSIM_VERSION));
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kvsim::cli;
  const std::vector<Subcommand> commands = {
      {"replay", "replay a trace through one or more allocators", run_replay},
      {"calibrate", "fit the linear cost model to a measured vLLM run", run_calibrate},
      {"validate", "replay a measured vLLM run's workload and compare with what was measured", run_validate},
      {"sweep", "replay a trace at every point of a grid over replay's options (with shards and merge)", run_sweep},
      {"plan", "the largest rate-scale (or fewest replicas) at which a replay meets targets", run_plan},
      {"report", "the HTML report with charts, from saved replay or validate outputs", run_report},
      {"size", "KV-cache capacity sheet for a model, dtype, placement and budget", run_size},
      {"models", "list the built-in model presets and their KV geometry", run_models},
      {"trace", "trace statistics, conversion and synthetic generation", run_trace},
      {"version", "print the version of kvsim (also: kvsim --version)", run_version},
  };
  Invocation inv{"kvsim", {argv + 1, argv + argc}};
  // --version is an option of kvsim itself, the spelling users try first; it is the version
  // command (and, like it, takes nothing after it).
  if (!inv.args.empty() && inv.args.front() == "--version") inv.args.front() = "version";
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
    fmt::print(stderr, "kvsim: error: {}\n", shown(e.what()));
    return kExitInput;
  } catch (const kvsim::InternalError& e) {
    fmt::print(stderr, "kvsim: internal error (a bug in kvsim, please report it): {}\n", shown(e.what()));
    return kExitInternal;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "kvsim: error: out of host memory\n");
    return kExitInput;
  } catch (const std::exception& e) {
    fmt::print(stderr, "kvsim: internal error (a bug in kvsim, please report it): {}\n", shown(e.what()));
    return kExitInternal;
  }
}
