// Helpers for the kvgpu-sim tests: running programs (the real kvgpu-sim and vgpuctl binaries)
// with their output captured, and a simulator process whose mount never outlives the test.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
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

#include "fakes/common/mounts.h"

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

inline std::string ReadFd(int fd) {
  std::string out;
  char buf[4096];
  off_t offset = 0;
  for (ssize_t n; (n = ::pread(fd, buf, sizeof buf, offset)) > 0; offset += n) {
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// A child process with stdout and stderr captured in memory files.
class Child {
 public:
  explicit Child(const std::vector<std::string>& argv) {
    out_ = ::memfd_create("stdout", MFD_CLOEXEC);
    err_ = ::memfd_create("stderr", MFD_CLOEXEC);
    std::vector<char*> args;
    for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out_, STDOUT_FILENO);
      ::dup2(err_, STDERR_FILENO);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
  }
  ~Child() {
    if (running()) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(out_);
    ::close(err_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !status_; }

  // Exit code (128 + signal when killed), or nullopt while it runs past `timeout`.
  std::optional<int> Wait(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (running()) {
      int status = 0;
      pid_t done = ::waitpid(pid_, &status, WNOHANG);
      if (done == pid_) {
        status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(5ms);
    }
    return status_;
  }
  std::string out() const { return ReadFd(out_); }
  std::string err() const { return ReadFd(err_); }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  int err_ = -1;
  std::optional<int> status_;
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

// Takes a mount away whatever state its server is in (alive, hung or dead).
inline void ForceUnmount(const fs::path& path) {
  for (int i = 0; i < 5 && IsMounted(path); ++i) {
    if (::umount2(path.c_str(), MNT_DETACH) != 0) {
      RunProgram({"/usr/bin/fusermount3", "-u", "-z", path.string()}, 5s);
    }
  }
}

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
