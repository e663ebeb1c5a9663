// The device plugin against a real 6.1 kernel in the VM lab (tests/vm/run-in-vm.sh): the daemon
// over the real sysfs and real uevents, kubelet played by the fake. Allocations of mtty and mdpy
// types must make real mdevs whose IOMMU groups are the ones handed to the container, and the
// kernel's shared mtty port pool must show in the pushed lists.
#include <sys/stat.h>

#include <thread>

#include "deviceplugin/daemon.h"
#include "fakes/common/temp_dir.h"
#include "fakes/kubelet/fake_kubelet.h"
#include "tests/vm/lab_support.h"

namespace kvgpu::vmtest {
namespace {

using namespace std::chrono_literals;
using deviceplugin::Daemon;
using deviceplugin::DaemonOptions;
using kvgpu::testing::FakeKubelet;

size_t Healthy(const std::map<std::string, std::string>& devices) {
  size_t n = 0;
  for (const auto& [id, health] : devices) n += health == "Healthy" ? 1u : 0u;
  return n;
}

class DevicePluginVmTest : public LabTest {
 protected:
  void SetUp() override {
    LabTest::SetUp();
    ASSERT_TRUE(kubelet_.Start());
  }
  void StartDaemon(deviceplugin::Config config) {
    DaemonOptions options;
    options.args.sysfs_root = "/";
    // The lab VM runs under TCG with the sample mdev drivers: no KVM or vsock to offer VMs, and
    // what is under test here is the mdev path, not the node's readiness.
    options.args.node_readiness_check = false;
    options.args.kubelet_dir = dir_.path() / "kubelet";
    options.args.state_dir = dir_.path() / "state";
    options.config = config;
    daemon_ = std::make_unique<Daemon>(options);
    auto started = daemon_->Start();
    ASSERT_TRUE(started.ok()) << started.ToString();
  }
  void TearDown() override {
    daemon_.reset();
    kubelet_.Stop();
    LabTest::TearDown();
  }

  // Allocates one device of the resource and checks the answer against sysfs.
  std::string AllocateAndCheck(const std::string& resource) {
    auto devices = kubelet_.Devices(resource);
    EXPECT_FALSE(devices.empty()) << resource;
    if (devices.empty()) return "";
    std::string id = devices.begin()->first;
    v1beta1::AllocateResponse response;
    grpc::Status status = kubelet_.Allocate(resource, {{id}}, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    if (!status.ok()) return "";
    const auto& answer = response.container_responses(0);
    std::string env = "KVGPU_VGPU_" + resource.substr(resource.find("vgpu-") + 5);
    for (char& c : env)
      c = c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    std::string uuid = answer.envs().at(env + "_UUIDS");
    fs::path device = kMdevDevices / uuid;
    EXPECT_TRUE(fs::exists(device)) << "the mdev is real: " << device;
    std::string group = fs::read_symlink(device / "iommu_group").filename();
    EXPECT_EQ(answer.devices_size(), 2);
    EXPECT_EQ(answer.devices(0).host_path(), "/dev/vfio/vfio");
    EXPECT_EQ(answer.devices(1).host_path(), "/dev/vfio/" + group);
    struct stat st {};
    EXPECT_EQ(::stat(("/dev/vfio/" + group).c_str(), &st), 0) << "the VFIO group node exists";
    EXPECT_TRUE(S_ISCHR(st.st_mode));
    return uuid;
  }

  kvgpu::testing::TempDir dir_;
  FakeKubelet kubelet_{dir_.path() / "kubelet" / "device-plugins"};
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(DevicePluginVmTest, MttyAndMdpyAllocationsMakeRealMdevsWithTheGroupsHandedOut) {
  deviceplugin::Config config;
  config.rescan_interval = 200ms;  // with real uevents on too
  StartDaemon(config);
  ASSERT_TRUE(kubelet_.WaitUntil(
      [&] {
        return Healthy(kubelet_.Devices("tencent.com/vgpu-mtty-1")) == 24 &&
               Healthy(kubelet_.Devices("tencent.com/vgpu-mtty-2")) == 12 &&
               Healthy(kubelet_.Devices("tencent.com/vgpu-mdpy-vga")) == 4;
      },
      kvgpu::testing::kLabEventDeadline));
  std::string mtty = AllocateAndCheck("tencent.com/vgpu-mtty-2");
  std::string mdpy = AllocateAndCheck("tencent.com/vgpu-mdpy-vga");
  EXPECT_EQ(MdevUuids().size(), 2u);
  EXPECT_EQ(ReadAttr(kMdevDevices / mtty / "mdev_type" / "name"), "Dual port serial");
  EXPECT_EQ(fs::read_symlink(kMdevDevices / mdpy / "mdev_type").filename(), "mdpy-vga");
  // mtty-2 took 2 of the 24 shared ports: the kernel says 22 mtty-1 left, and kubelet hears it.
  EXPECT_EQ(AvailableInstances("mtty", "mtty-1"), 22);
  EXPECT_TRUE(
      kubelet_.WaitUntil([&] { return Healthy(kubelet_.Devices("tencent.com/vgpu-mtty-1")) == 22; },
                         kvgpu::testing::kLabEventDeadline));
}

TEST_F(DevicePluginVmTest, KernelRefusalIsReportedAndRolledBack) {
  // Blind to the foreign mdevs made below, so its list is stale and the kernel must refuse.
  deviceplugin::Config config;
  config.udev_events = false;
  config.rescan_interval = std::chrono::minutes(5);
  StartDaemon(config);
  ASSERT_TRUE(
      kubelet_.WaitUntil([&] { return Healthy(kubelet_.Devices("tencent.com/vgpu-mdpy-hd")) == 4; },
                         kvgpu::testing::kLabEventDeadline));
  // Fill mdpy-hd behind the plugin's back (foreign mdevs), then ask for two of its devices.
  auto ids = kubelet_.Devices("tencent.com/vgpu-mdpy-hd");
  std::vector<std::string> two = {ids.begin()->first, std::next(ids.begin())->first};
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(RawWrite(CreateFile("mdpy", "mdpy-hd"),
                       "00000000-0000-0000-0000-00000000000" + std::to_string(i)),
              0);
  }
  v1beta1::AllocateResponse response;
  grpc::Status status = kubelet_.Allocate("tencent.com/vgpu-mdpy-hd", {two}, &response);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error_message().find(two[1]), std::string::npos) << status.error_message();
  EXPECT_EQ(MdevUuids().size(), 3u) << "the one mdev the request made is gone again, the "
                                       "three foreign ones are untouched";
}

}  // namespace
}  // namespace kvgpu::vmtest
