#include "html_report.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "kvsim/units.h"

namespace kvsim::cli {

namespace html {

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += ch;
    }
  }
  return out;
}

std::vector<double> ticks(double lo, double hi, int max_ticks) {
  std::vector<double> out;
  if (!(hi > lo) || max_ticks < 2) {
    out.push_back(lo);
    return out;
  }
  const double raw = (hi - lo) / (max_ticks - 1);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude * 10;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (magnitude * m >= raw * (1 - 1e-9)) {
      step = magnitude * m;
      break;
    }
  }
  const double first = std::ceil(lo / step - 1e-9) * step;
  for (int i = 0;; ++i) {
    const double v = first + i * step;
    if (v > hi + step * 1e-9) break;
    out.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
  }
  return out;
}

std::vector<Column> reduce(const std::vector<double>& t, const std::vector<double>& lo, const std::vector<double>& hi,
                           double t0, double t1, int columns) {
  std::vector<Column> out(static_cast<std::size_t>(std::max(columns, 1)));
  const double width = t1 > t0 ? (t1 - t0) / static_cast<double>(out.size()) : 1.0;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (t[i] < t0 || t[i] > t1) continue;
    auto c = static_cast<std::size_t>((t[i] - t0) / width);
    c = std::min(c, out.size() - 1);
    Column& col = out[c];
    if (col.empty) {
      col = Column{lo[i], hi[i], false};
    } else {
      col.lo = std::min(col.lo, lo[i]);
      col.hi = std::max(col.hi, hi[i]);
    }
  }
  return out;
}

std::vector<std::int64_t> cdf_quantiles(std::vector<std::int64_t> values) {
  std::vector<std::int64_t> out;
  if (values.empty()) return out;
  std::sort(values.begin(), values.end());
  const auto n = static_cast<std::int64_t>(values.size());
  for (int i = 0; i < kCdfPoints; ++i) {
    // Nearest rank: the smallest value with at least i/(kCdfPoints-1) of the values at or below.
    const std::int64_t rank = std::max<std::int64_t>(1, ceil_div(n * i, std::int64_t{kCdfPoints - 1}));
    out.push_back(values[static_cast<std::size_t>(rank - 1)]);
  }
  return out;
}

}  // namespace html

