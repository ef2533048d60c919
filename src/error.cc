#include "kvsim/error.h"

#include "trace_read.h"

namespace kvsim {
namespace {

std::string describe(const Location& where, const std::string& problem) {
  std::string out;
  if (!where.file.empty()) {
    // Escaped: a file name may hold escape sequences that would drive the terminal.
    out += detail::printable(where.file);
    if (where.line > 0) out += ':' + std::to_string(where.line);
    out += ": ";
  } else if (where.line > 0) {
    out += "line " + std::to_string(where.line) + ": ";
  }
  if (!where.field.empty()) out += where.field + ": ";
  out += problem;
  return out;
}

}  // namespace

std::string printable(std::string_view text) { return detail::printable(text); }

InputError::InputError(Location where, const std::string& problem)
    : std::runtime_error(describe(where, problem)), where_(std::move(where)), problem_(problem) {}

}  // namespace kvsim
