// DeviceClasses (resource.k8s.io/v1) for the DRA driver's vGPUs: one for any vGPU of the driver,
// and one per vGPU type, selected by CEL on the `type` attribute that resource_slices.h publishes,
// with `extendedResourceName` (KEP-5004, DRAExtendedResource: alpha 1.34, beta and on by default
// 1.36) so that a pod asking for `tencent.com/vgpu-<type>` is allocated through DRA on nodes whose
// device plugin does not advertise that resource. The type catalogue and the extended resource
// names are the device plugin's own (resource_naming.h), so both front ends name a type alike.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "deviceplugin/model/resource_naming.h"
#include "mdev/model.h"

namespace kvgpu::deviceplugin::dra {

// The class of every vGPU of `driver`, named as the driver.
nlohmann::json DriverDeviceClass(const std::string& driver);

// One class per extended resource the types make (NamingOptions: the device plugin's naming; a
// resource several type ids share selects all of them), named "<resource name part>.<driver>",
// sorted by name. Fails when a name would not be valid.
Result<std::vector<nlohmann::json>> TypeDeviceClasses(const std::string& driver,
                                                      const NamingOptions& naming,
                                                      const std::vector<mdev::VgpuType>& types);

}  // namespace kvgpu::deviceplugin::dra
