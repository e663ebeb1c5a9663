// Placement (GetPreferredAllocation's choice), from hand-built device lists: pack onto GPUs
// already locked to the type, keep free GPUs for other types, never suggest what Allocate would
// refuse, and refuse requests kubelet could not have meant.
#include "deviceplugin/model/placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "tests/deviceplugin/model/inventory_builders.h"

namespace kvgpu::deviceplugin {
namespace {

using namespace kvgpu::deviceplugin::testing;  // NOLINT(google-build-using-namespace)

Device Free222(const std::string& gpu, uint32_t slot) {
  DeviceKey key{gpu, "nvidia-222", slot};
  return Device{MakeDeviceId(key), "tencent.com/vgpu-222", key, gpu, true, false, false};
}

mdev::Vgpu On(const std::string& gpu, const std::string& type) {
  return VgpuOn("u-" + gpu + type, gpu, type);
}

std::vector<std::string> AllIds(const std::vector<Device>& devices) {
  std::vector<std::string> out;
  for (const Device& d : devices) out.push_back(d.id);
  return out;
}

// Without an inventory no GPU's rule is known: only the resource's own type counts as the same.
std::vector<std::string> Prefer(const std::vector<Device>& listed,
                                const std::vector<mdev::Vgpu>& vgpus, int size, bool spread = false,
                                const GpuRules& rules = GpuRules{}) {
  auto answer = PreferDevices(listed, vgpus, rules, spread, {{AllIds(listed), {}, size}});
  EXPECT_TRUE(answer.ok()) << answer.status().ToString();
  return answer.ok() ? (*answer)[0] : std::vector<std::string>{};
}

TEST(PlacementTest, PacksOntoTheGpuAlreadyLockedToTheType) {
  std::vector<Device> listed = {Free222(kGpuA, 0), Free222(kGpuA, 1), Free222(kGpuB, 0)};
  // B carries a 222 already: A stays free for any type.
  EXPECT_EQ(Prefer(listed, {On(kGpuB, "nvidia-222")}, 1),
            std::vector<std::string>{Free222(kGpuB, 0).id});
}

TEST(PlacementTest, AGpuLockedToAnotherTypeComesLast) {
  std::vector<Device> listed = {Free222(kGpuA, 0), Free222(kGpuB, 0)};
  // A took a 223 moments ago; the kernel's counts hiding A's 222s come with the next rescan.
  EXPECT_EQ(Prefer(listed, {On(kGpuA, "nvidia-223")}, 1),
            std::vector<std::string>{Free222(kGpuB, 0).id});
}

// Equal-size mode (NVIDIA's default today): a GPU carrying a T4-1A (1024 MiB) is locked to that
// size, and a T4-1B (also 1024 MiB) packs onto it before a free GPU is taken. Under the strict
// rule the same GPU is locked against it and comes last.
TEST(PlacementTest, EqualSizePacksATypeOntoAGpuOfItsSizeAndStrictKeepsItOff) {
  mdev::Inventory inventory;
  inventory.parents = {SizedT4(kGpuA, 15, 15, 0), SizedT4(kGpuB, 16, 16, 8)};
  inventory.vgpus = {On(kGpuA, "nvidia-225")};
  const std::vector<Device> listed = {Free222(kGpuB, 0), Free222(kGpuA, 0)};
  const GpuRules equal(inventory, OccupancySetting::kAuto);
  ASSERT_EQ(equal.OccupancyOf(kGpuA), scheduling::Occupancy::kEqualSize)
      << "told from the kernel's counts: 222 still creatable beside a 225";
  EXPECT_EQ(Prefer(listed, inventory.vgpus, 1, false, equal),
            std::vector<std::string>{Free222(kGpuA, 0).id});
  const GpuRules strict(inventory, OccupancySetting::kStrict);
  EXPECT_EQ(Prefer(listed, inventory.vgpus, 1, false, strict),
            std::vector<std::string>{Free222(kGpuB, 0).id});
}

TEST(PlacementTest, ADeviceWhoseEarlierVgpuStillExistsComesAfterFreeOnes) {
  Device earlier = Free222(kGpuA, 0);
  earlier.ours = earlier.vgpu_exists = true;
  std::vector<Device> listed = {earlier, Free222(kGpuA, 1)};
  EXPECT_EQ(Prefer(listed, {}, 1), std::vector<std::string>{Free222(kGpuA, 1).id});
}

TEST(PlacementTest, WithNoLockTheGpuWithFewerFreeDevicesGoesFirst) {
  // Neither GPU carries a vGPU: the GPU with fewer free devices goes first, then by ID.
  std::vector<Device> listed = {Free222(kGpuA, 0), Free222(kGpuA, 1), Free222(kGpuB, 0)};
  EXPECT_EQ(Prefer(listed, {}, 1), std::vector<std::string>{Free222(kGpuB, 0).id});
}

TEST(PlacementTest, SpreadTakesOneDevicePerGpuPerRound) {
  std::vector<Device> listed = {Free222(kGpuA, 0), Free222(kGpuA, 1), Free222(kGpuB, 0),
                                Free222(kGpuB, 1)};
  std::vector<std::string> chosen = Prefer(listed, {}, 2, /*spread=*/true);
  ASSERT_EQ(chosen.size(), 2u);
  EXPECT_NE(chosen[0].substr(0, 12), chosen[1].substr(0, 12)) << chosen[0] << " " << chosen[1];
}

TEST(PlacementTest, NeverSuggestsAnUnhealthyOrUnlistedDevice) {
  Device sick = Free222(kGpuA, 0);
  sick.healthy = false;
  std::vector<Device> listed = {sick, Free222(kGpuB, 0)};
  auto answer = PreferDevices(listed, {}, GpuRules{}, false,
                              {{{sick.id, "not-listed", Free222(kGpuB, 0).id}, {}, 2}});
  ASSERT_TRUE(answer.ok());
  EXPECT_EQ((*answer)[0], std::vector<std::string>{Free222(kGpuB, 0).id})
      << "kubelet fills the rest from its own list";
}

TEST(PlacementTest, MustIncludeDevicesComeFirstAndOnce) {
  std::vector<Device> listed = {Free222(kGpuA, 0), Free222(kGpuB, 0)};
  auto answer = PreferDevices(listed, {}, GpuRules{}, false,
                              {{AllIds(listed), {listed[0].id, listed[0].id}, 2}});
  ASSERT_TRUE(answer.ok());
  EXPECT_EQ((*answer)[0], (std::vector<std::string>{listed[0].id, listed[1].id}));
}

TEST(PlacementTest, RequestsKubeletCouldNotHaveMeantAreRefusedAsInvalid) {
  std::vector<Device> listed = {Free222(kGpuA, 0)};
  const std::vector<PreferredRequest> bad = {
      {AllIds(listed), {}, 0},                  // size 0
      {AllIds(listed), {}, 2},                  // more than offered
      {AllIds(listed), {"elsewhere"}, 1},       // must-include not offered
      {AllIds(listed), {listed[0].id, "x"}, 1}  // more must-include than the size
  };
  for (const PreferredRequest& request : bad) {
    auto answer = PreferDevices(listed, {}, GpuRules{}, false, {request});
    ASSERT_FALSE(answer.ok());
    EXPECT_EQ(answer.status().code(), ErrorCode::kInvalid);
  }
}

TEST(PlacementTest, RanksCompareByImportanceInMemberOrder) {
  PlacementRank free_far{0, {0, 1, 0, 0}, "", ""};
  PlacementRank reused_locked{1, {0, 0, 0, 0}, "", ""};
  EXPECT_LT(free_far, reused_locked) << "fitness outranks the GPU lock";
  PlacementRank fuller{0, {0, 0, -3, 0}, "", ""};
  PlacementRank emptier{0, {0, 0, -1, 0}, "", ""};
  EXPECT_LT(fuller, emptier);
}

// The extender assumes a pod lands where scheduling::PlaceDemand puts it; the node then answers
// kubelet with PreferDevices. On random T4 nodes (GPUs free or locked to 222 or 223 with some
// used), both must pick the same number of devices on every GPU, packed and spread.
TEST(PlacementTest, TheDevicesPreferredAreWhereTheExtendersModelPutsThem) {
  std::mt19937 random(20261126);
  const std::string resource = "tencent.com/vgpu-222";
  for (int round = 0; round < 300; ++round) {
    SCOPED_TRACE(round);
    const int gpu_count = std::uniform_int_distribution<int>(1, 8)(random);
    std::vector<Device> listed;
    std::vector<mdev::Vgpu> vgpus;
    std::vector<scheduling::GpuSlots> model;
    uint32_t creatable = 0;
    for (int g = 0; g < gpu_count; ++g) {
      const std::string gpu = "0000:" + std::to_string(10 + g) + ":00.0";
      const int lock = std::uniform_int_distribution<int>(0, 2)(random);  // free, 222, 223
      const uint32_t used =
          lock == 0 ? 0 : std::uniform_int_distribution<uint32_t>(1, lock == 1 ? 16 : 8)(random);
      scheduling::GpuSlots slots;
      slots.id = gpu;
      if (lock != 0) slots.LockTo(lock == 1 ? "nvidia-222" : "nvidia-223");
      const uint32_t used222 = lock == 1 ? used : 0;
      const uint32_t free222 = lock == 2 ? 0 : 16 - used222;
      slots.resources[resource] = {"nvidia-222", used222, free222};
      model.push_back(slots);
      creatable += free222;
      for (uint32_t i = 0; i < used; ++i) {
        vgpus.push_back(VgpuOn("u-" + gpu + "-" + std::to_string(i), gpu,
                               lock == 1 ? "nvidia-222" : "nvidia-223"));
      }
      for (uint32_t slot = 0; slot < 16; ++slot) {
        if (lock == 2) break;  // the kernel shows no 222 on a GPU locked to 223
        Device d = Free222(gpu, slot);
        d.ours = d.vgpu_exists = slot < used222;
        listed.push_back(d);
      }
    }
    if (creatable == 0) continue;
    std::vector<std::string> available;
    for (const Device& d : listed) {
      if (!d.vgpu_exists) available.push_back(d.id);
    }
    const auto size = std::uniform_int_distribution<uint32_t>(1, creatable)(random);
    for (bool spread : {false, true}) {
      SCOPED_TRACE(spread ? "spread" : "pack");
      auto preferred = PreferDevices(listed, vgpus, GpuRules{}, spread,
                                     {{available, {}, static_cast<int32_t>(size)}});
      ASSERT_TRUE(preferred.ok()) << preferred.status().ToString();
      std::map<std::string, uint32_t> by_plugin;
      for (const std::string& id : (*preferred)[0]) {
        auto it =
            std::find_if(listed.begin(), listed.end(), [&](const Device& d) { return d.id == id; });
        ASSERT_NE(it, listed.end()) << id;
        ++by_plugin[it->physical_gpu];
      }
      std::vector<scheduling::GpuSlots> placed = model;
      ASSERT_TRUE(scheduling::PlaceDemand(
          placed, {{resource, size}},
          spread ? scheduling::Policy::kSpread : scheduling::Policy::kPack));
      std::map<std::string, uint32_t> by_model;
      for (size_t g = 0; g < placed.size(); ++g) {
        const uint32_t taken =
            placed[g].resources.at(resource).used - model[g].resources.at(resource).used;
        if (taken > 0) by_model[placed[g].id] = taken;
      }
      EXPECT_EQ(by_plugin, by_model);
    }
  }
}

}  // namespace
}  // namespace kvgpu::deviceplugin
