// kvsim report: the HTML report of `kvsim replay --html`, drawn from saved outputs instead of
// a new run: replay's --json output (the figures; needed for the rest), its --timeline CSV
// (the over-time charts) and --per-request CSV (the latency CDFs), and validate's --json
// output (measured against simulated). Each input is recognised by its content, not its name;
// anything else is an error naming the file, and the line and field where it goes wrong.
#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli.h"
#include "html_report.h"
#include "kvsim/error.h"
#include "kvsim/output_file.h"
#include "kvsim/units.h"
#include "model_options.h"
#include "sweep.h"

namespace kvsim::cli {
namespace {

using Json = nlohmann::json;

const CommandSpec kSpec{
    "kvsim report INPUT... --html FILE",
    "Writes the HTML report (docs/report.md) from saved outputs: 'kvsim replay --json' output,\n"
    "with its --timeline CSV for occupancy and running/queued over time and its --per-request\n"
    "CSV for the TTFT, TPOT and end-to-end CDFs; or 'kvsim validate --json' output for the\n"
    "measured against simulated chart; or 'kvsim sweep --csv' output for the peak, TTFT p99 and\n"
    "throughput against the sweep's first numeric axis. Inputs are recognised by their content,\n"
    "in any order; a replay CSV's allocator column must name runs of the replay's JSON.",
    "  kvsim replay traces/chat-mix.csv --json --timeline t.csv --per-request r.csv > run.json\n"
    "  kvsim report run.json t.csv r.csv --html report.html\n"
    "  kvsim validate RUN --json > v.json && kvsim report v.json --html validate.html\n"
    "  kvsim report sweep.csv --html sweep.html"};

// "runs[0].memory_bytes.peak": `keys` joined by dots after `prefix` (empty, or ending in a dot).
std::string key_path(const std::string& prefix, std::initializer_list<const char*> keys) {
  std::string field = prefix;
  for (const char* k : keys) field += (field.size() > prefix.size() ? "." : "") + std::string(k);
  return field;
}

// The value at `keys` in `j`, a number; `what` names it in the error.
double number(const Json& j, std::initializer_list<const char*> keys, const std::string& path, bool optional = false) {
  const Json* at = &j;
  std::string field;
  for (const char* k : keys) {
    if (!field.empty()) field += '.';
    field += k;
    if (!at->is_object() || !at->contains(k)) {
      if (optional) return 0;
      throw InputError(Location{path, 0, field}, "missing: is this 'kvsim replay --json' or 'kvsim validate --json' output?");
    }
    at = &(*at)[k];
  }
  if (at->is_null() && optional) return 0;
  if (!at->is_number()) throw InputError(Location{path, 0, field}, "expected a number, got " + at->dump());
  return at->get<double>();
}

std::string text(const Json& j, const char* key, const std::string& path, const std::string& where) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) {
    throw InputError(Location{path, 0, where + key}, "expected a string");
  }
  return j[key].get<std::string>();
}

std::int64_t to_ns(double seconds) { return static_cast<std::int64_t>(std::llround(seconds * 1e9)); }
std::int64_t to_int(double v) { return static_cast<std::int64_t>(std::llround(v)); }

// 2^63: replay's counters (bytes, requests, steps) and its clock (ns) are below it.
constexpr double kTwoTo63 = 9223372036854775808.0;
// Seconds within the clock's 2^63 ns.
bool within_clock(double seconds) { return seconds * 1e9 < kTwoTo63; }

// Two times the same within 1 us: the JSON's seconds are a double, the CSV's nine decimals.
bool same_time(std::int64_t a_ns, std::int64_t b_ns) { return a_ns - b_ns <= 1000 && b_ns - a_ns <= 1000; }

// What the replay's JSON says each run's CSVs hold: every request once in --per-request,
// the completed ones completed; a --timeline whose last row is the state at the run's end,
// after its last step.
struct RunFacts {
  std::int64_t requests = 0, completed = 0, end_ns = 0, iterations = 0;
};

// A count or a span as replay writes it: an integer within its signed 64 bits, not below 0;
// nothing otherwise.
std::optional<std::int64_t> count_of(const Json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
    return static_cast<std::int64_t>(u);
  }
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) return v.get<std::int64_t>();
  return std::nullopt;
}

