// Running the points of a sweep (sweep_run.h).
#include "json_text.h"
#include "sweep_run.h"

#include <fmt/core.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kvsim/error.h"
#include "kvsim/replicas.h"
#include "kvsim/trace.h"
#include "kvsim/trace_writer.h"
#include "model_options.h"

namespace kvsim::cli {
namespace {

// The name of an axis's column: the option's, unless replay's rows have one of that name.
std::string axis_column(const std::string& name) {
  static const std::vector<std::string> taken = [] {
    std::vector<std::string> names = split_csv_line(replay_csv_header(CsvShape{true, true, true}));
    const nlohmann::ordered_json run = replay_run_json(ReplayReport{});
    for (auto it = run.begin(); it != run.end(); ++it) names.push_back(it.key());
    names.insert(names.end(), {"point", "points", "grid", "point_rows", "warnings"});
    return names;
  }();
  return std::find(taken.begin(), taken.end(), name) != taken.end() ? name + "_option" : name;
}

bool is_switch(const po::options_description& desc, const std::string& name) {
  return desc.find(name, false).semantic()->max_tokens() == 0;
}

// Checks the axes against replay's options and the fixed ones.
void check_axes(const std::vector<SweepAxis>& axes, const po::options_description& replay_desc,
                const po::variables_map& vm) {
  for (std::size_t k = 0; k < axes.size(); ++k) {
    const SweepAxis& axis = axes[k];
    const Location where{axis.file, axis.line, axis.file.empty() ? "--vary" : axis.name};
    const std::string flag = "--" + axis.name;
    for (std::size_t j = 0; j < k; ++j) {
      if (axes[j].name == axis.name) throw InputError(where, flag + " is varied twice: give all its values in one axis");
    }
    // Replay's output options are those its full list has beyond replay_desc.
    if (replay_desc.find_nothrow(axis.name, false) == nullptr &&
        replay_option_descriptions(true).find_nothrow(axis.name, false) != nullptr) {
      throw InputError(where, flag + " shapes one replay's output; a sweep writes its own (--csv, --jsonl)");
    }
    if (replay_desc.find_nothrow(axis.name, false) == nullptr) {
      throw InputError(where, flag + " is not an option of kvsim replay (see 'kvsim replay --help'; give its long "
                                     "name without the dashes)");
    }
    if (given(vm, axis.name)) {
      throw InputError(where, flag + " is both given and varied: drop one");
    }
    if (is_switch(replay_desc, axis.name)) {
      for (const auto& v : axis.values) {
        if (v != "on" && v != "off") {
          throw InputError(where, flag + " is a switch: vary it over on and off, got \"" + printable(v) + "\"");
        }
      }
    }
  }
}

// The sweep's identity in its rows: the fixed replay options, the trace's file name, the axes.
std::string grid_text(const po::variables_map& vm, const po::options_description& replay_desc,
                      const std::string& trace_path, const std::vector<SweepAxis>& axes) {
  std::string text;
  for (const auto& [name, value] : vm) {
    if (value.defaulted() || replay_desc.find_nothrow(name, false) == nullptr) continue;
    const auto* s = boost::any_cast<std::string>(&value.value());
    text += name + "=" + (s != nullptr ? *s : std::string("on")) + "\n";
  }
  // The trace by its name and its bytes: parts run on copies of one trace share the grid
  // wherever the copies are, parts run on another trace of the same name do not. A pipe is
  // read once, by the replay, so it goes by its name alone.
  text += "trace=" + std::filesystem::path(trace_path).filename().string();
  if (!trace_path.empty() && trace_can_be_reread(trace_path)) {
    std::ifstream in(trace_path, std::ios::binary);
    if (in.is_open()) {  // else the replay says why it cannot read it
      Fingerprint bytes;
      std::vector<char> buffer(1 << 16);
      while (in.read(buffer.data(), static_cast<std::streamsize>(buffer.size())) || in.gcount() > 0) {
        bytes.add(std::string_view(buffer.data(), static_cast<std::size_t>(in.gcount())));
      }
      if (!in.bad()) text += " " + bytes.hex();
    }
  }
  text += "\n";
  for (const auto& axis : axes) {
    text += "vary " + axis.name;
    for (const auto& v : axis.values) text += "\x1f" + v;
    text += "\n";
  }
  return text;
}

}  // namespace

SweepSetup::SweepSetup(const po::variables_map& vm, std::vector<SweepAxis> axes)
    : replay_desc_(replay_option_descriptions(false)), base_(vm), grid_(std::move(axes)) {
  check_axes(grid_.axes(), replay_desc_, base_);
  const auto trace = option_text(base_, "trace");
  trace_path_ = trace ? *trace : std::string();
  for (const auto& axis : grid_.axes()) columns_.push_back(axis_column(axis.name));
  // A letter first: 16 hex digits may read as a number in pandas (1434e25282187733 is 1.4e28).
  grid_id_ = "g" + grid_fingerprint(grid_text(base_, replay_desc_, trace_path_, grid_.axes()));
}

po::variables_map SweepSetup::point_options(std::int64_t p) const {
  po::variables_map vm = base_;
  std::vector<std::string> tokens;
  const auto values = grid_.values_at(p);
  for (std::size_t k = 0; k < values.size(); ++k) {
    const std::string& name = grid_.axes()[k].name;
    if (!is_switch(replay_desc_, name)) tokens.push_back("--" + name + "=" + values[k]);
    else if (values[k] == "on") tokens.push_back("--" + name);
  }
  try {
    po::store(po::command_line_parser(tokens)
                  .options(replay_desc_)
                  .style(po::command_line_style::default_style & ~po::command_line_style::allow_guessing)
                  .run(),
              vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + "\nUsage: " + current_synopsis());
  }
  return vm;
}

ReplayPlan SweepSetup::plan_point(std::int64_t p) const {
  try {
    return plan_replay(point_options(p), PlanScope::allocators);
  } catch (const InputError& e) {
    // A value from a spec file is named by its file and line.
    for (const auto& axis : grid_.axes()) {
      if (e.where().file.empty() && !axis.file.empty() && e.where().field == "--" + axis.name) {
        throw InputError(Location{axis.file, axis.line, e.where().field}, e.problem());
      }
    }
    // A value refused at one point of the grid: say which point.
    for (const auto& axis : grid_.axes()) {
      if (e.where().file.empty() && e.where().field == "--" + axis.name) {
        const auto values = grid_.values_at(p);
        std::string label;
        for (std::size_t k = 0; k < values.size(); ++k) {
          label += (k == 0 ? "" : ", ") + grid_.axes()[k].name + "=" + values[k];
        }
        throw InputError(e.where(), e.problem() + " (at point " + std::to_string(p) + ": " + label + ")");
      }
    }
    throw;
  }
}

std::string SweepSetup::csv_header(const CsvShape& shape) const {
  std::string out = "point,points,grid,point_rows";
  // Appended in pieces: GCC 12 at -O3 warns falsely (-Wrestrict) on "," + a temporary.
  for (const auto& c : columns_) {
    out += ',';
    out += csv_cell(c);
  }
  out += ',';
  return out += replay_csv_header(shape);
}

std::string SweepSetup::csv_row(std::int64_t p, std::int64_t point_rows, const CsvShape& shape,
                                const ReplayReport& report) const {
  std::string out = fmt::format("{},{},{},{}", p, grid_.points(), grid_id_, point_rows);
  for (const auto& v : grid_.values_at(p)) {
    out += ',';
    out += csv_cell(v);
  }
  out += ',';
  return out += replay_csv_row(shape, report);
}

std::string SweepSetup::jsonl_row(std::int64_t p, std::int64_t point_rows, const CsvShape& shape,
                                  const ReplayReport& report, const std::vector<std::string>& warnings) const {
  nlohmann::ordered_json row;
  row["point"] = p;
  row["points"] = grid_.points();
  row["grid"] = grid_id_;
  row["point_rows"] = point_rows;
  const auto values = grid_.values_at(p);
  for (std::size_t k = 0; k < values.size(); ++k) row[columns_[k]] = values[k];
  // A grid that varies --replicas gives one engine's run the keys the others have.
  const nlohmann::ordered_json run = replay_run_json(report, shape.replicas);
  for (auto it = run.begin(); it != run.end(); ++it) row[it.key()] = *it;
  if (!warnings.empty()) row["warnings"] = warnings;
  return json_text(row, -1);
}

void TraceCache::note(const TraceOptions& o) {
  const auto [it, first] = extents_.try_emplace(extent_key(o), Extent{o.window_from_ns, o.window_to_ns, o.max_requests});
  if (first) return;
  Extent& e = it->second;
  e.counted = e.counted && o.window_from_ns == e.from_ns && o.max_requests > 0 && e.max_requests > 0;
  e.from_ns = std::min(e.from_ns, o.window_from_ns);
  e.to_ns = std::max(e.to_ns, o.window_to_ns);
  e.max_requests = std::max(e.max_requests, o.max_requests);
}

bool TraceCache::covers(const Extent& e, const TraceOptions& o) {
  return o.window_from_ns >= e.from_ns && o.window_to_ns <= e.to_ns &&
         (e.max_requests == 0 || (o.window_from_ns == e.from_ns && o.max_requests > 0 && o.max_requests <= e.max_requests));
}

const TraceInMemory& TraceCache::read(const std::string& path, const TraceOptions& options) {
  // A read that does not cover these options (noted after it: plan's later points) is read
  // again, as widely as now noted, and replaces it.
  if (const auto* found = find(options)) return *found;
  const bool rereadable = trace_can_be_reread(path);
  if (!traces_.empty() && !rereadable) {
    throw InputError(Location{path, 0, ""}, "the points read this trace in different ways (format, sort, rate, seed "
                                            "or prefix block size), and a pipe or FIFO can be read once: save it to "
                                            "a file first");
  }
  TraceOptions parse = options;
  const TraceOptions whole;
  parse.rate_scale_ppb = whole.rate_scale_ppb;
  // As widely as noted, when noted (a read not noted first is a whole one).
  Extent extent{whole.window_from_ns, whole.window_to_ns, 0, true};
  if (const auto it = extents_.find(extent_key(options)); rereadable && it != extents_.end()) {
    Extent noted = it->second;
    if (!noted.counted) noted.max_requests = 0;
    if (covers(noted, options)) extent = noted;
  }
  parse.window_from_ns = extent.from_ns;
  parse.window_to_ns = extent.to_ns;
  parse.max_requests = extent.max_requests;
  auto reader = open_trace(path, parse);
  auto memory = std::make_shared<const TraceInMemory>(*reader);
  if (options.format == TraceFormat::automatic && !detected_) detected_ = reader->format();
  Read& r = traces_[key(options)];
  r.trace = memory;
  r.extent = extent;
  return *memory;
}

const TraceInMemory* TraceCache::find(const TraceOptions& options) const {
  if (options.format == TraceFormat::automatic && !detected_) return nullptr;
  const auto it = traces_.find(key(options));
  return it == traces_.end() || !covers(it->second.extent, options) ? nullptr : it->second.trace.get();
}

std::string TraceCache::key(const TraceOptions& o) const {
  const TraceFormat format = o.format == TraceFormat::automatic && detected_ ? *detected_ : o.format;
  // Prefix hashes are computed from token ids only: other formats read the same at any block size.
  const std::int64_t hash = format == TraceFormat::token_ids ? o.hash_block_tokens : 0;
  return fmt::format("{}|{}|{}|{:a}|{}|{}|{}", trace_format_name(format), o.sort, o.keep_failed,
                     o.synthetic_rate_per_s, o.synthetic_seed, hash, o.max_errors);
}

// As key(), with the format as the points give it (before detection), and the prefix block
// size whatever the format: every point that read() will file under one key is noted under
// one extent key (two extents for one read only narrow nothing: the first read serves both).
std::string TraceCache::extent_key(const TraceOptions& o) {
  return fmt::format("{}|{}|{}|{:a}|{}|{}|{}", trace_format_name(o.format), o.sort, o.keep_failed,
                     o.synthetic_rate_per_s, o.synthetic_seed, o.hash_block_tokens, o.max_errors);
}

PointRun run_point(const SweepSetup& setup, const TraceCache& cache, std::int64_t p,
                   const std::function<void(double)>& progress) {
  ReplayPlan plan = setup.plan_point(p);
  const TraceOpener open = [&cache](const TraceOptions& o) {
    const TraceInMemory* memory = cache.find(o);
    check(memory != nullptr, "kvsim sweep: a point's trace was not read before the replays");
    return memory->open(o);
  };
  PointRun run;
  if (plan.replicas > 1) {
    run.reports = run_replicas(plan, open);
  } else {
    const std::size_t runs = plan.allocators.size();
    for (std::size_t i = 0; i < runs; ++i) {
      ReplayOptions options = plan.options;
      if (progress) {
        options.progress = [&progress, i, runs](double f) {
          progress((static_cast<double>(i) + f) / static_cast<double>(runs));
        };
      }
      auto trace = open(trace_options_for(plan, *plan.allocators[i]));
      run.reports.push_back(replay(*trace, *plan.allocators[i], options));
    }
  }
  for (const ReplayReport& r : run.reports) run.warnings.push_back(run_warnings(plan.options.layout, r, true));
  if (plan.timing_device_budget && !run.warnings.empty()) {
    if (auto w = timing_device_warning(run.reports, plan.options.cost.device, plan.timing_device_budget->kv_budget_bytes)) {
      run.warnings.front().push_back(std::move(*w));
    }
  }
  return run;
}

CsvShape prepare_points(const SweepSetup& setup, TraceCache& cache) {
  CsvShape shape;
  // Every point's plan first (a bad value fails before anything is read), and every way the
  // points read the trace, so that each read goes as far as the widest of them needs.
  struct Reading {
    std::int64_t point;
    TraceOptions options;
  };
  std::vector<Reading> readings;
  for (std::int64_t p = 0; p < setup.grid().points(); ++p) {
    ReplayPlan plan = setup.plan_point(p);
    shape.replicas = shape.replicas || plan.replicas > 1;
    std::vector<const Allocator*> runs;
    for (const auto& a : plan.allocators) runs.push_back(a.get());
    for (const auto& group : plan.replica_allocators) runs.push_back(group.front().get());
    for (const Allocator* a : runs) {
      shape.placement = shape.placement || a->pool().places_reservations;
      shape.sharing = shape.sharing || a->prefix_block_tokens() > 0;
      readings.push_back({p, trace_options_for(plan, *a)});
      cache.note(readings.back().options);
    }
  }
  for (const Reading& r : readings) {
    const TraceInMemory& trace = cache.read(setup.trace_path(), r.options);
    reject_unused_trace_options(given_trace_options(setup.point_options(r.point)), trace.open()->format());
  }
  return shape;
}

}  // namespace kvsim::cli
