// kill -9 at every step of prepare and unprepare (failpoint.h), then a daemon restart: the claim
// checkpoint and the model's record together let the restart undo a claim killed mid-prepare (all
// or nothing per claim: nothing of it is left before kubelet calls again) and the re-sent call
// finish an unprepare, and nothing is leaked or wrongly removed (a foreign vGPU on the same GPU
// survives every run).
//
// The kernel is kvgpu-sim over FUSE, so the vGPUs a killed process made outlive it. The killed
// process is a gtest death-test child (re-executed, "threadsafe" style) that finds the mount and
// the state directory through the environment; the parent is the restarted daemon.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "fakes/cluster/sim_mount.h"
#include "fakes/common/dra_node.h"
#include "fakes/common/temp_dir.h"
#include "mdev/sysfs_backend.h"
#include "mdev/sysfs_io.h"

namespace kvgpu::testing {
namespace {

constexpr const char* kDirEnv = "KVGPU_DRA_CRASH_DIR";
constexpr const char* kGpu0 = "0000:3b:00.0";
constexpr const char* kGpu1 = "0000:af:00.0";
constexpr const char* kType = "nvidia-222";
constexpr const char* kOtherType = "nvidia-223";

// The API server's answer for the one claim of these tests; nothing else is asked.
class OneClaim : public kube::ApiTransport {
 public:
  explicit OneClaim(nlohmann::json claim) : claim_(std::move(claim)) {}
  Result<nlohmann::json> Get(const std::string& path, Canceller*) override {
    if (path != "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c1") {
      return Status::Error(ErrorCode::kHttp, "not found", 0);
    }
    return claim_;
  }
  Result<nlohmann::json> Post(const std::string&, const nlohmann::json&, Canceller*) override {
    return Status::Error(ErrorCode::kConfig, "not supported");
  }
  Result<nlohmann::json> Patch(const std::string&, const nlohmann::json&, const std::string&,
                               Canceller*) override {
    return Status::Error(ErrorCode::kConfig, "not supported");
  }
  Status Stream(const std::string&, std::chrono::milliseconds, const std::function<void()>&,
                const std::function<bool(std::string_view)>&, Canceller*) override {
    return Status::Error(ErrorCode::kConfig, "not supported");
  }

