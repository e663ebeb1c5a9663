// One scenario on both backends against the real thing: the lab kernel's mdev core with the
// mttypci sample (an mtty whose parent is a PCI device, QEMU's edu, as a GPU is), and Debian's
// libvirtd with its node-device driver, udev and mdevctl (tests/vm/libvirt-lab.sh starts them
// and defines one persistent mdev, someone else's, before this binary runs).
//
// The same steps give the same results on sysfs and libvirt; libvirt's own tools (virsh,
// mdevctl) show exactly the vGPUs made here while they exist; the persistent mdev survives.
#include <algorithm>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "fakes/common/eventually.h"
#include "mdev/libvirt_backend.h"
#include "mdev/sysfs_backend.h"
#include "mdev/uuid.h"
#include "tests/vm/lab_support.h"

namespace kvgpu::vmtest {
namespace {

using namespace std::chrono_literals;
using kvgpu::testing::Eventually;
using kvgpu::testing::kLabEventDeadline;
using mdev::Backend;

const char* const kLabScript = "KVGPU_LIBVIRT_LAB";       // tests/vm/libvirt-lab.sh
const char* const kPersistent = "KVGPU_PERSISTENT_MDEV";  // the UUID it defined
const char* const kUri = "KVGPU_LIBVIRT_URI";             // where its libvirtd answers
const std::string kSingle = "mttypci-1";                  // one port of 24
const std::string kDual = "mttypci-2";                    // two ports: 12 of them

// The mttypci parent: the PCI device offering its types.
std::string PciParent() {
  for (const auto& entry : fs::directory_iterator(kMdevBus)) {
    if (fs::exists(entry.path() / "mdev_supported_types" / kDual)) {
      return entry.path().filename().string();
    }
  }
  return "";
}

int RawAvailable(const std::string& type) {
  return AvailableInstances(PciParent(), type);
}

std::set<std::string> Sorted(const std::vector<std::string>& ids) {
  return {ids.begin(), ids.end()};
}

// UUIDs `mdevctl list` shows as running.
std::set<std::string> MdevctlMdevs() {
  ProcessResult run = RunProcess({"mdevctl", "list"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  std::set<std::string> out;
  std::istringstream lines(run.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.size() >= 36 && mdev::IsValidUuid(line.substr(0, 36))) out.insert(line.substr(0, 36));
  }
  return out;
}

std::set<std::string> VgpuctlMdevs(const std::string& backend) {
  ProcessResult run = RunProcess(
      {VgpuctlPath(), "--backend", backend, "--libvirt-uri", Env(kUri), "list", "--json"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  std::set<std::string> out;
  nlohmann::json listed = nlohmann::json::parse(run.out);  // outlives the loop over its part
  for (const auto& vgpu : listed.at("vgpus")) out.insert(vgpu.at("id").get<std::string>());
  return out;
}

// Runs the lab script's verb (stop-libvirtd, start-libvirtd).
void Lab(const std::string& verb) {
  ProcessResult run = RunProcess({Env(kLabScript), verb});
  ASSERT_EQ(run.exit_code, 0) << verb << ": " << run.out << run.err;
}

class LibvirtLabEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    ASSERT_FALSE(Env(kLabScript).empty())
        << "run through tests/vm/libvirt-lab.sh, which starts libvirtd first";
    ASSERT_FALSE(PciParent().empty()) << "no mttypci parent: is mttypci.ko loaded?";
    ASSERT_TRUE(mdev::IsValidUuid(Env(kPersistent)));
  }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new LibvirtLabEnvironment);

class BothBackendsVmTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    parent_ = PciParent();
    persistent_ = mdev::NormalizeUuid(Env(kPersistent));
    RemoveOurs();
    mdev::LibvirtOptions options;
    options.uri = Env(kUri);
    options.reconnect_initial = std::chrono::milliseconds(200);
    options.reconnect_max = std::chrono::milliseconds(1000);
    if (GetParam() == "libvirt") {
      backend_ = std::make_unique<mdev::LibvirtBackend>(options, io_);
    } else {
      backend_ = std::make_unique<mdev::SysfsBackend>("/", io_);
    }
  }
  void TearDown() override {
    RemoveOurs();
    // Whatever a case did, the persistent mdev is still there.
    EXPECT_TRUE(Sorted(MdevUuids()).contains(persistent_));
  }

  // Every mdev but the persistent one, by raw sysfs (behind libvirt's back, as cleanup only).
  void RemoveOurs() {
    for (const std::string& uuid : MdevUuids()) {
      if (uuid != persistent_) RawWrite(kMdevDevices / uuid / "remove", "1");
    }
    ASSERT_TRUE(fs::exists(kMdevDevices / persistent_)) << "the persistent mdev is gone";
  }

  mdev::Inventory Scan() {
    auto inventory = backend_->Scan();
    EXPECT_TRUE(inventory.ok()) << inventory.status().ToString();
    return inventory.ok() ? *inventory : mdev::Inventory{};
  }

  uint32_t Available(const mdev::Inventory& inventory, const std::string& type) {
    const mdev::Parent* parent = inventory.FindParent(parent_);
    if (parent == nullptr) return 9999;
    for (const auto& t : parent->types) {
      if (t.id == type) return t.available_instances;
    }
    return 9999;
  }

