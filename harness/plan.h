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

#include "harness/scenario.h"

namespace nanchaos::harness {

/// Compiles `s` (s.seed is the effective seed of this trial). `dry_run`: `nanchaos targets`'s
/// probe job, which the agent ends at the start of iteration 1.
nlohmann::ordered_json compile_plan(const Scenario& s, bool dry_run = false);

}  // namespace nanchaos::harness
