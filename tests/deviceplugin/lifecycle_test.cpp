// The lifecycle: who holds each vGPU (Judge), when a vGPU of ours goes (PlanPass, the grace
// period) and the lifecycle against the kernel model with kubelet and the API server stood in
// for. Each test names the invariant it defends (ARCHITECTURE.md: 1 never destroy a vGPU a live
// pod uses, 2 never leak one, 3 never touch another's, 4 IDs keep their meaning).
#include "deviceplugin/lifecycle.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <thread>

#include "deviceplugin/holder_tracker.h"
#include "deviceplugin/resource_manager.h"
#include "deviceplugin/state_rebuild.h"
#include "fakes/apiserver/in_memory_kube.h"
#include "fakes/common/sim_node.h"
#include "fakes/podresources/checkpoint_writer.h"
#include "fakes/podresources/static_podresources.h"
#include "kubelet/deviceplugin/v1beta1/api.pb.h"

namespace kvgpu::deviceplugin {
namespace {

using kvgpu::testing::SimNode;
using namespace std::chrono_literals;

const std::string kResource = "tencent.com/vgpu-mtty-2";

CreatedVgpu Record(const std::string& id, int64_t created_unix_ms = 1'000'000) {
  CreatedVgpu r;
  r.device_id = id;
  r.resource = kResource;
  r.vgpu_id = "uuid-" + id;
  r.parent = "mtty";
  r.physical_gpu = "mtty";
  r.type_id = "mtty-2";
  r.created_unix_ms = created_unix_ms;
  return r;
}

kube::PodInfo Pod(const std::string& uid, const std::string& name, const std::string& phase,
                  bool deleting = false) {
  kube::PodInfo pod;
  pod.uid = uid;
  pod.namespace_name = "default";
  pod.name = name;
  pod.node_name = "node-1";
  pod.phase = phase;
  pod.deleting = deleting;
  return pod;
}

kubelet::PodResources PodHolding(const std::string& name, const std::vector<std::string>& ids) {
  return {"default", name, {{"main", {{kResource, ids}}}}};
}

TEST(JudgeTest, DecidesFromKubeletFirstAndNeverOnTheApisWordAlone) {
  const int64_t now = 10'000'000;
  struct Case {
    std::string description;
    std::function<void(HolderFacts&)> facts;
    int64_t created;
    Holding want;
  };
  auto kubelet_up = [](HolderFacts& f) {
    f.kubelet_known = true;
    f.kubelet_up_unix_ms = 1;
  };
  const std::vector<Case> cases = {
      {"kubelet lists a pod with the device: held (invariant 1)",
       [&](HolderFacts& f) {
         kubelet_up(f);
         f.kubelet_holders[{kResource, "d0"}] = "default/a";
       },
       1'000'000, Holding::kHeld},
      {"kubelet lists it though the API says the pod is deleted: held (API's word alone)",
       [&](HolderFacts& f) {
         kubelet_up(f);
         f.kubelet_holders[{kResource, "d0"}] = "default/a";
         f.api_following = true;
       },
       1'000'000, Holding::kHeld},
      {"kubelet not answering: unknown, nothing removed",
       [&](HolderFacts& f) { f.kubelet_problem = "connection refused"; }, 1'000'000,
       Holding::kUnknown},
      {"kubelet answering again only since a moment: unknown",
       [&](HolderFacts& f) {
         f.kubelet_known = true;
         f.kubelet_up_unix_ms = now - 1;
       },
       1'000'000, Holding::kUnknown},
      {"allocated a moment ago, kubelet not yet recording the pod: held",
       [&](HolderFacts& f) { kubelet_up(f); }, now - 1, Holding::kHeld},
      {"kubelet lists nobody, the API shows the checkpoint's pod alive: held",
       [&](HolderFacts& f) {
         kubelet_up(f);
         f.api_following = true;
         f.checkpoint_uids[{kResource, "d0"}] = {"uid-a"};
         f.api_pods["uid-a"] = Pod("uid-a", "a", "Running");
       },
       1'000'000, Holding::kHeld},
      {"the checkpoint's pod has Succeeded: free",
       [&](HolderFacts& f) {
         kubelet_up(f);
         f.api_following = true;
         f.checkpoint_uids[{kResource, "d0"}] = {"uid-a"};
         f.api_pods["uid-a"] = Pod("uid-a", "a", "Succeeded");
       },
       1'000'000, Holding::kFree},
      {"the checkpoint's pod is being deleted and kubelet let go: free",
       [&](HolderFacts& f) {
         kubelet_up(f);
         f.api_following = true;
         f.checkpoint_uids[{kResource, "d0"}] = {"uid-a"};
         f.api_pods["uid-a"] = Pod("uid-a", "a", "Running", true);
       },
       1'000'000, Holding::kFree},
      {"API unreachable: kubelet's word decides (free)",
       [&](HolderFacts& f) {
         kubelet_up(f);
         f.api_following = false;
         f.checkpoint_uids[{kResource, "d0"}] = {"uid-a"};
         f.api_pods["uid-a"] = Pod("uid-a", "a", "Running");
       },
       1'000'000, Holding::kFree},
      {"another resource's device of the same ID does not hold this one",
       [&](HolderFacts& f) {
         kubelet_up(f);
         f.kubelet_holders[{"tencent.com/vgpu-other", "d0"}] = "default/a";
       },
       1'000'000, Holding::kFree},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.description);
    HolderFacts facts;
    c.facts(facts);
    Verdict verdict = Judge(Record("d0", c.created), facts, now, 5s);
    EXPECT_EQ(verdict.holding, c.want) << verdict.why;
  }
}

TEST(JudgeTest, ForAllocateKubeletsBooksAreFinalSoAnEndedPodsVgpuIsNeverHandedOn) {
  const int64_t now = 10'000'000;
  HolderFacts facts;
  facts.kubelet_known = true;
  facts.kubelet_up_unix_ms = now - 1;  // just back: only guards removals
  facts.api_following = true;
  facts.checkpoint_uids[{kResource, "d0"}] = {"uid-a"};
  facts.api_pods["uid-a"] = Pod("uid-a", "a", "Running");  // its Succeeded not yet seen
  EXPECT_EQ(Judge(Record("d0"), facts, now, 5s, Purpose::kRemoval).holding, Holding::kUnknown);
  EXPECT_EQ(Judge(Record("d0"), facts, now, 5s, Purpose::kAllocation).holding, Holding::kFree)
      << "kubelet hands the ID to a new pod: the old vGPU is made anew, not passed on";
  facts.kubelet_holders[{kResource, "d0"}] = "default/a";
  EXPECT_EQ(Judge(Record("d0"), facts, now, 5s, Purpose::kAllocation).holding, Holding::kHeld)
      << "the pod kubelet lists asks again: same vGPU";
  facts.kubelet_holders.clear();
  facts.kubelet_pods.insert("default/a");
  facts.checkpoint_known = true;
  EXPECT_EQ(Judge(Record("d0"), facts, now, 5s, Purpose::kAllocation).holding, Holding::kHeld)
      << "the checkpoint gives it to a pod kubelet and the API both show alive: its app "
         "container asks for its init container's device";
}

// #14 item 1: age never makes a vGPU held for Allocate. Pod a got d0 a second ago and was
// deleted; kubelet hands d0 to pod b: b must get a vGPU of its own.
TEST(JudgeTest, ForAllocateAYoungVgpuOfAPodThatIsGoneIsNotHandedOn) {
  const int64_t now = 10'000'000;
  HolderFacts facts;
  facts.kubelet_known = true;
  facts.kubelet_up_unix_ms = 1;
  facts.checkpoint_known = true;
  facts.api_following = true;
  facts.checkpoint_uids[{kResource, "d0"}] = {"uid-a"};
  facts.api_pods["uid-a"] = Pod("uid-a", "a", "Running", true);  // being deleted
  EXPECT_EQ(Judge(Record("d0", now - 1000), facts, now, 5s, Purpose::kAllocation).holding,
            Holding::kFree)
      << "allocated 1 s ago, its pod deleted: a fresh vGPU for the next pod";
  facts.api_pods.erase("uid-a");
  EXPECT_EQ(Judge(Record("d0", now - 1000), facts, now, 5s, Purpose::kAllocation).holding,
            Holding::kFree)
      << "its pod gone from the API server too";
  facts.api_following = false;
  EXPECT_EQ(Judge(Record("d0", now - 1000), facts, now, 5s, Purpose::kAllocation).holding,
            Holding::kUnknown)
      << "the checkpoint names a pod and nobody can say whether it lives: nothing handed on";
  EXPECT_EQ(Judge(Record("d0", now - 60000), facts, now, 5s, Purpose::kAllocation).holding,
            Holding::kUnknown)
      << "however old: age tells nothing about who asks";
  facts.api_configured = false;
  EXPECT_EQ(Judge(Record("d0", now - 1000), facts, now, 5s, Purpose::kAllocation).holding,
            Holding::kFree)
      << "no API server at all: kubelet's word alone, which no longer lists the old pod";
  facts.checkpoint_uids.clear();
  facts.checkpoint_known = false;
  EXPECT_EQ(Judge(Record("d0", now - 1000), facts, now, 5s, Purpose::kAllocation).holding,
            Holding::kUnknown)
      << "no checkpoint at all: a young vGPU's next container cannot be told from a new pod";
  EXPECT_EQ(Judge(Record("d0", now - 6000), facts, now, 5s, Purpose::kAllocation).holding,
            Holding::kFree);
}

// #14 item 1, removal side: a young vGPU is protected (kubelet records its pod only after
// Allocate returns) until its pod is gone from kubelet and the API server alike.
TEST(JudgeTest, AYoungVgpusProtectionEndsWithItsPodInKubeletAndTheApiServer) {
  const int64_t now = 10'000'000;
  HolderFacts facts;
  facts.kubelet_known = true;
  facts.kubelet_up_unix_ms = 1;
  facts.api_following = true;
  EXPECT_EQ(Judge(Record("d0", now - 1000), facts, now, 5s).holding, Holding::kHeld)
      << "no pod recorded yet: protected";
  facts.checkpoint_uids[{kResource, "d0"}] = {"uid-a"};
  facts.api_pods["uid-a"] = Pod("uid-a", "a", "Running");
  EXPECT_EQ(Judge(Record("d0", now - 1000), facts, now, 5s).holding, Holding::kHeld);
  facts.api_pods["uid-a"].deleting = true;
  EXPECT_EQ(Judge(Record("d0", now - 1000), facts, now, 5s).holding, Holding::kFree)
      << "its pod deleted and kubelet does not list it: no longer protected by its age";
  facts.api_following = false;
  EXPECT_EQ(Judge(Record("d0", now - 1000), facts, now, 5s).holding, Holding::kHeld)
      << "API server not followed: its age still protects it";
}

// #14 item 2: a restarted kubelet answers PodResources with nothing for a while.
TEST(JudgeTest, NothingIsRemovedUntilARestartedKubeletListsTheNodesPodsAgain) {
  const int64_t now = 10'000'000;
  HolderFacts facts;
  facts.kubelet_known = true;
  facts.kubelet_up_unix_ms = 1;
  facts.kubelet_resynced = false;
  EXPECT_EQ(Judge(Record("d0"), facts, now, 5s).holding, Holding::kUnknown);
  EXPECT_EQ(Judge(Record("d0"), facts, now, 5s, Purpose::kAllocation).holding, Holding::kFree)
      << "Allocate goes by kubelet's books";

  HolderFacts api;
  api.api_following = true;
  api.checkpoint_uids[{kResource, "d0"}] = {"uid-a"};
  api.checkpoint_uids[{kResource, "d1"}] = {"uid-gone"};
  api.api_pods["uid-a"] = Pod("uid-a", "a", "Running");
  EXPECT_FALSE(Resynced({}, api)) << "the API shows a with a device, kubelet lists nothing";
  EXPECT_TRUE(Resynced({PodHolding("a", {})}, api));
  HolderFacts no_api;
  no_api.checkpoint_uids = api.checkpoint_uids;
  EXPECT_FALSE(Resynced({}, no_api)) << "no API: an empty answer is no proof";
  EXPECT_TRUE(Resynced({PodHolding("x", {})}, no_api));
  EXPECT_FALSE(Resynced({}, HolderFacts{})) << "no checkpoint read: an empty answer is no proof";
  HolderFacts empty_checkpoint;
  empty_checkpoint.checkpoint_known = true;
  EXPECT_TRUE(Resynced({}, empty_checkpoint)) << "the checkpoint gives nobody a device";
}

TEST(PlanPassTest, GraceCountsFromWhenAVgpuWasFirstSeenFreeAndRestartsWhenHeldAgain) {
  LifecycleSnapshot snapshot;
  snapshot.records = {Record("d0")};
  snapshot.existing = {"uuid-d0"};
  HolderFacts free_facts;
  free_facts.kubelet_known = true;
  HolderFacts held_facts = free_facts;
  held_facts.kubelet_holders[{kResource, "d0"}] = "default/a";
  LifecycleOptions options;
  options.grace_period = 30s;
  std::map<std::string, int64_t> free_since;
  const int64_t t0 = 100'000'000;

  PassPlan plan = PlanPass(snapshot, free_facts, free_since, t0, options);
  EXPECT_TRUE(plan.remove.empty());
  EXPECT_EQ(plan.waiting, 1u);
  plan = PlanPass(snapshot, free_facts, free_since, t0 + 29'999, options);
  EXPECT_TRUE(plan.remove.empty()) << "still within the grace period";
  plan = PlanPass(snapshot, held_facts, free_since, t0 + 30'000, options);
  EXPECT_TRUE(plan.remove.empty());
  EXPECT_EQ(plan.owners.at("d0"), "default/a") << "the owner is learned";
  plan = PlanPass(snapshot, free_facts, free_since, t0 + 31'000, options);
  EXPECT_TRUE(plan.remove.empty()) << "held in between: the grace period starts over";
  plan = PlanPass(snapshot, free_facts, free_since, t0 + 61'000, options);
  ASSERT_EQ(plan.remove.size(), 1u);
  EXPECT_EQ(plan.remove[0].vgpu_id, "uuid-d0");

  snapshot.existing.clear();
  plan = PlanPass(snapshot, free_facts, free_since, t0 + 62'000, options);
  EXPECT_TRUE(plan.remove.empty());
  ASSERT_EQ(plan.forget.size(), 1u) << "a vGPU the kernel no longer shows is only forgotten";

  snapshot.removing = {"d0"};
  snapshot.existing = {"uuid-d0"};
  plan = PlanPass(snapshot, free_facts, free_since, t0 + 90'000, options);
  EXPECT_TRUE(plan.remove.empty() && plan.forget.empty()) << "a removal in flight is left alone";
}

// A removal that blocks in the kernel until released, as the real kernel's remove blocks while
// QEMU still holds the mdev (docs/vm-lab.md).
class BlockingRemoveIo : public mdev::SysfsIo {
 public:
  explicit BlockingRemoveIo(mdev::SysfsIo& inner) : inner_(inner) {}
  Result<std::string> ReadFile(const std::filesystem::path& p) override {
    return inner_.ReadFile(p);
  }
  Status WriteFile(const std::filesystem::path& p, std::string_view data) override {
    if (p.filename() == "remove") {
      std::unique_lock lock(mutex_);
      ++blocked_;
      changed_.notify_all();
      changed_.wait(lock, [&] { return !hold_; });
      --blocked_;
    }
    Status written = inner_.WriteFile(p, data);
    if (p.filename() == "remove") {
      std::lock_guard lock(mutex_);
      scans_held_ = hold_scans_after_remove_;
    }
    return written;
  }
  Result<std::vector<std::string>> ListDir(const std::filesystem::path& p) override {
    {
      std::unique_lock lock(mutex_);
      if (scans_held_) {
        ++scans_blocked_;
        changed_.notify_all();
        changed_.wait(lock, [&] { return !scans_held_; });
        --scans_blocked_;
      }
    }
    return inner_.ListDir(p);
  }
  Result<std::filesystem::path> ReadLink(const std::filesystem::path& p) override {
    return inner_.ReadLink(p);
  }
  Result<std::filesystem::path> Canonical(const std::filesystem::path& p) override {
    return inner_.Canonical(p);
  }
  bool Exists(const std::filesystem::path& p) override { return inner_.Exists(p); }
  bool IsDirectory(const std::filesystem::path& p) override { return inner_.IsDirectory(p); }

  void Hold(bool hold) {
    std::lock_guard lock(mutex_);
    hold_ = hold;
    changed_.notify_all();
  }
  void WaitUntilBlocked() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return blocked_ > 0; });
  }
  // After the next remove, sysfs scans wait until released: the moment between the kernel's
  // remove and the rescan that follows it.
  void HoldScansAfterRemove(bool hold) {
    std::lock_guard lock(mutex_);
    hold_scans_after_remove_ = hold;
    if (!hold) scans_held_ = false;
    changed_.notify_all();
  }
  void WaitUntilScanBlocked() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return scans_blocked_ > 0; });
  }

 private:
  mdev::SysfsIo& inner_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool hold_ = false;
  int blocked_ = 0;
  bool hold_scans_after_remove_ = false;
  bool scans_held_ = false;
  int scans_blocked_ = 0;
};

// The lifecycle over the mtty kernel model; kubelet and the API server stood in for.
struct LifecycleFixture {
  explicit LifecycleFixture(MemoryStateStore* shared_store = nullptr)
      : sim("mtty"),
        io(sim.model()),
        node(sim.model().root(), io),
        store(shared_store != nullptr ? *shared_store : own_store),
        tracker(&podresources, nullptr, &pods, 0ms),
        manager(node, {}, store, tracker),
        lifecycle(manager, tracker, &events, Options()) {
    Status started = manager.Start();
    if (!started.ok()) throw std::runtime_error(started.ToString());
    tracker.Start({});
    pods.Sync({});
  }
  static LifecycleOptions Options() {
    LifecycleOptions options;
    options.grace_period = 0ms;
    options.settle = 0ms;
    options.retry_initial = 1ms;
    options.retry_max = 1ms;
    return options;
  }
  std::string Allocate(const std::string& id) {
    auto answer = manager.Allocate(kResource, {{id}});
    if (!answer.ok()) throw std::runtime_error(answer.status().ToString());
    return answer->at(0).vgpus.at(0).vgpu_id;
  }
  bool Exists(const std::string& vgpu) {
    auto ids = sim.model().VgpuIds();
    return std::find(ids.begin(), ids.end(), vgpu) != ids.end();
  }
  // A device ID handed to a new pod got a vGPU of its own: the old pod's is gone.
  void ExpectReplaced(const std::string& old_vgpu, const std::string& new_vgpu) {
    EXPECT_NE(new_vgpu, old_vgpu) << "a fresh vGPU, never the old pod's";
    EXPECT_TRUE(Exists(new_vgpu));
    EXPECT_FALSE(Exists(old_vgpu));
  }

