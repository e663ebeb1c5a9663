// The resource manager against the kernel model: what each node shape advertises, how lists
// follow the kernel (locking, parents vanishing), preferred allocation, and Allocate's all-or-
// nothing creation. No gRPC here.
#include "deviceplugin/model/resource_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "fakes/common/sim_node.h"
#include "mdev/uuid.h"

namespace kvgpu::deviceplugin {
namespace {

using kvgpu::testing::SimNode;

class ScriptedHolders : public HolderOracle {
 public:
  Verdict Check(const CreatedVgpu&) override { return answer; }
  Verdict answer;
};

size_t CountOn(const std::vector<Device>& devices, const std::string& gpu) {
  return static_cast<size_t>(std::count_if(devices.begin(), devices.end(), [&](const Device& d) {
    return d.physical_gpu == gpu && d.healthy;
  }));
}

std::vector<std::string> IdsOf(const std::vector<Device>& devices) {
  std::vector<std::string> out;
  for (const Device& d : devices) out.push_back(d.id);
  return out;
}

// CDI specs go to the test's own directory.
ModelOptions InTempDir(ModelOptions config, const SimNode& sim) {
  config.cdi_dir = sim.dir() / "cdi";
  return config;
}

// One manager over one simulated node, with an in-memory state store.
struct Fixture {
  explicit Fixture(const std::string& profile, ModelOptions config = {})
      : sim(profile), manager(sim.node(), InTempDir(config, sim), store, holders) {
    Status started = manager.Start();
    if (!started.ok()) throw std::runtime_error(started.ToString());
  }
  std::vector<Device> Devices(const std::string& resource) { return manager.Devices(resource); }

