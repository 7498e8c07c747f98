// Shared set-up of the libFuzzer targets (docs/fuzzing.md): the fault-kind and detector
// registry from the snapshot (harness/scenario/registry_json.h) and a private scratch folder.
#pragma once

#include <string>

namespace nanchaos::fuzz {

/// Registers the fault kinds and detectors of tests/fuzz/registry.json (or of
/// $NANCHAOS_REGISTRY_JSON). Aborts with a message when it cannot be read.
void register_snapshot();

/// A folder of this process's own under $TMPDIR (or /tmp), made on first use and removed at
/// exit (a crash leaves it behind).
const std::string& scratch_dir();

/// Writes `bytes` to `path`, replacing it; aborts when it cannot (a harness problem, not a find).
void write_file(const std::string& path, const std::string& bytes);

/// The whole file, or aborts.
std::string read_file(const std::string& path);

}  // namespace nanchaos::fuzz