  std::string parent_;
  std::string persistent_;
  mdev::PosixSysfsIo io_;
  std::unique_ptr<Backend> backend_;
};

INSTANTIATE_TEST_SUITE_P(Backends, BothBackendsVmTest, ::testing::Values("sysfs", "libvirt"),
                         [](const auto& backend) { return backend.param; });

TEST_P(BothBackendsVmTest, ListsThePciParentsTypesWithTheKernelsAvailability) {
  mdev::Inventory inventory = Scan();
  const mdev::Parent* parent = inventory.FindParent(parent_);
  ASSERT_NE(parent, nullptr) << parent_;
  EXPECT_TRUE(parent->is_pci);
  EXPECT_EQ(parent->vendor_id, "0x1234");
  EXPECT_EQ(parent->driver, "mttypci");
  ASSERT_EQ(parent->types.size(), 2u);
  EXPECT_EQ(parent->types[0].name, "Single port serial");
  EXPECT_EQ(Available(inventory, kSingle), static_cast<uint32_t>(RawAvailable(kSingle)));
  EXPECT_EQ(Available(inventory, kDual), static_cast<uint32_t>(RawAvailable(kDual)));
  // The persistent mdev is listed, and only libvirt can tell it is someone else's definition.
  const mdev::Vgpu* persistent = inventory.FindVgpu(persistent_);
  ASSERT_NE(persistent, nullptr);
  EXPECT_EQ(persistent->persistent, GetParam() == "libvirt");
}

TEST_P(BothBackendsVmTest, CreateConsumesCapacityShowsInLibvirtsToolsAndRemoveGivesItBack) {
  int single_before = RawAvailable(kSingle);
  int dual_before = RawAvailable(kDual);
  std::string uuid = mdev::NewUuid();
  auto vgpu = backend_->Create({parent_, kDual, uuid});
  ASSERT_TRUE(vgpu.ok()) << vgpu.status().ToString();
  EXPECT_EQ(vgpu->id, uuid);
  EXPECT_EQ(vgpu->parent, parent_);
  EXPECT_EQ(vgpu->type_id, kDual);
  EXPECT_EQ(vgpu->type_name, "Dual port serial");
  ASSERT_TRUE(vgpu->iommu_group.has_value());
  EXPECT_TRUE(fs::exists(vgpu->vfio_device)) << vgpu->vfio_device;
  EXPECT_FALSE(vgpu->persistent);
  // Two ports taken: the kernel's counts, and the backend's view of them.
  EXPECT_EQ(RawAvailable(kDual), dual_before - 1);
  EXPECT_EQ(RawAvailable(kSingle), single_before - 2);
  mdev::Inventory inventory = Scan();
  EXPECT_EQ(Available(inventory, kDual), static_cast<uint32_t>(dual_before - 1));
  ASSERT_NE(inventory.FindVgpu(uuid), nullptr);

  // Everyone's view agrees while it exists: the kernel, libvirt, mdevctl, vgpuctl on either
  // backend.
  std::set<std::string> want = {uuid, persistent_};
  EXPECT_EQ(Sorted(MdevUuids()), want);
  EXPECT_TRUE(Eventually([&] { return VirshMdevs(Env(kUri)) == want; }, kLabEventDeadline,
                         20ms))  // udev lag
      << "virsh lists another set";
  EXPECT_EQ(MdevctlMdevs(), want);
  EXPECT_EQ(VgpuctlMdevs("libvirt"), want);
  EXPECT_EQ(VgpuctlMdevs("sysfs"), want);

  ASSERT_TRUE(backend_->Remove(uuid).ok());
  EXPECT_FALSE(fs::exists(kMdevDevices / uuid));
  EXPECT_EQ(RawAvailable(kDual), dual_before);
  EXPECT_EQ(RawAvailable(kSingle), single_before);
  want = {persistent_};
  EXPECT_TRUE(Eventually([&] { return VirshMdevs(Env(kUri)) == want; }, kLabEventDeadline, 20ms));
  EXPECT_EQ(MdevctlMdevs(), want);
  EXPECT_EQ(VgpuctlMdevs("libvirt"), want);
}

TEST_P(BothBackendsVmTest, AFullTypeUnknownParentsAndTypesFailAlikeAndChangeNothing) {
  int room = RawAvailable(kDual);
  std::vector<std::string> made;
  for (int i = 0; i < room; ++i) {
    auto vgpu = backend_->Create({parent_, kDual, std::nullopt});
    ASSERT_TRUE(vgpu.ok()) << i << ": " << vgpu.status().ToString();
    made.push_back(vgpu->id);
  }
  ASSERT_EQ(RawAvailable(kDual), 0);
  std::set<std::string> before = Sorted(MdevUuids());
  auto full = backend_->Create({parent_, kDual, std::nullopt});
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), ErrorCode::kNoRoom) << full.status().ToString();
  EXPECT_NE(full.status().message().find("no room for another " + kDual), std::string::npos)
      << full.status().message();
  auto parent = backend_->Create({"0000:00:1f.7", kDual, std::nullopt});
  EXPECT_EQ(parent.status().code(), ErrorCode::kUnknownParent) << parent.status().ToString();
  auto type = backend_->Create({parent_, "mttypci-9", std::nullopt});
  EXPECT_EQ(type.status().code(), ErrorCode::kUnknownType) << type.status().ToString();
  auto taken = backend_->Create({parent_, kSingle, made.front()});
  EXPECT_FALSE(taken.ok());
  EXPECT_EQ(Sorted(MdevUuids()), before);
  Status gone = backend_->Remove("00000000-0000-4000-8000-0000000000ff");
  EXPECT_EQ(gone.code(), ErrorCode::kGone) << gone.ToString();
  for (const std::string& uuid : made) EXPECT_TRUE(backend_->Remove(uuid).ok()) << uuid;
  EXPECT_EQ(RawAvailable(kDual), room);
}

