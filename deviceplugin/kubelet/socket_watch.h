// inotify on kubelet's device-plugins directory: kubelet re-creating kubelet.sock, or removing our
// sockets, is how a kubelet restart shows (the NVIDIA plugin and KubeVirt watch the same). An
// eventfd lets other threads wake the waiter early.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvgpu::deviceplugin {

struct DirEvent {
  std::string name;      // file name inside the directory
  bool created = false;  // created or moved in; else deleted or moved out
};

class DirWatcher {
 public:
  DirWatcher() = default;
  ~DirWatcher();
  DirWatcher(const DirWatcher&) = delete;
  DirWatcher& operator=(const DirWatcher&) = delete;

  Status Start(const std::filesystem::path& dir);
  // Waits up to `timeout` for events or a Wake(); returns what arrived (maybe nothing).
  std::vector<DirEvent> Wait(std::chrono::milliseconds timeout);
  void Wake();

 private:
  int inotify_fd_ = -1;
  int wake_fd_ = -1;
};

}  // namespace kvgpu::deviceplugin
