// Choosing a backend by name: the one place the plugin's config and vgpuctl's --backend meet
// the implementations.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "common/status.h"
#include "mdev/backend.h"
#include "mdev/sysfs_io.h"

namespace kvgpu::mdev {

struct BackendChoice {
  std::string name = "sysfs";                  // "sysfs" or "libvirt"
  std::string libvirt_uri = "qemu:///system";  // for "libvirt"

  bool operator==(const BackendChoice&) const = default;
};

// kInvalid naming the choices when `name` is neither.
Status ValidateBackendName(const std::string& name);

// The backend chosen, over `sysfs_root` (the libvirt backend reads type descriptions there).
// Nothing is connected yet: the libvirt backend connects on first use.
Result<std::unique_ptr<Backend>> MakeBackend(const BackendChoice& choice,
                                             const std::filesystem::path& sysfs_root, SysfsIo& io);

}  // namespace kvgpu::mdev
