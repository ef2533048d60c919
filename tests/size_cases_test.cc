// The seed guide's sizing cases beyond B x T (tests/data and presets; every figure is worked by
// hand in the comments): one request with its prompt and generation apart, the sequences
// parallel sampling and beam search create (prompt shared as vLLM shares it, or copied as
// Hugging Face generate copies it), requests of different lengths summed, and a static cache.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_util.h"
#include "kvsim/model.h"
#include "kvsim/size_cases.h"

using namespace kvsim;
using kvsim::test::run_cli;

namespace {

std::string config(const std::string& name) { return std::string(KVSIM_SOURCE_DIR) + "/tests/data/configs/" + name; }

LayerGroup group(std::int64_t window) {
  LayerGroup g;
  g.window_tokens = window;
  g.bytes_per_position = 1;
  return g;
}

}  // namespace

TEST_CASE("request positions: shared prompt, copied prompt, sliding windows") {
  // Full attention, P 3,072, G 1,024: one sequence 4,096; four sharing the prompt
  // 3,072 + 4 x 1,024 = 7,168; four with their own copies 4 x 4,096 = 16,384.
  CHECK(request_positions(group(0), {3072, 1024, 1, true}) == 4096);
  CHECK(request_positions(group(0), {3072, 1024, 4, true}) == 7168);
  CHECK(request_positions(group(0), {3072, 1024, 4, false}) == 16384);
  // Window 4,096, P 3,000, G 2,000, 3 samples: each keeps positions 904..4,999; the prompt's
  // 904..2,999 (2,096) once, and 2,000 generated each: 2,096 + 6,000 = 8,096.
  CHECK(request_positions(group(4096), {3000, 2000, 3, true}) == 8096);
  CHECK(request_positions(group(4096), {3000, 2000, 1, true}) == 4096);   // min(5,000, 4,096)
  CHECK(request_positions(group(4096), {3000, 2000, 3, false}) == 3 * 4096);
  // Generation longer than the window: nothing of the prompt stays; each keeps W.
  CHECK(request_positions(group(1024), {3000, 2000, 2, true}) == 2 * 1024);
}

