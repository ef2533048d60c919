// Errors kvsim reports to its user.
//
// Bad input is an error: it is rejected before a simulation starts, with the place it came
// from (file, line, field) so the user can fix it. Running out of KV memory is *not* an
// error: it is an outcome the simulator measures and returns as a value.
#ifndef KVSIM_ERROR_H_
#define KVSIM_ERROR_H_

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace kvsim {

// Where a bad value was found. Empty or zero members are left out of the message.
struct Location {
  std::string file;    // path as the user gave it, or "" for a command-line value
  std::int64_t line = 0;   // 1-based; 0 when not line-oriented
  std::string field;   // column, JSON key or option name
};

// Input the user gave (file contents, option values) that kvsim cannot use.
// what() reads like: `traces/x.csv:17: column 'prompt_tokens': expected a non-negative
// integer, got "12x"`.
class InputError : public std::runtime_error {
 public:
  InputError(Location where, const std::string& problem);
  explicit InputError(const std::string& problem) : InputError(Location{}, problem) {}

  const Location& where() const { return where_; }
  const std::string& problem() const { return problem_; }

 private:
  Location where_;
  std::string problem_;
};

// `text` (a file name, a value from a file) safe to print in a message: control characters
// and bytes that are not UTF-8 as \xNN, characters that print as nothing as \uXXXX.
std::string printable(std::string_view text);

// An InputError at `where` when `text`, which must be text (a JSON document, a line of a
// file), holds a NUL byte; it names the byte's line (counted from `where`'s, or from 1) and
// column. A JSON reader checks after a successful parse (an error before the byte is then the
// one reported): nlohmann's parser takes a NUL for the end of its input, so what followed one
// would otherwise be dropped unread.
void refuse_nul_bytes(std::string_view text, const Location& where);

// A broken promise inside kvsim itself (an invariant check failed). Never the user's fault;
// the message says which invariant and where.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// Throws InternalError with `what` when `condition` is false. Cheap checks that stay on in
// release builds use this directly.
inline void check(bool condition, const char* what) {
  if (!condition) throw InternalError(what);
}

}  // namespace kvsim

#endif  // KVSIM_ERROR_H_