  SimNode sim;
  MemoryStateStore store;
  ScriptedHolders holders;
  ResourceManager manager;
};

TEST(ResourceManagerTest, EachNodeShapeAdvertisesItsTypesUnderTheirResourceNames) {
  struct Case {
    std::string description;
    std::string profile;
    NamingOptions naming;
    size_t resources;
    std::string resource;
    size_t devices;
    std::string first_id;
  };
  const std::vector<Case> cases = {
      {"T4 type style: nvidia-222 is vgpu-222, 16 per GPU on two GPUs",
       "t4x2",
       {},
       12,
       "tencent.com/vgpu-222",
       32,
       "0000:3b:00.0-nvidia-222-0"},
      {"T4 profile style: GRID T4-1Q is vgpu-t4-1q",
       "t4x2",
       {"tencent.com", NamingStyle::kProfile},
       12,
       "tencent.com/vgpu-t4-1q",
       32,
       "0000:3b:00.0-nvidia-230-0"},
      {"configurable domain",
       "t4x2",
       {"gpu.example.org", NamingStyle::kType},
       12,
       "gpu.example.org/vgpu-234",
       2,
       "0000:3b:00.0-nvidia-234-0"},
      {"mtty has no NVIDIA name: the whole type id",
       "mtty",
       {},
       2,
       "tencent.com/vgpu-mtty-2",
       12,
       "mtty-mtty-2-0"},
      {"A100 SR-IOV: one device per VF parent",
       "a100-sriov",
       {},
       7,
       "tencent.com/vgpu-692",
       20,
       ""},
      // MIG off: the MIG-backed 1414 is not offered; with no max known, one H200X-141C is listed.
      {"H200 vendor VFIO: the bare type id", "h200-vfio", {}, 1, "tencent.com/vgpu-1428", 1, ""},
      {"mixed node: T4, A100 and mtty side by side",
       "mixed",
       {},
       21,
       "tencent.com/vgpu-mtty-1",
       24,
       "mtty-mtty-1-0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.description);
    ModelOptions config;
    config.naming = c.naming;
    Fixture f(c.profile, config);
    EXPECT_EQ(f.manager.Resources().size(), c.resources);
    std::vector<Device> devices = f.Devices(c.resource);
    EXPECT_EQ(devices.size(), c.devices);
    if (!c.first_id.empty() && !devices.empty()) {
      EXPECT_EQ(devices.front().id, c.first_id);
    }
    for (const Device& d : devices) {
      EXPECT_TRUE(d.healthy) << d.id;
      EXPECT_LE(d.id.size(), 63u) << d.id;
    }
  }
}

TEST(ResourceManagerTest, DeviceIdsNameTheParentTypeAndSlot) {
  Fixture f("a100-sriov");
  std::vector<Device> devices = f.Devices("tencent.com/vgpu-697");
  ASSERT_FALSE(devices.empty());
  for (const Device& d : devices) {
    EXPECT_EQ(d.physical_gpu, "0000:41:00.0");
    EXPECT_NE(d.key.parent, d.physical_gpu) << "on SR-IOV the parent is the VF";
    EXPECT_EQ(d.id, d.key.parent + "-nvidia-697-0");
  }
}

TEST(ResourceManagerTest, SameNodeStateGivesTheSameIdsAfterARestart) {
  SimNode sim("t4x2");
  MemoryStateStore store;
  UnknownHolders holders;
  std::vector<std::vector<Device>> lists;
  {
    ResourceManager first(sim.node(), {}, store, holders);
    ASSERT_TRUE(first.Start().ok());
    auto allocated = first.Allocate("tencent.com/vgpu-223",
                                    {{"0000:3b:00.0-nvidia-223-0", "0000:3b:00.0-nvidia-223-1"}});
    ASSERT_TRUE(allocated.ok()) << allocated.status().ToString();
    for (const std::string& r : first.Resources()) lists.push_back(first.Devices(r));
  }
  ResourceManager second(sim.node(), {}, store, holders);
  ASSERT_TRUE(second.Start().ok());
  std::vector<std::vector<Device>> again;
  for (const std::string& r : second.Resources()) again.push_back(second.Devices(r));
  EXPECT_EQ(lists, again);
  auto ours = second.Devices("tencent.com/vgpu-223");
  EXPECT_TRUE(ours.at(0).ours && ours.at(0).vgpu_exists);
}

TEST(ResourceManagerTest, LockingHidesOtherTypesOnThatGpuAndFreeingBringsThemBack) {
  Fixture f("t4x2");
  const std::string gpu0 = f.sim.gpu(0), gpu1 = f.sim.gpu(1);
  ASSERT_EQ(CountOn(f.Devices("tencent.com/vgpu-223"), gpu0), 8u);

  auto allocated = f.manager.Allocate("tencent.com/vgpu-222", {{gpu0 + "-nvidia-222-0"}});
  ASSERT_TRUE(allocated.ok()) << allocated.status().ToString();
  EXPECT_EQ(CountOn(f.Devices("tencent.com/vgpu-223"), gpu0), 0u) << "GPU 0 is locked to 222";
  EXPECT_EQ(CountOn(f.Devices("tencent.com/vgpu-223"), gpu1), 8u);
  EXPECT_EQ(CountOn(f.Devices("tencent.com/vgpu-222"), gpu0), 16u)
      << "15 free + the one created stays listed";

  // The vGPU goes (its pod ended and it was removed): the kernel frees the GPU.
  ASSERT_TRUE(f.sim.node().Remove(allocated->at(0).vgpus.at(0).vgpu_id).ok());
  ASSERT_TRUE(f.manager.Refresh().ok());
  EXPECT_EQ(CountOn(f.Devices("tencent.com/vgpu-223"), gpu0), 8u);
  EXPECT_EQ(CountOn(f.Devices("tencent.com/vgpu-222"), gpu0), 16u)
      << "the recorded device and the freed instance must not be listed twice";
}

// #14 item 4: kubelet admits pods of different types back to back, from the lists it holds; the
// 223 list it has may predate GPU 0's lock to 222 (kubelet reads each stream on its own). The
// preferred allocation must not send 223 there while GPU 1 is free.
TEST(ResourceManagerTest, PreferredAllocationRightAfterALockSendsAnotherTypeToAFreeGpu) {
  Fixture f("t4x2");
  f.manager.SetRefreshRequester([] {});  // the rescan has not happened yet
  const std::string gpu1 = f.sim.gpu(1);
  const std::string r222 = "tencent.com/vgpu-222", r223 = "tencent.com/vgpu-223";
  auto first = f.manager.PreferredAllocation(r222, {{IdsOf(f.Devices(r222)), {}, 1}});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  // kubelet may still hold the 223 list from before the lock (its stream is read on its own).
  std::vector<std::string> available = IdsOf(f.Devices(r223));
  ASSERT_EQ(available.size(), 16u);
  ASSERT_TRUE(f.manager.Allocate(r222, {first->at(0)}).ok());
  // Ours follow at once (issue 49): the Allocate's lock is in the lists it pushes before it
  // returns.
  EXPECT_EQ(IdsOf(f.Devices(r223)).size(), 8u) << "the lock is not in the lists yet";
  auto second = f.manager.PreferredAllocation(r223, {{available, {}, 1}});
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  ASSERT_EQ(second->at(0).size(), 1u);
  EXPECT_EQ(second->at(0)[0].rfind(gpu1, 0), 0u)
      << "223 sent to the GPU 222 just locked: " << second->at(0)[0];
  auto allocated = f.manager.Allocate(r223, {second->at(0)});
  EXPECT_TRUE(allocated.ok()) << allocated.status().ToString();
}

// Found by the scheduling loop (tests/extender/state_roll_test): in equal-size mode a vGPU of one
// type shrinks the shared count of every type of its size, so their lists drop an ID; kubelet,
// still on the list pushed before, may pick that very ID. While the GPU has room for the type,
// the ID takes that room; once the size is full, it is refused as no longer free.
TEST(ResourceManagerTest, AnIdDroppedByASharedCountStillGetsTheRoomItsGpuHas) {
  Fixture f("t4x2-equal-size");
  const std::string gpu0 = f.sim.gpu(0);
  const std::string r222 = "tencent.com/vgpu-222", r230 = "tencent.com/vgpu-230";
  const std::vector<std::string> kubelet_list = IdsOf(f.Devices(r222));
  ASSERT_TRUE(f.manager.Allocate(r230, {{gpu0 + "-nvidia-230-0"}}).ok());
  ASSERT_TRUE(f.manager.Refresh().ok());
  std::string dropped;
  for (const std::string& id : kubelet_list) {
    const std::vector<std::string> now = IdsOf(f.Devices(r222));
    if (std::find(now.begin(), now.end(), id) == now.end()) dropped = id;
  }
  ASSERT_EQ(dropped.rfind(gpu0, 0), 0u) << "a 1 GiB vGPU on GPU 0 shrinks 222's count there";

  auto allocated = f.manager.Allocate(r222, {{dropped}});
  ASSERT_TRUE(allocated.ok()) << allocated.status().ToString();
  EXPECT_EQ(allocated->at(0).vgpus.at(0).device_id, dropped);
  ASSERT_TRUE(f.manager.Refresh().ok());
  EXPECT_EQ(CountOn(f.Devices(r222), gpu0), 15u) << "14 free + the one made under the old ID";

  // Fill the size: 14 more 1 GiB vGPUs; an ID dropped now has no room behind it.
  for (uint32_t i = 1; i <= 14; ++i) {
    ASSERT_TRUE(f.manager.Allocate(r230, {{gpu0 + "-nvidia-230-" + std::to_string(i)}}).ok()) << i;
  }
  ASSERT_TRUE(f.manager.Refresh().ok());
  EXPECT_EQ(CountOn(f.Devices(r222), gpu0), 1u) << "only the 222 made stays listed";
  std::string full;
  for (const std::string& id : kubelet_list) {
    if (id != dropped && id.rfind(gpu0, 0) == 0) full = id;
  }
  auto refused = f.manager.Allocate(r222, {{full}});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::kNoRoom) << refused.status().ToString();
  EXPECT_EQ(f.sim.model().VgpuIds().size(), 16u) << "nothing made past the size's 16";
}

// Found by the scheduling loop (tests/extender): a request for several devices right after a lock,
// on a type with few instances, must still be sent to the free GPU.
TEST(ResourceManagerTest, AMultiDeviceRequestRightAfterALockGoesToTheFreeGpu) {
  Fixture f("t4x2");
  f.manager.SetRefreshRequester([] {});  // the rescan has not happened yet
  const std::string r223 = "tencent.com/vgpu-223", r233 = "tencent.com/vgpu-233";
  auto first = f.manager.PreferredAllocation(r223, {{IdsOf(f.Devices(r223)), {}, 3}});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(f.manager.Allocate(r223, {first->at(0)}).ok());
  auto second = f.manager.PreferredAllocation(r233, {{IdsOf(f.Devices(r233)), {}, 2}});
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  for (const std::string& id : second->at(0)) {
    EXPECT_NE(id.substr(0, 12), first->at(0)[0].substr(0, 12)) << id << " is on the locked GPU";
  }
  auto allocated = f.manager.Allocate(r233, {second->at(0)});
  EXPECT_TRUE(allocated.ok()) << allocated.status().ToString();
}

// Holds the first read of an available_instances file under `where` after Arm() until Release():
// a rescan caught halfway through its read of sysfs.
class PausingIo : public mdev::SysfsIo {
 public:
  explicit PausingIo(mdev::SysfsIo& inner) : inner_(inner) {}
  Result<std::string> ReadFile(const std::filesystem::path& path) override {
    if (path.filename() == "available_instances") {
      std::unique_lock lock(mutex_);
      if (armed_ && path.string().find(where_) != std::string::npos) {
        armed_ = false;
        paused_ = true;
        changed_.notify_all();
        changed_.wait(lock, [&] { return !paused_; });
      }
    }
    return inner_.ReadFile(path);
  }
  Status WriteFile(const std::filesystem::path& path, std::string_view data) override {
    return inner_.WriteFile(path, data);
  }
  Result<std::vector<std::string>> ListDir(const std::filesystem::path& path) override {
    return inner_.ListDir(path);
  }
  Result<std::filesystem::path> ReadLink(const std::filesystem::path& path) override {
    return inner_.ReadLink(path);
  }
  Result<std::filesystem::path> Canonical(const std::filesystem::path& path) override {
    return inner_.Canonical(path);
  }
  bool Exists(const std::filesystem::path& path) override { return inner_.Exists(path); }
  bool IsDirectory(const std::filesystem::path& path) override { return inner_.IsDirectory(path); }

