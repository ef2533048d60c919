// --per-request FILE: one CSV row per request of the trace (per_request_header() and
// per_request_row() in replay_output.cc give the columns), in trace order within a run.
//
// Requests leave in the order they end. Each run's rows go to a scratch file as they leave,
// with an index of 24 bytes a row (ordinal, offset, length), and the file is written in trace
// order at the end: a million requests hold 24 MB, not every record.
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "kvsim/error.h"
#include "kvsim/output_file.h"
#include "replay_output.h"
#include "replay_plan.h"

namespace kvsim::cli {
namespace {

class PerRequestCollector final : public RunCollector {
 public:
  PerRequestCollector(const ReplayPlan& plan, std::string path)
      : plan_(plan), path_(std::move(path)), runs_(plan.allocators.size()) {}
  PerRequestCollector(const PerRequestCollector&) = delete;
  PerRequestCollector& operator=(const PerRequestCollector&) = delete;
  ~PerRequestCollector() override {
    for (Run& run : runs_) {
      if (run.file != nullptr) std::fclose(run.file);
    }
  }

  RunSinks sinks(std::size_t i) override {
    Run& run = runs_[i];
    run.file = std::tmpfile();
    if (run.file == nullptr) throw InputError(Location{path_, 0, ""}, "cannot create a scratch file");
    return {{}, [&run, allocator = plan_.allocators[i]->name()](const RequestRecord& r) {
              const std::string row = per_request_row(allocator, r);
              run.index.push_back({r.ordinal, run.bytes, static_cast<std::int64_t>(row.size())});
              std::fwrite(row.data(), 1, row.size(), run.file);
              run.bytes += static_cast<std::int64_t>(row.size());
            }};
  }

  void write(const std::string& path, const ReplayContext&, const std::vector<ReplayReport>&,
             std::span<const std::string> inputs) override {
    OutputFile out(path, inputs);
    out.write(per_request_header());
    std::string row;
    for (Run& run : runs_) {
      if (run.file == nullptr) continue;
      if (std::fflush(run.file) != 0 || std::ferror(run.file) != 0) {
        throw InputError(Location{path, 0, ""},
                         "cannot hold the per-request rows in a scratch file (is the temporary directory full?)");
      }
      std::sort(run.index.begin(), run.index.end(), [](const Row& a, const Row& b) { return a.ordinal < b.ordinal; });
      const int fd = ::fileno(run.file);
      for (const Row& r : run.index) {
        row.resize(static_cast<std::size_t>(r.length));
        if (::pread(fd, row.data(), row.size(), static_cast<off_t>(r.offset)) != static_cast<ssize_t>(row.size())) {
          throw InputError(Location{path, 0, ""}, "cannot read back a scratch file of the per-request rows");
        }
        out.write(row);
      }
    }
    out.commit();
  }

 private:
  struct Row {
    std::int64_t ordinal, offset, length;
  };
  struct Run {
    std::FILE* file = nullptr;
    std::vector<Row> index;
    std::int64_t bytes = 0;
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