void read_replay_json(const Json& j, const std::string& path, HtmlPage& page, std::vector<RunFacts>& facts) {
  page.title = "kvsim replay " + text(j, "trace", path, "");
  const Json& runs = j["runs"];
  if (!runs.is_array() || runs.empty()) throw InputError(Location{path, 0, "runs"}, "no run to draw");
  // The context lines of replay's own page (its table's header), as far as the JSON holds
  // them: the step cost's terms are left to the JSON's cost_model.
  const auto string_at = [](const Json& o, const char* key) {
    return o.is_object() && o.contains(key) && o[key].is_string() ? o[key].get<std::string>() : std::string();
  };
  if (j.contains("model") && j["model"].is_object()) {
    const Json& m = j["model"];
    std::string line = "model    " + text(m, "name", path, "model.");
    if (const std::string source = string_at(m, "source"); !source.empty()) line += " (" + source + ")";
    if (const std::string dtype = string_at(m, "kv_dtype"); !dtype.empty()) line += ", KV " + dtype;
    if (const auto bytes = m.contains("bytes_per_token") ? count_of(m["bytes_per_token"]) : std::nullopt) {
      line += ", " + with_commas(*bytes) + " bytes per token";
    }
    if (const std::string placement = string_at(m, "placement"); !placement.empty()) line += ", " + placement;
    page.context.push_back(std::move(line));
  }
  const std::string schedule = string_at(runs[0], "schedule");
  const std::string cost = string_at(j.value("cost_model", Json::object()), "name");
  if (!schedule.empty() && !cost.empty()) page.context.push_back("schedule " + schedule + "; cost model " + cost);
  if (const std::string budget = string_at(j, "budget"); !budget.empty()) {
    // As replay's table puts it: a measured schedule batches nothing.
    const std::string batching =
        !schedule.empty() && schedule != "simulated" ? "no batching (measured schedule)" : string_at(j, "scheduler");
    page.context.push_back("budget   " + budget + (batching.empty() ? "" : "; " + batching));
  }
  // The span: one, or each run's when their schedules differ (as replay's table gives it).
  const auto integer_at = [](const Json& o, const char* object, const char* key) -> std::optional<std::int64_t> {
    if (!o.is_object() || !o.contains(object) || !o[object].is_object() || !o[object].contains(key)) return std::nullopt;
    return count_of(o[object][key]);
  };
  const auto first_ns = integer_at(runs[0], "time", "duration_ns");
  const auto requests = integer_at(runs[0], "requests", "total");
  std::string spans;
  bool differ = false;
  for (const Json& r : runs) {
    const auto ns = integer_at(r, "time", "duration_ns");
    if (!ns) break;
    differ = differ || ns != first_ns;
    spans += fmt::format("{}{} s ({})", spans.empty() ? "" : ", ", format_seconds(*ns, 3), string_at(r, "allocator"));
  }
  if (first_ns && requests && !schedule.empty()) {
    page.context.push_back(fmt::format("trace    {} request{} over {} {}", with_commas(*requests), *requests == 1 ? "" : "s",
                                       differ ? spans : format_seconds(*first_ns, 3) + " s",
                                       schedule == "simulated" ? "simulated" : "as measured"));
  }
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const Json& r = runs[i];
    const std::string where = fmt::format("runs[{}].", i);
    // Bytes and their means are never negative: a file that says so was not written by replay.
    const auto field_of = [&](std::initializer_list<const char*> keys) { return key_path(where, keys); };
    // Bytes: not below 0, and within 64 bits (replay's counters are 64-bit integers).
    const auto amount = [&](std::initializer_list<const char*> keys, bool optional = false) {
      const double v = number(r, keys, path, optional);
      if (v < 0 || v >= kTwoTo63) {
        throw InputError(Location{path, 0, field_of(keys)},
                         fmt::format("expected a number of bytes from 0 to 2^63 - 1, got {}", v));
      }
      return v;
    };
    // As replay --html refuses --replicas: the page's charts follow one engine a run.
    if (r.contains("replicas")) {
      throw InputError(Location{path, 0, where + "replicas"},
                       "a run of kvsim replay --replicas: the page draws one engine a run, as replay --html does; "
                       "replay without --replicas for the page, or chart the replicas' totals from kvsim sweep --csv");
    }
    HtmlRun run;
    run.allocator = text(r, "allocator", path, where);
    for (const HtmlRun& other : page.runs) {
      if (other.allocator == run.allocator) {
        throw InputError(Location{path, 0, where + "allocator"},
                         "\"" + printable(run.allocator) + "\" is a run already: replay runs each allocator once");
      }
    }
    // A number of bytes replay counts (not a mean): a whole one.
    const auto bytes = [&](std::initializer_list<const char*> keys, bool optional = false) {
      const double v = amount(keys, optional);
      if (v != std::floor(v)) {
        throw InputError(Location{path, 0, field_of(keys)}, fmt::format("expected a whole number of bytes, got {}", v));
      }
      return to_int(v);
    };
    run.capacity_bytes = bytes({"serving", "capacity_bytes"}, true);
    run.effective_mean = amount({"memory_bytes", "effective_tokens", "mean"});
    run.allocated_mean = amount({"memory_bytes", "allocated_slots", "mean"});
    run.allocated_peak = bytes({"memory_bytes", "allocated_slots", "peak"});
    // Null: unknown (replicas' sum) or no peak; -1 keeps the chart from marking one.
    const bool peak_at_known = r.contains("memory_bytes") && r["memory_bytes"].contains("allocated_slots") &&
                               r["memory_bytes"]["allocated_slots"].contains("peak_at_s") &&
                               !r["memory_bytes"]["allocated_slots"]["peak_at_s"].is_null();
    // A time: seconds from 0 to 2^63 ns, which replay's clock holds.
    const auto instant = [&](std::initializer_list<const char*> keys) {
      const double v = number(r, keys, path);
      if (!(v >= 0 && within_clock(v))) {
        throw InputError(Location{path, 0, field_of(keys)},
                         fmt::format("expected a time from 0 to 2^63 ns (about 292 years), got {}", v));
      }
      return to_ns(v);
    };
    const std::int64_t end_ns = instant({"time", "end_s"});
    run.allocated_peak_at_ns = peak_at_known ? instant({"memory_bytes", "allocated_slots", "peak_at_s"}) : -1;
    if (run.allocated_peak_at_ns > end_ns && !same_time(run.allocated_peak_at_ns, end_ns)) {
      throw InputError(Location{path, 0, field_of({"memory_bytes", "allocated_slots", "peak_at_s"})},
                       fmt::format("{} s is after the run's end, time.end_s {} s", format_seconds(run.allocated_peak_at_ns, 9),
                                   format_seconds(end_ns, 9)));
    }
    run.reserved_peak = bytes({"memory_bytes", "reserved_slots", "peak"});
    if (run.allocated_peak > run.reserved_peak) {
      throw InputError(Location{path, 0, where + "memory_bytes.reserved_slots.peak"},
                       fmt::format("{} is below the allocated peak {}: replay never allocates more than it reserves",
                                   run.reserved_peak, run.allocated_peak));
    }
    const auto part = [&](const char* name) { return amount({"internal_fragmentation_bytes", "mean", name}); };
    run.internal_mean = Fragmentation{part("tail"), part("reservation"), part("padding"), part("duplicate"),
                                      part("outside_window")};
    run.external_fragmentation_mean =
        amount({"external_fragmentation", "free_bytes_outside_largest_extent_mean"}, true);
    // What replay's means hold: effective tokens and each part of internal fragmentation
    // within the allocated slots (a part in a millionth, as the means are time-weighted
    // doubles).
    const double room = run.allocated_mean * (1 + 1e-6) + 1;
    const std::pair<const char*, double> within[] = {
        {"memory_bytes.effective_tokens.mean", run.effective_mean},
        {"internal_fragmentation_bytes.mean.tail", run.internal_mean.tail},
        {"internal_fragmentation_bytes.mean.reservation", run.internal_mean.reservation},
        {"internal_fragmentation_bytes.mean.padding", run.internal_mean.padding},
        {"internal_fragmentation_bytes.mean.duplicate", run.internal_mean.duplicate},
        {"internal_fragmentation_bytes.mean.outside_window", run.internal_mean.outside_window}};
    for (const auto& [name, v] : within) {
      if (v > room) {
        throw InputError(Location{path, 0, where + name},
                         fmt::format("{} is above the allocated mean {}: replay's figures hold it within the "
                                     "allocated slots",
                                     v, run.allocated_mean));
      }
    }
    run.prefix_caching = r.contains("prefix_cache");
    page.runs.push_back(std::move(run));
    // A count: whole, from 0 to 2^63 - 1 (replay's counters are 64-bit integers).
    const auto whole = [&](std::initializer_list<const char*> keys) {
      const double v = number(r, keys, path);
      if (v < 0 || v != std::floor(v) || v >= kTwoTo63) {
        throw InputError(Location{path, 0, field_of(keys)}, fmt::format("expected a count from 0 to 2^63 - 1, got {}", v));
      }
      return to_int(v);
    };
    const RunFacts f{whole({"requests", "total"}), whole({"requests", "completed"}), end_ns, whole({"time", "iterations"})};
    if (f.completed > f.requests) {
      throw InputError(Location{path, 0, field_of({"requests", "completed"})},
                       fmt::format("{} is above requests.total {}", f.completed, f.requests));
    }
    facts.push_back(f);
    page.runs.back().completed = f.completed;
  }
  page.answers = plain_answers(page.runs);
  if (j.contains("warnings") && j["warnings"].is_array()) {
    for (const auto& w : j["warnings"]) {
      if (w.is_string()) page.answers.push_back("Warning: " + w.get<std::string>());
    }
  }
}

