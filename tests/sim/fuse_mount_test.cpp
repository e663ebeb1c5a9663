// kvgpu-sim as a user meets it: the real binary mounts a profile, and the real vgpuctl binary,
// mdev::SysfsBackend over PosixSysfsIo, cat and plain syscalls work against the mount, seeing the
// model's answers as errno from open(2) and write(2).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "fuse_test_util.h"
#include "mdev/sysfs_backend.h"
#include "sim_test_util.h"

namespace kvgpu::sim::testing {
namespace {

class FuseSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = NoFuseReason()) GTEST_SKIP() << *why;
  }

  void Start(const std::string& profile, std::vector<std::string> extra = {}) {
    sim_.reset();  // a table-driven test mounts one profile after another
    sim_ = std::make_unique<SimProcess>(profile, std::move(extra));
    ASSERT_TRUE(sim_->WaitReady()) << sim_->Log();
  }
  const fs::path& Mount() const { return sim_->mount(); }
  fs::path Sys() const { return Mount() / "sys"; }
  fs::path TypeDir(const std::string& parent, const std::string& type) const {
    return Sys() / "class" / "mdev_bus" / parent / "mdev_supported_types" / type;
  }
  fs::path MdevDir(const std::string& uuid) const {
    return Sys() / "bus" / "mdev" / "devices" / uuid;
  }
  fs::path NvidiaDir(const std::string& vf) const {
    return Sys() / "bus" / "pci" / "devices" / vf / "nvidia";
  }
  Output Ctl(std::vector<std::string> args) { return Vgpuctl(Mount(), std::move(args)); }

  std::unique_ptr<SimProcess> sim_;
};

std::string Slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

// What one open(2) + write(2) pair answers: 0, or the errno of the step that failed.
struct Answer {
  int open_errno = 0;
  int write_errno = 0;
};

Answer OpenAndWrite(const fs::path& path, int flags, const std::string& data) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd < 0) return {errno, 0};
  Answer answer;
  if (!data.empty() && ::write(fd, data.data(), data.size()) < 0) answer.write_errno = errno;
  ::close(fd);
  return answer;
}

std::string ErrnoName(int err) {
  return err == 0 ? "OK" : std::string(strerrordesc_np(err));
}

// --- the tree ---

// Walks `static_root/sys` (a tree kvgpu-sim-tree laid out) and checks that the mount shows the
// same entries, kinds, link targets and attribute contents.
void ExpectSameTree(const fs::path& static_root, const fs::path& mount) {
  int compared = 0;
  for (auto it = fs::recursive_directory_iterator(static_root / "sys");
       it != fs::recursive_directory_iterator(); ++it) {
    fs::path relative = it->path().lexically_relative(static_root);
    fs::path mounted = mount / relative;
    struct stat want, got;
    ASSERT_EQ(::lstat(it->path().c_str(), &want), 0);
    ASSERT_EQ(::lstat(mounted.c_str(), &got), 0) << relative << ": " << std::strerror(errno);
    ASSERT_EQ(want.st_mode, got.st_mode) << relative;
    if (S_ISLNK(want.st_mode)) {
      EXPECT_EQ(fs::read_symlink(it->path()), fs::read_symlink(mounted)) << relative;
    } else if (S_ISREG(want.st_mode)) {
      EXPECT_EQ(got.st_size, 4096) << relative << ": sysfs reports a page for every attribute";
      // placement_id and gpu_instance_id are the driver's outputs, computed at each read (ENXIO
      // while the VF has no vGPU, sim/README.md): a static tree cannot hold that answer.
      const std::string name = relative.filename().string();
      const bool computed = name == "placement_id" || name == "gpu_instance_id";
      if ((want.st_mode & S_IRUSR) && !computed) {
        EXPECT_EQ(Slurp(it->path()), Slurp(mounted)) << relative;
      }
    }
    ++compared;
  }
  EXPECT_GT(compared, 20);
}

