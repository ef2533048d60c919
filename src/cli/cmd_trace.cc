// kvsim trace: statistics, conversion to the native format, and synthetic generation.
// The work is in the library (kvsim/trace*.h); this file parses options and prints.
#include <fmt/core.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <span>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli.h"
#include "json_text.h"
#include "kvsim/error.h"
#include "kvsim/output_file.h"
#include "kvsim/option_names.h"
#include "kvsim/trace.h"
#include "kvsim/trace_gen.h"
#include "kvsim/trace_stats.h"
#include "kvsim/trace_writer.h"
#include "kvsim/units.h"
#include "model_options.h"
#include "progress.h"

namespace kvsim::cli {
namespace {

// Writes a whole trace through `fill`; TraceWriter's OutputFile keeps OUT as it was until the
// trace is complete, and refuses an OUT that is one of `inputs`.
template <class Fill>
void write_whole(const std::string& out, NativeFormat format, const TraceColumns& columns,
                 std::span<const std::string> inputs, Fill fill) {
  TraceWriter writer(out, format, columns, inputs);
  fill(writer);
  writer.close();
}

// Option values are the user's command line: a bad one is a usage error (exit 2, with the
// usage), unlike bad file contents (exit 1).
template <typename F>
auto option_value(const CommandSpec& spec, F&& parse) -> decltype(parse()) {
  try {
    return parse();
  } catch (const InputError& e) {
    throw UsageError(std::string(e.what()) + "\nUsage: " + spec.synopsis);
  }
}

// The options every command that reads a trace takes.
struct ReadArgs {
  std::string format = "auto";
  bool sort = false;
  bool keep_failed = false;
  std::string rate;
  std::string seed = "1";
  std::string hash_block_tokens = "16";
  std::string rate_scale;
  std::string time_window;
  std::string requests;
};

void add_read_options(po::options_description& options, ReadArgs& args) {
  std::string format_help = "input format: ";
  std::string_view separator;
  for (const auto name : trace_format_names()) {
    format_help.append(separator).append(name);
    separator = ", ";
  }
  options.add_options()
      (option_key(kOptFormat), po::value(&args.format)->default_value(args.format), format_help.c_str())
      (option_key(kOptSort), po::bool_switch(&args.sort),
       "accept arrivals out of order and sort them (reads the whole trace into memory)")
      (option_key(kOptKeepFailed), po::bool_switch(&args.keep_failed),
       "BurstGPT: keep failed requests (0 response tokens) as cancelled at arrival instead of dropping them")
      (option_key(kOptRate), po::value(&args.rate),
       "length-only traces: Poisson arrivals at this many requests per second (required for them)")
      (option_key(kOptSeed), po::value(&args.seed)->default_value(args.seed), "length-only traces: seed of the arrival process")
      ("hash-block-tokens", po::value(&args.hash_block_tokens)->default_value(args.hash_block_tokens),
       "token-id traces: tokens per block when hashing prompt prefixes")
      (option_key(kOptTimeWindow), po::value(&args.time_window),
       "keep requests arriving in [FROM, TO) of the trace's own time, e.g. 10min..20min (either end optional)")
      (option_key(kOptRequests), po::value(&args.requests), "keep the first N requests (after --time-window)")
      (option_key(kOptRateScale), po::value(&args.rate_scale),
       "divide arrival times (from time 0) by X, to the nearest ns: 2 doubles the arrival rate");
}

// What `vm` gave of the read options, explicitly.
GivenTraceOptions given_read_options(const po::variables_map& vm) {
  GivenTraceOptions g;
  g.rate = given(vm, option_key(kOptRate));
  g.seed = given(vm, option_key(kOptSeed));
  g.keep_failed = vm.count(option_key(kOptKeepFailed)) != 0 && vm[option_key(kOptKeepFailed)].as<bool>();
  g.hash_block_tokens = given(vm, "hash-block-tokens");
  return g;
}

TraceOptions trace_options(const ReadArgs& args, const CommandSpec& spec) {
  return option_value(spec, [&] {
    TraceOptions o;
    o.format = parse_trace_format(args.format, kOptFormat);
    o.sort = args.sort;
    o.keep_failed = args.keep_failed;
    if (!args.rate.empty()) o.synthetic_rate_per_s = parse_rate_per_s(args.rate, kOptRate);
    o.synthetic_seed = parse_seed(args.seed, kOptSeed);
    o.hash_block_tokens = parse_positive_count(args.hash_block_tokens, "--hash-block-tokens");
    if (!args.time_window.empty()) parse_time_window(args.time_window, kOptTimeWindow, o);
    if (!args.requests.empty()) o.max_requests = parse_positive_count(args.requests, kOptRequests);
    if (!args.rate_scale.empty()) o.rate_scale_ppb = parse_rate_scale_ppb(args.rate_scale, kOptRateScale);
    return o;
  });
}

// ---------------------------------------------------------------------------------------
// Progress on a terminal: reading or writing millions of requests takes tens of seconds.

// Runs `work` on a worker thread while this one draws a bar on stderr, when stderr is a
// terminal and `output` (the file written, if any) is not standard output on a terminal,
// where the bar would run into the rows; errors reach the caller as if `work` ran here.
void with_progress(const char* label, const std::function<void(Progress&)>& work, const std::string& output = "") {
  const bool rows_on_terminal =
      (output == "-" || (!output.empty() && names_standard_output(output))) && ::isatty(STDOUT_FILENO) != 0;
  Progress progress(1, ::isatty(STDERR_FILENO) != 0 && !rows_on_terminal, label);
  run_in_parallel(1, 1, progress, [&](std::size_t) { work(progress); });
}

// Forwards `inner`, reporting the share of its bytes read every 4,096 requests (a stream
// of unknown size reports nothing).
class ProgressReader final : public TraceReader {
 public:
  ProgressReader(TraceReader& inner, Progress& progress) : TraceReader(inner.path()), inner_(inner), progress_(progress) {}
  bool next(Request& out) override {
    const bool more = inner_.next(out);
    if ((++rows_ & 4095) == 0 && inner_.total_bytes() > 0) {
      progress_.set(0, static_cast<double>(inner_.bytes_read()) / static_cast<double>(inner_.total_bytes()));
    }
    return more;
  }
  TraceFormat format() const override { return inner_.format(); }
  std::int64_t bytes_read() const override { return inner_.bytes_read(); }
  std::int64_t total_bytes() const override { return inner_.total_bytes(); }
  std::int64_t dropped() const override { return inner_.dropped(); }