  void Arm(std::string where) {
    std::lock_guard lock(mutex_);
    armed_ = true;
    where_ = std::move(where);
  }
  void WaitUntilPaused() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return paused_; });
  }
  void Release() {
    std::lock_guard lock(mutex_);
    paused_ = false;
    changed_.notify_all();
  }

 private:
  mdev::SysfsIo& inner_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool armed_ = false;
  std::string where_;
  bool paused_ = false;
};

// Found by the scheduling loop (tests/extender): a rescan reads sysfs without the lock; one that
// began before an Allocate and ends after it must not replace the view with what it read, which
// predates the new vGPUs (the GPU would look free, and the next type would be sent there).
TEST(ResourceManagerTest, ARescanThatBeganBeforeAnAllocateDoesNotLoseItsVgpus) {
  SimNode sim("t4x2");
  PausingIo io(sim.model());
  mdev::SysfsBackend node(sim.model().root(), io);
  MemoryStateStore store;
  ScriptedHolders holders;
  ResourceManager manager(node, InTempDir(ModelOptions{}, sim), store, holders);
  ASSERT_TRUE(manager.Start().ok());
  const std::string r223 = "tencent.com/vgpu-223";
  const std::string gpu0 = sim.gpu(0);

  // Paused once GPU 0's counts are read, before GPU 1's and the vGPUs.
  io.Arm("/" + sim.gpu(1) + "/");
  auto rescan = std::async(std::launch::async, [&] { return manager.Refresh(); });
  io.WaitUntilPaused();
  auto allocated = manager.Allocate(r223, {{gpu0 + "-nvidia-223-0", gpu0 + "-nvidia-223-1"}});
  ASSERT_TRUE(allocated.ok()) << allocated.status().ToString();
  io.Release();
  ASSERT_TRUE(rescan.get().ok());

  scheduling::NodeVgpuState state = manager.SchedulerState();
  const auto gpu = std::find_if(state.gpus.begin(), state.gpus.end(),
                                [&](const scheduling::GpuSlots& g) { return g.id == gpu0; });
  ASSERT_NE(gpu, state.gpus.end());
  EXPECT_EQ(gpu->locked_type, "nvidia-223") << "the vGPUs made during the scan are still seen";
  EXPECT_EQ(gpu->resources.at(r223).used, 2u);
  EXPECT_FALSE(gpu->resources.contains("tencent.com/vgpu-222"))
      << "the lock hides the other types, as the kernel says";
}

