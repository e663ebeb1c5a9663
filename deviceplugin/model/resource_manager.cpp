// The resource manager's inventory and lists: start, rescans, the devices of each resource, the
// node's state for the scheduler and the lifecycle, and the removal of vGPUs whose pod is gone.
// Allocation (kubelet's preferred allocation, Allocate, Make) is in resource_manager_allocate.cpp.
#include "deviceplugin/model/resource_manager.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "deviceplugin/model/failpoint.h"
#include "deviceplugin/model/resource_naming.h"

namespace kvgpu::deviceplugin {

using Clock = std::chrono::steady_clock;

ResourceManager::ResourceManager(mdev::Backend& backend, ModelOptions options, StateStore& store,
                                 HolderOracle& holders, ManagerObserver* observer)
    : backend_(backend),
      options_(std::move(options)),
      holders_(holders),
      observer_(observer),
      state_(store) {}

Status ResourceManager::Start() {
  Status domain = ValidateDomain(options_.naming.domain);
  if (!domain.ok()) return domain;
  {
    std::lock_guard lock(mutex_);
    if (Status loaded = state_.Load(); !loaded.ok()) return loaded;
  }
  Status refreshed = Refresh();
  if (refreshed.ok() || refreshed.code() != ErrorCode::kTransport) return refreshed;
  // A backend behind a connection (libvirtd) that is away at start: the daemon serves health
  // and metrics, advertises nothing from the backend, and its rescans connect once it is back.
  // Until the first scan nothing of ours is forgotten or removed (NodeState::inventory_known).
  spdlog::warn("{} backend unreachable at start ({}); advertising nothing until it answers",
               backend_.Name(), refreshed.message());
  return Status::Ok();
}

void ResourceManager::SetChangeListener(std::function<void()> listener) {
  std::lock_guard lock(mutex_);
  listener_ = std::move(listener);
}

void ResourceManager::SetRefreshRequester(std::function<void()> requester) {
  std::lock_guard lock(mutex_);
  refresh_requester_ = std::move(requester);
}

Status ResourceManager::Refresh() {
  // The scan runs without the lock, so an Allocate or a removal may change the node while it
  // reads: such a scan can predate the change, and replacing the view with it would lose a vGPU
  // just made (and send the next type to the GPU it locked). It is read again; if the node keeps
  // changing, the view kept up to date by those changes stays, and the next rescan catches up.
  constexpr int kAttempts = 3;
  bool changed = false;
  for (int attempt = 1;; ++attempt) {
    uint64_t changes_before = 0;
    {
      std::lock_guard lock(mutex_);
      changes_before = state_.own_changes();
    }
    Result<mdev::Inventory> inventory = backend_.Scan();
    if (!inventory.ok()) {
      spdlog::error("{} scan failed: {}", backend_.Name(), inventory.status().ToString());
      return inventory.status();
    }
    std::lock_guard lock(mutex_);
    if (state_.own_changes() != changes_before) {
      if (attempt < kAttempts) continue;
      spdlog::debug("rescan skipped: the node changed during {} scans in a row", kAttempts);
      return Status::Ok();
    }
    for (const std::string& w : state_.ReplaceInventory(std::move(*inventory))) {
      spdlog::warn("{}: {}", backend_.Name(), w);
    }
    changed = catalogue_.Rebuild(state_.inventory(), state_.records(), options_);
    if (observer_ != nullptr) observer_->OnDevices(catalogue_.Counts());
    break;
  }
  AfterChange(changed);
  return Status::Ok();
}

bool ResourceManager::Rebuild() {
  const bool changed = catalogue_.Rebuild(state_.inventory(), state_.records(), options_);
  if (observer_ != nullptr) observer_->OnDevices(catalogue_.Counts());
  return changed;
}

void ResourceManager::AfterChange(bool changed) {
  if (!changed) return;
  std::function<void()> listener;
  {
    std::lock_guard lock(mutex_);
    listener = listener_;
  }
  if (listener) listener();
}

std::vector<std::string> ResourceManager::Resources() const {
  std::lock_guard lock(mutex_);
  return catalogue_.Resources();
}

std::vector<Device> ResourceManager::Devices(const std::string& resource) const {
  std::lock_guard lock(mutex_);
  return catalogue_.Devices(resource);
}

std::set<std::pair<std::string, std::string>> ResourceManager::GpuTypes() const {
  std::lock_guard lock(mutex_);
  std::set<std::pair<std::string, std::string>> out;
  for (const std::string& resource : catalogue_.Resources()) {
    for (const Device& d : catalogue_.Devices(resource)) out.emplace(d.physical_gpu, d.key.type_id);
  }
  return out;
}

std::vector<Device> ResourceManager::DevicesOf(const std::string& physical_gpu,
                                               const std::string& type_id) const {
  std::lock_guard lock(mutex_);
  std::vector<Device> out;
  for (const std::string& resource : catalogue_.Resources()) {
    for (const Device& d : catalogue_.Devices(resource)) {
      if (d.physical_gpu == physical_gpu && d.key.type_id == type_id) out.push_back(d);
    }
  }
  return out;
}

std::map<std::string, DeviceCounts> ResourceManager::Counts() const {
  std::lock_guard lock(mutex_);
  return catalogue_.Counts();
}

std::vector<std::string> ResourceManager::Warnings() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out = state_.inventory().warnings;
  const std::vector<std::string>& naming = catalogue_.naming_warnings();
  out.insert(out.end(), naming.begin(), naming.end());
  return out;
}

