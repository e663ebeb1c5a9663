// kill -9 of the real kvgpu-device-plugin at every step of allocation and removal, and the
// faults a node sees around it (state file garbage, kubelet restarting, EBUSY, a GPU leaving),
// each followed by a restart and a check of ARCHITECTURE.md's invariants:
//   1. a vGPU a pod that kubelet lists holds is never removed (checked on every poll),
//   2. a vGPU of ours that no live pod holds is gone within kRemovalBound,
//   3. the foreign vGPU (made through sysfs before the plugin ever ran) is never touched,
//   4. the device IDs advertised after the restart are those advertised before.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <thread>

#include "tests/deviceplugin/crash_node.h"

namespace kvgpu::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// The plugin waits 5 s (its settle time) after a vGPU is made and after kubelet answers again
// before it may judge a vGPU free, then passes every 200 ms. A PodResources List that times out
// (5 s; seen once on a loaded machine) restarts the settle time: 5 + 5 + 5 s, and margin.
constexpr auto kRemovalBound = 20s;
constexpr int kKilled = 128 + SIGKILL;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class CrashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto reason = FuseUnavailableReason()) GTEST_SKIP() << *reason;
    auto failed = node_.Start();
    ASSERT_FALSE(failed) << *failed;
    // Of the type our pods get, on the GPU they use: a vGPU the plugin must count and leave be.
    failed = node_.CreateForeign(kGpu0, "nvidia-222", &foreign_);
    ASSERT_FALSE(failed) << *failed;
    ASSERT_EQ(node_.VgpuUuids(), std::set<std::string>{foreign_});
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << node_.Logs();
  }

  void StartPlugin(const std::string& failpoints = "") {
    auto failed = node_.StartPlugin(failpoints);
    ASSERT_FALSE(failed) << *failed;
  }
  CrashPod RunPod(const std::string& name, const std::string& gpu = kGpu0) {
    CrashPod pod;
    auto failed = node_.RunPod(name, gpu, &pod);
    EXPECT_FALSE(failed) << name << ": " << *failed;
    return pod;
  }

  // Polls until the simulator shows exactly `end`; every vGPU in `held` (pods kubelet lists,
  // and the foreign one) must be there on every poll (invariants 1 and 3).
  ::testing::AssertionResult Settles(std::set<std::string> held, std::set<std::string> end,
                                     std::chrono::milliseconds timeout = kRemovalBound) {
    held.insert(foreign_);
    end.insert(foreign_);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::set<std::string> now;
    while (std::chrono::steady_clock::now() < deadline) {
      now = node_.VgpuUuids();
      for (const std::string& uuid : held) {
        if (!now.contains(uuid)) return ::testing::AssertionFailure() << uuid << " was removed";
      }
      if (now == end) return ::testing::AssertionSuccess();
      std::this_thread::sleep_for(20ms);
    }
    return ::testing::AssertionFailure() << now.size() << " vGPUs after " << timeout.count()
                                         << " ms, " << end.size() << " expected";
  }

  // Invariant 4: kubelet is offered the same IDs as before, for every resource.
  void ExpectSameIds(const std::map<std::string, std::set<std::string>>& before) {
    // The lists converge once the removal's rescan has run; under TSan on a loaded machine that
    // took longer than 5 s once. The wait ends as soon as they match.
    if (WaitFor([&] { return node_.Advertised() == before; })) return;
    const auto after = node_.Advertised();
    for (const auto& [resource, ids] : before) {
      std::vector<std::string> lost, gained;
      const auto& now = after.contains(resource) ? after.at(resource) : std::set<std::string>{};
      std::set_difference(ids.begin(), ids.end(), now.begin(), now.end(), std::back_inserter(lost));
      std::set_difference(now.begin(), now.end(), ids.begin(), ids.end(),
                          std::back_inserter(gained));
      EXPECT_TRUE(lost.empty() && gained.empty())
          << resource << ": " << lost.size() << " IDs gone (first " << (lost.empty() ? "" : lost[0])
          << "), " << gained.size() << " new (first " << (gained.empty() ? "" : gained[0]) << ")";
    }
    EXPECT_EQ(after.size(), before.size()) << "resources advertised";
  }

  void ExpectKilledAt(const std::string& point, std::chrono::milliseconds timeout) {
    EXPECT_EQ(node_.WaitPluginExit(timeout), kKilled) << "the plugin did not die by SIGKILL";
    EXPECT_NE(node_.plugin().Log().find("kvgpu failpoint " + point + ": SIGKILL"),
              std::string::npos);
  }

  CrashNode node_;
  std::string foreign_;
};

