// The device plugin on either backend, against the lab's real kernel and real libvirtd
// (libvirt-lab.sh): kubelet allocates, the vGPU is made through the backend, libvirt's tools show
// exactly it while it exists, the pod goes and so does the vGPU; the persistent mdev of someone
// else is never touched. kubelet, its PodResources API and its checkpoint are the fakes of
// fakes/; the kernel and libvirt are not.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <sstream>
#include <thread>

#include "deviceplugin/daemon.h"
#include "fakes/common/eventually.h"
#include "fakes/kubelet/fake_kubelet.h"
#include "fakes/podresources/checkpoint_writer.h"
#include "fakes/podresources/fake_podresources.h"
#include "mdev/uuid.h"
#include "tests/vm/lab_support.h"

namespace kvgpu::vmtest {
namespace {

using namespace std::chrono_literals;
using kvgpu::testing::Eventually;
using kvgpu::testing::kLabEventDeadline;

constexpr const char* kResource = "tencent.com/vgpu-mttypci-2";
constexpr auto kSettle = 2s;

std::set<std::string> Kernel() {
  std::vector<std::string> uuids = MdevUuids();
  return {uuids.begin(), uuids.end()};
}

class PluginVmTest : public ::testing::TestWithParam<std::string> {
 protected:
  PluginVmTest()
      : dir_(fs::temp_directory_path() / ("kvgpu-plugin-vm-" + GetParam())),
        kubelet_(dir_ / "kubelet" / "device-plugins"),
        podresources_(dir_ / "kubelet" / "pod-resources" / "kubelet.sock"),
        checkpoint_(dir_ / "kubelet") {}

  void SetUp() override {
    persistent_ = mdev::NormalizeUuid(Env("KVGPU_PERSISTENT_MDEV"));
    ASSERT_TRUE(mdev::IsValidUuid(persistent_)) << "run through tests/vm/libvirt-lab.sh";
    for (const std::string& uuid : MdevUuids()) {
      if (uuid != persistent_) RawWrite(kMdevDevices / uuid / "remove", "1");
    }
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "kubelet" / "pod-resources");
    fs::create_directories(dir_ / "kubelet" / "device-plugins");
    ASSERT_TRUE(kubelet_.Start());
    ASSERT_TRUE(podresources_.Start());

    StartDaemon();
    ASSERT_TRUE(
        kubelet_.WaitUntil([&] { return !kubelet_.Devices(kResource).empty(); }, kLabEventDeadline))
        << "no " << kResource << " registered";
  }

  void StartDaemon() {
    deviceplugin::DaemonOptions options;
    options.args.sysfs_root = "/";
    options.args.kubelet_dir = dir_ / "kubelet";
    options.args.state_dir = dir_ / "state";
    options.args.node_readiness_check = false;  // the lab has no vhost-vsock
    deviceplugin::Config config;
    config.backend = {.name = GetParam(), .libvirt_uri = Env("KVGPU_LIBVIRT_URI")};
    config.rescan_interval = 500ms;
    config.lifecycle.grace_period = 0ms;
    config.lifecycle.poll_interval = 300ms;
    config.lifecycle.watch_pods = false;
    config.lifecycle.events = false;
    config.scheduler_state.publish = false;
    options.config = config;
    options.retry_initial = 20ms;
    options.retry_max = 200ms;
    // The settle time is how long kubelet may take to list a pod after Allocate returns; here the
    // test itself is kubelet, and under TCG on two loaded cores its thread can stall for far more
    // than the few microseconds between the two steps. The removals below wait it out.
    options.settle = kSettle;
    daemon_ = std::make_unique<deviceplugin::Daemon>(options);
    Status started = daemon_->Start();
    ASSERT_TRUE(started.ok()) << started.ToString();
  }

  void TearDown() override {
    if (daemon_) daemon_->Stop();
    for (const std::string& uuid : MdevUuids()) {
      if (uuid != persistent_) RawWrite(kMdevDevices / uuid / "remove", "1");
    }
    EXPECT_TRUE(Kernel().contains(persistent_)) << "the persistent mdev is gone";
    fs::remove_all(dir_);
  }

  // kubelet runs a pod: Allocate, then PodResources and the checkpoint say so.
  std::string RunPod(const std::string& uid, const std::string& name) {
    std::string id = kubelet_.Devices(kResource).begin()->first;
    v1beta1::AllocateResponse response;
    grpc::Status status = kubelet_.Allocate(kResource, {{id}}, &response);
    allocated_at_ = std::chrono::steady_clock::now();
    EXPECT_TRUE(status.ok()) << status.error_message();
    if (!status.ok()) return "";
    std::string vgpu;
    for (const auto& [key, value] : response.container_responses(0).envs()) {
      if (key.starts_with("KVGPU_VGPU_") && key.ends_with("_UUIDS")) vgpu = value;
    }
    running_.push_back({"default", name, {{"main", {{kResource, {id}}}}}});
    podresources_.SetPods(running_);
    checkpoint_entries_.push_back(
        {uid, "main", kResource, {id}, -1, response.container_responses(0).SerializeAsString()});
    checkpoint_.Write(checkpoint_entries_);
    return vgpu;
  }
  void DeletePod(const std::string& name) {
    std::erase_if(running_, [&](const kubelet::PodResources& p) { return p.name == name; });
    podresources_.SetPods(running_);
  }

