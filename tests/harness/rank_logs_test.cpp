// Per-rank output: each rank's stdout and stderr in RUN/ranks/rank-N.out and
// .err, whole lines in order, and RUN/ranks.log as the merged view with every line whole and
// tagged with its rank and stream. The merger is tested on hand-written files; the whole path
// with the real binary, `mpirun -np 2` and a Python job (Debian's /usr/bin/python3) that prints
// 2 x 2 x 5,000 lines of 140 bytes as fast as it can, which under the old merged pipe came out
// with hundreds of lines split or glued (measured: 614 of 20,000 with plain mpirun here).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "harness/common/rank_output.h"
#include "harness/controller/merged_log.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using nanchaos::test_util::read_report;
using nanchaos::test_util::run_cmd;
using nanchaos::test_util::write_file;

const std::string kBin = NANCHAOS_BINARY;

std::string tmpdir(const std::string& name) {
  return fs::absolute(nanchaos::test_util::scratch_dir("nanchaos-ranklogs", name)).string();
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

void append(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::app) << text;
}

TEST(MergedLog, CopiesOnlyWholeLinesTaggedBySourceAndEndsTailsAtFinish) {
  const auto dir = tmpdir("ranks");
  const auto merged_path = tmpdir("view") + "/ranks.log";
  nanchaos::harness::MergedLog merged(dir, merged_path);
  append(dir + "/launcher.log", "mpirun says hello\n");
  append(dir + "/rank-0.out", "zero one\nzero tw");  // a line cut mid-way by the read
  append(dir + "/rank-1.err", "Traceback (most recent call last):\n");
  append(dir + "/notes.txt", "not a source\n");
  merged.poll();
  EXPECT_EQ(lines_of(merged_path),
            (std::vector<std::string>{"[launcher] mpirun says hello", "[rank 0] zero one",
                                      "[rank 1 err] Traceback (most recent call last):"}));
  append(dir + "/rank-0.out", "o\nzero three");  // the rest of it, then a tail never ended
  append(dir + "/rank-12.out", "twelve\n");      // a source that appears later
  merged.poll();
  merged.finish();
  EXPECT_EQ(lines_of(merged_path),
            (std::vector<std::string>{
                "[launcher] mpirun says hello", "[rank 0] zero one",
                "[rank 1 err] Traceback (most recent call last):", "[rank 0] zero two",
                "[rank 12] twelve", "[rank 0] zero three"}));
}

TEST(RankOutput, NothingIsRedirectedWithoutTheVariable) {
  unsetenv(nanchaos::harness::kRankOutputEnv);
  EXPECT_EQ(nanchaos::harness::redirect_rank_output(0), "");
  setenv(nanchaos::harness::kRankOutputEnv, "/nonexistent/deep/ranks", 1);
  EXPECT_EQ(nanchaos::harness::redirect_rank_output(0),
            "cannot create /nonexistent/deep/ranks: No such file or directory");
  unsetenv(nanchaos::harness::kRankOutputEnv);
}

// Plays the agent around a Python program that prints as fast as it can (python3 -I: the agent's
// sitecustomize on PYTHONPATH stays out of it): the events of a clean 3-iteration run.
const char* kSpewJob = R"(#!/bin/sh
e="$NANCHAOS_EVENTS"
p=$$
printf '{"ev":"agent","t_us":1,"rank":%s,"pid":%s,"python":"sh","torch":"none"}\n' "$RANK" "$p" >> "$e"
printf '{"ev":"start","t_us":2,"rank":%s,"world":%s,"pid":%s,"host":"h","external":true,"modules":["net.0"],"parameters":["net.0.weight"]}\n' "$RANK" "$WORLD_SIZE" "$p" >> "$e"
/usr/bin/python3 -I spew.py || exit 3
i=0
while [ $i -lt "$NANCHAOS_STEPS" ]; do
  printf '{"ev":"step_begin","t_us":%s,"step":%s}\n' $((10 + i)) $i >> "$e"
  printf '{"ev":"step_end","t_us":%s,"step":%s,"loss":1.5,"action":"update","lr":0.001}\n' $((11 + i)) $i >> "$e"
  i=$((i + 1))
done
printf '{"ev":"final","t_us":90,"steps_completed":%s,"eval_loss":1.0,"initial_eval_loss":2.0,"params_hash":"h1","optim_hash":"h2","params_finite":true}\n' "$NANCHAOS_STEPS" >> "$e"
printf '{"ev":"exit","t_us":91,"code":0}\n' >> "$e"
)";

const char* kSpew = R"(import os, sys
rank = os.environ["RANK"]
pad = "x" * 120
for i in range(5000):
    print(f"r{rank} out {i:06d} {pad} end")
    print(f"r{rank} err {i:06d} {pad} end", file=sys.stderr)
)";

constexpr int kLines = 5000;

