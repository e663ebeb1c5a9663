// GPU shapes through the plugin's model (the probes themselves:
// tests/mdev/gpu_mode_probe_test.cpp): GpuRules taking the probe's word over the kernel's counts,
// and per mode, random create/remove sequences through the ResourceManager on simulated GPUs (sim/
// profiles l40s-vfio, h200-mig, rtxpro6000-mig): the preferred device is always one the kernel
// accepts while the kernel can still make the type anywhere (never a refused ask, never a creatable
// vGPU left unoffered), also with vGPUs made since the last scan.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "deviceplugin/model/occupancy.h"
#include "deviceplugin/model/resource_manager.h"
#include "fakes/common/sim_node.h"

namespace kvgpu::deviceplugin {
namespace {

using kvgpu::testing::SimNode;
using scheduling::Occupancy;

std::shared_ptr<const GpuModeProbe> SimProbe(const SimNode& sim) {
  return MakeGpuModeProbe(GpuModeProbeChoice::kSim, sim.root());
}

// Without vGPUs the kernel's counts cannot tell a mixed-size GPU; the probe can.
TEST(GpuRulesTest, TheProbesModeWinsOverTheCounts) {
  SimNode sim("l40s-vfio");
  auto inventory = sim.node().Scan();
  ASSERT_TRUE(inventory.ok());
  const GpuRules counts(*inventory, OccupancySetting::kAuto);
  EXPECT_EQ(counts.OccupancyOf("0000:af:00.0"), Occupancy::kStrict);
  auto probe = SimProbe(sim);
  const GpuRules probed(*inventory, OccupancySetting::kAuto, probe.get());
  EXPECT_EQ(probed.OccupancyOf("0000:af:00.0"), Occupancy::kMixedSize);
  EXPECT_EQ(probed.OccupancyOf("0000:3b:00.0"), Occupancy::kStrict) << "mode off: the counts";
  scheduling::ResourceSlots slots;
  probed.FillType("0000:af:00.0", "1702", slots);
  EXPECT_EQ(slots.placements.size, 8u);
  EXPECT_EQ(slots.placements.ids.size(), 6u);
}

// A vGPU the probe has not seen yet takes what the driver would give it.
TEST(GpuRulesTest, AVgpuMadeSinceTheProbeTakesTheLowestCreatablePlacement) {
  SimNode sim("l40s-vfio");
  auto inventory = sim.node().Scan();
  ASSERT_TRUE(inventory.ok());
  auto probe = SimProbe(sim);
  const GpuRules rules(*inventory, OccupancySetting::kAuto, probe.get());
  mdev::Vgpu made;
  made.id = "0000:af:00.4";
  made.physical_gpu = "0000:af:00.0";
  made.type_id = "1703";  // 12 GiB
  mdev::Vgpu small = made;
  small.id = "0000:af:00.5";
  small.type_id = "1700";  // 4 GiB
  const scheduling::GpuSlots shape = rules.ShapeOf("0000:af:00.0", {made, small});
  EXPECT_EQ(shape.used_slots, (std::vector<scheduling::SlotRange>{{0, 12}, {12, 4}}));
}

// The state the plugin publishes carries the mixed-size facts (version 3 renders them).
TEST(GpuShapesStateTest, ThePublishedStateCarriesSlotsAndPlacementsOfAMixedSizeGpu) {
  SimNode sim("l40s-vfio");
  ModelOptions options;
  options.cdi_dir = sim.dir() / "cdi";
  options.mode_probe = SimProbe(sim);
  MemoryStateStore store;
  struct Holders : HolderOracle {
    Verdict Check(const CreatedVgpu&) override { return {}; }
  } holders;
  ResourceManager manager(sim.node(), options, store, holders);
  ASSERT_TRUE(manager.Start().ok());
  ASSERT_TRUE(manager.Allocate("tencent.com/vgpu-1703", {{"0000:af:00.4-1703-0"}}).ok());
  ASSERT_TRUE(manager.Refresh().ok());
  const scheduling::NodeVgpuState state = manager.SchedulerState();
  const scheduling::GpuSlots* af = nullptr;
  for (const auto& gpu : state.gpus) {
    if (gpu.id == "0000:af:00.0") af = &gpu;
  }
  ASSERT_NE(af, nullptr);
  EXPECT_EQ(af->occupancy, Occupancy::kMixedSize);
  EXPECT_EQ(af->used_slots, (std::vector<scheduling::SlotRange>{{0, 12}}));
  const scheduling::ResourceSlots& eight = af->resources.at("tencent.com/vgpu-1702");
  EXPECT_EQ(eight.placements.size, 8u);
  EXPECT_EQ(scheduling::Creatable(*af, eight), 4u) << "8Q at 16, 24, 32, 40";
}

// --- property: random create/remove sequences through the model, per mode ---

// Whether any VF of the node still lists `type` as creatable: the kernel's own answer.
bool KernelCanMake(SimNode& sim, const std::string& type) {
  auto inventory = sim.node().Scan();
  if (!inventory.ok()) return false;
  for (const mdev::Parent& parent : inventory->parents) {
    for (const mdev::VgpuType& t : parent.types) {
      if (t.id == type && t.available_instances > 0) return true;
    }
  }
  return false;
}

// Whether the kernel would take `type` on the VF behind a vendor-VFIO device ID
// ("<VF>-<type>-<n>"): its creatable list names the type.
bool KernelAccepts(SimNode& sim, const std::string& device_id, const std::string& type) {
  const std::string vf = device_id.substr(0, device_id.find('-'));
  auto creatable =
      sim.model().ReadFile(sim.root() / "sys/bus/pci/devices" / vf / "nvidia/creatable_vgpu_types");
  if (!creatable.ok()) return false;
  std::string padded = type;
  padded.resize(std::max<size_t>(padded.size(), 6), ' ');
  return creatable->find("\n" + padded + ": ") != std::string::npos;
}

void RunSequences(const std::string& profile, uint32_t seed, int steps) {
  SCOPED_TRACE(profile + " seed " + std::to_string(seed));
  SimNode sim(profile);
  ModelOptions options;
  options.cdi_dir = sim.dir() / "cdi";
  options.mode_probe = SimProbe(sim);
  MemoryStateStore store;
  struct Holders : HolderOracle {
    Verdict Check(const CreatedVgpu&) override { return {}; }
  } holders;
  ResourceManager manager(sim.node(), options, store, holders);
  ASSERT_TRUE(manager.Start().ok());
  std::mt19937 rng(seed);
  int made = 0;
  int refused_asks = 0;
  for (int step = 0; step < steps; ++step) {
    // Three steps of four skip the rescan: the lists are then behind the kernel, as when kubelet
    // admits pods back to back.
    const bool fresh = step % 4 == 0;
    if (fresh) {
      ASSERT_TRUE(manager.Refresh().ok());
    }
    const std::vector<std::string> resources = manager.Resources();
    if (resources.empty()) break;
    const bool remove = rng() % 10 < 2;
    std::vector<sim::KernelModel::VgpuInfo> vgpus = sim.model().Vgpus();
    if (remove && !vgpus.empty()) {
      const auto& victim = vgpus[rng() % vgpus.size()];
      ASSERT_TRUE(sim.model()
                      .WriteFile(sim.root() / "sys/bus/pci/devices" / victim.parent /
                                     "nvidia/current_vgpu_type",
                                 "0")
                      .ok());
      continue;
    }
    const std::string resource = resources[rng() % resources.size()];
    std::vector<std::string> available;
    std::string type;
    for (const Device& d : manager.Devices(resource)) {
      type = d.key.type_id;
      if (d.healthy && !d.vgpu_exists) available.push_back(d.id);
    }
    if (type.empty()) continue;
    if (available.empty()) {
      const bool kernel_can = KernelCanMake(sim, type);
      // After a rescan the lists are the kernel's: a type it can still make is offered.
      EXPECT_FALSE(fresh && kernel_can) << "unoffered: " << resource;
      continue;
    }
    auto preferred = manager.PreferredAllocation(resource, {{available, {}, 1}});
    ASSERT_TRUE(preferred.ok()) << preferred.status().ToString();
    // Only where the kernel would take one of the offered devices is the plugin's pick judged:
    // with every offered one stale, kubelet's ask fails whatever the plugin prefers.
    if (std::none_of(available.begin(), available.end(),
                     [&](const std::string& id) { return KernelAccepts(sim, id, type); })) {
      continue;
    }
    auto allocated = manager.Allocate(resource, {{(*preferred)[0][0]}});
    if (allocated.ok()) {
      ++made;
    } else {
      ++refused_asks;
      ADD_FAILURE() << "the kernel refused the preferred " << (*preferred)[0][0] << " (" << type
                    << ") although it can still make that type: " << allocated.status().ToString();
    }
  }
  EXPECT_GT(made, steps / 10) << "the sequence made too few vGPUs to test anything";
  EXPECT_EQ(refused_asks, 0);
}

TEST(GpuShapesPropertyTest, MixedAndEqualSizeGpusNeverGetARefusedAskNorHideARoom) {
  for (uint32_t seed = 1; seed <= 3; ++seed) RunSequences("l40s-vfio", seed, 80);
}

TEST(GpuShapesPropertyTest, MigGpusPlaceOnlyWhereAnInstanceFits) {
  // One GPU per profile: the ranking has no other GPU to choose, so this holds the model's lists
  // and the kernel's answers to each other; the MIG rule itself is ModeRoom's
  // (tests/scheduling) and the simulator's (tests/sim ShapesTest).
  RunSequences("h200-mig", 1, 40);
  for (uint32_t seed = 1; seed <= 2; ++seed) RunSequences("rtxpro6000-mig", seed, 60);
}

}  // namespace
}  // namespace kvgpu::deviceplugin
