// Generated key reference: every scenario key from the declarations themselves (the fixed tables
// in scenario_schema.cpp, each fault kind's and detector's own table). `nanchaos keys` prints it;
// docs/keys.md is its committed output and a test keeps the two identical.
#pragma once

#include <string>

namespace nanchaos::harness {

/// Markdown reference of every table and key: type and range, default, meaning, and for fault
/// kinds and detectors whether they are built yet.
std::string keys_markdown();

}  // namespace nanchaos::harness
