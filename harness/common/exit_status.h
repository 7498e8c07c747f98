// The exit statuses of `nanchaos run`, `campaign` and `merge`, one table for CI (README.md "Exit
// statuses"): a pipeline tells "the stack under test failed" (1) from "the suite could not run"
// (2) from "it ran, reports are written, but some scenario or fault could not be judged" (3).
#pragma once

namespace nanchaos {

enum ExitStatus : int {
  kExitOk = 0,           ///< every scenario passed or was skipped; every campaign threshold met
  kExitCheckFailed = 1,  ///< an [expect] check failed (or --fail-on-skip and a skip); a
                         ///< [campaign] threshold missed
  kExitNothingRan = 2,   ///< usage or scenario-file error, missing launcher, bad --out: no job
                         ///< started, no report written
  kExitErrored = 3,      ///< reports written, but a scenario's verdict is `error` (its job could
                         ///< not be judged: a crash of the harness's own, a feature not built),
                         ///< a campaign fault could not be measured, or a merged part is missing
  kExitReportUnwritten = 4,  ///< jobs ran but a report file could not be written (disk, path)
  // 128 + N: stopped by signal N (SIGINT 130, SIGTERM 143), after writing the reports.
};

}  // namespace nanchaos
