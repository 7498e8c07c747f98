// Detector `grad` (detectors/grad.cpp): the fused scan's first non-finite gradient.
#include "tests/detectors/detector_test_util.h"

namespace nanchaos::detect {
namespace {

using fixture::CheckScan;

TEST(GradDetector, FlagsTheFirstNonFiniteGradientInBackwardOrder) {
  auto d = fixture::Make("grad");
  EXPECT_EQ(d->hook(), Hook::kGradients);
  EXPECT_FALSE(CheckScan(*d, -1));
  const auto f = CheckScan(*d, 1);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->layer, "head.weight");
  EXPECT_EQ(f->cause, "gradient");
  EXPECT_EQ(f->code, 1);
}

TEST(GradDetector, IsAFoundInfDetectorThatTheScalerReportsAsItsOwn) {
  const auto& info = harness::detectors().at("grad");
  EXPECT_TRUE(info.found_inf);
  EXPECT_FALSE(info.reports_found_inf);
  EXPECT_TRUE(info.refined_by_replay);
}

}  // namespace
}  // namespace nanchaos::detect
