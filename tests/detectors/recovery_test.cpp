// The reference stack's recovery state (detectors/recovery.h): the policy table, bit-exact
// snapshots with optimizer and scaler state, and replica digests that see one flipped bit.
#include "detectors/stack/recovery.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <vector>

#include "harness/scenario/detector_registry.h"
#include "harness/scenario/scenario.h"

namespace nanchaos::detect {
namespace {

using harness::Policy;
using harness::RecoveryConfig;

RecoveryConfig Policies(std::vector<Policy> p) {
  RecoveryConfig c;
  c.policy = std::move(p);
  c.lr_backoff_factor = 0.5;
  return c;
}

// The registry's answer for `detector`: are its ranks a vote's minority (resync applies)?
bool ByVote(const std::string& detector) {
  return nanchaos::harness::detectors().at(detector).ranks_by_vote;
}

TEST(PolicyTable, AbortWinsNoneTrainsOnTheRestSkip) {
  auto a = choose_action(Policies({Policy::kRollback, Policy::kAbort}), ByVote("grad"));
  EXPECT_EQ(a.action, "abort");
  EXPECT_TRUE(a.abort && a.skip && !a.rollback);
  a = choose_action(Policies({Policy::kNone}), ByVote("grad"));
  EXPECT_EQ(a.action, "none");
  EXPECT_FALSE(a.skip || a.abort);
  a = choose_action(Policies({Policy::kSkipStep}), ByVote("loss"));
  EXPECT_EQ(a.action, "skip_step");
  EXPECT_TRUE(a.skip);
  a = choose_action(Policies({Policy::kRollback, Policy::kLrBackoff}), ByVote("loss"));
  EXPECT_EQ(a.action, "rollback+lr_backoff");
  EXPECT_TRUE(a.rollback);
  EXPECT_EQ(a.lr_factor, 0.5);
  // resync answers a replica divergence only; other detections are skipped.
  EXPECT_EQ(choose_action(Policies({Policy::kResync}), ByVote("replica")).action, "resync");
  EXPECT_EQ(choose_action(Policies({Policy::kResync}), ByVote("grad")).action, "skip_step");
}

class RecoveryState : public ::testing::Test {
 protected:
  void SetUp() override {
    torch::manual_seed(3);
    lin_ = torch::nn::Linear(4, 2);
    opt_ = std::make_unique<torch::optim::Adam>(lin_->parameters(), 0.01);
    Train(2);
  }
  void Train(int steps) {
    for (int i = 0; i < steps; ++i) {
      opt_->zero_grad();
      lin_(torch::randn({8, 4})).pow(2).mean().backward();
      opt_->step();
    }
  }
  ModelState State() {
    ModelState m;
    m.params = lin_->parameters();
    m.optimizer = opt_.get();
    m.lr_scale = &lr_scale_;
    return m;
  }
  torch::nn::Linear lin_{nullptr};
  std::unique_ptr<torch::optim::Adam> opt_;
  double lr_scale_ = 1.0;
};

TEST_F(RecoveryState, SnapshotRestoresParametersAndOptimizerStateBitExact) {
  const auto before = replica_digests(State());
  ASSERT_EQ(before.size(), 2u + 0u + 1u);  // two parameters, no buffer, the training state
  Snapshot snap(2, State());
  EXPECT_EQ(snap.step(), 2);
  Train(3);
  EXPECT_NE(replica_digests(State()), before);
  snap.restore(State());
  EXPECT_EQ(replica_digests(State()), before);
}

TEST_F(RecoveryState, OneFlippedBitOrAnotherLrFactorChangesItsDigest) {
  const auto before = replica_digests(State());
  {
    torch::NoGradGuard ng;
    auto w = lin_->weight.view({-1});
    float v = w[0].item<float>();
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    bits ^= 1u;
    std::memcpy(&v, &bits, 4);
    w[0] = v;
  }
  const auto flipped = replica_digests(State());
  EXPECT_NE(flipped[0], before[0]);  // the weight's entry
  EXPECT_EQ(flipped[1], before[1]);  // the bias is untouched
  lr_scale_ = 0.5;
  EXPECT_NE(replica_digests(State()).back(), before.back());
}

}  // namespace
}  // namespace nanchaos::detect
