// End-to-end: the real binary launches real `mpirun -np N` jobs; assertions read report.json.
// Deadlock.HangAndCrash*, Deadlock.NaiveStack* and LossScale.* check shipped scenarios: they read
// the shipped suite's run (NANCHAOS_SHIPPED_RUN) and are registered by tests/CMakeLists.txt.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "detectors/core/consensus.h"
#include "harness/controller/host_limits.h"
#include "harness/controller/host_probe.h"
#include "harness/controller/launch.h"
#include "harness/scenario/scenario.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using nanchaos::test_util::CmdResult;
using nanchaos::test_util::run_cmd;

std::string tmpdir(const std::string& name) {
  return nanchaos::test_util::scratch_dir("nanchaos-test", name);
}

using nanchaos::test_util::read_report;
using nanchaos::test_util::write_file;

const std::string kBin = NANCHAOS_BINARY;
const std::string kSrc = NANCHAOS_SOURCE_DIR;

// A NaN activation on rank 1 of a 2-rank job (the spec's minimal scenario).
const char* kActivation2 = R"(
[scenario]
name = "nan-activation-rank1"
seed = 5
[job]
workload = "mlp"
steps = 14
[workload]
hidden = 32
features = 16
[[fault]]
kind = "tensor"
target = "activation:layers.1"
ranks = [1]
step = 6
[expect]
detected = true
rank = 1
)";

}  // namespace

TEST(Controller, TwoRankJobDetectsAttributesAndPasses) {
  const auto dir = tmpdir("in");
  const auto out = tmpdir("out");
  const auto file = write_file(dir, "a.toml", kActivation2);
  auto r = run_cmd(kBin + " run " + file + " --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  auto rep = read_report(out);
  ASSERT_EQ(rep["scenarios"].size(), 1u);
  const auto& s = rep["scenarios"][0];
  EXPECT_EQ(s["verdict"], "pass");
  EXPECT_EQ(s["outcome"], "completed");
  EXPECT_EQ(s["first_detection"]["detector"], "loss");
  EXPECT_EQ(s["first_detection"]["rank"], 1);
  EXPECT_EQ(s["first_detection"]["step"], 6);
  EXPECT_EQ(s["first_detection"]["cause"], "activation");
  EXPECT_EQ(s["first_detection"]["latency_steps"], 0);
  EXPECT_EQ(s["steps_completed"], 14);
  ASSERT_EQ(s["injections"].size(), 1u);
  EXPECT_EQ(s["injections"][0]["rank"], 1);
  EXPECT_EQ(s["injections"][0]["target"], "activation:layers.1");
  EXPECT_EQ(rep["summary"]["passed"], 1);
  // Per-rank event logs exist for both ranks.
  EXPECT_TRUE(fs::exists(out + "/nan-activation-rank1/events/rank-0.jsonl"));
  EXPECT_TRUE(fs::exists(out + "/nan-activation-rank1/events/rank-1.jsonl"));
  EXPECT_TRUE(fs::exists(out + "/junit.xml"));
  EXPECT_TRUE(fs::exists(out + "/report.md"));
}

TEST(Controller, ReusedOutFolderNeverJudgesAnEarlierRunsLogs) {
  // A second run into the same --out whose ranks never start (a launcher that exits at once)
  // must not be judged on the first run's event logs: an error, not the first run's pass.
  const auto dir = tmpdir("in");
  const auto out = tmpdir("out");
  const auto file = write_file(dir, "a.toml", kActivation2);
  ASSERT_EQ(run_cmd(kBin + " run " + file + " --out " + out).code, 0);
  ASSERT_TRUE(fs::exists(out + "/nan-activation-rank1/events/rank-1.jsonl"));
  auto r = run_cmd(kBin + " run " + file + " --launcher /bin/false --out " + out);
  EXPECT_NE(r.code, 0) << r.output;
  const auto rep = read_report(out);
  const auto& s = rep["scenarios"][0];
  EXPECT_EQ(s["verdict"], "error") << s.dump(2);
  EXPECT_TRUE(s["first_detection"].is_null()) << s.dump(2);
  EXPECT_FALSE(fs::exists(out + "/nan-activation-rank1/events/rank-1.jsonl"));
}

TEST(Controller, FourRankJobFailsAWrongExpectationWithExit1) {
  const auto dir = tmpdir("in");
  const auto out = tmpdir("out");
  std::string text = kActivation2;
  text.replace(text.find("steps = 14"), 10, "steps = 10\nranks = 4");
  text.replace(text.find("rank = 1\n"), 9, "rank = 3\n");  // wrong on purpose
  const auto file = write_file(dir, "a.toml", text);
  auto r = run_cmd(kBin + " run " + file + " --out " + out);
  ASSERT_EQ(r.code, 1) << r.output;
  const json s = read_report(out)["scenarios"][0];
  EXPECT_EQ(s["verdict"], "fail");
  EXPECT_EQ(s["ranks"], 4);
  EXPECT_EQ(s["first_detection"]["rank"], 1);
  EXPECT_NE(s["reason"].get<std::string>().find("rank: expected 3, got 1"), std::string::npos)
      << s["reason"];
}

TEST(Controller, SameSeedSameReportApartFromTimings) {
  const auto dir = tmpdir("in");
  const auto file = write_file(dir, "a.toml", kActivation2);
  json reports[2];
  for (int i = 0; i < 2; ++i) {
    const auto out = tmpdir("out" + std::to_string(i));
    auto r = run_cmd(kBin + " run " + file + " --quiet --out " + out);
    ASSERT_EQ(r.code, 0) << r.output;
    reports[i] = read_report(out)["scenarios"][0];
  }
  auto strip = [](json s) {
    // Measurements, not results: times, clock offsets, the ranks' peak memory and step times.
    for (const char* k : {"wall_ms", "run_dir", "longest_collective_wait_ms", "abort_latency_ms",
                          "launcher_exit_code", "memory", "job_start_us", "controller",
                          "clock_offsets", "step_times", "step_scores"}) {
      s.erase(k);
    }
    for (const char* k : {"latency_ms", "decision_us", "abort_latency_ms", "wall_ms"}) {
      s["stats"].erase(k);
      for (auto& [name, d] : s["stats"]["by_detector"].items()) d.erase(k);
    }
    for (auto& inj : s["injections"]) inj.erase("t_ms");
    for (auto* d : {&s["first_detection"]}) {
      d->erase("latency_ms");
      d->erase("decision_us");
    }
    for (auto& d : s["detections"]) {
      d.erase("latency_ms");
      d.erase("decision_us");
    }
    return s;
  };
  EXPECT_EQ(strip(reports[0]).dump(1), strip(reports[1]).dump(1));
  EXPECT_EQ(reports[0]["final_loss"], reports[1]["final_loss"]);  // bit-identical training
}

TEST(Controller, MalformedScenarioNeverStartsAJob) {
  const auto dir = tmpdir("in");
  const auto out = tmpdir("out");
  const auto file = write_file(dir, "bad.toml",
                               "[scenario]\nname = \"x\"\n[job]\nworkload = \"mlp\"\nsteps = 3\n"
                               "[[fault]]\nkind = \"tensr\"\nstep = 1\n");
  auto r = run_cmd(kBin + " run " + file + " --out " + out);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find(file + ":7:8: error:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("did you mean \"tensor\"?"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out + "/x"));
  auto v = run_cmd(kBin + " validate " + file);
  EXPECT_EQ(v.code, 2);
  auto missing = run_cmd(kBin + " run " + dir + "/nope.toml");
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.output.find("nope.toml"), std::string::npos) << missing.output;
}

