// VmHWM from /proc: this process's own peak, a child's, and a process that is gone.
#include "harness/common/proc_status.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

namespace nanchaos::harness {
namespace {

TEST(ProcStatus, OwnPeakCoversPagesJustTouched) {
  const auto before = vm_hwm_kib();
  ASSERT_TRUE(before.has_value());
  EXPECT_GT(*before, 0);
  // 64 MiB written page by page are resident now, so the peak is at least that (and a peak
  // never falls). Earlier tests in this process may have set a higher one.
  std::vector<char> block(64 << 20);
  for (size_t i = 0; i < block.size(); i += 4096) block[i] = char(i | 1);
  const auto after = vm_hwm_kib(getpid());
  ASSERT_TRUE(after.has_value());
  EXPECT_GE(*after, 64 * 1024) << "block[4096] = " << int(block[4096]);
  EXPECT_GE(*after, *before);
}

TEST(ProcStatus, ReapedOrZombieProcessHasNoFigure) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  EXPECT_TRUE(vm_hwm_kib(child).has_value());  // alive: a figure
  kill(child, SIGKILL);
  // A zombie's status has no Vm* lines; poll until the kill has landed.
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = !vm_hwm_kib(child).has_value();
    if (!gone) usleep(5000);
  }
  EXPECT_TRUE(gone);
  waitpid(child, nullptr, 0);
  EXPECT_FALSE(vm_hwm_kib(child).has_value());  // reaped
}

}  // namespace
}  // namespace nanchaos::harness
