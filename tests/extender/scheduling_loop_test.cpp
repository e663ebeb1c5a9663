// The extender in a scheduling loop as kube-scheduler runs it (fakes/scheduling): one pod at a
// time, the scheduler's own count filter, the extender's filter and prioritize, bind; a burst is
// bound back to back before the kubelets admit it. Four simulated 2 x T4 nodes run the real
// device plugin, which publishes its state as in a cluster; kubelet's admission is the fake
// kubelet's device manager. The pods that the kernels could still take must be placed, and no pod
// may fail admission; without the extender the same burst makes kubelet fail pods, which is the
// control that shows the scenario is a real one.
#include <gtest/gtest.h>

#include <random>

#include "fakes/scheduling/scheduling_cluster.h"

namespace kvgpu::testing {
namespace {

// Six T4 types: 16, 8, 16, 8, 4 and 2 per GPU.
const std::vector<std::string> kTypes = {"222", "223", "230", "231", "232", "233"};

std::vector<ClusterPod> Burst(std::mt19937& random, size_t size, const std::string& prefix,
                              uint32_t max_count = 1) {
  std::vector<ClusterPod> pods;
  std::uniform_int_distribution<size_t> type(0, kTypes.size() - 1);
  std::uniform_int_distribution<uint32_t> count(1, max_count);
  for (size_t i = 0; i < size; ++i) {
    ClusterPod pod;
    pod.name = prefix + std::to_string(i);
    pod.resource = "tencent.com/vgpu-" + kTypes[type(random)];
    pod.count = count(random);
    pods.push_back(pod);
  }
  return pods;
}

std::string Failures(const SchedulingCluster& cluster) {
  std::string out;
  for (const ClusterPod& pod : cluster.Pods()) {
    if (pod.state == ClusterPod::State::kFailed) out += pod.name + ": " + pod.failure + "\n";
  }
  return out;
}

// Every pod still Pending is one no kernel can take now.
void ExpectPendingFitNowhere(SchedulingCluster& cluster) {
  for (const ClusterPod& pod : cluster.Pods()) {
    if (pod.state != ClusterPod::State::kPending) continue;
    EXPECT_FALSE(cluster.FitsSomewhere(pod.resource, pod.count))
        << pod.name << " (" << pod.count << " x " << pod.resource
        << ") fits on some node but stayed Pending\n"
        << cluster.Explain(pod);
  }
}

TEST(SchedulingLoopTest,
     ABurstOf200PodsOfSixTypesOnFourNodesFailsNoPodAndLeavesOnlyMisfitsPending) {
  std::mt19937 random(17);
  SchedulingCluster cluster(4, /*use_extender=*/true);
  ASSERT_TRUE(cluster.Settle());
  cluster.Submit(Burst(random, 200, "burst-"));
  const size_t bound = cluster.ScheduleAndAdmit();
  EXPECT_EQ(cluster.Count(ClusterPod::State::kFailed), 0u) << Failures(cluster);
  EXPECT_GT(bound, 0u);
  EXPECT_EQ(cluster.Count(ClusterPod::State::kRunning), bound);
  EXPECT_GT(cluster.Count(ClusterPod::State::kPending), 0u) << "200 pods cannot all fit";
  ASSERT_TRUE(cluster.Settle());
  ExpectPendingFitNowhere(cluster);
  // Scheduling again with everything settled places nothing more and fails nothing.
  EXPECT_EQ(cluster.ScheduleAndAdmit(), 0u);
  EXPECT_EQ(cluster.Count(ClusterPod::State::kFailed), 0u) << Failures(cluster);
}

TEST(SchedulingLoopTest, WithoutTheExtenderTheSameBurstMakesKubeletFailPods) {
  std::mt19937 random(17);
  SchedulingCluster cluster(4, /*use_extender=*/false);
  ASSERT_TRUE(cluster.Settle());
  cluster.Submit(Burst(random, 200, "burst-"));
  cluster.ScheduleAndAdmit();
  EXPECT_GT(cluster.Count(ClusterPod::State::kFailed), 0u)
      << "the counts kubelet reports let the scheduler over-commit time-sliced GPUs";
}

// Random bursts of mixed types and sizes, and deletions between them: after every round, no pod
// failed admission and every pod left Pending fits on no node.
TEST(SchedulingLoopTest, RandomBurstsAndDeletionsNeverFailAPodAndPlaceEveryPodThatFits) {
  for (uint32_t seed : {3u, 11u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 random(seed);
    SchedulingCluster cluster(3, /*use_extender=*/true);
    ASSERT_TRUE(cluster.Settle());
    for (int round = 0; round < 4; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      const std::string prefix = "r" + std::to_string(round) + "-";
      cluster.Submit(
          Burst(random, std::uniform_int_distribution<size_t>(10, 40)(random), prefix, 3));
      cluster.ScheduleAndAdmit();
      ASSERT_EQ(cluster.Count(ClusterPod::State::kFailed), 0u) << Failures(cluster);
      ASSERT_TRUE(cluster.Settle());
      ExpectPendingFitNowhere(cluster);
      // Some running pods end; their vGPUs go and the GPUs may free up for other types.
      std::vector<std::string> ending;
      for (const ClusterPod& pod : cluster.Pods()) {
        if (pod.state == ClusterPod::State::kRunning && std::bernoulli_distribution(0.4)(random)) {
          ending.push_back(pod.name);
        }
      }
      for (const std::string& name : ending) cluster.Delete(name);
      ASSERT_TRUE(cluster.Settle());
    }
  }
}

}  // namespace
}  // namespace kvgpu::testing