  fs::path dir_;
  std::string persistent_;
  kvgpu::testing::FakeKubelet kubelet_;
  kvgpu::testing::FakePodResources podresources_;
  kvgpu::testing::CheckpointWriter checkpoint_;
  std::vector<kubelet::PodResources> running_;
  std::vector<kvgpu::testing::CheckpointRecord> checkpoint_entries_;
  std::unique_ptr<deviceplugin::Daemon> daemon_;
  std::chrono::steady_clock::time_point allocated_at_;
};

INSTANTIATE_TEST_SUITE_P(Backends, PluginVmTest, ::testing::Values("sysfs", "libvirt"),
                         [](const auto& backend) { return backend.param; });

TEST_P(PluginVmTest, APodsVgpuIsMadeThroughTheBackendShownByLibvirtAndGoesWithThePod) {
  std::string vgpu = RunPod("uid-1", "a");
  ASSERT_TRUE(mdev::IsValidUuid(vgpu));
  std::set<std::string> want = {vgpu, persistent_};
  EXPECT_EQ(Kernel(), want);
  // libvirt's own tools show exactly the vGPUs there are, whichever backend made them.
  EXPECT_TRUE(
      Eventually([&] { return VirshMdevs(Env("KVGPU_LIBVIRT_URI")) == want; }, kLabEventDeadline));

  DeletePod("a");
  EXPECT_TRUE(Eventually([&] { return !Kernel().contains(vgpu); }, kLabEventDeadline))
      << "the vGPU outlived its pod";
  want = {persistent_};
  EXPECT_TRUE(
      Eventually([&] { return VirshMdevs(Env("KVGPU_LIBVIRT_URI")) == want; }, kLabEventDeadline));
  EXPECT_EQ(Kernel(), want) << "the persistent mdev is someone else's: never removed";
}

class LibvirtPluginVmTest : public PluginVmTest {};
INSTANTIATE_TEST_SUITE_P(Backend, LibvirtPluginVmTest, ::testing::Values("libvirt"),
                         [](const auto& backend) { return backend.param; });

// libvirtd goes away while a pod ends: the removal waits for it (nothing is removed behind its
// back, no decision is taken on a stale view), and happens once it is back.
TEST_P(LibvirtPluginVmTest, ARemovalWhileLibvirtdIsAwayHappensWhenItIsBack) {
  std::string vgpu = RunPod("uid-1", "a");
  ASSERT_TRUE(mdev::IsValidUuid(vgpu));
  ProcessResult stop = RunProcess({Env("KVGPU_LIBVIRT_LAB"), "stop-libvirtd"});
  ASSERT_EQ(stop.exit_code, 0) << stop.err;
  DeletePod("a");
  // The daemon has seen libvirtd go (a rescan's work, late on a loaded machine)...
  EXPECT_TRUE(Eventually(
      [&] {
        return daemon_->metrics().Render().find(
                   "kvgpu_deviceplugin_backend_connected{backend=\"libvirt\"} 0") !=
               std::string::npos;
      },
      kLabEventDeadline))
      << daemon_->metrics().Render();
  // ...and the settle time of the allocation is past (until then the vGPU is kept whatever
  // happens), then several lifecycle passes and rescans: only libvirtd's absence keeps it now. A
  // slow machine makes fewer passes, which can only let a removal go unseen, never fail this.
  std::this_thread::sleep_until(
      std::max(allocated_at_ + kSettle, std::chrono::steady_clock::now()) + 2s);
  EXPECT_TRUE(Kernel().contains(vgpu)) << "removed behind libvirt's back";

  ProcessResult start = RunProcess({Env("KVGPU_LIBVIRT_LAB"), "start-libvirtd"});
  ASSERT_EQ(start.exit_code, 0) << start.err;
  EXPECT_TRUE(Eventually([&] { return !Kernel().contains(vgpu); }, kLabEventDeadline))
      << "not removed after libvirtd came back";
  EXPECT_TRUE(Kernel().contains(persistent_));
  EXPECT_TRUE(Eventually(
      [&] {
        return daemon_->metrics().Render().find(
                   "kvgpu_deviceplugin_backend_connected{backend=\"libvirt\"} 1") !=
               std::string::npos;
      },
      kLabEventDeadline));
}

// libvirtd is away when the daemon starts: it starts anyway (a DaemonSet must not crash-loop),
// serves health, advertises nothing and says so in its metrics; once libvirtd is back, its
// rescans reach it and kubelet gets the devices.
TEST_P(LibvirtPluginVmTest, LibvirtdAwayAtStartIsWaitedForNotFatal) {
  daemon_->Stop();
  daemon_.reset();
  ProcessResult stop = RunProcess({Env("KVGPU_LIBVIRT_LAB"), "stop-libvirtd"});
  ASSERT_EQ(stop.exit_code, 0) << stop.err;
  ASSERT_TRUE(kubelet_.Restart());  // forget the first daemon's registrations
  StartDaemon();
  ASSERT_TRUE(daemon_) << "the daemon did not start with libvirtd away";
  EXPECT_TRUE(daemon_->manager().Resources().empty());
  EXPECT_NE(daemon_->metrics().Render().find(
                "kvgpu_deviceplugin_backend_connected{backend=\"libvirt\"} 0"),
            std::string::npos);

  ProcessResult start = RunProcess({Env("KVGPU_LIBVIRT_LAB"), "start-libvirtd"});
  ASSERT_EQ(start.exit_code, 0) << start.err;
  EXPECT_TRUE(
      kubelet_.WaitUntil([&] { return !kubelet_.Devices(kResource).empty(); }, kLabEventDeadline))
      << "libvirtd came back, but kubelet got no devices";
  EXPECT_TRUE(Kernel().contains(persistent_));
}

}  // namespace
}  // namespace kvgpu::vmtest
