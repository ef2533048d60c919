// The allocator registry: every allocator kind kvsim knows, in one table.
//
// parse_allocator_spec(), parse_allocator_list(), make_allocator() and allocator_help() all
// read this table, and so does the allocator contract test, which runs every registered kind.
// A kind missing from the table is unknown everywhere (an InputError listing the known
// ones); there is no default kind to fall back to.
//
// To add a kind: one file in src/ (the build compiles every .cc there) holding its allocator,
// a factory reading its parameters through AllocatorParams, and its AllocatorKind, defined
// `extern constinit const AllocatorKind kNameKind{...}` in namespace kvsim::detail (as
// radix_allocator.cc defines kRadixKind); then one line, KVSIM_ALLOCATOR_KIND(kNameKind), in
// allocator_kinds.def (docs/architecture.md has the rules).
#ifndef KVSIM_SRC_ALLOCATOR_REGISTRY_H_
#define KVSIM_SRC_ALLOCATOR_REGISTRY_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvsim/allocator.h"
#include "kvsim/model.h"

namespace kvsim::detail {

// A spec's parameters as a factory reads them. Every parameter a factory asks for counts as
// known; make_allocator() then rejects any other the user gave, so a typo never falls back
// to a default silently.
class AllocatorParams {
 public:
  // `field` names the option in messages ("--allocator").
  AllocatorParams(const AllocatorSpec& spec, std::string_view field) : spec_(spec), field_(field) {}

  const AllocatorSpec& spec() const { return spec_; }
  // The value of `key`, or `fallback` when the spec does not give it.
  std::string text(std::string_view key, std::string_view fallback);
  bool has(std::string_view key) const;
  // The value of `key` as a positive integer, or `fallback`. Throws InputError otherwise.
  std::int64_t positive(std::string_view key, std::int64_t fallback);
  // Throws InputError about the spec: "'<spec>': <problem>", naming the field.
  [[noreturn]] void fail(const std::string& problem) const;
  // Throws InputError for the first parameter no text()/positive() call asked for.
  void finish() const;

 private:
  const AllocatorSpec& spec_;
  std::string_view field_;
  std::vector<std::string> used_;
};

using AllocatorFactory = std::unique_ptr<Allocator> (*)(AllocatorParams& params, const KvLayout& layout,
                                                        const AllocatorLimits& limits);

struct AllocatorKind {
  std::string_view name;      // what --allocator takes: "paged"
  // The kind's line in `kvsim replay --help`: its name and parameters with their defaults,
  // "paged[:block=16]".
  std::string_view usage;
  // What the kind models, for --help: lines of at most 90 columns, each indented by six
  // spaces and ended by "\n".
  std::string_view help;
  // The parameters the bare name stands for, "block=16" (or "" when it takes none): the
  // allocator built from "paged" and from "paged:block=16" is the same, and its name() is
  // "paged:block=16". Each key=value appears in `usage`.
  std::string_view defaults;
  // Builds the allocator from the spec's parameters. Throws InputError for bad values.
  AllocatorFactory make;
};

// Every allocator kind, in the order --help lists them.
std::span<const AllocatorKind> allocator_kinds();

// The registered kind called `name`, or nullptr.
const AllocatorKind* find_allocator_kind(std::string_view name);

// The spec the kind's bare name stands for, as the allocator's name() gives it:
// "paged:block=16" (just the name when it takes no parameters).
inline std::string default_spec(const AllocatorKind& kind) {
  std::string out(kind.name);
  if (!kind.defaults.empty()) out.append(":").append(kind.defaults);
  return out;
}

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_ALLOCATOR_REGISTRY_H_
