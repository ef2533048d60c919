// kvsim sweep: a grid of replays over any of replay's options, and `kvsim sweep merge`.
// A point is "kvsim replay with these options overridden": the varied values are parsed
// by replay's own option parser on top of the fixed options and planned by plan_replay(),
// so every error is replay's own. The trace is read once per process (once per distinct
// way of parsing it) and every point replays from memory, its load scaling applied on top.
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "cli.h"
#include "kvsim/error.h"
#include "kvsim/option_names.h"
#include "kvsim/output_file.h"
#include "kvsim/replay.h"
#include "kvsim/replicas.h"
#include "kvsim/trace.h"
#include "kvsim/units.h"
#include "model_options.h"
#include "progress.h"
#include "replay_output.h"
#include "replay_plan.h"
#include "sweep.h"
#include "sweep_run.h"

namespace kvsim::cli {
namespace {

const CommandSpec kSpec{
    "kvsim sweep TRACE [replay options] --vary NAME=V1,V2,... [--vary ...] [--spec FILE] [--csv FILE] "
    "[--jsonl FILE] [--jobs N] [--shard I/N] [--progress]\n"
    "       kvsim sweep merge PART... [--csv OUT | --jsonl OUT]",
    "Replays TRACE at every point of a grid: each point is 'kvsim replay TRACE' with the fixed\n"
    "options given here and one value of each varied option. Any option of 'kvsim replay' can\n"
    "be varied by its long name (allocator, model, dtype, device, kv-budget, max-model-len,\n"
    "max-running, max-batched-tokens, policy, rate-scale, time-window, requests, ...; block\n"
    "size through the allocator spec, e.g. allocator=paged:block=16,paged:block=32); a switch\n"
    "(no-chunked-prefill, sort, ...) takes the values on and off. A value that holds commas goes\n"
    "in square brackets: allocator=[paged:block=16,prefix-caching=on],paged. Values are checked as\n"
    "replay checks them, every point before any replay; an option may not be both fixed and\n"
    "varied.\n\n"
    "Spec file (--spec): one axis a line, 'NAME = V1, V2, ...', '#' starts a comment. Its axes\n"
    "come first, in file order, then those of --vary in command-line order.\n\n"
    "The grid is the cartesian product of the axes in that order, the last one fastest; a\n"
    "point's index is its position (0-based). The trace is read once (a file only as far as the\n"
    "points' --time-window and --requests need); the points run on --jobs\n"
    "threads and the output is in grid order whatever the number of threads. Output: one row\n"
    "per point and allocator: 'point', 'points' (the grid's size), 'grid' (a fingerprint of\n"
    "the fixed options, the trace's file name and the axes), 'point_rows' (the point's rows),\n"
    "the varied options as columns named as the options (with '_option' appended where replay\n"
    "has a column of that name: allocator_option, requests_option, schedule_option,\n"
    "replicas_option), then kvsim replay --csv's columns (--csv; with --replicas also\n"
    "'replicas' and 'replica', a row per replica and one for their total, replica empty) or\n"
    "one kvsim replay --json run object (--jsonl, one JSON object a line). Without --csv or\n"
    "--jsonl: a table of the main figures on standard output.\n\n"
    "Sharding: --shard I/N runs only the points p with p % N == I-1 and writes their rows.\n"
    "'kvsim sweep merge' takes the parts (all CSV or all JSONL) and writes exactly the bytes the\n"
    "unsharded sweep writes (to --csv/--jsonl OUT, else to standard output); it refuses parts\n"
    "of different grids, a point found twice and a point found nowhere, naming the file.",
    "  kvsim sweep trace.csv --model llama-3.1-8b --device RTX-4090 --allocator paged --vary rate-scale=0.5,1,2,4\n"
    "  kvsim sweep trace.csv --device H100-80GB --vary allocator=paged:block=16,paged:block=32 "
    "--vary dtype=bf16,fp8 --csv out.csv\n"
    "  kvsim sweep trace.csv --spec grid.txt --shard 2/8 --csv parts/2.csv\n"
    "  kvsim sweep merge parts/*.csv --csv out.csv"};

const CommandSpec kMergeSpec{
    "kvsim sweep merge PART... [--csv OUT | --jsonl OUT]",
    "Merges the parts of a sharded 'kvsim sweep' (all CSV or all JSONL; each written by one\n"
    "--shard I/N) into exactly the bytes the unsharded sweep writes. Refuses parts of different\n"
    "grids (another header, 'points' or 'grid'), a point found twice, found in no part or\n"
    "without all its rows (point_rows), and a file cut short, naming the file and line.\n"
    "CRLF line endings are read as LF. Without --csv or --jsonl the merge goes to\n"
    "standard output, of the parts' kind.",
    "  kvsim sweep merge parts/*.csv --csv out.csv\n"
    "  kvsim sweep merge parts/*.jsonl --jsonl out.jsonl"};

po::options_description sweep_options() {
  po::options_description o("Sweep");
  o.add_options()
      ("vary", po::value<std::vector<std::string>>()->composing(),
       "NAME=V1,V2,...: vary the replay option NAME over these values (repeat for more axes)")
      ("spec", po::value<std::string>(), "read axes from this file, one 'NAME = V1, V2' a line, '#' comments")
      ("csv", po::value<std::string>(), "write one CSV row per point and allocator to this file")
      ("jsonl", po::value<std::string>(), "write one JSON object per point and allocator (a line each) to this file")
      (option_key(kOptJobs), po::value<std::string>(), "points replayed at once (default: the number of cores)")
      ("shard", po::value<std::string>(), "I/N: run only the points p with p % N == I-1 (1 <= I <= N)")
      ("progress", "a progress bar over the points on standard error, when it is a terminal");
  return o;
}

}  // namespace

namespace {

// "point 3 (max-running=64, rate-scale=2)": which point a message is about.
std::string point_label(const SweepSetup& setup, std::int64_t p) {
  const auto values = setup.grid().values_at(p);
  std::string out;
  for (std::size_t k = 0; k < values.size(); ++k) out += (k == 0 ? "" : ", ") + setup.columns()[k] + "=" + values[k];
  return fmt::format("point {} ({})", p, out);
}

// The main figures of each row, aligned: the rows are the CSV's, read back by column name.
// With replicas, the replica a row is (the CSV's `replica`; "total" for their total, which
// the CSV leaves empty as it does one engine's row).
std::string sweep_table(const SweepSetup& setup, const std::string& csv) {
  std::vector<std::string> keep = {"point"};
  keep.insert(keep.end(), setup.columns().begin(), setup.columns().end());
  keep.insert(keep.end(), {"allocator", "replica", "completed", "preemptions", "allocated_bytes_peak", "token_usage",
                           "block_usage", "ttft_p99_s", "e2e_p99_s", "generated_tokens_per_s"});
  std::vector<std::vector<std::string>> cells;
  std::vector<std::size_t> index;
  std::size_t replica_at = keep.size();  // where the replica column is kept, if the CSV has one
  std::size_t replicas_field = 0;        // the CSV's `replicas` column
  for (std::size_t at = 0; at < csv.size();) {
    const auto end = csv.find('\n', at);
    const auto fields = split_csv_line(std::string_view(csv).substr(at, end - at));
    const bool header = at == 0;
    at = end + 1;
    if (header) {
      replicas_field = static_cast<std::size_t>(std::find(fields.begin(), fields.end(), "replicas") - fields.begin());
      std::vector<std::string> found;
      for (const auto& k : keep) {
        const auto i = static_cast<std::size_t>(std::find(fields.begin(), fields.end(), k) - fields.begin());
        if (k == "replica" && i == fields.size()) continue;  // no replicas: no column
        if (k == "replica") replica_at = found.size();
        found.push_back(k);
        index.push_back(i);
      }
      keep = found;
    }
    auto& row = cells.emplace_back();
    for (std::size_t i : index) row.push_back(i < fields.size() ? fields[i] : std::string());
    const bool several = replicas_field < fields.size() && !fields[replicas_field].empty() && fields[replicas_field] != "1";
    if (!header && replica_at < row.size() && row[replica_at].empty() && several) row[replica_at] = "total";
  }
  std::vector<std::size_t> width(keep.size(), 0);
  for (const auto& row : cells) {
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  const std::size_t axes = setup.grid().axes().size();
  std::string out = fmt::format("{} point{} ({} ax{}), trace {}\n", with_commas(setup.grid().points()),
                                setup.grid().points() == 1 ? "" : "s", axes, axes == 1 ? "is" : "es", setup.trace_path());
  for (const auto& row : cells) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) line += fmt::format("{:<{}}  ", row[i], width[i]);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

int run_merge(const Invocation& inv) {
  po::options_description options("Options");
  options.add_options()
      ("csv", po::value<std::string>(), "write the merged CSV to this file")
      ("jsonl", po::value<std::string>(), "write the merged JSONL to this file");
  po::options_description hidden;
  hidden.add_options()("part", po::value<std::vector<std::string>>());
  po::positional_options_description positional;
  positional.add("part", -1);
  po::variables_map vm;
  if (!parse_options(inv, kMergeSpec, options, positional, vm, &hidden)) return kExitOk;
  if (vm.count("part") == 0) throw UsageError("give the part files to merge\nUsage: " + kMergeSpec.synopsis);
  const auto parts = vm["part"].as<std::vector<std::string>>();
  const auto csv = option_text(vm, "csv");
  const auto jsonl = option_text(vm, "jsonl");
  if (csv && jsonl) throw UsageError("give --csv or --jsonl, not both: the parts are of one kind\nUsage: " + kMergeSpec.synopsis);
  std::vector<std::pair<std::string, std::string>> outputs;
  if (csv) outputs.emplace_back("--csv", *csv);
  if (jsonl) outputs.emplace_back("--jsonl", *jsonl);
  refuse_output_over_input(outputs, parts, kMergeSpec.synopsis);
  const SweepFileKind kind = csv ? SweepFileKind::csv : jsonl ? SweepFileKind::jsonl : sweep_file_kind(parts);
  const std::string merged = merge_sweep_parts(parts, kind);
  if (csv || jsonl) {
    write_output_file(csv ? *csv : *jsonl, merged, parts);
  } else {
    write_stdout(merged);
  }
  return kExitOk;
}

}  // namespace

int run_sweep(const Invocation& inv) {
  if (!inv.args.empty() && inv.args.front() == "merge") {
    return run_merge(Invocation{inv.command + " merge", {inv.args.begin() + 1, inv.args.end()}});
  }
  po::options_description options = replay_option_descriptions(false);
  options.add(sweep_options());
  po::variables_map vm;
  if (!parse_trace_command(inv, kSpec, options, vm)) return kExitOk;

  std::vector<SweepAxis> axes;
  const auto spec = option_text(vm, "spec");
  if (spec) axes = read_sweep_spec(*spec);
  if (vm.count("vary") != 0) {
    for (const auto& v : vm["vary"].as<std::vector<std::string>>()) axes.push_back(parse_vary(v));
  }
  if (axes.empty()) throw UsageError("give the axes to vary: --vary NAME=V1,V2,... or --spec FILE\nUsage: " + kSpec.synopsis);
  const SweepSetup setup(vm, std::move(axes));

  const Shard shard = option_text(vm, "shard") ? parse_shard(*option_text(vm, "shard")) : Shard{};
  const auto csv_path = option_text(vm, "csv");
  const auto jsonl_path = option_text(vm, "jsonl");
  std::vector<std::pair<std::string, std::string>> outputs;
  if (csv_path) outputs.emplace_back("--csv", *csv_path);
  if (jsonl_path) outputs.emplace_back("--jsonl", *jsonl_path);
  std::vector<std::string> inputs = {setup.trace_path()};
  if (spec) inputs.push_back(*spec);
  refuse_output_over_input(outputs, inputs, kSpec.synopsis);
  // Both files opened before any replay (a path that cannot be written fails at once), and
  // committed together once both are written.
  std::optional<OutputFile> csv_file, jsonl_file;
  if (csv_path) csv_file.emplace(*csv_path, inputs);
  if (jsonl_path) jsonl_file.emplace(*jsonl_path, inputs);

  // Every point planned (and the trace read) before any replay: a bad value fails at once.
  TraceCache cache;
  const CsvShape shape = prepare_points(setup, cache);

  std::vector<std::int64_t> mine;
  for (std::int64_t p = 0; p < setup.grid().points(); ++p) {
    if (shard.has(p)) mine.push_back(p);
  }
  std::size_t jobs = std::max(1u, std::thread::hardware_concurrency());
  if (const auto j = option_text(vm, option_key(kOptJobs))) jobs = static_cast<std::size_t>(positive_integer(*j, kOptJobs));
  jobs = std::max<std::size_t>(1, std::min(jobs, mine.size()));

  // Drawn on a terminal only: never carriage returns into a file or a pipe (README.md).
  Progress progress(mine.size(), vm.count("progress") != 0 && ::isatty(STDERR_FILENO) != 0, "sweeping");
  std::vector<std::string> csv_rows(mine.size());
  std::vector<std::string> jsonl_rows(mine.size());
  std::vector<std::vector<std::string>> point_warnings(mine.size());
  const bool want_jsonl = jsonl_path.has_value();
  run_in_parallel(mine.size(), jobs, progress, [&](std::size_t i) {
    const PointRun run = run_point(setup, cache, mine[i], progress.sink(i));
    const auto point_rows = std::ssize(run.reports);
    for (std::size_t k = 0; k < run.reports.size(); ++k) {
      csv_rows[i] += setup.csv_row(mine[i], point_rows, shape, run.reports[k]);
      if (want_jsonl) jsonl_rows[i] += setup.jsonl_row(mine[i], point_rows, shape, run.reports[k], run.warnings[k]);
      for (const std::string& w : run.warnings[k]) point_warnings[i].push_back(point_label(setup, mine[i]) + ": " + w);
    }
    progress.set(i, 1.0);
  });
  // Replay's warnings, each naming its point: a point that served nothing otherwise reads as
  // a row of zeros.
  std::string warning_lines;
  for (const auto& ws : point_warnings) {
    for (const std::string& w : ws) {
      fmt::print(stderr, "kvsim sweep: warning: {}\n", w);
      warning_lines += "WARNING " + w + "\n";
    }
  }

  std::string csv = setup.csv_header(shape);
  for (const auto& rows : csv_rows) csv += rows;
  write_each(std::initializer_list<OutputFill>{
      {csv_file ? &*csv_file : nullptr, [&](OutputFile& out) { out.write(csv); }},
      {jsonl_file ? &*jsonl_file : nullptr, [&](OutputFile& out) {
         for (const auto& rows : jsonl_rows) out.write(rows);
       }}});
  if (!csv_path && !jsonl_path) write_stdout(sweep_table(setup, csv) + warning_lines);
  return kExitOk;
}

}  // namespace kvsim::cli
