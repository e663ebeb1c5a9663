// Recovery from a corrupt state file: only the vGPUs that our own Allocate answers in kubelet's
// checkpoint name become ours again, under the same device IDs (invariant 4); everything else on
// the node is left alone (invariant 3).
#include "deviceplugin/lifecycle/state_rebuild.h"

#include <gtest/gtest.h>

#include "fakes/common/sim_node.h"
#include "fakes/common/temp_dir.h"
#include "fakes/podresources/checkpoint_writer.h"
#include "kubelet/deviceplugin/v1beta1/api.pb.h"
#include "tests/deviceplugin/lifecycle/holder_builders.h"

namespace kvgpu::deviceplugin {
namespace {

using kvgpu::deviceplugin::testing::kResource;
using kvgpu::testing::SimNode;

std::string AllocResp(const std::string& ids, const std::string& uuids) {
  v1beta1::ContainerAllocateResponse response;
  (*response.mutable_envs())["KVGPU_VGPU_MTTY_2_DEVICE_IDS"] = ids;
  (*response.mutable_envs())["KVGPU_VGPU_MTTY_2_UUIDS"] = uuids;
  (*response.mutable_envs())["KVGPU_VGPU_MTTY_2_TYPES"] = "mtty-2";
  return response.SerializeAsString();
}

TEST(StateRebuildTest, OnlyVgpusOurAnswersInKubeletsCheckpointNameBecomeOursAgain) {
  SimNode sim("mtty");
  auto ours = sim.node().Create({"mtty", "mtty-2", std::nullopt});
  auto foreign = sim.node().Create({"mtty", "mtty-2", std::nullopt});
  ASSERT_TRUE(ours.ok() && foreign.ok());
  auto inventory = sim.node().Scan();
  ASSERT_TRUE(inventory.ok());

  kvgpu::testing::TempDir kubelet_dir;
  kvgpu::testing::CheckpointWriter writer(kubelet_dir.path());
  writer.Write({
      {"uid-1", "main", kResource, {"mtty-mtty-2-3"}, -1, AllocResp("mtty-mtty-2-3", ours->id)},
      {"uid-0",
       "main",
       kResource,
       {"mtty-mtty-2-5"},
       -1,
       AllocResp("mtty-mtty-2-5", "0b5d1e1c-4c3a-4d6e-9a53-2f1d7c9e8a11")},  // long gone
      {"uid-2",
       "main",
       kResource,
       {"mtty-mtty-2-7"},
       -1,
       AllocResp("mtty-mtty-2-7,mtty-mtty-2-8", ours->id)},  // malformed: lengths differ
  });
  auto checkpoint = kubelet::ReadCheckpoint(writer.path());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().message();
  Rebuilt rebuilt = RebuildRecords(*checkpoint, *inventory, 42'000);
  ASSERT_EQ(rebuilt.vgpus.size(), 1u);
  EXPECT_EQ(rebuilt.vgpus[0].vgpu_id, ours->id);
  EXPECT_EQ(rebuilt.vgpus[0].device_id, "mtty-mtty-2-3") << "invariant 4: the same ID as before";
  EXPECT_EQ(rebuilt.vgpus[0].slot, 3u);
  EXPECT_EQ(rebuilt.vgpus[0].resource, kResource);
  EXPECT_EQ(rebuilt.notes.size(), 1u);
}

}  // namespace
}  // namespace kvgpu::deviceplugin
