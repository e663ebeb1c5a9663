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

}  // namespace kvgpu::mdev::internal
