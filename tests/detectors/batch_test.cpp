// Detector `batch` (detectors/batch.cpp): the batch as the model receives it.
#include <cmath>

#include "tests/detectors/detector_test_util.h"

namespace nanchaos::detect {
namespace {

using fixture::Make;

// An mlp batch: 4 samples of 8 features, labels in [0, classes).
harness::Batch Clean(int64_t classes) {
  return {torch::randn({4, 8}), torch::arange(4, torch::kLong) % classes, torch::Tensor()};
}

int64_t Classes() { return fixture::StackOf().workload.classes; }

TEST(BatchDetector, ACleanBatchIsNotFlagged) {
  auto d = Make("batch");
  EXPECT_EQ(d->hook(), Hook::kBatch);
  const harness::Batch b = Clean(Classes());
  StepView v;
  v.batch = &b;
  EXPECT_FALSE(d->check(v));
}

TEST(BatchDetector, NonFiniteOrHugeInputsAreData) {
  auto d = Make("batch", "max_abs = 50.0");
  harness::Batch b = Clean(Classes());
  StepView v;
  v.batch = &b;
  b.inputs[1][2] = NAN;
  auto f = d->check(v);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->layer, "inputs");
  EXPECT_EQ(f->cause, "data");
  EXPECT_EQ(f->code, 0);
  b = Clean(Classes());
  b.inputs[0][0] = 51.0;  // finite, beyond the scenario's max_abs (read from its Params)
  f = d->check(v);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->layer, "inputs");
  b.inputs[0][0] = 49.0;
  EXPECT_FALSE(d->check(v));
}

TEST(BatchDetector, LabelsOutOfRangeOrNoValidTokenAreData) {
  auto d = Make("batch");
  harness::Batch b = Clean(Classes());
  StepView v;
  v.batch = &b;
  b.labels[3] = Classes();  // one past the last class
  auto f = d->check(v);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->layer, "labels");
  EXPECT_EQ(f->code, 1);
  b = Clean(Classes());
  b.labels[0] = -1;
  EXPECT_TRUE(d->check(v));
  b = Clean(Classes());
  b.mask = torch::zeros({4});  // no valid target: a mean over valid tokens is 0/0
  f = d->check(v);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->layer, "labels");
  b.mask = torch::ones({4});
  EXPECT_FALSE(d->check(v));
}

TEST(BatchDetector, ItsFindingNamesItsOriginSoTheReplayKeepsIt) {
  EXPECT_FALSE(harness::detectors().at("batch").refined_to_layer);
  EXPECT_TRUE(harness::detectors().at("batch").refined_by_replay);
}

}  // namespace
}  // namespace nanchaos::detect