 private:
  nlohmann::json claim_;
};

const deviceplugin::dra::ClaimRef kClaim{"ns", "uid-1", "c1"};

// Two vGPUs of one type on GPU 0 (one Allocate), or of two types on GPU 0 and GPU 1 (two
// Allocates, so a kill can fall between the two creates).
nlohmann::json TheClaim(bool two_types) {
  if (two_types) {
    return MakeAllocatedClaim("ns", "c1", "uid-1",
                              {{"a", kDraDriver, kDraNode, DraName(kGpu0, kType, 0)},
                               {"b", kDraDriver, kDraNode, DraName(kGpu1, kOtherType, 0)}});
  }
  return MakeAllocatedClaim("ns", "c1", "uid-1",
                            {{"a", kDraDriver, kDraNode, DraName(kGpu0, kType, 0)},
                             {"b", kDraDriver, kDraNode, DraName(kGpu0, kType, 1)}});
}

struct Point {
  std::string failpoint;
  bool in_unprepare;  // killed while unpreparing (after a complete prepare)
  // After the restart kubelet sends the prepare again before unpreparing; else the pod went
  // meanwhile and only the unprepare comes (kubelet checkpoints a claim before preparing it).
  bool prepare_again = true;
  bool two_types = false;  // TheClaim(true)
};

class DraCrashTest : public ::testing::TestWithParam<Point> {};

std::vector<std::string> VgpusOn(mdev::Backend& backend) {
  auto inventory = backend.Scan();
  if (!inventory.ok()) return {"<scan failed: " + inventory.status().ToString() + ">"};
  std::vector<std::string> out;
  for (const mdev::Vgpu& v : inventory.value().vgpus) out.push_back(v.id);
  std::sort(out.begin(), out.end());
  return out;
}

TEST_P(DraCrashTest, KilledThenRestartedLeaksNothing) {
#ifndef KVGPU_SIM_PATH
  GTEST_SKIP() << "kvgpu-sim not built";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Point point = GetParam();
  std::unique_ptr<TempDir> temp;
  std::unique_ptr<SimMount> sim;
  std::filesystem::path dir;
  if (const char* inherited = std::getenv(kDirEnv)) {
    dir = inherited;  // the death-test child
  } else {
    if (auto why = FuseUnavailableReason()) GTEST_SKIP() << *why;
    temp = std::make_unique<TempDir>();
    dir = temp->path();
    std::filesystem::create_directories(dir / "sim");
    sim = std::make_unique<SimMount>(KVGPU_SIM_PATH, "t4x2", dir / "sim");
    auto failed = sim->Mount();
    ASSERT_FALSE(failed) << *failed;
    ::setenv(kDirEnv, dir.c_str(), 1);
  }
  const std::filesystem::path mount = dir / "sim" / "node";
  mdev::PosixSysfsIo io;
  mdev::SysfsBackend backend(mount, io);
  OneClaim api(TheClaim(point.two_types));
  const std::set<std::string> dra_gpus = {kGpu0, kGpu1};

  std::string foreign;
  if (sim) {
    auto made = backend.Create({kGpu0, kType, std::nullopt});
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    foreign = made.value().id;
  }

  EXPECT_EXIT(
      {
        ::setenv("KVGPU_FAILPOINTS", point.failpoint.c_str(), 1);
        auto stack = StartDra(backend, api, TestDraOptions(dir, dra_gpus, false));
        if (point.in_unprepare) {
          auto prepared = stack->plugin().Prepare(kClaim);
          if (!prepared.error.empty()) std::exit(3);
          (void)stack->plugin().Unprepare(kClaim);
        } else {
          (void)stack->plugin().Prepare(kClaim);
        }
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "kvgpu failpoint " + point.failpoint);
  ::unsetenv(kDirEnv);

  // The restarted daemon.
  auto stack = StartDra(backend, api, TestDraOptions(dir, dra_gpus, false));
  if (!point.in_unprepare) {
    // All or nothing per claim across a crash: kubelet never got an answer, so no container uses
    // what the killed prepare made, and the restart has removed it before kubelet calls again.
    EXPECT_EQ(VgpusOn(backend), std::vector<std::string>{foreign});
    EXPECT_TRUE(stack->claims().All().empty());
    EXPECT_TRUE(stack->manager().Snapshot().records.empty());
  }
  if (!point.in_unprepare && point.prepare_again) {
    // kubelet sends the prepare again: it completes with exactly the claim's two vGPUs.
    auto again = stack->plugin().Prepare(kClaim);
    ASSERT_EQ(again.error, "");
    ASSERT_EQ(again.devices.size(), 2u);
    EXPECT_EQ(VgpusOn(backend).size(), 3u);  // two for the claim, the foreign one
    auto once_more = stack->plugin().Prepare(kClaim);
    EXPECT_EQ(once_more.devices, again.devices);
    EXPECT_EQ(VgpusOn(backend).size(), 3u);
  }
  // kubelet unprepares (again): only the foreign vGPU is left, and nothing is remembered.
  EXPECT_EQ(stack->plugin().Unprepare(kClaim), "");
  EXPECT_EQ(VgpusOn(backend), std::vector<std::string>{foreign});
  EXPECT_TRUE(stack->claims().All().empty());
  EXPECT_TRUE(stack->manager().Snapshot().records.empty());
#endif
}

INSTANTIATE_TEST_SUITE_P(EveryStep, DraCrashTest,
                         ::testing::Values(Point{"dra.prepare.after-checkpoint", false},
                                           Point{"allocate.after-record", false},
                                           Point{"allocate.after-create", false},
                                           Point{"dra.prepare.after-create", false},
                                           Point{"dra.prepare.after-checkpoint", false, false},
                                           Point{"allocate.after-record", false, false},
                                           Point{"allocate.after-create", false, false},
                                           Point{"dra.prepare.after-create", false, false},
                                           // Between the two types' creates (the first
                                           // resource's vGPU made, the second not yet).
                                           Point{"dra.prepare.after-resource", false, true, true},
                                           Point{"dra.prepare.after-resource", false, false, true},
                                           Point{"remove.before-write", true},
                                           Point{"remove.after-write", true},
                                           Point{"dra.unprepare.after-remove", true}),
                         [](const ::testing::TestParamInfo<Point>& param) {
                           std::string name = param.param.failpoint;
                           if (param.param.two_types) name += "-of-two-types";
                           if (!param.param.in_unprepare && !param.param.prepare_again)
                             name += "-then-unprepare";
                           for (char& c : name) {
                             if (c == '.' || c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace kvgpu::testing