namespace {

using html::escape;
using html::Scale;

// A number for an SVG coordinate: one decimal is a tenth of a pixel.
std::string px(double v) { return fmt::format("{:.1f}", v); }

// Appends the point (x, y) to the SVG path `d`: a move to it if `d` is empty, else a line.
void path_point(std::string& d, double x, double y) {
  d += d.empty() ? "M" : " L";
  d += px(x);
  d += ',';
  d += px(y);
}

// A tick label: at most three decimals, trailing zeros dropped.
std::string label(double v) {
  std::string s = fmt::format("{:.3f}", v);
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

double gib(double bytes) { return bytes / static_cast<double>(kBytesPerGiB); }
std::string gib_text(double bytes) { return fmt::format("{:.2f} GiB", gib(bytes)); }

// The plot area of every chart, in SVG pixels.
constexpr int kWidth = 720, kHeight = 270;
constexpr int kLeft = 72, kRight = 16, kTop = 16, kBottom = 46;
constexpr int kPlotWidth = kWidth - kLeft - kRight;

// One chart: an SVG with axes, ticks, labels and a caption, around marks added by the caller.
class Chart {
 public:
  Chart(std::string name, std::string title, Scale x, Scale y, std::string x_label, std::string y_label, int height = kHeight)
      : name_(std::move(name)), title_(std::move(title)), x_(x), y_(y), x_label_(std::move(x_label)),
        y_label_(std::move(y_label)), height_(height) {}

  const Scale& x() const { return x_; }
  const Scale& y() const { return y_; }
  void add(const std::string& mark) { body_ += mark; }
  void legend(const std::string& cls, const std::string& text, bool dashed = false) {
    legend_ += fmt::format("<span class=\"key\"><svg width=\"22\" height=\"10\" aria-hidden=\"true\"><line x1=\"1\" y1=\"5\" "
                           "x2=\"21\" y2=\"5\" class=\"{}{}\"/></svg>{}</span>\n",
                           cls, dashed ? " dash" : "", escape(text));
  }
  void legend_box(const std::string& cls, const std::string& text) {
    legend_ += fmt::format("<span class=\"key\"><svg width=\"12\" height=\"10\" aria-hidden=\"true\"><rect x=\"1\" y=\"0\" "
                           "width=\"10\" height=\"10\" class=\"{}\"/></svg>{}</span>\n",
                           cls, escape(text));
  }
  // Numeric axes: ticks from the scales' domains.
  void numeric_axes() {
    for (double v : html::ticks(std::min(x_.d0, x_.d1), std::max(x_.d0, x_.d1), 8)) {
      const double x = x_(v);
      axes_ += fmt::format("<line class=\"grid\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>"
                           "<text class=\"tick\" x=\"{0}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
                           px(x), px(kTop), px(height_ - kBottom), px(height_ - kBottom + 16), label(v));
    }
    y_ticks();
  }
  void y_ticks() {
    for (double v : html::ticks(std::min(y_.d0, y_.d1), std::max(y_.d0, y_.d1), 6)) {
      const double y = y_(v);
      axes_ += fmt::format("<line class=\"grid\" x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\"/>"
                           "<text class=\"tick\" x=\"{3}\" y=\"{4}\" text-anchor=\"end\">{5}</text>\n",
                           px(kLeft), px(y), px(kWidth - kRight), px(kLeft - 6), px(y + 4), label(v));
    }
  }
  void x_ticks_only() {
    for (double v : html::ticks(std::min(x_.d0, x_.d1), std::max(x_.d0, x_.d1), 8)) {
      const double x = x_(v);
      axes_ += fmt::format("<line class=\"grid\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>"
                           "<text class=\"tick\" x=\"{0}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
                           px(x), px(kTop), px(height_ - kBottom), px(height_ - kBottom + 16), label(v));
    }
  }
  void raw_axis(const std::string& text) { axes_ += text; }

  std::string render() const {
    std::string out = "<figure>\n<figcaption>" + escape(title_) + "</figcaption>\n";
    if (!legend_.empty()) out += "<div class=\"legend\">\n" + legend_ + "</div>\n";
    out += fmt::format("<svg class=\"chart\" data-chart=\"{}\" viewBox=\"0 0 {} {}\" width=\"{}\" height=\"{}\" "
                       "xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" aria-label=\"{}\">\n",
                       escape(name_), kWidth, height_, kWidth, height_, escape(title_));
    out += axes_;
    out += fmt::format("<rect class=\"frame\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>\n", kLeft, kTop, kPlotWidth,
                       height_ - kTop - kBottom);
    out += body_;
    out += fmt::format("<text class=\"axis\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                       px(kLeft + kPlotWidth / 2.0), px(height_ - 8), escape(x_label_));
    out += fmt::format("<text class=\"axis\" transform=\"translate(16 {}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
                       px(kTop + (height_ - kTop - kBottom) / 2.0), escape(y_label_));
    return out + "</svg>\n</figure>\n";
  }

 private:
  std::string name_, title_;
  Scale x_, y_;
  std::string x_label_, y_label_;
  int height_;
  std::string axes_, body_, legend_;
};

// A path through each column's minimum and maximum, so the band a column covers is drawn and
// no peak falls between columns.
std::string band_path(const std::vector<html::Column>& columns, const Scale& y, const std::string& cls) {
  std::string d;
  for (std::size_t i = 0; i < columns.size(); ++i) {
    if (columns[i].empty) continue;
    const double x = kLeft + static_cast<double>(i) + 0.5;
    path_point(d, x, y(columns[i].lo));
    if (columns[i].hi != columns[i].lo) path_point(d, x, y(columns[i].hi));
  }
  if (d.empty()) return "";
  return "<path class=\"data " + cls + "\" d=\"" + d + "\"/>\n";
}

// The x range of every run's timeline, in seconds.
std::pair<double, double> time_range(const std::vector<HtmlRun>& runs) {
  double lo = 0, hi = 0;
  bool any = false;
  for (const auto& r : runs) {
    for (const auto& p : r.timeline) {
      const double t = static_cast<double>(p.time_ns) / 1e9;
      lo = any ? std::min(lo, t) : t;
      hi = any ? std::max(hi, t) : t;
      any = true;
    }
  }
  if (hi <= lo) hi = lo + 1;
  return {lo, hi};
}

std::vector<html::Column> reduce_series(const std::vector<HtmlPoint>& points, std::pair<double, double> range,
                                        std::int64_t HtmlPoint::*lo, std::int64_t HtmlPoint::*hi, double unit) {
  std::vector<double> t, l, h;
  t.reserve(points.size());
  l.reserve(points.size());
  h.reserve(points.size());
  for (const auto& p : points) {
    t.push_back(static_cast<double>(p.time_ns) / 1e9);
    l.push_back(static_cast<double>(p.*lo) / unit);
    h.push_back(static_cast<double>(std::max(p.*lo, p.*hi)) / unit);
  }
  return html::reduce(t, l, h, range.first, range.second, kPlotWidth);
}

Scale x_scale(double d0, double d1) { return Scale{d0, d1, static_cast<double>(kLeft), static_cast<double>(kLeft + kPlotWidth)}; }
Scale y_scale(double d0, double d1, int height = kHeight) {
  return Scale{d0, d1, static_cast<double>(height - kBottom), static_cast<double>(kTop)};
}

// The upper end of a value axis: the largest value and a little room, at a round tick.
double axis_top(double largest) {
  if (!(largest > 0)) return 1;
  const auto t = html::ticks(0, largest * 1.05, 6);
  return t.back() >= largest * 1.05 ? t.back() : t.back() + (t.size() > 1 ? t[1] - t[0] : largest);
}

std::string occupancy_charts(const std::vector<HtmlRun>& runs) {
  const auto range = time_range(runs);
  std::string out;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const HtmlRun& r = runs[i];
    if (r.timeline.empty()) continue;
    // Each allocator on its own memory axis (they can differ a hundredfold: the breakdown
    // chart compares them on one axis), the same time axis for all.
    double top = gib(static_cast<double>(r.allocated_peak));
    for (const auto& p : r.timeline) {
      top = std::max({top, gib(static_cast<double>(p.reserved)), gib(static_cast<double>(p.allocated_max)),
                      gib(static_cast<double>(p.cached))});
    }
    top = axis_top(top);
    Chart c(fmt::format("occupancy-{}", i), "Occupancy over time: " + r.allocator, x_scale(range.first, range.second),
            y_scale(0, top), "time, s (trace time)", "memory, GiB (2^30 bytes)");
    c.numeric_axes();
    const double unit = static_cast<double>(kBytesPerGiB);
    c.add(band_path(reduce_series(r.timeline, range, &HtmlPoint::reserved, &HtmlPoint::reserved, unit), c.y(), "s3"));
    c.add(band_path(reduce_series(r.timeline, range, &HtmlPoint::allocated, &HtmlPoint::allocated_max, unit), c.y(), "s1"));
    c.add(band_path(reduce_series(r.timeline, range, &HtmlPoint::effective, &HtmlPoint::effective, unit), c.y(), "s0"));
    c.legend("s0", "effective tokens");
    c.legend("s1", "allocated slots");
    c.legend("s3", "reserved slots");
    const bool cached = std::any_of(r.timeline.begin(), r.timeline.end(), [](const HtmlPoint& p) { return p.cached >= 0; });
    if (r.prefix_caching && cached) {
      c.add(band_path(reduce_series(r.timeline, range, &HtmlPoint::cached, &HtmlPoint::cached, unit), c.y(), "s4 dash"));
      c.legend("s4", "cached (evictable)", true);
    }
    if (r.allocated_peak > 0 && r.allocated_peak_at_ns >= 0) {
      const double px_x = c.x()(static_cast<double>(r.allocated_peak_at_ns) / 1e9);
      const double px_y = c.y()(gib(static_cast<double>(r.allocated_peak)));
      const bool right_half = px_x > kLeft + kPlotWidth / 2.0;
      c.add(fmt::format("<circle class=\"peak\" cx=\"{}\" cy=\"{}\" r=\"4\"/>\n<text class=\"peak-label\" x=\"{}\" y=\"{}\" "
                        "text-anchor=\"{}\">peak {} at {:.3f} s</text>\n",
                        px(px_x), px(px_y), px(px_x + (right_half ? -8 : 8)), px(std::max<double>(kTop + 12, px_y - 6)),
                        right_half ? "end" : "start", gib_text(static_cast<double>(r.allocated_peak)),
                        static_cast<double>(r.allocated_peak_at_ns) / 1e9));
    }
    out += c.render();
  }
  return out;
}

std::string requests_chart(const std::vector<HtmlRun>& runs) {
  const auto range = time_range(runs);
  double top = 0;
  bool any = false;
  for (const auto& r : runs) {
    for (const auto& p : r.timeline) top = std::max({top, static_cast<double>(p.running), static_cast<double>(p.queued)});
    any = any || !r.timeline.empty();
  }
  if (!any) return "";
  Chart c("requests", "Running and queued requests over time", x_scale(range.first, range.second), y_scale(0, axis_top(top)),
          "time, s (trace time)", "requests");
  c.numeric_axes();
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const HtmlRun& r = runs[i];
    if (r.timeline.empty()) continue;
    const std::string cls = fmt::format("r{}", i % 8);
    c.add(band_path(reduce_series(r.timeline, range, &HtmlPoint::running, &HtmlPoint::running, 1), c.y(), cls));
    c.add(band_path(reduce_series(r.timeline, range, &HtmlPoint::queued, &HtmlPoint::queued, 1), c.y(), cls + " dash"));
    c.legend(cls, r.allocator + ": running");
    c.legend(cls, r.allocator + ": queued", true);
  }
  return c.render();
}

// The vLLM paper's Figure 2 per allocator: the time-weighted mean of each part, stacked.
std::string breakdown_chart(const std::vector<HtmlRun>& runs) {
  struct Part {
    const char* name;
    double (*get)(const HtmlRun&);
  };
  static const Part kParts[] = {
      {"effective tokens", [](const HtmlRun& r) { return r.effective_mean; }},
      {"partial-block tail", [](const HtmlRun& r) { return r.internal_mean.tail; }},
      {"reservation ahead", [](const HtmlRun& r) { return r.internal_mean.reservation; }},
      {"padding past the request's limit", [](const HtmlRun& r) { return r.internal_mean.padding; }},
      {"duplicate prompt copies", [](const HtmlRun& r) { return r.internal_mean.duplicate; }},
      {"outside the window", [](const HtmlRun& r) { return r.internal_mean.outside_window; }},
      {"external fragmentation", [](const HtmlRun& r) { return r.external_fragmentation_mean; }},
  };
  if (runs.empty()) return "";
  double top = 0;
  for (const auto& r : runs) {
    double sum = 0;
    for (const auto& p : kParts) sum += p.get(r);
    top = std::max({top, gib(sum), gib(static_cast<double>(r.capacity_bytes))});
  }
  const int bar = 26, gap = 30;
  const int height = kTop + kBottom + static_cast<int>(runs.size()) * (bar + gap);
  Scale x = x_scale(0, axis_top(top));
  Chart c("breakdown", "Where the memory goes: time-weighted means, stacked (the vLLM paper's Figure 2)", x,
          Scale{0, 1, 0, 1}, "memory, GiB (2^30 bytes), mean over time", "", height);
  c.x_ticks_only();
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const HtmlRun& r = runs[i];
    const double y = kTop + gap / 2.0 + static_cast<double>(i) * (bar + gap);
    c.add(fmt::format("<text class=\"bar-label\" x=\"{}\" y=\"{}\">{}</text>\n", kLeft + 4, px(y + 10), escape(r.allocator)));
    double at = 0;
    double total = 0;
    for (const auto& p : kParts) total += p.get(r);
    for (std::size_t k = 0; k < std::size(kParts); ++k) {
      const double v = kParts[k].get(r);
      if (!(v > 0)) continue;
      const double x0 = x(gib(at)), x1 = x(gib(at + v));
      c.add(fmt::format("<rect class=\"data p{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"><title>{}: {}: {} ({:.1f}% "
                        "of the allocated and fragmented)</title></rect>\n",
                        k, px(x0), px(y + 14), px(std::max(x1 - x0, 0.1)), bar - 14 + 8, escape(r.allocator), kParts[k].name,
                        gib_text(v), total > 0 ? v / total * 100 : 0));
      at += v;
    }
    if (r.capacity_bytes > 0) {
      const double cx = x(gib(static_cast<double>(r.capacity_bytes)));
      c.add(fmt::format("<line class=\"capacity\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>"
                        "<text class=\"tick\" x=\"{3}\" y=\"{4}\" text-anchor=\"end\">capacity {5}</text>\n",
                        px(cx), px(y + 8), px(y + bar + 14), px(cx - 4), px(y + 10),
                        gib_text(static_cast<double>(r.capacity_bytes))));
    }
  }
  for (std::size_t k = 0; k < std::size(kParts); ++k) c.legend_box(fmt::format("p{}", k), kParts[k].name);
  return c.render();
}

std::string cdf_chart(const std::vector<HtmlRun>& runs, const char* name, const char* title, const char* unit_label,
                      double ns_per_unit, std::vector<std::int64_t> HtmlRun::*field) {
  std::vector<std::vector<std::int64_t>> quantiles;
  double top = 0;
  bool any = false;
  for (const auto& r : runs) {
    quantiles.push_back(html::cdf_quantiles(r.*field));
    if (!quantiles.back().empty()) {
      top = std::max(top, static_cast<double>(quantiles.back().back()) / ns_per_unit);
      any = true;
    }
  }
  if (!any) return "";
  Chart c(name, title, x_scale(0, axis_top(top)), y_scale(0, 1), unit_label, "share of completed requests");
  c.numeric_axes();
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const auto& q = quantiles[i];
    if (q.empty()) continue;
    std::string d;
    for (std::size_t k = 0; k < q.size(); ++k) {
      const double p = static_cast<double>(k) / (html::kCdfPoints - 1);
      const double x = c.x()(static_cast<double>(q[k]) / ns_per_unit);
      // A step: the value reached, then the share that reached it.
      path_point(d, x, c.y()(k == 0 ? 0.0 : static_cast<double>(k - 1) / (html::kCdfPoints - 1)));
      path_point(d, x, c.y()(p));
    }
    const std::string cls = fmt::format("r{}", i % 8);
    c.add("<path class=\"data " + cls + "\" d=\"" + d + "\"/>\n");
    const auto n = static_cast<std::int64_t>((runs[i].*field).size());
    c.legend(cls, fmt::format("{} ({} request{})", runs[i].allocator, with_commas(n), n == 1 ? "" : "s"));
  }
  return c.render();
}

