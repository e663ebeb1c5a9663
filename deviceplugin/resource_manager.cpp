#include "deviceplugin/resource_manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <tuple>

#include "common/clock.h"
#include "common/log_safe.h"
#include "deviceplugin/allocation_env.h"
#include "deviceplugin/cdi.h"
#include "deviceplugin/failpoint.h"
#include "deviceplugin/resource_naming.h"
#include "mdev/uuid.h"

namespace kvgpu::deviceplugin {

using mdev::ErrorCode;
using Clock = std::chrono::steady_clock;

namespace {

Status Invalid(const std::string& message) {
  return Status::Error(ErrorCode::kInvalid, message);
}

}  // namespace

// What Allocate will do for one device ID, decided before anything changes.
struct ResourceManager::Plan {
  Device device;
  mdev::Flavour flavour = mdev::Flavour::kMdev;
  std::string physical_gpu;
  std::optional<std::string> replace_vgpu;  // our earlier vGPU, free to remove and make anew
  std::optional<std::string> reuse_vgpu;    // our vGPU the same pod holds: handed back as it is
};

ResourceManager::ResourceManager(mdev::Node& node, Config config, StateStore& store,
                                 HolderOracle& holders, ManagerObserver* observer)
    : node_(node),
      config_(std::move(config)),
      store_(store),
      holders_(holders),
      observer_(observer) {}

Status ResourceManager::Start() {
  Status domain = ValidateDomain(config_.naming.domain);
  if (!domain.ok()) return domain;
  Result<std::vector<CreatedVgpu>> records = store_.Load();
  if (!records.ok()) {
    return Status::Error(records.status().code(),
                         "cannot read the record of vGPUs this plugin created (" +
                             records.status().message() +
                             "); refusing to start rather than mistake them for someone else's");
  }
  {
    std::lock_guard lock(mutex_);
    records_ = std::move(*records);
  }
  spdlog::info("state loaded vgpus={}", records_.size());
  return Refresh();
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
  Result<mdev::Inventory> inventory = node_.Scan();
  if (!inventory.ok()) {
    spdlog::error("sysfs scan failed: {}", inventory.status().ToString());
    return inventory.status();
  }
  bool changed = false;
  {
    std::lock_guard lock(mutex_);
    for (const std::string& w : inventory->warnings) {
      if (std::find(inventory_.warnings.begin(), inventory_.warnings.end(), w) ==
          inventory_.warnings.end()) {
        spdlog::warn("sysfs: {}", w);
      }
    }
    inventory_ = std::move(*inventory);
    auto before = views_;
    Recompute();
    changed = before != views_;
  }
  AfterChange(changed);
  return Status::Ok();
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

void ResourceManager::DropVgpuFromView(const std::string& vgpu_id) {
  auto v = std::find_if(inventory_.vgpus.begin(), inventory_.vgpus.end(),
                        [&](const mdev::Vgpu& x) { return x.id == vgpu_id; });
  if (v == inventory_.vgpus.end()) return;  // a rescan already saw it go, counts included
  for (mdev::Parent& parent : inventory_.parents) {
    if (parent.name != v->parent) continue;
    for (mdev::VgpuType& type : parent.types) {
      if (type.id == v->type_id) ++type.available_instances;
    }
  }
  inventory_.vgpus.erase(v);
}

const mdev::Parent* ResourceManager::FindParent(const std::string& name) const {
  return inventory_.FindParent(name);
}

bool ResourceManager::Offered(const mdev::Parent& parent, const mdev::VgpuType& type) const {
  if (!config_.allowed_types.empty() &&
      std::find(config_.allowed_types.begin(), config_.allowed_types.end(), type.id) ==
          config_.allowed_types.end()) {
    return false;
  }
  if (config_.pinning.empty()) return true;
  std::vector<std::string> models;
  for (const mdev::Parent& p : inventory_.parents) {
    if (p.physical_gpu != parent.physical_gpu) continue;
    if (p.device_id) models.push_back(*p.device_id);
    for (const mdev::VgpuType& t : p.types) {
      if (t.profile) models.push_back(t.profile->gpu);
    }
  }
  const PinRule* pin = FindPin(config_, parent.physical_gpu, models);
  if (pin == nullptr && parent.name != parent.physical_gpu) {
    pin = FindPin(config_, parent.name, models);  // an operator may name the VF itself
  }
  return pin == nullptr || pin->type_id == type.id;
}

void ResourceManager::Recompute() {
  std::map<std::pair<std::string, std::string>, std::set<uint32_t>> listed_slots;
  for (const auto& [resource, devices] : views_) {
    for (const Device& d : devices) {
      if (!d.healthy) continue;
      listed_slots[{d.key.parent, d.key.type_id}].insert(d.key.slot);
      advertised_.insert(d.id);  // bounded: one entry per slot ever offered
    }
  }
  std::map<std::string, std::vector<Device>> views;
  std::map<std::string, std::vector<Device>> by_parent;
  std::set<std::string> existing;
  for (const mdev::Vgpu& v : inventory_.vgpus) existing.insert(v.id);
  std::vector<std::string> naming_warnings;
  // SR-IOV: every VF shows each type it could host, but the GPU behind them hosts at most
  // max_instance of a type (1 for an A100D-80C). Free devices per (GPU, type) stop there.
  std::map<std::pair<std::string, std::string>, uint32_t> vf_budget;
  for (const mdev::Parent& parent : inventory_.parents) {
    if (!parent.is_virtual_function) continue;
    for (const mdev::VgpuType& type : parent.types) {
      if (!type.nvidia || !type.nvidia->max_instance) continue;
      uint32_t made = 0;
      for (const mdev::Vgpu& v : inventory_.vgpus) {
        if (v.physical_gpu == parent.physical_gpu && v.type_id == type.id) ++made;
      }
      uint32_t max = *type.nvidia->max_instance;
      vf_budget.try_emplace({parent.physical_gpu, type.id}, max > made ? max - made : 0);
    }
  }

  for (const mdev::Parent& parent : inventory_.parents) {
    std::vector<Device>& parent_devices = by_parent[parent.name];
    for (const mdev::VgpuType& type : parent.types) {
      std::vector<const CreatedVgpu*> ours;
      for (const CreatedVgpu& r : records_) {
        if (r.parent == parent.name && r.type_id == type.id) ours.push_back(&r);
      }
      if (!Offered(parent, type) && ours.empty()) continue;
      Result<std::string> resource = ResourceNameFor(config_.naming, type);
      if (!resource.ok()) {
        naming_warnings.push_back(resource.status().message());
        continue;
      }
      // Offered, even with no instance free now (its GPU locked to another type): the resource
      // is served and registered from the start, its list empty until the GPU frees up.
      views.try_emplace(*resource);
      std::set<uint32_t> used;
      uint32_t missing = 0;
      for (const CreatedVgpu* r : ours) {
        used.insert(r->slot);
        if (!existing.contains(r->vgpu_id)) ++missing;
      }
      uint32_t free = Offered(parent, type) && type.available_instances > missing
                          ? type.available_instances - missing
                          : 0;
      if (auto budget = vf_budget.find({parent.physical_gpu, type.id}); budget != vf_budget.end()) {
        free = std::min(free, budget->second);
        budget->second -= free;
      }
      // Never more than the type can hold on this parent: a count read a moment before the
      // kernel showed our newest vGPU (a cached or racing read) must not list one device too many.
      if (type.nvidia && type.nvidia->max_instance) {
        const uint32_t max = *type.nvidia->max_instance;
        const auto held = static_cast<uint32_t>(ours.size()) - missing;
        free = std::min(free, max > held ? max - held : 0);
      }
      // Free slots listed before stay listed first: kubelet holds the IDs of the last list we
      // pushed, and an ID it was given must still name a device when it asks for it (a removal,
      // or a vGPU made elsewhere, must not shift the free IDs under it). Then the lowest unused.
      std::vector<uint32_t> slots;
      if (auto before = listed_slots.find({parent.name, type.id}); before != listed_slots.end()) {
        for (uint32_t slot : before->second) {
          if (slots.size() < free && !used.contains(slot)) slots.push_back(slot);
        }
      }
      for (uint32_t slot = 0; slots.size() < free; ++slot) {
        if (!used.contains(slot) && std::find(slots.begin(), slots.end(), slot) == slots.end()) {
          slots.push_back(slot);
        }
      }
      std::sort(slots.begin(), slots.end());
      for (uint32_t slot : slots) {
        DeviceKey key{parent.name, type.id, slot};
        std::string id = MakeDeviceId(key);
        if (id.size() > kMaxDeviceIdLength) {
          naming_warnings.push_back("type " + type.id + " of " + parent.name +
                                    ": device IDs would exceed 63 characters; not offered");
          break;
        }
        parent_devices.push_back(
            Device{id, *resource, key, parent.physical_gpu, true, false, false});
      }
    }
  }
  // Our vGPUs, wherever their parent is; those of a vanished parent are Unhealthy.
  std::set<std::string> ours_ids;
  for (const CreatedVgpu& r : records_) {
    const mdev::Parent* parent = FindParent(r.parent);
    Device d{r.device_id,
             r.resource,
             DeviceKey{r.parent, r.type_id, r.slot},
             r.physical_gpu,
             parent != nullptr,
             true,
             existing.contains(r.vgpu_id)};
    ours_ids.insert(r.device_id);
    by_parent[r.parent].push_back(std::move(d));
  }
  for (auto& [parent_name, devices] : by_parent) {
    if (FindParent(parent_name) != nullptr) {
      last_seen_[parent_name] = devices;
    }
  }
  // Parents gone since an earlier scan: what they offered stays listed, Unhealthy, so kubelet
  // stops scheduling onto it without forgetting the devices.
  for (const auto& [parent_name, devices] : last_seen_) {
    if (FindParent(parent_name) != nullptr) continue;
    for (Device d : devices) {
      if (ours_ids.contains(d.id)) continue;  // already listed from the record
      d.healthy = false;
      by_parent[parent_name].push_back(std::move(d));
    }
  }
  resource_of_.clear();
  for (auto& [parent_name, devices] : by_parent) {
    for (Device& d : devices) {
      if (resource_of_.contains(d.id)) continue;
      resource_of_[d.id] = d.resource;
      views[d.resource].push_back(std::move(d));
    }
  }
  for (auto& [resource, devices] : views) {
    std::sort(devices.begin(), devices.end(),
              [](const Device& a, const Device& b) { return a.id < b.id; });
  }
  // A resource seen once keeps its (maybe empty) list, so its server can say "none left".
  for (const auto& [resource, devices] : views_) views.try_emplace(resource);
  views_ = std::move(views);
  for (const std::string& w : naming_warnings) {
    if (std::find(naming_warnings_.begin(), naming_warnings_.end(), w) == naming_warnings_.end()) {
      spdlog::error("naming: {}", w);
    }
  }
  naming_warnings_ = std::move(naming_warnings);
  if (observer_ != nullptr) observer_->OnDevices(CountsLocked());
}

std::vector<std::string> ResourceManager::Resources() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  for (const auto& [resource, devices] : views_) out.push_back(resource);
  return out;
}

std::vector<Device> ResourceManager::Devices(const std::string& resource) const {
  std::lock_guard lock(mutex_);
  auto it = views_.find(resource);
  return it == views_.end() ? std::vector<Device>{} : it->second;
}

std::map<std::string, DeviceCounts> ResourceManager::Counts() const {
  std::lock_guard lock(mutex_);
  return CountsLocked();
}

std::map<std::string, DeviceCounts> ResourceManager::CountsLocked() const {
  std::map<std::string, DeviceCounts> counts;
  for (const auto& [resource, devices] : views_) {
    DeviceCounts& c = counts[resource];
    for (const Device& d : devices) {
      if (!d.healthy) {
        ++c.unhealthy;
      } else if (d.ours && d.vgpu_exists) {
        ++c.allocated;
      } else {
        ++c.available;
      }
    }
  }
  return counts;
}

std::vector<std::string> ResourceManager::Warnings() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out = inventory_.warnings;
  out.insert(out.end(), naming_warnings_.begin(), naming_warnings_.end());
  return out;
}

