// The HTML report (`kvsim replay --html`, `kvsim report --html`): one self-contained page of
// inline CSS and SVG charts that kvsim draws itself, readable offline, in light and in dark.
//
// The page is built from an HtmlPage, which a replay fills from its reports and timeline rows
// and `kvsim report` fills from saved --json, --timeline and --per-request files; the writer
// computes nothing the page's inputs do not hold. Its size does not grow with the trace:
// each time series is reduced to one minimum and one maximum per pixel column (so a peak is
// never lost between columns), and each latency CDF to kCdfPoints fixed quantiles. Same
// page in, same bytes out: no dates, no random ids.
//
// The page is well-formed XML as well as HTML (every element closed, every attribute quoted,
// its script in a CDATA section), so that its charts can be checked by an XML parser; its
// script only checks the charts in the browser and writes a verdict into the page
// (id "kvsim-selfcheck"), which tests/html_chromium_test.sh reads.
#ifndef KVSIM_SRC_CLI_HTML_REPORT_H_
#define KVSIM_SRC_CLI_HTML_REPORT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvsim/replay.h"

namespace kvsim::cli {

// One state of the engine, as a timeline row gives it (bytes, requests). `allocated_max` is
// the largest allocated bytes since the previous point (the point's own state without
// sampling); `cached` the cached (evictable) bytes, -1 when the allocator keeps no cache.
struct HtmlPoint {
  std::int64_t time_ns = 0;
  std::int64_t running = 0;
  std::int64_t queued = 0;
  std::int64_t effective = 0;
  std::int64_t allocated = 0;
  std::int64_t allocated_max = 0;
  std::int64_t reserved = 0;
  std::int64_t cached = -1;
};

// One allocator's run: the figures the charts draw.
struct HtmlRun {
  std::string allocator;
  std::int64_t capacity_bytes = 0;     // the budget; 0 in demand mode
  double effective_mean = 0;           // bytes, time-weighted
  double allocated_mean = 0;
  Fragmentation internal_mean;         // bytes, time-weighted, the five parts
  double external_fragmentation_mean = 0;  // bytes outside the largest free extent
  std::int64_t allocated_peak = 0;
  std::int64_t allocated_peak_at_ns = 0;
  std::int64_t reserved_peak = 0;
  std::int64_t completed = 0;          // requests completed: a run that completed none served nothing
  bool prefix_caching = false;
  std::vector<HtmlPoint> timeline;     // empty: no over-time charts for this run
  // Completed requests' latencies, ns, in any order; empty: no CDF for this run.
  std::vector<std::int64_t> ttft_ns, tpot_ns, e2e_ns;
};

// validate's comparison: one figure, measured against simulated.
struct HtmlComparison {
  std::string figure;      // "TTFT p50, s"
  double measured = 0;
  double simulated = 0;
};

// kvsim sweep: one figure against the varied parameter, a line per series (an allocator and
// the values of the other axes).
struct HtmlSweepSeries {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (parameter, figure), by the parameter
};
struct HtmlSweepChart {
  std::string name, title, x_label, y_label;
  std::vector<HtmlSweepSeries> series;
};

struct HtmlPage {
  std::string title;                   // "kvsim replay traces/chat-mix.csv"
  std::vector<std::string> context;    // what the runs had in common, one line each
  std::vector<std::string> answers;    // the plain answers and warnings, atop the page
  std::vector<HtmlRun> runs;
  std::vector<HtmlComparison> comparisons;  // validate's measured vs simulated
  std::string comparison_title;
  std::vector<HtmlSweepChart> sweep;
};

// The summary figures of a replay's report (no timeline, no latencies).
HtmlRun html_run(const ReplayReport& report);
HtmlPoint html_point(const TimelineRow& row);
// Appends a timeline point to `run`, holding at most html::kMaxPoints: beyond, adjacent points
// merge in pairs (the later state, the larger allocated maximum), as the timeline's default
// does, so that even --sample-every step on a long trace keeps memory bounded and the peak.
void add_point(HtmlRun& run, const HtmlPoint& point);
// Adds a completed request's TTFT, TPOT (two or more output tokens) and end-to-end latency.
void add_latencies(HtmlRun& run, const RequestRecord& record);

// Plain sentences comparing the runs: which allocator holds least at peak and on average, by
// how much, and where the rest of the allocated memory goes.
std::vector<std::string> plain_answers(const std::vector<HtmlRun>& runs);

std::string render_html(const HtmlPage& page);

// The pieces, for the tests.
namespace html {

inline constexpr int kCdfPoints = 201;   // quantiles 0, 0.5%, ..., 100%
inline constexpr std::size_t kMaxPoints = 1 << 16;

// Text for HTML and XML: & < > " ' escaped.
std::string escape(std::string_view text);

// A linear map from [d0, d1] to [r0, r1]; a degenerate domain maps everything to r0.
struct Scale {
  double d0 = 0, d1 = 1, r0 = 0, r1 = 1;
  double operator()(double v) const { return d1 == d0 ? r0 : r0 + (v - d0) * (r1 - r0) / (d1 - d0); }
};

// Round tick values covering [lo, hi]: a step of 1, 2 or 5 times a power of ten giving at
// most `max_ticks` ticks, from the first multiple at or above lo.
std::vector<double> ticks(double lo, double hi, int max_ticks);

// One pixel column of a reduced series: the smallest and largest value among the points
// whose time falls in it; `empty` when none does.
struct Column {
  double lo = 0, hi = 0;
  bool empty = true;
};
// Reduces (t[i], lo[i]..hi[i]) to `columns` columns spanning [t0, t1]; a point at t1 goes to
// the last column.
std::vector<Column> reduce(const std::vector<double>& t, const std::vector<double>& lo, const std::vector<double>& hi,
                           double t0, double t1, int columns);

// The nearest-rank quantiles q = i / (kCdfPoints - 1) of `values` (sorted here), in ns.
std::vector<std::int64_t> cdf_quantiles(std::vector<std::int64_t> values);

}  // namespace html
}  // namespace kvsim::cli

#endif  // KVSIM_SRC_CLI_HTML_REPORT_H_
