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
#include <thread>

#include "fakes/scheduling/scheduling_cluster.h"

namespace kvgpu::testing {
namespace {

using namespace std::chrono_literals;

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

// Passes of the scheduling queue until one binds nothing, the nodes settled after each: pods
// whose bind was refused (another replica's bind took the room) are scheduled again.
void ScheduleUntilStable(SchedulingCluster& cluster) {
  for (int pass = 0; pass < 12; ++pass) {
    const size_t bound = cluster.ScheduleAndAdmit();
    ASSERT_TRUE(cluster.Settle());
    if (bound == 0) return;
  }
  FAIL() << "still binding pods after 12 passes";
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
    // Short, so that a ledger entry of a pod deleted before a restarted replica saw it ends
    // within the test's wait (30 s in a cluster).
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
      std::this_thread::sleep_for(timing.assume_for);
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

// The upgrade rule in a cluster: on GPUs in equal-size mode (types of one framebuffer size share a
// GPU), the plugins roll from state version 1 to 2 one node at a time while a burst is scheduled
// in waves, and an extender replica restarts midway, so the replicas read nodes of both versions
// at once - version 1 as the stricter per-type lock, version 2 with the size lock. No pod fails
// admission, every pod left Pending fits nowhere, and once every plugin writes version 2 the
// extender lets two types of one size share a GPU, as the kernel does. The plugins roll between
// waves: a plugin restarting while kubelet admits pods makes kubelet fail them whatever the
// version (kubelet marks a plugin's devices unhealthy the moment its endpoint goes).
TEST(SchedulingLoopTest, PluginsRollingToStateVersion2MidBurstOnEqualSizeGpusFailNoPod) {
  std::mt19937 random(5);
  LoopTiming timing;
  timing.seed = 5;
  timing.assume_for = 1s;
  SchedulingCluster cluster(3, /*use_extender=*/true, "t4x2-equal-size", timing);
  ASSERT_TRUE(cluster.Settle());
  for (size_t wave = 0; wave < cluster.nodes().size(); ++wave) {
    SCOPED_TRACE("wave " + std::to_string(wave));
    cluster.Submit(Burst(random, 20, "roll-" + std::to_string(wave) + "-", 2));
    cluster.ScheduleAndAdmit([&](size_t cycle) {
      if (cycle == 7 && wave == 1) cluster.RestartExtender(1);
    });
    ASSERT_EQ(cluster.Count(ClusterPod::State::kFailed), 0u) << Failures(cluster);
    ASSERT_TRUE(cluster.Settle());
    cluster.nodes()[wave]->RestartPlugin(2);
    ASSERT_TRUE(cluster.Settle());
  }
  ASSERT_TRUE(cluster.Settle());
  std::this_thread::sleep_for(timing.assume_for);
  ScheduleUntilStable(cluster);
  ASSERT_EQ(cluster.Count(ClusterPod::State::kFailed), 0u) << Failures(cluster);
  ExpectPendingFitNowhere(cluster);
  // Types of one size on one GPU: 222 (T4-1B) with 230 (T4-1Q), 223 (T4-2B) with 231 (T4-2Q).
  bool shared = false;
  for (auto& node : cluster.nodes()) {
    std::map<std::string, std::set<std::string>> types_on_gpu;
    Result<mdev::Inventory> inventory = node->sim().node().Scan();
    ASSERT_TRUE(inventory.ok());
    for (const mdev::Vgpu& vgpu : inventory->vgpus) {
      types_on_gpu[vgpu.physical_gpu].insert(vgpu.type_id);
    }
    for (const auto& [gpu, types] : types_on_gpu) shared = shared || types.size() > 1;
  }
  EXPECT_TRUE(shared) << "no GPU carries two types of one size: the size lock was not used";
}

}  // namespace
}  // namespace kvgpu::testing