// #14 item 5: every A100 VF shows each type once, but the GPU hosts at most max_instance of a
// type: 1 x 80C, 2 x 40C, 20 x 4C.
TEST(ResourceManagerTest, SriovTypesAdvertiseWhatTheGpuCanHostNotOnePerVf) {
  Fixture f("a100-sriov");
  EXPECT_EQ(f.Devices("tencent.com/vgpu-698").size(), 1u) << "A100D-80C";
  EXPECT_EQ(f.Devices("tencent.com/vgpu-697").size(), 2u) << "A100D-40C";
  EXPECT_EQ(f.Devices("tencent.com/vgpu-692").size(), 20u) << "A100D-4C";
  std::vector<std::string> two = IdsOf(f.Devices("tencent.com/vgpu-697"));
  auto allocated = f.manager.Allocate("tencent.com/vgpu-697", {{two[0]}});
  ASSERT_TRUE(allocated.ok()) << allocated.status().ToString();
  std::vector<Device> after = f.Devices("tencent.com/vgpu-697");
  EXPECT_EQ(after.size(), 2u) << "the one made and the one still possible";
  auto second = f.manager.Allocate("tencent.com/vgpu-697",
                                   {{after[0].id == two[0] ? after[1].id : after[0].id}});
  EXPECT_TRUE(second.ok()) << "every advertised device can be allocated: "
                           << second.status().ToString();
}

