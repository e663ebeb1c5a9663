// Random sequences of what kubelet and the cluster do around the device plugin (admit, delete,
// pods finishing, kubelet restarts, plugin restarts, PodResources failing or answering empty, the
// API server going away), on the kernel model, with the invariants checked after every step:
//   - no vGPU in two live pods' hands;
//   - no live pod's vGPU removed;
//   - no advertised ID refused by Allocate;
//   - no leak once the sources answer again and the lifecycle has run.
// Seeded and reproducible: the plugin's parts run on the test's thread (the lifecycle's passes
// through RunPass, Allocate's rescan synchronously). KVGPU_PROPERTY_SEED and
// KVGPU_PROPERTY_STEPS choose one longer run (the soak, docs/device-plugin.md).
//
// The kubelet here follows upstream's device manager (pkg/kubelet/cm/devicemanager/manager.go):
// before choosing devices it drops the allocations of pods no longer active
// (UpdateAllocatedDevices); it allocates init containers before app containers, one Allocate
// per container, the app container reusing the init container's devices (devicesToReuse); it
// records the allocation in podDevices right after Allocate returns and writes the checkpoint at
// the end of each container's allocation; a failed Allocate fails the pod's admission. Its
// PodResources List reports active pods and their app containers' devices; after a restart it
// restores podDevices from the checkpoint and lists no pods until its sources are ready.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "deviceplugin/lifecycle/holder_tracker.h"
#include "deviceplugin/lifecycle/lifecycle.h"
#include "deviceplugin/model/resource_manager.h"
#include "fakes/apiserver/in_memory_kube.h"
#include "fakes/common/sim_node.h"
#include "fakes/podresources/checkpoint_writer.h"
#include "fakes/podresources/static_podresources.h"
#include "kube/kubelet/checkpoint_watcher.h"

namespace kvgpu::deviceplugin {
namespace {

using namespace std::chrono_literals;
using kvgpu::testing::CheckpointRecord;
using kvgpu::testing::SimNode;

const std::vector<std::string> kResources = {"tencent.com/vgpu-222", "tencent.com/vgpu-223"};

struct PodModel {
  std::string uid;
  std::string name;
  std::string resource;
  bool init_container = false;  // an init container asking for the same resource
  bool admitted = false;
  bool active = false;  // kubelet: admitted and not terminated
  std::string device_id;
  std::set<std::string> vgpus;  // the UUIDs its containers were answered with
};

// The API server's pods on this node, and whether the plugin is following them.
class ApiModel {
 public:
  explicit ApiModel(kvgpu::testing::InMemoryPodWatcher& watcher) : watcher_(watcher) {}

  void Put(const kube::PodInfo& pod, bool added) {
    pods_[pod.uid] = pod;
    if (following_)
      watcher_.Emit(added ? kube::PodEventType::kAdded : kube::PodEventType::kModified, pod);
  }
  void Remove(const std::string& uid) {
    auto it = pods_.find(uid);
    if (it == pods_.end()) return;
    kube::PodInfo pod = it->second;
    pods_.erase(it);
    if (following_) watcher_.Emit(kube::PodEventType::kDeleted, pod);
  }
  void SetFollowing(bool following) {
    if (following == following_) return;
    following_ = following;
    if (following) {
      Resync();
    } else {
      watcher_.SetFollowing(false, "API server gone (test)");
    }
  }
  // A (re)list, as the plugin's watcher does on start and after a gap.
  void Resync() {
    if (!following_) return;
    std::vector<kube::PodInfo> pods;
    for (const auto& [uid, pod] : pods_) pods.push_back(pod);
    watcher_.Sync(pods);
  }
  bool following() const { return following_; }

 private:
  kvgpu::testing::InMemoryPodWatcher& watcher_;
  std::map<std::string, kube::PodInfo> pods_;
  bool following_ = true;
};

// The plugin's parts over one node and one state record; a plugin restart makes them anew.
struct Plugin {
  Plugin(mdev::SysfsBackend& node, StateStore& store, kubelet::PodResourcesSource& podresources,
         const std::filesystem::path& kubelet_dir, kvgpu::testing::InMemoryPodWatcher& pods,
         std::chrono::milliseconds settle)
      : checkpoint(kubelet_dir),
        tracker(&podresources, &checkpoint, &pods, settle),
        manager(node, {}, store, tracker),
        lifecycle(manager, tracker, nullptr, Options(settle)) {
    Status started = manager.Start();
    if (!started.ok()) throw std::runtime_error(started.ToString());
    tracker.Start({});
  }
  ~Plugin() { tracker.Stop(); }
  static LifecycleOptions Options(std::chrono::milliseconds settle) {
    LifecycleOptions options;
    options.grace_period = 0ms;
    options.settle = settle;
    options.retry_initial = 1ms;
    options.retry_max = 1ms;
    return options;
  }

