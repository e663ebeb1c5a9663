// The model's controls, what a test, the demo or the simulator's control file asks of it rather
// than a driver: vGPUs held by a VM, injected faults, GPUs unplugged and restored, the modes the
// node's administrator sets (mixed-size, MIG, GPU instances), and the views for assertions.
#include <algorithm>
#include <cerrno>

#include "common/ascii.h"
#include "sim/kernel_model.h"
#include "sim/model_internal.h"

namespace kvgpu::sim {

void KernelModel::SetBusy(const std::string& vgpu_id, bool busy) {
  std::lock_guard lock(mutex_);
  auto it = vgpus_.find(AsciiLower(vgpu_id));
  if (it != vgpus_.end()) it->second.busy = busy;
}

void KernelModel::InjectFault(Op op, std::string path_suffix, int err, int times) {
  std::lock_guard lock(mutex_);
  if (times == 0) return;
  faults_.push_back(Fault{op, std::move(path_suffix), err, times});
}

void KernelModel::ClearFaults() {
  std::lock_guard lock(mutex_);
  faults_.clear();
}

std::optional<size_t> KernelModel::GpuByAddress(const std::string& address) const {
  for (size_t i = 0; i < profile_.gpus.size(); ++i) {
    if (profile_.gpus[i].address == address) return i;
  }
  return std::nullopt;
}

Status KernelModel::RemoveGpu(const std::string& address) {
  std::lock_guard lock(mutex_);
  auto gpu = GpuByAddress(address);
  if (!gpu) {
    return Status::Error(ErrorCode::kUnknownParent, "the profile has no GPU " + address);
  }
  if (!gpus_[*gpu].present) return Status::Error(ErrorCode::kGone, address + " is already gone");
  UnlayoutGpu(*gpu);
  return Status::Ok();
}

Status KernelModel::RestoreGpu(const std::string& address) {
  std::lock_guard lock(mutex_);
  auto gpu = GpuByAddress(address);
  if (!gpu) {
    return Status::Error(ErrorCode::kUnknownParent, "the profile has no GPU " + address);
  }
  if (gpus_[*gpu].present) return Status::Error(ErrorCode::kExists, address + " is present");
  // The driver rebind of a VF re-enable (sriov-manage) clears mixed-size mode and destroys every
  // GPU instance; MIG mode itself persists (measured, cubecos on an RTX PRO 6000).
  gpus_[*gpu].heterogeneous = false;
  gpus_[*gpu].gpu_instances.clear();
  return LayoutGpu(*gpu);
}

Status KernelModel::SetHeterogeneous(const std::string& address, bool on) {
  std::lock_guard lock(mutex_);
  auto gpu = GpuByAddress(address);
  if (!gpu || !gpus_[*gpu].present) return Status::FromErrno(ENOENT, "no GPU " + address);
  if (!profile_.gpus[*gpu].heterogeneous_capable || gpus_[*gpu].mig) {
    return Status::FromErrno(EOPNOTSUPP, address + ": mixed-size mode not supported");
  }
  if (gpus_[*gpu].heterogeneous == on) return Status::Ok();
  if (GpuHasVgpu(*gpu)) return Status::FromErrno(EBUSY, address + ": in use by another client");
  gpus_[*gpu].heterogeneous = on;
  return Refresh(*gpu);
}

Status KernelModel::SetMig(const std::string& address, bool on) {
  std::lock_guard lock(mutex_);
  auto gpu = GpuByAddress(address);
  if (!gpu || !gpus_[*gpu].present) return Status::FromErrno(ENOENT, "no GPU " + address);
  const GpuSpec& spec = profile_.gpus[*gpu];
  GpuState& state = gpus_[*gpu];
  if (spec.gi_profiles.empty()) return Status::FromErrno(EOPNOTSUPP, address + ": no MIG");
  if (state.mig == on) return Status::Ok();
  if (GpuHasVgpu(*gpu) || !state.gpu_instances.empty() || IsSriov(spec)) {
    return Status::FromErrno(EBUSY, address + ": in use by another client");
  }
  state.mig = on;
  if (on) state.heterogeneous = false;
  return Refresh(*gpu);
}

Result<uint32_t> KernelModel::CreateGpuInstance(const std::string& address, uint32_t profile_id) {
  std::lock_guard lock(mutex_);
  auto gpu = GpuByAddress(address);
  if (!gpu || !gpus_[*gpu].present) return Status::FromErrno(ENOENT, "no GPU " + address);
  GpuState& state = gpus_[*gpu];
  const auto& profiles = profile_.gpus[*gpu].gi_profiles;
  auto profile = std::find_if(profiles.begin(), profiles.end(),
                              [&](const GpuSpec::GiProfile& p) { return p.id == profile_id; });
  if (profile == profiles.end()) {
    return Status::FromErrno(
        EINVAL, address + " has no GPU-instance profile " + std::to_string(profile_id));
  }
  if (!state.mig) return Status::FromErrno(EOPNOTSUPP, address + ": MIG mode is off");
  const auto made = std::count_if(state.gpu_instances.begin(), state.gpu_instances.end(),
                                  [&](const GpuInstance& gi) { return gi.profile == profile_id; });
  // Both the profile's own count and the GPU's compute slices bound it (MIG user guide,
  // "Supported MIG Profiles": each profile's fraction of the SMs; an H200 has 7 slices).
  uint32_t slices_used = 0;
  for (const GpuInstance& gi : state.gpu_instances) {
    for (const auto& p : profiles) {
      if (p.id == gi.profile) slices_used += p.slices;
    }
  }
  if (static_cast<uint32_t>(made) >= profile->max_count ||
      slices_used + profile->slices > profile_.gpus[*gpu].gpu_slices) {
    return Status::FromErrno(ENOSPC, address + ": no room for another " + profile->name);
  }
  uint32_t id = 1;
  while (std::any_of(state.gpu_instances.begin(), state.gpu_instances.end(),
                     [&](const GpuInstance& gi) { return gi.id == id; })) {
    ++id;
  }
  state.gpu_instances.push_back({id, profile_id});
  if (Status s = Refresh(*gpu); !s.ok()) return s;
  return id;
}

Status KernelModel::DestroyGpuInstance(const std::string& address, uint32_t gi_id) {
  std::lock_guard lock(mutex_);
  auto gpu = GpuByAddress(address);
  if (!gpu || !gpus_[*gpu].present) return Status::FromErrno(ENOENT, "no GPU " + address);
  auto& gis = gpus_[*gpu].gpu_instances;
  auto it =
      std::find_if(gis.begin(), gis.end(), [&](const GpuInstance& gi) { return gi.id == gi_id; });
  if (it == gis.end())
    return Status::FromErrno(ENOENT, address + ": no GPU instance " + std::to_string(gi_id));
  for (const auto& [id, vgpu] : vgpus_) {
    if (vgpu.gpu == *gpu && vgpu.gpu_instance == gi_id) {
      return Status::FromErrno(EBUSY,
                               address + ": GPU instance " + std::to_string(gi_id) + " in use");
    }
  }
  gis.erase(it);
  return Refresh(*gpu);
}

std::vector<std::string> KernelModel::VgpuIds() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> ids;
  for (const auto& [id, vgpu] : vgpus_) ids.push_back(id);
  return ids;
}

std::vector<KernelModel::VgpuInfo> KernelModel::Vgpus() const {
  std::lock_guard lock(mutex_);
  std::vector<VgpuInfo> out;
  for (const auto& [id, vgpu] : vgpus_) out.push_back({id, vgpu.parent, vgpu.type, vgpu.busy});
  return out;
}

void KernelModel::SetRemovalHook(RemovalHook hook) {
  std::lock_guard lock(mutex_);
  removal_hook_ = std::move(hook);
}

bool KernelModel::GpuPresent(const std::string& address) const {
  std::lock_guard lock(mutex_);
  auto gpu = GpuByAddress(address);
  return gpu && gpus_[*gpu].present;
}

}  // namespace kvgpu::sim