TEST(ResourceManagerTest, PinningAndAllowedTypesRestrictWhatIsOffered) {
  struct Case {
    std::string description;
    std::vector<PinRule> pinning;
    std::vector<std::string> allowed;
    std::map<std::string, size_t> expected;  // resource -> devices
  };
  const std::string gpu0 = "0000:3b:00.0";
  const std::vector<Case> cases = {
      {"dynamic by default: every type on both GPUs",
       {},
       {},
       {{"tencent.com/vgpu-222", 32}, {"tencent.com/vgpu-234", 2}}},
      {"one GPU pinned by address, the other stays dynamic",
       {{gpu0, std::nullopt, false, "nvidia-234"}},
       {},
       {{"tencent.com/vgpu-222", 16}, {"tencent.com/vgpu-234", 2}}},
      {"pinned by model name",
       {{std::nullopt, "T4", false, "nvidia-223"}},
       {},
       {{"tencent.com/vgpu-222", 0}, {"tencent.com/vgpu-223", 16}}},
      {"pinned by PCI device id",
       {{std::nullopt, "0x1eb8", false, "nvidia-231"}},
       {},
       {{"tencent.com/vgpu-231", 16}, {"tencent.com/vgpu-230", 0}}},
      {"address beats all",
       {{std::nullopt, std::nullopt, true, "nvidia-222"},
        {gpu0, std::nullopt, false, "nvidia-234"}},
       {},
       {{"tencent.com/vgpu-222", 16}, {"tencent.com/vgpu-234", 1}}},
      {"allowed types only",
       {},
       {"nvidia-222", "nvidia-230"},
       {{"tencent.com/vgpu-222", 32}, {"tencent.com/vgpu-230", 32}, {"tencent.com/vgpu-223", 0}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.description);
    ModelOptions config;
    config.pinning = c.pinning;
    config.allowed_types = c.allowed;
    Fixture f("t4x2", config);
    for (const auto& [resource, count] : c.expected) {
      EXPECT_EQ(f.Devices(resource).size(), count) << resource;
    }
  }
}

TEST(ResourceManagerTest, PreferredAllocationPacksSpreadsAndHonoursMustInclude) {
  const std::string g0 = "0000:3b:00.0", g1 = "0000:af:00.0";
  auto id = [](const std::string& gpu, int slot) {
    return gpu + "-nvidia-223-" + std::to_string(slot);
  };
  struct Case {
    std::string description;
    bool spread;
    PreferredRequest request;
    std::vector<std::string> expected;
  };
  // GPU 1 already hosts one 223 vGPU (slot 0 taken), so it is locked to 223.
  const std::vector<Case> cases = {
      {"pack onto the GPU already locked to the type",
       false,
       {{id(g0, 0), id(g0, 1), id(g1, 1), id(g1, 2)}, {}, 2},
       {id(g1, 1), id(g1, 2)}},
      {"spread across GPUs, locked GPU first",
       true,
       {{id(g0, 0), id(g0, 1), id(g1, 1), id(g1, 2)}, {}, 2},
       {id(g1, 1), id(g0, 0)}},
      {"must-include comes first and counts",
       false,
       {{id(g0, 0), id(g0, 1), id(g1, 1), id(g1, 2)}, {id(g0, 1)}, 2},
       {id(g0, 1), id(g1, 1)}},
      {"spread skips the GPU a must-include device is on",
       true,
       {{id(g0, 0), id(g0, 1), id(g1, 1), id(g1, 2)}, {id(g1, 2)}, 2},
       {id(g1, 2), id(g0, 0)}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.description);
    ModelOptions config;
    config.spread_across_gpus = c.spread;
    Fixture f("t4x2", config);
    ASSERT_TRUE(f.manager.Allocate("tencent.com/vgpu-223", {{id(g1, 0)}}).ok());
    auto answer = f.manager.PreferredAllocation("tencent.com/vgpu-223", {c.request});
    ASSERT_TRUE(answer.ok()) << answer.status().ToString();
    EXPECT_EQ(answer->at(0), c.expected);
  }
}

TEST(ResourceManagerTest, PreferredAllocationRefusesImpossibleRequests) {
  Fixture f("mtty");
  const std::string r = "tencent.com/vgpu-mtty-2";
  struct Case {
    std::string description;
    PreferredRequest request;
  };
  const std::vector<Case> cases = {
      {"size larger than what is available", {{"mtty-mtty-2-0"}, {}, 2}},
      {"must-include not among the available", {{"mtty-mtty-2-0"}, {"mtty-mtty-2-1"}, 1}},
      {"zero size", {{"mtty-mtty-2-0"}, {}, 0}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.description);
    auto answer = f.manager.PreferredAllocation(r, {c.request});
    ASSERT_FALSE(answer.ok());
    EXPECT_EQ(answer.status().code(), ErrorCode::kInvalid);
  }
}

// #14 item 8: kubelet's available list may hold IDs this resource does not list (another
// resource's, or one gone meanwhile); the answer names only devices this resource lists.
TEST(ResourceManagerTest, PreferredAllocationAnswersOnlyDevicesThisResourceLists) {
  Fixture f("t4x2");
  const std::string r = "tencent.com/vgpu-223";
  std::vector<std::string> ours = IdsOf(f.Devices(r));
  ASSERT_FALSE(ours.empty());
  PreferredRequest request{{ours[0], f.sim.gpu(0) + "-nvidia-222-0", "no-such-device"}, {}, 3};
  auto answer = f.manager.PreferredAllocation(r, {request});
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  EXPECT_EQ(answer->at(0), std::vector<std::string>{ours[0]});
}

TEST(ResourceManagerTest, AllocateAnswersVfioDevicesEnvAndCdiNames) {
  ModelOptions config;
  config.cdi_enabled = true;
  Fixture f("t4x2", config);

  const std::string a = "0000:3b:00.0-nvidia-222-0", b = "0000:3b:00.0-nvidia-222-1";
  auto result = f.manager.Allocate("tencent.com/vgpu-222", {{a, b}});
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  const ContainerAllocation& c = result->at(0);
  ASSERT_EQ(c.vgpus.size(), 2u);
  std::vector<std::string> paths;
  for (const DeviceNode& n : c.devices) {
    EXPECT_EQ(n.host_path, n.container_path);
    EXPECT_EQ(n.permissions, "rw");
    paths.push_back(n.host_path);
  }
  std::vector<std::string> expected = {"/dev/vfio/vfio", c.vgpus[0].vfio_device,
                                       c.vgpus[1].vfio_device};
  EXPECT_EQ(paths, expected);
  for (const AllocatedVgpu& v : c.vgpus) {
    EXPECT_TRUE(mdev::IsValidUuid(v.vgpu_id));
    auto group = f.sim.model().ReadLink(f.sim.model().root() / "sys/bus/mdev/devices" / v.vgpu_id /
                                        "iommu_group");
    ASSERT_TRUE(group.ok());
    EXPECT_EQ("/dev/vfio/" + group->filename().string(), v.vfio_device)
        << "the group handed out is the one the kernel shows";
  }
  EXPECT_EQ(c.envs.at("KVGPU_VGPU_222_DEVICE_IDS"), a + "," + b);
  EXPECT_EQ(c.envs.at("KVGPU_VGPU_222_UUIDS"), c.vgpus[0].vgpu_id + "," + c.vgpus[1].vgpu_id);
  EXPECT_EQ(c.envs.at("KVGPU_VGPU_222_TYPES"), "nvidia-222,nvidia-222");
  EXPECT_EQ(c.cdi_devices,
            (std::vector<std::string>{"tencent.com/vgpu-222=" + a, "tencent.com/vgpu-222=" + b}));

  std::ifstream spec_file(f.sim.dir() / "cdi" / "kata-vgpu_tencent.com_vgpu-222.json");
  ASSERT_TRUE(spec_file.good());
  auto spec = nlohmann::json::parse(spec_file);
  EXPECT_EQ(spec["kind"], "tencent.com/vgpu-222");
  ASSERT_EQ(spec["devices"].size(), 2u);
  EXPECT_EQ(spec["devices"][0]["name"], a);
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["deviceNodes"][0]["path"], c.vgpus[0].vfio_device);

  ASSERT_EQ(f.store.vgpus_.size(), 2u) << "both vGPUs recorded as ours";
  EXPECT_EQ(f.store.vgpus_[0].device_id, a);
  EXPECT_EQ(f.store.vgpus_[0].vgpu_id, c.vgpus[0].vgpu_id);
}

