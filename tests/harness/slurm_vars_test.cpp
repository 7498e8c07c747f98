// exec-rank's reading of Slurm's step variables (harness/controller/exec_rank.h): the first host
// of a compressed host list (SLURM_STEP_NODELIST) and this node's task count from
// SLURM_STEP_TASKS_PER_NODE, as `scontrol show hostnames` and srun write them.
#include <gtest/gtest.h>

#include "harness/controller/exec_rank.h"

namespace nanchaos::harness {
namespace {

TEST(SlurmVars, FirstHostOfAHostList) {
  EXPECT_EQ(first_slurm_host("n1"), "n1");
  EXPECT_EQ(first_slurm_host("n[1-2]"), "n1");
  EXPECT_EQ(first_slurm_host("gpu[007-012,020],cpu3"), "gpu007");
  EXPECT_EQ(first_slurm_host("a,b[1-4]"), "a");
  EXPECT_EQ(first_slurm_host("rack[3]-node[1-4]"), "rack3-node1");
  EXPECT_EQ(first_slurm_host("broken[1-2"), "");  // no closing bracket: no guess
  EXPECT_EQ(first_slurm_host(""), "");
}

TEST(SlurmVars, TasksOnThisNode) {
  EXPECT_EQ(slurm_tasks_on_node("2(x2)", 0), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x2)", 1), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x2)", 2), 0);  // no third node
  EXPECT_EQ(slurm_tasks_on_node("4,3(x2),1", 0), 4);
  EXPECT_EQ(slurm_tasks_on_node("4,3(x2),1", 2), 3);
  EXPECT_EQ(slurm_tasks_on_node("4,3(x2),1", 3), 1);
  for (const char* bad : {"", "x", "2(y2)", "2(x0)", "2(x2", "0", "3junk"}) {
    EXPECT_EQ(slurm_tasks_on_node(bad, 0), 0) << bad;
  }
}

}  // namespace
}  // namespace nanchaos::harness
