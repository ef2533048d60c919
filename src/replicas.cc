// Data-parallel replicas: one engine per replica, advanced in lockstep by a router that
// places each request as vLLM's data-parallel load balancer does (kvsim/replicas.h).
#include "kvsim/replicas.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <memory>
#include <string>

#include "engine.h"
#include "kvsim/cost_model.h"
#include "kvsim/error.h"
#include "kvsim/option_names.h"
#include "recorder.h"

namespace kvsim {

std::vector<std::int64_t> replica_tokens(const std::vector<std::int64_t>& scheduled, std::int64_t graph_max) {
  std::vector<std::int64_t> run(scheduled.size());
  const std::int64_t largest = cuda_graph_largest(graph_max);
  bool all_fit = largest > 0;
  std::int64_t padded = 0;
  for (std::size_t i = 0; i < scheduled.size(); ++i) {
    run[i] = cuda_graph_tokens(graph_max, std::max<std::int64_t>(scheduled[i], 1));
    all_fit = all_fit && run[i] <= largest;
    padded = std::max(padded, run[i]);
  }
  if (all_fit) std::fill(run.begin(), run.end(), padded);
  return run;
}

namespace {

// A replica's share of the trace: the requests the router sent it, in arrival order.
class RoutedTrace final : public TraceReader {
 public:
  explicit RoutedTrace(const TraceReader& source) : TraceReader(source.path()), format_(source.format()) {}
  void push(const Request& r) { pending_.push_back(r); }
  // Routed here and not yet taken by the engine: requests that arrived at one instant wait
  // here while the engine holds the first of them as its next.
  std::int64_t pending() const { return static_cast<std::int64_t>(pending_.size()); }
  bool next(Request& out) override {
    if (pending_.empty()) return false;
    out = std::move(pending_.front());
    pending_.pop_front();
    return true;
  }
  TraceFormat format() const override { return format_; }
  std::int64_t bytes_read() const override { return 0; }
  std::int64_t total_bytes() const override { return 0; }

