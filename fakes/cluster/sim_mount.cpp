#include "fakes/cluster/sim_mount.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace kvgpu::testing {

namespace fs = std::filesystem;

namespace {
constexpr const char* kFusermount = "/usr/bin/fusermount3";
}

std::optional<std::string> FuseUnavailableReason() {
  if (::access("/dev/fuse", F_OK) != 0) {
    return "no /dev/fuse on this machine (load the module: modprobe fuse; in a container pass "
           "--device /dev/fuse --cap-add SYS_ADMIN)";
  }
  if (::access(kFusermount, X_OK) != 0) {
    return std::string("no ") + kFusermount + " (install the Debian package fuse3)";
  }
  return std::nullopt;
}

SimMount::SimMount(fs::path sim_binary, std::string profile, fs::path dir)
    : mount_(fs::weakly_canonical(dir) / "node"),
      process_({sim_binary.string(), "--profile", profile, "--mount", mount_.string(), "--quiet"},
               dir / "kvgpu-sim.log") {}

SimMount::~SimMount() {
  Unmount();
}

std::optional<std::string> SimMount::Mount(std::chrono::milliseconds timeout) {
  if (auto reason = FuseUnavailableReason()) return reason;
  if (!process_.Start()) return process_.error();
  mounted_ = true;
  const fs::path state = mount_ / "sim" / "state";
  const bool ready =
      WaitFor([&] { return ::access(state.c_str(), R_OK) == 0 || !process_.Running(); }, timeout);
  if (ready && ::access(state.c_str(), R_OK) == 0) return std::nullopt;
  return "kvgpu-sim did not mount " + mount_.string() + ":\n" + process_.Log();
}

void SimMount::Unmount() {
  if (!mounted_) return;
  mounted_ = false;
  process_.Stop();
  ForceUnmount(mount_);
  ::rmdir(mount_.c_str());
}

std::optional<std::string> SimMount::Control(const std::string& command) {
  const fs::path control = mount_ / "sim" / "control";
  const int fd = ::open(control.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return std::strerror(errno);
  const std::string line = command + "\n";
  const ssize_t written = ::write(fd, line.data(), line.size());
  const int error = errno;
  ::close(fd);
  if (written < 0) return std::strerror(error);
  return std::nullopt;
}

std::string SimMount::State() const {
  std::ifstream in(mount_ / "sim" / "state");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace kvgpu::testing
