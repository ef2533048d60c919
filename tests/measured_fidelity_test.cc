// Issue 13's targets, checked on real vLLM runs: kvsim calibrate, then kvsim validate with the
// fit, must predict TTFT, TPOT and latency (mean and p50) within 5% (TTFT within 10% on the MoE
// run, whose median TTFT is 139 ms) and the running and waiting counts within 2 requests a
// tick, mean absolute error. The runs are the three in ../shared/measured/ (skipped when that
// folder is absent) and the memory-bound RTX 4090 run in tests/data/measured/ (its workload
// is the shared Llama one). Nothing in kvsim is fitted to them: calibrate fits each run's own
// coefficients from its own ticks, as it would for any run.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_util.h"

using Json = nlohmann::json;

namespace {

const std::filesystem::path kShared = std::filesystem::path(KVSIM_SHARED_TRACES_DIR).parent_path() / "measured";

struct Target {
  double ttft_percent = 5;
  double percent = 5;
  double mae = 2;
};

// calibrate `run` (with `extra` options), validate with its fit, and check `target`.
void check_calibrated(const std::string& run, const std::vector<std::string>& extra, const Target& target) {
  std::vector<std::string> args{"calibrate", run, "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto fit = kvsim::test::run_cli(args);
  INFO(fit.err);
  REQUIRE(fit.exit_code == 0);
  const Json c = Json::parse(fit.out);
  CHECK(c["replay_estimate"]["replays"].get<int>() > 0);  // the workload was found and replayed
  args = {"validate", run, "--cost", c["cost"].get<std::string>(), "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto predicted = kvsim::test::run_cli(args);
  INFO(predicted.err);
  REQUIRE(predicted.exit_code == 0);
  const Json p = Json::parse(predicted.out);
  INFO(predicted.out);
  for (const char* figure : {"ttft", "tpot", "latency"}) {
    const double bound = std::string(figure) == "ttft" ? target.ttft_percent : target.percent;
    INFO(figure);
    CHECK(std::abs(p[figure]["diff_percent"]["mean"].get<double>()) <= bound);
    CHECK(std::abs(p[figure]["diff_percent"]["p50"].get<double>()) <= bound);
  }
  CHECK(p["running_mae"].get<double>() <= target.mae);
  CHECK(p["waiting_mae"].get<double>() <= target.mae);
}

// The shared run `name`, or "" (with a warning) when ../shared/measured/ is absent.
std::string shared_run(const std::string& name) {
  const std::filesystem::path dir = kShared / name;
  if (std::filesystem::exists(dir / "meta.json") && std::filesystem::exists(kShared / "workloads")) return dir.string();
  WARN("skipped: ../shared/measured/" << name << " is absent");
  return {};
}

}  // namespace

// One test case a run, so that ctest runs them beside each other (under the sanitizers the MoE
// run's calibration alone takes minutes).
TEST_CASE("measured runs: calibrated, validate meets issue 13's targets on the shared Llama-3.1-8B run") {
  if (const std::string run = shared_run("rtxpro6000-llama-3.1-8b"); !run.empty()) check_calibrated(run, {}, Target{});
}

TEST_CASE("measured runs: calibrated, validate meets issue 13's targets on the shared Qwen3-32B TP2 run") {
  if (const std::string run = shared_run("rtxpro6000-qwen3-32b-tp2"); !run.empty()) check_calibrated(run, {}, Target{});
}

TEST_CASE("measured runs: calibrated, validate meets issue 13's targets on the shared Qwen3-30B-A3B DP2 run") {
  if (const std::string run = shared_run("rtxpro6000-qwen3-30b-a3b-dp2"); !run.empty()) {
    check_calibrated(run, {}, Target{10, 5, 2});
  }
}

TEST_CASE("measured runs: calibrated, validate meets the targets on a run that preempts for minutes (RTX 4090)") {
  const std::filesystem::path workload = kShared / "workloads" / "sharegpt-llama-3.1-8b-300-sps10.jsonl";
  if (!std::filesystem::exists(workload)) {
    WARN("skipped: the run's workload, ../shared/measured/workloads/sharegpt-llama-3.1-8b-300-sps10.jsonl, is absent");
    return;
  }
  check_calibrated(std::string(KVSIM_SOURCE_DIR) + "/tests/data/measured/rtx4090-llama-3.1-8b",
                   {"--workload", workload.string()}, Target{});
}

TEST_CASE("measured runs: requests vLLM returned no metrics for leave calibrate's fit alone (RTX 4090)") {
  // The same run with every 30th request's timestamps null, as the recorder writes a request
  // vLLM gave no metrics for. The run's decoding spans then leave those ten requests out, and
  // so must the replay's spans they are compared with when the replay preempts; counted there,
  // they scaled the ratio of decodes per step, and the fit's replay came out 2.8% short on
  // TTFT with 2.89 and 4.09 requests of error a tick.
  const std::filesystem::path workload = kShared / "workloads" / "sharegpt-llama-3.1-8b-300-sps10.jsonl";
  if (!std::filesystem::exists(workload)) {
    WARN("skipped: the run's workload, ../shared/measured/workloads/sharegpt-llama-3.1-8b-300-sps10.jsonl, is absent");
    return;
  }
  const auto dir = kvsim::test::scratch_dir("fidelity-untimed") / "run";
  std::filesystem::create_directories(dir);
  std::filesystem::copy(std::string(KVSIM_SOURCE_DIR) + "/tests/data/measured/rtx4090-llama-3.1-8b", dir,
                        std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
  std::ifstream in(dir / "requests.jsonl");
  std::string lines, line;
  for (int k = 0; std::getline(in, line); ++k) {
    Json r = Json::parse(line);
    if (k % 30 == 0) {
      for (const char* stamp : {"arrival_time", "queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts"}) {
        r[stamp] = nullptr;
      }
    }
    lines += r.dump() + "\n";
  }
  in.close();
  std::ofstream(dir / "requests.jsonl") << lines;
  check_calibrated(dir.string(), {"--workload", workload.string()}, Target{});
}
