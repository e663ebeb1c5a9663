#include "deviceplugin/model/resource_manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/backoff.h"
#include "common/clock.h"
#include "common/log_safe.h"
#include "deviceplugin/model/cdi.h"
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

Result<std::vector<std::vector<std::string>>> ResourceManager::PreferredAllocation(
    const std::string& resource, const std::vector<PreferredRequest>& requests) const {
  std::lock_guard lock(mutex_);
  if (!catalogue_.Knows(resource)) {
    return Status::Error(ErrorCode::kInvalid, "unknown resource " + LogSafe(resource));
  }
  return PreferDevices(catalogue_.Devices(resource), state_.inventory().vgpus,
                       RulesFor(state_.inventory(), options_), options_.spread_across_gpus,
                       requests);
}

Result<std::vector<ContainerAllocation>> ResourceManager::Allocate(
    const std::string& resource, const std::vector<std::vector<std::string>>& containers) {
  Result<MadeVgpus> made = MakeForContainers(resource, containers);
  if (!made.ok()) return made.status();
  std::vector<ContainerAllocation> answers;
  for (std::vector<AllocatedVgpu>& vgpus : *made) {
    answers.push_back(AnswerContainer(resource, std::move(vgpus), options_.cdi_enabled));
  }
  return answers;
}

Result<std::vector<AllocatedVgpu>> ResourceManager::Make(
    const std::string& resource, const std::vector<std::string>& device_ids) {
  Result<MadeVgpus> made = MakeForContainers(resource, {device_ids});
  if (!made.ok()) return made.status();
  return std::move(made->at(0));
}

Result<ResourceManager::MadeVgpus> ResourceManager::MakeForContainers(
    const std::string& resource, const std::vector<std::vector<std::string>>& containers) {
  const auto started = std::chrono::steady_clock::now();
  auto observe = [&](const Status& result) {
    if (observer_ != nullptr) {
      observer_->OnAllocation(resource, result, std::chrono::steady_clock::now() - started);
    }
  };
  if (Status shape = CheckRequestShape(resource, containers); !shape.ok()) {
    observe(shape);
    spdlog::warn("allocate refused resource={} reason={}", LogSafe(resource), shape.message());
    return shape;
  }
  BeginAllocating(containers);
  Result<MadeVgpus> made = AllocateInFlight(resource, containers);
  EndAllocating(containers, made.ok() ? &*made : nullptr);
  observe(made.ok() ? Status::Ok() : made.status());
  return made;
}

void ResourceManager::BeginAllocating(const std::vector<std::vector<std::string>>& containers) {
  std::lock_guard lock(mutex_);
  for (const auto& ids : containers) allocating_.insert(ids.begin(), ids.end());
}

void ResourceManager::EndAllocating(const std::vector<std::vector<std::string>>& containers,
                                    const MadeVgpus* made) {
  std::lock_guard lock(mutex_);
  for (const auto& ids : containers) {
    for (const std::string& id : ids) {
      if (auto it = allocating_.find(id); it != allocating_.end()) allocating_.erase(it);
    }
  }
  if (made == nullptr) return;
  // kubelet learns of the vGPUs now, and records their pod only after this: a create slower than
  // the settle time must not make a vGPU old at birth.
  const int64_t now = UnixNowMs();
  bool stamped = false;
  for (const std::vector<AllocatedVgpu>& container : *made) {
    for (const AllocatedVgpu& v : container) {
      if (v.reused) continue;  // its pod has known it since its first Allocate
      stamped = state_.StampCreated(v.device_id, v.vgpu_id, now) || stamped;
    }
  }
  if (stamped && holders_.UsesHandoutTime()) {
    if (Status saved = state_.Save(); !saved.ok()) {
      // The in-memory stamp protects the vGPU in this process; after a restart, kubelet's
      // resync rules do (holder_tracker.h).
      spdlog::warn("allocation time of new vGPUs not saved: {}", saved.ToString());
    }
  }
}

