// Where a container's vGPUs should go (kubelet's GetPreferredAllocation): which of the device IDs
// kubelet offers to pick, so that GPUs are packed (or spread) and a GPU free of vGPUs is kept for
// other types. GPUs are ranked by scheduling::RankGpu, the rule the scheduler extender places
// pods by. Pure: the answer depends only on the arguments.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "deviceplugin/model/device_catalogue.h"
#include "deviceplugin/model/occupancy.h"
#include "mdev/model.h"
#include "scheduling/gpu_fit.h"

namespace kvgpu::deviceplugin {

struct PreferredRequest {
  std::vector<std::string> available;
  std::vector<std::string> must_include;
  int32_t size = 0;
};

// How good a device is for the next vGPU of its resource; lower first. Member order is the
// order of importance.
struct PlacementRank {
  // 0: free; 1: its earlier vGPU still exists (Allocate reuses it only when no pod holds it);
  // 2: its GPU's vGPUs lock it against the resource (another type, or size), so it will fail.
  int fitness = 0;
  scheduling::GpuRank on_gpu;  // then its GPU, as the scheduler extender ranks it
  std::string gpu;             // then by GPU and ID, for a stable answer
  std::string id;

  auto operator<=>(const PlacementRank&) const = default;
};

// One answer per request over the resource's listed devices and the node's vGPUs, whose locks
// `rules` tells (occupancy.h). Bad requests
// (size 0, more than offered, a must-include not offered) are kInvalid. With `spread`, one device
// per GPU per round, GPUs not yet in the answer first.
Result<std::vector<std::vector<std::string>>> PreferDevices(
    const std::vector<Device>& listed, const std::vector<mdev::Vgpu>& vgpus, const GpuRules& rules,
    bool spread, const std::vector<PreferredRequest>& requests);

}  // namespace kvgpu::deviceplugin