Result<std::vector<std::vector<std::string>>> ResourceManager::PreferredAllocation(
    const std::string& resource, const std::vector<PreferredRequest>& requests) const {
  std::lock_guard lock(mutex_);
  auto view = views_.find(resource);
  if (view == views_.end()) return Invalid("unknown resource " + LogSafe(resource));
  std::unordered_map<std::string, const Device*> by_id;
  for (const Device& d : view->second) by_id[d.id] = &d;

  // Per physical GPU: vGPUs of this resource's types already there (locked to it) and free
  // devices of the resource there.
  // A GPU that already carries a vGPU of another type is locked to that type (time-sliced vGPU
  // takes one type per GPU): Allocate updates the vGPUs at once, while the kernel's counts that
  // hide this resource's devices there arrive with the next rescan. Such devices go last.
  std::map<std::string, int> same_type_on_gpu;
  std::map<std::string, int> free_on_gpu;
  std::set<std::string> other_type_on_gpu;
  std::set<std::string> types;
  for (const Device& d : view->second) types.insert(d.key.type_id);
  for (const mdev::Vgpu& v : inventory_.vgpus) {
    if (types.contains(v.type_id)) {
      ++same_type_on_gpu[v.physical_gpu];
    } else {
      other_type_on_gpu.insert(v.physical_gpu);
    }
  }
  for (const Device& d : view->second) {
    if (d.healthy && !d.vgpu_exists) ++free_on_gpu[d.physical_gpu];
  }

  std::vector<std::vector<std::string>> answers;
  for (size_t i = 0; i < requests.size(); ++i) {
    const PreferredRequest& req = requests[i];
    std::string where = "container request " + std::to_string(i) + ": ";
    std::set<std::string> available(req.available.begin(), req.available.end());
    if (req.size <= 0) return Invalid(where + "allocation size must be at least 1");
    if (static_cast<size_t>(req.size) > available.size()) {
      return Invalid(where + "allocation size " + std::to_string(req.size) + " exceeds the " +
                     std::to_string(available.size()) + " available devices");
    }
    if (req.must_include.size() > static_cast<size_t>(req.size)) {
      return Invalid(where + "more must-include devices than the allocation size");
    }
    std::vector<std::string> chosen;
    std::set<std::string> chosen_gpus;
    for (const std::string& id : req.must_include) {
      if (!available.contains(id)) {
        return Invalid(where + "must-include device " + LogSafe(id) +
                       " is not among the available ones");
      }
      if (std::find(chosen.begin(), chosen.end(), id) != chosen.end()) continue;
      chosen.push_back(id);
      if (auto it = by_id.find(id); it != by_id.end()) chosen_gpus.insert(it->second->physical_gpu);
    }
    // Rank candidates (healthy devices this resource lists): devices whose old vGPU still
    // exists after the rest (Allocate can only reuse them when no pod holds them), devices on a
    // GPU locked to another type last; then GPUs already locked to the type, fuller GPUs first
    // (pack), then by ID for a stable answer.
    struct Candidate {
      std::string id;
      std::string gpu;
      std::tuple<int, int, int, int, std::string, std::string> rank;
    };
    std::vector<Candidate> candidates;
    for (const std::string& id : available) {
      if (std::find(chosen.begin(), chosen.end(), id) != chosen.end()) continue;
      auto it = by_id.find(id);
      // Never an ID this resource does not list, or one Allocate would refuse as unhealthy:
      // kubelet fills the rest of the request from its own available list.
      if (it == by_id.end() || !it->second->healthy) continue;
      const Device& d = *it->second;
      int health = other_type_on_gpu.contains(d.physical_gpu) ? 2 : (d.vgpu_exists ? 1 : 0);
      int locked = same_type_on_gpu[d.physical_gpu] > 0 ? 0 : 1;
      candidates.push_back({id,
                            d.physical_gpu,
                            {health, locked, -same_type_on_gpu[d.physical_gpu],
                             free_on_gpu[d.physical_gpu], d.physical_gpu, id}});
    }
    std::sort(candidates.begin(), candidates.end(),
              [](const Candidate& a, const Candidate& b) { return a.rank < b.rank; });
    size_t want = static_cast<size_t>(req.size);
    if (config_.spread_across_gpus) {
      // One device per GPU per round, GPUs not yet in the answer first.
      std::vector<bool> taken(candidates.size(), false);
      while (chosen.size() < want) {
        bool progressed = false;
        std::set<std::string> round_gpus = chosen_gpus;
        for (size_t c = 0; c < candidates.size() && chosen.size() < want; ++c) {
          if (taken[c] || round_gpus.contains(candidates[c].gpu)) continue;
          taken[c] = true;
          progressed = true;
          chosen.push_back(candidates[c].id);
          round_gpus.insert(candidates[c].gpu);
        }
        if (!progressed) break;
        chosen_gpus.clear();  // later rounds may reuse GPUs, still spreading evenly
      }
      for (size_t c = 0; c < candidates.size() && chosen.size() < want; ++c) {
        if (!taken[c]) chosen.push_back(candidates[c].id);
      }
    } else {
      for (size_t c = 0; c < candidates.size() && chosen.size() < want; ++c) {
        chosen.push_back(candidates[c].id);
      }
    }
    answers.push_back(std::move(chosen));
  }
  return answers;
}

