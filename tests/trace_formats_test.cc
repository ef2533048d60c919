// The trace format registry's checklist (src/trace_formats.h), checked for every row, so that a
// format added to trace_formats() is complete or fails here: its name round-trips, it is
// detected from a seed of its own, its reader reports it, and it has a fuzz target.
#include <catch2/catch.hpp>
#include <filesystem>
#include <iterator>
#include <set>
#include <string>

#include "kvsim/error.h"
#include "kvsim/trace.h"
#include "trace_formats.h"

using namespace kvsim;

namespace {

// fuzz/corpus/trace_<name>, with '_' for '-': the format's fuzz target and its seeds.
std::filesystem::path corpus_dir(std::string_view name) {
  std::string dir = "trace_" + std::string(name);
  for (char& c : dir) c = c == '-' ? '_' : c;
  return std::filesystem::path(KVSIM_SOURCE_DIR) / "fuzz" / "corpus" / dir;
}

}  // namespace

TEST_CASE("trace formats: every name round-trips through the registry, and only registered names parse") {
  std::set<std::string_view> names;
  std::set<TraceFormat> formats;
  for (const auto& f : detail::trace_formats()) {
    INFO(f.name);
    CHECK(names.insert(f.name).second);
    CHECK(formats.insert(f.format).second);
    CHECK(f.format != TraceFormat::automatic);
    CHECK(!f.summary.empty());
    CHECK(f.detect != nullptr);
    CHECK(f.make != nullptr);
    CHECK(detail::find_trace_format(f.format) == &f);
    CHECK(trace_format_name(f.format) == f.name);
    CHECK(parse_trace_format(f.name, "--format") == f.format);
  }
  CHECK(parse_trace_format("auto", "--format") == TraceFormat::automatic);

  // Each line of kvsim/trace_formats.def gives the enumerator and the row: they agree, the
  // table follows the list's order, and the --format name is the enumerator's with '-'.
  struct Line {
    TraceFormat format;
    std::string_view enumerator;
  };
  const Line lines[] = {
#define KVSIM_TRACE_FORMAT(format, row) {TraceFormat::format, #format},
#include "kvsim/trace_formats.def"
#undef KVSIM_TRACE_FORMAT
  };
  REQUIRE(std::size(lines) == detail::trace_formats().size());
  for (std::size_t i = 0; i < std::size(lines); ++i) {
    const auto& f = detail::trace_formats()[i];
    INFO(f.name);
    CHECK(f.format == lines[i].format);
    std::string dashed(lines[i].enumerator);
    for (char& c : dashed) c = c == '_' ? '-' : c;
    CHECK(f.name == dashed);
  }
  CHECK(trace_format_name(TraceFormat::automatic) == "auto");
  CHECK(detail::find_trace_format(TraceFormat::automatic) == nullptr);

  // --format's list: "auto", then the rows in order.
  const auto listed = trace_format_names();
  REQUIRE(listed.size() == detail::trace_formats().size() + 1);
  CHECK(listed.front() == "auto");
  for (std::size_t i = 0; i < detail::trace_formats().size(); ++i) {
    CHECK(listed[i + 1] == detail::trace_formats()[i].name);
  }

  try {
    parse_trace_format("excel", "--format");
    FAIL("no error");
  } catch (const InputError& e) {
    const std::string message = e.what();
    for (const auto name : listed) CHECK_THAT(message, Catch::Contains(std::string(name)));
  }
}

TEST_CASE("trace formats: each is detected from a seed of its fuzz corpus, and its reader reports it") {
  for (const auto& f : detail::trace_formats()) {
    INFO(f.name);
    const auto dir = corpus_dir(f.name);
    REQUIRE(std::filesystem::is_directory(dir));
    int detected = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      const std::string path = entry.path().string();
      TraceOptions options;
      options.format = f.format;
      options.synthetic_rate_per_s = 3;
      try {
        if (detect_trace_format(path) != f.format) continue;
        auto reader = open_trace(path, options);
        CHECK(reader->format() == f.format);
        Request r;
        while (reader->next(r)) {
        }
        ++detected;
      } catch (const InputError&) {
        // A seed with a bad row, kept to exercise the reader's errors.
      }
    }
    CHECK(detected > 0);
  }
}

TEST_CASE("trace formats: the fuzz targets (fuzz/corpus/trace_*) are the registered formats") {
  // fuzz/CMakeLists.txt makes one target per directory, named for the format it reads.
  std::set<std::string> registered;
  for (const auto& f : detail::trace_formats()) registered.insert(corpus_dir(f.name).filename().string());
  std::set<std::string> targets;
  const auto corpora = std::filesystem::path(KVSIM_SOURCE_DIR) / "fuzz" / "corpus";
  for (const auto& entry : std::filesystem::directory_iterator(corpora)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("trace_")) targets.insert(name);
  }
  CHECK(targets == registered);
}

TEST_CASE("trace formats: where two formats' fields overlap, detection resolves them as it always has") {
  const auto detect = [](const std::string& name, const std::string& text) {
    const auto path = std::filesystem::temp_directory_path() / ("kvsim_trace_formats_test_" + name);
    std::FILE* file = std::fopen(path.string().c_str(), "wb");
    REQUIRE(file != nullptr);
    std::fputs(text.c_str(), file);
    std::fclose(file);
    const TraceFormat format = detect_trace_format(path.string());
    std::filesystem::remove(path);
    return format;
  };
  // Token-id fields win over Mooncake's, and both over the native fields.
  CHECK(detect("both.jsonl", "{\"input_toks\": 3, \"hash_ids\": [1], \"arrival\": 0}\n") == TraceFormat::token_ids);
  CHECK(detect("moon.jsonl", "{\"input_length\": 3, \"arrival\": 0}\n") == TraceFormat::mooncake);
  // A Vidur header has a length-only file's columns too; importers win over native names.
  CHECK(detect("vidur.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n") == TraceFormat::vidur);
  CHECK(detect("azure.csv", "TIMESTAMP,ContextTokens,GeneratedTokens,id,arrival\n") == TraceFormat::azure);
  CHECK(detect("lengths.csv", "num_prefill_tokens,num_decode_tokens,prompt_tokens\n") == TraceFormat::lengths);
}
