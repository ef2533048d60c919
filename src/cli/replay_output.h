// How `kvsim replay` presents its results: a side-by-side table for people, JSON with
// everything for programs, and flat CSV rows and a timeline that pandas loads as they are.
#ifndef KVSIM_SRC_CLI_REPLAY_OUTPUT_H_
#define KVSIM_SRC_CLI_REPLAY_OUTPUT_H_

#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "html_report.h"
#include "kvsim/model.h"
#include "kvsim/output_file.h"
#include "kvsim/replay.h"

namespace kvsim::cli {

// What the runs had in common.
struct ReplayContext {
  std::string trace;
  std::string model_name;
  std::string model_source;
  std::string kv_dtype;
  std::string placement;        // "tp 1, pp 1 (per device)"
  KvLayout layout;
  std::string budget;           // "none (demand)" or a description
  std::string scheduler;        // batching settings, for the record
  CostModel cost;               // the iteration cost model's coefficients
  // Demand mode: the timing device and the KV budget it would give (0: none known).
  std::string timing_device;
  std::int64_t timing_device_kv_bytes = 0;
};

std::string replay_table(const ReplayContext& context, const std::vector<ReplayReport>& reports);
std::string replay_json(const ReplayContext& context, const std::vector<ReplayReport>& reports);
// What `kvsim replay --help` says about reading its figures: block-level usage in demand mode,
// swapped in against swapped out, the warnings.
std::string replay_figures_help();
// Why a run refused the requests it did, "2 longer than the maximum length of 20 tokens, 1
// never fit the capacity of 6,291,456 bytes even alone" ("" when it refused none).
std::string refusal_causes(const ReplayReport& report, std::int64_t max_model_len);
// A run's name for people (tables, warnings, pages): its allocator, and for a run of
// --replicas "[replica k: R routed]" or, for their total, "[N replicas]". CSV and JSON keep
// the allocator as it is and give the replica in fields of their own.
std::string run_name(const ReplayReport& report);
// Demand mode: when the traffic's effective tokens peak above the KV budget `kv_bytes` of
// `device`, whose times the run assumes, one sentence saying so (nothing when kv_bytes <= 0).
std::optional<std::string> timing_device_warning(const std::vector<ReplayReport>& reports, const std::string& device,
                                                 std::int64_t kv_bytes);
// What went wrong in one run, one sentence each: every request refused, a budget that cannot
// hold one request, placement without a budget, reserve=max-tokens without max_tokens, a
// prefix cache on a trace without prefix identity, and (with `overload`) an overloaded device.
std::vector<std::string> run_warnings(const KvLayout& layout, const ReplayReport& report, bool overload);
// The runs' warnings (every request refused, a budget that cannot hold one request, an
// overloaded device) on stderr, one line each; the table and the JSON carry them too.
void print_warnings(const ReplayContext& context, const std::vector<ReplayReport>& reports);
// One header line and one row per allocator, flat columns named with their units.
std::string replay_csv(const std::vector<ReplayReport>& reports);

struct ReplayPlan;

// What a run hands an output gathered while it runs: its timeline's rows and each request as
// it leaves. A sink left empty is not called (and a run with no timeline sink keeps none).
struct RunSinks {
  std::function<void(const TimelineRow&)> timeline;
  std::function<void(const RequestRecord&)> request;
};

// An output gathered while the runs are under way (--timeline, --per-request, --html): what
// it keeps of each run, then its file. The runs go on parallel threads, so a collector keeps
// each run's share apart, and writes them in run order, so the file does not depend on how
// the threads interleaved.
class RunCollector {
 public:
  virtual ~RunCollector() = default;
  // The sinks of run `run` (plan.allocators[run]), asked for on that run's thread before it
  // starts.
  virtual RunSinks sinks(std::size_t run) = 0;
  // Writes the file's bytes into `out` once every run has ended. `out` was opened before the
  // runs began (a path that cannot be written fails before any work) and is committed by the
  // caller once every output is written, so a failure leaves every file as it was.
  virtual void write(OutputFile& out, const ReplayContext& context, const std::vector<ReplayReport>& reports) = 0;
};

// The output registry: a file `kvsim replay` writes, as `--csv FILE` does. `replay` offers
// each as an option taking a path ('-': standard output, in place of the table), refuses it
// over an input or another output, and writes it once every run is done: what `render`
// returns from the finished runs' reports, or, for an output gathered while the runs are
// under way, what the collector `collect` made has kept. An output is defined, `extern
// constinit const`, in its own file in cli/ (or beside its renderer), and named by one line of
// report_outputs.def (docs/architecture.md, "an output").
struct ReportOutput {
  std::string_view option;  // "csv": --csv FILE
  std::string_view help;    // the option's line in `kvsim replay --help`
  // From the finished runs' reports; nullptr for a gathered output.
  std::string (*render)(const ReplayContext& context, const std::vector<ReplayReport>& reports) = nullptr;
  // A gathered output's collector, for `plan`'s runs and the output's `path` (for messages).
  // Such an output follows one engine a run, so it is refused with --replicas.
  std::unique_ptr<RunCollector> (*collect)(const ReplayPlan& plan, const std::string& path) = nullptr;
  // A gathered output that reads the timeline's rows: asking for it turns the timeline on,
  // sampled as --sample-every says (by default rows at least 1 ms apart, at most 4,096 a run).
  bool timeline = false;
  // A gathered output of the simulated schedule only: refused with --schedule measured.
  bool simulated_only = false;
};
// Every registered output, in the order `kvsim replay --help` lists them.
std::span<const ReportOutput> report_outputs();
// The CSV's optional columns, present on every row of a file when any run has them: the
// external fragmentation bytes of placed reservations, the prefix cache's figures. A file
// whose rows come from several replays (kvsim sweep) decides them for all of them at once.
struct CsvShape {
  bool placement = false;  // a run places reservations (Allocator::pool().places_reservations)
  bool sharing = false;    // a run shares prompt blocks (Allocator::prefix_block_tokens() > 0)
  bool replicas = false;   // a run is one of --replicas (ReplayReport::replicas > 0)
};
CsvShape csv_shape(const std::vector<ReplayReport>& reports);
std::string replay_csv_header(const CsvShape& shape);
std::string replay_csv_row(const CsvShape& shape, const ReplayReport& report);
// One run's object in replay_json()'s "runs"; `replicas` as CsvShape's.
nlohmann::ordered_json replay_run_json(const ReplayReport& report, bool replicas = false);
// --html: the page of html_report.h. `runs` holds each report's timeline points and
// latencies, in report order (empty: none were collected, as with --replicas); the figures
// come from the reports, the plain answers and the warnings atop the page.
std::string replay_html(const ReplayContext& context, const std::vector<ReplayReport>& reports,
                        std::vector<HtmlRun> runs);

// --per-request: one row per request of the trace, in trace order within an allocator;
// `allocator` is the first column, as in the timeline, so several runs share one file.
// Times in seconds on the trace's clock; ttft/tpot/e2e only for completed requests, tpot
// only with two or more output tokens; an empty cell where a time does not exist.
std::string per_request_header();
std::string per_request_row(const std::string& allocator, const RequestRecord& record);
// Puts records in trace order (they come as requests leave).
void in_trace_order(std::vector<RequestRecord>& records);

// The timeline's CSV header for `layout`, and one row; `allocator` is the first column so
// several runs can share one file (long format). `sampled` (--sample-every): each row also
// carries the maximum and the time-weighted mean of allocated bytes over the interval since
// the previous row (allocated_bytes_max, allocated_bytes_mean), so that no peak is lost.
std::string timeline_header(const KvLayout& layout, bool sampled, bool caching);
std::string timeline_row(const std::string& allocator, const TimelineRow& row, bool caching);

}  // namespace kvsim::cli

#endif  // KVSIM_SRC_CLI_REPLAY_OUTPUT_H_
