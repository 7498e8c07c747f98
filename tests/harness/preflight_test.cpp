// Preflight (harness/controller/preflight.h): each refusal's exact message, against a fixed host,
// fixed GPUs and fixed interpreters, and the order of the per-scenario checks.
#include "harness/controller/preflight.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/scenario/scenario.h"
#include "tests/test_util.h"

namespace nanchaos::harness {
namespace {

using test_util::scratch_dir;
using test_util::write_file;

// 23.1 GiB available, 2 cores (as host_limits_test.cpp's host).
const HostResources kHost{23.1 * 1024 * 1024 * 1024, "MemAvailable", 2};
// A GPU build with two GPUs: no GPU blocker for a one- or two-rank cuda job.
const GpuHost kTwoGpus{true, true, 2, ""};
const GpuHost kNoGpu{true, true, 0, "cudaGetDeviceCount: no CUDA-capable device"};

std::string scenario_text(const std::string& name, const std::string& job = "") {
  return "[scenario]\nname = \"" + name + "\"\n[job]\nworkload = \"mlp\"\nsteps = 2\n" + job;
}

std::string load_error(Preflight& pf, const std::string& file) {
  try {
    pf.load(file);
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "no error";
}

Scenario external(const std::string& torch = "") {
  Scenario s;
  s.job.workload = WorkloadKind::kExternal;
  s.job.command = {"python3", "train.py"};
  s.job.torch = torch;
  return s;
}

// One NCCL rank on a GPU: needs a GPU, no launcher.
Scenario one_cuda_rank() {
  Scenario s;
  s.job.device = Device::kCuda;
  s.job.backend = Backend::kNccl;
  s.job.ranks = 1;
  return s;
}

// The blocker as one comparable line: "what skip|error: reason".
std::string said(const Blocker& b) {
  const char* what[] = {"none", "not-implemented", "no-gpu", "no-python"};
  return fmt::format("{} {}: {}", what[int(b.what)], b.skip ? "skip" : "error", b.reason);
}

const char* const kHint =
    " (Open MPI's mpirun: Debian package openmpi-bin, installed by .ci/install-deps; or set "
    "--launcher / NANCHAOS_LAUNCHER)";

TEST(Preflight, ANameUsedTwiceIsRefusedNamingTheFirstFile) {
  const auto dir = scratch_dir("preflight", "names");
  const auto a = write_file(dir, "a.toml", scenario_text("same"));
  const auto b = write_file(dir, "b.toml", scenario_text("same"));
  const auto c = write_file(dir, "c.toml", scenario_text("other"));
  Preflight pf(kHost, {});
  EXPECT_EQ(pf.load(a).name, "same");
  EXPECT_EQ(load_error(pf, b), b + ": error: [scenario].name \"same\" is also used by " + a);
  EXPECT_EQ(pf.load(c).name, "other");
  // A fresh Preflight (another command) knows no names.
  Preflight again(kHost, {});
  EXPECT_EQ(again.load(b).name, "same");
}

TEST(Preflight, LoadChecksTheHostLimitsUnlessTheyAreLifted) {
  const auto dir = scratch_dir("preflight", "limits");
  const auto f = write_file(dir, "big.toml", scenario_text("big", "ranks = 100000\n"));
  Preflight pf(kHost, {});
  const std::string err = load_error(pf, f);
  EXPECT_EQ(err.rfind(f + ":6:9: error: [job] ranks = 100000: more ranks than this host can run "
                          "(limit 64 = max(64, 8 x 2 cores)",
                      0),
            0u)
      << err;
  HostLimitOptions off;
  off.enabled = false;
  Preflight lifted(kHost, off);
  EXPECT_EQ(lifted.load(f).job.ranks, 100000);
  HostLimitOptions raised;
  raised.max_ranks = 200000;
  Preflight bigger(HostResources{0, "", 2}, raised);  // memory unknown: only the rank limit
  EXPECT_EQ(bigger.load(f).job.ranks, 100000);
}

TEST(Preflight, LoaderErrorsPassThroughUnchanged) {
  const auto dir = scratch_dir("preflight", "loader");
  const auto f =
      write_file(dir, "bad.toml", scenario_text("bad") + "[[fault]]\nkind = \"tensr\"\nstep = 1\n");
  Preflight pf(kHost, {});
  const std::string err = load_error(pf, f);
  EXPECT_EQ(err.rfind(f + ":7:8: error: [[fault]] #1 kind \"tensr\" is unknown", 0), 0u) << err;
  EXPECT_NE(err.find("did you mean \"tensor\"?"), std::string::npos) << err;
}

TEST(Preflight, EveryJobButOneNcclRankNeedsTheLauncher) {
  Scenario cpu;
  EXPECT_TRUE(needs_launcher(cpu));
  Scenario one_nccl = one_cuda_rank();
  EXPECT_FALSE(needs_launcher(one_nccl));
  one_nccl.job.ranks = 2;
  EXPECT_TRUE(needs_launcher(one_nccl));
  EXPECT_TRUE(needs_launcher(external()));
}

TEST(Preflight, AMissingLauncherIsNamedWithWhereToGetIt) {
  const std::vector<Scenario> cpu(1);
  EXPECT_EQ(launcher_error("sh", cpu), "");  // found in PATH
  EXPECT_EQ(launcher_error("/bin/sh -c", cpu), "");
  EXPECT_EQ(launcher_error("/nonexistent/mpirun --hostfile h", cpu),
            std::string("launcher '/nonexistent/mpirun' not found") + kHint);
  EXPECT_EQ(launcher_error("nanchaos-no-such-launcher --mca x y", cpu),
            std::string("launcher 'nanchaos-no-such-launcher' not found in PATH") + kHint);
  EXPECT_EQ(launcher_error("  ", cpu), std::string("launcher '  ' not found") + kHint);
  // Only one NCCL rank: run without a launcher, so a missing one is no error.
  std::vector<Scenario> nccl = {one_cuda_rank()};
  EXPECT_EQ(launcher_error("/nonexistent/mpirun", nccl), "");
  nccl.push_back(Scenario{});
  EXPECT_NE(launcher_error("/nonexistent/mpirun", nccl), "");
  EXPECT_EQ(launcher_error("/nonexistent/mpirun", {}), "");
}

TEST(Preflight, AFeatureNotImplementedIsAnErrorNamedBeforeAMissingGpu) {
  Scenario s = one_cuda_rank();
  FaultSpec f;
  f.kind = "no-such-kind";
  s.faults.push_back(f);
  s.detectors.enabled = {"no-such-detector"};
  Preflight pf(kHost, {}, kNoGpu);
  EXPECT_EQ(said(pf.blocker(s)),
            "not-implemented error: not implemented yet: fault kind `no-such-kind`: not registered "
            "in this build; "
            "detector `no-such-detector`: not registered in this build");
}

TEST(Preflight, ACudaJobWithoutItsGpusIsSkippedWithTheReason) {
  const Scenario s = one_cuda_rank();
  Preflight none(kHost, {}, kNoGpu);
  EXPECT_EQ(said(none.blocker(s)),
            "no-gpu skip: device cuda needs a GPU per rank: 1 ranks, this host has 0 "
            "(cudaGetDeviceCount: no "
            "CUDA-capable device)");
  Preflight two(kHost, {}, kTwoGpus);
  EXPECT_FALSE(two.blocker(s));
  // A CPU job never asks for a GPU.
  EXPECT_FALSE(none.blocker(Scenario{}));
}

TEST(Preflight, AnExternalJobWithoutASuitableInterpreterIsSkippedOrAnError) {
  Preflight pf(kHost, {}, kTwoGpus);
  pf.set_pythons({{"/opt/old/python", "/opt/old/python", "1.13.0", "", {}},
                  {"/opt/new/python", "/opt/new/python", "2.5.1", "", {}}});
  // Torch there, but none meets the requirement: skipped, naming each one's torch.
  EXPECT_EQ(said(pf.blocker(external(">=3"))),
            "no-python skip: no Python interpreter with torch >=3: /opt/old/python: torch 1.13.0; "
            "/opt/new/python: torch 2.5.1; list one in NANCHAOS_PYTHON (':'-separated), e.g. the "
            "torch 2.x venv that .ci/torch2-venv makes");
  // One meets it: no blocker, and that one runs the job.
  EXPECT_FALSE(pf.blocker(external(">=2.4")));
  EXPECT_EQ(pf.python_for(external(">=2.4")).path, "/opt/new/python");
  // No interpreter has torch at all: an error (the host is not set up), not a skip.
  pf.set_pythons(
      {{"python3 (/usr/bin/python3)", "/usr/bin/python3", "", "No module named 'torch'", {}}});
  EXPECT_EQ(said(pf.blocker(external())),
            "no-python error: no Python interpreter with torch: python3 (/usr/bin/python3): No "
            "module named "
            "'torch'; install Debian's python3-torch (.ci/install-deps) or set NANCHAOS_PYTHON");
  // A job that is not a bare python command needs no interpreter.
  Scenario binary = external();
  binary.job.command = {"./train"};
  EXPECT_FALSE(pf.blocker(binary));
  EXPECT_EQ(pf.python_for(binary).path, "");
}

TEST(Preflight, PythonsAreProbedOnlyWhenAScenarioNeedsOne) {
  Preflight pf(kHost, {});
  const PythonCandidate fake{"fake", "/fake/python", "2.5.1", "", {}};
  pf.set_pythons({fake});
  pf.probe_pythons({Scenario{}});  // no external scenario: nothing probed, nothing replaced
  EXPECT_EQ(pf.python_for(external()).path, "/fake/python");
}

}  // namespace
}  // namespace nanchaos::harness
