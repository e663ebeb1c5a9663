// The libvirt backend against libvirt's own client library and its test driver (test:///<file>):
// listing with capability filters, XML as libvirt formats it, errors as libvirt raises them. No
// libvirtd runs here; creating and removing through a real one is the VM lab's
// (tests/vm/libvirt_backend_vm_test.sh).
#include "mdev/libvirt_backend.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "mdev/make_backend.h"

// ThreadSanitizer's built-in suppressions for this binary (read at start-up under TSan, unused
// otherwise). Debian's libvirt and the GLib under it are not instrumented: GLib's slice allocator
// hands memory between libvirt's event-loop thread and the caller's through its own lock-free
// magazines, which TSan, seeing only the interceptors (memset, posix_memalign) called from inside
// those libraries, reports as races. These ignore what the two libraries do inside themselves;
// the backend's own accesses (its locks, atomics and callbacks on the event thread) are checked.
extern "C" const char* __tsan_default_suppressions() {
  return "called_from_lib:libglib-2.0.so.0\ncalled_from_lib:libvirt.so.0\n";
}

namespace kvgpu::mdev {
namespace {

namespace fs = std::filesystem;

std::string TestDriverUri() {
  return "test://" + (fs::path(KVGPU_TEST_FIXTURES) / "libvirt/test-driver-node.xml").string();
}

class LibvirtBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("kvgpu-libvirt-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  LibvirtBackend Backend(std::string uri = TestDriverUri()) {
    LibvirtOptions options;
    options.uri = std::move(uri);
    options.sysfs_root = root_;
    options.settle_timeout = std::chrono::milliseconds(200);
    options.reconnect_initial = std::chrono::milliseconds(300);
    options.reconnect_max = std::chrono::milliseconds(300);
    return LibvirtBackend(options, io_);
  }

  // What sysfs shows beside libvirt: the one attribute libvirt's XML leaves out.
  void Description(const std::string& device_path, const std::string& type,
                   const std::string& text) {
    fs::path dir = root_ / fs::path(device_path).relative_path() / "mdev_supported_types" / type;
    fs::create_directories(dir);
    std::ofstream(dir / "description") << text << "\n";
  }

