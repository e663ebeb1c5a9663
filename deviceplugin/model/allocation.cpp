#include "deviceplugin/model/allocation.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>

#include "common/clock.h"
#include "common/log_safe.h"
#include "deviceplugin/model/allocation_env.h"
#include "deviceplugin/model/cdi.h"
#include "deviceplugin/model/device_id.h"
#include "deviceplugin/model/failpoint.h"
#include "mdev/uuid.h"

namespace kvgpu::deviceplugin {

using Clock = std::chrono::steady_clock;

namespace {

// The plan for an ID whose earlier vGPU of ours still exists: hand it back to the pod that holds
// it, replace it when no pod does, refuse when nobody can tell.
Status PlanEarlier(const std::string& id, const NodeState& state, const EarlierVgpus& earlier,
                   AllocationPlan& plan) {
  const CreatedVgpu* record = state.RecordFor(id);
  if (record == nullptr) {
    return Status::Error(ErrorCode::kBusy, "device " + LogSafe(id) +
                                               " is listed as ours but has no record; rescan "
                                               "and retry");
  }
  auto judged = earlier.find(id);
  if (judged == earlier.end() || judged->second.vgpu_id != record->vgpu_id) {
    return Status::Error(ErrorCode::kBusy, "device " + LogSafe(id) +
                                               ": its vGPU changed while kubelet was asked who "
                                               "holds it; try again");
  }
  const Verdict& verdict = judged->second.verdict;
  switch (verdict.holding) {
    case Holding::kHeld:
      spdlog::info("device {} asked for again while {} holds it: same vGPU {}", LogSafe(id),
                   verdict.holder.empty() ? "its pod" : LogSafe(verdict.holder), record->vgpu_id);
      plan.reuse_vgpu = record->vgpu_id;
      return Status::Ok();
    case Holding::kUnknown:
      return Status::Error(
          ErrorCode::kBusy,
          "device " + LogSafe(id) + ": its earlier vGPU " + record->vgpu_id +
              " still exists and nothing tells whether a pod still uses it; it is kept, never "
              "shared between pods (remove it once its pod is gone, or pick another device)");
    case Holding::kFree:
      plan.replace_vgpu = record->vgpu_id;
      return Status::Ok();
  }
  return Status::Ok();
}

// The device behind a requested ID, or why it cannot be had.
Result<const Device*> Lookup(const DeviceCatalogue& catalogue, const std::string& resource,
                             const std::string& id) {
  std::optional<std::string> owner = catalogue.ResourceOf(id);
  if (!owner) {
    // Listed to kubelet once, only no longer free: the GPU filled up or took another type
    // since the list kubelet used was pushed. Say so, rather than "unknown".
    if (catalogue.EverAdvertised(id)) {
      return Status::Error(ErrorCode::kNoRoom,
                           "device " + id +
                               ": no longer free (the GPU filled up or took another type since "
                               "the list kubelet used); pick another device");
    }
    return Status::Invalid("unknown device " + LogSafe(id) + " for " + resource +
                           " (not in the list this plugin advertises)");
  }
  if (*owner != resource) {
    return Status::Invalid("device " + LogSafe(id) + " belongs to " + *owner + ", not " + resource);
  }
  const Device* d = catalogue.Find(resource, id);
  if (!d->healthy) {
    return Status::Error(ErrorCode::kGone, "device " + LogSafe(id) + " is unhealthy: its parent " +
                                               d->key.parent + " is gone from sysfs");
  }
  return d;
}

// kubelet picks from the last list pushed to it, and a list can lose an ID it still holds: when a
// shared count shrinks (equal-size mode: a vGPU of another type of the size was made), the
// catalogue keeps the IDs listed longest and drops the newest. While the GPU still has a free
// device of the type, the ID kubelet picked takes that room under its own name: the kernel counts
// vGPUs per type and parent, not our slot numbers. Never the room of an ID the request names, nor
// room another stand-in of the request took.
std::optional<Device> StandIn(const DeviceCatalogue& catalogue, const std::string& resource,
                              const std::string& id, const std::set<std::string>& requested,
                              std::set<std::string>& rooms_taken) {
  for (const Device& d : catalogue.Devices(resource)) {
    if (!d.healthy || d.ours || d.vgpu_exists) continue;
    if (requested.contains(d.id) || rooms_taken.contains(d.id)) continue;
    std::optional<DeviceKey> key = ParseDeviceId(id, d.key.parent, d.key.type_id);
    if (!key) continue;
    rooms_taken.insert(d.id);
    Device stand_in = d;
    stand_in.id = id;
    stand_in.key = *key;
    return stand_in;
  }
  return std::nullopt;
}

}  // namespace

Status CheckRequestShape(const std::string& resource,
                         const std::vector<std::vector<std::string>>& containers) {
  size_t total = 0;
  for (size_t i = 0; i < containers.size(); ++i) {
    for (const std::string& id : containers[i]) {
      if (id.size() > kMaxDeviceIdLength) {
        return Status::Invalid("container request " + std::to_string(i) + " for " +
                               LogSafe(resource) + ": device ID " + LogSafe(id) +
                               " is longer than " + std::to_string(kMaxDeviceIdLength) +
                               " characters; no such device exists");
      }
      ++total;
    }
  }
  if (total > kMaxDevicesPerRequest) {
    return Status::Invalid("allocate request for " + LogSafe(resource) + " names " +
                           std::to_string(total) + " devices, more than the " +
                           std::to_string(kMaxDevicesPerRequest) + " a node can have");
  }
  return Status::Ok();
}

Result<ContainerPlans> PlanAllocation(const DeviceCatalogue& catalogue, const NodeState& state,
                                      const std::string& resource,
                                      const std::vector<std::vector<std::string>>& containers,
                                      const EarlierVgpus& earlier) {
  if (containers.empty())
    return Status::Invalid("allocate request for " + resource + " has no containers");
  if (!catalogue.Knows(resource)) return Status::Invalid("unknown resource " + LogSafe(resource));
  ContainerPlans plans;
  std::set<std::string> seen;
  std::set<std::string> requested;
  for (const auto& ids : containers) requested.insert(ids.begin(), ids.end());
  std::set<std::string> rooms_taken;
  for (size_t i = 0; i < containers.size(); ++i) {
    if (containers[i].empty()) {
      return Status::Invalid("container request " + std::to_string(i) + " for " + resource +
                             " names no devices");
    }
    std::vector<AllocationPlan>& container_plans = plans.emplace_back();
    for (const std::string& id : containers[i]) {
      if (!seen.insert(id).second)
        return Status::Invalid("device " + LogSafe(id) + " is requested twice");
      Result<const Device*> device = Lookup(catalogue, resource, id);
      std::optional<Device> stand_in;
      if (!device.ok() && device.status().code() == ErrorCode::kNoRoom) {
        stand_in = StandIn(catalogue, resource, id, requested, rooms_taken);
      }
      if (!device.ok() && !stand_in) return device.status();
      const Device& d = stand_in ? *stand_in : **device;
      const mdev::Parent* parent = state.inventory().FindParent(d.key.parent);
      AllocationPlan plan{d, parent->flavour, parent->physical_gpu, std::nullopt, std::nullopt};
      if (d.ours && d.vgpu_exists) {
        if (Status s = PlanEarlier(id, state, earlier, plan); !s.ok()) return s;
      }
      container_plans.push_back(std::move(plan));
    }
  }
  return plans;
}

ContainerAllocation AnswerContainer(const std::string& resource, std::vector<AllocatedVgpu> vgpus,
                                    bool cdi_enabled) {
  ContainerAllocation out;
  out.devices.push_back({"/dev/vfio/vfio", "/dev/vfio/vfio", "rw"});
  std::set<uint32_t> groups;
  EnvVgpus env;
  for (const AllocatedVgpu& v : vgpus) {
    if (groups.insert(v.iommu_group).second) {
      out.devices.push_back({v.vfio_device, v.vfio_device, "rw"});
    }
    env.device_ids.push_back(v.device_id);
    env.vgpu_ids.push_back(v.vgpu_id);
    env.types.push_back(v.type_id);
    if (cdi_enabled) out.cdi_devices.push_back(CdiDeviceId(resource, v.device_id));
  }
  RenderAllocationEnv(resource, env, out.envs);
  out.vgpus = std::move(vgpus);
  return out;
}

Status WriteCdiSpecs(const NodeState& state, const std::string& cdi_dir,
                     const std::string& resource) {
  std::vector<CdiDevice> devices;
  for (const CreatedVgpu& r : state.records()) {
    if (r.resource != resource) continue;
    const mdev::Vgpu* v = state.inventory().FindVgpu(r.vgpu_id);
    if (v == nullptr || v->vfio_device.empty()) continue;
    devices.push_back({r.device_id, v->vfio_device, r.vgpu_id});
  }
  std::sort(devices.begin(), devices.end(),
            [](const CdiDevice& a, const CdiDevice& b) { return a.name < b.name; });
  return WriteCdiSpec(cdi_dir, resource, devices);
}

Result<AllocatedVgpu> AllocationTransaction::Realize(const AllocationPlan& plan) {
  const Device& d = plan.device;
  if (plan.reuse_vgpu) {
    const mdev::Vgpu* v = state_.inventory().FindVgpu(*plan.reuse_vgpu);
    if (v == nullptr || !v->iommu_group) {
      return Status::Error(ErrorCode::kGone, "device " + d.id + ": its vGPU " + *plan.reuse_vgpu +
                                                 " is gone from sysfs or has no IOMMU group");
    }
    return AllocatedVgpu{d.id,           v->id, d.key.type_id, d.key.parent, *v->iommu_group,
                         v->vfio_device, true};
  }
  if (plan.replace_vgpu) {
    auto start = Clock::now();
    Status removed = backend_.RemoveIfType(*plan.replace_vgpu, d.key.type_id);
    if (observer_ != nullptr) {
      observer_->OnVgpuRemoved(d.resource, Clock::now() - start, removed.ok());
    }
    if (!removed.ok() && removed.code() != ErrorCode::kGone) {
      return Status::Error(removed.code(), "device " + d.id + ": removing its earlier vGPU " +
                                               *plan.replace_vgpu +
                                               " failed: " + removed.ToString());
    }
    spdlog::info("vgpu removed for reuse device={} vgpu={}", d.id, *plan.replace_vgpu);
    state_.Forget(d.id, *plan.replace_vgpu);
    state_.VgpuRemoved(*plan.replace_vgpu);  // the create below takes the freed instance
    state_.RereadGpu(backend_, plan.physical_gpu);
  }
  // Stamped again when Allocate returns (ResourceManager::EndAllocating): until then kubelet
  // cannot know the vGPU, and the lifecycle leaves the device ID alone.
  CreatedVgpu record{d.id,          d.resource, "",          d.key.parent, plan.physical_gpu,
                     d.key.type_id, d.key.slot, UnixNowMs(), std::nullopt};
  mdev::CreateRequest request{d.key.parent, d.key.type_id, std::nullopt};
  if (plan.flavour == mdev::Flavour::kMdev) {
    request.uuid = mdev::NewUuid();
    record.vgpu_id = *request.uuid;
  } else {
    record.vgpu_id = d.key.parent;  // the VF is the vGPU
  }
  // Recorded first: a record whose vGPU never appeared is harmless (the slot is reused).
  if (Status saved = state_.Record(record); !saved.ok()) {
    return Status::Error(
        saved.code(),
        "device " + d.id + ": cannot record the vGPU before creating it: " + saved.message());
  }
  Failpoint("allocate.after-record");
  auto start = Clock::now();
  Result<mdev::Vgpu> vgpu = backend_.Create(request);
  Failpoint("allocate.after-create");
  if (observer_ != nullptr) observer_->OnVgpuCreated(d.resource, Clock::now() - start, vgpu.ok());
  if (!vgpu.ok()) {
    if (state_.Forget(d.id, record.vgpu_id)) (void)state_.Save();
    return Status::Error(vgpu.status().code(), "device " + d.id + ": creating a " + d.key.type_id +
                                                   " vGPU on " + d.key.parent +
                                                   " failed: " + vgpu.status().ToString());
  }
  created_.emplace_back(d.id, vgpu->id);
  state_.VgpuCreated(*vgpu);
  state_.RereadGpu(backend_, vgpu->physical_gpu);
  if (!vgpu->iommu_group) {
    return Status::Error(ErrorCode::kInvalid, "device " + d.id + ": vGPU " + vgpu->id +
                                                  " has no IOMMU group; it cannot be handed to "
                                                  "a container");
  }
  spdlog::info("vgpu created device={} vgpu={} type={} parent={} group={}", d.id, vgpu->id,
               d.key.type_id, d.key.parent, *vgpu->iommu_group);
  return AllocatedVgpu{d.id,         vgpu->id,           d.key.type_id,
                       d.key.parent, *vgpu->iommu_group, vgpu->vfio_device};
}

void AllocationTransaction::RollBack(const std::string& resource) {
  if (created_.empty()) return;
  for (auto it = created_.rbegin(); it != created_.rend(); ++it) {
    const auto& [device_id, vgpu_id] = *it;
    auto start = Clock::now();
    Status removed = backend_.Remove(vgpu_id);
    if (observer_ != nullptr) {
      observer_->OnVgpuRemoved(resource, Clock::now() - start, removed.ok());
    }
    if (!removed.ok() && removed.code() != ErrorCode::kGone) {
      spdlog::error("rollback could not remove vgpu={}: {}", vgpu_id, removed.ToString());
      continue;
    }
    spdlog::info("rollback removed vgpu={}", vgpu_id);
    state_.Forget(device_id, vgpu_id);
    state_.VgpuRemovedAndReread(backend_, vgpu_id);
  }
  created_.clear();
  (void)state_.Save();
}

}  // namespace kvgpu::deviceplugin
