// Running the points of a sweep: each point is `kvsim replay` with the sweep's fixed options
// and the point's values parsed on top by replay's own parser (replay_plan.h), so a point's
// errors are replay's. Used by `kvsim sweep` (a grid) and `kvsim plan` (a search along one
// axis).
#ifndef KVSIM_SRC_CLI_SWEEP_RUN_H_
#define KVSIM_SRC_CLI_SWEEP_RUN_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "kvsim/replay.h"
#include "kvsim/trace.h"
#include "replay_output.h"
#include "replay_plan.h"
#include "sweep.h"

namespace kvsim::cli {

// The fixed options (a parsed command line holding replay's options and "trace") and the
// grid over them.
class SweepSetup {
 public:
  // Checks the axes: each a replay option (not one of its output options), varied once, not
  // also given as a fixed option; a switch varied over on and off. InputError naming --vary
  // (or the spec file's line) otherwise.
  SweepSetup(const po::variables_map& vm, std::vector<SweepAxis> axes);

  const SweepGrid& grid() const { return grid_; }
  const std::string& trace_path() const { return trace_path_; }
  // The axes' column names: the option's name, or name + "_option" where replay's rows
  // already have a column or key of that name (allocator, requests, schedule).
  const std::vector<std::string>& columns() const { return columns_; }
  const std::string& grid_id() const { return grid_id_; }

  // The options of point p: the fixed ones with the point's values parsed on top.
  po::variables_map point_options(std::int64_t p) const;
  // plan_replay(point_options(p)) without opening the trace. A bad value from a spec file is
  // reported at the file's line.
  ReplayPlan plan_point(std::int64_t p) const;

  // The rows: point, points, grid, point_rows (the rows point p has: one per run), the axes'
  // values, then replay's CSV columns or JSON run.
  std::string csv_header(const CsvShape& shape) const;
  std::string csv_row(std::int64_t p, std::int64_t point_rows, const CsvShape& shape, const ReplayReport& report) const;
  // `warnings` as replay's JSON carries them: a "warnings" key only when there are any.
  std::string jsonl_row(std::int64_t p, std::int64_t point_rows, const CsvShape& shape, const ReplayReport& report,
                        const std::vector<std::string>& warnings) const;

 private:
  po::options_description replay_desc_;
  po::variables_map base_;
  SweepGrid grid_;
  std::string trace_path_;
  std::vector<std::string> columns_;
  std::string grid_id_;
};

// The trace, read once per distinct way the points parse it (format, sort, rate, seed, and
// the prefix block size for token-id traces) and kept in memory; load scaling is applied on
// top per point. A file is read only as far as the points' --time-window and --requests need:
// note() every way a point will read it first, and each read() stops where the widest of
// them does (the latest window end; the largest count, when every point counts from the same
// window start). Both keep the trace's own times, so a point's own window and count, applied
// again on top, select what they would from the whole file. A pipe, which can be read once,
// is read whole. note() and read() run on one thread before the replays; find() on any.
class TraceCache {
 public:
  void note(const TraceOptions& options);
  const TraceInMemory& read(const std::string& path, const TraceOptions& options);
  const TraceInMemory* find(const TraceOptions& options) const;

 private:
  // The widest window and count noted for one way of parsing (extent_key()).
  struct Extent {
    std::int64_t from_ns = 0;
    std::int64_t to_ns = 0;
    std::int64_t max_requests = 0;  // 0: no count bounds the read
    bool counted = true;            // every point noted counts from the same window start
  };
  // Whether a trace read with `e` holds every request `o`'s window and count select.
  static bool covers(const Extent& e, const TraceOptions& o);
  std::string key(const TraceOptions& options) const;
  static std::string extent_key(const TraceOptions& options);
  struct Read {
    std::shared_ptr<const TraceInMemory> trace;
    Extent extent;  // what it was read with
  };
  std::map<std::string, Read> traces_;
  std::map<std::string, Extent> extents_;
  std::optional<TraceFormat> detected_;
};

// Plans every point of the grid (so a bad value fails before any replay), reads the trace
// into `cache` as the points need it, and returns the CSV columns the whole grid needs.
CsvShape prepare_points(const SweepSetup& setup, TraceCache& cache);

// A point replayed: one report per allocator, or per replica and total with --replicas, and
// each report's warnings (replay's: every request refused, a budget that cannot hold one
// request, an overloaded device).
struct PointRun {
  std::vector<ReplayReport> reports;
  std::vector<std::vector<std::string>> warnings;  // one list per report
};

// Replays point p. `progress` (may be empty) gets the point's fraction done.
PointRun run_point(const SweepSetup& setup, const TraceCache& cache, std::int64_t p,
                   const std::function<void(double)>& progress);

}  // namespace kvsim::cli

#endif  // KVSIM_SRC_CLI_SWEEP_RUN_H_