TEST(Controller, MissingLauncherIsOneUpFrontError) {
  const auto dir = tmpdir("in");
  const auto out = tmpdir("out");
  const auto file = write_file(dir, "ok.toml",
                               "[scenario]\nname = \"x\"\n[job]\nworkload = \"mlp\"\nsteps = 3\n");
  auto r = run_cmd(kBin + " run " + file + " --launcher /nonexistent/mpirun --out " + out);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("launcher '/nonexistent/mpirun' not found"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(out + "/x"));  // no job was started
  auto path = run_cmd("env PATH=" + dir + " " + kBin + " run " + file + " --out " + out);
  EXPECT_EQ(path.code, 2);
  EXPECT_NE(path.output.find("launcher 'mpirun' not found in PATH"), std::string::npos)
      << path.output;
}

TEST(Controller, CudaScenarioIsSkippedOnAHostWithoutAGpu) {
  nanchaos::harness::Scenario one;
  one.job.device = nanchaos::harness::Device::kCuda;
  if (nanchaos::harness::gpu_skip_reason(one).empty())
    GTEST_SKIP() << "this host can run CUDA jobs";
  const auto dir = tmpdir("in");
  const auto out = tmpdir("out");
  std::string text = kActivation2;
  text.replace(text.find("steps = 14"), 10, "steps = 14\ndevice = \"cuda\"");
  const auto file = write_file(dir, "c.toml", text);
  auto r = run_cmd(kBin + " run " + file + " --out " + out);
  EXPECT_EQ(r.code, 0) << r.output;
  const json s = read_report(out)["scenarios"][0];
  EXPECT_EQ(s["verdict"], "skipped");
  EXPECT_NE(s["reason"].get<std::string>().find("GPU"), std::string::npos) << s["reason"];
  EXPECT_EQ(read_report(out)["summary"]["skipped"], 1);
}

