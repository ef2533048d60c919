// The roofline cost model, derived by hand for a model small enough to count on paper.
#include "kvsim/cost_model.h"

#include <cmath>
#include <vector>

#include <catch2/catch.hpp>

#include "kvsim/error.h"
#include "test_support.h"

using namespace kvsim;

namespace {

// 2 layers, 4 query heads and 2 KV heads of width 8, hidden 32, MLP 64, vocabulary 100.
ModelSpec tiny_model() {
  ModelSpec m;
  m.name = "tiny";
  m.num_hidden_layers = 2;
  m.num_attention_heads = 4;
  m.num_key_value_heads = 2;
  m.head_dim = 8;
  m.hidden_size = 32;
  m.intermediate_size = 64;
  m.vocab_size = 100;
  m.max_position_embeddings = 4096;
  m.layer_window_tokens = {0, 0};
  m.weight_dtype = "bfloat16";
  return m;
}

// 1e12 dense FLOP/s of which 50% is reached; 1e9 B/s of which 50% is sustained.
DevicePreset tiny_device() {
  return DevicePreset{"tiny", "tiny", 1'000'000'000, 1'000'000'000, 1'000'000'000'000, "test", 500, 500, "test"};
}

// A 10-token chunk after 6 cached, beside 3 sequences decoding over 50 positions; the chunk
// completes its prompt, so 1 + 3 tokens sample.
StepWork mixed_step() {
  StepWork w;
  w.prefill_tokens = 10;
  w.decode_seqs = 3;
  w.context = 50;
  w.prefill_pairs = 10 * 6 + 10 * 11 / 2;  // 115
  w.prefill_context = 6 + 10;
  w.sampled = 1 + 3;
  return w;
}

// The roofline of `m` on the tiny device, its devices laid out as `tp` x `pp`.
CostModel tiny_roofline(const ModelSpec& m, std::int64_t tp = 1, std::int64_t pp = 1) {
  KvOptions kv;
  kv.tensor_parallel = tp;
  kv.pipeline_parallel = pp;
  RooflineParallel parallel;
  parallel.tensor_parallel = tp;
  parallel.pipeline_parallel = pp;
  return roofline_cost_model(m, kv_layout(m, kv), tiny_device(), model_weights(m, kv, BudgetOptions{}), parallel);
}

CostModel tiny_roofline() { return tiny_roofline(tiny_model()); }

}  // namespace

