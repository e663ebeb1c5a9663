// The node's vGPU state in the form the scheduler extender reads (scheduling/node_vgpu_state.h),
// computed from what the plugin knows: the kernel's view, our records and the device lists
// kubelet sees. Per GPU: its occupancy mode and what it is locked to, and per resource the vGPUs
// of ours on it, the devices it can still make - the very counts kubelet admits pods by - and the
// type's framebuffer. Pure.
#pragma once

#include <vector>

#include "deviceplugin/model/device_catalogue.h"
#include "deviceplugin/model/occupancy.h"
#include "deviceplugin/model/state_store.h"
#include "mdev/model.h"
#include "scheduling/node_vgpu_state.h"

namespace kvgpu::deviceplugin {

scheduling::NodeVgpuState BuildSchedulerState(const mdev::Inventory& inventory,
                                              const std::vector<CreatedVgpu>& records,
                                              const DeviceCatalogue& catalogue,
                                              const GpuRules& rules, bool spread);

}  // namespace kvgpu::deviceplugin
