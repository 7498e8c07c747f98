// Progress of a running suite, on stderr (stdout keeps the console table and nothing else).
//
// - One line per finished scenario: `[3/32] pass  nan-grad-rank1  4.2 s` (with --trials N > 1
//   also `  (5/5 trials passed)`); the time is the scenario's wall time over all its trials (s).
// - When the stream is a terminal, a status line `\r` redrawn once a second:
//   `scenario 3 of 32 · trial 2/5 · elapsed 1m02s · nan-grad-rank1` (the trial part only with
//   N > 1); with `--jobs`, while several run: `scenarios 3, 4 of 32 · elapsed 1m02s · a, b`.
//   It is erased before each finished-scenario line and when the suite ends, so the lines
//   above never carry a half-drawn status. Scenarios finish in any order under `--jobs`: a
//   finished line's [i/N] is the scenario's place in the suite and its time its own.
// `nanchaos run --quiet` constructs it disabled: it prints nothing.
// Thread-safety: any thread may call every method (the `--jobs` workers do); a private ticker
// thread redraws the status line (terminal only) under the same mutex. Never blocks longer
// than a write.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "results/report.h"

namespace nanchaos::harness {

/// "1m02s", "4.2 s" style durations used by the progress lines.
std::string format_elapsed(double seconds);

class Progress {
 public:
  /// `total` scenarios; nothing is printed when !enabled. `out` defaults to stderr; `tty`
  /// overrides isatty(fileno(out)) (tests).
  Progress(size_t total, bool enabled, std::FILE* out = stderr, int tty = -1);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// Scenario `index` (0-based) starts trial `trial` (0-based) of `trials`.
  void start(size_t index, const std::string& name, int trial, int trials);
  /// Scenario `index` is judged: erases the status line and prints its finished line.
  void finish(size_t index, const results::ScenarioResult& r);
  /// Erases the status line and stops the ticker (also done by the destructor).
  void done();

 private:
  void draw_locked();
  void erase_locked();

  size_t total_;
  bool enabled_;
  std::FILE* out_;
  bool tty_;
  struct Running {
    std::string name;
    int trial = 0, trials = 1;
    std::chrono::steady_clock::time_point start;  ///< its first trial's
  };

  std::chrono::steady_clock::time_point suite_start_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread ticker_;
  bool stop_ = false;
  bool drawn_ = false;                 ///< the status line is on the terminal now
  std::map<size_t, Running> running_;  ///< by suite index: the status line shows them
};

}  // namespace nanchaos::harness
