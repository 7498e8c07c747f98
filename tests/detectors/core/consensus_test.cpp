// Consensus decision: decide() on hand-built all-reduced row matrices, detector_bit, and
// global_max_abs.
#include "detectors/core/consensus.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/scenario/registry.h"

namespace nanchaos::harness {
namespace {

// Backward-order names, as the runner builds them (head first).
const std::vector<std::string> kBwd = {"head.bias",
                                       "head.weight",
                                       "layers.1.linear.bias",
                                       "layers.1.linear.weight",
                                       "layers.0.linear.bias",
                                       "layers.0.linear.weight"};

// A zeroed [world x kRowWidth] matrix with kLogitsFinite = 1 on every rank (as the runner does).
std::vector<double> Rows(int world) {
  std::vector<double> rows(size_t(world) * kRowWidth, 0.0);
  for (int r = 0; r < world; ++r) rows[size_t(r) * kRowWidth + kLogitsFinite] = 1.0;
  return rows;
}

double& At(std::vector<double>& rows, int rank, RowField f) {
  return rows[size_t(rank) * kRowWidth + f];
}

// Sets detector `name`'s bit in rank's row.
void Flag(std::vector<double>& rows, int rank, const std::string& name) {
  const int bit = detector_bit(name);
  ASSERT_GE(bit, 0) << name;
  const auto bits = uint64_t(At(rows, rank, kBits));
  At(rows, rank, kBits) = double(bits | (uint64_t(1) << bit));
}

TEST(ConsensusDecide, NoBitsIsNotFlagged) {
  auto rows = Rows(4);
  At(rows, 1, kMaxAbs) = 3.5;  // a magnitude alone is no detection
  const Decision d = decide(rows, 4, kBwd);
  EXPECT_FALSE(d.flagged);
  EXPECT_EQ(d.detector, "");
  EXPECT_TRUE(d.ranks.empty());
  EXPECT_EQ(d.layer, "");
  EXPECT_EQ(d.cause, "");
  EXPECT_TRUE(d.flagged_detail.is_array());
  EXPECT_TRUE(d.flagged_detail.empty());
}

TEST(ConsensusDecide, BatchOnLabelsBlamesDataOnThatRank) {
  auto rows = Rows(4);
  Flag(rows, 2, "batch");
  At(rows, 2, kBatchField) = 1;
  const Decision d = decide(rows, 4, kBwd);
  EXPECT_TRUE(d.flagged);
  EXPECT_EQ(d.detector, "batch");
  EXPECT_EQ(d.ranks, std::vector<int64_t>({2}));
  EXPECT_EQ(d.layer, "labels");
  EXPECT_EQ(d.cause, "data");
  ASSERT_EQ(d.flagged_detail.size(), 1u);
  EXPECT_EQ(d.flagged_detail[0]["rank"], 2);
  EXPECT_EQ(d.flagged_detail[0]["detectors"], nlohmann::json::array({"batch"}));
}

TEST(ConsensusDecide, BatchOnInputs) {
  auto rows = Rows(2);
  Flag(rows, 0, "batch");
  At(rows, 0, kBatchField) = 0;
  const Decision d = decide(rows, 2, kBwd);
  EXPECT_EQ(d.detector, "batch");
  EXPECT_EQ(d.layer, "inputs");
  EXPECT_EQ(d.cause, "data");
  EXPECT_EQ(d.ranks, std::vector<int64_t>({0}));
}

TEST(ConsensusDecide, LossBeatsGradInPipelineOrder) {
  auto rows = Rows(2);
  Flag(rows, 0, "loss");
  Flag(rows, 1, "grad");
  At(rows, 1, kGradIdx) = 2;
  const Decision d = decide(rows, 2, kBwd);
  EXPECT_TRUE(d.flagged);
  EXPECT_EQ(d.detector, "loss");
  EXPECT_EQ(d.ranks, std::vector<int64_t>({0}));
  // Both ranks still appear in the detail, each with its own detector.
  ASSERT_EQ(d.flagged_detail.size(), 2u);
  EXPECT_EQ(d.flagged_detail[0]["rank"], 0);
  EXPECT_EQ(d.flagged_detail[0]["detectors"], nlohmann::json::array({"loss"}));
  EXPECT_EQ(d.flagged_detail[1]["rank"], 1);
  EXPECT_EQ(d.flagged_detail[1]["detectors"], nlohmann::json::array({"grad"}));
}

TEST(ConsensusDecide, GradRankOrderDoesNotMatterOnlyPipelineOrder) {
  // Grad on rank 0, loss on rank 1: still "loss", rank {1}.
  auto rows = Rows(2);
  Flag(rows, 0, "grad");
  Flag(rows, 1, "loss");
  const Decision d = decide(rows, 2, kBwd);
  EXPECT_EQ(d.detector, "loss");
  EXPECT_EQ(d.ranks, std::vector<int64_t>({1}));
}

TEST(ConsensusDecide, LossWithFiniteLogitsIsLossMath) {
  auto rows = Rows(2);
  Flag(rows, 1, "loss");
  At(rows, 1, kLogitsFinite) = 1;
  const Decision d = decide(rows, 2, kBwd);
  EXPECT_EQ(d.detector, "loss");
  EXPECT_EQ(d.cause, "loss_math");
  EXPECT_EQ(d.layer, "loss");
}

TEST(ConsensusDecide, LossWithNonFiniteLogitsIsActivation) {
  auto rows = Rows(2);
  Flag(rows, 1, "loss");
  At(rows, 1, kLogitsFinite) = 0;
  const Decision d = decide(rows, 2, kBwd);
  EXPECT_EQ(d.detector, "loss");
  EXPECT_EQ(d.cause, "activation");
  EXPECT_EQ(d.layer, "");
}

// Always-on localization: the runner writes the first non-finite module output and
// whether the half rounding made it non-finite; the loss check's attribution uses them.
TEST(ConsensusDecide, LossWithNonFiniteLogitsNamesTheLocalizedModule) {
  const std::vector<std::string> modules = {"embed", "blocks.0.attn", "blocks.0.mlp.fc1", "head"};
  auto rows = Rows(2);
  Flag(rows, 1, "loss");
  At(rows, 1, kLogitsFinite) = 0;
  At(rows, 1, kModuleIdx) = 1;
  Decision d = decide(rows, 2, kBwd, modules);
  EXPECT_EQ(d.cause, "activation");
  EXPECT_EQ(d.layer, "blocks.0.attn");
  At(rows, 1, kModuleIdx) = 2;
  At(rows, 1, kModuleOverflow) = 1;
  d = decide(rows, 2, kBwd, modules);
  EXPECT_EQ(d.cause, "fp16_overflow");
  EXPECT_EQ(d.layer, "blocks.0.mlp.fc1");
  At(rows, 1, kModuleIdx) = -1;  // nothing localized: no layer, no overflow claim
  d = decide(rows, 2, kBwd, modules);
  EXPECT_EQ(d.cause, "activation");
  EXPECT_EQ(d.layer, "");
  // Finite logits stay loss math whatever the module columns hold.
  At(rows, 1, kLogitsFinite) = 1;
  At(rows, 1, kModuleIdx) = 2;
  EXPECT_EQ(decide(rows, 2, kBwd, modules).cause, "loss_math");
}

TEST(ConsensusDecide, ActivationWithTheOverflowFlagIsFp16Overflow) {
  auto rows = Rows(2);
  Flag(rows, 0, "activation");
  At(rows, 0, kModuleIdx) = 0;
  At(rows, 0, kModuleOverflow) = 1;
  const Decision d = decide(rows, 2, kBwd, {"layers.1"});
  EXPECT_EQ(d.cause, "fp16_overflow");
  EXPECT_EQ(d.layer, "layers.1");
}

TEST(ConsensusDecide, GradLayerIsBackwardName) {
  auto rows = Rows(3);
  Flag(rows, 1, "grad");
  At(rows, 1, kGradIdx) = 3;
  const Decision d = decide(rows, 3, kBwd);
  EXPECT_EQ(d.detector, "grad");
  EXPECT_EQ(d.cause, "gradient");
  EXPECT_EQ(d.layer, kBwd[3]);
  EXPECT_EQ(d.ranks, std::vector<int64_t>({1}));
}

TEST(ConsensusDecide, GradIndexOutsideNamesThrows) {
  auto rows = Rows(1);
  Flag(rows, 0, "grad");
  At(rows, 0, kGradIdx) = double(kBwd.size());
  EXPECT_THROW(decide(rows, 1, kBwd), std::out_of_range);
}

TEST(ConsensusDecide, ParamLayerIsBackwardName) {
  auto rows = Rows(2);
  Flag(rows, 0, "param");
  Flag(rows, 0, "grad");
  At(rows, 0, kParamIdx) = 5;
  At(rows, 0, kGradIdx) = 1;
  const Decision d = decide(rows, 2, kBwd);
  EXPECT_EQ(d.detector, "param");
  EXPECT_EQ(d.cause, "parameter");
  EXPECT_EQ(d.layer, kBwd[5]);
  ASSERT_EQ(d.flagged_detail.size(), 1u);
  EXPECT_EQ(d.flagged_detail[0]["detectors"], nlohmann::json::array({"param", "grad"}));
}

TEST(ConsensusDecide, TwoRanksSameDetectorBothListedAttributionFromFirst) {
  auto rows = Rows(4);
  Flag(rows, 1, "grad");
  Flag(rows, 3, "grad");
  At(rows, 1, kGradIdx) = 0;
  At(rows, 3, kGradIdx) = 4;
  const Decision d = decide(rows, 4, kBwd);
  EXPECT_EQ(d.detector, "grad");
  EXPECT_EQ(d.ranks, std::vector<int64_t>({1, 3}));
  EXPECT_EQ(d.layer, kBwd[0]);  // from the first blamed rank's row
  EXPECT_EQ(d.flagged_detail.size(), 2u);
}

TEST(ConsensusDecide, PureFunctionSameOnEveryRank) {
  // Each rank computes decide() on its own copy of the all-reduced matrix: the decisions must be
  // identical, detail included.
  auto rows = Rows(4);
  Flag(rows, 0, "grad");
  At(rows, 0, kGradIdx) = 2;
  Flag(rows, 2, "loss");
  At(rows, 2, kLogitsFinite) = 0;
  Flag(rows, 2, "grad");
  At(rows, 2, kGradIdx) = 1;
  Flag(rows, 3, "post_reduce");
  At(rows, 1, kMaxAbs) = 7;
  std::vector<Decision> per_rank;
  for (int r = 0; r < 4; ++r) {
    const std::vector<double> copy = rows;  // what rank r holds after the all-reduce
    per_rank.push_back(decide(copy, 4, kBwd));
  }
  for (int r = 1; r < 4; ++r) {
    EXPECT_EQ(per_rank[r].flagged, per_rank[0].flagged);
    EXPECT_EQ(per_rank[r].detector, per_rank[0].detector);
    EXPECT_EQ(per_rank[r].ranks, per_rank[0].ranks);
    EXPECT_EQ(per_rank[r].layer, per_rank[0].layer);
    EXPECT_EQ(per_rank[r].cause, per_rank[0].cause);
    EXPECT_EQ(per_rank[r].flagged_detail, per_rank[0].flagged_detail);
  }
  EXPECT_EQ(per_rank[0].detector, "loss");
  EXPECT_EQ(per_rank[0].ranks, std::vector<int64_t>({2}));
  EXPECT_EQ(per_rank[0].cause, "activation");
  EXPECT_EQ(per_rank[0].flagged_detail.size(), 3u);
  EXPECT_EQ(per_rank[0].flagged_detail[1]["detectors"], nlohmann::json::array({"loss", "grad"}));
  EXPECT_EQ(per_rank[0].flagged_detail[2]["detectors"], nlohmann::json::array({"post_reduce"}));
}

TEST(ConsensusDecide, OnlyOwnRowMatters) {
  // A detector bit on the last rank of a wide world is seen.
  auto rows = Rows(64);
  Flag(rows, 63, "batch");
  const Decision d = decide(rows, 64, kBwd);
  EXPECT_TRUE(d.flagged);
  EXPECT_EQ(d.ranks, std::vector<int64_t>({63}));
  EXPECT_EQ(d.layer, "inputs");
}

TEST(ConsensusDetectorBit, RoundTripOverOrder) {
  const auto& order = detector_order();
  for (size_t i = 0; i < order.size(); ++i) {
    EXPECT_EQ(detector_bit(order[i]), int(i)) << order[i];
  }
  EXPECT_EQ(detector_bit("param"), 0);
  EXPECT_EQ(detector_bit("replica"), 1);  // right after param: both at step start
  EXPECT_EQ(detector_bit("anomaly"), int(detector_order().size()) - 1);  // last in the pipeline
  EXPECT_EQ(detector_bit("nonsense"), -1);
  EXPECT_EQ(detector_bit(""), -1);
  EXPECT_EQ(detector_bit("Loss"), -1);
}

TEST(ConsensusDetectorBit, EachDetectorAloneDecidesItself) {
  const auto& order = detector_order();
  for (size_t i = 0; i < order.size(); ++i) {
    auto rows = Rows(2);
    Flag(rows, 1, order[i]);
    const Decision d = decide(rows, 2, kBwd);
    EXPECT_TRUE(d.flagged);
    EXPECT_EQ(d.detector, order[i]);
    EXPECT_EQ(d.ranks, std::vector<int64_t>({1}));
  }
}

TEST(ConsensusGlobalMaxAbs, MaxOverRanks) {
  auto rows = Rows(3);
  EXPECT_EQ(global_max_abs(rows, 3), 0.0);
  At(rows, 0, kMaxAbs) = 1.5;
  At(rows, 1, kMaxAbs) = 42.25;
  At(rows, 2, kMaxAbs) = 3.0;
  At(rows, 2, kBits) = 1e9;  // other columns do not count
  EXPECT_EQ(global_max_abs(rows, 3), 42.25);
  At(rows, 2, kMaxAbs) = 1e30;
  EXPECT_EQ(global_max_abs(rows, 3), 1e30);
}

}  // namespace
}  // namespace nanchaos::harness

