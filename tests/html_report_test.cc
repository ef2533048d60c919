// The HTML report's writer (src/cli/html_report.cc): well-formed XML, escaping, axis scaling
// on hand cases, downsampling that keeps the maximum, fixed quantiles, byte-determinism; and
// `kvsim replay --html` / `kvsim report --html` end to end.
#include <catch2/catch.hpp>
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/html_report.h"
#include "cli_util.h"
#include "kvsim/units.h"

using namespace kvsim;
using namespace kvsim::cli;

namespace {

// A small XML well-formedness checker, enough for what the writer emits: elements nest and
// close, attribute values are quoted, '&' starts one of the five XML entities or a numeric
// reference, '<' never appears in text or attribute values; <!DOCTYPE>, comments and CDATA
// are skipped. Returns "" when well-formed, else what is wrong and where.
std::string xml_problem(const std::string& s) {
  std::vector<std::string> open;
  std::size_t i = 0;
  const auto entity_ok = [&](std::size_t at) {
    const std::size_t end = s.find(';', at);
    if (end == std::string::npos || end - at > 8) return false;
    const std::string name = s.substr(at + 1, end - at - 1);
    if (name == "amp" || name == "lt" || name == "gt" || name == "quot" || name == "apos") return true;
    if (name.size() >= 2 && name[0] == '#') {
      for (std::size_t k = 1; k < name.size(); ++k) {
        if (!std::isdigit(static_cast<unsigned char>(name[k]))) return false;
      }
      return true;
    }
    return false;
  };
  while (i < s.size()) {
    if (s[i] == '&') {
      if (!entity_ok(i)) return "bad entity at " + std::to_string(i);
      ++i;
      continue;
    }
    if (s[i] != '<') {
      ++i;
      continue;
    }
    if (s.compare(i, 9, "<![CDATA[") == 0) {
      const std::size_t end = s.find("]]>", i);
      if (end == std::string::npos) return "unclosed CDATA";
      i = end + 3;
      continue;
    }
    if (s.compare(i, 4, "<!--") == 0) {
      const std::size_t end = s.find("-->", i);
      if (end == std::string::npos) return "unclosed comment";
      i = end + 3;
      continue;
    }
    if (s.compare(i, 2, "<!") == 0) {
      i = s.find('>', i) + 1;
      continue;
    }
    const bool closing = s.compare(i, 2, "</") == 0;
    std::size_t k = i + (closing ? 2 : 1);
    std::string name;
    while (k < s.size() && (std::isalnum(static_cast<unsigned char>(s[k])) || s[k] == '-' || s[k] == ':')) name += s[k++];
    if (name.empty()) return "a tag without a name at " + std::to_string(i);
    if (closing) {
      if (open.empty() || open.back() != name) return "</" + name + "> closes " + (open.empty() ? "nothing" : "<" + open.back() + ">");
      open.pop_back();
      k = s.find('>', k);
      if (k == std::string::npos) return "unterminated closing tag";
      i = k + 1;
      continue;
    }
    // Attributes: name="value", separated by spaces, then > or />.
    for (;;) {
      while (k < s.size() && std::isspace(static_cast<unsigned char>(s[k]))) ++k;
      if (k >= s.size()) return "unterminated tag <" + name + ">";
      if (s[k] == '>') {
        open.push_back(name);
        break;
      }
      if (s.compare(k, 2, "/>") == 0) {
        ++k;
        break;
      }
      std::string attr;
      while (k < s.size() && (std::isalnum(static_cast<unsigned char>(s[k])) || s[k] == '-' || s[k] == ':')) attr += s[k++];
      if (attr.empty() || k >= s.size() || s[k] != '=' || s[k + 1] != '"') {
        return "attribute without a quoted value in <" + name + "> at " + std::to_string(k);
      }
      const std::size_t end = s.find('"', k + 2);
      if (end == std::string::npos) return "unterminated attribute value";
      for (std::size_t c = k + 2; c < end; ++c) {
        if (s[c] == '<') return "'<' in an attribute value at " + std::to_string(c);
        if (s[c] == '&' && !entity_ok(c)) return "bad entity in an attribute at " + std::to_string(c);
      }
      k = end + 1;
    }
    i = k + 1;
    // A script's or style's text is raw in HTML: it must hold no markup but CDATA.
    if (!open.empty() && (open.back() == "script" || open.back() == "style")) {
      const std::size_t end = s.find("</" + open.back(), i);
      const std::string body = s.substr(i, end - i);
      const std::size_t cdata = body.find("<![CDATA[");
      const std::string outside = cdata == std::string::npos ? body : body.substr(0, cdata) + body.substr(body.find("]]>") + 3);
      if (outside.find('<') != std::string::npos || outside.find('&') != std::string::npos) {
        return "markup in <" + open.back() + "> outside CDATA";
      }
      i = end;
    }
  }
  if (!open.empty()) return "<" + open.back() + "> never closed";
  return "";
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = 0; (at = text.find(what, at)) != std::string::npos; at += what.size()) ++n;
  return n;
}

constexpr std::int64_t kGiB = kBytesPerGiB;
constexpr std::int64_t kS = 1'000'000'000;

// Two points 10 s apart: allocated 0 then 1 GiB, reserved 2 GiB throughout (hand case below).
HtmlRun hand_run(std::string name) {
  HtmlRun r;
  r.allocator = std::move(name);
  r.effective_mean = 0.25 * kGiB;
  r.allocated_mean = 0.5 * kGiB;
  r.internal_mean.tail = 0.25 * kGiB;
  r.allocated_peak = kGiB;
  r.completed = 2;
  r.allocated_peak_at_ns = 10 * kS;
  r.reserved_peak = 2 * kGiB;
  HtmlPoint a;
  a.time_ns = 0;
  a.reserved = 2 * kGiB;
  HtmlPoint b = a;
  b.time_ns = 10 * kS;
  b.allocated = b.allocated_max = kGiB;
  b.effective = kGiB / 2;
  b.running = 3;
  r.timeline = {a, b};
  r.ttft_ns = {1, 2, 3};
  r.tpot_ns = {4, 5};
  r.e2e_ns = {7, 8, 9};
  return r;
}

}  // namespace

TEST_CASE("html: text is escaped for HTML and XML") {
  CHECK(html::escape("paged:block=16") == "paged:block=16");
  CHECK(html::escape("a<b>&\"c'") == "a&lt;b&gt;&amp;&quot;c&#39;");
}

TEST_CASE("html: a linear scale maps a known domain onto known pixels") {
  // The charts' plot area: x from 72 to 704 px, y from 224 (bottom) to 16 (top).
  const html::Scale x{0, 10, 72, 704};
  CHECK(x(0) == 72);
  CHECK(x(5) == 388);  // 72 + 5/10 * 632
  CHECK(x(10) == 704);
  const html::Scale y{0, 2.5, 224, 16};
  CHECK(y(1) == Approx(140.8));  // 224 - 1/2.5 * 208
  const html::Scale flat{3, 3, 10, 20};
  CHECK(flat(3) == 10);  // a degenerate domain maps to the start, never divides by zero
}

