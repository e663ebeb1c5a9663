// The lifecycle: when a vGPU of ours goes (PlanPass, the grace period) and the lifecycle against
// the kernel model with kubelet and the API server stood in for (who holds a vGPU, Judge, is
// holder_tracker_test's). Each test names the invariant it defends (ARCHITECTURE.md: 1 never
// destroy a vGPU a live pod uses, 2 never leak one, 3 never touch another's, 4 IDs keep their
// meaning).
#include "deviceplugin/lifecycle/lifecycle.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <thread>

#include "deviceplugin/lifecycle/holder_tracker.h"
#include "deviceplugin/model/resource_manager.h"
#include "fakes/apiserver/in_memory_kube.h"
#include "fakes/common/eventually.h"
#include "fakes/common/sim_node.h"
#include "fakes/podresources/checkpoint_writer.h"
#include "fakes/podresources/static_podresources.h"
#include "mdev/uuid.h"
#include "tests/deviceplugin/lifecycle/holder_builders.h"

namespace kvgpu::deviceplugin {
namespace {

using kvgpu::testing::SimNode;
using namespace std::chrono_literals;

using kvgpu::deviceplugin::testing::kResource;
using kvgpu::deviceplugin::testing::Pod;
using kvgpu::deviceplugin::testing::PodHolding;
using kvgpu::deviceplugin::testing::Record;

// One record of ours, d0, whose vGPU the kernel shows.
LifecycleSnapshot OneVgpu() {
  LifecycleSnapshot snapshot;
  snapshot.records = {Record("d0")};
  snapshot.existing = {"uuid-d0"};
  return snapshot;
}

// The owner's UID is what lets a vGPU outlive kubelet's books losing its pod (Judge rule 6): it
// is learned with the pod from kubelet's list, and a record whose UID is missing learns it later.
TEST(PlanPassTest, TheOwnerIsLearnedWithItsUidFromTheApiServer) {
  LifecycleSnapshot snapshot = OneVgpu();
  HolderFacts facts;
  facts.kubelet_known = true;
  facts.kubelet_holders[{kResource, "d0"}] = "default/a";
  facts.api_following = true;
  facts.api_pods["uid-a"] = Pod("uid-a", "a", "Running");
  std::map<std::string, int64_t> free_since;
  PassPlan plan = PlanPass(snapshot, facts, free_since, 100'000'000, LifecycleOptions{});
  EXPECT_EQ(plan.owners.at("d0"), (PodOwner{"default/a", "uid-a"}));

  snapshot.records[0].owner_pod = "default/a";  // learned before, without the API server
  plan = PlanPass(snapshot, facts, free_since, 100'001'000, LifecycleOptions{});
  EXPECT_EQ(plan.owners.at("d0"), (PodOwner{"default/a", "uid-a"})) << "the UID learned later";
  snapshot.records[0].owner_uid = "uid-a";
  plan = PlanPass(snapshot, facts, free_since, 100'002'000, LifecycleOptions{});
  EXPECT_TRUE(plan.owners.empty()) << "nothing new: nothing to save";
}

TEST(PlanPassTest, GraceCountsFromWhenAVgpuWasFirstSeenFreeAndRestartsWhenHeldAgain) {
  LifecycleSnapshot snapshot = OneVgpu();
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
  EXPECT_EQ(plan.owners.at("d0"), (PodOwner{"default/a", ""})) << "the owner is learned";
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

  snapshot.removing.clear();
  snapshot.allocating = {"d0"};
  free_since.clear();
  plan = PlanPass(snapshot, free_facts, free_since, t0 + 120'000, options);
  EXPECT_TRUE(plan.remove.empty() && plan.forget.empty())
      << "an Allocate in flight for the ID is never judged: kubelet cannot know its pod yet";
  EXPECT_TRUE(free_since.empty()) << "nor does its grace period start";
  snapshot.allocating.clear();
  snapshot.existing.clear();
  snapshot.inventory_known = false;
  plan = PlanPass(snapshot, free_facts, free_since, t0 + 121'000, options);
  EXPECT_TRUE(plan.remove.empty() && plan.forget.empty())
      << "a backend never read (libvirtd away since the start): unseen is not gone";
  EXPECT_EQ(plan.unknown, 1u);
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
    if (p.filename() == "create") {
      std::unique_lock lock(mutex_);
      ++creates_blocked_;
      changed_.notify_all();
      changed_.wait(lock, [&] { return !hold_creates_; });
      --creates_blocked_;
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
  // Creates wait until released: a create as slow as libvirt's (up to ~6 s) or a loaded host's.
  void HoldCreates(bool hold) {
    std::lock_guard lock(mutex_);
    hold_creates_ = hold;
    changed_.notify_all();
  }
  void WaitUntilCreateBlocked() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return creates_blocked_ > 0; });
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
  bool hold_creates_ = false;
  int creates_blocked_ = 0;
  bool hold_scans_after_remove_ = false;
  bool scans_held_ = false;
  int scans_blocked_ = 0;
};

// The lifecycle over the mtty kernel model; kubelet and the API server stood in for.
struct LifecycleFixture {
  explicit LifecycleFixture(MemoryStateStore* shared_store = nullptr,
                            LifecycleOptions options = Options())
      : sim("mtty"),
        io(sim.model()),
        node(sim.model().root(), io),
        store(shared_store != nullptr ? *shared_store : own_store),
        tracker(&podresources, nullptr, &pods, 0ms),
        manager(node, {}, store, tracker),
        lifecycle(manager, tracker, &events, options) {
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
  mdev::SysfsBackend node;
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

// kubelet can know a vGPU only once Allocate returns, and records its pod after that. A create
// slower than the settle time (libvirt's takes ~0.5 s, up to ~6 s) must not make the vGPU old at
// birth, and a pass while the Allocate is in flight must not judge it on facts gathered before
// kubelet had the answer. The settle clock starts at Allocate's return. Sleeping here only makes
// the create slower or the vGPU older, so a slow machine cannot turn a pass into a fail.
TEST(LifecycleTest, AVgpuWhoseCreateOutlastsTheSettleTimeIsKeptUntilKubeletCanHaveListedItsPod) {
  LifecycleOptions options = LifecycleFixture::Options();
  options.settle = 300ms;
  LifecycleFixture f(nullptr, options);
  // kubelet has been answering for longer than the settle time: its own "answers again only since
  // moments ago" rule must not be what keeps the vGPU, only the vGPU's clock.
  ASSERT_TRUE(f.tracker.Collect().kubelet_known);
  std::this_thread::sleep_for(options.settle + 50ms);
  f.io.HoldCreates(true);
  auto allocated = std::async(std::launch::async, [&] { return f.Allocate("mtty-mtty-2-0"); });
  f.io.WaitUntilCreateBlocked();
  std::this_thread::sleep_for(options.settle + 200ms);  // the create outlasts the settle time
  // The pass gathers kubelet's facts (no pod yet: Allocate has not returned), then waits for the
  // manager, which the create holds.
  auto pass = std::async(std::launch::async, [&] { return f.lifecycle.RunPass(); });
  std::this_thread::sleep_for(50ms);
  f.io.HoldCreates(false);
  const std::string vgpu = allocated.get();
  pass.get();
  EXPECT_TRUE(f.Exists(vgpu)) << "removed before kubelet could list the pod Allocate served";
  EXPECT_TRUE(f.manager.Snapshot().allocating.empty());

  f.lifecycle.RunPass();
  EXPECT_TRUE(f.Exists(vgpu)) << "within the settle time of Allocate's return: kept";

  std::this_thread::sleep_for(options.settle);
  f.lifecycle.RunPass();
  EXPECT_FALSE(f.Exists(vgpu)) << "invariant 2: past the settle time with no pod, removed";
}

// A backend behind a connection (libvirtd) that is away until told otherwise.
class AwayBackend : public mdev::Backend {
 public:
  explicit AwayBackend(mdev::Backend& inner) : inner_(inner) {}
  const char* Name() const override { return "libvirt"; }
  Result<mdev::Inventory> Scan() override {
    if (away) return Unreachable();
    return inner_.Scan();
  }
  Result<mdev::Vgpu> Create(const mdev::CreateRequest& request) override {
    if (away) return Unreachable();
    return inner_.Create(request);
  }
  Status Remove(const std::string& id) override {
    if (away) return Unreachable();
    return inner_.Remove(id);
  }
  Result<std::unique_ptr<mdev::EventSubscription>> WatchChanges(
      std::function<void(const std::string&)> changed) override {
    return inner_.WatchChanges(std::move(changed));
  }
  mdev::BackendHealth Health() const override {
    return {.connected = !away, .reconnects = 0, .last_error = away ? "away" : ""};
  }
  std::atomic<bool> away{true};

 private:
  static Status Unreachable() {
    return Status::Error(ErrorCode::kTransport, "cannot connect to libvirt: no such socket");
  }
  mdev::Backend& inner_;
};

// libvirtd away when the daemon starts (#28): the manager starts and offers nothing rather than
// ending the daemon; while the backend has never been read, a vGPU of ours that the empty view
// lacks is neither forgotten (it would become someone else's, invariant 3) nor removed. Once the
// backend answers, everything resumes: the devices are offered and the orphan goes (invariant 2).
TEST(LifecycleTest, ABackendAwayAtStartOffersNothingAndForgetsNothingUntilItAnswers) {
  SimNode sim("mtty");
  const std::string uuid = mdev::NewUuid();
  ASSERT_TRUE(sim.node().Create({"mtty", "mtty-2", uuid}).ok());
  MemoryStateStore store;
  CreatedVgpu ours = Record("mtty-mtty-2-0");
  ours.vgpu_id = uuid;
  store.vgpus_ = {ours};
  kvgpu::testing::StaticPodResources podresources;
  HolderTracker tracker(&podresources, nullptr, nullptr, 0ms);
  AwayBackend backend(sim.node());
  ResourceManager manager(backend, {}, store, tracker);
  Status started = manager.Start();
  ASSERT_TRUE(started.ok()) << "libvirtd away is no reason to exit: " << started.ToString();
  EXPECT_TRUE(manager.Resources().empty()) << "nothing is offered from an unread backend";
  Lifecycle lifecycle(manager, tracker, nullptr, LifecycleFixture::Options());
  for (int i = 0; i < 2; ++i) lifecycle.RunPass();
  ASSERT_EQ(manager.Snapshot().records.size(), 1u) << "invariant 3: unseen is not gone";
  EXPECT_FALSE(manager.ForgetVgpu(ours.device_id, uuid).ok());

  backend.away = false;
  ASSERT_TRUE(manager.Refresh().ok());
  EXPECT_FALSE(manager.Resources().empty()) << "offered at the first scan that reaches it";
  lifecycle.RunPass();
  auto ids = sim.model().VgpuIds();
  EXPECT_EQ(std::find(ids.begin(), ids.end(), uuid), ids.end())
      << "invariant 2: no pod holds it, so it goes once the backend answers";
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
  EXPECT_EQ(other.wait_for(kvgpu::testing::kEventDeadline), std::future_status::ready)
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
  // Held behind kubelet, they would wait until Hold(false): any deadline tells the two apart.
  bool refreshed = refresh.wait_for(kvgpu::testing::kEventDeadline) == std::future_status::ready;
  bool allocated = other.wait_for(kvgpu::testing::kEventDeadline) == std::future_status::ready;
  f.podresources.Hold(false);
  EXPECT_TRUE(refreshed) << "a rescan waited for kubelet";
  EXPECT_TRUE(allocated) << "an Allocate that needs no holder waited for kubelet";
  EXPECT_TRUE(other.get().ok());
  EXPECT_TRUE(refresh.get().ok());
  EXPECT_TRUE(reuse.get().ok());
}

// #28 item 4 (was #14 item 3): a caller never queues behind a List that started before it came
// (that List may predate what it must see, and waiting it out first cost an Allocate two
// deadlines, 9.6-10.3 s against kubelet's 5 s): each starts its own at once, so a slow kubelet
// costs every caller one call's time. The device IDs of one Allocate still share one List
// (CheckAll).
TEST(AllocateReuseTest, ConcurrentHolderChecksNeverQueueBehindAListThatStartedBeforeThem) {
  LifecycleFixture f;
  f.podresources.Hold(true);
  int before = f.podresources.calls();
  auto first = std::async(std::launch::async, [&] { return f.tracker.Collect(); });
  f.podresources.WaitUntilHanging(1);
  std::vector<std::future<HolderFacts>> later;
  for (int i = 0; i < 4; ++i) {
    later.push_back(std::async(std::launch::async, [&] { return f.tracker.Collect(); }));
  }
  f.podresources.WaitUntilHanging(5);  // hangs if a caller waited for the first List instead
  EXPECT_EQ(f.podresources.calls() - before, 5) << "each caller asked kubelet at once";
  f.podresources.Hold(false);
  EXPECT_TRUE(first.get().kubelet_known);
  for (auto& w : later) EXPECT_TRUE(w.get().kubelet_known);
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
  lifecycle.Trigger(true);
  // With the 1 h poll only the trigger can remove it: the outcome proves it, whatever the load.
  EXPECT_TRUE(kvgpu::testing::Eventually([&] { return !f.Exists(vgpu); },
                                         kvgpu::testing::kEventDeadline, 1ms));
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

}  // namespace
}  // namespace kvgpu::deviceplugin
