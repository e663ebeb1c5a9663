// A simulated node end to end: kvgpu-sim mounts the GPUs, the real kvgpu-device-plugin and
// kvgpu-webhook run as separate processes, and the scenario plays scheduler, kubelet and API
// server (fakes/cluster). Each pod goes through the webhook first, as on a cluster.
#include <gtest/gtest.h>
#include <signal.h>

#include <set>
#include <sstream>
#include <thread>

#include "fakes/cluster/daemons.h"
#include "fakes/cluster/fake_node.h"
#include "fakes/cluster/sim_mount.h"
#include "fakes/common/temp_dir.h"

namespace kvgpu::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr const char* kNode = "node-1";
// No uevents come from the simulator: the plugin sees changes by its own rescans. A vGPU goes as
// soon as its pod does.
constexpr const char* kConfig =
    "udevEvents: false\n"
    "rescanInterval: 200ms\n"
    "lifecycle:\n"
    "  gracePeriod: 0s\n"
    "  pollInterval: 200ms\n";
const char* const kT4_1Q = "tencent.com/vgpu-230";
const char* const kT4_2Q = "tencent.com/vgpu-231";
const char* const kT4_4Q = "tencent.com/vgpu-232";
const char* const kA100_4C = "tencent.com/vgpu-692";
const char* const kMtty2 = "tencent.com/vgpu-mtty-2";