// A duration of validate's JSON, seconds: positive (the chart draws simulated / measured),
// and within the 2^63 ns replay's clock holds.
double duration_s(const Json& j, std::initializer_list<const char*> keys, const std::string& path) {
  const double v = number(j, keys, path);
  if (!(v > 0)) {
    throw InputError(Location{path, 0, key_path("", keys)},
                     fmt::format("expected a positive number of seconds, got {}", v));
  }
  if (!within_clock(v)) {
    throw InputError(Location{path, 0, key_path("", keys)},
                     fmt::format("expected at most 2^63 ns (about 292 years), got {} s", v));
  }
  return v;
}

// validate: mean, p50 and p99 of TTFT, TPOT and end-to-end latency, and the makespan.
void read_validate_json(const Json& j, const std::string& path, HtmlPage& page) {
  page.title = "kvsim validate " + text(j, "run", path, "");
  page.comparison_title = "Simulated against measured: " + text(j, "run", path, "");
  if (j.contains("model") && j["model"].is_string()) page.context.push_back("model    " + j["model"].get<std::string>());
  // TPOT in ms, as validate's table and replay's TPOT chart give it; the bars are ratios.
  struct Figure {
    const char* key;
    const char* name;
    const char* unit;
    double scale;
  };
  for (const auto& [key, name, unit, scale] : {Figure{"ttft", "TTFT", "s", 1}, Figure{"tpot", "TPOT", "ms", 1e3},
                                               Figure{"latency", "end to end", "s", 1}}) {
    for (const auto& [stat, stat_name] : {std::pair{"mean_s", "mean"}, std::pair{"p50_s", "p50"}, std::pair{"p99_s", "p99"}}) {
      // A figure with no samples is null on either side: left out.
      const Json& m = j.value(key, Json::object()).value("measured", Json::object());
      const Json& s = j.value(key, Json::object()).value("simulated", Json::object());
      if (!m.contains(stat) || !s.contains(stat) || m[stat].is_null() || s[stat].is_null()) continue;
      // A measured 0 (a run whose first tokens came as it queued them, say) has no ratio to
      // draw, as validate's diff_percent is null for it: left out too.
      if (m[stat].is_number() && m[stat].get<double>() == 0) continue;
      page.comparisons.push_back({fmt::format("{} {}, {}", name, stat_name, unit),
                                  duration_s(j, {key, "measured", stat}, path) * scale,
                                  duration_s(j, {key, "simulated", stat}, path) * scale});
    }
  }
  // Null when nothing completed in the simulation: left out too.
  const Json& makespan = j.value("makespan_s", Json::object());
  if (!makespan.is_object() || !makespan.contains("simulated") || !makespan["simulated"].is_null()) {
    page.comparisons.push_back({"makespan, s", duration_s(j, {"makespan_s", "measured"}, path),
                                duration_s(j, {"makespan_s", "simulated"}, path)});
  }
}

