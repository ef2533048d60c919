#include "cli.h"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "kvsim/error.h"
#include "kvsim/option_names.h"
#include "kvsim/output_file.h"

namespace kvsim::cli {
namespace {
std::string g_synopsis;
std::string g_command = "kvsim";
}  // namespace

const std::string& current_synopsis() { return g_synopsis; }
const std::string& current_command() { return g_command; }

namespace {

// The name the synopsis gives positional argument `name` ("FILE", "OUT"), not the option
// Boost keeps it under ("--file"); "" when `name` is an option.
std::string positional_label(const po::positional_options_description& positional, const std::string& name) {
  // max_total_count() is UINT_MAX when the last positional repeats; its name does too.
  const unsigned positions = std::min(positional.max_total_count(), 16u);
  for (unsigned i = 0; i < positions; ++i) {
    if (positional.name_for_position(i) != name) continue;
    std::string label = name;
    for (char& ch : label) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    return label;
  }
  return "";
}

}  // namespace

bool parse_options(const Invocation& inv, const CommandSpec& spec, po::options_description& options,
                   const po::positional_options_description& positional, po::variables_map& vm,
                   const po::options_description* hidden) {
  g_synopsis = spec.synopsis;
  g_command = inv.command;
  options.add_options()("help,h", "show this help and exit");
  po::options_description all;
  all.add(options);
  if (hidden != nullptr) all.add(*hidden);
  try {
    po::store(po::command_line_parser(inv.args)
                  .options(all)
                  .positional(positional)
                  .style(po::command_line_style::default_style &
                         ~po::command_line_style::allow_guessing)
                  .run(),
              vm);
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + "\nUsage: " + spec.synopsis);
  }
  if (vm.count("help") != 0) {
    std::ostringstream help;
    help << options;
    std::string text = fmt::format("Usage: {}\n\n{}\n\n{}", spec.synopsis, spec.description, help.str());
    if (!spec.examples.empty()) text += fmt::format("\nExamples:\n{}\n", spec.examples);
    write_stdout(text);
    return false;
  }
  // An empty value (--requests '', a shell variable never set) is refused, not taken for the
  // option left out.
  for (const auto& [name, value] : vm) {
    if (value.defaulted()) continue;
    // A switch (--no-preemption) may take no token: its "" is its value when given bare.
    const po::option_description* described = all.find_nothrow(name, false);
    if (described != nullptr && described->semantic()->min_tokens() == 0) continue;
    const auto* text = boost::any_cast<std::string>(&value.value());
    const auto* texts = boost::any_cast<std::vector<std::string>>(&value.value());
    const bool empty = (text != nullptr && text->empty()) ||
                       (texts != nullptr && std::any_of(texts->begin(), texts->end(), [](const auto& t) { return t.empty(); }));
    if (!empty) continue;
    const std::string label = positional_label(positional, name);
    throw UsageError((label.empty() ? "--" + name : label) + ": expected a value, got an empty string\nUsage: " +
                     spec.synopsis);
  }
  try {
    po::notify(vm);
  } catch (const po::required_option& e) {
    // A missing positional argument goes by the name the synopsis gives it.
    std::string name = e.get_option_name();
    name.erase(0, name.find_first_not_of('-'));
    if (const std::string label = positional_label(positional, name); !label.empty()) {
      throw UsageError(label + " is required\nUsage: " + spec.synopsis);
    }
    throw UsageError(std::string(e.what()) + "\nUsage: " + spec.synopsis);
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + "\nUsage: " + spec.synopsis);
  }
  return true;
}

int dispatch(const Invocation& inv, const std::string& description,
             const std::vector<Subcommand>& subcommands) {
  g_command = inv.command;
  const auto list = [&] {
    std::string text = fmt::format("Usage: {} <command> [options]\n\n{}\n\nCommands:\n", inv.command, description);
    for (const auto& sub : subcommands) text += fmt::format("  {:<10} {}\n", sub.name, sub.summary);
    text += fmt::format("\nRun '{} <command> --help' for a command's options.\n", inv.command);
    return text;
  };
  if (inv.args.empty()) {
    fmt::print(stderr, "{}", list());
    return kExitUsage;
  }
  const auto unknown = [&](const std::string& name) {
    std::string names;
    for (const auto& sub : subcommands) names += (names.empty() ? "" : ", ") + sub.name;
    return UsageError("unknown command '" + name + "' (commands: " + names + ")\nUsage: " + inv.command +
                      " <command> [options]");
  };
  const std::string& name = inv.args.front();
  if (name == "help" && inv.args.size() == 2 && (inv.args[1] == "--help" || inv.args[1] == "-h")) {
    write_stdout(list());  // "help --help": the list, as "help" alone
    return kExitOk;
  }
  if (name == "help" && inv.args.size() > 1) {
    // "help COMMAND [SUBCOMMAND]" is "COMMAND [SUBCOMMAND] --help": the help of the command named.
    for (const auto& sub : subcommands) {
      if (sub.name == inv.args[1]) {
        Invocation inner{inv.command + " " + sub.name, {inv.args.begin() + 2, inv.args.end()}};
        inner.args.push_back("--help");
        return sub.run(inner);
      }
    }
    throw unknown(inv.args[1]);
  }
  if (name == "--help" || name == "-h" || name == "help") {
    write_stdout(list());
    return kExitOk;
  }
  for (const auto& sub : subcommands) {
    if (sub.name == name) {
      Invocation inner{inv.command + " " + name, {inv.args.begin() + 1, inv.args.end()}};
      return sub.run(inner);
    }
  }
  throw unknown(name);
}

