// Never promise a vGPU the GPU cannot make. On every simulator profile and at every version of the
// published state, a seeded random walk of creates and removes - through the model (kubelet's
// Allocate, the lifecycle's removal) and behind its back (someone else's vGPUs, made and removed
// straight through sysfs) - and after each step, per GPU and resource:
//  - what kubelet's list offers (free devices) and what the published state promises (as the
//    extender reads it: the rendered document parsed, then PlaceDemand one vGPU at a time on that
//    GPU alone) is at most what the simulated kernel then makes, found by making them and removing
//    them again before the model looks;
//  - a type the kernel can still make on the GPU is offered by kubelet's list (never hidden).
// And every device the list offers, Allocate makes.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "deviceplugin/model/model_options.h"
#include "deviceplugin/model/resource_manager.h"
#include "fakes/common/sim_node.h"
#include "scheduling/node_vgpu_state.h"

namespace kvgpu::deviceplugin {
namespace {

using kvgpu::testing::SimNode;

constexpr int kSteps = 6;
// (GPU, type) pairs checked after each step, drawn by the seeded generator: every pair of every
// profile after every step made the mdev profiles' runs minutes long (each check makes vGPUs).
constexpr size_t kPairsPerCheck = 5;
constexpr uint32_t kPromiseBound = 64;  // more than any simulated GPU makes of one type

class PromisePropertyTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {
 protected:
  PromisePropertyTest()
      : sim_(std::get<0>(GetParam())),
        version_(std::get<1>(GetParam())),
        manager_(sim_.node(), Options(), store_, holders_) {}

  ModelOptions Options() {
    ModelOptions options;
    options.cdi_dir = sim_.dir() / "cdi";
    // As the daemon sets them for the published version, with the simulator's mode probe.
    return ForStateVersion(options, true, version_,
                           MakeGpuModeProbe(GpuModeProbeChoice::kSim, sim_.root()));
  }

  void SetUp() override {
    ASSERT_TRUE(manager_.Start().ok());
    auto inventory = sim_.node().Scan();
    ASSERT_TRUE(inventory.ok());
    for (const mdev::Parent& parent : inventory->parents) {
      parents_[parent.physical_gpu].push_back(parent.name);
    }
    // Every NVIDIA type a GPU offers while free: what each resource names.
    for (const std::string& resource : manager_.Resources()) {
      for (const Device& d : manager_.Devices(resource)) {
        types_[{d.physical_gpu, d.key.type_id}] = resource;
      }
    }
  }

  // How many vGPUs of `type_id` the kernel makes on `gpu` now, trying up to `limit`; every one
  // made is removed again, so the model's view stays true.
  uint32_t KernelMakes(const std::string& gpu, const std::string& type_id, uint32_t limit) {
    std::vector<std::string> made;
    for (const std::string& parent : parents_[gpu]) {
      while (made.size() < limit) {
        auto vgpu = sim_.node().Create({parent, type_id, std::nullopt});
        if (!vgpu.ok()) break;
        made.push_back(vgpu->id);
      }
    }
    for (auto it = made.rbegin(); it != made.rend(); ++it) {
      EXPECT_TRUE(sim_.node().Remove(*it).ok()) << *it;
    }
    return static_cast<uint32_t>(made.size());
  }

  // What the published state promises of `resource` on `gpu`, as the extender reads it.
  uint32_t Promised(const scheduling::NodeVgpuState& state, const std::string& gpu,
                    const std::string& resource) {
    for (const scheduling::GpuSlots& slots : state.gpus) {
      if (slots.id != gpu) continue;
      std::vector<scheduling::GpuSlots> alone{slots};
      uint32_t n = 0;
      while (n < kPromiseBound && scheduling::PlaceDemand(alone, {{resource, 1}}, state.policy)) {
        ++n;
      }
      return n;
    }
    return 0;
  }