::testing::AssertionResult Ok(const StepResult& step) {
  if (step.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << step.error;
}

// One vGPU as <mount>/sim/state shows it.
struct Vgpu {
  std::string id;
  std::string parent;  // the GPU, or the VF of an SR-IOV GPU
  std::string type;
  auto operator<=>(const Vgpu&) const = default;
};

class NodeE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto reason = FuseUnavailableReason()) GTEST_SKIP() << *reason;
  }

  void TearDown() override {
    if (HasFailure()) {
      if (plugin_) std::cerr << "--- plugin log ---\n" << plugin_->process().Log();
      if (webhook_) std::cerr << "--- webhook log ---\n" << webhook_->process().Log();
    }
    // Daemons, then the node they talk to, then the GPUs under them.
    webhook_.reset();
    plugin_.reset();
    node_.reset();
    sim_.reset();
  }

  // kvgpu-sim with `profile`, the node, the plugin (which must register `resources`), the webhook.
  void StartNode(const std::string& profile, size_t resources) {
    resources_ = resources;
    sim_ = std::make_unique<SimMount>(KVGPU_SIM_PATH, profile, dir_.path());
    auto failed = sim_->Mount();
    ASSERT_FALSE(failed) << *failed;
    node_ = std::make_unique<FakeNode>(dir_.path() / "kubelet", kNode);
    auto started = node_->Start();
    ASSERT_TRUE(started.ok()) << started.error;
    plugin_ = std::make_unique<PluginProcess>(KVGPU_DEVICE_PLUGIN_PATH, sim_->mount(),
                                              dir_.path() / "plugin", *node_, kConfig);
    failed = plugin_->Start(*node_, resources);
    ASSERT_FALSE(failed) << *failed;
    webhook_ = std::make_unique<WebhookProcess>(KVGPU_WEBHOOK_PATH, dir_.path() / "webhook");
    failed = webhook_->Start();
    ASSERT_FALSE(failed) << *failed;
  }

  // The pod through the webhook (as the API server does on create), then run by the node.
  StepResult Run(const std::string& name, const std::map<std::string, int>& resources) {
    std::map<std::string, std::string> quantities;
    for (const auto& [resource, count] : resources) quantities[resource] = std::to_string(count);
    nlohmann::json pod = MakePod("team-a", name, "", quantities, "Pending");
    pod["metadata"]["uid"] = nullptr;
    pod["metadata"].erase("uid");
    const auto answer = webhook_->client().Review(pod, "review-" + name);
    if (!answer.ok() || !answer.allowed) return {"webhook: " + answer.error + answer.message};
    return node_->RunPod(ApplyAnswer(pod, answer));
  }

  std::vector<Vgpu> Vgpus() const {
    std::vector<Vgpu> vgpus;
    std::istringstream lines(sim_->State());
    for (std::string line; std::getline(lines, line);) {
      std::istringstream fields(line);
      std::string kind;
      Vgpu vgpu;
      fields >> kind >> vgpu.id >> vgpu.parent >> vgpu.type;
      if (kind == "vgpu") vgpus.push_back(vgpu);
    }
    return vgpus;
  }

  // The GPU a device ID names: its parent (a GPU, a VF, mtty) before "-<type>-<slot>".
  static std::string Parent(const std::string& device_id, const std::string& type) {
    return device_id.substr(0, device_id.find("-" + type + "-"));
  }

  // Every resource's device IDs as the kubelet has them now.
  std::map<std::string, std::set<std::string>> Listed() const {
    std::map<std::string, std::set<std::string>> listed;
    for (const auto& resource : node_->kubelet().ConnectedResources()) {
      listed[resource];  // a resource with no devices left is still there, empty
      for (const auto& [id, health] : node_->kubelet().Devices(resource)) {
        listed[resource].insert(id);
      }
    }
    return listed;
  }

  // For a failure message: the resources whose device IDs differ, with both counts.
  static std::string ListsDiffer(const std::map<std::string, std::set<std::string>>& want,
                                 const std::map<std::string, std::set<std::string>>& got) {
    std::set<std::string> resources;
    for (const auto& [resource, ids] : want) resources.insert(resource);
    for (const auto& [resource, ids] : got) resources.insert(resource);
    std::string out;
    for (const auto& resource : resources) {
      auto w = want.find(resource);
      auto g = got.find(resource);
      if (w != want.end() && g != got.end() && w->second == g->second) continue;
      out += resource + ": wanted " + (w == want.end() ? "-" : std::to_string(w->second.size())) +
             " IDs, kubelet has " + (g == got.end() ? "-" : std::to_string(g->second.size())) +
             "\n";
    }
    return out;
  }

  // Whether every kubelet list shows the NVIDIA GPUs that hold a vGPU locked to its type: no other
  // type offers a device on them any more. Each resource streams on its own, so one list being
  // up to date says nothing about the others.
  bool ListsSettled() const {
    const auto listed = Listed();
    for (const Vgpu& vgpu : Vgpus()) {
      if (!vgpu.type.starts_with("nvidia-")) continue;
      for (const auto& [resource, ids] : listed) {
        for (const auto& id : ids) {
          if (id.starts_with(vgpu.parent + "-") && Parent(id, vgpu.type) == id) return false;
        }
      }
    }
    return true;
  }

  // The plugin keeps a vGPU younger than its settle time (5 s) whatever kubelet says, so a
  // removal can take that long: the deadline leaves a loaded machine 25 s beyond it.
  bool WaitForVgpus(size_t count, std::chrono::milliseconds timeout = kEventDeadline) const {
    return WaitFor([&] { return Vgpus().size() == count; }, timeout);
  }

  TempDir dir_;
  size_t resources_ = 0;
  std::unique_ptr<SimMount> sim_;
  std::unique_ptr<FakeNode> node_;
  std::unique_ptr<PluginProcess> plugin_;
  std::unique_ptr<WebhookProcess> webhook_;
};

