// The upgrade rule of the published node state in a scheduling loop with kube-scheduler's timing
// (fakes/scheduling): the plugins roll from state version 1 to 2 one node at a time while a burst
// is scheduled in waves, and an extender replica restarts midway, so the replicas read nodes of
// both versions at once. The plugins roll between waves: a plugin restarting while kubelet admits
// pods makes kubelet fail them whatever the version (kubelet marks a plugin's devices unhealthy
// the moment its endpoint goes).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "fakes/scheduling/scheduling_cluster.h"
#include "tests/extender/loop_helpers.h"

namespace kvgpu::testing {
namespace {

using namespace std::chrono_literals;

// Rolls the plugins of a 3-node cluster of `profile` to version 2 wave by wave; returns whether
// some GPU ends up carrying two types (of one size).
bool RollThroughABurst(const std::string& profile) {
  std::mt19937 random(5);
  LoopTiming timing;
  timing.seed = 5;
  timing.assume_for = 1s;
  SchedulingCluster cluster(3, /*use_extender=*/true, profile, timing);
  EXPECT_TRUE(cluster.Settle());
  for (size_t wave = 0; wave < cluster.nodes().size(); ++wave) {
    SCOPED_TRACE("wave " + std::to_string(wave));
    cluster.Submit(Burst(random, 20, "roll-" + std::to_string(wave) + "-", 2));
    cluster.ScheduleAndAdmit([&](size_t cycle) {
      if (cycle == 7 && wave == 1) cluster.RestartExtender(1);
    });
    EXPECT_EQ(cluster.Count(ClusterPod::State::kFailed), 0u) << Failures(cluster);
    EXPECT_TRUE(cluster.Settle());
    cluster.nodes()[wave]->RestartPlugin(2);
    EXPECT_TRUE(cluster.Settle());
  }
  EXPECT_TRUE(cluster.Settle());
  // Past assume_for: the ledger entries of binds whose pods never ran no longer hold room.
  cluster.AdvanceClock(timing.assume_for + timing.cycle);
  ScheduleUntilStable(cluster);
  EXPECT_EQ(cluster.Count(ClusterPod::State::kFailed), 0u) << Failures(cluster);
  ExpectPendingFitNowhere(cluster);
  bool shared = false;
  for (auto& node : cluster.nodes()) {
    std::map<std::string, std::set<std::string>> types_on_gpu;
    Result<mdev::Inventory> inventory = node->sim().node().Scan();
    if (!inventory.ok()) continue;
    for (const mdev::Vgpu& vgpu : inventory->vgpus) {
      types_on_gpu[vgpu.physical_gpu].insert(vgpu.type_id);
    }
    for (const auto& [gpu, types] : types_on_gpu) shared = shared || types.size() > 1;
  }
  return shared;
}

// On GPUs with the per-type lock: versions 1 and 2 side by side, no pod fails admission and every
// pod left Pending fits nowhere.
TEST(StateRollTest, PluginsRollingToStateVersion2BetweenWavesOfABurstFailNoPod) {
  EXPECT_FALSE(RollThroughABurst("t4x2")) << "a strict GPU carries one type";
}

// The same on GPUs in equal-size mode, where version 2 lets types of one size share a GPU. It
// failed an admission in about one run of two while the published state offered a sibling type of
// one size the capacity that vGPUs made since the last scan had used.
TEST(StateRollTest, PluginsRollingToStateVersion2OnEqualSizeGpusFailNoPodAndShareBySize) {
  EXPECT_TRUE(RollThroughABurst("t4x2-equal-size"))
      << "no GPU carries two types of one size: the size lock was not used";
}

}  // namespace
}  // namespace kvgpu::testing
