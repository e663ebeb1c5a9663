// DRA device names: the one rule for the names of the devices in the ResourceSlices we publish
// (resource_slices.h) and the names the kubelet plugin resolves at prepare (dra_plugin.h), so the
// name the scheduler allocates is exactly a name the plugin recognises.
//
// A ResourceSlice device name must be a DNS label: at most 63 characters of [a-z0-9-], starting
// and ending alphanumeric (resource.k8s.io/v1 Device.Name, kubernetes/kubernetes
// pkg/apis/resource/validation validateDeviceName -> IsDNS1123Label). A device names "a vGPU of
// type T on physical GPU G, number n" (n below the most of T the GPU can host), not a parent or a
// VF: which parent the vGPU lands on is the plugin's choice at prepare.
//   GPU 0000:3b:00.0 / nvidia-222 / slot 3  ->  "gpu-0000-3b-00-0-nvidia-222-3".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/cross_program.h"

namespace kvgpu::deviceplugin::dra {

// resource.k8s.io/v1 DeviceName max length (validation.DNS1123LabelMaxLength).
inline constexpr size_t kMaxDraDeviceNameLength = 63;

// Lower case, every run of characters outside [a-z0-9] one '-', no '-' at either end.
std::string DraSanitize(std::string_view text);
// FNV-1a, 32 bits, as 8 hex digits: keeps shortened names unique and stable across runs.
std::string DraShortHash(std::string_view text);
// `text` cut to `limit` characters, with its hash in the last 9 when it had to be cut.
std::string DraFit(std::string_view text, size_t limit);
// "gpu-<sanitized address>": the GPU's counter set, and the head of its devices' names.
std::string DraGpuKey(std::string_view physical_gpu);

// The name of vGPU number `slot` of `type_id` on `physical_gpu`. Not always a valid DNS label
// (an address or type id with nothing alphanumeric); BuildCatalogue refuses those.
std::string DraDeviceName(std::string_view physical_gpu, std::string_view type_id, uint32_t slot);

// The ResourceSlice pool of a node's devices: one pool per node, named after the node (a node
// name is a DNS subdomain, which a pool name allows; resource.k8s.io/v1 ResourcePool.Name).
std::string DraPoolName(std::string_view node_name);

// The driver name both sides use unless configured otherwise (a DNS subdomain, <= 63 characters,
// resource.k8s.io/v1 ResourceSlice.spec.driver).
inline constexpr std::string_view kDefaultDraDriverName = kDraDriverName;

}  // namespace kvgpu::deviceplugin::dra
