// A vGPU made on a GPU changes what the GPU and its VFs can still make. Vendor VFIO: every sibling
// VF's creatable_vgpu_types shrinks (to the locked size, or to the header when the GPU is full)
// and grows back on a removal. mdev: a strict GPU (or every VF of an SR-IOV one) counts no
// instance of the other types. The model reads the whole GPU again right after its own create or
// remove, so its view equals the kernel's before any rescan (here the rescan is deferred and never
// comes, as in the daemon between an Allocate and its queued rescan) - and the GPU's mode read
// from those counts is the one it is in (stale counts made a strict GPU look equal-size to the
// DRA confirmer, which then confirmed a second type there).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "deviceplugin/model/occupancy.h"
#include "deviceplugin/model/resource_manager.h"
#include "fakes/common/sim_node.h"

namespace kvgpu::deviceplugin {
namespace {

using kvgpu::testing::SimNode;

// Per VF of `gpu`: the type ids it lists, then "vgpu:<type>" when it carries one.
std::map<std::string, std::vector<std::string>> Offered(const mdev::Inventory& inventory,
                                                        const std::string& gpu) {
  std::map<std::string, std::vector<std::string>> out;
  for (const mdev::Parent& parent : inventory.parents) {
    if (parent.physical_gpu != gpu) continue;
    std::vector<std::string>& listed = out[parent.name];
    for (const mdev::VgpuType& type : parent.types) {
      if (type.available_instances > 0) listed.push_back(type.id);
    }
  }
  for (const mdev::Vgpu& vgpu : inventory.vgpus) {
    if (vgpu.physical_gpu == gpu) out[vgpu.parent].push_back("vgpu:" + vgpu.type_id);
  }
  return out;
}

class GpuRescanTest : public ::testing::Test {
 protected:
  explicit GpuRescanTest(const char* profile)
      : sim_(profile), manager_(sim_.node(), Options(), store_, holders_) {
    manager_.SetRefreshRequester([] {});  // the rescan is queued and never runs here
    EXPECT_TRUE(manager_.Start().ok());
  }
  ModelOptions Options() {
    ModelOptions options;
    options.cdi_dir = sim_.dir() / "cdi";
    // Each type's max instances, as gpuModeProbe gives them: without them a vendor-VFIO GPU lists
    // one device per type until the rescan after a create.
    options.limit_probe = MakeGpuModeProbe(GpuModeProbeChoice::kSim, sim_.root());
    return options;
  }
  // The model's view of `gpu` against the kernel's, read now.
  void ExpectKernelsView(const std::string& gpu) {
    auto kernel = sim_.node().Scan();
    ASSERT_TRUE(kernel.ok());
    EXPECT_EQ(Offered(manager_.Inventory(), gpu), Offered(*kernel, gpu));
  }
  std::vector<std::string> ListedOn(const std::string& vf) {
    return Offered(manager_.Inventory(), vf.substr(0, 8) + "00.0")[vf];
  }