// validate: simulated over measured, one bar per figure, with 1 (a perfect match) marked.
std::string comparison_chart(const HtmlPage& page) {
  if (page.comparisons.empty()) return "";
  double top = 1;
  for (const auto& cmp : page.comparisons) {
    if (cmp.measured > 0) top = std::max(top, cmp.simulated / cmp.measured);
  }
  const int bar = 18, gap = 12;
  const int height = kTop + kBottom + static_cast<int>(page.comparisons.size()) * (bar + gap);
  Scale x = x_scale(0, axis_top(top));
  Chart c("validate", page.comparison_title.empty() ? "Simulated against measured" : page.comparison_title, x,
          Scale{0, 1, 0, 1}, "simulated / measured (1 = a perfect match)", "", height);
  c.x_ticks_only();
  for (std::size_t i = 0; i < page.comparisons.size(); ++i) {
    const HtmlComparison& cmp = page.comparisons[i];
    const double y = kTop + gap / 2.0 + static_cast<double>(i) * (bar + gap);
    const double ratio = cmp.measured > 0 ? cmp.simulated / cmp.measured : 0;
    c.add(fmt::format("<rect class=\"data p0\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"><title>{}: measured {}, "
                      "simulated {}</title></rect>\n<text class=\"bar-label\" x=\"{}\" y=\"{}\">{}: measured {}, simulated {}</text>\n",
                      kLeft, px(y), px(std::max(x(ratio) - kLeft, 0.5)), bar, escape(cmp.figure), label(cmp.measured),
                      label(cmp.simulated), kLeft + 4, px(y + bar - 5), escape(cmp.figure), label(cmp.measured),
                      label(cmp.simulated)));
  }
  const double one = x(1.0);
  c.add(fmt::format("<line class=\"capacity\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>\n", px(one), kTop,
                    height - kBottom));
  return c.render();
}