  SimNode sim;
  BlockingRemoveIo io;
  mdev::Node node;
  MemoryStateStore own_store;
  StateStore& store;
  kvgpu::testing::StaticPodResources podresources;
  kvgpu::testing::InMemoryPodWatcher pods;
  kvgpu::testing::RecordingEventRecorder events;
  HolderTracker tracker;
  ResourceManager manager;
  Lifecycle lifecycle;
};

TEST(LifecycleTest, RemovesAVgpuOnlyOnceKubeletNoLongerListsItsPod) {
  LifecycleFixture f;
  std::string vgpu = f.Allocate("mtty-mtty-2-0");
  f.podresources.SetPods({PodHolding("train", {"mtty-mtty-2-0"})});
  f.pods.Emit(kube::PodEventType::kAdded, Pod("uid-1", "train", "Running"));

  PassPlan plan = f.lifecycle.RunPass();
  EXPECT_EQ(plan.held, 1u);
  EXPECT_TRUE(f.Exists(vgpu)) << "invariant 1: a live pod's vGPU stays";
  ASSERT_EQ(f.manager.Snapshot().records.at(0).owner_pod, "default/train");
  EXPECT_EQ(f.events.reasons(), std::vector<std::string>{"VgpuCreated"});
  EXPECT_EQ(f.events.events().at(0).pod.uid, "uid-1");

  f.pods.Emit(kube::PodEventType::kDeleted, Pod("uid-1", "train", "Running", true));
  f.lifecycle.RunPass();
  EXPECT_TRUE(f.Exists(vgpu)) << "the API deleted it, but kubelet still lists the pod";

  f.podresources.SetPods({});
  f.lifecycle.RunPass();
  EXPECT_FALSE(f.Exists(vgpu)) << "invariant 2: no live pod, grace 0: removed";
  EXPECT_TRUE(f.manager.Snapshot().records.empty());
  EXPECT_EQ(f.events.reasons(), (std::vector<std::string>{"VgpuCreated", "VgpuRemoved"}));
  EXPECT_EQ(f.manager.Counts().at(kResource).available, 12u) << "capacity is back";
}

TEST(LifecycleTest, NothingIsRemovedWhileKubeletDoesNotAnswer) {
  LifecycleFixture f;
  std::string vgpu = f.Allocate("mtty-mtty-2-0");
  f.podresources.SetDown(true);
  for (int i = 0; i < 3; ++i) f.lifecycle.RunPass();
  EXPECT_TRUE(f.Exists(vgpu)) << "invariant 1: without kubelet's word nothing is known";
  f.podresources.SetDown(false);
  f.lifecycle.RunPass();
  EXPECT_FALSE(f.Exists(vgpu)) << "invariant 2: once kubelet answers, the orphan goes";
}

TEST(LifecycleTest, AKubeletThatListsNothingYetDoesNotCostALivePodItsVgpu) {
  LifecycleFixture f;
  kvgpu::testing::TempDir kubelet_dir;
  kvgpu::testing::CheckpointWriter writer(kubelet_dir.path());
  std::string vgpu = f.Allocate("mtty-mtty-2-0");
  writer.Write({{"uid-1", "main", kResource, {"mtty-mtty-2-0"}}});
  kubelet::CheckpointWatcher checkpoint(kubelet_dir.path());
  HolderTracker tracker(&f.podresources, &checkpoint, &f.pods, 0ms);
  std::promise<void> read;
  std::atomic<bool> once{false};
  tracker.Start({nullptr, [&] {
                   if (!once.exchange(true)) read.set_value();
                 }});
  read.get_future().wait();
  f.pods.Sync({Pod("uid-1", "train", "Running")});
  ResourceManager manager(f.node, {}, f.store, tracker);
  ASSERT_TRUE(manager.Start().ok());
  Lifecycle lifecycle(manager, tracker, &f.events, LifecycleFixture::Options());

  f.podresources.SetPods({});  // kubelet restarted: no pods synced yet
  lifecycle.RunPass();
  EXPECT_TRUE(f.Exists(vgpu)) << "invariant 1: the API shows the checkpoint's pod alive";

  f.pods.Emit(kube::PodEventType::kDeleted, Pod("uid-1", "train", "Running", true));
  lifecycle.RunPass();
  EXPECT_FALSE(f.Exists(vgpu)) << "kubelet and the API agree it is gone";
  tracker.Stop();
}

TEST(LifecycleTest, ABusyVgpuIsRetriedUntilTheVmLetsGo) {
  LifecycleFixture f;
  std::string vgpu = f.Allocate("mtty-mtty-2-0");
  f.podresources.SetPods({PodHolding("train", {"mtty-mtty-2-0"})});
  f.lifecycle.RunPass();
  f.podresources.SetPods({});
  f.sim.model().SetBusy(vgpu, true);
  f.lifecycle.RunPass();
  f.lifecycle.RunPass();
  EXPECT_TRUE(f.Exists(vgpu));
  EXPECT_EQ(f.lifecycle.pending_removals(), 1u);
  EXPECT_EQ(f.events.reasons(), (std::vector<std::string>{"VgpuCreated", "VgpuRemoveFailed"}))
      << "one warning, not one per retry";
  f.sim.model().SetBusy(vgpu, false);
  std::this_thread::sleep_for(5ms);  // past the backoff
  f.lifecycle.RunPass();
  EXPECT_FALSE(f.Exists(vgpu));
  EXPECT_EQ(f.lifecycle.pending_removals(), 0u);
}

TEST(LifecycleTest, VgpusThisPluginDidNotCreateAreNeverTouched) {
  LifecycleFixture f;
  auto foreign = f.sim.node().Create({"mtty", "mtty-2", std::nullopt});
  ASSERT_TRUE(foreign.ok());
  ASSERT_TRUE(f.manager.Refresh().ok());
  f.podresources.SetPods({});
  for (int i = 0; i < 3; ++i) f.lifecycle.RunPass();
  EXPECT_TRUE(f.Exists(foreign->id)) << "invariant 3";
  EXPECT_EQ(f.manager.Snapshot().foreign, std::vector<std::string>{foreign->id});
}

TEST(LifecycleTest, OrphansFromBeforeARestartAreCollectedAndGoneOnesForgotten) {
  MemoryStateStore store;
  std::string orphan, vanished;
  {
    LifecycleFixture before(&store);
    orphan = before.Allocate("mtty-mtty-2-0");
    vanished = before.Allocate("mtty-mtty-2-1");
    ASSERT_EQ(store.vgpus_.size(), 2u);
  }
  // A new node model stands for the restarted plugin's view: re-create the orphan there, and
  // leave the other vGPU out, as after a reboot.
  LifecycleFixture after(&store);
  for (CreatedVgpu& r : store.vgpus_) {
    if (r.vgpu_id == orphan) {
      ASSERT_TRUE(after.sim.node().Create({"mtty", "mtty-2", orphan}).ok());
    }
  }
  ASSERT_TRUE(after.manager.Refresh().ok());
  after.lifecycle.RunPass();
  EXPECT_FALSE(after.Exists(orphan)) << "invariant 2 across restarts";
  EXPECT_TRUE(after.manager.Snapshot().records.empty()) << "the vanished one is forgotten";
}

TEST(LifecycleTest, AnIdReusedWhileItsOldVgpuIsStillBeingRemovedWaitsForTheRemoval) {
  LifecycleFixture f;
  std::string old_vgpu = f.Allocate("mtty-mtty-2-0");
  f.podresources.SetPods({});
  f.io.Hold(true);
  auto removal = std::async(std::launch::async, [&] { f.lifecycle.RunPass(); });
  f.io.WaitUntilBlocked();
  auto allocation = std::async(std::launch::async, [&] { return f.Allocate("mtty-mtty-2-0"); });
  EXPECT_EQ(allocation.wait_for(50ms), std::future_status::timeout)
      << "Allocate must not race the kernel's remove of the same device's vGPU";
  f.io.Hold(false);
  removal.get();
  f.ExpectReplaced(old_vgpu, allocation.get());
}

// kubelet hands a device ID on as soon as its pod has ended, while Kata may still be tearing the
// old VM down: the new pod waits for the old vGPU to be let go instead of failing admission.
TEST(AllocateReuseTest, AFreeIdWhoseOldVgpuIsStillBusyGetsAFreshOneOnceTheVmLetsGo) {
  LifecycleFixture f;
  std::string old_vgpu = f.Allocate("mtty-mtty-2-0");
  f.podresources.SetPods({});  // its pod has ended
  f.sim.model().SetBusy(old_vgpu, true);
  auto allocation = std::async(std::launch::async, [&] { return f.Allocate("mtty-mtty-2-0"); });
  EXPECT_EQ(allocation.wait_for(300ms), std::future_status::timeout)
      << "waits for the old VM instead of failing the new pod";
  EXPECT_TRUE(f.Exists(old_vgpu));
  f.sim.model().SetBusy(old_vgpu, false);
  f.ExpectReplaced(old_vgpu, allocation.get());
}

TEST(AllocateReuseTest, AnOldVgpuThatStaysBusyFailsTheAllocateAfterTheWaitAndChangesNothing) {
  LifecycleFixture f;
  std::string old_vgpu = f.Allocate("mtty-mtty-2-0");
  f.podresources.SetPods({});
  f.sim.model().SetBusy(old_vgpu, true);
  f.manager.SetRemovalWait(200ms);
  auto answer = f.manager.Allocate(kResource, {{"mtty-mtty-2-0"}});
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().code(), ErrorCode::kBusy);
  EXPECT_NE(answer.status().message().find("mtty-mtty-2-0"), std::string::npos)
      << answer.status().ToString();
  EXPECT_NE(answer.status().message().find(old_vgpu), std::string::npos)
      << answer.status().ToString();
  EXPECT_EQ(f.sim.model().VgpuIds(), std::vector<std::string>{old_vgpu})
      << "the old vGPU kept, no new one made";
  ASSERT_EQ(f.manager.Snapshot().records.size(), 1u);
  EXPECT_EQ(f.manager.Snapshot().records[0].vgpu_id, old_vgpu) << "and still ours to remove";
}

