// The model preset table's checklist (src/model_presets.cc): every row is a valid model, found
// by its name in any case, and no two rows share a name.
#include <catch2/catch.hpp>
#include <cctype>
#include <set>

#include "kvsim/model.h"

using namespace kvsim;

TEST_CASE("model presets: every row is valid, lower-case, unique and found by its name") {
  std::set<std::string> names;
  REQUIRE(!model_presets().empty());
  for (const ModelSpec& m : model_presets()) {
    INFO(m.name);
    CHECK(names.insert(m.name).second);
    CHECK(!m.name.empty());
    // find_model_preset lower-cases what the user typed, so a name with capitals could never be found.
    for (const char c : m.name) CHECK(std::tolower(static_cast<unsigned char>(c)) == c);
    CHECK(!m.source.empty());
    CHECK_NOTHROW(validate_model(m, ""));
    CHECK(m.layer_window_tokens.size() == static_cast<std::size_t>(m.num_hidden_layers));
    CHECK(m.max_position_embeddings > 0);
    CHECK(&find_model_preset(m.name) == &m);
    std::string upper = m.name;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    CHECK(&find_model_preset(upper) == &m);
    // Every preset has a KV layout in bf16.
    CHECK(kv_layout(m, KvOptions{}).bytes_per_token() > 0);
  }
}
