// The command-line program's shared plumbing: subcommand dispatch, option parsing with
// --help everywhere, and the exit codes users script against.
//
// Exit codes: 0 success; 1 bad input (a file kvsim cannot use, named with its line and
// field, or a result that cannot be computed, such as a budget that comes out negative);
// 2 bad usage (an unknown option, a missing argument, or an option value kvsim rejects;
// the usage is printed); 3 an internal error (a broken invariant: a bug in kvsim, please
// report it). An InputError whose field names an option ("--dtype") and no file is a
// usage error.
#ifndef KVSIM_SRC_CLI_CLI_H_
#define KVSIM_SRC_CLI_CLI_H_

#include <boost/program_options.hpp>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvsim/trace.h"

namespace kvsim::cli {

namespace po = boost::program_options;

inline constexpr int kExitOk = 0;
inline constexpr int kExitInput = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitInternal = 3;

// Wrong use of the command line. Caught in main: message, usage line, exit 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One subcommand being run: its full name ("kvsim trace stats") and its arguments.
struct Invocation {
  std::string command;             // "kvsim trace stats"
  std::vector<std::string> args;   // after the command's name
};

// What a command looks like to the parser.
struct CommandSpec {
  std::string synopsis;     // "kvsim size [options]"
  std::string description;  // a paragraph printed under the synopsis by --help
  std::string examples;     // lines printed at the end of --help, may be empty
};

// Parses `inv.args` against `options`, `hidden` (options --help does not list, such as the
// ones positional arguments fill) and `positional`. Adds --help (-h). When --help is given,
// prints the command's help to stdout and returns false: the caller returns 0. Unknown
// options, missing values and extra positionals throw UsageError.
bool parse_options(const Invocation& inv, const CommandSpec& spec, po::options_description& options,
                   const po::positional_options_description& positional, po::variables_map& vm,
                   const po::options_description* hidden = nullptr);

// The synopsis of the command whose options were parsed last, for usage messages.
const std::string& current_synopsis();
// The command being run as far as it is known ("kvsim trace stats", or "kvsim trace" when
// its subcommand is not one): whose --help a usage message points to.
const std::string& current_command();

// Dispatches to one of `subcommands` by inv.args[0] (with --help listing them).
struct Subcommand {
  std::string name;
  std::string summary;
  int (*run)(const Invocation&);
};
int dispatch(const Invocation& inv, const std::string& description,
             const std::vector<Subcommand>& subcommands);

// The commands, one file each under src/cli/.
// The trace-reading options a command line gave explicitly (not by default).
struct GivenTraceOptions {
  bool rate = false;               // --rate: arrivals for a length-only trace
  bool seed = false;               // --seed: their seed
  bool keep_failed = false;        // --keep-failed: BurstGPT
  bool hash_block_tokens = false;  // --hash-block-tokens: token-id traces
};
// Refuses (InputError naming the option, a usage error) an option that has no effect on a
// trace of `format`, as the other options that would change nothing are refused.
void reject_unused_trace_options(const GivenTraceOptions& given, TraceFormat format);

// Opens a file kvsim reads that is not a trace (a sweep's spec and parts, the outputs
// `kvsim report` reads), positioned past a leading UTF-8 byte order mark (as trace readers
// skip it): an InputError naming it when it does not exist, is a directory, or cannot be
// opened.
std::ifstream open_input(const std::string& path);
// The whole of such a file, from past its byte order mark.
std::string read_input(const std::string& path);

// Refuses (UsageError, before any work) an output that is the same file as an input, standard
// output included (a shell's redirection into an input) unless `writes_stdout` is false (a
// command that writes only the files it is given). `outputs` are (option or argument name,
// path) pairs.
void refuse_output_over_input(const std::vector<std::pair<std::string, std::string>>& outputs,
                              const std::vector<std::string>& inputs, const std::string& synopsis,
                              bool writes_stdout = true);
// The standard output part alone, for a command whose only output is standard output.
void refuse_stdout_over_input(const std::vector<std::string>& inputs, const std::string& synopsis);
// Whether the table (or whatever the command prints) keeps standard output: not when one of
// `outputs` is '-', which takes it in place of the table. Throws UsageError when one is '-'
// beside --json (`json`), which must have standard output to itself.
bool table_keeps_stdout(const std::vector<std::pair<std::string, std::string>>& outputs, bool json,
                        const std::string& synopsis);

int run_models(const Invocation& inv);
int run_size(const Invocation& inv);
int run_trace(const Invocation& inv);
int run_replay(const Invocation& inv);
int run_calibrate(const Invocation& inv);
int run_validate(const Invocation& inv);
int run_sweep(const Invocation& inv);
int run_plan(const Invocation& inv);
int run_report(const Invocation& inv);

}  // namespace kvsim::cli

#endif  // KVSIM_SRC_CLI_CLI_H_
