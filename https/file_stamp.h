// Change detection for files mounted from Secrets and ConfigMaps. kubelet updates those by
// swapping a symlink, and cert-manager may rewrite in place, so a change is any difference in
// the followed file's device, inode, size or modification time.
#pragma once

#include <sys/stat.h>

#include <string>
#include <tuple>

namespace kvgpu::https {

struct FileStamp {
  dev_t device = 0;
  ino_t inode = 0;
  off_t size = -1;
  long long mtime_ns = 0;
  bool exists = false;

  static FileStamp Of(const std::string& path) {
    FileStamp stamp;
    struct stat st {};
    if (path.empty() || ::stat(path.c_str(), &st) != 0) return stamp;
    stamp.device = st.st_dev;
    stamp.inode = st.st_ino;
    stamp.size = st.st_size;
    stamp.mtime_ns = static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
    stamp.exists = true;
    return stamp;
  }
  bool operator==(const FileStamp& other) const {
    return std::tie(device, inode, size, mtime_ns, exists) ==
           std::tie(other.device, other.inode, other.size, other.mtime_ns, other.exists);
  }
};

}  // namespace kvgpu::https
