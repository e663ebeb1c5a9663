// The control channel and the FUSE layer's path-level answers, without a mount: the same calls
// the mount makes, on a model in a temp directory.
#include <fcntl.h>

#include <algorithm>
#include <cerrno>

#include "sim/fuse/control.h"
#include "sim/fuse/sim_fs.h"
#include "sim_test_util.h"

namespace kvgpu::sim::testing {
namespace {

using SimControlTest = ModelTest;

struct ControlCase {
  std::string description;
  std::string command;
  int want;
};

TEST_F(SimControlTest, CommandsDriveTheModel) {
  Load("t4x2");
  ASSERT_TRUE(CreateMdev(kT4a, "nvidia-230", Uuid(1)).ok());
  const ControlCase cases[] = {
      {"busy, upper-case UUID", "busy 9B2C4E1A-0D3F-4A5B-8C6D-000000000001\n", 0},
      {"blank lines are skipped", "\n\nrelease " + Uuid(1) + "\n\n", 0},
      {"only blanks", "\n \n", EINVAL},
      {"busy a missing vGPU", "busy " + Uuid(2), ENOENT},
      {"extra word", "busy " + Uuid(1) + " now", EINVAL},
      {"fault by number, until cleared", "fault read available_instances 5 -1", 0},
      {"times below -1", "fault read name EIO -2", EINVAL},
      {"clear-faults", "clear-faults", 0},
      {"unknown GPU", "restore 0000:00:00.0", ENOENT},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    EXPECT_EQ(ErrnoOf(ApplyControl(*model_, c.command)), c.want);
  }
}

TEST_F(SimControlTest, ModeCommandsFollowTheOrderingRules) {
  Load("l40s-vfio");
  const ControlCase cases[] = {
      {"mixed-size on an empty GPU", "heterogeneous 0000:3b:00.0 on", 0},
      {"not on|off", "heterogeneous 0000:3b:00.0 yes", EINVAL},
      {"no MIG on an L40S", "mig 0000:3b:00.0 on", EOPNOTSUPP},
      {"no GPU-instance profile", "gi-create 0000:3b:00.0 19", EINVAL},
      {"not a number", "gi-destroy 0000:3b:00.0 x", EINVAL},
      {"unknown GPU", "heterogeneous 0000:00:00.0 on", ENOENT},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    EXPECT_EQ(ErrnoOf(ApplyControl(*model_, c.command)), c.want);
  }
  ASSERT_TRUE(model_->WriteFile(NvidiaDir("0000:3b:00.4") / "current_vgpu_type", "1700").ok());
  EXPECT_EQ(ErrnoOf(ApplyControl(*model_, "heterogeneous 0000:3b:00.0 off")), EBUSY)
      << "not while a vGPU exists";
  Load("h200-mig");
  EXPECT_EQ(ErrnoOf(ApplyControl(*model_, "gi-destroy 0000:41:00.0 5")), 0);
  EXPECT_EQ(ErrnoOf(ApplyControl(*model_, "gi-create 0000:41:00.0 14")), 0);
  EXPECT_EQ(ErrnoOf(ApplyControl(*model_, "mig 0000:41:00.0 off")), EBUSY)
      << "GPU instances exist and the VFs are enabled";
}

TEST_F(SimControlTest, BusyBlocksRemoveUntilReleased) {
  Load("t4x2");
  ASSERT_TRUE(CreateMdev(kT4a, "nvidia-230", Uuid(1)).ok());
  ASSERT_TRUE(ApplyControl(*model_, "busy " + Uuid(1)).ok());
  EXPECT_EQ(ErrnoOf(RemoveMdev(Uuid(1))), EBUSY);
  EXPECT_EQ(StateText(*model_),
            "profile t4x2\ngpu 0000:3b:00.0 present\ngpu 0000:af:00.0 present\nvgpu " + Uuid(1) +
                " 0000:3b:00.0 nvidia-230 busy\n");
  ASSERT_TRUE(ApplyControl(*model_, "release " + Uuid(1)).ok());
  EXPECT_EQ(ErrnoOf(RemoveMdev(Uuid(1))), 0);
}

TEST_F(SimControlTest, FaultsReachTheModel) {
  Load("t4x2");
  ASSERT_TRUE(ApplyControl(*model_, "fault write nvidia-230/create ENOSPC 2").ok());
  EXPECT_EQ(ErrnoOf(CreateMdev(kT4a, "nvidia-230", Uuid(1))), ENOSPC);
  EXPECT_EQ(ErrnoOf(CreateMdev(kT4a, "nvidia-230", Uuid(1))), ENOSPC);
  EXPECT_EQ(ErrnoOf(CreateMdev(kT4a, "nvidia-230", Uuid(1))), 0);
}

class SimFsTest : public ModelTest {
 protected:
  void SetUp() override {
    Load("mixed");
    fs_ = std::make_unique<SimFs>(*model_);
  }
  std::unique_ptr<SimFs> fs_;
};

TEST_F(SimFsTest, TheTopShowsDevProcSysSimAndTheModesFileButNotTheScratchDirectory) {
  std::vector<SimFs::DirEntry> entries;
  ASSERT_EQ(fs_->ReadDir("/", &entries), 0);
  std::vector<std::string> names;
  for (const auto& entry : entries) names.push_back(entry.name);
  std::sort(names.begin(), names.end());
  // dev/: the kvm and vhost-vsock entries the device plugin's readiness check looks for;
  // proc/: the kernel command line (proc/cmdline) vgpuctl doctor reads; sim-gpu-modes.json:
  // what only NVML shows (modes, GPU instances, placements), for the simulator's mode probe.
  EXPECT_EQ(names, (std::vector<std::string>{"dev", "proc", "sim", "sim-gpu-modes.json", "sys"}));
  struct stat st;
  EXPECT_EQ(fs_->GetAttr("/.sim-scratch", &st), -ENOENT);
  EXPECT_EQ(fs_->GetAttr("/sim/nothing", &st), -ENOENT);
  ASSERT_EQ(fs_->GetAttr("/sim/control", &st), 0);
  EXPECT_EQ(st.st_mode, S_IFREG | 0200);
}

TEST_F(SimFsTest, OpenAnswersAsKernfs) {
  const std::string type = "/sys/class/mdev_bus/mtty/mdev_supported_types/mtty-1";
  struct Case {
    std::string path;
    int flags;
    int want;
  };
  const Case cases[] = {
      {type + "/create", O_WRONLY, 0},     {type + "/create", O_RDONLY, -EACCES},
      {type + "/create", O_RDWR, -EACCES}, {type + "/name", O_RDONLY, 0},
      {type + "/name", O_WRONLY, -EACCES}, {type + "/missing", O_RDONLY, -ENOENT},
      {"/sim/state", O_RDONLY, 0},         {"/sim/state", O_WRONLY, -EACCES},
      {"/sim/control", O_RDWR, -EACCES},   {"/.sim-scratch/x", O_RDONLY, -ENOENT},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.path + " flags " + std::to_string(c.flags));
    uint64_t handle = 0;
    EXPECT_EQ(fs_->Open(c.path, c.flags, &handle), c.want);
    if (c.want == 0) fs_->Release(handle);
  }
}

TEST_F(SimFsTest, AReadAtOffsetZeroTakesAFreshCopy) {
  const std::string available =
      "/sys/class/mdev_bus/mtty/mdev_supported_types/mtty-1/available_instances";
  uint64_t handle = 0;
  ASSERT_EQ(fs_->Open(available, O_RDONLY, &handle), 0);
  char buf[16];
  ASSERT_EQ(fs_->Read(handle, 0, sizeof buf, buf), 3);
  EXPECT_EQ(std::string(buf, 3), "24\n");
  ASSERT_TRUE(CreateMdev("mtty", "mtty-2", Uuid(1)).ok());
  EXPECT_EQ(fs_->Read(handle, 3, sizeof buf, buf), 0) << "the rest of the first copy: EOF";
  ASSERT_EQ(fs_->Read(handle, 0, sizeof buf, buf), 3);
  EXPECT_EQ(std::string(buf, 3), "22\n");
  fs_->Release(handle);
}

}  // namespace
}  // namespace kvgpu::sim::testing