TEST_F(NodeE2eTest, PodsShareOneT4ByTypeAndTakeTheOtherForAnotherType) {
  StartNode("t4x2", 12);
  ASSERT_TRUE(Ok(Run("one-1q", {{kT4_1Q, 1}})));
  ASSERT_TRUE(Ok(Run("two-1q", {{kT4_1Q, 2}})));
  const auto first = node_->DevicesOf("team-a", "one-1q", kT4_1Q);
  const auto second = node_->DevicesOf("team-a", "two-1q", kT4_1Q);
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(second.size(), 2u);
  // GetPreferredAllocation packs a type onto the GPU it already locked.
  const std::string locked = Parent(first[0], "nvidia-230");
  for (const auto& id : second) EXPECT_EQ(Parent(id, "nvidia-230"), locked) << id;

  // T4-2Q is withdrawn from the locked GPU, so kubelet can only pick it on the other one.
  ASSERT_TRUE(WaitFor([&] {
    const auto listed = Listed();  // a range-for over Listed()[...] would dangle
    for (const auto& id : listed.at(kT4_2Q)) {
      if (Parent(id, "nvidia-231") == locked) return false;
    }
    return true;
  })) << "T4-2Q still offered on "
      << locked;
  ASSERT_TRUE(Ok(Run("one-2q", {{kT4_2Q, 1}})));
  const auto other = node_->DevicesOf("team-a", "one-2q", kT4_2Q);
  ASSERT_EQ(other.size(), 1u);
  EXPECT_NE(Parent(other[0], "nvidia-231"), locked);

  // The kernel's view: four vGPUs, one type per GPU.
  ASSERT_TRUE(WaitForVgpus(4));
  std::map<std::string, std::set<std::string>> types_per_gpu;
  for (const auto& vgpu : Vgpus()) types_per_gpu[vgpu.parent].insert(vgpu.type);
  EXPECT_EQ(types_per_gpu[locked], std::set<std::string>{"nvidia-230"});
  EXPECT_EQ(types_per_gpu[Parent(other[0], "nvidia-231")], std::set<std::string>{"nvidia-231"});

  // Both GPUs locked: no T4-4Q anywhere, and kubelet says so.
  ASSERT_TRUE(WaitFor([&] { return Listed()[kT4_4Q].empty(); }));
  const auto refused = Run("one-4q", {{kT4_4Q, 1}});
  EXPECT_NE(
      refused.error.find("Requested number of devices unavailable for " + std::string(kT4_4Q)),
      std::string::npos)
      << refused.error;
  EXPECT_EQ(Vgpus().size(), 4u);

  // The T4-2Q pod goes: its GPU is free again, and the T4-4Q pod fits there now.
  ASSERT_TRUE(Ok(node_->DeletePod("team-a", "one-2q")));
  ASSERT_TRUE(WaitForVgpus(3)) << sim_->State();
  ASSERT_TRUE(WaitFor([&] { return !Listed()[kT4_4Q].empty(); }));
  ASSERT_TRUE(Ok(node_->DeletePod("team-a", "one-4q")));  // the Failed one, cleaned up
  const auto fits = Run("one-4q-again", {{kT4_4Q, 1}});
  EXPECT_TRUE(fits.ok()) << fits.error;
  EXPECT_TRUE(WaitForVgpus(4)) << sim_->State();
}

