// Discovery against real-shaped trees (sim/ profiles) and against surprising sysfs contents.
#include <gtest/gtest.h>

#include <cerrno>

#include "tests/mdev/node_test_support.h"

namespace kvgpu::mdev {
namespace {

const VgpuType* FindType(const Parent& parent, const std::string& id) {
  for (const auto& type : parent.types) {
    if (type.id == id) return &type;
  }
  return nullptr;
}

TEST(NodeScan, T4NodeShowsTwoPhysicalGpusWithParsedNvidiaTypes) {
  SimulatedNode sim("t4x2");
  Inventory inventory = sim.Scan();
  ASSERT_EQ(inventory.parents.size(), 2u);
  EXPECT_TRUE(inventory.vgpus.empty());
  EXPECT_TRUE(inventory.warnings.empty());
  for (const auto& gpu : sim.model().profile().gpus) {
    SCOPED_TRACE(gpu.address);
    const Parent* parent = inventory.FindParent(gpu.address);
    ASSERT_NE(parent, nullptr);
    EXPECT_EQ(parent->flavour, Flavour::kMdev);
    EXPECT_TRUE(parent->is_pci);
    EXPECT_FALSE(parent->is_virtual_function);
    EXPECT_EQ(parent->physical_gpu, gpu.address);
    EXPECT_EQ(parent->vendor_id, "0x10de");
    EXPECT_EQ(parent->driver, "nvidia");
    // Each GPU's NUMA node and the host bridge its sysfs path runs through (one per node).
    EXPECT_EQ(parent->numa_node, gpu.numa_node);
    EXPECT_EQ(parent->pcie_root, gpu.numa_node == 1 ? "pci0000:80" : "pci0000:00");
    ASSERT_EQ(parent->types.size(), gpu.types.size());
    // The fixture type: nvidia-222 is GRID T4-1B with a 1 GiB framebuffer, 16 per GPU.
    const VgpuType* t41b = FindType(*parent, "nvidia-222");
    ASSERT_NE(t41b, nullptr);
    EXPECT_EQ(t41b->name, "GRID T4-1B");
    EXPECT_EQ(t41b->device_api, "vfio-pci");
    EXPECT_EQ(t41b->available_instances, 16u);
    ASSERT_TRUE(t41b->profile.has_value());
    EXPECT_EQ(t41b->profile->profile, "T4-1B");
    EXPECT_EQ(t41b->profile->series, 'B');
    ASSERT_TRUE(t41b->nvidia.has_value());
    EXPECT_EQ(t41b->nvidia->framebuffer_mib, 1024u);
    EXPECT_EQ(t41b->nvidia->max_instance, 16u);
    EXPECT_EQ(t41b->nvidia->num_heads, 4u);
    EXPECT_EQ(t41b->nvidia->frl_config, 45u);
    EXPECT_EQ(t41b->nvidia->max_resolution, "5120x2880");
  }
}

TEST(NodeScan, SriovVirtualFunctionsAreParentsGroupedByTheirPhysicalGpu) {
  SimulatedNode sim("a100-sriov");
  Inventory inventory = sim.Scan();
  const std::string pf = sim.model().profile().gpus.at(0).address;
  ASSERT_EQ(inventory.parents.size(), sim.model().profile().gpus.at(0).num_vfs);
  for (const auto& parent : inventory.parents) {
    SCOPED_TRACE(parent.name);
    EXPECT_TRUE(parent.is_virtual_function);
    EXPECT_NE(parent.name, pf);
    EXPECT_EQ(parent.physical_gpu, pf);
    const VgpuType* a100_4c = FindType(parent, "nvidia-692");
    ASSERT_NE(a100_4c, nullptr);
    EXPECT_EQ(a100_4c->name, "GRID A100D-4C");
    EXPECT_EQ(a100_4c->available_instances, 1u);
    ASSERT_TRUE(a100_4c->profile.has_value());
    EXPECT_EQ(a100_4c->profile->series, 'C');
  }
}

TEST(NodeScan, VendorVfioVirtualFunctionsOfferTheirCreatableTypes) {
  SimulatedNode sim("h200-vfio");
  Inventory inventory = sim.Scan();
  ASSERT_FALSE(inventory.parents.empty());
  EXPECT_FALSE(sim.model().Exists(sim.root() / "sys/class/mdev_bus"));
  for (const auto& parent : inventory.parents) {
    SCOPED_TRACE(parent.name);
    EXPECT_EQ(parent.flavour, Flavour::kVendorVfio);
    EXPECT_TRUE(parent.is_virtual_function);
    // A VF sits on its GPU's node and root complex.
    EXPECT_EQ(parent.numa_node, 0);
    EXPECT_EQ(parent.pcie_root, "pci0000:00");
    const VgpuType* full = FindType(parent, "1428");
    ASSERT_NE(full, nullptr);
    EXPECT_EQ(full->name, "NVIDIA H200X-141C");
    EXPECT_EQ(full->available_instances, 1u);
    ASSERT_TRUE(full->profile.has_value());
    EXPECT_EQ(full->profile->profile, "H200X-141C");
    EXPECT_EQ(FindType(parent, "1414"), nullptr) << "MIG-backed: not offered while MIG is off";
  }
}

TEST(NodeScan, VirtualParentWithoutDescriptionIsDiscovered) {
  SimulatedNode sim("mtty");
  Inventory inventory = sim.Scan();
  const Parent* mtty = inventory.FindParent("mtty");
  ASSERT_NE(mtty, nullptr);
  EXPECT_FALSE(mtty->is_pci);
  EXPECT_EQ(mtty->physical_gpu, "mtty");
  EXPECT_FALSE(mtty->numa_node.has_value());
  EXPECT_FALSE(mtty->pcie_root.has_value());
  const VgpuType* one = FindType(*mtty, "mtty-1");
  const VgpuType* two = FindType(*mtty, "mtty-2");
  ASSERT_NE(one, nullptr);
  ASSERT_NE(two, nullptr);
  EXPECT_FALSE(one->description.has_value());
  EXPECT_FALSE(one->nvidia.has_value());
  EXPECT_FALSE(one->profile.has_value());
  EXPECT_EQ(one->available_instances, 24u);
  EXPECT_EQ(two->available_instances, 12u);
}

TEST(NodeScan, MixedNodeShowsEveryKindOfParent) {
  SimulatedNode sim("mixed");
  Inventory inventory = sim.Scan();
  bool pci_gpu = false, vf = false, virtual_parent = false;
  for (const auto& parent : inventory.parents) {
    pci_gpu |= parent.is_pci && !parent.is_virtual_function;
    vf |= parent.is_virtual_function;
    virtual_parent |= !parent.is_pci;
  }
  EXPECT_TRUE(pci_gpu);
  EXPECT_TRUE(vf);
  EXPECT_TRUE(virtual_parent);
}

TEST(NodeScan, NoSysfsIsAnErrorAndAnEmptySysfsIsAnEmptyNode) {
  testing::TempDir dir;
  PosixSysfsIo io;
  SysfsBackend missing(dir.path(), io);
  EXPECT_EQ(missing.Scan().status().code(), ErrorCode::kGone);
  fs::create_directories(dir.path() / "sys");
  auto empty = SysfsBackend(dir.path(), io).Scan();
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->parents.empty());
  EXPECT_TRUE(empty->vgpus.empty());
}

struct OddCase {
  const char* description;
  std::string file;     // relative to the T4 type dir
  std::string content;  // written in place of the real one; "<delete>" removes the file
  bool type_kept;
  const char* warning_part;
};

TEST(NodeScan, OddSysfsContentsSkipOnlyWhatIsBrokenAndSaySo) {
  const OddCase cases[] = {
      {"garbage available_instances", "available_instances", "many\n", false, "not a count"},
      {"negative available_instances", "available_instances", "-1\n", false, "not a count"},
      {"empty available_instances", "available_instances", "", false, "not a count"},
      {"missing available_instances", "available_instances", "<delete>", false, "nvidia-222"},
      {"missing device_api", "device_api", "<delete>", false, "nvidia-222"},
      {"garbage description keeps the type", "description", "framebuffer=lots", true, nullptr},
      {"missing name keeps the type", "name", "<delete>", true, nullptr},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    SimulatedNode sim("t4x2");
    const std::string gpu = sim.model().profile().gpus.at(0).address;
    fs::path type_dir =
        fs::path("sys/class/mdev_bus") / gpu / "mdev_supported_types" / "nvidia-222";
    if (c.content == "<delete>") {
      fs::remove(sim.root() / type_dir / c.file);
    } else {
      sim.Overwrite(type_dir / c.file, c.content);
    }
    Inventory inventory = sim.Scan();
    const Parent* parent = inventory.FindParent(gpu);
    ASSERT_NE(parent, nullptr);
    const VgpuType* type = FindType(*parent, "nvidia-222");
    EXPECT_EQ(type != nullptr, c.type_kept);
    EXPECT_NE(FindType(*parent, "nvidia-223"), nullptr) << "a sibling type was lost";
    if (c.warning_part != nullptr) {
      ASSERT_EQ(inventory.warnings.size(), 1u);
      EXPECT_NE(inventory.warnings[0].find(c.warning_part), std::string::npos)
          << inventory.warnings[0];
    }
    if (type != nullptr && c.file == "description") {
      EXPECT_FALSE(type->nvidia.has_value());
    }
    if (type != nullptr && c.file == "name") {
      EXPECT_FALSE(type->profile.has_value());
    }
  }
}

TEST(NodeScan, ANumaNodeOfNoneGarbageOrMissingLeavesItUnknownAndTheGpuListed) {
  for (const std::string content : {"-1\n", "one\n", "", "<delete>"}) {
    SCOPED_TRACE(content);
    SimulatedNode sim("t4x2");
    const std::string gpu = sim.model().profile().gpus.at(0).address;
    const fs::path file = fs::path("sys/class/mdev_bus") / gpu / "numa_node";
    if (content == "<delete>") {
      fs::remove(sim.root() / file);
    } else {
      sim.Overwrite(file, content);
    }
    Inventory inventory = sim.Scan();
    const Parent* parent = inventory.FindParent(gpu);
    ASSERT_NE(parent, nullptr);
    EXPECT_FALSE(parent->numa_node.has_value());
    EXPECT_EQ(parent->types.size(), sim.model().profile().gpus.at(0).types.size());
    EXPECT_TRUE(inventory.warnings.empty());
  }
}

TEST(NodeScan, UnlistableTypesDirectorySkipsThatParentOnly) {
  SimulatedNode sim("t4x2");
  const std::string first = sim.model().profile().gpus.at(0).address;
  const std::string second = sim.model().profile().gpus.at(1).address;
  sim.model().InjectFault(sim::Op::kList, first + "/mdev_supported_types", EIO);
  Inventory inventory = sim.Scan();
  EXPECT_EQ(inventory.FindParent(first), nullptr);
  EXPECT_NE(inventory.FindParent(second), nullptr);
  ASSERT_EQ(inventory.warnings.size(), 1u);
  EXPECT_NE(inventory.warnings[0].find(first), std::string::npos);
}

TEST(NodeScan, GarbageCreatableListSkipsThatVirtualFunction) {
  SimulatedNode sim("h200-vfio");
  Inventory before = sim.Scan();
  ASSERT_GE(before.parents.size(), 2u);
  const std::string vf = before.parents[0].name;
  sim.Overwrite(fs::path("sys/bus/pci/devices") / vf / "nvidia/creatable_vgpu_types",
                "ID : vGPU Name\nnot a type line\n");
  Inventory after = sim.Scan();
  EXPECT_EQ(after.FindParent(vf), nullptr);
  EXPECT_EQ(after.parents.size(), before.parents.size() - 1);
  ASSERT_EQ(after.warnings.size(), 1u);
  EXPECT_NE(after.warnings[0].find(vf), std::string::npos);
}

TEST(NodeScan, NonUuidEntriesOnTheMdevBusAreIgnoredWithAWarning) {
  SimulatedNode sim("t4x2");
  fs::create_directories(sim.root() / "sys/bus/mdev/devices/not-a-uuid");
  Inventory inventory = sim.Scan();
  EXPECT_TRUE(inventory.vgpus.empty());
  ASSERT_EQ(inventory.warnings.size(), 1u);
  EXPECT_NE(inventory.warnings[0].find("not-a-uuid"), std::string::npos);
}

}  // namespace
}  // namespace kvgpu::mdev
