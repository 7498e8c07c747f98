// External jobs end to end with the real binary and real `mpirun -np 2`, Python-free: the rank
// commands are `sh` programs that play the agent where one is needed (printing its events into
// $NANCHAOS_EVENTS themselves). Covers exec-rank's environment, "never attached" ending a job
// early, a fake agent's clean run, `nanchaos targets` on an external scenario, and the
// interpreter resolution's error.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "harness/controller/host_probe.h"
#include "harness/controller/launch.h"
#include "harness/scenario/scenario.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using nanchaos::test_util::run_cmd;

const std::string kBin = NANCHAOS_BINARY;
const std::string kSrc = NANCHAOS_SOURCE_DIR;

std::string tmpdir(const std::string& name) {
  return nanchaos::test_util::scratch_dir("nanchaos-ext", name);
}

using nanchaos::test_util::read_report;
using nanchaos::test_util::write_file;

std::map<std::string, std::string> read_env(const std::string& path) {
  std::map<std::string, std::string> env;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

std::string fmt_path(const std::string& run, int rank) {
  return run + "/env-" + std::to_string(rank) + ".txt";
}

std::string head(const std::string& name, const std::string& job) {
  return "[scenario]\nname = \"" + name + "\"\nseed = 11\n[job]\nworkload = \"external\"\n" +
         "ranks = 2\nsteps = 3\ntimeout_ms = 60000\n" + job;
}

TEST(ExternalJob, ExecRankSetsTheRankEnvironmentAndANeverAttachedJobEndsAtOnce) {
  const auto dir = tmpdir("in");
  const auto out = fs::absolute(tmpdir("out")).string();
  const auto file =
      write_file(dir, "env.toml",
                 head("ext-env",
                      "command = [\"sh\", \"-c\", \"env > $NANCHAOS_RUN_DIR/env-$RANK.txt\"]\n"
                      "env = { FOO = \"bar baz\" }\n"));
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const std::string omp_before = omp ? omp : "";
  unsetenv("OMP_NUM_THREADS");  // torchrun's default applies only where the environment has none
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_cmd(kBin + " run " + file + " --quiet --out " + out);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (omp) setenv("OMP_NUM_THREADS", omp_before.c_str(), 1);
  EXPECT_EQ(r.code, 3) << r.output;
  const json s = read_report(out)["scenarios"][0];
  EXPECT_EQ(s["verdict"], "error");
  const std::string reason = s["reason"];
  EXPECT_NE(reason.find(": the nanchaos agent never loaded (no `agent` event): the command is not "
                        "a Python program or its interpreter did not run the bootstrap, nor a "
                        "LibTorch program that constructs nanchaos::Agent; launcher "
                        "exit status "),
            std::string::npos)
      << reason;
  EXPECT_EQ(reason.rfind("rank ", 0), 0u) << reason;
  EXPECT_LT(secs, 15.0);  // promptly, not after timeout_ms (60 s)

  const std::string run = out + "/ext-env";
  std::string port;
  for (int rank = 0; rank < 2; ++rank) {
    auto env = read_env(fmt_path(run, rank));
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_EQ(env["RANK"], std::to_string(rank));
    EXPECT_EQ(env["WORLD_SIZE"], "2");
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(rank));
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_GT(std::stoi(env["MASTER_PORT"]), 0);
    if (rank == 0) port = env["MASTER_PORT"];
    EXPECT_EQ(env["MASTER_PORT"], port);  // one port per job
    EXPECT_EQ(env["PYTHONPATH"].rfind(kSrc + "/inject/python", 0), 0u) << env["PYTHONPATH"];
    EXPECT_EQ(env["NANCHAOS_RUN_DIR"], run);
    EXPECT_EQ(env["NANCHAOS_EVENTS"], run + "/events/rank-" + std::to_string(rank) + ".jsonl");
    EXPECT_EQ(env["NANCHAOS_PLAN_FILE"], run + "/plan.json");
    EXPECT_EQ(env["NANCHAOS_STEPS"], "3");
    EXPECT_EQ(env["NANCHAOS_SEED"], "11");
    EXPECT_EQ(env["FOO"], "bar baz");
    EXPECT_EQ(env["OMP_NUM_THREADS"], "1");  // torchrun's default with 2 ranks on a host
    const json plan = json::parse(env["NANCHAOS_PLAN"]);
    EXPECT_EQ(plan["scenario"], "ext-env");
    EXPECT_EQ(plan["world"], 2);
    // The shim's launch line comes first; its pid is the command's (exec keeps it).
    std::ifstream ev(run + "/events/rank-" + std::to_string(rank) + ".jsonl");
    std::string first;
    std::getline(ev, first);
    const json launch = json::parse(first);
    EXPECT_EQ(launch["ev"], "launch");
    EXPECT_EQ(launch["rank"], rank);
    EXPECT_EQ(launch["command"][0], "sh");
  }
}

TEST(ExternalJob, ACommandThatNeverLoadsTheAgentIsKilledAtAttachTimeout) {
  const auto dir = tmpdir("in");
  const auto out = tmpdir("out");
  const auto file =
      write_file(dir, "sleep.toml",
                 head("ext-sleep", "command = [\"sleep\", \"100\"]\nattach_timeout_ms = 2000\n"));
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_cmd(kBin + " run " + file + " --quiet --out " + out);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.code, 3) << r.output;
  const json s = read_report(out)["scenarios"][0];
  EXPECT_EQ(s["verdict"], "error");
  EXPECT_NE(s["reason"].get<std::string>().find(
                "the nanchaos agent never loaded (no `agent` event): the command is not a Python "
                "program or its interpreter did not run the bootstrap, nor a LibTorch program that "
                "constructs nanchaos::Agent (attach_timeout_ms = 2000 "
                "ms passed); launcher exit status "),
            std::string::npos)
      << s["reason"];
  EXPECT_LT(secs, 10.0);
  EXPECT_LT(s["wall_ms"].get<double>(), 6000.0);
  auto left = run_cmd("pgrep -f '^sleep 100$' | wc -l");
  EXPECT_EQ(left.output, "0\n");
}