namespace {
std::vector<double> one_flag(int world, int rank, const char* detector) {
  std::vector<double> rows(size_t(world) * nanchaos::harness::kRowWidth, 0.0);
  rows[size_t(rank) * nanchaos::harness::kRowWidth + nanchaos::harness::kBits] =
      double(uint64_t(1) << nanchaos::harness::detector_bit(detector));
  return rows;
}
}  // namespace

TEST(ConsensusCauseRules, ActivationNamesTheModuleByForwardIndex) {
  auto rows = one_flag(2, 1, "activation");
  rows[1 * nanchaos::harness::kRowWidth + nanchaos::harness::kModuleIdx] = 2;
  auto d = nanchaos::harness::decide(rows, 2, {"head.bias"}, {"embed", "pos", "blocks.0.ln1"});
  EXPECT_EQ(d.cause, "activation");
  EXPECT_EQ(d.layer, "blocks.0.ln1");
  EXPECT_EQ(d.ranks, std::vector<int64_t>{1});
}

TEST(ConsensusCauseRules, SpikesAreGradientExplosion) {
  for (const char* det : {"loss_spike", "grad_norm_spike"}) {
    auto d = nanchaos::harness::decide(one_flag(4, 3, det), 4, {"w"}, {});
    EXPECT_EQ(d.detector, det);
    EXPECT_EQ(d.cause, "gradient_explosion") << det;
  }
}