// Make: the same transaction for one set of device IDs, answered with what was made only (the DRA
// front end words its own answer).
TEST(ResourceManagerTest, MakeReturnsTheVgpusMadeInTheOrderAskedAndRecordsThem) {
  ModelOptions config;
  config.cdi_enabled = true;
  Fixture f("t4x2", config);

  const std::string a = "0000:3b:00.0-nvidia-222-1", b = "0000:3b:00.0-nvidia-222-0";
  auto made = f.manager.Make("tencent.com/vgpu-222", {a, b});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  ASSERT_EQ(made->size(), 2u);
  EXPECT_EQ(made->at(0).device_id, a);
  EXPECT_EQ(made->at(1).device_id, b);
  for (const AllocatedVgpu& v : *made) {
    EXPECT_TRUE(mdev::IsValidUuid(v.vgpu_id));
    EXPECT_EQ(v.type_id, "nvidia-222");
    EXPECT_FALSE(v.reused);
  }
  EXPECT_EQ(f.sim.model().VgpuIds().size(), 2u);
  ASSERT_EQ(f.store.vgpus_.size(), 2u) << "both vGPUs recorded as ours";
  EXPECT_TRUE(std::filesystem::exists(f.sim.dir() / "cdi" / "kata-vgpu_tencent.com_vgpu-222.json"))
      << "the CDI spec that names them is written, as for Allocate";

  auto unknown = f.manager.Make("tencent.com/vgpu-222", {"0000:3b:00.0-nvidia-222-99"});
  EXPECT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), ErrorCode::kInvalid) << unknown.status().ToString();
  EXPECT_EQ(f.sim.model().VgpuIds().size(), 2u) << "a refused request makes nothing";
}

TEST(ResourceManagerTest, VendorVfioAllocationTurnsTheVfIntoTheVgpu) {
  Fixture f("h200-vfio");
  std::vector<Device> devices = f.Devices("tencent.com/vgpu-1428");
  ASSERT_FALSE(devices.empty());
  auto result = f.manager.Allocate("tencent.com/vgpu-1428", {{devices[0].id}});
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->at(0).vgpus.at(0).vgpu_id, devices[0].key.parent);
  EXPECT_EQ(f.sim.model().VgpuIds(), std::vector<std::string>{devices[0].key.parent});
}

