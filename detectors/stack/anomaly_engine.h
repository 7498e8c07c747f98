// Autograd anomaly mode without the forward's C++ backtrace.
//
// LibTorch's anomaly mode (torch::autograd::AnomalyMode, PyTorch's detect_anomaly) does two
// things:
//   1. every backward Node checks its outputs, and the first that returns NaN throws
//      "Function 'XBackward0' returned nan values in its 0th output": the check nanchaos reads
//      (detectors/anomaly.cpp, the replay's anomaly_op);
//   2. every Node created in the forward stores the call stack of its creation
//      (AnomalyMetadata::store_stack, c10::get_backtrace, which symbolizes each frame through
//      dladdr), printed only in the warning that precedes the error.
// On LibTorch 1.13 (Debian 12) the second costs ~110 ms of a replay whose step takes ~4 ms on the
// 2-rank mlp: perf put libc's _dl_addr at 34 % of a whole run with replays. nanchaos never reads
// that backtrace, so it installs an autograd engine whose anomaly metadata stores none, the same
// hook PyTorch's Python engine uses to store the Python traceback instead
// (torch/csrc/autograd/python_engine.cpp: Engine::make_anomaly_metadata, set_default_engine_stub).
// The NaN check (1) is untouched: the engine is LibTorch's own otherwise.
#pragma once

namespace nanchaos::detect {

/// Makes the process's default autograd engine one whose anomaly metadata records no forward
/// backtrace and prints nothing. Idempotent and thread-safe; call it before anomaly mode is
/// turned on (Nodes made earlier keep LibTorch's metadata). Never throws. It does not turn
/// anomaly mode on.
void use_traceless_anomaly_metadata();

/// True when use_traceless_anomaly_metadata() ran in this process.
bool traceless_anomaly_metadata_in_use();

/// Anomaly mode on for as long as any hold lives. LibTorch's mode is one flag for the whole
/// process and every thread, and its DetectAnomalyGuard turns it off when it goes, whoever else
/// still wants it: a replay's guard ended the always-on `anomaly` detector's mode for the rest of
/// the run, and with ranks as threads of one process (harness/comm/in_process.h) one rank's replay
/// ended another's mid-backward. Holds are counted under a lock; the first turns the mode on
/// (with the NaN check) and the last puts back what was there before the first. Never throws.
class AnomalyModeHold {
 public:
  AnomalyModeHold();
  ~AnomalyModeHold();
  AnomalyModeHold(const AnomalyModeHold&) = delete;
  AnomalyModeHold& operator=(const AnomalyModeHold&) = delete;
};

/// How many AnomalyModeHold live in this process now (for tests).
int anomaly_mode_holds();

}  // namespace nanchaos::detect
