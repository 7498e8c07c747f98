// Helpers shared by the end-to-end tests that run the `nanchaos` binary as a user would.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace nanchaos::test_util {

/// Exit status and combined stdout+stderr of a shell command.
struct CmdResult {
  int code = -1;  ///< the exit status; -1 when popen failed or the command was killed
  std::string output;
};

/// Runs `cmd` through /bin/sh with stderr folded into stdout and waits for it.
inline CmdResult run_cmd(const std::string& cmd) {
  CmdResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

/// A fresh, empty folder under the temp dir named after the running test, `prefix` and `name`
/// (and this process, so parallel ctest runs never share one).
inline std::string scratch_dir(const std::string& prefix, const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path d =
      std::filesystem::temp_directory_path() /
      (prefix + "-" + std::string(info->name()) + "-" + name + "-" + std::to_string(getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

/// Writes `text` to dir/name; returns the path.
inline std::string write_file(const std::string& dir, const std::string& name,
                              const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

/// The report.json a `nanchaos run --out OUT` wrote.
inline nlohmann::json read_report(const std::string& out) {
  std::ifstream in(out + "/report.json");
  return nlohmann::json::parse(in);
}

/// The shipped suite's run folder: CTest's `shipped_suite_passes` runs every scenario in
/// scenarios/ once into it and passes it to the tests that check shipped scenarios as
/// NANCHAOS_SHIPPED_RUN (tests/CMakeLists.txt, fixture `shipped_report`), so no shipped scenario
/// runs twice. Throws, naming that test, when the variable is unset or the
/// folder has no report.json: such a test must fail, never pass on evidence it did not see.
inline std::string shipped_run() {
  const char* dir = std::getenv("NANCHAOS_SHIPPED_RUN");
  const std::string how =
      "; these tests read the shipped suite's results: run them through CTest (ctest --test-dir "
      "build -R <test>, which runs shipped_suite_passes first), or run `nanchaos run "
      "\"$PWD/scenarios\" "
      "--out DIR` and set NANCHAOS_SHIPPED_RUN=DIR";
  if (dir == nullptr || *dir == '\0')
    throw std::runtime_error("NANCHAOS_SHIPPED_RUN is not set" + how);
  if (!std::filesystem::is_regular_file(std::string(dir) + "/report.json")) {
    throw std::runtime_error("NANCHAOS_SHIPPED_RUN=" + std::string(dir) +
                             " has no report.json: did shipped_suite_passes run and finish?" + how);
  }
  return dir;
}

/// The report entry of shipped scenario `name` in the shipped run (the first trial's when there
/// are several); throws, naming the report and shipped_suite_passes, when the run does not have it.
inline nlohmann::json shipped_scenario(const std::string& name) {
  const std::string dir = shipped_run();
  const nlohmann::json report = read_report(dir);
  for (const auto& s : report.at("scenarios")) {
    if (s.value("name", "") == name) return s;
  }
  throw std::runtime_error("scenario " + name + " is not in " + dir +
                           "/report.json: shipped_suite_passes runs every file in scenarios/; "
                           "was it renamed or run with --tag?");
}

}  // namespace nanchaos::test_util