Status ResourceManager::Validate(const std::string& resource,
                                 const std::vector<std::vector<std::string>>& containers,
                                 const JudgedMap& judged, std::vector<std::vector<Plan>>& plans) {
  if (containers.empty()) return Invalid("allocate request for " + resource + " has no containers");
  auto view = views_.find(resource);
  if (view == views_.end()) return Invalid("unknown resource " + LogSafe(resource));
  std::set<std::string> seen;
  for (size_t i = 0; i < containers.size(); ++i) {
    if (containers[i].empty()) {
      return Invalid("container request " + std::to_string(i) + " for " + resource +
                     " names no devices");
    }
    std::vector<Plan>& container_plans = plans.emplace_back();
    for (const std::string& id : containers[i]) {
      if (!seen.insert(id).second) return Invalid("device " + LogSafe(id) + " is requested twice");
      auto owner = resource_of_.find(id);
      if (owner == resource_of_.end()) {
        // Listed to kubelet once, only no longer free: the GPU filled up or took another type
        // since the list kubelet used was pushed. Say so, rather than "unknown".
        if (advertised_.contains(id)) {
          return Status::Error(ErrorCode::kNoRoom,
                               "device " + id +
                                   ": no longer free (the GPU filled up or took another type "
                                   "since the list kubelet used); pick another device");
        }
        return Invalid("unknown device " + LogSafe(id) + " for " + resource +
                       " (not in the list this plugin advertises)");
      }
      if (owner->second != resource) {
        return Invalid("device " + LogSafe(id) + " belongs to " + owner->second + ", not " +
                       resource);
      }
      auto it = std::find_if(view->second.begin(), view->second.end(),
                             [&](const Device& d) { return d.id == id; });
      const Device& d = *it;
      if (!d.healthy) {
        return Status::Error(ErrorCode::kGone, "device " + LogSafe(id) +
                                                   " is unhealthy: its parent " + d.key.parent +
                                                   " is gone from sysfs");
      }
      const mdev::Parent* parent = FindParent(d.key.parent);
      Plan plan{d, parent->flavour, parent->physical_gpu, std::nullopt, std::nullopt};
      if (d.ours && d.vgpu_exists) {
        auto record = std::find_if(records_.begin(), records_.end(),
                                   [&](const CreatedVgpu& r) { return r.device_id == id; });
        if (record == records_.end()) {
          return Status::Error(ErrorCode::kBusy, "device " + LogSafe(id) +
                                                     " is listed as ours but "
                                                     "has no record; rescan and retry");
        }
        auto judged_it = judged.find(id);
        if (judged_it == judged.end() || judged_it->second.vgpu_id != record->vgpu_id) {
          return Status::Error(ErrorCode::kBusy, "device " + LogSafe(id) +
                                                     ": its vGPU changed while kubelet was "
                                                     "asked who holds it; try again");
        }
        const Verdict& answer = judged_it->second.answer;
        if (answer.holding == Holding::kHeld) {
          spdlog::info("device {} asked for again while {} holds it: same vGPU {}", LogSafe(id),
                       answer.holder.empty() ? "its pod" : LogSafe(answer.holder), record->vgpu_id);
          plan.reuse_vgpu = record->vgpu_id;
          container_plans.push_back(std::move(plan));
          continue;
        }
        if (answer.holding == Holding::kUnknown) {
          return Status::Error(
              ErrorCode::kBusy,
              "device " + LogSafe(id) + ": its earlier vGPU " + record->vgpu_id +
                  " still exists and nothing tells whether a pod still uses it; it is kept, never "
                  "shared between pods (remove it once its pod is gone, or pick another device)");
        }
        plan.replace_vgpu = record->vgpu_id;
      }
      container_plans.push_back(std::move(plan));
    }
  }
  return Status::Ok();
}

