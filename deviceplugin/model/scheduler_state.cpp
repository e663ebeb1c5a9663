#include "deviceplugin/model/scheduler_state.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

namespace kvgpu::deviceplugin {

namespace {

// The catalogue's free counts are the kernel's at the last scan, but the inventory holds the vGPUs
// made since at once. Where the rule is known, what those took is taken from every type they
// share a lock with, as the kernel's next counts will show: without this, a state published
// between an Allocate and the rescan (say, for a pod's owner just learned) offers a sibling type
// of one size the capacity the new vGPU used, and the extender sends a pod the kernel refuses.
// Types locked out keep the kernel's counts: the lock itself tells the extender they cannot go.
void CapByLock(const mdev::Inventory& inventory, const GpuRules& rules,
               std::map<std::string, scheduling::GpuSlots>& gpus) {
  std::map<std::string, std::map<std::string, uint32_t>> by_lock;  // GPU -> lock key -> vGPUs
  for (const mdev::Vgpu& vgpu : inventory.vgpus) {
    const std::string key = rules.LockKey(vgpu.physical_gpu, vgpu.type_id);
    if (!key.empty()) ++by_lock[vgpu.physical_gpu][key];
  }
  for (auto& [id, gpu] : gpus) {
    for (auto& [resource, slots] : gpu.resources) {
      const uint32_t max = rules.MaxInstancesOf(id, slots.type_id);
      const std::string key = rules.LockKey(id, slots.type_id);
      if (max == 0 || key.empty()) continue;
      const uint32_t made = by_lock[id][key];
      slots.free = std::min(slots.free, max > made ? max - made : 0);
    }
  }
}

}  // namespace

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
  CapByLock(inventory, rules, gpus);
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
