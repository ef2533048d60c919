// --timeline FILE: occupancy over time, one CSV row per sampled engine step of each run
// (timeline_header() and timeline_row() in replay_output.cc give the columns).
//
// Each run's rows go to a scratch file of its own while it runs, and the file joins them in
// allocator order at the end: the same file however the runs interleave, and memory that does
// not grow with the rows.
#include <memory>

#include "replay_output.h"
#include "replay_plan.h"
#include "scratch_file.h"

namespace kvsim::cli {
namespace {

class TimelineCollector final : public RunCollector {
 public:
  TimelineCollector(const ReplayPlan& plan, std::string path)
      : plan_(plan), path_(std::move(path)), files_(plan.allocators.size()) {
    // The cached and evicted columns are there when any run caches prefixes (empty in the
    // rows of those that do not).
    for (const auto& a : plan.allocators) caching_ = caching_ || a->prefix_block_tokens() > 0;
  }

  RunSinks sinks(std::size_t run) override {
    files_[run] = std::make_unique<ScratchFile>(path_, "the timeline's rows");
    return {[file = files_[run].get(), name = plan_.allocators[run]->name(), caching = caching_](
                const TimelineRow& row) { file->append(timeline_row(name, row, caching)); },
            {}};
  }

  void write(OutputFile& out, const ReplayContext&, const std::vector<ReplayReport>&) override {
    out.write(timeline_header(plan_.options.layout, plan_.options.sample_every_ns > 0, caching_));
    for (const auto& file : files_) {
      if (file) file->copy_to(out);
    }
  }

 private:
  const ReplayPlan& plan_;
  std::string path_;
  std::vector<std::unique_ptr<ScratchFile>> files_;  // by run
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