TEST_CASE("html: ticks step by 1, 2 or 5 times a power of ten") {
  CHECK(html::ticks(0, 10, 6) == std::vector<double>{0, 2, 4, 6, 8, 10});  // raw step 2
  // raw step (1.7 - 0.3) / 7 = 0.2: from the first multiple of 0.2 at or above 0.3.
  const auto t = html::ticks(0.3, 1.7, 8);
  REQUIRE(t.size() == 7);
  CHECK(t.front() == Approx(0.4));
  CHECK(t.back() == Approx(1.6));
  CHECK(html::ticks(0, 2.1, 6) == std::vector<double>{0, 0.5, 1, 1.5, 2});  // raw 0.42 -> 0.5
}

TEST_CASE("html: reduction to pixel columns keeps each column's minimum and maximum") {
  // Times 0..3 over [0, 4] in two columns: {0, 1} and {2, 3}.
  const auto c = html::reduce({0, 1, 2, 3}, {5, 9, 1, 3}, {5, 9, 1, 3}, 0, 4, 2);
  REQUIRE(c.size() == 2);
  CHECK((!c[0].empty && c[0].lo == 5 && c[0].hi == 9));
  CHECK((!c[1].empty && c[1].lo == 1 && c[1].hi == 3));
  // A million points with one spike of 1000 among values of at most 10: the spike survives
  // the reduction to 640 columns, as the column's maximum.
  std::vector<double> t, v;
  for (int i = 0; i < 1'000'000; ++i) {
    t.push_back(i);
    v.push_back(i == 777'777 ? 1000.0 : static_cast<double>(i % 11));
  }
  const auto r = html::reduce(t, v, v, 0, 999'999, 640);
  double top = 0;
  for (const auto& col : r) top = std::max(top, col.hi);
  CHECK(top == 1000);
  // 777,777 / (999,999 / 640) = 497.78: column 497.
  CHECK(r[497].hi == 1000);
  CHECK(r[496].hi == 10);
  // A point at the end of the range goes to the last column; a point outside is left out.
  const auto e = html::reduce({4, 5}, {1, 2}, {1, 2}, 0, 4, 2);
  CHECK((!e[1].empty && e[1].hi == 1));
}

TEST_CASE("html: timeline points beyond the limit merge in pairs, keeping the later state and the larger maximum") {
  HtmlRun run;
  // kMaxPoints + 1 points: point i at i ns, allocated i, its maximum i except a spike of
  // 10^9 at point 6 (an even point, the first of its pair: merged into point 7).
  for (std::size_t i = 0; i <= html::kMaxPoints; ++i) {
    HtmlPoint p;
    p.time_ns = static_cast<std::int64_t>(i);
    p.allocated = static_cast<std::int64_t>(i);
    p.allocated_max = i == 6 ? 1'000'000'000 : p.allocated;
    add_point(run, p);
  }
  // 65,537 points -> 32,768 pairs and the odd last point: 32,769.
  REQUIRE(run.timeline.size() == html::kMaxPoints / 2 + 1);
  CHECK(run.timeline[0].time_ns == 1);
  CHECK(run.timeline[3].time_ns == 7);
  CHECK(run.timeline[3].allocated == 7);
  CHECK(run.timeline[3].allocated_max == 1'000'000'000);
  CHECK(run.timeline[4].allocated_max == 9);
  CHECK(run.timeline.back().time_ns == static_cast<std::int64_t>(html::kMaxPoints));
}

TEST_CASE("html: CDFs are nearest-rank quantiles at fixed points") {
  const auto q = html::cdf_quantiles({10, 9, 8, 7, 6, 5, 4, 3, 2, 1});
  REQUIRE(q.size() == html::kCdfPoints);
  CHECK(q[0] == 1);     // rank max(1, 0)
  CHECK(q[1] == 1);     // 0.5%: rank ceil(10 * 1 / 200) = 1
  CHECK(q[21] == 2);    // 10.5%: rank ceil(210 / 200) = 2
  CHECK(q[100] == 5);   // 50%: rank 5
  CHECK(q[200] == 10);  // 100%: the maximum
  CHECK(html::cdf_quantiles({}).empty());
}

TEST_CASE("html: the plain answers say when the runs compared served different numbers of requests") {
  // Three runs: a and b completed 2 requests each, c refused one and completed 1, holding the
  // least at peak (0.5 GiB): c against a (1 GiB, 2.00x) and b (1.5 GiB, 3.00x), and the counts
  // beside it, since c may hold less only because it served less.
  std::vector<HtmlRun> runs = {hand_run("a"), hand_run("b"), hand_run("c")};
  runs[1].allocated_peak = 3 * kGiB / 2;
  runs[2].allocated_peak = kGiB / 2;
  runs[2].completed = 1;
  const std::vector<std::string> answers = plain_answers(runs);
  REQUIRE(answers.size() == 3);
  CHECK(answers[0] == "c holds the least at peak: 0.50 GiB allocated, against a 1.00 GiB (2.00x); b 1.50 GiB (3.00x).");
  CHECK(answers[1] == "The runs completed different numbers of requests (a 2, b 2, c 1): one that served fewer may "
                      "hold less for that reason alone.");
  // The same counts: no such sentence.
  runs[2].completed = 2;
  CHECK(plain_answers(runs).size() == 2);
  // One run to compare: what it holds, not "the least".
  const std::vector<std::string> alone = plain_answers({hand_run("a")});
  REQUIRE(!alone.empty());
  CHECK(alone[0] == "a holds 1.00 GiB allocated at peak.");
}

TEST_CASE("html: the page is well-formed XML, escapes names, marks the peak at known coordinates, and is deterministic") {
  HtmlPage page;
  page.title = "kvsim replay <test> & co";
  page.context = {"model    llama \"3\""};
  page.runs = {hand_run("dynamic:growth=chunk,chunk=64"), hand_run("evil<&\"'>")};
  page.runs[1].allocated_peak = 2 * kGiB;
  page.answers = plain_answers(page.runs);
  page.comparisons = {{"TTFT p50, s", 0.5, 0.6}};
  const std::string html = render_html(page);
  INFO(html.substr(0, 2000));
  CHECK(xml_problem(html).empty());
  CHECK(xml_problem("<svg><path d=\"M0,0\"></svg>") == "</svg> closes <path>");  // the checker checks
  CHECK(html.find("evil<&") == std::string::npos);
  CHECK(html.find("evil&lt;&amp;&quot;&#39;&gt;") != std::string::npos);
  CHECK(html.find("kvsim replay &lt;test&gt; &amp; co") != std::string::npos);
  // Charts: the breakdown, two occupancy charts, running/queued, three CDFs, the comparison.
  CHECK(count(html, "<svg class=\"chart\"") == 8);
  CHECK(html.find("data-charts=\"8\"") != std::string::npos);
  // Hand case: time over [0, 10] s in 632 one-pixel columns from x = 72; the y axis tops at
  // 2.5 GiB (ticks of 0.5 up to 2.1 = 1.05 x the largest value, 2 GiB reserved, then one tick
  // more). Allocated: 0 at t = 0 (column 0, x 72.5, y 224) and 1 GiB at t = 10 (the last
  // column, 631, x 703.5, y = 224 - 1/2.5 * 208 = 140.8).
  CHECK(html.find("<path class=\"data s1\" d=\"M72.5,224.0 L703.5,140.8\"/>") != std::string::npos);
  // Reserved, 2 GiB throughout: y = 224 - 2/2.5 * 208 = 57.6.
  CHECK(html.find("<path class=\"data s3\" d=\"M72.5,57.6 L703.5,57.6\"/>") != std::string::npos);
  // The peak: 1 GiB at 10 s: the circle at x(10) = 704, y 140.8, labelled.
  CHECK(html.find("<circle class=\"peak\" cx=\"704.0\" cy=\"140.8\" r=\"4\"/>") != std::string::npos);
  CHECK(html.find("peak 1.00 GiB at 10.000 s") != std::string::npos);
  // The plain answer names the one holding least and the other's multiple.
  CHECK(html.find("dynamic:growth=chunk,chunk=64 holds the least at peak: 1.00 GiB allocated, against "
                  "evil&lt;&amp;&quot;&#39;&gt; 2.00 GiB (2.00x).") != std::string::npos);
  // Effective 0.25 of 0.5 GiB allocated: 50.0%; the tail 0.25: 50.0%.
  CHECK(html.find("On average 50.0% of what dynamic:growth=chunk,chunk=64 allocates holds effective tokens; the rest "
                  "is internal fragmentation: partial-block tail 50.0%.") != std::string::npos);
  CHECK(render_html(page) == html);
}

TEST_CASE("html: kvsim replay --html writes the bundled example's report with every chart") {
  const auto dir = test::scratch_dir("html-replay");
  const std::string out = (dir / "report.html").string();
  const std::string trace = std::string(KVSIM_SOURCE_DIR) + "/traces/chat-mix.csv";
  const auto r = test::run_cli({"replay", trace, "--html", out, "--quiet"});
  REQUIRE(r.exit_code == 0);
  const std::string html = test::slurp(out);
  CHECK(xml_problem(html).empty());
  // The default four allocators: the breakdown, four occupancy charts, running/queued, TTFT,
  // TPOT and end-to-end CDFs.
  CHECK(count(html, "<svg class=\"chart\"") == 9);
  for (const char* chart : {"breakdown", "occupancy-0", "occupancy-3", "requests", "ttft", "tpot", "e2e"}) {
    CHECK(html.find(std::string("data-chart=\"") + chart + "\"") != std::string::npos);
  }
  CHECK(count(html, "<circle class=\"peak\"") == 4);
  CHECK(html.find("holds the least at peak") != std::string::npos);
  // The same bytes on a second run.
  const std::string again = (dir / "again.html").string();
  REQUIRE(test::run_cli({"replay", trace, "--html", again, "--quiet", "--jobs", "1"}).exit_code == 0);
  CHECK(test::slurp(again) == html);
}

TEST_CASE("html: a request of 0 output tokens has an end-to-end latency and no TTFT, in replay's page and report's") {
  const auto dir = test::scratch_dir("html-zero-output");
  // a completes with its prefill and generates nothing; b generates 1 token, c 5.
  const std::string trace = (dir / "z.csv").string();
  std::ofstream(trace) << "id,arrival,prompt_tokens,output_tokens\na,0,100,0\nb,0.1,50,1\nc,0.2,60,5\n";
  const auto path = [&](const char* name) { return (dir / name).string(); };
  const auto r = test::run_cli({"replay", trace, "--quiet", "--allocator", "paged", "--json", "--timeline", path("t.csv"),
                                "--per-request", path("r.csv"), "--html", path("a.html")});
  REQUIRE(r.exit_code == 0);
  std::ofstream(path("j.json")) << r.out;
  const auto again = test::run_cli({"report", path("j.json"), path("t.csv"), path("r.csv"), "--html", path("b.html")});
  INFO(again.err);
  REQUIRE(again.exit_code == 0);  // report refused replay's own file: an empty ttft_s
  for (const char* page : {"a.html", "b.html"}) {
    INFO(page);
    const std::string html = test::slurp(path(page));
    // The JSON counts 3 end-to-end latencies and 2 TTFTs; TPOT only c's.
    CHECK(nlohmann::json::parse(r.out)["runs"][0]["latency"]["end_to_end"]["count"] == 3);
    CHECK(html.find("paged:block=16 (3 requests)") != std::string::npos);
    CHECK(html.find("paged:block=16 (2 requests)") != std::string::npos);
    CHECK(html.find("paged:block=16 (1 request)") != std::string::npos);
  }
}

TEST_CASE("html: report reads a per-request row whose quoted id holds a line break, and counts lines past it") {
  const auto dir = test::scratch_dir("html-multiline");
  const auto path = [&](const char* name) { return (dir / name).string(); };
  std::ofstream(path("ids.jsonl")) << R"({"id":"line\nbreak","arrival":0,"prompt_tokens":10,"output_tokens":5})" "\n"
                                   << R"({"id":"b","arrival":0.1,"prompt_tokens":10,"output_tokens":5})" "\n";
  const auto r = test::run_cli({"replay", path("ids.jsonl"), "--quiet", "--allocator", "paged", "--json", "--per-request",
                                path("r.csv")});
  REQUIRE(r.exit_code == 0);
  std::ofstream(path("j.json")) << r.out;
  // Replay quotes the id, RFC 4180: the first row spans lines 2 and 3.
  std::string rows = test::slurp(path("r.csv"));
  REQUIRE(rows.find("\"line\nbreak\"") != std::string::npos);
  auto again = test::run_cli({"report", path("j.json"), path("r.csv"), "--html", path("p.html")});
  INFO(again.err);
  CHECK(again.exit_code == 0);
  // b's row is line 4: an error in it says so.
  const auto at = rows.rfind(",completed");
  REQUIRE(at != std::string::npos);
  rows.replace(at, 10, ",finished");
  std::ofstream(path("r.csv"), std::ios::binary) << rows;
  again = test::run_cli({"report", path("j.json"), path("r.csv"), "--html", path("p.html")});
  CHECK(again.exit_code == 1);
  CHECK_THAT(again.err, Catch::Contains("r.csv:4: column 'outcome'"));
}

TEST_CASE("html: an allocator that completed no request is left out of the plain answers") {
  // dense-static reserves Llama's 131,072-position row (16 GiB) for each request, which a
  // 1 GiB budget never holds: it refuses them all and allocates nothing; paged serves them.
  const auto dir = test::scratch_dir("html-idle");
  const std::string out = (dir / "p.html").string();
  const auto r = test::run_cli({"replay", std::string(KVSIM_SOURCE_DIR) + "/traces/chat-mix.csv", "--quiet", "--requests",
                                "20", "--allocator", "dense-static,paged", "--kv-budget", "1GiB", "--cost",
                                "constant:step=10ms,prefill-token=0ms", "--html", out});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const std::string html = test::slurp(out);
  CHECK(html.find("dense-static:reserve=max-model-len completed no request, and is left out of the comparison.") !=
        std::string::npos);
  CHECK(html.find("paged:block=16 holds ") != std::string::npos);
  CHECK(html.find("dense-static:reserve=max-model-len holds ") == std::string::npos);
}

TEST_CASE("html: kvsim report draws the same charts from replay's saved --json, --timeline and --per-request") {
  const auto dir = test::scratch_dir("html-report");
  const std::string trace = std::string(KVSIM_SOURCE_DIR) + "/traces/chat-mix.csv";
  const std::string live = (dir / "live.html").string(), saved = (dir / "saved.html").string();
  const std::string json = (dir / "run.json").string(), timeline = (dir / "t.csv").string(),
                    per_request = (dir / "r.csv").string();
  // dynamic's external fragmentation in bytes is in every run's JSON, so its bar is whole.
  const auto a = test::run_cli({"replay", trace, "--allocator", "paged,dense-static:reserve=max-tokens,dynamic", "--html", live,
                                "--quiet", "--json",
                                "--timeline", timeline, "--per-request", per_request});
  REQUIRE(a.exit_code == 0);
  {
    std::ofstream out(json, std::ios::binary);
    out << a.out;
  }
  // The CSVs before the JSON: inputs are recognised by content, in any order.
  const auto b = test::run_cli({"report", timeline, per_request, json, "--html", saved});
  REQUIRE(b.exit_code == 0);
  const std::string from_run = test::slurp(live), from_files = test::slurp(saved);
  CHECK(xml_problem(from_files).empty());
  // The charts are drawn from the same figures, times and latencies (9 decimals of a second
  // are whole ns), so from the first chart on the pages are the same bytes.
  const auto charts = [](const std::string& page) { return page.substr(page.find("<h2>")); };
  CHECK(charts(from_files) == charts(from_run));
  CHECK(count(from_files, "<svg class=\"chart\"") == 8);  // breakdown, 3 occupancy, requests, 3 CDFs
  CHECK(from_files.find("external fragmentation") != std::string::npos);
  // The context above is the live page's but the step cost's terms (those stay in the JSON's
  // cost_model): every line the saved page has, the live one has, model, schedule, budget
  // and trace among them.
  const auto context_lines = [](const std::string& page) {
    const auto from = page.find("<div class=\"context\">\n") + 22, to = page.find("</div>", from);
    std::vector<std::string> lines;
    for (std::size_t at = from; at < to;) {
      const auto end = page.find("<br/>\n", at);
      lines.push_back(page.substr(at, end - at));
      at = end + 6;
    }
    return lines;
  };
  const auto saved_lines = context_lines(from_files), live_lines = context_lines(from_run);
  REQUIRE(saved_lines.size() == 4);
  for (const char* start : {"model    llama-3.1-8b (", "schedule simulated; cost model roofline", "budget   none", "trace    "}) {
    CHECK(std::count_if(saved_lines.begin(), saved_lines.end(), [&](const std::string& l) { return l.starts_with(start); }) == 1);
  }
  for (const auto& line : saved_lines) {
    INFO(line);
    CHECK(std::find(live_lines.begin(), live_lines.end(), line) != live_lines.end());
  }
  // A figure replay never writes (bytes below 0, beyond its 64 bits) is left out of the
  // context, not printed as it is or wrapped around.
  for (const char* bad : {"-5", "18446744073709551615"}) {
    std::string tampered = a.out;
    const std::string key = "\"bytes_per_token\": 131072";
    REQUIRE(tampered.find(key) != std::string::npos);
    tampered.replace(tampered.find(key), key.size(), std::string("\"bytes_per_token\": ") + bad);
    std::ofstream(json, std::ios::binary) << tampered;
    REQUIRE(test::run_cli({"report", json, "--html", saved}).exit_code == 0);
    const auto lines = context_lines(test::slurp(saved));
    REQUIRE(!lines.empty());
    CHECK(lines[0] == "model    llama-3.1-8b (meta-llama/Llama-3.1-8B config.json), KV bf16, tp 1, pp 1 (figures per device)");
  }
  std::ofstream(json, std::ios::binary) << a.out;
  // --html - writes the same page to standard output, as its --help says.
  const auto c = test::run_cli({"report", timeline, per_request, json, "--html", "-"});
  REQUIRE(c.exit_code == 0);
  CHECK(c.out == from_files);
  // A prefix cache's evictable bytes, the dashed series: from the timeline's cached_bytes too
  // (report drew the page without it).
  const std::string shared = std::string(KVSIM_SOURCE_DIR) + "/traces/shared-prefix.csv";
  const auto d = test::run_cli({"replay", shared, "--requests", "100", "--allocator", "paged,paged:prefix-caching=on",
                                "--kv-budget", "3GiB", "--html", live, "--quiet", "--json", "--timeline", timeline,
                                "--per-request", per_request});
  REQUIRE(d.exit_code == 0);
  std::ofstream(json, std::ios::binary) << d.out;
  REQUIRE(test::run_cli({"report", json, timeline, per_request, "--html", saved}).exit_code == 0);
  CHECK(test::slurp(live).find("cached") != std::string::npos);
  CHECK(charts(test::slurp(saved)) == charts(test::slurp(live)));
}

namespace {

// Replay's --json with the first run's reserved peak set to 1 byte, below what it allocated.
std::string over_reserved(const std::string& replay_json) {
  auto j = nlohmann::json::parse(replay_json);
  j["runs"][0]["memory_bytes"]["reserved_slots"]["peak"] = 1;
  return j.dump();
}

// Replay's JSON with one figure of its first run set to `value`, at `keys`.
std::string with_figure(const std::string& replay_json, std::initializer_list<const char*> keys, const nlohmann::json& value) {
  auto j = nlohmann::json::parse(replay_json);
  nlohmann::json* at = &j["runs"][0];
  for (const char* k : keys) at = &(*at)[k];
  *at = value;
  return j.dump();
}

}  // namespace

TEST_CASE("html: kvsim report refuses what it cannot read, naming the file, the line and the column") {
  const auto dir = test::scratch_dir("html-report-bad");
  const auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = (dir / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  };
  const std::string trace = std::string(KVSIM_SOURCE_DIR) + "/traces/chat-mix.csv";
  const auto run = test::run_cli({"replay", trace, "--allocator", "paged", "--requests", "20", "--quiet", "--json"});
  REQUIRE(run.exit_code == 0);
  const std::string json = write("run.json", run.out);
  // A --replicas run, refused as replay --html refuses it: the page follows one engine a run.
  const auto replicas_run =
      test::run_cli({"replay", trace, "--allocator", "paged", "--requests", "20", "--replicas", "2", "--json"});
  REQUIRE(replicas_run.exit_code == 0);
  const std::string replicas_json = write("replicas.json", replicas_run.out);
  // The same run's CSVs, whole and damaged: each must match the JSON it is given with (every
  // run from its start to its end, every request once).
  const std::string saved_json = (dir / "saved.json").string(), saved_t = (dir / "saved-t.csv").string(),
                    saved_r = (dir / "saved-r.csv").string();
  const auto saved = test::run_cli({"replay", trace, "--allocator", "paged", "--requests", "20", "--quiet", "--json",
                                    "--timeline", saved_t, "--per-request", saved_r});
  REQUIRE(saved.exit_code == 0);
  write("saved.json", saved.out);
  const auto first_lines = [](const std::string& text, int n) {
    std::size_t at = 0;
    for (int i = 0; i < n; ++i) at = text.find('\n', at) + 1;
    return text.substr(0, at);
  };
  const std::string timeline_text = test::slurp(saved_t), per_request_text = test::slurp(saved_r);
  REQUIRE(test::run_cli({"report", saved_json, saved_t, saved_r, "--html", (dir / "whole.html").string()}).exit_code == 0);
  // The same schedule in fp8 (the roofline on no device: constant steps, so the same steps
  // and end): every byte halves, so its timeline's largest interval maximum is half the
  // bf16 run's peak, and it is not that run's.
  {
    const std::string fp8_t = (dir / "fp8-t.csv").string();
    const std::vector<std::string> same = {"--allocator", "paged", "--requests", "20", "--quiet", "--json", "--cost",
                                           "constant:step=10ms,prefill-token=0s"};
    auto args = same;
    args.insert(args.begin(), {"replay", trace});
    const auto bf16 = test::run_cli(args);
    REQUIRE(bf16.exit_code == 0);
    const std::string bf16_json = write("bf16.json", bf16.out);
    args.insert(args.end(), {"--dtype", "fp8", "--timeline", fp8_t});
    REQUIRE(test::run_cli(args).exit_code == 0);
    const auto peak = nlohmann::json::parse(bf16.out)["runs"][0]["memory_bytes"]["allocated_slots"]["peak"].get<std::int64_t>();
    const auto r = test::run_cli({"report", bf16_json, fp8_t, "--html", (dir / "fp8.html").string()});
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains(fmt::format("paged:block=16's largest allocated_bytes_max is {}, but its "
                                                  "allocated peak in the --json output is {}: the timeline of "
                                                  "another run",
                                                  peak / 2, peak)));
  }
  // A per-step timeline has a row as each step begins, the last step's last, and no closing
  // row at the run's end (docs/replay.md): whole, it is the run's; cut a row short, it is not.
  const std::string step_json = (dir / "step.json").string(), step_t = (dir / "step-t.csv").string();
  const auto stepped = test::run_cli({"replay", trace, "--allocator", "paged", "--requests", "20", "--quiet", "--json",
                                      "--timeline", step_t, "--sample-every", "step"});
  REQUIRE(stepped.exit_code == 0);
  write("step.json", stepped.out);
  const auto iterations = nlohmann::json::parse(stepped.out)["runs"][0]["time"]["iterations"].get<int>();
  const std::string step_text = test::slurp(step_t);
  CHECK(std::count(step_text.begin(), step_text.end(), '\n') == 1 + iterations);  // the header, then a row a step
  CHECK(test::run_cli({"report", step_json, step_t, "--html", (dir / "step.html").string()}).exit_code == 0);
  const auto step_cut = test::run_cli({"report", step_json, write("step-cut.csv", first_lines(step_text, iterations)),
                                       "--html", (dir / "step.html").string()});
  CHECK(step_cut.exit_code == 1);
  CHECK_THAT(step_cut.err, Catch::Contains("step-cut.csv:" + std::to_string(iterations) + ": paged:block=16's last row is at"));
  // A run that took no step: a measured schedule (the trace's own times; its per-step rows,
  // step 0, end at the run's end), and a run that refused every request (no row at all,
  // sampled or per step).
  const std::string measured = write("measured.csv", "id,arrival,prompt_tokens,output_tokens,start,first_token,finish\n"
                                                     "1,0,100,10,0.01,0.05,0.2\n2,0.1,500,20,0.11,0.15,0.5\n");
  const std::string refused = write("refused.csv", "id,arrival,prompt_tokens,output_tokens\n1,0,2000,10\n");
  for (const auto& [name, extra] : {std::pair{measured, std::vector<std::string>{}},
                                    std::pair{refused, std::vector<std::string>{"--max-model-len", "1000"}}}) {
    for (const char* every : {"step", "1ms"}) {
      INFO(name << " --sample-every " << every);
      std::vector<std::string> args{"replay", name, "--allocator", "paged", "--quiet", "--json", "--timeline", step_t,
                                    "--sample-every", every};
      args.insert(args.end(), extra.begin(), extra.end());
      const auto none = test::run_cli(args);
      REQUIRE(none.exit_code == 0);
      REQUIRE(nlohmann::json::parse(none.out)["runs"][0]["time"]["iterations"] == 0);
      write("none.json", none.out);
      const auto drawn = test::run_cli({"report", (dir / "none.json").string(), step_t, "--html", (dir / "none.html").string()});
      INFO(drawn.err);
      CHECK(drawn.exit_code == 0);
    }
  }
  const std::string second_row = first_lines(per_request_text, 2).substr(first_lines(per_request_text, 1).size());
  const std::string out = (dir / "out.html").string();
  const std::string header = "allocator,time_s,step,running,queued,effective_bytes,allocated_bytes,reserved_bytes\n";
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"report", write("t.csv", header)}, "a CSV needs the 'kvsim replay --json' output"},
      // kvsim's CSVs the page does not draw, named as such, and standard input.
      {{"report", write("summary.csv", "allocator,requests,completed,cancelled\npaged:block=16,1,1,0\n")},
       "summary.csv: replay's --csv summary, which the page does not draw: give its --json output"},
      {{"report", write("summary-replicas.csv", "allocator,replicas,replica,requests,completed,cancelled\n")},
       "summary-replicas.csv: replay's --csv summary, which the page does not draw"},
      {{"report", write("ticks.csv", "t_s,measured_running,simulated_running\n0,1,1\n")},
       "ticks.csv: validate's --per-request or --per-tick CSV"},
      {{"report", json, "-"}, "standard input: not read: report tells its inputs apart by their content"},
      {{"report", write("other.json", "{\"a\": 1}")}, "other.json: JSON that is neither"},
      {{"report", write("broken.json", "{\"runs\": [")}, "broken.json: not valid JSON"},
      // A number beyond a double: nlohmann's parser throws out_of_range, not parse_error.
      {{"report", write("huge.json", "{\"runs\": [1e400]}")}, "huge.json: not valid JSON"},
      // nlohmann's parser stops at a NUL byte, so what follows would be dropped unread: line 2
      // (one newline before it), column 5 (the 4 characters of " []}" before it).
      {{"report", write("nul.json", std::string("{\"runs\":\n []}") + '\0' + "{\"a\": 1}")},
       "nul.json:2: a NUL byte at column 5: expected text"},
      // A JSON array is JSON, not a CSV without the replay's output beside it.
      {{"report", write("array.json", " [{\"runs\": []}]")}, "array.json: JSON that is neither"},
      {{"report", json, write("bad-cell.csv", header + "paged:block=16,0.5,1,2,x,0,0,0\n")},
       "bad-cell.csv:2: column 'queued': expected an integer, got \"x\""},
      {{"report", json, write("bad-time.csv", header + "paged:block=16,soon,1,2,0,0,0,0\n")},
       "bad-time.csv:2: column 'time_s': expected seconds"},
      {{"report", json, write("stranger.csv", header + "dynamic,0.5,1,2,0,0,0,0\n")},
       "stranger.csv:2: column 'allocator': \"dynamic\" is not a run of the replay's --json output"},
      {{"report", json, write("short.csv", header + "paged:block=16,0.5\n")}, "short.csv:2: 2 fields, the header has 8"},
      {{"report", json, write("what.csv", "a,b\n1,2\n")},
       "what.csv:1: not an output of kvsim replay, validate or sweep: neither JSON nor a --timeline"},
      // Not taken for a CSV that wants a JSON beside it: validate's table, given alone.
      {{"report", write("table.txt", "kvsim validate: measured vs simulated\n")},
       "table.txt:1: not an output of kvsim replay, validate or sweep"},
      {{"report", json, write("no-col.csv", "allocator,time_s,step\n")}, "no-col.csv:1: column 'running': missing"},
      // A byte order mark is skipped, so the header is recognised and the bad cell found.
      {{"report", json, write("bom.csv", "\xEF\xBB\xBF" + header + "paged:block=16,0.5,1,2,x,0,0,0\n")},
       "bom.csv:2: column 'queued': expected an integer, got \"x\""},
      {{"report", json, dir.string()}, dir.string() + ": is a directory, not a file"},
      // Figures replay never writes: negative bytes, time running back, no runs at all.
      {{"report", json, write("negative.csv", header + "paged:block=16,0.5,1,2,0,-5,0,0\n")},
       "negative.csv:2: column 'effective_bytes': expected a count, not below 0, got -5"},
      {{"report", json, write("back.csv", header + "paged:block=16,0.5,1,2,0,0,0,0\npaged:block=16,0.25,2,2,0,0,0,0\n")},
       "back.csv:3: column 'time_s': time goes backwards"},
      {{"report", write("no-runs.json", "{\"trace\": \"t.csv\", \"runs\": []}")}, "no-runs.json: runs: no run to draw"},
      // A block usage above 100%: more allocated than reserved, or effective than allocated.
      {{"report", json, write("over.csv", header + "paged:block=16,0.5,1,2,0,16,32,16\n")},
       "over.csv:2: column 'reserved_bytes': 16 is below allocated_bytes 32"},
      {{"report", json, write("under.csv", header + "paged:block=16,0.5,1,2,0,48,32,64\n")},
       "under.csv:2: column 'allocated_bytes': 32 is below effective_bytes 48"},
      {{"report", replicas_json}, "replicas.json: runs[0].replicas: a run of kvsim replay --replicas"},
      // CSVs cut short, doubled, of another run, or given twice: the JSON says what they hold.
      {{"report", saved_json, write("cut-t.csv", first_lines(timeline_text, 5))},
       "cut-t.csv:5: paged:block=16's last row is at"},
      {{"report", saved_json, write("cut-r.csv", first_lines(per_request_text, 5))},
       "cut-r.csv:5: 4 rows of paged:block=16"},
      {{"report", saved_json, write("twice-r.csv", per_request_text + second_row)},
       "twice-r.csv:22: column 'ordinal': request 1 of paged:block=16 a second time"},
      {{"report", saved_json, write("odd-r.csv", first_lines(per_request_text, 1) +
                                                    std::string(second_row).replace(second_row.rfind(",completed"), 10, ",exploded"))},
       "odd-r.csv:2: column 'outcome': expected completed, cancelled or refused, got \"exploded\""},
      {{"report", saved_json, saved_t, saved_t}, "saved-t.csv: a second --timeline CSV"},
      // A first token after the request's end (ttft_s, the 8th column, made 1000 s).
      {{"report", saved_json, write("late-r.csv", first_lines(per_request_text, 1) + [&] {
          std::string row = second_row;
          std::size_t at = 0;
          for (int comma = 0; comma < 7; ++comma) at = row.find(',', at) + 1;
          return row.replace(at, row.find(',', at) - at, "1000.000000000");
        }())},
       "late-r.csv:2: column 'ttft_s': 1000.000000000 s is after e2e_s"},
      // A timeline above the allocated peak its --json output gives.
      {{"report", write("low-peak.json", with_figure(test::slurp(saved_json), {"memory_bytes", "allocated_slots", "peak"}, 1)),
        saved_t},
       "saved-t.csv:2: column 'allocated_bytes_max':"},
      {{"report", write("half-byte.json", with_figure(run.out, {"serving", "capacity_bytes"}, 0.5))},
       "half-byte.json: runs[0].serving.capacity_bytes: expected a whole number of bytes, got 0.5"},
      // Figures replay's JSON never holds: 2^63 bytes (beyond its 64-bit counters), effective
      // tokens above the allocated slots, a run twice, a negative time; validate's durations
      // of 0 or less (the chart draws a ratio).
      {{"report", write("huge-peak.json", with_figure(with_figure(run.out, {"memory_bytes", "reserved_slots", "peak"},
                                                                  9223372036854775808.0),
                                                      {"memory_bytes", "allocated_slots", "peak"}, 9223372036854775808.0))},
       "huge-peak.json: runs[0].memory_bytes.allocated_slots.peak: expected a number of bytes from 0 to 2^63 - 1"},
      {{"report", write("effective.json", with_figure(run.out, {"memory_bytes", "effective_tokens", "mean"}, 1e15))},
       "effective.json: runs[0].memory_bytes.effective_tokens.mean: 1000000000000000 is above the allocated mean"},
      {{"report", write("peak-at.json", with_figure(run.out, {"memory_bytes", "allocated_slots", "peak_at_s"}, -100))},
       "peak-at.json: runs[0].memory_bytes.allocated_slots.peak_at_s: expected a time from 0 to 2^63 ns"},
      {{"report", write("late-peak.json", with_figure(run.out, {"memory_bytes", "allocated_slots", "peak_at_s"},
                                                       nlohmann::json::parse(run.out)["runs"][0]["time"]["end_s"].get<double>() + 1))},
       "late-peak.json: runs[0].memory_bytes.allocated_slots.peak_at_s:"},
      {{"report", write("long.json", with_figure(run.out, {"time", "end_s"}, 1e300))},
       "long.json: runs[0].time.end_s: expected a time from 0 to 2^63 ns"},
      // A count beyond 64 bits, or more completed than there were; and a count no file bears
      // out is refused by the rows, not trusted to size anything (1e11 requests, 20 rows).
      {{"report", write("total.json", with_figure(run.out, {"requests", "total"}, 18446744073709551616.0))},
       "total.json: runs[0].requests.total: expected a count from 0 to 2^63 - 1"},
      {{"report", write("done.json", with_figure(run.out, {"requests", "completed"}, 1e6))},
       "done.json: runs[0].requests.completed: 1000000 is above requests.total"},
      {{"report", write("many.json", with_figure(test::slurp(saved_json), {"requests", "total"}, 1e11)), saved_r},
       "saved-r.csv:21: 20 rows of paged:block=16 (20 completed), the --json output has 100000000000 requests"},
      {{"report", write("twice.json", [&] {
          auto j = nlohmann::json::parse(run.out);
          j["runs"].push_back(j["runs"][0]);
          return j.dump();
        }())},
       "twice.json: runs[1].allocator: \"paged:block=16\" is a run already"},
      {{"report", write("v-zero.json", R"({"run": "r", "ttft": {"measured": {"mean_s": 0.2}, "simulated": {"mean_s": 0}},
                                         "makespan_s": {"measured": 1, "simulated": 1}})")},
       "v-zero.json: ttft.simulated.mean_s: expected a positive number of seconds, got 0"},
      {{"report", write("v-negative.json", R"({"run": "r", "ttft": {"measured": {"mean_s": -0.5}, "simulated": {"mean_s": 0.1}},
                                             "makespan_s": {"measured": 1, "simulated": 1}})")},
       "v-negative.json: ttft.measured.mean_s: expected a positive number of seconds, got -0.5"},
      {{"report", write("v-long.json", R"({"run": "r", "ttft": {"measured": {"mean_s": 1e300}, "simulated": {"mean_s": 0.1}},
                                         "makespan_s": {"measured": 1, "simulated": 1}})")},
       "v-long.json: ttft.measured.mean_s: expected at most 2^63 ns (about 292 years), got 1e+300 s"},
      // Inputs kvsim writes but the report does not read, named as what they are.
      {{"report", write("empty.json", "  \n")}, "empty.json: empty: not an output of kvsim replay, validate or sweep"},
      {{"report", write("sweep.jsonl", R"({"point":0,"points":2,"grid":"abc","point_rows":1})" "\n"
                                       R"({"point":1,"points":2,"grid":"abc","point_rows":1})" "\n")},
       "sweep.jsonl: kvsim sweep --jsonl output, which the report does not read"},
      {{"report", json, write("max.csv", "allocator,time_s,step,running,queued,effective_bytes,allocated_bytes,"
                                         "reserved_bytes,allocated_bytes_max\npaged:block=16,0.5,1,2,0,16,32,64,16\n")},
       "max.csv:2: column 'allocated_bytes_max': 16 is below allocated_bytes 32"},
      {{"report", write("over.json", over_reserved(run.out))},
       "over.json: runs[0].memory_bytes.reserved_slots.peak: 1 is below the allocated peak"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = c.args;
    args.insert(args.end(), {"--html", out});
    const auto r = test::run_cli(args);
    INFO(r.err);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains(c.message));
  }
  CHECK(!std::filesystem::exists(out));
  // Usage: no input, no --html.
  CHECK(test::run_cli({"report", "--html", out}).exit_code == 2);
  CHECK(test::run_cli({"report", json}).exit_code == 2);
}

