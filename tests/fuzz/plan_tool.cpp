// nanchaos_plan_tool: prints, one JSON line per scenario file, the compiled plan and its resolved
// draws (harness/scenario/plan.h compile_plan, plan_draws), or the loader's error. Torch-free:
// fault kinds and detectors come from the registry snapshot (harness/scenario/registry_json.h), so
// a g++ and a clang++ build run the same code and must print the same bytes (.ci/fuzz-short diffs
// them: same seed, same plan, on either compiler and standard library).
//
//   nanchaos_plan_tool --registry tests/fuzz/registry.json [--numel 64] FILE...
//
// Exit status: 0, or 2 on bad arguments or an unreadable registry.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "harness/scenario/plan.h"
#include "harness/scenario/registry_json.h"
#include "harness/scenario/scenario.h"

int main(int argc, char** argv) {
  using namespace nanchaos::harness;
  std::string registry;
  int64_t numel = 64;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--registry" && i + 1 < argc) {
      registry = argv[++i];
    } else if (a == "--numel" && i + 1 < argc) {
      numel = std::strtoll(argv[++i], nullptr, 10);
    } else {
      files.push_back(a);
    }
  }
  if (registry.empty() || numel < 1) {
    std::cerr << "usage: nanchaos_plan_tool --registry REGISTRY.json [--numel N>=1] FILE...\n";
    return 2;
  }
  try {
    std::ifstream in(registry, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open");
    register_from_json(nlohmann::json::parse(in));
  } catch (const std::exception& e) {
    std::cerr << "nanchaos_plan_tool: " << registry << ": " << e.what() << "\n";
    return 2;
  }
  for (const auto& f : files) {
    nlohmann::ordered_json line;
    line["file"] = f;
    try {
      const Scenario s = load_scenario(f);
      line["plan"] = compile_plan(s);
      line["draws"] = plan_draws(s, numel);
    } catch (const ScenarioError& e) {
      line["error"] = e.what();
    }
    std::cout << line.dump() << "\n";
  }
  return 0;
}
