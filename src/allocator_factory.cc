// The allocator registry (allocator_registry.h): every allocator kind, its parameters and
// their defaults, and the parsing of --allocator that reads it.
#include <algorithm>
#include <string>

#include "allocator_registry.h"
#include "decimal.h"
#include "dense_static_allocator.h"
#include "dynamic_allocator.h"
#include "kvsim/allocator.h"
#include "kvsim/error.h"
#include "kvsim/option_names.h"
#include "kvsim/parse.h"
#include "kvsim/units.h"
#include "paged_allocator.h"

namespace kvsim {
namespace detail {

std::string AllocatorParams::text(std::string_view key, std::string_view fallback) {
  used_.emplace_back(key);
  for (const auto& [k, v] : spec_.params) {
    if (k == key) return v;
  }
  return std::string(fallback);
}

bool AllocatorParams::has(std::string_view key) const {
  return std::any_of(spec_.params.begin(), spec_.params.end(), [&](const auto& p) { return p.first == key; });
}

std::int64_t AllocatorParams::positive(std::string_view key, std::int64_t fallback) {
  const std::string value = text(key, std::to_string(fallback));
  std::int64_t out = 0;
  const DecimalStatus status = parse_non_negative(value, out);
  if (status == DecimalStatus::overflow) {
    fail("parameter '" + std::string(key) + "': \"" + value + "\" is too large (the largest is 9223372036854775807)");
  }
  if (status != DecimalStatus::ok || out <= 0) {
    fail("parameter '" + std::string(key) + "' expects a positive integer, got \"" + value + "\"");
  }
  return out;
}

void AllocatorParams::fail(const std::string& problem) const {
  throw InputError(Location{"", 0, std::string(field_)}, "'" + spec_.text + "': " + problem);
}

void AllocatorParams::finish() const {
  for (const auto& [k, v] : spec_.params) {
    if (std::find(used_.begin(), used_.end(), k) == used_.end()) {
      fail("unknown parameter '" + k + "' for allocator '" + spec_.kind + "' (see " + kReplayHelp + ")");
    }
  }
}

// The registry, allocator_kinds.def: one line per kind, naming an AllocatorKind defined
// `extern constinit const` (seen from here, and set before any code runs). Declared here.
#define KVSIM_ALLOCATOR_KIND(kind) extern const AllocatorKind kind;
#include "allocator_kinds.def"
#undef KVSIM_ALLOCATOR_KIND

namespace {

std::unique_ptr<Allocator> make_paged_kind(AllocatorParams& p, const KvLayout& layout, const AllocatorLimits& limits,
                                           bool free_outside_window) {
  PagedAllocatorOptions o;
  o.block_tokens = p.positive("block", o.block_tokens);
  o.free_outside_window = free_outside_window;
  o.capacity_bytes = limits.capacity_bytes;
  const std::string caching = p.text("prefix-caching", "off");
  if (caching == "on") o.prefix_caching = true;
  else if (caching != "off") p.fail("prefix-caching must be on or off, got \"" + caching + "\"");
  if (o.prefix_caching && free_outside_window) {
    for (const LayerGroup& g : layout.groups) {
      if (g.window_tokens > 0 && (g.window_tokens - 1) % o.block_tokens == 0) {
        // vLLM keeps the W - 1 positions before a hit's end (add_local_computed_blocks);
        // kvsim's effective tokens count W. They differ in whole blocks only here.
        p.fail("prefix-caching=on with sliding-window: layer group '" + g.name + "' has a window of " +
               std::to_string(g.window_tokens) + " tokens, one more than a multiple of block=" +
               std::to_string(o.block_tokens) + "; a hit would hold one position less than its window, which is "
               "not modelled; use another block size or paged");
      }
    }
  }
  return std::make_unique<PagedAllocator>(layout, o);
}

std::unique_ptr<Allocator> make_paged(AllocatorParams& p, const KvLayout& layout, const AllocatorLimits& limits) {
  return make_paged_kind(p, layout, limits, false);
}

std::unique_ptr<Allocator> make_sliding_window(AllocatorParams& p, const KvLayout& layout,
                                               const AllocatorLimits& limits) {
  return make_paged_kind(p, layout, limits, true);
}

std::unique_ptr<Allocator> make_dense_static(AllocatorParams& p, const KvLayout& layout,
                                             const AllocatorLimits& limits) {
  DenseStaticOptions o;
  const std::string reserve = p.text("reserve", "max-model-len");
  if (reserve == "max-model-len") o.reserve = Reserve::max_model_len;
  else if (reserve == "max-tokens") o.reserve = Reserve::max_tokens;
  else if (reserve == "pow2") o.reserve = Reserve::pow2;
  else if (reserve == "pow2-output") o.reserve = Reserve::pow2_output;
  else if (reserve == "oracle") o.reserve = Reserve::oracle;
  else p.fail("reserve must be max-model-len, max-tokens, pow2, pow2-output or oracle, got \"" + reserve + "\"");
  const std::string placement = p.text("placement", "none");
  if (placement == "none") o.placement = Placement::none;
  else if (placement == "first-fit") o.placement = Placement::first_fit;
  else if (placement == "buddy") o.placement = Placement::buddy;
  else p.fail("placement must be none, first-fit or buddy, got \"" + placement + "\"");
  if (o.reserve == Reserve::max_model_len && layout.max_model_len <= 0) {
    p.fail("reserve=max-model-len needs the model's maximum length, which this model does not give "
           "(no max_position_embeddings): pass " + std::string(kOptMaxModelLen));
  }
  // Every request's row is then the maximum length (a sliding group's, its window): a row
  // whose bytes overflow is known now.
  if (o.reserve == Reserve::max_model_len) {
    std::int64_t row_bytes = 0;
    for (const LayerGroup& g : layout.groups) {
      const std::int64_t positions =
          g.window_tokens > 0 ? std::min(g.window_tokens, layout.max_model_len) : layout.max_model_len;
      std::int64_t bytes = 0;
      if (__builtin_mul_overflow(positions, g.bytes_per_position, &bytes) ||
          __builtin_add_overflow(row_bytes, bytes, &row_bytes)) {
        p.fail("reserve=max-model-len: a row of " + std::to_string(layout.max_model_len) +
               " positions overflows 64 bits of bytes: pass a smaller " + std::string(kOptMaxModelLen));
      }
    }
  }
  o.capacity_bytes = limits.capacity_bytes;
  return std::make_unique<DenseStaticAllocator>(layout, o);
}

std::unique_ptr<Allocator> make_dynamic(AllocatorParams& p, const KvLayout& layout, const AllocatorLimits& limits) {
  DynamicOptions o;
  std::string growth = p.text("growth", p.has("chunk") ? "chunk" : "double");
  // "growth=chunk=256" says growth=chunk,chunk=256 in one parameter.
  std::string chunk_text;
  if (growth.starts_with("chunk=")) {
    if (p.has("chunk")) p.fail("give the chunk once: growth=chunk=N or growth=chunk,chunk=N");
    chunk_text = growth.substr(6);
    growth = "chunk";
  }
  if (growth == "exact") o.growth = Growth::exact;
  else if (growth == "double") o.growth = Growth::doubling;
  else if (growth == "chunk") o.growth = Growth::chunk;
  else p.fail("growth must be exact, double, chunk or chunk=N, got \"" + growth + "\"");
  if (chunk_text.empty()) {
    o.chunk_tokens = p.positive("chunk", o.chunk_tokens);
  } else if (parse_non_negative(chunk_text, o.chunk_tokens) != DecimalStatus::ok || o.chunk_tokens <= 0) {
    p.fail("growth=chunk=N expects a positive integer, got \"" + chunk_text + "\"");
  }
  if (o.growth != Growth::chunk && p.has("chunk")) p.fail("'chunk' only applies to growth=chunk");
  o.capacity_bytes = p.has("arena") ? 0 : limits.capacity_bytes;
  if (p.has("arena")) {
    o.capacity_bytes = parse_byte_size(p.text("arena", ""), std::string(kOptAllocator) + " dynamic:arena");
    if (o.capacity_bytes <= 0) p.fail("arena must be a positive byte size");
    o.arena_option = o.capacity_bytes;
    // The budget is the device's memory: an arena cannot be larger (the engine would plan
    // against one bound while the allocator placed against another).
    if (limits.capacity_bytes > 0 && o.capacity_bytes > limits.capacity_bytes) {
      p.fail("arena (" + std::to_string(o.capacity_bytes) + " bytes) is larger than the memory budget (" +
             std::to_string(limits.capacity_bytes) + " bytes)");
    }
  }
  return std::make_unique<DynamicAllocator>(layout, o);
}

}  // namespace

extern constinit const AllocatorKind kPagedKind{
    "paged", "paged[:block=16][,prefix-caching=off|on]",
    "      vLLM PagedAttention: fixed blocks of `block` positions from one pool, a block table\n"
    "      per sequence, the n samples of a request sharing the prompt's full blocks\n"
    "      copy-on-write. Sliding-window layers are stored like full attention.\n"
    "      prefix-caching=on: vLLM's automatic prefix caching. Full prompt blocks are kept\n"
    "      by their prefix hashes after release (evictable, least recently freed first) and\n"
    "      reused by later requests with the same prefix; under a budget every other full\n"
    "      block (generated tokens) is kept too, for its own request after a preemption.\n",
    "block=16", make_paged};

extern constinit const AllocatorKind kSlidingWindowKind{
    "sliding-window", "sliding-window[:block=16][,prefix-caching=off|on]",
    "      paged, and blocks that fall wholly behind a sliding-window group's window are freed\n"
    "      as the sequence advances (vLLM's hybrid allocator); full-attention groups keep all.\n"
    "      prefix-caching=on: vLLM's hybrid prefix caching rules (a sliding group needs only\n"
    "      the blocks of one window before a hit's end cached; freed blocks stay cached).\n"
    "      Under a budget, groups of different windows draw on one free queue, as in vLLM.\n",
    "block=16", make_sliding_window};

extern constinit const AllocatorKind kDenseStaticKind{
    "dense-static", "dense-static[:reserve=max-model-len|max-tokens|pow2|pow2-output|oracle][,placement=none|first-fit|buddy]",
    "      each sample reserves a fixed row at admission: the model's maximum length (default),\n"
    "      prompt + max_tokens, the next power of two of its final length, the prompt plus its\n"
    "      output rounded up to a power of two (pow2-output, the vLLM paper's Orca (Pow2)), or\n"
    "      its true final length; no row passes the maximum length. Sliding-window groups\n"
    "      hold min(W, row) as a ring (Hugging Face StaticCache). placement=first-fit|buddy\n"
    "      (under a budget): each request's reservation is one contiguous extent in an arena\n"
    "      the size of the budget, so it can fail with room free (external fragmentation);\n"
    "      none (default) only counts bytes.\n",
    "reserve=max-model-len", make_dense_static};

extern constinit const AllocatorKind kDynamicKind{
    "dynamic", "dynamic[:growth=double|exact|chunk][,chunk=256][,arena=BYTES]",
    "      a contiguous buffer per sample and layer group that grows (by doubling, exactly, or\n"
    "      by chunks of `chunk` positions; growth=chunk=N for short) and is copied on growth,\n"
    "      placed first-fit in one arena (Hugging Face DynamicCache). arena bounds the arena\n"
    "      (default unbounded; at most the budget) and the run with it, as a budget does.\n",
    "growth=double", make_dynamic};

namespace {

bool is_kind(std::string_view text) { return find_allocator_kind(text.substr(0, text.find(':'))) != nullptr; }

// Whether an item of an --allocator list (the text between two commas) begins a spec rather
// than giving a parameter of the one before: a registered kind, or anything but key=value
// (a word without '=', or a ':' before the first '='), so that an unknown kind is named on
// its own in the error, "unknown allocator 'slab'", not glued to the spec before it.
bool starts_spec(std::string_view item) {
  if (item.empty()) return false;  // refused before the list is split
  const auto equals = item.find('=');
  return is_kind(item) || equals == std::string_view::npos || item.find(':') < equals;
}

}  // namespace

std::span<const AllocatorKind> allocator_kinds() {
  static const AllocatorKind kinds[] = {
#define KVSIM_ALLOCATOR_KIND(kind) kind,
#include "allocator_kinds.def"
#undef KVSIM_ALLOCATOR_KIND
  };
  return kinds;
}

const AllocatorKind* find_allocator_kind(std::string_view name) {
  for (const AllocatorKind& kind : allocator_kinds()) {
    if (kind.name == name) return &kind;
  }
  return nullptr;
}

}  // namespace detail

AllocatorSpec parse_allocator_spec(std::string_view text, std::string_view field) {
  AllocatorSpec spec;
  spec.text = std::string(text);
  const auto colon = text.find(':');
  spec.kind = std::string(text.substr(0, colon));
  if (detail::find_allocator_kind(spec.kind) == nullptr) {
    std::string known;
    for (const auto& k : detail::allocator_kinds()) known += (known.empty() ? "" : ", ") + std::string(k.name);
    throw InputError(Location{"", 0, std::string(field)},
                     "unknown allocator '" + spec.kind + "' (known: " + known + ")");
  }
  if (colon == std::string_view::npos) return spec;
  for (const auto& [key, value] : parse_key_values(text.substr(colon + 1), field, "'" + spec.text + "': ")) {
    spec.params.emplace_back(std::string(key), std::string(value));
  }
  return spec;
}

std::vector<AllocatorSpec> parse_allocator_list(std::string_view text, std::string_view field) {
  // "dense-static:reserve=oracle,paged:block=32,sliding-window": a comma followed by a
  // spec (starts_spec) starts the next one; a comma followed by key=value separates
  // parameters.
  // An empty entry (two commas, or one at an end) names nothing, allocator or parameter.
  if (!text.empty() && (text.front() == ',' || text.back() == ',' || text.find(",,") != std::string_view::npos)) {
    throw InputError(Location{"", 0, std::string(field)},
                     "'" + std::string(text) + "': a ',' with nothing " + (text.front() == ',' ? "before" : "after") +
                         " it: expected an allocator or key=value");
  }
  std::vector<AllocatorSpec> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() ||
        (text[i] == ',' && detail::starts_spec(text.substr(i + 1, text.find(',', i + 1) - (i + 1))))) {
      out.push_back(parse_allocator_spec(text.substr(start, i - start), field));
      start = i + 1;
    }
  }
  return out;
}

