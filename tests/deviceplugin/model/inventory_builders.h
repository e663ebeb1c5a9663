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
