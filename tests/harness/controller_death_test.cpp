// A controller that dies (SIGKILL) or is stopped (SIGINT, SIGTERM, SIGHUP)
// during a hung job leaves no process of the job behind; a stopped one writes reports that say
// "interrupted". Real `nanchaos run` processes, real mpirun jobs; processes are found by their
// job id (tests/harness/job_processes.h), never by name.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "harness/common/child_process.h"
#include "harness/common/job_guard.h"
#include "tests/harness/job_processes.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using nanchaos::harness::ChildProcess;
using nanchaos::harness::ExitStatus;
using nanchaos::harness::SpawnOptions;
using nanchaos::test_util::describe;
using nanchaos::test_util::jobs_of_controller;
using nanchaos::test_util::read_report;
using nanchaos::test_util::wait_for_text;
using nanchaos::test_util::wait_no_job_process;
using nanchaos::test_util::write_file;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

const std::string kBin = NANCHAOS_BINARY;

std::string tmpdir(const std::string& name) {
  return nanchaos::test_util::scratch_dir("nanchaos-death", name);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every rank hangs forever at step 2, and no watchdog: only the controller's timeout_ms (or, with
// the controller dead, the job's own defences) ends it.
std::string hang_scenario(const std::string& name, int64_t timeout_ms) {
  return "[scenario]\nname = \"" + name + "\"\n[job]\nworkload = \"mlp\"\nranks = 2\nsteps = 50\n" +
         "timeout_ms = " + std::to_string(timeout_ms) +
         "\n[workload]\nhidden = 16\nfeatures = 8\n[[fault]]\nkind = \"hang\"\n"
         "duration_ms = \"forever\"\nwhere = \"step_start\"\nranks = \"all\"\nstep = 2\n"
         "[expect]\noutcome = \"hung\"\ndeadlock = false\n";
}

// A short clean job.
std::string clean_scenario(const std::string& name) {
  return "[scenario]\nname = \"" + name + "\"\n[job]\nworkload = \"mlp\"\nranks = 2\nsteps = 3\n" +
         "[workload]\nhidden = 16\nfeatures = 8\n[expect]\noutcome = \"completed\"\n";
}

// Both ranks of `run_dir`'s job have logged the hang firing: the job is hung now.
bool wait_hung(const std::string& run_dir) {
  for (int r = 0; r < 2; ++r) {
    if (!wait_for_text(run_dir + "/events/rank-" + std::to_string(r) + ".jsonl",
                       "\"ev\":\"inject\"", 120s)) {
      return false;
    }
  }
  return true;
}

// SIGINT, SIGTERM or SIGHUP on `nanchaos run` while the second of three scenarios hangs.
void stop_during_hang(int sig) {
  const auto dir = tmpdir("in");
  const auto out = tmpdir("out");
  write_file(dir, "1-clean.toml", clean_scenario("1-clean"));
  write_file(dir, "2-hang.toml", hang_scenario("2-hang", 120000));
  write_file(dir, "3-never.toml", clean_scenario("3-never"));
  ChildProcess run =
      nanchaos::test_util::start_run(kBin, {dir, "--quiet", "--out", out}, out + "/console.log");
  ASSERT_TRUE(wait_hung(out + "/2-hang")) << read_text(out + "/console.log");
  ASSERT_FALSE(jobs_of_controller(run.pid()).empty());
  ::kill(run.pid(), sig);
  const auto signalled = std::chrono::steady_clock::now();
  const auto st = run.wait_for(60s);  // a deadlock bound; the job itself must go within 5 s
  ASSERT_TRUE(st.has_value()) << "the controller did not exit";
  // Every process of the job is gone within 5 s of the signal.
  const auto left =
      wait_no_job_process(run.pid(), std::chrono::duration_cast<std::chrono::milliseconds>(
                                         signalled + 5s - std::chrono::steady_clock::now()));
  EXPECT_TRUE(left.empty()) << describe(left);
  // Died of the re-raised signal: a shell reports 128 + sig (130 for SIGINT, 143 for SIGTERM).
  EXPECT_FALSE(st->exited) << st->describe() << "\n" << read_text(out + "/console.log");
  EXPECT_EQ(st->signal, sig);
  EXPECT_EQ(st->code(), 128 + sig);
  const std::string name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP";
  EXPECT_EQ(read_text(out + "/console.log"), "nanchaos run: interrupted by " + name +
                                                 ": 2 scenario(s) judged, 1 not run; reports: " +
                                                 out + "/report.json, junit.xml, report.md\n");

  const json rep = read_report(out);
  EXPECT_EQ(rep["interrupted"], true);
  EXPECT_EQ(rep["complete"], false);
  EXPECT_FALSE(rep.contains("pending"));  // the interruption's lists: the cut one, not_run
  EXPECT_EQ(rep["interrupt_signal"], name);
  EXPECT_EQ(rep["not_run"], json::array({"3-never"}));
  ASSERT_EQ(rep["scenarios"].size(), 2u);
  EXPECT_EQ(rep["scenarios"][0]["name"], "1-clean");
  EXPECT_EQ(rep["scenarios"][0]["verdict"], "pass");
  EXPECT_EQ(rep["scenarios"][1]["name"], "2-hang");
  EXPECT_EQ(rep["scenarios"][1]["verdict"], "error");
  EXPECT_EQ(rep["scenarios"][1]["reason"], "interrupted");
  EXPECT_EQ(rep["scenarios"][1]["interrupted_by"], name);
  // The controller ended that job: no outcome of its own, no fault outcome, nobody blamed.
  EXPECT_TRUE(rep["scenarios"][1]["outcome"].is_null()) << rep["scenarios"][1].dump();
  EXPECT_TRUE(rep["scenarios"][1]["fault_outcome"].is_null()) << rep["scenarios"][1].dump();
  EXPECT_TRUE(rep["scenarios"][1].value("postmortem", json(nullptr)).is_null())
      << rep["scenarios"][1].dump();
  EXPECT_EQ(rep["summary"]["errors"], 1);
  // The summary counts what junit.xml counts: its skipped total is skipped + not_run.
  EXPECT_EQ(rep["summary"]["skipped"], 0);
  EXPECT_EQ(rep["summary"]["not_run"], 1);
  EXPECT_FALSE(rep["summary"].contains("pending"));
  const std::string junit = read_text(out + "/junit.xml");
  EXPECT_NE(junit.find("tests=\"3\" failures=\"0\" errors=\"1\" skipped=\"1\""), std::string::npos)
      << junit;
  EXPECT_NE(junit.find("<property name=\"interrupted\" value=\"" + name + "\"/>"),
            std::string::npos)
      << junit;
  EXPECT_NE(junit.find("<error message=\"interrupted\" type=\"error\"/>"), std::string::npos)
      << junit;
  EXPECT_NE(junit.find("name=\"3-never\" time=\"0.000\">\n    <skipped message=\"not run: the run "
                       "was interrupted by " +
                       name + "\"/>"),
            std::string::npos)
      << junit;
  const std::string md = read_text(out + "/report.md");
  EXPECT_NE(md.find("**2 scenarios: 1 passed, 0 failed, 1 error, 0 skipped; INTERRUPTED by " +
                    name + ": 1 not run (3-never)**"),
            std::string::npos)
      << md;
  EXPECT_FALSE(fs::exists(out + "/3-never"));
}

}  // namespace