TEST_F(FuseSimTest, EveryProfileMountsTheModelsTreeEntryForEntry) {
  for (const std::string& profile : ProfileNames()) {
    SCOPED_TRACE(profile);
    ASSERT_NO_FATAL_FAILURE(Start(profile));
    TempDir static_tree;
    fs::path root = static_tree.path() / "tree";
    Output laid = RunProgram({kSimTreePath, "--profile", profile, "--root", root.string()});
    ASSERT_EQ(laid.exit_code, 0) << laid.err;
    ExpectSameTree(root, Mount());
    // And vgpuctl sees the same node through either.
    Output on_mount = Ctl({"types", "--json"});
    Output on_tree = Vgpuctl(root, {"types", "--json"});
    ASSERT_EQ(on_mount.exit_code, 0) << on_mount.err;
    EXPECT_EQ(on_mount.out, on_tree.out);
  }
}

TEST_F(FuseSimTest, TheScratchDirectoryIsHiddenAndTheControlDirectoryShown) {
  ASSERT_NO_FATAL_FAILURE(Start("mtty"));
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(Mount())) {
    names.insert(entry.path().filename().string());
  }
  // proc/ holds the host's kernel command line (/proc/cmdline), which `vgpuctl doctor` reads;
  // sim-gpu-modes.json what only NVML shows, for the simulator's mode probe.
  EXPECT_EQ(names, (std::set<std::string>{"dev", "proc", "sim", "sim-gpu-modes.json", "sys"}));
  EXPECT_FALSE(fs::exists(Mount() / ".sim-scratch"));
}