TEST(ExternalJob, AMissingProgramIsTheAttachErrorOfItsRank) {
  const auto dir = tmpdir("in");
  const auto out = tmpdir("out");
  const auto file =
      write_file(dir, "missing.toml", head("ext-missing", "command = [\"./no-such-train.sh\"]\n"));
  auto r = run_cmd(kBin + " run " + file + " --quiet --out " + out);
  EXPECT_EQ(r.code, 3) << r.output;
  const json s = read_report(out)["scenarios"][0];
  EXPECT_EQ(s["verdict"], "error");
  const std::string reason = s["reason"];
  EXPECT_NE(reason.find(": cannot execute " + fs::absolute(dir).string() +
                        "/no-such-train.sh: No such file or directory"),
            std::string::npos)
      << reason;
}

// Plays the agent: the events a clean 3-iteration run writes, or in a dry run (nanchaos
// targets) start + a probe + dry_run_done, then exit 0; with CRASH_IN_DRY_RUN set, rank 1 dies
// of SIGSEGV inside its dry run's iteration 0.
const char* kFakeAgent = R"(#!/bin/sh
e="$NANCHAOS_EVENTS"
p=$$
printf '{"ev":"agent","t_us":1,"rank":%s,"pid":%s,"python":"sh","torch":"none"}\n' "$RANK" "$p" >> "$e"
printf '{"ev":"start","t_us":2,"rank":%s,"world":%s,"pid":%s,"host":"h","external":true,"modules":["net.0","net.1"],"parameters":["net.0.weight","net.1.bias"]}\n' "$RANK" "$WORLD_SIZE" "$p" >> "$e"
case "$NANCHAOS_PLAN" in *'"dry_run":true'*)
  printf '{"ev":"probe","t_us":3,"name":"scores"}\n' >> "$e"
  if [ -n "$CRASH_IN_DRY_RUN" ] && [ "$RANK" = 1 ]; then kill -SEGV $$; fi
  printf '{"ev":"dry_run_done","t_us":4,"step":1}\n' >> "$e"; exit 0;;
esac
i=0
while [ $i -lt "$NANCHAOS_STEPS" ]; do
  printf '{"ev":"step_begin","t_us":%s,"step":%s}\n' $((10 + i)) $i >> "$e"
  printf '{"ev":"step_end","t_us":%s,"step":%s,"loss":1.5,"action":"update","lr":0.001}\n' $((11 + i)) $i >> "$e"
  i=$((i + 1))
done
printf '{"ev":"final","t_us":90,"steps_completed":%s,"eval_loss":1.0,"initial_eval_loss":2.0,"params_hash":"h1","optim_hash":"h2","params_finite":true}\n' "$NANCHAOS_STEPS" >> "$e"
printf '{"ev":"exit","t_us":91,"code":0}\n' >> "$e"
)";

TEST(ExternalJob, AFakeAgentsCleanRunPasses) {
  const auto dir = tmpdir("in");
  const auto out = tmpdir("out");
  write_file(dir, "fake_agent.sh", kFakeAgent);
  const auto file =
      write_file(dir, "fake.toml",
                 head("ext-fake", "command = [\"sh\", \"fake_agent.sh\"]\n") +
                     "[expect]\ndetected = false\nrecovered = true\noutcome = \"completed\"\n");
  auto r = run_cmd(kBin + " run " + file + " --quiet --out " + out);
  EXPECT_EQ(r.code, 0) << r.output;
  const json s = read_report(out)["scenarios"][0];
  EXPECT_EQ(s["verdict"], "pass") << s["reason"];
  EXPECT_EQ(s["steps_completed"], 3);
  const json plan = json::parse(std::ifstream(out + "/ext-fake/plan.json"));
  EXPECT_EQ(plan["dry_run"], false);
}

TEST(ExternalJob, TargetsListsTheNamesTheAgentSawInADryRun) {
  const auto dir = tmpdir("in");
  write_file(dir, "fake_agent.sh", kFakeAgent);
  const auto file =
      write_file(dir, "fake.toml",
                 head("ext-targets", "command = [\"sh\", \"fake_agent.sh\"]\n") +
                     "[[fault]]\nkind = \"tensor\"\ntarget = \"activation:net.1\"\nstep = 1\n"
                     "[expect]\ndeadlock = false\n");
  auto r = run_cmd(kBin + " targets " + file);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output,
            "# activation targets (forward order)\n"
            "activation:net.0\nactivation:net.1\nactivation:scores\n"
            "# parameter / gradient targets\n"
            "parameter:net.0.weight  gradient:net.0.weight\n"
            "parameter:net.1.bias  gradient:net.1.bias\n"
            "loss\n");
  // A job that never attaches is a clear error, not an empty list.
  const auto bad =
      write_file(dir, "bad.toml", head("ext-bad", "command = [\"sh\", \"-c\", \"exit 0\"]\n"));
  auto b = run_cmd(kBin + " targets " + bad);
  EXPECT_EQ(b.code, 2) << b.output;
  EXPECT_NE(b.output.find("the job's dry run never attached: rank "), std::string::npos)
      << b.output;
  EXPECT_NE(b.output.find("the nanchaos agent never loaded"), std::string::npos) << b.output;
  // A rank that dies inside the dry run's iteration 0: the names found so far are printed, but
  // the listing may be incomplete, so it is an error naming the rank (not exit 0).
  const auto crash = write_file(dir, "crash.toml",
                                head("ext-crash",
                                     "command = [\"sh\", \"fake_agent.sh\"]\n"
                                     "env = { CRASH_IN_DRY_RUN = \"1\" }\n"));
  auto c = run_cmd(kBin + " targets " + crash);
  EXPECT_EQ(c.code, 2) << c.output;
  EXPECT_NE(c.output.find("activation:net.0\n"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("attached but rank 1 never finished iteration 0"), std::string::npos)
      << c.output;
  // The built-in workloads still work.
  auto mlp = run_cmd(kBin + " targets mlp");
  EXPECT_EQ(mlp.code, 0);
  EXPECT_NE(mlp.output.find("activation:layers.0\n"), std::string::npos) << mlp.output;
}

