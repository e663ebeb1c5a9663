// A kvgpu-sim process serving one profile at a mount point of its own, taken down on every exit
// path: SIGTERM (kvgpu-sim unmounts itself), then a lazy unmount should the process be hung or
// dead, and the mount point removed with rmdir only, so nothing is ever deleted through a mount.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "fakes/common/child_process.h"
#include "fakes/common/mounts.h"

namespace kvgpu::testing {

// Why FUSE mounts cannot be made here (no /dev/fuse, no fusermount3), or nullopt when they can.
std::optional<std::string> FuseUnavailableReason();

class SimMount {
 public:
  // Mounts at `dir`/node; kvgpu-sim's output goes to `dir`/kvgpu-sim.log.
  SimMount(std::filesystem::path sim_binary, std::string profile, std::filesystem::path dir);
  ~SimMount();
  SimMount(const SimMount&) = delete;
  SimMount& operator=(const SimMount&) = delete;

  // Starts kvgpu-sim and waits until the mount serves sim/state; the reason when it does not.
  std::optional<std::string> Mount(std::chrono::milliseconds timeout = kEventDeadline);
  void Unmount();

  const std::filesystem::path& mount() const { return mount_; }
  ChildProcess& process() { return process_; }
  // A line for <mount>/sim/control; the errno text when the simulator refuses it.
  std::optional<std::string> Control(const std::string& command);
  std::string State() const;

 private:
  std::filesystem::path mount_;
  ChildProcess process_;
  bool mounted_ = false;
};

}  // namespace kvgpu::testing
