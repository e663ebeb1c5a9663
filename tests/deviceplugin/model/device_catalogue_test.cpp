// The device catalogue: which IDs each resource lists, from a hand-built kernel view and records.
// Pure, no sysfs: each test states the node it imagines.
#include "deviceplugin/model/device_catalogue.h"

#include <gtest/gtest.h>

#include "tests/deviceplugin/model/inventory_builders.h"

namespace kvgpu::deviceplugin {
namespace {

using namespace kvgpu::deviceplugin::testing;  // NOLINT(google-build-using-namespace)

std::vector<std::string> Ids(const DeviceCatalogue& catalogue, const std::string& resource) {
  std::vector<std::string> out;
  for (const Device& d : catalogue.Devices(resource)) out.push_back(d.id);
  return out;
}

TEST(DeviceCatalogueTest, ListsOneDevicePerFreeInstanceUnderTheTypesResource) {
  mdev::Inventory inv;
  inv.parents = {T4("0000:3b:00.0", 2, 1)};
  DeviceCatalogue catalogue;
  EXPECT_TRUE(catalogue.Rebuild(inv, {}, ModelOptions{}));
  EXPECT_EQ(Ids(catalogue, k222),
            (std::vector<std::string>{"0000:3b:00.0-nvidia-222-0", "0000:3b:00.0-nvidia-222-1"}));
  EXPECT_EQ(catalogue.ResourceOf("0000:3b:00.0-nvidia-223-0"), k223);
  EXPECT_FALSE(catalogue.Rebuild(inv, {}, ModelOptions{})) << "the same view changes no list";
}

TEST(DeviceCatalogueTest, AGpuLockedToAnotherTypeEmptiesTheListButKeepsTheResource) {
  mdev::Inventory inv;
  inv.parents = {T4("0000:3b:00.0", 0, 1)};  // a 222 elsewhere... the kernel shows 0 free
  DeviceCatalogue catalogue;
  catalogue.Rebuild(inv, {}, ModelOptions{});
  EXPECT_TRUE(catalogue.Knows(k222));
  EXPECT_TRUE(catalogue.Devices(k222).empty());
}

TEST(DeviceCatalogueTest, FreeIdsKubeletWasGivenStayListedWhenTheCountShrinks) {
  mdev::Inventory inv;
  inv.parents = {T4("0000:3b:00.0", 3, 0)};
  DeviceCatalogue catalogue;
  catalogue.Rebuild(inv, {}, ModelOptions{});
  // Slot 0 became ours (recorded), and someone else's vGPU took an instance: 1 free left. Slot 1
  // or 2 may go, but the survivor must be one kubelet already holds, never a new ID.
  CreatedVgpu ours = Record222("0000:3b:00.0-nvidia-222-0", "u0");
  inv.vgpus = {VgpuOn("u0", "0000:3b:00.0", "nvidia-222")};
  inv.parents = {T4("0000:3b:00.0", 1, 0)};
  catalogue.Rebuild(inv, {ours}, ModelOptions{});
  EXPECT_EQ(Ids(catalogue, k222),
            (std::vector<std::string>{"0000:3b:00.0-nvidia-222-0", "0000:3b:00.0-nvidia-222-1"}));
  const Device* d0 = catalogue.Find(k222, "0000:3b:00.0-nvidia-222-0");
  ASSERT_NE(d0, nullptr);
  EXPECT_TRUE(d0->ours && d0->vgpu_exists);
  EXPECT_TRUE(catalogue.EverAdvertised("0000:3b:00.0-nvidia-222-2"))
      << "an ID listed once is told apart from one never offered";
  EXPECT_FALSE(catalogue.EverAdvertised("0000:3b:00.0-nvidia-222-9"));
}

TEST(DeviceCatalogueTest, AVanishedParentKeepsItsDevicesListedUnhealthy) {
  mdev::Inventory inv;
  inv.parents = {T4("0000:3b:00.0", 1, 0), T4("0000:af:00.0", 1, 0)};
  DeviceCatalogue catalogue;
  catalogue.Rebuild(inv, {}, ModelOptions{});
  inv.parents.pop_back();
  EXPECT_TRUE(catalogue.Rebuild(inv, {}, ModelOptions{}));
  const Device* gone = catalogue.Find(k222, "0000:af:00.0-nvidia-222-0");
  ASSERT_NE(gone, nullptr);
  EXPECT_FALSE(gone->healthy);
  EXPECT_EQ(catalogue.Counts().at(k222).unhealthy, 1u);
  EXPECT_EQ(catalogue.Counts().at(k222).available, 1u);
}

TEST(DeviceCatalogueTest, SriovVirtualFunctionsListNoMoreThanTheGpuCanHost) {
  // An A100 80C: every VF shows the type, the GPU hosts one.
  mdev::Inventory inv;
  for (int vf = 1; vf <= 4; ++vf) {
    mdev::Parent p = GpuParent("0000:41:00." + std::to_string(vf), "0000:41:00.0");
    p.types.push_back(TypeWithFree("nvidia-500", 1, /*max_instance=*/1));
    inv.parents.push_back(p);
  }
  DeviceCatalogue catalogue;
  catalogue.Rebuild(inv, {}, ModelOptions{});
  EXPECT_EQ(catalogue.Devices("tencent.com/vgpu-500").size(), 1u);
}

TEST(DeviceCatalogueTest, PinnedGpusOfferOnlyTheirTypeButKeepListingOurVgpus) {
  mdev::Inventory inv;
  inv.parents = {T4("0000:3b:00.0", 2, 2)};
  ModelOptions config;
  config.pinning.push_back(PinRule{"0000:3b:00.0", std::nullopt, false, "nvidia-223"});
  CreatedVgpu ours = Record222("0000:3b:00.0-nvidia-222-0", "u0");
  DeviceCatalogue catalogue;
  catalogue.Rebuild(inv, {ours}, config);
  EXPECT_EQ(Ids(catalogue, k222), std::vector<std::string>{"0000:3b:00.0-nvidia-222-0"})
      << "made before the pin: still ours to list and remove";
  EXPECT_EQ(catalogue.Devices(k223).size(), 2u);
}

TEST(DeviceCatalogueTest, MarkAllocatedMakesAListedDeviceOursWithoutARebuild) {
  mdev::Inventory inv;
  inv.parents = {T4("0000:3b:00.0", 2, 0)};
  DeviceCatalogue catalogue;
  catalogue.Rebuild(inv, {}, ModelOptions{});
  catalogue.MarkAllocated(k222, "0000:3b:00.0-nvidia-222-1");
  catalogue.MarkAllocated(k222, "no-such-id");
  EXPECT_EQ(catalogue.Counts().at(k222).allocated, 1u);
  EXPECT_EQ(catalogue.Counts().at(k222).available, 1u);
}

}  // namespace
}  // namespace kvgpu::deviceplugin
