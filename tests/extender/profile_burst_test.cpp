// The extender's 200-pod burst on a node of each simulated GPU profile (issue 48): the real device
// plugin on the simulator's T4s, A100 VFs, H200s (time-sliced and MIG), L40S and RTX PRO 6000
// (vendor VFIO, MIG and mixed-size), kube-scheduler's cycle and asynchronous binds around the
// extender (fakes/scheduling). Whatever the profile, the mode probe and the published state's
// version, no pod may fail kubelet's Allocate: what kubelet's lists and the published state promise
// is never more than the node's kernel makes. A GPU that took more than it can host would show up
// as a failed pod here.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "deviceplugin/model/resource_naming.h"
#include "fakes/scheduling/scheduling_cluster.h"
#include "tests/extender/loop_helpers.h"

namespace kvgpu::testing {
namespace {

using deviceplugin::GpuModeProbeChoice;

// Every resource the node's GPUs offer now.
std::vector<std::string> ResourcesOf(GpuNode& node) {
  Result<mdev::Inventory> inventory = node.sim().node().Scan();
  EXPECT_TRUE(inventory.ok()) << inventory.status().ToString();
  std::set<std::string> names;
  if (!inventory.ok()) return {};
  for (const mdev::Parent& parent : inventory->parents) {
    for (const mdev::VgpuType& type : parent.types) {
      Result<std::string> name = deviceplugin::ResourceNameFor({}, type);
      if (name.ok()) names.insert(*name);
    }
  }
  return {names.begin(), names.end()};
}

struct Case {
  std::string profile;
  GpuModeProbeChoice probe;
  int state_version;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  std::string name = info.param.profile + "_" +
                     (info.param.probe == GpuModeProbeChoice::kSim ? "probe" : "noprobe") + "_v" +
                     std::to_string(info.param.state_version);
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name;
}

class ProfileBurstTest : public ::testing::TestWithParam<Case> {};

TEST_P(ProfileBurstTest, ABurstOf200PodsOfTheNodesTypesFailsNoAllocate) {
  const Case& c = GetParam();
  SchedulingCluster cluster(1, /*use_extender=*/true, c.profile, LoopTiming{}, c.probe);
  if (c.state_version != 1) cluster.nodes()[0]->RestartPlugin(c.state_version);
  ASSERT_TRUE(cluster.Settle()) << cluster.nodes()[0]->Unsettled(cluster.api());
  const std::vector<std::string> resources = ResourcesOf(*cluster.nodes()[0]);
  ASSERT_FALSE(resources.empty()) << c.profile << " offers nothing";
  std::mt19937 random(48);
  std::uniform_int_distribution<size_t> pick(0, resources.size() - 1);
  std::vector<ClusterPod> burst;
  for (size_t i = 0; i < 200; ++i) {
    ClusterPod pod;
    pod.name = "burst-" + std::to_string(i);
    pod.resource = resources[pick(random)];
    burst.push_back(pod);
  }
  cluster.Submit(burst);
  const size_t bound = cluster.ScheduleAndAdmit();
  EXPECT_EQ(cluster.Count(ClusterPod::State::kFailed), 0u) << Failures(cluster);
  EXPECT_GT(bound, 0u);
  EXPECT_EQ(cluster.Count(ClusterPod::State::kRunning), bound);
  // Once the node has settled (its rescans list what the first pass's vGPUs left), later passes
  // place more where room is left, still failing none. Without the mode probe a vendor-VFIO GPU
  // lists one more of a type per rescan, so this may take many passes; it is bounded, as what is
  // checked is that none fails, not that all room is used.
  for (int pass = 0; pass < 30; ++pass) {
    ASSERT_TRUE(cluster.Settle());
    if (cluster.ScheduleAndAdmit() == 0) break;
    ASSERT_EQ(cluster.Count(ClusterPod::State::kFailed), 0u) << "pass " << pass << "\n"
                                                             << Failures(cluster);
  }
  EXPECT_EQ(cluster.Count(ClusterPod::State::kFailed), 0u) << Failures(cluster);
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (const char* profile : {"t4x2", "t4x2-equal-size", "a100-sriov", "h200-vfio", "h200-mig",
                              "l40s-vfio", "rtxpro6000-mig", "mixed"}) {
    cases.push_back({profile, GpuModeProbeChoice::kNone, 1});
    cases.push_back({profile, GpuModeProbeChoice::kSim, 1});
    cases.push_back({profile, GpuModeProbeChoice::kSim, 3});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Profiles, ProfileBurstTest, ::testing::ValuesIn(Cases()), CaseName);

}  // namespace
}  // namespace kvgpu::testing