TEST(ResourceManagerTest, AFailedCreateRemovesWhatTheRequestCreatedAndNamesDeviceAndReason) {
  Fixture f("t4x2");
  const std::string first = "0000:3b:00.0-nvidia-222-0", second = "0000:af:00.0-nvidia-222-0";
  f.sim.model().InjectFault(sim::Op::kWrite, "0000:af:00.0/mdev_supported_types/nvidia-222/create",
                            ENOSPC);
  auto result = f.manager.Allocate("tencent.com/vgpu-222", {{first}, {second}});
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find(second), std::string::npos) << result.status().message();
  EXPECT_EQ(result.status().code(), ErrorCode::kNoRoom) << result.status().ToString();
  EXPECT_TRUE(f.sim.model().VgpuIds().empty()) << "the first container's vGPU is rolled back";
  EXPECT_TRUE(f.store.vgpus_.empty());
  EXPECT_EQ(f.Devices("tencent.com/vgpu-223").size(), 16u) << "both GPUs unlocked again";
}

// The device plugin's lifecycle judges a young vGPU by when Allocate handed it out
// (holder_tracker.cpp), so that moment is saved before Allocate returns and outlives a restart.
// The DRA front end's oracle decides from its prepared claims, written before the vGPU is made: its
// prepares do not pay for that write.
TEST(ResourceManagerTest, TheHandoutTimeIsSavedOnlyWhereTheHolderOracleJudgesByIt) {
  class CountingStore : public MemoryStateStore {
   public:
    Status Save(const std::vector<CreatedVgpu>& vgpus) override {
      ++saves;
      return MemoryStateStore::Save(vgpus);
    }
    int saves = 0;
  };
  class Holders : public ScriptedHolders {
   public:
    explicit Holders(bool uses) : uses_(uses) {}
    bool UsesHandoutTime() const override { return uses_; }

   private:
    bool uses_;
  };
  std::map<bool, int> saves;
  std::map<bool, int64_t> saved_stamp;
  for (bool uses : {true, false}) {
    SimNode sim("t4x2");
    CountingStore store;
    Holders holders(uses);
    ResourceManager manager(sim.node(), InTempDir({}, sim), store, holders);
    ASSERT_TRUE(manager.Start().ok());
    const int before = store.saves;
    auto made = manager.Allocate("tencent.com/vgpu-222", {{"0000:3b:00.0-nvidia-222-0"}});
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    saves[uses] = store.saves - before;
    ASSERT_EQ(store.vgpus_.size(), 1u);
    saved_stamp[uses] = store.vgpus_[0].created_unix_ms;
  }
  EXPECT_EQ(saves[true], saves[false] + 1);
  EXPECT_GT(saved_stamp[false], 0) << "the record itself is saved before the create either way";
}

TEST(ResourceManagerTest, AStateStoreThatCannotWriteCreatesNothing) {
  Fixture f("mtty");
  f.store.fail_saves = true;
  auto result = f.manager.Allocate("tencent.com/vgpu-mtty-1", {{"mtty-mtty-1-0"}});
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("cannot record"), std::string::npos);
  EXPECT_TRUE(f.sim.model().VgpuIds().empty());
}

TEST(ResourceManagerTest, BadRequestsAreRefusedAndChangeNothing) {
  Fixture f("t4x2");
  struct Case {
    std::string description;
    std::string resource;
    std::vector<std::vector<std::string>> containers;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {"no containers", "tencent.com/vgpu-222", {}, "no containers"},
      {"a container with no devices", "tencent.com/vgpu-222", {{}}, "names no devices"},
      {"unknown device",
       "tencent.com/vgpu-222",
       {{"0000:3b:00.0-nvidia-222-99"}},
       "unknown device 0000:3b:00.0-nvidia-222-99"},
      {"device of another resource",
       "tencent.com/vgpu-222",
       {{"0000:3b:00.0-nvidia-223-0"}},
       "belongs to tencent.com/vgpu-223"},
      {"the same device twice",
       "tencent.com/vgpu-222",
       {{"0000:3b:00.0-nvidia-222-0"}, {"0000:3b:00.0-nvidia-222-0"}},
       "requested twice"},
      {"valid device after an invalid one",
       "tencent.com/vgpu-222",
       {{"0000:3b:00.0-nvidia-222-0", "nonsense"}},
       "unknown device nonsense"},
      {"unknown resource", "tencent.com/vgpu-999", {{"x"}}, "unknown resource"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.description);
    auto result = f.manager.Allocate(c.resource, c.containers);
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), ErrorCode::kInvalid);
    EXPECT_NE(result.status().message().find(c.message_part), std::string::npos)
        << result.status().message();
    EXPECT_TRUE(f.sim.model().VgpuIds().empty());
    EXPECT_TRUE(f.store.vgpus_.empty());
  }
}

