// Replays two requests, held in memory, through vLLM's paged allocator with nothing but
// kvsim's public headers, and checks the peak against a figure worked out by hand.
//
// Llama-3.1-8B stores, per token, 32 layers x 8 KV heads x 128 values x 2 (K and V) x 2 bytes
// (bf16) = 131,072 bytes. With blocks of 16 positions:
//   request a: prompt 20, output 5 -> at most 25 positions: 2 blocks, from its first step on;
//   request b: prompt 10, output 3 -> at most 13 positions: 1 block.
// Both arrive at 0 and, in demand mode, run together from the first step, so the peak is
// 3 blocks = 48 positions x 131,072 = 6,291,456 bytes. 8 tokens are generated in all, and
// the run ends with nothing allocated.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <utility>
#include <vector>

#include "kvsim/allocator.h"
#include "kvsim/cost_model.h"
#include "kvsim/model.h"
#include "kvsim/replay.h"
#include "kvsim/trace.h"

namespace {

// A trace from a vector: TraceReader is the library's extension point for request sources.
class MemoryTrace final : public kvsim::TraceReader {
 public:
  explicit MemoryTrace(std::vector<kvsim::Request> requests)
      : TraceReader("(in memory)"), requests_(std::move(requests)) {}
  bool next(kvsim::Request& out) override {
    if (next_ == requests_.size()) return false;
    out = requests_[next_++];
    return true;
  }
  kvsim::TraceFormat format() const override { return kvsim::TraceFormat::native_csv; }
  std::int64_t bytes_read() const override { return static_cast<std::int64_t>(next_); }
  std::int64_t total_bytes() const override { return static_cast<std::int64_t>(requests_.size()); }

 private:
  std::vector<kvsim::Request> requests_;
  std::size_t next_ = 0;
};

kvsim::Request request(const char* id, std::int64_t prompt_tokens, std::int64_t output_tokens) {
  kvsim::Request r;
  r.id = id;
  r.prompt_tokens = prompt_tokens;
  r.output_tokens = output_tokens;
  return r;
}

}  // namespace

int main() {
  const kvsim::ModelSpec& model = kvsim::find_model_preset("llama-3.1-8b");
  kvsim::ReplayOptions options;
  options.layout = kvsim::kv_layout(model, kvsim::KvOptions{});
  // The cost model is public API; its step length does not change the memory figures.
  options.cost = kvsim::parse_cost_model("constant:step=20ms,prefill-token=100us", kvsim::CostModel{}, "cost");
  kvsim::apply_vllm_scheduler_defaults(options);  // demand mode: leaves the limits unlimited

  const auto allocator = kvsim::make_allocator(kvsim::parse_allocator_spec("paged:block=16", "allocator"),
                                               options.layout);
  MemoryTrace trace({request("a", 20, 5), request("b", 10, 3)});
  const kvsim::ReplayReport report = kvsim::replay(trace, *allocator, options);

  std::printf("bytes per token %lld\n", static_cast<long long>(options.layout.bytes_per_token()));
  std::printf("completed %lld, generated tokens %lld\n", static_cast<long long>(report.completed),
              static_cast<long long>(report.generated_tokens));
  std::printf("peak allocated bytes %lld\n", static_cast<long long>(report.allocated_bytes.peak));
  std::printf("leak free %s\n", report.leak_free ? "yes" : "no");
  const bool as_worked_out = options.layout.bytes_per_token() == 131'072 && report.completed == 2 &&
                             report.generated_tokens == 8 && report.allocated_bytes.peak == 6'291'456 &&
                             report.leak_free;
  if (!as_worked_out) std::fprintf(stderr, "kvsim_consumer: the figures differ from the worked example\n");
  return as_worked_out ? 0 : 1;
}
