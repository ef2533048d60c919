// kvsim size: the KV-cache capacity sheet the seed guide asks for. It parses options, asks the
// library for the sheet (size_sheet(): the layout, the budget and the paged pool) and prints it
// (size_output.h); it computes nothing a user compares.
#include <algorithm>
#include <fmt/core.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli.h"
#include "kvsim/budget.h"
#include "kvsim/error.h"
#include "kvsim/option_names.h"
#include "kvsim/output_file.h"
#include "kvsim/parse.h"
#include "kvsim/units.h"
#include "kvsim/size_sheet.h"
#include "kvsim/startup_memory.h"
#include "model_options.h"
#include "size_output.h"

namespace kvsim::cli {
namespace {

const CommandSpec kSpec{
    "kvsim size (--model NAME | --config FILE) [options]",
    "Prints the KV-cache capacity sheet of a model: its layer groups and the bytes one token\n"
    "position costs in each (per device, after tensor- and pipeline-parallel placement); for\n"
    "--seqs B --tokens T the bytes per sequence and for B sequences (sliding-window groups keep\n"
    "at most W positions); for a budget (--device, or --kv-budget) each term of the subtraction\n"
    "device total x utilisation - weights - reserve, how many blocks and tokens fit, and vLLM's\n"
    "\"Maximum concurrency for T tokens per request\". With --engine (vllm, vllm-v0, vllm-v0.6.4,\n"
    "vllm-v0.7.1, sglang, trtllm) the budget is the engine's own start-up rule instead: weights\n"
    "tensor by tensor, the profile run's activation peak, non-torch memory. Bytes are exact\n"
    "integers; GiB is 2^30 bytes, GB 10^9.\n"
    "\n"
    "A list of token counts (--tokens 1000,3000) prints a row per length and their total, the\n"
    "requests held at once, with a fits / does NOT fit line under a budget. --pp N places the\n"
    "weights per real stage (embeddings on the first, LM head on the last) and sizes each\n"
    "stage's pool from its own budget. --config reads hybrid attention/state-space configs (only\n"
    "attention layers hold KV; the others a constant state per sequence), multimodal configs\n"
    "(text_config), per-layer KV head lists and layers that reuse another layer's KV; a field\n"
    "kvsim does not model is an error naming it. The rules and their sources are in docs/size.md.",
    "  kvsim size --model seed-example --dtype fp16 --seqs 6 --tokens 4096\n"
    "  kvsim size --model llama-3.1-8b --tokens 8192,32768 --device H100-80GB\n"
    "  kvsim size --model gemma-3-27b --tokens 32768 --device H100-80GB --json\n"
    "  kvsim size --model deepseek-v3 --mla-form decompressed --tokens 4096\n"
    "  kvsim size --config config.json --dtype fp8 --tp 8 --device H200-141GB\n"
    "  kvsim size --model seed-example --dtype fp16 --prompt 3072 --max-tokens 1024 --n 4\n"
    "  kvsim size --model llama-3.1-8b --seqs 8 --tokens 1000,3000 --static-cache 8192\n"
    "  kvsim size --config config.json --device-memory 85017755648 --engine vllm --max-model-len 32768"};

po::options_description size_options() {
  po::options_description workload_opts("Workload and paging");
  workload_opts.add_options()
      ("seqs", po::value<std::string>(), "sequences held at once (default 1)")
      ("tokens", po::value<std::string>(), "positions per sequence, T or T1,T2,...")
      (option_key(kOptBlockSize), po::value<std::string>(), "tokens per paged block (default 16, as vLLM)")
      (option_key(kOptMaxNumBatchedTokens), po::value<std::string>(),
       "vLLM's scheduler chunk, which caps a sliding window's blocks (default 8192)");
  po::options_description request_opts("One request: prompt and generation apart, and the sequences it creates");
  request_opts.add_options()
      (option_key(kOptPrompt), po::value<std::string>(), "prompt tokens P of one request (with --max-tokens)")
      (option_key(kOptMaxTokens), po::value<std::string>(), "generation limit G the request reserves (with --prompt)")
      (option_key(kOptN), po::value<std::string>(), "parallel samples N: sequences sharing the prompt (default 1)")
      (option_key(kOptBeams), po::value<std::string>(), "beam width K: K live sequences sharing the prompt")
      (option_key(kOptNoPromptSharing),
       "every sequence holds its own copy of the prompt (Hugging Face generate) instead of sharing it (vLLM)")
      (option_key(kOptStaticCache), po::value<std::string>(),
       "Hugging Face StaticCache: --seqs x L positions reserved on every layer (min(W, L) on sliding layers)")
      (option_key(kOptSpeculative), po::value<std::string>(),
       "speculative decoding's draft KV: eagle or eagle3 (one layer at the target's dims) or draft:CONFIG "
       "(a draft model's config.json)")
      (option_key(kOptNumSpeculativeTokens), po::value<std::string>(),
       "K drafts a step (vLLM's num_speculative_tokens): a decoding sequence holds 2K slots past its tokens, "
       "within max_model_len, which the blocks per request and the fits verdicts count");
  po::options_description offload_opts("Offloading and validation");
  offload_opts.add_options()
      (option_key(kOptOffloadFraction), po::value<std::string>(),
       "share of the KV kept in host memory, in (0, 1): what stays on the device, what moves, and the transfer per "
       "decode step")
      (option_key(kOptLinkBandwidth), po::value<std::string>(),
       "host link bandwidth in bytes per second for --offload-fraction (\"25GB\", \"64GB\"; default 25GB, about "
       "PCIe 4.0 x16 in practice)")
      (option_key(kOptCheck), po::value<std::string>(),
       "the seed guide's three validation cases against the budget: usual=T,long=T,concurrency=N (N sequences of "
       "the usual T); says which fit and what is measured or assumed");
  po::options_description engine_opts(
      "Engine start-up (with --device or --device-memory: the engine's own start-up budget instead of --reserve)");
  engine_opts.add_options()
      (option_key(kOptEngine), po::value<std::string>(), "vllm (default; the v1 engine), vllm-v0 (V0, 0.6.5 to 0.10), vllm-v0.6.4 (V0, 0.6.4 and earlier), vllm-v0.7.1 (the first v1, 0.7.0 and 0.7.1), sglang or trtllm: whose start-up rule sizes the KV budget")
      (option_key(kOptMaxNumSeqs), po::value<std::string>(), "vLLM's max_num_seqs: requests the sampler is profiled for (default 256)")
      (option_key(kOptMaxModelLen), po::value<std::string>(),
       "the engine's max_model_len: T of the concurrency line (default max_position_embeddings, or as "
       "far as rope_scaling stretches it)")
      (option_key(kOptEnforceEager), "vLLM's enforce_eager: no CUDA graphs")
      (option_key(kOptFlashinferSampler), "vLLM samples with FlashInfer (installed, VLLM_USE_FLASHINFER_SAMPLER not 0)")
      (option_key(kOptMemFractionStatic), po::value<std::string>(), "SGLang's mem_fraction_static (default by --tp: 0.88 .. 0.79)")
      (option_key(kOptFreeGpuMemoryFraction), po::value<std::string>(), "TensorRT-LLM's free_gpu_memory_fraction (default 0.9)")
      (option_key(kOptExpertRanks), po::value<std::string>(),
       "vLLM's expert parallelism over N ranks (data x tensor parallel size, a multiple of --tp): an MoE model's routed experts are "
       "spread over them, whole, so a device holds its share (default 1: every device a slice of every expert)");
  po::options_description output_opts("Output");
  output_opts.add_options()("json", "print the sheet as JSON (integers as JSON integers)");
  po::options_description options;
  options.add(model_options("a built-in preset (see 'kvsim models')"))
      .add(placement_options())
      .add(workload_opts)
      .add(request_opts)
      .add(offload_opts)
      .add(budget_options())
      .add(engine_opts)
      .add(output_opts);
  return options;
}

std::vector<std::int64_t> token_list(const std::string& text) {
  std::vector<std::int64_t> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    out.push_back(positive_integer(text.substr(start, comma - start), "--tokens"));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// --prompt P --max-tokens G with --n N or --beams K: one request's shape, or none.
std::optional<RequestShape> request_shape(const po::variables_map& vm) {
  const auto prompt = option_text(vm, option_key(kOptPrompt));
  const auto max_tokens = option_text(vm, option_key(kOptMaxTokens));
  const auto n = option_text(vm, option_key(kOptN));
  const auto beams = option_text(vm, option_key(kOptBeams));
  const bool unshared = vm.count(option_key(kOptNoPromptSharing)) != 0;
  if (!prompt && !max_tokens) {
    for (const auto& [given, flag] : {std::pair{n.has_value(), kOptN}, std::pair{beams.has_value(), kOptBeams},
                                      std::pair{unshared, kOptNoPromptSharing}}) {
      if (given) throw InputError(Location{"", 0, flag}, "needs --prompt P and --max-tokens G (one request's shape)");
    }
    return std::nullopt;
  }
  if (!prompt) throw InputError(Location{"", 0, kOptMaxTokens}, "needs --prompt P (the request's prompt tokens)");
  if (!max_tokens) throw InputError(Location{"", 0, kOptPrompt}, "needs --max-tokens G (the generation it reserves)");
  if (n && beams) throw InputError(Location{"", 0, kOptBeams}, "give --n or --beams, not both");
  RequestShape r;
  r.prompt_tokens = token_count(*prompt, kOptPrompt);
  r.max_tokens = token_count(*max_tokens, kOptMaxTokens);
  if (n) r.sequences = positive_integer(*n, kOptN);
  if (beams) r.sequences = positive_integer(*beams, kOptBeams);
  if (unshared && r.sequences == 1) {
    throw InputError(Location{"", 0, kOptNoPromptSharing},
                     "copies the prompt into each of the request's sequences, and it has one: give --n or --beams");
  }
  r.prompt_shared = !unshared;
  return r;
}

// --check usual=T,long=T,concurrency=N: the seed guide's three cases.
std::vector<CheckCase> check_cases(const std::string& text) {
  std::optional<std::int64_t> usual, long_context, concurrency;
  for (const auto& [key, value] : parse_key_values(text, kOptCheck)) {
    const std::string v(value);
    if (key == "usual") usual = positive_integer(v, kOptCheck);
    else if (key == "long") long_context = positive_integer(v, kOptCheck);
    else if (key == "concurrency") concurrency = positive_integer(v, kOptCheck);
    else throw InputError(Location{"", 0, kOptCheck}, "unknown case '" + std::string(key) + "' (expected usual, long, concurrency)");
  }
  if (!usual || !long_context || !concurrency) {
    throw InputError(Location{"", 0, kOptCheck}, "expected all three cases: usual=T,long=T,concurrency=N");
  }
  return {{"usual input", 1, *usual}, {"long input", 1, *long_context}, {"maximum concurrency", *concurrency, *usual}};
}

// The engine start-up options, or nothing when none is given. Each engine's memory fraction
// goes under its own name; the block size defaults to the engine's (vLLM 16, SGLang's page of
// 1 token, TensorRT-LLM's tokens_per_block 32) unless --block-size says.
std::optional<EngineSettings> engine_settings(const po::variables_map& vm, PagedOptions& paging) {
  const char* flags[] = {kOptEngine,          kOptMaxNumSeqs,        kOptEnforceEager,         kOptMaxModelLen,
                         kOptMemFractionStatic, kOptFreeGpuMemoryFraction, kOptFlashinferSampler};
  bool any = false;
  for (const char* f : flags) any = any || vm.count(option_key(f)) != 0;
  if (!any) return std::nullopt;
  EngineSettings e;
  if (const auto name = option_text(vm, option_key(kOptEngine))) e.engine = parse_serving_engine(*name, kOptEngine);
  // The fraction under the engine's own name; another engine's name is a mistake.
  const char* own = is_vllm(e.engine) ? kOptGpuMemoryUtilization
                    : e.engine == ServingEngine::sglang ? kOptMemFractionStatic
                                                        : kOptFreeGpuMemoryFraction;
  for (const char* f : {kOptGpuMemoryUtilization, kOptMemFractionStatic, kOptFreeGpuMemoryFraction}) {
    const auto text = option_text(vm, option_key(f));
    if (!text) continue;
    if (std::string(f) != own) {
      throw InputError(Location{"", 0, f}, std::string("is not ") + std::string(serving_engine_name(e.engine)) +
                                               "'s setting: its memory fraction is " + own);
    }
    e.memory_fraction_ppb = parse_gpu_memory_utilization(*text, f);
  }
  if (const auto n = option_text(vm, option_key(kOptMaxNumSeqs))) e.max_num_seqs = positive_integer(*n, kOptMaxNumSeqs);
  if (const auto n = option_text(vm, option_key(kOptMaxModelLen))) e.max_model_len = token_count(*n, kOptMaxModelLen);
  e.enforce_eager = vm.count(option_key(kOptEnforceEager)) != 0;
  e.flashinfer_sampler = vm.count(option_key(kOptFlashinferSampler)) != 0;
  if (e.flashinfer_sampler && e.engine != ServingEngine::vllm) {
    throw InputError(Location{"", 0, kOptFlashinferSampler}, "describes vLLM's v1 sampler: it needs --engine vllm");
  }
  // vllm-v0 without the option runs max(max_model_len, 2048) tokens (startup_memory.h).
  if (option_text(vm, option_key(kOptMaxNumBatchedTokens)) || !is_vllm_v0(e.engine)) {
    e.max_num_batched_tokens = paging.max_num_batched_tokens;
  }
  if (!option_text(vm, option_key(kOptBlockSize))) {
    if (e.engine == ServingEngine::sglang) paging.block_tokens = 1;
    if (e.engine == ServingEngine::trtllm) paging.block_tokens = 32;
  }
  return e;
}

// The workload, paging and budget options, checked in the order the user reads about them.
SizeQuery size_query(const po::variables_map& vm, const ModelSpec& model, std::int64_t tensor_parallel) {
  SizeQuery q;
  const auto seqs_text = option_text(vm, "seqs");
  const auto tokens_text = option_text(vm, "tokens");
  if (seqs_text) q.seqs = positive_integer(*seqs_text, "--seqs");
  // A static cache's reservation is --seqs x its length, whatever the sequences hold.
  if (seqs_text && !tokens_text && !option_text(vm, option_key(kOptStaticCache))) {
    throw InputError(Location{"", 0, "--seqs"}, "needs --tokens T (positions per sequence) or --static-cache L");
  }
  if (tokens_text) q.tokens = token_list(*tokens_text);
  if (const auto b = option_text(vm, "block-size")) q.paging.block_tokens = positive_integer(*b, "--block-size");
  if (const auto m = option_text(vm, "max-num-batched-tokens")) {
    q.paging.max_num_batched_tokens = positive_integer(*m, "--max-num-batched-tokens");
  }
  q.request = request_shape(vm);
  const auto link = option_text(vm, option_key(kOptLinkBandwidth));
  if (const auto f = option_text(vm, option_key(kOptOffloadFraction))) {
    q.offload_ppb = parse_fraction_ppb(*f, kOptOffloadFraction);
    if (q.offload_ppb == 0) throw InputError(Location{"", 0, kOptOffloadFraction}, "expected a share above 0");
    if (q.tokens.empty() && !q.request) {
      throw InputError(Location{"", 0, kOptOffloadFraction}, "needs --tokens or --prompt/--max-tokens (what to offload)");
    }
    q.link_bytes_per_second = parse_byte_size(link.value_or("25GB"), kOptLinkBandwidth);
    if (q.link_bytes_per_second <= 0) {
      throw InputError(Location{"", 0, kOptLinkBandwidth}, "expected a positive number of bytes per second");
    }
    q.link_source = link ? std::string(kOptLinkBandwidth) : "assumed: 25 GB/s, about PCIe 4.0 x16 in practice";
  } else if (link) {
    throw InputError(Location{"", 0, kOptLinkBandwidth}, "needs --offload-fraction (nothing moves without it)");
  }
  if (const auto c = option_text(vm, option_key(kOptCheck))) q.checks = check_cases(*c);
  if (const auto spec = option_text(vm, option_key(kOptSpeculative))) {
    if (*spec == "eagle" || *spec == "eagle3") {
      q.draft = eagle_draft(model);
      q.draft->name = (*spec == "eagle" ? "EAGLE" : "EAGLE-3") + std::string(" head (one layer at the target's KV dims)");
    } else if (spec->rfind("draft:", 0) == 0 && spec->size() > 6) {
      q.draft = load_hf_config(spec->substr(6));
      // vLLM refuses a draft model whose vocabulary is not the target's
      // (SpeculativeConfig.verify_equal_vocab_size_if_draft_model, vllm/config/speculative.py).
      if (q.draft->vocab_size > 0 && model.vocab_size > 0 && q.draft->vocab_size != model.vocab_size) {
        throw InputError(Location{q.draft->name, 0, "vocab_size"},
                         fmt::format("the draft's vocabulary has {} tokens and the target's {}; vLLM refuses a "
                                     "draft model whose vocabulary differs (its tokens would not be the target's)",
                                     q.draft->vocab_size, model.vocab_size));
      }
    } else {
      throw InputError(Location{"", 0, kOptSpeculative}, "expected eagle, eagle3 or draft:CONFIG, got \"" + *spec + "\"");
    }
  }
  if (const auto k = option_text(vm, option_key(kOptNumSpeculativeTokens))) {
    if (!q.draft) {
      throw InputError(Location{"", 0, kOptNumSpeculativeTokens}, std::string("needs ") + kOptSpeculative);
    }
    q.speculative_tokens = positive_integer(*k, kOptNumSpeculativeTokens);
  }
  if (const auto l = option_text(vm, option_key(kOptStaticCache))) {
    q.static_cache_tokens = positive_integer(*l, kOptStaticCache);
  }
  // Here nothing else uses the device or the weights (replay's cost model does).
  reject_beside_kv_budget(vm, {"device", "params", "weight-dtype", "weights-bytes"});
  q.startup = engine_settings(vm, q.paging);
  if (q.draft && q.startup && !is_vllm(q.startup->engine)) {
    // SGLang's draft worker takes a pool of its own beside the target's (draft_runner_cache_size,
    // sglang/srt/model_executor/model_runner.py), sized by other rules than vLLM's shared one.
    throw InputError(Location{"", 0, kOptSpeculative},
                     std::string("kvsim models the draft's KV in vLLM's one pool; with ") + kOptEngine + " " +
                         std::string(serving_engine_name(q.startup->engine)) + " the draft keeps a pool of its own");
  }
  if (const auto n = option_text(vm, option_key(kOptMaxModelLen))) max_model_len_option(*n, model);
  if (q.startup) {
    reject_beside_kv_budget(vm, {option_key(kOptEngine), option_key(kOptMaxNumSeqs), option_key(kOptEnforceEager),
                                 option_key(kOptMaxModelLen), option_key(kOptMemFractionStatic),
                                 option_key(kOptFreeGpuMemoryFraction), option_key(kOptFlashinferSampler)});
    if (!option_text(vm, option_key(kOptDevice)) && !option_text(vm, option_key(kOptDeviceMemory))) {
      throw InputError(Location{"", 0, kOptEngine}, std::string("the engine's start-up budget needs a device: give ") +
                                                        kOptDevice + " or " + kOptDeviceMemory);
    }
    for (const char* flag : {kOptReserve, kOptParams}) {
      if (option_text(vm, option_key(flag))) {
        throw InputError(Location{"", 0, flag},
                         std::string("has no effect with the engine's start-up budget (") + kOptEngine +
                             " and its settings), which counts activations and weights itself: give one or the "
                             "other (" + kOptWeightsBytes + " replaces the weights)");
      }
    }
  }
  q.budget = resolve_budget(vm);
  // The paged pool is sized only against a budget; without one these options would do nothing.
  for (const char* flag : {kOptBlockSize, kOptMaxNumBatchedTokens}) {
    if (!q.budget && option_text(vm, option_key(flag))) {
      throw InputError(Location{"", 0, flag}, std::string("sizes the paged pool, which needs a budget: give ") +
                                                  kOptKvBudget + ", " + kOptDevice + " or " + kOptDeviceMemory);
    }
  }
  // Outside an engine's start-up (its profile batch) the chunk only caps sliding windows.
  const bool slides = std::any_of(model.layer_window_tokens.begin(), model.layer_window_tokens.end(),
                                  [](std::int64_t w) { return w > 0; });
  if (q.budget && !q.startup && !slides && option_text(vm, option_key(kOptMaxNumBatchedTokens))) {
    throw InputError(Location{"", 0, kOptMaxNumBatchedTokens},
                     "caps the blocks a sliding-window layer keeps, and " + model.name +
                         " has none: it would have no effect (with --engine it sizes the start-up profile batch)");
  }
  if (const auto ranks = option_text(vm, option_key(kOptExpertRanks))) {
    const std::int64_t n = positive_integer(*ranks, kOptExpertRanks);
    if (!model.moe) {
      throw InputError(Location{"", 0, kOptExpertRanks}, "spreads an MoE model's experts; " + model.name + " has none");
    }
    if (!q.budget || q.budget->kv_budget_bytes) {
      throw InputError(Location{"", 0, kOptExpertRanks},
                       std::string("changes only the weights a device holds: give --device or --device-memory"));
    }
    // vLLM's ep_size is data x tensor parallel size; the budget counts the data-parallel part.
    if (n % tensor_parallel != 0) {
      throw InputError(Location{"", 0, kOptExpertRanks},
                       "expected a multiple of " + std::string(kOptTp) + " (data x tensor parallel ranks)");
    }
    q.budget->expert_parallel_ranks = n / tensor_parallel;
  }
  if (q.startup && q.budget) {
    take_weight_options(*q.startup, *q.budget, tensor_parallel);
  }
  return q;
}

}  // namespace

int run_size(const Invocation& inv) {
  po::options_description options = size_options();
  po::variables_map vm;
  if (!parse_options(inv, kSpec, options, {}, vm)) return kExitOk;
  const ModelChoice choice = resolve_model(vm, kSpec.synopsis, "");
  const SizeQuery query = size_query(vm, choice.model, choice.kv.tensor_parallel);
  SizeSheet sheet;
  try {
    sheet = size_sheet(choice.model, choice.kv, query);
  } catch (const InputError& e) {
    // A product that overflows names no field where it is found: here it is the workload's.
    if (!e.where().file.empty() || !e.where().field.empty()) throw;
    std::string given;
    for (const char* option : {"--tokens", "--seqs", kOptPrompt, kOptMaxTokens, kOptN, kOptBeams, kOptStaticCache}) {
      if (option_text(vm, option + 2)) given += given.empty() ? option : std::string(", ") + option;
    }
    // The workload is to blame only if the model alone sizes: one sequence, nothing asked.
    SizeQuery bare = query;
    bare.seqs = 1;
    bare.tokens.clear();
    bare.request.reset();
    bare.static_cache_tokens = 0;
    bare.checks.clear();
    bool model_alone_sizes = true;
    try {
      size_sheet(choice.model, choice.kv, bare);
    } catch (const InputError&) {
      model_alone_sizes = false;
    }
    if (given.empty() || !model_alone_sizes) {
      throw InputError(e.problem() + " for this model alone (its config.json's sizes, --block-size or the "
                       "budget's terms), before any workload");
    }
    // An input error (exit 1), as README's table says of a result that cannot be computed:
    // each value was valid on its own.
    throw InputError(e.problem() + " for this model (from " + given + "): give fewer positions or sequences");
  }
  if (vm.count("json") != 0) {
    write_stdout(size_json(sheet, choice.dtype_reason));
  } else {
    write_stdout(size_table(sheet, choice.dtype_reason));
  }
  return kExitOk;
}

}  // namespace kvsim::cli