// One CSV line's fields (RFC 4180 quotes, as replay writes "dynamic:growth=chunk,chunk=64"),
// by the splitter sweep merge uses; a CRLF file's '\r' is dropped first.
std::vector<std::string> fields(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return split_csv_line(line);
}

// A CSV whose columns are named in its header, read a row at a time (a 1,000,000-request
// --per-request file is 150 MB); each row's cells are read by name.
class Csv {
 public:
  explicit Csv(std::string path) : path_(std::move(path)), in_(open_input(path_)) {
    std::getline(in_, header_line_);
    if (!header_line_.empty() && header_line_.back() == '\r') header_line_.pop_back();
    header_ = fields(header_line_);
  }
  const std::string& header_line() const { return header_line_; }
  // The next non-empty row; false at the end of the file.
  bool next() {
    std::string line;
    while (std::getline(in_, line)) {
      ++next_line_;
      line_ = next_line_;
      if (line.empty() || line == "\r") continue;
      // A quoted cell may hold a line break (RFC 4180; replay quotes a request id that has
      // one): the row goes on while a quote is open. Errors name the row's first line.
      while (std::count(line.begin(), line.end(), '"') % 2 == 1) {
        std::string more;
        if (!std::getline(in_, more)) {
          throw InputError(Location{path_, line_, ""}, "a quoted field is still open at the end of the file");
        }
        ++next_line_;
        line += '\n';
        line += more;
      }
      row_ = fields(line);
      if (row_.size() != header_.size()) {
        throw InputError(Location{path_, line_, ""}, fmt::format("{} fields, the header has {}", row_.size(), header_.size()));
      }
      return true;
    }
    if (in_.bad()) throw InputError(Location{path_, line_, ""}, "cannot read the file");
    return false;
  }
  std::size_t column(const std::string& name, bool optional = false) const {
    for (std::size_t i = 0; i < header_.size(); ++i) {
      if (header_[i] == name) return i;
    }
    if (optional) return header_.size();
    throw InputError(Location{path_, 1, "column '" + name + "'"}, "missing from the header");
  }
  std::size_t width() const { return header_.size(); }
  const std::string& name(std::size_t column) const { return header_[column]; }
  // A figure no run makes negative (a latency, a rate): a decimal number from 0 to `most`;
  // an error naming file, line and column otherwise.
  double amount(std::size_t column, double most) const {
    const std::string& s = cell(column);
    char* end = nullptr;
    const double v = s.empty() ? 0 : std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v)) {
      throw InputError(Location{path_, line_, field(column)}, "expected a number, got \"" + printable(s) + "\"");
    }
    if (v < 0 || v > most) {
      throw InputError(Location{path_, line_, field(column)}, fmt::format("expected a number from 0 to {}, got {}", most, s));
    }
    return v;
  }
  std::int64_t line() const { return line_; }
  const std::string& cell(std::size_t column) const { return row_[column]; }
  // An integer; an error naming file, line and column otherwise.
  std::int64_t integer(std::size_t column) const {
    const std::string& s = cell(column);
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != s.size()) {
      throw InputError(Location{path_, line_, field(column)}, "expected an integer, got \"" + printable(s) + "\"");
    }
    return v;
  }
  // A count or a number of bytes: an integer, not below 0.
  std::int64_t count(std::size_t column) const {
    const std::int64_t v = integer(column);
    if (v < 0) {
      throw InputError(Location{path_, line_, field(column)}, fmt::format("expected a count, not below 0, got {}", v));
    }
    return v;
  }
  // Decimal seconds as ns, exactly (replay writes nine decimals).
  std::int64_t seconds_ns(std::size_t column) const {
    const std::string& s = cell(column);
    try {
      if (!s.empty() && s.find_first_not_of("0123456789.") == std::string::npos) return parse_duration_ns(s + "s", header_[column]);
    } catch (const InputError&) {
    }
    throw InputError(Location{path_, line_, field(column)}, "expected seconds such as 1.250000000, got \"" + printable(s) + "\"");
  }

  // "column 'name'", as an error names the column.
  std::string field(std::size_t column) const { return "column '" + printable(header_[column]) + "'"; }

 private:
  std::string path_;
  std::ifstream in_;
  std::string header_line_;
  std::vector<std::string> header_;
  std::vector<std::string> row_;
  std::int64_t line_ = 1;       // the current row's first line
  std::int64_t next_line_ = 1;  // the last line read
};