TEST(ResourceManagerTest, AnIdHandedOutAgainIsRecreatedFreshOnlyWhenNoPodHoldsIt) {
  struct Case {
    std::string description;
    Holding holding;
    bool ok;
    bool recreated;
  };
  const std::vector<Case> cases = {
      {"nobody can tell: refused, the old vGPU is kept", Holding::kUnknown, false, false},
      {"the pod holding it asks again: it gets the same vGPU", Holding::kHeld, true, false},
      {"free: removed and made anew", Holding::kFree, true, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.description);
    Fixture f("mtty");
    const std::string id = "mtty-mtty-2-0";
    auto first = f.manager.Allocate("tencent.com/vgpu-mtty-2", {{id}});
    ASSERT_TRUE(first.ok());
    std::string old_uuid = first->at(0).vgpus.at(0).vgpu_id;
    f.holders.answer = {c.holding, "default/train-1", "scripted"};
    auto again = f.manager.Allocate("tencent.com/vgpu-mtty-2", {{id}});
    ASSERT_EQ(again.ok(), c.ok) << (again.ok() ? "" : again.status().ToString());
    std::vector<std::string> vgpus = f.sim.model().VgpuIds();
    ASSERT_EQ(vgpus.size(), 1u);
    if (c.recreated) {
      EXPECT_NE(vgpus[0], old_uuid) << "never the same vGPU for two pods";
      EXPECT_EQ(again->at(0).vgpus.at(0).vgpu_id, vgpus[0]);
    } else if (c.ok) {
      EXPECT_EQ(vgpus[0], old_uuid);
      EXPECT_EQ(again->at(0).vgpus.at(0).vgpu_id, old_uuid);
      EXPECT_EQ(f.store.vgpus_.size(), 1u);
    } else {
      EXPECT_EQ(vgpus[0], old_uuid);
      EXPECT_NE(again.status().message().find(old_uuid), std::string::npos);
    }
  }
}

TEST(ResourceManagerTest, ParentGoneMakesItsDevicesUnhealthyAndBackHealthy) {
  Fixture f("t4x2");
  const std::string gpu0 = f.sim.gpu(0);
  ASSERT_TRUE(f.manager.Allocate("tencent.com/vgpu-222", {{gpu0 + "-nvidia-222-3"}}).ok());
  ASSERT_TRUE(f.sim.model().RemoveGpu(gpu0).ok());
  ASSERT_TRUE(f.manager.Refresh().ok());
  auto devices = f.Devices("tencent.com/vgpu-222");
  EXPECT_EQ(devices.size(), 32u) << "kubelet keeps seeing the devices, unhealthy";
  for (const Device& d : devices) EXPECT_EQ(d.healthy, d.physical_gpu != gpu0) << d.id;
  auto refused = f.manager.Allocate("tencent.com/vgpu-222", {{gpu0 + "-nvidia-222-0"}});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("unhealthy"), std::string::npos);

  ASSERT_TRUE(f.sim.model().RestoreGpu(gpu0).ok());
  ASSERT_TRUE(f.manager.Refresh().ok());
  devices = f.Devices("tencent.com/vgpu-222");
  EXPECT_EQ(devices.size(), 32u);
  for (const Device& d : devices) EXPECT_TRUE(d.healthy) << d.id;
  EXPECT_EQ(CountOn(f.Devices("tencent.com/vgpu-223"), gpu0), 8u) << "capacity is back";
}

TEST(ResourceManagerTest, VgpusOfOthersAreNeitherListedAsOursNorTouched) {
  Fixture f("mtty");
  auto foreign = f.sim.node().Create({"mtty", "mtty-2", std::nullopt});
  ASSERT_TRUE(foreign.ok());
  ASSERT_TRUE(f.manager.Refresh().ok());
  auto devices = f.Devices("tencent.com/vgpu-mtty-2");
  EXPECT_EQ(devices.size(), 11u);
  for (const Device& d : devices) EXPECT_FALSE(d.ours);
  ASSERT_TRUE(f.manager.Allocate("tencent.com/vgpu-mtty-2", {{devices[0].id}}).ok());
  auto ids = f.sim.model().VgpuIds();
  EXPECT_NE(std::find(ids.begin(), ids.end(), foreign->id), ids.end());
}

TEST(ResourceManagerTest, StartRefusesACorruptRecordAndAnInvalidDomain) {
  SimNode sim("mtty");
  UnknownHolders holders;
  {
    kvgpu::testing::TempDir dir;
    std::ofstream(dir.path() / "device-plugin-state.json") << "{\"version\":1,\"vgpus\":[{";
    JsonFileStateStore store(dir.path());
    ResourceManager manager(sim.node(), {}, store, holders);
    Status started = manager.Start();
    EXPECT_FALSE(started.ok());
    EXPECT_NE(started.message().find("refusing to start"), std::string::npos);
  }
  {
    MemoryStateStore store;
    ModelOptions config;
    config.naming.domain = "Bad_Domain";
    ResourceManager manager(sim.node(), config, store, holders);
    EXPECT_FALSE(manager.Start().ok());
  }
}

}  // namespace
}  // namespace kvgpu::deviceplugin
