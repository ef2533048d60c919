// --per-request FILE: one CSV row per request of the trace (per_request_header() and
// per_request_row() in replay_output.cc give the columns), in trace order within a run.
//
// Requests leave in the order they end. Each run's rows go to a scratch file as they leave,
// with an index of 24 bytes a row (ordinal, offset, length), and the file is written in trace
// order at the end: a million requests hold 24 MB, not every record.
#include <algorithm>
#include <memory>

#include "replay_output.h"
#include "replay_plan.h"
#include "scratch_file.h"

namespace kvsim::cli {
namespace {

class PerRequestCollector final : public RunCollector {
 public:
  PerRequestCollector(const ReplayPlan& plan, std::string path)
      : plan_(plan), path_(std::move(path)), runs_(plan.allocators.size()) {}

  RunSinks sinks(std::size_t i) override {
    Run& run = runs_[i];
    run.file = std::make_unique<ScratchFile>(path_, "the per-request rows");
    return {{}, [&run, allocator = plan_.allocators[i]->name()](const RequestRecord& r) {
              const std::string row = per_request_row(allocator, r);
              run.index.push_back({r.ordinal, run.file->append(row), static_cast<std::int64_t>(row.size())});
            }};
  }

  void write(OutputFile& out, const ReplayContext&, const std::vector<ReplayReport>&) override {
    out.write(per_request_header());
    std::string row;
    for (Run& run : runs_) {
      if (!run.file) continue;
      std::sort(run.index.begin(), run.index.end(), [](const Row& a, const Row& b) { return a.ordinal < b.ordinal; });
      for (const Row& r : run.index) {
        run.file->read(r.offset, r.length, row);
        out.write(row);
      }
    }
  }

 private:
  struct Row {
    std::int64_t ordinal, offset, length;
  };
  struct Run {
    std::unique_ptr<ScratchFile> file;
    std::vector<Row> index;
  };
  const ReplayPlan& plan_;
  std::string path_;
  std::vector<Run> runs_;
};

std::unique_ptr<RunCollector> collect_per_request(const ReplayPlan& plan, const std::string& path) {
  return std::make_unique<PerRequestCollector>(plan, path);
}

}  // namespace

extern constinit const ReportOutput kPerRequestOutput{
    .option = "per-request",
    .help = "write one CSV row per request to this file: its times (arrival, first scheduled, first token, finish, "
            "TTFT, TPOT, end to end), tokens, preemptions and outcome; an allocator column first",
    .collect = collect_per_request,
    .simulated_only = true};

}  // namespace kvsim::cli