  kubelet::CheckpointWatcher checkpoint;
  HolderTracker tracker;
  ResourceManager manager;
  Lifecycle lifecycle;
};

class World {
 public:
  World(uint32_t seed, std::chrono::milliseconds settle)
      : settle_(settle),
        rng_(seed),
        sim_("t4x2"),
        checkpoint_(kubelet_dir_.path()),
        api_(watcher_) {
    std::filesystem::create_directories(kubelet_dir_.path() / "device-plugins");
    StartPlugin();
  }

  void Step(int step) {
    step_ = step;
    std::uniform_int_distribution<int> pick(0, 99);
    int roll = pick(rng_);
    if (roll < 35) {
      action_ = "admit";
      Admit();
    } else if (roll < 50) {
      action_ = "delete";
      Delete();
    } else if (roll < 56) {
      action_ = "finish";
      Finish();
    } else if (roll < 60) {
      action_ = "API catches up";
      ApiCatchUp();
    } else if (roll < 64) {
      action_ = "kubelet restart";
      RestartKubelet();
    } else if (roll < 68) {
      action_ = "plugin restart";
      RestartPlugin();
    } else if (roll < 73) {
      action_ = "PodResources down";
      podresources_down_ = true;  // hung or failing: the client's deadline makes it an error
    } else if (roll < 80) {
      action_ = "PodResources up";
      podresources_down_ = false;
    } else if (roll < 83) {
      action_ = "API server gone";
      api_.SetFollowing(false);
    } else if (roll < 88) {
      action_ = "API server back";
      api_.SetFollowing(true);
    } else {
      action_ = "lifecycle pass";
    }
    if (restart_quiet_steps_ > 0) --restart_quiet_steps_;
    PublishPodResources();
    plugin_->lifecycle.RunPass();
    CheckInvariants();
  }

  // Every source answers, the API server is followed, the lifecycle runs: nothing of ours may
  // remain that no live pod holds.
  void SettleAndCheckNoLeak() {
    podresources_down_ = false;
    restart_quiet_steps_ = 0;
    api_.SetFollowing(true);
    ApiCatchUp();  // kubelet's status updates land
    PublishPodResources();
    plugin_->lifecycle.RunPass();
    std::this_thread::sleep_for(settle_ + 50ms);  // young vGPUs and a restart's settle time
    for (int i = 0; i < 3; ++i) plugin_->lifecycle.RunPass();
    std::set<std::string> held;
    for (const auto& [uid, pod] : pods_) {
      if (pod.active) held.insert(pod.vgpus.begin(), pod.vgpus.end());
    }
    std::vector<std::string> existing = sim_.model().VgpuIds();
    std::set<std::string> exist(existing.begin(), existing.end());
    EXPECT_EQ(exist, held) << "after settling at step " << step_
                           << ": the kernel's vGPUs are exactly the live pods'";
    CheckInvariants();
  }

  int admitted() const { return admitted_; }
  int refused() const { return refused_; }

 private:
  void StartPlugin() {
    plugin_.reset();
    plugin_ = std::make_unique<Plugin>(sim_.node(), store_, podresources_, kubelet_dir_.path(),
                                       watcher_, settle_);
    api_.Resync();
  }

  std::string NewUid() { return "uid-" + std::to_string(++next_uid_); }

  kube::PodInfo ApiPod(const PodModel& pod, const std::string& phase, bool deleting = false) {
    kube::PodInfo info;
    info.uid = pod.uid;
    info.namespace_name = "default";
    info.name = pod.name;
    info.node_name = "node-1";
    info.phase = phase;
    info.deleting = deleting;
    return info;
  }

  // UpdateAllocatedDevices: allocations of pods no longer active are dropped.
  void CollectInactive() {
    std::erase_if(pod_devices_, [&](const CheckpointRecord& r) {
      auto it = pods_.find(r.pod_uid);
      return it == pods_.end() || !it->second.active;
    });
  }

  void WriteCheckpoint() { checkpoint_.Write(pod_devices_); }

