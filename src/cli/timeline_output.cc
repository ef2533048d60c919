// --timeline FILE: occupancy over time, one CSV row per sampled engine step of each run
// (timeline_header() and timeline_row() in replay_output.cc give the columns).
//
// Each run's rows go to a scratch file of its own while it runs, and the file joins them in
// allocator order at the end: the same file however the runs interleave, and memory that does
// not grow with the rows.
#include <cstdio>

#include "kvsim/error.h"
#include "kvsim/output_file.h"
#include "replay_output.h"
#include "replay_plan.h"

namespace kvsim::cli {
namespace {

class TimelineCollector final : public RunCollector {
 public:
  TimelineCollector(const ReplayPlan& plan, std::string path)
      : plan_(plan), path_(std::move(path)), files_(plan.allocators.size(), nullptr) {
    // The cached and evicted columns are there when any run caches prefixes (empty in the
    // rows of those that do not).
    for (const auto& a : plan.allocators) caching_ = caching_ || a->prefix_block_tokens() > 0;
  }
  TimelineCollector(const TimelineCollector&) = delete;
  TimelineCollector& operator=(const TimelineCollector&) = delete;
  ~TimelineCollector() override {
    for (auto* f : files_) {
      if (f != nullptr) std::fclose(f);
    }
  }

  RunSinks sinks(std::size_t run) override {
    std::FILE* out = files_[run] = std::tmpfile();
    if (out == nullptr) throw InputError(Location{path_, 0, ""}, "cannot create a scratch file");
    return {[out, name = plan_.allocators[run]->name(), caching = caching_](const TimelineRow& row) {
              const std::string line = timeline_row(name, row, caching);
              std::fwrite(line.data(), 1, line.size(), out);
            },
            {}};
  }

  void write(const std::string& path, const ReplayContext&, const std::vector<ReplayReport>&,
             std::span<const std::string> inputs) override {
    OutputFile out(path, inputs);
    out.write(timeline_header(plan_.options.layout, plan_.options.sample_every_ns > 0, caching_));
    for (auto* f : files_) {
      if (f == nullptr) continue;
      // A scratch write that failed (a full temporary directory) shows here, not as a
      // timeline with rows missing.
      if (std::fflush(f) != 0 || std::ferror(f) != 0) {
        throw InputError(Location{path, 0, ""},
                         "cannot hold the timeline's rows in a scratch file (is the temporary directory full?)");
      }
      std::rewind(f);
      char buffer[1 << 16];
      for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, f)) > 0;) out.write(std::string_view(buffer, n));
      if (std::ferror(f) != 0) throw InputError(Location{path, 0, ""}, "cannot read back a scratch file of the timeline");
    }
    out.commit();
  }

 private:
  const ReplayPlan& plan_;
  std::string path_;
  std::vector<std::FILE*> files_;
  bool caching_ = false;
};

std::unique_ptr<RunCollector> collect_timeline(const ReplayPlan& plan, const std::string& path) {
  return std::make_unique<TimelineCollector>(plan, path);
}

}  // namespace

extern constinit const ReportOutput kTimelineOutput{
    .option = "timeline",
    .help = "write occupancy over time to this CSV file (columns named with units); one engine's, so not with "
            "--replicas, as --html and --per-request",
    .collect = collect_timeline,
    .timeline = true};

}  // namespace kvsim::cli