Status ResourceManager::SaveRecords() {
  Status saved = store_.Save(records_);
  if (!saved.ok()) spdlog::error("state not saved: {}", saved.ToString());
  return saved;
}

Result<AllocatedVgpu> ResourceManager::Realize(const Plan& plan,
                                               std::vector<std::string>& created) {
  const Device& d = plan.device;
  if (plan.reuse_vgpu) {
    const mdev::Vgpu* v = inventory_.FindVgpu(*plan.reuse_vgpu);
    if (v == nullptr || !v->iommu_group) {
      return Status::Error(ErrorCode::kGone, "device " + d.id + ": its vGPU " + *plan.reuse_vgpu +
                                                 " is gone from sysfs or has no IOMMU group");
    }
    return AllocatedVgpu{d.id, v->id, d.key.type_id, d.key.parent, *v->iommu_group, v->vfio_device};
  }
  if (plan.replace_vgpu) {
    auto start = Clock::now();
    Status removed = node_.Remove(*plan.replace_vgpu);
    if (observer_ != nullptr)
      observer_->OnVgpuRemoved(d.resource, Clock::now() - start, removed.ok());
    if (!removed.ok() && removed.code() != ErrorCode::kGone) {
      return Status::Error(removed.code(), "device " + d.id + ": removing its earlier vGPU " +
                                               *plan.replace_vgpu +
                                               " failed: " + removed.ToString());
    }
    spdlog::info("vgpu removed for reuse device={} vgpu={}", d.id, *plan.replace_vgpu);
    std::erase_if(records_, [&](const CreatedVgpu& r) { return r.device_id == d.id; });
    DropVgpuFromView(*plan.replace_vgpu);  // the create below takes the freed instance
  }
  // Record first: a crash between the kernel's create and our write must not leave a vGPU whose
  // origin nobody knows. A record whose vGPU never appeared is harmless (the slot is reused).
  CreatedVgpu record{d.id,          d.resource, "",          d.key.parent, plan.physical_gpu,
                     d.key.type_id, d.key.slot, UnixNowMs(), std::nullopt};
  mdev::CreateRequest request{d.key.parent, d.key.type_id, std::nullopt};
  if (plan.flavour == mdev::Flavour::kMdev) {
    request.uuid = mdev::NewUuid();
    record.vgpu_id = *request.uuid;
  } else {
    record.vgpu_id = d.key.parent;  // the VF is the vGPU
  }
  std::erase_if(records_, [&](const CreatedVgpu& r) { return r.device_id == d.id; });
  records_.push_back(record);
  Status saved = SaveRecords();
  if (!saved.ok()) {
    records_.pop_back();
    return Status::Error(
        saved.code(),
        "device " + d.id + ": cannot record the vGPU before creating it: " + saved.message());
  }
  Failpoint("allocate.after-record");
  auto start = Clock::now();
  Result<mdev::Vgpu> vgpu = node_.Create(request);
  Failpoint("allocate.after-create");
  if (observer_ != nullptr) observer_->OnVgpuCreated(d.resource, Clock::now() - start, vgpu.ok());
  if (!vgpu.ok()) {
    records_.pop_back();
    (void)SaveRecords();
    return Status::Error(vgpu.status().code(), "device " + d.id + ": creating a " + d.key.type_id +
                                                   " vGPU on " + d.key.parent +
                                                   " failed: " + vgpu.status().ToString());
  }
  created.push_back(vgpu->id);
  inventory_.vgpus.push_back(*vgpu);
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

void ResourceManager::RollBack(const std::string& resource,
                               const std::vector<std::string>& created) {
  for (auto it = created.rbegin(); it != created.rend(); ++it) {
    auto start = Clock::now();
    Status removed = node_.Remove(*it);
    if (observer_ != nullptr)
      observer_->OnVgpuRemoved(resource, Clock::now() - start, removed.ok());
    if (!removed.ok() && removed.code() != ErrorCode::kGone) {
      // Still ours and still there: keep the record so the lifecycle collects it later.
      spdlog::error("rollback could not remove vgpu={}: {}", *it, removed.ToString());
      continue;
    }
    spdlog::info("rollback removed vgpu={}", *it);
    std::erase_if(records_, [&](const CreatedVgpu& r) { return r.vgpu_id == *it; });
    std::erase_if(inventory_.vgpus, [&](const mdev::Vgpu& v) { return v.id == *it; });
  }
  (void)SaveRecords();
}

Status ResourceManager::WriteCdiSpecs(const std::string& resource) {
  std::vector<CdiDevice> devices;
  for (const CreatedVgpu& r : records_) {
    if (r.resource != resource) continue;
    const mdev::Vgpu* v = inventory_.FindVgpu(r.vgpu_id);
    if (v == nullptr || v->vfio_device.empty()) continue;
    devices.push_back({r.device_id, v->vfio_device, r.vgpu_id});
  }
  std::sort(devices.begin(), devices.end(),
            [](const CdiDevice& a, const CdiDevice& b) { return a.name < b.name; });
  return WriteCdiSpec(config_.cdi_dir, resource, devices);
}

ContainerAllocation ResourceManager::Answer(const std::string& resource,
                                            std::vector<AllocatedVgpu> vgpus) const {
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
    if (config_.cdi_enabled) out.cdi_devices.push_back(resource + "=" + v.device_id);
  }
  RenderAllocationEnv(resource, env, out.envs);
  out.vgpus = std::move(vgpus);
  return out;
}

