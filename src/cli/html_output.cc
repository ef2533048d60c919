// --html FILE: the self-contained page of html_report.h, from each run's sampled timeline and
// its requests' latencies, kept in memory (a point per timeline row, a few numbers per
// request), and the reports' figures.
#include "kvsim/output_file.h"
#include "replay_output.h"
#include "replay_plan.h"

namespace kvsim::cli {
namespace {

class HtmlCollector final : public RunCollector {
 public:
  explicit HtmlCollector(const ReplayPlan& plan) : runs_(plan.allocators.size()) {}

  RunSinks sinks(std::size_t run) override {
    HtmlRun* html = &runs_[run];
    return {[html](const TimelineRow& row) { add_point(*html, html_point(row)); },
            [html](const RequestRecord& r) { add_latencies(*html, r); }};
  }

  void write(OutputFile& out, const ReplayContext& context, const std::vector<ReplayReport>& reports) override {
    out.write(replay_html(context, reports, std::move(runs_)));
  }

 private:
  std::vector<HtmlRun> runs_;
};

std::unique_ptr<RunCollector> collect_html(const ReplayPlan& plan, const std::string&) {
  return std::make_unique<HtmlCollector>(plan);
}

}  // namespace

extern constinit const ReportOutput kHtmlOutput{
    .option = "html",
    .help = "write a self-contained HTML report to this file: charts of occupancy over time with the peak, where "
            "the memory goes, latency CDFs, running and queued requests (docs/report.md)",
    .collect = collect_html,
    .timeline = true};

}  // namespace kvsim::cli
