// Helpers shared by the end-to-end tests that run the `nanchaos` binary as a user would.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
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

}  // namespace nanchaos::test_util