Result<std::vector<ContainerAllocation>> ResourceManager::Allocate(
    const std::string& resource, const std::vector<std::vector<std::string>>& containers) {
  Status result = Status::Ok();
  std::vector<ContainerAllocation> answers;
  bool changed = false;
  std::function<void()> requester;
  Status shape = CheckShape(resource, containers);
  if (!shape.ok()) {
    if (observer_ != nullptr) observer_->OnAllocation(resource, shape);
    spdlog::warn("allocate refused resource={} reason={}", LogSafe(resource), shape.message());
    return shape;
  }
  // Who holds the earlier vGPUs of the requested IDs: asked without the manager's lock, so a
  // slow kubelet delays only this call.
  JudgedMap judged = JudgeEarlier(resource, containers);
  if (Status removed = RemoveEarlierVgpus(resource, containers, judged); !removed.ok()) {
    if (observer_ != nullptr) observer_->OnAllocation(resource, removed);
    spdlog::warn("allocate failed resource={} reason={}", resource, removed.ToString());
    return removed;
  }
  {
    std::unique_lock lock(mutex_);
    requester = refresh_requester_;
    result = WaitForRemovals(lock, containers);
    std::vector<std::vector<Plan>> plans;
    if (result.ok()) result = Validate(resource, containers, judged, plans);
    if (result.ok() && config_.cdi_enabled) result = ValidateCdiKind(resource);
    std::vector<std::string> created;
    for (size_t c = 0; result.ok() && c < plans.size(); ++c) {
      std::vector<AllocatedVgpu> vgpus;
      for (const Plan& plan : plans[c]) {
        changed = changed || !plan.reuse_vgpu;
        Result<AllocatedVgpu> vgpu = Realize(plan, created);
        if (!vgpu.ok()) {
          result = vgpu.status();
          break;
        }
        vgpus.push_back(std::move(*vgpu));
      }
      if (result.ok()) answers.push_back(Answer(resource, std::move(vgpus)));
    }
    if (result.ok() && config_.cdi_enabled) {
      Status cdi = WriteCdiSpecs(resource);
      if (!cdi.ok()) {
        result = Status::Error(cdi.code(),
                               "CDI spec for " + resource + " not written: " + cdi.message());
      }
    }
    if (!result.ok() && !created.empty()) RollBack(resource, created);
    if (changed && result.ok()) {
      // The wire lists do not change: the devices stay listed and healthy, now ours. Mark them
      // in place (no full recompute on the request path); the rescan requested below reads the
      // kernel's counts, including the lock of other types, and pushes what changed.
      std::vector<Device>& devices = views_[resource];
      for (const ContainerAllocation& container : answers) {
        for (const AllocatedVgpu& v : container.vgpus) {
          auto it =
              std::lower_bound(devices.begin(), devices.end(), v.device_id,
                               [](const Device& d, const std::string& id) { return d.id < id; });
          if (it != devices.end() && it->id == v.device_id) {
            it->ours = true;
            it->vgpu_exists = true;
          }
          for (mdev::Parent& parent : inventory_.parents) {
            if (parent.name != v.parent) continue;
            for (mdev::VgpuType& type : parent.types) {
              if (type.id == v.type_id && type.available_instances > 0) --type.available_instances;
            }
          }
        }
      }
      if (observer_ != nullptr) observer_->OnDevices(CountsLocked());
    } else if (changed) {
      Recompute();  // a rollback: records and vGPUs may differ from the lists in any way
    }
  }
  if (observer_ != nullptr) observer_->OnAllocation(resource, result);
  if (!result.ok()) {
    spdlog::warn("allocate failed resource={} reason={}", LogSafe(resource), result.ToString());
  }
  if (changed) {
    if (!result.ok()) AfterChange(true);
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

ResourceManager::JudgedMap ResourceManager::JudgeEarlier(
    const std::string& resource, const std::vector<std::vector<std::string>>& containers) {
  std::vector<CreatedVgpu> earlier;
  {
    std::lock_guard lock(mutex_);
    auto view = views_.find(resource);
    if (view == views_.end()) return {};
    for (const auto& ids : containers) {
      for (const std::string& id : ids) {
        auto d = std::lower_bound(
            view->second.begin(), view->second.end(), id,
            [](const Device& device, const std::string& wanted) { return device.id < wanted; });
        if (d == view->second.end() || d->id != id || !d->ours || !d->vgpu_exists) continue;
        auto record = std::find_if(records_.begin(), records_.end(),
                                   [&](const CreatedVgpu& r) { return r.device_id == id; });
        if (record != records_.end()) earlier.push_back(*record);
      }
    }
  }
  JudgedMap out;
  if (earlier.empty()) return out;
  std::vector<Verdict> answers = holders_.CheckAll(earlier);
  for (size_t i = 0; i < earlier.size() && i < answers.size(); ++i) {
    out[earlier[i].device_id] = {earlier[i].vgpu_id, answers[i]};
  }
  return out;
}

Status ResourceManager::CheckShape(const std::string& resource,
                                   const std::vector<std::vector<std::string>>& containers) {
  size_t total = 0;
  for (size_t i = 0; i < containers.size(); ++i) {
    for (const std::string& id : containers[i]) {
      if (id.size() > kMaxDeviceIdLength) {
        return Invalid("container request " + std::to_string(i) + " for " + LogSafe(resource) +
                       ": device ID " + LogSafe(id) + " is longer than " +
                       std::to_string(kMaxDeviceIdLength) + " characters; no such device exists");
      }
      ++total;
    }
  }
  if (total > kMaxDevicesPerRequest) {
    return Invalid("allocate request for " + LogSafe(resource) + " names " + std::to_string(total) +
                   " devices, more than the " + std::to_string(kMaxDevicesPerRequest) +
                   " a node can have");
  }
  return Status::Ok();
}

Status ResourceManager::RemoveEarlierVgpus(const std::string& resource,
                                           const std::vector<std::vector<std::string>>& containers,
                                           const JudgedMap& judged) {
  // Which requested IDs still have our earlier vGPU with no pod holding it. A request Validate
  // will refuse (an unknown, unhealthy or repeated ID, a holder nobody can name) removes
  // nothing: it is answered under the lock, with nothing changed.
  std::vector<std::pair<std::string, std::string>> earlier;  // device ID, vGPU
  std::chrono::milliseconds wait;
  {
    std::lock_guard lock(mutex_);
    wait = removal_wait_;
    auto view = views_.find(resource);
    if (view == views_.end()) return Status::Ok();
    std::set<std::string> seen;
    for (const auto& ids : containers) {
      for (const std::string& id : ids) {
        auto d = std::lower_bound(
            view->second.begin(), view->second.end(), id,
            [](const Device& device, const std::string& wanted) { return device.id < wanted; });
        if (d == view->second.end() || d->id != id || !d->healthy || !seen.insert(id).second) {
          return Status::Ok();
        }
        if (!d->ours || !d->vgpu_exists) continue;
        if (removing_.contains(id)) continue;  // WaitForRemovals waits for that one
        auto record = std::find_if(records_.begin(), records_.end(),
                                   [&](const CreatedVgpu& r) { return r.device_id == id; });
        if (record == records_.end()) return Status::Ok();
        auto verdict = judged.find(id);
        if (verdict == judged.end() || verdict->second.vgpu_id != record->vgpu_id) {
          return Status::Ok();  // changed meanwhile: Validate refuses it
        }
        Holding holding = verdict->second.answer.holding;
        if (holding == Holding::kUnknown) return Status::Ok();
        if (holding == Holding::kFree) earlier.emplace_back(id, record->vgpu_id);
      }
    }
  }
  const auto deadline = Clock::now() + wait;
  for (const auto& [id, vgpu] : earlier) {
    auto backoff = std::chrono::milliseconds(50);
    for (;;) {
      Status removed = RemoveVgpu(id, vgpu);
      // kGone: the record moved on meanwhile (a removal finished, the vGPU vanished).
      if (removed.ok() || removed.code() == ErrorCode::kGone) break;
      if (removed.code() != ErrorCode::kBusy || Clock::now() + backoff > deadline) {
        return Status::Error(removed.code(),
                             "device " + id + ": its earlier vGPU " + vgpu +
                                 " could not be removed for the new pod (" + removed.ToString() +
                                 "); the last pod's VM may still hold it, try again");
      }
      if (backoff.count() == 50) {
        spdlog::info("device {}: its earlier vGPU {} is still busy; waiting for the VM to let go",
                     id, vgpu);
      }
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
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

LifecycleSnapshot ResourceManager::Snapshot() const {
  std::lock_guard lock(mutex_);
  LifecycleSnapshot out;
  out.records = records_;
  out.removing = removing_;
  std::set<std::string> ours;
  for (const CreatedVgpu& r : records_) ours.insert(r.vgpu_id);
  for (const mdev::Vgpu& v : inventory_.vgpus) {
    out.existing.insert(v.id);
    if (!ours.contains(v.id)) out.foreign.push_back(v.id);
  }
  return out;
}

Status ResourceManager::SetOwners(const std::map<std::string, std::string>& owners) {
  std::lock_guard lock(mutex_);
  bool changed = false;
  for (CreatedVgpu& r : records_) {
    auto it = owners.find(r.device_id);
    if (it == owners.end() || r.owner_pod == it->second) continue;
    r.owner_pod = it->second;
    changed = true;
  }
  return changed ? SaveRecords() : Status::Ok();
}

void ResourceManager::SetRemovalWait(std::chrono::milliseconds wait) {
  std::lock_guard lock(mutex_);
  removal_wait_ = wait;
}

Status ResourceManager::RemoveVgpu(const std::string& device_id, const std::string& vgpu_id) {
  std::string resource;
  {
    std::lock_guard lock(mutex_);
    auto record = std::find_if(records_.begin(), records_.end(), [&](const CreatedVgpu& r) {
      return r.device_id == device_id && r.vgpu_id == vgpu_id;
    });
    if (record == records_.end()) {
      return Status::Error(ErrorCode::kGone, "device " + device_id + " no longer names vGPU " +
                                                 vgpu_id + " (handed out again or removed)");
    }
    if (!removing_.insert(device_id).second) {
      return Status::Error(ErrorCode::kBusy, "device " + device_id + ": a removal is in flight");
    }
    resource = record->resource;
  }
  Failpoint("remove.before-write");
  auto start = Clock::now();
  Status removed = node_.Remove(vgpu_id);
  if (observer_ != nullptr) observer_->OnVgpuRemoved(resource, Clock::now() - start, removed.ok());
  Failpoint("remove.after-write");
  bool gone = removed.ok() || removed.code() == ErrorCode::kGone;
  {
    std::lock_guard lock(mutex_);
    removing_.erase(device_id);
    if (gone) {
      std::erase_if(records_, [&](const CreatedVgpu& r) {
        return r.device_id == device_id && r.vgpu_id == vgpu_id;
      });
      // The kernel counts the instance free again. Without this the recompute below would list
      // one device fewer than kubelet was told (the highest free ID) until the rescan.
      DropVgpuFromView(vgpu_id);
      Status saved = SaveRecords();
      if (!saved.ok()) {
        spdlog::warn(
            "vgpu {} removed but the record not yet saved; the next save or start "
            "drops it (its vGPU is gone)",
            vgpu_id);
      }
      Recompute();  // an Allocate waiting for this removal must see the device free
    }
  }
  removal_done_.notify_all();
  if (!gone) return removed;
  spdlog::info("vgpu removed device={} vgpu={}", device_id, vgpu_id);
  // The freed slot and the type lock on the GPU: the kernel's counts say what is possible now.
  (void)Refresh();
  return Status::Ok();
}

Status ResourceManager::ForgetVgpu(const std::string& device_id, const std::string& vgpu_id) {
  bool changed = false;
  {
    std::lock_guard lock(mutex_);
    if (removing_.contains(device_id)) return Status::Error(ErrorCode::kBusy, "removal in flight");
    if (inventory_.FindVgpu(vgpu_id) != nullptr) {
      return Status::Error(ErrorCode::kBusy, "vGPU " + vgpu_id + " still exists");
    }
    changed = std::erase_if(records_, [&](const CreatedVgpu& r) {
                return r.device_id == device_id && r.vgpu_id == vgpu_id;
              }) > 0;
    if (changed) {
      Status saved = SaveRecords();
      if (!saved.ok()) return saved;
      Recompute();
    }
  }
  if (changed)
    spdlog::info("record dropped device={} vgpu={}: gone from sysfs", device_id, vgpu_id);
  AfterChange(changed);
  return Status::Ok();
}

}  // namespace kvgpu::deviceplugin
