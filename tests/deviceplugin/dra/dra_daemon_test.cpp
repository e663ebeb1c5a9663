// The daemon with config dra naming GPU 0 of a t4x2: the device plugin offers GPU 1 alone, the DRA
// front end registers and prepares on GPU 0 (one mode per GPU, never both); and a daemon that
// cannot reach the API server refuses to start DRA instead of failing every claim later. A node
// whose GPUs all serve DRA is judged ready by its DRA front end (registered, slices published),
// not by the device plugin's resources it does not have.
#include <gtest/gtest.h>

#include "deviceplugin/daemon.h"
#include "fakes/apiserver/fake_apiserver.h"
#include "fakes/apiserver/in_memory_kube.h"
#include "fakes/common/dra_node.h"
#include "fakes/common/eventually.h"
#include "fakes/common/sim_daemon_options.h"
#include "fakes/common/sim_node.h"
#include "fakes/kubelet/dra_test_kubelet.h"
#include "fakes/kubelet/fake_kubelet.h"
#include "fakes/podresources/fake_podresources.h"

namespace kvgpu::deviceplugin {
namespace {

using namespace std::chrono_literals;

TEST(DraDaemonTest, EachGpuIsServedByOneFrontEndOnly) {
  kvgpu::testing::SimNode sim("t4x2");
  const auto kubelet_dir = sim.dir() / "kubelet";
  std::filesystem::create_directories(kubelet_dir / "pod-resources");
  kvgpu::testing::FakeKubelet kubelet(kubelet_dir / "device-plugins");
  kvgpu::testing::FakePodResources podresources(kubelet_dir / "pod-resources" / "kubelet.sock");
  kvgpu::testing::InMemoryPodWatcher pods;
  kvgpu::testing::RecordingEventRecorder events;
  kvgpu::testing::FakeApiServer api_server;
  ASSERT_TRUE(kubelet.Start());
  ASSERT_TRUE(podresources.Start());
  ASSERT_TRUE(api_server.Start());
  auto api = kube::ApiClient::Create(api_server.ClientConfig());
  ASSERT_TRUE(api.ok());

  DaemonOptions options = testing::SimDaemonOptions(sim);
  options.args.node_readiness_check = false;
  options.config.scheduler_state.publish = false;
  options.config.dra.gpus = {sim.gpu(0)};
  options.pods = &pods;
  options.events = &events;
  options.api = api.value().get();
  Daemon daemon(options);
  Status started = daemon.Start();
  ASSERT_TRUE(started.ok()) << started.ToString();
  pods.Sync({});

  const std::string resource = "tencent.com/vgpu-222";
  ASSERT_TRUE(kubelet.WaitUntil([&] { return kubelet.Devices(resource).size() == 16; }));
  for (const auto& [id, health] : kubelet.Devices(resource)) {
    EXPECT_EQ(id.rfind(sim.gpu(1), 0), 0u) << id << " is not on the device plugin's GPU";
  }

  kvgpu::testing::DraTestKubelet dra_kubelet(kubelet_dir);
  auto reg = dra_kubelet.Register(std::string(dra::kDefaultDraDriverName));
  ASSERT_TRUE(reg);
  api_server.SetResourceClaim(
      kvgpu::testing::MakeAllocatedClaim("ns", "c1", "uid-1",
                                         {{"gpu", std::string(dra::kDefaultDraDriverName), "node-1",
                                           kvgpu::testing::DraName(sim.gpu(0), "nvidia-222", 0)}}));
  auto answers = dra_kubelet.Prepare({{"ns", "uid-1", "c1"}});
  ASSERT_EQ(answers["uid-1"].error, "");
  auto vgpus = sim.model().Vgpus();
  ASSERT_EQ(vgpus.size(), 1u);
  EXPECT_EQ(vgpus[0].parent, sim.gpu(0));
  // A device of the device plugin's GPU is not DRA's to prepare.
  api_server.SetResourceClaim(
      kvgpu::testing::MakeAllocatedClaim("ns", "c2", "uid-2",
                                         {{"gpu", std::string(dra::kDefaultDraDriverName), "node-1",
                                           kvgpu::testing::DraName(sim.gpu(1), "nvidia-222", 0)}}));
  EXPECT_NE(dra_kubelet.Prepare({{"ns", "uid-2", "c2"}})["uid-2"].error, "");
  EXPECT_EQ(sim.model().Vgpus().size(), 1u);
  // The device plugin's list is untouched by DRA's vGPU (GPU 0 is not in its view at all).
  EXPECT_EQ(kubelet.Devices(resource).size(), 16u);
  EXPECT_EQ(dra_kubelet.Unprepare({{"ns", "uid-1", "c1"}})["uid-1"], "");
  EXPECT_TRUE(sim.model().Vgpus().empty());
  daemon.Stop();
}

TEST(DraDaemonTest, WithoutAnApiServerDraRefusesToStart) {
  kvgpu::testing::SimNode sim("t4x2");
  std::filesystem::create_directories(sim.dir() / "kubelet" / "pod-resources");
  kvgpu::testing::InMemoryPodWatcher pods;
  kvgpu::testing::RecordingEventRecorder events;
  DaemonOptions options = testing::SimDraDaemonOptions(sim);
  options.pods = &pods;
  options.events = &events;
  Daemon daemon(options);
  Status started = daemon.Start();
  ASSERT_FALSE(started.ok());
  EXPECT_NE(started.message().find("config dra needs the API server"), std::string::npos)
      << started.ToString();
  daemon.Stop();
}

// Every GPU on DRA (the shipped `dra` overlay) with the readiness check on, a DRA kubelet, the
// fake API server for claims and slices, and the node's Events recorded.
class DraReadinessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(kubelet_dir_ / "pod-resources");
    ASSERT_TRUE(kubelet_.Start());
    ASSERT_TRUE(podresources_.Start());
    ASSERT_TRUE(api_server_.Start());
    api_server_.SetNode({{"metadata", {{"name", "node-1"}, {"uid", "node-uid-1"}}}});
    auto api = kube::ApiClient::Create(api_server_.ClientConfig());
    ASSERT_TRUE(api.ok());
    api_ = std::move(api).value();
  }
  void TearDown() override {
    if (daemon_) daemon_->Stop();
  }

