// A JSON document's keys, each once per object.
//
// nlohmann::json::parse, like Python's json module, keeps the last of two equal keys in an
// object without a word, so a config.json or meta.json edited by hand to say
// "max_num_seqs": 128, "max_num_seqs": 4 would be replayed with 4 and nothing said. kvsim's
// readers of JSON documents parse through this instead, which refuses the second. (The trace
// readers' records do the same in their own SAX parser, src/trace_jsonl.h.)
#ifndef KVSIM_SRC_JSON_KEYS_H_
#define KVSIM_SRC_JSON_KEYS_H_

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "kvsim/error.h"

namespace kvsim::detail {

// json::parse(text), throwing as it does on a syntax error, and an InputError at `where`
// whose field is the key's dotted path ("engine_kwargs.max_num_seqs") when an object names a
// key twice.
inline nlohmann::json parse_json_keys_once(std::string_view text, const Location& where) {
  using json = nlohmann::json;
  std::vector<std::vector<std::string>> keys;  // of each object open, innermost last
  std::vector<std::string> path;               // the key each open object is the value of
  std::string last_key;
  const json::parser_callback_t check = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        path.push_back(keys.empty() ? std::string() : last_key);
        keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        keys.pop_back();
        path.pop_back();
        break;
      case json::parse_event_t::key: {
        last_key = parsed.get<std::string>();
        auto& seen = keys.back();
        if (std::find(seen.begin(), seen.end(), last_key) != seen.end()) {
          std::string field;
          for (const std::string& k : path) {
            if (!k.empty()) field += k + ".";
          }
          throw InputError(Location{where.file, where.line, field + last_key},
                           "given twice in one object (a JSON reader keeps one of them silently, so kvsim "
                           "refuses to choose)");
        }
        seen.push_back(last_key);
        break;
      }
      default:
        break;
    }
    return true;
  };
  return json::parse(text.begin(), text.end(), check);
}

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_JSON_KEYS_H_