std::string sweep_chart(const HtmlSweepChart& s) {
  double x0 = 0, x1 = 0, top = 0;
  bool any = false;
  for (const auto& series : s.series) {
    for (const auto& [x, y] : series.points) {
      x0 = any ? std::min(x0, x) : x;
      x1 = any ? std::max(x1, x) : x;
      top = std::max(top, y);
      any = true;
    }
  }
  if (!any) return "";
  if (x1 <= x0) x1 = x0 + 1;
  Chart c(s.name, s.title, x_scale(x0, x1), y_scale(0, axis_top(top)), s.x_label, s.y_label);
  c.numeric_axes();
  for (std::size_t i = 0; i < s.series.size(); ++i) {
    const std::string cls = fmt::format("r{}", i % 8);
    std::string d, dots;
    for (const auto& [x, y] : s.series[i].points) {
      path_point(d, c.x()(x), c.y()(y));
      dots += fmt::format("<circle class=\"dot {}\" cx=\"{}\" cy=\"{}\" r=\"2.5\"/>", cls, px(c.x()(x)), px(c.y()(y)));
    }
    c.add("<path class=\"data " + cls + "\" d=\"" + d + "\"/>\n" + dots + "\n");
    c.legend(cls, s.series[i].label);
  }
  return c.render();
}