 private:
  TraceReader& inner_;
  Progress& progress_;
  std::uint64_t rows_ = 0;
};

// ---------------------------------------------------------------------------------------

const CommandSpec kStatsSpec{
    "kvsim trace stats FILE [--json] [--format F] [--sort] [--keep-failed] [--rate R --seed S]\n"
    "      [--time-window FROM..TO] [--requests N] [--rate-scale X]",
    "Summarises a trace: requests, duration, arrival rate and burstiness, prompt and output\n"
    "lengths (mean and nearest-rank percentiles), cancellations, parallel samples, sessions\n"
    "and how much of the prompts a prefix cache could reuse. FILE may be '-' (standard\n"
    "input).",
    "  kvsim trace stats traces/chat-mix.csv\n"
    "  kvsim trace stats ../shared/traces/mooncake/conversation_trace.jsonl --json\n"
    "  kvsim trace stats lengths.csv --rate 5 --seed 7\n"
    "  kvsim trace stats traces/chat-mix.csv --time-window 1min..2min --rate-scale 2"};

int run_stats(const Invocation& inv) {
  std::string path;
  bool as_json = false;
  ReadArgs read;
  po::options_description options("Options");
  options.add_options()("json", po::bool_switch(&as_json), "print JSON instead of text");
  add_read_options(options, read);
  po::options_description hidden;
  hidden.add_options()("file", po::value(&path)->required(), "the trace");
  po::positional_options_description positional;
  positional.add("file", 1);
  po::variables_map vm;
  if (!parse_options(inv, kStatsSpec, options, positional, vm, &hidden)) return kExitOk;
  const TraceOptions trace = trace_options(read, kStatsSpec);
  refuse_stdout_over_input({path}, kStatsSpec.synopsis);

  auto reader = open_trace(path, trace);
  reject_unused_trace_options(given_read_options(vm), reader->format());
  TraceStats stats;
  with_progress("reading", [&](Progress& progress) {
    ProgressReader watched(*reader, progress);
    stats = compute_trace_stats(watched);
  });
  const std::string format{trace_format_name(reader->format())};
  if (as_json) {
    nlohmann::ordered_json j;
    j["trace"] = path;  // JSON escapes it
    j["format"] = format;
    j["stats"] = nlohmann::ordered_json::parse(trace_stats_json(stats));
    write_stdout(json_text(j));
  } else {
    write_stdout(fmt::format("{:<18} {} ({})\n{}", "trace", printable(path), format, format_trace_stats(stats)));
  }
  return kExitOk;
}

// ---------------------------------------------------------------------------------------

const CommandSpec kConvertSpec{
    "kvsim trace convert IN OUT [--to csv|jsonl] [--format F] [--sort] [--keep-failed] [--rate R --seed S]\n"
    "      [--time-window FROM..TO] [--requests N] [--rate-scale X]",
    "Converts a trace in any format kvsim reads into kvsim's native CSV or JSONL (chosen\n"
    "from OUT's extension unless --to says). The input is read twice: once to validate it\n"
    "and find which optional columns it uses, then to write (a pipe or FIFO is read once\n"
    "and its requests kept in memory). Nothing is written when the input has a bad row, and\n"
    "OUT is replaced only once complete. The conversion is lossless: converting the output\n"
    "again gives the same requests, and the same bytes. One exception, said on stderr: a\n"
    "token-id trace's ids become prefix hashes of --hash-block-tokens blocks (16), so the\n"
    "output shares prompts at those blocks' boundaries only (radix:page=1 matches token by\n"
    "token on the ids). --time-window, --requests and --rate-scale write the requests they\n"
    "keep, at their scaled times (docs/replay.md). IN may be '-' (standard input), and OUT\n"
    "'-' (standard output, with --to).",
    "  kvsim trace convert ../shared/traces/azure2023/AzureLLMInferenceTrace_conv.csv azure-conv.csv\n"
    "  kvsim trace convert traces/chat-mix.csv chat-mix.jsonl\n"
    "  kvsim trace convert traces/chat-mix.csv first-100-at-2x.csv --requests 100 --rate-scale 2"};

int run_convert(const Invocation& inv) {
  std::string in;
  std::string out;
  std::string to;
  ReadArgs read;
  po::options_description options("Options");
  options.add_options()(option_key(kOptTo), po::value(&to), "output format: csv or jsonl (default: from OUT's extension)");
  add_read_options(options, read);
  po::options_description hidden;
  hidden.add_options()("in", po::value(&in)->required(), "the trace to read")(
      "out", po::value(&out)->required(), "the file to write");
  po::positional_options_description positional;
  positional.add("in", 1).add("out", 1);
  po::variables_map vm;
  if (!parse_options(inv, kConvertSpec, options, positional, vm, &hidden)) return kExitOk;
  const TraceOptions trace = trace_options(read, kConvertSpec);
  const NativeFormat format = option_value(kConvertSpec, [&] {
    return to.empty() ? native_format_for_path(out, "OUT") : parse_native_format(to, kOptTo);
  });
  refuse_output_over_input({{"OUT", out}}, {in}, kConvertSpec.synopsis, out == "-");

  // Pass 1: validate everything and learn the columns, so that a bad row leaves no output.
  // A pipe, a FIFO or /dev/stdin can be read only once: its requests are kept in memory
  // for pass 2 instead of reading it again.
  const bool rereadable = trace_can_be_reread(in);
  std::vector<Request> kept;
  TraceColumns columns;
  std::int64_t count = 0;
  std::int64_t dropped = 0;  // rows the format drops on purpose (BurstGPT's failed requests)
  TraceFormat in_format = TraceFormat::automatic;
  {
    auto reader = open_trace(in, trace);
    in_format = reader->format();
    reject_unused_trace_options(given_read_options(vm), in_format);
    with_progress("checking", [&](Progress& progress) {
      ProgressReader watched(*reader, progress);
      Request r;
      while (watched.next(r)) {
        columns.include(r);
        ++count;
        if (!rereadable) kept.push_back(r);
      }
    });
    dropped = reader->dropped();
  }
  // Pass 2: write.
  const std::string inputs[] = {in};
  with_progress("writing", [&](Progress& progress) {
    write_whole(out, format, columns, inputs, [&](TraceWriter& writer) {
      std::unique_ptr<TraceReader> reader;
      if (rereadable) reader = open_trace(in, trace);
      else reader = std::make_unique<RequestVectorReader>(std::move(kept), in);
      ProgressReader watched(*reader, progress);
      Request r;
      while (watched.next(r)) writer.write(r);
    });
  }, out);
  if (in_format == TraceFormat::token_ids) {
    fmt::print(stderr,
               "kvsim: note: the token ids became prefix hashes of {}-token blocks: replays of {} share prompts at "
               "those blocks' boundaries only (give --hash-block-tokens for another size)\n",
               trace.hash_block_tokens, printable(out));
  }
  if (dropped > 0) {
    // Not in the output, so no later stats or replay of it can say so.
    fmt::print(stderr,
               "kvsim: note: {} failed requests (0 response tokens) of {} were dropped and are not in {}; {} keeps "
               "them as cancelled at arrival\n",
               with_commas(dropped), printable(in), printable(out), kOptKeepFailed);
  }
  if (out != "-") {
    fmt::print(stderr, "kvsim: converted {} requests: {} ({}) -> {} ({})\n", with_commas(count), printable(in),
               trace_format_name(in_format), printable(out),
               trace_format_name(format == NativeFormat::csv ? TraceFormat::native_csv : TraceFormat::native_jsonl));
  }
  return kExitOk;
}

// ---------------------------------------------------------------------------------------

const CommandSpec kGenSpec{
    "kvsim trace gen [-o FILE] [--seed S] [--requests N | --duration D] [--arrivals A] [--prompt L] "
    "[--output L] [...]",
    "Generates a synthetic trace in kvsim's native format. The same options and seed give\n"
    "the same bytes, on any machine. Defaults are shaped like Azure's 2023 conversation\n"
    "trace: Poisson arrivals at 5.5/s, prompts lognormal (mean 1,155, p99 4,142, max\n"
    "14,050), outputs lognormal (mean 211, p99 601, max 1,000), 1,000 requests.\n"
    "\n"
    "Counts (--prompt, --output, --n, caps, turns): 512 | uniform:8000..32000 |\n"
    "  lognormal:mean=1155,p99=4142[,min=1][,max=14050] | choice:1=0.9,4=0.1 |\n"
    "  empirical:FILE (that column of another trace, any format kvsim reads).\n"
    "Durations: 5s | uniform:1s..30s | exp:20s (mean) | lognormal:mean=5s,p99=60s.\n"
    "Probabilities and shares: 0.05 or 5%.\n"
    "Lognormal by mean and p99: sigma = z - sqrt(z^2 - 2 ln(p99/mean)), z = 2.32635 (the\n"
    "normal's 0.99 quantile), mu = ln(mean) - sigma^2/2; needs 1 < p99/mean < 14.97.",
    "  kvsim trace gen --requests 2000 --seed 1 -o chat.csv\n"
    "  kvsim trace gen --duration 10min --arrivals gamma:rate=2.6,cv=3 --prompt uniform:8000..32000 \\\n"
    "      --output lognormal:mean=300,p99=1500 --max-tokens fixed:2048 -o long.csv\n"
    "  kvsim trace gen --lengths-from ../shared/traces/azure2023/AzureLLMInferenceTrace_conv.csv \\\n"
    "      --cancel p=0.03,after=uniform:200ms..2s --cancel p=0.02,after=uniform:2s..30s -o azure-like.csv\n"
    "  kvsim trace gen --system-prompt tokens=1500,share=0.4 --n choice:1=0.9,4=0.1 \\\n"
    "      --sessions share=0.3,turns=uniform:2..6,gap=exp:30s,user=lognormal:mean=150,p99=600 -o chat.jsonl"};

int run_gen(const Invocation& inv) {
  std::string out = "-";
  std::string to;
  std::string seed = "1";
  std::string requests;
  std::string duration;
  std::string arrivals = "poisson:rate=5.5";
  std::string prompt;
  std::string output;
  std::string lengths_from;
  std::string max_tokens = "none";
  std::string max_tokens_share = "1";
  std::vector<std::string> cancel;
  std::string n = "1";
  std::vector<std::string> system_prompts;
  std::string sessions;
  std::string block_tokens = "16";
  po::options_description options("Options");
  options.add_options()
      ("out,o", po::value(&out)->default_value(out), "where to write ('-': standard output)")
      (option_key(kOptTo), po::value(&to), "csv or jsonl (default: from --out's extension; csv on standard output)")
      (option_key(kOptSeed), po::value(&seed)->default_value(seed), "the seed: same seed and options, same bytes")
      (option_key(kOptRequests), po::value(&requests), "stop after N requests (default 1000 unless --duration is given)")
      (option_key(kOptDuration), po::value(&duration), "stop at this arrival time, e.g. 10min, 3600s")
      (option_key(kOptArrivals), po::value(&arrivals)->default_value(arrivals),
       "poisson:rate=R | gamma:rate=R,cv=C | onoff:rate=R,on=D,off=D[,off_rate=R]")
      (option_key(kOptPrompt), po::value(&prompt), "prompt length in tokens (a count; see above)")
      (option_key(kOptOutput), po::value(&output), "output length in tokens (a count; see above)")
      (option_key(kOptLengthsFrom), po::value(&lengths_from),
       "draw (prompt, output) pairs jointly from this trace's rows, instead of --prompt/--output")
      (option_key(kOptMaxTokens), po::value(&max_tokens)->default_value(max_tokens),
       "none | output | factor:F (ceil(output x F)) | fixed:N or cap:COUNT (output is cut to the cap)")
      (option_key(kOptMaxTokensShare), po::value(&max_tokens_share)->default_value(max_tokens_share),
       "share of requests that give max_tokens")
      (option_key(kOptCancel), po::value(&cancel)->composing(),
       "p=P,after=DURATION: cancel that share of requests that long after arrival (repeatable)")
      (option_key(kOptN), po::value(&n)->default_value(n), "parallel samples per request (a count, at least 1)")
      (option_key(kOptSystemPrompt), po::value(&system_prompts)->composing(),
       "tokens=T,share=P: a system prompt shared by that share of requests (repeatable)")
      (option_key(kOptSessions), po::value(&sessions),
       "share=P,turns=COUNT,gap=DURATION[,user=COUNT][,max_context=N]: multi-turn conversations "
       "(--arrivals times new arrivals; a session's later turns come on top, so the request rate "
       "is higher than the arrival rate)")
      (option_key(kOptBlockTokens), po::value(&block_tokens)->default_value(block_tokens),
       "tokens per block of the prefix hashes (written with system prompts or sessions)");
  po::positional_options_description positional;
  po::variables_map vm;
  if (!parse_options(inv, kGenSpec, options, positional, vm)) return kExitOk;
  // Options that only shape something else that is not asked for would change nothing.
  if (given(vm, option_key(kOptMaxTokensShare)) && max_tokens == "none") {
    throw UsageError(std::string(kOptMaxTokensShare) + " is the share of requests given max_tokens, and " + kOptMaxTokens +
                     " is none: it would have no effect\nUsage: " + kGenSpec.synopsis);
  }
  if (given(vm, option_key(kOptBlockTokens)) && system_prompts.empty() && sessions.empty()) {
    throw UsageError(std::string(kOptBlockTokens) + " sizes the prefix hashes, which are written only with " +
                     kOptSystemPrompt + " or " + kOptSessions + ": it would have no effect\nUsage: " + kGenSpec.synopsis);
  }
  if (!lengths_from.empty() && (!prompt.empty() || !output.empty())) {
    throw UsageError(std::string(kOptLengthsFrom) + " replaces --prompt and --output; give one or the other\nUsage: " +
                     kGenSpec.synopsis);
  }

  GenOptions gen;
  NativeFormat format = NativeFormat::csv;
  option_value(kGenSpec, [&] {
    gen.seed = parse_seed(seed, kOptSeed);
    gen.requests = requests.empty() ? (duration.empty() ? 1000 : 0) : parse_positive_count(requests, kOptRequests);
    if (!duration.empty()) {
      gen.duration_ns = parse_duration_ns(duration, kOptDuration);
      if (gen.duration_ns <= 0) throw InputError(Location{"", 0, kOptDuration}, "expected a positive duration");
    }
    gen.arrivals = parse_arrival_process(arrivals, kOptArrivals);
    if (!prompt.empty()) gen.prompt_tokens = parse_count_distribution(prompt, kOptPrompt);
    if (!output.empty()) gen.output_tokens = parse_count_distribution(output, kOptOutput);
    gen.lengths_from = lengths_from;
    gen.max_tokens = parse_max_tokens_policy(max_tokens, kOptMaxTokens);
    gen.max_tokens.share_ppb = parse_probability_ppb(max_tokens_share, kOptMaxTokensShare);
    for (const auto& c : cancel) gen.cancel.push_back(parse_cancel_clause(c, kOptCancel));
    gen.n = parse_count_distribution(n, kOptN);
    for (const auto& sp : system_prompts) gen.system_prompts.push_back(parse_system_prompt(sp, kOptSystemPrompt));
    if (!sessions.empty()) gen.sessions = parse_session_model(sessions, kOptSessions);
    gen.block_tokens = parse_positive_count(block_tokens, kOptBlockTokens);
    validate_gen_options(gen);
    format = !to.empty() ? parse_native_format(to, kOptTo)
                         : out == "-" ? NativeFormat::csv : native_format_for_path(out, "--out");
    return 0;
  });

  // The traces it draws lengths from are inputs: OUT must not overwrite them.
  std::vector<std::string> inputs;
  if (!gen.lengths_from.empty()) inputs.push_back(gen.lengths_from);
  for (const auto* d : {&gen.prompt_tokens, &gen.output_tokens}) {
    if (!d->path.empty()) inputs.push_back(d->path);
  }
  if (gen.sessions && gen.sessions->user_tokens && !gen.sessions->user_tokens->path.empty()) {
    inputs.push_back(gen.sessions->user_tokens->path);
  }
  refuse_output_over_input({{"--out", out}}, inputs, kGenSpec.synopsis, out == "-");
  TraceGenerator generator(gen);
  std::int64_t count = 0;
  with_progress("generating", [&](Progress& progress) {
    write_whole(out, format, generator.columns(), inputs, [&](TraceWriter& writer) {
      Request r;
      while (generator.next(r)) {
        writer.write(r);
        ++count;
        // The share of --requests written, or of --duration passed.
        if ((count & 4095) == 0) {
          progress.set(0, gen.requests > 0 ? static_cast<double>(count) / static_cast<double>(gen.requests)
                          : gen.duration_ns > 0 ? static_cast<double>(r.arrival_ns) / static_cast<double>(gen.duration_ns)
                                                : 0.0);
        }
      }
      // A header alone is a trace no command accepts: say why here, where the options are, and
      // write nothing.
      if (count == 0) {
        throw InputError(Location{out, 0, ""}, "no request was generated: does any arrival fall inside --duration?");
      }
    });
  }, out);
  if (out != "-") fmt::print(stderr, "kvsim: wrote {} requests to {}\n", with_commas(count), printable(out));
  return kExitOk;
}

}  // namespace

int run_trace(const Invocation& inv) {
  return dispatch(inv,
                  "Request traces: statistics, conversion to kvsim's native format, and synthetic\n"
                  "generation. Formats read: native CSV/JSONL, Azure 2023/2024, BurstGPT, Mooncake,\n"
                  "Vidur, length-only CSV (with --rate), token-id JSONL.",
                  {
                      {"stats", "summarise a trace (lengths, arrivals, cancellations, prefix reuse)", run_stats},
                      {"convert", "convert a trace to native CSV or JSONL, losslessly", run_convert},
                      {"gen", "generate a synthetic trace, seeded and reproducible", run_gen},
                  });
}

}  // namespace kvsim::cli
