// The allocator registry's checklist: what every registered kind must provide, checked for
// each of them, so that a row added to allocator_kinds() is complete or fails here.
// (allocator_contract_test.cc runs every kind through the allocator contract.) The engine
// fuzzer draws the built-in kinds with parameters and any other by its bare name; the last
// case here checks that it reaches every kind.
#include <catch2/catch.hpp>
#include <set>

#include "allocator_registry.h"
#include "engine_checks.h"
#include "kvsim/allocator.h"
#include "kvsim/error.h"
#include "test_support.h"

using namespace kvsim;

namespace {

KvLayout hybrid_layout() {
  KvLayout l;
  l.max_model_len = 1024;
  l.groups = {test::group("full", 3), test::group("sliding 40", 5, 40)};
  return l;
}

}  // namespace

TEST_CASE("allocator registry: names are unique and each kind is documented") {
  std::set<std::string_view> names;
  const std::string help = allocator_help();
  for (const auto& kind : detail::allocator_kinds()) {
    INFO(kind.name);
    CHECK(!kind.name.empty());
    CHECK(kind.name.find_first_of(":,=") == std::string_view::npos);
    CHECK(names.insert(kind.name).second);
    CHECK(kind.make != nullptr);
    // The usage line starts with the name; the bare name's defaults are shown in it.
    CHECK((kind.usage == kind.name || kind.usage.starts_with(std::string(kind.name) + "[")));
    std::string_view defaults = kind.defaults;
    while (!defaults.empty()) {
      const auto comma = defaults.find(',');
      CHECK(kind.usage.find(defaults.substr(0, comma)) != std::string_view::npos);
      defaults = comma == std::string_view::npos ? std::string_view() : defaults.substr(comma + 1);
    }
    // The help paragraph: non-empty, lines indented by six spaces, ended by a line break.
    REQUIRE(!kind.help.empty());
    CHECK(kind.help.ends_with("\n"));
    for (std::size_t at = 0; at < kind.help.size(); at = kind.help.find('\n', at) + 1) {
      CHECK(kind.help.substr(at, 6) == "      ");
      CHECK(kind.help.find('\n', at) - at <= 90);
    }
    CHECK(help.find("\n  " + std::string(kind.usage) + "\n" + std::string(kind.help)) != std::string::npos);
    CHECK(detail::find_allocator_kind(kind.name) == &kind);
  }
}

TEST_CASE("allocator registry: every kind builds from its bare name and from its defaults, the same allocator") {
  const KvLayout layout = hybrid_layout();
  for (const auto& kind : detail::allocator_kinds()) {
    INFO(kind.name);
    const AllocatorSpec bare = parse_allocator_spec(kind.name, "test");
    CHECK(bare.kind == kind.name);
    CHECK(bare.params.empty());
    const auto from_bare = make_allocator(bare, layout);
    const auto from_defaults = make_allocator(parse_allocator_spec(detail::default_spec(kind), "test"), layout);
    CHECK(from_bare->name() == detail::default_spec(kind));
    CHECK(from_defaults->name() == detail::default_spec(kind));
    from_bare->check_invariants();
    // A parameter the kind does not know is an error, not a default.
    CHECK_THROWS_WITH(make_allocator(parse_allocator_spec(std::string(kind.name) + ":no-such=1", "test"), layout),
                      Catch::Contains("unknown parameter 'no-such'"));
  }
}

TEST_CASE("allocator registry: lists of kinds split on kind names, unknown kinds list the registered ones") {
  std::string all;
  for (const auto& kind : detail::allocator_kinds()) all += (all.empty() ? "" : ",") + detail::default_spec(kind);
  const auto specs = parse_allocator_list(all, "--allocator");
  REQUIRE(specs.size() == detail::allocator_kinds().size());
  for (std::size_t i = 0; i < specs.size(); ++i) CHECK(specs[i].kind == detail::allocator_kinds()[i].name);

  try {
    parse_allocator_spec("no-such-kind:block=4", "--allocator");
    FAIL("no error");
  } catch (const InputError& e) {
    const std::string message = e.what();
    CHECK_THAT(message, Catch::Contains("--allocator") && Catch::Contains("unknown allocator 'no-such-kind'"));
    for (const auto& kind : detail::allocator_kinds()) CHECK_THAT(message, Catch::Contains(std::string(kind.name)));
  }
  // In a list, an unknown kind is named on its own, not with the spec before it; a word after
  // a comma is a spec, and key=value a parameter of the spec before.
  for (const char* list : {"paged,dynamic,slab", "slab,paged", "paged:block=16,slab:page=4"}) {
    INFO(list);
    CHECK_THROWS_WITH(parse_allocator_list(list, "--allocator"), Catch::Contains("unknown allocator 'slab'"));
  }
  const auto two = parse_allocator_list("paged:block=32,prefix-caching=on,dynamic", "--allocator");
  REQUIRE(two.size() == 2);
  CHECK(two[0].params.size() == 2);
  CHECK(two[1].kind == "dynamic");
  // A spec built by hand with an unknown kind is refused too, never built as some default.
  AllocatorSpec made_up;
  made_up.kind = "no-such-kind";
  made_up.text = "no-such-kind";
  CHECK_THROWS_WITH(make_allocator(made_up, hybrid_layout()), Catch::Contains("unknown allocator 'no-such-kind'"));
}

TEST_CASE("allocator registry: the engine fuzzer replays every kind") {
  // decode_engine_case (fuzz/engine_checks.h) reads two bytes for the full-attention group's
  // bytes per position, a flip for a sliding group and a flip for a maximum length (both
  // off when 0), then two bytes whose value modulo the number of choices picks the
  // allocator: the values 0..1023 there reach every choice of a list of up to 1,024.
  std::set<std::string> fuzzed;
  for (std::uint32_t choice = 0; choice < 1024; ++choice) {
    const std::uint8_t bytes[] = {0, 0, 0, 0, static_cast<std::uint8_t>(choice & 0xFF), static_cast<std::uint8_t>(choice >> 8)};
    const auto c = kvsim::fuzz::decode_engine_case(bytes, sizeof bytes);
    fuzzed.insert(parse_allocator_spec(c.allocator, "fuzz").kind);
  }
  for (const auto& kind : detail::allocator_kinds()) {
    // Built-in kinds from its list, any other by its bare name (choice 6 and on).
    INFO(kind.name << ": decode_engine_case (fuzz/engine_checks.h) no longer reaches it");
    CHECK(fuzzed.count(std::string(kind.name)) == 1);
  }
}
