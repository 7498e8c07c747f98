// The plan of an external job: the scenario compiled into the JSON the Python agent reads
// (RUN/plan.json, $NANCHAOS_PLAN; docs/scenario-format.md "External jobs"). The agent only parses
// JSON, never TOML, so every default is filled here.
//
//   {"version": 1, "scenario": "nan-x", "seed": 7, "steps": 30, "micro_batches": 1, "world": 2,
//    "collective_timeout_ms": 10000, "dry_run": false,
//    "faults": [{"index": 0, "kind": "tensor", "ranks": [1], "step": 10, "repeat": 1,
//                "probability": 1.0, "persistent": false,
//                "params": {"target": "activation:net.1", "value": "nan", "factor": null, ...},
//                "given": ["target"]}]}
//
// Values: floats as numbers, NaN/±inf as "nan"/"inf"/"-inf", "forever" as -1, ranks "all" or
// an array; "params" holds exactly the keys the kind declares (null when a key has no value);
// "given" lists the params written in the file. Torch-free; a pure function.
#pragma once

#include <nlohmann/json.hpp>

#include "harness/scenario/scenario.h"

namespace nanchaos::harness {

/// Compiles `s` (s.seed is the effective seed of this trial). `dry_run`: `nanchaos targets`'s
/// probe job, which the agent ends at the start of iteration 1.
nlohmann::ordered_json compile_plan(const Scenario& s, bool dry_run = false);

/// A plan read back (the C++ agent's side of compile_plan; inject/agent.h): a Scenario holding
/// what the plan carries (name, seed, [job].steps, ranks, micro_batches, collective_timeout_ms
/// and the faults with their params typed by the kind's KeySpecs; "given" params are marked
/// given), and the dry-run flag. Everything else keeps its default.
struct PlanRead {
  Scenario scenario;
  bool dry_run = false;
};

/// Parses plan JSON as compile_plan writes it. Throws std::runtime_error naming `source` (e.g.
/// "$NANCHAOS_PLAN") and the field on a plan it cannot read: not an object, a version other
/// than 1, an unknown fault kind, a param of the wrong type.
PlanRead read_plan(const nlohmann::json& plan, const std::string& source);

/// Across the launches of a job ([job] restarts), a fault fires as across a rollback: a one-shot
/// fault that fired in an earlier launch does not fire again, a `persistent` one does. Removes
/// from `s.faults` every fault whose index is in `fired` and that is not persistent; the others
/// keep their index (the generator's draws are keyed by it). Applied by the controller to the
/// plan of an external launch and by a built-in rank to its scenario (`rank --skip-faults`).
void drop_fired_faults(Scenario& s, const std::vector<int>& fired);

/// Elements fault `f` hits in a tensor of `numel` elements (harness/common/rng.h element_count):
/// its `fraction` when written, else its `count` (1 when the kind has no `count` key).
int64_t fault_element_count(const FaultSpec& f, int64_t numel);

/// The random half of a plan, resolved for targets of `numel` elements (docs/generator.md):
/// for each fault, every step in [0, [job].steps) at which it fires on some rank of
/// [0, [job].ranks) (window, ranks and probability draw), the ranks it fires on, and, for kinds
/// that pick elements (those declaring `count`), the ascending flat indices it hits there.
/// First executions only: after a rollback a persistent fault repeats the same draws.
///
///   {"scenario": "x", "seed": 7, "numel": 64,
///    "faults": [{"index": 0, "kind": "tensor", "fires": [{"step": 3, "ranks": [1],
///                                                         "elements": [17]}]}]}
///
/// The same on every compiler and standard library (a CI step compares a g++ and a clang++
/// build: tests/fuzz/plan_tool.cpp, .ci/fuzz-short).
nlohmann::ordered_json plan_draws(const Scenario& s, int64_t numel);

}  // namespace nanchaos::harness
