// A scripted life of many pods against the real 6.1 kernel in the VM lab (mtty's shared port
// pool): the real kvgpu-device-plugin runs as a child process over the real sysfs and uevents,
// kubelet's Registration + Allocate, PodResources and checkpoint are the fakes in this process.
// Pods are admitted and deleted, kubelet hands a freed device ID to the next pod, the plugin is
// killed -9 mid-life and started again; in the end the kernel must show exactly the mdevs the
// live pods hold, plus one made behind the plugin's back, which it must never touch.
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "fakes/common/child_process.h"
#include "fakes/common/temp_dir.h"
#include "fakes/kubelet/fake_kubelet.h"
#include "fakes/podresources/checkpoint_writer.h"
#include "fakes/podresources/fake_podresources.h"
#include "tests/vm/lab_support.h"

namespace kvgpu::vmtest {
namespace {

using namespace std::chrono_literals;
using kvgpu::testing::kLabEventDeadline;
using kvgpu::testing::WaitFor;

constexpr const char* kResource = "tencent.com/vgpu-mtty-1";
constexpr const char* kUuidsEnv = "KVGPU_VGPU_MTTY_1_UUIDS";
constexpr const char* kForeign = "0f0e1a2b-0000-4000-8000-00000000f00d";

struct Pod {
  std::string name;
  std::string device_id;
  std::string uuid;
};

class LifecycleVmTest : public LabTest {
 protected:
  void SetUp() override {
    LabTest::SetUp();
    const fs::path kubelet_dir = dir_.path() / "kubelet";
    fs::create_directories(kubelet_dir / "pod-resources");
    fs::create_directories(dir_.path() / "state");
    ASSERT_TRUE(kubelet_.Start());
    ASSERT_TRUE(podresources_.Start());
    std::ofstream(dir_.path() / "plugin.yaml") << "lifecycle:\n"
                                                  "  gracePeriod: 0s\n"
                                                  "  pollInterval: 500ms\n"
                                                  "  retryMax: 1s\n";
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << "--- kvgpu-device-plugin log ---\n" << plugin_.Log();
    plugin_.Kill();
    podresources_.Stop();
    kubelet_.Stop();
    LabTest::TearDown();
  }

  void StartPlugin() {
    const size_t before = kubelet_.Registrations().size();
    ASSERT_TRUE(plugin_.Start()) << plugin_.error();
    const bool ready = WaitFor(
        [&] {
          const auto registrations = kubelet_.Registrations();
          return !plugin_.Running() ||
                 (registrations.size() > before && kubelet_.Connected(kResource) &&
                  kubelet_.Updates(kResource) > 0);
        },
        kLabEventDeadline);
    ASSERT_TRUE(ready && plugin_.Running()) << "the plugin did not register " << kResource;
  }

  // kubelet's choice: the lowest healthy device ID no running pod holds, so a freed ID is
  // handed out again, as kubelet's device manager does.
  void Admit(const std::string& name) {
    std::set<std::string> held;
    for (const Pod& pod : running_) held.insert(pod.device_id);
    std::string id;
    ASSERT_TRUE(WaitFor(
        [&] {
          for (const auto& [candidate, health] : kubelet_.Devices(kResource)) {
            if (health == "Healthy" && !held.contains(candidate)) {
              id = candidate;
              return true;
            }
          }
          return false;
        },
        kLabEventDeadline))
        << "no free healthy device for " << name;
    v1beta1::AllocateResponse response;
    grpc::Status status = kubelet_.Allocate(kResource, {{id}}, &response);
    ASSERT_TRUE(status.ok()) << name << ": " << status.error_message();
    const std::string uuid = response.container_responses(0).envs().at(kUuidsEnv);
    EXPECT_TRUE(fs::exists(kMdevDevices / uuid)) << name << ": the mdev is real";
    reused_ids_ += ever_given_.contains(id) ? 1 : 0;
    ever_given_.insert(id);
    running_.push_back({name, id, uuid});
    checkpoint_records_.push_back({"uid-" + name,
                                   "main",
                                   kResource,
                                   {id},
                                   -1,
                                   response.container_responses(0).SerializeAsString()});
    Publish();
  }

