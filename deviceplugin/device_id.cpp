#include "deviceplugin/device_id.h"

namespace kvgpu::deviceplugin {

std::string MakeDeviceId(const DeviceKey& key) {
  return key.parent + "-" + key.type_id + "-" + std::to_string(key.slot);
}

}  // namespace kvgpu::deviceplugin