  SimNode sim_;
  MemoryStateStore store_;
  struct Holders : HolderOracle {
    Verdict Check(const CreatedVgpu&) override { return {}; }
  } holders_;
  ResourceManager manager_;
};

class SiblingRescanTest : public GpuRescanTest {
 protected:
  SiblingRescanTest() : GpuRescanTest("l40s-vfio") {}
};

class StrictMdevRescanTest : public GpuRescanTest {
 protected:
  StrictMdevRescanTest() : GpuRescanTest("t4x2") {}
};

class SriovMdevRescanTest : public GpuRescanTest {
 protected:
  SriovMdevRescanTest() : GpuRescanTest("a100-sriov") {}
};

// The id of the vGPU the model shows on `parent`.
std::string VgpuOn(const mdev::Inventory& inventory, const std::string& parent) {
  for (const mdev::Vgpu& vgpu : inventory.vgpus) {
    if (vgpu.parent == parent) return vgpu.id;
  }
  return "";
}

TEST_F(SiblingRescanTest, OnAnEqualSizeGpuTheSiblingsShrinkToTheSizeAndGrowBackAtOnce) {
  const std::string gpu = "0000:3b:00.0";
  ASSERT_EQ(ListedOn("0000:3b:00.5").size(), 5u) << "every size before the first vGPU";
  ASSERT_TRUE(manager_.Allocate("tencent.com/vgpu-1702", {{"0000:3b:00.4-1702-0"}}).ok());
  ExpectKernelsView(gpu);
  EXPECT_EQ(ListedOn("0000:3b:00.5"), std::vector<std::string>{"1702"}) << "8 GiB only";
  ASSERT_TRUE(manager_.RemoveVgpu("0000:3b:00.4-1702-0", "0000:3b:00.4").ok());
  ExpectKernelsView(gpu);
  EXPECT_EQ(ListedOn("0000:3b:00.5").size(), 5u);
}

TEST_F(SiblingRescanTest, OnAMixedSizeGpuAFullCardListsNothingAndARemovalFreesItsSlots) {
  const std::string gpu = "0000:af:00.0";
  ASSERT_TRUE(manager_.Allocate("tencent.com/vgpu-1704", {{"0000:af:00.4-1704-0"}}).ok());
  ExpectKernelsView(gpu);
  EXPECT_FALSE(ListedOn("0000:af:00.6").empty()) << "24 of 48 slots still free";
  ASSERT_TRUE(manager_.Allocate("tencent.com/vgpu-1704", {{"0000:af:00.5-1704-0"}}).ok());
  ExpectKernelsView(gpu);
  EXPECT_TRUE(ListedOn("0000:af:00.6").empty()) << "a full card: the header only";
  ASSERT_TRUE(manager_.RemoveVgpu("0000:af:00.4-1704-0", "0000:af:00.4").ok());
  ExpectKernelsView(gpu);
  EXPECT_FALSE(ListedOn("0000:af:00.6").empty());
}

TEST_F(StrictMdevRescanTest, AStrictGpuListsOnlyTheLockedTypeAtOnceAndEveryTypeAfterTheRemoval) {
  const std::string gpu = "0000:3b:00.0";
  ASSERT_GT(ListedOn(gpu).size(), 1u) << "every type before the first vGPU";
  ASSERT_TRUE(manager_.Allocate("tencent.com/vgpu-225", {{"0000:3b:00.0-nvidia-225-0"}}).ok());
  ExpectKernelsView(gpu);
  EXPECT_EQ(ListedOn(gpu), (std::vector<std::string>{"nvidia-225", "vgpu:nvidia-225"}));
  EXPECT_EQ(GpuRules(manager_.Inventory(), OccupancySetting::kAuto).OccupancyOf(gpu),
            scheduling::Occupancy::kStrict)
      << "the mode read from the counts";
  const std::string vgpu = VgpuOn(manager_.Inventory(), gpu);
  ASSERT_FALSE(vgpu.empty());
  ASSERT_TRUE(manager_.RemoveVgpu("0000:3b:00.0-nvidia-225-0", vgpu).ok());
  ExpectKernelsView(gpu);
  EXPECT_GT(ListedOn(gpu).size(), 1u);
}

TEST_F(SriovMdevRescanTest, AVgpuOnOneVfLocksEverySiblingVfAtOnce) {
  const std::string gpu = "0000:41:00.0";
  ASSERT_GT(ListedOn("0000:41:00.5").size(), 1u);
  ASSERT_TRUE(manager_.Allocate("tencent.com/vgpu-693", {{"0000:41:00.4-nvidia-693-0"}}).ok());
  ExpectKernelsView(gpu);
  EXPECT_EQ(ListedOn("0000:41:00.5"), std::vector<std::string>{"nvidia-693"});
  EXPECT_EQ(GpuRules(manager_.Inventory(), OccupancySetting::kAuto).OccupancyOf(gpu),
            scheduling::Occupancy::kStrict)
      << "the mode read from the counts";
  {
    auto kernel = sim_.node().Scan();
    ASSERT_TRUE(kernel.ok());
    EXPECT_EQ(GpuRules(*kernel, OccupancySetting::kAuto).OccupancyOf(gpu),
              scheduling::Occupancy::kStrict)
        << "the mode read from the kernel's own counts";
  }
  const std::string vgpu = VgpuOn(manager_.Inventory(), "0000:41:00.4");
  ASSERT_FALSE(vgpu.empty());
  ASSERT_TRUE(manager_.RemoveVgpu("0000:41:00.4-nvidia-693-0", vgpu).ok());
  ExpectKernelsView(gpu);
  EXPECT_GT(ListedOn("0000:41:00.5").size(), 1u);
}

}  // namespace
}  // namespace kvgpu::deviceplugin
