// The extender in a scheduling loop with kube-scheduler's timing (fakes/scheduling): each cycle
// assumes its pod and binds it asynchronously, through the extender's bind verb, some cycles
// later; the next cycle starts before the last bind lands; two extender replicas behind one
// Service each learn binds through their own late watch. Four simulated 2 x T4 nodes run the real
// device plugin, which publishes its state as in a cluster; kubelet's admission is the fake
// kubelet's device manager. The pods that the kernels could still take must be placed, and no pod
// may fail admission - through churn, a scheduler restart and extender restarts mid-burst;
// without the extender the same burst makes kubelet fail pods, which is the control that shows
// the scenario is a real one.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "fakes/scheduling/scheduling_cluster.h"
#include "tests/extender/loop_helpers.h"

namespace kvgpu::testing {
namespace {

using namespace std::chrono_literals;

TEST(SchedulingLoopTest,
     ABurstOf200PodsOfSixTypesBoundAsynchronouslyThroughTwoReplicasFailsNoPodAndPlacesAllThatFit) {
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
  ScheduleUntilStable(cluster);
  EXPECT_EQ(cluster.Count(ClusterPod::State::kFailed), 0u) << Failures(cluster);
  ExpectPendingFitNowhere(cluster);
  // Scheduling again with everything settled places nothing more and fails nothing.
  EXPECT_EQ(cluster.ScheduleAndAdmit(), 0u);
  EXPECT_EQ(cluster.Count(ClusterPod::State::kFailed), 0u) << Failures(cluster);
}

// The same burst and timing with kube-scheduler's count filter and default binder alone.
TEST(SchedulingLoopTest, WithoutTheExtenderTheSameBurstMakesKubeletFailPods) {
  std::mt19937 random(17);
  SchedulingCluster cluster(4, /*use_extender=*/false);
  ASSERT_TRUE(cluster.Settle());
  cluster.Submit(Burst(random, 200, "burst-"));
  cluster.ScheduleAndAdmit();
  EXPECT_GT(cluster.Count(ClusterPod::State::kFailed), 0u)
      << "the counts kubelet reports let the scheduler over-commit time-sliced GPUs";
}

// Random bursts of mixed types and sizes with churn mid-burst (running pods deleted, new pods
// arriving), a kube-scheduler restart and an extender replica restart in every round: after
// every round, no pod failed admission and every pod left Pending fits on no node.
TEST(SchedulingLoopTest,
     RandomBurstsWithChurnAndRestartsMidBurstNeverFailAPodAndPlaceEveryPodThatFits) {
  for (uint32_t seed : {3u, 11u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 random(seed);
    LoopTiming timing;
    timing.seed = seed;
    // Short (100 cycles), so that a ledger entry of a pod deleted before a restarted replica saw it
    // also ends within the passes of the queue, not only when the test lets the time pass (30 s in
    // a cluster).
    timing.assume_for = 1s;
    SchedulingCluster cluster(3, /*use_extender=*/true, "t4x2", timing);
    ASSERT_TRUE(cluster.Settle());
    for (int round = 0; round < 4; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      const std::string prefix = "r" + std::to_string(round) + "-";
      cluster.Submit(
          Burst(random, std::uniform_int_distribution<size_t>(10, 40)(random), prefix, 3));
      const size_t restart_at = std::uniform_int_distribution<size_t>(0, 10)(random);
      size_t arrivals = 0;
      cluster.ScheduleAndAdmit([&](size_t cycle) {
        if (cycle == restart_at) cluster.RestartScheduler();
        if (cycle == restart_at + 3) cluster.RestartExtender(static_cast<size_t>(round % 2));
        if (std::bernoulli_distribution(0.1)(random)) {  // churn
          for (const ClusterPod& pod : cluster.Pods()) {
            if (pod.state == ClusterPod::State::kRunning) {
              cluster.Delete(pod.name);
              // The plugin removes the pod's vGPUs before the next cycle. Without this wait the
              // fake kubelet hands the freed device to a new pod within microseconds and the
              // plugin refuses it (its vGPU still exists): a plugin-side gap between kubelet
              // freeing a device and the plugin removing its vGPU, not the extender's.
              EXPECT_TRUE(cluster.Settle());
              break;
            }
          }
          cluster.Submit(Burst(random, 1, prefix + "late-" + std::to_string(arrivals++), 3));
        }
      });
      ASSERT_EQ(cluster.Count(ClusterPod::State::kFailed), 0u) << Failures(cluster);
      ASSERT_TRUE(cluster.Settle());
      cluster.AdvanceClock(timing.assume_for + timing.cycle);
      ScheduleUntilStable(cluster);
      ASSERT_EQ(cluster.Count(ClusterPod::State::kFailed), 0u) << Failures(cluster);
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