scheduling::NodeVgpuState ResourceManager::SchedulerState() const {
  std::lock_guard lock(mutex_);
  return BuildSchedulerState(state_.inventory(), state_.records(), catalogue_,
                             RulesFor(state_.inventory(), options_), options_.spread_across_gpus);
}

mdev::Inventory ResourceManager::Inventory() const {
  std::lock_guard lock(mutex_);
  return state_.inventory();
}

LifecycleSnapshot ResourceManager::Snapshot() const {
  std::lock_guard lock(mutex_);
  return state_.Snapshot(removing_, {allocating_.begin(), allocating_.end()});
}

Status ResourceManager::SetOwners(const std::map<std::string, PodOwner>& owners) {
  std::lock_guard lock(mutex_);
  return state_.SetOwners(owners) ? state_.Save() : Status::Ok();
}

void ResourceManager::SetRemovalWait(std::chrono::milliseconds wait) {
  std::lock_guard lock(mutex_);
  removal_wait_ = wait;
}

Status ResourceManager::RemoveVgpu(const std::string& device_id, const std::string& vgpu_id,
                                   Remover by) {
  std::string resource;
  std::string type_id;
  {
    std::lock_guard lock(mutex_);
    const CreatedVgpu* record = state_.RecordFor(device_id);
    if (record == nullptr || record->vgpu_id != vgpu_id) {
      return Status::Error(ErrorCode::kGone, "device " + device_id + " no longer names vGPU " +
                                                 vgpu_id + " (handed out again or removed)");
    }
    if (by == Remover::kLifecycle && allocating_.contains(device_id)) {
      return Status::Error(ErrorCode::kGone, "device " + device_id +
                                                 " is being handed out again; its Allocate "
                                                 "decides about vGPU " +
                                                 vgpu_id);
    }
    if (!removing_.insert(device_id).second) {
      return Status::Error(ErrorCode::kBusy, "device " + device_id + ": a removal is in flight");
    }
    resource = record->resource;
    type_id = record->type_id;
  }
  Failpoint("remove.before-write");
  auto start = Clock::now();
  Status removed = backend_.RemoveIfType(vgpu_id, type_id);
  if (observer_ != nullptr) observer_->OnVgpuRemoved(resource, Clock::now() - start, removed.ok());
  Failpoint("remove.after-write");
  bool gone = removed.ok() || removed.code() == ErrorCode::kGone;
  bool relisted = false;
  {
    std::lock_guard lock(mutex_);
    removing_.erase(device_id);
    if (gone) {
      state_.Forget(device_id, vgpu_id);
      // The kernel counts the instance free again. Without this the rebuild below would list
      // one device fewer than kubelet was told (the highest free ID) until the rescan.
      state_.VgpuRemovedAndReread(backend_, vgpu_id);
      if (!state_.Save().ok()) {
        spdlog::warn(
            "vgpu {} removed but the record not yet saved; the next save or start drops it (its "
            "vGPU is gone)",
            vgpu_id);
      }
      // An Allocate waiting for this removal must see the device free. The lists were built from
      // the GPU read again: told now, as the rescan below finds nothing more to tell.
      relisted = Rebuild();
    }
  }
  removal_done_.notify_all();
  if (!gone) return removed;
  spdlog::info("vgpu removed device={} vgpu={}", device_id, vgpu_id);
  AfterChange(relisted);
  // The freed slot and the type lock on the GPU: the kernel's counts say what is possible now.
  (void)Refresh();
  return Status::Ok();
}

Status ResourceManager::ForgetVgpu(const std::string& device_id, const std::string& vgpu_id) {
  bool changed = false;
  {
    std::lock_guard lock(mutex_);
    if (removing_.contains(device_id)) return Status::Error(ErrorCode::kBusy, "removal in flight");
    if (!state_.inventory_known()) {
      return Status::Error(ErrorCode::kBusy, "the backend has not been read since the start");
    }
    if (state_.inventory().FindVgpu(vgpu_id) != nullptr) {
      return Status::Error(ErrorCode::kBusy, "vGPU " + vgpu_id + " still exists");
    }
    changed = state_.Forget(device_id, vgpu_id);
    if (changed) {
      if (Status saved = state_.Save(); !saved.ok()) return saved;
      Rebuild();
    }
  }
  if (changed) {
    spdlog::info("record dropped device={} vgpu={}: gone from sysfs", device_id, vgpu_id);
  }
  AfterChange(changed);
  return Status::Ok();
}

}  // namespace kvgpu::deviceplugin
