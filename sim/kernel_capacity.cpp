// The driver's capacity rules: which vGPU types a GPU, VF or virtual parent can take at this
// moment (the type or size lock, mixed-size placements, MIG GPU instances, shared pools), the
// numbers behind `available_instances` and `creatable_vgpu_types`. Apart from the writes that act
// on them (kernel_model.cpp), so the rules can be read on their own.
#include <algorithm>

#include "sim/kernel_model.h"
#include "sim/model_internal.h"

namespace kvgpu::sim {

bool IsSriov(const GpuSpec& gpu) {
  return gpu.kind == GpuKind::kSriovMdev || gpu.kind == GpuKind::kVendorVfio;
}

std::vector<std::string> KernelModel::ParentsOf(size_t gpu) const {
  const GpuSpec& spec = profile_.gpus[gpu];
  if (!gpus_[gpu].present) return {};
  if (IsSriov(spec)) return gpus_[gpu].vfs;
  return {spec.address};
}

const TypeSpec* KernelModel::FindType(size_t gpu, std::string_view type_id) const {
  for (const TypeSpec& type : profile_.gpus[gpu].types) {
    if (type.id == type_id) return &type;
  }
  return nullptr;
}

bool KernelModel::GpuHasVgpu(size_t gpu) const {
  return std::any_of(vgpus_.begin(), vgpus_.end(),
                     [gpu](const auto& entry) { return entry.second.gpu == gpu; });
}

std::optional<uint32_t> KernelModel::LowestPlacement(size_t gpu, const TypeSpec& type) const {
  for (uint32_t start : type.placement_ids) {
    bool free = true;
    for (const auto& [id, vgpu] : vgpus_) {
      if (vgpu.gpu != gpu || !vgpu.placement) continue;
      const TypeSpec* held = FindType(gpu, vgpu.type);
      const uint32_t end = *vgpu.placement + (held ? held->placement_size : 1);
      if (start < end && *vgpu.placement < start + type.placement_size) free = false;
    }
    if (free) return start;
  }
  return std::nullopt;
}

uint32_t KernelModel::FreePlacements(size_t gpu, const TypeSpec& type) const {
  // Slots taken: the vGPUs' own, then each placement this count takes, lowest first.
  std::vector<std::pair<uint32_t, uint32_t>> taken;  // [start, end)
  for (const auto& [id, vgpu] : vgpus_) {
    if (vgpu.gpu != gpu || !vgpu.placement) continue;
    const TypeSpec* held = FindType(gpu, vgpu.type);
    taken.emplace_back(*vgpu.placement, *vgpu.placement + (held ? held->placement_size : 1));
  }
  uint32_t count = 0;
  for (uint32_t start : type.placement_ids) {
    const uint32_t end = start + type.placement_size;
    bool free = std::none_of(taken.begin(), taken.end(), [&](const auto& range) {
      return start < range.second && range.first < end;
    });
    if (!free) continue;
    taken.emplace_back(start, end);
    ++count;
  }
  return count;
}

uint32_t KernelModel::RoomInGpuInstance(size_t gpu, uint32_t gi, const TypeSpec& type) const {
  // A GPU instance hosts one framebuffer size (series may differ), at most max_per_gi of it.
  uint32_t in_gi = 0;
  for (const auto& [id, vgpu] : vgpus_) {
    if (vgpu.gpu != gpu || vgpu.gpu_instance != gi) continue;
    const TypeSpec* held = FindType(gpu, vgpu.type);
    if (held == nullptr || held->framebuffer_mib != type.framebuffer_mib) return 0;
    ++in_gi;
  }
  return type.max_per_gi > in_gi ? type.max_per_gi - in_gi : 0;
}

uint32_t KernelModel::GpuInstanceRoom(size_t gpu, const TypeSpec& type) const {
  uint32_t room = 0;
  for (const GpuInstance& gi : gpus_[gpu].gpu_instances) {
    if (gi.profile == *type.gi_profile) room += RoomInGpuInstance(gpu, gi.id, type);
  }
  return room;
}

std::optional<uint32_t> KernelModel::FittingGpuInstance(size_t gpu, const TypeSpec& type) const {
  for (const GpuInstance& gi : gpus_[gpu].gpu_instances) {
    if (gi.profile == *type.gi_profile && RoomInGpuInstance(gpu, gi.id, type) > 0) return gi.id;
  }
  return std::nullopt;
}

uint32_t KernelModel::Available(size_t gpu, const std::string& parent, const TypeSpec& type) const {
  const GpuSpec& spec = profile_.gpus[gpu];
  const GpuState& state = gpus_[gpu];
  // vGPUs on the GPU that share the type's count: its own; with the equal-size lock, every type of
  // its framebuffer size.
  uint32_t same = 0;
  uint32_t own = 0;
  uint32_t used_units = 0;
  bool locked_out = false;
  bool parent_used = false;
  for (const auto& [id, vgpu] : vgpus_) {
    if (vgpu.gpu != gpu) continue;
    const TypeSpec* held = FindType(gpu, vgpu.type);
    used_units += held ? held->cost : 1;
    if (vgpu.type == type.id) ++own;
    const bool sharing = spec.lock == GpuSpec::Lock::kFramebuffer
                             ? held != nullptr && held->framebuffer_mib == type.framebuffer_mib
                             : vgpu.type == type.id;
    if (sharing) {
      ++same;
    } else {
      locked_out = true;
    }
    parent_used |= vgpu.parent == parent;
  }
  uint32_t left = 0;
  if (type.gi_profile) {
    // MIG-backed: only while MIG is on, in a GPU instance of its profile with room for its size.
    if (!state.mig) return 0;
    left = std::min(type.max_instances > own ? type.max_instances - own : 0,
                    GpuInstanceRoom(gpu, type));
  } else if (state.mig) {
    return 0;  // time-sliced types are not offered while MIG is on
  } else if (state.heterogeneous) {
    // Mixed-size: any size where a placement is free, within the type's (mixed-size) max.
    const uint32_t max =
        type.max_instances_mixed > 0 ? type.max_instances_mixed : type.max_instances;
    left = std::min(max > own ? max - own : 0, FreePlacements(gpu, type));
  } else {
    // Time-sliced vGPU: the physical GPU (all its VFs) serves one type, or one size, at a time.
    if (spec.lock != GpuSpec::Lock::kNone && locked_out) return 0;
    left = type.max_instances > same ? type.max_instances - same : 0;
  }
  if (spec.pool > 0) {
    uint32_t pool_left = spec.pool > used_units ? (spec.pool - used_units) / type.cost : 0;
    left = std::min(left, pool_left);
  }
  // A VF carries at most one vGPU.
  if (IsSriov(spec)) left = parent_used ? 0 : std::min(left, 1u);
  return left;
}

}  // namespace kvgpu::sim