TEST_CASE("roofline: every coefficient of a two-layer model, by hand") {
  // Parameters (budget.h's rule): attention per layer = 32x32 (q) + 2x32x16 (k, v) + 32x32 (o)
  // = 3,072; MLP per layer = 3x32x64 = 6,144. Matmuls a token goes through: 2 x (3,072 +
  // 6,144) = 18,432. LM head 100 x 32 = 3,200. Total = 3,200 (embedding) + 3,200 (LM head) + 32
  // (final norm) + 2 x (3,072 + 6,144 + 64 norms) = 24,992 -> 49,984 bytes in bf16.
  const ModelSpec m = tiny_model();
  const ParameterSplit split = split_parameters(m);
  CHECK(split.per_token == 18'432);
  CHECK(split.lm_head == 3'200);
  CHECK(split.embedding == 3'200);
  CHECK(split.total == 24'992);
  const CostModel c = tiny_roofline();
  CHECK(c.roofline);
  CHECK(c.device == "tiny");
  // Compute at 5e11 FLOP/s: 1 FLOP = 2 ps.
  CHECK(c.prefill_token_ps == 2 * 18'432 * 2);   // 73,728 ps
  CHECK(c.decode_seq_ps == 73'728);
  CHECK(c.sample_token_ps == 2 * 3'200 * 2);     // 12,800 ps
  // One (query, key) pair: QK^T and PV, 2 x 4 heads x (8 + 8) per layer x 2 layers = 256 FLOPs.
  CHECK(c.attention_pair_ps == 256 * 2);
  // Memory at 5e8 B/s: 1 byte = 2,000 ps. KV per token: 2 layers x 2 heads x (8 + 8) x 2 B = 128 B.
  // A step reads the weights but the embedding's table (3,200 parameters, 6,400 bytes), of
  // which it looks up only its tokens' rows (an element-wise term, below).
  CHECK(c.weights_ps == (49'984 - 6'400) * 2'000);  // 87,168,000 ps
  // Tied, the LM head is the embedding's table and the weights hold it once (21,792
  // parameters): a step reads all of them, the same bytes.
  ModelSpec tied = tiny_model();
  tied.tie_word_embeddings = true;
  CHECK(estimate_parameter_count(tied) == 21'792);
  CHECK(tiny_roofline(tied).weights_ps == 87'168'000);
  // A parameter count that does not hold the table and the LM head (6,400 parameters) beside
  // the rest is some other split: nothing is taken out, all 6,000 x 2 bytes are read.
  BudgetOptions few;
  few.parameter_count = 6'000;
  const ModelWeights small = model_weights(tiny_model(), KvOptions{}, few);
  CHECK(small.embedding_bytes_per_device == 0);
  CHECK(small.weights_bytes_per_device == 12'000);
  CHECK(c.kv_position_ps == 128 * 2'000);        // 256,000 ps
  CHECK(c.overhead_ps == 0);
}

// The roofline's structure alone: the activations' traffic (tested on its own below) set to 0.
CostModel without_activations(CostModel c) {
  c.matmul_io_token_ps = c.matmul_io_sample_ps = c.elementwise_token_ps = c.elementwise_sample_ps = 0;
  return c;
}

TEST_CASE("roofline: a step is overhead + max(matmuls, weights) + max(attention FLOPs, KV bytes)") {
  const CostModel c = without_activations(tiny_roofline());
  SECTION("memory-bound: a 10-token chunk after 6 cached, and 3 sequences decoding over 50 positions") {
    const StepWork w = mixed_step();
    // matmuls: max(73,728 x 13 + 12,800 x 4 = 1,009,664; weights 87,168,000) = 87,168,000
    // attention: max(512 x (115 + 50) = 84,480; 256,000 x (50 + 16) = 16,896,000) = 16,896,000
    CHECK(step_time_ps(c, w) == 104'064'000);
  }
  SECTION("compute-bound: a 2,000-token prompt in one chunk, with 1 us of overhead") {
    StepWork w;
    w.prefill_tokens = 2'000;
    w.prefill_pairs = 2'000 * 2'001 / 2;  // 2,001,000
    w.prefill_context = 2'000;
    w.sampled = 1;
    // matmuls: max(73,728 x 2,000 + 12,800 = 147,468,800; 99,968,000) = 147,468,800
    // attention: max(512 x 2,001,000 = 1,024,512,000; 256,000 x 2,000 = 512,000,000)
    //          = 1,024,512,000; together 1,171,980,800 ps.
    CHECK(step_time_ps(c, w) == 1'171'980'800);
    const CostModel with_overhead = parse_cost_model("roofline:overhead=1us", c, "--cost");
    CHECK(with_overhead.overhead_ps == 1'000'000);
    CHECK(step_time_ps(with_overhead, w) == 1'172'980'800);
  }
  SECTION("compute-bound matmuls and memory-bound attention add, unlike one max over the step") {
    // A fresh 2,000-token prompt beside 100 sequences decoding over 1,000,000 positions.
    StepWork w;
    w.prefill_tokens = 2'000;
    w.decode_seqs = 100;
    w.context = 1'000'000;
    w.prefill_pairs = 2'001'000;
    w.prefill_context = 2'000;
    w.sampled = 101;
    // matmuls: max(73,728 x 2,100 + 12,800 x 101 = 156,121,600; 99,968,000) = 156,121,600
    // attention: max(512 x 3,001,000 = 1,536,512,000; 256,000 x 1,002,000 = 256,512,000,000)
    // together 256,668,121,600 ps (one max over summed compute and memory would give
    // 256,611,968,000).
    CHECK(step_time_ps(c, w) == 256'668'121'600);
  }
  SECTION("the linear models keep summing their four terms") {
    CostModel linear = parse_cost_model("linear:base=1ns,prefill-token=2ps,decode-seq=3ps,context-token=4ps", c, "--cost");
    StepWork w;
    w.prefill_tokens = 10;
    w.decode_seqs = 3;
    w.context = 50;
    w.prefill_pairs = 999;  // ignored outside the roofline
    CHECK(step_time_ps(linear, w) == 1'000 + 2 * 10 + 3 * 3 + 4 * 50);
    // Every term named: nothing is the roofline's, so no device is assumed. One left out
    // (here the context's read, or constant's prefill-token) is the roofline's device's.
    CHECK(linear.device.empty());
    CHECK(parse_cost_model("linear:base=1ns,prefill-token=2ps,decode-seq=3ps", c, "--cost").device == c.device);
    CHECK(parse_cost_model("constant:step=1ms,prefill-token=0ps", c, "--cost").device.empty());
    CHECK(parse_cost_model("constant:step=1ms", c, "--cost").device == c.device);
  }
  CHECK_THROWS_AS(parse_cost_model("roofline:step=1ms", c, "--cost"), InputError);
}

TEST_CASE("roofline: the activations the matmuls and the element-wise kernels move, by hand") {
  // The tiny model (h 32, q 4 x 8 = 32, kv 2 x 8 = 16, MLP 64, 2 layers, vocabulary 100), in
  // bf16 values per token, as vLLM's Llama layer runs:
  //   matmuls' inputs and outputs per layer: qkv reads h, writes q + 2 kv; o reads q, writes h;
  //     gate_up reads h, writes 2 x 64; down reads 64, writes h:
  //     2h + 2q + 2kv + 2h + 3 x 64 = 64 + 64 + 32 + 64 + 192 = 416; 2 layers: 832 values
  //   element-wise per layer: two residual-add norms 2 x 4h = 256, rotary on q and k read and
  //     written 2 x (32 + 16) = 96, SiLU-and-mul 3 x 64 = 192: 544; 2 layers 1,088, plus once
  //     the embedding's row (2h) and the final norm (4h) less the first norm's residual (2h):
  //     1,088 + 4 x 32 = 1,216 values
  //   per sampled token: the LM head reads h and writes the padded vocabulary (128): 160
  //     values; the sampler reads 2 and writes 4 bytes a logit, then reads 4: 1,000 bytes.
  // At 2,000 ps a byte (5e8 B/s):
  const CostModel c = tiny_roofline();
  CHECK(c.matmul_io_token_ps == 832 * 2 * 2'000);     // 3,328,000
  CHECK(c.elementwise_token_ps == 1'216 * 2 * 2'000);  // 4,864,000
  CHECK(c.matmul_io_sample_ps == 160 * 2 * 2'000);    // 640,000
  CHECK(c.elementwise_sample_ps == 1'000 * 2'000);    // 2,000,000
  // The mixed step (13 tokens, 4 sampled): matmuls max(1,009,664; 87,168,000 + 13 x 3,328,000
  // + 4 x 640,000 = 132,992,000), attention 16,896,000 as before, element-wise 13 x 4,864,000
  // + 4 x 2,000,000 = 71,232,000: 221,120,000 ps.
  CHECK(step_time_ps(c, mixed_step()) == 221'120'000);
  // Tensor parallelism 2 splits what is head- or intermediate-sized, not h: matmuls 2 x (2h +
  // (2q + 2kv) / 2 + 2h + 3 x 64 / 2) = 2 x 272 = 544 values; element-wise 2 x (256 + 96 / 2 +
  // 192 / 2) + 128 = 928; LM head 32 + 128 / 2 = 96; the sampler's pass over the whole logits
  // (gathered on every rank) unchanged.
  const ModelSpec m = tiny_model();
  const CostModel t = tiny_roofline(m, 2);
  CHECK(t.matmul_io_token_ps == 544 * 2 * 2'000);
  CHECK(t.elementwise_token_ps == 928 * 2 * 2'000);
  CHECK(t.matmul_io_sample_ps == 96 * 2 * 2'000);
  CHECK(t.elementwise_sample_ps == 1'000 * 2'000);
  // Four ranks for two KV heads: vLLM keeps a whole KV head on each rank, so k and v are 8
  // values a rank, not 16 / 4; q is 32 / 4 = 8. Matmuls 2 x (64 + 2 x 8 + 2 x 8 + 64 + 192 /
  // 4) = 416; element-wise 2 x (256 + 2 x (8 + 8) + 192 / 4) + 128 = 800.
  const CostModel t4 = tiny_roofline(m, 4);
  CHECK(t4.matmul_io_token_ps == 416 * 2 * 2'000);
  CHECK(t4.elementwise_token_ps == 800 * 2 * 2'000);
  // Two pipeline stages: like the FLOPs and the weights, everything is spread over them, the
  // once-a-token and per-sampled-token terms included: 832 / 2, 1,216 / 2, 160 / 2, 1,000 / 2.
  const CostModel p = tiny_roofline(m, 1, 2);
  CHECK(p.matmul_io_token_ps == 416 * 2 * 2'000);
  CHECK(p.elementwise_token_ps == 608 * 2 * 2'000);
  CHECK(p.matmul_io_sample_ps == 80 * 2 * 2'000);
  CHECK(p.elementwise_sample_ps == 500 * 2'000);
  // An MoE layer of 4 experts of 16, 2 a token: the router reads h and writes 4 logits; each
  // expert reads h, writes 2 x 16 and reads 16, writes h: 32 + 4 + 2 x (64 + 48) = 260; the
  // experts' SiLU-and-mul 2 x 3 x 16 = 96 and their sum (read 2 rows of h, write one) 96.
  // Matmuls 2 x (160 + 260) = 840; element-wise 2 x (256 + 96 + 96 + 96) + 128 = 1,216.
  ModelSpec moe = m;
  moe.moe = MoeDims{4, 0, 16, 0, 2};
  const CostModel e = tiny_roofline(moe);
  CHECK(e.matmul_io_token_ps == 840 * 2 * 2'000);
  CHECK(e.elementwise_token_ps == 1'216 * 2 * 2'000);
}

TEST_CASE("roofline: tensor-parallel all-reduces and the replicas' gathers, over the device's link") {
  // The tiny model on a device whose link carries 1e9 B/s one way (1 byte = 1,000 ps), 5 us a
  // collective. Tensor parallelism 2: 2 x 2 layers + 1 (the embedding) = 5 all-reduces of 32 x
  // 2 = 64 bytes per token, a ring sending 2 (2 - 1) / 2 = 1 times them: 5 x 64 x 1,000 =
  // 320,000 ps per token; the logits' all-gather 1/2 of 128 (vocabulary 100 padded to 64s) x 2 =
  // 128 bytes per sampled token, 128,000 ps; 5 + 1 collectives of 5 us per step.
  const ModelSpec m = tiny_model();
  const KvLayout layout = kv_layout(m, KvOptions{});
  DevicePreset device = tiny_device();
  device.link_bytes_per_second = 1'000'000'000;
  device.link_latency_ns = 5'000;
  const ModelWeights weights = model_weights(m, KvOptions{}, BudgetOptions{});
  RooflineParallel tp2;
  tp2.tensor_parallel = 2;
  const CostModel c = roofline_cost_model(m, layout, device, weights, tp2);
  CHECK(c.collective_step_ps == 6 * 5'000'000);
  CHECK(c.collective_token_ps == 320'000);
  CHECK(c.collective_sample_ps == 128'000);
  CHECK(c.replica_collective_token_ps == 0);  // not an MoE model
  // The memory-bound step of the test above gains 6 x 5 us + 13 tokens x 320,000 + 4 sampled x
  // 128,000 = 34,672,000 ps of collectives.
  const StepWork w = mixed_step();
  CostModel without = c;
  without.collective_step_ps = without.collective_token_ps = without.collective_sample_ps = 0;
  CHECK(step_time_ps(c, w) - step_time_ps(without, w) == 34'672'000);
  CHECK(step_time_ps(c, StepWork{}) == step_time_ps(without, StepWork{}));  // no tokens, no collectives
  // Four devices: a ring sends 2 x 3 / 4 = 1.5 times the bytes: 5 x 64 x 1.5 x 1,000 = 480,000.
  RooflineParallel tp4;
  tp4.tensor_parallel = 4;
  CHECK(roofline_cost_model(m, layout, device, weights, tp4).collective_token_ps == 480'000);
  // One device, or a device with no known link: no collectives.
  CHECK(roofline_cost_model(m, layout, device, weights).collective_token_ps == 0);
  CHECK(roofline_cost_model(m, layout, tiny_device(), weights, tp2).collective_step_ps == 0);
  // An MoE model's two replicas: every MoE layer (2, none dense) gathers the hidden states of
  // all the replicas' tokens and scatters the results, each sending 1/2 of 64 bytes per token:
  // 2 x 2 x 32 x 1,000 = 128,000 ps per token, 4 x 5 us per step.
  ModelSpec moe = m;
  moe.moe = MoeDims{4, 0, 16, 0, 2};
  RooflineParallel replicas;
  replicas.moe_replicas = 2;
  const CostModel r = roofline_cost_model(moe, kv_layout(moe, KvOptions{}), device, weights, replicas);
  CHECK(r.replica_collective_token_ps == 128'000);
  CHECK(r.replica_collective_step_ps == 4 * 5'000'000);
  CHECK(r.collective_token_ps == 0);
}

TEST_CASE("roofline: an MoE model's compute counts the experts a token uses, its weights all of them") {
  // Qwen3-30B-A3B (config.json): hidden 2048, 48 layers, 32 heads and 4 KV heads of 128,
  // 128 experts of 768, 8 per token, vocabulary 151,936, untied.
  //   attention per layer = 2048 x 4096 + 2 x 2048 x 512 + 4096 x 2048 = 18,874,368
  //   one expert = 3 x 2048 x 768 = 4,718,592; router = 128 x 2048 = 262,144
  //   total = 2 x 151,936 x 2048 (embedding, LM head) + 2048 (final norm)
  //         + 48 x (18,874,368 + 128 x 4,718,592 + 262,144 + 2 x 2048) = 30,532,110,336
  //   per token = 48 x (18,874,368 + 8 x 4,718,592 + 262,144) = 2,730,491,904
  const ParameterSplit split = split_parameters(find_model_preset("qwen3-30b-a3b"));
  CHECK(split.total == 30'532'110'336);
  CHECK(split.per_token == 2'730'491'904);
  CHECK(split.lm_head == 151'936 * 2'048);
  // Qwen3-32B, dense: 2 x 151,936 x 5120 + 5120 + 64 x (5120 x 8192 x 2 + 2 x 5120 x 1024
  // + 3 x 5120 x 25600 + 2 x 5120) = 32,762,106,880.
  CHECK(estimate_parameter_count(find_model_preset("qwen3-32b")) == 32'762'106'880);
  // Mixtral-8x7B-v0.1 (config.json): hidden 4096, 32 layers, 32 heads and 8 KV heads of 128,
  // 8 experts of 14,336, 2 per token, vocabulary 32,000, untied.
  //   attention per layer = 4096 x 4096 x 2 + 2 x 4096 x 1024 = 41,943,040
  //   one expert = 3 x 4096 x 14,336 = 176,160,768; router = 8 x 4096 = 32,768
  //   total = 2 x 32,000 x 4096 + 4096 + 32 x (41,943,040 + 8 x 176,160,768 + 32,768 + 2 x 4096)
  //         = 46,702,792,704 (the Hub's 46.7B)
  //   per token = 32 x (41,943,040 + 2 x 176,160,768 + 32,768) = 12,617,515,008
  const ParameterSplit mixtral = split_parameters(find_model_preset("mixtral-8x7b-v0.1"));
  CHECK(mixtral.total == 46'702'792'704);
  CHECK(mixtral.per_token == 12'617'515'008);
  // Phi-mini-MoE-instruct: hidden 4096, 32 layers, 32 heads and 8 KV heads of 128, 16 experts
  // of 960, 2 per token, vocabulary 32,064, untied; biases and LayerNorm biases left out.
  //   one expert = 3 x 4096 x 960 = 11,796,480; router = 16 x 4096 = 65,536
  //   total = 2 x 32,064 x 4096 + 4096 + 32 x (41,943,040 + 16 x 11,796,480 + 65,536 + 2 x 4096)
  //         = 7,647,006,720
  //   per token = 32 x (41,943,040 + 2 x 11,796,480 + 65,536) = 2,099,249,152
  const ParameterSplit phi = split_parameters(find_model_preset("phi-mini-moe"));
  CHECK(phi.total == 7'647'006'720);
  CHECK(phi.per_token == 2'099'249'152);
}

TEST_CASE("roofline: the engine counts a chunked prompt's attention pairs") {
  // Only the attention term costs: 1 ns per (query, key) pair. A prompt of 10 in chunks of 4
  // (max_batched_tokens 4): chunk 1 has 4 x 0 + 4 x 5 / 2 = 10 pairs, chunk 2 4 x 4 + 10 = 26,
  // chunk 3 2 x 8 + 2 x 3 / 2 = 19. Its first token comes at 10 + 26 + 19 = 55 ns.
  CostModel c;
  c.name = "pairs";
  c.roofline = true;
  c.attention_pair_ps = 1'000;
  c.prefill_token_ps = 0;
  c.base_ps = 0;
  ReplayOptions o;
  o.layout = test::unit_layout();
  o.cost = c;
  o.max_batched_tokens = 4;
  RequestVectorReader trace({test::request("a", 0, 10, 1)});
  auto allocator = make_allocator(parse_allocator_spec("paged:block=16", "test"), o.layout);
  const ReplayReport r = replay(trace, *allocator, o);
  CHECK(r.iterations == 3);
  CHECK(r.ttft.p50_ns == 55);
}

TEST_CASE("roofline: FlashAttention 2's 64-row query tiles where vLLM runs it (compute capability 8.x, 12.x)") {
  // The tiny model: 4 query heads, 2 KV heads of width 8, 2 layers; a (row, key) costs 2 x (8 +
  // 8) = 32 FLOPs a head, and 1 FLOP is 2 ps. A decode's query fills one row of a 64-row tile
  // per query head: 4 x 64 x 32 x 2 layers = 16,384 FLOPs a position = 32,768 ps (64 times the
  // useful pair's 512). In a decode-only step the 2 query heads of each KV head share a tile:
  // 2 x 64 x 32 x 2 = 8,192 FLOPs = 16,384 ps.
  const ModelSpec m = tiny_model();
  KvOptions kv;
  const auto roofline_on = [&](std::int64_t capability, const ModelSpec& model, std::int64_t tp = 1,
                               KvDtype dtype = KvDtype::bf16) {
    DevicePreset d = tiny_device();
    d.hbm_bytes_per_second = 1'000'000'000'000'000;  // 5e14 B/s reached: 1 byte = 2 ps
    d.compute_capability = capability;
    KvOptions k = kv;
    k.tensor_parallel = tp;
    k.dtype = dtype;
    RooflineParallel parallel;
    parallel.tensor_parallel = tp;
    return roofline_cost_model(model, kv_layout(model, k), d, model_weights(model, k, BudgetOptions{}), parallel);
  };
  for (const std::int64_t capability : {80, 86, 89, 120}) {
    const CostModel c = roofline_on(capability, m);
    CHECK(c.attention_pair_ps == 512);
    CHECK(c.attention_tile_position_ps == 32'768);
    CHECK(c.attention_packed_position_ps == 16'384);
  }
  for (const std::int64_t capability : {0, 90, 100}) {  // FA3, FlashInfer, not NVIDIA: pairs only
    const CostModel c = roofline_on(capability, m);
    CHECK(c.attention_tile_position_ps == 0);
    CHECK(c.attention_packed_position_ps == 0);
  }
  SECTION("vLLM takes another attention backend for an fp8 KV cache or heads wider than 256: pairs only") {
    // FlashAttentionBackend accepts fp8 KV only with FA3, and FA2 heads up to 256 values.
    CHECK(roofline_on(120, m, 1, KvDtype::fp8).attention_tile_position_ps == 0);
    CHECK(roofline_on(89, m, 1, KvDtype::fp8).attention_packed_position_ps == 0);
    ModelSpec wide = m;
    wide.head_dim = 512;
    CHECK(roofline_on(120, wide).attention_tile_position_ps == 0);
    wide.head_dim = 256;
    CHECK(roofline_on(120, wide).attention_tile_position_ps == 64 * roofline_on(120, wide).attention_pair_ps);
  }
  SECTION("a sliding-window layer never packs; equal heads never pack; tensor parallelism splits the heads") {
    ModelSpec windowed = m;
    windowed.layer_window_tokens = {0, 16};
    // Packed: the full layer 2 x 64 x 32 = 4,096, the windowed one 4 x 64 x 32 = 8,192: 12,288 FLOPs.
    CHECK(roofline_on(120, windowed).attention_packed_position_ps == 24'576);
    CHECK(roofline_on(120, windowed).attention_tile_position_ps == 32'768);
    ModelSpec mha = m;
    mha.num_key_value_heads = 4;
    CHECK(roofline_on(120, mha).attention_packed_position_ps == 32'768);
    // TP 2: each device 2 query heads and 1 KV head: 2 x 64 x 32 x 2 = 8,192 FLOPs, packed
    // 1 x 64 x 32 x 2 = 4,096.
    const CostModel split = roofline_on(120, m, 2);
    CHECK(split.attention_tile_position_ps == 16'384);
    CHECK(split.attention_packed_position_ps == 8'192);
  }
  SECTION("a step with a query of more than one token pays the tiles; a decode-only one the packed tile") {
    const CostModel c = without_activations(roofline_on(120, m));
    // Weights read 43,584 B = 87,168 ps (the embedding's table not); a KV position 128 B = 256
    // ps; matmuls 73,728 ps a token and 12,800 ps a sampled token (as in the first test).
    const StepWork mixed = [] {
      StepWork w = mixed_step();
      w.longest_chunk = 10;
      // The 10-token chunk after 6 cached is one 64-row tile over 16 keys: 1,024 (row, key)
      // pairs a head, where it has 115 useful ones.
      w.prefill_tile_pairs = prefill_tile_pairs(10, 6);
      return w;
    }();
    CHECK(mixed.prefill_tile_pairs == 64 * 16);
    // matmuls: max(73,728 x 13 + 12,800 x 4 = 1,009,664; 87,168) = 1,009,664
    // attention: max(512 x 1,024 + 32,768 x 50 = 2,162,688; 256 x 66 = 16,896) = 2,162,688
    CHECK(step_time_ps(c, mixed) == 3'172'352);
    StepWork decodes;
    decodes.decode_seqs = 3;
    decodes.context = 50;
    decodes.sampled = 3;
    // matmuls: max(73,728 x 3 + 12,800 x 3 = 259,584; 87,168); attention: max(16,384 x 50 =
    // 819,200; 256 x 50 = 12,800): 1,078,784.
    CHECK(step_time_ps(c, decodes) == 1'078'784);
    // A prefill chunk of one token after 9 cached is a query of one over 10 keys, as a decode
    // over 10 positions: the step still packs, and the chunk pays the packed tile too.
    StepWork one = decodes;
    one.prefill_tokens = 1;
    one.prefill_pairs = 9 + 1;
    one.prefill_context = 10;
    one.longest_chunk = 1;
    one.prefill_tile_pairs = prefill_tile_pairs(1, 9);
    // matmuls 73,728 x 4 + 12,800 x 3 = 333,312; attention max(16,384 x (50 + 10) = 983,040;
    // 256 x 60 = 15,360): 1,316,352.
    CHECK(step_time_ps(c, one) == 1'316'352);
  }
}

TEST_CASE("roofline: the engine tells a step with a prompt chunk from a decode-only one") {
  // 1 ns per useful pair, and for FlashAttention 2 per (tile row, key): a chunk of c tokens
  // after s cached costs prefill_tile_pairs(c, s) ns in a step with a query of two or more; 1
  // us per KV position a decode reads in such a step; 2 ns per position (a decode's, or a
  // one-token chunk's keys) in a step whose every query is one token; nothing else costs.
  // Request a (prompt 4, output 3) arrives at 0: its prompt is the only query, 4 tokens, one
  // tile over 4 keys: 64 x 4 = 256 ns; its first decode reads 6 positions (the prompt, the
  // first token and its own) in a decode-only step: 12 ns, to 268 ns. Request b arrives at 262
  // ns, during that decode, and is prefilled beside a's second decode (7 positions) from 268
  // ns, which ends the run.
  CostModel c;
  c.name = "tiles";
  c.roofline = true;
  c.base_ps = 0;
  c.prefill_token_ps = 0;
  c.attention_pair_ps = 1'000;
  c.attention_tile_position_ps = 1'000'000;
  c.attention_packed_position_ps = 2'000;
  ReplayOptions o;
  o.layout = test::unit_layout();
  o.cost = c;
  const auto run_length = [&](std::int64_t b_prompt) {
    RequestVectorReader trace({test::request("a", 0, 4, 3), test::request("b", 262, b_prompt, 1)});
    auto allocator = make_allocator(parse_allocator_spec("paged:block=16", "test"), o.layout);
    const ReplayReport r = replay(trace, *allocator, o);
    return r.end_ns - r.start_ns;
  };
  // b's prompt of 2: a two-token query, so a's 7 positions cost 7 us and b's chunk one tile
  // over 2 keys, 128 ns: the run ends at 268 + 7,128 = 7,396 ns.
  CHECK(run_length(2) == 7'396);
  // b's prompt of 70: two tiles, over 64 and 70 keys: 64 x 134 = 8,576 ns; with a's 7 us the
  // run ends at 268 + 15,576 = 15,844 ns.
  CHECK(run_length(70) == 15'844);
  // b's prompt of 1: every query of the step is one token, packed: a's 7 positions and b's 1
  // key at 2 ns, 16 ns, ending at 284 ns.
  CHECK(run_length(1) == 284);
}

TEST_CASE("decode_step_line: a step that computes no prompt costs a fixed part plus a part per context position") {
  // The tiny model's decode-only step of 3 sequences, as in the FlashAttention 2 test above:
  // matmuls max(73,728 x 3 + 12,800 x 3 = 259,584; weights 87,168) = 259,584 ps, and each
  // context position the packed tile's 16,384 ps, more than its read (128 B, 256 ps).
  StepWork decodes;
  decodes.decode_seqs = 3;
  decodes.sampled = 3;
  decodes.context = 50;
  DevicePreset fast = tiny_device();
  fast.hbm_bytes_per_second = 1'000'000'000'000'000;  // 5e14 B/s reached: 1 byte = 2 ps
  fast.compute_capability = 120;
  const ModelSpec m = tiny_model();
  const auto on = [&](const DevicePreset& d) {
    return without_activations(
        roofline_cost_model(m, kv_layout(m, KvOptions{}), d, model_weights(m, KvOptions{}, BudgetOptions{})));
  };
  const DecodeStepLine packed = decode_step_line(on(fast), decodes);
  CHECK(packed.fixed_ps == 259'584);
  CHECK(packed.per_position_ps == 16'384);
  CHECK(packed.fixed_ps + packed.per_position_ps * 50 == 1'078'784);  // the step timed whole above
  // Without FlashAttention 2 (an H100 runs FA3) a position's attention is its 512 ps of useful
  // pairs, still more than its read.
  fast.compute_capability = 90;
  CHECK(decode_step_line(on(fast), decodes).per_position_ps == 512);
  // At the tiny device's 0.5 GB/s a position's read, 128 B = 256,000 ps, is the slower.
  const DecodeStepLine slow = decode_step_line(on(tiny_device()), decodes);
  CHECK(slow.per_position_ps == 256'000);
  CHECK(slow.fixed_ps == 87'168'000);  // the weights' read, 43,584 B, beats the matmuls' 259,584 ps
  // The linear model: its base and decode terms fixed, its context term per position.
  const CostModel linear = parse_cost_model("linear:base=1ns,prefill-token=2ps,decode-seq=3ps,context-token=4ps",
                                            on(tiny_device()), "--cost");
  const DecodeStepLine l = decode_step_line(linear, decodes);
  CHECK(l.fixed_ps == 1'000 + 3 * 3);
  CHECK(l.per_position_ps == 4);
  // A step with a prompt chunk has no such line.
  StepWork mixed = decodes;
  mixed.prefill_tokens = 1;
  CHECK_THROWS_AS(decode_step_line(linear, mixed), InternalError);

  SECTION("the line is the model, for every context, on every kind of model the engine times") {
    ModelSpec moe = m;
    moe.moe = MoeDims{4, 0, 16, 0, 2};
    std::vector<CostModel> models = {on(fast), on(tiny_device()), tiny_roofline(), tiny_roofline(m, 2),
                                     tiny_roofline(moe), linear};
    fast.compute_capability = 120;
    models.push_back(roofline_cost_model(m, kv_layout(m, KvOptions{}), fast, model_weights(m, KvOptions{}, BudgetOptions{})));
    for (const CostModel& c : models) {
      for (const std::int64_t seqs : {1, 3, 200}) {
        StepWork w;
        w.decode_seqs = seqs;
        w.sampled = seqs;
        w.graph_tokens = cuda_graph_tokens(512, seqs);
        w.peer_tokens = seqs == 3 ? 5 : 0;
        const DecodeStepLine line = decode_step_line(c, w);
        for (const std::int64_t context : {0LL, 1LL, 77LL, 1'000'000LL, 3'000'000'000LL}) {
          w.context = context;
          INFO(c.name << ", " << seqs << " sequences, context " << context);
          CHECK(step_time_ps(c, w) == line.fixed_ps + line.per_position_ps * context);
        }
      }
    }
  }
}

TEST_CASE("routed_expert_share: the expected share of the experts T tokens reach, k of E each") {
  // One token reaches k of E: k / E. Two reach an expert unless both miss it: 1 - (1 - k/E)^2.
  CHECK(routed_expert_share(128, 8, 0) == 0);
  CHECK(routed_expert_share(128, 8, 1) == 0.0625);
  CHECK(routed_expert_share(128, 8, 2) == 1 - 0.9375 * 0.9375);  // 0.12109375, exact in binary
  CHECK(routed_expert_share(4, 2, 3) == 0.875);                   // 1 - 1/8
  CHECK(routed_expert_share(8, 8, 5) == 1);                       // every token uses every expert
  CHECK(routed_expert_share(128, 8, 300) == Approx(1 - std::pow(0.9375, 300)).epsilon(1e-12));
}

TEST_CASE("CUDA graphs: vLLM's captured sizes, the largest step they run, and the padding") {
  // vllm/config/vllm.py _set_cudagraph_sizes: the largest is min(2 x max_num_seqs, 512), and at
  // most max_num_batched_tokens; the sizes are [1, 2, 4] + range(8, min(largest + 1, 256), 8)
  // + range(256, largest + 1, 16).
  CHECK(cuda_graph_max_tokens(128, 2'048) == 256);  // the measured runs' settings
  CHECK(cuda_graph_max_tokens(300, 2'048) == 512);
  CHECK(cuda_graph_max_tokens(128, 200) == 200);
  CHECK(cuda_graph_max_tokens(0, 0) == 512);
  // Any max_num_seqs from 256 up gives 512: 2^62 must not double past 2^63 into a negative cap.
  CHECK(cuda_graph_max_tokens(std::int64_t{1} << 62, 0) == 512);
  CHECK(cuda_graph_max_tokens(INT64_MAX, 2'048) == 512);
  CHECK(cuda_graph_largest(256) == 256);
  CHECK(cuda_graph_largest(300) == 288);  // 256, 272, 288
  CHECK(cuda_graph_largest(250) == 248);  // range(8, 251, 8) ends at 248; range(256, ..) is empty
  CHECK(cuda_graph_largest(200) == 200);
  CHECK(cuda_graph_largest(6) == 4);
  CHECK(cuda_graph_largest(1) == 1);
  CHECK(cuda_graph_largest(0) == 0);
  CHECK(cuda_graph_tokens(256, 1) == 1);
  CHECK(cuda_graph_tokens(256, 3) == 4);
  CHECK(cuda_graph_tokens(256, 5) == 8);
  CHECK(cuda_graph_tokens(256, 129) == 136);
  CHECK(cuda_graph_tokens(256, 249) == 256);
  CHECK(cuda_graph_tokens(256, 256) == 256);
  CHECK(cuda_graph_tokens(256, 257) == 257);  // larger than every graph: run as it is
  CHECK(cuda_graph_tokens(512, 257) == 272);
  CHECK(cuda_graph_tokens(300, 289) == 289);  // past 288, the largest of 300's sizes
  CHECK(cuda_graph_tokens(250, 249) == 249);  // past 248
  CHECK(cuda_graph_tokens(6, 5) == 5);        // past 4
  CHECK(cuda_graph_tokens(0, 5) == 5);        // no graphs
  CHECK(cuda_graph_tokens(256, 0) == 0);
}

TEST_CASE("CUDA graphs: a padding token runs through the matmuls and the element-wise kernels, not attention") {
  SECTION("memory-bound: one more token's activations") {
    const CostModel c = tiny_roofline();
    StepWork w = mixed_step();  // 13 tokens
    const std::int64_t unpadded = step_time_ps(c, w);
    w.graph_tokens = 16;
    CHECK(step_time_ps(c, w) - unpadded == 3 * (c.matmul_io_token_ps + c.elementwise_token_ps));
  }
  SECTION("compute-bound: a decode's matmul FLOPs, without sampling") {
    const CostModel c = without_activations(tiny_roofline());
    StepWork w;
    w.prefill_tokens = 2'000;
    w.prefill_pairs = 2'001'000;
    w.prefill_context = 2'000;
    w.sampled = 1;
    w.graph_tokens = 2'008;
    // 1,171,980,800 ps unpadded (the test above) + 8 x 73,728.
    CHECK(step_time_ps(c, w) == 1'171'980'800 + 8 * 73'728);
  }
  SECTION("a dummy batch: one padding token and nothing scheduled, all-reduced like any token") {
    // Tensor parallelism 2 over the link of the all-reduces' test below: 6 x 5 us a step and
    // 320,000 ps a token of collectives.
    const ModelSpec m = tiny_model();
    DevicePreset device = tiny_device();
    device.link_bytes_per_second = 1'000'000'000;
    device.link_latency_ns = 5'000;
    RooflineParallel tp2;
    tp2.tensor_parallel = 2;
    const CostModel c =
        roofline_cost_model(m, kv_layout(m, KvOptions{}), device, model_weights(m, KvOptions{}, BudgetOptions{}), tp2);
    REQUIRE(c.collective_step_ps == 30'000'000);
    REQUIRE(c.collective_token_ps == 320'000);
    StepWork dummy;
    dummy.graph_tokens = 1;
    CHECK(step_time_ps(c, dummy) - step_time_ps(c, StepWork{}) ==
          c.collective_step_ps + c.collective_token_ps + c.matmul_io_token_ps + c.elementwise_token_ps);
  }
  SECTION("the linear model charges no token term for it; an MoE model's experts see it") {
    ModelSpec moe = tiny_model();
    moe.moe = MoeDims{4, 0, 16, 0, 2};
    const CostModel l = parse_cost_model(
        "linear:base=1ms,prefill-token=1us,decode-seq=1us,context-token=0ps,expert-weights=4ms", tiny_roofline(moe),
        "--cost");
    StepWork one;
    one.decode_seqs = 1;
    one.sampled = 1;
    StepWork padded = one;
    padded.graph_tokens = 2;
    CHECK(expert_tokens(padded) == 2);
    CHECK(step_time_ps(l, one) == 3'001'000'000);     // 1 ms + 1 us + 4 ms x 1/2
    CHECK(step_time_ps(l, padded) == 4'001'000'000);  // 1 ms + 1 us + 4 ms x 3/4
    padded.peer_tokens = 2;
    CHECK(expert_tokens(padded) == 4);
  }
}

TEST_CASE("CUDA graphs: the engine pads each step it times") {
  // Linear cost: 1 ms a step + 4 ms x the share of 4 experts (2 a token) the step's tokens
  // reach. Request a (prompt 3, output 2) alone: its prompt's step has 3 tokens, padded to 4
  // with graphs up to 8 tokens: 1 + 4 x (1 - 1/16) = 4.75 ms, against 1 + 4 x 7/8 = 4.5 ms
  // unpadded; its one decode (1 token, no padding) 1 + 4 x 1/2 = 3 ms.
  ModelSpec moe = tiny_model();
  moe.moe = MoeDims{4, 0, 16, 0, 2};
  ReplayOptions o;
  o.layout = test::unit_layout();
  o.cost = parse_cost_model("linear:base=1ms,prefill-token=0ps,decode-seq=0ps,context-token=0ps,expert-weights=4ms",
                            tiny_roofline(moe), "--cost");
  const auto run = [&](std::int64_t graph_max) {
    o.cuda_graph_max_tokens = graph_max;
    RequestVectorReader trace({test::request("a", 0, 3, 2)});
    auto allocator = make_allocator(parse_allocator_spec("paged:block=16", "test"), o.layout);
    return replay(trace, *allocator, o);
  };
  const ReplayReport padded = run(8);
  CHECK(padded.ttft.p50_ns == 4'750'000);
  CHECK(padded.end_ns == 7'750'000);
  const ReplayReport unpadded = run(0);
  CHECK(unpadded.ttft.p50_ns == 4'500'000);
  CHECK(unpadded.end_ns == 7'500'000);
  // With graphs up to 2 tokens, the 3-token step runs without one.
  CHECK(run(2).ttft.p50_ns == 4'500'000);
}

TEST_CASE("roofline and linear: an MoE step reads the routed experts its tokens (and the replicas') reach") {
  // The tiny model with an MoE layer of 4 experts of 16, 2 a token, in both layers: an expert
  // is 3 x 32 x 16 = 1,536 parameters, so the routed experts are 2 x 4 x 1,536 = 12,288
  // parameters, 24,576 bytes in bf16, 49,152,000 ps at 0.5 GB/s. The rest of the weights
  // stay in weights_ps, but the embedding's 6,400 bytes (looked up, not read whole): together
  // they are the device's weights.
  ModelSpec moe = tiny_model();
  moe.moe = MoeDims{4, 0, 16, 0, 2};
  const CostModel r = tiny_roofline(moe);
  CHECK(r.expert_weights_ps == 49'152'000);
  CHECK(r.routed_experts == 4);
  CHECK(r.experts_per_token == 2);
  const ModelWeights w = model_weights(moe, KvOptions{}, BudgetOptions{});
  CHECK(w.embedding_bytes_per_device == 6'400);
  CHECK(r.weights_ps + r.expert_weights_ps == (w.weights_bytes_per_device - 6'400) * 2'000);
  // One decode reaches half the experts; with one more token of another replica, 3/4.
  StepWork one;
  one.decode_seqs = 1;
  one.context = 10;
  one.sampled = 1;
  StepWork with_peer = one;
  with_peer.peer_tokens = 1;
  CHECK(step_time_ps(r, with_peer) - step_time_ps(r, one) == 49'152'000 / 4);
  // The linear model: 1 ms + 4 ms x the share.
  const CostModel l = parse_cost_model(
      "linear:base=1ms,prefill-token=0ps,decode-seq=0ps,context-token=0ps,expert-weights=4ms", r, "--cost");
  CHECK(step_time_ps(l, one) == 3'000'000'000);        // 1 + 4 x 1/2
  CHECK(step_time_ps(l, with_peer) == 4'000'000'000);  // 1 + 4 x 3/4
  StepWork three = one;
  three.decode_seqs = 3;
  CHECK(step_time_ps(l, three) == 4'500'000'000);      // 1 + 4 x 7/8
  // Unnamed, the linear model takes the roofline's; constant has none; a dense model refuses it.
  CHECK(parse_cost_model("linear:base=1ms", r, "--cost").expert_weights_ps == 49'152'000);
  CHECK(parse_cost_model("constant:step=1ms", r, "--cost").expert_weights_ps == 0);
  // constant's step, unnamed, is the read of every weight, the experts included.
  CHECK(parse_cost_model("constant", r, "--cost").base_ps == r.weights_ps + r.expert_weights_ps);
  // Weights given as bytes have no known split: all are in weights_ps, no experts' read, but a
  // linear model may still name one.
  BudgetOptions in_bytes;
  in_bytes.weights_bytes = 1'000'000;
  const CostModel b = roofline_cost_model(moe, kv_layout(moe, KvOptions{}), tiny_device(),
                                          model_weights(moe, KvOptions{}, in_bytes));
  CHECK(b.expert_weights_ps == 0);
  CHECK(b.weights_ps == 1'000'000LL * 2'000);
  CHECK(parse_cost_model("linear:base=1ms,expert-weights=4ms", b, "--cost").expert_weights_ps == 4'000'000'000);
  CHECK_THROWS_AS(parse_cost_model("linear:base=1ms,expert-weights=4ms", tiny_roofline(), "--cost"), InputError);
  CHECK(tiny_roofline().expert_weights_ps == 0);
}