TEST_CASE("html: kvsim report draws validate's measured against simulated, one bar per figure at known widths") {
  const auto dir = test::scratch_dir("html-validate");
  // By hand: TTFT mean 1 -> 1.2 s (ratio 1.2), p50 1 -> 0.9 (0.9), p99 2 -> 3 (1.5); TPOT
  // mean 0.02 -> 0.03 s, labelled in ms as validate's table gives it (20 -> 30, 1.5), its p50
  // and p99 measured as 0 (a run validate reads; no ratio: left out, as validate's
  // diff_percent is null) and end-to-end latency without samples (null: left out); makespan 10 -> 9 s (0.9). The
  // axis tops at 2 (ticks of 0.5 up to 1.05 x 1.5 = 1.575, then one more), over 632 px:
  // widths 1.2/2 x 632 = 379.2, 0.9 -> 284.4, 1.5 -> 474.0; the line at 1 is at x 388.
  const std::string json = (dir / "v.json").string();
  std::ofstream(json, std::ios::binary) << R"({"run": "runs/a", "model": "m",
    "ttft": {"measured": {"count": 2, "mean_s": 1, "p50_s": 1, "p99_s": 2},
             "simulated": {"count": 2, "mean_s": 1.2, "p50_s": 0.9, "p99_s": 3}},
    "tpot": {"measured": {"count": 2, "mean_s": 0.02, "p50_s": 0, "p99_s": 0},
             "simulated": {"count": 2, "mean_s": 0.03, "p50_s": 0.1, "p99_s": 0.1}},
    "latency": {"measured": {"count": 0, "mean_s": null, "p50_s": null, "p99_s": null},
                "simulated": {"count": 0, "mean_s": null, "p50_s": null, "p99_s": null}},
    "makespan_s": {"measured": 10, "simulated": 9}})";
  const std::string out = (dir / "v.html").string();
  REQUIRE(test::run_cli({"report", json, "--html", out}).exit_code == 0);
  const std::string html = test::slurp(out);
  CHECK(xml_problem(html).empty());
  CHECK(count(html, "<svg class=\"chart\"") == 1);
  CHECK(count(html, "<rect class=\"data p0\"") == 5);
  CHECK(html.find("width=\"379.2\" height=\"18\"><title>TTFT mean, s: measured 1, simulated 1.2</title>") != std::string::npos);
  CHECK(html.find("width=\"284.4\" height=\"18\"><title>TTFT p50, s: measured 1, simulated 0.9</title>") != std::string::npos);
  CHECK(html.find("width=\"474.0\" height=\"18\"><title>TTFT p99, s: measured 2, simulated 3</title>") != std::string::npos);
  CHECK(html.find("width=\"284.4\" height=\"18\"><title>makespan, s: measured 10, simulated 9</title>") != std::string::npos);
  CHECK(html.find("<line class=\"capacity\" x1=\"388.0\"") != std::string::npos);
  CHECK(html.find("width=\"474.0\" height=\"18\"><title>TPOT mean, ms: measured 20, simulated 30</title>") !=
        std::string::npos);
  CHECK(html.find("TPOT p50") == std::string::npos);
}