// Point 3: SIGKILL of the controller during a hung job. Nothing is left to enforce timeout_ms but
// the job itself: the launcher's death signal, the ranks' watch of the controller and of their
// launcher, and their own deadline (job_guard.h). Every process of the job must be gone within
// timeout_ms + 5 s.
TEST(ControllerDeath, SigkillDuringAHungJobLeavesNoProcessOfTheJob) {
  const int64_t timeout_ms = 20000;
  const auto dir = tmpdir("in");
  const auto out = tmpdir("out");
  const auto file = write_file(dir, "hang.toml", hang_scenario("hang", timeout_ms));
  ChildProcess run =
      nanchaos::test_util::start_run(kBin, {file, "--quiet", "--out", out}, out + "/console.log");
  ASSERT_TRUE(wait_hung(out + "/hang")) << read_text(out + "/console.log");
  const auto before = jobs_of_controller(run.pid());
  ASSERT_GE(before.size(), 3u) << describe(before);  // mpirun and two ranks at least
  ::kill(run.pid(), SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(run.wait_for(10s).has_value());
  const auto left = wait_no_job_process(run.pid(), std::chrono::milliseconds(timeout_ms + 5000));
  EXPECT_TRUE(left.empty()) << describe(left);
  // For the record (not asserted: a loaded host may be slow): how long the job outlived it.
  ::testing::Test::RecordProperty("job_gone_after_ms",
                                  int(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          std::chrono::steady_clock::now() - killed)
                                          .count()));
}

// The same for an external PyTorch job: its ranks are Python processes (exec-rank's death
// signal tied to mpirun, the agent's guard thread, guard.py), rank 1 hung forever and rank 0
// blocked in the gradient all-reduce with a 10-minute process-group timeout.
TEST(ControllerDeath, SigkillDuringAHungExternalJobLeavesNoProcessOfTheJob) {
  const int64_t timeout_ms = 60000;
  const auto dir = tmpdir("in");
  const auto out = tmpdir("out");
  const std::string script = std::string(NANCHAOS_SOURCE_DIR) + "/examples/pytorch/train_ddp.py";
  const auto file = write_file(
      dir, "ext.toml",
      "[scenario]\nname = \"ext\"\n[job]\nworkload = \"external\"\ncommand = [\"python3\", \"" +
          script +
          "\", \"--stack\", \"synced\", \"--steps\", \"12\", \"--pg-timeout-s\", \"600\"]\n"
          "ranks = 2\nsteps = 12\ntimeout_ms = " +
          std::to_string(timeout_ms) +
          "\nenv = { OMP_NUM_THREADS = \"1\" }\n[[fault]]\nkind = \"hang\"\nranks = [1]\n"
          "step = 2\nduration_ms = \"forever\"\nwhere = \"before_grad_allreduce\"\n"
          "[expect]\nrank = 1\ncause = \"hang\"\ndeadlock = false\n");
  ChildProcess run =
      nanchaos::test_util::start_run(kBin, {file, "--quiet", "--out", out}, out + "/console.log");
  ASSERT_TRUE(wait_for_text(out + "/ext/events/rank-1.jsonl", "\"ev\":\"inject\"", 180s))
      << read_text(out + "/console.log") << read_text(out + "/ext/ranks.log");
  const auto before = jobs_of_controller(run.pid());
  ASSERT_GE(before.size(), 3u) << describe(before);
  ::kill(run.pid(), SIGKILL);
  ASSERT_TRUE(run.wait_for(10s).has_value());
  const auto left = wait_no_job_process(run.pid(), std::chrono::milliseconds(timeout_ms + 5000));
  EXPECT_TRUE(left.empty()) << describe(left);
}

