// kvsim replay: the same trace through one or more allocators, side by side. In four steps,
// one function each: declare and parse the options; turn them into the library's
// ReplayOptions, TraceOptions and allocators (plan_replay); run one engine per allocator (in
// parallel where cores allow; each reads the trace itself, so the results are those of
// running them one by one; run_all); write the timeline and print the results (render).
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "cli.h"
#include "kvsim/allocator.h"
#include "kvsim/budget.h"
#include "kvsim/cost_model.h"
#include "kvsim/replicas.h"
#include "kvsim/error.h"
#include "kvsim/option_names.h"
#include "kvsim/output_file.h"
#include "kvsim/parse.h"
#include "kvsim/replay.h"
#include "kvsim/trace.h"
#include "kvsim/trace_gen.h"
#include "kvsim/units.h"
#include "html_report.h"
#include "model_options.h"
#include "replay_output.h"
#include "progress.h"
#include "replay_plan.h"

namespace kvsim::cli {
namespace {

// --replicas' bound: vLLM's data-parallel deployments run tens of ranks; each replica here is
// a whole engine and pool, so a thousand idle ones cost seconds and gigabytes on a small trace.

const CommandSpec kSpec{
    "kvsim replay TRACE [options]",
    "Replays TRACE through each allocator of --allocator on the same schedule and prints, per\n"
    "allocator and byte-exact, effective tokens against allocated and reserved slots, where\n"
    "internal fragmentation goes (partial-block tail, reservation ahead, padding past the\n"
    "request's limit, duplicate prompt copies, tokens outside a sliding window), external\n"
    "fragmentation, peak occupancy and latencies. Without a memory budget the run measures\n"
    "demand: every allocator sees the same schedule. The schedule is simulated continuous\n"
    "batching with a cost model, or the trace's own start/first_token/finish times when it\n"
    "has them. TRACE may be '-' (standard input).\n\n" +
        allocator_help() + "\n" + replay_figures_help(),
    "  kvsim replay traces/chat-mix.csv --model llama-3.1-8b\n"
    "  kvsim replay traces/long-context.csv --model gemma-3-27b --allocator paged,sliding-window --json\n"
    "  kvsim replay trace.csv --model mistral-7b-v0.1 --allocator 'dense-static:reserve=max-tokens,paged:block=32'\n"
    "  kvsim replay trace.csv --cost constant:step=25ms,prefill-token=50us --timeline t.csv --sample-every 1s\n"
    "  kvsim replay traces/chat-mix.csv --time-window 1min..2min --rate-scale 1.5"};

const char* kDefaultAllocators = "dense-static,dynamic,paged,sliding-window";
const char* kDefaultModel = "llama-3.1-8b";
// The timeline's default sampling: a row at least this often at first, and at most this many
// rows per allocator (a few thousand: what a plot needs).
constexpr std::int64_t kDefaultSampleEveryNs = 1'000'000;  // 1 ms
constexpr std::int64_t kDefaultTimelineRows = 4096;

Preemption parse_preemption(const std::string& text) {
  if (text == "recompute") return Preemption::recompute;
  if (text == "swap") return Preemption::swap;
  throw InputError(Location{"", 0, kOptPreemption}, "expected recompute or swap, got \"" + text + "\"");
}

Schedule parse_schedule(const std::string& text) {
  if (text == "auto") return Schedule::automatic;
  if (text == "simulate") return Schedule::simulate;
  if (text == "measured") return Schedule::measured;
  throw InputError(Location{"", 0, kOptSchedule}, "expected auto, simulate or measured, got \"" + text + "\"");
}

}  // namespace

std::string budget_description(const Budget& b, std::string_view direct_source) {
  if (b.direct) {
    return format_gib(b.kv_budget_bytes) + " (" + with_commas(b.kv_budget_bytes) + " bytes, " +
           std::string(direct_source) + ")";
  }
  return format_gib(b.kv_budget_bytes) + " (" + with_commas(b.kv_budget_bytes) + " bytes) on " +
         (b.device.empty() ? std::string("the device") : b.device) + ": " + with_commas(b.device_total_bytes) +
         " x " + format_ppb(b.gpu_memory_utilization_ppb) + " - weights " + with_commas(b.weights_bytes_per_device) +
         " - reserve " + with_commas(b.reserve_bytes);
}

po::options_description replay_option_descriptions(bool with_outputs, bool with_cost, std::string_view one_allocator,
                                                   bool with_selection) {
  po::options_description alloc_opts("Allocators and schedule");
  const std::string max_batched_tokens_help = fmt::format(
      "tokens per iteration, decodes included (default: unlimited in demand mode; under a budget, as vLLM: "
      "{}, or max(max model length, {}) with {})",
      kVllmMaxNumBatchedTokens, kVllmMinNumBatchedTokensUnchunked, kOptNoChunkedPrefill);
  const std::string max_running_help = fmt::format(
      "sequences running at once, n per request (default: unlimited in demand mode, {} under a budget, or "
      "--max-batched-tokens if smaller, as vLLM)", kVllmMaxNumSeqs);
  // replay's help lists the kinds above its options; other commands point to it.
  const std::string allocators_help = std::string("allocators to compare: KIND[:key=value,...] separated by commas ") +
                                      (with_outputs ? "(see above)" : "(the kinds: 'kvsim replay --help')");
  const std::string one_allocator_help(one_allocator);
  if (one_allocator.empty()) {
    alloc_opts.add_options()(option_key(kOptAllocator), po::value<std::string>()->default_value(kDefaultAllocators),
                             allocators_help.c_str());
  } else {
    alloc_opts.add_options()(option_key(kOptAllocator), po::value<std::string>(), one_allocator_help.c_str());
  }
  alloc_opts.add_options()
      (option_key(kOptMaxModelLen), po::value<std::string>(),
       "refuse requests longer than this (default: the model's max_position_embeddings, or as far as "
       "its rope_scaling stretches it, as vLLM derives it); also dense-static's max-model-len reservation")
      (option_key(kOptSchedule), po::value<std::string>()->default_value("auto"),
       "auto (measured when the trace has start/first_token/finish), simulate, or measured");
  if (with_cost) {
    alloc_opts.add_options()(
        option_key(kOptCost), po::value<std::string>()->default_value("roofline"),
        "iteration cost: roofline (from the model on the timing device; roofline:overhead=.. adds a per-step "
        "overhead), constant:step=..,prefill-token=.., or "
        "linear:base=..,prefill-token=..,decode-seq=..,context-token=..[,expert-weights=..] (units ps, ns, us, "
        "ms, s; a coefficient not given is the roofline's; expert-weights, for an MoE model, reads all the "
        "device's routed experts and is charged by the share of them a step's tokens reach)");
  }
  alloc_opts.add_options()
      (option_key(kOptReplicas), po::value<std::string>(),
       "data-parallel replicas: this many engines (at most 1024), each with its own KV pool and scheduler, "
       "requests routed as vLLM's load balancer routes them; per-replica and total columns (default 1). An MoE model's "
       "replicas take every step together, each as long as the busiest replica's, as vLLM aligns their "
       "forward passes")
      (option_key(kOptExpertParallel),
       "with --replicas: the MoE model's routed experts are spread over the replicas (vLLM "
       "--enable-expert-parallel), so each device reads 1/N of them per step")
      (option_key(kOptDpRouter), po::value<std::string>()->default_value("queue-score"),
       "with --replicas: vLLM's router. queue-score (vLLM 0.19): 4 x waiting + running, from replica 0, "
       "a dense model's requests round robin (its engines publish no counts); in-flight (vLLM's main "
       "since July 2026): requests in flight, waiting weighted by KV usage, from a rotating start")
      (option_key(kOptTimingDevice), po::value<std::string>(),
       "the device the roofline times, without a memory budget (default: --device, else H100-80GB; "
       "see 'kvsim size --help' for the presets)")
      (option_key(kOptMaxBatchedTokens), po::value<std::string>(), max_batched_tokens_help.c_str())
      (option_key(kOptNoChunkedPrefill), "admit a prompt only when it fits a step's token budget whole")
      (option_key(kOptMaxRunning), po::value<std::string>(), max_running_help.c_str())
      (option_key(kOptAsyncScheduling), po::value<std::string>()->default_value("off"),
       "on: plan each step while the previous one runs, as vLLM does by default from 0.14 (a request "
       "arriving during a step starts in the step after the next, and a finished request holds its "
       "place under --max-running one step longer); off: plan it when the previous one ends. "
       "'kvsim validate' takes on for runs of vLLM 0.14 and later")
      (option_key(kOptCudaGraphs), po::value<std::string>()->default_value("off"),
       "on: run each step of at most min(2 x --max-running, 512, --max-batched-tokens) tokens as vLLM's "
       "CUDA graphs do, padded up to the next captured size (1, 2, 4, then multiples of 8 up to 256, of 16 "
       "above); the padding costs matmul time and reaches an MoE model's experts, and replicas that step "
       "together pad to the largest replica's size. 'kvsim validate' takes on for runs of vLLM 0.19 and "
       "later without enforce_eager")
      (option_key(kOptVllmVersion), po::value<std::string>(),
       "that vLLM version's defaults (e.g. 0.19.0), for the options not given, as read from vLLM 0.19's code: "
       "--async-scheduling on from 0.14 and --cuda-graphs on from 0.19 (kvsim models them as 0.19 runs them: "
       "earlier releases' graphs had other capture sizes); with --policy "
       "vllm, --watermark 0 from 0.8 (v1) and --reserve-full-isl on from 0.19. Without it replay's own defaults "
       "stand (vLLM v0's watermark, everything else off). 'kvsim validate' takes the run's version")
      (option_key(kOptDefaultMaxTokens), po::value<std::string>(),
       "the generation limit planned for requests whose trace gives no max_tokens, never below a request's real "
       "output length (default: that length)");
  std::string policy_help = "admission and preemption:";
  for (const PolicyInfo& p : policies()) {
    policy_help += (policy_help.back() == ':' ? " " : ", ") + std::string(p.name) + " (" + std::string(p.help) + ")";
  }
  po::options_description memory_opts("Serving under a memory budget (give --device, --device-memory or --kv-budget)");
  memory_opts.add_options()
      (option_key(kOptPolicy), po::value<std::string>()->default_value("vllm"), policy_help.c_str())
      (option_key(kOptPreemption), po::value<std::string>()->default_value("recompute"),
       "vllm policy: recompute (free and requeue at the front) or swap (move the blocks to host memory)")
      (option_key(kOptSchedulePolicy), po::value<std::string>()->default_value("fcfs"),
       "sglang policy: the waiting queue's order, SGLang's --schedule-policy: fcfs (its default) or lpm "
       "(longest cached prefix first, with a prefix-caching allocator; fcfs while more than 128 wait)")
      (option_key(kOptWatermark), po::value<std::string>()->default_value("0.01"),
       "vllm policy: the share of capacity an admission must leave free (vLLM v0's default 0.01; v1 has "
       "none through 0.19, and 'kvsim validate' gives 0 for runs of vLLM 0.8 and later)")
      (option_key(kOptReserveFullIsl), po::value<std::string>()->default_value("off"),
       "vllm policy: on: admit a waiting request only if the blocks of its whole sequence so far fit, not "
       "only its next chunk's, as vLLM's scheduler_reserve_full_isl (on by default from vLLM 0.19; "
       "'kvsim validate' takes on for those runs); off: the next chunk's blocks suffice")
      (option_key(kOptSwapBandwidth), po::value<std::string>()->default_value("25GB"),
       "host link for swapping, bytes per second (about PCIe 4.0 x16 in practice)");
  std::string format_help = "trace format (default: auto, detected):";
  for (const auto name : trace_format_names()) {
    if (name != "auto") format_help.append(format_help.back() == ':' ? " " : ", ").append(name);
  }
  po::options_description trace_opts("Trace");
  trace_opts.add_options()
      (option_key(kOptFormat), po::value<std::string>(), format_help.c_str())
      (option_key(kOptSort), "accept arrivals out of order (sorts the trace in memory)")
      (option_key(kOptKeepFailed), "BurstGPT: replay failed requests (0 response tokens) as cancelled at arrival")
      (option_key(kOptRate), po::value<std::string>(), "length-only traces: Poisson arrivals at this many requests per second")
      (option_key(kOptSeed), po::value<std::string>(), "length-only traces: the arrival process's seed (default 1)");
  if (with_selection) {
    trace_opts.add_options()
        (option_key(kOptTimeWindow), po::value<std::string>(),
         "replay requests arriving in [FROM, TO) of the trace's own time, e.g. 10min..20min (either end optional)")
        (option_key(kOptRequests), po::value<std::string>(), "replay the first N requests (after --time-window)")
        (option_key(kOptRateScale), po::value<std::string>(),
         "divide arrival times (from time 0) by X, to the nearest ns: 2 doubles the load (docs/replay.md)");
  }
  po::options_description output_opts("Output");
  output_opts.add_options()("json", "print everything as JSON instead of the table");
  for (const ReportOutput& output : report_outputs()) {
    output_opts.add_options()(std::string(output.option).c_str(), po::value<std::string>(),
                              std::string(output.help).c_str());
  }
  output_opts.add_options()
      (option_key(kOptSampleEvery), po::value<std::string>(),
       "timeline sampling: at most one row per this duration D (a row at the first step at least D after the "
       "previous one), each also with the maximum and mean of allocated bytes since the previous row, so no "
       "peak is lost; 'step' for one row per engine step. Default: rows at least 1ms apart, at most 4,096 per "
       "allocator: whenever there would be more, adjacent rows merge in pairs and the interval doubles")
      (option_key(kOptJobs), po::value<std::string>(), "allocators replayed at once (default: the number of cores)")
      ("quiet", "no progress bar");
  po::options_description options;
  options.add(model_options(std::string("a built-in preset (default ") + kDefaultModel + "; see 'kvsim models')"))
      .add(placement_options())
      .add(alloc_opts)
      .add(budget_options())
      .add(memory_opts)
      .add(trace_opts);
  if (with_outputs) options.add(output_opts);
  return options;
}


std::int64_t expert_parallel_ranks(const po::variables_map& vm, const ModelChoice& choice) {
  if (vm.count(option_key(kOptExpertParallel)) == 0) return 1;
  const auto replicas_text = option_text(vm, option_key(kOptReplicas));
  const std::int64_t replicas = replicas_text ? positive_integer(*replicas_text, kOptReplicas) : 1;
  if (!choice.model.moe || replicas < 2) {
    throw InputError(Location{"", 0, kOptExpertParallel}, std::string("spreads an MoE model's experts over ") +
                                                              kOptReplicas + " N >= 2 replicas");
  }
  return replicas;
}

namespace {

// The engine's options: layout, schedule, cost model and limits, and serving under a budget.
// The model's roofline on the budget's device (or kDefaultTimingDevice) is the cost model's default.
ReplayOptions replay_options_from(const po::variables_map& vm, const ModelChoice& choice, const KvLayout& layout,
                                  const std::optional<BudgetOptions>& budget_options_given,
                                  const std::optional<Budget>& budget) {
  // The timing device: its own option, else the budget's device, else the default.
  std::string device_name =
      budget_options_given && !budget_options_given->device.empty() ? budget_options_given->device : kDefaultTimingDevice;
  if (const auto d = option_text(vm, option_key(kOptTimingDevice))) device_name = *d;
  const DevicePreset& device = find_device_preset(device_name, kOptTimingDevice);
  // Without a budget the weights' terms still give the weights the roofline reads each step.
  BudgetOptions weight_options = budget_options_given ? *budget_options_given : weight_terms(vm);
  weight_options.expert_parallel_ranks = expert_parallel_ranks(vm, choice);
  const auto replicas_text = option_text(vm, option_key(kOptReplicas));
  const std::int64_t replicas = replicas_text ? positive_integer(*replicas_text, kOptReplicas) : 1;
  RooflineParallel parallel;
  parallel.tensor_parallel = choice.kv.tensor_parallel;
  parallel.pipeline_parallel = choice.kv.pipeline_parallel;
  if (choice.model.moe) parallel.moe_replicas = replicas;
  // With expert parallelism a device reads only its own experts per step.
  ModelWeights weights;
  try {
    weights = model_weights(choice.model, choice.kv, weight_options);
  } catch (const InputError&) {
    // Weights that cannot be counted (a model without a vocabulary size, as seed-example)
    // matter only to a cost that takes a term from the roofline, and to a budget derived
    // from a device (a --kv-budget given as such needs none).
    const CostModel named = parse_cost_model(vm[option_key(kOptCost)].as<std::string>(),
                                             roofline_cost_model(choice.model, layout, device, weights, parallel), kOptCost);
    if ((budget_options_given && !budget_options_given->kv_budget_bytes) || !named.device.empty()) throw;
  }
  const CostModel roofline = roofline_cost_model(choice.model, layout, device, weights, parallel);

  ReplayOptions ro;
  ro.layout = layout;
  // vLLM aligns the forward passes of an MoE model's data-parallel ranks (replicas.h).
  ro.replicas_step_together = choice.model.moe.has_value();
  {
    const std::string router = vm[option_key(kOptDpRouter)].as<std::string>();
    if (router == "in-flight") {
      ro.dp_router = ReplayOptions::DpRouter::in_flight;
    } else if (router != "queue-score") {
      throw InputError(Location{"", 0, kOptDpRouter}, "expected queue-score or in-flight, got \"" + router + "\"");
    }
    if (!vm[option_key(kOptDpRouter)].defaulted() && replicas < 2) {
      throw InputError(Location{"", 0, kOptDpRouter}, std::string("routes requests between ") + kOptReplicas +
                                                         " N >= 2 replicas");
    }
  }
  ro.schedule = parse_schedule(vm[option_key(kOptSchedule)].as<std::string>());
  ro.cost = parse_cost_model(vm[option_key(kOptCost)].as<std::string>(), roofline, kOptCost);
  // Without a budget the weights' terms act only through the roofline's terms.
  if (!budget_options_given && ro.cost.device.empty()) {
    for (const char* term : {kOptParams, kOptWeightDtype, kOptWeightsBytes}) {
      if (option_text(vm, option_key(term))) {
        throw InputError(Location{"", 0, term}, std::string("gives the weights the roofline reads each step, and ") +
                                                    kOptCost + " names every term of its own: it would have no effect");
      }
    }
  }
  if (const auto t = option_text(vm, option_key(kOptMaxBatchedTokens))) {
    ro.max_batched_tokens = positive_integer(*t, kOptMaxBatchedTokens);
  }
  ro.chunked_prefill = vm.count(option_key(kOptNoChunkedPrefill)) == 0;
  if (const auto r = option_text(vm, option_key(kOptMaxRunning))) ro.max_running = positive_integer(*r, kOptMaxRunning);
  // --vllm-version: that version's defaults for the options the command line leaves out.
  VllmVersionDefaults version;
  if (const auto v = option_text(vm, option_key(kOptVllmVersion))) {
    const auto d = vllm_version_defaults(*v);
    if (!d) throw InputError(Location{"", 0, kOptVllmVersion}, "expected a version such as 0.19.0, got \"" + *v + "\"");
    version = *d;
  }
  const auto on_off_or = [&vm](const char* option, bool fallback) {
    return vm[option_key(option)].defaulted() ? fallback : on_off(vm, option);
  };
  ro.async_scheduling = on_off_or(kOptAsyncScheduling, version.async_scheduling);
  const bool graphs = on_off_or(kOptCudaGraphs, version.cuda_graphs);
  if (const auto d = option_text(vm, option_key(kOptDefaultMaxTokens))) {
    ro.default_max_tokens = token_count(*d, kOptDefaultMaxTokens);
  }
  if (budget) ro.memory.kv_budget_bytes = budget->kv_budget_bytes;
  // Options not given are 0 here; under a budget they become vLLM's (the library's rule).
  apply_vllm_scheduler_defaults(ro);
  check_scheduler_limits(ro);  // when planned, so that a sweep names its point
  if (graphs) ro.cuda_graph_max_tokens = cuda_graph_max_tokens(ro.max_running, ro.max_batched_tokens);
  // Options that cannot act in the combination given, refused rather than echoed as if they
  // had acted: with no bound on a step's tokens (demand mode) no prompt is split, and
  // constant and linear costs charge padding only through routed experts' reads.
  if (given(vm, option_key(kOptNoChunkedPrefill)) && ro.max_batched_tokens == 0) {
    throw InputError(Location{"", 0, kOptNoChunkedPrefill},
                     std::string("with no ") + kOptMaxBatchedTokens +
                         " bound (demand mode, no budget) no prompt is split into chunks: it would have no effect");
  }
  if (given(vm, option_key(kOptCudaGraphs)) && graphs && !ro.cost.roofline && ro.cost.expert_weights_ps == 0) {
    throw InputError(Location{"", 0, kOptCudaGraphs},
                     "pads a step's tokens to a captured size, which --cost \"" + ro.cost.name +
                         "\" charges nothing for (no routed experts' read): it would have no effect");
  }
  // What only a simulated schedule uses: refused on a trace whose times fix the schedule.
  for (const char* option : {kOptCost, kOptTimingDevice, kOptMaxBatchedTokens, kOptNoChunkedPrefill, kOptMaxRunning,
                             kOptAsyncScheduling, kOptCudaGraphs, kOptVllmVersion}) {
    if (given(vm, option_key(option))) ro.simulation_options.emplace_back(option);
  }
  if (budget && ro.schedule == Schedule::measured) {
    throw UsageError("--schedule measured replays the trace's own timestamps, which a memory budget would have to "
                     "change: give one or the other\nUsage: " + current_synopsis());
  }
  const PolicyInfo policy = find_policy(vm[option_key(kOptPolicy)].as<std::string>(), kOptPolicy);
  ro.memory.policy = Policy{std::string(policy.name)};
  ro.memory.preemption = parse_preemption(vm[option_key(kOptPreemption)].as<std::string>());
  if (ro.memory.preemption == Preemption::swap && !policy.supports_swap) {
    std::string swapping;
    for (const PolicyInfo& p : policies()) {
      if (p.supports_swap) swapping += (swapping.empty() ? "" : ", ") + std::string(p.name);
    }
    throw InputError(Location{"", 0, kOptPreemption}, "swap applies to the " + swapping + " policy only");
  }
  const std::string schedule_policy = vm[option_key(kOptSchedulePolicy)].as<std::string>();
  if (schedule_policy != "fcfs" && schedule_policy != "lpm") {
    throw InputError(Location{"", 0, kOptSchedulePolicy}, "expected fcfs or lpm, got \"" + schedule_policy + "\"");
  }
  ro.memory.sglang_lpm = schedule_policy == "lpm";
  if (!vm[option_key(kOptSchedulePolicy)].defaulted() && policy.name != "sglang") {
    throw InputError(Location{"", 0, kOptSchedulePolicy}, "applies to the sglang policy only (--policy sglang)");
  }
  const bool vllm = policy.name == "vllm";
  ro.memory.watermark_ppb = parse_fraction_ppb(vm[option_key(kOptWatermark)].as<std::string>(), kOptWatermark);
  if (vm[option_key(kOptWatermark)].defaulted() && vllm && version.no_watermark) ro.memory.watermark_ppb = 0;
  if (!vm[option_key(kOptWatermark)].defaulted() && !vllm) {
    throw InputError(Location{"", 0, kOptWatermark}, "applies to the vllm policy only (--policy vllm)");
  }
  ro.memory.reserve_full_isl = on_off_or(kOptReserveFullIsl, vllm && version.reserve_full_isl);
  if (!vm[option_key(kOptReserveFullIsl)].defaulted() && !vllm) {
    throw InputError(Location{"", 0, kOptReserveFullIsl}, "applies to the vllm policy only (--policy vllm)");
  }
  // Without chunking a request's first chunk is its whole sequence so far, which is what the
  // check would ask room for: it cannot change an admission.
  if (!vm[option_key(kOptReserveFullIsl)].defaulted() && ro.memory.reserve_full_isl && !ro.chunked_prefill) {
    throw InputError(Location{"", 0, kOptReserveFullIsl},
                     std::string("asks room for the whole sequence before its first chunk, and with ") +
                         kOptNoChunkedPrefill + " the first chunk is the whole sequence: it would have no effect");
  }
  ro.memory.swap_bytes_per_second =
      parse_byte_size(vm[option_key(kOptSwapBandwidth)].as<std::string>(), kOptSwapBandwidth);
  if (ro.memory.swap_bytes_per_second <= 0) {
    throw InputError(Location{"", 0, kOptSwapBandwidth}, "expected a positive number of bytes per second");
  }
  if (!vm[option_key(kOptSwapBandwidth)].defaulted() && ro.memory.preemption != Preemption::swap) {
    throw InputError(Location{"", 0, kOptSwapBandwidth}, "applies to --preemption swap only");
  }
  if (!budget) {
    for (const char* option :
         {kOptPolicy, kOptPreemption, kOptSchedulePolicy, kOptWatermark, kOptReserveFullIsl, kOptSwapBandwidth}) {
      if (!vm[option_key(option)].defaulted()) {
        throw InputError(Location{"", 0, option},
                         "applies under a memory budget: give --device, --device-memory or --kv-budget");
      }
    }
  }
  // The outputs that read the timeline's rows (--timeline, --html): asking for one turns the
  // timeline on.
  bool timeline_asked = false;
  std::string timeline_outputs;
  for (const ReportOutput& output : report_outputs()) {
    if (!output.timeline) continue;
    timeline_asked = timeline_asked || vm.count(std::string(output.option)) != 0;
    timeline_outputs += (timeline_outputs.empty() ? "--" : " or --") + std::string(output.option);
  }
  if (const auto s = option_text(vm, option_key(kOptSampleEvery))) {
    // "step": one row per engine step; a duration: a row at most that often, however many.
    if (*s != "step") {
      ro.sample_every_ns = parse_duration_ns(*s, kOptSampleEvery);
      if (ro.sample_every_ns <= 0) throw InputError(Location{"", 0, kOptSampleEvery}, "expected a positive duration");
    }
    if (!timeline_asked) {
      throw InputError(Location{"", 0, kOptSampleEvery}, "samples the timeline of " + timeline_outputs +
                                                             ", and none is written: it would have no effect");
    }
  } else if (timeline_asked) {
    // The default stays small on any trace, its length unknown in advance: rows at least
    // kDefaultSampleEveryNs apart, merged in pairs (the interval doubling) whenever there
    // would be more than kDefaultTimelineRows (docs/replay.md, "Timeline").
    ro.sample_every_ns = kDefaultSampleEveryNs;
    ro.timeline_max_rows = kDefaultTimelineRows;
  }
  return ro;
}

TraceOptions trace_options_from(const po::variables_map& vm) {
  TraceOptions to;
  if (const auto f = option_text(vm, option_key(kOptFormat))) to.format = parse_trace_format(*f, kOptFormat);
  to.sort = vm.count(option_key(kOptSort)) != 0;
  to.keep_failed = vm.count(option_key(kOptKeepFailed)) != 0;
  if (const auto r = option_text(vm, option_key(kOptRate))) to.synthetic_rate_per_s = parse_rate_per_s(*r, kOptRate);
  if (const auto seed = option_text(vm, option_key(kOptSeed))) to.synthetic_seed = parse_seed(*seed, kOptSeed);
  if (const auto w = option_text(vm, option_key(kOptTimeWindow))) parse_time_window(*w, kOptTimeWindow, to);
  if (const auto n = option_text(vm, option_key(kOptRequests))) to.max_requests = positive_integer(*n, kOptRequests);
  if (const auto x = option_text(vm, option_key(kOptRateScale))) to.rate_scale_ppb = parse_rate_scale_ppb(*x, kOptRateScale);
  return to;
}

}  // namespace

// Reads the parsed options in the order their errors are reported, builds the allocators and
// opens the trace once, so that every mistake fails before any work.
bool parse_trace_command(const Invocation& inv, const CommandSpec& spec, po::options_description& options,
                         po::variables_map& vm) {
  po::options_description hidden;
  hidden.add_options()("trace", po::value<std::string>());
  po::positional_options_description positional;
  positional.add("trace", 1);
  if (!parse_options(inv, spec, options, positional, vm, &hidden)) return false;
  if (!option_text(vm, "trace")) throw UsageError("a trace file is required\nUsage: " + spec.synopsis);
  return true;
}

GivenTraceOptions given_trace_options(const po::variables_map& vm) {
  GivenTraceOptions given;
  given.rate = vm.count(option_key(kOptRate)) != 0;
  given.seed = vm.count(option_key(kOptSeed)) != 0;
  given.keep_failed = vm.count(option_key(kOptKeepFailed)) != 0;
  return given;
}

TraceOptions trace_options_for(const ReplayPlan& plan, const Allocator& allocator) {
  TraceOptions options = plan.trace;
  if (allocator.prefix_block_tokens() > 0) options.hash_block_tokens = allocator.prefix_block_tokens();
  return options;
}

std::optional<VllmVersionDefaults> vllm_version_defaults(const std::string& version) {
  const char* at = version.data();
  const char* const end = at + version.size();
  const auto number = [&](int& out) {  // digits only: no sign, no space
    if (at == end || std::isdigit(static_cast<unsigned char>(*at)) == 0) return false;
    const auto [next, error] = std::from_chars(at, end, out);
    at = next;
    return error == std::errc{};
  };
  int major = 0, minor = 0;
  if (!number(major) || at == end || *at++ != '.' || !number(minor)) return std::nullopt;
  // A pre-release or post-release tag (PEP 440's a, b, rc, dev, post) and its number.
  for (const std::string_view tag : {"rc", "a", "b", "dev", "post"}) {
    if (std::string_view(at, static_cast<std::size_t>(end - at)).starts_with(tag)) {
      at += tag.size();
      while (at != end && std::isdigit(static_cast<unsigned char>(*at)) != 0) ++at;
      break;
    }
  }
  if (at != end && *at != '.' && *at != '+') return std::nullopt;
  const auto at_least = [&](int a, int b) { return major > a || (major == a && minor >= b); };
  VllmVersionDefaults d;
  d.async_scheduling = at_least(0, 14);
  d.cuda_graphs = at_least(0, 19);
  d.no_watermark = at_least(0, 8);
  d.reserve_full_isl = at_least(0, 19);
  d.hybrid_kv_cache_manager = at_least(0, 10);
  return d;
}

ReplayPlan plan_replay(const po::variables_map& vm, PlanScope scope) {
  ReplayPlan plan;
  const auto trace_path = option_text(vm, "trace");
  if (!trace_path) throw UsageError("a trace file is required\nUsage: " + kSpec.synopsis);
  plan.trace_path = *trace_path;

  // The model and its layout on one device.
  plan.choice = resolve_model(vm, current_synopsis(), kDefaultModel);
  KvLayout layout = plan.choice.layout();
  if (layout.state_layers > 0 || layout.groups.empty()) {
    // The allocators hold KV per position; a state-space layer's constant state is not theirs.
    throw InputError(Location{plan.choice.model.name, 0, ""},
                     "has state-space layers (a constant state per sequence); kvsim replay simulates KV caches "
                     "only: size it with 'kvsim size'");
  }
  if (const auto m = option_text(vm, option_key(kOptMaxModelLen))) {
    // Longer than the model's own maximum is a what-if vLLM allows only with
    // VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; replay takes it (size, sizing an engine's start-up, does not).
    layout.max_model_len = token_count(*m, kOptMaxModelLen);
  }

  // A budget bounds every allocator; the cost model runs on the budget's device.
  std::optional<BudgetOptions> budget_options_given = resolve_budget(vm, /*weights_time_steps=*/true);
  if (budget_options_given) {
    // Each replica's device holds only its share of the experts (expert parallelism).
    budget_options_given->expert_parallel_ranks = expert_parallel_ranks(vm, plan.choice);
    plan.budget = derive_budget(plan.choice.model, plan.choice.kv, *budget_options_given);
  }
  plan.options = replay_options_from(vm, plan.choice, layout, budget_options_given, plan.budget);
  if (!budget_options_given && !plan.options.cost.device.empty() && plan.options.schedule != Schedule::measured) {
    BudgetOptions timing = weight_terms(vm);
    timing.device = plan.options.cost.device;
    timing.expert_parallel_ranks = expert_parallel_ranks(vm, plan.choice);
    try {
      plan.timing_device_budget = derive_budget(plan.choice.model, plan.choice.kv, timing);
    } catch (const InputError&) {
      // Weights unknown, or larger than the device: no budget to compare with.
    }
  }
  plan.trace = trace_options_from(vm);
  if (plan.options.schedule == Schedule::measured && plan.trace.rate_scale_ppb != TraceOptions{}.rate_scale_ppb) {
    throw InputError(Location{"", 0, kOptRateScale},
                     std::string("--schedule measured replays the times measured at the trace's own load, which ") +
                         kOptRateScale + " cannot scale; simulate the schedule instead");
  }

  const std::vector<AllocatorSpec> specs =
      parse_allocator_list(vm[option_key(kOptAllocator)].as<std::string>(), kOptAllocator);
  // Build every allocator before reading anything, so a bad spec fails at once.
  AllocatorLimits limits;
  limits.capacity_bytes = plan.options.memory.kv_budget_bytes;
  for (const auto& spec : specs) {
    plan.allocators.push_back(make_allocator(spec, layout, limits));
    // Two specs of one allocator (its defaults written out, or parameters in another order)
    // would give two rows of one name: outputs keyed by the allocator could not tell them apart.
    for (std::size_t i = 0; i + 1 < plan.allocators.size(); ++i) {
      if (plan.allocators[i]->name() == plan.allocators.back()->name()) {
        throw InputError(Location{"", 0, kOptAllocator},
                         fmt::format("'{}' and '{}' are the same allocator ({}): give it once", specs[i].text, spec.text,
                                     plan.allocators.back()->name()));
      }
    }
  }
  // SGLang orders by the prefix its radix cache holds; with no allocator sharing prompts every
  // prefix is 0 and the order FCFS (SGLang itself falls back to fcfs without its cache).
  if (plan.options.memory.sglang_lpm &&
      std::none_of(plan.allocators.begin(), plan.allocators.end(),
                   [](const std::unique_ptr<Allocator>& a) { return a->prefix_block_tokens() > 0; })) {
    throw InputError(Location{"", 0, kOptSchedulePolicy},
                     "lpm orders by cached prefixes, and none of these allocators caches any: give radix or "
                     "paged:prefix-caching=on");
  }
  if (const auto n = option_text(vm, option_key(kOptReplicas))) plan.replicas = positive_integer(*n, kOptReplicas);
  if (plan.replicas > kMaxReplicas) {
    throw InputError(Location{"", 0, kOptReplicas},
                     fmt::format("at most {} replicas (each is a whole engine, simulated step by step), got {}",
                                 kMaxReplicas, plan.replicas));
  }
  if (plan.replicas > 1) {
    if (plan.options.schedule == Schedule::measured) {
      throw InputError(Location{"", 0, kOptReplicas}, std::string("replicas are simulated; drop ") + kOptSchedule +
                                                          " measured");
    }
    for (const auto& spec : specs) {
      auto& group = plan.replica_allocators.emplace_back();
      for (std::int64_t k = 0; k < plan.replicas; ++k) group.push_back(make_allocator(spec, layout, limits));
    }
  }
  // A caller that reads the trace itself (kvsim sweep) stops here: the rest is the trace
  // and the outputs.
  if (scope == PlanScope::allocators) return plan;
  // Open the trace once up front: a missing file or unknown format fails before any work.
  // A stream can be opened once only: one run reads it as it goes; several read it here,
  // whole, its token ids (if any) hashed at the one block size the allocators share
  // prefixes at.
  const GivenTraceOptions given = given_trace_options(vm);
  TraceOptions first_options = plan.trace;
  for (const auto& a : plan.allocators) {
    if (a->prefix_block_tokens() > 0) first_options.hash_block_tokens = a->prefix_block_tokens();
  }
  auto first = open_trace(plan.trace_path, first_options);
  reject_unused_trace_options(given, first->format());
  if (!trace_can_be_reread(plan.trace_path)) {
    if (first->format() == TraceFormat::token_ids) {
      for (const auto& a : plan.allocators) {
        if (a->prefix_block_tokens() > 0 && a->prefix_block_tokens() != first_options.hash_block_tokens) {
          throw InputError(Location{plan.trace_path, 0, ""},
                           "a token-id trace read from a pipe or FIFO is hashed once, and these allocators share "
                           "prefixes at different block sizes: save the trace to a file first");
        }
      }
    }
    if (plan.allocators.size() == 1 && plan.replicas == 1) plan.trace_stream = std::move(first);
    else plan.trace_in_memory = std::make_shared<const TraceInMemory>(*first);
  }

  plan.jobs = std::max(1u, std::thread::hardware_concurrency());
  if (const auto j = option_text(vm, option_key(kOptJobs))) plan.jobs = static_cast<std::size_t>(positive_integer(*j, kOptJobs));
  plan.jobs = std::min(plan.jobs, plan.allocators.size());

  // A command that writes its own files (validate, calibrate) checks them itself.
  std::vector<std::pair<std::string, std::string>> outputs;
  for (const ReportOutput& output : scope == PlanScope::outputs ? report_outputs() : std::span<const ReportOutput>{}) {
    if (const auto path = option_text(vm, std::string(output.option).c_str())) {
      plan.report_files.emplace_back(&output, *path);
      outputs.emplace_back("--" + std::string(output.option), *path);
    }
  }
  refuse_output_over_input(outputs, {plan.trace_path}, current_synopsis());
  for (const auto& [output, path] : plan.report_files) {
    if (output->simulated_only && plan.options.schedule == Schedule::measured) {
      throw UsageError("--" + std::string(output->option) +
                       " describes a simulated schedule; --schedule measured replays the trace's own times\nUsage: " +
                       current_synopsis());
    }
  }
  plan.json = vm.count("json") != 0;
  plan.table_on_stdout = table_keeps_stdout(outputs, plan.json, current_synopsis());
  plan.progress = vm.count("quiet") == 0 && ::isatty(STDERR_FILENO) != 0;
  return plan;
}

void refuse_idle_timing_device(bool given_timing_device, const ReplayPlan& plan) {
  if (given_timing_device && plan.options.cost.device.empty()) {
    throw InputError(Location{"", 0, kOptTimingDevice},
                     "times the roofline, and --cost \"" + plan.options.cost.name +
                         "\" names every term itself: it would have no effect");
  }
}

namespace {

// One engine per allocator on plan.jobs threads; the reports in allocator order. Rethrows the
// first error in allocator order, whichever thread met it first.
// `collectors` hold the outputs gathered while the runs go (plan.report_files' with a
// collector, in their order; nullptr for the others).
std::vector<ReplayReport> run_all(ReplayPlan& plan, std::vector<std::unique_ptr<RunCollector>>& collectors) {
  const std::size_t runs = plan.allocators.size();
  Progress progress(runs, plan.progress);
  std::vector<ReplayReport> reports(runs);
  run_in_parallel(runs, plan.jobs, progress, [&](std::size_t i) {
    ReplayOptions mine = plan.options;
    mine.progress = progress.sink(i);
    std::vector<std::function<void(const TimelineRow&)>> rows;
    std::vector<std::function<void(const RequestRecord&)>> requests;
    // A measured schedule has no requests' records: refused for an output of the simulated
    // schedule only (--per-request), gone without for the others (--html draws no CDFs).
    mine.per_request_required = false;
    for (std::size_t k = 0; k < collectors.size(); ++k) {
      if (collectors[k] == nullptr) continue;
      RunSinks sinks = collectors[k]->sinks(i);
      if (sinks.request && plan.report_files[k].first->simulated_only) mine.per_request_required = true;
      // The timeline is sampled only when an output asking for it says so (ReportOutput::timeline):
      // otherwise it would get a row every step.
      check(!sinks.timeline || plan.report_files[k].first->timeline,
            "replay: an output's collector reads timeline rows, and its ReportOutput does not set .timeline");
      if (sinks.timeline) rows.push_back(std::move(sinks.timeline));
      if (sinks.request) requests.push_back(std::move(sinks.request));
    }
    if (!rows.empty()) {
      mine.timeline = [rows = std::move(rows)](const TimelineRow& row) {
        for (const auto& sink : rows) sink(row);
      };
    }
    if (!requests.empty()) {
      mine.per_request = [requests = std::move(requests)](const RequestRecord& r) {
        for (const auto& sink : requests) sink(r);
      };
    }
    // Token ids are hashed at the block size the allocator shares prompts at.
    const TraceOptions trace_options = trace_options_for(plan, *plan.allocators[i]);
    auto trace = plan.trace_stream     ? std::move(plan.trace_stream)
                 : plan.trace_in_memory ? plan.trace_in_memory->open()
                                        : open_trace(plan.trace_path, trace_options);
    reports[i] = replay(*trace, *plan.allocators[i], mine);
    progress.set(i, 1.0);
  });
  return reports;
}

}  // namespace

// --replicas: each allocator spec replayed by plan.replicas engines behind vLLM's router;
// its runs are the replicas, then their total (ReplayReport::replica, run_name()).
std::vector<ReplayReport> run_replicas(ReplayPlan& plan, const TraceOpener& open) {
  std::vector<ReplayReport> reports;
  for (auto& group : plan.replica_allocators) {
    std::vector<Allocator*> allocators;
    for (auto& a : group) allocators.push_back(a.get());
    auto trace = open(trace_options_for(plan, *allocators.front()));
    ReplicaRun run = replay_replicas(*trace, allocators, plan.options);
    for (auto& replica : run.replicas) reports.push_back(std::move(replica));
    reports.push_back(std::move(run.total));
  }
  return reports;
}

namespace {

// The output files, in registry order, into `files` (opened before the runs, one per
// plan.report_files), committed together once all are written; then the table or JSON on
// stdout.
void render(const ReplayPlan& plan, const std::vector<ReplayReport>& reports,
            std::vector<std::unique_ptr<RunCollector>>& collectors, std::vector<std::unique_ptr<OutputFile>>& files) {
  const ReplayOptions& ro = plan.options;

  ReplayContext context;
  context.trace = plan.trace_path;
  context.model_name = plan.choice.model.name;
  context.model_source = plan.choice.model.source;
  context.kv_dtype = std::string(kv_dtype_info(plan.choice.kv.dtype).name);
  context.placement = fmt::format("tp {}, pp {} (figures per device)", plan.choice.kv.tensor_parallel,
                                  plan.choice.kv.pipeline_parallel);
  context.layout = ro.layout;
  context.cost = ro.cost;
  context.budget = plan.budget ? budget_description(*plan.budget) : "none (demand: every allocator unbounded)";
  // Without a budget, an allocator with a bound of its own (dynamic:arena=) is bounded by it.
  const bool own_bound = std::any_of(plan.allocators.begin(), plan.allocators.end(),
                                     [](const auto& a) { return a->pool().capacity_bytes > 0; });
  if (!plan.budget && own_bound) context.budget = "none (demand: every allocator unbounded but by its own arena=)";
  if (plan.timing_device_budget && plan.timing_device_budget->kv_budget_bytes > 0) {
    context.timing_device = ro.cost.device;
    context.timing_device_kv_bytes = plan.timing_device_budget->kv_budget_bytes;
  }
  context.scheduler = fmt::format("max batched tokens {}, chunked prefill {}, max running {}",
                                  ro.max_batched_tokens > 0 ? with_commas(ro.max_batched_tokens) : "unlimited",
                                  ro.chunked_prefill ? "on" : "off",
                                  ro.max_running > 0 ? with_commas(ro.max_running) : "unlimited");
  if (ro.cuda_graph_max_tokens > 0) {
    context.scheduler += fmt::format(", CUDA graphs up to {} tokens", with_commas(cuda_graph_largest(ro.cuda_graph_max_tokens)));
  }
  std::vector<OutputFill> outputs;
  for (std::size_t k = 0; k < files.size(); ++k) {
    outputs.push_back({files[k].get(), [&, k](OutputFile& out) {
                         if (collectors[k] != nullptr) collectors[k]->write(out, context, reports);
                         else out.write(plan.report_files[k].first->render(context, reports));
                       }});
  }
  write_each(outputs);
  if (plan.json) write_stdout(replay_json(context, reports));
  else if (plan.table_on_stdout) write_stdout(replay_table(context, reports));
  print_warnings(context, reports);
}

}  // namespace

int run_replay(const Invocation& inv) {
  po::options_description options = replay_option_descriptions();
  po::variables_map vm;
  if (!parse_trace_command(inv, kSpec, options, vm)) return kExitOk;

  ReplayPlan plan = plan_replay(vm);
  refuse_idle_timing_device(given(vm, option_key(kOptTimingDevice)), plan);
  // The replicas' runs keep neither records nor series: say so instead of writing a file
  // with a header only (kvsim validate gives each request of a data-parallel run).
  std::vector<std::unique_ptr<RunCollector>> collectors;
  for (const auto& [output, path] : plan.report_files) {
    if (output->collect != nullptr && plan.replicas > 1) {
      throw InputError(Location{"", 0, kOptReplicas},
                       "--" + std::string(output->option) + " follows one engine; give it without --replicas");
    }
    collectors.push_back(output->collect != nullptr ? output->collect(plan, path) : nullptr);
  }
  // Every output is opened before the runs: a path that cannot be written fails now, not
  // after a long replay, and none replaces its file until all are written (render()).
  const std::string inputs[] = {plan.trace_path};
  std::vector<std::unique_ptr<OutputFile>> files;
  for (const auto& file : plan.report_files) files.push_back(std::make_unique<OutputFile>(file.second, inputs));
  const std::vector<ReplayReport> reports =
      plan.replicas > 1 ? run_replicas(plan,
                                       [&plan](const TraceOptions& o) {
                                         // A stream was read whole up front (plan_replay).
                                         return plan.trace_in_memory ? plan.trace_in_memory->open()
                                                                     : open_trace(plan.trace_path, o);
                                       })
                        : run_all(plan, collectors);
  render(plan, reports, collectors, files);
  return kExitOk;
}

}  // namespace kvsim::cli