TEST(ConsensusCauseRules, GradNormSpikeNamesTheParameterOfTheFirstSpikingRank) {
  using nanchaos::harness::kGradIdx;
  using nanchaos::harness::kRowWidth;
  auto rows = one_flag(4, 2, "grad_norm_spike");
  rows[2 * kRowWidth + kGradIdx] = 1;  // backward index of the parameter that rose the most
  auto d = nanchaos::harness::decide(rows, 4, {"head.weight", "layers.1.linear.weight"}, {});
  EXPECT_EQ(d.cause, "gradient_explosion");
  EXPECT_EQ(d.layer, "layers.1.linear.weight");
  EXPECT_EQ(d.ranks, std::vector<int64_t>{2});
  rows[2 * kRowWidth + kGradIdx] = -1;  // no per-parameter history yet: no layer
  EXPECT_EQ(nanchaos::harness::decide(rows, 4, {"head.weight"}, {}).layer, "");
  rows[2 * kRowWidth + kGradIdx] = -(1 + 2);  // a spike parameter 1 holds alone
  d = nanchaos::harness::decide(rows, 4, {"head.weight", "layers.1.linear.weight"}, {});
  EXPECT_EQ(d.cause, "gradient");
  EXPECT_EQ(d.layer, "layers.1.linear.weight");
}