TEST(ExternalJob, NoInterpreterWithTorchIsOneClearError) {
  const auto dir = fs::absolute(tmpdir("bin")).string();
  const std::string no_torch =
      "#!/bin/sh\necho 'Traceback (most recent call last):'\n"
      "echo \"ModuleNotFoundError: No module named 'torch'\"\nexit 1\n";
  write_file(dir, "python3", no_torch);
  write_file(dir, "other-python", no_torch);
  fs::permissions(dir + "/python3", fs::perms::owner_all);
  fs::permissions(dir + "/other-python", fs::perms::owner_all);
  const std::string old_path = getenv("PATH") ? getenv("PATH") : "";
  const char* old_py = getenv("NANCHAOS_PYTHON");
  const std::string saved_py = old_py ? old_py : "";
  unsetenv("NANCHAOS_PYTHON");
  setenv("PATH", (dir + ":" + old_path).c_str(), 1);
  using nanchaos::harness::choose_python;
  using nanchaos::harness::probe_pythons;
  const auto got = choose_python(probe_pythons({"python3", dir + "/other-python"}), "");
  setenv("PATH", old_path.c_str(), 1);
  if (old_py) setenv("NANCHAOS_PYTHON", saved_py.c_str(), 1);
  EXPECT_EQ(got.path, "");
  EXPECT_EQ(got.error, "no Python interpreter with torch: python3 (" + dir +
                           "/python3): No module named 'torch'; " + dir +
                           "/other-python: No module named 'torch'; install Debian's "
                           "python3-torch (.ci/install-deps) or set NANCHAOS_PYTHON");
  EXPECT_FALSE(got.unmet);  // no torch at all: an error, not a skip
  EXPECT_EQ(choose_python(probe_pythons({"/nonexistent/python3"}), "").error,
            "no Python interpreter with torch: /nonexistent/python3: not found; install Debian's "
            "python3-torch (.ci/install-deps) or set NANCHAOS_PYTHON");
}

// [job] torch: NANCHAOS_PYTHON lists interpreters (':'-separated), tried before the defaults; the
// first whose torch meets the requirement runs the job; none: `unmet`, naming each one's torch.
TEST(ExternalJob, TorchRequirementPicksTheInterpreterOrNamesEachOnesTorch) {
  const auto dir = fs::absolute(tmpdir("pythons")).string();
  // torch warns on stderr around the import on some installs: the marked line is the version.
  write_file(dir, "py113", "#!/bin/sh\necho 'nanchaos-torch-version 1.13.0a0'\n");
  write_file(dir, "py215",
             "#!/bin/sh\necho 'UserWarning: Failed to initialize NumPy' >&2\n"
             "echo 'nanchaos-torch-version 2.15.0+cu132'\necho 'cpu = _conversion(...)' >&2\n");
  for (const char* f : {"/py113", "/py215"}) fs::permissions(dir + f, fs::perms::owner_all);
  const char* old_py = getenv("NANCHAOS_PYTHON");
  const std::string saved_py = old_py ? old_py : "";
  setenv("NANCHAOS_PYTHON", (dir + "/py113:" + dir + "/py215").c_str(), 1);
  const auto probed = nanchaos::harness::probe_pythons({"/nonexistent/python3"});
  if (old_py) {
    setenv("NANCHAOS_PYTHON", saved_py.c_str(), 1);
  } else {
    unsetenv("NANCHAOS_PYTHON");
  }
  ASSERT_EQ(probed.size(), 3u);
  EXPECT_EQ(probed[1].torch_version, "2.15.0+cu132");
  using nanchaos::harness::choose_python;
  EXPECT_EQ(choose_python(probed, "").path, dir + "/py113");  // the first with any torch
  const auto two = choose_python(probed, ">=2.4");
  EXPECT_EQ(two.path, dir + "/py215");
  EXPECT_EQ(two.torch_version, "2.15.0+cu132");
  EXPECT_EQ(choose_python(probed, ">=1.13,<2").path, dir + "/py113");
  const auto none = choose_python(probed, ">=3");
  EXPECT_EQ(none.path, "");
  EXPECT_TRUE(none.unmet);  // the scenario is skipped with this reason
  EXPECT_EQ(none.error, "no Python interpreter with torch >=3: " + dir +
                            "/py113: torch 1.13.0a0; " + dir +
                            "/py215: torch 2.15.0+cu132; /nonexistent/python3: not found; "
                            "list one in NANCHAOS_PYTHON (':'-separated), e.g. the torch 2.x venv "
                            "that .ci/torch2-venv makes");
}

// A fake interpreter for the probe: `PY -c PROBE NAME...` answers each package NAME from
// `installed` ("lightning 2.6.6\ntransformers 4.46.0", the name as pip spells it) and logs the
// names it was asked for to LOG; any other run (the job itself) just exits.
std::string fake_python(const std::string& torch, const std::string& installed,
                        const std::string& log) {
  return "#!/bin/sh\n[ \"$1\" = -c ] && [ \"$2\" != pass ] || exit 0\nshift 2\necho \"probe: $*\" "
         ">> " +
         log + "\nfor n in \"$@\"; do\n  v=$(printf '%s\\n' '" + installed +
         "' | awk -v n=\"$n\" 'tolower($1) == tolower(n) { print $2 }')\n"
         "  echo \"nanchaos-package $n${v:+ $v}\"\ndone\necho 'nanchaos-torch-version " +
         torch + "'\n";
}