TEST(AllocateReuseTest, ARequestThatIsRefusedRemovesNoOldVgpu) {
  LifecycleFixture f;
  std::string old_vgpu = f.Allocate("mtty-mtty-2-0");
  f.podresources.SetPods({});
  for (const auto& bad : std::vector<std::vector<std::string>>{
           {"mtty-mtty-2-0", "no-such-device"}, {"mtty-mtty-2-0", "mtty-mtty-2-0"}}) {
    auto answer = f.manager.Allocate(kResource, {bad});
    ASSERT_FALSE(answer.ok());
    EXPECT_EQ(answer.status().code(), ErrorCode::kInvalid) << answer.status().ToString();
    EXPECT_TRUE(f.Exists(old_vgpu)) << "bad input changes nothing: " << bad.back();
  }
}

TEST(AllocateReuseTest, TheKernelsBlockingRemoveOfAnOldVgpuDoesNotHoldUpOtherAllocations) {
  LifecycleFixture f;
  std::string old_vgpu = f.Allocate("mtty-mtty-2-0");
  f.podresources.SetPods({});
  f.io.Hold(true);  // the real kernel blocks the remove while QEMU holds the device
  auto reuse = std::async(std::launch::async, [&] { return f.Allocate("mtty-mtty-2-0"); });
  f.io.WaitUntilBlocked();
  auto other = std::async(std::launch::async, [&] { return f.Allocate("mtty-mtty-2-1"); });
  EXPECT_EQ(other.wait_for(5s), std::future_status::ready)
      << "the manager's lock is not held across the kernel's remove";
  f.io.Hold(false);
  f.ExpectReplaced(old_vgpu, reuse.get());
  EXPECT_TRUE(f.Exists(other.get()));
}