  void Admit() {
    if (restart_quiet_steps_ > 0) return;  // a restarted kubelet admits once plugins registered
    std::uniform_int_distribution<size_t> which(0, kResources.size() - 1);
    PodModel pod;
    pod.uid = NewUid();
    pod.name = "pod-" + pod.uid;
    pod.resource = kResources[which(rng_)];
    pod.init_container = std::bernoulli_distribution(0.3)(rng_);
    api_.Put(ApiPod(pod, "Pending"), true);  // bound by the scheduler before kubelet admits it
    pods_[pod.uid] = pod;
    PodModel& p = pods_[pod.uid];
    p.active = true;  // in kubelet's pod manager (and its List) while it is admitted
    PublishPodResources();
    CollectInactive();
    std::set<std::string> allocated;
    for (const CheckpointRecord& r : pod_devices_) {
      if (r.resource_name == p.resource) allocated.insert(r.device_ids.begin(), r.device_ids.end());
    }
    std::vector<std::string> containers;
    if (p.init_container) containers.push_back("init");
    containers.push_back("main");
    std::vector<std::string> reuse;
    bool ok = true;
    for (const std::string& container : containers) {
      std::vector<std::string> ids = reuse;
      if (ids.empty()) {
        std::vector<std::string> available;
        for (const Device& d : plugin_->manager.Devices(p.resource)) {
          if (d.healthy && !allocated.contains(d.id)) available.push_back(d.id);
        }
        if (available.empty()) {
          ok = false;  // kubelet: requested number of devices unavailable
          break;
        }
        auto preferred = plugin_->manager.PreferredAllocation(p.resource, {{available, {}, 1}});
        ASSERT_TRUE(preferred.ok()) << preferred.status().ToString();
        std::string chosen = available.front();
        if (!preferred->at(0).empty()) {
          chosen = preferred->at(0).front();
          EXPECT_NE(std::find(available.begin(), available.end(), chosen), available.end())
              << "step " << step_ << ": preferred allocation outside the available list";
        }
        ids = {chosen};
      }
      auto answer = plugin_->manager.Allocate(p.resource, {ids});
      if (!answer.ok()) {
        EXPECT_NE(answer.status().code(), ErrorCode::kInvalid)
            << "step " << step_ << ": an advertised ID was refused: " << answer.status().ToString();
        ok = false;
        break;
      }
      // podDevices.insert right after Allocate returns, then the checkpoint.
      pod_devices_.push_back({p.uid, container, p.resource, ids, -1, ""});
      WriteCheckpoint();
      p.device_id = ids.front();
      p.vgpus.insert(answer->at(0).vgpus.at(0).vgpu_id);
      reuse = container == "init" ? ids : std::vector<std::string>{};
    }
    if (!ok) {
      // UnexpectedAdmissionError: the pod fails; kubelet is done with it.
      p.active = false;
      p.vgpus.clear();
      ++refused_;
      api_.Put(ApiPod(p, "Failed"), false);
      return;
    }
    p.admitted = true;
    ++admitted_;
    api_.Put(ApiPod(p, "Running"), false);
  }

  PodModel* RandomLivePod() {
    std::vector<PodModel*> live;
    for (auto& [uid, pod] : pods_) {
      if (pod.active) live.push_back(&pod);
    }
    if (live.empty()) return nullptr;
    std::uniform_int_distribution<size_t> which(0, live.size() - 1);
    return live[which(rng_)];
  }

  // The API marks the pod deleting; kubelet stops it and lets go; the object goes.
  void Delete() {
    PodModel* pod = RandomLivePod();
    if (pod == nullptr) return;
    api_.Put(ApiPod(*pod, "Running", true), false);
    pod->active = false;
    api_.Remove(pod->uid);
  }

  // The pod's containers exit: kubelet is done with it at once; the API server learns the phase
  // only when kubelet's status update lands (ApiCatchUp).
  void Finish() {
    PodModel* pod = RandomLivePod();
    if (pod == nullptr) return;
    pod->active = false;
    finished_unreported_.insert(pod->uid);
  }

  void ApiCatchUp() {
    for (const std::string& uid : finished_unreported_) {
      api_.Put(ApiPod(pods_[uid], "Succeeded"), false);
    }
    finished_unreported_.clear();
  }

  void RestartKubelet() {
    // podDevices come back from the checkpoint; the pods keep running; the registration
    // callback writes the checkpoint again; PodResources lists nothing until the sources are
    // ready. The plugin notices through kubelet.sock (the daemon calls KubeletRestarted).
    plugin_->tracker.KubeletRestarted("kubelet restarted (test)");
    restart_quiet_steps_ = std::uniform_int_distribution<int>(1, 4)(rng_);
    WriteCheckpoint();
  }

  void RestartPlugin() { StartPlugin(); }

