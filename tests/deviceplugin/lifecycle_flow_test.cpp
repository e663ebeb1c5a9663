// The lifecycle inside the whole daemon: kubelet's device plugin calls, its PodResources API
// (gRPC over a unix socket) and checkpoint file played by the fakes, the API server's pods by an
// in-memory watcher. Pods come and go; the vGPUs follow them (invariants 1, 2 and 4).
#include <gtest/gtest.h>

#include <thread>

#include "deviceplugin/daemon.h"
#include "fakes/apiserver/in_memory_kube.h"
#include "fakes/common/eventually.h"
#include "fakes/common/sim_daemon_options.h"
#include "fakes/common/sim_node.h"
#include "fakes/kubelet/fake_kubelet.h"
#include "fakes/podresources/checkpoint_writer.h"
#include "fakes/podresources/fake_podresources.h"

namespace kvgpu::deviceplugin {
namespace {

using namespace std::chrono_literals;
using kvgpu::testing::Eventually;
using kvgpu::testing::SimNode;

constexpr const char* k222 = "tencent.com/vgpu-222";
constexpr const char* k223 = "tencent.com/vgpu-223";

size_t Healthy(const std::map<std::string, std::string>& devices) {
  size_t n = 0;
  for (const auto& [id, health] : devices) n += health == "Healthy" ? 1u : 0u;
  return n;
}

kube::PodInfo Pod(const std::string& uid, const std::string& name, bool deleting = false) {
  kube::PodInfo pod;
  pod.uid = uid;
  pod.namespace_name = "default";
  pod.name = name;
  pod.node_name = "node-1";
  pod.phase = "Running";
  pod.deleting = deleting;
  return pod;
}

class LifecycleFlowTest : public ::testing::Test {
 protected:
  LifecycleFlowTest()
      : sim_("t4x2"),
        kubelet_(sim_.dir() / "kubelet" / "device-plugins"),
        podresources_(sim_.dir() / "kubelet" / "pod-resources" / "kubelet.sock"),
        checkpoint_(sim_.dir() / "kubelet") {}

  void SetUp() override {
    std::filesystem::create_directories(sim_.dir() / "kubelet" / "pod-resources");
    ASSERT_TRUE(kubelet_.Start());
    ASSERT_TRUE(podresources_.Start());
    StartDaemon();
    pods_.Sync({});
  }
  void TearDown() override {
    if (daemon_) daemon_->Stop();
  }

  void StartDaemon() {
    DaemonOptions options = testing::SimDaemonOptions(sim_);
    options.config.rescan_interval = 100ms;
    options.config.lifecycle.grace_period = 0ms;
    options.config.lifecycle.poll_interval = poll_interval_;
    options.retry_initial = 20ms;
    options.retry_max = 200ms;
    options.pods = &pods_;
    options.events = &events_;
    // Long enough that a pass between Allocate and kubelet's records cannot take the vGPU.
    options.settle = settle_;
    daemon_ = std::make_unique<Daemon>(options);
    Status started = daemon_->Start();
    ASSERT_TRUE(started.ok()) << started.ToString();
    ASSERT_TRUE(kubelet_.WaitUntil([&] { return Healthy(kubelet_.Devices(k222)) == 32; }));
  }