TEST_CASE("kvsim size --prompt --max-tokens: the seed's 3,072 + 1,024 reservation") {
  // The seed: each sequence gets up to 3,072 input tokens and a reservation of 1,024 more,
  // 4,096 positions: 163,840 x 4,096 = 671,088,640 bytes (0.625 GiB).
  const auto r = run_cli({"size", "--model", "seed-example", "--dtype", "fp16", "--prompt", "3072", "--max-tokens", "1024"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("prompt 3,072 + max tokens 1,024 = 4,096 positions"));
  CHECK_THAT(r.out, Catch::Contains("one sequence: 671,088,640 bytes (0.625 GiB)"));

  // --n 4: 7,168 positions x 163,840 = 1,174,405,120 (1.75x one sequence); copied: 2,684,354,560.
  const auto n = run_cli({"size", "--model", "seed-example", "--dtype", "fp16", "--prompt", "3072", "--max-tokens", "1024",
                          "--n", "4", "--json"});
  REQUIRE(n.exit_code == 0);
  auto doc = nlohmann::json::parse(n.out);
  CHECK(doc["request"]["kv_bytes"].get<std::int64_t>() == 1'174'405'120);
  CHECK(doc["request"]["single_sequence_kv_bytes"].get<std::int64_t>() == 671'088'640);
  CHECK(doc["request"]["prompt_shared"].get<bool>());
  // 3,072 + 4 x 1,024: the prompt counted once, its partial block too, as effective tokens
  // count it, which is not what "full blocks only" would give (3,072 is 192 whole blocks here,
  // but a 3,000-token prompt's last 8 positions would be each sample's own in vLLM).
  const auto table = run_cli({"size", "--model", "seed-example", "--dtype", "fp16", "--prompt", "3072", "--max-tokens",
                              "1024", "--n", "4"});
  CHECK_THAT(table.out, Catch::Contains("4 sequences, prompt shared (counted once, as effective tokens count it; "
                                        "vLLM's prefix caching shares its full blocks): 1,174,405,120 bytes"));
  const auto beams = run_cli({"size", "--model", "seed-example", "--dtype", "fp16", "--prompt", "3072", "--max-tokens",
                              "1024", "--beams", "4", "--no-prompt-sharing", "--json"});
  REQUIRE(beams.exit_code == 0);
  doc = nlohmann::json::parse(beams.out);
  CHECK(doc["request"]["kv_bytes"].get<std::int64_t>() == 2'684'354'560);
  CHECK(doc["request"]["sequences"].get<std::int64_t>() == 4);
  // One sequence has no copy to make: the option is refused, not echoed as prompt_shared false.
  const auto one = run_cli({"size", "--model", "seed-example", "--prompt", "3072", "--max-tokens", "1024",
                            "--no-prompt-sharing"});
  CHECK(one.exit_code == 2);
  CHECK_THAT(one.err, Catch::Contains("--no-prompt-sharing: copies the prompt into each of the request's sequences, "
                                      "and it has one"));

  // Mistral (32 sliding layers of 4,096, 131,072 bytes per position), P 3,000, G 2,000, n 3:
  // 8,096 positions (above) x 131,072 = 1,061,158,912.
  const auto m = run_cli({"size", "--model", "mistral-7b-v0.1", "--prompt", "3000", "--max-tokens", "2000", "--n", "3", "--json"});
  REQUIRE(m.exit_code == 0);
  CHECK(nlohmann::json::parse(m.out)["request"]["kv_bytes"].get<std::int64_t>() == 1'061'158'912);

  // A hybrid model: each of the n sequences has its own state. Jamba, n 2: 2 x 8,716,288.
  const auto j = run_cli({"size", "--config", config("jamba-v0.1.json"), "--prompt", "1000", "--max-tokens", "24", "--n", "2", "--json"});
  REQUIRE(j.exit_code == 0);
  doc = nlohmann::json::parse(j.out);
  CHECK(doc["request"]["state_bytes"].get<std::int64_t>() == 2 * 8'716'288);
  CHECK(doc["request"]["kv_bytes"].get<std::int64_t>() == 16'384 * (1000 + 2 * 24));
}

TEST_CASE("kvsim size --tokens T1,T2 gives the total beside the rows") {
  // Requests of 1,000 and 3,000 tokens held at once: 4,000 positions x 163,840 = 655,360,000.
  const auto r = run_cli({"size", "--model", "seed-example", "--dtype", "fp16", "--tokens", "1000,3000"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("total 4,000"));
  CHECK_THAT(r.out, Catch::Contains("655,360,000"));
  const auto j = run_cli({"size", "--model", "seed-example", "--dtype", "fp16", "--seqs", "2", "--tokens", "1000,3000", "--json"});
  REQUIRE(j.exit_code == 0);
  const auto doc = nlohmann::json::parse(j.out);
  CHECK(doc["sequences"]["total"]["tokens"].get<std::int64_t>() == 4000);
  CHECK(doc["sequences"]["total"]["bytes"].get<std::int64_t>() == 2 * 655'360'000);
  // One row: no total.
  const auto one = run_cli({"size", "--model", "seed-example", "--tokens", "1000", "--json"});
  CHECK_FALSE(nlohmann::json::parse(one.out)["sequences"].contains("total"));
}

TEST_CASE("kvsim size --static-cache: the reservation, not the tokens held") {
  // 6 sequences x 4,096 reserved x 163,840 = 4,026,531,840 (the seed's 3.75 GiB), whatever
  // they hold; at 1,000 tokens they hold 6 x 1,000 x 163,840 = 983,040,000.
  const auto r = run_cli({"size", "--model", "seed-example", "--dtype", "fp16", "--seqs", "6", "--tokens", "1000",
                          "--static-cache", "4096"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("reserved: 4,026,531,840 bytes (3.75 GiB)"));
  CHECK_THAT(r.out, Catch::Contains("hold 983,040,000 bytes: 3,043,491,840 bytes reserved but empty"));
  // The reservation needs no --tokens: the same 4,026,531,840 bytes, and no row of tokens held.
  const auto bare = run_cli({"size", "--model", "seed-example", "--dtype", "fp16", "--seqs", "6", "--static-cache", "4096"});
  REQUIRE(bare.exit_code == 0);
  CHECK_THAT(bare.out, Catch::Contains("reserved: 4,026,531,840 bytes (3.75 GiB)") && !Catch::Contains("reserved but empty"));
  // A sliding layer reserves min(W, L) (transformers' StaticSlidingWindowLayer): Mistral, L 8,192,
  // 1 sequence: 4,096 x 131,072 = 536,870,912.
  const auto m = run_cli({"size", "--model", "mistral-7b-v0.1", "--static-cache", "8192", "--json"});
  REQUIRE(m.exit_code == 0);
  CHECK(nlohmann::json::parse(m.out)["static_cache"]["reserved_bytes"].get<std::int64_t>() == 536'870'912);
}

TEST_CASE("kvsim size request options: what is missing is named") {
  // Options that cannot go together are usage errors (exit 2), like every command-line value.
  auto err = [](std::vector<std::string> args) {
    args.insert(args.begin(), {"size", "--model", "seed-example"});
    const auto r = run_cli(args);
    CHECK(r.exit_code == 2);
    return r.err;
  };
  CHECK_THAT(err({"--n", "2"}), Catch::Contains("--n") && Catch::Contains("needs --prompt P and --max-tokens G"));
  CHECK_THAT(err({"--prompt", "10"}), Catch::Contains("--prompt") && Catch::Contains("needs --max-tokens"));
  CHECK_THAT(err({"--max-tokens", "10"}), Catch::Contains("needs --prompt"));
  CHECK_THAT(err({"--prompt", "10", "--max-tokens", "5", "--n", "2", "--beams", "2"}), Catch::Contains("not both"));
  CHECK_THAT(err({"--prompt", "10", "--max-tokens", "0"}), Catch::Contains("--max-tokens"));
  CHECK_THAT(err({"--static-cache", "x"}), Catch::Contains("--static-cache"));
  CHECK_THAT(err({"--seqs", "6"}), Catch::Contains("--seqs") && Catch::Contains("needs --tokens T (positions per "
                                                                                "sequence) or --static-cache L"));
}

TEST_CASE("offload split: what stays, what moves, and the transfer per step") {
  // 4,026,531,840 bytes (the seed's six sequences), 3/4 on the host: 3,019,898,880 host,
  // 1,006,632,960 device; at 32 GB/s, 3,019,898,880 / 32e9 s = 94,371,840 ns.
  const OffloadSplit o = offload_split(4'026'531'840, 750'000'000, 32'000'000'000);
  CHECK(o.host_bytes == 3'019'898'880);
  CHECK(o.device_bytes == 1'006'632'960);
  CHECK(o.transfer_ns == 94'371'840);
  // Rounding: the host share rounds down (floor(3 x 0.333333333) = 0 bytes), a transfer up to
  // the next nanosecond (5 bytes at 3 B/s = 1.6666666667 s).
  CHECK(offload_split(3, 333'333'333, 1).host_bytes == 0);
  CHECK(offload_split(10, 500'000'000, 3).transfer_ns == 1'666'666'667);  // 5 bytes at 3 B/s
}

TEST_CASE("kvsim size --offload-fraction through the command line") {
  const auto r = run_cli({"size", "--model", "seed-example", "--dtype", "fp16", "--seqs", "6", "--tokens", "4096",
                          "--offload-fraction", "0.75", "--link-bandwidth", "32GB"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("1,006,632,960"));
  CHECK_THAT(r.out, Catch::Contains("3,019,898,880"));
  CHECK_THAT(r.out, Catch::Contains("94.372 ms"));
  // Without --link-bandwidth the 25 GB/s default is said to be assumed.
  const auto d = run_cli({"size", "--model", "seed-example", "--tokens", "4096", "--offload-fraction", "0.5"});
  REQUIRE(d.exit_code == 0);
  CHECK_THAT(d.out, Catch::Contains("assumed: 25 GB/s"));
  const auto no_work = run_cli({"size", "--model", "seed-example", "--offload-fraction", "0.5"});
  CHECK(no_work.exit_code == 2);
  CHECK_THAT(no_work.err, Catch::Contains("--offload-fraction"));
  const auto link_alone = run_cli({"size", "--model", "seed-example", "--tokens", "10", "--link-bandwidth", "25GB"});
  CHECK(link_alone.exit_code == 2);
  CHECK_THAT(link_alone.err, Catch::Contains("needs --offload-fraction"));
}

TEST_CASE("kvsim size --check: the seed's three cases, which fit and what is assumed") {
  // seed-example fp16: a block is 40 layers x 16 tokens x 4,096 bytes = 2,621,440; a 10 GiB
  // budget holds 10,737,418,240 / 2,621,440 = 4,096 blocks. usual 2,000 tokens = 125 blocks;
  // long 70,000 = 4,375 blocks (does not fit); 32 x 125 = 4,000 (fits); 33 x 125 = 4,125 (does not).
  const auto r = run_cli({"size", "--model", "seed-example", "--dtype", "fp16", "--kv-budget", "10GiB", "--check",
                          "usual=2000,long=70000,concurrency=32", "--json"});
  REQUIRE(r.exit_code == 0);
  const auto doc = nlohmann::json::parse(r.out);
  REQUIRE(doc["checks"].size() == 3);
  CHECK(doc["checks"][0]["blocks_needed"].get<std::int64_t>() == 125);
  CHECK(doc["checks"][0]["blocks_available"].get<std::int64_t>() == 4096);
  CHECK(doc["checks"][0]["kv_bytes"].get<std::int64_t>() == 327'680'000);
  CHECK(doc["checks"][0]["fits"].get<bool>());
  CHECK(doc["checks"][1]["blocks_needed"].get<std::int64_t>() == 4375);
  CHECK_FALSE(doc["checks"][1]["fits"].get<bool>());
  CHECK(doc["checks"][2]["blocks_needed"].get<std::int64_t>() == 4000);
  CHECK(doc["checks"][2]["kv_bytes"].get<std::int64_t>() == 10'485'760'000);
  CHECK(doc["checks"][2]["fits"].get<bool>());
  const auto over = run_cli({"size", "--model", "seed-example", "--dtype", "fp16", "--kv-budget", "10GiB", "--check",
                             "usual=2000,long=70000,concurrency=33"});
  REQUIRE(over.exit_code == 0);
  CHECK_THAT(over.out, Catch::Contains("4,125") && Catch::Contains("NO"));
  CHECK_THAT(over.out, Catch::Contains("measured: nothing"));
  // With a device, the sheet says which terms are assumed.
  const auto dev = run_cli({"size", "--model", "llama-3.1-8b", "--device", "H100-80GB", "--check", "usual=2000,long=100000,concurrency=64"});
  REQUIRE(dev.exit_code == 0);
  CHECK_THAT(dev.out, Catch::Contains("reserve: 1,073,741,824 bytes (assumed, not measured"));
  CHECK_THAT(dev.out, Catch::Contains("a spec value"));
  const auto no_budget = run_cli({"size", "--model", "seed-example", "--check", "usual=1,long=2,concurrency=3"});
  CHECK(no_budget.exit_code == 2);
  CHECK_THAT(no_budget.err, Catch::Contains("needs a budget"));
  const auto missing = run_cli({"size", "--model", "seed-example", "--kv-budget", "1GiB", "--check", "usual=1,long=2"});
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Catch::Contains("expected all three cases"));
}

TEST_CASE("kvsim size --check: a case longer than the context limit says NO and why") {
  // Llama-3.1-8B on an H100: KV budget 59,834,464,665 bytes, blocks of 32 layers x 16 tokens x
  // 4,096 bytes = 2,097,152: 28,531 blocks. The long case, 200,000 tokens, needs 12,500 blocks
  // and would fit them, but it is past max_position_embeddings 131,072: the engine refuses it.
  const auto r = run_cli({"size", "--model", "llama-3.1-8b", "--device", "H100-80GB", "--check",
                          "usual=2000,long=200000,concurrency=4", "--json"});
  REQUIRE(r.exit_code == 0);
  auto doc = nlohmann::json::parse(r.out);
  REQUIRE(doc["checks"].size() == 3);
  const auto& long_case = doc["checks"][1];
  CHECK(long_case["blocks_needed"].get<std::int64_t>() == 12'500);
  CHECK(long_case["blocks_available"].get<std::int64_t>() == 28'531);
  CHECK_FALSE(long_case["fits"].get<bool>());
  CHECK(long_case["exceeds_context"].get<bool>());
  CHECK(long_case["context_limit"].get<std::int64_t>() == 131'072);
  CHECK_THAT(long_case["why"].get<std::string>(),
             Catch::Contains("200,000 tokens exceed the context limit (max_position_embeddings 131,072)"));
  // usual: 2,000 tokens = 125 blocks; concurrency: 4 x 125 = 500 blocks. Both fit, no reason.
  CHECK(doc["checks"][0]["fits"].get<bool>());
  CHECK(doc["checks"][2]["blocks_needed"].get<std::int64_t>() == 500);
  CHECK(doc["checks"][2]["fits"].get<bool>());
  CHECK(doc["checks"][2]["why"] == "");
  CHECK(doc["paged"]["context_limit"].get<std::int64_t>() == 131'072);
  const auto table = run_cli({"size", "--model", "llama-3.1-8b", "--device", "H100-80GB", "--check",
                              "usual=2000,long=200000,concurrency=4"});
  REQUIRE(table.exit_code == 0);
  CHECK_THAT(table.out, Catch::Contains("NO: longer than max_position_embeddings 131,072"));

  // With the engine's max_model_len 8,192, a long input of 20,000 tokens (1,250 blocks) is
  // refused by the engine whatever the pool holds.
  const auto e = run_cli({"size", "--model", "llama-3.1-8b", "--device", "H100-80GB", "--engine", "vllm",
                          "--max-model-len", "8192", "--check", "usual=2000,long=20000,concurrency=4", "--json"});
  REQUIRE(e.exit_code == 0);
  doc = nlohmann::json::parse(e.out);
  CHECK(doc["checks"][1]["blocks_needed"].get<std::int64_t>() == 1'250);
  CHECK_FALSE(doc["checks"][1]["fits"].get<bool>());
  CHECK(doc["checks"][1]["context_limit"].get<std::int64_t>() == 8'192);
  CHECK_THAT(doc["checks"][1]["why"].get<std::string>(), Catch::Contains("(max_model_len 8,192)"));
  CHECK(doc["checks"][0]["fits"].get<bool>());
  const auto et = run_cli({"size", "--model", "llama-3.1-8b", "--device", "H100-80GB", "--engine", "vllm",
                           "--max-model-len", "8192", "--check", "usual=2000,long=20000,concurrency=4"});
  REQUIRE(et.exit_code == 0);
  CHECK_THAT(et.out, Catch::Contains("NO: longer than max_model_len 8,192"));
  // --seqs at a length past the limit says so too, even for one sequence.
  const auto seqs = run_cli({"size", "--model", "llama-3.1-8b", "--device", "H100-80GB", "--tokens", "200000"});
  REQUIRE(seqs.exit_code == 0);
  CHECK_THAT(seqs.out, Catch::Contains("--seqs 1 of 200,000 tokens: does NOT fit: 200,000 tokens exceed the context "
                                       "limit (max_position_embeddings 131,072)"));
}

TEST_CASE("kvsim size --offload-fraction under a budget: the verdict counts what stays on the device") {
  // seed-example fp16 on a 2 GiB budget: blocks of 40 layers x 16 tokens x 4,096 bytes =
  // 2,621,440; 2,147,483,648 / 2,621,440 = 819 blocks. Six sequences of 4,096 tokens need
  // 6 x 256 = 1,536 blocks (the whole pool could not hold them); with 0.75 on the host,
  // floor(1,536 x 0.75) = 1,152 move and 384 stay: 384 of 819, it fits.
  const std::vector<std::string> base = {"size", "--model", "seed-example", "--dtype", "fp16", "--tokens", "4096",
                                         "--kv-budget", "2GiB", "--offload-fraction", "0.75", "--link-bandwidth", "32GB"};
  auto args = base;
  args.insert(args.end(), {"--seqs", "6"});
  const auto r = run_cli(args);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("--seqs 6 of 4,096 tokens: fits (384 of 819 blocks: what stays on the device of "
                                    "6 x 256 blocks, the host holding 0.75)"));
  CHECK_THAT(r.out, Catch::Contains("the fit verdicts count only what stays on the device"));
  args.push_back("--json");
  auto doc = nlohmann::json::parse(run_cli(args).out);
  const auto& v = doc["paged"]["concurrency"][0];
  CHECK(v["seqs_fit"].get<bool>());
  CHECK(v["seqs_verdict"]["needed"].get<std::int64_t>() == 1'536);
  CHECK(v["seqs_verdict"]["on_device"].get<std::int64_t>() == 384);
  CHECK(v["seqs_verdict"]["available"].get<std::int64_t>() == 819);
  // The most that fit: the largest n with n x 256 - floor(n x 256 x 0.75) <= 819, that is
  // floor(819 / (256 x 0.25)) = floor(12.8) = 12 (12 keep 768 blocks, 13 keep 832).
  CHECK(v["max_seqs"].get<std::int64_t>() == 12);
  // 13 sequences: 3,328 blocks, 832 stay, more than 819.
  args = base;
  args.insert(args.end(), {"--seqs", "13"});
  const auto over = run_cli(args);
  REQUIRE(over.exit_code == 0);
  CHECK_THAT(over.out, Catch::Contains("--seqs 13 of 4,096 tokens: does NOT fit: of the 13 x 256 blocks they need, 832 "
                                       "stay on the device (the host holds 0.75) and the pool has 819; at most 12 such "
                                       "sequences fit"));
  CHECK(most_that_fit(256, 819, 750'000'000) == 12);
  CHECK(device_share(1'536, 750'000'000) == 384);
  CHECK(most_that_fit(256, 819, 0) == 3);  // no offloading: 819 / 256
}

TEST_CASE("kvsim size --static-cache under a budget: the reservation fits or does NOT") {
  // Llama-3.1-8B on an L4 (flat budget): usable floor(24,152,899,584 x 0.9) = 21,737,609,625;
  // - weights 8,030,261,248 x 2 = 16,060,522,496 - reserve 1,073,741,824 = 4,603,345,305 bytes
  // of KV budget. A static cache of 8,192 positions reserves 8,192 x 131,072 = 1,073,741,824
  // bytes per sequence, 64 of them 68,719,476,736 (64 GiB): it does NOT fit; floor(4,603,345,305
  // / 1,073,741,824) = 4 sequences would.
  const auto r = run_cli({"size", "--model", "llama-3.1-8b", "--seqs", "64", "--tokens", "4000", "--static-cache", "8192",
                          "--device", "L4"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("--seqs 64 x 8,192 positions reserved, against the KV budget: does NOT fit: they "
                                    "need 68,719,476,736 bytes and the KV budget is 4,603,345,305; at most 4 such "
                                    "sequences fit"));
  const auto j = run_cli({"size", "--model", "llama-3.1-8b", "--seqs", "4", "--tokens", "4000", "--static-cache", "8192",
                          "--device", "L4", "--json"});
  REQUIRE(j.exit_code == 0);
  const auto doc = nlohmann::json::parse(j.out);
  // 4 x 1,073,741,824 = 4,294,967,296 <= 4,603,345,305: fits.
  const auto& fit = doc["static_cache"]["fit"];
  CHECK(fit["fits"].get<bool>());
  CHECK(fit["unit"] == "bytes");
  CHECK(fit["needed"].get<std::int64_t>() == 4'294'967'296);
  CHECK(fit["available"].get<std::int64_t>() == 4'603'345'305);
  CHECK(fit["max_seqs"].get<std::int64_t>() == 4);
  // Without a budget there is no verdict.
  const auto none = run_cli({"size", "--model", "llama-3.1-8b", "--static-cache", "8192", "--json"});
  CHECK_FALSE(nlohmann::json::parse(none.out)["static_cache"].contains("fit"));
}

TEST_CASE("kvsim size --tokens T1,T2 under a budget: the total has a verdict of its own") {
  // seed-example fp16 on 10 GiB: 4,096 blocks of 16 tokens. One request of 1,000 tokens takes
  // ceil(1,000 / 16) = 63 blocks, one of 3,000 ceil(187.5) = 188: 251 for the pair. --seqs 16:
  // 16 x 251 = 4,016 blocks, fits; --seqs 17: 4,267 does NOT, though each length alone fits
  // (17 x 63 = 1,071 and 17 x 188 = 3,196 blocks). At most floor(4,096 / 251) = 16 pairs.
  const auto fits = run_cli({"size", "--model", "seed-example", "--dtype", "fp16", "--kv-budget", "10GiB", "--seqs", "16",
                             "--tokens", "1000,3000"});
  REQUIRE(fits.exit_code == 0);
  CHECK_THAT(fits.out, Catch::Contains("all the lengths at once, --seqs 16 of each (total 4,000 tokens): fits (4,016 of "
                                       "4,096 blocks)"));
  const auto over = run_cli({"size", "--model", "seed-example", "--dtype", "fp16", "--kv-budget", "10GiB", "--seqs", "17",
                             "--tokens", "1000,3000"});
  REQUIRE(over.exit_code == 0);
  CHECK_THAT(over.out, Catch::Contains("all the lengths at once, --seqs 17 of each (total 4,000 tokens): does NOT fit: "
                                       "they need 4,267 blocks and the pool has 4,096; at most 16 such sets of requests "
                                       "fit"));
  CHECK_THAT(over.out, Catch::Contains("--seqs 17 of 3,000 tokens: fits (3,196 of 4,096 blocks)"));
  const auto j = run_cli({"size", "--model", "seed-example", "--dtype", "fp16", "--kv-budget", "10GiB", "--seqs", "17",
                          "--tokens", "1000,3000", "--json"});
  const auto doc = nlohmann::json::parse(j.out);
  const auto& total = doc["paged"]["total"];
  CHECK_FALSE(total["fits"].get<bool>());
  CHECK(total["needed"].get<std::int64_t>() == 4'267);
  CHECK(total["available"].get<std::int64_t>() == 4'096);
  CHECK(total["max_seqs"].get<std::int64_t>() == 16);
  CHECK(total["tokens"].get<std::int64_t>() == 4'000);
  // One length: no total.
  const auto one = run_cli({"size", "--model", "seed-example", "--kv-budget", "10GiB", "--tokens", "1000", "--json"});
  CHECK_FALSE(nlohmann::json::parse(one.out)["paged"].contains("total"));
}

TEST_CASE("pipeline stages hold their own weights: embeddings first, LM head last") {
  // Llama-3.1-8B (8,030,261,248 published parameters; vocab 128,256 x hidden 4,096 =
  // 525,336,576 per embedding matrix, untied), --pp 2: 16 + 16 layers of
  // (8,030,261,248 - 2 x 525,336,576 - 4,096 final norm) / 32 = 218,112,000 parameters
  // (attention 41,943,040 + MLP 176,160,768 + norms 8,192: the published layer exactly).
  // Stage 0: 16 x 218,112,000 + 525,336,576 = 4,015,128,576 parameters, 8,030,257,152 bytes in bf16;
  // stage 1: + 4,096 (final norm) = 4,015,132,672, 8,030,265,344 bytes.
  // H100 usable floor(85,520,809,984 x 0.9) = 76,968,728,985; minus 1 GiB reserve:
  // stage 0 KV budget 67,864,730,009, stage 1 67,864,721,817.
  const auto r = run_cli({"size", "--model", "llama-3.1-8b", "--pp", "2", "--device", "H100-80GB", "--json"});
  REQUIRE(r.exit_code == 0);
  const auto doc = nlohmann::json::parse(r.out);
  REQUIRE(doc["stage_weights"].size() == 2);
  CHECK(doc["stage_weights"][0]["parameters"].get<std::int64_t>() == 4'015'128'576);
  CHECK(doc["stage_weights"][0]["embedding"].get<bool>());
  CHECK(doc["stage_weights"][0]["weights_bytes_per_device"].get<std::int64_t>() == 8'030'257'152);
  CHECK(doc["stage_weights"][1]["parameters"].get<std::int64_t>() == 4'015'132'672);
  CHECK(doc["stage_weights"][1]["lm_head"].get<bool>());
  CHECK(doc["stage_weights"][0]["kv_budget_bytes"].get<std::int64_t>() == 67'864'730'009);
  CHECK(doc["stage_weights"][1]["kv_budget_bytes"].get<std::int64_t>() == 67'864'721'817);
  // 16 layers x 16 tokens x 4,096 bytes = 1,048,576 per block: 64,720 blocks on each.
  CHECK(doc["stage_weights"][1]["own_num_blocks"].get<std::int64_t>() == 64'720);
  // Llama-3.1-70B, --tp 2 --pp 3 (27, 27, 26 layers): a layer is (8,192 x 8,192 x 2 + 8,192 x
  // 1,024 x 2) + 3 x 8,192 x 28,672 + 2 x 8,192 = 855,654,400 parameters; embeddings 128,256 x
  // 8,192 = 1,050,673,152. Stage 0: 27 x 855,654,400 + 1,050,673,152 = 24,153,341,952, bf16 over 2
  // devices 24,153,341,952 bytes; KV budget 76,968,728,985 - that - 1,073,741,824 = 51,741,645,209;
  // a block 27 layers x 16 x (4 heads x 256 x 2) = 884,736 bytes: 58,482 blocks. Stage 2 (26
  // layers, LM head, norm) alone would hold more; vLLM shrinks every stage to the smallest.
  const auto big = run_cli({"size", "--model", "llama-3.1-70b", "--tp", "2", "--pp", "3", "--device", "H100-80GB", "--json"});
  REQUIRE(big.exit_code == 0);
  const auto b = nlohmann::json::parse(big.out);
  CHECK(b["stage_weights"][0]["parameters"].get<std::int64_t>() == 24'153'341'952);
  CHECK(b["stage_weights"][0]["kv_budget_bytes"].get<std::int64_t>() == 51'741'645'209);
  CHECK(b["stage_weights"][0]["own_num_blocks"].get<std::int64_t>() == 58'482);
  CHECK(b["stage_weights"][2]["own_num_blocks"].get<std::int64_t>() > 58'482);
  CHECK(b["paged"]["num_blocks"].get<std::int64_t>() == 58'482);
  CHECK(b["paged"]["kv_cache_tokens"].get<std::int64_t>() == 58'482 * 16);
  // Weights given as bytes have no parameters to place: spread evenly, and the sheet says so.
  const auto bytes = run_cli({"size", "--model", "llama-3.1-8b", "--pp", "2", "--device", "H100-80GB", "--weights-bytes", "16GB"});
  REQUIRE(bytes.exit_code == 0);
  CHECK_THAT(bytes.out, Catch::Contains("spread evenly over the stages"));
}

TEST_CASE("kvsim size --help lists every sizing option") {
  const auto r = run_cli({"size", "--help"});
  REQUIRE(r.exit_code == 0);
  for (const char* option : {"--prompt", "--max-tokens", "--n", "--beams", "--no-prompt-sharing", "--static-cache",
                             "--speculative", "--offload-fraction", "--link-bandwidth", "--check"}) {
    INFO(option);
    CHECK_THAT(r.out, Catch::Contains(option));
  }
  // What the options do beyond their one-line descriptions, briefly.
  CHECK_THAT(r.out, Catch::Contains("prints a row per length and their total"));
  CHECK_THAT(r.out, Catch::Contains("--pp N places the\nweights per real stage"));
  CHECK_THAT(r.out, Catch::Contains("hybrid attention/state-space configs"));
  CHECK_THAT(r.out, Catch::Contains("docs/size.md"));
}
