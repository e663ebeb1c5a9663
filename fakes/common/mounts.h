// Mount points, for tests and harnesses that mount the FUSE simulator and must take it away again
// whatever happened.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace kvgpu::testing {

inline bool IsMountPoint(const std::filesystem::path& path) {
  std::ifstream mountinfo("/proc/self/mountinfo");
  for (std::string line; std::getline(mountinfo, line);) {
    // "<id> <parent> <major:minor> <root> <mount point> ..."
    std::istringstream fields(line);
    std::string id, parent, devices, root, mountpoint;
    fields >> id >> parent >> devices >> root >> mountpoint;
    if (mountpoint == path.string()) return true;
  }
  return false;
}

// Unmounts whatever serves `path`, alive, hung or dead: a lazy unmount, else fusermount3 -u -z
// (all an unprivileged mount's owner may do). In the kvgpu_test_process library.
void ForceUnmount(const std::filesystem::path& path);

}  // namespace kvgpu::testing
