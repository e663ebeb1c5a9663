// The node daemon against peers that hang rather than refuse: a kubelet whose sockets accept and
// never answer (registration and PodResources), and an API server that takes the state patch and
// never answers. No peer may delay health, rescans, other resources or shutdown; a working
// kubelet that replaces a hung one gets every resource within 5 s. And against peers that lie:
// names that would forge log lines never reach a log line as they came.
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include "common/log_safe.h"
#include "deviceplugin/daemon.h"
#include "fakes/apiserver/in_memory_kube.h"
#include "fakes/common/eventually.h"
#include "fakes/common/http_request.h"
#include "fakes/common/hung_socket.h"
#include "fakes/common/sim_daemon_options.h"
#include "fakes/common/sim_node.h"
#include "fakes/kubelet/fake_kubelet.h"
#include "fakes/podresources/checkpoint_writer.h"
#include "fakes/podresources/fake_podresources.h"

namespace kvgpu::deviceplugin {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using kvgpu::testing::Eventually;
using kvgpu::testing::HungSocket;

// An API server that takes every request and never answers; only the caller's Canceller ends one.
class HungApi : public kube::ApiTransport {
 public:
  Result<nlohmann::json> Get(const std::string&, kube::Canceller* cancel) override {
    return Hang(cancel);
  }
  Result<nlohmann::json> Post(const std::string&, const nlohmann::json&,
                              kube::Canceller* cancel) override {
    return Hang(cancel);
  }
  Result<nlohmann::json> Patch(const std::string&, const nlohmann::json&, const std::string&,
                               kube::Canceller* cancel) override {
    return Hang(cancel);
  }
  Status Stream(const std::string&, std::chrono::milliseconds, const std::function<void()>&,
                const std::function<bool(std::string_view)>&, kube::Canceller* cancel) override {
    return Hang(cancel).status();
  }
  int hanging() {
    std::lock_guard lock(mutex_);
    return hanging_;
  }

 private:
  Result<nlohmann::json> Hang(kube::Canceller* cancel) {
    bool broken = false;  // guarded by mutex_
    // Armed before mutex_ is taken: the hook takes mutex_ under the canceller's own lock.
    if (cancel != nullptr && !cancel->Arm([&] {
          std::lock_guard inner(mutex_);
          broken = true;
          changed_.notify_all();
        })) {
      return Status::Error(ErrorCode::kCancelled, "cancelled");
    }
    // Without a canceller the call would hang for good: that is the bug this test looks for,
    // so it is bounded here only to let the test end and fail.
    std::unique_lock lock(mutex_);
    ++hanging_;
    changed_.wait_for(lock, 60s, [&] { return broken; });
    --hanging_;
    lock.unlock();
    if (cancel != nullptr) cancel->Disarm();
    return Status::Error(broken ? ErrorCode::kCancelled : ErrorCode::kTransport, "hung");
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  int hanging_ = 0;
};

class HungPeersTest : public ::testing::Test {
 protected:
  HungPeersTest() : sim_("t4x2"), plugin_dir_(sim_.dir() / "kubelet" / "device-plugins") {
    std::filesystem::create_directories(plugin_dir_);
    std::filesystem::create_directories(sim_.dir() / "kubelet" / "pod-resources");
  }

  void StartDaemon() {
    DaemonOptions options = testing::SimDaemonOptions(sim_);
    options.args.metrics_addr = "127.0.0.1:0";
    options.args.node_readiness_check = false;
    options.config.rescan_interval = 200ms;
    options.config.scheduler_state.publish = true;
    options.config.scheduler_state.min_interval = 50ms;
    options.pods = &pods_;
    options.events = &events_;
    options.api = &api_;
    options.register_timeout = 2000ms;  // the deployed value
    daemon_ = std::make_unique<Daemon>(options);
    Status started = daemon_->Start();
    ASSERT_TRUE(started.ok()) << started.ToString();
    pods_.Sync({});
  }
  void TearDown() override {
    if (daemon_) daemon_->Stop();
  }