struct AllocateCrash {
  std::string description;
  std::string failpoint;
  bool vgpu_made;  // whether the crash leaves the kernel with the vGPU
};

TEST_F(CrashTest, KilledAtEveryStepOfAllocateTheNodeRecoversAfterRestart) {
  const std::vector<AllocateCrash> cases = {
      {"record written, vGPU not yet made", "allocate.after-record", false},
      {"vGPU made, record not updated", "allocate.after-create", true},
      {"everything done but the answer to kubelet", "allocate.before-reply", true},
  };
  ASSERT_NO_FATAL_FAILURE(StartPlugin());
  const CrashPod live = RunPod("live");
  const auto ids = node_.Advertised();
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    EXPECT_EQ(node_.plugin().Kill(), kKilled);
    ASSERT_NO_FATAL_FAILURE(StartPlugin(c.failpoint));
    CrashPod victim;
    // kubelet's Allocate fails: the pod is never admitted, so nothing holds what was made.
    EXPECT_TRUE(node_.RunPod("victim", kGpu0, &victim));
    ExpectKilledAt(c.failpoint, 5s);
    EXPECT_EQ(node_.VgpuUuids().size(), c.vgpu_made ? 3u : 2u);
    ASSERT_NO_FATAL_FAILURE(StartPlugin());
    EXPECT_TRUE(Settles({live.vgpu}, {live.vgpu}));
    ExpectSameIds(ids);
  }
}

struct RemoveCrash {
  std::string description;
  std::string failpoint;
  bool vgpu_left;  // whether the kernel still has the vGPU after the crash
};