// The index of the run `name` in page.runs.
std::size_t run_named(const HtmlPage& page, const std::string& name, const std::string& path, std::int64_t line) {
  for (std::size_t i = 0; i < page.runs.size(); ++i) {
    if (page.runs[i].allocator == name) return i;
  }
  throw InputError(Location{path, line, "column 'allocator'"},
                   "\"" + printable(name) + "\" is not a run of the replay's --json output given with it");
}

void read_timeline(Csv& csv, const std::string& path, HtmlPage& page, const std::vector<RunFacts>& facts) {
  const std::size_t alloc = csv.column("allocator"), time = csv.column("time_s"), running = csv.column("running"),
                    queued = csv.column("queued"), effective = csv.column("effective_bytes"),
                    allocated = csv.column("allocated_bytes"), reserved = csv.column("reserved_bytes"),
                    max = csv.column("allocated_bytes_max", true), step = csv.column("step"),
                    cached = csv.column("cached_bytes", true);
  // Each run's last row: the state at its end, after its last step (the first is not always
  // at its start: sampled rows close an interval).
  struct Seen {
    std::int64_t rows = 0, last_ns = 0, last_step = 0, last_line = 0;
    std::int64_t allocated_max = 0, peak_line = 0;  // the largest interval maximum, and its row
  };
  std::vector<Seen> seen(page.runs.size());
  while (csv.next()) {
    const std::size_t index = run_named(page, csv.cell(alloc), path, csv.line());
    HtmlRun& run = page.runs[index];
    HtmlPoint p;
    p.time_ns = csv.seconds_ns(time);
    Seen& s = seen[index];
    ++s.rows;
    s.last_ns = p.time_ns;
    s.last_step = csv.count(step);
    s.last_line = csv.line();
    if (!run.timeline.empty() && p.time_ns < run.timeline.back().time_ns) {
      throw InputError(Location{path, csv.line(), "column 'time_s'"},
                       "time goes backwards within the allocator's rows (a timeline's rows are in time order)");
    }
    p.running = csv.count(running);
    p.queued = csv.count(queued);
    p.effective = csv.count(effective);
    p.allocated = csv.count(allocated);
    // Sampled rows carry the interval's maximum; per-step rows (--sample-every step) do not.
    p.allocated_max = max < csv.width() && !csv.cell(max).empty() ? csv.count(max) : p.allocated;
    if (p.allocated_max < p.allocated) {
      throw InputError(Location{path, csv.line(), "column 'allocated_bytes_max'"},
                       fmt::format("{} is below allocated_bytes {}: the interval's maximum holds the state it ends in",
                                   p.allocated_max, p.allocated));
    }
    p.reserved = csv.count(reserved);
    // A prefix cache's evictable bytes (empty for an allocator without one), drawn dashed
    // as replay --html draws them.
    if (cached < csv.width() && !csv.cell(cached).empty()) p.cached = csv.count(cached);
    // No state is above the peaks the --json output gives for its run.
    if (p.allocated_max > run.allocated_peak || p.reserved > run.reserved_peak) {
      const bool allocated_over = p.allocated_max > run.allocated_peak;
      throw InputError(Location{path, csv.line(), allocated_over ? csv.field(max < csv.width() ? max : allocated)
                                                                 : csv.field(reserved)},
                       fmt::format("{} is above the run's {} peak {} in the --json output given with it",
                                   allocated_over ? p.allocated_max : p.reserved,
                                   allocated_over ? "allocated" : "reserved",
                                   allocated_over ? run.allocated_peak : run.reserved_peak));
    }
    // Every state replay writes holds effective <= allocated <= reserved: a row that does
    // not (a block usage above 100%) was not written by it.
    if (p.effective > p.allocated || p.allocated > p.reserved) {
      const bool over_reserved = p.allocated > p.reserved;
      throw InputError(Location{path, csv.line(), over_reserved ? "column 'reserved_bytes'" : "column 'allocated_bytes'"},
                       over_reserved ? fmt::format("{} is below allocated_bytes {}: a timeline's rows hold "
                                                   "effective <= allocated <= reserved", p.reserved, p.allocated)
                                     : fmt::format("{} is below effective_bytes {}: a timeline's rows hold "
                                                   "effective <= allocated <= reserved", p.allocated, p.effective));
    }
    if (p.allocated_max > s.allocated_max) {
      s.allocated_max = p.allocated_max;
      s.peak_line = csv.line();
    }
    add_point(run, p);
  }
  // A sampled timeline closes with the state at the run's end, after its last step; a
  // per-step one (no allocated_bytes_max column) has a row as each step begins, the last
  // step's last (docs/replay.md, "Timeline"). A run that served nothing (every request
  // refused) took no step and has no row; a measured schedule's run takes no step either
  // (iterations 0), and its rows, step 0, end at its end.
  const bool per_step = max == csv.width();
  for (std::size_t i = 0; i < page.runs.size(); ++i) {
    const Seen& s = seen[i];
    const RunFacts& f = facts[i];
    const std::string& name = page.runs[i].allocator;
    if (s.rows == 0) {
      if (f.iterations == 0 && f.completed == 0) continue;
      throw InputError(Location{path, csv.line(), ""},
                       "no row of the run " + name + ": replay's --timeline has every run of its --json output");
    }
    const bool at_end = same_time(s.last_ns, f.end_ns) && s.last_step == f.iterations;
    const bool last_step_began = per_step && s.last_step == f.iterations - 1 && s.last_ns <= f.end_ns;
    if (!at_end && !last_step_began) {
      throw InputError(Location{path, s.last_line, ""},
                       fmt::format("{}'s last row is at {} s (step {}), the run ends at {} s after {} steps by the "
                                   "--json output: a timeline cut short, or of another run",
                                   name, format_seconds(s.last_ns, 9), s.last_step, format_seconds(f.end_ns, 9),
                                   f.iterations));
    }
    // Sampled rows keep every interval's maximum, so the largest is the run's peak: a
    // timeline of the same schedule but other bytes (another dtype, another budget's cache)
    // is not this run's.
    if (!per_step && s.allocated_max != page.runs[i].allocated_peak) {
      throw InputError(Location{path, s.peak_line, "column 'allocated_bytes_max'"},
                       fmt::format("{}'s largest allocated_bytes_max is {}, but its allocated peak in the --json output "
                                   "is {}: the timeline of another run",
                                   name, s.allocated_max, page.runs[i].allocated_peak));
    }
  }
}

