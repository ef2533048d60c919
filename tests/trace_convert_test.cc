// The writer and `kvsim trace convert`: lossless round trips, canonical bytes.
#include <catch2/catch.hpp>

#include "kvsim/trace.h"
#include "kvsim/trace_writer.h"
#include "trace_test_util.h"

using namespace kvsim;
using test::run_cli;
using test::same_request;
using test::scratch_path;
using test::slurp;
using test::write_file;

namespace {

void check_same_requests(const std::string& a, const std::string& b) {
  const auto ra = read_trace(a);
  const auto rb = read_trace(b);
  REQUIRE(ra.size() == rb.size());
  for (std::size_t i = 0; i < ra.size(); ++i) {
    INFO("request " << i << " of " << a << " and " << b);
    CHECK(same_request(ra[i], rb[i]));
  }
}

void convert(const std::string& in, const std::string& out) {
  const auto r = run_cli({"trace", "convert", in, out});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
}

}  // namespace

TEST_CASE("seconds print exactly, trailing zeros trimmed") {
  CHECK(format_trace_seconds(0) == "0");
  CHECK(format_trace_seconds(1'500'000'000) == "1.5");
  CHECK(format_trace_seconds(4'314'579'000) == "4.314579");
  CHECK(format_trace_seconds(1) == "0.000000001");
  CHECK(format_trace_seconds(3'217'995'169'000) == "3217.995169");
  CHECK(format_trace_seconds(9'223'372'036'854'775'807) == "9223372036.854775807");
}

TEST_CASE("csv_cell: quoted where a reader would split, unquote or trim it, and read back as it was") {
  CHECK(kvsim::csv_cell("paged:block=16") == "paged:block=16");
  CHECK(kvsim::csv_cell("") == "");
  CHECK(kvsim::csv_cell("a,b") == "\"a,b\"");
  CHECK(kvsim::csv_cell("say \"hi\"") == "\"say \"\"hi\"\"\"");
  CHECK(kvsim::csv_cell("two\nlines") == "\"two\nlines\"");
  CHECK(kvsim::csv_cell(" padded ") == "\" padded \"");
  CHECK(kvsim::csv_cell("\ttab") == "\"\ttab\"");
  CHECK(kvsim::csv_cell("in side") == "in side");
  // kvsim's own reader gives the ids back as they were, spaces and all.
  const std::string path = kvsim::test::write_file("csv-cell.csv", "id,arrival,prompt_tokens,output_tokens\n" +
                                                                      kvsim::csv_cell(" padded ") + ",0,10,2\n" +
                                                                      kvsim::csv_cell("a,\"b\"") + ",1,10,2\n");
  const auto requests = kvsim::read_trace(path);
  REQUIRE(requests.size() == 2);
  CHECK(requests[0].id == " padded ");
  CHECK(requests[1].id == "a,\"b\"");
}

TEST_CASE("native CSV -> JSONL -> CSV is lossless, and the second generation is byte-identical") {
  // Not in canonical form on purpose: columns shuffled, cancel_after, quotes, padding zeros.
  const auto in = write_file("rt-in.csv",
                             "prompt_tokens,id,arrival,output_tokens,cancel_after,max_tokens,n,session,start,"
                             "first_token,finish,prefix_block_tokens,prefix_hashes\n"
                             "100,\"a,1\",0.500,20,1.25,64,2,\"chat \"\"x\"\"\",0.6,0.7,2.0,16,1 2 3 4 5 6 7\n"
                             "7, b ,1,0,,,,,,,,,\n"
                             "9,c,3217.9951690,5,,,,s,,,,16,18446744073709551615\n");
  const auto a = scratch_path("rt-a.jsonl");
  const auto b = scratch_path("rt-b.csv");
  const auto c = scratch_path("rt-c.jsonl");
  const auto d = scratch_path("rt-d.csv");
  convert(in, a);
  convert(a, b);
  convert(b, c);
  convert(b, d);
  check_same_requests(in, a);
  check_same_requests(in, b);
  check_same_requests(in, c);
  CHECK(slurp(c) == slurp(a));
  CHECK(slurp(d) == slurp(b));
  // What the canonical form looks like.
  CHECK(slurp(b) ==
        "id,arrival,prompt_tokens,output_tokens,max_tokens,cancel_at,n,session,start,first_token,finish,"
        "prefix_block_tokens,prefix_hashes\n"
        "\"a,1\",0.5,100,20,64,1.75,2,\"chat \"\"x\"\"\",0.6,0.7,2,16,1 2 3 4 5 6 7\n"
        "b,1,7,0,,,1,,,,,,\n"
        "c,3217.995169,9,5,,,1,s,,,,16,18446744073709551615\n");
}

TEST_CASE("Azure -> native -> native is lossless and byte-identical") {
  const auto in = write_file("az.csv",
                             "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
                             "2023-11-16 18:15:46.6805900,374,44\r\n"
                             "2023-11-16 18:15:50.9951690,396,109\r\n"
                             "2023-11-17 00:00:00.0000001,1,1\r\n");
  const auto a = scratch_path("az-a.csv");
  const auto b = scratch_path("az-b.csv");
  convert(in, a);
  convert(a, b);
  check_same_requests(in, a);
  CHECK(slurp(a) == slurp(b));
  CHECK(slurp(a) ==
        "id,arrival,prompt_tokens,output_tokens\n"
        "1,0,374,44\n"
        "2,4.314579,396,109\n"
        "3,20653.3194101,1,1\n");  // 5:44:13.3194100 + 100 ns after the first row
}

TEST_CASE("the real traces convert losslessly") {
  KVSIM_REQUIRE_SHARED_TRACE(azure, "azure2023/AzureLLMInferenceTrace_conv.csv");
  KVSIM_REQUIRE_SHARED_TRACE(mooncake, "mooncake/conversation_trace.jsonl");
  const auto a1 = scratch_path("real-a1.csv");
  const auto a2 = scratch_path("real-a2.csv");
  convert(azure, a1);
  convert(a1, a2);
  check_same_requests(azure, a1);
  CHECK(slurp(a1) == slurp(a2));
  const auto m1 = scratch_path("real-m1.jsonl");
  const auto m2 = scratch_path("real-m2.csv");
  const auto m3 = scratch_path("real-m3.jsonl");
  convert(mooncake, m1);
  convert(m1, m2);
  convert(m2, m3);
  check_same_requests(mooncake, m2);
  CHECK(slurp(m1) == slurp(m3));
}

TEST_CASE("convert writes nothing when the input has a bad row") {
  const auto out = scratch_path("never.csv");
  std::filesystem::remove(out);
  const auto r = run_cli({"trace", "convert", test::bad_trace("wrong_type.csv"), out});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("wrong_type.csv:3:"));
  CHECK_FALSE(std::filesystem::exists(out));
  CHECK_FALSE(std::filesystem::exists(out + ".kvsim-tmp"));
}

TEST_CASE("convert picks the output format from the extension or --to") {
  const auto in = write_file("ext.csv", "id,arrival,prompt_tokens,output_tokens\n1,0,1,1\n");
  const auto bad = run_cli({"trace", "convert", in, scratch_path("out.txt")});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("name it .csv or .jsonl"));
  const auto jsonl = run_cli({"trace", "convert", in, scratch_path("out.txt"), "--to", "jsonl"});
  CHECK(jsonl.exit_code == 0);
  CHECK(slurp(scratch_path("out.txt")) == "{\"id\":\"1\",\"arrival\":0,\"prompt_tokens\":1,\"output_tokens\":1}\n");
  const auto to_stdout = run_cli({"trace", "convert", in, "-", "--to", "csv"});
  CHECK(to_stdout.exit_code == 0);
  CHECK(to_stdout.out == "id,arrival,prompt_tokens,output_tokens\n1,0,1,1\n");
  const auto same = run_cli({"trace", "convert", in, in});
  CHECK(same.exit_code == 2);
}

TEST_CASE("the writer refuses what CSV cannot hold, and JSONL escapes it") {
  Request r;
  r.id = "line\nbreak";
  TraceWriter csv(scratch_path("nl.csv"), NativeFormat::csv, TraceColumns{});
  CHECK_THROWS_WITH(csv.write(r), Catch::Contains("holds a line break"));
  {
    TraceWriter jsonl(scratch_path("nl.jsonl"), NativeFormat::jsonl, TraceColumns{});
    jsonl.write(r);
    jsonl.close();
  }
  const auto back = read_trace(scratch_path("nl.jsonl"));
  REQUIRE(back.size() == 1);
  CHECK(back[0].id == "line\nbreak");
}

TEST_CASE("a JSONL id or session holding NUL (the JSON escape u0000) is refused at its line: no text output could carry it") {
  // Convert wrote the NUL byte into the CSV, which every reader then refused.
  const auto in = write_file("nul-id.jsonl", "{\"id\":\"a\",\"arrival\":0,\"prompt_tokens\":3,\"output_tokens\":1}\n"
                                             "{\"id\":\"\\u0000x\",\"arrival\":0.5,\"prompt_tokens\":3,\"output_tokens\":1}\n");
  const auto r = run_cli({"trace", "convert", in, scratch_path("nul-id.csv")});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("nul-id.jsonl:2") && Catch::Contains("id") &&
                        Catch::Contains("holds a NUL character (\\u0000)"));
  const auto session = write_file("nul-session.jsonl",
                                  "{\"id\":\"a\",\"arrival\":0,\"prompt_tokens\":3,\"output_tokens\":1,\"session\":\"s\\u0000\"}\n");
  const auto s = run_cli({"trace", "stats", session});
  CHECK(s.exit_code == 1);
  CHECK_THAT(s.err, Catch::Contains("nul-session.jsonl:1") && Catch::Contains("session"));
}

TEST_CASE("convert says how many failed BurstGPT requests it dropped, as stats and replay do") {
  // Row 2 has 0 response tokens: a failed request, dropped unless --keep-failed. The output
  // holds 2 requests, and nothing in it can tell a later stats or replay that one is missing.
  const std::string in = write_file("convert-burstgpt.csv",
                                    "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                                    "5,ChatGPT,472,18,490,Conversation log\n"
                                    "45,ChatGPT,1087,0,1087,Conversation log\n"
                                    "46.5,GPT-4,417,276,693,Conversation log\n");
  const std::string out = scratch_path("convert-burstgpt-out.csv");
  auto r = run_cli({"trace", "convert", in, out});
  REQUIRE(r.exit_code == 0);
  CHECK(read_trace(out).size() == 2);
  CHECK(r.err.find("kvsim: note: 1 failed requests (0 response tokens) of " + in + " were dropped and are not in " +
                   out + "; --keep-failed keeps them as cancelled at arrival") != std::string::npos);
  CHECK(r.err.find("converted 2 requests") != std::string::npos);
  r = run_cli({"trace", "convert", in, out, "--keep-failed"});
  REQUIRE(r.exit_code == 0);
  CHECK(read_trace(out).size() == 3);
  CHECK(r.err.find("dropped") == std::string::npos);
}