// #14 item 6: after a removal, the list must still hold every ID kubelet was told of until the
// rescan; the highest free ID used to drop out (and be refused as unknown) in between.
TEST(LifecycleTest, BetweenARemovalAndItsRescanEveryAdvertisedIdStaysListed) {
  LifecycleFixture f;
  f.Allocate("mtty-mtty-2-0");
  std::vector<std::string> before;
  for (const Device& d : f.manager.Devices(kResource)) before.push_back(d.id);
  f.podresources.SetPods({});
  f.io.HoldScansAfterRemove(true);
  auto pass = std::async(std::launch::async, [&] { return f.lifecycle.RunPass(); });
  f.io.WaitUntilScanBlocked();
  std::vector<std::string> during;
  for (const Device& d : f.manager.Devices(kResource)) during.push_back(d.id);
  EXPECT_EQ(during, before) << "an advertised ID vanished before the rescan";
  auto answer = f.manager.PreferredAllocation(kResource, {{before, {}, 1}});
  EXPECT_TRUE(answer.ok()) << answer.status().ToString();
  f.io.HoldScansAfterRemove(false);
  pass.get();
  std::vector<std::string> after;
  for (const Device& d : f.manager.Devices(kResource)) after.push_back(d.id);
  EXPECT_EQ(after, before);
}