void read_per_request(Csv& csv, const std::string& path, HtmlPage& page, const std::vector<RunFacts>& facts) {
  const std::size_t alloc = csv.column("allocator"), outcome = csv.column("outcome"), ttft = csv.column("ttft_s"),
                    tpot = csv.column("tpot_s"), e2e = csv.column("e2e_s"), ordinal = csv.column("ordinal"),
                    output_tokens = csv.column("output_tokens");
  // Each run's requests by ordinal (1..requests, each once), with the line that gave each,
  // and its completed ones. Kept as the rows come rather than as a bitmap of the --json
  // output's count, which is only a number in a file until the rows bear it out.
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> seen(page.runs.size());
  std::vector<std::int64_t> completed(page.runs.size(), 0);
  while (csv.next()) {
    const std::size_t index = run_named(page, csv.cell(alloc), path, csv.line());
    HtmlRun& run = page.runs[index];
    const std::int64_t k = csv.count(ordinal);
    if (k < 1 || k > facts[index].requests) {
      throw InputError(Location{path, csv.line(), "column 'ordinal'"},
                       fmt::format("{} is not a request of {}: the --json output has {} requests", k, run.allocator,
                                   facts[index].requests));
    }
    seen[index].emplace_back(k, csv.line());
    const std::string& o = csv.cell(outcome);
    if (o == "cancelled" || o == "refused") continue;
    if (o != "completed") {
      throw InputError(Location{path, csv.line(), "column 'outcome'"},
                       "expected completed, cancelled or refused, got \"" + printable(o) + "\"");
    }
    ++completed[index];
    // A completed request has an end, and a first token no later than the end unless it
    // generated none (0 output tokens: ttft_s empty); TPOT only with two or more tokens.
    const std::int64_t end_ns = csv.seconds_ns(e2e);
    run.e2e_ns.push_back(end_ns);
    if (csv.cell(ttft).empty() && csv.cell(output_tokens) == "0") continue;
    const std::int64_t first_ns = csv.seconds_ns(ttft);
    if (first_ns > end_ns) {
      throw InputError(Location{path, csv.line(), "column 'ttft_s'"},
                       fmt::format("{} s is after e2e_s {} s: a request's first token comes before its end",
                                   csv.cell(ttft), csv.cell(e2e)));
    }
    run.ttft_ns.push_back(first_ns);
    if (!csv.cell(tpot).empty()) run.tpot_ns.push_back(csv.seconds_ns(tpot));
  }
  for (std::size_t i = 0; i < page.runs.size(); ++i) {
    // A request given twice: named at the first row that repeats one.
    std::sort(seen[i].begin(), seen[i].end());
    std::int64_t repeat_line = 0, repeated = 0;
    for (std::size_t k = 1; k < seen[i].size(); ++k) {
      if (seen[i][k].first == seen[i][k - 1].first && (repeat_line == 0 || seen[i][k].second < repeat_line)) {
        repeat_line = seen[i][k].second;
        repeated = seen[i][k].first;
      }
    }
    if (repeat_line != 0) {
      throw InputError(Location{path, repeat_line, "column 'ordinal'"},
                       fmt::format("request {} of {} a second time: replay writes a row per request", repeated,
                                   page.runs[i].allocator));
    }
    const auto rows = static_cast<std::int64_t>(seen[i].size());
    if (rows != facts[i].requests || completed[i] != facts[i].completed) {
      throw InputError(Location{path, csv.line(), ""},
                       fmt::format("{} rows of {} ({} completed), the --json output has {} requests ({} completed): "
                                   "a file cut short, or of another run",
                                   rows, page.runs[i].allocator, completed[i], facts[i].requests, facts[i].completed));
    }
  }
}

