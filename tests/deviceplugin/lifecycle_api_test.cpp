// The lifecycle with a real API server client: the daemon follows the node's pods through
// --kubeconfig (HTTPS, bearer token, list + watch) and posts Events, against the fake API
// server; kubelet played by the fakes behind fakes/cluster's FakeNode. What happens to
// vGPUs while the API server is down, compacts its history or cuts the watch.
#include <gtest/gtest.h>

#include <thread>

#include "deviceplugin/daemon.h"
#include "fakes/cluster/fake_node.h"
#include "fakes/common/eventually.h"
#include "fakes/common/sim_node.h"

namespace kvgpu::deviceplugin {
namespace {

using namespace std::chrono_literals;
using kvgpu::testing::Eventually;
using kvgpu::testing::SimNode;

constexpr const char* k222 = "tencent.com/vgpu-222";

class LifecycleApiTest : public ::testing::Test {
 protected:
  LifecycleApiTest() : sim_("t4x2"), node_(sim_.dir() / "kubelet", "node-1") {}

  void SetUp() override {
    auto started = node_.Start();
    ASSERT_TRUE(started.ok()) << started.error;
    node_.WriteKubeconfig(sim_.dir() / "kubeconfig");
    DaemonOptions options;
    options.args.sysfs_root = sim_.model().root();
    options.args.kubelet_dir = sim_.dir() / "kubelet";
    options.args.state_dir = sim_.dir() / "state";
    options.args.node_name = "node-1";
    options.args.kubeconfig = sim_.dir() / "kubeconfig";
    options.config.udev_events = false;
    options.config.rescan_interval = 100ms;
    options.config.lifecycle.grace_period = 0ms;
    options.config.lifecycle.poll_interval = 10s;
    options.io = &sim_.model();
    options.retry_initial = 20ms;
    options.retry_max = 200ms;
    options.settle = 300ms;
    daemon_ = std::make_unique<Daemon>(options);
    Status status = daemon_->Start();
    ASSERT_TRUE(status.ok()) << status.ToString();
    ASSERT_TRUE(node_.WaitForResources(12, 5s));
  }
  void TearDown() override {
    if (daemon_) daemon_->Stop();
  }

  std::string VgpuOf(const std::string& name) {
    auto ids = node_.DevicesOf("default", name, k222);
    if (ids.size() != 1) return "";
    LifecycleSnapshot snapshot = daemon_->manager().Snapshot();
    for (const CreatedVgpu& r : snapshot.records) {
      if (r.device_id == ids[0]) return r.vgpu_id;
    }
    return "";
  }
  bool Exists(const std::string& vgpu) {
    auto ids = sim_.model().VgpuIds();
    return std::find(ids.begin(), ids.end(), vgpu) != ids.end();
  }
  std::vector<std::string> EventReasons(const std::string& pod) {
    std::vector<std::string> out;
    for (const auto& event : node_.api().events()) {
      if (event.value("/involvedObject/name"_json_pointer, "") == pod) {
        out.push_back(event.value("reason", ""));
      }
    }
    return out;
  }
  void RunPod(const std::string& name) {
    auto ran = node_.RunPod("default", name, {{k222, 1}});
    ASSERT_TRUE(ran.ok()) << ran.error;
  }

  SimNode sim_;
  kvgpu::testing::FakeNode node_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(LifecycleApiTest, EventsOnThePodTellItsVgpusStory) {
  RunPod("train");
  std::string vgpu = VgpuOf("train");
  ASSERT_FALSE(vgpu.empty());
  ASSERT_TRUE(Eventually([&] { return !EventReasons("train").empty(); }));
  EXPECT_EQ(EventReasons("train"), std::vector<std::string>{"VgpuCreated"});
  ASSERT_TRUE(node_.DeletePod("default", "train").ok());
  ASSERT_TRUE(Eventually([&] { return !Exists(vgpu); }));
  ASSERT_TRUE(Eventually([&] { return EventReasons("train").size() == 2; }));
  EXPECT_EQ(EventReasons("train"), (std::vector<std::string>{"VgpuCreated", "VgpuRemoved"}));
}

TEST_F(LifecycleApiTest, WithTheApiServerDownKubeletsWordStillFreesEndedPodsAndKeepsLiveOnes) {
  RunPod("live");
  RunPod("ends");
  std::string live = VgpuOf("live");
  std::string ends = VgpuOf("ends");
  ASSERT_TRUE(Eventually([&] { return EventReasons("ends").size() == 1; }));
  node_.StopApiServer();
  ASSERT_TRUE(node_.DeletePod("default", "ends").ok());
  daemon_->lifecycle().Trigger(false);  // no watch event can come; the next poll would
  ASSERT_TRUE(Eventually([&] { return !Exists(ends); }));
  EXPECT_TRUE(Exists(live));
  ASSERT_TRUE(node_.StartApiServer().ok());
  std::this_thread::sleep_for(500ms);  // relisted; the live pod is still there
  daemon_->lifecycle().Trigger(false);
  std::this_thread::sleep_for(200ms);
  EXPECT_TRUE(Exists(live)) << "invariant 1 after the outage";
}

TEST_F(LifecycleApiTest, ACompactedHistoryAndACutWatchStillDeliverThePodsEnd) {
  RunPod("train");
  std::string vgpu = VgpuOf("train");
  ASSERT_TRUE(Eventually([&] { return !EventReasons("train").empty(); }));
  node_.api().Compact();
  node_.api().DropWatches();
  ASSERT_TRUE(node_.DeletePod("default", "train").ok());
  EXPECT_TRUE(Eventually([&] { return !Exists(vgpu); }));
}

}  // namespace
}  // namespace kvgpu::deviceplugin
