// libFuzzer target nanchaos_fuzz_report: the files the harness reads back.
//
// Byte 0 picks the reader (even: report, odd: event logs):
// - report: the rest is a report.json as `nanchaos compare` reads it (load_report), then compared
//   with a baseline (a cut of the committed one) both ways, rendered in every format, and the
//   whole command (run_compare). Campaign files do not exist yet; compare's input is all there is.
// - event logs: byte 1 picks a shipped scenario, byte 2 how the job ended (exit status, timeout);
//   the rest is split at form feeds ('\f') into events/rank-<r>.jsonl of a run folder, which the
//   judge reads (read_events, judge) and whose result is serialized as report.json would be.
//
// The contracts under test: load_report throws only CompareInputError (naming the file);
// compare_reports and the renderings never throw on a report load_report accepted; run_compare
// returns 0/1/2 and never throws; the judge never throws on any event log. Anything else
// (another exception, a crash, an ASan/UBSan report, a hang) is a bug.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "harness/controller/judge.h"
#include "harness/scenario/scenario.h"
#include "results/compare.h"
#include "results/report.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

using namespace nanchaos;

nlohmann::json g_baseline;
std::string g_baseline_path;
std::vector<harness::Scenario> g_scenarios;

void fuzz_report(const std::string& bytes) {
  const std::string path = fuzz::scratch_dir() + "/report.json";
  fuzz::write_file(path, bytes);
  nlohmann::json report;
  try {
    report = results::load_report(path);
  } catch (const results::CompareInputError&) {
    return;  // refused with a message naming the file
  }
  for (const auto& s : report["scenarios"]) (void)results::scenario_side(s);
  results::CompareOptions common;
  common.common_only = true;
  for (const auto& c : {results::compare_reports(g_baseline, report),
                        results::compare_reports(report, g_baseline, common)}) {
    (void)results::format_markdown(c);
    (void)results::format_text(c);
    (void)results::format_json(c).dump();
  }
  std::ostringstream out, err;
  (void)results::run_compare(g_baseline_path, path, {}, "md", out, err);
}

void fuzz_events(const uint8_t* data, size_t size) {
  if (size < 3 || g_scenarios.empty()) return;
  const harness::Scenario& s = g_scenarios[data[1] % g_scenarios.size()];
  static const int kExits[] = {0, 1, 2, 134, 137, 143};
  harness::JobResult job;
  job.exit_code = kExits[(data[2] >> 1) % 6];
  job.timed_out = data[2] & 1;
  job.t0_us = 1;
  job.t_end_us = 5000000;
  const std::string dir = fuzz::scratch_dir();
  std::vector<std::string> logs(1);
  for (size_t i = 3; i < size; ++i) {
    if (data[i] == '\f' && logs.size() < 8)
      logs.emplace_back();
    else
      logs.back().push_back(char(data[i]));
  }
  for (int r = 0; r < 8; ++r) {
    const std::string file = dir + "/events/rank-" + std::to_string(r) + ".jsonl";
    if (size_t(r) < logs.size()) {
      fuzz::write_file(file, logs[size_t(r)]);
    } else {
      std::error_code ec;
      std::filesystem::remove(file, ec);
    }
  }
  fuzz::write_file(dir + "/ranks.log", "");
  const results::ScenarioResult res = harness::judge_run(s, dir, job);
  (void)results::to_json(res).dump();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::register_snapshot();
  // A small cut of results/baselines/cpu-suite.json: the whole one (850 KB) would make every
  // run parse and compare 49 scenarios.
  g_baseline_path = std::string(NANCHAOS_SOURCE_DIR) + "/tests/fuzz/seeds/report-2.json";
  g_baseline = results::load_report(g_baseline_path);
  for (const auto& f :
       harness::expand_scenario_paths({std::string(NANCHAOS_SOURCE_DIR) + "/scenarios"})) {
    try {
      g_scenarios.push_back(harness::load_scenario(f));
    } catch (const harness::ScenarioError&) {
      // a scenario whose torch-side checks the snapshot lacks would still load; none is refused
    }
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] % 2 == 0) {
    fuzz_report(std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
  } else {
    fuzz_events(data, size);
  }
  return 0;
}
