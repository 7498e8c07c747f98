// The stack-level attribution rules (detectors/stack/attribution.h) on hand-built all-reduced
// rows: the replay's refinement, found_inf under fp16, and the training-state rules.
#include "detectors/stack/attribution.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace nanchaos::detect {
namespace {

using harness::Decision;
using harness::kLossScale;
using harness::kLr;
using harness::kLrRaised;
using harness::kRowWidth;
using harness::kStepCounter;

const std::vector<std::string> kBackward = {"head.bias", "head.weight", "layers.0.weight"};
const std::vector<std::string> kModules = {"embed", "layers.0", "head"};
const std::vector<std::string> kReplica = {"layers.0.weight", "head.weight", "training_state"};
const harness::AttributionNames kNames{kBackward, kModules, kReplica};

// A [world x kReplayWidth] replay matrix: nothing reproduced, no index known.
std::vector<double> ReplayRows(int world) {
  std::vector<double> rows(size_t(world) * kReplayWidth, 0.0);
  for (int r = 0; r < world; ++r) {
    for (int f : {kReplayModule, kReplayGrad, kReplayParam})
      rows[size_t(r) * kReplayWidth + f] = -1;
  }
  return rows;
}

Decision Led(const std::string& detector, const std::string& cause, std::vector<int64_t> ranks) {
  Decision d;
  d.flagged = true;
  d.detector = detector;
  d.cause = cause;
  d.ranks = std::move(ranks);
  return d;
}

// A [world x kRowWidth] matrix whose ranks all apply LR 1e-3 at step counter 7, no scaler,
// no raise; `flagged` decision with `cause` on every rank.
std::vector<double> StateRows(int world) {
  std::vector<double> rows(size_t(world) * kRowWidth, 0.0);
  for (int r = 0; r < world; ++r) {
    rows[size_t(r) * kRowWidth + kLr] = 1e-3;
    rows[size_t(r) * kRowWidth + kStepCounter] = 7;
    rows[size_t(r) * kRowWidth + kLrRaised] = -1;
  }
  return rows;
}
Decision Flagged(const std::string& cause, std::vector<int64_t> ranks) {
  Decision d;
  d.flagged = true;
  d.detector = "loss";
  d.cause = cause;
  d.ranks = std::move(ranks);
  return d;
}

TEST(Attribution, ReplayNotReproducedIsTransientAndKeepsTheCause) {
  auto rows = ReplayRows(2);
  Decision d = Led("grad", "gradient", {1});
  d.layer = "head.weight";
  attribute_replay(rows, kNames, &d);
  ASSERT_TRUE(d.transient.has_value());
  EXPECT_TRUE(*d.transient);
  EXPECT_EQ(d.cause, "gradient");
  EXPECT_EQ(d.layer, "head.weight");
  rows[1 * kReplayWidth + kReproduced] = 1;  // the blamed rank reproduced it
  attribute_replay(rows, kNames, &d);
  EXPECT_FALSE(*d.transient);
}

TEST(Attribution, ReplayOrderIsParameterThenHalfOverflowThenFirstModule) {
  auto rows = ReplayRows(2);
  double* row = &rows[1 * kReplayWidth];
  row[kReproduced] = 1;
  row[kReplayModule] = 1;  // layers.0's output went non-finite first
  Decision d = Led("grad", "gradient", {1});
  attribute_replay(rows, kNames, &d);
  EXPECT_EQ(d.cause, "activation");
  EXPECT_EQ(d.layer, "layers.0");
  // A spike's cause is not a non-finite activation: the module alone renames nothing.
  d = Led("loss_spike", "gradient_explosion", {1});
  attribute_replay(rows, kNames, &d);
  EXPECT_EQ(d.cause, "gradient_explosion");
  EXPECT_EQ(d.layer, "");
  row[kReplayOverflow] = 1;  // ... and it left the half range there
  d = Led("loss", "activation", {1});
  attribute_replay(rows, kNames, &d);
  EXPECT_EQ(d.cause, "fp16_overflow");
  EXPECT_EQ(d.layer, "layers.0");
  row[kReplayParam] = 2;  // a parameter was non-finite at step start: it wins
  d = Led("loss_spike", "gradient_explosion", {1});
  attribute_replay(rows, kNames, &d);
  EXPECT_EQ(d.cause, "parameter");
  EXPECT_EQ(d.layer, "layers.0.weight");
  // Only the first blamed rank's row counts.
  d = Led("grad", "gradient", {0, 1});
  attribute_replay(rows, kNames, &d);
  EXPECT_EQ(d.cause, "gradient");
  EXPECT_TRUE(*d.transient);
  // An index outside the names throws.
  row[kReplayParam] = 7;
  d = Led("grad", "gradient", {1});
  EXPECT_THROW(attribute_replay(rows, kNames, &d), std::out_of_range);
}

TEST(Attribution, ABatchFindingIsNotRefinedToALayer) {
  auto rows = ReplayRows(1);
  rows[kReproduced] = 1;
  rows[kReplayParam] = 0;
  rows[kReplayModule] = 0;
  Decision d = Led("batch", "data", {0});
  d.layer = "labels";
  attribute_replay(rows, kNames, &d);
  EXPECT_EQ(d.cause, "data");
  EXPECT_EQ(d.layer, "labels");
  EXPECT_FALSE(*d.transient);
}

TEST(Attribution, FoundInfUnderFp16IsReportedAsTheScalersFinding) {
  auto rows = StateRows(2);
  Decision d = Led("grad", "gradient", {0});
  d.layer = "head.bias";
  attribute_found_inf(rows, 2, &d);
  EXPECT_EQ(d.detector, "loss_scale");
  EXPECT_EQ(d.cause, "fp16_overflow");
  EXPECT_EQ(d.layer, "head.bias");
  // The scaler's own finding and other detectors' decisions stand.
  d = Led("loss", "loss_math", {0});
  attribute_found_inf(rows, 2, &d);
  EXPECT_EQ(d.detector, "loss");
  EXPECT_EQ(d.cause, "loss_math");
  // A raised LR says why the gradients overflowed.
  rows[0 * kRowWidth + kLrRaised] = 1;
  d = Led("grad", "gradient", {0});
  attribute_found_inf(rows, 2, &d);
  EXPECT_EQ(d.detector, "loss_scale");
  EXPECT_EQ(d.cause, "gradient_explosion");
  Decision clean;
  attribute_found_inf(rows, 2, &clean);
  EXPECT_FALSE(clean.flagged);
  EXPECT_EQ(clean.detector, "");
}

TEST(Attribution, ABlowUpSurfacingAfterARaiseOnAnyRankIsGradientExplosion) {
  std::vector<double> rows(3 * kRowWidth, 0.0);
  for (int r = 0; r < 3; ++r) rows[size_t(r) * kRowWidth + kLrRaised] = -1.0;
  EXPECT_FALSE(grew_under_raised_lr(rows, 3, "activation"));
  rows[2 * kRowWidth + kLrRaised] = 4.0;  // rank 2 raised its LR 4 steps ago
  for (const char* c :
       {"activation", "loss_math", "gradient", "parameter", "fp16_overflow", "reduce_overflow"}) {
    EXPECT_TRUE(grew_under_raised_lr(rows, 3, c)) << c;
  }
  for (const char* c : {"data", "comm_corruption", "hang", "rank_failure", "replica_divergence",
                        "gradient_explosion"}) {
    EXPECT_FALSE(grew_under_raised_lr(rows, 3, c)) << c;
  }
  EXPECT_FALSE(grew_under_raised_lr(rows, 2, "activation"));  // rank 2 is outside a world of 2
}

TEST(Attribution, TheMinorityDriftedAndATieBlamesTheLargerLrOrCounter) {
  auto rows = StateRows(4);
  EXPECT_TRUE(drifted_ranks(rows, 4).empty());
  rows[2 * kRowWidth + kLr] = 1.0;  // rank 2's LR factor drifted
  EXPECT_EQ(drifted_ranks(rows, 4), std::vector<int64_t>{2});
  // 2 ranks: the tie goes against the larger LR, then the larger step counter, then scale.
  auto two = StateRows(2);
  two[0 * kRowWidth + kLr] = 1.0;
  EXPECT_EQ(drifted_ranks(two, 2), std::vector<int64_t>{0});
  two = StateRows(2);
  two[1 * kRowWidth + kStepCounter] = 1e6;
  EXPECT_EQ(drifted_ranks(two, 2), std::vector<int64_t>{1});
  // Only the loss scale differs: the replica vote's rule, the lowest rank's group holds.
  two = StateRows(2);
  two[0 * kRowWidth + kLossScale] = 65536.0 * 1e4;
  two[1 * kRowWidth + kLossScale] = 65536.0;
  EXPECT_EQ(drifted_ranks(two, 2), std::vector<int64_t>{1});
  // A detector fired on rank 0 alone (its grown scale overflowed): the tie goes against it,
  // before the LR rule; every rank flagged decides nothing.
  two = StateRows(2);
  two[0 * kRowWidth + kLossScale] = 65536.0 * 1e4;
  two[1 * kRowWidth + kLossScale] = 65536.0;
  EXPECT_EQ(drifted_ranks(two, 2, {0}), std::vector<int64_t>{0});
  EXPECT_EQ(drifted_ranks(two, 2, {0, 1}), std::vector<int64_t>{1});
  two[1 * kRowWidth + kLr] = 1.0;  // rank 1's LR is larger too: the flagged rank still decides
  EXPECT_EQ(drifted_ranks(two, 2, {0}), std::vector<int64_t>{0});
  // 3 ranks, three different states: the smallest LR holds (one rank each).
  auto three = StateRows(3);
  three[0 * kRowWidth + kLr] = 2e-3;
  three[2 * kRowWidth + kLr] = 5e-3;
  EXPECT_EQ(drifted_ranks(three, 3), (std::vector<int64_t>{0, 2}));
}

TEST(Attribution, DriftNamesReplicaDivergenceAndARaiseNamesGradientExplosion) {
  // A loss spike (gradient_explosion) while rank 0's LR differs: the drift is the cause.
  auto rows = StateRows(2);
  rows[0 * kRowWidth + kLr] = 1.0;
  Decision d = Flagged("gradient_explosion", {0, 1});
  attribute_training_state(rows, 2, &d);
  EXPECT_EQ(d.cause, "replica_divergence");
  EXPECT_EQ(d.ranks, std::vector<int64_t>{0});
  // A found_inf on rank 1 alone while only the loss scales differ: rank 1 drifted. A replica
  // decision's ranks are its vote's, not a symptom: the replica rule holds there.
  auto scales = StateRows(2);
  scales[0 * kRowWidth + kLossScale] = 1024.0;
  scales[1 * kRowWidth + kLossScale] = 1024.0 * 1e4;
  d = Flagged("fp16_overflow", {1});
  attribute_training_state(scales, 2, &d);
  EXPECT_EQ(d.cause, "replica_divergence");
  EXPECT_EQ(d.ranks, std::vector<int64_t>{1});
  d = Flagged("replica_divergence", {0});
  d.detector = "replica";
  attribute_training_state(scales, 2, &d);
  EXPECT_EQ(d.ranks, std::vector<int64_t>{1});
  // Data and communication causes stand, drift or not.
  d = Flagged("data", {1});
  attribute_training_state(rows, 2, &d);
  EXPECT_EQ(d.cause, "data");
  EXPECT_EQ(d.ranks, std::vector<int64_t>{1});
  // States agree, rank 1 raised its LR 3 steps ago: a non-finite activation is the blow-up, and
  // rank 1 the rank that raised it.
  rows = StateRows(2);
  rows[1 * kRowWidth + kLrRaised] = 3;
  d = Flagged("activation", {0, 1});
  attribute_training_state(rows, 2, &d);
  EXPECT_EQ(d.cause, "gradient_explosion");
  EXPECT_EQ(d.ranks, std::vector<int64_t>{1});
  // Raised 30 steps ago (outside the window): the activation stands; a replica's scaled update
  // (gradient_explosion) still names the rank that raised.
  rows[1 * kRowWidth + kLrRaised] = 30;
  d = Flagged("activation", {0});
  attribute_training_state(rows, 2, &d);
  EXPECT_EQ(d.cause, "activation");
  d = Flagged("gradient_explosion", {1});
  d.detector = "replica";
  rows[1 * kRowWidth + kLrRaised] = -1;
  rows[0 * kRowWidth + kLrRaised] = 30;
  attribute_training_state(rows, 2, &d);
  EXPECT_EQ(d.ranks, std::vector<int64_t>{0});
  // Every rank raised (an LR blow-up everywhere): the ranks stay those the detector named.
  rows[1 * kRowWidth + kLrRaised] = 2;
  rows[0 * kRowWidth + kLrRaised] = 2;
  d = Flagged("loss_math", {0, 1});
  attribute_training_state(rows, 2, &d);
  EXPECT_EQ(d.cause, "gradient_explosion");
  EXPECT_EQ(d.ranks, (std::vector<int64_t>{0, 1}));
  // Not flagged: untouched.
  Decision clean;
  attribute_training_state(rows, 2, &clean);
  EXPECT_EQ(clean.cause, "");
}

}  // namespace
}  // namespace nanchaos::detect
