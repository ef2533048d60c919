// Every finding of the fuzz targets (fuzz/, run by tools/fuzz), replayed. The input that
// crashed is kept in tests/data/fuzz/<target>/ and goes through the very check the target
// runs (fuzz/fuzz_checks.h), so a fixed finding stays fixed in every build, sanitized or
// not; each also states what kvsim now says about it.
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "cli_util.h"
#include "engine_checks.h"
#include "fuzz_checks.h"
#include "fuzz_input_file.h"
#include "kvsim/error.h"
#include "kvsim/measured_run.h"
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

// The engine target's inputs (tests/data/fuzz/engine/) decode to a trace and options
// (fuzz/engine_checks.h); each now passes the target's check, and either runs or is an
// input error.
struct EngineFinding {
  const char* file;
  const char* by;         // "fuzzer", or "review": the reproducer, encoded by hand
  const char* allocator;  // what its bytes decode to: the decoder's choices may grow, not move
  const char* found;      // what went wrong before the fix
  bool runs;              // true: a report; false: an InputError
};

const EngineFinding kEngineFindings[] = {
    {"swap-two-tiny-requests.bin", "review", "paged:block=16",
     "paged:block=16, a 64-byte budget, vLLM swap preemption, two requests of 10 + 60 tokens: the "
     "second was swapped out, then the first swapped itself out, and neither could come back; "
     "the replay spun forever at flat memory",
     true},
    {"n64-max-batched-tokens-32.bin", "review", "paged:block=16",
     "two requests with n = 64 under --max-batched-tokens 32: a preempted one's recomputed "
     "positions cost 64 tokens each, so its prefill never advanced; the replay spun forever",
     true},
    {"prompt0-output-over-max-len.bin", "review", "dense-static:reserve=max-model-len",
     "dense-static with max model length 100 and a request of prompt 0, output 200: not refused "
     "as too long; it outgrew its row (internal error, exit 3)",
     true},
    {"arena-without-budget.bin", "review", "dynamic:growth=exact,arena=12",
     "dynamic:growth=exact,arena=12 without a budget: the engine had no bound to plan against and "
     "exited 3 (allocation failed in a run without a memory budget)",
     true},
    {"arena-larger-than-budget.bin", "fuzzer", "dynamic:growth=exact,arena=12",
     "dynamic:growth=exact,arena=12 under a 2-byte budget: the engine planned against the budget "
     "while the allocator placed up to its arena, and held 3 bytes of a 2-byte budget",
     false},
    {"arrival-near-largest-time.bin", "review", "paged:block=16",
     "an arrival at the largest representable time: its first step would end past it, reported as "
     "an internal error (exit 3) instead of an input error",
     false},
};

std::string engine_fixture(const EngineFinding& f) {
  return std::string(KVSIM_SOURCE_DIR) + "/tests/data/fuzz/engine/" + f.file;
}

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
    } else if (std::string(f.target) == "measured_run") {
      const std::string bytes = kvsim::test::slurp(path);
      const std::string dir =
          kvsim::fuzz::write_run_dir(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
      CHECK_NOTHROW(kvsim::fuzz::check_measured_run(dir));
      // What `kvsim calibrate RUN_DIR` reports: the reader's error, or the fit's.
      const auto r = kvsim::test::run_cli({"calibrate", dir}, 20);
      CHECK(r.exit_code == 1);
      CHECK_THAT(r.err, Catch::StartsWith("kvsim: error: ") && Catch::Contains(f.message));
    } else {
      REQUIRE(std::string(f.target) == "hf_config");
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

TEST_CASE("fuzz findings: each engine input now replays within the target's properties") {
  for (const EngineFinding& f : kEngineFindings) {
    INFO("engine/" << f.file << " (found by " << f.by << "): " << f.found);
    const std::string bytes = kvsim::test::slurp(engine_fixture(f));
    const auto c = kvsim::fuzz::decode_engine_case(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    CHECK(c.allocator == f.allocator);
    bool ran = false;
    CHECK_NOTHROW(ran = kvsim::fuzz::check_engine_case(c));
    CHECK(ran == f.runs);
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
    for (const auto& f : kEngineFindings) listed = listed || entry.path() == std::filesystem::path(engine_fixture(f));
    INFO(entry.path());
    CHECK(listed);
  }
  CHECK(files == std::size(kFindings) + std::size(kEngineFindings));
}

// The measured_run target's seeds are cut from real runs (fuzz/corpus/measured_run/), each
// named for the requests it keeps: parted as the target parts them, each is a run kvsim reads
// whole, with those requests, every tick of its timeseries, and its peer's hardware where the
// seed keeps peer_cluster_config.json.
TEST_CASE("fuzz seeds: each measured run seed parts into the run it was cut from") {
  const std::filesystem::path corpus = std::filesystem::path(KVSIM_SOURCE_DIR) / "fuzz" / "corpus" / "measured_run";
  struct Seed {
    const char* file;
    std::size_t requests, ticks;
    const char* hardware;  // peer_cluster_config.json's, "" without one
  };
  const Seed seeds[] = {
      {"llama-3.1-8b-60-requests", 60, 67, "RTXPRO6000"},
      {"qwen3-30b-a3b-dp2-40-requests-no-peer-config", 40, 65, ""},
      {"rtx4090-20-requests", 20, 184, "RTX4090"},
  };
  for (const Seed& seed : seeds) {
    INFO(seed.file);
    const std::string bytes = kvsim::test::slurp(corpus / seed.file);
    REQUIRE(!bytes.empty());
    const std::string dir =
        kvsim::fuzz::write_run_dir(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    const kvsim::MeasuredRun run = kvsim::read_measured_run(dir, std::nullopt, false);
    CHECK(run.requests.size() == seed.requests);
    CHECK(run.ticks.size() == seed.ticks);
    CHECK(run.hardware == seed.hardware);
    CHECK_NOTHROW(kvsim::fuzz::check_measured_run(dir));
  }
}
