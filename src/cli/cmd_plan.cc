// kvsim plan: the largest rate-scale (or the smallest number of replicas) at which a replay
// meets the user's targets. Each point tried is a sweep point (sweep_run.h): `kvsim replay`
// with the searched option set, the trace read once; the search is plan.h's.
#include <fmt/core.h>

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "json_text.h"
#include "kvsim/error.h"
#include "kvsim/option_names.h"
#include "kvsim/output_file.h"
#include "kvsim/parse.h"
#include "kvsim/replicas.h"
#include "kvsim/units.h"
#include "model_options.h"
#include "plan.h"
#include "sweep_run.h"

namespace kvsim::cli {
namespace {

// The most replays one search may make (--max-points).
constexpr std::int64_t kMaxPlanPoints = 10'000;

constexpr std::string_view kPlanAllocatorHelp =
    "the one allocator to plan for: KIND[:key=value,...] (default paged; the kinds: 'kvsim replay --help')";

const CommandSpec kSpec{
    "kvsim plan TRACE [replay options] TARGET... [--search rate-scale|replicas] [--tolerance X] "
    "[--max-points N] [--max-replicas N] [--json]",
    "Finds the largest --rate-scale at which replaying TRACE (with the replay options given)\n"
    "meets every TARGET, or with --search replicas the smallest --replicas that meets them at\n"
    "the trace's own rate (or the --rate-scale given). Without --allocator it plans for paged\n"
    "(vLLM's); it plans for one allocator. The answer comes first, in one sentence, then the\n"
    "points tried, in order of the searched value, the bracketing pair marked.\n\n"
    "Targets (give at least one; latencies are over the completed requests, as replay's):\n"
    "  --no-preemption   no request is preempted (needs a memory budget)\n"
    "  --queue-stable    the run is not overloaded by replay's rule (docs/replay.md, 'Overload'):\n"
    "                    fewer than max(2, ceil(requests / 10)) requests wait just after the\n"
    "                    last arrival\n"
    "  --ttft-p50 D, --ttft-p99 D, --tpot-p50 D, --tpot-p99 D, --e2e-p50 D, --e2e-p99 D\n"
    "                    that percentile at most D (a duration: 2s, 150ms)\n"
    "  --kv-usage-max X  block-level KV usage at its peak (allocated / capacity) at most X\n"
    "                    (a share below 1, e.g. 0.9; needs a memory budget)\n\n"
    "The search relies on monotonicity: a heavier load (a larger rate-scale, fewer replicas)\n"
    "never meets targets that a lighter one misses. It starts at rate-scale 1 (1 replica; 2\n"
    "with --expert-parallel, which needs two), doubles or halves until the outcome flips\n"
    "(rate-scale within [0.001, 1000]; replicas up to\n"
    "--max-replicas), bisects the bracket until the met and missed values are within\n"
    "--tolerance of each other (adjacent replica counts), then replays up to two points on the\n"
    "lighter side of the answer (half of it and 90% of it; one more replica). Any two points\n"
    "that contradict the monotonicity (a lighter load missing while a heavier one met) are\n"
    "reported in the answer and in the JSON, not hidden. At most --max-points replays.",
    "  kvsim plan azure_conv.csv --model llama-3.1-8b --device RTX-4090 --no-preemption\n"
    "  kvsim plan trace.csv --device H100-80GB --ttft-p99 2s --queue-stable --search replicas --json"};

// What a point's replay gives the targets: the run's report (with replicas, their total) and
// block-level KV usage at its peak (allocated / capacity) on the fullest device. With
// replicas that is the fullest replica's: the total's, their peaks over their capacities,
// averages the replicas and hides a full one. No usage without a budget (no capacity).
struct PointFigures {
  ReplayReport report;
  std::optional<double> kv_usage_peak;
};

PointFigures point_figures(std::vector<ReplayReport> reports) {
  PointFigures f;
  for (const ReplayReport& r : reports) {
    if (r.capacity_bytes <= 0) continue;
    const double usage = static_cast<double>(r.allocated_bytes.peak) / static_cast<double>(r.capacity_bytes);
    f.kv_usage_peak = std::max(f.kv_usage_peak.value_or(0.0), usage);
  }
  f.report = std::move(reports.back());
  return f;
}

struct Target {
  std::string name;   // "--ttft-p99"
  std::string bound;  // as given: "2s"
  // Why the point misses the target, or nothing when it meets it.
  std::function<std::optional<std::string>(const PointFigures&)> miss;
};

// A p99 in seconds, or null where no request gave one (as replay's JSON has it).
nlohmann::ordered_json p99_seconds(const Latency& l) {
  if (l.count == 0) return nullptr;
  return static_cast<double>(l.p99_ns) / 1e9;
}

std::string p99_text(const Latency& l) { return l.count == 0 ? "n/a" : format_seconds(l.p99_ns, 3); }

// `none`: why no request gave the figure, when none did.
std::optional<std::string> latency_miss(const char* what, const char* none, const Latency& l, bool p99,
                                        std::int64_t bound_ns) {
  if (l.count == 0) return fmt::format("{}, so no {}", none, what);
  const std::int64_t v = p99 ? l.p99_ns : l.p50_ns;
  if (v <= bound_ns) return std::nullopt;
  // Milliseconds, or as many more places as it takes to tell the two apart (26.1 ms > 26 ms)
  // and to give the target as it was set (1 us is 0.000001 s, not 0.000 s).
  int places = 3;
  const auto exact = [&](int p) {
    std::int64_t unit = 1;
    for (int i = p; i < 9; ++i) unit *= 10;
    return bound_ns % unit == 0;
  };
  while (places < 9 && (format_seconds(v, places) == format_seconds(bound_ns, places) || !exact(places))) ++places;
  return fmt::format("{} {} {} s > {} s", what, p99 ? "p99" : "p50", format_seconds(v, places),
                     format_seconds(bound_ns, places));
}

std::vector<Target> read_targets(const po::variables_map& vm) {
  std::vector<Target> targets;
  if (vm.count("no-preemption") != 0) {
    targets.push_back({"--no-preemption", "", [](const PointFigures& f) -> std::optional<std::string> {
                         if (f.report.preemptions == 0) return std::nullopt;
                         return fmt::format("preemptions: {}", with_commas(f.report.preemptions));
                       }});
  }
  if (vm.count("queue-stable") != 0) {
    targets.push_back({"--queue-stable", "", [](const PointFigures& f) -> std::optional<std::string> {
                         if (!f.report.overload.overloaded) return std::nullopt;
                         return "overloaded: " + f.report.overload.reason;
                       }});
  }
  struct LatencyTarget {
    const char* option;
    const char* what;
    const char* none;  // why no request gave it: TPOT needs two tokens or more
    Latency ReplayReport::*field;
    bool p99;
  };
  constexpr const char* kNoneCompleted = "no request completed";
  constexpr const char* kNoneGenerated = "no request generated two tokens or more";
  const LatencyTarget latencies[] = {
      {"ttft-p50", "TTFT", kNoneCompleted, &ReplayReport::ttft, false},
      {"ttft-p99", "TTFT", kNoneCompleted, &ReplayReport::ttft, true},
      {"tpot-p50", "TPOT", kNoneGenerated, &ReplayReport::tpot, false},
      {"tpot-p99", "TPOT", kNoneGenerated, &ReplayReport::tpot, true},
      {"e2e-p50", "e2e", kNoneCompleted, &ReplayReport::e2e, false},
      {"e2e-p99", "e2e", kNoneCompleted, &ReplayReport::e2e, true},
  };
  for (const auto& l : latencies) {
    const auto text = option_text(vm, l.option);
    if (!text) continue;
    const std::string flag = std::string("--") + l.option;
    const std::int64_t bound = parse_duration_ns(*text, flag);
    if (bound <= 0) throw InputError(Location{"", 0, flag}, "expected a positive duration");
    targets.push_back({flag, *text, [l, bound](const PointFigures& f) {
                         return latency_miss(l.what, l.none, f.report.*(l.field), l.p99, bound);
                       }});
  }
  if (const auto text = option_text(vm, "kv-usage-max")) {
    const std::int64_t ppb = parse_fraction_ppb(*text, "--kv-usage-max");
    // No run allocates nothing at its peak: a bound of 0 could never be met.
    if (ppb <= 0) throw InputError(Location{"", 0, "--kv-usage-max"}, "expected a positive share, such as 0.9");
    const double bound = static_cast<double>(ppb) / 1e9;
    targets.push_back({"--kv-usage-max", *text, [bound](const PointFigures& f) -> std::optional<std::string> {
                         // The target needs a budget (checked before the search), so a usage.
                         const double peak = f.kv_usage_peak.value_or(0.0);
                         if (peak <= bound) return std::nullopt;
                         return fmt::format("KV usage peak {:.1f}% > {:.1f}%", peak * 100, bound * 100);
                       }});
  }
  return targets;
}

// Why a run misses every target whatever they are: it refused requests (longer than
// --max-model-len, never fitting the budget even alone, or more samples than can run at
// once), in replay's words.
std::optional<std::string> refusal_miss(const ReplayReport& r, std::int64_t max_model_len) {
  const std::int64_t refused = r.refused();
  if (refused == 0) return std::nullopt;
  return fmt::format("refused {} of {} requests ({})", with_commas(refused), with_commas(r.requests),
                     refusal_causes(r, max_model_len));
}

// "1.375" from 1,375,000,000 ppb: what --rate-scale reads back exactly.
std::string rate_scale_text(std::int64_t ppb) {
  std::string s = fmt::format("{}.{:09d}", ppb / 1'000'000'000, ppb % 1'000'000'000);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

// One point tried, with what the table and JSON show.
struct Tried {
  std::int64_t order = 0;
  std::int64_t value = 0;
  std::string value_text;
  std::string role;
  std::vector<std::string> misses;
  PointFigures figures;
  const ReplayReport& report() const { return figures.report; }
};

// An arrival rate with three significant digits below 1/s (a long trace at a small scale:
// 0.00192 and 0.680, not 0.000 and 0.68), three decimals above.
std::string arrivals_text(double per_s) {
  return per_s > 0 && per_s < 1 ? fmt::format("{:#.3g}", per_s) : fmt::format("{:.3f}", per_s);
}

std::string targets_text(const std::vector<Target>& targets) {
  std::string out;
  for (const auto& t : targets) {
    if (!out.empty()) out += ", ";
    out += t.name + (t.bound.empty() ? "" : " " + t.bound);
  }
  return out;
}

// The search stopped at --max-points before it found a bracket or reached its bound.
std::string points_ran_out(std::size_t tried) { return fmt::format("Not settled: --max-points {} ran out: ", tried); }

std::string capitalized(std::string s) {
  if (!s.empty() && s.front() >= 'a' && s.front() <= 'z') s.front() = static_cast<char>(s.front() - 'a' + 'A');
  return s;
}

}  // namespace

int run_plan(const Invocation& inv) {
  po::options_description options = replay_option_descriptions(false, true, kPlanAllocatorHelp);
  po::options_description plan_opts("Plan");
  plan_opts.add_options()
      ("search", po::value<std::string>()->default_value("rate-scale"),
       "what to search: rate-scale (the largest that meets the targets) or replicas (the smallest)")
      ("no-preemption", "target: no request is preempted")
      ("queue-stable", "target: the run is not overloaded by replay's rule (fewer than a tenth of the requests wait "
                       "after the last arrival: a loose bound, see above)")
      ("ttft-p50", po::value<std::string>(), "target: TTFT p50 at most this duration")
      ("ttft-p99", po::value<std::string>(), "target: TTFT p99 at most this duration")
      ("tpot-p50", po::value<std::string>(), "target: TPOT p50 at most this duration")
      ("tpot-p99", po::value<std::string>(), "target: TPOT p99 at most this duration")
      ("e2e-p50", po::value<std::string>(), "target: end-to-end latency p50 at most this duration")
      ("e2e-p99", po::value<std::string>(), "target: end-to-end latency p99 at most this duration")
      ("kv-usage-max", po::value<std::string>(), "target: block-level KV usage at its peak at most this share (0.9)")
      ("tolerance", po::value<std::string>()->default_value("0.02"),
       "rate-scale: stop when the met and missed values differ by at most this share of the met one")
      ("max-points", po::value<std::string>()->default_value("20"), "replays at most (up to 10,000)")
      ("max-replicas", po::value<std::string>()->default_value("64"), "replicas: search up to this many")
      ("json", "print the answer, the targets and every point tried as JSON");
  options.add(plan_opts);
  po::variables_map vm;
  if (!parse_trace_command(inv, kSpec, options, vm)) return kExitOk;

  const std::string search = vm["search"].as<std::string>();
  if (search != "rate-scale" && search != "replicas") {
    throw InputError(Location{"", 0, "--search"}, "expected rate-scale or replicas, got \"" + printable(search) + "\"");
  }
  const std::vector<Target> targets = read_targets(vm);
  if (targets.empty()) {
    throw UsageError("give at least one target (--no-preemption, --queue-stable, --ttft-p99 D, ...)\nUsage: " +
                     kSpec.synopsis);
  }
  if (given(vm, search)) {
    throw InputError(Location{"", 0, "--" + search}, "is what kvsim plan searches (--search " + search + "): drop it");
  }
  // Each search's own bound, refused rather than ignored under the other search.
  if (search == "rate-scale" && !vm["max-replicas"].defaulted()) {
    throw InputError(Location{"", 0, "--max-replicas"}, "bounds --search replicas; this search is rate-scale");
  }
  if (search == "replicas" && !vm["tolerance"].defaulted()) {
    throw InputError(Location{"", 0, "--tolerance"},
                     "bounds --search rate-scale; replicas are searched to adjacent counts, exactly");
  }
  const std::int64_t tolerance_ppb = parse_fraction_ppb(vm["tolerance"].as<std::string>(), "--tolerance");
  if (tolerance_ppb <= 0) throw InputError(Location{"", 0, "--tolerance"}, "expected a positive share, such as 0.02");
  // The search bisects in millionths: a finer tolerance would be claimed, not applied.
  if (tolerance_ppb < 1000) throw InputError(Location{"", 0, "--tolerance"}, "at least 0.000001 (the search works in millionths)");
  const std::int64_t max_points = parse_positive_integer(vm["max-points"].as<std::string>(), "--max-points");
  if (max_points > kMaxPlanPoints) {
    throw InputError(Location{"", 0, "--max-points"}, fmt::format("at most {}", with_commas(kMaxPlanPoints)));
  }
  const std::int64_t max_replicas = parse_positive_integer(vm["max-replicas"].as<std::string>(), "--max-replicas");
  // Refused before any replay, not when the search first reaches it.
  if (max_replicas > kMaxReplicas) {
    throw InputError(Location{"", 0, "--max-replicas"},
                     fmt::format("at most {} (replay --replicas' limit: each replica is a whole engine)", kMaxReplicas));
  }

  // Plans for one allocator: paged unless one is given.
  po::variables_map base = vm;
  // Every point is a simulation: a trace's measured times hold at its own load and on one
  // engine only, so a trace that carries them is simulated like any other (docs/sweep.md).
  if (given(vm, option_key(kOptSchedule)) && vm[option_key(kOptSchedule)].as<std::string>() == "measured") {
    throw InputError(Location{"", 0, kOptSchedule},
                     "kvsim plan simulates every point it tries (other loads, other replica counts): the trace's "
                     "measured times cannot be replayed there");
  }
  base.erase(option_key(kOptSchedule));
  base.insert({option_key(kOptSchedule), po::variable_value(boost::any(std::string("simulate")), false)});
  if (vm.count(option_key(kOptAllocator)) == 0) {
    po::store(po::command_line_parser(std::vector<std::string>{"--allocator=paged"})
                  .options(replay_option_descriptions(false, true, kPlanAllocatorHelp))
                  .run(),
              base);
  }

  TraceCache cache;
  const bool rate = search == "rate-scale";
  // Expert parallelism spreads the experts over two replicas or more: the fewest is 2.
  const std::int64_t fewest_replicas = vm.count(option_key(kOptExpertParallel)) != 0 ? 2 : 1;
  if (!rate && max_replicas < fewest_replicas) {
    throw InputError(Location{"", 0, "--max-replicas"},
                     fmt::format("{} replica allows no search: {} spreads the experts over {} replicas or more",
                                 max_replicas, kOptExpertParallel, fewest_replicas));
  }
  std::vector<Tried> tried;
  const auto setup_for = [&](const std::string& value) {
    return SweepSetup(base, {SweepAxis{search, {value}, "", 0}});
  };
  // The first point checks what the whole search needs (one allocator, a budget where a
  // target needs one) and reads the trace; the model's length limit is every point's.
  std::int64_t max_model_len = 0;
  {
    // Rate-scale 1, or the fewest replicas: the search's start.
    const SweepSetup first = setup_for(rate ? "1" : std::to_string(fewest_replicas));
    refuse_stdout_over_input({first.trace_path()}, kSpec.synopsis);
    prepare_points(first, cache);
    const ReplayPlan plan = first.plan_point(0);
    max_model_len = plan.options.layout.max_model_len;
    if (plan.allocators.size() != 1) {
      throw InputError(Location{"", 0, kOptAllocator}, "kvsim plan answers for one allocator; give one");
    }
    for (const auto& t : targets) {
      if ((t.name == "--no-preemption" || t.name == "--kv-usage-max") && !plan.budget) {
        throw InputError(Location{"", 0, t.name},
                         "needs a memory budget: give --device, --device-memory or --kv-budget");
      }
    }
  }
  SearchSpec spec;
  spec.harder_up = rate;
  spec.start = rate ? 1'000'000'000 : fewest_replicas;
  spec.min = rate ? 1'000'000 : fewest_replicas;
  spec.max = rate ? 1'000'000'000'000 : max_replicas;
  spec.tolerance_ppm = rate ? tolerance_ppb / 1000 : 0;  // replicas: adjacent counts
  spec.max_points = static_cast<int>(max_points);
  const auto meets = [&](std::int64_t value) {
    Tried t;
    t.order = static_cast<std::int64_t>(tried.size()) + 1;
    t.value = value;
    t.value_text = rate ? rate_scale_text(value) : std::to_string(value);
    const SweepSetup setup = setup_for(t.value_text);
    prepare_points(setup, cache);
    t.figures = point_figures(run_point(setup, cache, 0, {}).reports);
    // A rate-scale divides the gaps between arrivals: with none, every point is the same run.
    // Asked of the trace as it is (the first point, rate-scale 1): a large rate-scale may
    // round gaps of a few ns to none.
    if (rate && value == spec.start && t.report().last_arrival_ns == t.report().start_ns) {
      throw InputError(Location{t.report().trace, 0, ""},
                       fmt::format("{}, so no --rate-scale changes the load (it divides the gaps between arrivals, "
                                   "and there are none); plan the replicas instead (--search replicas)",
                                   t.report().requests >= 2
                                       ? fmt::format("all {} requests arrive at the same instant", t.report().requests)
                                       : std::string("the trace has one request")));
    }
    // A refused request is traffic not served: no target is met for it, and a run that
    // refused everything would otherwise meet --no-preemption and --kv-usage-max at any load.
    if (auto why = refusal_miss(t.report(), max_model_len)) t.misses.push_back(*why);
    for (const auto& target : targets) {
      if (auto why = target.miss(t.figures)) t.misses.push_back(*why);
    }
    const bool ok = t.misses.empty();
    tried.push_back(std::move(t));
    return ok;
  };
  const SearchResult result = bracket_search(spec, meets);
  for (std::size_t i = 0; i < tried.size(); ++i) tried[i].role = result.tried[i].role;

  const auto find = [&](std::int64_t v) -> const Tried& {
    return *std::find_if(tried.begin(), tried.end(), [v](const Tried& t) { return t.value == v; });
  };
  const auto rate_text = [](const Tried& t) { return arrivals_text(t.report().overload.arrival_rate_per_s) + " requests/s"; };
  const std::string name = rate ? "rate-scale" : "replicas";
  const std::string what = targets_text(targets);
  const std::string allocator = tried.front().report().allocator;
  // One replica meeting the targets is the answer, settled: there is no fewer (the largest
  // rate-scale, the rate search's bound, is a limit of the search instead).
  const bool one_replica = !rate && result.met && !result.missed && *result.met == spec.min;
  std::string sentence;
  if (result.met && result.missed && result.converged) {
    const Tried& m = find(*result.met);
    const Tried& x = find(*result.missed);
    sentence = rate ? fmt::format("The largest rate-scale meeting the targets ({}) for {} is {} ({}); {} ({}) misses "
                                  "them ({}), within the tolerance of {}.",
                                  what, allocator, m.value_text, rate_text(m), x.value_text, rate_text(x),
                                  x.misses.front(), vm["tolerance"].as<std::string>())
                    : fmt::format("The smallest number of replicas meeting the targets ({}) for {} is {}; {} "
                                  "misses them ({}).",
                                  what, allocator, m.value_text, x.value_text, x.misses.front());
  } else if (result.met && result.missed) {
    const Tried& m = find(*result.met);
    const Tried& x = find(*result.missed);
    sentence = fmt::format("Not settled within {} points: {} {} meets the targets ({}) for {} and {} {} misses them "
                           "({}).",
                           tried.size(), name, m.value_text, what, allocator, name, x.value_text, x.misses.front());
  } else if (result.met) {
    // Only points that met: the search went harder until its bound, or ran out of points.
    const Tried& m = find(*result.met);
    const bool bound = rate ? *result.met == spec.max : one_replica;
    sentence = rate ? fmt::format("every rate-scale tried meets the targets ({}) for {}, up to {} ({}){}.", what,
                                  allocator, m.value_text, rate_text(m), bound ? ": no limit found" : "")
                    : bound ? fmt::format("the smallest number of replicas meeting the targets ({}) for {} is {}.",
                                          what, allocator, m.value_text)
                            : fmt::format("{} replicas meet the targets ({}) for {}.", m.value_text, what, allocator);
    sentence = bound ? capitalized(sentence) : points_ran_out(tried.size()) + sentence;
  } else {
    // Only points that missed: the search went easier until its bound, or ran out of points.
    const Tried& x = find(*result.missed);
    const bool bound = *result.missed == (rate ? spec.min : spec.max);
    sentence = rate ? fmt::format("no rate-scale tried meets the targets ({}) for {}, down to {} ({}): {}.", what,
                                  allocator, x.value_text, rate_text(x), x.misses.front())
                    : fmt::format("no number of replicas up to {} meets the targets ({}) for {}: {}.", x.value_text,
                                  what, allocator, x.misses.front());
    sentence = bound ? capitalized(sentence) : points_ran_out(tried.size()) + sentence;
  }
  for (const auto& [m, x] : result.non_monotone) {
    sentence += fmt::format(" Not monotone: {} {} misses the targets although {} {}, a heavier load, meets them; the "
                            "answer assumes it cannot.",
                            name, find(x).value_text, name, find(m).value_text);
  }

  std::vector<const Tried*> by_value;
  for (const auto& t : tried) by_value.push_back(&t);
  std::sort(by_value.begin(), by_value.end(), [](const Tried* a, const Tried* b) { return a->value < b->value; });
  const auto mark = [&](const Tried& t) -> std::string {
    if (result.met && t.value == *result.met) return rate ? "largest met" : "smallest met";
    if (result.missed && t.value == *result.missed) return rate ? "smallest missed" : "largest missed";
    return "";
  };

  if (vm.count("json") != 0) {
    nlohmann::ordered_json j;
    j["answer"] = sentence;
    j["search"] = name;
    j["allocator"] = allocator;
    nlohmann::ordered_json ts = nlohmann::ordered_json::array();
    for (const auto& t : targets) ts.push_back({{"target", t.name.substr(2)}, {"bound", t.bound}});
    j["targets"] = ts;
    j["met"] = result.met ? nlohmann::ordered_json(find(*result.met).value_text) : nlohmann::ordered_json();
    j["missed"] = result.missed ? nlohmann::ordered_json(find(*result.missed).value_text) : nlohmann::ordered_json();
    // The answer's load in requests a second, a number (the sentence has it in words).
    const auto rate_of = [&](const std::optional<std::int64_t>& v) {
      return v ? nlohmann::ordered_json(find(*v).report().overload.arrival_rate_per_s) : nlohmann::ordered_json();
    };
    j["met_arrival_rate_per_s"] = rate_of(result.met);
    j["missed_arrival_rate_per_s"] = rate_of(result.missed);
    j["converged"] = result.converged || one_replica;
    // The rate search's bound; replicas are searched to adjacent counts.
    j["tolerance"] = rate ? nlohmann::ordered_json(vm["tolerance"].as<std::string>()) : nlohmann::ordered_json();
    nlohmann::ordered_json nm = nlohmann::ordered_json::array();
    for (const auto& [m, x] : result.non_monotone) nm.push_back({{"met", find(m).value_text}, {"missed", find(x).value_text}});
    j["non_monotone"] = nm;
    nlohmann::ordered_json points = nlohmann::ordered_json::array();
    for (const Tried* t : by_value) {
      points.push_back({{"order", t->order},
                        {name, t->value_text},
                        {"role", t->role},
                        {"met", t->misses.empty()},
                        {"misses", t->misses},
                        {"arrival_rate_per_s", t->report().overload.arrival_rate_per_s},
                        {"preemptions", t->report().preemptions},
                        {"overloaded", t->report().overload.overloaded},
                        {"ttft_p99_s", p99_seconds(t->report().ttft)},
                        {"tpot_p99_s", p99_seconds(t->report().tpot)},
                        {"e2e_p99_s", p99_seconds(t->report().e2e)},
                        {"kv_usage_peak", t->figures.kv_usage_peak ? nlohmann::ordered_json(*t->figures.kv_usage_peak)
                                                                   : nlohmann::ordered_json()},
                        {"bracket", mark(*t)}});
    }
    j["points"] = points;
    write_stdout(json_text(j));
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {{"#", name, "arrivals/s", "met", "preemptions", "overloaded",
                                                 "ttft_p99_s", "tpot_p99_s", "e2e_p99_s", "kv_usage_peak", "bracket",
                                                 "missed because"}};
  for (const Tried* t : by_value) {
    std::string why;
    for (const auto& m : t->misses) why += (why.empty() ? "" : "; ") + m;
    rows.push_back({std::to_string(t->order), t->value_text, arrivals_text(t->report().overload.arrival_rate_per_s),
                    t->misses.empty() ? "yes" : "no", with_commas(t->report().preemptions),
                    t->report().overload.overloaded ? "yes" : "no", p99_text(t->report().ttft),
                    p99_text(t->report().tpot), p99_text(t->report().e2e),
                    t->figures.kv_usage_peak ? fmt::format("{:.1f}%", *t->figures.kv_usage_peak * 100) : "n/a", mark(*t),
                    why});
  }
  std::vector<std::size_t> width(rows.front().size(), 0);
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out = sentence + "\n\nPoints tried (" + std::to_string(tried.size()) + ", by " + name + "):\n";
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) line += fmt::format("{:<{}}  ", row[i], width[i]);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  write_stdout(out);
  return kExitOk;
}

}  // namespace kvsim::cli