std::unique_ptr<Allocator> make_allocator(const AllocatorSpec& spec, const KvLayout& layout,
                                          const AllocatorLimits& limits) {
  const detail::AllocatorKind* kind = detail::find_allocator_kind(spec.kind);
  detail::AllocatorParams p(spec, kOptAllocator);
  // A spec not made by parse_allocator_spec may name anything: unknown is an error here too.
  if (kind == nullptr) p.fail("unknown allocator '" + spec.kind + "' (see " + kReplayHelp + ")");
  std::unique_ptr<Allocator> made;
  try {
    made = kind->make(p, layout, limits);
  } catch (const InputError& e) {
    // A product of the spec's sizes and the model's that overflows names no option where it
    // is found (checked_mul): here it is this spec's, with this model.
    if (!e.where().file.empty() || !e.where().field.empty()) throw;
    p.fail(e.problem() + " with this model's bytes per position");
  }
  p.finish();
  return made;
}

std::string allocator_help() {
  std::string out = std::string("Allocators (") + kOptAllocator + " KIND[:key=value,...], several separated by commas):\n";
  for (const auto& kind : detail::allocator_kinds()) {
    out += "  ";
    out += kind.usage;
    out += "\n";
    out += kind.help;
  }
  return out;
}

}  // namespace kvsim
