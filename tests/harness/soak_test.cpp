// 20 hang and crash scenarios back to back in one `nanchaos run`. No process
// of a job may outlive it (checked while the run goes, by job id, and after it), and the
// controller's memory and open descriptors must not grow with the number of jobs. CTest label
// `slow` (tests/CMakeLists.txt: soak_hang_crash_20).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "harness/common/child_process.h"
#include "tests/harness/job_processes.h"
#include "tests/test_util.h"

using nanchaos::test_util::describe;
using nanchaos::test_util::JobProcess;
using nanchaos::test_util::jobs_of_controller;
using nanchaos::test_util::read_report;
using nanchaos::test_util::write_file;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

const std::string kBin = NANCHAOS_BINARY;

// Scenario i of the soak: three shapes in turn, each on a tiny 2-rank MLP, each with the
// [expect] that makes it pass.
//   0: rank 1 hangs before the gradient all-reduce; rank 0's watchdog (1 s) aborts the job.
//   1: every rank hangs at step start, no watchdog: the controller's timeout_ms (8 s: time
//      for a loaded host to start both ranks first) kills the job.
//   2: rank 1 is SIGKILLed at step 2; the launcher takes rank 0 down (its watchdog, 5 s, is
//      there for a launcher that would not, and must not fire first on a loaded host).
std::string soak_scenario(int i, std::string* name) {
  static const char* const kShape[] = {"watchdog-hang", "timeout-hang", "crash"};
  *name = std::string(i < 10 ? "0" : "") + std::to_string(i) + "-" + kShape[i % 3];
  std::string s = "[scenario]\nname = \"" + *name + "\"\nseed = " + std::to_string(100 + i) +
                  "\n[job]\nworkload = \"mlp\"\nranks = 2\nsteps = 6\n";
  s += i % 3 == 1 ? "timeout_ms = 8000\n" : "timeout_ms = 30000\n";
  s += "[workload]\nhidden = 16\nfeatures = 8\n";
  switch (i % 3) {
    case 0:
      return s +
             "[[fault]]\nkind = \"hang\"\nduration_ms = \"forever\"\nranks = [1]\nstep = 2\n"
             "[detectors]\ncollective_timeout_ms = 1000\n"
             "[expect]\ndetected = true\nfirst_detector = \"watchdog\"\nrank = 1\n"
             "cause = \"hang\"\noutcome = \"aborted\"\ndeadlock = false\n";
    case 1:
      return s +
             "[[fault]]\nkind = \"hang\"\nduration_ms = \"forever\"\nwhere = \"step_start\"\n"
             "ranks = \"all\"\nstep = 2\n[expect]\noutcome = \"hung\"\ndeadlock = false\n";
    default:
      return s +
             "[[fault]]\nkind = \"crash\"\nranks = [1]\nstep = 2\n"
             "[detectors]\ncollective_timeout_ms = 5000\n"
             "[expect]\nrank = 1\ncause = \"rank_failure\"\noutcome = \"crashed\"\n"
             "deadlock = false\n";
  }
}

}  // namespace

TEST(Soak, TwentyHangAndCrashScenariosLeaveNoOrphanAndBoundedControllerMemory) {
  const auto dir = nanchaos::test_util::scratch_dir("nanchaos-soak", "in");
  const auto out = nanchaos::test_util::scratch_dir("nanchaos-soak", "out");
  std::vector<std::string> names(20);
  for (int i = 0; i < 20; ++i) {
    std::string text = soak_scenario(i, &names[i]);
    write_file(dir, names[i] + ".toml", text);  // "07-..." sorts as run order
  }
  nanchaos::harness::ChildProcess run =
      nanchaos::test_util::start_run(kBin, {dir, "--quiet", "--out", out}, out + "/console.log");
  // While the run goes: a process of job n seen while job m > n already has processes is an
  // orphan of job n (the controller only starts job m after job n's cleanup).
  std::map<int, JobProcess> orphans;
  int latest_job = 0;
  std::optional<nanchaos::harness::ExitStatus> st;
  const auto bound = std::chrono::steady_clock::now() + 600s;  // a deadlock bound
  while (!(st = run.poll()) && std::chrono::steady_clock::now() < bound) {
    const auto procs = jobs_of_controller(run.pid());
    for (const auto& p : procs) latest_job = std::max(latest_job, p.job);
    for (const auto& p : procs) {
      if (p.job < latest_job) orphans.emplace(p.pid, p);
    }
    std::this_thread::sleep_for(100ms);
  }
  if (!st) st = run.kill_group(0ms);
  ASSERT_TRUE(st->exited && st->exit_code == 0) << st->describe();
  std::vector<JobProcess> orphan_list;
  for (const auto& [pid, p] : orphans) orphan_list.push_back(p);
  EXPECT_TRUE(orphan_list.empty()) << describe(orphan_list);
  const auto left = jobs_of_controller(run.pid());
  EXPECT_TRUE(left.empty()) << describe(left);
  EXPECT_EQ(latest_job, 20);  // every job was seen running

  const json rep = read_report(out);
  ASSERT_EQ(rep["scenarios"].size(), 20u);
  std::vector<int64_t> rss, hwm, fds;
  for (size_t i = 0; i < 20; ++i) {
    const json& s = rep["scenarios"][i];
    EXPECT_EQ(s["name"], names[i]);
    EXPECT_EQ(s["verdict"], "pass") << s["name"] << ": " << s["reason"];
    EXPECT_EQ(s["orphans_left"], 0) << s["name"];
    rss.push_back(s["controller"]["vm_rss_kib"].get<int64_t>());
    hwm.push_back(s["controller"]["vm_hwm_kib"].get<int64_t>());
    fds.push_back(s["controller"]["fds"].get<int64_t>());
  }
  // Bounded memory. What the controller keeps per scenario is its ScenarioResult (a few KiB of
  // JSON; 20 of them are far below 1 MiB); everything else (the ranks' event logs read by the
  // judge, 256 KiB blocks each, the launcher's ChildProcess) is freed after each job. So after
  // the first job, RSS and its peak may grow by allocator noise only: 8 MiB over 19 more jobs
  // catches any per-job leak of 430 KiB or more (e.g. one kept event log of 2 ranks).
  const int64_t kGrowthBoundKib = 8 * 1024;
  EXPECT_GT(rss[0], 0);
  EXPECT_LE(*std::max_element(rss.begin(), rss.end()) - rss[0], kGrowthBoundKib)
      << "VmRSS after each job (KiB): " << json(rss).dump();
  EXPECT_LE(hwm.back() - hwm[0], kGrowthBoundKib)
      << "VmHWM after each job (KiB): " << json(hwm).dump();
  // Descriptors: exactly as many open after the last job as after the first (a leaked pipe or
  // log per job would add one each time).
  EXPECT_EQ(fds.back(), fds[0]) << json(fds).dump();
  ::testing::Test::RecordProperty("controller_vm_rss_kib_first", int(rss[0]));
  ::testing::Test::RecordProperty("controller_vm_rss_kib_max",
                                  int(*std::max_element(rss.begin(), rss.end())));
  ::testing::Test::RecordProperty("controller_vm_hwm_kib_last", int(hwm.back()));
}