// [job] python_packages: the first interpreter whose torch meets [job] torch and that has every
// package at a version meeting its requirement; none: `unmet`, naming what each one has.
TEST(ExternalJob, PythonPackagesPickTheInterpreterOrNameWhatEachLacks) {
  const auto dir = fs::absolute(tmpdir("pkg-pythons")).string();
  write_file(dir, "py113", fake_python("1.13.0a0", "", dir + "/log113"));
  write_file(dir, "py25", fake_python("2.5.1", "lightning 2.6.6", dir + "/log25"));
  write_file(dir, "py26",
             fake_python("2.6.0", "lightning 1.9.5\ntransformers 4.46.0", dir + "/log26"));
  for (const char* f : {"/py113", "/py25", "/py26"}) fs::permissions(dir + f, fs::perms::owner_all);
  const char* old_py = getenv("NANCHAOS_PYTHON");
  const std::string saved_py = old_py ? old_py : "";
  setenv("NANCHAOS_PYTHON", (dir + "/py113:" + dir + "/py25:" + dir + "/py26").c_str(), 1);
  // Each name once, spelt as first written; a malformed entry is not probed.
  const auto probed = nanchaos::harness::probe_pythons(
      {"/nonexistent/python3"},
      {"lightning>=2.0", "transformers", "Lightning", "not a package!", "accelerate"});
  if (old_py) {
    setenv("NANCHAOS_PYTHON", saved_py.c_str(), 1);
  } else {
    unsetenv("NANCHAOS_PYTHON");
  }
  ASSERT_EQ(probed.size(), 4u);
  std::ifstream log(dir + "/log25");
  std::string asked((std::istreambuf_iterator<char>(log)), {});
  EXPECT_EQ(asked, "probe: lightning transformers accelerate\n");  // one run per interpreter
  EXPECT_EQ(probed[1].torch_version, "2.5.1");
  EXPECT_EQ(probed[1].packages,
            (std::map<std::string, std::string>{
                {"lightning", "2.6.6"}, {"transformers", ""}, {"accelerate", ""}}));
  EXPECT_EQ(probed[2].packages.at("transformers"), "4.46.0");

  using nanchaos::harness::choose_python;
  const auto light = choose_python(probed, ">=2.4", {"lightning>=2.0"});
  EXPECT_EQ(light.path, dir + "/py25");
  EXPECT_EQ(light.torch_version, "2.5.1");
  EXPECT_EQ(light.packages,
            (std::vector<std::pair<std::string, std::string>>{{"lightning", "2.6.6"}}));
  // pip's name comparison; the report keeps the scenario's spelling.
  EXPECT_EQ(choose_python(probed, "", {"Lightning>=2"}).packages,
            (std::vector<std::pair<std::string, std::string>>{{"Lightning", "2.6.6"}}));
  // Any torch, but transformers: py113 and py25 lack it.
  const auto tf = choose_python(probed, "", {"transformers"});
  EXPECT_EQ(tf.path, dir + "/py26");
  EXPECT_EQ(tf.packages,
            (std::vector<std::pair<std::string, std::string>>{{"transformers", "4.46.0"}}));
  // py26 has both, but lightning 1.9.5; py25 has lightning 2.6.6 but no transformers.
  const auto both = choose_python(probed, ">=2.4", {"lightning>=2.0", "transformers"});
  EXPECT_EQ(both.path, "");
  EXPECT_TRUE(both.packages.empty());
  EXPECT_TRUE(both.unmet);  // skipped, not an error
  EXPECT_EQ(both.error,
            "no Python interpreter with torch >=2.4 and lightning>=2.0, transformers: " + dir +
                "/py113: torch 1.13.0a0, no lightning, no transformers; " + dir +
                "/py25: torch 2.5.1, lightning 2.6.6, no transformers; " + dir +
                "/py26: torch 2.6.0, lightning 1.9.5, transformers 4.46.0; /nonexistent/python3: "
                "not found; list one in NANCHAOS_PYTHON (':'-separated), e.g. the torch 2.x venv "
                "that .ci/torch2-venv makes");
  // A version requirement on a package that is installed but too old everywhere.
  const auto old = choose_python(probed, "", {"lightning>=2.7"});
  EXPECT_EQ(old.path, "");
  EXPECT_TRUE(old.unmet);
  EXPECT_EQ(old.error.rfind("no Python interpreter with torch and lightning>=2.7: " + dir +
                                "/py113: torch 1.13.0a0, no lightning; " + dir +
                                "/py25: torch 2.5.1, lightning 2.6.6; " + dir +
                                "/py26: torch 2.6.0, lightning 1.9.5; ",
                            0),
            0u)
      << old.error;
  // A package the probe was not asked about counts as missing; with no torch anywhere it is an
  // error as before.
  EXPECT_NE(choose_python(probed, "", {"numpy"}).error.find("/py26: torch 2.6.0, no numpy;"),
            std::string::npos);
  const auto no_torch =
      choose_python(nanchaos::harness::probe_pythons({"/nonexistent/python3"}), "", {"lightning"});
  EXPECT_FALSE(no_torch.unmet);
  EXPECT_EQ(no_torch.error,
            "no Python interpreter with torch and lightning: /nonexistent/python3: not found; "
            "install Debian's python3-torch (.ci/install-deps) or set NANCHAOS_PYTHON");
  EXPECT_EQ(
      choose_python(probed, "", {"lightning 2"})
          .error.rfind("[job].python_packages: \"lightning 2\" is not a package requirement: ", 0),
      0u);
}