TEST_F(FuseSimTest, SymlinksAreRelativeAndResolveInsideTheMount) {
  ASSERT_NO_FATAL_FAILURE(Start("a100-sriov"));
  struct Case {
    std::string description;
    fs::path link;
    fs::path resolves_to;  // relative to the mount
  };
  const Case cases[] = {
      {"bus/pci device", Sys() / "bus/pci/devices/0000:41:00.4",
       "sys/devices/pci0000:00/0000:00:01.0/0000:41:00.4"},
      {"mdev_bus class", Sys() / "class/mdev_bus/0000:41:00.4",
       "sys/devices/pci0000:00/0000:00:01.0/0000:41:00.4"},
      {"VF to PF", Sys() / "bus/pci/devices/0000:41:00.4/physfn",
       "sys/devices/pci0000:00/0000:00:01.0/0000:41:00.0"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    fs::path target = fs::read_symlink(c.link);
    EXPECT_TRUE(target.is_relative()) << target;
    EXPECT_EQ(target.begin()->string(), "..") << target;
    EXPECT_EQ(fs::canonical(c.link), Mount() / c.resolves_to);
  }
  fs::path group = fs::canonical(Sys() / "bus/pci/devices/0000:41:00.4/iommu_group");
  EXPECT_EQ(group.parent_path(), Mount() / "sys/kernel/iommu_groups");
}

TEST_F(FuseSimTest, AttributesReadWholeWithEveryReader) {
  ASSERT_NO_FATAL_FAILURE(Start("h200-vfio"));
  fs::path creatable = NvidiaDir("0000:41:00.4") / "creatable_vgpu_types";
  const std::string want = "ID    : vGPU Name\n1428  : NVIDIA H200X-141C\n";
  struct stat st;
  ASSERT_EQ(::stat(creatable.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 4096);
  EXPECT_EQ(Slurp(creatable), want) << "std::ifstream";
  Output cat = RunProgram({"/bin/cat", creatable.string()});
  EXPECT_EQ(cat.exit_code, 0);
  EXPECT_EQ(cat.out, want) << "cat";
  mdev::PosixSysfsIo io;
  auto read = io.ReadFile(creatable);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(*read, want) << "PosixSysfsIo";
  // Small reads at increasing offsets see one consistent copy, as a seq_file does.
  int fd = ::open(creatable.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::string pieces;
  char buf[7];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) pieces.append(buf, size_t(n));
  ::close(fd);
  EXPECT_EQ(pieces, want) << "7-byte reads";
}

// --- vgpuctl against the mount ---

struct LifecycleCase {
  std::string profile;
  std::string parent;
  std::string type;
};

TEST_F(FuseSimTest, VgpuctlCreatesListsAndRemovesOnEveryProfile) {
  const LifecycleCase cases[] = {
      {"t4x2", kT4b, "nvidia-231"},
      {"a100-sriov", "0000:41:00.5", "nvidia-692"},
      {"h200-vfio", "0000:41:00.4", "1428"},
      {"mtty", "mtty", "mtty-2"},
      {"mixed", "0000:41:02.7", "nvidia-698"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.profile + " " + c.parent + " " + c.type);
    ASSERT_NO_FATAL_FAILURE(Start(c.profile));
    Output created = Ctl({"create", "--parent", c.parent, "--type", c.type});
    ASSERT_EQ(created.exit_code, 0) << created.err << sim_->Log();
    std::string id = created.out.substr(0, created.out.find('\n'));
    Output listed = Ctl({"list", "--json"});
    ASSERT_EQ(listed.exit_code, 0) << listed.err;
    auto vgpus = nlohmann::json::parse(listed.out).at("vgpus");
    ASSERT_EQ(vgpus.size(), 1u) << listed.out;
    EXPECT_EQ(vgpus[0].at("id"), id);
    EXPECT_EQ(vgpus[0].at("type_id"), c.type);
    EXPECT_NE(Slurp(Mount() / "sim" / "state").find("vgpu " + id + " " + c.parent + " " + c.type),
              std::string::npos);
    Output removed = Ctl({"remove", id});
    ASSERT_EQ(removed.exit_code, 0) << removed.err << sim_->Log();
    listed = Ctl({"list", "--json"});
    EXPECT_EQ(nlohmann::json::parse(listed.out).at("vgpus").size(), 0u) << listed.out;
  }
}

// One scenario on two T4s: each step's vgpuctl exit code and the kernel's reason it prints.
TEST_F(FuseSimTest, VgpuctlPrintsTheKernelsErrnoForEachRefusal) {
  ASSERT_NO_FATAL_FAILURE(Start("t4x2"));
  const std::string uuid = Uuid(1);
  struct Step {
    std::string description;
    std::vector<std::string> args;
    std::string control;  // written to sim/control before the step
    int exit_code;
    std::string reason;  // in stderr; empty: nothing expected
  };
  const Step steps[] = {
      {"create", {"create", "--parent", kT4a, "--type", "nvidia-230", "--uuid", uuid}, "", 0, ""},
      {"same UUID on the other GPU: EEXIST",
       {"create", "--parent", kT4b, "--type", "nvidia-230", "--uuid", uuid},
       "",
       1,
       "File exists"},
      {"another type on the locked GPU: ENOSPC",
       {"create", "--parent", kT4a, "--type", "nvidia-222"},
       "",
       1,
       "No space left on device"},
      {"remove while a VM holds it: EBUSY",
       {"remove", uuid},
       "busy " + uuid,
       1,
       "Device or resource busy"},
      {"remove once released", {"remove", uuid}, "release " + uuid, 0, ""},
      {"remove again: ENOENT at open", {"remove", uuid}, "", 1, "No such file or directory"},
      {"an injected EIO on create",
       {"create", "--parent", kT4a, "--type", "nvidia-222"},
       "fault write nvidia-222/create EIO",
       1,
       "Input/output error"},
      {"the fault was for one write",
       {"create", "--parent", kT4a, "--type", "nvidia-222"},
       "",
       0,
       ""},
  };
  for (const auto& step : steps) {
    SCOPED_TRACE(step.description);
    if (!step.control.empty()) {
      ASSERT_NO_FATAL_FAILURE(sim_->Control(step.control));
    }
    Output result = Ctl(step.args);
    EXPECT_EQ(result.exit_code, step.exit_code) << result.err;
    if (!step.reason.empty()) {
      EXPECT_NE(result.err.find(step.reason), std::string::npos) << result.err;
    }
  }
}

TEST_F(FuseSimTest, CountsChangeAsSoonAsTheWriteReturns) {
  ASSERT_NO_FATAL_FAILURE(Start("t4x2"));
  fs::path available = TypeDir(kT4a, "nvidia-230") / "available_instances";
  fs::path other = TypeDir(kT4a, "nvidia-222") / "available_instances";
  EXPECT_EQ(Slurp(available), "16\n");
  ASSERT_EQ(OpenAndWrite(TypeDir(kT4a, "nvidia-230") / "create", O_WRONLY, Uuid(7)).write_errno, 0);
  EXPECT_EQ(Slurp(available), "15\n");
  EXPECT_EQ(Slurp(other), "0\n") << "the GPU is locked to nvidia-230";
  EXPECT_TRUE(fs::is_directory(MdevDir(Uuid(7))));
  ASSERT_EQ(OpenAndWrite(MdevDir(Uuid(7)) / "remove", O_WRONLY, "1\n").write_errno, 0);
  EXPECT_FALSE(fs::exists(MdevDir(Uuid(7)))) << "no stale name in the kernel's cache";
  EXPECT_EQ(Slurp(available), "16\n");
  EXPECT_EQ(Slurp(other), "16\n");
}

// The kernel caches names and attributes (--cache-seconds); what a write or control command
// removes must be gone for the very next stat, also when the kernel had just looked it up.
TEST_F(FuseSimTest, RemovalsAreSeenAtOnceWhateverTheCache) {
  for (const char* cache : {"5", "0"}) {
    SCOPED_TRACE(std::string("--cache-seconds ") + cache);
    ASSERT_NO_FATAL_FAILURE(Start("mixed", {"--cache-seconds", cache}));
    ASSERT_EQ(OpenAndWrite(TypeDir("0000:41:00.4", "nvidia-692") / "create", O_WRONLY, Uuid(1))
                  .write_errno,
              0);
    fs::path group_link = MdevDir(Uuid(1)) / "iommu_group";
    ASSERT_TRUE(fs::exists(group_link));
    fs::path group = fs::canonical(group_link);
    const std::vector<fs::path> mdev_paths = {
        MdevDir(Uuid(1)), MdevDir(Uuid(1)) / "remove", group_link, group,
        TypeDir("0000:41:00.4", "nvidia-692") / "devices" / Uuid(1)};
    for (const auto& path : mdev_paths) ASSERT_TRUE(fs::exists(path)) << path;  // now cached
    ASSERT_EQ(OpenAndWrite(MdevDir(Uuid(1)) / "remove", O_WRONLY, "1").write_errno, 0);
    for (const auto& path : mdev_paths) {
      EXPECT_FALSE(fs::exists(fs::symlink_status(path))) << path;
    }

    const std::vector<fs::path> gpu_paths = {
        Sys() / "bus/pci/devices/0000:41:00.0", Sys() / "bus/pci/devices/0000:41:02.7",
        Sys() / "class/mdev_bus/0000:41:00.4",
        TypeDir("0000:41:00.4", "nvidia-692") / "available_instances"};
    for (const auto& path : gpu_paths) ASSERT_TRUE(fs::exists(path)) << path;
    ASSERT_NO_FATAL_FAILURE(sim_->Control("unplug 0000:41:00.0"));
    for (const auto& path : gpu_paths) {
      EXPECT_FALSE(fs::exists(fs::symlink_status(path))) << path;
    }
    EXPECT_TRUE(fs::exists(TypeDir(kT4a, "nvidia-230"))) << "the T4 stays";
    ASSERT_NO_FATAL_FAILURE(sim_->Control("restore 0000:41:00.0"));
    for (const auto& path : gpu_paths) EXPECT_TRUE(fs::exists(path)) << path;
  }
}

// --- plain syscalls ---

struct SyscallCase {
  std::string description;
  fs::path path;
  int flags;
  std::string data;
  Answer want;
};

void ExpectAnswers(const std::vector<SyscallCase>& cases) {
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    Answer got = OpenAndWrite(c.path, c.flags, c.data);
    EXPECT_EQ(ErrnoName(got.open_errno), ErrnoName(c.want.open_errno)) << "open(2)";
    EXPECT_EQ(ErrnoName(got.write_errno), ErrnoName(c.want.write_errno)) << "write(2)";
  }
}

TEST_F(FuseSimTest, MdevWritesAnswerWithTheModelsErrno) {
  ASSERT_NO_FATAL_FAILURE(Start("mixed"));
  fs::path create = TypeDir(kT4a, "nvidia-230") / "create";
  ASSERT_EQ(OpenAndWrite(create, O_WRONLY, Uuid(1)).write_errno, 0);
  const std::vector<SyscallCase> cases = {
      {"create: not a UUID", create, O_WRONLY, "not-a-uuid", {0, EINVAL}},
      {"create: 35 characters", create, O_WRONLY, Uuid(2).substr(1), {0, EINVAL}},
      {"create: taken UUID, upper case",
       create,
       O_WRONLY,
       "9B2C4E1A-0D3F-4A5B-8C6D-000000000001",
       {0, EEXIST}},
      {"create: GPU locked to another type",
       TypeDir(kT4a, "nvidia-222") / "create",
       O_WRONLY,
       Uuid(3),
       {0, ENOSPC}},
      {"create: mtty pool", TypeDir("mtty", "mtty-2") / "create", O_WRONLY, Uuid(4) + "\n", {0, 0}},
      {"remove: not a number", MdevDir(Uuid(1)) / "remove", O_WRONLY, "yes", {0, EINVAL}},
      {"remove: 0 does nothing", MdevDir(Uuid(1)) / "remove", O_WRONLY, "0", {0, 0}},
      {"reading create", create, O_RDONLY, "", {EACCES, 0}},
      {"create opened read-write", create, O_RDWR, "", {EACCES, 0}},
      {"writing available_instances",
       TypeDir(kT4a, "nvidia-230") / "available_instances",
       O_WRONLY,
       "3",
       {EACCES, 0}},
      {"writing name", TypeDir(kT4a, "nvidia-230") / "name", O_WRONLY, "x", {EACCES, 0}},
      {"writing a directory", TypeDir(kT4a, "nvidia-230"), O_WRONLY, "x", {EISDIR, 0}},
      {"a missing attribute", MdevDir(Uuid(9)) / "remove", O_WRONLY, "1", {ENOENT, 0}},
      {"a new file in sysfs", Sys() / "bus" / "new-file", O_WRONLY | O_CREAT, "x", {EACCES, 0}},
  };
  ExpectAnswers(cases);
  EXPECT_TRUE(fs::exists(MdevDir(Uuid(1)))) << "remove of 0 left it";
  EXPECT_EQ(Slurp(TypeDir("mtty", "mtty-1") / "available_instances"), "22\n");
}

TEST_F(FuseSimTest, VendorVfioWritesAnswerWithTheModelsErrno) {
  ASSERT_NO_FATAL_FAILURE(Start("h200-vfio"));
  fs::path vf4 = NvidiaDir("0000:41:00.4") / "current_vgpu_type";
  fs::path vf5 = NvidiaDir("0000:41:00.5") / "current_vgpu_type";
  const std::vector<SyscallCase> cases = {
      {"not a number", vf4, O_WRONLY, "abc", {0, EINVAL}},
      {"a type this GPU lacks", vf4, O_WRONLY, "9999", {0, EINVAL}},
      {"the MIG-backed type with MIG off", vf4, O_WRONLY, "1414\n", {0, ENOSPC}},
      {"the full-GPU type", vf4, O_WRONLY, "1428\n", {0, 0}},
      {"again on the occupied VF", vf4, O_WRONLY, "1428", {0, EEXIST}},
      {"the full-GPU type again, on another VF", vf5, O_WRONLY, "1428", {0, ENOSPC}},
      {"read-write open of current_vgpu_type", vf4, O_RDWR, "", {0, 0}},
      {"creatable_vgpu_types is read-only",
       NvidiaDir("0000:41:00.4") / "creatable_vgpu_types",
       O_WRONLY,
       "1",
       {EACCES, 0}},
  };
  ExpectAnswers(cases);
  EXPECT_EQ(Slurp(vf4), "1428\n");
  ASSERT_NO_FATAL_FAILURE(sim_->Control("busy 0000:41:00.4"));
  ExpectAnswers({{"destroy while held", vf4, O_WRONLY, "0", {0, EBUSY}}});
  ASSERT_NO_FATAL_FAILURE(sim_->Control("release 0000:41:00.4"));
  ExpectAnswers({{"destroy", vf4, O_WRONLY, "0", {0, 0}}});
  EXPECT_EQ(Slurp(vf4), "0\n");
}

TEST_F(FuseSimTest, AnOpenAttributeOfARemovedDeviceAnswersEnodev) {
  ASSERT_NO_FATAL_FAILURE(Start("t4x2"));
  ASSERT_EQ(OpenAndWrite(TypeDir(kT4a, "nvidia-230") / "create", O_WRONLY, Uuid(1)).write_errno, 0);
  fs::path remove = MdevDir(Uuid(1)) / "remove";
  int fd = ::open(remove.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(OpenAndWrite(remove, O_WRONLY, "1").write_errno, 0);
  errno = 0;
  EXPECT_EQ(::write(fd, "1", 1), -1);
  EXPECT_EQ(ErrnoName(errno), ErrnoName(ENODEV)) << "kernfs: the node is no longer active";
  ::close(fd);
}

TEST_F(FuseSimTest, ConcurrentCreatesNeverOversubscribeAType) {
  ASSERT_NO_FATAL_FAILURE(Start("t4x2"));
  // T4-16Q: one per GPU. Six vgpuctl processes race for it.
  std::vector<std::unique_ptr<Child>> racers;
  for (int i = 0; i < 6; ++i) {
    racers.push_back(std::make_unique<Child>(
        std::vector<std::string>{kVgpuctlPath, "--sysfs-root", Mount().string(), "create",
                                 "--parent", kT4a, "--type", "nvidia-234"}));
  }
  int won = 0, no_room = 0;
  for (auto& racer : racers) {
    auto code = racer->Wait(30s);
    ASSERT_TRUE(code.has_value());
    if (*code == 0) ++won;
    if (*code == 1 && racer->err().find("No space left on device") != std::string::npos) ++no_room;
  }
  EXPECT_EQ(won, 1);
  EXPECT_EQ(no_room, 5);
}

// --- mdev::SysfsBackend with the production SysfsIo ---

TEST_F(FuseSimTest, MdevNodeWithPosixSysfsIoWorksOverTheMount) {
  struct Case {
    std::string profile;
    std::string parent;
    std::string type;
    size_t parents;
  };
  const Case cases[] = {
      {"t4x2", kT4a, "nvidia-232", 2},
      {"h200-vfio", "0000:41:01.1", "1428", 16},
      {"mixed", "mtty", "mtty-1", 22},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.profile);
    ASSERT_NO_FATAL_FAILURE(Start(c.profile));
    mdev::PosixSysfsIo io;
    mdev::SysfsBackend node(Mount(), io);
    auto before = node.Scan();
    ASSERT_TRUE(before.ok()) << before.status().ToString();
    EXPECT_EQ(before->parents.size(), c.parents);
    EXPECT_TRUE(before->vgpus.empty());
    auto vgpu = node.Create({c.parent, c.type, std::nullopt});
    ASSERT_TRUE(vgpu.ok()) << vgpu.status().ToString() << sim_->Log();
    EXPECT_EQ(vgpu->type_id, c.type);
    EXPECT_TRUE(vgpu->iommu_group.has_value());
    auto after = node.Scan();
    ASSERT_TRUE(after.ok());
    ASSERT_EQ(after->vgpus.size(), 1u);
    EXPECT_EQ(after->vgpus[0].id, vgpu->id);
    Status removed = node.Remove(vgpu->id);
    EXPECT_TRUE(removed.ok()) << removed.ToString();
    auto last = node.Scan();
    ASSERT_TRUE(last.ok());
    EXPECT_TRUE(last->vgpus.empty());
  }
}

}  // namespace
}  // namespace kvgpu::sim::testing
