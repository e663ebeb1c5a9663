// What both mdev backends (the sysfs one, sysfs_backend.h, and libvirt's, libvirt_backend.h) share
// and neither owns: the UUID a new mdev gets, the settle wait, the VFIO device path, and the words
// of a failed create or remove, so a caller reads the same message whichever backend is in use.
// Not part of the library's interface.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>

#include "common/status.h"

namespace kvgpu::mdev::kit {

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

// The VFIO group's device node, or empty when the device has no IOMMU group.
std::string VfioDevicePath(std::optional<uint32_t> group);

}  // namespace kvgpu::mdev::kit