// [job] python_packages end to end: one probe per suite for the packages of all its scenarios;
// a scenario whose packages no interpreter has is skipped with what each has, one that is met runs
// with that interpreter, and report.json gives the versions of its packages.
TEST(ExternalJob, PythonPackagesSkipOrGoIntoTheReport) {
  const auto dir = fs::absolute(tmpdir("pkg-in")).string();
  const auto out = fs::absolute(tmpdir("pkg-out")).string();
  write_file(dir, "py25", fake_python("2.5.1", "lightning 2.6.6", dir + "/log25"));
  write_file(dir, "py26", fake_python("2.6.0", "transformers 4.46.0", dir + "/log26"));
  for (const char* f : {"/py25", "/py26"}) fs::permissions(dir + f, fs::perms::owner_all);
  write_file(dir, "light.toml",
             head("ext-pkg-light",
                  "command = [\"python3\", \"-c\", \"pass\"]\ntorch = \">=2.4\"\n"
                  "python_packages = [\"lightning>=2.0\"]\n"));
  write_file(dir, "never.toml",
             head("ext-pkg-never",
                  "command = [\"python3\", \"-c\", \"pass\"]\n"
                  "python_packages = [\"transformers>=99\"]\n"));
  const char* old_py = getenv("NANCHAOS_PYTHON");
  const std::string saved_py = old_py ? old_py : "";
  setenv("NANCHAOS_PYTHON", (dir + "/py25:" + dir + "/py26").c_str(), 1);
  auto r =
      run_cmd(kBin + " run " + dir + "/light.toml " + dir + "/never.toml --quiet --out " + out);
  if (old_py) {
    setenv("NANCHAOS_PYTHON", saved_py.c_str(), 1);
  } else {
    unsetenv("NANCHAOS_PYTHON");
  }
  std::ifstream log(dir + "/log25");
  std::string asked((std::istreambuf_iterator<char>(log)), {});
  EXPECT_EQ(asked, "probe: lightning transformers\n") << r.output;  // once, for the whole suite
  const json rep = read_report(out);
  json light, never;
  for (const auto& s : rep["scenarios"]) (s["name"] == "ext-pkg-light" ? light : never) = s;
  EXPECT_EQ(never["verdict"], "skipped") << never.dump();
  const std::string why = never["reason"];
  EXPECT_EQ(why.rfind("no Python interpreter with torch and transformers>=99: " + dir +
                          "/py25: torch 2.5.1, no transformers; " + dir +
                          "/py26: torch 2.6.0, transformers 4.46.0; ",
                      0),
            0u)
      << why;
  EXPECT_FALSE(never.contains("python"));
  EXPECT_FALSE(never.contains("python_packages"));
  // The fake interpreter never loads the agent: error, but it ran with py25.
  EXPECT_EQ(light["verdict"], "error") << light.dump();
  EXPECT_EQ(light["python"], dir + "/py25") << light.dump();
  EXPECT_EQ(light["torch"], "2.5.1");
  EXPECT_EQ(light["python_packages"], json({{"lightning", "2.6.6"}})) << light.dump();
}

// [job] launch = "plain": none of torchrun's variables reach the command, not even inherited ones;
// the NANCHAOS_* variables still do.
TEST(ExternalJob, PlainLaunchSetsNoneOfTorchrunsVariables) {
  const auto dir = tmpdir("plain-in");
  const auto out = fs::absolute(tmpdir("plain-out")).string();
  std::string job =
      "command = [\"sh\", \"-c\", \"env > $NANCHAOS_RUN_DIR/env-plain.txt\"]\n"
      "launch = \"plain\"\n";
  std::string text = head("ext-plain", job);
  text.replace(text.find("ranks = 2"), 9, "ranks = 1");
  const auto file = write_file(dir, "plain.toml", text);
  setenv("RANK", "7", 1);  // inherited by the launcher: must not reach the job
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const std::string omp_before = omp ? omp : "";
  unsetenv("OMP_NUM_THREADS");
  auto r = run_cmd(kBin + " run " + file + " --quiet --out " + out);
  unsetenv("RANK");
  if (omp) setenv("OMP_NUM_THREADS", omp_before.c_str(), 1);
  EXPECT_EQ(r.code, 3) << r.output;  // sh never loads the agent: error, as for torchrun
  const auto env = read_env(out + "/ext-plain/env-plain.txt");
  ASSERT_FALSE(env.empty()) << r.output;
  for (const char* k :
       {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) {
    EXPECT_EQ(env.count(k), 0u) << k;
  }
  EXPECT_EQ(env.count("OMP_NUM_THREADS"), 0u);  // one rank: torchrun leaves it unset too
  EXPECT_EQ(env.count("NANCHAOS_EVENTS"), 1u);
  EXPECT_EQ(env.at("NANCHAOS_STEPS"), "3");
}

// [job] torch: a requirement no interpreter meets skips the scenario with each one's torch; one
// that is met runs the job with that interpreter, and the report names it and its torch.
TEST(ExternalJob, TorchRequirementSkipsOrNamesTheInterpreterInTheReport) {
  if (nanchaos::harness::resolve_python().path.empty()) GTEST_SKIP() << "no Python with torch";
  const auto dir = tmpdir("torchreq-in");
  const auto out = fs::absolute(tmpdir("torchreq-out")).string();
  write_file(
      dir, "never.toml",
      head("ext-torch-never", "command = [\"python3\", \"-c\", \"pass\"]\ntorch = \">=99\"\n"));
  write_file(dir, "any.toml",
             head("ext-torch-any", "command = [\"python3\", \"-c\", \"pass\"]\ntorch = \">=1\"\n"));
  auto r = run_cmd(kBin + " run " + dir + " --quiet --out " + out);
  const json rep = read_report(out);
  json never, any;
  for (const auto& s : rep["scenarios"]) (s["name"] == "ext-torch-never" ? never : any) = s;
  EXPECT_EQ(never["verdict"], "skipped") << never.dump();
  const std::string why = never["reason"];
  EXPECT_EQ(why.rfind("no Python interpreter with torch >=99: ", 0), 0u) << why;
  EXPECT_NE(why.find(": torch "), std::string::npos) << why;
  EXPECT_FALSE(never.contains("python"));
  // `python3 -c pass` never loads the agent: error, but it ran with the chosen interpreter.
  EXPECT_EQ(any["verdict"], "error") << any.dump();
  ASSERT_TRUE(any.contains("python")) << any.dump();
  EXPECT_EQ(any["torch"].get<std::string>().rfind("1.", 0) == 0 ||
                any["torch"].get<std::string>().rfind("2.", 0) == 0,
            true)
      << any.dump();
  EXPECT_TRUE(fs::exists(any["python"].get<std::string>()));
}

TEST(ExternalJob, ExecRankArgvGoesThroughTheLauncher) {
  nanchaos::harness::Scenario s;
  s.job.workload = nanchaos::harness::WorkloadKind::kExternal;
  s.job.ranks = 3;
  const auto argv = nanchaos::harness::exec_rank_argv("srun --mpi=pmix", s, "/bin/nc", "/s.toml",
                                                      "/run", 29500, "/usr/bin/python3", 4);
  std::ostringstream joined;
  for (const auto& a : argv) joined << a << " ";
  EXPECT_EQ(joined.str(),
            "srun --mpi=pmix -n 3 --kill-on-bad-exit=1 /bin/nc exec-rank --scenario /s.toml "
            "--run-dir /run --master-port 29500 --python /usr/bin/python3 --seed 4 ");
}

}  // namespace