  void StartDaemon(std::chrono::milliseconds settle) {
    DaemonOptions options = testing::SimDraDaemonOptions(sim_);
    options.args.node_readiness_check = true;
    options.readiness_interval = 50ms;
    options.dra_settle = settle;
    options.dra_slice_interval = 20ms;
    options.pods = &pods_;
    options.events = &events_;
    options.api = api_.get();
    daemon_ = std::make_unique<Daemon>(options);
    Status started = daemon_->Start();
    ASSERT_TRUE(started.ok()) << started.ToString();
    pods_.Sync({});
  }
  std::string Metrics() { return daemon_->metrics().Render(); }
  bool Shows(const std::string& line) { return Metrics().find(line) != std::string::npos; }
  std::vector<std::string> NodeEvents(const std::string& reason) {
    std::vector<std::string> out;
    for (const auto& e : events_.events()) {
      if (e.pod.kind == "Node" && e.reason == reason) out.push_back(e.message);
    }
    return out;
  }

  kvgpu::testing::SimNode sim_{"t4x2"};
  std::filesystem::path kubelet_dir_ = sim_.dir() / "kubelet";
  kvgpu::testing::FakeKubelet kubelet_{kubelet_dir_ / "device-plugins"};
  kvgpu::testing::FakePodResources podresources_{kubelet_dir_ / "pod-resources" / "kubelet.sock"};
  kvgpu::testing::InMemoryPodWatcher pods_;
  kvgpu::testing::RecordingEventRecorder events_;
  kvgpu::testing::FakeApiServer api_server_;
  std::unique_ptr<kube::ApiClient> api_;
  std::unique_ptr<Daemon> daemon_;
};

