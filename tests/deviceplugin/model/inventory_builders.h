// Hand-built kernel views for the pure tests of the device plugin's rooms.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "deviceplugin/model/state_store.h"
#include "mdev/model.h"

namespace kvgpu::deviceplugin::testing {

inline mdev::Parent GpuParent(const std::string& name, const std::string& physical_gpu = "") {
  mdev::Parent p;
  p.name = name;
  p.is_pci = true;
  p.is_virtual_function = !physical_gpu.empty() && physical_gpu != name;
  p.physical_gpu = physical_gpu.empty() ? name : physical_gpu;
  return p;
}

inline mdev::VgpuType TypeWithFree(const std::string& id, uint32_t free,
                                   std::optional<uint32_t> max_instance = std::nullopt) {
  mdev::VgpuType t;
  t.id = id;
  t.available_instances = free;
  if (max_instance) {
    t.nvidia.emplace();
    t.nvidia->max_instance = max_instance;
  }
  return t;
}

// The names the model tests use: two T4s (sim's t4x2 profile) and two of their resources.
inline const std::string k222 = "tencent.com/vgpu-222";
inline const std::string k223 = "tencent.com/vgpu-223";
inline const std::string kGpuA = "0000:3b:00.0";
inline const std::string kGpuB = "0000:af:00.0";

// A T4 with its 1 GiB types (222: 1B, 223: 1Q) and their free counts.
inline mdev::Parent T4(const std::string& name, uint32_t free_222, uint32_t free_223) {
  mdev::Parent gpu = GpuParent(name);
  gpu.types.push_back(TypeWithFree("nvidia-222", free_222));
  gpu.types.push_back(TypeWithFree("nvidia-223", free_223));
  return gpu;
}

// An NVIDIA type whose description gives its framebuffer (the equal-size lock's key).
inline mdev::VgpuType SizedType(const std::string& id, uint32_t free, uint64_t framebuffer_mib) {
  mdev::VgpuType t = TypeWithFree(id, free);
  t.nvidia.emplace();
  t.nvidia->framebuffer_mib = framebuffer_mib;
  return t;
}

// A T4 as the NVIDIA driver shows it, with the kernel's counts of 222 (T4-1B), 225 (T4-1A), both
// 1024 MiB, and 223 (T4-2B, 2048 MiB).
inline mdev::Parent SizedT4(const std::string& name, uint32_t free_222, uint32_t free_225,
                            uint32_t free_223) {
  mdev::Parent gpu = GpuParent(name);
  gpu.vendor_id = "0x10de";
  gpu.types = {SizedType("nvidia-222", free_222, 1024), SizedType("nvidia-225", free_225, 1024),
               SizedType("nvidia-223", free_223, 2048)};
  return gpu;
}

inline mdev::Vgpu VgpuOn(const std::string& id, const std::string& parent,
                         const std::string& type_id, std::optional<uint32_t> group = std::nullopt) {
  mdev::Vgpu v;
  v.id = id;
  v.parent = parent;
  v.physical_gpu = parent;
  v.type_id = type_id;
  v.iommu_group = group;
  if (group) v.vfio_device = "/dev/vfio/" + std::to_string(*group);
  return v;
}

// Our record of an nvidia-222 vGPU on slot 0 of `parent`.
inline CreatedVgpu Record222(const std::string& device_id, const std::string& vgpu_id,
                             const std::string& parent = "0000:3b:00.0") {
  return {device_id,   "tencent.com/vgpu-222", vgpu_id, parent, parent, "nvidia-222", 0, 1,
          std::nullopt};
}

}  // namespace kvgpu::deviceplugin::testing