  void Delete(size_t index) {
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
    Publish();
  }

  void Publish() {
    std::vector<kubelet::PodResources> listed;
    for (const Pod& pod : running_) {
      listed.push_back({"default", pod.name, {{"main", {{kResource, {pod.device_id}}}}}});
    }
    checkpoint_.Write(checkpoint_records_);
    podresources_.SetPods(std::move(listed));
  }

  std::set<std::string> Expected() const {
    std::set<std::string> out{kForeign};
    for (const Pod& pod : running_) out.insert(pod.uuid);
    return out;
  }
  std::set<std::string> Actual() const {
    auto uuids = MdevUuids();
    return {uuids.begin(), uuids.end()};
  }

  kvgpu::testing::TempDir dir_;
  kvgpu::testing::FakeKubelet kubelet_{dir_.path() / "kubelet" / "device-plugins"};
  kvgpu::testing::FakePodResources podresources_{dir_.path() / "kubelet" / "pod-resources" /
                                                 "kubelet.sock"};
  kvgpu::testing::CheckpointWriter checkpoint_{dir_.path() / "kubelet"};
  kvgpu::testing::ChildProcess plugin_{
      {KVGPU_DEVICE_PLUGIN_PATH, "--sysfs-root", "/", "--kubelet-dir",
       (dir_.path() / "kubelet").string(), "--state-dir", (dir_.path() / "state").string(),
       "--node-name", "lab", "--config", (dir_.path() / "plugin.yaml").string(),
       // TCG lab VM: no KVM or vsock; the mdev lifecycle is what is under test.
       "--node-readiness-check=false"},
      dir_.path() / "plugin.log"};
  std::vector<Pod> running_;
  std::vector<kvgpu::testing::CheckpointRecord> checkpoint_records_;
  std::set<std::string> ever_given_;
  int reused_ids_ = 0;
};

TEST_F(LifecycleVmTest, TwentyPodsAndAKill9EndWithExactlyTheLivePodsMdevs) {
  // Made before the plugin ever ran: of unknown origin, to be left alone.
  ASSERT_EQ(RawWrite(CreateFile("mtty", "mtty-1"), kForeign), 0);
  ASSERT_NO_FATAL_FAILURE(StartPlugin());

  // 20 pods: admitted in bursts, some deleted at random between bursts; the plugin is killed
  // -9 after the second burst, while deleted pods still have their mdevs.
  std::mt19937 random(5);
  int admitted = 0;
  for (int burst = 0; burst < 4; ++burst) {
    SCOPED_TRACE("burst " + std::to_string(burst));
    for (int i = 0; i < 5; ++i) {
      ASSERT_NO_FATAL_FAILURE(Admit("pod-" + std::to_string(admitted++)));
    }
    for (int deletions = burst == 3 ? 1 : 3; deletions > 0 && !running_.empty(); --deletions) {
      Delete(std::uniform_int_distribution<size_t>(0, running_.size() - 1)(random));
    }
    if (burst == 1) {
      EXPECT_EQ(plugin_.Kill(), 128 + SIGKILL);
      ASSERT_NO_FATAL_FAILURE(StartPlugin());
    }
    // Every live pod's mdev stays through whatever the plugin does meanwhile (invariant 1).
    for (const Pod& pod : running_) {
      EXPECT_TRUE(fs::exists(kMdevDevices / pod.uuid)) << pod.name << " lost its mdev";
    }
  }
  EXPECT_GT(reused_ids_, 0) << "the script must make kubelet hand a freed device ID out again";

  // Fresh allocations are sheltered for the plugin's 5 s settle time; removals follow passes.
  const std::set<std::string> expected = Expected();
  EXPECT_TRUE(WaitFor([&] { return Actual() == expected; }, 5s + kLabEventDeadline))
      << Actual().size() << " mdevs in sysfs, " << expected.size() << " expected";
  std::this_thread::sleep_for(2s);  // and it stays so
  EXPECT_EQ(Actual(), expected);
  EXPECT_TRUE(plugin_.Running());
}

}  // namespace
}  // namespace kvgpu::vmtest