  fs::path root_;
  PosixSysfsIo io_;
};

TEST_F(LibvirtBackendTest, ListsParentsWithMdevTypesInTheModelsTerms) {
  LibvirtBackend backend = Backend();
  Result<Inventory> inventory = backend.Scan();
  ASSERT_TRUE(inventory.ok()) << inventory.status().ToString();
  // The SATA controller has no mdev types: libvirt's capability filter leaves it out.
  ASSERT_EQ(inventory->parents.size(), 3u);
  const Parent* t4 = inventory->FindParent("0000:3b:00.0");
  ASSERT_NE(t4, nullptr);
  EXPECT_TRUE(t4->is_pci);
  EXPECT_EQ(t4->flavour, Flavour::kMdev);
  EXPECT_EQ(t4->vendor_id, "0x10de");
  EXPECT_EQ(t4->device_id, "0x1eb8");
  // (The test driver drops <driver>: libvirtd fills it from sysfs. The captured XML has it.)
  EXPECT_EQ(t4->physical_gpu, "0000:3b:00.0");
  ASSERT_EQ(t4->types.size(), 2u);
  EXPECT_EQ(t4->types[0].id, "nvidia-222");
  EXPECT_EQ(t4->types[0].name, "GRID T4-1B");
  EXPECT_EQ(t4->types[0].device_api, "vfio-pci");
  EXPECT_EQ(t4->types[0].available_instances, 15u);
  ASSERT_TRUE(t4->types[0].profile.has_value());
  EXPECT_EQ(t4->types[0].profile->profile, "T4-1B");
  EXPECT_EQ(t4->types[1].available_instances, 0u);

  const Parent* vf = inventory->FindParent("0000:41:00.4");
  ASSERT_NE(vf, nullptr);
  EXPECT_TRUE(vf->is_virtual_function);
  EXPECT_EQ(vf->physical_gpu, "0000:41:00.0");
}

TEST_F(LibvirtBackendTest, ListsMdevsWithParentAddressTypeNameAndGroup) {
  LibvirtBackend backend = Backend();
  Result<Inventory> inventory = backend.Scan();
  ASSERT_TRUE(inventory.ok()) << inventory.status().ToString();
  EXPECT_TRUE(inventory->warnings.empty()) << inventory->warnings.front();
  ASSERT_EQ(inventory->vgpus.size(), 2u);
  const Vgpu* vgpu = inventory->FindVgpu("1b6a0e3c-59a4-4a8e-9b0c-2f3f6a6a1d11");
  ASSERT_NE(vgpu, nullptr);
  EXPECT_EQ(vgpu->flavour, Flavour::kMdev);
  EXPECT_EQ(vgpu->parent, "0000:3b:00.0");
  EXPECT_EQ(vgpu->physical_gpu, "0000:3b:00.0");
  EXPECT_EQ(vgpu->type_id, "nvidia-222");
  EXPECT_EQ(vgpu->type_name, "GRID T4-1B");
  EXPECT_EQ(vgpu->iommu_group, 121u);
  EXPECT_EQ(vgpu->vfio_device, "/dev/vfio/121");
  // libvirt keeps the case it was given; ids are compared in the kernel's lower case.
  EXPECT_NE(inventory->FindVgpu("c0ffee00-0000-4000-8000-000000000001"), nullptr);
}

TEST_F(LibvirtBackendTest, ReadsTheDescriptionLibvirtLeavesOutFromTheSysfsPathItGives) {
  Description("/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0", "nvidia-222",
              "num_heads=4, frl_config=45, framebuffer=1024M, max_resolution=5120x2880, "
              "max_instance=16");
  LibvirtBackend backend = Backend();
  Result<Inventory> inventory = backend.Scan();
  ASSERT_TRUE(inventory.ok()) << inventory.status().ToString();
  const VgpuType& type = inventory->FindParent("0000:3b:00.0")->types[0];
  ASSERT_TRUE(type.nvidia.has_value());
  EXPECT_EQ(type.nvidia->framebuffer_mib, 1024u);
  EXPECT_EQ(type.nvidia->max_instance, 16u);
  // No sysfs beside libvirt (another mount namespace): the type is listed without one.
  EXPECT_FALSE(inventory->FindParent("0000:af:00.0")->types[0].description.has_value());
}

TEST_F(LibvirtBackendTest, RefusesWhatLibvirtsViewRulesOutBeforeAskingIt) {
  LibvirtBackend backend = Backend();
  auto code = [&](const CreateRequest& request) {
    Result<Vgpu> created = backend.Create(request);
    EXPECT_FALSE(created.ok());
    return created.ok() ? ErrorCode::kOk : created.status().code();
  };
  EXPECT_EQ(code({"0000:99:00.0", "nvidia-222", std::nullopt}), ErrorCode::kUnknownParent);
  EXPECT_EQ(code({"0000:3b:00.0", "nvidia-999", std::nullopt}), ErrorCode::kUnknownType);
  EXPECT_EQ(code({"0000:3b:00.0", "nvidia-230", std::nullopt}), ErrorCode::kNoRoom);
  EXPECT_EQ(code({"0000:af:00.0", "nvidia-222", std::nullopt}), ErrorCode::kNoRoom);
  EXPECT_EQ(code({"0000:3b:00.0", "nvidia-222", "1B6A0E3C-59A4-4A8E-9B0C-2F3F6A6A1D11"}),
            ErrorCode::kExists);
  EXPECT_EQ(code({"0000:3b:00.0", "nvidia-222", "not-a-uuid"}), ErrorCode::kMalformedUuid);
  EXPECT_EQ(code({"", "nvidia-222", std::nullopt}), ErrorCode::kInvalid);

  Result<Vgpu> full = backend.Create({"0000:af:00.0", "nvidia-222", std::nullopt});
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.status().message().find("no room for another nvidia-222 on 0000:af:00.0"),
            std::string::npos)
      << full.status().message();
}