TEST_F(CrashTest, KilledAtEveryStepOfRemovalTheNodeRecoversAfterRestart) {
  const std::vector<RemoveCrash> cases = {
      {"decided, the remove not yet written", "remove.before-write", true},
      {"removed, the record not yet dropped", "remove.after-write", false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    if (node_.plugin().Running()) {
      EXPECT_EQ(node_.plugin().Kill(), kKilled);
    }
    ASSERT_NO_FATAL_FAILURE(StartPlugin(c.failpoint));
    const CrashPod live = RunPod("live-" + c.failpoint);
    const CrashPod victim = RunPod("victim-" + c.failpoint);
    const auto ids = node_.Advertised();
    node_.DeletePod(victim.name);
    ExpectKilledAt(c.failpoint, kRemovalBound);
    EXPECT_EQ(node_.VgpuUuids().contains(victim.vgpu), c.vgpu_left);
    ASSERT_NO_FATAL_FAILURE(StartPlugin());
    EXPECT_TRUE(Settles({live.vgpu}, {live.vgpu}));
    ExpectSameIds(ids);
    // The record of the removed vGPU goes too, so a reused UUID is never taken for ours.
    EXPECT_TRUE(
        WaitFor([&] { return ReadFile(node_.state_file()).find(victim.vgpu) == std::string::npos; },
                kRemovalBound));
    node_.DeletePod(live.name);
    EXPECT_TRUE(Settles({}, {}));
  }
}

TEST_F(CrashTest, StateFileGarbageIsMovedAsideAndRebuiltFromKubeletsCheckpoint) {
  ASSERT_NO_FATAL_FAILURE(StartPlugin());
  const CrashPod live = RunPod("live");
  const CrashPod gone = RunPod("gone");
  const auto ids = node_.Advertised();
  EXPECT_EQ(node_.plugin().Kill(), kKilled);
  // While the plugin is down its pod goes, and the disk returns garbage for the state file.
  node_.DeletePod(gone.name);
  std::ofstream(node_.state_file(), std::ios::trunc)
      << "{\"records\": [{\"uuid\": \x01\x02 garbage";
  ASSERT_NO_FATAL_FAILURE(StartPlugin());

  bool moved_aside = false;
  for (const auto& entry : fs::directory_iterator(node_.state_dir())) {
    moved_aside |=
        entry.path().filename().string().starts_with("device-plugin-state.json.corrupt-");
  }
  EXPECT_TRUE(moved_aside) << "the corrupt file was not kept for a look";
  EXPECT_NE(node_.plugin().Log().find("STATE FILE CORRUPT"), std::string::npos);
  // Ours again through the checkpoint's AllocResp: the dead pod's vGPU goes, the live one stays
  // under its device ID, the foreign one (named by no answer of ours) is left alone.
  EXPECT_TRUE(Settles({live.vgpu}, {live.vgpu}));
  ExpectSameIds(ids);
  const std::string state = ReadFile(node_.state_file());
  EXPECT_NE(state.find(live.vgpu), std::string::npos);
  EXPECT_NE(state.find(live.device_id), std::string::npos);
  EXPECT_EQ(state.find(foreign_), std::string::npos);
}

TEST_F(CrashTest, KubeletRestartingMidScenarioRemovesOnlyWhatItsPodLeft) {
  ASSERT_NO_FATAL_FAILURE(StartPlugin());
  const CrashPod live = RunPod("live");
  const CrashPod victim = RunPod("victim");
  const auto ids = node_.Advertised();
  const size_t registrations = node_.kubelet().Registrations().size();
  // Listing nothing for a second after it comes back, as kubelet does while it reloads.
  ASSERT_TRUE(node_.RestartKubelet(1s));
  node_.DeletePod(victim.name);
  EXPECT_TRUE(node_.kubelet().WaitUntil([&] {
    return node_.kubelet().Registrations().size() > registrations;
  })) << "the plugin did not register again";
  EXPECT_TRUE(Settles({live.vgpu}, {live.vgpu}));
  ExpectSameIds(ids);
  EXPECT_TRUE(node_.plugin().Running());
}

TEST_F(CrashTest, EbusyKeepsTheVgpuUntilTheVmLetsGoThenItIsRemoved) {
  ASSERT_NO_FATAL_FAILURE(StartPlugin());
  const CrashPod victim = RunPod("victim");
  ASSERT_FALSE(node_.sim().Control("busy " + victim.vgpu));
  node_.DeletePod(victim.name);
  // The removal is tried (and refused) until the VM lets go; nothing else waits for it.
  EXPECT_TRUE(WaitFor(
      [&] { return node_.plugin().Log().find("not removed (attempt 2)") != std::string::npos; },
      kRemovalBound));
  EXPECT_TRUE(node_.VgpuUuids().contains(victim.vgpu));
  CrashPod next = RunPod("next", kGpu1);
  EXPECT_FALSE(next.vgpu.empty()) << "Allocate stalled behind a busy removal";
  ASSERT_FALSE(node_.sim().Control("release " + victim.vgpu));
  EXPECT_TRUE(Settles({next.vgpu}, {next.vgpu}, 5s));
}

TEST_F(CrashTest, AGpuVanishingTakesNothingOfAnotherGpu) {
  ASSERT_NO_FATAL_FAILURE(StartPlugin());
  const CrashPod on_gpu0 = RunPod("on-gpu0", kGpu0);
  const CrashPod on_gpu1 = RunPod("on-gpu1", kGpu1);
  const auto ids = node_.Advertised();
  ASSERT_FALSE(node_.sim().Control(std::string("unplug ") + kGpu1));
  // Its pod is gone with it; the other GPU's vGPUs, held or foreign, stay through every pass.
  node_.DeletePod(on_gpu1.name);
  EXPECT_TRUE(Settles({on_gpu0.vgpu}, {on_gpu0.vgpu}));
  std::this_thread::sleep_for(6s);  // past the settle time: every pass has judged by now
  EXPECT_TRUE(Settles({on_gpu0.vgpu}, {on_gpu0.vgpu}, 1s));
  EXPECT_TRUE(node_.plugin().Running());
  ASSERT_FALSE(node_.sim().Control(std::string("restore ") + kGpu1));
  // The GPU comes back empty (its pod was deleted while it was gone): once rescanned it is
  // offered to every type again, while each resource listed before keeps its IDs (invariant 4).
  // Comparing the whole lists with those of before the unplug, when it was locked to its pod's
  // type, passed only when the comparison ran before that rescan (a quiet machine).
  const std::string gpu1_prefix = std::string(kGpu1) + "-";
  const bool settled = WaitFor([&] {
    const auto now = node_.Advertised();
    for (const auto& [resource, listed] : ids) {
      if (!now.contains(resource) || now.at(resource) != listed) return false;
    }
    for (const std::string& resource : node_.kubelet().ConnectedResources()) {
      if (!now.contains(resource)) return false;
      const auto& listed = now.at(resource);
      if (std::none_of(listed.begin(), listed.end(),
                       [&](const std::string& id) { return id.starts_with(gpu1_prefix); })) {
        return false;
      }
    }
    return true;
  });
  if (!settled) ExpectSameIds(ids);  // prints which resource differs
  EXPECT_TRUE(settled) << "every type offered on the restored GPU, the others' IDs kept";
}

}  // namespace
}  // namespace kvgpu::testing
