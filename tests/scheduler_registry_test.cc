// The scheduler registry's checklist: every registered policy is named, documented, found by
// its name, and reports itself; an unknown name is an error listing the known ones.
// (allocator_contract_test.cc runs every registered policy under tight budgets.)
#include <catch2/catch.hpp>
#include <set>

#include "kvsim/allocator.h"
#include "kvsim/error.h"
#include "kvsim/replay.h"
#include "test_support.h"

using namespace kvsim;

TEST_CASE("scheduler registry: names are unique, found by name, and each policy reports itself") {
  std::set<std::string_view> names;
  for (const PolicyInfo& p : policies()) {
    INFO(p.name);
    CHECK(!p.help.empty());
    CHECK(names.insert(p.name).second);
    CHECK(find_policy(p.name, "--policy").name == p.name);
    // One request of prompt 20, output 2 under a budget of 64 positions: the report names
    // the policy the run used, starting with its registered name.
    ReplayOptions o;
    o.layout = test::unit_layout(1024);
    o.memory.kv_budget_bytes = 64;
    o.memory.policy = Policy{std::string(p.name)};
    AllocatorLimits limits;
    limits.capacity_bytes = 64;
    auto allocator = make_allocator(parse_allocator_spec("paged:block=16", "test"), o.layout, limits);
    RequestVectorReader trace({test::request("a", 0, 20, 2)});
    const ReplayReport r = replay(trace, *allocator, o);
    CHECK(r.completed == 1);
    CHECK(r.policy.rfind(std::string(p.name) + " (", 0) == 0);
  }
  // The built-in constants are registered names.
  for (const Policy& p : {Policy::vllm, Policy::reserve, Policy::sglang}) CHECK(names.count(p.name) == 1);
}

TEST_CASE("scheduler registry: an unknown policy is an error listing the known ones") {
  // "expected vllm, reserve, ... or <last>, got "fcfs"", naming every registered policy.
  std::string message;
  try {
    find_policy("fcfs", "--policy");
  } catch (const InputError& e) {
    message = e.what();
  }
  CHECK_THAT(message, Catch::Contains("expected vllm, reserve") && Catch::Contains(" or ") &&
                          Catch::Contains("got \"fcfs\""));
  for (const PolicyInfo& p : policies()) CHECK_THAT(message, Catch::Contains(std::string(p.name)));
  // From the library too: a run under a budget with an unregistered policy does not start.
  ReplayOptions o;
  o.layout = test::unit_layout(1024);
  o.memory.kv_budget_bytes = 64;
  o.memory.policy = Policy{"fcfs"};
  AllocatorLimits limits;
  limits.capacity_bytes = 64;
  auto allocator = make_allocator(parse_allocator_spec("paged:block=16", "test"), o.layout, limits);
  RequestVectorReader trace({test::request("a", 0, 20, 2)});
  CHECK_THROWS_AS(replay(trace, *allocator, o), InputError);
}