// #14 item 3: Allocate asks kubelet who holds an earlier vGPU without the manager's lock, so a
// hung PodResources API delays that call only: rescans, lists and other Allocates go on.
TEST(AllocateReuseTest, AHungKubeletDelaysOnlyTheAllocateThatNeedsItsAnswer) {
  LifecycleFixture f;
  f.Allocate("mtty-mtty-2-0");
  f.podresources.Hold(true);
  auto reuse = std::async(std::launch::async,
                          [&] { return f.manager.Allocate(kResource, {{"mtty-mtty-2-0"}}); });
  f.podresources.WaitUntilHanging(1);
  auto refresh = std::async(std::launch::async, [&] { return f.manager.Refresh(); });
  auto other = std::async(std::launch::async,
                          [&] { return f.manager.Allocate(kResource, {{"mtty-mtty-2-1"}}); });
  bool refreshed = refresh.wait_for(3s) == std::future_status::ready;
  bool allocated = other.wait_for(3s) == std::future_status::ready;
  f.podresources.Hold(false);
  EXPECT_TRUE(refreshed) << "a rescan waited for kubelet";
  EXPECT_TRUE(allocated) << "an Allocate that needs no holder waited for kubelet";
  EXPECT_TRUE(other.get().ok());
  EXPECT_TRUE(refresh.get().ok());
  EXPECT_TRUE(reuse.get().ok());
}