  // What kubelet does to run a pod: Allocate, then record it in PodResources and the
  // checkpoint; the API server has the pod Running.
  std::string RunPod(const std::string& uid, const std::string& name, const std::string& id) {
    v1beta1::AllocateResponse response;
    grpc::Status status = kubelet_.Allocate(k222, {{id}}, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    if (!status.ok()) return "";
    std::string vgpu = response.container_responses(0).envs().at("KVGPU_VGPU_222_UUIDS");
    running_.push_back({"default", name, {{"main", {{k222, {id}}}}}});
    podresources_.SetPods(running_);
    checkpoint_entries_.push_back(
        {uid, "main", k222, {id}, -1, response.container_responses(0).SerializeAsString()});
    checkpoint_.Write(checkpoint_entries_);
    pods_.Emit(kube::PodEventType::kAdded, Pod(uid, name));
    return vgpu;
  }
  // What kubelet and the API server do when a pod is deleted: kubelet stops it and lets go,
  // then the API object goes. The checkpoint keeps its entry, as kubelet's does.
  void DeletePod(const std::string& uid, const std::string& name) {
    std::erase_if(running_, [&](const kubelet::PodResources& p) { return p.name == name; });
    podresources_.SetPods(running_);
    pods_.Emit(kube::PodEventType::kDeleted, Pod(uid, name, true));
  }
  bool Exists(const std::string& vgpu) {
    auto ids = sim_.model().VgpuIds();
    return std::find(ids.begin(), ids.end(), vgpu) != ids.end();
  }
  bool HasEvent(const std::string& reason) {
    auto reasons = events_.reasons();
    return std::find(reasons.begin(), reasons.end(), reason) != reasons.end();
  }

  SimNode sim_;
  kvgpu::testing::FakeKubelet kubelet_;
  kvgpu::testing::FakePodResources podresources_;
  kvgpu::testing::CheckpointWriter checkpoint_;
  kvgpu::testing::InMemoryPodWatcher pods_;
  kvgpu::testing::RecordingEventRecorder events_;
  std::vector<kubelet::PodResources> running_;
  std::vector<kvgpu::testing::CheckpointRecord> checkpoint_entries_;
  std::unique_ptr<Daemon> daemon_;
  std::chrono::milliseconds settle_ = 300ms;
  std::chrono::milliseconds poll_interval_ = 10s;  // only triggers may act fast

  void RestartDaemonWithSettle(std::chrono::milliseconds settle) {
    daemon_->Stop();
    daemon_.reset();
    settle_ = settle;
    StartDaemon();
    pods_.Sync({});
  }
};

// No poll at all: only the pod's deletion can set the removal off, so it is proven by the outcome,
// not by a time bound between a trigger and a poll that a loaded machine blurs.
class LifecycleTriggerTest : public LifecycleFlowTest {
 protected:
  LifecycleTriggerTest() { poll_interval_ = std::chrono::hours(1); }
};

TEST_F(LifecycleTriggerTest, APodsVgpuIsRemovedOnItsDeletionAndCapacityComesBack) {
  const std::string id = sim_.gpu(0) + "-nvidia-222-0";
  std::string vgpu = RunPod("uid-1", "train", id);
  ASSERT_TRUE(Exists(vgpu));
  ASSERT_TRUE(Eventually([&] { return HasEvent("VgpuCreated"); }))
      << "the owner is learned soon after Allocate";
  ASSERT_TRUE(kubelet_.WaitUntil([&] { return Healthy(kubelet_.Devices(k223)) == 8; }));

  DeletePod("uid-1", "train");
  ASSERT_TRUE(Eventually([&] { return !Exists(vgpu); }));
  EXPECT_TRUE(kubelet_.WaitUntil([&] { return Healthy(kubelet_.Devices(k223)) == 16; }))
      << "GPU 0 takes other types again";
  EXPECT_TRUE(Eventually([&] { return HasEvent("VgpuRemoved"); }));
}

TEST_F(LifecycleFlowTest, AReusedDeviceIdGetsAFreshVgpuAndALivePodKeepsItsOwn) {
  const std::string id = sim_.gpu(0) + "-nvidia-222-0";
  const std::string other = sim_.gpu(0) + "-nvidia-222-1";
  std::string first = RunPod("uid-1", "a", id);
  std::string kept = RunPod("uid-2", "b", other);
  // Pod a runs for a while (longer than the settle window: allocations moments old count as the
  // same pod asking again), then kubelet lets go of it and hands its device to pod c before the
  // API's deletion arrives.
  std::this_thread::sleep_for(400ms);
  std::erase_if(running_, [](const kubelet::PodResources& p) { return p.name == "a"; });
  podresources_.SetPods(running_);
  std::string second = RunPod("uid-3", "c", id);
  EXPECT_NE(second, first) << "never one vGPU for two pods";
  EXPECT_FALSE(Exists(first));
  EXPECT_TRUE(Exists(second));
  EXPECT_TRUE(Exists(kept)) << "invariant 1";
  EXPECT_EQ(sim_.model().VgpuIds().size(), 2u);
}

// #14 item 1: pod a is deleted a second after admission and kubelet hands its device ID to
// pod b. Age is no holder: b gets a vGPU of its own although a's is only moments old.
TEST_F(LifecycleFlowTest, AnIdHandedOnMomentsAfterItsPodWasDeletedGetsAFreshVgpu) {
  RestartDaemonWithSettle(5s);
  const std::string id = sim_.gpu(0) + "-nvidia-222-0";
  std::string first = RunPod("uid-1", "a", id);
  DeletePod("uid-1", "a");
  std::string second = RunPod("uid-2", "b", id);
  EXPECT_NE(second, first) << "a vGPU handed to another pod";
  EXPECT_FALSE(Exists(first));
  EXPECT_TRUE(Exists(second));
}

// kubelet's devicesToReuse: the init container's device is asked for again by the app container
// of the same pod, after kubelet recorded the init container's allocation in its checkpoint.
TEST_F(LifecycleFlowTest, AnAppContainerGetsItsInitContainersVgpu) {
  RestartDaemonWithSettle(5s);
  const std::string id = sim_.gpu(0) + "-nvidia-222-0";
  pods_.Emit(kube::PodEventType::kAdded, Pod("uid-1", "p"));  // bound before kubelet admits it
  running_.push_back({"default", "p", {{"main", {}}}});       // kubelet lists the pod it admits
  podresources_.SetPods(running_);
  v1beta1::AllocateResponse init;
  ASSERT_TRUE(kubelet_.Allocate(k222, {{id}}, &init).ok());
  checkpoint_entries_.push_back(
      {"uid-1", "init", k222, {id}, -1, init.container_responses(0).SerializeAsString()});
  checkpoint_.Write(checkpoint_entries_);
  v1beta1::AllocateResponse app;
  grpc::Status status = kubelet_.Allocate(k222, {{id}}, &app);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(app.container_responses(0).envs().at("KVGPU_VGPU_222_UUIDS"),
            init.container_responses(0).envs().at("KVGPU_VGPU_222_UUIDS"));
  EXPECT_EQ(sim_.model().VgpuIds().size(), 1u);
}

// #14 item 1: kubelet no longer lists pod a, its checkpoint still names a, and the API server
// is gone: nobody can tell whether a lives, so its vGPU is neither handed on nor removed.
TEST_F(LifecycleFlowTest, WithNeitherKubeletNorTheApiServerAnsweringNothingIsHandedOn) {
  RestartDaemonWithSettle(5s);
  const std::string id = sim_.gpu(0) + "-nvidia-222-0";
  std::string first = RunPod("uid-1", "a", id);
  pods_.SetFollowing(false);
  std::erase_if(running_, [](const kubelet::PodResources& p) { return p.name == "a"; });
  podresources_.SetPods(running_);
  v1beta1::AllocateResponse response;
  grpc::Status status = kubelet_.Allocate(k222, {{id}}, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  EXPECT_EQ(sim_.model().VgpuIds(), std::vector<std::string>{first});
}

// #14 item 2: kubelet restarts (kubelet.sock comes back, the plugin registers again) and its
// PodResources answers, but lists no pods yet. No API server to ask. The live pod's vGPU stays
// until kubelet lists pods again; the vGPU of a pod deleted afterwards then goes.
TEST_F(LifecycleFlowTest, AfterAKubeletRestartNothingIsRemovedUntilItListsPodsAgain) {
  const std::string id = sim_.gpu(0) + "-nvidia-222-0";
  std::string vgpu = RunPod("uid-1", "live", id);
  ASSERT_TRUE(Eventually([&] { return HasEvent("VgpuCreated"); }));
  pods_.SetFollowing(false);
  std::this_thread::sleep_for(2 * settle_);
  size_t registrations = kubelet_.Registrations().size();
  // As kubelet does: its PodResources goes with it, and the restarted one answers with no pods
  // (the fake must not serve the old list after the restart: a pass that saw it took kubelet
  // for back with its pods, and the test then failed on a removal the product was right to make).
  podresources_.Stop();
  ASSERT_TRUE(kubelet_.Restart());
  podresources_.SetPods({});  // restarted: answers, knows no pods yet
  ASSERT_TRUE(podresources_.Start());
  ASSERT_TRUE(kubelet_.WaitUntil([&] {
    return kubelet_.Registrations().size() >= registrations + 2 && kubelet_.Connected(k222);
  }));
  checkpoint_.Write(checkpoint_entries_);  // kubelet rewrites it once plugins registered
  for (int i = 0; i < 3; ++i) {
    daemon_->lifecycle().Trigger(false);
    std::this_thread::sleep_for(2 * settle_);
    ASSERT_TRUE(Exists(vgpu)) << "a live pod's vGPU removed after a kubelet restart";
  }
  podresources_.SetPods(running_);  // kubelet knows its pods again
  daemon_->lifecycle().Trigger(false);
  std::this_thread::sleep_for(2 * settle_);
  EXPECT_TRUE(Exists(vgpu));
  DeletePod("uid-1", "live");
  daemon_->lifecycle().Trigger(false);
  EXPECT_TRUE(Eventually([&] { return !Exists(vgpu); })) << "no leak once kubelet is back";
}

TEST_F(LifecycleFlowTest, APluginRestartKeepsLivePodsVgpusAndCollectsThoseOfPodsGoneMeanwhile) {
  std::string live = RunPod("uid-1", "live", sim_.gpu(0) + "-nvidia-222-0");
  std::string gone = RunPod("uid-2", "gone", sim_.gpu(0) + "-nvidia-222-1");
  ASSERT_TRUE(Eventually([&] { return events_.reasons().size() >= 2; }));
  daemon_->Stop();
  daemon_.reset();
  DeletePod("uid-2", "gone");  // while no plugin runs

  StartDaemon();
  pods_.Sync({Pod("uid-1", "live")});
  ASSERT_TRUE(Eventually([&] { return !Exists(gone); })) << "invariant 2 across restarts";
  std::this_thread::sleep_for(200ms);
  EXPECT_TRUE(Exists(live)) << "invariant 1 across restarts";
  auto devices = kubelet_.Devices(k222);
  EXPECT_EQ(devices.count(sim_.gpu(0) + "-nvidia-222-0"), 1u) << "invariant 4: same ID";
}

TEST_F(LifecycleFlowTest, WhileKubeletIsDownNothingIsRemoved) {
  std::string vgpu = RunPod("uid-1", "train", sim_.gpu(1) + "-nvidia-222-0");
  ASSERT_TRUE(Eventually([&] { return HasEvent("VgpuCreated"); }));
  podresources_.Stop();
  DeletePod("uid-1", "train");  // the API says so, kubelet cannot confirm
  std::this_thread::sleep_for(500ms);
  EXPECT_TRUE(Exists(vgpu)) << "never on the API's word alone";
  ASSERT_TRUE(podresources_.Start());
  daemon_->lifecycle().Trigger(false);
  EXPECT_TRUE(Eventually([&] { return !Exists(vgpu); }));
}

}  // namespace
}  // namespace kvgpu::deviceplugin

namespace kvgpu::deviceplugin {
namespace {

TEST(LifecycleStartTest, AKubeconfigThatDoesNotLoadStopsTheStartWithItsName) {
  SimNode sim("mtty");
  DaemonOptions options = testing::SimDaemonOptions(sim);
  options.args.kubeconfig = sim.dir() / "missing-kubeconfig";
  Daemon daemon(options);
  Status started = daemon.Start();
  ASSERT_FALSE(started.ok());
  EXPECT_NE(started.message().find("--kubeconfig"), std::string::npos) << started.message();
  EXPECT_TRUE(sim.model().VgpuIds().empty());
  EXPECT_FALSE(std::filesystem::exists(options.args.kubelet_dir / "device-plugins"))
      << "nothing served before the configuration is known good";
}

}  // namespace
}  // namespace kvgpu::deviceplugin
