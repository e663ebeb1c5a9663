#include "deviceplugin/model/scheduler_state.h"

#include <map>
#include <set>

namespace kvgpu::deviceplugin {

scheduling::NodeVgpuState BuildSchedulerState(const mdev::Inventory& inventory,
                                              const std::vector<CreatedVgpu>& records,
                                              const DeviceCatalogue& catalogue,
                                              const GpuRules& rules, bool spread) {
  std::map<std::string, scheduling::GpuSlots> gpus;
  auto gpu_named = [&](const std::string& id) -> scheduling::GpuSlots& {
    scheduling::GpuSlots& gpu = gpus[id];
    gpu.id = id;
    return gpu;
  };
  std::set<std::string> shaped;
  for (const mdev::Parent& parent : inventory.parents) {
    if (!shaped.insert(parent.physical_gpu).second) continue;  // a GPU's VFs: once per GPU
    scheduling::GpuSlots& gpu = gpu_named(parent.physical_gpu);
    // The mode, and the slots or GPU instances in use (version 3 of the state publishes them).
    scheduling::GpuSlots shape = rules.ShapeOf(parent.physical_gpu, inventory.vgpus);
    gpu.occupancy = shape.occupancy;
    gpu.used_slots = std::move(shape.used_slots);
    gpu.gpu_instances = std::move(shape.gpu_instances);
  }
  for (const mdev::Vgpu& vgpu : inventory.vgpus) {
    scheduling::GpuSlots& gpu = gpu_named(vgpu.physical_gpu);
    if (gpu.locked_type.empty()) {
      gpu.LockTo(vgpu.type_id, rules.FramebufferOf(vgpu.physical_gpu, vgpu.type_id));
    }
  }
  for (const std::string& resource : catalogue.Resources()) {
    for (const Device& device : catalogue.Devices(resource)) {
      scheduling::ResourceSlots& slots = gpu_named(device.physical_gpu).resources[resource];
      slots.type_id = device.key.type_id;
      slots.framebuffer_mib = rules.FramebufferOf(device.physical_gpu, device.key.type_id);
      rules.FillType(device.physical_gpu, device.key.type_id, slots);
      if (!device.healthy) continue;
      ++(device.vgpu_exists ? slots.used : slots.free);
    }
  }
  scheduling::NodeVgpuState state;
  state.policy = spread ? scheduling::Policy::kSpread : scheduling::Policy::kPack;
  for (auto& [id, gpu] : gpus) state.gpus.push_back(std::move(gpu));
  for (const CreatedVgpu& record : records) {
    if (inventory.FindVgpu(record.vgpu_id) == nullptr) continue;  // gone: counts nowhere
    if (record.owner_pod) {
      state.holders.insert(*record.owner_pod);
    } else {
      ++state.unattributed[record.resource];
    }
  }
  return state;
}

}  // namespace kvgpu::deviceplugin
