// --shard I/N: parsing, the round-robin and the wall-time-balanced partitions
// (harness/controller/shard.h).
#include "harness/controller/shard.h"

#include <gtest/gtest.h>

#include <fstream>
#include <numeric>

namespace nanchaos::harness {
namespace {

std::vector<std::vector<std::string>> partition(const std::vector<std::string>& names,
                                                const std::map<std::string, double>& w, int n) {
  std::vector<std::vector<std::string>> parts;
  for (int i = 1; i <= n; ++i) {
    const auto mine = shard_members(names, w, ShardSpec{i, n});
    parts.emplace_back();
    for (size_t k = 0; k < names.size(); ++k) {
      if (mine[k]) parts.back().push_back(names[k]);
    }
  }
  return parts;
}

TEST(Shard, ParsesIOfNAndRefusesTheRest) {
  const ShardSpec s = parse_shard("2/4");
  EXPECT_EQ(s.index, 2);
  EXPECT_EQ(s.count, 4);
  EXPECT_TRUE(s.on());
  for (const char* bad : {"", "2", "0/4", "5/4", "2/0", "-1/3", "a/b", "1/3x", "1 /3", "2/4/6"}) {
    try {
      parse_shard(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("--shard ") + bad), std::string::npos)
          << e.what();
    }
  }
}

TEST(Shard, RoundRobinCoversEveryScenarioOnce) {
  const std::vector<std::string> names = {"a", "b", "c", "d", "e", "f", "g"};
  const auto parts = partition(names, {}, 3);
  EXPECT_EQ(parts[0], (std::vector<std::string>{"a", "d", "g"}));
  EXPECT_EQ(parts[1], (std::vector<std::string>{"b", "e"}));
  EXPECT_EQ(parts[2], (std::vector<std::string>{"c", "f"}));
}

TEST(Shard, WallTimesBalanceTheParts) {
  // One long scenario and many short ones: round robin would put the long one beside a third
  // of the short ones; the balanced split gives it a part of its own.
  const std::vector<std::string> names = {"long", "s1", "s2", "s3", "s4", "s5", "s6"};
  const std::map<std::string, double> w = {{"long", 600}, {"s1", 100}, {"s2", 100}, {"s3", 100},
                                           {"s4", 100},   {"s5", 100}, {"s6", 100}};
  const auto parts = partition(names, w, 2);
  EXPECT_EQ(parts[0], (std::vector<std::string>{"long"}));
  EXPECT_EQ(parts[1].size(), 6u);
  // Deterministic: the same inputs give the same split.
  EXPECT_EQ(partition(names, w, 2), parts);
}

TEST(Shard, AScenarioTheEarlierRunLacksWeighsTheMedian) {
  const std::vector<std::string> names = {"a", "b", "c", "new"};
  const std::map<std::string, double> w = {{"a", 10}, {"b", 20}, {"c", 1000}};
  // Median of the known is 20: "new" (20) and "b" (20) and "a" (10) share the light part.
  const auto parts = partition(names, w, 2);
  EXPECT_EQ(parts[0], (std::vector<std::string>{"c"}));
  EXPECT_EQ(parts[1], (std::vector<std::string>{"a", "b", "new"}));
}

TEST(Shard, MorePartsThanScenariosLeavesSomeEmpty) {
  const auto parts = partition({"a", "b"}, {}, 4);
  EXPECT_EQ(parts[0], std::vector<std::string>{"a"});
  EXPECT_EQ(parts[1], std::vector<std::string>{"b"});
  EXPECT_TRUE(parts[2].empty());
  EXPECT_TRUE(parts[3].empty());
}

TEST(Shard, WeightsComeFromAReportsWallTimes) {
  const std::string path = ::testing::TempDir() + "/shard-weights-report.json";
  std::ofstream(path) << R"({"scenarios": [
      {"name": "one", "wall_ms": 1500.5},
      {"name": "tri", "wall_ms": 9, "trials": [{"wall_ms": 1}, {"wall_ms": 2}, {"wall_ms": 3}]}]})";
  const auto w = shard_weights_from_report(path);
  EXPECT_DOUBLE_EQ(w.at("one"), 1500.5);
  EXPECT_DOUBLE_EQ(w.at("tri"), 6);
  std::ofstream(path) << R"({"faults": []})";
  EXPECT_THROW(shard_weights_from_report(path), std::runtime_error);
  EXPECT_THROW(shard_weights_from_report(path + ".missing"), std::runtime_error);
}

}  // namespace
}  // namespace nanchaos::harness
