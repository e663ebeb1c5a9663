#include "deviceplugin/model/device_id.h"

namespace kvgpu::deviceplugin {

std::string MakeDeviceId(const DeviceKey& key) {
  return key.parent + "-" + key.type_id + "-" + std::to_string(key.slot);
}

std::optional<DeviceKey> ParseDeviceId(std::string_view id, std::string_view parent,
                                       std::string_view type_id) {
  std::string stem = std::string(parent) + "-" + std::string(type_id) + "-";
  if (id.size() <= stem.size() || id.substr(0, stem.size()) != stem) return std::nullopt;
  std::string_view slot = id.substr(stem.size());
  if (slot.size() > 6 || slot.find_first_not_of("0123456789") != std::string_view::npos ||
      (slot.size() > 1 && slot[0] == '0')) {
    return std::nullopt;
  }
  uint32_t value = 0;
  for (char c : slot) value = value * 10 + static_cast<uint32_t>(c - '0');
  return DeviceKey{std::string(parent), std::string(type_id), value};
}

}  // namespace kvgpu::deviceplugin
