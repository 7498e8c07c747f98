// The replica detector's vote (detectors/core/replica.h) and its attribution in decide().
#include "detectors/core/replica.h"

#include <gtest/gtest.h>

#include <vector>

#include "detectors/core/consensus.h"

namespace nanchaos::harness {
namespace {

TEST(ReplicaVote, AgreementIsNoDivergence) {
  const ReplicaVote v = replica_vote({7, 7, 7, 7});
  EXPECT_FALSE(v.diverged);
  EXPECT_TRUE(v.minority.empty());
  EXPECT_FALSE(replica_vote({}).diverged);
  EXPECT_FALSE(replica_vote({42}).diverged);
}

TEST(ReplicaVote, TheMinorityIsFlaggedAndTheLowestMajorityRankIsTheSource) {
  const ReplicaVote v = replica_vote({5, 9, 5, 5});
  EXPECT_TRUE(v.diverged);
  EXPECT_EQ(v.minority, std::vector<int64_t>{1});
  EXPECT_EQ(v.source, 0);
  // Rank 0 itself diverged: the source is the lowest rank of the majority.
  const ReplicaVote w = replica_vote({9, 5, 5, 3});
  EXPECT_EQ(w.minority, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(w.source, 1);
}

TEST(ReplicaVote, ATieGoesToTheGroupOfTheLowestRank) {
  // Two ranks cannot tell which replica is right: rank 0's state is the reference.
  const ReplicaVote two = replica_vote({11, 22});
  EXPECT_EQ(two.minority, std::vector<int64_t>{1});
  EXPECT_EQ(two.source, 0);
  const ReplicaVote four = replica_vote({22, 11, 11, 22});
  EXPECT_EQ(four.minority, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(four.source, 0);
}

TEST(ReplicaVote, FirstDifferingTensorComparesAgainstTheSourceRow) {
  // [3 ranks x 4 tensors]
  const std::vector<uint64_t> m = {1, 2, 3, 4,  //
                                   1, 2, 9, 8,  //
                                   1, 2, 3, 4};
  EXPECT_EQ(first_differing_tensor(m, 4, 1, 0), 2);
  EXPECT_EQ(first_differing_tensor(m, 4, 2, 0), -1);
  EXPECT_EQ(first_differing_tensor(m, 4, 3, 0), -1);  // out of range
  EXPECT_EQ(first_differing_tensor({}, 4, 1, 0), -1);
}

TEST(ReplicaVote, ClassifyReadsTheCauseFromWhichDigestsDiffer) {
  // [2 ranks x (4 parameters, 1 buffer, training_state)]
  const std::vector<uint64_t> same = {1, 2, 3, 4, 5, 6};
  auto two = [&](std::vector<uint64_t> rank1) {
    std::vector<uint64_t> m = same;
    m.insert(m.end(), rank1.begin(), rank1.end());
    return classify_divergence(m, 6, 4, 1, 0);
  };
  // One weight differs (a flipped bit): parameter, that tensor.
  Divergence d = two({1, 2, 9, 4, 5, 6});
  EXPECT_EQ(d.kind, DivergenceKind::kParameter);
  EXPECT_EQ(d.first, 2);
  // A buffer alone (running statistics from a rank's own forward) does not make it an update.
  d = two({1, 9, 3, 4, 9, 6});
  EXPECT_EQ(d.kind, DivergenceKind::kParameter);
  EXPECT_EQ(d.first, 1);
  // Half the parameters or more under an equal training state: one update with another step.
  d = two({9, 9, 3, 4, 5, 6});
  EXPECT_EQ(d.kind, DivergenceKind::kUpdate);
  EXPECT_EQ(d.first, 0);
  // The training state differs: a state drift, whatever else differs.
  d = two({9, 9, 9, 9, 5, 7});
  EXPECT_EQ(d.kind, DivergenceKind::kState);
  // Equal rows and bad ranks: nothing.
  EXPECT_EQ(two(same).first, -1);
  EXPECT_EQ(classify_divergence(same, 6, 4, 1, 0).first, -1);
  // With one parameter, it differing is a corrupted weight, not an update.
  EXPECT_EQ(classify_divergence({1, 6, 2, 6}, 2, 1, 1, 0).kind, DivergenceKind::kParameter);
}

TEST(ReplicaVote, DivergenceCodeRoundTripsThroughADouble) {
  for (int first : {-1, 0, 1, 250}) {
    for (auto kind :
         {DivergenceKind::kState, DivergenceKind::kParameter, DivergenceKind::kUpdate}) {
      const Divergence back = divergence_from_code(double(divergence_code({first, kind})));
      EXPECT_EQ(back.first, first);
      EXPECT_EQ(back.kind, kind);
    }
  }
  EXPECT_EQ(divergence_cause(DivergenceKind::kState), Cause::kReplicaDivergence);
  EXPECT_EQ(divergence_cause(DivergenceKind::kParameter), Cause::kParameter);
  EXPECT_EQ(divergence_cause(DivergenceKind::kUpdate), Cause::kGradientExplosion);
}

TEST(ReplicaVote, DecideNamesTheTensorAndTheCauseOfItsCode) {
  std::vector<double> rows(size_t(3) * kRowWidth, 0.0);
  rows[2 * kRowWidth + kBits] = double(uint64_t(1) << detector_bit("replica"));
  rows[2 * kRowWidth + kReplicaIdx] = divergence_code({1, DivergenceKind::kParameter});
  const Decision d = decide(rows, 3, {"w"}, {}, {"layers.0.linear.weight", "layers.1.bias"});
  EXPECT_EQ(d.detector, "replica");
  EXPECT_EQ(d.cause, "parameter");
  EXPECT_EQ(d.layer, "layers.1.bias");
  EXPECT_EQ(d.ranks, std::vector<int64_t>{2});
  rows[2 * kRowWidth + kReplicaIdx] = divergence_code({2, DivergenceKind::kState});
  const Decision drift = decide(rows, 3, {"w"}, {}, {"a", "b", "training_state"});
  EXPECT_EQ(drift.cause, "replica_divergence");
  EXPECT_EQ(drift.layer, "training_state");
  // The replica check runs at step start: a loss detection of the same step comes later.
  rows[0 * kRowWidth + kBits] = double(uint64_t(1) << detector_bit("loss"));
  EXPECT_EQ(decide(rows, 3, {"w"}, {}, {"a", "b"}).detector, "replica");
}

}  // namespace
}  // namespace nanchaos::harness
