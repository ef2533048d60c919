// kvsim replay: the same trace through one or more allocators, side by side. It parses
// options, builds the layout, allocators and cost model from the library, runs one engine
// per allocator (in parallel where cores allow; each reads the trace itself, so the results
// are those of running them one by one) and prints the results.
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <thread>

#include "cli.h"
#include "cost_model.h"
#include "decimal.h"
#include "kvsim/allocator.h"
#include "kvsim/budget.h"
#include "kvsim/error.h"
#include "kvsim/replay.h"
#include "kvsim/trace.h"
#include "kvsim/trace_gen.h"
#include "kvsim/units.h"
#include "model_options.h"
#include "replay_output.h"

namespace kvsim::cli {
namespace {

const CommandSpec kSpec{
    "kvsim replay TRACE [options]",
    "Replays TRACE through each allocator of --allocator on the same schedule and prints, per\n"
    "allocator and byte-exact, effective tokens against allocated and reserved slots, where\n"
    "internal fragmentation goes (partial-block tail, reservation ahead, padding past the\n"
    "request's limit, duplicate prompt copies, tokens outside a sliding window), external\n"
    "fragmentation, peak occupancy and latencies. Without a memory budget the run measures\n"
    "demand: every allocator sees the same schedule. The schedule is simulated continuous\n"
    "batching with a cost model, or the trace's own start/first_token/finish times when it\n"
    "has them.\n\n" +
        allocator_help(),
    "  kvsim replay traces/chat-mix.csv --model llama-3.1-8b\n"
    "  kvsim replay traces/long-context.csv --model gemma-3-27b --allocator paged,sliding-window --json\n"
    "  kvsim replay trace.csv --model mistral-7b-v0.1 --allocator 'dense-static:reserve=max-tokens,paged:block=32'\n"
    "  kvsim replay trace.csv --cost constant:step=25ms,prefill-token=50us --timeline t.csv --sample-every 1s"};

const char* kDefaultAllocators = "dense-static,dynamic,paged,sliding-window";
const char* kDefaultModel = "llama-3.1-8b";
const char* kDefaultDevice = "H100-80GB";

Preemption parse_preemption(const std::string& text) {
  if (text == "recompute") return Preemption::recompute;
  if (text == "swap") return Preemption::swap;
  throw InputError(Location{"", 0, "--preemption"}, "expected recompute or swap, got \"" + text + "\"");
}

// A share in [0, 1) such as "0.01", exactly, in parts per billion.
std::int64_t parse_fraction_ppb(const std::string& text, const char* option) {
  std::int64_t ppb = 0;
  if (detail::parse_scaled_decimal(text, 9, ppb) != detail::DecimalStatus::ok || ppb >= 1'000'000'000) {
    throw InputError(Location{"", 0, option}, "expected a fraction from 0 up to (not including) 1, got \"" + text + "\"");
  }
  return ppb;
}

std::string budget_description(const Budget& b) {
  if (b.direct) return format_gib(b.kv_budget_bytes) + " (" + with_commas(b.kv_budget_bytes) + " bytes, --kv-budget)";
  return format_gib(b.kv_budget_bytes) + " (" + with_commas(b.kv_budget_bytes) + " bytes) on " +
         (b.device.empty() ? std::string("the device") : b.device) + ": " + with_commas(b.device_total_bytes) +
         " x " + format_ppb(b.gpu_memory_utilization_ppb) + " - weights " + with_commas(b.weights_bytes_per_device) +
         " - reserve " + with_commas(b.reserve_bytes);
}

Schedule parse_schedule(const std::string& text) {
  if (text == "auto") return Schedule::automatic;
  if (text == "simulate") return Schedule::simulate;
  if (text == "measured") return Schedule::measured;
  throw InputError(Location{"", 0, "--schedule"}, "expected auto, simulate or measured, got \"" + text + "\"");
}

// Progress on stderr, for people watching a terminal; nothing when stderr is redirected.
class Progress {
 public:
  explicit Progress(std::size_t runs, bool enabled) : fractions_(runs), enabled_(enabled) {
    for (auto& f : fractions_) f.store(0);
  }
  std::function<void(double)> sink(std::size_t run) {
    if (!enabled_) return {};
    return [this, run](double f) { fractions_[run].store(f); };
  }
  bool enabled() const { return enabled_; }
  void draw() const {
    if (!enabled_) return;
    double sum = 0;
    for (const auto& f : fractions_) sum += f.load();
    const double done = fractions_.empty() ? 1.0 : sum / static_cast<double>(fractions_.size());
    const int width = 40;
    const int filled = static_cast<int>(done * width);
    fmt::print(stderr, "\rreplaying [{}{}] {:3.0f}%", std::string(static_cast<std::size_t>(filled), '#'),
               std::string(static_cast<std::size_t>(width - filled), ' '), done * 100);
    std::fflush(stderr);
  }
  void clear() const {
    if (enabled_) fmt::print(stderr, "\r{}\r", std::string(60, ' '));
  }