TEST_P(BothBackendsVmTest, TheStockMttysVirtualParentWorksAlike) {
  int before = AvailableInstances("mtty", "mtty-2");
  auto vgpu = backend_->Create({"mtty", "mtty-2", std::nullopt});
  ASSERT_TRUE(vgpu.ok()) << vgpu.status().ToString();
  EXPECT_EQ(vgpu->parent, "mtty");
  EXPECT_TRUE(vgpu->iommu_group.has_value());
  EXPECT_EQ(AvailableInstances("mtty", "mtty-2"), before - 1);
  mdev::Inventory inventory = Scan();
  const mdev::Parent* mtty = inventory.FindParent("mtty");
  ASSERT_NE(mtty, nullptr);
  EXPECT_FALSE(mtty->is_pci);
  EXPECT_NE(inventory.FindVgpu(vgpu->id), nullptr);
  EXPECT_TRUE(backend_->Remove(vgpu->id).ok());
  EXPECT_EQ(AvailableInstances("mtty", "mtty-2"), before);
}

// What only libvirt has: definitions to respect (sysfs shows none; there the plugin's records
// keep it from foreign mdevs), and a daemon to lose.
class LibvirtVmTest : public BothBackendsVmTest {};
INSTANTIATE_TEST_SUITE_P(Backend, LibvirtVmTest, ::testing::Values("libvirt"),
                         [](const auto& backend) { return backend.param; });

TEST_P(LibvirtVmTest, APersistentMdevIsNeverRemovedThroughLibvirt) {
  Status refused = backend_->Remove(persistent_);
  EXPECT_EQ(refused.code(), ErrorCode::kPermission) << refused.ToString();
  EXPECT_NE(refused.message().find("defined persistently"), std::string::npos);
  EXPECT_TRUE(fs::exists(kMdevDevices / persistent_));
}

TEST_P(LibvirtVmTest, LibvirtdRestartedMidwayIsReconnectedAndNothingIsDecidedMeanwhile) {
  std::vector<std::string> events;
  std::mutex mutex;
  auto subscription = backend_->WatchChanges([&](const std::string& what) {
    std::lock_guard lock(mutex);
    events.push_back(what);
  });
  ASSERT_TRUE(subscription.ok()) << subscription.status().ToString();
  auto kept = backend_->Create({parent_, kSingle, std::nullopt});
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  ASSERT_TRUE(Eventually(
      [&] {
        std::lock_guard lock(mutex);
        return std::any_of(events.begin(), events.end(), [&](const std::string& e) {
          return e.find("created mdev_") != std::string::npos;
        });
      },
      kLabEventDeadline, 20ms))
      << "no libvirt lifecycle event for the created mdev";

  Lab("stop-libvirtd");
  std::set<std::string> kernel = Sorted(MdevUuids());
  auto scan = backend_->Scan();
  ASSERT_FALSE(scan.ok());
  EXPECT_EQ(scan.status().code(), ErrorCode::kTransport) << scan.status().ToString();
  EXPECT_FALSE(backend_->Health().connected);
  auto meanwhile = backend_->Create({parent_, kSingle, std::nullopt});
  EXPECT_EQ(meanwhile.status().code(), ErrorCode::kTransport);
  EXPECT_EQ(backend_->Remove(kept->id).code(), ErrorCode::kTransport);
  EXPECT_EQ(Sorted(MdevUuids()), kernel) << "something changed while libvirtd was away";

  Lab("start-libvirtd");
  bool back = Eventually([&] { return backend_->Scan().ok(); }, kLabEventDeadline, 20ms);
  ASSERT_TRUE(back) << backend_->Health().last_error;
  mdev::BackendHealth health = backend_->Health();
  EXPECT_TRUE(health.connected);
  EXPECT_EQ(health.reconnects, 1u);
  mdev::Inventory inventory = Scan();
  ASSERT_NE(inventory.FindVgpu(kept->id), nullptr);
  ASSERT_NE(inventory.FindVgpu(persistent_), nullptr);
  EXPECT_TRUE(inventory.FindVgpu(persistent_)->persistent);
  EXPECT_TRUE(backend_->Remove(kept->id).ok());
}

}  // namespace
}  // namespace kvgpu::vmtest