TEST(ExternalJob, MasterPortIsBindableAndBelowTheEphemeralRange) {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int lo = 32768, hi = 60999;
  range >> lo >> hi;
  for (int i = 0; i < 20; ++i) {
    const int port = nanchaos::harness::free_port();
    ASSERT_GT(port, 0);
    if (lo > 21000) {  // a host whose range starts low has no room below it
      EXPECT_GE(port, 20000);
      EXPECT_LT(port, lo) << "a port outgoing connections take by themselves";
    }
  }
}

// torch's TCPStore on rank 0 found its MASTER_PORT taken (as in CI, where a parallel job's
// connection took it): nothing was measured, so the job is launched again on another port.
TEST(ExternalJob, AJobThatLostItsMasterPortIsLaunchedAgain) {
  const auto dir = tmpdir("in");
  const auto out = tmpdir("out");
  const std::string once = std::string(R"sh(#!/bin/sh
mark="$(dirname "$0")/tried-$RANK"
echo "$MASTER_PORT" >> "$(dirname "$0")/ports-$RANK"
if [ ! -e "$mark" ]; then
  touch "$mark"
  printf '{"ev":"agent","t_us":1,"rank":%s,"pid":%s,"python":"sh","torch":"none"}\n' "$RANK" $$ >> "$NANCHAOS_EVENTS"
  if [ "$RANK" = 0 ]; then
    printf '{"ev":"exception","t_us":2,"message":"RuntimeError: The server socket has failed to bind to 0.0.0.0:%s (errno: 98 - Address already in use)."}\n' "$MASTER_PORT" >> "$NANCHAOS_EVENTS"
  fi
  exit 1
fi
)sh") + (kFakeAgent + std::string(kFakeAgent).find('\n') + 1);
  write_file(dir, "fake_agent.sh", once);
  const auto file =
      write_file(dir, "fake.toml",
                 head("ext-port", "command = [\"sh\", \"" + dir + "/fake_agent.sh\"]\n") +
                     "[expect]\ndetected = false\noutcome = \"completed\"\n");
  auto r = run_cmd(kBin + " run " + file + " --out " + out);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("was taken before rank 0 bound it"), std::string::npos) << r.output;
  const json s = read_report(out)["scenarios"][0];
  EXPECT_EQ(s["verdict"], "pass") << s["reason"];
  EXPECT_TRUE(fs::exists(out + "/ext-port/ranks.port-taken-1.log"));
  std::ifstream ports(dir + "/ports-0");
  int first = 0, second = 0;
  ports >> first >> second;
  EXPECT_NE(first, second) << "the second launch got a fresh MASTER_PORT";
}

// A job that attached and then failed to bind is not launched again: it may have measured.
TEST(ExternalJob, LostMasterPortNeedsAnExceptionBeforeAnyStart) {
  const auto run = tmpdir("lost-port");
  fs::create_directories(run + "/events");
  const std::string busy =
      R"j({"ev":"exception","t_us":2,"message":"RuntimeError: bind (errno: 98 - Address already in use)"})j";
  write_file(run + "/events", "rank-0.jsonl", busy + "\n");
  write_file(run + "/events", "rank-1.jsonl", "");
  EXPECT_TRUE(nanchaos::harness::lost_master_port(run, 2));
  write_file(run + "/events", "rank-1.jsonl",
             R"({"ev":"start","t_us":1})"
             "\n");
  EXPECT_FALSE(nanchaos::harness::lost_master_port(run, 2));
  write_file(run + "/events", "rank-0.jsonl",
             R"({"ev":"exception","t_us":2,"message":"ValueError: x"})"
             "\n");
  write_file(run + "/events", "rank-1.jsonl", "");
  EXPECT_FALSE(nanchaos::harness::lost_master_port(run, 2));
}

// CI's selection and artifacts (issue 35): --exclude-tag after --tag, a suite named after the
// folder `run .` was given, one summary line under --quiet, and a reused --out cleared of the
// earlier run's scenario folders.
TEST(ExternalJob, ExcludeTagQuietSummaryAndAReusedOutFolder) {
  const auto dir = tmpdir("suite-ci");
  const auto out = tmpdir("out-ci");
  write_file(dir, "fake_agent.sh", kFakeAgent);
  auto scenario = [&](const std::string& name, const std::string& tags) {
    const std::string text =
        "[scenario]\nname = \"" + name + "\"\nseed = 11\ntags = [" + tags +
        "]\n[job]\nworkload = \"external\"\nranks = 2\nsteps = 3\ntimeout_ms = 60000\n"
        "command = [\"sh\", \"" +
        dir + "/fake_agent.sh\"]\n[expect]\ndetected = false\n";
    write_file(dir, name + ".toml", text);
  };
  scenario("ci-fast", "\"smoke\"");
  scenario("ci-slow", "\"smoke\", \"slow\"");
  auto r = run_cmd("cd " + dir + " && " + kBin + " run . --quiet --exclude-tag slow --out " + out);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("nanchaos run: 1 scenario: 1 passed, 0 failed, 0 errors, 0 skipped; "
                          "reports: " +
                          out + "/report.json"),
            std::string::npos)
      << r.output;
  json rep = read_report(out);
  EXPECT_EQ(rep["suite"], fs::path(dir).filename().string()) << "not \".\"";
  ASSERT_EQ(rep["scenarios"].size(), 1u);
  EXPECT_EQ(rep["scenarios"][0]["name"], "ci-fast");
  EXPECT_TRUE(fs::exists(out + "/ci-fast"));
  // The same --out again, with the other scenario: the earlier run's folder is gone.
  r = run_cmd(kBin + " run " + dir + " --quiet --tag slow --out " + out);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("cleared the earlier run there (its reports and 1 scenario folder(s))"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(out + "/ci-fast"));
  EXPECT_TRUE(fs::exists(out + "/ci-slow"));
  rep = read_report(out);
  ASSERT_EQ(rep["scenarios"].size(), 1u);
  EXPECT_EQ(rep["scenarios"][0]["name"], "ci-slow");
  // Everything excluded: exit 2, nothing started, and it says why.
  r = run_cmd(kBin + " run " + dir + " --tag slow --exclude-tag smoke --out " + out + "-none");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("(after --exclude-tag smoke); nothing left to run"), std::string::npos)
      << r.output;
}

