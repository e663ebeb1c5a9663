// The test and simulator controls: fault injection, GPU hot-unplug and restore, and the
// model's behaviour under concurrent callers and readers.
#include <atomic>
#include <cerrno>
#include <set>
#include <thread>

#include "sim_test_util.h"

namespace kvgpu::sim::testing {
namespace {

using ControlsTest = ModelTest;

struct FaultCase {
  std::string description;
  Op op;
  int times;
  int failures;  // of 4 attempts, how many fail
};

TEST_F(ControlsTest, FaultsFailTheNextOperationsOnMatchingPaths) {
  const FaultCase cases[] = {
      {"once", Op::kRead, 1, 1},
      {"twice", Op::kRead, 2, 2},
      {"until cleared", Op::kRead, -1, 4},
      {"list once", Op::kList, 1, 1},
      {"readlink until cleared", Op::kReadLink, -1, 4},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    Load("t4x2");
    fs::path target;
    std::function<Status()> attempt;
    switch (c.op) {
      case Op::kRead:
        target = TypeDir(kT4a, "nvidia-230") / "available_instances";
        attempt = [&] { return model_->ReadFile(target).status(); };
        break;
      case Op::kList:
        target = Sys() / "class" / "mdev_bus";
        attempt = [&] { return model_->ListDir(target).status(); };
        break;
      default:
        target = Sys() / "bus" / "pci" / "devices" / kT4a / "iommu_group";
        attempt = [&] { return model_->ReadLink(target).status(); };
        break;
    }
    model_->InjectFault(c.op, target.filename().string(), EIO, c.times);
    int failures = 0;
    for (int i = 0; i < 4; ++i) {
      Status status = attempt();
      if (!status.ok()) {
        EXPECT_EQ(status.sys_errno(), EIO);
        ++failures;
      }
    }
    EXPECT_EQ(failures, c.failures);
    model_->ClearFaults();
    EXPECT_TRUE(attempt().ok());
  }
}

TEST_F(ControlsTest, FaultsOnlyHitTheirOperationAndSuffix) {
  Load("t4x2");
  fs::path available = TypeDir(kT4a, "nvidia-230") / "available_instances";
  model_->InjectFault(Op::kWrite, "available_instances", EIO, -1);
  model_->InjectFault(Op::kRead, "nvidia-222/available_instances", EIO, -1);
  EXPECT_TRUE(model_->ReadFile(available).ok()) << "a write fault does not fail reads";
  EXPECT_FALSE(model_->ReadFile(TypeDir(kT4a, "nvidia-222") / "available_instances").ok());
  EXPECT_TRUE(model_->ReadFile(TypeDir(kT4a, "nvidia-230") / "name").ok());
}

TEST_F(ControlsTest, AFailedWriteChangesNothing) {
  Load("t4x2");
  model_->InjectFault(Op::kWrite, "/create", ENOMEM, 1);
  EXPECT_EQ(ErrnoOf(CreateMdev(kT4a, "nvidia-230", Uuid(1))), ENOMEM);
  EXPECT_TRUE(model_->VgpuIds().empty());
  EXPECT_EQ(Available(kT4a, "nvidia-230"), "16\n");
  EXPECT_TRUE(CreateMdev(kT4a, "nvidia-230", Uuid(1)).ok()) << "the fault was used up";
}

TEST_F(ControlsTest, CanonicalSharesTheReadLinkFaults) {
  Load("mtty");
  model_->InjectFault(Op::kReadLink, "mdev_bus/mtty", ENOENT, 1);
  EXPECT_EQ(ErrnoOf(model_->Canonical(Sys() / "class/mdev_bus/mtty").status()), ENOENT);
  EXPECT_TRUE(model_->Canonical(Sys() / "class/mdev_bus/mtty").ok());
}

// What a hot-unplugged GPU leaves behind: nothing, and no dangling link anywhere.
void ExpectNoDanglingLinks(const fs::path& sys) {
  for (const auto& entry : fs::recursive_directory_iterator(sys)) {
    if (!entry.is_symlink()) continue;
    std::error_code ec;
    fs::path target = fs::canonical(entry.path(), ec);
    EXPECT_FALSE(ec) << entry.path() << " dangles (" << target << ")";
  }
}

TEST_F(ControlsTest, RemovedGpuDisappearsWithItsVgpusAndComesBackEmpty) {
  Load("t4x2");
  ASSERT_TRUE(CreateMdev(kT4a, "nvidia-230", Uuid(1)).ok());
  ASSERT_TRUE(CreateMdev(kT4b, "nvidia-222", Uuid(2)).ok());
  fs::path create = TypeDir(kT4a, "nvidia-230") / "create";
  std::string group = model_->ReadLink(MdevDir(Uuid(1)) / "iommu_group")->filename().string();
  model_->SetBusy(Uuid(1), true);  // surprise removal takes busy devices too

  ASSERT_TRUE(model_->RemoveGpu(kT4a).ok());
  for (const fs::path& gone :
       {Sys() / "class/mdev_bus" / kT4a, Sys() / "bus/pci/devices" / kT4a,
        Sys() / "bus/pci/drivers/nvidia" / kT4a, Sys() / "devices/pci0000:00/0000:00:01.0" / kT4a,
        Sys() / "kernel/iommu_groups/1", MdevDir(Uuid(1)), Sys() / "kernel/iommu_groups" / group}) {
    EXPECT_FALSE(model_->Exists(gone)) << gone;
  }
  EXPECT_TRUE(model_->Exists(Sys() / "devices/pci0000:00/0000:00:01.0")) << "the root port stays";
  EXPECT_EQ(model_->VgpuIds(), std::vector<std::string>{Uuid(2)});
  EXPECT_EQ(ErrnoOf(model_->WriteFile(create, Uuid(3))), ENOENT);
  ExpectNoDanglingLinks(Sys());

  ASSERT_TRUE(model_->RestoreGpu(kT4a).ok());
  EXPECT_EQ(Available(kT4a, "nvidia-230"), "16\n");
  EXPECT_EQ(Available(kT4a, "nvidia-222"), "16\n");
  EXPECT_EQ(Available(kT4b, "nvidia-230"), "0\n") << "the other GPU kept its vGPU and lock";
  EXPECT_TRUE(CreateMdev(kT4a, "nvidia-230", Uuid(1)).ok()) << "the old UUID is free again";
  ExpectNoDanglingLinks(Sys());
}

struct UnplugCase {
  std::string description;
  std::string profile;
  std::string gpu;
  std::string gone;  // under <root>/sys, absent while unplugged
  std::string back;  // under <root>/sys, present again after restore
};

TEST_F(ControlsTest, EveryKindOfGpuCanBeUnpluggedAndRestored) {
  const UnplugCase cases[] = {
      {"SR-IOV VFs go with their PF", "a100-sriov", "0000:41:00.0", "class/mdev_bus/0000:41:02.7",
       "class/mdev_bus/0000:41:02.7/mdev_supported_types"},
      {"vendor-VFIO VFs go with their PF", "h200-vfio", "0000:41:00.0",
       "bus/pci/devices/0000:41:00.4", "bus/pci/devices/0000:41:00.4/nvidia/current_vgpu_type"},
      {"a virtual parent", "mixed", "mtty", "class/mdev_bus/mtty",
       "class/mdev_bus/mtty/mdev_supported_types/mtty-2/create"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    Load(c.profile);
    ASSERT_TRUE(model_->RemoveGpu(c.gpu).ok());
    EXPECT_FALSE(model_->Exists(Sys() / c.gone));
    ExpectNoDanglingLinks(Sys());
    ASSERT_TRUE(model_->RestoreGpu(c.gpu).ok());
    EXPECT_TRUE(model_->Exists(Sys() / c.back));
    ExpectNoDanglingLinks(Sys());
  }
}

TEST_F(ControlsTest, UnplugAndRestoreRefuseWhatCannotBeDone) {
  Load("t4x2");
  EXPECT_EQ(model_->RemoveGpu("0000:01:00.0").code(), ErrorCode::kUnknownParent);
  EXPECT_EQ(model_->RestoreGpu(kT4a).code(), ErrorCode::kExists);
  ASSERT_TRUE(model_->RemoveGpu(kT4a).ok());
  EXPECT_EQ(model_->RemoveGpu(kT4a).code(), ErrorCode::kGone);
}

// available_instances is replaced by rename, so a reader that bypasses the model (as the FUSE
// simulator's reads and plain `cat` do) never sees an empty or half-written value.
TEST_F(ControlsTest, ConcurrentReadersNeverSeeATornCount) {
  Load("t4x2");
  fs::path available = fs::canonical(TypeDir(kT4a, "nvidia-230")) / "available_instances";
  std::atomic<bool> done{false};
  std::atomic<int> bad{0};
  std::atomic<int> reads{0};
  std::thread reader([&] {
    while (!done) {
      std::ifstream in(available);
      std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (content != "16\n" && content != "15\n") ++bad;
      ++reads;
    }
  });
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(CreateMdev(kT4a, "nvidia-230", Uuid(1)).ok());
    ASSERT_TRUE(RemoveMdev(Uuid(1)).ok());
  }
  done = true;
  reader.join();
  EXPECT_EQ(bad, 0) << "of " << reads << " reads";
}

TEST_F(ControlsTest, ConcurrentCreatesNeverOverbook) {
  Load("mtty");
  std::atomic<int> created{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        if (CreateMdev("mtty", "mtty-2", Uuid(t * 100 + i)).ok()) ++created;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(created, 12) << "24 ports, 2 per mtty-2";
  EXPECT_EQ(Available("mtty", "mtty-1"), "0\n");
  std::set<std::string> groups;
  for (const auto& id : model_->VgpuIds()) {
    groups.insert(model_->ReadLink(MdevDir(id) / "iommu_group")->filename().string());
  }
  EXPECT_EQ(groups.size(), 12u) << "every mdev has a group of its own";
}

}  // namespace
}  // namespace kvgpu::sim::testing