// #14 item 3: callers asking at once share one List (each gets one that started after it
// asked), so a slow kubelet costs one call's time, not one per device ID.
TEST(AllocateReuseTest, ConcurrentHolderChecksShareOneKubeletList) {
  LifecycleFixture f;
  f.podresources.Hold(true);
  int before = f.podresources.calls();
  auto first = std::async(std::launch::async, [&] { return f.tracker.Collect(); });
  f.podresources.WaitUntilHanging(1);
  std::vector<std::future<HolderFacts>> waiting;
  for (int i = 0; i < 4; ++i) {
    waiting.push_back(std::async(std::launch::async, [&] { return f.tracker.Collect(); }));
  }
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(f.podresources.calls() - before, 1) << "callers queue behind the List in flight";
  f.podresources.Hold(false);
  first.get();
  for (auto& w : waiting) EXPECT_TRUE(w.get().kubelet_known);
  EXPECT_LE(f.podresources.calls() - before, 2)
      << "the four that came during the first List share the next one";
}

TEST(LifecycleTest, EventsThatCannotBePostedDoNotStopRemovals) {
  LifecycleFixture f;
  std::string vgpu = f.Allocate("mtty-mtty-2-0");
  f.podresources.SetPods({PodHolding("train", {"mtty-mtty-2-0"})});
  f.events.SetFailing(true);
  f.lifecycle.RunPass();
  f.podresources.SetPods({});
  f.lifecycle.RunPass();
  EXPECT_FALSE(f.Exists(vgpu));
}