Result<ResourceManager::MadeVgpus> ResourceManager::AllocateInFlight(
    const std::string& resource, const std::vector<std::vector<std::string>>& containers) {
  EarlierVgpus earlier = JudgeEarlier(resource, containers);
  if (Status removed = RemoveEarlierVgpus(resource, containers, earlier); !removed.ok()) {
    spdlog::warn("allocate failed resource={} reason={}", resource, removed.ToString());
    return removed;
  }
  bool changed = false;
  std::function<void()> requester;
  Result<MadeVgpus> answers = Status::Error(ErrorCode::kBusy, "not run");
  {
    std::unique_lock lock(mutex_);
    requester = refresh_requester_;
    if (Status waited = WaitForRemovals(lock, containers); !waited.ok()) {
      answers = waited;
    } else {
      answers = AllocateLocked(resource, containers, earlier, changed);
    }
  }
  const Status result = answers.ok() ? Status::Ok() : answers.status();
  if (!result.ok()) {
    spdlog::warn("allocate failed resource={} reason={}", LogSafe(resource), result.ToString());
  }
  if (changed) {
    // Before the answer: kubelet admits the next pod from the lists it holds, so a lock (or the
    // room this create took) must be on every resource's stream before kubelet can act on it.
    AfterChange(true);
    if (requester) {
      requester();
    } else {
      (void)Refresh();
    }
  }
  if (!result.ok()) return result;
  holders_.OnAllocated();
  Failpoint("allocate.before-reply");
  return answers;
}

Result<ResourceManager::MadeVgpus> ResourceManager::AllocateLocked(
    const std::string& resource, const std::vector<std::vector<std::string>>& containers,
    const EarlierVgpus& earlier, bool& changed) {
  Result<ContainerPlans> plans = PlanAllocation(catalogue_, state_, resource, containers, earlier);
  if (!plans.ok()) return plans.status();
  if (options_.cdi_enabled) {
    if (Status kind = ValidateCdiKind(resource); !kind.ok()) return kind;
  }
  AllocationTransaction transaction(backend_, state_, observer_);
  MadeVgpus answers;
  Status result = Status::Ok();
  for (const std::vector<AllocationPlan>& container : *plans) {
    std::vector<AllocatedVgpu> vgpus;
    for (const AllocationPlan& plan : container) {
      changed = changed || !plan.reuse_vgpu;
      Result<AllocatedVgpu> vgpu = transaction.Realize(plan);
      if (!vgpu.ok()) {
        result = vgpu.status();
        break;
      }
      vgpus.push_back(std::move(*vgpu));
    }
    if (!result.ok()) break;
    answers.push_back(std::move(vgpus));
  }
  if (result.ok() && options_.cdi_enabled) {
    Status cdi = WriteCdiSpecs(state_, options_.cdi_dir, resource);
    if (!cdi.ok()) {
      result =
          Status::Error(cdi.code(), "CDI spec for " + resource + " not written: " + cdi.message());
    }
  }
  if (!result.ok()) {
    transaction.RollBack(resource);
    if (changed) Rebuild();  // records and vGPUs may differ from the lists in any way
    return result;
  }
  if (changed) {
    // The view already holds what the creates did to their GPUs (NodeState::RereadGpu: a strict
    // GPU's lock, the room taken): the lists are computed from it now, not at the next rescan,
    // which may come late or be skipped while the node keeps changing (Refresh).
    Rebuild();
  }
  return answers;
}