TEST_F(NodeE2eTest, PluginKilledMidScenarioKeepsLivePodsAndIdsAndCleansUpDeletedOnes) {
  // mixed: a T4, an A100 with 20 SR-IOV VFs, mtty.
  StartNode("mixed", 21);
  ASSERT_TRUE(Ok(Run("a100-a", {{kA100_4C, 1}})));
  ASSERT_TRUE(Ok(Run("a100-b", {{kA100_4C, 1}})));
  ASSERT_TRUE(Ok(Run("t4", {{kT4_1Q, 1}})));
  ASSERT_TRUE(Ok(Run("mtty", {{kMtty2, 1}})));
  ASSERT_TRUE(WaitForVgpus(4)) << sim_->State();
  // Settled lists: the allocations' rescans have run.
  ASSERT_TRUE(WaitFor([&] { return Listed()[kT4_2Q].empty(); }));
  const auto vgpus_before = Vgpus();
  const auto listed_before = Listed();
  const auto b_devices = node_->DevicesOf("team-a", "a100-b", kA100_4C);
  ASSERT_EQ(b_devices.size(), 1u);

  EXPECT_EQ(plugin_->process().Kill(), 128 + SIGKILL);
  const size_t registrations = node_->kubelet().Registrations().size();
  ASSERT_TRUE(Ok(node_->DeletePod("team-a", "a100-b")));  // while it is down

  // The resources of the live pods register again (every resource registering again is
  // PluginRestartedWhileGpusAreLockedRegistersEveryResourceAgain).
  auto failed = plugin_->Start(*node_, 1);
  ASSERT_FALSE(failed) << *failed;
  for (const char* resource : {kA100_4C, kT4_1Q, kMtty2}) {
    EXPECT_TRUE(node_->kubelet().WaitUntil([&] {
      return node_->kubelet().Connected(resource) && node_->kubelet().Updates(resource) > 0;
    })) << resource;
  }
  EXPECT_GT(node_->kubelet().Registrations().size(), registrations);

  // Live pods' vGPUs are untouched (same ids, parents, types); the deleted pod's is gone.
  std::set<Vgpu> expected(vgpus_before.begin(), vgpus_before.end());
  const std::string b_vf = Parent(b_devices[0], "nvidia-692");
  std::erase_if(expected, [&](const Vgpu& v) { return v.parent == b_vf; });
  ASSERT_EQ(expected.size(), vgpus_before.size() - 1) << "no vGPU on " << b_vf;
  ASSERT_TRUE(WaitForVgpus(expected.size())) << sim_->State();
  const auto vgpus_after = Vgpus();
  EXPECT_EQ(std::set<Vgpu>(vgpus_after.begin(), vgpus_after.end()), expected) << sim_->State();
  // Device IDs mean the same after the restart: each list is what it was before the kill (the
  // deleted pod's device is free again under the same ID).
  for (const char* resource : {kA100_4C, kT4_1Q, kMtty2}) {
    EXPECT_TRUE(WaitFor([&] { return Listed()[resource] == listed_before.at(resource); }))
        << ListsDiffer({{resource, listed_before.at(resource)}}, {{resource, Listed()[resource]}});
  }
  // And the restarted plugin allocates: another A100 vGPU on a free VF.
  const auto more = Run("a100-c", {{kA100_4C, 1}});
  EXPECT_TRUE(more.ok()) << more.error;
}

TEST_F(NodeE2eTest, PluginRestartedWhileGpusAreLockedRegistersEveryResourceAgain) {
  // Each T4 locked to one type: the other ten types have no device left on this node.
  StartNode("t4x2", 12);
  ASSERT_TRUE(Ok(Run("one-1q", {{kT4_1Q, 1}})));
  ASSERT_TRUE(WaitFor([&] { return Listed()[kT4_2Q].size() == 8; }));
  ASSERT_TRUE(Ok(Run("one-2q", {{kT4_2Q, 1}})));
  ASSERT_TRUE(WaitFor([&] { return Listed()[kT4_4Q].empty() && ListsSettled(); }));
  const auto listed_before = Listed();
  ASSERT_EQ(listed_before.size(), resources_);

  EXPECT_EQ(plugin_->process().Kill(), 128 + SIGKILL);
  // Kubelet must not see resources vanish because the plugin restarted, nor lose the types that
  // come back once a GPU is free: every resource registers again, with the same (empty) list.
  auto failed = plugin_->Start(*node_, resources_);
  EXPECT_FALSE(failed) << *failed;
  EXPECT_TRUE(WaitFor([&] { return Listed() == listed_before; }))
      << ListsDiffer(listed_before, Listed());
}

