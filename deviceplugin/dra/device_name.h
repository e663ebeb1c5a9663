// DRA device names, shared by the ResourceSlices we publish (resource_slices.h) and the kubelet
// plugin that prepares them (dra_plugin.h): one function, so the name the scheduler allocates is
// exactly the name the plugin resolves.
//
// A ResourceSlice device name must be a DNS label: at most 63 characters of [a-z0-9-], starting
// and ending alphanumeric (resource.k8s.io/v1 Device.Name, kubernetes/kubernetes
// pkg/apis/resource/validation validateDeviceName -> IsDNS1123Label). The device plugin's IDs
// ("0000:3b:00.0-nvidia-222-3", device_id.h) are not: the PCI address has ':' and '.', and some
// kernels' type ids have '_' or capitals ("i915-GVTg_V5_4"). So a DRA name is the device ID with
// every character outside [a-z0-9] lowered or turned into '-':
//   0000:3b:00.0 / nvidia-222 / slot 3  ->  "0000-3b-00-0-nvidia-222-3".
// Two different keys can collapse onto one name (types "a_b" and "a-b" on one parent); both sides
// must then leave that name out (UniqueDraNames), never guess which one was meant.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "deviceplugin/model/device_id.h"

namespace kvgpu::deviceplugin::dra {

// resource.k8s.io/v1 DeviceName max length (validation.DNS1123LabelMaxLength).
inline constexpr size_t kMaxDraDeviceNameLength = 63;

// `part` lowered, each character outside [a-z0-9] replaced by '-'.
std::string DraNameComponent(std::string_view part);

// The DNS-label name of one creatable vGPU; nullopt when the result is not a valid DNS label
// (longer than 63 characters, or starting/ending with '-').
std::optional<std::string> DraDeviceName(const DeviceKey& key);

// Name -> key for every key whose name is valid and which no other key in `keys` shares. A name
// two keys collapse onto is absent from the map (and reported in `collisions` when given).
std::map<std::string, DeviceKey> UniqueDraNames(const std::vector<DeviceKey>& keys,
                                                std::vector<std::string>* collisions = nullptr);

// The ResourceSlice pool of a node's devices: one pool per node, named after the node (a node
// name is a DNS subdomain, which a pool name allows; resource.k8s.io/v1 ResourcePool.Name).
std::string DraPoolName(std::string_view node_name);

// The driver name both sides use unless configured otherwise (a DNS subdomain, <= 63 characters,
// resource.k8s.io/v1 ResourceSlice.spec.driver).
inline constexpr std::string_view kDefaultDraDriverName = "vgpu.tencent.com";

}  // namespace kvgpu::deviceplugin::dra