TEST(ConsensusCauseRules, SpikeLosesToANonFiniteLossOnAnotherRank) {
  auto rows = one_flag(2, 0, "grad_norm_spike");
  rows[1 * nanchaos::harness::kRowWidth + nanchaos::harness::kBits] =
      double(uint64_t(1) << nanchaos::harness::detector_bit("loss"));
  auto d = nanchaos::harness::decide(rows, 2, {"w"}, {});
  EXPECT_EQ(d.detector, "loss");  // earlier in the pipeline
  EXPECT_EQ(d.ranks, std::vector<int64_t>{1});
}

// The fixed-size summary round (consensus.h): one int64 count per detector, SUM-reduced; its
// size is the same at every world size and it never carries a float.
TEST(ConsensusSummary, OneCountPerDetectorSummedOverRanks) {
  using nanchaos::harness::detector_bit;
  using nanchaos::harness::summary_counts;
  using nanchaos::harness::summary_flagged;
  const size_t width = nanchaos::harness::summary_width();
  EXPECT_EQ(width, nanchaos::harness::detector_order().size());
  EXPECT_EQ(summary_counts(0).size(), width);
  EXPECT_FALSE(summary_flagged(summary_counts(0)));
  const uint64_t grad = uint64_t(1) << detector_bit("grad");
  const uint64_t loss = uint64_t(1) << detector_bit("loss");
  // Three ranks: one clean, one with grad, one with grad and loss; the SUM every rank receives.
  nanchaos::harness::SummaryCounts sum(width, 0);
  for (uint64_t bits : {uint64_t(0), grad, grad | loss}) {
    const auto c = summary_counts(bits);
    for (size_t b = 0; b < width; ++b) sum[b] += c[b];
  }
  EXPECT_TRUE(summary_flagged(sum));
  EXPECT_EQ(sum[size_t(detector_bit("grad"))], 2);
  EXPECT_EQ(sum[size_t(detector_bit("loss"))], 1);
  EXPECT_EQ(sum[size_t(detector_bit("param"))], 0);
  // The last detector's bit is in the last slot (no bit is lost at the end of the order).
  const auto last = summary_counts(uint64_t(1) << (width - 1));
  EXPECT_EQ(last[width - 1], 1);
  EXPECT_TRUE(summary_flagged(last));
}