TEST_F(LibvirtBackendTest, RemovingWhatLibvirtDoesNotListIsGoneAndAVfAddressIsNotAnMdev) {
  LibvirtBackend backend = Backend();
  Status gone = backend.Remove("00000000-0000-4000-8000-0000000000ff");
  EXPECT_EQ(gone.code(), ErrorCode::kGone) << gone.ToString();
  Status vf = backend.Remove("0000:41:00.4");
  EXPECT_EQ(vf.code(), ErrorCode::kMalformedUuid) << vf.ToString();
}

TEST_F(LibvirtBackendTest, AnUnreachableLibvirtdIsATransportErrorRetriedOnlyAfterBackoff) {
  fs::path socket = root_ / "no-libvirtd.sock";
  LibvirtBackend backend = Backend("qemu+unix:///system?socket=" + socket.string());
  Result<Inventory> first = backend.Scan();
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().code(), ErrorCode::kTransport) << first.status().ToString();
  EXPECT_NE(first.status().message().find(socket.string()), std::string::npos);
  BackendHealth health = backend.Health();
  EXPECT_FALSE(health.connected);
  EXPECT_FALSE(health.last_error.empty());
  // Within the backoff nothing is tried: the answer says when the next attempt is.
  Result<Inventory> second = backend.Scan();
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), ErrorCode::kTransport);
  EXPECT_NE(second.status().message().find("next attempt in"), std::string::npos)
      << second.status().message();
  EXPECT_EQ(backend.Create({"0000:3b:00.0", "nvidia-222", std::nullopt}).status().code(),
            ErrorCode::kTransport);
  EXPECT_EQ(backend.Remove("1b6a0e3c-59a4-4a8e-9b0c-2f3f6a6a1d11").code(), ErrorCode::kTransport);
}

TEST_F(LibvirtBackendTest, ConnectsOnceTheBackoffHasPassed) {
  LibvirtBackend backend = Backend();
  EXPECT_TRUE(backend.Connect().ok());
  BackendHealth health = backend.Health();
  EXPECT_TRUE(health.connected);
  EXPECT_EQ(health.reconnects, 0u);
  EXPECT_TRUE(health.last_error.empty());
}

TEST_F(LibvirtBackendTest, EventSubscriptionsStartBeforeTheConnectionAndEndCleanly) {
  LibvirtBackend backend = Backend();
  int calls = 0;
  auto events = backend.WatchChanges([&](const std::string&) { ++calls; });
  ASSERT_TRUE(events.ok()) << events.status().ToString();
  ASSERT_TRUE(backend.Scan().ok());
  events->reset();
  ASSERT_TRUE(backend.Scan().ok());
  EXPECT_EQ(calls, 0);  // the test driver's devices do not change by themselves
}

TEST(MakeBackendTest, ChoosesByNameAndRefusesOthers) {
  PosixSysfsIo io;
  auto sysfs = MakeBackend({}, "/", io);
  ASSERT_TRUE(sysfs.ok());
  EXPECT_STREQ((*sysfs)->Name(), "sysfs");
  auto libvirt = MakeBackend({.name = "libvirt", .libvirt_uri = "test:///default"}, "/", io);
  ASSERT_TRUE(libvirt.ok());
  EXPECT_STREQ((*libvirt)->Name(), "libvirt");
  auto other = MakeBackend({.name = "xen"}, "/", io);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), ErrorCode::kInvalid);
  EXPECT_NE(other.status().message().find("sysfs, libvirt"), std::string::npos);
  EXPECT_FALSE(MakeBackend({.name = "libvirt", .libvirt_uri = ""}, "/", io).ok());
}

}  // namespace
}  // namespace kvgpu::mdev
