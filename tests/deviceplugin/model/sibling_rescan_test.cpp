// Vendor VFIO: a type written to one VF changes what every sibling VF of the GPU lists in
// creatable_vgpu_types (shrunk to the locked size, or to the header when the GPU is full; grown
// back on a removal). The model reads all of the GPU's VFs again right after its own create or
// remove, so its view equals the kernel's before any rescan (here the rescan is deferred and never
// comes, as in the daemon between an Allocate and its queued rescan).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

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

class SiblingRescanTest : public ::testing::Test {
 protected:
  SiblingRescanTest() : sim_("l40s-vfio"), manager_(sim_.node(), Options(), store_, holders_) {
    manager_.SetRefreshRequester([] {});  // the rescan is queued and never runs here
    EXPECT_TRUE(manager_.Start().ok());
  }
  ModelOptions Options() {
    ModelOptions options;
    options.cdi_dir = sim_.dir() / "cdi";
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

}  // namespace
}  // namespace kvgpu::deviceplugin
