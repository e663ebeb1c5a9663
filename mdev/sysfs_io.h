// The one seam through which every sysfs read and write passes. Production uses PosixSysfsIo;
// tests and the simulator put a kernel model (sim/) or a fault injector in front of it.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvgpu::mdev {

namespace fs = std::filesystem;

class SysfsIo {
 public:
  virtual ~SysfsIo() = default;

  // Whole content of a (small) attribute file.
  virtual Result<std::string> ReadFile(const fs::path& path) = 0;
  // One write(2) of `data` to an existing attribute, as `echo data > path` does. The returned
  // Status carries the errno of open(2) or write(2): this is how the kernel answers.
  virtual Status WriteFile(const fs::path& path, std::string_view data) = 0;
  // Names of the entries of a directory (no "." or ".."), sorted.
  virtual Result<std::vector<std::string>> ListDir(const fs::path& path) = 0;
  // Target of a symlink, as stored (usually relative, as sysfs makes them).
  virtual Result<fs::path> ReadLink(const fs::path& path) = 0;
  // The path with every symlink resolved (sysfs links are relative, so a tree under a test
  // root resolves inside that root).
  virtual Result<fs::path> Canonical(const fs::path& path) = 0;
  virtual bool Exists(const fs::path& path) = 0;
  virtual bool IsDirectory(const fs::path& path) = 0;
};

// The real thing: POSIX calls on the paths as given.
class PosixSysfsIo : public SysfsIo {
 public:
  Result<std::string> ReadFile(const fs::path& path) override;
  Status WriteFile(const fs::path& path, std::string_view data) override;
  Result<std::vector<std::string>> ListDir(const fs::path& path) override;
  Result<fs::path> ReadLink(const fs::path& path) override;
  Result<fs::path> Canonical(const fs::path& path) override;
  bool Exists(const fs::path& path) override;
  bool IsDirectory(const fs::path& path) override;
};

// `path` with every symlink resolved by the kernel in one walk: open(O_PATH) and the name
// /proc/self/fd gives it. std::filesystem::canonical (and glibc's realpath) call readlink(2) once
// per component, about twenty calls for a sysfs attribute. Without /proc (a bare chroot) it
// falls back to those. Errors carry the errno of open(2), as canonical's would.
Result<fs::path> ResolvePath(const fs::path& path);

// Last component of a symlink's target: "iommu_group" -> "12", "physfn" -> "0000:41:00.0".
Result<std::string> LinkName(SysfsIo& io, const fs::path& link);

// Attribute content with the trailing newline(s) and surrounding blanks removed.
Result<std::string> ReadAttribute(SysfsIo& io, const fs::path& path);

}  // namespace kvgpu::mdev
