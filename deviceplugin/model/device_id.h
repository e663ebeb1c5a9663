// Device IDs as kubelet sees them: "<parent>-<type-id>-<slot>", e.g. "0000:3b:00.0-nvidia-222-3".
//
// The parent is the device the kernel creates the vGPU on (the GPU, or the SR-IOV virtual
// function, or a virtual parent like "mtty"), the slot an index below that parent's capacity for
// the type. IDs carry no UUID, so the same node state always yields the same IDs, and an operator
// can read off which GPU a pod got.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvgpu::deviceplugin {

struct DeviceKey {
  std::string parent;
  std::string type_id;
  uint32_t slot = 0;

  bool operator==(const DeviceKey&) const = default;
  auto operator<=>(const DeviceKey&) const = default;
};

// The API documents Device.ID as at most 63 characters; longer IDs are never advertised.
inline constexpr size_t kMaxDeviceIdLength = 63;

std::string MakeDeviceId(const DeviceKey& key);

// The key `id` names, given the parent and type it should belong to (both may contain '-', so
// an ID alone cannot be split): nullopt unless `id` is exactly MakeDeviceId of that parent, type
// and a slot of at most 6 digits.
std::optional<DeviceKey> ParseDeviceId(std::string_view id, std::string_view parent,
                                       std::string_view type_id);

}  // namespace kvgpu::deviceplugin