// Registered within the settle time and its pool published: ready from the start, with no
// prerequisite the alert (max by (node, frontend, item) (kvgpu_node_prerequisite_missing) == 1)
// could fire on, no device plugin series at all, and no Warning Event. Before the readiness
// check was per front end, this node said "no GPU offers a vGPU type" and was not ready.
TEST_F(DraReadinessTest, ANodeWithAllGpusOnDraIsReadyAndTheAlertStaysQuiet) {
  StartDaemon(std::chrono::minutes(10));
  kvgpu::testing::DraTestKubelet dra_kubelet(kubelet_dir_);
  ASSERT_TRUE(dra_kubelet.Register(std::string(dra::kDefaultDraDriverName)));
  ASSERT_TRUE(kvgpu::testing::Eventually([&] { return !api_server_.resource_slices().empty(); },
                                         std::chrono::seconds(30)));
  ASSERT_TRUE(kvgpu::testing::Eventually(
      [&] { return Shows("kvgpu_frontend_ready{frontend=\"dra\"} 1"); }, std::chrono::seconds(30)))
      << Metrics();
  const std::string metrics = Metrics();
  EXPECT_NE(metrics.find("\nkvgpu_node_ready 1"), std::string::npos) << metrics;
  EXPECT_EQ(metrics.find("frontend=\"device-plugin\""), std::string::npos)
      << "no device plugin front end here";
  for (const char* item : {"kvm", "vhost-vsock", "iommu"}) {
    EXPECT_NE(metrics.find("kvgpu_node_prerequisite_missing{frontend=\"node\",item=\"" +
                           std::string(item) + "\"} 0"),
              std::string::npos)
        << item;
  }
  for (const char* item : {"vgpu", "registration", "slices"}) {
    EXPECT_NE(metrics.find("kvgpu_node_prerequisite_missing{frontend=\"dra\",item=\"" +
                           std::string(item) + "\"} 0"),
              std::string::npos)
        << item << "\n"
        << metrics;
  }
  EXPECT_EQ(NodeEvents("NodeNotReadyForVgpu"), std::vector<std::string>{});
}

// Never registered by kubelet (a wrong --kubelet-dir, a kubelet older than 1.34): once the settle
// time has passed the DRA front end is not ready, and the metrics, the alert's series and the
// Event say so with the reason; registered, it is ready again and says that too.
TEST_F(DraReadinessTest, ADraPluginNotRegisteredIsNotReadyWithTheReason) {
  StartDaemon(200ms);
  ASSERT_TRUE(kvgpu::testing::Eventually(
      [&] {
        return Shows("kvgpu_node_prerequisite_missing{frontend=\"dra\",item=\"registration\"} 1");
      },
      std::chrono::seconds(30)))
      << Metrics();
  EXPECT_TRUE(Shows("\nkvgpu_node_ready 0"));
  EXPECT_TRUE(Shows("kvgpu_frontend_ready{frontend=\"dra\"} 0"));
  ASSERT_TRUE(kvgpu::testing::Eventually([&] { return !NodeEvents("NodeNotReadyForVgpu").empty(); },
                                         std::chrono::seconds(30)));
  const std::string warning = NodeEvents("NodeNotReadyForVgpu").front();
  EXPECT_NE(warning.find("dra not ready"), std::string::npos) << warning;
  EXPECT_NE(warning.find("kubelet has not registered the DRA plugin vgpu.tencent.com"),
            std::string::npos)
      << warning;
  EXPECT_NE(warning.find("plugins_registry/vgpu.tencent.com-reg.sock"), std::string::npos)
      << warning;

  kvgpu::testing::DraTestKubelet dra_kubelet(kubelet_dir_);
  ASSERT_TRUE(dra_kubelet.Register(std::string(dra::kDefaultDraDriverName)));
  ASSERT_TRUE(kvgpu::testing::Eventually([&] { return Shows("\nkvgpu_node_ready 1"); },
                                         std::chrono::seconds(30)))
      << Metrics();
  EXPECT_TRUE(Shows("kvgpu_node_prerequisite_missing{frontend=\"dra\",item=\"registration\"} 0"));
  ASSERT_TRUE(kvgpu::testing::Eventually([&] { return !NodeEvents("NodeReadyForVgpu").empty(); },
                                         std::chrono::seconds(30)));
}

}  // namespace
}  // namespace kvgpu::deviceplugin