TEST_F(NodeE2eTest, WebhookRestartedAnswersAgainWithTheSamePatch) {
  StartNode("t4x2", 12);
  const nlohmann::json pod = MakePod("team-a", "p", "", {{kT4_1Q, "1"}}, "Pending");
  const auto first = webhook_->client().Review(pod, "review-1");
  ASSERT_TRUE(first.ok() && first.allowed) << first.error;

  // Killed: the API server's call fails (it would apply the failurePolicy), nothing answers.
  EXPECT_EQ(webhook_->process().Kill(), 128 + SIGKILL);
  const auto while_down = webhook_->client().Review(pod, "review-2");
  EXPECT_FALSE(while_down.ok());
  EXPECT_FALSE(while_down.error.empty());

  // Back on the same port with the same certificate: answered as before.
  auto failed = webhook_->Start();
  ASSERT_FALSE(failed) << *failed;
  const auto again = webhook_->client().Review(pod, "review-3");
  ASSERT_TRUE(again.ok() && again.allowed) << again.error;
  EXPECT_EQ(again.patch, first.patch);

  // A graceful stop (SIGTERM) and start, then a pod through the whole node.
  EXPECT_EQ(webhook_->process().Stop(), 0);
  failed = webhook_->Start();
  ASSERT_FALSE(failed) << *failed;
  const auto ran = Run("after-restarts", {{kT4_1Q, 1}});
  EXPECT_TRUE(ran.ok()) << ran.error;
  EXPECT_TRUE(WaitForVgpus(1)) << sim_->State();
}

TEST_F(NodeE2eTest, KubeletRestartedPluginRegistersAgainWithTheSameDevices) {
  StartNode("t4x2", 12);
  ASSERT_TRUE(Ok(Run("before", {{kT4_1Q, 1}})));
  ASSERT_TRUE(WaitForVgpus(1));
  ASSERT_TRUE(WaitFor([&] { return ListsSettled(); }));
  const auto listed_before = Listed();
  const auto vgpus_before = Vgpus();
  const size_t registrations = node_->kubelet().Registrations().size();

  auto restarted = node_->RestartKubelet();
  ASSERT_TRUE(restarted.ok()) << restarted.error;
  // Every resource registered anew (kubelet cleared the plugin sockets) and lists as before.
  ASSERT_TRUE(WaitFor([&] {
    return node_->kubelet().Registrations().size() >= registrations + resources_ &&
           node_->WaitForResources(resources_, 0ms);
  })) << node_->kubelet().Registrations().size()
      << " registrations";
  EXPECT_TRUE(WaitFor([&] { return Listed() == listed_before; }))
      << ListsDiffer(listed_before, Listed());
  EXPECT_EQ(Vgpus(), vgpus_before);  // the running pod's vGPU is untouched

  // The node keeps working: kubelet remembers "before" holds its device.
  const auto after = Run("after", {{kT4_1Q, 1}});
  ASSERT_TRUE(after.ok()) << after.error;
  EXPECT_NE(node_->DevicesOf("team-a", "after", kT4_1Q),
            node_->DevicesOf("team-a", "before", kT4_1Q));
  EXPECT_TRUE(WaitForVgpus(2)) << sim_->State();
}

TEST_F(NodeE2eTest, PodDeletedDuringAnApiOutageLosesItsVgpuOnceTheApiIsBack) {
  StartNode("t4x2", 12);
  ASSERT_TRUE(Ok(Run("stays", {{kT4_1Q, 1}})));
  ASSERT_TRUE(Ok(Run("goes", {{kT4_1Q, 1}})));
  ASSERT_TRUE(WaitForVgpus(2));

  node_->StopApiServer();
  ASSERT_TRUE(Ok(node_->DeletePod("team-a", "goes")));  // kubelet kills it; nobody can watch
  std::this_thread::sleep_for(500ms);
  auto started = node_->StartApiServer();
  ASSERT_TRUE(started.ok()) << started.error;

  ASSERT_TRUE(WaitForVgpus(1)) << sim_->State();
  const auto stays = node_->DevicesOf("team-a", "stays", kT4_1Q);
  ASSERT_EQ(stays.size(), 1u);
  EXPECT_EQ(Vgpus()[0].parent, Parent(stays[0], "nvidia-230"));
}

}  // namespace
}  // namespace kvgpu::testing
