// kvgpu-sim's process behaviour: the control channel over the mount, stopping on signals and
// on an external unmount, and the messages when FUSE cannot be used.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "fuse_test_util.h"
#include "sim/kernel_model.h"
#include "sim_test_util.h"

namespace kvgpu::sim::testing {
namespace {

class FuseLifecycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = NoFuseReason()) GTEST_SKIP() << *why;
  }
};

int ControlErrno(const fs::path& mount, const std::string& command) {
  int fd = ::open((mount / "sim" / "control").c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  int err = ::write(fd, command.data(), command.size()) < 0 ? errno : 0;
  ::close(fd);
  return err;
}

std::string State(const fs::path& mount) {
  std::ifstream in(mount / "sim" / "state");
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

TEST_F(FuseLifecycleTest, ControlCommandsAnswerWithAnErrnoAndShowInTheState) {
  SimProcess sim("t4x2");
  ASSERT_TRUE(sim.WaitReady()) << sim.Log();
  const fs::path& mount = sim.mount();
  EXPECT_EQ(State(mount), "profile t4x2\ngpu 0000:3b:00.0 present\ngpu 0000:af:00.0 present\n");
  struct Case {
    std::string description;
    std::string command;
    int want;
  };
  const Case cases[] = {
      {"unknown command", "reboot", EINVAL},
      {"busy without id", "busy", EINVAL},
      {"busy on no vGPU", "busy 9b2c4e1a-0d3f-4a5b-8c6d-000000000001", ENOENT},
      {"unplug an unknown GPU", "unplug 0000:99:00.0", ENOENT},
      {"restore a present GPU", "restore 0000:3b:00.0", EALREADY},
      {"fault with a bad op", "fault open create EIO", EINVAL},
      {"fault with a bad errno", "fault write create ENOTANERRNO", EINVAL},
      {"fault with times 0", "fault write create EIO 0", EINVAL},
      {"two commands, the second bad", "clear-faults\nbogus\n", EINVAL},
      {"unplug", "unplug 0000:af:00.0\n", 0},
      {"unplug twice", "unplug 0000:af:00.0", EALREADY},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    EXPECT_EQ(ControlErrno(mount, c.command), c.want) << std::strerror(ControlErrno(mount, ""));
  }
  EXPECT_FALSE(fs::exists(mount / "sys/bus/pci/devices/0000:af:00.0"));
  EXPECT_FALSE(fs::exists(mount / "sys/class/mdev_bus/0000:af:00.0"));
  EXPECT_NE(State(mount).find("gpu 0000:af:00.0 unplugged"), std::string::npos);
  Output types = Vgpuctl(mount, {"types"});
  EXPECT_EQ(types.exit_code, 0) << types.err;
  EXPECT_EQ(types.out.find("0000:af:00.0"), std::string::npos) << types.out;

  EXPECT_EQ(ControlErrno(mount, "restore 0000:af:00.0"), 0);
  types = Vgpuctl(mount, {"types"});
  EXPECT_NE(types.out.find("0000:af:00.0"), std::string::npos) << types.out;

  // The control files keep sysfs's access rules: control is write-only, state read-only.
  EXPECT_EQ(::open((mount / "sim" / "control").c_str(), O_RDONLY), -1);
  EXPECT_EQ(errno, EACCES);
  EXPECT_EQ(::open((mount / "sim" / "state").c_str(), O_WRONLY), -1);
  EXPECT_EQ(errno, EACCES);
}

TEST_F(FuseLifecycleTest, UnplugTakesTheVgpusAlong) {
  SimProcess sim("t4x2");
  ASSERT_TRUE(sim.WaitReady()) << sim.Log();
  Output created =
      Vgpuctl(sim.mount(), {"create", "--parent", "0000:3b:00.0", "--type", "nvidia-230"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  std::string id = created.out.substr(0, created.out.find('\n'));
  ASSERT_NO_FATAL_FAILURE(sim.Control("busy " + id));
  ASSERT_NO_FATAL_FAILURE(sim.Control("unplug 0000:3b:00.0"));
  EXPECT_FALSE(fs::exists(sim.mount() / "sys/bus/mdev/devices" / id));
  Output listed = Vgpuctl(sim.mount(), {"list"});
  EXPECT_EQ(listed.out.find(id), std::string::npos) << listed.out;
  ASSERT_NO_FATAL_FAILURE(sim.Control("restore 0000:3b:00.0"));
  std::ifstream available(sim.mount() /
                          "sys/class/mdev_bus/0000:3b:00.0/mdev_supported_types/nvidia-230/"
                          "available_instances");
  std::string count;
  available >> count;
  EXPECT_EQ(count, "16") << "restored empty";
}

TEST_F(FuseLifecycleTest, StopsAndUnmountsOnEachStopSignal) {
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    SCOPED_TRACE(strsignal(sig));
    SimProcess sim("mtty");
    ASSERT_TRUE(sim.WaitReady()) << sim.Log();
    EXPECT_TRUE(IsMounted(sim.mount()));
    auto code = sim.Stop(sig);
    ASSERT_TRUE(code.has_value()) << "still running after the signal";
    EXPECT_EQ(*code, 0) << sim.Log();
    EXPECT_FALSE(IsMounted(sim.mount()));
  }
}

TEST_F(FuseLifecycleTest, StopsWhenUnmountedFromOutside) {
  SimProcess sim("mtty");
  ASSERT_TRUE(sim.WaitReady()) << sim.Log();
  Output unmounted = RunProgram({"/usr/bin/fusermount3", "-u", sim.mount().string()});
  ASSERT_EQ(unmounted.exit_code, 0) << unmounted.err;
  auto code = sim.child().Wait(10s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0) << sim.Log();
}

TEST_F(FuseLifecycleTest, ADeadMountIsNamedWithTheCommandThatClearsIt) {
  TempDir backing;  // a killed simulator cannot delete its own
  SimProcess first("mtty", {"--backing", (backing.path() / "tree").string()});
  ASSERT_TRUE(first.WaitReady()) << first.Log();
  first.Stop(SIGKILL);  // no chance to unmount
  ASSERT_TRUE(IsMounted(first.mount()));
  Output second = RunProgram({kSimPath, "--profile", "mtty", "--mount", first.mount().string()});
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_NE(second.err.find("dead FUSE mount"), std::string::npos) << second.err;
  EXPECT_NE(second.err.find("fusermount3 -u " + first.mount().string()), std::string::npos);
}  // ~SimProcess unmounts it

TEST_F(FuseLifecycleTest, ALiveSimulatorIsNotHiddenByASecond) {
  SimProcess first("mtty");
  ASSERT_TRUE(first.WaitReady()) << first.Log();
  Output second = RunProgram({kSimPath, "--profile", "t4x2", "--mount", first.mount().string()});
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_NE(second.err.find("another kvgpu-sim already serves"), std::string::npos) << second.err;
  EXPECT_NE(State(first.mount()).find("profile mtty"), std::string::npos);
}

TEST_F(FuseLifecycleTest, InTheBackgroundItServesUntilUnmounted) {
  TempDir dir;
  fs::path mount = fs::canonical(dir.path()) / "node";
  // An unnormalised path with a trailing slash: the mount must still be found by its real name.
  std::string given = (dir.path() / "x" / ".." / "node").string() + "/";
  Output started = RunProgram({kSimPath, "--profile", "mtty", "--mount", given, "--background"});
  ASSERT_EQ(started.exit_code, 0) << started.err;
  EXPECT_TRUE(IsMounted(mount));
  EXPECT_NE(State(mount).find("profile mtty"), std::string::npos);
  Output created = Vgpuctl(mount, {"create", "--parent", "mtty", "--type", "mtty-1"});
  EXPECT_EQ(created.exit_code, 0) << created.err;
  Output unmounted = RunProgram({"/usr/bin/fusermount3", "-u", mount.string()});
  EXPECT_EQ(unmounted.exit_code, 0) << unmounted.err;
  ForceUnmount(mount);  // should the daemon have failed, the test still leaves no mount
  EXPECT_EQ(::rmdir(mount.c_str()), 0);
}

TEST_F(FuseLifecycleTest, BadArgumentsAreUsageErrors) {
  const std::vector<std::vector<std::string>> cases = {
      {kSimPath, "--profile", "p100", "--mount", "/nonexistent/x"},
      {kSimPath, "--profile", "t4x2"},
      {kSimPath, "--mount", "/tmp/x"},
      {kSimPath, "--frobnicate"},
  };
  for (const auto& argv : cases) {
    Output out = RunProgram(argv);
    EXPECT_EQ(out.exit_code, 2) << argv.back() << ": " << out.err;
    EXPECT_FALSE(out.err.empty());
  }
  Output listed = RunProgram({kSimPath, "--list"});
  EXPECT_EQ(listed.exit_code, 0);
  for (const auto& name : ProfileNames()) EXPECT_NE(listed.out.find(name), std::string::npos);
}

// Runs kvgpu-sim in a private mount namespace whose /dev is a fresh tmpfs prepared by `setup`
// (shell commands), so the host's /dev/fuse is out of reach without touching it.
Output RunWithPrivateDev(const std::string& setup, const std::string& run_as,
                         const fs::path& mount) {
  std::string script = "mount -t tmpfs none /dev && " + setup + " exec " + run_as +
                       " \"$0\" --profile t4x2 --mount \"$1\"";
  return RunProgram({"/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
                     script, kSimPath, mount.string()});
}

TEST_F(FuseLifecycleTest, WithoutDevFuseSaysWhyAndExits) {
  if (::geteuid() != 0) GTEST_SKIP() << "hiding /dev/fuse in a private mount namespace needs root";
  TempDir dir;
  Output out = RunWithPrivateDev("", "", dir.path() / "node");
  EXPECT_EQ(out.exit_code, 3) << out.err;
  EXPECT_NE(out.err.find("cannot open /dev/fuse: No such file or directory"), std::string::npos)
      << out.err;
  EXPECT_NE(out.err.find("modprobe fuse"), std::string::npos) << out.err;
  EXPECT_FALSE(fs::exists(dir.path() / "node")) << "nothing is created before the check";
}

TEST_F(FuseLifecycleTest, WithoutPermissionToUseFuseSaysWhyAndExits) {
  if (::geteuid() != 0) GTEST_SKIP() << "making a root-only /dev/fuse for another user needs root";
  TempDir dir;
  Output out = RunWithPrivateDev(
      "mknod -m 600 /dev/fuse c 10 229 && mknod -m 666 /dev/null c 1 3 &&",
      "/usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups", dir.path() / "node");
  EXPECT_EQ(out.exit_code, 3) << out.err;
  EXPECT_NE(out.err.find("Permission denied"), std::string::npos) << out.err;
  EXPECT_NE(out.err.find("no permission to use FUSE"), std::string::npos) << out.err;
}

}  // namespace
}  // namespace kvgpu::sim::testing
