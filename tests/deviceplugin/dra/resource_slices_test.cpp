// The node's ResourceSlices (deviceplugin/dra/resource_slices.h): what they offer against what the
// (simulated) kernel can really create, the API server's limits, determinism, and narrowing.
#include "deviceplugin/dra/resource_slices.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "fakes/common/sim_node.h"
#include "tests/deviceplugin/model/inventory_builders.h"

namespace kvgpu::deviceplugin::dra {
namespace {

using kvgpu::testing::SimNode;
using nlohmann::json;

mdev::Inventory ScanOf(SimNode& node) {
  Result<mdev::Inventory> inventory = node.node().Scan();
  EXPECT_TRUE(inventory.ok()) << inventory.status().ToString();
  return inventory.ok() ? *inventory : mdev::Inventory{};
}

SliceOptions Options(const std::string& node = "node-a") {
  SliceOptions options;
  options.node_name = node;
  return options;
}

std::vector<json> Build(const mdev::Inventory& inventory, const SliceOptions& options,
                        int64_t generation = 1, const GpuModeProbe* limits = nullptr) {
  const GpuRules rules(inventory, options.model.occupancy, nullptr, limits);
  Result<std::vector<json>> slices = BuildResourceSlices(inventory, rules, options, generation);
  EXPECT_TRUE(slices.ok()) << slices.status().ToString();
  return slices.ok() ? *slices : std::vector<json>{};
}

std::vector<json> DevicesOf(const std::vector<json>& slices) {
  std::vector<json> devices;
  for (const json& slice : slices) {
    for (const json& d : slice["spec"].value("devices", json::array())) devices.push_back(d);
  }
  return devices;
}

// MiB of a quantity this code writes ("16Gi", "1536Mi").
uint64_t Mib(const json& quantity) {
  std::string text = quantity.get<std::string>();
  const uint64_t scale = text.ends_with("Gi") ? 1024 : 1;
  text.resize(text.size() - 2);
  return std::stoull(text) * scale;
}

std::map<std::string, uint64_t> CounterSets(const std::vector<json>& slices) {
  std::map<std::string, uint64_t> sets;
  for (const json& slice : slices) {
    for (const json& set : slice["spec"].value("sharedCounters", json::array())) {
      sets[set["name"]] = Mib(set["counters"]["framebuffer"]["value"]);
    }
  }
  return sets;
}

// How many vGPUs of `type_id` the simulated kernel lets the GPU host at once (created until it
// refuses, then removed again).
uint32_t KernelMost(SimNode& node, const std::string& gpu, const std::string& type_id) {
  std::vector<std::string> made;
  while (true) {
    mdev::Inventory inventory = ScanOf(node);
    std::optional<std::string> parent;
    for (const mdev::Parent& p : inventory.parents) {
      if (p.physical_gpu != gpu) continue;
      for (const mdev::VgpuType& t : p.types) {
        if (t.id == type_id && t.available_instances > 0) parent = p.name;
      }
    }
    if (!parent) break;
    Result<mdev::Vgpu> vgpu = node.node().Create({*parent, type_id, std::nullopt});
    if (!vgpu.ok()) break;
    made.push_back(vgpu->id);
  }
  for (const std::string& id : made) EXPECT_TRUE(node.node().Remove(id).ok());
  return static_cast<uint32_t>(made.size());
}

class KernelTruthTest : public ::testing::TestWithParam<std::string> {};

// Devices of one (GPU, type), and how many of them the GPU's framebuffer counter lets a
// scheduler allocate at once.
std::map<std::pair<std::string, std::string>, uint64_t> AllowedByGpuAndType(
    const std::vector<json>& slices) {
  const std::map<std::string, uint64_t> sets = CounterSets(slices);
  std::map<std::pair<std::string, std::string>, std::vector<json>> by_gpu_type;
  for (const json& d : DevicesOf(slices)) {
    by_gpu_type[{d["attributes"]["physicalGpu"]["string"], d["attributes"]["type"]["string"]}]
        .push_back(d);
  }
  std::map<std::pair<std::string, std::string>, uint64_t> allowed;
  for (const auto& [key, devices] : by_gpu_type) {
    uint64_t most = devices.size();
    const json& first = devices.front();
    if (first.contains("consumesCounters")) {
      const json& use = first["consumesCounters"][0];
      most = std::min<uint64_t>(
          most, sets.at(use["counterSet"]) / Mib(use["counters"]["framebuffer"]["value"]));
    }
    allowed[key] = most;
  }
  return allowed;
}

// For every type of every GPU: the devices published and the GPU's framebuffer counter together
// allow exactly as many vGPUs of that type as the kernel creates - never more (a failed prepare),
// never fewer (capacity hidden).
TEST_P(KernelTruthTest, CountersAndDevicesAllowWhatTheKernelCreatesOfEachType) {
  SimNode node(GetParam());
  const std::vector<json> slices = Build(ScanOf(node), Options());
  ASSERT_FALSE(slices.empty());
  const auto allowed = AllowedByGpuAndType(slices);
  ASSERT_FALSE(allowed.empty());
  for (const auto& [key, most] : allowed) {
    const auto& [gpu, type] = key;
    EXPECT_EQ(most, KernelMost(node, gpu, type)) << GetParam() << " " << gpu << " " << type;
  }
}

INSTANTIATE_TEST_SUITE_P(Profiles, KernelTruthTest,
                         ::testing::Values("t4x2", "t4x2-equal-size", "a100-sriov", "h200-vfio"));

// With the mode probe's max instances (what every published state version takes, ForStateVersion)
// a vendor-VFIO GPU's counter is its whole framebuffer: an L40S takes 2 x 24Q or 12 x 4Q, not the
// largest type once. Counters cannot say MIG's instance placement or a mixed-size GPU's
// placements, so there the slices may allow more than the kernel creates and the daemon's binding
// condition (OccupancyConfirmed) refuses the rest; what is checked there is that no type is
// under-offered.
class KernelTruthWithProbeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(KernelTruthWithProbeTest, CountersAndDevicesAllowWhatTheKernelCreatesOfEachType) {
  SimNode node(GetParam());
  auto probe = MakeGpuModeProbe(GpuModeProbeChoice::kSim, node.root());
  ASSERT_NE(probe, nullptr);
  const mdev::Inventory inventory = ScanOf(node);
  const GpuRules rules(inventory, OccupancySetting::kAuto, probe.get(), probe.get());
  const std::vector<json> slices = Build(inventory, Options(), 1, probe.get());
  ASSERT_FALSE(slices.empty());
  const auto allowed = AllowedByGpuAndType(slices);
  ASSERT_FALSE(allowed.empty());
  for (const auto& [key, most] : allowed) {
    const auto& [gpu, type] = key;
    const scheduling::Occupancy mode = rules.OccupancyOf(gpu);
    const uint32_t kernel = KernelMost(node, gpu, type);
    if (mode == scheduling::Occupancy::kMig || mode == scheduling::Occupancy::kMixedSize) {
      EXPECT_GE(most, kernel) << GetParam() << " " << gpu << " " << type;
    } else {
      EXPECT_EQ(most, kernel) << GetParam() << " " << gpu << " " << type;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Profiles, KernelTruthWithProbeTest,
                         ::testing::Values("t4x2", "t4x2-equal-size", "a100-sriov", "h200-vfio",
                                           "h200-mig", "l40s-vfio", "rtxpro6000-mig", "mixed"));

TEST(ResourceSlicesTest, TwoT4sMakeOneCounterSliceAndTwoDeviceSlicesPerGpuWithinTheLimits) {
  SimNode node("t4x2");
  const std::vector<json> slices = Build(ScanOf(node), Options());
  // 80 creatable vGPUs per T4 (the sum of its types' max_instance) > 64 a slice.
  ASSERT_EQ(slices.size(), 5u);
  EXPECT_EQ(DevicesOf(slices).size(), 160u);
  EXPECT_EQ(CounterSets(slices).size(), 2u);
  for (const json& slice : slices) {
    EXPECT_TRUE(ValidateSlice(slice).ok()) << ValidateSlice(slice).ToString();
    const json& spec = slice["spec"];
    EXPECT_NE(spec.contains("devices"), spec.contains("sharedCounters"));
    EXPECT_LE(spec.value("devices", json::array()).size(), kMaxDevicesPerSliceConsumingCounters);
    EXPECT_EQ(spec["pool"]["resourceSliceCount"], 5);
    EXPECT_EQ(spec["pool"]["generation"], 1);
    EXPECT_EQ(spec["pool"]["name"], "node-a");
    EXPECT_EQ(spec["nodeName"], "node-a");
    EXPECT_EQ(spec["driver"], "vgpu.tencent.com");
  }
  EXPECT_TRUE(ValidatePool(slices).ok());
  // The API server writes quantities canonically; so must we, or every pass would rewrite.
  EXPECT_EQ(slices[0]["spec"]["sharedCounters"][0]["counters"]["framebuffer"]["value"], "16Gi");
}

TEST(ResourceSlicesTest, ADeviceCarriesTheAttributesASelectorNeeds) {
  SimNode node("t4x2");
  const std::vector<json> devices = DevicesOf(Build(ScanOf(node), Options()));
  auto it = std::find_if(devices.begin(), devices.end(), [](const json& d) {
    return d["attributes"]["type"]["string"] == "nvidia-230";
  });
  ASSERT_NE(it, devices.end());
  const json& attributes = (*it)["attributes"];
  EXPECT_EQ(attributes["profile"]["string"], "T4-1Q");
  EXPECT_EQ(attributes["typeName"]["string"], "GRID T4-1Q");
  EXPECT_EQ(attributes["gpuModel"]["string"], "T4");
  EXPECT_EQ(attributes["pciDeviceId"]["string"], "0x1eb8");
  EXPECT_EQ(attributes["backend"]["string"], "mdev");
  EXPECT_EQ(attributes[kPciBusIdAttribute]["string"], attributes["physicalGpu"]["string"]);
  EXPECT_EQ((*it)["capacity"]["framebuffer"]["value"], "1Gi");
  EXPECT_TRUE(IsDnsLabel((*it)["name"]));
}

TEST(ResourceSlicesTest, EachDeviceSaysItsGpusNumaNodeAndPcieRootWhereTheKernelKnowsThem) {
  SimNode node("t4x2");
  mdev::Inventory inventory = ScanOf(node);
  std::map<std::string, std::pair<int64_t, std::string>> seen;  // GPU -> (node, root)
  for (const json& d : DevicesOf(Build(inventory, Options()))) {
    const json& attributes = d["attributes"];
    ASSERT_TRUE(attributes.contains("numaNode")) << d.dump();
    ASSERT_TRUE(attributes.contains(kPcieRootAttribute)) << d.dump();
    seen[attributes["physicalGpu"]["string"]] = {attributes["numaNode"]["int"],
                                                 attributes[kPcieRootAttribute]["string"]};
  }
  // t4x2: one T4 on each socket, each under its node's host bridge (sim/profiles.cpp).
  EXPECT_EQ(seen[node.gpu(0)], (std::pair<int64_t, std::string>{0, "pci0000:00"}));
  EXPECT_EQ(seen[node.gpu(1)], (std::pair<int64_t, std::string>{1, "pci0000:80"}));
  // A kernel that does not know them (numa_node -1, a virtual parent): neither is published.
  for (mdev::Parent& parent : inventory.parents) {
    parent.numa_node.reset();
    parent.pcie_root.reset();
  }
  for (const json& d : DevicesOf(Build(inventory, Options()))) {
    EXPECT_FALSE(d["attributes"].contains("numaNode"));
    EXPECT_FALSE(d["attributes"].contains(kPcieRootAttribute));
  }
}

TEST(ResourceSlicesTest, VendorVfioDevicesSayTheirBackend) {
  SimNode node("h200-vfio");
  const std::vector<json> devices = DevicesOf(Build(ScanOf(node), Options()));
  ASSERT_FALSE(devices.empty());
  for (const json& d : devices) EXPECT_EQ(d["attributes"]["backend"]["string"], "vendor-vfio");
}

TEST(ResourceSlicesTest, TheSameInputMakesTheSameSlicesWhateverTheScanOrder) {
  SimNode node("a100-sriov");
  mdev::Inventory inventory = ScanOf(node);
  const std::vector<json> first = Build(inventory, Options());
  std::mt19937 random(7);
  for (int round = 0; round < 5; ++round) {
    std::shuffle(inventory.parents.begin(), inventory.parents.end(), random);
    for (mdev::Parent& p : inventory.parents) std::shuffle(p.types.begin(), p.types.end(), random);
    EXPECT_EQ(Build(inventory, Options()), first);
  }
}

TEST(ResourceSlicesTest, NamesStayValidForALongNodeName) {
  SimNode node("t4x2");
  // A node name as long as the API allows (253), in labels of up to 63.
  const std::string label(60, 'n');
  const std::string node_name = label + "." + label + "." + label + "." + label + ".example";
  const std::vector<json> slices = Build(ScanOf(node), Options(node_name));
  ASSERT_FALSE(slices.empty());
  std::set<std::string> names;
  for (const json& slice : slices) {
    const std::string name = slice["metadata"]["name"];
    EXPECT_TRUE(IsDnsSubdomain(name)) << name;
    names.insert(name);
  }
  EXPECT_EQ(names.size(), slices.size());
}

TEST(ResourceSlicesTest, VgpusNoClaimHoldsTakeTheirFramebufferFromTheCounter) {
  SimNode node("t4x2");
  const std::string gpu = node.gpu(0);
  Result<mdev::Vgpu> held = node.node().Create({gpu, "nvidia-233", std::nullopt});  // 8 GiB
  ASSERT_TRUE(held.ok());
  const mdev::Inventory inventory = ScanOf(node);
  SliceOptions options = Options();
  options.narrow = false;
  std::map<std::string, uint64_t> sets = CounterSets(Build(inventory, options));
  ASSERT_EQ(sets.size(), 2u);
  EXPECT_EQ(sets.begin()->second, 8192u) << "a vGPU outside DRA uses half the T4";
  options.claimed_vgpus = {held->id};
  sets = CounterSets(Build(inventory, options));
  EXPECT_EQ(sets.begin()->second, 16384u) << "a claimed vGPU is counted by its allocation";
}

TEST(TypeMemoryTest, AVendorVfioGpuKeepsItsDevicesWhenItsVfsStopListingTypes) {
  SimNode node("h200-vfio");
  TypeMemory memory;
  const std::vector<json> before = Build(memory.Remember(ScanOf(node)), Options());
  ASSERT_FALSE(DevicesOf(before).empty());
  const mdev::Inventory free = ScanOf(node);
  std::string vf;
  for (const mdev::Parent& p : free.parents) {
    if (!p.types.empty()) vf = p.name;
  }
  ASSERT_TRUE(node.node().Create({vf, "1428", std::nullopt}).ok());  // the whole GPU
  // The kernel alone: the full GPU lists nothing creatable, and the allocated device would vanish.
  EXPECT_TRUE(DevicesOf(Build(ScanOf(node), Options())).empty());
  const std::vector<json> after = Build(memory.Remember(ScanOf(node)), Options());
  std::set<std::string> names_before;
  std::set<std::string> names_after;
  for (const json& d : DevicesOf(before)) names_before.insert(d["name"]);
  for (const json& d : DevicesOf(after)) names_after.insert(d["name"]);
  EXPECT_EQ(names_after, names_before);
  EXPECT_TRUE(ValidatePool(after).ok());
}

// --- narrowing ---------------------------------------------------------------------------------

std::set<std::string> TypesOn(const std::vector<json>& slices, const std::string& gpu) {
  std::set<std::string> types;
  for (const json& d : DevicesOf(slices)) {
    if (d["attributes"]["physicalGpu"]["string"] == gpu)
      types.insert(d["attributes"]["type"]["string"]);
  }
  return types;
}

TEST(NarrowTest, AStrictGpuWithAVgpuOffersOnlyItsTypeAndTheFreeGpuEverything) {
  SimNode node("t4x2");
  ASSERT_TRUE(node.node().Create({node.gpu(0), "nvidia-230", std::nullopt}).ok());
  const std::vector<json> slices = Build(ScanOf(node), Options());
  EXPECT_EQ(TypesOn(slices, node.gpu(0)), std::set<std::string>{"nvidia-230"});
  EXPECT_EQ(TypesOn(slices, node.gpu(1)).size(), 12u);
  // The locked type keeps every slot: device names do not move when a GPU locks.
  size_t on_first = 0;
  for (const json& d : DevicesOf(slices)) {
    on_first += d["attributes"]["physicalGpu"]["string"] == node.gpu(0) ? 1u : 0u;
  }
  EXPECT_EQ(on_first, 16u);
  EXPECT_TRUE(ValidatePool(slices).ok());
}

TEST(NarrowTest, AnEqualSizeGpuOffersEveryTypeOfTheLockedSize) {
  SimNode node("t4x2-equal-size");
  ASSERT_TRUE(node.node().Create({node.gpu(0), "nvidia-230", std::nullopt}).ok());
  const std::vector<json> slices = Build(ScanOf(node), Options());
  EXPECT_EQ(TypesOn(slices, node.gpu(0)),
            (std::set<std::string>{"nvidia-222", "nvidia-225", "nvidia-230"}));
}

TEST(NarrowTest, NarrowingKeepsDeviceNamesAndDropsOnlyOtherTypes) {
  using deviceplugin::testing::SizedT4;
  using deviceplugin::testing::VgpuOn;
  mdev::Inventory inventory;
  inventory.parents = {SizedT4("0000:3b:00.0", 15, 0, 0), SizedT4("0000:af:00.0", 16, 16, 8)};
  inventory.vgpus = {VgpuOn("u1", "0000:3b:00.0", "nvidia-222")};
  const GpuRules rules(inventory, OccupancySetting::kStrict);
  Result<Catalogue> all = BuildCatalogue(inventory, rules, Options());
  ASSERT_TRUE(all.ok());
  const std::vector<DraDevice> kept = Narrow(all->devices, inventory, rules);
  for (const DraDevice& d : all->devices) {
    const bool dropped = std::find(kept.begin(), kept.end(), d) == kept.end();
    EXPECT_EQ(dropped, d.physical_gpu == "0000:3b:00.0" && d.type_id != "nvidia-222") << d.name;
  }
  // Off, nothing is dropped.
  SliceOptions options = Options();
  options.narrow = false;
  options.model.occupancy = OccupancySetting::kStrict;
  EXPECT_EQ(DevicesOf(Build(inventory, options)).size(), all->devices.size());
}

// KEP-5963: each device's counter consumption names what locks its GPU, so a scheduler that
// enforces compatibility groups never co-allocates two types on a strict GPU or two sizes on an
// equal-size one; GPUs without a modelled lock declare nothing (any mix the counters allow).
TEST(CompatibilityGroupsTest, EachDeviceNamesItsGpusLockAndNothingWithoutOne) {
  using Groups = std::vector<std::string>;
  DraDevice device;
  device.type_id = "nvidia-222";
  device.framebuffer_mib = 1024;
  device.occupancy = scheduling::Occupancy::kStrict;
  EXPECT_EQ(CompatibilityGroups(device), Groups{"type-nvidia-222"});
  device.occupancy = scheduling::Occupancy::kEqualSize;
  EXPECT_EQ(CompatibilityGroups(device), (Groups{"framebuffer-1024mib", "type-nvidia-222"}));
  device.framebuffer_mib = 0;
  EXPECT_EQ(CompatibilityGroups(device), Groups{"type-nvidia-222"}) << "size unknown: its type";
  for (auto none : {scheduling::Occupancy::kMixedSize, scheduling::Occupancy::kMig,
                    scheduling::Occupancy::kUnknown}) {
    device.occupancy = none;
    EXPECT_EQ(CompatibilityGroups(device), Groups{}) << scheduling::OccupancyName(none);
  }

  const auto groups_by_type = [](const std::vector<json>& slices) {
    std::map<std::string, std::set<std::string>> out;  // type -> groups its devices declare
    for (const json& d : DevicesOf(slices)) {
      for (const json& use : d.value("consumesCounters", json::array())) {
        for (const json& g : use.value("compatibilityGroups", json::array())) {
          out[d["attributes"]["type"]["string"]].insert(g.get<std::string>());
        }
      }
    }
    return out;
  };
  SliceOptions options = Options();
  options.compatibility_groups = true;
  SimNode strict("t4x2");
  const auto strict_slices = Build(ScanOf(strict), options);
  const auto strict_groups = groups_by_type(strict_slices);
  EXPECT_EQ(strict_groups.size(), 12u);
  EXPECT_EQ(strict_groups.at("nvidia-230"), std::set<std::string>{"type-nvidia-230"});
  EXPECT_TRUE(ValidatePool(strict_slices).ok());
  for (const json& slice : strict_slices) EXPECT_TRUE(ValidateSlice(slice).ok());

  // An equal-size GPU reads as such once it carries a vGPU (here one of 1 GiB).
  SimNode equal("t4x2-equal-size");
  ASSERT_TRUE(equal.node().Create({equal.gpu(0), "nvidia-230", std::nullopt}).ok());
  options.narrow = false;
  const auto equal_slices = Build(ScanOf(equal), options);
  std::map<std::string, std::set<std::string>> on_first;
  for (const json& d : DevicesOf(equal_slices)) {
    if (d["attributes"]["physicalGpu"]["string"] != equal.gpu(0)) continue;
    for (const json& g : d["consumesCounters"][0].value("compatibilityGroups", json::array())) {
      on_first[d["attributes"]["type"]["string"]].insert(g.get<std::string>());
    }
  }
  EXPECT_EQ(on_first.at("nvidia-222"),
            (std::set<std::string>{"framebuffer-1024mib", "type-nvidia-222"}));
  EXPECT_TRUE(on_first.at("nvidia-230").contains("framebuffer-1024mib")) << "one size, one group";
  EXPECT_FALSE(on_first.at("nvidia-223").contains("framebuffer-1024mib"));
  for (const json& slice : equal_slices) EXPECT_TRUE(ValidateSlice(slice).ok());

  SimNode mig("h200-mig");
  EXPECT_TRUE(groups_by_type(Build(ScanOf(mig), options)).empty());

  EXPECT_TRUE(groups_by_type(Build(ScanOf(strict), Options())).empty()) << "off: none declared";
}

TEST(ResourceSlicesTest, RefusesABadDriverOrNodeName) {
  SimNode node("t4x2");
  const mdev::Inventory inventory = ScanOf(node);
  const GpuRules rules(inventory, OccupancySetting::kAuto);
  SliceOptions options = Options();
  options.driver = "Vgpu_Tencent";
  EXPECT_FALSE(BuildResourceSlices(inventory, rules, options, 1).ok());
  options = Options("Node A");
  EXPECT_FALSE(BuildResourceSlices(inventory, rules, options, 1).ok());
}

}  // namespace
}  // namespace kvgpu::deviceplugin::dra