// The last line of defence alone: a rank whose controller and launcher live on ends itself at
// its deadline (mpirun is started here by the test, so no death signal and no controller).
TEST(ControllerDeath, ARankEndsItselfAtItsDeadline) {
  const auto dir = tmpdir("in");
  const auto run_dir = tmpdir("run");
  const auto file = write_file(dir, "hang.toml", hang_scenario("hang", 600000));
  SpawnOptions o;
  o.argv = {"mpirun", "-np",        "2",  "--oversubscribe", "--bind-to", "none", kBin,
            "rank",   "--scenario", file, "--run-dir",       run_dir};
  o.env = nanchaos::harness::env_with(
      {{"NANCHAOS_DEADLINE_UNIX_MS", std::to_string(nanchaos::harness::unix_ms() + 3000)},
       {"OMPI_ALLOW_RUN_AS_ROOT", "1"},
       {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}});
  o.stdout_path = run_dir + "/ranks.log";
  ChildProcess job = ChildProcess::spawn(o);
  const auto st = job.wait_for(120s);  // a deadlock bound
  ASSERT_TRUE(st.has_value()) << read_text(run_dir + "/ranks.log");
  EXPECT_NE(st->code(), 0);
  const std::string log = read_text(run_dir + "/ranks.log");
  EXPECT_NE(log.find(": the job's deadline passed (timeout_ms + 2000 ms) and the controller did "
                     "not end the job: ending this rank"),
            std::string::npos)
      << log;
}

// The watch of the controller alone: the rank's controller is a stand-in process the test kills.
TEST(ControllerDeath, ARankEndsItselfWhenItsControllerIsGone) {
  const auto dir = tmpdir("in");
  const auto run_dir = tmpdir("run");
  const auto file = write_file(dir, "hang.toml", hang_scenario("hang", 600000));
  SpawnOptions stand_in;
  stand_in.argv = {"sleep", "600"};
  ChildProcess controller = ChildProcess::spawn(stand_in);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  SpawnOptions o;
  o.argv = {"mpirun", "-np",        "2",  "--oversubscribe", "--bind-to", "none", kBin,
            "rank",   "--scenario", file, "--run-dir",       run_dir};
  o.env = nanchaos::harness::env_with(
      {{"NANCHAOS_CONTROLLER_PID", std::to_string(controller.pid())},
       {"NANCHAOS_CONTROLLER_START",
        std::to_string(nanchaos::harness::process_start_ticks(controller.pid()).value_or(0))},
       {"NANCHAOS_CONTROLLER_HOST", host},
       {"OMPI_ALLOW_RUN_AS_ROOT", "1"},
       {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}});
  o.stdout_path = run_dir + "/ranks.log";
  ChildProcess job = ChildProcess::spawn(o);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(wait_for_text(run_dir + "/events/rank-" + std::to_string(r) + ".jsonl",
                              "\"ev\":\"inject\"", 120s))
        << read_text(run_dir + "/ranks.log");
  }
  EXPECT_FALSE(job.poll().has_value());  // hung, as it would stay without the guard
  controller.kill_group(0ms);            // killed and reaped: its pid names nobody now
  const auto st = job.wait_for(60s);
  ASSERT_TRUE(st.has_value()) << read_text(run_dir + "/ranks.log");
  EXPECT_NE(st->code(), 0);
  const std::string log = read_text(run_dir + "/ranks.log");
  EXPECT_NE(log.find(": the controller (pid " + std::to_string(controller.pid()) +
                     ") is gone: ending this rank"),
            std::string::npos)
      << log;
}

// Point 4.
TEST(Interrupt, SigintEndsTheJobWritesInterruptedReportsAndDiesOfSigint) {
  stop_during_hang(SIGINT);
}

TEST(Interrupt, SigtermEndsTheJobWritesInterruptedReportsAndDiesOfSigterm) {
  stop_during_hang(SIGTERM);
}

// salloc sends its command SIGHUP when the job's allocation is revoked (scancel of the job, its
// time limit, a node set down; tests/slurm/slurm_test.py --phase failures runs the real thing).
TEST(Interrupt, SighupEndsTheJobWritesInterruptedReportsAndDiesOfSighup) {
  stop_during_hang(SIGHUP);
}
