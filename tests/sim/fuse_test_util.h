// Helpers for the kvgpu-sim tests: running programs (the real kvgpu-sim and vgpuctl binaries)
// with their output captured, and a simulator process whose mount never outlives the test.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fakes/common/child_process.h"
#include "fakes/common/mounts.h"
#include "fakes/common/temp_dir.h"

namespace kvgpu::sim::testing {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

inline const char* const kSimPath = KVGPU_SIM_PATH;
inline const char* const kVgpuctlPath = KVGPU_VGPUCTL_PATH;
inline const char* const kSimTreePath = KVGPU_SIM_TREE_PATH;

// Why a FUSE test cannot run here, or nullopt when it can.
inline std::optional<std::string> NoFuseReason() {
  if (::access("/dev/fuse", F_OK) != 0) return "no /dev/fuse on this machine (modprobe fuse)";
  return std::nullopt;
}

// A program started at once with stdout and stderr kept apart, each in a file of its own temp
// dir; fakes/common's ChildProcess spawns and reaps it.
class Child {
 public:
  explicit Child(const std::vector<std::string>& argv) : process_(argv, dir_.path() / "stdout") {
    process_.set_stderr_log(dir_.path() / "stderr");
    process_.Start();  // a program that cannot start never has an exit code: Wait says nullopt
  }

  pid_t pid() const { return process_.pid(); }
  bool running() { return process_.Running(); }
  // Exit code (128 + signal when killed), or nullopt while it runs past `timeout`.
  std::optional<int> Wait(std::chrono::milliseconds timeout) { return process_.Wait(timeout); }
  std::string out() const { return Read("stdout"); }
  std::string err() const { return Read("stderr"); }

 private:
  std::string Read(const char* name) const {
    std::ifstream in(dir_.path() / name);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }

  kvgpu::testing::TempDir dir_;
  kvgpu::testing::ChildProcess process_;
};

struct Output {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline Output RunProgram(const std::vector<std::string>& argv,
                         std::chrono::milliseconds timeout = 30s) {
  Child child(argv);
  auto code = child.Wait(timeout);
  return Output{code.value_or(-1), child.out(), child.err()};
}

inline Output Vgpuctl(const fs::path& root, std::vector<std::string> args) {
  args.insert(args.begin(), {kVgpuctlPath, "--sysfs-root", root.string()});
  return RunProgram(args);
}

inline bool IsMounted(const fs::path& path) {
  return kvgpu::testing::IsMountPoint(path);
}

using kvgpu::testing::ForceUnmount;

// A kvgpu-sim process serving one profile at a fresh mount point under $TMPDIR.
class SimProcess {
 public:
  explicit SimProcess(const std::string& profile, std::vector<std::string> extra = {}) {
    std::string pattern = (fs::temp_directory_path() / "kvgpu-fuse-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = fs::canonical(pattern);  // /proc/self/mountinfo names the resolved path
    mount_ = dir_ / "node";
    std::vector<std::string> argv = {kSimPath, "--profile", profile, "--mount", mount_.string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    child_ = std::make_unique<Child>(argv);
  }
  ~SimProcess() {
    if (child_ && child_->running()) {
      ::kill(child_->pid(), SIGTERM);
      if (!child_->Wait(5s)) ::kill(child_->pid(), SIGKILL);
      child_->Wait(5s);
    }
    ForceUnmount(mount_);
    // rmdir, never remove_all: should a mount survive, nothing inside it is touched.
    ::rmdir(mount_.c_str());
    ::rmdir(dir_.c_str());
  }
  SimProcess(const SimProcess&) = delete;
  SimProcess& operator=(const SimProcess&) = delete;

  // Until the mount serves its control files, or the process has died (then false).
  bool WaitReady(std::chrono::milliseconds timeout = 10s) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (::access((mount_ / "sim" / "state").c_str(), R_OK) == 0) return true;
      if (child_->Wait(0ms)) return false;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }
  // Signals the process and returns its exit code (nullopt if it does not exit in time).
  std::optional<int> Stop(int signal = SIGTERM) {
    if (child_->running()) ::kill(child_->pid(), signal);
    return child_->Wait(10s);
  }

  const fs::path& mount() const { return mount_; }
  Child& child() { return *child_; }
  std::string Log() const {
    return "kvgpu-sim stdout:\n" + child_->out() + "stderr:\n" + child_->err();
  }

  void Control(const std::string& command) {
    std::ofstream control(mount_ / "sim" / "control");
    control << command << std::flush;
    ASSERT_TRUE(control.good()) << "control command '" << command << "' failed";
  }

 private:
  fs::path dir_;
  fs::path mount_;
  std::unique_ptr<Child> child_;
};

}  // namespace kvgpu::sim::testing