  scheduling::NodeVgpuState Published() {
    scheduling::NodeVgpuState state = manager_.SchedulerState();
    state.version = version_;
    state.node = "node-1";
    auto parsed = scheduling::ParseNodeState(scheduling::RenderNodeState(state));
    EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
    return parsed.ok() ? *parsed : scheduling::NodeVgpuState{};
  }

  void ExpectNoOverPromise(const std::string& step, std::mt19937& rng) {
    const scheduling::NodeVgpuState state = Published();
    std::vector<std::pair<std::pair<std::string, std::string>, std::string>> pairs(types_.begin(),
                                                                                   types_.end());
    std::shuffle(pairs.begin(), pairs.end(), rng);
    pairs.resize(std::min(pairs.size(), kPairsPerCheck));
    for (const auto& [key, resource] : pairs) {
      const auto& [gpu, type_id] = key;
      uint32_t listed = 0;
      for (const Device& d : manager_.Devices(resource)) {
        if (d.physical_gpu == gpu && d.healthy && !d.ours) ++listed;
      }
      const uint32_t promised = Promised(state, gpu, resource);
      const uint32_t makes = KernelMakes(gpu, type_id, std::max({listed, promised, 1u}));
      SCOPED_TRACE(step + ": " + gpu + " " + resource);
      EXPECT_LE(listed, makes) << "kubelet's list offers more than the kernel makes";
      EXPECT_LE(promised, makes) << "the published state (version " << version_
                                 << ") promises more than the kernel makes";
      if (makes > 0) {
        EXPECT_GT(listed, 0u) << "a type the kernel makes is hidden from kubelet";
      }
    }
  }

  // One random step; returns what it did.
  std::string Step(std::mt19937& rng) {
    const int kind = std::uniform_int_distribution<int>(0, 3)(rng);
    auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
    if (kind == 0 || kind == 1) {
      // Allocate a device kubelet's list offers (twice as likely: the lists fill up).
      std::vector<std::pair<std::string, std::string>> offered;
      for (const std::string& resource : manager_.Resources()) {
        for (const Device& d : manager_.Devices(resource)) {
          if (d.healthy && !d.ours) offered.emplace_back(resource, d.id);
        }
      }
      if (offered.empty()) return "nothing offered";
      const auto& [resource, id] = offered[pick(offered.size())];
      auto made = manager_.Allocate(resource, {{id}});
      EXPECT_TRUE(made.ok()) << "Allocate of listed " << id << ": " << made.status().ToString();
      return "allocate " + id;
    }
    if (kind == 2) {
      // Remove one of ours (the lifecycle), or someone else's behind the model's back.
      auto records = manager_.Snapshot().records;
      auto inventory = sim_.node().Scan();
      std::vector<std::string> others;
      for (const mdev::Vgpu& v : inventory->vgpus) {
        const bool ours = std::any_of(records.begin(), records.end(),
                                      [&](const CreatedVgpu& r) { return r.vgpu_id == v.id; });
        if (!ours) others.push_back(v.id);
      }
      if (!records.empty() && (others.empty() || pick(2) == 0)) {
        const CreatedVgpu& r = records[pick(records.size())];
        EXPECT_TRUE(manager_.RemoveVgpu(r.device_id, r.vgpu_id, Remover::kLifecycle).ok());
        return "remove ours " + r.vgpu_id;
      }
      if (others.empty()) return "nothing to remove";
      const std::string id = others[pick(others.size())];
      EXPECT_TRUE(sim_.node().Remove(id).ok());
      EXPECT_TRUE(manager_.Refresh().ok());
      return "remove behind its back " + id;
    }
    // Someone else makes a vGPU of a type a parent still offers, then the model rescans.
    auto inventory = sim_.node().Scan();
    std::vector<std::pair<std::string, std::string>> creatable;
    for (const mdev::Parent& parent : inventory->parents) {
      for (const mdev::VgpuType& type : parent.types) {
        if (type.available_instances > 0) creatable.emplace_back(parent.name, type.id);
      }
    }
    if (creatable.empty()) return "nothing creatable";
    const auto& [parent, type_id] = creatable[pick(creatable.size())];
    auto made = sim_.node().Create({parent, type_id, std::nullopt});
    EXPECT_TRUE(made.ok()) << made.status().ToString();
    EXPECT_TRUE(manager_.Refresh().ok());
    return "make behind its back " + type_id + " on " + parent;
  }

