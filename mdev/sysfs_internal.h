// The sysfs backend's own pieces, shared by its discovery and its create/remove; not part of the
// library's interface. What the libvirt backend shares with it is in backend_kit.h.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mdev/model.h"
#include "mdev/sysfs_io.h"

namespace kvgpu::mdev::internal {

std::optional<uint32_t> ParseUnsigned(std::string_view text);
void FillDeviceIdentity(SysfsIo& io, const fs::path& dir, Parent& parent);
std::optional<uint32_t> IommuGroup(SysfsIo& io, const fs::path& device_dir);
Result<VgpuType> ReadMdevType(SysfsIo& io, const fs::path& type_dir);
Result<Vgpu> ReadMdevDevice(SysfsIo& io, const fs::path& devices_dir, const std::string& uuid,
                            const std::vector<Parent>& parents);

// Processes whose open files (the links under <proc_root>/<pid>/fd) name one of `paths`: the
// guard before a vendor-VFIO release. Unlike an mdev's remove, which the kernel refuses while the
// device is open, writing 0 to current_vgpu_type is not known to wait for the VM, and the next
// owner reuses the same VF. Processes that end or hide their fds during the scan are skipped;
// kIo when <proc_root> cannot be listed; none when there is no such directory (a test's root).
Result<std::vector<int>> OpenedBy(const fs::path& proc_root, const std::vector<std::string>& paths);

}  // namespace kvgpu::mdev::internal