 private:
  std::vector<std::atomic<double>> fractions_;
  bool enabled_;
};

}  // namespace

int run_replay(const Invocation& inv) {
  po::options_description alloc_opts("Allocators and schedule");
  alloc_opts.add_options()
      ("allocator", po::value<std::string>()->default_value(kDefaultAllocators),
       "allocators to compare: KIND[:key=value,...] separated by commas (see above)")
      ("max-model-len", po::value<std::string>(),
       "refuse requests longer than this (default: the model's max_position_embeddings); also "
       "dense-static's max-model-len reservation")
      ("schedule", po::value<std::string>()->default_value("auto"),
       "auto (measured when the trace has start/first_token/finish), simulate, or measured")
      ("cost", po::value<std::string>()->default_value("roofline"),
       "iteration cost: roofline (from the model on --device), constant:step=..,prefill-token=.., or "
       "linear:base=..,prefill-token=..,decode-seq=..,context-token=.. (units ps, ns, us, ms, s; a "
       "coefficient not given is the roofline's)")
      ("max-batched-tokens", po::value<std::string>(),
       "tokens per iteration, decodes included (default: unlimited in demand mode; under a budget, as vLLM: "
       "8192, or max(max model length, 2048) with --no-chunked-prefill)")
      ("no-chunked-prefill", "admit a prompt only when it fits a step's token budget whole")
      ("max-running", po::value<std::string>(),
       "requests running at once (default: unlimited in demand mode, 256 under a budget, as vLLM)")
      ("default-max-tokens", po::value<std::string>(),
       "the generation limit planned for requests whose trace gives no max_tokens (default: their real "
       "output length)");
  std::string policy_help = "admission and preemption:";
  for (const PolicyInfo& p : policies()) {
    policy_help += (policy_help.back() == ':' ? " " : ", ") + std::string(p.name) + " (" + std::string(p.help) + ")";
  }
  po::options_description memory_opts("Serving under a memory budget (give --device, --device-memory or --kv-budget)");
  memory_opts.add_options()
      ("policy", po::value<std::string>()->default_value("vllm"), policy_help.c_str())
      ("preemption", po::value<std::string>()->default_value("recompute"),
       "vllm policy: recompute (free and requeue at the front) or swap (move the blocks to host memory)")
      ("watermark", po::value<std::string>()->default_value("0.01"),
       "vllm policy: the share of capacity an admission must leave free (vLLM v0's default 0.01)")
      ("swap-bandwidth", po::value<std::string>()->default_value("25GB"),
       "host link for swapping, bytes per second (about PCIe 4.0 x16 in practice)");
  po::options_description trace_opts("Trace");
  trace_opts.add_options()
      ("format", po::value<std::string>(), "trace format (default: detected): native-csv, native-jsonl, azure, "
                                           "burstgpt, mooncake, vidur, lengths, token-ids")
      ("sort", "accept arrivals out of order (sorts the trace in memory)")
      ("keep-failed", "BurstGPT: replay failed requests (0 response tokens) as cancelled at arrival")
      ("rate", po::value<std::string>(), "length-only traces: Poisson arrivals at this many requests per second")
      ("seed", po::value<std::string>(), "length-only traces: the arrival process's seed (default 1)");
  po::options_description output_opts("Output");
  output_opts.add_options()
      ("json", "print everything as JSON instead of the table")
      ("csv", po::value<std::string>(), "also write one CSV row per allocator to this file")
      ("timeline", po::value<std::string>(), "write occupancy over time to this CSV file (columns named with units)")
      ("sample-every", po::value<std::string>(), "timeline sampling: at most one row per this duration (default: every iteration)")
      ("jobs", po::value<std::string>(), "allocators replayed at once (default: the number of cores)")
      ("quiet", "no progress bar");
  po::options_description hidden;
  hidden.add_options()("trace", po::value<std::string>());
  po::options_description options;
  options.add(model_options(std::string("a built-in preset (default ") + kDefaultModel + "; see 'kvsim models')"))
      .add(placement_options())
      .add(alloc_opts)
      .add(budget_options())
      .add(memory_opts)
      .add(trace_opts)
      .add(output_opts);
  po::positional_options_description positional;
  positional.add("trace", 1);
  po::variables_map vm;
  if (!parse_options(inv, kSpec, options, positional, vm, &hidden)) return kExitOk;
  const auto trace_path = option_text(vm, "trace");
  if (!trace_path) throw UsageError("a trace file is required\nUsage: " + kSpec.synopsis);

  // The model and its layout on one device.
  ModelChoice choice = resolve_model(vm, kSpec.synopsis, kDefaultModel);
  KvLayout layout = choice.layout();
  if (const auto m = option_text(vm, "max-model-len")) layout.max_model_len = positive_integer(*m, "--max-model-len");

  // A budget bounds every allocator; the cost model runs on the budget's device.
  const std::optional<BudgetOptions> budget_options_given = resolve_budget(vm);
  std::optional<Budget> budget;
  if (budget_options_given) budget = derive_budget(choice.model, choice.kv, *budget_options_given);
  const std::string device_name =
      budget_options_given && !budget_options_given->device.empty() ? budget_options_given->device : kDefaultDevice;
  const DevicePreset& device = find_device_preset(device_name);
  const ModelWeights weights = model_weights(choice.model, choice.kv, budget_options_given.value_or(BudgetOptions{}));
  const CostModel roofline = roofline_cost_model(layout, device, weights);

  ReplayOptions ro;
  ro.layout = layout;
  ro.schedule = parse_schedule(vm["schedule"].as<std::string>());
  ro.cost = parse_cost_model(vm["cost"].as<std::string>(), roofline, "--cost");
  if (const auto t = option_text(vm, "max-batched-tokens")) ro.max_batched_tokens = positive_integer(*t, "--max-batched-tokens");
  ro.chunked_prefill = vm.count("no-chunked-prefill") == 0;
  if (const auto r = option_text(vm, "max-running")) ro.max_running = positive_integer(*r, "--max-running");
  if (const auto d = option_text(vm, "default-max-tokens")) ro.default_max_tokens = positive_integer(*d, "--default-max-tokens");
  if (budget) {
    ro.memory.kv_budget_bytes = budget->kv_budget_bytes;
    // vLLM's defaults for a served model (max_num_seqs, max_num_batched_tokens).
    if (!vm.count("max-running")) ro.max_running = 256;
    // vLLM's SchedulerConfig: 8192 with chunked prefill (v1's default for serving); without
    // it, max(max_model_len, 2048), so that any prompt the model accepts fits one step.
    if (!vm.count("max-batched-tokens")) {
      ro.max_batched_tokens = ro.chunked_prefill ? 8192 : std::max<std::int64_t>(layout.max_model_len, 2048);
    }
  }
  if (budget && ro.schedule == Schedule::measured) {
    throw UsageError("--schedule measured replays the trace's own timestamps, which a memory budget would have to "
                     "change: give one or the other\nUsage: " + kSpec.synopsis);
  }
  const PolicyInfo policy = find_policy(vm["policy"].as<std::string>(), "--policy");
  ro.memory.policy = Policy{std::string(policy.name)};
  ro.memory.preemption = parse_preemption(vm["preemption"].as<std::string>());
  if (ro.memory.preemption == Preemption::swap && !policy.supports_swap) {
    std::string swapping;
    for (const PolicyInfo& p : policies()) {
      if (p.supports_swap) swapping += (swapping.empty() ? "" : ", ") + std::string(p.name);
    }
    throw InputError(Location{"", 0, "--preemption"}, "swap applies to the " + swapping + " policy only");
  }
  ro.memory.watermark_ppb = parse_fraction_ppb(vm["watermark"].as<std::string>(), "--watermark");
  ro.memory.swap_bytes_per_second = parse_byte_size(vm["swap-bandwidth"].as<std::string>(), "--swap-bandwidth");
  if (ro.memory.swap_bytes_per_second <= 0) {
    throw InputError(Location{"", 0, "--swap-bandwidth"}, "expected a positive number of bytes per second");
  }
  if (!budget) {
    for (const char* option : {"policy", "preemption", "watermark", "swap-bandwidth"}) {
      if (!vm[option].defaulted()) {
        throw InputError(Location{"", 0, std::string("--") + option},
                         "applies under a memory budget: give --device, --device-memory or --kv-budget");
      }
    }
  }
  if (const auto s = option_text(vm, "sample-every")) {
    ro.sample_every_ns = parse_duration_ns(*s, "--sample-every");
    if (ro.sample_every_ns <= 0) throw InputError(Location{"", 0, "--sample-every"}, "expected a positive duration");
  }

  TraceOptions to;
  if (const auto f = option_text(vm, "format")) to.format = parse_trace_format(*f, "--format");
  to.sort = vm.count("sort") != 0;
  to.keep_failed = vm.count("keep-failed") != 0;
  if (const auto r = option_text(vm, "rate")) to.synthetic_rate_per_s = parse_rate_per_s(*r, "--rate");
  if (const auto seed = option_text(vm, "seed")) to.synthetic_seed = parse_seed(*seed, "--seed");

  const std::vector<AllocatorSpec> specs = parse_allocator_list(vm["allocator"].as<std::string>(), "--allocator");
  // Build every allocator before reading anything, so a bad spec fails at once.
  std::vector<std::unique_ptr<Allocator>> allocators;
  AllocatorLimits limits;
  limits.capacity_bytes = ro.memory.kv_budget_bytes;
  for (const auto& spec : specs) allocators.push_back(make_allocator(spec, layout, limits));
  // Open the trace once up front: a missing file or unknown format fails before any work.
  open_trace(*trace_path, to);

  std::size_t jobs = std::max(1u, std::thread::hardware_concurrency());
  if (const auto j = option_text(vm, "jobs")) jobs = static_cast<std::size_t>(positive_integer(*j, "--jobs"));
  jobs = std::min(jobs, allocators.size());

  const auto timeline_path = option_text(vm, "timeline");
  // Each run writes its timeline rows to its own scratch file; they are joined in
  // allocator order at the end, so the file is the same however the runs interleave.
  std::vector<std::FILE*> scratch(allocators.size(), nullptr);
  struct Closer {
    std::vector<std::FILE*>& files;
    ~Closer() {
      for (auto* f : files) {
        if (f != nullptr) std::fclose(f);
      }
    }
  } closer{scratch};

  Progress progress(allocators.size(), vm.count("quiet") == 0 && ::isatty(STDERR_FILENO) != 0);
  std::vector<ReplayReport> reports(allocators.size());
  std::vector<std::exception_ptr> errors(allocators.size());
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> finished{0};
  auto worker = [&] {
    for (std::size_t i = next++; i < allocators.size(); i = next++) {
      try {
        ReplayOptions mine = ro;
        mine.progress = progress.sink(i);
        if (timeline_path) {
          scratch[i] = std::tmpfile();
          if (scratch[i] == nullptr) throw InputError(Location{*timeline_path, 0, ""}, "cannot create a scratch file");
          const std::string name = allocators[i]->name();
          std::FILE* out = scratch[i];
          mine.timeline = [out, name](const TimelineRow& row) {
            const std::string line = timeline_row(name, row);
            std::fwrite(line.data(), 1, line.size(), out);
          };
        }
        auto trace = open_trace(*trace_path, to);
        reports[i] = replay(*trace, *allocators[i], mine);
      } catch (...) {
        errors[i] = std::current_exception();
      }
      ++finished;
    }
  };
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < jobs; ++t) threads.emplace_back(worker);
  // Only a progress bar needs this thread to wake up; otherwise it just waits.
  while (progress.enabled() && finished.load() < allocators.size()) {
    progress.draw();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  for (auto& t : threads) t.join();
  progress.clear();
  // The first error in allocator order, whichever thread met it first.
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }

  if (timeline_path) {
    std::ofstream out(*timeline_path, std::ios::binary);
    if (!out) throw InputError(Location{*timeline_path, 0, ""}, "cannot write the timeline file");
    out << timeline_header(layout);
    for (auto* f : scratch) {
      std::rewind(f);
      char buffer[1 << 16];
      for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, f)) > 0;) out.write(buffer, static_cast<std::streamsize>(n));
    }
    if (!out) throw InputError(Location{*timeline_path, 0, ""}, "writing the timeline file failed");
  }

  ReplayContext context;
  context.trace = *trace_path;
  context.model_name = choice.model.name;
  context.model_source = choice.model.source;
  context.kv_dtype = std::string(kv_dtype_info(choice.kv.dtype).name);
  context.placement = fmt::format("tp {}, pp {} (figures per device)", choice.kv.tensor_parallel, choice.kv.pipeline_parallel);
  context.layout = layout;
  context.cost = ro.cost;
  context.budget = budget ? budget_description(*budget) : "none (demand: every allocator unbounded)";
  context.scheduler = fmt::format("max batched tokens {}, chunked prefill {}, max running {}",
                                  ro.max_batched_tokens > 0 ? with_commas(ro.max_batched_tokens) : "unlimited",
                                  ro.chunked_prefill ? "on" : "off",
                                  ro.max_running > 0 ? with_commas(ro.max_running) : "unlimited");
  if (const auto csv = option_text(vm, "csv")) {
    std::ofstream out(*csv, std::ios::binary);
    if (!out) throw InputError(Location{*csv, 0, ""}, "cannot write the CSV file");
    out << replay_csv(reports);
  }
  fmt::print("{}", vm.count("json") != 0 ? replay_json(context, reports) : replay_table(context, reports));
  return kExitOk;
}

}  // namespace kvsim::cli
