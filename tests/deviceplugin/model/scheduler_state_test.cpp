// The state the plugin publishes for the scheduler extender, from hand-built kernel views: per GPU
// its lock and, per resource, our vGPUs and the devices kubelet can still admit pods to; which
// pods hold vGPUs and how many are not yet attributed.
#include "deviceplugin/model/scheduler_state.h"

#include <gtest/gtest.h>

#include "tests/deviceplugin/model/inventory_builders.h"

namespace kvgpu::deviceplugin {
namespace {

using namespace kvgpu::deviceplugin::testing;  // NOLINT(google-build-using-namespace)

mdev::Parent NvidiaT4(const std::string& name, uint32_t free_222, uint32_t free_223) {
  mdev::Parent gpu = T4(name, free_222, free_223);
  gpu.vendor_id = "0x10de";
  return gpu;
}

const scheduling::GpuSlots& Gpu(const scheduling::NodeVgpuState& state, const std::string& id) {
  for (const scheduling::GpuSlots& gpu : state.gpus) {
    if (gpu.id == id) return gpu;
  }
  throw std::runtime_error("no GPU " + id);
}

TEST(SchedulerStateTest, EachGpuShowsItsLockAndTheCountsKubeletAdmitsPodsBy) {
  mdev::Inventory inv;
  // A carries two 222 vGPUs of ours: the kernel shows 14 more 222s and no 223. B is free.
  inv.parents = {NvidiaT4(kGpuA, 14, 0), NvidiaT4(kGpuB, 16, 8)};
  inv.vgpus = {VgpuOn("u0", kGpuA, "nvidia-222"), VgpuOn("u1", kGpuA, "nvidia-222")};
  CreatedVgpu held = Record222(kGpuA + "-nvidia-222-0", "u0", kGpuA);
  held.owner_pod = "ml/train-0";
  CreatedVgpu fresh = Record222(kGpuA + "-nvidia-222-1", "u1", kGpuA);
  fresh.slot = 1;
  DeviceCatalogue catalogue;
  catalogue.Rebuild(inv, {held, fresh}, ModelOptions{});

  scheduling::NodeVgpuState state = BuildSchedulerState(
      inv, {held, fresh}, catalogue, GpuRules(inv, OccupancySetting::kAuto), false);
  EXPECT_EQ(state.policy, scheduling::Policy::kPack);
  ASSERT_EQ(state.gpus.size(), 2u);
  const scheduling::GpuSlots& a = Gpu(state, kGpuA);
  EXPECT_EQ(a.occupancy, scheduling::Occupancy::kStrict)
      << "no sizes known and nothing else shown: the strict rule, never looser than the GPU";
  EXPECT_EQ(a.locked_type, "nvidia-222");
  EXPECT_EQ(a.lock, "type:nvidia-222");
  EXPECT_EQ(a.resources.at(k222), (scheduling::ResourceSlots{"nvidia-222", 2, 14}));
  EXPECT_FALSE(a.resources.contains(k223)) << "the kernel lists no 223 there: nothing to offer";
  const scheduling::GpuSlots& b = Gpu(state, kGpuB);
  EXPECT_EQ(b.locked_type, "");
  EXPECT_EQ(b.resources.at(k222), (scheduling::ResourceSlots{"nvidia-222", 0, 16}));
  EXPECT_EQ(b.resources.at(k223), (scheduling::ResourceSlots{"nvidia-223", 0, 8}));
  EXPECT_EQ(state.holders, std::set<std::string>{"ml/train-0"});
  EXPECT_EQ(state.unattributed, (std::map<std::string, uint32_t>{{k222, 1}}))
      << "the vGPU whose pod the plugin has not learned yet";
}

TEST(SchedulerStateTest, SomeoneElsesVgpuLocksTheGpuAndARemovedOneCountsNowhere) {
  mdev::Inventory inv;
  inv.parents = {NvidiaT4(kGpuA, 0, 7)};
  inv.vgpus = {VgpuOn("foreign", kGpuA, "nvidia-223")};
  CreatedVgpu gone = Record222(kGpuA + "-nvidia-222-0", "u-gone", kGpuA);
  DeviceCatalogue catalogue;
  catalogue.Rebuild(inv, {gone}, ModelOptions{});
  scheduling::NodeVgpuState state =
      BuildSchedulerState(inv, {gone}, catalogue, GpuRules(inv, OccupancySetting::kAuto), true);
  EXPECT_EQ(state.policy, scheduling::Policy::kSpread);
  const scheduling::GpuSlots& a = Gpu(state, kGpuA);
  EXPECT_EQ(a.locked_type, "nvidia-223");
  EXPECT_EQ(a.resources.at(k223), (scheduling::ResourceSlots{"nvidia-223", 0, 7}))
      << "a foreign vGPU is not ours to count as used, but it locks the GPU";
  EXPECT_TRUE(state.unattributed.empty());
  EXPECT_TRUE(state.holders.empty());
}

// What the extender needs for the equal-size lock: the GPU's mode told from the kernel's counts
// (a 225 creatable beside a 222: one size, several types), the lock by framebuffer size, and each
// type's framebuffer.
TEST(SchedulerStateTest, AnEqualSizeGpuPublishesItsModeTheSizeItIsLockedToAndEachTypesFramebuffer) {
  mdev::Inventory inv;
  inv.parents = {SizedT4(kGpuA, 15, 15, 0), SizedT4(kGpuB, 16, 16, 8)};
  inv.vgpus = {VgpuOn("u0", kGpuA, "nvidia-222")};
  CreatedVgpu held = Record222(kGpuA + "-nvidia-222-0", "u0", kGpuA);
  DeviceCatalogue catalogue;
  catalogue.Rebuild(inv, {held}, ModelOptions{});
  scheduling::NodeVgpuState state =
      BuildSchedulerState(inv, {held}, catalogue, GpuRules(inv, OccupancySetting::kAuto), false);
  const scheduling::GpuSlots& a = Gpu(state, kGpuA);
  EXPECT_EQ(a.occupancy, scheduling::Occupancy::kEqualSize);
  EXPECT_EQ(a.lock, "framebuffer:1024MiB");
  EXPECT_EQ(a.resources.at(k222).framebuffer_mib, 1024u);
  const scheduling::GpuSlots& b = Gpu(state, kGpuB);
  EXPECT_EQ(b.occupancy, scheduling::Occupancy::kEqualSize)
      << "a GPU with no vGPU takes what the node's other GPU (one driver) showed";
  EXPECT_EQ(b.lock, "");
  EXPECT_EQ(b.resources.at(k223).framebuffer_mib, 2048u);
}

// Between an Allocate and the rescan the inventory holds the new vGPU but the catalogue the
// kernel's counts from before it: a sibling type of the same size must not offer the capacity the
// new vGPU took (the extender would send a pod the kernel refuses); a locked-out type keeps the
// kernel's count, the lock already says it cannot go.
TEST(SchedulerStateTest, AVgpuMadeSinceTheLastScanTakesItsCapacityFromTypesOfItsSize) {
  mdev::Inventory inv;
  // Scanned with one 222 on A: 15 more 1 GiB vGPUs, of either type. Each 1 GiB type allows 16.
  inv.parents = {SizedT4(kGpuA, 15, 15, 0)};
  for (mdev::VgpuType& type : inv.parents[0].types) {
    type.nvidia->max_instance = type.id == "nvidia-223" ? 8 : 16;
  }
  inv.vgpus = {VgpuOn("u0", kGpuA, "nvidia-222")};
  DeviceCatalogue catalogue;
  CreatedVgpu first = Record222(kGpuA + "-nvidia-222-0", "u0", kGpuA);
  catalogue.Rebuild(inv, {first}, ModelOptions{});
  const GpuRules rules(inv, OccupancySetting::kAuto);
  ASSERT_EQ(rules.OccupancyOf(kGpuA), scheduling::Occupancy::kEqualSize);
  // Then Allocate makes a 225 (NodeState::VgpuCreated): no rescan yet.
  inv.vgpus.push_back(VgpuOn("u1", kGpuA, "nvidia-225"));
  inv.parents[0].types[1].available_instances = 14;

  scheduling::NodeVgpuState state = BuildSchedulerState(inv, {first}, catalogue, rules, false);
  const scheduling::GpuSlots& a = Gpu(state, kGpuA);
  EXPECT_EQ(a.resources.at(k222).free, 14u) << "16 allowed, two 1 GiB vGPUs made";
  EXPECT_EQ(a.resources.at("tencent.com/vgpu-225").free, 14u);
  EXPECT_FALSE(a.resources.contains(k223)) << "the kernel lists no 2 GiB type there";
}

TEST(SchedulerStateTest, GpusWithoutNvidiasRulesSaySo) {
  mdev::Inventory inv;
  mdev::Parent mtty = GpuParent("mtty");
  mtty.is_pci = false;
  mtty.types.push_back(TypeWithFree("mtty-1", 2));
  inv.parents = {mtty};
  DeviceCatalogue catalogue;
  catalogue.Rebuild(inv, {}, ModelOptions{});
  scheduling::NodeVgpuState state =
      BuildSchedulerState(inv, {}, catalogue, GpuRules(inv, OccupancySetting::kAuto), false);
  ASSERT_EQ(state.gpus.size(), 1u);
  EXPECT_EQ(state.gpus[0].occupancy, scheduling::Occupancy::kUnknown);
}

}  // namespace
}  // namespace kvgpu::deviceplugin
