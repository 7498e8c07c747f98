// Detector `replica` (detectors/replica.cpp): the ranks outside the digest vote's majority.
// The vote and the divergence classes themselves: tests/detectors/core/replica_test.cpp.
#include "detectors/core/replica.h"

#include "tests/detectors/detector_test_util.h"

namespace nanchaos::detect {
namespace {

using fixture::Make;

// Three parameters, one buffer, the training state.
const std::vector<std::string> kNames = {"w0", "w1", "w2", "bn.running_mean", "training_state"};
constexpr size_t kParams = 3;

// Rank `rank` of 3 checks: `combined` whole-state digests, `per_tensor` [3 x 5] digests.
std::optional<Finding> Check(Detector& d, int rank, const std::vector<uint64_t>& combined,
                             const std::vector<uint64_t>& per_tensor) {
  StepView v;
  v.rank = rank;
  v.world = 3;
  v.replica_combined = &combined;
  v.replica_per_tensor = &per_tensor;
  v.replica_names = &kNames;
  v.replica_params = kParams;
  return d.check(v);
}

TEST(ReplicaDetector, RunsEveryReplicaEveryStepsButNotAtTheStart) {
  auto d = Make("replica", "replica_every = 5");
  EXPECT_EQ(d->hook(), Hook::kReplica);
  EXPECT_FALSE(d->due(0));
  EXPECT_FALSE(d->due(4));
  EXPECT_TRUE(d->due(5));
  EXPECT_TRUE(d->due(10));
  EXPECT_TRUE(Make("replica")->due(10));  // the default, 10
  EXPECT_FALSE(Make("replica")->due(5));
}

TEST(ReplicaDetector, AgreeingReplicasAreClean) {
  auto d = Make("replica");
  EXPECT_FALSE(Check(*d, 0, {7, 7, 7}, {}));
  EXPECT_FALSE(Check(*d, 2, {7, 7, 7}, {}));
}

TEST(ReplicaDetector, OnlyTheMinorityIsFlaggedWithTheFirstDifferingTensor) {
  auto d = Make("replica");
  const std::vector<uint64_t> combined = {7, 7, 9};
  // Rank 2's w1 differs (one corrupted weight): a parameter fault there.
  const std::vector<uint64_t> per_tensor = {1, 2,  3, 4, 5,  //
                                            1, 2,  3, 4, 5,  //
                                            1, 99, 3, 4, 5};
  EXPECT_FALSE(Check(*d, 0, combined, per_tensor));  // the majority's rank
  const auto f = Check(*d, 2, combined, per_tensor);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->layer, "w1");
  EXPECT_EQ(f->cause, "parameter");
  EXPECT_EQ(harness::divergence_from_code(f->code).first, 1);
}

TEST(ReplicaDetector, ADriftedTrainingStateIsReplicaDivergence) {
  auto d = Make("replica");
  const std::vector<uint64_t> per_tensor = {1, 2, 3, 4, 5,  //
                                            1, 2, 8, 4, 6,  //
                                            1, 2, 3, 4, 5};
  const auto f = Check(*d, 1, {7, 9, 7}, per_tensor);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->cause, "replica_divergence");
  EXPECT_EQ(f->layer, "w2");  // the first tensor it then changed
}

TEST(ReplicaDetector, ItsRanksAreAVotesMinorityAndTheReplayCannotRefineIt) {
  const auto& info = harness::detectors().at("replica");
  EXPECT_TRUE(info.ranks_by_vote);
  EXPECT_FALSE(info.refined_by_replay);
}

}  // namespace
}  // namespace nanchaos::detect
