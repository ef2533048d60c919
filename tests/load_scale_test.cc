// Load scaling: --time-window, --requests and --rate-scale (TraceOptions; docs/replay.md,
// "Load scaling"). Every expected time below is computed by hand in the comments, from the
// rules in kvsim/trace.h: the window in the trace's own time, then the first N, then
// arrival' = arrival / X from time 0, to the nearest ns with halves rounded up.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "kvsim/error.h"
#include "kvsim/option_names.h"
#include "kvsim/trace.h"
#include "trace_test_util.h"

using namespace kvsim;
using test::run_cli;
using test::scratch_path;
using test::slurp;
using test::write_file;

namespace {

// Five requests at 0, 1, 2.5, 4 and 8.000000001 s; c gives up 0.5 s after it arrives.
const char kFive[] =
    "id,arrival,prompt_tokens,output_tokens,cancel_after\n"
    "a,0,10,1,\n"
    "b,1,10,1,\n"
    "c,2.5,10,1,0.5\n"
    "d,4,10,1,\n"
    "e,8.000000001,10,1,\n";

std::string five() { return write_file("load-five.csv", kFive); }

std::vector<std::string> ids(const std::vector<Request>& rs) {
  std::vector<std::string> out;
  for (const auto& r : rs) out.push_back(r.id);
  return out;
}

std::vector<std::int64_t> arrivals(const std::vector<Request>& rs) {
  std::vector<std::int64_t> out;
  for (const auto& r : rs) out.push_back(r.arrival_ns);
  return out;
}

TraceOptions window(const std::string& text) {
  TraceOptions o;
  parse_time_window(text, kOptTimeWindow, o);
  return o;
}

}  // namespace

