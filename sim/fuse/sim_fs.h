// The file system kvgpu-sim mounts, as plain calls on paths ("/sys/bus/mdev/devices"), each
// answering 0 or a byte count, or -errno as a FUSE operation does. fuse_ops.cpp binds them to
// libfuse; everything here can run without a mount.
//
// The mount shows the model's root: `sys/` is served from the model's backing tree (stat,
// readlink and readdir pass through; the model's scratch directory is hidden) and open/read/
// write go to the model, so the errno a caller's open(2) or write(2) sees is the model's answer.
// `sim/` is the control channel (sim/fuse/control.h).
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <ctime>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "sim/kernel_model.h"

namespace kvgpu::sim {

// sysfs reports every attribute as one page, whatever its content.
inline constexpr off_t kAttributeSize = 4096;

// The directory at the mount's top holding the control files.
inline constexpr const char* kControlDir = "sim";

class SimFs {
 public:
  // `log` hears every failed write with the model's reason (only the errno reaches the caller)
  // and every control command; may be empty.
  using Log = std::function<void(const std::string&)>;
  explicit SimFs(KernelModel& model, Log log = {});
  ~SimFs();
  SimFs(const SimFs&) = delete;
  SimFs& operator=(const SimFs&) = delete;

  // Makes the kernel forget what it cached about a mount path ("/sys/bus/mdev/devices/<uuid>").
  // Called, before the write that removed it returns, for every entry a write took away.
  using Invalidate = std::function<void(const std::string& path)>;
  void SetInvalidate(Invalidate invalidate) { invalidate_ = std::move(invalidate); }

  struct DirEntry {
    std::string name;
    mode_t type;  // S_IFDIR, S_IFREG, S_IFLNK
  };

  int GetAttr(std::string_view path, struct stat* st);
  int ReadLink(std::string_view path, std::string* target);
  int ReadDir(std::string_view path, std::vector<DirEntry>* entries);
  // `flags` as given to open(2). On success `*handle` is passed to Read/Write/Release.
  int Open(std::string_view path, int flags, uint64_t* handle);
  // The content is taken from the model on the first read and on every read at offset 0, and
  // served from that copy otherwise, as kernfs buffers one show() per read pass.
  int Read(uint64_t handle, off_t offset, size_t size, char* buf);
  // One write(2) is one store(): the whole buffer goes to the model in one call.
  int Write(uint64_t handle, std::string_view data);
  void Release(uint64_t handle);
  // Truncation (`echo x > attr` opens with O_TRUNC) is accepted and ignored, as kernfs does.
  int Truncate(std::string_view path);

 private:
  enum class Node { kMissing, kModel, kSimDir, kSimControl, kSimState };
  struct OpenFile;

  Node Classify(std::string_view path, std::filesystem::path* backing) const;
  void VirtualAttr(mode_t mode, struct stat* st) const;

  // Hands the paths the model removed during this thread's write to invalidate_.
  void FlushRemoved();

  KernelModel& model_;
  Log log_;
  Invalidate invalidate_;
  uid_t uid_;
  gid_t gid_;
  struct timespec started_;
};

}  // namespace kvgpu::sim