// A target that names no module of a built-in workload can no longer reach a job: the loader
// refuses it, so no job starts. A fault that never fired at run time is still
// `error` ("injection not verified"): JudgeVerification.FaultThatNeverFiredIsError and the
// external-job tests cover that path.
TEST(Controller, TargetNamingNoModuleNeverStartsAJob) {
  const auto dir = tmpdir("in");
  const auto out = tmpdir("out");
  std::string text = kActivation2;
  text.replace(text.find("activation:layers.1"), 19, "activation:layers.9");  // no such module
  const auto file = write_file(dir, "n.toml", text);
  auto r = run_cmd(kBin + " run " + file + " --out " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("\"activation:layers.9\" names no module of the mlp workload; "
                          "[workload].layers = 3 gives layers.0 .. layers.2"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("no job started"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out + "/report.json"));
}

TEST(Controller, JobTimeoutKillsEveryProcessAndReportsHung) {
  const auto dir = tmpdir("in");
  const auto out = tmpdir("out");
  // A job far too long for its 8 s limit: the controller must kill it and leave nothing behind.
  // (8 s, not less: every rank must have started, and a LibTorch rank takes 3-5 s to start on
  // a loaded 2-core host.)
  const auto file = write_file(dir, "slow.toml", R"(
[scenario]
name = "slow"
[job]
workload = "transformer"
steps = 100000
timeout_ms = 8000
[workload]
hidden = 64
layers = 2
[expect]
outcome = "completed"
)");
  auto r = run_cmd(kBin + " run " + file + " --out " + out);
  EXPECT_EQ(r.code, 1) << r.output;  // outcome "completed" expected, "hung" seen
  const json s = read_report(out)["scenarios"][0];
  EXPECT_EQ(s["outcome"], "hung");
  EXPECT_LT(s["wall_ms"].get<double>(), 8000 + 5000);
  // "[n]" keeps pgrep from matching its own shell's command line.
  auto left = run_cmd("pgrep -f '[n]anchaos rank --scenario " + file + "' | wc -l");
  EXPECT_EQ(left.output, "0\n");
}

TEST(Controller, LauncherArgvIsOversubscribedAndRootSafe) {
  nanchaos::harness::Scenario s;
  s.job.ranks = 4;
  auto argv = nanchaos::harness::launcher_argv("mpirun --hostfile h", s, "/bin/nanchaos", "/x.toml",
                                               "/run");
  std::string joined;
  for (const auto& a : argv) joined += a + " ";
  EXPECT_EQ(joined.rfind("mpirun --hostfile h -np 4 --oversubscribe", 0), 0u) << joined;
  EXPECT_NE(joined.find("/bin/nanchaos rank --scenario /x.toml --run-dir /run"), std::string::npos);
  auto srun = nanchaos::harness::launcher_argv("srun --mpi=pmix", s, "/b", "/x", "/r");
  EXPECT_EQ(srun[0], "srun");
  EXPECT_EQ(srun[2], "-n");
  EXPECT_EQ(srun[3], "4");
}

TEST(Controller, OneNcclRankRunsWithoutALauncher) {
  nanchaos::harness::Scenario s;
  s.job.ranks = 1;
  s.job.device = nanchaos::harness::Device::kCuda;
  s.job.backend = nanchaos::harness::Backend::kNccl;
  auto argv = nanchaos::harness::launcher_argv("mpirun", s, "/bin/nanchaos", "/x.toml", "/run");
  EXPECT_EQ(argv, (std::vector<std::string>{"/bin/nanchaos", "rank", "--scenario", "/x.toml",
                                            "--run-dir", "/run"}));
  s.job.ranks = 2;  // several NCCL ranks still need MPI for the unique id
  EXPECT_EQ(nanchaos::harness::launcher_argv("mpirun", s, "/b", "/x", "/r")[0], "mpirun");
}

TEST(Controller, GpuSkipReasonNamesWhatIsMissing) {
  using nanchaos::harness::gpu_skip_reason;
  using nanchaos::harness::GpuHost;
  nanchaos::harness::Scenario s;
  EXPECT_EQ(gpu_skip_reason(s, GpuHost{}), "");  // device cpu never skips
  s.job.device = nanchaos::harness::Device::kCuda;
  s.job.ranks = 2;
  EXPECT_NE(gpu_skip_reason(s, GpuHost{false, true, 8, ""}).find("built without CUDA"),
            std::string::npos);
  EXPECT_EQ(
      gpu_skip_reason(s, GpuHost{true, true, 0, "cudaGetDeviceCount: no CUDA-capable device"}),
      "device cuda needs a GPU per rank: 2 ranks, this host has 0 (cudaGetDeviceCount: no "
      "CUDA-capable device)");
  EXPECT_EQ(gpu_skip_reason(s, GpuHost{true, true, 1, ""}),
            "device cuda needs a GPU per rank: 2 ranks, this host has 1");
  EXPECT_EQ(gpu_skip_reason(s, GpuHost{true, false, 2, ""}),
            "device cuda needs a GPU: this LibTorch has no CUDA (CPU-only build)");
  EXPECT_EQ(gpu_skip_reason(s, GpuHost{true, true, 2, ""}), "");
}

// A CPU-only LibTorch is named first, not the GPU count or the driver that it makes
// irrelevant (no GPU would let such a LibTorch run a CUDA job).
TEST(Controller, GpuSkipReasonNamesCpuOnlyLibTorchFirst) {
  using nanchaos::harness::gpu_skip_reason;
  using nanchaos::harness::GpuHost;
  nanchaos::harness::Scenario s;
  s.job.device = nanchaos::harness::Device::kCuda;
  s.job.ranks = 2;
  EXPECT_EQ(
      gpu_skip_reason(s, GpuHost{true, false, 0, "cudaGetDeviceCount: no CUDA-capable device"}),
      "device cuda needs a GPU: this LibTorch has no CUDA (CPU-only build)");
  EXPECT_EQ(gpu_skip_reason(s, GpuHost{false, false, 0, ""}),
            "device cuda needs a GPU: this LibTorch has no CUDA (CPU-only build); nanchaos was "
            "also built without CUDA/NCCL");
  EXPECT_EQ(gpu_skip_reason(s, GpuHost{false, true, 0, ""}),
            "device cuda needs a GPU build: nanchaos was built without CUDA/NCCL (nvcc or nccl.h "
            "not found)");
}

// `run --jobs 2`: two scenarios run at once (their jobs overlap in time), one with more ranks
// than twice the host's cores runs alone (its job overlaps no other), and report.json keeps the
// suite's order although the scenarios finished out of it.
TEST(Controller, JobsRunTwoAtOnceABigOneAloneAndReportInSuiteOrder) {
  const auto dir = tmpdir("jobs-in");
  const int64_t big_ranks = 2 * nanchaos::harness::probe_host().cores + 1;
  auto scenario = [](const std::string& name, int64_t ranks, int steps) {
    return fmt::format(
        "[scenario]\nname = \"{}\"\nseed = 3\n[job]\nworkload = \"mlp\"\nranks = {}\n"
        "steps = {}\n[workload]\nhidden = 16\nfeatures = 8\n[[fault]]\nkind = \"tensor\"\n"
        "target = \"activation:layers.1\"\nranks = [1]\nstep = 3\n[expect]\ndetected = true\n"
        "rank = 1\n",
        name, ranks, steps);
  };
  write_file(dir, "a.toml", scenario("jobs-a", 2, 40));
  write_file(dir, "b.toml", scenario("jobs-b", 2, 40));
  write_file(dir, "c.toml", scenario("jobs-c-big", big_ranks, 8));
  write_file(dir, "d.toml", scenario("jobs-d", 2, 8));
  const auto out = tmpdir("jobs-out");
  const auto r = run_cmd(kBin + " run " + dir + " --jobs 2 --quiet --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  const json report = read_report(out);
  std::vector<std::string> names;
  std::vector<std::pair<int64_t, int64_t>> jobs;  // [start, end] of each job, us
  for (const auto& s : report["scenarios"]) {
    names.push_back(s["name"]);
    const int64_t t0 = s["job_start_us"];
    jobs.push_back({t0, t0 + int64_t(s["wall_ms"].get<double>() * 1000)});
  }
  ASSERT_EQ(names, (std::vector<std::string>{"jobs-a", "jobs-b", "jobs-c-big", "jobs-d"}));
  auto overlap = [&](size_t i, size_t k) {
    return jobs[i].first < jobs[k].second && jobs[k].first < jobs[i].second;
  };
  EXPECT_TRUE(overlap(0, 1)) << report.dump(1);
  for (size_t i : {0, 1, 3}) EXPECT_FALSE(overlap(2, i)) << i << report.dump(1);
}

// `--fail-on-skip` turns a skipped scenario into exit 1 with a message on stderr; the
// report still says `skipped`. Without the flag the same run exits 0.
TEST(Controller, FailOnSkipExitsOneWhenAScenarioIsSkipped) {
  nanchaos::harness::Scenario one;
  one.job.device = nanchaos::harness::Device::kCuda;
  if (nanchaos::harness::gpu_skip_reason(one).empty())
    GTEST_SKIP() << "this host can run CUDA jobs";
  const std::string file = kSrc + "/scenarios/gpu/gpu-nan-gradient.toml";
  const auto out = tmpdir("fail-on-skip");
  auto r = run_cmd(kBin + " run " + file + " --quiet --fail-on-skip --out " + out + " 2>&1");
  EXPECT_EQ(r.code, 1) << r.output;
  // --quiet leaves the summary line and the refusal.
  EXPECT_EQ(r.output,
            "nanchaos run: 1 scenario: 0 passed, 0 failed, 0 errors, 1 skipped; reports: " + out +
                "/report.json\n" +
                "nanchaos run: error: 1 scenario(s) skipped and --fail-on-skip is set "
                "(exit 1)\n");
  const json rep = read_report(out);
  ASSERT_EQ(rep["scenarios"].size(), 1u);
  EXPECT_EQ(rep["scenarios"][0]["verdict"], "skipped");
  const auto out2 = tmpdir("no-fail-on-skip");
  auto r2 = run_cmd(kBin + " run " + file + " --quiet --out " + out2 + " 2>&1");
  EXPECT_EQ(r2.code, 0) << r2.output;
}

// `nanchaos run scenarios/gpu/` on a host that cannot run them: every scenario `skipped` with a
// reason, exit status 0.
TEST(Controller, GpuSuiteIsSkippedWithAReasonWithoutAGpu) {
  nanchaos::harness::Scenario one;
  one.job.device = nanchaos::harness::Device::kCuda;
  if (nanchaos::harness::gpu_skip_reason(one).empty())
    GTEST_SKIP() << "this host can run CUDA jobs";
  const auto out = tmpdir("out");
  auto r = run_cmd(kBin + " run " + kSrc + "/scenarios/gpu --quiet --out " + out + " 2>&1");
  EXPECT_EQ(r.code, 0) << r.output;
  const json rep = read_report(out);
  ASSERT_GE(rep["scenarios"].size(), 3u);
  for (const auto& s : rep["scenarios"]) {
    EXPECT_EQ(s["verdict"], "skipped") << s["name"];
    EXPECT_NE(s["reason"].get<std::string>().find("device cuda needs a GPU"), std::string::npos)
        << s["reason"];
  }
}

namespace {

// The rank command line names the scenario by the controller's absolute path of it; a relative
// path in the report (a suite run as `nanchaos run scenarios`) cannot be matched from here.
const char* const kRelativeFile =
    ": relative, so its ranks cannot be looked for; run the suite with an absolute path "
    "(CTest's shipped_suite_passes does)";

int job_processes_left(const std::string& scenario_file) {
  // "[n]" keeps pgrep from matching its own shell's command line.
  auto r = run_cmd("pgrep -f '[n]anchaos rank --scenario " + scenario_file + "' | wc -l");
  return std::stoi(r.output);
}

}  // namespace

// A hang and a crash with a 2 s collective deadline end within deadline + 2 s, name the
// rank, and leave no process behind. The shipped scenarios' results come from the suite's run
// (shipped_suite_passes; test_util.h shipped_scenario), not from a run of their own.
TEST(Deadlock, HangAndCrashEndWithinDeadlinePlusTwoSecondsAndLeaveNoProcess) {
  for (const char* name : {"hang-forever-rank2", "crash-rank1"}) {
    const json s = nanchaos::test_util::shipped_scenario(name);
    EXPECT_EQ(s["verdict"], "pass") << name << ": " << s["reason"];
    ASSERT_TRUE(s["abort_latency_ms"].is_number()) << s.dump(1);
    EXPECT_LE(s["abort_latency_ms"].get<double>(), 2000.0 + 2000.0) << name;
    EXPECT_EQ(s["deadlock"], false);
    // None left when the controller reaped the job (its own count), and none since: ranks carry
    // the scenario's absolute path on their command line.
    EXPECT_EQ(s["orphans_left"], 0) << name;
    const std::string file = s["file"];
    ASSERT_TRUE(fs::path(file).is_absolute()) << file << kRelativeFile;
    EXPECT_EQ(job_processes_left(file), 0) << name;
    EXPECT_TRUE(s["last_collective"].is_object());
  }
}

TEST(Deadlock, ControllerReturnsWithinTimeoutPlusFiveSecondsWhenEveryRankHangs) {
  const auto dir = tmpdir("in");
  const auto out = tmpdir("out");
  const auto file = write_file(dir, "all-hang.toml", R"(
[scenario]
name = "all-hang"
[job]
workload = "mlp"
ranks = 2
steps = 10
timeout_ms = 8000
[[fault]]
kind = "hang"
duration_ms = "forever"
where = "step_start"
ranks = "all"
step = 2
[expect]
outcome = "hung"
deadlock = false
)");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_cmd(kBin + " run " + file + " --quiet --out " + out);
  const double took_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // (8 s: on a loaded 2-core host the ranks may need seconds to reach step 2; before they do
  // the hang has not fired and the run is an error, not the case under test.)
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_LT(took_ms, 8000 + 5000);
  const json s = read_report(out)["scenarios"][0];
  EXPECT_EQ(s["outcome"], "hung");
  EXPECT_EQ(job_processes_left(file), 0);
}

TEST(Deadlock, NaiveStackHangsAndTheLeavingRankIsNamed) {
  const json s = nanchaos::test_util::shipped_scenario("naive-stack-nan-rank1");
  EXPECT_EQ(s["verdict"], "pass") << s["reason"];
  EXPECT_EQ(s["outcome"], "hung");
  EXPECT_EQ(s["deadlock"], true);
  EXPECT_EQ(s["first_detection"]["rank"], 1);
  EXPECT_EQ(s["first_detection"]["action"], "early_return");
  // Rank 1 skipped one gradient all-reduce, so it is one collective behind its peer.
  EXPECT_LT(s["last_collective"]["1"]["seq"].get<int>(),
            s["last_collective"]["0"]["seq"].get<int>());
  EXPECT_EQ(s["orphans_left"], 0);
  const std::string file = s["file"];
  ASSERT_TRUE(fs::path(file).is_absolute()) << file << kRelativeFile;
  EXPECT_EQ(job_processes_left(file), 0);
}

// The replay restores the pre-step state: a run whose last step is detected, replayed and skipped
// ends bit-identical (parameters incl. BatchNorm running statistics, optimizer state) to a run
// that stopped one step earlier.
TEST(Replay, RestoresParametersBuffersAndOptimizerStateBitIdentically) {
  const auto dir = tmpdir("in");
  const std::string head = R"(
[job]
workload = "mlp"
ranks = 2
[workload]
hidden = 16
features = 8
norm = "batchnorm"
)";
  const auto faulty = write_file(
      dir, "faulty.toml", "[scenario]\nname = \"faulty\"\nseed = 3\n" + head + "steps = 9\n" + R"(
[[fault]]
kind = "tensor"
target = "activation:layers.1.linear"
ranks = [0]
step = 8
persistent = true
[expect]
detected = true
transient = false
layer = "layers.1.linear"
)");
  const auto clean = write_file(dir, "clean.toml",
                                "[scenario]\nname = \"clean\"\nseed = 3\n" + head + "steps = 8\n");
  // "steps" must sit in [job]: move it there.
  for (const auto& f : {faulty, clean}) {
    std::ifstream in(f);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    const auto at = text.find("steps = ");
    const std::string line = text.substr(at, text.find('\n', at) - at + 1);
    text.erase(at, line.size());
    text.insert(text.find("ranks = 2\n") + 10, line);
    std::ofstream(f) << text;
  }
  const auto out = tmpdir("out");
  auto r = run_cmd(kBin + " run " + faulty + " " + clean + " --quiet --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  auto final_of = [&](const std::string& name) {
    json last;
    std::ifstream in(out + "/" + name + "/events/rank-0.jsonl");
    for (std::string line; std::getline(in, line);) {
      auto e = json::parse(line);
      if (e["ev"] == "final") last = e;
    }
    return last;
  };
  const json a = final_of("faulty"), b = final_of("clean");
  ASSERT_FALSE(a.is_null());
  ASSERT_FALSE(b.is_null());
  EXPECT_EQ(a["params_hash"], b["params_hash"]);
  EXPECT_EQ(a["optim_hash"], b["optim_hash"]);
}

// Rollback restores parameters, optimizer state and data position bit-identically: a run that
// detects a transient fault, rolls back and re-executes ends exactly like a run with no fault.
TEST(Rollback, ReexecutionEndsBitIdenticalToACleanRun) {
  const auto dir = tmpdir("in");
  const std::string body = R"(
[job]
workload = "mlp"
ranks = 2
steps = 12
[workload]
hidden = 16
features = 8
optimizer = "adam"
[recovery]
policy = "rollback"
snapshot_every = 4
)";
  const auto faulty =
      write_file(dir, "faulty.toml", "[scenario]\nname = \"faulty\"\nseed = 9\n" + body + R"(
[[fault]]
kind = "tensor"
target = "gradient:layers.0.linear.weight"
ranks = [1]
step = 6
[expect]
detected = true
recovered = true
consistent = true
)");
  const auto clean =
      write_file(dir, "clean.toml", "[scenario]\nname = \"clean\"\nseed = 9\n" + body);
  const auto out = tmpdir("out");
  auto r = run_cmd(kBin + " run " + faulty + " " + clean + " --quiet --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  auto events_of = [&](const std::string& name) {
    std::vector<json> evs;
    std::ifstream in(out + "/" + name + "/events/rank-0.jsonl");
    for (std::string line; std::getline(in, line);) evs.push_back(json::parse(line));
    return evs;
  };
  auto final_of = [&](const std::string& name) {
    for (const auto& e : events_of(name)) {
      if (e["ev"] == "final") return e;
    }
    return json();
  };
  int rollbacks = 0;
  for (const auto& e : events_of("faulty")) {
    if (e["ev"] == "rollback") {
      ++rollbacks;
      EXPECT_EQ(e["step"], 6);
      EXPECT_EQ(e["to_step"], 4);
    }
  }
  EXPECT_EQ(rollbacks, 1);
  const json a = final_of("faulty"), b = final_of("clean");
  ASSERT_FALSE(a.is_null());
  EXPECT_EQ(a["params_hash"], b["params_hash"]);
  EXPECT_EQ(a["optim_hash"], b["optim_hash"]);
  EXPECT_EQ(a["eval_loss"], b["eval_loss"]);
}