// A job that writes a line whose "ev" is not a string into its event log while the controller
// watches it: an `error` verdict with the reports written (the controller's live readers threw
// json::type_error and nanchaos ended with exit 134 and no report: break-it finding).
TEST(ExternalJob, AnEventTypeThatIsNotAStringIsAnErrorNotACrash) {
  const auto dir = tmpdir("ev-null");
  const auto out = tmpdir("out-ev-null");
  write_file(dir, "one.sh", "#!/bin/sh\nprintf '%s\\n' '{\"ev\":null}' >> \"$NANCHAOS_EVENTS\"\n");
  write_file(dir, "n.toml",
             "[scenario]\nname = \"n\"\n[job]\nworkload = \"external\"\nranks = 1\nsteps = 4\n"
             "timeout_ms = 20000\nattach_timeout_ms = 5000\ncommand = [\"sh\", \"" +
                 dir + "/one.sh\"]\n[expect]\noutcome = \"completed\"\n");
  const auto r = run_cmd(kBin + " run " + dir + " --quiet --out " + out);
  EXPECT_EQ(r.code, 3) << r.output;  // a scenario could not be judged
  const json rep = read_report(out);
  ASSERT_EQ(rep["scenarios"].size(), 1u);
  EXPECT_EQ(rep["scenarios"][0]["verdict"], "error");
  // A whole line (a newline ends it) that is no event, named as such with its file and line.
  EXPECT_NE(rep["scenarios"][0]["reason"].get<std::string>().find(
                "cannot judge: a line of a rank's event log is no event: " + out +
                "/n/events/rank-0.jsonl:"),
            std::string::npos)
      << rep["scenarios"][0]["reason"];
  EXPECT_NE(rep["scenarios"][0]["reason"].get<std::string>().find(
                ": no string \"ev\": \"{\\\"ev\\\":null}\""),
            std::string::npos)
      << rep["scenarios"][0]["reason"];
}

// `run --resume` of a run whose suite folder moved since: refused (exit 2) naming the missing
// path as run-state.json's, not as a loader error of a bare path.
TEST(ExternalJob, ResumeOfASuiteThatMovedNamesThePathFromTheRunState) {
  const auto dir = tmpdir("suite-moved");
  const auto out = tmpdir("out-moved");
  write_file(dir, "fake_agent.sh", kFakeAgent);
  write_file(dir, "m1.toml",
             "[scenario]\nname = \"m1\"\nseed = 11\n[job]\nworkload = \"external\"\nranks = 2\n"
             "steps = 3\ntimeout_ms = 60000\ncommand = [\"sh\", \"" +
                 dir + "/fake_agent.sh\"]\n[expect]\ndetected = false\n");
  auto r = run_cmd("cd " + dir + " && " + kBin + " run . --quiet --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  // As if the controller had died before the end: the state says not complete.
  json state = json::parse(std::ifstream(out + "/run-state.json"));
  state["complete"] = false;
  std::ofstream(out + "/run-state.json") << state.dump(2);
  fs::rename(dir, dir + "-moved");
  r = run_cmd("cd / && " + kBin + " run --resume " + out);
  fs::rename(dir + "-moved", dir);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(dir + " (a scenario path of run-state.json's invocation) no longer "
                                "exists: the suite was moved or deleted after the first run"),
            std::string::npos)
      << r.output;
}

