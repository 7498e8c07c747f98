// Detector `loss_scale` (detectors/loss_scale.cpp): GradScaler's found_inf.
#include "tests/detectors/detector_test_util.h"

namespace nanchaos::detect {
namespace {

using fixture::CheckScan;

TEST(LossScaleDetector, FoundInfIsAnFp16OverflowAtTheFirstNonFiniteGradient) {
  auto d = fixture::Make("loss_scale", "", "precision = \"fp16\"");
  EXPECT_EQ(d->hook(), Hook::kGradients);
  EXPECT_FALSE(CheckScan(*d, -1));
  const auto f = CheckScan(*d, 2);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->layer, "layers.0.weight");
  EXPECT_EQ(f->cause, "fp16_overflow");
  EXPECT_EQ(f->code, 2);
}

TEST(LossScaleDetector, ReportsEveryFoundInfUnderFp16) {
  int reporters = 0;
  for (const auto& [name, info] : harness::detectors()) reporters += info.reports_found_inf;
  EXPECT_EQ(reporters, 1);  // attribution.h attribute_found_inf has one name to report
  const auto& info = harness::detectors().at("loss_scale");
  EXPECT_TRUE(info.found_inf);
  EXPECT_TRUE(info.reports_found_inf);
}

}  // namespace
}  // namespace nanchaos::detect