// A number as an axis value: the whole text, finite; else none.
std::optional<double> axis_number(const std::string& s) {
  char* end = nullptr;
  const double v = s.empty() ? 0 : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// kvsim sweep --csv: the peak of allocated slots, TTFT p99 and throughput against the first
// axis whose every value is a number, a line per allocator and values of the other axes.
void read_sweep(Csv& csv, const std::string& path, HtmlPage& page) {
  // Whole, as sweep merge checks its parts: every point once, each with all its rows, of one
  // grid; a shard alone, a file cut short or rows doubled are refused there, naming the line.
  merge_sweep_parts({path}, SweepFileKind::csv);
  constexpr std::size_t kLeading = 4;  // point, points, grid, point_rows; then the axes
  const std::size_t alloc = csv.column("allocator"), peak = csv.column("allocated_bytes_peak"),
                    reserved = csv.column("reserved_bytes_peak"), ttft = csv.column("ttft_p99_s"),
                    tput = csv.column("generated_tokens_per_s");
  if (alloc <= kLeading) throw InputError(Location{path, 1, ""}, "a sweep without an axis column: nothing varies");
  struct Row {
    std::vector<std::string> axes;
    std::string allocator;
    double peak_gib = 0, tokens_per_s = 0;
    std::optional<double> ttft_s;
  };
  // With --replicas a row per replica, then their total: the totals are what the points
  // compare (a replica's row is its own engine's share).
  const std::size_t replica = csv.column("replica", true);
  std::vector<Row> rows;
  while (csv.next()) {
    if (replica < csv.width() && !csv.cell(replica).empty()) continue;
    Row r;
    for (std::size_t a = kLeading; a < alloc; ++a) r.axes.push_back(csv.cell(a));
    r.allocator = csv.cell(alloc);
    if (csv.count(peak) > csv.count(reserved)) {
      throw InputError(Location{path, csv.line(), "column 'reserved_bytes_peak'"},
                       fmt::format("{} is below allocated_bytes_peak {}: replay never allocates more than it reserves",
                                   csv.count(reserved), csv.count(peak)));
    }
    r.peak_gib = static_cast<double>(csv.count(peak)) / static_cast<double>(kBytesPerGiB);
    // Within what replay's 64-bit clock (ns) and counters hold.
    r.tokens_per_s = csv.amount(tput, kTwoTo63);
    if (!csv.cell(ttft).empty()) r.ttft_s = csv.amount(ttft, kTwoTo63 / 1e9);
    rows.push_back(std::move(r));
  }
  std::size_t x = alloc;
  for (std::size_t a = kLeading; a < alloc && x == alloc; ++a) {
    if (std::all_of(rows.begin(), rows.end(), [&](const Row& r) { return axis_number(r.axes[a - kLeading]).has_value(); })) {
      x = a;
    }
  }
  if (x == alloc) {
    throw InputError(Location{path, 1, ""}, "no axis whose values are all numbers: nothing to draw the figures against");
  }
  // The option's name: sweep names the column "replicas_option" where replay's rows have a
  // "replicas" column of their own (sweep_run.cc, axis_column()).
  std::string axis = csv.name(x);
  if (axis.ends_with("_option")) axis.resize(axis.size() - std::string_view("_option").size());
  if (page.title.empty()) page.title = "kvsim sweep " + path;
  const auto chart = [&](const std::string& name, const std::string& title, const std::string& y_label, auto get) {
    HtmlSweepChart c{name, title + " against " + axis, axis, y_label, {}};
    for (const Row& r : rows) {
      const std::optional<double> y = get(r);
      if (!y) continue;
      std::string label = r.allocator;
      for (std::size_t a = kLeading; a < alloc; ++a) {
        if (a != x) label += ", " + csv.name(a) + "=" + r.axes[a - kLeading];
      }
      auto at = std::find_if(c.series.begin(), c.series.end(), [&](const HtmlSweepSeries& s) { return s.label == label; });
      if (at == c.series.end()) at = c.series.insert(c.series.end(), HtmlSweepSeries{label, {}});
      at->points.emplace_back(*axis_number(r.axes[x - kLeading]), *y);
    }
    // A line joins the points in the order of x, whatever the grid's order (--vary 2,0.5,1).
    for (HtmlSweepSeries& series : c.series) {
      std::stable_sort(series.points.begin(), series.points.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
    }
    page.sweep.push_back(std::move(c));
  };
  chart("sweep-peak", "Allocated slots, peak", "GiB (2^30 bytes)", [](const Row& r) { return std::optional<double>(r.peak_gib); });
  chart("sweep-ttft", "TTFT p99", "TTFT p99, s", [](const Row& r) { return r.ttft_s; });
  chart("sweep-throughput", "Throughput", "generated tokens/s",
        [](const Row& r) { return std::optional<double>(r.tokens_per_s); });
}

// A JSON object with a sweep's leading keys: a line of sweep --jsonl, which is not read.
void refuse_sweep_jsonl(const Json& line, const std::string& path) {
  if (line.is_object() && line.contains("point") && line.contains("grid") && line.contains("point_rows")) {
    throw InputError(Location{path, 0, ""},
                     "kvsim sweep --jsonl output, which the report does not read: give the sweep's --csv output");
  }
}

}  // namespace

int run_report(const Invocation& inv) {
  po::options_description options("Output");
  options.add_options()("html", po::value<std::string>(),
                        "write the HTML report to this file (required; - for standard output)");
  po::options_description hidden;
  hidden.add_options()("input", po::value<std::vector<std::string>>());
  po::positional_options_description positional;
  positional.add("input", -1);
  po::variables_map vm;
  if (!parse_options(inv, kSpec, options, positional, vm, &hidden)) return kExitOk;
  const auto inputs = vm.count("input") ? vm["input"].as<std::vector<std::string>>() : std::vector<std::string>{};
  if (inputs.empty()) throw UsageError("at least one input is required\nUsage: " + kSpec.synopsis);
  const auto out = option_text(vm, "html");
  if (!out) throw UsageError("--html FILE is required: the report is written there\nUsage: " + kSpec.synopsis);
  refuse_output_over_input({{"--html", *out}}, inputs, kSpec.synopsis, *out == "-");

  // The JSON first (the CSVs' rows attach to its runs), whatever the order given.
  HtmlPage page;
  std::vector<RunFacts> facts;  // one per run of replay's JSON
  bool replay_json = false, validate_json = false, timeline = false, per_request = false;
  std::vector<std::string> csvs;
  for (const auto& path : inputs) {
    if (path == "-") {
      throw InputError(Location{"standard input", 0, ""},
                       "not read: report tells its inputs apart by their content, so give each as a file (save "
                       "replay's or validate's output first)");
    }
    // JSON opens with '{' (or '[', which no kvsim output does: refused below as JSON, not
    // misread as a CSV); anything else is read as CSV, a row at a time, once the JSON is in.
    char first = 0;
    bool any = false;
    {
      std::ifstream in = open_input(path);
      while (in.get(first)) {
        if (!std::isspace(static_cast<unsigned char>(first))) {
          any = true;
          break;
        }
      }
    }
    if (!any) {
      throw InputError(Location{path, 0, ""}, "empty: not an output of kvsim replay, validate or sweep");
    }
    if (first != '{' && first != '[') {
      csvs.push_back(path);
      continue;
    }
    const std::string text = read_input(path);
    Json j;
    try {
      j = Json::parse(text);
    } catch (const Json::exception& e) {  // a syntax error, or a number beyond a double (1e400)
      refuse_sweep_jsonl(Json::parse(text.substr(0, text.find('\n')), nullptr, false), path);
      throw InputError(Location{path, 0, ""}, std::string("not valid JSON: ") + e.what());
    }
    // After the parse, which stops at a NUL byte: an error before the byte is reported first.
    refuse_nul_bytes(text, Location{path, 0, ""});
    const bool is_replay = j.is_object() && j.contains("runs") && j["runs"].is_array();
    const bool is_validate = !is_replay && j.is_object() && j.contains("makespan_s") && j.contains("ttft");
    if (!is_replay && !is_validate) {
      refuse_sweep_jsonl(j, path);  // a sweep of one row is one JSON object
      throw InputError(Location{path, 0, ""}, "JSON that is neither 'kvsim replay --json' nor 'kvsim validate --json' output");
    }
    if (replay_json || validate_json) throw InputError(Location{path, 0, ""}, "a second JSON output: give one");
    if (is_replay) {
      read_replay_json(j, path, page, facts);
      replay_json = true;
    } else {
      read_validate_json(j, path, page);
      validate_json = true;
    }
  }
  for (const auto& path : csvs) {
    Csv csv(path);
    const std::string& header = csv.header_line();
    if (header.rfind("point,points,grid,", 0) == 0) {
      // A sweep's page is its own: a replay's or validate's outputs are of one run, not of it.
      if (inputs.size() != 1) {
        throw InputError(Location{path, 0, ""}, "a sweep CSV is read on its own: give no other output beside it");
      }
      read_sweep(csv, path, page);
      continue;
    }
    const bool is_timeline = header.rfind("allocator,time_s,", 0) == 0;
    const bool is_per_request = header.rfind("allocator,id,ordinal,", 0) == 0;
    // kvsim's other CSVs, named, so that the message says what to give instead.
    const bool validate_csv = header.rfind("t_s,measured_running,", 0) == 0 ||
                              (is_per_request && header.find(",measured_ttft_s,") != std::string::npos);
    if (validate_csv) {
      throw InputError(Location{path, 0, ""},
                       "validate's --per-request or --per-tick CSV, which the page does not draw: give its --json "
                       "output alone");
    }
    if (header.rfind("allocator,requests,completed,", 0) == 0 ||
        header.rfind("allocator,replicas,replica,requests,completed,", 0) == 0) {
      throw InputError(Location{path, 0, ""},
                       "replay's --csv summary, which the page does not draw: give its --json output (with its "
                       "--timeline and --per-request CSVs for the charts over time and the CDFs)");
    }
    if (!is_timeline && !is_per_request) {
      throw InputError(Location{path, 1, ""},
                       "not an output of kvsim replay, validate or sweep: neither JSON nor a --timeline, --per-request "
                       "or sweep CSV (its first line starts \"" +
                           printable(header.substr(0, 40)) + "\")");
    }
    if (!replay_json) {
      throw InputError(Location{path, 0, ""}, "a CSV needs the 'kvsim replay --json' output of the same run beside it");
    }
    // One of each: replay writes every run's rows to one file.
    const auto once = [&](bool& given, const char* what) {
      if (given) throw InputError(Location{path, 0, ""}, std::string("a second ") + what + " CSV: give the replay's one");
      given = true;
    };
    if (is_timeline) {
      once(timeline, "--timeline");
      read_timeline(csv, path, page, facts);
    } else {
      once(per_request, "--per-request");
      read_per_request(csv, path, page, facts);
    }
  }
  write_output_file(*out, render_html(page), inputs);
  return kExitOk;
}

}  // namespace kvsim::cli