// `run --resume` on a run whose controller still runs: refused (exit 2), nothing touched.
TEST(ExternalJob, ResumeRefusesARunWhoseControllerStillRuns) {
  const auto dir = tmpdir("suite-live");
  const auto out = tmpdir("out-live");
  write_file(dir, "slow.sh", "#!/bin/sh\nsleep 120\n");
  write_file(dir, "live.toml",
             "[scenario]\nname = \"live\"\nseed = 1\n[job]\nworkload = \"external\"\n"
             "ranks = 1\nsteps = 3\ntimeout_ms = 60000\ncommand = [\"sh\", \"" +
                 dir + "/slow.sh\"]\n");
  // The live controller, in the background; its pid is in the state it writes first.
  ASSERT_EQ(
      std::system((kBin + " run " + dir + " --quiet --out " + out + " >" + dir + "/live.log 2>&1 &")
                      .c_str()),
      0);
  json state;
  for (int i = 0; i < 500 && !state.contains("controller"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::ifstream in(out + "/run-state.json");
    if (in) state = json::parse(in, nullptr, false);
    if (state.is_discarded()) state = json();
  }
  ASSERT_TRUE(state.contains("controller")) << "no run-state.json from the live run";
  const int live = int(state["controller"]["pid"].get<int64_t>());
  const auto r = run_cmd(kBin + " run --resume " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("its controller (pid " + std::to_string(live) + ") is still running"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(::kill(live, 0), 0) << "the live controller was touched";
  // SIGTERM: a job started with "&" by a non-interactive shell ignores SIGINT (POSIX), which the
  // controller respects (stop_signal.cpp).
  ::kill(live, SIGTERM);      // it writes its reports and ends its job
  const auto running = [&] {  // not gone, not a zombie waiting for whoever adopted it
    std::ifstream stat("/proc/" + std::to_string(live) + "/stat");
    std::string line;
    std::getline(stat, line);
    const auto rp = line.rfind(')');
    return rp != std::string::npos && rp + 2 < line.size() && line[rp + 2] != 'Z';
  };
  for (int i = 0; i < 500 && running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(running()) << "the live controller did not end on SIGTERM";
}

// `run --resume` (issue 32): the second scenario's first launch kills the controller (kill -9,
// as a lost node would); resume keeps the first scenario as judged (not run again), runs the
// rest, and the reports list all three in suite order.
TEST(ExternalJob, ResumeRunsWhatTheDeadControllerLeft) {
  const auto dir = tmpdir("suite-resume");
  const auto out = tmpdir("out-resume");
  write_file(dir, "fake_agent.sh", kFakeAgent);
  write_file(dir, "kill_controller.sh",
             std::string("#!/bin/sh\nif [ ! -e \"") + dir + "/killed\" ]; then touch \"" + dir +
                 "/killed\"; setsid sleep 120 & kill -9 \"$NANCHAOS_CONTROLLER_PID\"; wait; "
                 "exit 1; "
                 "fi\n" +
                 "exec sh \"" + dir + "/fake_agent.sh\"\n");
  auto scenario = [&](const std::string& name, const std::string& script) {
    write_file(dir, name + ".toml",
               "[scenario]\nname = \"" + name +
                   "\"\nseed = 11\n[job]\nworkload = \"external\"\nranks = 2\nsteps = 3\n"
                   "timeout_ms = 60000\ncommand = [\"sh\", \"" +
                   dir + "/" + script + "\"]\n[expect]\ndetected = false\n");
  };
  scenario("r1-first", "fake_agent.sh");
  scenario("r2-kills", "kill_controller.sh");
  scenario("r3-last", "fake_agent.sh");
  // Started with a relative path from the suite's folder, resumed from another folder.
  auto r = run_cmd("cd " + dir + " && " + kBin + " run . --quiet --out " + out);
  EXPECT_TRUE(r.code == -1 || r.code == 137) << r.code << r.output;  // killed by SIGKILL
  json state = json::parse(std::ifstream(out + "/run-state.json"));
  EXPECT_EQ(state["complete"], false);
  EXPECT_EQ(state["planned"], json({"r1-first", "r2-kills", "r3-last"}));
  const json left = read_report(out);
  ASSERT_EQ(left["scenarios"].size(), 1u);  // written after the first scenario
  // What the dead controller left says it is no finished run, in every report.
  EXPECT_EQ(left["complete"], false);
  EXPECT_EQ(left["interrupted"], false);
  EXPECT_EQ(left["pending"], json({"r2-kills", "r3-last"}));
  EXPECT_EQ(left["summary"]["pending"], 2);  // junit.xml's errors: errors + pending
  EXPECT_FALSE(left["summary"].contains("not_run"));
  {
    std::ifstream junit(out + "/junit.xml");
    const std::string x((std::istreambuf_iterator<char>(junit)), std::istreambuf_iterator<char>());
    EXPECT_NE(x.find("tests=\"3\" failures=\"0\" errors=\"2\""), std::string::npos) << x;
  }
  const auto first_log = fs::last_write_time(out + "/r1-first/ranks.log");
  // The dead controller's job is still there (its ranks sleep 120 s; no agent guards them). The
  // sleep starts before the kill: mpirun, left without its controller, may end the rank's shell
  // before that shell would have started a sleep after it (under load it did, 1 run in ~10). It
  // runs in a session of its own (setsid), as a daemon a job forks would: mpirun's teardown of
  // its ranks reached a sleep in the rank's own process group too, at a time of its choosing, so
  // it could be gone before the resume looked (CI, once). Only the resume may end it.
  const std::string dead_pid = std::to_string(state["controller"]["pid"].get<int64_t>());
  const std::string dead_start = std::to_string(state["controller"]["start"].get<uint64_t>());
  const auto left_by_dead = [&] {
    return nanchaos::harness::processes_with_env(
        {"NANCHAOS_CONTROLLER_PID=" + dead_pid, "NANCHAOS_CONTROLLER_START=" + dead_start});
  };
  EXPECT_FALSE(left_by_dead().empty()) << "the test's job ended before the resume";

  r = run_cmd("cd / && " + kBin + " run --resume " + out);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("process(es) the dead controller (pid " + dead_pid + ") left running"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(left_by_dead().empty()) << "a process of the killed run remains";
  EXPECT_NE(r.output.find("1 of 3 scenario(s) judged already"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("nanchaos run: 3 scenarios: 3 passed"), std::string::npos) << r.output;
  const json rep = read_report(out);
  ASSERT_EQ(rep["scenarios"].size(), 3u);
  EXPECT_EQ(rep["scenarios"][0]["name"], "r1-first");
  EXPECT_EQ(rep["scenarios"][1]["name"], "r2-kills");
  EXPECT_EQ(rep["scenarios"][2]["name"], "r3-last");
  for (const auto& s : rep["scenarios"]) EXPECT_EQ(s["verdict"], "pass") << s["reason"];
  EXPECT_EQ(rep["complete"], true);
  EXPECT_FALSE(rep.contains("pending"));
  EXPECT_FALSE(rep["summary"].contains("pending"));
  // The resumed controller named its scenarios as the first one did: as written, relative to the
  // folder the run was started in.
  for (const auto& s : rep["scenarios"]) {
    EXPECT_EQ(s["file"], "./" + s["name"].get<std::string>() + ".toml") << s.dump();
  }
  EXPECT_EQ(fs::last_write_time(out + "/r1-first/ranks.log"), first_log) << "ran again";
  EXPECT_EQ(json::parse(std::ifstream(out + "/run-state.json"))["complete"], true);
  // Once finished there is nothing to resume.
  r = run_cmd(kBin + " run --resume " + out);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("that run finished; nothing to resume"), std::string::npos) << r.output;
  r = run_cmd(kBin + " run " + dir + " --resume " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  // Nor other options: the run keeps those it was started with.
  r = run_cmd(kBin + " run --resume " + out + " --trials 2");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--resume DIR takes no other option (--trials)"), std::string::npos)
      << r.output;
}