  void PublishPodResources() {
    podresources_.SetDown(podresources_down_);
    std::vector<kubelet::PodResources> listed;
    if (restart_quiet_steps_ == 0) {
      for (const auto& [uid, pod] : pods_) {
        if (!pod.active) continue;
        kubelet::PodResources entry{"default", pod.name, {{"main", {}}}};
        if (pod.admitted) entry.containers[0].devices.push_back({pod.resource, {pod.device_id}});
        listed.push_back(entry);
      }
    }
    podresources_.SetPods(listed);
  }

  void CheckInvariants() {
    std::vector<std::string> existing = sim_.model().VgpuIds();
    std::set<std::string> exist(existing.begin(), existing.end());
    std::map<std::string, std::string> holder;  // vGPU -> pod
    for (const auto& [uid, pod] : pods_) {
      if (!pod.active || !pod.admitted) continue;
      for (const std::string& vgpu : pod.vgpus) {
        auto [it, inserted] = holder.emplace(vgpu, uid);
        EXPECT_TRUE(inserted) << "step " << step_ << " (" << action_ << "): vGPU " << vgpu
                              << " held by " << it->second << " and " << uid;
        EXPECT_TRUE(exist.contains(vgpu)) << "step " << step_ << " (" << action_ << "): live pod "
                                          << uid << " lost its vGPU " << vgpu;
      }
      bool listed = false;
      for (const Device& d : plugin_->manager.Devices(pod.resource))
        listed |= d.id == pod.device_id;
      EXPECT_TRUE(listed) << "step " << step_ << ": live pod " << uid << "'s device "
                          << pod.device_id << " no longer advertised";
    }
  }

  std::chrono::milliseconds settle_;
  std::mt19937 rng_;
  SimNode sim_;
  kvgpu::testing::TempDir kubelet_dir_;
  kvgpu::testing::CheckpointWriter checkpoint_;
  kvgpu::testing::InMemoryPodWatcher watcher_;
  ApiModel api_;
  kvgpu::testing::StaticPodResources podresources_;
  MemoryStateStore store_;
  std::unique_ptr<Plugin> plugin_;

  std::map<std::string, PodModel> pods_;
  std::vector<CheckpointRecord> pod_devices_;  // kubelet's podDevices, as checkpointed
  std::set<std::string> finished_unreported_;
  bool podresources_down_ = false;
  int restart_quiet_steps_ = 0;
  int next_uid_ = 0;
  int step_ = 0;
  std::string action_;
  int admitted_ = 0;
  int refused_ = 0;
};

// `settle` 0 makes every verdict independent of the clock: the run is the same each time. With
// a settle time, which steps fall inside it depends on the machine's pace; the action sequence
// is still the seed's, and the invariants must hold either way.
void RunSeed(uint32_t seed, int steps, std::chrono::milliseconds settle) {
  SCOPED_TRACE("seed " + std::to_string(seed) + " settle " + std::to_string(settle.count()) +
               " ms (KVGPU_PROPERTY_SEED=" + std::to_string(seed) +
               " KVGPU_PROPERTY_STEPS=" + std::to_string(steps) + " KVGPU_PROPERTY_SETTLE_MS=" +
               std::to_string(settle.count()) + " repeats the sequence)");
  World world(seed, settle);
  const bool failed_before = ::testing::Test::HasFailure();
  for (int step = 1; step <= steps && (failed_before || !::testing::Test::HasFailure()); ++step) {
    world.Step(step);
    if (step % 100 == 0) world.SettleAndCheckNoLeak();
  }
  world.SettleAndCheckNoLeak();
  std::cout << "seed " << seed << " settle " << settle.count() << " ms: " << steps << " steps, "
            << world.admitted() << " pods admitted, " << world.refused()
            << " refused (GPU locked or full)\n";
  EXPECT_GT(world.admitted(), 0) << "the run exercised nothing";
}

TEST(KubeletPropertyTest, InvariantsHoldOverRandomKubeletActions) {
  if (const char* seed = std::getenv("KVGPU_PROPERTY_SEED")) {
    const char* steps = std::getenv("KVGPU_PROPERTY_STEPS");
    const char* settle = std::getenv("KVGPU_PROPERTY_SETTLE_MS");
    RunSeed(static_cast<uint32_t>(std::strtoul(seed, nullptr, 10)),
            steps != nullptr ? std::atoi(steps) : 1000,
            std::chrono::milliseconds(settle != nullptr ? std::atoi(settle) : 0));
    return;
  }
  for (uint32_t seed : {1u, 2u, 3u}) RunSeed(seed, 300, 0ms);
  for (uint32_t seed : {4u, 5u}) RunSeed(seed, 300, 250ms);
}

}  // namespace
}  // namespace kvgpu::deviceplugin