std::ifstream open_input(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw InputError(Location{path, 0, ""}, "no such file");
  if (std::filesystem::is_directory(path, ec)) throw InputError(Location{path, 0, ""}, "is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(Location{path, 0, ""}, "cannot open the file");
  // A leading UTF-8 byte order mark is skipped, as the trace readers skip it.
  char bom[3] = {};
  if (!in.read(bom, 3) || std::string_view(bom, 3) != "\xEF\xBB\xBF") {
    in.clear();
    in.seekg(0);
  }
  return in;
}

std::string read_input(const std::string& path) {
  std::ifstream in = open_input(path);
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw InputError(Location{path, 0, ""}, "cannot read the file");
  return s.str();
}

namespace {

// Where writing `path` lands: its symbolic links followed, a dangling one too (a file the
// run would create behind it), then made absolute; the path as given when that fails.
std::filesystem::path landing(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  if (ec) return fs::path(path);
  for (int hops = 0; hops < 40 && fs::is_symlink(fs::symlink_status(p, ec)); ++hops) {
    const fs::path target = fs::read_symlink(p, ec);
    if (ec) break;
    p = target.is_absolute() ? target : p.parent_path() / target;
  }
  const fs::path resolved = fs::weakly_canonical(p, ec);
  return ec ? p.lexically_normal() : resolved;
}

}  // namespace

void refuse_stdout_over_input(const std::vector<std::string>& inputs, const std::string& synopsis) {
  // `kvsim replay t.csv >> t.csv`: whatever the command prints would land in its own input.
  for (const auto& in : inputs) {
    if (in != "-" && names_standard_output(in)) {
      throw UsageError("standard output is the input " + printable(in) +
                       " (redirected to it): redirect the output elsewhere\nUsage: " + synopsis);
    }
  }
}

void refuse_output_over_input(const std::vector<std::pair<std::string, std::string>>& outputs,
                              const std::vector<std::string>& inputs, const std::string& synopsis,
                              bool writes_stdout) {
  if (writes_stdout) refuse_stdout_over_input(inputs, synopsis);
  // Refused before the run, not after it, when the finished output has nowhere to go.
  for (const auto& [name, path] : outputs) {
    if (path.empty()) {
      throw UsageError(name + ": an empty file name (give a path, or '-' for standard output)\nUsage: " + synopsis);
    }
  }
  // Two outputs to one file: the one written last would replace the other without a word.
  // The same path, or (when it exists) the same file under another name.
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (std::size_t k = i + 1; k < outputs.size(); ++k) {
      const std::string& a = outputs[i].second;
      const std::string& b = outputs[k].second;
      const bool a_out = a == "-" || names_standard_output(a);
      const bool b_out = b == "-" || names_standard_output(b);
      if (a_out && b_out) {
        throw UsageError(outputs[i].first + " and " + outputs[k].first +
                         " both write standard output ('-'): give one of them a file\nUsage: " + synopsis);
      }
      if (a_out || b_out) continue;
      if (std::filesystem::path(a).lexically_normal() == std::filesystem::path(b).lexically_normal() || same_file(a, b) ||
          landing(a) == landing(b)) {
        throw UsageError(outputs[i].first + " and " + outputs[k].first + " both write " + printable(a) +
                         ": give each its own file\nUsage: " + synopsis);
      }
    }
  }
  for (const auto& [name, out] : outputs) {
    for (const auto& in : inputs) {
      if (same_file(out, in)) {
        throw UsageError(name + " " + printable(out) + " is the same file as the input " + printable(in) +
                         ": write the output elsewhere\nUsage: " + synopsis);
      }
    }
  }
}

bool table_keeps_stdout(const std::vector<std::pair<std::string, std::string>>& outputs, bool json,
                        const std::string& synopsis) {
  bool keeps = true;
  for (const auto& [name, path] : outputs) {
    // Standard output under another name (/dev/stdout, the file it is redirected to) is
    // standard output: OutputFile writes it there, as for '-'.
    if (path != "-" && !names_standard_output(path)) continue;
    if (json) {
      throw UsageError("--json and " + name + " both write standard output ('-'): give " + name + " a file\nUsage: " +
                       synopsis);
    }
    keeps = false;
  }
  return keeps;
}

void reject_unused_trace_options(const GivenTraceOptions& given, TraceFormat format) {
  const std::string name{trace_format_name(format)};
  const auto refuse = [&](const char* option, std::string_view applies_to) {
    throw InputError(Location{"", 0, option}, "applies to " + std::string(applies_to) + " only, and this trace is " +
                                                  name + ": it would have no effect");
  };
  if (format != TraceFormat::lengths) {
    if (given.rate) refuse(kOptRate, "length-only traces (which have no arrival times)");
    if (given.seed) refuse(kOptSeed, "the arrivals of length-only traces");
  }
  if (given.keep_failed && format != TraceFormat::burstgpt) refuse(kOptKeepFailed, "BurstGPT traces");
  if (given.hash_block_tokens && format != TraceFormat::token_ids) refuse("--hash-block-tokens", "token-id traces");
}

}  // namespace kvsim::cli
