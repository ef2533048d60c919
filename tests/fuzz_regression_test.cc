// Every finding of the fuzz targets (fuzz/, run by tools/fuzz), replayed. The input that
// crashed is kept in tests/data/fuzz/<target>/ and goes through the very check the target
// runs (fuzz/fuzz_checks.h), so a fixed finding stays fixed in every build, sanitized or
// not; each also states what kvsim now says about it.
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "cli_util.h"
#include "fuzz_checks.h"
#include "kvsim/error.h"
#include "kvsim/model.h"
#include "kvsim/trace.h"

namespace {

struct FuzzFinding {
  const char* target;   // fuzz/corpus/<target>
  const char* file;     // tests/data/fuzz/<target>/<file>
  const char* by;       // "fuzzer", or "review" for an input written by hand to confirm a
                        // bug seen in the code while writing the target (it crashed the
                        // target before the fix all the same)
  const char* found;    // what went wrong before the fix
  const char* message;  // what reading it must now throw (an InputError containing this)
};

const FuzzFinding kFindings[] = {
    {"trace_azure", "origin-from-a-bad-row.csv", "fuzzer",
     "a row with a good time but a bad token count set the origin of time, so the first good row "
     "came back with a negative arrival that no order check saw",
     "column 'ContextTokens': expected a non-negative integer, got nothing"},
    {"hf_config", "number-overflow.json", "fuzzer",
     "a number too large for a double (1e999-like) escaped as nlohmann::json::out_of_range",
     "not valid JSON: number overflow parsing '666666666666666666666666666666666666e6666"},
    {"hf_config", "quant-method-not-a-string.json", "fuzzer",
     "quantization_config.quant_method given as a number escaped as nlohmann::json::type_error",
     "field 'quantization_config.quant_method': expected a string, got 1"},
    {"hf_config", "experts-sum-overflow.json", "fuzzer",
     "n_routed_experts + n_shared_experts overflowed (signed overflow, undefined behaviour) in the "
     "parameter estimate",
     "parameter count overflows 64 bits"},
    {"hf_config", "mla-latent-width-overflow.json", "review",
     "kv_lora_rank + qk_rope_head_dim overflowed in the KV layout and the parameter estimate",
     "overflows 64 bits"},
    {"hf_config", "mla-key-width-overflow.json", "review",
     "qk_nope_head_dim + qk_rope_head_dim (and + v_head_dim) overflowed in the parameter estimate and "
     "the decompressed layout",
     "overflows 64 bits"},
};

std::string fixture(const FuzzFinding& f) {
  return std::string(KVSIM_SOURCE_DIR) + "/tests/data/fuzz/" + f.target + "/" + f.file;
}

// "trace_native_csv" -> TraceFormat::native_csv.
kvsim::TraceFormat format_of(std::string target) {
  target.erase(0, std::string("trace_").size());
  for (char& c : target) c = c == '_' ? '-' : c;
  return kvsim::parse_trace_format(target, "target");
}

}  // namespace

TEST_CASE("fuzz findings: each crashing input now passes its target's check and is a plain input error") {
  for (const FuzzFinding& f : kFindings) {
    const std::string path = fixture(f);
    INFO(f.target << "/" << f.file << " (found by " << f.by << "): " << f.found);
    const bool trace = std::string(f.target).rfind("trace_", 0) == 0;
    if (trace) {
      CHECK_NOTHROW(kvsim::fuzz::check_trace(format_of(f.target), path));
      kvsim::TraceOptions options;
      options.format = format_of(f.target);
      options.synthetic_rate_per_s = 3;
      CHECK_THROWS_WITH(kvsim::read_trace(path, options), Catch::Contains(f.message));
    } else {
      const std::string text = kvsim::test::slurp(path);
      CHECK_NOTHROW(kvsim::fuzz::check_hf_config(text));
      // What `kvsim size --config FILE --device H100-80GB` reports: the loader's error, or
      // the sizing's.
      const auto r = kvsim::test::run_cli({"size", "--config", path, "--device", "H100-80GB"}, 20);
      CHECK(r.exit_code == 1);
      CHECK_THAT(r.err, Catch::StartsWith("kvsim: error: ") && Catch::Contains(f.message));
    }
  }
}

TEST_CASE("fuzz findings: every fixture in tests/data/fuzz has its entry") {
  std::size_t files = 0;
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(std::string(KVSIM_SOURCE_DIR) + "/tests/data/fuzz")) {
    if (!entry.is_regular_file()) continue;
    ++files;
    bool listed = false;
    for (const auto& f : kFindings) listed = listed || entry.path() == std::filesystem::path(fixture(f));
    INFO(entry.path());
    CHECK(listed);
  }
  CHECK(files == std::size(kFindings));
}
