// The text of a JSON output: every command's --json goes through here.
#ifndef KVSIM_SRC_CLI_JSON_TEXT_H_
#define KVSIM_SRC_CLI_JSON_TEXT_H_

#include <string>

#include <nlohmann/json.hpp>

namespace kvsim::cli {

// `j` as text and a newline; indent -1 writes one line (a JSON Lines row). Bytes that are not
// UTF-8 (a trace path, an id read from a file) are written as U+FFFD, as the table shows them,
// where nlohmann's default would fail the whole output.
template <class Json>
std::string json_text(const Json& j, int indent = 2) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace kvsim::cli

#endif  // KVSIM_SRC_CLI_JSON_TEXT_H_
