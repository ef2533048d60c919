// The names of the command-line options, in one place.
//
// The library's messages point users at the option that would fix a problem ("pass
// --max-model-len"), and the `kvsim` program declares its options under the same names, so
// both read them from here: renaming an option is one line, and a message can never name an
// option the program does not have. A library user who has no command line still gets
// these names in messages; they identify which setting was wrong (the option and the
// ReplayOptions / BudgetOptions field documented beside it say the same thing).
//
// Each constant is the flag as typed, with its leading "--"; option_key() gives the name
// Boost.Program_options declares (without the dashes).
#ifndef KVSIM_OPTION_NAMES_H_
#define KVSIM_OPTION_NAMES_H_

namespace kvsim {

// The name a parser declares: option_key(kOptMaxRunning) == "max-running".
constexpr const char* option_key(const char* flag) { return flag + 2; }

// Where the allocators' parameters are documented, for "unknown parameter" messages.
inline constexpr char kReplayHelp[] = "kvsim replay --help";

// Model, KV storage and placement (kvsim size, kvsim replay).
inline constexpr char kOptModel[] = "--model";
inline constexpr char kOptConfig[] = "--config";
inline constexpr char kOptDtype[] = "--dtype";
inline constexpr char kOptKvGroupSize[] = "--kv-group-size";
inline constexpr char kOptMlaForm[] = "--mla-form";
inline constexpr char kOptTp[] = "--tp";
inline constexpr char kOptPp[] = "--pp";
inline constexpr char kOptMaxModelLen[] = "--max-model-len";

// The device budget (kvsim size, kvsim replay).
inline constexpr char kOptDevice[] = "--device";
inline constexpr char kOptTimingDevice[] = "--timing-device";
inline constexpr char kOptDeviceMemory[] = "--device-memory";
inline constexpr char kOptGpuMemoryUtilization[] = "--gpu-memory-utilization";
inline constexpr char kOptParams[] = "--params";
inline constexpr char kOptWeightDtype[] = "--weight-dtype";
inline constexpr char kOptWeightsBytes[] = "--weights-bytes";
inline constexpr char kOptReserve[] = "--reserve";
inline constexpr char kOptKvBudget[] = "--kv-budget";
inline constexpr char kOptBlockSize[] = "--block-size";                    // kvsim size
inline constexpr char kOptMaxNumBatchedTokens[] = "--max-num-batched-tokens";  // kvsim size
inline constexpr char kOptBeams[] = "--beams";                              // kvsim size (and --prompt, --max-tokens, --n)
inline constexpr char kOptNoPromptSharing[] = "--no-prompt-sharing";        // kvsim size
inline constexpr char kOptStaticCache[] = "--static-cache";                 // kvsim size
inline constexpr char kOptSpeculative[] = "--speculative";                  // kvsim size
inline constexpr char kOptNumSpeculativeTokens[] = "--num-speculative-tokens";  // kvsim size
inline constexpr char kOptOffloadFraction[] = "--offload-fraction";         // kvsim size
inline constexpr char kOptLinkBandwidth[] = "--link-bandwidth";             // kvsim size
inline constexpr char kOptCheck[] = "--check";                              // kvsim size
// The serving engine's start-up budget (kvsim size; EngineSettings in kvsim/startup_memory.h).
inline constexpr char kOptEngine[] = "--engine";
inline constexpr char kOptMaxNumSeqs[] = "--max-num-seqs";
inline constexpr char kOptEnforceEager[] = "--enforce-eager";
inline constexpr char kOptFlashinferSampler[] = "--flashinfer-sampler";
inline constexpr char kOptMemFractionStatic[] = "--mem-fraction-static";          // SGLang's name
inline constexpr char kOptFreeGpuMemoryFraction[] = "--free-gpu-memory-fraction";  // TensorRT-LLM's name
inline constexpr char kOptExpertRanks[] = "--expert-ranks";  // size: ranks an MoE model's experts are spread over

// Replay: allocators, schedule and serving under a budget.
inline constexpr char kOptAllocator[] = "--allocator";
inline constexpr char kOptSchedule[] = "--schedule";
inline constexpr char kOptReplicas[] = "--replicas";
inline constexpr char kOptExpertParallel[] = "--expert-parallel";
inline constexpr char kOptDpRouter[] = "--dp-router";
inline constexpr char kOptCost[] = "--cost";
inline constexpr char kOptMaxBatchedTokens[] = "--max-batched-tokens";
inline constexpr char kOptNoChunkedPrefill[] = "--no-chunked-prefill";
inline constexpr char kOptMaxRunning[] = "--max-running";
inline constexpr char kOptAsyncScheduling[] = "--async-scheduling";
inline constexpr char kOptCudaGraphs[] = "--cuda-graphs";
inline constexpr char kOptVllmVersion[] = "--vllm-version";  // that version's scheduling defaults
inline constexpr char kOptDefaultMaxTokens[] = "--default-max-tokens";
inline constexpr char kOptPolicy[] = "--policy";
inline constexpr char kOptPreemption[] = "--preemption";
inline constexpr char kOptSchedulePolicy[] = "--schedule-policy";  // SGLang's name: fcfs or lpm
inline constexpr char kOptWatermark[] = "--watermark";
inline constexpr char kOptReserveFullIsl[] = "--reserve-full-isl";  // vLLM's scheduler_reserve_full_isl
inline constexpr char kOptSwapBandwidth[] = "--swap-bandwidth";
inline constexpr char kOptSampleEvery[] = "--sample-every";
inline constexpr char kOptJobs[] = "--jobs";
// Measured runs (kvsim validate, kvsim calibrate).
inline constexpr char kOptWorkload[] = "--workload";

// Reading traces.
inline constexpr char kOptFormat[] = "--format";
inline constexpr char kOptSort[] = "--sort";
inline constexpr char kOptKeepFailed[] = "--keep-failed";
inline constexpr char kOptRate[] = "--rate";
inline constexpr char kOptSeed[] = "--seed";
inline constexpr char kOptTo[] = "--to";  // kvsim trace convert
// Load scaling (replay, trace stats, trace convert; TraceOptions).
inline constexpr char kOptRateScale[] = "--rate-scale";
inline constexpr char kOptTimeWindow[] = "--time-window";
inline constexpr char kOptRequests[] = "--requests";  // also kvsim trace gen: how many to generate

// Generating traces (kvsim trace gen), and --requests above.
inline constexpr char kOptDuration[] = "--duration";
inline constexpr char kOptArrivals[] = "--arrivals";
inline constexpr char kOptPrompt[] = "--prompt";
inline constexpr char kOptOutput[] = "--output";
inline constexpr char kOptLengthsFrom[] = "--lengths-from";
inline constexpr char kOptN[] = "--n";
inline constexpr char kOptMaxTokens[] = "--max-tokens";
inline constexpr char kOptMaxTokensShare[] = "--max-tokens-share";
inline constexpr char kOptCancel[] = "--cancel";
inline constexpr char kOptSystemPrompt[] = "--system-prompt";
inline constexpr char kOptSessions[] = "--sessions";
inline constexpr char kOptBlockTokens[] = "--block-tokens";

}  // namespace kvsim

#endif  // KVSIM_OPTION_NAMES_H_