 private:
  TraceFormat format_;
  std::deque<Request> pending_;
};

// vLLM's block-level KV usage (allocated / capacity; cached blocks count as free), per mille;
// 0 without a budget.
std::int64_t kv_usage_permille(const Allocator& a) {
  const PoolState p = a.pool();
  if (p.capacity_bytes <= 0) return 0;
  return static_cast<std::int64_t>(detail::Int128{p.reserved_bytes - p.free_bytes} * 1000 / p.capacity_bytes);
}

// Time-weighted mean over the combined span from each replica's mean over its own span.
double combined_mean(const std::vector<ReplayReport>& rs, double ReplayReport::*field, std::int64_t span_ns) {
  if (span_ns <= 0) return 0;
  double integral = 0;
  for (const auto& r : rs) integral += r.*field * static_cast<double>(r.end_ns - r.start_ns);
  return integral / static_cast<double>(span_ns);
}

// A replica's share of a time-weighted mean over the combined span.
double span_share(double mean, std::int64_t part_span_ns, std::int64_t span_ns) {
  return span_ns > 0 ? mean * static_cast<double>(part_span_ns) / static_cast<double>(span_ns) : 0;
}

void add_occupancy(Occupancy& total, const Occupancy& part, std::int64_t part_span_ns, std::int64_t span_ns) {
  total.mean += span_share(part.mean, part_span_ns, span_ns);
  total.peak += part.peak;  // an upper bound: the replicas' peaks need not coincide
  total.at_end += part.at_end;
  // When the sum peaked, and its quantiles over time, are not the replicas' figures added.
  total.peak_at_ns = total.p50 = total.p99 = -1;
  total.quantile_resolution = std::max(total.quantile_resolution, part.quantile_resolution);
}

// Each part of `part`, through `f` (a span share, or as it is), added to `total`.
template <class F>
void add_fragmentation(Fragmentation& total, const Fragmentation& part, F f) {
  total.tail += f(part.tail);
  total.reservation += f(part.reservation);
  total.padding += f(part.padding);
  total.duplicate += f(part.duplicate);
  total.outside_window += f(part.outside_window);
}

// Figures of a replica's report that add up over the replicas as they are.
constexpr std::int64_t ReplayReport::*kSummed[] = {
    &ReplayReport::requests,
    &ReplayReport::completed,
    &ReplayReport::cancelled_queued,
    &ReplayReport::cancelled_running,
    &ReplayReport::rejected_too_long,
    &ReplayReport::rejected_too_large,
    &ReplayReport::rejected_too_many_samples,
    &ReplayReport::capped_at_max_model_len,
    &ReplayReport::prefix_identified_requests,
    &ReplayReport::planned_at_output_requests,
    &ReplayReport::prompt_tokens,
    &ReplayReport::generated_tokens,
    &ReplayReport::iterations,
    &ReplayReport::prefix_queried_tokens,
    &ReplayReport::prefix_hit_tokens,
    &ReplayReport::prefix_queried_blocks,
    &ReplayReport::prefix_hit_blocks,
    &ReplayReport::prefix_preempted_queried_tokens,
    &ReplayReport::prefix_preempted_hit_tokens,
    &ReplayReport::evicted_bytes,
    &ReplayReport::failed_placements,
    &ReplayReport::copied_bytes,
    &ReplayReport::capacity_bytes,
    &ReplayReport::preemptions,
    &ReplayReport::preempted_requests,
    &ReplayReport::recomputed_tokens,
    &ReplayReport::swapped_out_bytes,
    &ReplayReport::swapped_in_bytes,
    &ReplayReport::memory_bound_ns,  // divided by the replicas afterwards: their mean
    &ReplayReport::allocated_bytes_at_end,
};

ReplayReport combine(std::vector<ReplayReport>& rs, std::int64_t waiting_at_last_arrival) {
  ReplayReport t;
  const ReplayReport& first = rs.front();
  t.allocator = first.allocator;
  t.trace = first.trace;
  t.cost_model = first.cost_model;
  t.schedule = first.schedule;
  t.policy = first.policy;
  t.prefix_block_tokens = first.prefix_block_tokens;
  t.start_ns = first.start_ns;
  t.end_ns = first.end_ns;
  t.leak_free = true;
  LatencySamples all;
  detail::TimeHistogram itl;  // the replicas' inter-token latency histograms, added up
  double itl_sum = 0;
  for (auto& r : rs) {
    for (const auto field : kSummed) t.*field += r.*field;
    if (r.shortest_request_tokens > 0 && (t.shortest_request_tokens == 0 || r.shortest_request_tokens < t.shortest_request_tokens)) {
      t.shortest_request_tokens = r.shortest_request_tokens;
    }
    t.places_reservations = t.places_reservations || r.places_reservations;
    t.external_fragmentation_max = std::max(t.external_fragmentation_max, r.external_fragmentation_max);
    t.max_preemptions_per_request = std::max(t.max_preemptions_per_request, r.max_preemptions_per_request);
    t.queue_max += r.queue_max;  // an upper bound, as the peaks: the replicas' maxima need not coincide
    t.start_ns = std::min(t.start_ns, r.start_ns);
    t.end_ns = std::max(t.end_ns, r.end_ns);
    t.last_arrival_ns = std::max(t.last_arrival_ns, r.last_arrival_ns);
    t.leak_free = t.leak_free && r.leak_free;
    for (auto v : {&LatencySamples::ttft_ns, &LatencySamples::e2e_ns, &LatencySamples::waiting_ns,
                   &LatencySamples::tpot_ns}) {
      (all.*v).insert((all.*v).end(), (r.latency_samples.*v).begin(), (r.latency_samples.*v).end());
      (r.latency_samples.*v).clear();
    }
    if (!r.latency_samples.itl_buckets.empty()) itl.add_buckets(r.latency_samples.itl_buckets, r.latency_samples.itl_shift);
    r.latency_samples.itl_buckets.clear();
    if (r.itl.count > 0) {
      itl_sum += r.itl.mean_ns * static_cast<double>(r.itl.count);
      t.itl.count += r.itl.count;
      t.itl.max_ns = std::max(t.itl.max_ns, r.itl.max_ns);
    }
  }
  t.memory_bound_ns /= static_cast<std::int64_t>(rs.size());
  const std::int64_t span = t.end_ns - t.start_ns;
  // Ratios of time integrals, each replica's integral being its mean times its own span.
  double effective_integral = 0, allocated_integral = 0, capacity_integral = 0;
  double external_ratio_integral = 0, replica_time = 0;
  // Per layer group as for the totals (every replica serves the same model).
  t.groups = rs.front().groups;
  for (GroupReport& g : t.groups) g = GroupReport{g.group, {}, {}, {}, {}};
  const auto as_is = [](double v) { return v; };  // at the peak: each replica at its own
  for (const auto& r : rs) {
    const std::int64_t own = r.end_ns - r.start_ns;
    const auto share = [&](double mean) { return span_share(mean, own, span); };
    add_occupancy(t.effective_bytes, r.effective_bytes, own, span);
    add_occupancy(t.allocated_bytes, r.allocated_bytes, own, span);
    // A bounded pool stays reserved after its replica's last step, to the combined end, as it
    // counts in block usage below: it holds the bytes it reserved at its end.
    Occupancy reserved = r.reserved_bytes;
    if (r.capacity_bytes > 0 && span > 0) {
      reserved.mean = (r.reserved_bytes.mean * static_cast<double>(own) +
                       static_cast<double>(r.reserved_bytes.at_end) * static_cast<double>(span - own)) /
                      static_cast<double>(span);
    }
    add_occupancy(t.reserved_bytes, reserved, r.capacity_bytes > 0 ? span : own, span);
    add_occupancy(t.evictable_bytes, r.evictable_bytes, own, span);
    add_fragmentation(t.mean_bytes, r.mean_bytes, share);
    add_fragmentation(t.at_peak_bytes, r.at_peak_bytes, as_is);
    for (std::size_t k = 0; k < t.groups.size() && k < r.groups.size(); ++k) {
      GroupReport& g = t.groups[k];
      add_occupancy(g.effective_tokens, r.groups[k].effective_tokens, own, span);
      add_occupancy(g.allocated_slots, r.groups[k].allocated_slots, own, span);
      add_fragmentation(g.mean_slots, r.groups[k].mean_slots, share);
      add_fragmentation(g.at_peak_slots, r.groups[k].at_peak_slots, as_is);
    }
    // A ratio of each replica's own arena (1 - largest free extent / free): the replicas'
    // mean, each weighted by its span, below; their bytes add up like the occupancy.
    external_ratio_integral += r.external_fragmentation_mean * static_cast<double>(own);
    replica_time += static_cast<double>(own);
    t.external_fragmentation_bytes_mean += share(r.external_fragmentation_bytes_mean);
    effective_integral += r.effective_bytes.mean * static_cast<double>(own);
    allocated_integral += r.allocated_bytes.mean * static_cast<double>(own);
    // The capacity's integral. A replica's pool is there for the whole combined span, as its
    // occupancy counts it holding nothing after its own end, so the total's block usage is its
    // allocated mean over its capacity; unbounded, what the replica reserved over its own span
    // (from its own ratio: a replica that allocated nothing reserved nothing).
    if (r.capacity_bytes > 0) {
      capacity_integral += static_cast<double>(r.capacity_bytes) * static_cast<double>(span);
    } else if (r.block_usage && *r.block_usage > 0) {
      capacity_integral += r.allocated_bytes.mean * static_cast<double>(own) / *r.block_usage;
    }
  }
  t.external_fragmentation_mean = replica_time > 0 ? external_ratio_integral / replica_time : 0;
  if (allocated_integral > 0) t.token_usage = effective_integral / allocated_integral;
  if (capacity_integral > 0) t.block_usage = allocated_integral / capacity_integral;
  t.tpot = detail::summarize(all.tpot_ns);
  if (t.itl.count > 0) {
    t.itl.mean_ns = itl_sum / static_cast<double>(t.itl.count);
    t.itl.p50_ns = itl.quantile(50);
    t.itl.p99_ns = itl.quantile(99);
  }
  t.queue_mean = combined_mean(rs, &ReplayReport::queue_mean, span);
  t.generated_tokens_per_s = span > 0 ? static_cast<double>(t.generated_tokens) * 1e9 / static_cast<double>(span) : 0;
  t.ttft = detail::summarize(all.ttft_ns);
  t.e2e = detail::summarize(all.e2e_ns);
  t.waiting = detail::summarize(all.waiting_ns);
  t.queue_at_last_arrival = waiting_at_last_arrival;
  judge_overload(t);
  return t;
}

// Aligned steps (ReplayOptions::replicas_step_together): runs every step that starts before
// `t_ns` on all replicas at once, from `clock` (the start of the next step, updated). Each step
// lasts as long as the slowest busy replica's work; a replica with nothing to run takes no
// step of its own (vLLM runs a dummy forward pass of one token there, which never outlasts
// the others'; its token still reaches the experts: replica_tokens). A request that reaches
// such a replica inside a step waits for the next one. A replica that stays idle keeps its
// clock, so that its report ends at its last release.
void advance_together_before(std::vector<std::unique_ptr<detail::Engine>>& engines, const CostModel& cost,
                             std::int64_t graph_max, std::int64_t& clock, std::int64_t t_ns) {
  std::vector<char> busy(engines.size(), 0);
  for (;;) {
    bool any = false;
    for (std::size_t i = 0; i < engines.size(); ++i) {
      detail::Engine& e = *engines[i];
      const std::int64_t next = e.next_arrival();
      if (e.now() < clock && next >= 0 && next <= clock) e.wait_until(clock);
      busy[i] = 0;
      if (e.now() != clock) continue;
      e.at_boundary();
      busy[i] = e.has_work() ? 1 : 0;
      any = any || busy[i] != 0;
    }
    if (!any) {
      // All idle: the next step starts at the next arrival routed to any of them.
      std::int64_t next = -1;
      for (const auto& e : engines) {
        const std::int64_t a = e->next_arrival();
        if (a >= 0 && (next < 0 || a < next)) next = a;
      }
      if (next < 0 || next >= t_ns) return;
      clock = std::max(clock, next);
      continue;
    }
    if (clock >= t_ns) return;
    std::vector<std::int64_t> scheduled(engines.size(), 0);
    for (std::size_t i = 0; i < engines.size(); ++i) {
      if (busy[i] == 0) continue;
      engines[i]->begin_step();  // timed below, once all the replicas' tokens are known
      scheduled[i] = engines[i]->step_tokens();
    }
    // Every replica's experts serve all the replicas' tokens, padding and dummy batches
    // included: the share of them a step reaches follows the total (CostModel::
    // expert_weights_ps). Each replica's step records the others' tokens (TimelineRow::work)
    // even when no term charges them.
    const std::vector<std::int64_t> run = replica_tokens(scheduled, graph_max);
    std::int64_t all_run = 0;
    for (const std::int64_t r : run) all_run += r;
    std::int64_t duration = 0;
    for (std::size_t i = 0; i < engines.size(); ++i) {
      if (busy[i] != 0) duration = std::max(duration, engines[i]->retime_step(all_run - run[i], run[i]));
    }
    // Every MoE layer gathers all the replicas' hidden states and scatters the results back
    // (CostModel::replica_collective_*: 0 unless a roofline over a known link), after the
    // slowest replica's kernels; dummy batches too, when no replica has anything scheduled.
    if (cost.replica_collective_step_ps > 0 || cost.replica_collective_token_ps > 0) {
      const detail::Int128 ps = detail::Int128{cost.replica_collective_step_ps} +
                              detail::Int128{cost.replica_collective_token_ps} * all_run;
      duration += static_cast<std::int64_t>((ps + 999) / 1000);
    }
    for (std::size_t i = 0; i < engines.size(); ++i) {
      if (busy[i] != 0) engines[i]->end_step(duration);
    }
    clock += duration;
  }
}

}  // namespace

ReplicaRun replay_replicas(TraceReader& trace, const std::vector<Allocator*>& allocators, const ReplayOptions& options) {
  if (allocators.empty()) throw InputError(Location{"", 0, kOptReplicas}, "expected at least one replica");
  if (options.schedule == Schedule::measured) {
    throw InputError(Location{"", 0, kOptReplicas},
                     std::string("replicas are simulated: a measured schedule cannot be split (") + kOptSchedule +
                         " simulate)");
  }
  ReplayOptions o = options;
  o.keep_latency_samples = true;
  o.schedule = Schedule::simulate;
  o.timeline = nullptr;
  o.per_request = nullptr;
  o.progress = nullptr;
  const std::size_t n = allocators.size();
  ReplicaRun run;
  run.routed.assign(n, 0);
  // An engine numbers the requests of its own share 1, 2, ...: trace_ordinal[i][k - 1] is
  // the trace's ordinal of replica i's k-th.
  std::vector<std::vector<std::int64_t>> trace_ordinal(n);
  // One options object per engine (an engine keeps a reference: the vector never grows).
  std::vector<ReplayOptions> per_engine(n, o);
  for (std::size_t i = 0; i < n; ++i) {
    if (options.timeline) {
      per_engine[i].timeline = [&options, i](const TimelineRow& row) {
        TimelineRow tagged = row;
        tagged.replica = static_cast<std::int64_t>(i);
        options.timeline(tagged);
      };
    }
    if (options.per_request) {
      per_engine[i].per_request = [&options, &trace_ordinal, i](const RequestRecord& record) {
        RequestRecord renumbered = record;
        renumbered.ordinal = trace_ordinal[i].at(static_cast<std::size_t>(record.ordinal - 1));
        options.per_request(renumbered);
      };
    }
  }
  std::vector<std::unique_ptr<RoutedTrace>> shares;
  std::vector<std::unique_ptr<detail::Engine>> engines;
  for (std::size_t i = 0; i < n; ++i) {
    shares.push_back(std::make_unique<RoutedTrace>(trace));
    engines.push_back(std::make_unique<detail::Engine>(*shares[i], *allocators[i], per_engine[i]));
  }
  const bool together = options.replicas_step_together && n > 1;
  std::int64_t clock = 0;  // aligned steps: when the next one starts
  const auto advance_before = [&](std::int64_t t_ns) {
    if (together) advance_together_before(engines, o.cost, o.cuda_graph_max_tokens, clock, t_ns);
    else for (auto& e : engines) e->advance_before(t_ns);
  };
  Request r;
  bool started = false;
  std::size_t start_index = 0;  // vLLM's eng_start_index: client 0 of 1 starts at 0 (rotating in_flight)
  std::int64_t read = 0;
  while (trace.next(r)) {
    if (!started) {
      // A trace whose times fix one engine's schedule would be replayed measured alone
      // (Schedule::automatic); replicas simulate it, which must be asked for, not assumed.
      if (options.schedule == Schedule::automatic && r.has_service_times()) {
        throw InputError(Location{trace.path(), 0, ""},
                         std::string("its start/first_token/finish times are one engine's schedule, which ") +
                             kOptReplicas + " cannot split; give " + kOptSchedule +
                             " simulate to simulate the replicas from its arrivals and lengths");
      }
      for (auto& e : engines) e->begin_at(r.arrival_ns);
      clock = r.arrival_ns;
      started = true;
    }
    advance_before(r.arrival_ns);
    // The lowest score wins; on a tie the first scanned from start_index (vLLM's strict <).
    const auto score_of = [&](std::size_t i) -> detail::Int128 {
      const detail::Engine& e = *engines[i];
      // Every request routed to the replica and not yet running counts as waiting there, or
      // in flight (vLLM's client counts its own); one its step under way ends, as running.
      const std::int64_t running = e.running_seen_at(r.arrival_ns);
      const std::int64_t waiting = e.in_flight() - e.running() + shares[i]->pending();
      const std::int64_t in_flight = waiting + running;
      if (o.dp_router == ReplayOptions::DpRouter::queue_score) {
        // 4 x waiting + running. The engines of a dense model publish no counts, so the
        // router has only its own: 4 x the requests it sent there.
        if (!together) return detail::Int128{4} * run.routed[i];
        return detail::Int128{4} * waiting + running;
      }
      // In thousandths: 1000 x in flight + 6 x waiting x (usage per mille - 500), with the
      // waiting count above (the router's, raised by each request it routes).
      detail::Int128 score = detail::Int128{1000} * in_flight;
      if (waiting > 0) score += detail::Int128{6} * waiting * std::max<std::int64_t>(0, kv_usage_permille(*allocators[i]) - 500);
      return score;
    };
    std::size_t best = start_index;
    detail::Int128 best_score = -1;
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t i = (start_index + k) % n;
      const detail::Int128 score = score_of(i);
      if (best_score < 0 || score < best_score) {
        best_score = score;
        best = i;
      }
    }
    shares[best]->push(r);
    engines[best]->offered();
    ++run.routed[best];
    ++read;
    if (options.per_request) trace_ordinal[best].push_back(read);
    run.replica_of.push_back(static_cast<std::uint32_t>(best));
    if (o.dp_router == ReplayOptions::DpRouter::in_flight) start_index = (start_index + 1) % n;
    if (options.progress && read % 4096 == 0 && trace.total_bytes() > 0) {
      options.progress(static_cast<double>(trace.bytes_read()) / static_cast<double>(trace.total_bytes()));
    }
  }
  // The overload rule's count, as the last request was routed (nothing has run since): the
  // requests a plan passed over, on every replica. Not those routed but not yet in a queue,
  // which arrived during their replica's step in progress, the last one among them.
  std::int64_t waiting_at_last_arrival = 0;
  for (const auto& e : engines) waiting_at_last_arrival += e->passed_over();
  if (!started) {
    for (auto& e : engines) e->begin_at(0);
  }
  if (together) advance_before(std::numeric_limits<std::int64_t>::max());
  for (auto& e : engines) run.replicas.push_back(e->finish());
  run.total = combine(run.replicas, waiting_at_last_arrival);
  for (std::size_t k = 0; k < n; ++k) {
    run.replicas[k].replicas = static_cast<std::int64_t>(n);
    run.replicas[k].replica = static_cast<std::int64_t>(k);
  }
  run.total.replicas = static_cast<std::int64_t>(n);
  run.total.trace_dropped = trace.dropped();  // the replicas read the router's shares, which drop nothing
  return run;
}

}  // namespace kvsim
