// size_sheet() as a library user calls it, without the command line: the seed's worked
// example and vLLM's concurrency line for Llama-3.1-8B on an H100.
#include "kvsim/size_sheet.h"

#include <catch2/catch.hpp>

using namespace kvsim;

TEST_CASE("size sheet: the seed's worked example, 6 sequences of 4,096 tokens in fp16") {
  KvOptions kv;
  kv.dtype = KvDtype::fp16;
  SizeQuery q;
  q.seqs = 6;
  q.tokens = {4096, 8192};
  const SizeSheet s = size_sheet(find_model_preset("seed-example"), kv, q);
  CHECK(s.devices == 1);
  CHECK(s.layout().bytes_per_token() == 163'840);
  REQUIRE(s.sequences.size() == 2);
  CHECK(s.sequences[0].bytes_per_sequence == 671'088'640);
  CHECK(s.sequences[0].bytes == 4'026'531'840);
  CHECK(s.sequences[1].bytes == 8'053'063'680);
  CHECK(!s.budget);
  CHECK(s.stage_pools.empty());
  CHECK(s.concurrency.empty());
}

TEST_CASE("size sheet: a budget, the pool and the concurrency at each T, or at the model's maximum") {
  SizeQuery q;
  q.tokens = {8192, 32768};
  q.budget = BudgetOptions{};
  q.budget->device = "H100-80GB";
  const ModelSpec& llama = find_model_preset("llama-3.1-8b");
  SizeSheet s = size_sheet(llama, KvOptions{}, q);
  REQUIRE(s.budget);
  CHECK(s.budget->kv_budget_bytes == 59'834'464'665);
  REQUIRE(s.stage_pools.size() == 1);
  CHECK(s.stage_pools[0].pool.num_blocks == 28'531);
  REQUIRE(s.concurrency.size() == 2);
  CHECK(s.concurrency[0].tokens == 8192);
  CHECK(s.concurrency[0].blocks_per_request == 512);
  CHECK(s.concurrency[1].blocks_per_request == 2048);

  q.tokens.clear();
  s = size_sheet(llama, KvOptions{}, q);
  CHECK(s.sequences.empty());
  REQUIRE(s.concurrency.size() == 1);
  CHECK(s.concurrency[0].tokens == llama.max_position_embeddings);
}

TEST_CASE("size sheet: the binding stage is the one with the most bytes per token") {
  KvOptions kv;
  kv.pipeline_parallel = 3;  // 11 + 11 + 10 layers
  const SizeSheet s = size_sheet(find_model_preset("llama-3.1-8b"), kv, SizeQuery{});
  CHECK(s.devices == 3);
  REQUIRE(s.stages.size() == 3);
  CHECK(s.binding_stage == 0);
  CHECK(binding_stage(s.stages) == 0);
  CHECK(s.layout().bytes_per_token() == 45'056);
}