constexpr const char* kStyle = R"(:root{--bg:#ffffff;--fg:#1b1f24;--muted:#57606a;--grid:#d8dee4;
--c0:#1a7f37;--c1:#0550ae;--c3:#8250df;--c4:#bc4c00;--peak:#cf222e;
--r0:#0550ae;--r1:#cf222e;--r2:#1a7f37;--r3:#8250df;--r4:#bc4c00;--r5:#0a7480;--r6:#9a6700;--r7:#57606a;
--p0:#2da44e;--p1:#fb8f44;--p2:#bf8700;--p3:#e16f24;--p4:#a475f9;--p5:#6e7781;--p6:#cf222e}
@media (prefers-color-scheme: dark){:root{--bg:#0d1117;--fg:#e6edf3;--muted:#8d96a0;--grid:#30363d;
--c0:#3fb950;--c1:#58a6ff;--c3:#bc8cff;--c4:#ffa657;--peak:#ff7b72;
--r0:#58a6ff;--r1:#ff7b72;--r2:#3fb950;--r3:#bc8cff;--r4:#ffa657;--r5:#39c5cf;--r6:#d29922;--r7:#8d96a0;
--p0:#3fb950;--p1:#ffa657;--p2:#d29922;--p3:#f0883e;--p4:#bc8cff;--p5:#8d96a0;--p6:#ff7b72}}
body{background:var(--bg);color:var(--fg);font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:760px;padding:0 12px}
h1{font-size:1.35em}h2{font-size:1.1em;margin-top:1.6em}.context{color:var(--muted);font-size:.9em}
figure{margin:1em 0}figcaption{font-weight:600;margin-bottom:.2em}
.legend{font-size:.85em;color:var(--muted)}.key{margin-right:1em;white-space:nowrap}.key svg{vertical-align:middle;margin-right:.3em}
svg.chart{max-width:100%;height:auto}svg text{fill:var(--fg);font-size:12px}svg .tick{fill:var(--muted);font-size:11px}
.grid{stroke:var(--grid);stroke-width:1}.frame{fill:none;stroke:var(--muted);stroke-width:1}
path.data,line{fill:none;stroke-width:1.6}.dash{stroke-dasharray:5 3}
.s0{stroke:var(--c0)}.s1{stroke:var(--c1)}.s3{stroke:var(--c3)}.s4{stroke:var(--c4)}
.r0{stroke:var(--r0)}.r1{stroke:var(--r1)}.r2{stroke:var(--r2)}.r3{stroke:var(--r3)}.r4{stroke:var(--r4)}.r5{stroke:var(--r5)}.r6{stroke:var(--r6)}.r7{stroke:var(--r7)}
.p0{fill:var(--p0)}.p1{fill:var(--p1)}.p2{fill:var(--p2)}.p3{fill:var(--p3)}.p4{fill:var(--p4)}.p5{fill:var(--p5)}.p6{fill:var(--p6)}
.dot{fill:var(--bg);stroke-width:1.5}.peak{fill:var(--peak)}.peak-label{fill:var(--peak);font-weight:600}.capacity{stroke:var(--fg);stroke-dasharray:3 3}
#kvsim-selfcheck{color:var(--muted);font-size:.8em})";

// Checks, in the browser, that every chart the page announces is there and draws something,
// and writes the verdict where tests/html_chromium_test.sh reads it.
constexpr const char* kScript = R"(//<![CDATA[
(function () {
  var out = document.getElementById('kvsim-selfcheck');
  var problems = [];
  window.addEventListener('error', function (e) { problems.push('script error: ' + e.message); });
  var charts = document.querySelectorAll('svg.chart');
  var expected = Number(document.body.getAttribute('data-charts'));
  if (charts.length !== expected) problems.push(charts.length + ' charts, expected ' + expected);
  for (var i = 0; i !== charts.length; i++) {
    var name = charts[i].getAttribute('data-chart');
    var marks = charts[i].querySelectorAll('.data');
    var drawn = 0;
    for (var j = 0; j !== marks.length; j++) {
      var box = marks[j].getBBox();
      if (box.width > 0 || box.height > 0) drawn++;
    }
    if (drawn === 0) problems.push(name + ': draws nothing');
  }
  out.textContent = problems.length === 0 ? 'selfcheck ok: ' + charts.length + ' charts'
                                          : 'selfcheck failed: ' + problems.join('; ');
  // Milliseconds from the start of navigation to here, the charts laid out (getBBox forces
  // layout): how bench/README.md measures the page's load time.
  out.setAttribute('data-ms', String(Math.round(performance.now())));
})();
//]]>)";

}  // namespace

HtmlRun html_run(const ReplayReport& r) {
  HtmlRun run;
  run.allocator = r.allocator;
  run.capacity_bytes = r.capacity_bytes;
  run.effective_mean = r.effective_bytes.mean;
  run.allocated_mean = r.allocated_bytes.mean;
  run.internal_mean = r.mean_bytes;
  run.external_fragmentation_mean = r.external_fragmentation_bytes_mean;
  run.allocated_peak = r.allocated_bytes.peak;
  run.allocated_peak_at_ns = r.allocated_bytes.peak_at_ns;
  run.reserved_peak = r.reserved_bytes.peak;
  run.completed = r.completed;
  run.prefix_caching = r.prefix_block_tokens > 0;
  return run;
}

HtmlPoint html_point(const TimelineRow& row) {
  HtmlPoint p;
  p.time_ns = row.time_ns;
  p.running = row.running;
  p.queued = row.queued;
  p.effective = row.effective_bytes;
  p.allocated = row.allocated_bytes;
  p.allocated_max = std::max(row.allocated_bytes, row.allocated_bytes_max);
  p.reserved = row.reserved_bytes;
  p.cached = row.cached_bytes;
  return p;
}

void add_point(HtmlRun& run, const HtmlPoint& point) {
  run.timeline.push_back(point);
  if (run.timeline.size() <= html::kMaxPoints) return;
  std::vector<HtmlPoint>& t = run.timeline;
  std::size_t out = 0;
  for (std::size_t i = 0; i < t.size(); i += 2) {
    HtmlPoint p = t[std::min(i + 1, t.size() - 1)];
    p.allocated_max = std::max(p.allocated_max, t[i].allocated_max);
    t[out++] = p;
  }
  t.resize(out);
}

void add_latencies(HtmlRun& run, const RequestRecord& r) {
  if (r.outcome != RequestRecord::Outcome::completed) return;
  // A request of 0 output tokens completes with its prefill and has no first token: an end
  // to end latency, as the JSON counts it, and no TTFT.
  run.e2e_ns.push_back(r.finish_ns - r.arrival_ns);
  if (r.first_token_ns < 0) return;
  run.ttft_ns.push_back(r.first_token_ns - r.arrival_ns);
  // vLLM's TPOT, as --per-request gives it: the gaps between the first and the last token.
  if (r.output_tokens >= 2) run.tpot_ns.push_back((r.finish_ns - r.first_token_ns) / (r.output_tokens - 1));
}

std::vector<std::string> plain_answers(const std::vector<HtmlRun>& all) {
  std::vector<std::string> out;
  // Only the runs that served a request compare: one that refused them all holds nothing
  // because it did nothing.
  std::vector<HtmlRun> runs;
  std::string idle;
  for (const HtmlRun& r : all) {
    if (r.completed > 0) runs.push_back(r);
    else idle += (idle.empty() ? "" : ", ") + r.allocator;
  }
  if (!idle.empty()) out.push_back(fmt::format("{} completed no request, and is left out of the comparison.", idle));
  if (runs.empty()) return out;
  const auto least = std::min_element(runs.begin(), runs.end(), [](const HtmlRun& a, const HtmlRun& b) {
    return a.allocated_peak < b.allocated_peak;
  });
  std::string s = runs.size() > 1 ? fmt::format("{} holds the least at peak: {} allocated", least->allocator,
                                                gib_text(static_cast<double>(least->allocated_peak)))
                                  : fmt::format("{} holds {} allocated at peak", least->allocator,
                                                gib_text(static_cast<double>(least->allocated_peak)));
  if (runs.size() > 1 && least->allocated_peak > 0) {
    std::string others;
    for (const auto& r : runs) {
      if (&r == &*least) continue;
      others += fmt::format("{}{} {} ({:.2f}x)", others.empty() ? "" : "; ", r.allocator,
                            gib_text(static_cast<double>(r.allocated_peak)),
                            static_cast<double>(r.allocated_peak) / static_cast<double>(least->allocated_peak));
    }
    s += ", against " + others;
  }
  out.push_back(s + ".");
  // Runs that completed different numbers of requests (one refused some under the budget, or
  // a cancellation fell on another side of a step) did not serve the same load: said beside
  // the comparison, with the counts, rather than dropping any run from it.
  const auto [fewest, most] = std::minmax_element(runs.begin(), runs.end(), [](const HtmlRun& a, const HtmlRun& b) {
    return a.completed < b.completed;
  });
  if (fewest->completed != most->completed) {
    std::string counts;
    for (const auto& r : runs) counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", r.allocator, with_commas(r.completed));
    out.push_back(fmt::format("The runs completed different numbers of requests ({}): one that served fewer may hold "
                              "less for that reason alone.",
                              counts));
  }
  if (least->allocated_mean > 0) {
    const Fragmentation& f = least->internal_mean;
    std::string rest;
    const std::pair<const char*, double> parts[] = {{"partial-block tail", f.tail},
                                                    {"reservation ahead", f.reservation},
                                                    {"padding", f.padding},
                                                    {"duplicate prompt copies", f.duplicate},
                                                    {"outside the window", f.outside_window}};
    for (const auto& [name, v] : parts) {
      if (v > 0) rest += fmt::format("{}{} {:.1f}%", rest.empty() ? "" : ", ", name, v / least->allocated_mean * 100);
    }
    out.push_back(fmt::format("On average {:.1f}% of what {} allocates holds effective tokens{}.",
                              least->effective_mean / least->allocated_mean * 100, least->allocator,
                              rest.empty() ? std::string() : "; the rest is internal fragmentation: " + rest));
  }
  return out;
}

std::string render_html(const HtmlPage& page) {
  std::string charts;
  std::string over_time = occupancy_charts(page.runs) + requests_chart(page.runs);
  std::string breakdown = breakdown_chart(page.runs);
  std::string latency = cdf_chart(page.runs, "ttft", "Time to first token (TTFT), CDF", "TTFT, s", 1e9, &HtmlRun::ttft_ns) +
                        cdf_chart(page.runs, "tpot", "Time per output token (TPOT), CDF", "TPOT, ms", 1e6, &HtmlRun::tpot_ns) +
                        cdf_chart(page.runs, "e2e", "End-to-end latency, CDF", "end to end, s", 1e9, &HtmlRun::e2e_ns);
  std::string validate = comparison_chart(page);
  std::string sweep;
  for (const auto& s : page.sweep) sweep += sweep_chart(s);
  if (!breakdown.empty()) charts += "<h2>Where the memory goes</h2>\n" + breakdown;
  if (!over_time.empty()) charts += "<h2>Over time</h2>\n" + over_time;
  if (!latency.empty()) charts += "<h2>Latency</h2>\n" + latency;
  if (!validate.empty()) charts += "<h2>Measured against simulated</h2>\n" + validate;
  if (!sweep.empty()) charts += "<h2>Against the varied parameter</h2>\n" + sweep;
  std::size_t count = 0;
  for (std::size_t at = 0; (at = charts.find("<svg class=\"chart\"", at)) != std::string::npos; ++at) ++count;

  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n"
                    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n"
                    "<meta name=\"color-scheme\" content=\"light dark\"/>\n";
  out += "<title>" + escape(page.title) + "</title>\n<style>\n" + kStyle + "\n</style>\n</head>\n";
  out += fmt::format("<body data-charts=\"{}\">\n<h1>{}</h1>\n", count, escape(page.title));
  if (!page.context.empty()) {
    out += "<div class=\"context\">\n";
    for (const auto& line : page.context) out += escape(line) + "<br/>\n";
    out += "</div>\n";
  }
  if (!page.answers.empty()) {
    out += "<ul class=\"answers\">\n";
    for (const auto& a : page.answers) out += "<li>" + escape(a) + "</li>\n";
    out += "</ul>\n";
  }
  out += charts;
  out += "<p id=\"kvsim-selfcheck\">selfcheck not run</p>\n<script>\n";
  out += kScript;
  out += "\n</script>\n</body>\n</html>\n";
  return out;
}

}  // namespace kvsim::cli