namespace {

// The rank-0 events of one scenario of a run folder.
std::vector<json> rank0_events(const std::string& out, const std::string& name) {
  std::vector<json> evs;
  std::ifstream in(out + "/" + name + "/events/rank-0.jsonl");
  for (std::string line; std::getline(in, line);) evs.push_back(json::parse(line));
  return evs;
}

// A 2-rank mlp under rollback (snapshot every 10 steps) with faults appended by the test.
std::string rollback_scenario(const std::string& name, int max_consecutive,
                              const std::string& faults_and_expect) {
  return "[scenario]\nname = \"" + name + "\"\nseed = 17\n" + R"(
[job]
workload = "mlp"
ranks = 2
steps = 24
[workload]
hidden = 16
features = 8
[recovery]
policy = "rollback"
snapshot_every = 10
max_consecutive = )" +
         std::to_string(max_consecutive) + "\n" + faults_and_expect;
}

}  // namespace

// Recovery terminates (SCENARIO_FORMAT.md "More detectors and recovery"): a persistent fault
// returns on every re-execution; detections at re-executed steps count toward max_consecutive,
// the clean re-executed steps before the faulty one do not reset the count, so the third
// detection aborts after two rollbacks instead of rolling back until timeout_ms.
TEST(Rollback, PersistentFaultEscalatesToAbortAfterMaxConsecutive) {
  const auto dir = tmpdir("in");
  const auto file = write_file(dir, "p.toml", rollback_scenario("persistent", 3, R"(
[[fault]]
kind = "tensor"
target = "gradient:layers.0.linear.weight"
ranks = [1]
step = 13
persistent = true
[expect]
detected = true
rank = 1
cause = "gradient"
outcome = "aborted"
abort_within_ms = 20000
)"));
  const auto out = tmpdir("out");
  auto r = run_cmd(kBin + " run " + file + " --quiet --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  const json s = read_report(out)["scenarios"][0];
  EXPECT_EQ(s["outcome"], "aborted");
  int rollbacks = 0;
  json abort;
  for (const auto& e : rank0_events(out, "persistent")) {
    if (e["ev"] == "rollback") {
      ++rollbacks;
      EXPECT_EQ(e["step"], 13);
      EXPECT_EQ(e["to_step"], 10);
    }
    if (e["ev"] == "abort") abort = e;
  }
  EXPECT_EQ(rollbacks, 2);
  ASSERT_FALSE(abort.is_null());
  EXPECT_EQ(abort["step"], 13);
  EXPECT_EQ(abort["cause"], "gradient");
  EXPECT_EQ(abort["reason"],
            "3 detections without a clean step past step 13 (2 rollbacks; max_consecutive): the "
            "fault returns on every re-execution");
}

// Fixed-size consensus (consensus.h): every step sends one summary of summary_width() int64 counts
// whatever the world size, followed by the straggler detector's phase times (kStepPhases int64 a
// rank: it is in `default`); the [world x 7] detail round runs only on the flagged step.
TEST(Consensus, CleanStepsSendOnlyTheFixedSizeSummary) {
  const auto dir = tmpdir("in");
  std::string text = kActivation2;
  text.replace(text.find("steps = 14"), 10, "steps = 10\nranks = 4");
  const auto file = write_file(dir, "a.toml", text);
  const auto out = tmpdir("out");
  auto r = run_cmd(kBin + " run " + file + " --quiet --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  std::vector<int64_t> summary_steps, detail_steps;
  for (const auto& e : rank0_events(out, "nan-activation-rank1")) {
    if (e["ev"] != "coll_enter") continue;
    if (e["name"] == "consensus") {
      summary_steps.push_back(e["step"].get<int64_t>());
      EXPECT_EQ(e["count"],
                nanchaos::harness::summary_width() + 4 * nanchaos::harness::kStepPhases);
      EXPECT_EQ(e["dtype"], "int64");
    } else if (e["name"] == "consensus_detail") {
      detail_steps.push_back(e["step"].get<int64_t>());
      EXPECT_EQ(e["count"], 4 * nanchaos::harness::kRowWidth);
    }
  }
  EXPECT_EQ(summary_steps.size(), 10u);
  EXPECT_EQ(detail_steps, std::vector<int64_t>{6});
}

// The count resets once the run makes new progress: two transient faults 3 steps apart, each
// rolled back and cleanly re-executed, never reach max_consecutive = 2 and the job completes.
TEST(Rollback, CountResetsAtTheFirstCleanStepPastTheFaultyOne) {
  const auto dir = tmpdir("in");
  const auto file = write_file(dir, "t.toml", rollback_scenario("transient", 2, R"(
[[fault]]
kind = "tensor"
target = "gradient:layers.0.linear.weight"
ranks = [1]
step = 13
[[fault]]
kind = "tensor"
target = "gradient:layers.0.linear.weight"
ranks = [0]
step = 16
[expect]
detected = true
outcome = "completed"
recovered = true
consistent = true
)"));
  const auto out = tmpdir("out");
  auto r = run_cmd(kBin + " run " + file + " --quiet --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  std::vector<int64_t> rolled_at;
  for (const auto& e : rank0_events(out, "transient")) {
    if (e["ev"] == "rollback") rolled_at.push_back(e["step"].get<int64_t>());
    EXPECT_NE(e["ev"], "abort") << e.dump();
  }
  EXPECT_EQ(rolled_at, (std::vector<int64_t>{13, 16}));
}

// GradScaler growth: the loss scale doubles every growth_interval clean steps, stops at max_scale
// and stays identical on every rank; a clean run detects nothing. Read from the shipped suite's
// run folder (shipped_suite_passes).
TEST(LossScale, GrowthStopsAtMaxScaleOnEveryRank) {
  const json s = nanchaos::test_util::shipped_scenario("fp16-scale-growth-capped");
  EXPECT_EQ(s["verdict"], "pass") << s["reason"];
  const std::string run_dir = s["run_dir"];
  for (int rank = 0; rank < 2; ++rank) {
    const std::string log = run_dir + "/events/rank-" + std::to_string(rank) + ".jsonl";
    std::ifstream in(log);
    ASSERT_TRUE(in) << "cannot read " << log;
    double last = 0, highest = 0;
    int steps = 0;
    for (std::string line; std::getline(in, line);) {
      auto e = json::parse(line);
      if (e["ev"] != "step_end") continue;
      last = e["loss_scale"].get<double>();
      highest = std::max(highest, last);
      ++steps;
    }
    EXPECT_EQ(steps, 16);
    EXPECT_EQ(highest, 4096.0) << "rank " << rank;
    EXPECT_EQ(last, 4096.0) << "rank " << rank;
  }
}

// A run folder that fills up mid-job makes the scenario an error that names
// the log and errno (never a verdict judged on half a record); the report counts what was lost.
TEST(Controller, AFullDiskIsAnErrorNamingTheLogAndCountingDroppedEvents) {
  const auto dir = tmpdir("in");
  const auto out = tmpdir("out");
  // 700 KiB: both ranks' first 256-KiB blocks fit, their second ones do not.
  if (run_cmd("mount -t tmpfs -o size=700k tmpfs " + out).code != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  }
  const auto file = write_file(dir, "long.toml", R"(
[scenario]
name = "long"
[job]
workload = "mlp"
steps = 2000
[workload]
hidden = 8
features = 4
batch_size = 4
[expect]
detected = false
)");
  auto r = run_cmd(kBin + " run " + file + " --out " + out + " --quiet");
  json s;
  try {
    s = read_report(out)["scenarios"][0];
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what() << "\n" << r.output;
  }
  run_cmd("umount " + out);
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_EQ(s["verdict"], "error");
  const std::string reason = s["reason"];
  EXPECT_EQ(reason.rfind("evidence lost: rank ", 0), 0u) << reason;
  EXPECT_NE(reason.find("/events/rank-"), std::string::npos) << reason;
  EXPECT_NE(reason.find("No space left on device (errno 28, posix_fallocate)"), std::string::npos)
      << reason;
  EXPECT_GT(s["dropped_events"].get<int64_t>(), 0);
}
