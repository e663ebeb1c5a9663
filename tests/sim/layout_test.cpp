// The tree the model lays out has the shape sysfs has: which files and links exist, what the
// links store, what the attributes say before anything is created.
#include <set>

#include "sim_test_util.h"

namespace kvgpu::sim::testing {
namespace {

using LayoutTest = ModelTest;

// Every symlink in the tree must resolve, and inside the root: a relative link that climbs one
// level too far would escape a test root (or a FUSE mount) and point at the host's /sys.
TEST_F(LayoutTest, EverySymlinkOfEveryProfileResolvesInsideTheRoot) {
  for (const auto& name : ProfileNames()) {
    SCOPED_TRACE(name);
    TempDir root;
    auto profile = ProfileByName(name);
    ASSERT_TRUE(profile.ok());
    auto model = KernelModel::Create(root.path() / "node", std::move(profile).value());
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    fs::path real_root = fs::canonical(root.path() / "node");
    size_t links = 0;
    for (const auto& entry : fs::recursive_directory_iterator(real_root / "sys")) {
      if (!entry.is_symlink()) continue;
      ++links;
      std::error_code ec;
      fs::path target = fs::canonical(entry.path(), ec);
      ASSERT_FALSE(ec) << entry.path() << " does not resolve";
      EXPECT_EQ(target.string().rfind(real_root.string() + "/", 0), 0u)
          << entry.path() << " -> " << target;
      EXPECT_TRUE(fs::read_symlink(entry.path()).is_relative()) << entry.path();
    }
    EXPECT_GT(links, 0u) << "the check above saw no link at all";
  }
}

struct LinkCase {
  std::string description;
  std::string profile;
  std::string link;  // under <root>/sys
  std::string target;
};

TEST_F(LayoutTest, LinksStoreTheRelativeTargetsSysfsStores) {
  const LinkCase cases[] = {
      {"PCI bus entry", "t4x2", "bus/pci/devices/0000:3b:00.0",
       "../../../devices/pci0000:00/0000:00:01.0/0000:3b:00.0"},
      {"second GPU under its own root port", "t4x2", "bus/pci/devices/0000:af:00.0",
       "../../../devices/pci0000:80/0000:80:02.0/0000:af:00.0"},
      {"mdev parent class entry", "t4x2", "class/mdev_bus/0000:3b:00.0",
       "../../devices/pci0000:00/0000:00:01.0/0000:3b:00.0"},
      {"bound driver", "t4x2", "devices/pci0000:00/0000:00:01.0/0000:3b:00.0/driver",
       "../../../../bus/pci/drivers/nvidia"},
      {"PCI subsystem", "t4x2", "devices/pci0000:00/0000:00:01.0/0000:3b:00.0/subsystem",
       "../../../../bus/pci"},
      {"GPU IOMMU group (root port has group 0)", "t4x2",
       "devices/pci0000:00/0000:00:01.0/0000:3b:00.0/iommu_group",
       "../../../../kernel/iommu_groups/1"},
      {"IOMMU group member", "t4x2", "kernel/iommu_groups/1/devices/0000:3b:00.0",
       "../../../../devices/pci0000:00/0000:00:01.0/0000:3b:00.0"},
      {"driver's device entry", "t4x2", "bus/pci/drivers/nvidia/0000:3b:00.0",
       "../../../../devices/pci0000:00/0000:00:01.0/0000:3b:00.0"},
      {"PF to first VF", "a100-sriov", "devices/pci0000:00/0000:00:01.0/0000:41:00.0/virtfn0",
       "../0000:41:00.4"},
      {"PF to VF 4 (next device number)", "a100-sriov",
       "devices/pci0000:00/0000:00:01.0/0000:41:00.0/virtfn4", "../0000:41:01.0"},
      {"VF to PF", "a100-sriov", "devices/pci0000:00/0000:00:01.0/0000:41:00.4/physfn",
       "../0000:41:00.0"},
      {"VF as mdev parent", "a100-sriov", "class/mdev_bus/0000:41:00.4",
       "../../devices/pci0000:00/0000:00:01.0/0000:41:00.4"},
      {"vendor-VFIO VF on the PCI bus", "h200-vfio", "bus/pci/devices/0000:41:00.5",
       "../../../devices/pci0000:00/0000:00:01.0/0000:41:00.5"},
      {"mtty parent", "mtty", "class/mdev_bus/mtty", "../../devices/virtual/mtty/mtty"},
      {"mtty subsystem", "mtty", "devices/virtual/mtty/mtty/subsystem", "../../../../class/mtty"},
      {"mixed: A100 behind the second root port", "mixed", "class/mdev_bus/0000:41:00.4",
       "../../devices/pci0000:00/0000:00:02.0/0000:41:00.4"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    Load(c.profile);
    auto target = model_->ReadLink(Sys() / c.link);
    ASSERT_TRUE(target.ok()) << target.status().ToString();
    EXPECT_EQ(target.value(), fs::path(c.target));
  }
}

struct FileCase {
  std::string description;
  std::string profile;
  std::string path;  // under <root>/sys
  std::string content;
};

TEST_F(LayoutTest, AttributesSayWhatTheDriverSays) {
  const std::string t4 = "class/mdev_bus/0000:3b:00.0/";
  const std::string vf = "class/mdev_bus/0000:41:00.4/mdev_supported_types/";
  const std::string h200 = "bus/pci/devices/0000:41:00.4/nvidia/";
  const std::string mtty = "class/mdev_bus/mtty/mdev_supported_types/";
  const FileCase cases[] = {
      {"T4 vendor", "t4x2", t4 + "vendor", "0x10de\n"},
      {"T4 device", "t4x2", t4 + "device", "0x1eb8\n"},
      {"3D controller class", "t4x2", t4 + "class", "0x030200\n"},
      {"T4-1B name (kubevirt fixture)", "t4x2", t4 + "mdev_supported_types/nvidia-222/name",
       "GRID T4-1B\n"},
      {"T4-1B description (kubevirt fixture)", "t4x2",
       t4 + "mdev_supported_types/nvidia-222/description",
       "num_heads=4, frl_config=45, framebuffer=1024M, max_resolution=5120x2880, "
       "max_instance=16\n"},
      {"T4-1B all free", "t4x2", t4 + "mdev_supported_types/nvidia-222/available_instances",
       "16\n"},
      {"T4-16Q one per GPU", "t4x2", t4 + "mdev_supported_types/nvidia-234/available_instances",
       "1\n"},
      {"device_api", "t4x2", t4 + "mdev_supported_types/nvidia-230/device_api", "vfio-pci\n"},
      {"A100D-4C name (Kata doc)", "a100-sriov", vf + "nvidia-692/name", "GRID A100D-4C\n"},
      {"A100D-80C name (Kata doc)", "a100-sriov", vf + "nvidia-698/name", "GRID A100D-80C\n"},
      {"a free VF offers one of each", "a100-sriov", vf + "nvidia-698/available_instances", "1\n"},
      {"A100 SR-IOV VF count", "a100-sriov", "bus/pci/devices/0000:41:00.0/sriov_numvfs", "20\n"},
      {"H200 with MIG off: the time-sliced type only", "h200-vfio", h200 + "creatable_vgpu_types",
       "ID    : vGPU Name\n1428  : NVIDIA H200X-141C\n"},
      {"H200 no vGPU yet", "h200-vfio", h200 + "current_vgpu_type", "0\n"},
      {"mtty-1 name", "mtty", mtty + "mtty-1/name", "Single port serial\n"},
      {"mtty-2 name", "mtty", mtty + "mtty-2/name", "Dual port serial\n"},
      {"mtty-1: 24 ports", "mtty", mtty + "mtty-1/available_instances", "24\n"},
      {"mtty-2: 12 port pairs", "mtty", mtty + "mtty-2/available_instances", "12\n"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    Load(c.profile);
    EXPECT_EQ(Read(Sys() / c.path), c.content);
  }
}

struct AbsentCase {
  std::string description;
  std::string profile;
  std::string path;  // under <root>/sys
};

TEST_F(LayoutTest, WhatSysfsDoesNotHaveIsNotThere) {
  const AbsentCase cases[] = {
      {"mtty types have no description", "mtty",
       "class/mdev_bus/mtty/mdev_supported_types/mtty-1/description"},
      {"vendor VFIO: no mdev class", "h200-vfio", "class/mdev_bus"},
      {"vendor VFIO: no mdev bus", "h200-vfio", "bus/mdev"},
      {"vendor VFIO: no mdev types on a VF", "h200-vfio",
       "bus/pci/devices/0000:41:00.4/mdev_supported_types"},
      {"SR-IOV: the PF is not an mdev parent", "a100-sriov", "class/mdev_bus/0000:41:00.0"},
      {"SR-IOV: the PF has no types", "a100-sriov",
       "bus/pci/devices/0000:41:00.0/mdev_supported_types"},
      {"no VFs on a T4", "t4x2", "bus/pci/devices/0000:3b:00.0/virtfn0"},
      {"no mdevs yet", "t4x2", "bus/mdev/devices/" + Uuid(1)},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    Load(c.profile);
    EXPECT_FALSE(model_->Exists(Sys() / c.path));
  }
}

TEST_F(LayoutTest, MixedNodeHasEveryKindOfParent) {
  Load("mixed");
  auto parents = model_->ListDir(Sys() / "class" / "mdev_bus");
  ASSERT_TRUE(parents.ok());
  // The T4, the A100's 20 VFs, mtty.
  EXPECT_EQ(parents->size(), 22u);
  EXPECT_TRUE(model_->IsDirectory(TypeDir("0000:3b:00.0", "nvidia-230")));
  EXPECT_TRUE(model_->IsDirectory(TypeDir("0000:41:02.7", "nvidia-692")));
  EXPECT_TRUE(model_->IsDirectory(TypeDir("mtty", "mtty-2")));
}

TEST_F(LayoutTest, EveryPciFunctionHasAnIommuGroupOfItsOwn) {
  Load("a100-sriov");
  std::set<std::string> groups;
  auto functions = model_->ListDir(Sys() / "bus" / "pci" / "devices");
  ASSERT_TRUE(functions.ok());
  for (const auto& function : functions.value()) {
    auto group = model_->ReadLink(Sys() / "bus" / "pci" / "devices" / function / "iommu_group");
    ASSERT_TRUE(group.ok()) << function;
    EXPECT_TRUE(groups.insert(group->filename().string()).second) << function << " shares";
  }
  EXPECT_EQ(groups.size(), 22u);  // root port, PF, 20 VFs
}

struct BadProfileCase {
  std::string description;
  NodeProfile profile;
};

TEST_F(LayoutTest, BadProfilesAreRefusedBeforeTouchingTheDisk) {
  auto t4 = [] { return ProfileByName("t4x2").value().gpus[0]; };
  auto with = [&](auto change) {
    GpuSpec gpu = t4();
    change(gpu);
    return NodeProfile{"bad", "", {gpu}, ""};
  };
  const BadProfileCase cases[] = {
      {"no GPU", NodeProfile{"empty", "", {}, ""}},
      {"same GPU twice", NodeProfile{"twice", "", {t4(), t4()}, ""}},
      {"not a PCI address", with([](GpuSpec& g) { g.address = "3b:00.0"; })},
      {"upper-case PCI address", with([](GpuSpec& g) { g.address = "0000:3B:00.0"; })},
      {"SR-IOV kind without VFs", with([](GpuSpec& g) { g.kind = GpuKind::kSriovMdev; })},
      {"VFs on a plain GPU", with([](GpuSpec& g) { g.num_vfs = 4; })},
      {"no types", with([](GpuSpec& g) { g.types.clear(); })},
      {"type listed twice", with([](GpuSpec& g) { g.types.push_back(g.types[0]); })},
      {"type id with a slash", with([](GpuSpec& g) { g.types[0].id = "nvidia/222"; })},
      {"zero max_instances", with([](GpuSpec& g) { g.types[0].max_instances = 0; })},
      {"zero cost", with([](GpuSpec& g) { g.types[0].cost = 0; })},
      {"vendor-VFIO type id not a number", with([](GpuSpec& g) {
         g.kind = GpuKind::kVendorVfio;
         g.num_vfs = 2;
       })},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    fs::path dir = root_.path() / "bad";
    auto model = KernelModel::Create(dir, c.profile);
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), ErrorCode::kInvalid);
    EXPECT_FALSE(fs::exists(dir));
  }
}

TEST_F(LayoutTest, ANonEmptyRootIsRefusedAndLeftAlone) {
  fs::path dir = root_.path() / "busy";
  fs::create_directories(dir);
  std::ofstream(dir / "keep") << "x";
  auto model = KernelModel::Create(dir, ProfileByName("mtty").value());
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), ErrorCode::kInvalid);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
}

TEST_F(LayoutTest, UnknownProfileNameListsTheKnownOnes) {
  auto profile = ProfileByName("v100");
  ASSERT_FALSE(profile.ok());
  EXPECT_EQ(profile.status().code(), ErrorCode::kInvalid);
  for (const auto& name : ProfileNames()) {
    EXPECT_NE(profile.status().message().find(name), std::string::npos) << name;
  }
}

}  // namespace
}  // namespace kvgpu::sim::testing
