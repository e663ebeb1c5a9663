// CDI (Container Device Interface) specs for the vGPUs this plugin created, one file per resource
// (kind = the resource name), so a runtime resolving "<resource>=<deviceID>" finds the VFIO group.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvgpu::deviceplugin {

struct CdiDevice {
  std::string name;         // the device ID
  std::string vfio_device;  // "/dev/vfio/<group>"
  std::string vgpu_id;      // for the env of the device
};

// "<vendor>/<class>": vendor like a DNS name, class of letters, digits, '-' and '_'.
Status ValidateCdiKind(std::string_view kind);
// A device's fully qualified CDI name, "<kind>=<device>" (what a runtime is handed).
std::string CdiDeviceId(std::string_view kind, std::string_view device);
// Device names: letters, digits, '_', '-', '.', ':'; starting with a letter or digit.
bool IsValidCdiDeviceName(std::string_view name);

std::string CdiSpecJson(std::string_view kind, const std::vector<CdiDevice>& devices);
std::filesystem::path CdiSpecPath(const std::filesystem::path& dir, std::string_view kind);
// Writes (atomically) or, for an empty list, removes the kind's spec file.
Status WriteCdiSpec(const std::filesystem::path& dir, std::string_view kind,
                    const std::vector<CdiDevice>& devices);

}  // namespace kvgpu::deviceplugin
