// The mdev library (Node over PosixSysfsIo) against a real 6.1 kernel with the sample mdev
// drivers: what it discovers, what it creates and removes, and how it reports each of the
// kernel's refusals. Expected values come from samples/vfio-mdev/{mtty,mdpy,mbochs}.c.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <iostream>
#include <optional>
#include <set>

#include "mdev/sysfs_backend.h"
#include "mdev/uuid.h"
#include "tests/vm/lab_support.h"

namespace kvgpu::vmtest {
namespace {

using mdev::CreateRequest;

class NodeVmTest : public LabTest {
 protected:
  mdev::PosixSysfsIo io_;
  mdev::SysfsBackend node_{"/", io_};

  mdev::Vgpu MustCreate(const std::string& parent, const std::string& type,
                        std::optional<std::string> uuid = std::nullopt) {
    auto created = node_.Create({parent, type, uuid});
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    return created.ok() ? *created : mdev::Vgpu{};
  }
};

struct ExpectedType {
  std::string parent;
  std::string id;
  std::string name;
  std::optional<std::string> description;  // nullopt: the kernel shows no such file
  uint32_t available;
};

// From the drivers' sources: mtty shares 24 ports (types of 1 and 2 ports, no description),
// mdpy allows max_devices=4 of each type, mbochs shares 256 MB among 4/16/64 MB types. mbochs64
// is setup-lab.sh's copy of mbochs (64-bit BAR): 1024 MB shared among 4/16/256 MB types.
const std::vector<ExpectedType> kSampleTypes = {
    {"mbochs", "mbochs-large", "mbochs-large", "virtual display, 64 MB video memory", 4},
    {"mbochs", "mbochs-medium", "mbochs-medium", "virtual display, 16 MB video memory", 16},
    {"mbochs", "mbochs-small", "mbochs-small", "virtual display, 4 MB video memory", 64},
    {"mbochs64", "mbochs64-large", "mbochs64-large", "virtual display, 256 MB video memory", 4},
    {"mbochs64", "mbochs64-medium", "mbochs64-medium", "virtual display, 16 MB video memory", 64},
    {"mbochs64", "mbochs64-small", "mbochs64-small", "virtual display, 4 MB video memory", 256},
    {"mdpy", "mdpy-hd", "mdpy-hd", "virtual display, 1920x1080 framebuffer", 4},
    {"mdpy", "mdpy-vga", "mdpy-vga", "virtual display, 640x480 framebuffer", 4},
    {"mdpy", "mdpy-xga", "mdpy-xga", "virtual display, 1024x768 framebuffer", 4},
    {"mtty", "mtty-1", "Single port serial", std::nullopt, 24},
    {"mtty", "mtty-2", "Dual port serial", std::nullopt, 12},
};

TEST_F(NodeVmTest, DiscoversEverySampleParentAndType) {
  auto inventory = node_.Scan();
  ASSERT_TRUE(inventory.ok()) << inventory.status().ToString();
  EXPECT_TRUE(inventory->warnings.empty());
  EXPECT_TRUE(inventory->vgpus.empty());

  std::vector<std::string> parents;
  for (const auto& parent : inventory->parents) parents.push_back(parent.name);
  std::sort(parents.begin(), parents.end());
  EXPECT_EQ(parents, (std::vector<std::string>{"mbochs", "mbochs64", "mdpy", "mtty"}));

  size_t seen = 0;
  for (const auto& parent : inventory->parents) {
    EXPECT_FALSE(parent.is_pci) << parent.name;
    EXPECT_EQ(parent.flavour, mdev::Flavour::kMdev) << parent.name;
    seen += parent.types.size();
  }
  EXPECT_EQ(seen, kSampleTypes.size());

  for (const auto& want : kSampleTypes) {
    SCOPED_TRACE(want.parent + "/" + want.id);
    const mdev::Parent* parent = inventory->FindParent(want.parent);
    ASSERT_NE(parent, nullptr);
    auto type = std::find_if(parent->types.begin(), parent->types.end(),
                             [&](const auto& t) { return t.id == want.id; });
    ASSERT_NE(type, parent->types.end());
    EXPECT_EQ(type->name, want.name);
    EXPECT_EQ(type->description, want.description);
    EXPECT_EQ(type->device_api, "vfio-pci");
    EXPECT_EQ(type->available_instances, want.available);
    EXPECT_FALSE(type->nvidia.has_value());
    EXPECT_FALSE(type->profile.has_value());
    // The oracle for "absent": the file itself.
    EXPECT_EQ(fs::exists(kMdevBus / want.parent / "mdev_supported_types" / want.id / "description"),
              want.description.has_value());
  }
}

TEST_F(NodeVmTest, CreateShowsTheDeviceWithACharacterVfioGroupAndRemoveTakesItAway) {
  for (const auto& [parent, type] : std::vector<std::pair<std::string, std::string>>{
           {"mtty", "mtty-2"}, {"mdpy", "mdpy-xga"}, {"mbochs", "mbochs-medium"}}) {
    SCOPED_TRACE(parent + "/" + type);
    mdev::Vgpu vgpu = MustCreate(parent, type);
    ASSERT_TRUE(mdev::IsValidUuid(vgpu.id));
    EXPECT_EQ(vgpu.parent, parent);
    EXPECT_EQ(vgpu.type_id, type);
    ASSERT_TRUE(vgpu.iommu_group.has_value());
    EXPECT_EQ(vgpu.vfio_device, "/dev/vfio/" + std::to_string(*vgpu.iommu_group));

    // The kernel's own view of what was made.
    fs::path device = kMdevDevices / vgpu.id;
    EXPECT_EQ(fs::read_symlink(device / "mdev_type").filename(), type);
    EXPECT_EQ(fs::read_symlink(device / "iommu_group").filename(),
              std::to_string(*vgpu.iommu_group));
    struct stat st {};
    ASSERT_EQ(::stat(vgpu.vfio_device.c_str(), &st), 0) << vgpu.vfio_device;
    EXPECT_TRUE(S_ISCHR(st.st_mode)) << vgpu.vfio_device << " is not a character device";
    // Kata finds the mdev through the group: a UUID-named entry in the group's devices.
    EXPECT_TRUE(fs::exists(fs::path("/sys/kernel/iommu_groups") /
                           std::to_string(*vgpu.iommu_group) / "devices" / vgpu.id));

    auto inventory = node_.Scan();
    ASSERT_TRUE(inventory.ok());
    const mdev::Vgpu* listed = inventory->FindVgpu(vgpu.id);
    ASSERT_NE(listed, nullptr);
    EXPECT_EQ(listed->type_id, type);
    EXPECT_EQ(listed->iommu_group, vgpu.iommu_group);

    Status removed = node_.Remove(vgpu.id);
    ASSERT_TRUE(removed.ok()) << removed.ToString();
    EXPECT_FALSE(fs::exists(device));
    EXPECT_FALSE(fs::exists(vgpu.vfio_device)) << "the group's node outlived its only device";
    auto after = node_.Scan();
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(after->FindVgpu(vgpu.id), nullptr);
  }
}

TEST_F(NodeVmTest, CreateKeepsTheUuidAskedForInTheKernelsLowerCase) {
  mdev::Vgpu vgpu = MustCreate("mtty", "mtty-1", "1B4E28BA-2FA1-11D2-883F-0016D3CCA427");
  EXPECT_EQ(vgpu.id, "1b4e28ba-2fa1-11d2-883f-0016d3cca427");
  EXPECT_EQ(MdevUuids(), std::vector<std::string>{vgpu.id});
  EXPECT_TRUE(node_.Remove("1B4E28BA-2FA1-11D2-883F-0016D3CCA427").ok());
  EXPECT_TRUE(MdevUuids().empty());
}

// A snapshot of what a failed call must leave untouched.
struct KernelState {
  std::vector<std::string> uuids;
  std::vector<int> available;
  bool operator==(const KernelState&) const = default;
};

KernelState Snapshot() {
  KernelState state{MdevUuids(), {}};
  for (const auto& type : kSampleTypes) {
    state.available.push_back(AvailableInstances(type.parent, type.id));
  }
  return state;
}

struct ErrorCase {
  std::string description;
  std::function<void(mdev::SysfsBackend&)>
      arrange;  // brings the kernel into the state the case needs
  std::function<Status(mdev::SysfsBackend&)> act;
  ErrorCode code;
  int sys_errno;  // the kernel's errno carried in the Status; 0 when the library refuses first
  std::string message_part;
};

constexpr const char* kTaken = "6a4e34f2-5c4e-4e8f-9d0e-0a1b2c3d4e5f";

void Fill(mdev::SysfsBackend& node, const std::string& parent, const std::string& type) {
  while (AvailableInstances(parent, type) > 0) {
    auto created = node.Create({parent, type, std::nullopt});
    ASSERT_TRUE(created.ok()) << created.status().ToString();
  }
}

TEST_F(NodeVmTest, EveryKernelRefusalIsATypedErrorThatChangesNothing) {
  auto create = [](std::string parent, std::string type, std::optional<std::string> uuid) {
    return [=](mdev::SysfsBackend& node) { return node.Create({parent, type, uuid}).status(); };
  };
  auto take = [](std::string parent, std::string type) {
    return [=](mdev::SysfsBackend& node) { ASSERT_TRUE(node.Create({parent, type, kTaken}).ok()); };
  };
  auto nothing = [](mdev::SysfsBackend&) {};
  const std::vector<ErrorCase> cases = {
      {"malformed UUID is refused before the kernel sees it", nothing,
       create("mtty", "mtty-1", "not-a-uuid"), ErrorCode::kMalformedUuid, 0, "is not a UUID"},
      {"UUID taken by the same type: EEXIST", take("mtty", "mtty-1"),
       create("mtty", "mtty-1", kTaken), ErrorCode::kExists, EEXIST, "already exists"},
      {"UUID taken by another type of the parent: EEXIST", take("mtty", "mtty-1"),
       create("mtty", "mtty-2", kTaken), ErrorCode::kExists, EEXIST, "already exists"},
      {"UUID taken on another parent: EEXIST", take("mtty", "mtty-1"),
       create("mdpy", "mdpy-vga", kTaken), ErrorCode::kExists, EEXIST, "already exists"},
      {"mtty out of ports: ENOSPC from the driver",
       [](mdev::SysfsBackend& n) { Fill(n, "mtty", "mtty-1"); },
       create("mtty", "mtty-1", std::nullopt), ErrorCode::kNoRoom, ENOSPC, "no room"},
      {"mtty-2 when one port is left: ENOSPC",
       [](mdev::SysfsBackend& n) {
         for (int i = 0; i < 23; ++i) ASSERT_TRUE(n.Create({"mtty", "mtty-1", {}}).ok());
       },
       create("mtty", "mtty-2", std::nullopt), ErrorCode::kNoRoom, ENOSPC, "no room"},
      {"mdpy at max_instances: EUSERS from the mdev core",
       [](mdev::SysfsBackend& n) { Fill(n, "mdpy", "mdpy-vga"); },
       create("mdpy", "mdpy-vga", std::nullopt), ErrorCode::kNoRoom, EUSERS, "no room"},
      {"mbochs out of video memory: ENOSPC",
       [](mdev::SysfsBackend& n) { Fill(n, "mbochs", "mbochs-large"); },
       create("mbochs", "mbochs-small", std::nullopt), ErrorCode::kNoRoom, ENOSPC, "no room"},
      {"remove of an mdev that is gone: ENOENT", nothing,
       [](mdev::SysfsBackend& n) { return n.Remove(kTaken); }, ErrorCode::kGone, ENOENT, "no vGPU"},
      {"remove of something that is not a UUID", nothing,
       [](mdev::SysfsBackend& n) { return n.Remove("mtty"); }, ErrorCode::kMalformedUuid, 0,
       "neither an mdev UUID"},
      {"unknown type of a real parent", nothing, create("mtty", "mtty-3", std::nullopt),
       ErrorCode::kUnknownType, 0, "has no type"},
      {"type id that walks out of the types dir", nothing,
       create("mtty", "../../mdpy/mdev_supported_types/mdpy-vga", std::nullopt),
       ErrorCode::kUnknownType, 0, "has no type"},
      {"unknown parent", nothing, create("0000:3b:00.0", "nvidia-222", std::nullopt),
       ErrorCode::kUnknownParent, 0, "no vGPU-capable parent"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    RemoveAllMdevs();
    c.arrange(node_);
    KernelState before = Snapshot();
    Status status = c.act(node_);
    EXPECT_EQ(status.code(), c.code) << status.ToString();
    EXPECT_EQ(status.sys_errno(), c.sys_errno) << status.ToString();
    EXPECT_NE(status.message().find(c.message_part), std::string::npos) << status.ToString();
    EXPECT_EQ(Snapshot(), before) << "a refused call changed the kernel's state";
    std::cout << "  " << c.description << " -> " << status.ToString() << "\n";
  }
}

// The library validates UUIDs itself, so a bad one never reaches the kernel. What it accepts the
// kernel must create under exactly that (lower-cased) UUID; what it refuses the kernel refuses
// too, or would silently read as another UUID: uuid_parse looks at the first 36 characters only
// (which is why `echo UUID > create`, with its newline, works).
struct UuidCase {
  std::string description;
  std::string text;
  bool library_accepts;
  int kernel_errno;                 // of the write(2)
  std::optional<std::string> made;  // the mdev the kernel then shows
};

TEST_F(NodeVmTest, LibraryUuidCheckAgreesWithTheKernel) {
  const std::string canonical = "3b6f2ad4-6c1e-4c55-b6b2-7c6a1c0f4d1e";
  const std::vector<UuidCase> cases = {
      {"canonical", canonical, true, 0, canonical},
      {"upper case", "3B6F2AD4-6C1E-4C55-B6B2-7C6A1C0F4D1E", true, 0, canonical},
      {"no RFC 4122 version or variant", "3b6f2ad4-6c1e-1c55-f6b2-7c6a1c0f4d1e", true, 0,
       "3b6f2ad4-6c1e-1c55-f6b2-7c6a1c0f4d1e"},
      {"no dashes", "3b6f2ad46c1e4c55b6b27c6a1c0f4d1e", false, EINVAL, std::nullopt},
      {"braces", "{" + canonical + "}", false, EINVAL, std::nullopt},
      {"one digit short", canonical.substr(0, 35), false, EINVAL, std::nullopt},
      {"trailing newline: the kernel ignores it", canonical + "\n", false, 0, canonical},
      {"one digit long: the kernel drops it", canonical + "0", false, 0, canonical},
      {"underscores", "3b6f2ad4_6c1e_4c55_b6b2_7c6a1c0f4d1e", false, EINVAL, std::nullopt},
      {"not hex", "3b6f2ad4-6c1e-4c55-b6b2-7c6a1c0f4dxe", false, EINVAL, std::nullopt},
      {"empty: a zero-length write never reaches the driver", "", false, 0, std::nullopt},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    EXPECT_EQ(mdev::IsValidUuid(c.text), c.library_accepts);
    int error = RawWrite(CreateFile("mtty", "mtty-1"), c.text);
    EXPECT_EQ(error, c.kernel_errno) << std::strerror(error);
    std::vector<std::string> made;
    if (c.made) made.push_back(*c.made);
    EXPECT_EQ(MdevUuids(), made);
    if (c.library_accepts) {
      EXPECT_EQ(mdev::NormalizeUuid(c.text), c.made);
    }
    RemoveAllMdevs();
  }
}

TEST_F(NodeVmTest, Mtty2TakesTwoPortsFromThePoolMtty1SharesWith) {
  ASSERT_EQ(AvailableInstances("mtty", "mtty-1"), 24);
  ASSERT_EQ(AvailableInstances("mtty", "mtty-2"), 12);
  mdev::Vgpu two = MustCreate("mtty", "mtty-2");
  EXPECT_EQ(AvailableInstances("mtty", "mtty-2"), 11);
  EXPECT_EQ(AvailableInstances("mtty", "mtty-1"), 22);
  mdev::Vgpu one = MustCreate("mtty", "mtty-1");
  EXPECT_EQ(AvailableInstances("mtty", "mtty-1"), 21);
  EXPECT_EQ(AvailableInstances("mtty", "mtty-2"), 10);  // 21 ports hold 10 dual ones

  // The library's scan reports the same numbers as the files.
  auto inventory = node_.Scan();
  ASSERT_TRUE(inventory.ok());
  for (const auto& type : inventory->FindParent("mtty")->types) {
    EXPECT_EQ(type.available_instances, static_cast<uint32_t>(AvailableInstances("mtty", type.id)))
        << type.id;
  }
  ASSERT_TRUE(node_.Remove(two.id).ok());
  ASSERT_TRUE(node_.Remove(one.id).ok());
  EXPECT_EQ(AvailableInstances("mtty", "mtty-1"), 24);
  EXPECT_EQ(AvailableInstances("mtty", "mtty-2"), 12);
}

TEST_F(NodeVmTest, TwoHundredCreateRemoveCyclesLeaveNothingBehind) {
  constexpr int kCycles = 200;
  std::vector<double> create_ms;
  std::vector<double> remove_ms;
  std::set<std::string> uuids;
  for (int i = 0; i < kCycles; ++i) {
    const std::string type = i % 2 == 0 ? "mtty-1" : "mtty-2";
    auto start = std::chrono::steady_clock::now();
    auto created = node_.Create({"mtty", type, std::nullopt});
    create_ms.push_back(MillisecondsSince(start));
    ASSERT_TRUE(created.ok()) << "cycle " << i << ": " << created.status().ToString();
    uuids.insert(created->id);
    start = std::chrono::steady_clock::now();
    Status removed = node_.Remove(created->id);
    remove_ms.push_back(MillisecondsSince(start));
    ASSERT_TRUE(removed.ok()) << "cycle " << i << ": " << removed.ToString();
  }
  EXPECT_EQ(uuids.size(), static_cast<size_t>(kCycles));
  EXPECT_TRUE(MdevUuids().empty());
  EXPECT_EQ(AvailableInstances("mtty", "mtty-1"), 24);
  EXPECT_EQ(AvailableInstances("mtty", "mtty-2"), 12);
  std::vector<std::string> vfio_nodes;
  for (const auto& entry : fs::directory_iterator("/dev/vfio")) {
    vfio_nodes.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(vfio_nodes, std::vector<std::string>{"vfio"}) << "group nodes left in /dev/vfio";

  auto percentile = [](std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
  };
  std::cout << "latency over " << kCycles << " cycles (Node::Create incl. settle / Node::Remove):"
            << " create p50 " << percentile(create_ms, 0.5) << " ms p95 "
            << percentile(create_ms, 0.95) << " ms; remove p50 " << percentile(remove_ms, 0.5)
            << " ms p95 " << percentile(remove_ms, 0.95) << " ms\n";
}

TEST_F(NodeVmTest, RawKernelCreateRemoveLatency) {
  // The kernel's own cost, without the library's checks and settle wait: the baseline the
  // library's numbers above are read against (docs/vm-lab.md).
  constexpr int kRounds = 100;
  std::vector<double> create_ms;
  std::vector<double> remove_ms;
  for (int i = 0; i < kRounds; ++i) {
    std::string uuid = mdev::NewUuid();
    auto start = std::chrono::steady_clock::now();
    ASSERT_EQ(RawWrite(CreateFile("mtty", "mtty-1"), uuid), 0);
    create_ms.push_back(MillisecondsSince(start));
    start = std::chrono::steady_clock::now();
    ASSERT_EQ(RawWrite(kMdevDevices / uuid / "remove", "1"), 0);
    remove_ms.push_back(MillisecondsSince(start));
  }
  std::sort(create_ms.begin(), create_ms.end());
  std::sort(remove_ms.begin(), remove_ms.end());
  std::cout << "raw sysfs latency over " << kRounds << " rounds: create p50 " << create_ms[50]
            << " ms p95 " << create_ms[95] << " ms; remove p50 " << remove_ms[50] << " ms p95 "
            << remove_ms[95] << " ms\n";
  EXPECT_TRUE(MdevUuids().empty());
}

}  // namespace
}  // namespace kvgpu::vmtest
