// The daemon with config dra naming GPU 0 of a t4x2: the device plugin offers GPU 1 alone, the DRA
// front end registers and prepares on GPU 0 (one mode per GPU, never both); and a daemon that
// cannot reach the API server refuses to start DRA instead of failing every claim later.
#include <gtest/gtest.h>

#include "deviceplugin/daemon.h"
#include "fakes/apiserver/fake_apiserver.h"
#include "fakes/apiserver/in_memory_kube.h"
#include "fakes/common/sim_node.h"
#include "fakes/kubelet/fake_kubelet.h"
#include "fakes/podresources/fake_podresources.h"
#include "tests/deviceplugin/daemon_builders.h"
#include "tests/deviceplugin/dra/dra_test_kubelet.h"
#include "tests/deviceplugin/dra/dra_test_stack.h"

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

}  // namespace
}  // namespace kvgpu::deviceplugin