TEST_CASE("html: kvsim report draws a sweep's figures against its numeric axis, at known coordinates") {
  const auto dir = test::scratch_dir("html-sweep");
  // By hand: rate-scale 1, 2, 4 -> peaks 1, 2, 3 GiB for paged. x over [1, 4] -> [72, 704]:
  // x(2) = 72 + 1/3 x 632 = 282.7. The y axis tops at 4 (ticks of 1 up to 1.05 x 3, then one
  // more): y(1) = 224 - 1/4 x 208 = 172, y(2) = 120, y(3) = 68. The second allocator makes a
  // second line; a TTFT left empty is left out of the TTFT chart.
  const std::string csv = (dir / "sweep.csv").string();
  std::ofstream(csv, std::ios::binary)
      << "point,points,grid,point_rows,rate-scale,allocator,allocated_bytes_peak,reserved_bytes_peak,ttft_p99_s,"
         "generated_tokens_per_s\n"
         "0,6,abc,1,1,paged,1073741824,1073741824,0.5,100.0\n"
         "1,6,abc,1,1,\"dynamic:growth=chunk,chunk=64\",1073741824,1073741824,,100.0\n"
         "2,6,abc,1,2,paged,2147483648,2147483648,0.6,200.0\n"
         "3,6,abc,1,2,\"dynamic:growth=chunk,chunk=64\",2147483648,2147483648,0.7,200.0\n"
         "4,6,abc,1,4,paged,3221225472,3221225472,0.9,300.0\n"
         "5,6,abc,1,4,\"dynamic:growth=chunk,chunk=64\",3221225472,3221225472,1.0,300.0\n";
  const std::string out = (dir / "sweep.html").string();
  const auto r = test::run_cli({"report", csv, "--html", out});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const std::string html = test::slurp(out);
  CHECK(xml_problem(html).empty());
  CHECK(count(html, "<svg class=\"chart\"") == 3);
  CHECK(html.find("<path class=\"data r0\" d=\"M72.0,172.0 L282.7,120.0 L704.0,68.0\"/>") != std::string::npos);
  CHECK(html.find("Allocated slots, peak against rate-scale") != std::string::npos);
  CHECK(html.find("dynamic:growth=chunk,chunk=64") != std::string::npos);
  // TTFT: dynamic's line has two points (rate 2 and 4), paged's three.
  const std::size_t ttft = html.find("data-chart=\"sweep-ttft\"");
  REQUIRE(ttft != std::string::npos);
  const std::size_t r1 = html.find("<path class=\"data r1\" d=\"", ttft);
  REQUIRE(r1 != std::string::npos);
  CHECK(count(html.substr(r1, html.find("\"/>", r1) - r1), " L") == 1);
  // With --replicas a sweep has a row per replica and one for their total: only the totals
  // are drawn. The same rows as above for paged, each total preceded by two replicas' rows
  // holding half its peak (which drawn would make a second line, or bend this one).
  const std::string replicas = (dir / "replicas.csv").string();
  {
    std::ofstream out_csv(replicas, std::ios::binary);
    out_csv << "point,points,grid,point_rows,rate-scale,allocator,replicas,replica,allocated_bytes_peak,"
               "reserved_bytes_peak,ttft_p99_s,generated_tokens_per_s\n";
    const char* peaks[] = {"1073741824", "2147483648", "3221225472"};
    const char* halves[] = {"536870912", "1073741824", "1610612736"};
    const char* rates[] = {"1", "2", "4"};
    for (int p = 0; p < 3; ++p) {
      for (const char* k : {"0", "1"}) {
        out_csv << p << ",3,abc,3," << rates[p] << ",paged,2," << k << "," << halves[p] << "," << halves[p]
                << ",0.5,50.0\n";
      }
      out_csv << p << ",3,abc,3," << rates[p] << ",paged,2,," << peaks[p] << "," << peaks[p] << ",0.5,100.0\n";
    }
  }
  const auto rr = test::run_cli({"report", replicas, "--html", out});
  INFO(rr.err);
  REQUIRE(rr.exit_code == 0);
  const std::string rhtml = test::slurp(out);
  CHECK(rhtml.find("<path class=\"data r0\" d=\"M72.0,172.0 L282.7,120.0 L704.0,68.0\"/>") != std::string::npos);
  CHECK(rhtml.find("class=\"data r1\"") == std::string::npos);
  // A sweep over --replicas itself: its column is "replicas_option" (replay's rows have a
  // "replicas" column), and the charts name the option.
  const std::string over_replicas = (dir / "over-replicas.csv").string();
  REQUIRE(test::run_cli({"sweep", std::string(KVSIM_SOURCE_DIR) + "/traces/chat-mix.csv", "--requests", "20", "--vary",
                         "replicas=1,2", "--csv", over_replicas})
              .exit_code == 0);
  REQUIRE(test::slurp(over_replicas).find(",replicas_option,") != std::string::npos);
  REQUIRE(test::run_cli({"report", over_replicas, "--html", out}).exit_code == 0);
  CHECK(test::slurp(out).find("Allocated slots, peak against replicas<") != std::string::npos);
  // A grid given out of order (--vary rate-scale=4,1,2) draws the same line, joined by x.
  const std::string unordered = (dir / "unordered.csv").string();
  std::ofstream(unordered, std::ios::binary)
      << "point,points,grid,point_rows,rate-scale,allocator,allocated_bytes_peak,reserved_bytes_peak,ttft_p99_s,"
         "generated_tokens_per_s\n"
         "0,3,abc,1,4,paged,3221225472,3221225472,0.9,300.0\n"
         "1,3,abc,1,1,paged,1073741824,1073741824,0.5,100.0\n"
         "2,3,abc,1,2,paged,2147483648,2147483648,0.6,200.0\n";
  const auto ur = test::run_cli({"report", unordered, "--html", out});
  REQUIRE(ur.exit_code == 0);
  CHECK(test::slurp(out).find("<path class=\"data r0\" d=\"M72.0,172.0 L282.7,120.0 L704.0,68.0\"/>") !=
        std::string::npos);
  // A sweep's page is its own: another output beside it is refused, the sweep twice too.
  const auto twice = test::run_cli({"report", unordered, unordered, "--html", out});
  CHECK(twice.exit_code == 1);
  CHECK_THAT(twice.err, Catch::Contains("a sweep CSV is read on its own"));
  // An axis that is never a number cannot be drawn against.
  const std::string words = (dir / "words.csv").string();
  std::ofstream(words, std::ios::binary)
      << "point,points,grid,point_rows,policy,allocator,allocated_bytes_peak,reserved_bytes_peak,ttft_p99_s,"
         "generated_tokens_per_s\n"
         "0,1,abc,1,vllm,paged,1,1,0.5,1\n";
  const auto bad = test::run_cli({"report", words, "--html", out});
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.err, Catch::Contains("words.csv:1: no axis whose values are all numbers"));
  // Whole, as sweep merge checks parts: every point, each once and with all its rows; the
  // allocated peak never above the reserved one.
  const std::string text = test::slurp(csv);
  const auto damaged = [&](const std::string& name, const std::string& body) {
    const std::string path = (dir / name).string();
    std::ofstream(path, std::ios::binary) << body;
    return test::run_cli({"report", path, "--html", out});
  };
  const std::size_t row_4 = text.find("\n4,6,") + 1;
  auto d = damaged("cut.csv", text.substr(0, row_4));  // points 4 and 5 lost at a line's end
  CHECK(d.exit_code == 1);
  CHECK_THAT(d.err, Catch::Contains("cut.csv: 2 of the grid's 6 points are in none of the 1 parts (points 4, 5)"));
  d = damaged("doubled.csv", text + text.substr(row_4));
  CHECK(d.exit_code == 1);
  CHECK_THAT(d.err, Catch::Contains("doubled.csv:8: point: 4 after 5: a sweep writes its points in order"));
  // The sweep with one row's text replaced.
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string out = text;
    out.replace(out.find(from), from.size(), to);
    return out;
  };
  d = damaged("over.csv", replaced("0,6,abc,1,1,paged,1073741824,1073741824,", "0,6,abc,1,1,paged,1073741824,1073741823,"));
  CHECK(d.exit_code == 1);
  CHECK_THAT(d.err, Catch::Contains("over.csv:2: column 'reserved_bytes_peak': 1073741823 is below allocated_bytes_peak"));
  // A latency or a throughput below 0 is no run's: refused, not drawn below the axis.
  const std::string third_row = "2,6,abc,1,2,paged,2147483648,2147483648,0.6,200.0";
  d = damaged("negative.csv", replaced(third_row, "2,6,abc,1,2,paged,2147483648,2147483648,-0.6,200.0"));
  CHECK(d.exit_code == 1);
  CHECK_THAT(d.err, Catch::Contains("negative.csv:4: column 'ttft_p99_s': expected a number from 0 to 9223372036.854776, got -0.6"));
  // Nor a TTFT beyond what replay's clock (2^63 ns) can hold, which would scale the axis past a double.
  d = damaged("long.csv", replaced(third_row, "2,6,abc,1,2,paged,2147483648,2147483648,1e308,200.0"));
  CHECK(d.exit_code == 1);
  CHECK_THAT(d.err, Catch::Contains("long.csv:4: column 'ttft_p99_s': expected a number from 0 to 9223372036.854776, got 1e308"));
  d = damaged("older.csv", "point,points,grid,rate-scale,allocator,allocated_bytes_peak,reserved_bytes_peak,ttft_p99_s,"
                           "generated_tokens_per_s\n0,1,abc,1,paged,1,1,0.5,1\n");
  CHECK(d.exit_code == 1);
  CHECK_THAT(d.err, Catch::Contains("older.csv:1: written by an older kvsim sweep (no point_rows column"));
}
