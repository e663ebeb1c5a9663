// The resource manager's allocation: kubelet's preferred allocation, and Allocate (the device
// plugin) or Make (the DRA front end) turning device IDs into vGPUs: the shape checked, a device ID
// that comes back with its earlier vGPU judged and removed first, the vGPUs made and recorded, the
// answer built. The inventory, the lists of devices and the removals are in resource_manager.cpp.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/backoff.h"
#include "common/clock.h"
#include "common/log_safe.h"
#include "deviceplugin/model/cdi.h"
#include "deviceplugin/model/failpoint.h"
#include "deviceplugin/model/resource_manager.h"

namespace kvgpu::deviceplugin {

using Clock = std::chrono::steady_clock;

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
}  // namespace kvgpu::deviceplugin
