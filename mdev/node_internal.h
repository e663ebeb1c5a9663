// Pieces shared by discovery and by create/remove; not part of the library's interface.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "mdev/model.h"
#include "mdev/sysfs_io.h"

namespace kvgpu::mdev::internal {

std::optional<uint32_t> ParseUnsigned(std::string_view text);
void FillDeviceIdentity(SysfsIo& io, const fs::path& dir, Parent& parent);
std::optional<uint32_t> IommuGroup(SysfsIo& io, const fs::path& device_dir);
std::string VfioDevicePath(std::optional<uint32_t> group);
Result<VgpuType> ReadMdevType(SysfsIo& io, const fs::path& type_dir);
// Polls `done` until it holds or the timeout passes. The kernel creates and removes
// synchronously, but a device's links and udev-driven consumers (libvirt among them) lag a little.
template <typename Predicate>
bool WaitFor(std::chrono::milliseconds timeout, std::chrono::milliseconds poll, Predicate done) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(poll);
  }
}

// The UUID a new mdev gets: the one asked for, in the kernel's lower case, or a random one;
// kMalformedUuid when the one asked for is not a UUID.
Result<std::string> MdevUuid(const std::optional<std::string>& requested);

// The clear message for a failed create or remove, by the error's kind; the cause (the kernel's
// errno, libvirt's message) is kept in brackets. The same words on every backend.
Status CreateFailed(const Status& cause, const std::string& what, const std::string& type,
                    const std::string& parent);
Status RemoveFailed(const Status& cause, const std::string& id);

Result<Vgpu> ReadMdevDevice(SysfsIo& io, const fs::path& devices_dir, const std::string& uuid,
                            const std::vector<Parent>& parents);

}  // namespace kvgpu::mdev::internal