  SimNode sim_;
  int version_;
  MemoryStateStore store_;
  struct Holders : HolderOracle {
    Verdict Check(const CreatedVgpu&) override { return {}; }
  } holders_;
  ResourceManager manager_;
  std::map<std::string, std::vector<std::string>> parents_;           // GPU -> its parents
  std::map<std::pair<std::string, std::string>, std::string> types_;  // (GPU, type) -> resource
};

TEST_P(PromisePropertyTest, NoListOrPublishedStatePromisesMoreThanTheKernelMakes) {
  std::mt19937 rng(48u + static_cast<unsigned>(version_));
  ExpectNoOverPromise("start", rng);
  for (int i = 0; i < kSteps && !HasFailure(); ++i) {
    const std::string step = std::to_string(i) + " " + Step(rng);
    ExpectNoOverPromise(step, rng);
  }
}

INSTANTIATE_TEST_SUITE_P(
    EveryProfileAndVersion, PromisePropertyTest,
    ::testing::Combine(::testing::Values("t4x2", "t4x2-equal-size", "a100-sriov", "h200-vfio",
                                         "h200-mig", "l40s-vfio", "rtxpro6000-mig", "mixed"),
                       ::testing::Values(1, 2, 3)),
    [](const auto& param_info) {
      std::string name =
          std::get<0>(param_info.param) + "_v" + std::to_string(std::get<1>(param_info.param));
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

// The cases the issue names: an empty L40S lists 2 x L40S-24Q and 12 x L40S-4Q per GPU, an
// H200 1 x H200X-141C, whatever the published version.
TEST(VendorVfioCapTest, AnEmptyGpuListsWhatFitsNotItsFreeVfs) {
  for (int version : {1, 2, 3}) {
    SCOPED_TRACE(version);
    SimNode sim("l40s-vfio");
    MemoryStateStore store;
    struct : HolderOracle {
      Verdict Check(const CreatedVgpu&) override { return {}; }
    } holders;
    ModelOptions options;
    options.cdi_dir = sim.dir() / "cdi";
    options = ForStateVersion(options, true, version,
                              MakeGpuModeProbe(GpuModeProbeChoice::kSim, sim.root()));
    ResourceManager manager(sim.node(), options, store, holders);
    ASSERT_TRUE(manager.Start().ok());
    auto on = [&](const std::string& resource, const std::string& gpu) {
      const std::vector<Device> devices = manager.Devices(resource);
      return std::count_if(devices.begin(), devices.end(),
                           [&](const Device& d) { return d.physical_gpu == gpu; });
    };
    for (const std::string gpu : {"0000:3b:00.0", "0000:af:00.0"}) {
      EXPECT_EQ(on("tencent.com/vgpu-1704", gpu), 2) << gpu << ": L40S-24Q";
      EXPECT_EQ(on("tencent.com/vgpu-1700", gpu), 12) << gpu << ": L40S-4Q";
    }
  }
  SimNode h200("h200-vfio");
  MemoryStateStore store;
  struct : HolderOracle {
    Verdict Check(const CreatedVgpu&) override { return {}; }
  } holders;
  ModelOptions options;
  options.cdi_dir = h200.dir() / "cdi";
  options.limit_probe = MakeGpuModeProbe(GpuModeProbeChoice::kSim, h200.root());
  ResourceManager manager(h200.node(), options, store, holders);
  ASSERT_TRUE(manager.Start().ok());
  EXPECT_EQ(manager.Devices("tencent.com/vgpu-1428").size(), 1u) << "one H200X-141C per GPU";
  EXPECT_TRUE(manager.Devices("tencent.com/vgpu-1414").empty()) << "MIG-backed, MIG off";
}

}  // namespace
}  // namespace kvgpu::deviceplugin
