#include "kvsim/error.h"

#include <algorithm>

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

void refuse_nul_bytes(std::string_view text, const Location& where) {
  const auto nul = text.find('\0');
  if (nul == std::string_view::npos) return;
  const std::string_view before = text.substr(0, nul);
  const auto lines_before = static_cast<std::int64_t>(std::count(before.begin(), before.end(), '\n'));
  const auto line_start = before.rfind('\n');
  const std::size_t column = nul - (line_start == std::string_view::npos ? 0 : line_start + 1) + 1;
  throw InputError(Location{where.file, std::max<std::int64_t>(where.line, 1) + lines_before, where.field},
                   "a NUL byte at column " + std::to_string(column) + ": expected text (is this a binary file?)");
}

InputError::InputError(Location where, const std::string& problem)
    : std::runtime_error(describe(where, problem)), where_(std::move(where)), problem_(problem) {}

}  // namespace kvsim