TEST(LifecycleTest, RunsOnItsOwnThreadAndRemovesSoonAfterAPodEnds) {
  LifecycleFixture f;
  std::string vgpu = f.Allocate("mtty-mtty-2-0");
  f.podresources.SetPods({PodHolding("train", {"mtty-mtty-2-0"})});
  LifecycleOptions options = LifecycleFixture::Options();
  options.poll_interval = 1h;  // only the pod's end can wake it
  Lifecycle lifecycle(f.manager, f.tracker, &f.events, options);
  lifecycle.Start();
  std::this_thread::sleep_for(50ms);
  f.podresources.SetPods({});
  auto start = std::chrono::steady_clock::now();
  lifecycle.Trigger(true);
  while (f.Exists(vgpu) && std::chrono::steady_clock::now() - start < 5s) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_FALSE(f.Exists(vgpu));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  lifecycle.Stop();
}

TEST(LifecycleTest, AFullStateDirRefusesNewVgpusButNeverStopsRemovals) {
  MemoryStateStore store;
  LifecycleFixture f(&store);
  std::string vgpu = f.Allocate("mtty-mtty-2-0");
  store.fail_saves = true;  // the disk fills up
  auto refused = f.manager.Allocate(kResource, {{"mtty-mtty-2-1"}});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("cannot record"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(f.sim.model().VgpuIds().size(), 1u) << "nothing made that the record cannot show";
  f.podresources.SetPods({});
  f.lifecycle.RunPass();
  EXPECT_FALSE(f.Exists(vgpu)) << "invariant 2 holds with a full disk";
  EXPECT_TRUE(f.manager.Snapshot().records.empty());
  // The file still names the removed vGPU: harmless, a restart finds it gone and forgets it.
  store.fail_saves = false;
  ASSERT_TRUE(f.manager.Allocate(kResource, {{"mtty-mtty-2-1"}}).ok());
  EXPECT_EQ(store.vgpus_.size(), 1u) << "the next save catches up";
}

std::string AllocResp(const std::string& ids, const std::string& uuids) {
  v1beta1::ContainerAllocateResponse response;
  (*response.mutable_envs())["KVGPU_VGPU_MTTY_2_DEVICE_IDS"] = ids;
  (*response.mutable_envs())["KVGPU_VGPU_MTTY_2_UUIDS"] = uuids;
  (*response.mutable_envs())["KVGPU_VGPU_MTTY_2_TYPES"] = "mtty-2";
  return response.SerializeAsString();
}

TEST(StateRebuildTest, OnlyVgpusOurAnswersInKubeletsCheckpointNameBecomeOursAgain) {
  SimNode sim("mtty");
  auto ours = sim.node().Create({"mtty", "mtty-2", std::nullopt});
  auto foreign = sim.node().Create({"mtty", "mtty-2", std::nullopt});
  ASSERT_TRUE(ours.ok() && foreign.ok());
  auto inventory = sim.node().Scan();
  ASSERT_TRUE(inventory.ok());

  kvgpu::testing::TempDir kubelet_dir;
  kvgpu::testing::CheckpointWriter writer(kubelet_dir.path());
  writer.Write({
      {"uid-1", "main", kResource, {"mtty-mtty-2-3"}, -1, AllocResp("mtty-mtty-2-3", ours->id)},
      {"uid-0",
       "main",
       kResource,
       {"mtty-mtty-2-5"},
       -1,
       AllocResp("mtty-mtty-2-5", "0b5d1e1c-4c3a-4d6e-9a53-2f1d7c9e8a11")},  // long gone
      {"uid-2",
       "main",
       kResource,
       {"mtty-mtty-2-7"},
       -1,
       AllocResp("mtty-mtty-2-7,mtty-mtty-2-8", ours->id)},  // malformed: lengths differ
  });
  auto checkpoint = kubelet::ReadCheckpoint(writer.path());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().message();
  Rebuilt rebuilt = RebuildRecords(*checkpoint, *inventory, 42'000);
  ASSERT_EQ(rebuilt.vgpus.size(), 1u);
  EXPECT_EQ(rebuilt.vgpus[0].vgpu_id, ours->id);
  EXPECT_EQ(rebuilt.vgpus[0].device_id, "mtty-mtty-2-3") << "invariant 4: the same ID as before";
  EXPECT_EQ(rebuilt.vgpus[0].slot, 3u);
  EXPECT_EQ(rebuilt.vgpus[0].resource, kResource);
  EXPECT_EQ(rebuilt.notes.size(), 1u);
}

}  // namespace
}  // namespace kvgpu::deviceplugin