// Every line of `lines` is "r<rank> <stream> <i> x... end" (after `prefix`), i counting 0, 1, ...
// per (rank, stream) in order; returns the lines that are not, and counts the rest in `seen`.
std::vector<std::string> broken_lines(const std::vector<std::string>& lines,
                                      std::map<std::string, int>& seen, bool merged) {
  static const std::regex kLine(R"(^(\[rank (\d) ?(err)?\] )?r(\d) (out|err) (\d{6}) x{120} end$)");
  std::vector<std::string> bad;
  for (const auto& l : lines) {
    std::smatch m;
    if (!std::regex_match(l, m, kLine) || m[1].matched != merged) {
      // mpirun's own words, if any; the job's lines must come through the ranks' own files.
      if (merged && l.rfind("[launcher] ", 0) == 0 && l.find("xxxxxxxxxx") == std::string::npos) {
        continue;
      }
      bad.push_back(l.substr(0, 200));
      continue;
    }
    if (merged && (m[2].str() != m[4].str() || m[3].matched != (m[5].str() == "err"))) {
      bad.push_back("tag does not match the line: " + l.substr(0, 200));
      continue;
    }
    const std::string key = m[4].str() + " " + m[5].str();
    if (std::stoi(m[6].str()) != seen[key]) {
      bad.push_back("out of order (" + key + " expected " + std::to_string(seen[key]) +
                    "): " + l.substr(0, 200));
    }
    ++seen[key];
  }
  return bad;
}

TEST(RankLogs, TwoPythonRanksPrintingFastLeaveWholeLinesPerRankAndInTheMergedView) {
  if (!fs::exists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3";
  const auto dir = tmpdir("in");
  const auto out = tmpdir("out");
  write_file(dir, "job.sh", kSpewJob);
  write_file(dir, "spew.py", kSpew);
  const auto file = write_file(
      dir, "spew.toml",
      "[scenario]\nname = \"ext-spew\"\nseed = 3\n[job]\nworkload = \"external\"\nranks = 2\n"
      "steps = 3\ntimeout_ms = 60000\ncommand = [\"sh\", \"job.sh\"]\n"
      "[expect]\ndetected = false\nrecovered = true\noutcome = \"completed\"\n");
  auto r = run_cmd(kBin + " run " + file + " --quiet --out " + out);
  const std::string run = out + "/ext-spew";
  ASSERT_EQ(r.code, 0) << r.output << read_report(out).dump(2);

  for (int rank = 0; rank < 2; ++rank) {
    for (const char* stream : {"out", "err"}) {
      SCOPED_TRACE(fmt::format("rank {} {}", rank, stream));
      const std::string path = fmt::format("{}/ranks/rank-{}.{}", run, rank, stream);
      EXPECT_TRUE(fs::exists(path));
      std::map<std::string, int> seen;
      const auto bad = broken_lines(lines_of(path), seen, false);
      EXPECT_TRUE(bad.empty()) << bad.size() << " broken line(s), first: " << bad[0];
      // Only this rank's own stream is in its file, every line of it.
      EXPECT_EQ(seen, (std::map<std::string, int>{{fmt::format("{} {}", rank, stream), kLines}}));
    }
  }
  std::map<std::string, int> seen;
  const auto bad = broken_lines(lines_of(run + "/ranks.log"), seen, true);
  EXPECT_TRUE(bad.empty()) << bad.size() << " broken line(s) in ranks.log, first: " << bad[0];
  EXPECT_EQ(seen, (std::map<std::string, int>{
                      {"0 out", kLines}, {"0 err", kLines}, {"1 out", kLines}, {"1 err", kLines}}));

  // The report links every file.
  const json s = read_report(out)["scenarios"][0];
  EXPECT_EQ(s["verdict"], "pass") << s.dump(2);
  const json& logs = s["logs"];
  EXPECT_EQ(logs["merged"], "ranks.log") << logs.dump(2);  // relative to run_dir
  EXPECT_EQ(logs["launcher"], "ranks/launcher.log") << logs.dump(2);
  ASSERT_EQ(logs["ranks"].size(), 2u) << logs.dump(2);
  EXPECT_EQ(logs["ranks"][1],
            (json{{"rank", 1}, {"stdout", "ranks/rank-1.out"}, {"stderr", "ranks/rank-1.err"}}));
  EXPECT_EQ(s["run_dir"], run);
  std::stringstream md, html;
  md << std::ifstream(out + "/report.md").rdbuf();
  html << std::ifstream(out + "/report.html").rdbuf();
  EXPECT_NE(md.str().find("](ext-spew/ranks/rank-1.err)"), std::string::npos) << md.str();
  EXPECT_NE(md.str().find("](ext-spew/ranks.log)"), std::string::npos) << md.str();
  EXPECT_NE(html.str().find("href=\"ext-spew/ranks/rank-0.out\""), std::string::npos);
}

}  // namespace
