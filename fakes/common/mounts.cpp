#include "fakes/common/mounts.h"

#include <sys/mount.h>

#include <chrono>

#include "fakes/common/child_process.h"

namespace kvgpu::testing {

void ForceUnmount(const std::filesystem::path& path) {
  for (int i = 0; i < 5 && IsMountPoint(path); ++i) {
    if (::umount2(path.c_str(), MNT_DETACH) != 0) {
      ChildProcess fusermount({"/usr/bin/fusermount3", "-u", "-z", path.string()}, "/dev/null");
      if (fusermount.Start()) fusermount.Wait(std::chrono::seconds(5));
    }
  }
}

}  // namespace kvgpu::testing
