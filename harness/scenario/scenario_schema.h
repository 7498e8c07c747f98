// Key tables of the fixed scenario tables and helpers shared by every key declaration.
//
// The fixed tables ([scenario], [job], [workload], [recovery], [expect]) and the common keys of
// [[fault]] and [detectors] are declared in scenario_schema.cpp, the shared helpers below them
// (describe_expected, scenario_error, check_target_exists, ...) are defined in scenario_checks.cpp;
// fault kinds and detectors declare their own keys next to their code (inject/<kind>.cpp,
// detectors/<name>.cpp) with the same builder (key_builder.h, which the detectors include
// instead of this header):
//
//   Key("factor", KeyType::kFloat, "multiplies the learning rate").required().above(0)
//   Key("bit", KeyType::kInt, "bit of the float32 word to flip").def(30).range(0, 31)
//
// A fault kind's `check` reports a cross-key problem with scenario_error(), which throws a
// ScenarioError in the loader's format ("file:line:col: error: [[fault]] #1.count: ...").
//
// Thread-safety: every table is a function-local static built on first use and read-only after.
#pragma once

#include <string>
#include <vector>

#include "harness/scenario/key_builder.h"
#include "harness/scenario/keys.h"
#include "harness/scenario/scenario.h"

namespace nanchaos::harness {

// Fixed tables, in documentation order.
const std::vector<KeySpec>& scenario_keys();
const std::vector<KeySpec>& job_keys();
const std::vector<KeySpec>& workload_keys();
const std::vector<KeySpec>& recovery_keys();
/// [checkpoint] (built-in jobs' checkpoints).
const std::vector<KeySpec>& checkpoint_keys();
const std::vector<KeySpec>& expect_keys();
/// [campaign] thresholds (`nanchaos campaign` only).
const std::vector<KeySpec>& campaign_keys();
/// Keys every [[fault]] accepts besides its kind's keys (kind, ranks, step, repeat, ...).
const std::vector<KeySpec>& fault_common_keys();
/// Keys of [detectors] besides the ones registered detectors declare (preset, enabled, ...).
const std::vector<KeySpec>& detector_common_keys();

/// Top-level table names, in file order ("scenario", "job", "workload", "fault", ...).
const std::vector<std::string>& top_level_tables();
/// "integer >= 1", "float in (0, 1]", "string (one of: cpu, cuda)": what a key accepts.
std::string describe_expected(const KeySpec& spec);
/// A number as it would be written back: 1.5, 100000, 1e+30.
std::string format_number(double v);
/// "a, b, c"
std::string join(const std::vector<std::string>& items, const std::string& sep = ", ");

/// Throws ScenarioError "<pos>: error: <message>".
[[noreturn]] void scenario_error(const SourcePos& pos, const std::string& message);
/// "[[fault]] #2" for the fault with index 1 (numbered from 1 in messages, as people count).
std::string fault_label(const FaultSpec& fault);

/// Built-in workloads: throws a ScenarioError at params.pos("target") when fault.target
/// "activation:PATTERN" matches no module, or "parameter:PATTERN" / "gradient:PATTERN" no
/// parameter, of the model the scenario's [workload] configures (harness/scenario/model_spec.h;
/// matching as match_target). The message gives did-you-mean from the model's own names:
///   x.toml:11:10: error: [[fault]] #1.target: "activation:layer.1" names no module of the mlp
///   workload; did you mean "activation:layers.1"? modules: layers.0.linear, layers.0, ...
/// "loss", an unset key and external jobs pass: an external job's names are known only once it
/// attaches (the judge's run-time hint covers them).
void check_target_exists(const FaultSpec& fault, const Scenario& s);
/// The tail of a "names nothing" message: "; did you mean \"<prefix>x\"? <label>: a, b, ..." (at
/// most 24 names, then how many more and where to list them), or, for a layer index past
/// [workload].layers, "; [workload].layers = 3 gives layers.0 .. layers.2".
std::string name_hint(const std::string& name, const std::vector<std::string>& names,
                      const std::string& prefix, const std::string& label, const Scenario& s);
/// True when `name` matches the target pattern `pattern`, where `*` matches any run of characters
/// within one dot-separated segment ("blocks.*.attn.qkv.weight").
bool match_target(const std::string& pattern, const std::string& name);
/// Throws when both keys are written in the fault.
void check_exclusive(const FaultSpec& fault, const std::string& a, const std::string& b);

}  // namespace nanchaos::harness