TEST_CASE("load scaling: --rate-scale divides arrivals from time 0, to the nearest ns, halves up, patience is kept") {
  TraceOptions o;
  o.rate_scale_ppb = parse_rate_scale_ppb("2", kOptRateScale);
  CHECK(o.rate_scale_ppb == 2'000'000'000);
  const auto rs = read_trace(five(), o);
  // 0/2 = 0; 1/2 = 0.5 s; 2.5/2 = 1.25 s; 4/2 = 2 s; 8,000,000,001 ns / 2 = 4,000,000,000.5
  // -> 4,000,000,001 (half up). Every gap is halved, the last to within the rounding.
  CHECK(arrivals(rs) == std::vector<std::int64_t>{0, 500'000'000, 1'250'000'000, 2'000'000'000, 4'000'000'001});
  // c: arrival 1.25 s, still 0.5 s of patience: cancelled at 1.75 s.
  REQUIRE(rs[2].cancel_ns);
  CHECK(*rs[2].cancel_ns == 1'750'000'000);
  CHECK(!rs[0].cancel_ns);

  // X = 3: 1e9/3 = 333,333,333.33 -> 333,333,333; 2.5e9/3 = 833,333,333.33 -> 833,333,333;
  // 4e9/3 = 1,333,333,333.33 -> 1,333,333,333; 8,000,000,001/3 = 2,666,666,667 exactly.
  o.rate_scale_ppb = parse_rate_scale_ppb("3", kOptRateScale);
  CHECK(arrivals(read_trace(five(), o)) ==
        std::vector<std::int64_t>{0, 333'333'333, 833'333'333, 1'333'333'333, 2'666'666'667});

  // X = 0.5 slows the trace down: every time doubles, exactly.
  o.rate_scale_ppb = parse_rate_scale_ppb("0.5", kOptRateScale);
  CHECK(o.rate_scale_ppb == 500'000'000);
  const auto slow = read_trace(five(), o);
  CHECK(arrivals(slow) == std::vector<std::int64_t>{0, 2'000'000'000, 5'000'000'000, 8'000'000'000, 16'000'000'002});
  CHECK(*slow[2].cancel_ns == 5'500'000'000);
}

TEST_CASE("load scaling: --time-window keeps FROM <= arrival < TO in the trace's own time, --requests the first N after it") {
  // [1 s, 4 s): b (1) and c (2.5); d at 4 s is the excluded end.
  CHECK(ids(read_trace(five(), window("1s..4s"))) == std::vector<std::string>{"b", "c"});
  CHECK(ids(read_trace(five(), window("2500ms.."))) == std::vector<std::string>{"c", "d", "e"});
  CHECK(ids(read_trace(five(), window("..1s"))) == std::vector<std::string>{"a"});
  // Times keep the trace's clock: nothing is shifted to start at the window.
  CHECK(arrivals(read_trace(five(), window("1s..4s"))) == std::vector<std::int64_t>{1'000'000'000, 2'500'000'000});

  TraceOptions first3;
  first3.max_requests = 3;
  CHECK(ids(read_trace(five(), first3)) == std::vector<std::string>{"a", "b", "c"});
  // Progress with a count: the share of the count read, when that is further on than the
  // file's bytes (3 of 5 rows is less than 3/3 of the work).
  {
    auto reader = open_trace(five(), first3);
    Request r;
    REQUIRE(reader->next(r));
    CHECK(reader->bytes_read() * 3 >= reader->total_bytes());  // 1 of 3 kept: at least a third
    REQUIRE(reader->next(r));
    CHECK(reader->bytes_read() * 3 >= 2 * reader->total_bytes());
    REQUIRE(reader->next(r));
    CHECK(reader->bytes_read() == reader->total_bytes());
    CHECK_FALSE(reader->next(r));
  }
  TraceOptions both = window("1s..");
  both.max_requests = 2;
  CHECK(ids(read_trace(five(), both)) == std::vector<std::string>{"b", "c"});

  // The window is in the trace's time, before scaling: 4s.. keeps d (4 s) and e (8 s), then
  // scaled by 2 to 2 s and 4.000000001 s. (After scaling it would have kept e only.)
  TraceOptions scaled = window("4s..");
  scaled.rate_scale_ppb = 2'000'000'000;
  const auto rs = read_trace(five(), scaled);
  CHECK(ids(rs) == std::vector<std::string>{"d", "e"});
  CHECK(arrivals(rs) == std::vector<std::int64_t>{2'000'000'000, 4'000'000'001});
}

TEST_CASE("load scaling applies after --sort, and a trace kept in memory gives the same requests") {
  // Out of order: y (3 s) is before x (1 s) in the file.
  const auto path = write_file("load-unsorted.csv", "id,arrival,prompt_tokens,output_tokens\ny,3,10,1\nx,1,10,1\nz,2,10,1\n");
  TraceOptions o;
  o.sort = true;
  o.max_requests = 1;  // the first in arrival order, x, not the file's first row
  CHECK(ids(read_trace(path, o)) == std::vector<std::string>{"x"});
  o = window("2s..");
  o.sort = true;
  o.rate_scale_ppb = 4'000'000'000;  // z: 2 s / 4 = 0.5 s; y: 3 s / 4 = 0.75 s
  const auto sorted = read_trace(path, o);
  CHECK(ids(sorted) == std::vector<std::string>{"z", "y"});
  CHECK(arrivals(sorted) == std::vector<std::int64_t>{500'000'000, 750'000'000});

  // A pipe's requests are kept by TraceInMemory as the filtering reader gave them.
  auto reader = open_trace(path, o);
  const TraceInMemory kept(*reader);
  auto again = kept.open();
  Request r;
  std::vector<Request> from_memory;
  while (again->next(r)) from_memory.push_back(r);
  CHECK(ids(from_memory) == ids(sorted));
  CHECK(arrivals(from_memory) == arrivals(sorted));
}

TEST_CASE("load scaling: bad values and empty results are errors naming the option") {
  for (const char* bad : {"0", "-1", "abc", "1e3", "", "0.0000000001", "2x"}) {
    INFO(bad);
    CHECK_THROWS_WITH(parse_rate_scale_ppb(bad, kOptRateScale), Catch::Contains("--rate-scale"));
  }
  TraceOptions o;
  for (const char* bad : {"5s..5s", "5s..1s", "10s", "..", "x..1s", "1s..-2s"}) {
    INFO(bad);
    CHECK_THROWS_WITH(parse_time_window(bad, kOptTimeWindow, o), Catch::Contains("--time-window"));
  }
  // [10 s, 20 s) of a trace that ends at 8 s keeps nothing: an error, not an empty result.
  CHECK_THROWS_WITH(read_trace(five(), window("10s..20s")), Catch::Contains("--time-window") &&
                                                                 Catch::Contains("keeps no request"));
  // [4.5 s, 5 s) falls between d and e.
  CHECK_THROWS_WITH(read_trace(five(), window("4.5s..5s")), Catch::Contains("keeps no request"));

  // Measured service times were measured at the trace's own load: scaling them is refused,
  // while a window keeps them as they are.
  const auto measured = write_file("load-measured.csv",
                                   "id,arrival,prompt_tokens,output_tokens,start,first_token,finish\n"
                                   "m,1,10,1,1.5,2,3\n");
  o = TraceOptions{};
  o.rate_scale_ppb = 2'000'000'000;
  CHECK_THROWS_WITH(read_trace(measured, o), Catch::Contains("--rate-scale") && Catch::Contains("measured"));
  const auto windowed = read_trace(measured, window("1s..2s"));
  REQUIRE(windowed.size() == 1);
  CHECK(*windowed[0].finish_ns == 3'000'000'000);
}

TEST_CASE("trace stats and convert: --rate-scale 2 doubles the rate, convert writes the scaled times") {
  // Unscaled: 4 gaps over 8.000000001 s. Scaled by 2: 4 gaps over 4.000000001 s (the last
  // arrival rounded half up), a rate of 4e9 / 4,000,000,001 = 0.99999999975 per second.
  auto r = run_cli({"trace", "stats", five(), "--json"});
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out)["stats"];
  CHECK(j["duration_ns"] == 8'000'000'001);
  CHECK(j["rate_per_s"].get<double>() == Approx(4e9 / 8'000'000'001.0).epsilon(1e-12));
  r = run_cli({"trace", "stats", five(), "--json", "--rate-scale", "2"});
  REQUIRE(r.exit_code == 0);
  j = nlohmann::json::parse(r.out)["stats"];
  CHECK(j["requests"] == 5);
  CHECK(j["duration_ns"] == 4'000'000'001);
  CHECK(j["rate_per_s"].get<double>() == Approx(4e9 / 4'000'000'001.0).epsilon(1e-12));
  // The window and the count in stats: [1 s, 8 s) keeps b, c, d; the first 2 are b and c.
  r = run_cli({"trace", "stats", five(), "--json", "--time-window", "1s..8s", "--requests", "2"});
  REQUIRE(r.exit_code == 0);
  j = nlohmann::json::parse(r.out)["stats"];
  CHECK(j["requests"] == 2);
  CHECK(j["first_arrival_ns"] == 1'000'000'000);
  CHECK(j["duration_ns"] == 1'500'000'000);

  // Convert writes the first three at half their times; c keeps its 0.5 s of patience.
  const auto out = scratch_path("load-three.csv");
  r = run_cli({"trace", "convert", five(), out, "--requests", "3", "--rate-scale", "2"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto written = read_trace(out);
  CHECK(ids(written) == std::vector<std::string>{"a", "b", "c"});
  CHECK(arrivals(written) == std::vector<std::int64_t>{0, 500'000'000, 1'250'000'000});
  CHECK(*written[2].cancel_ns == 1'750'000'000);
  CHECK(slurp(out).find("\nc,1.25,") != std::string::npos);
}

TEST_CASE("load scaling on the command line: errors name the option, --help lists it") {
  const auto trace = five();
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--rate-scale", "0"}, {"--rate-scale", "-2"}, {"--rate-scale", "fast"},
        {"--time-window", "20s..10s"}, {"--requests", "0"}, {"--requests", "x"}}) {
    for (const char* command : {"stats", "convert"}) {
      std::vector<std::string> argv{"trace", command, trace};
      if (std::string(command) == "convert") argv.push_back(scratch_path("load-never.csv"));
      argv.insert(argv.end(), args.begin(), args.end());
      const auto r = run_cli(argv);
      INFO(command << " " << args[0] << " " << args[1] << ": " << r.err);
      CHECK(r.exit_code != 0);
      CHECK(r.err.find(args[0]) != std::string::npos);
    }
    std::vector<std::string> argv{"replay", trace};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto r = run_cli(argv);
    INFO("replay " << args[0] << " " << args[1] << ": " << r.err);
    CHECK(r.exit_code != 0);
    CHECK(r.err.find(args[0]) != std::string::npos);
  }
  // A window past the trace's end: input error (exit 1) from every command.
  for (const std::vector<std::string>& argv :
       {std::vector<std::string>{"trace", "stats", trace, "--time-window", "1min.."},
        {"trace", "convert", trace, scratch_path("load-never.csv"), "--time-window", "1min.."},
        {"replay", trace, "--time-window", "1min.."}}) {
    const auto r = run_cli(argv);
    INFO(argv[0] << ": " << r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("--time-window") != std::string::npos);
    CHECK(r.err.find("keeps no request") != std::string::npos);
  }
  for (const std::vector<std::string>& argv : {std::vector<std::string>{"trace", "stats", "--help"},
                                               {"trace", "convert", "--help"}, {"replay", "--help"}}) {
    const auto r = run_cli(argv);
    REQUIRE(r.exit_code == 0);
    for (const char* flag : {kOptRateScale, kOptTimeWindow, kOptRequests}) {
      INFO(argv[0] << " " << argv[1] << " lists " << flag);
      CHECK(r.out.find(flag) != std::string::npos);
    }
  }
}

TEST_CASE("replay --rate-scale replays what a trace with the arrivals scaled by hand replays") {
  // Two requests 100 ms apart, each 50 steps of 1 ms: unscaled they never overlap. At X = 4
  // b arrives at 100 ms / 4 = 25 ms, as in the hand-scaled trace, while a still runs.
  const auto trace = write_file("load-two.csv", "id,arrival,prompt_tokens,output_tokens,max_tokens\n"
                                                "a,0,100,50,50\nb,0.1,100,50,50\n");
  const auto by_hand = write_file("load-two-x4.csv", "id,arrival,prompt_tokens,output_tokens,max_tokens\n"
                                                     "a,0,100,50,50\nb,0.025,100,50,50\n");
  const std::vector<std::string> common{"--model", "llama-3.1-8b", "--cost", "constant:step=1ms,prefill-token=0ps",
                                        "--allocator", "paged:block=16", "--json", "--quiet"};
  auto args = std::vector<std::string>{"replay", trace, "--rate-scale", "4"};
  args.insert(args.end(), common.begin(), common.end());
  const auto scaled = run_cli(args);
  args = std::vector<std::string>{"replay", by_hand};
  args.insert(args.end(), common.begin(), common.end());
  const auto hand = run_cli(args);
  INFO(scaled.err << hand.err);
  REQUIRE(scaled.exit_code == 0);
  REQUIRE(hand.exit_code == 0);
  auto a = nlohmann::json::parse(scaled.out);
  auto b = nlohmann::json::parse(hand.out);
  CHECK(a["runs"] == b["runs"]);
  // Overlapping, the two hold more than one request's 10 blocks of 16 positions at the peak.
  const std::int64_t bytes_per_token = 131'072;
  CHECK(a["runs"][0]["memory_bytes"]["allocated_slots"]["peak"].get<std::int64_t>() > 160 * bytes_per_token);
}
