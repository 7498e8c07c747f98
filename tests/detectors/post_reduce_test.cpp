// Detector `post_reduce` (detectors/post_reduce.cpp): a non-finite reduced buffer, told apart as
// a SUM overflow or corruption on the way by the largest contribution.
#include "tests/detectors/detector_test_util.h"

namespace nanchaos::detect {
namespace {

using fixture::Make;
using fixture::Stats;

const std::vector<std::string> kBackward = {"head.bias", "head.weight"};

TEST(PostReduceDetector, CleanBufferIsNotFlagged) {
  auto d = Make("post_reduce");
  EXPECT_EQ(d->hook(), Hook::kPostReduce);
  EXPECT_FALSE(fixture::CheckScan(*d, -1));
}

TEST(PostReduceDetector, SmallContributionsMeanCorruptionLargeOnesAReduceOverflow) {
  auto d = Make("post_reduce");
  StepView v;
  v.grad_names = &kBackward;
  v.world = 4;
  v.wire = harness::WireType::kFp16;
  const auto bad = Stats(2, 1);
  v.reduce_stats = &bad;
  v.global_max_abs = 100.0;  // 4 x 100 stays far inside fp16's 65504
  auto f = d->check(v);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->cause, "comm_corruption");
  EXPECT_EQ(f->layer, "head.weight");
  EXPECT_EQ(f->code, 1);
  v.global_max_abs = 20000.0;  // 4 x 20000 leaves it
  f = d->check(v);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->cause, "reduce_overflow");
  v.wire = harness::WireType::kFp32;  // ... but not fp32's
  f = d->check(v);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->cause, "comm_corruption");
}

}  // namespace
}  // namespace nanchaos::detect