  std::string Healthz() {
    return kvgpu::testing::HttpRequest(daemon_->metrics().Ports().at(0), "GET", "/healthz");
  }
  uint32_t Available(const std::string& resource) {
    auto counts = daemon_->manager().Counts();
    auto it = counts.find(resource);
    return it == counts.end() ? 0 : it->second.available;
  }

  kvgpu::testing::SimNode sim_;
  std::filesystem::path plugin_dir_;
  kvgpu::testing::InMemoryPodWatcher pods_;
  kvgpu::testing::RecordingEventRecorder events_;
  HungApi api_;
  std::unique_ptr<Daemon> daemon_;
};

// kubelet.sock, the PodResources socket and the API server all hang. Health stays 200 throughout,
// a vGPU someone else makes shows in the counts while every call to them hangs, and Stop (with a
// state patch and PodResources Lists in flight) ends within 5 s.
TEST_F(HungPeersTest, HungKubeletAndApiServerHoldUpNeitherHealthNorRescansNorShutdown) {
  HungSocket kubelet(plugin_dir_ / "kubelet.sock");
  HungSocket podresources(sim_.dir() / "kubelet" / "pod-resources" / "kubelet.sock");
  StartDaemon();
  ASSERT_TRUE(Eventually([&] { return kubelet.accepted() >= 1 && api_.hanging() >= 1; }))
      << "the registration and the state patch reach their hung peers";

  const std::string resource = "tencent.com/vgpu-222";
  const uint32_t before = Available(resource);
  ASSERT_GT(before, 0u);
  auto made = sim_.node().Create({sim_.gpu(0), "nvidia-222", std::nullopt});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const auto created = Clock::now();
  EXPECT_TRUE(Eventually([&] { return Available(resource) < before; }))
      << "a foreign vGPU should show at the next rescan (200 ms), whatever kubelet does";
  // A rescan held by a hung peer waits out the API client's 30 s or the hung peers' 60 s; the
  // bound is far from those and from the 200 ms it takes on a quiet machine.
  EXPECT_LT(Clock::now() - created, 10s);

  // Several register timeouts (2 s) and PodResources deadlines (5 s) pass: health never flaps.
  for (auto until = Clock::now() + 6s; Clock::now() < until;) {
    std::string answer = Healthz();
    ASSERT_TRUE(answer.starts_with("HTTP/1.1 200 ")) << answer;
    std::this_thread::sleep_for(250ms);
  }

  const auto stopping = Clock::now();
  daemon_->Stop();
  daemon_.reset();
  EXPECT_LT(Clock::now() - stopping, 5s) << "shutdown waited for a hung peer";
  EXPECT_EQ(api_.hanging(), 0) << "the state patch in flight was cancelled";
}

// A working kubelet replaces a hung one (kubelet.sock created anew): every resource is registered
// within 5 s, though the calls to the hung one were made with the 2 s timeout and are still open.
TEST_F(HungPeersTest, AWorkingKubeletAfterAHungOneHasEveryResourceWithinFiveSeconds) {
  HungSocket hung(plugin_dir_ / "kubelet.sock");
  StartDaemon();
  ASSERT_TRUE(Eventually([&] { return hung.accepted() >= 1; }));
  hung.Unlink();
  kvgpu::testing::FakeKubelet kubelet(plugin_dir_);
  ASSERT_TRUE(kubelet.Start());
  const auto appeared = Clock::now();
  const size_t resources = daemon_->manager().Resources().size();
  EXPECT_TRUE(Eventually([&] { return daemon_->Registered().size() == resources; }, 5s))
      << daemon_->Registered().size() << " of " << resources << " registered within 5 s";
  EXPECT_LT(Clock::now() - appeared, 5s);
  EXPECT_TRUE(kubelet.WaitUntil([&] { return kubelet.ConnectedResources().size() == resources; }));
  daemon_->Stop();
  kubelet.Stop();
}

// Pod, namespace and container names from kubelet, its checkpoint and the API server, each with a
// newline and a made-up log line after it, run through a whole pod lifecycle (allocate, owner
// learned and announced, pod gone, vGPU removed, Events). No line the daemon logs may hold a
// control character: every peer-supplied name was escaped where it entered.
TEST(LyingPeersTest, NoPeerSuppliedNameForgesALogLine) {
  // The sink is added before anything that logs runs, and taken away after all of it is gone:
  // the logger's sink list is not safe to change while other threads log.
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(4096);
  spdlog::default_logger()->sinks().push_back(sink);
  const auto level = spdlog::get_level();
  spdlog::set_level(spdlog::level::debug);
  {
    kvgpu::testing::SimNode sim("t4x2");
    const auto kubelet_dir = sim.dir() / "kubelet";
    std::filesystem::create_directories(kubelet_dir / "pod-resources");
    kvgpu::testing::FakeKubelet kubelet(kubelet_dir / "device-plugins");
    kvgpu::testing::FakePodResources podresources(kubelet_dir / "pod-resources" / "kubelet.sock");
    kvgpu::testing::CheckpointWriter checkpoint(kubelet_dir);
    kvgpu::testing::InMemoryPodWatcher pods;
    kvgpu::testing::RecordingEventRecorder events;
    ASSERT_TRUE(kubelet.Start());
    ASSERT_TRUE(podresources.Start());

    DaemonOptions options = testing::SimDaemonOptions(sim);
    options.args.node_readiness_check = false;
    options.config.rescan_interval = 100ms;
    options.config.lifecycle.grace_period = 0ms;
    options.config.lifecycle.poll_interval = 200ms;
    options.pods = &pods;
    options.events = &events;
    options.settle = 200ms;
    Daemon daemon(options);
    ASSERT_TRUE(daemon.Start().ok());
    pods.Sync({});
    const std::string resource = "tencent.com/vgpu-222";
    ASSERT_TRUE(kubelet.WaitUntil([&] { return kubelet.Devices(resource).size() == 32; }));

    const std::string forged = "\n2026-11-27 06:00:00.000 [info] vgpu removed by admin";
    const std::string name = "evil" + forged, ns = "ml" + forged, uid = "uid" + forged;
    const std::string id = sim.gpu(0) + "-nvidia-222-0";
    v1beta1::AllocateResponse response;
    ASSERT_TRUE(kubelet.Allocate(resource, {{id}}, &response).ok());
    podresources.SetPods({{ns, name, {{"main" + forged, {{resource, {id}}}}}}});
    checkpoint.Write({{uid,
                       "main" + forged,
                       resource,
                       {id},
                       -1,
                       response.container_responses(0).SerializeAsString()}});
    kube::PodInfo pod;
    pod.uid = kvgpu::PeerName(uid);  // as the API client parses it (kube/pod.cpp)
    pod.namespace_name = kvgpu::PeerName(ns);
    pod.name = kvgpu::PeerName(name);
    pod.node_name = "node-1";
    pod.phase = "Running";
    pods.Emit(kube::PodEventType::kAdded, pod);
    EXPECT_TRUE(Eventually([&] {
      auto records = daemon.manager().Snapshot().records;
      return !records.empty() && records[0].owner_pod.has_value();
    })) << "the owner is learned (and announced in the log)";

    podresources.SetPods({});
    pod.deleting = true;
    pods.Emit(kube::PodEventType::kDeleted, pod);
    EXPECT_TRUE(Eventually([&] { return daemon.manager().Snapshot().records.empty(); }))
        << "the pod's vGPU is removed (and the removal logged)";
    daemon.Stop();
  }

  spdlog::set_level(level);
  auto& sinks = spdlog::default_logger()->sinks();
  sinks.erase(std::remove(sinks.begin(), sinks.end(), sink), sinks.end());
  std::vector<std::string> lines = sink->last_formatted();
  ASSERT_FALSE(lines.empty());
  bool mentions_pod = false;
  for (std::string line : lines) {
    if (!line.empty() && line.back() == '\n') line.pop_back();
    mentions_pod = mentions_pod || line.find("evil") != std::string::npos;
    for (char c : line) {
      const auto byte = static_cast<unsigned char>(c);
      ASSERT_TRUE(byte >= 0x20 && byte != 0x7f) << "a control character in a log line: " << line;
    }
  }
  EXPECT_TRUE(mentions_pod) << "the pod's name was logged somewhere (else this proves nothing)";
}

}  // namespace
}  // namespace kvgpu::deviceplugin