EarlierVgpus ResourceManager::JudgeEarlier(
    const std::string& resource, const std::vector<std::vector<std::string>>& containers) {
  std::vector<CreatedVgpu> records;
  {
    std::lock_guard lock(mutex_);
    for (const auto& ids : containers) {
      for (const std::string& id : ids) {
        const Device* d = catalogue_.Find(resource, id);
        if (d == nullptr || !d->ours || !d->vgpu_exists) continue;
        if (const CreatedVgpu* record = state_.RecordFor(id); record != nullptr) {
          records.push_back(*record);
        }
      }
    }
  }
  EarlierVgpus out;
  if (records.empty()) return out;
  std::vector<Verdict> verdicts = holders_.CheckAll(records);
  for (size_t i = 0; i < records.size() && i < verdicts.size(); ++i) {
    out[records[i].device_id] = {records[i].vgpu_id, verdicts[i]};
  }
  return out;
}

Status ResourceManager::RemoveEarlierVgpus(const std::string& resource,
                                           const std::vector<std::vector<std::string>>& containers,
                                           const EarlierVgpus& earlier) {
  std::vector<std::pair<std::string, std::string>> free;  // device ID, vGPU
  std::chrono::milliseconds wait;
  {
    std::lock_guard lock(mutex_);
    wait = removal_wait_;
    if (!catalogue_.Knows(resource)) return Status::Ok();
    std::set<std::string> seen;
    for (const auto& ids : containers) {
      for (const std::string& id : ids) {
        const Device* d = catalogue_.Find(resource, id);
        if (d == nullptr || !d->healthy || !seen.insert(id).second) return Status::Ok();
        if (!d->ours || !d->vgpu_exists) continue;
        if (removing_.contains(id)) continue;  // WaitForRemovals waits for that one
        const CreatedVgpu* record = state_.RecordFor(id);
        if (record == nullptr) return Status::Ok();
        auto verdict = earlier.find(id);
        if (verdict == earlier.end() || verdict->second.vgpu_id != record->vgpu_id) {
          return Status::Ok();  // changed meanwhile: the plan refuses it
        }
        Holding holding = verdict->second.verdict.holding;
        if (holding == Holding::kUnknown) return Status::Ok();
        if (holding == Holding::kFree) free.emplace_back(id, record->vgpu_id);
      }
    }
  }
  const auto deadline = Clock::now() + wait;
  for (const auto& [id, vgpu] : free) {
    Backoff backoff(std::chrono::milliseconds(50), std::chrono::milliseconds(500));
    for (;;) {
      Status removed = RemoveVgpu(id, vgpu);
      // kGone: the record moved on meanwhile (a removal finished, the vGPU vanished).
      if (removed.ok() || removed.code() == ErrorCode::kGone) break;
      const std::chrono::milliseconds delay = backoff.Next();
      if (removed.code() != ErrorCode::kBusy || Clock::now() + delay > deadline) {
        return Status::Error(removed.code(),
                             "device " + id + ": its earlier vGPU " + vgpu +
                                 " could not be removed for the new pod (" + removed.ToString() +
                                 "); the last pod's VM may still hold it, try again");
      }
      if (backoff.failures() == 1) {
        spdlog::info("device {}: its earlier vGPU {} is still busy; waiting for the VM to let go",
                     id, vgpu);
      }
      std::this_thread::sleep_for(delay);
    }
  }
  return Status::Ok();
}

Status ResourceManager::WaitForRemovals(std::unique_lock<std::mutex>& lock,
                                        const std::vector<std::vector<std::string>>& containers) {
  auto busy = [&]() -> const std::string* {
    for (const auto& ids : containers) {
      for (const std::string& id : ids) {
        if (auto it = removing_.find(id); it != removing_.end()) return &*it;
      }
    }
    return nullptr;
  };
  if (busy() == nullptr) return Status::Ok();
  if (removal_done_.wait_for(lock, removal_wait_, [&] { return busy() == nullptr; })) {
    return Status::Ok();
  }
  return Status::Error(ErrorCode::kBusy, "device " + *busy() +
                                             ": its earlier vGPU is still being removed (the "
                                             "kernel has not let go yet); try again");
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

Status ResourceManager::SetOwners(const std::map<std::string, std::string>& owners) {
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