// DESIGN.md "growth under a raised LR" (consensus.h LrRaise): a >= 10x jump in the applied LR
// marks the next 10 steps; a blow-up surfacing there is gradient_explosion, other causes stand.
TEST(LrRaise, ATenfoldJumpMarksTheWindowAndScheduleMovesDoNot) {
  using nanchaos::harness::LrRaise;
  LrRaise r;
  EXPECT_EQ(r.note(0, 1e-3), -1.0);    // no previous LR
  EXPECT_EQ(r.note(1, 2e-3), -1.0);    // warm-up doubling: a schedule, not a raise
  EXPECT_EQ(r.note(2, 1.9e-2), -1.0);  // 9.5x: below the factor
  EXPECT_EQ(r.note(3, 1.9e-1), 0.0);   // 10x: raised at step 3
  EXPECT_EQ(r.note(4, 1e-3), 1.0);     // back to normal; the window runs on
  EXPECT_EQ(r.note(13, 1e-3), 10.0);   // the window's last step
  EXPECT_EQ(r.note(14, 1e-3), 11.0);   // past it, still known (a replica names that rank)
  EXPECT_EQ(r.note(2, 1e-3), -1.0);    // re-executed after a rollback to before the raise
  LrRaise from_zero;                   // a warm-up from 0 is no raise
  EXPECT_EQ(from_zero.note(0, 0.0), -1.0);
  EXPECT_EQ(from_zero.note(1, 1.0), -1.0);
}
