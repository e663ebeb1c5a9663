#include "deviceplugin/model/node_state.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace kvgpu::deviceplugin {

Status NodeState::Load() {
  Result<std::vector<CreatedVgpu>> records = store_.Load();
  if (!records.ok()) {
    return Status::Error(records.status().code(),
                         "cannot read the record of vGPUs this plugin created (" +
                             records.status().message() +
                             "); refusing to start rather than mistake them for someone else's");
  }
  records_ = std::move(*records);
  spdlog::info("state loaded vgpus={}", records_.size());
  return Status::Ok();
}

std::vector<std::string> NodeState::ReplaceInventory(mdev::Inventory inventory) {
  std::vector<std::string> fresh;
  for (const std::string& w : inventory.warnings) {
    if (std::find(inventory_.warnings.begin(), inventory_.warnings.end(), w) ==
        inventory_.warnings.end()) {
      fresh.push_back(w);
    }
  }
  inventory_ = std::move(inventory);
  inventory_known_ = true;
  return fresh;
}

const CreatedVgpu* NodeState::RecordFor(const std::string& device_id) const {
  auto it = std::find_if(records_.begin(), records_.end(),
                         [&](const CreatedVgpu& r) { return r.device_id == device_id; });
  return it == records_.end() ? nullptr : &*it;
}

Status NodeState::Record(CreatedVgpu record) {
  std::erase_if(records_, [&](const CreatedVgpu& r) { return r.device_id == record.device_id; });
  records_.push_back(std::move(record));
  Status saved = Save();
  if (!saved.ok()) records_.pop_back();
  return saved;
}

bool NodeState::Forget(const std::string& device_id, const std::string& vgpu_id) {
  return std::erase_if(records_, [&](const CreatedVgpu& r) {
           return r.device_id == device_id && r.vgpu_id == vgpu_id;
         }) > 0;
}

bool NodeState::StampCreated(const std::string& device_id, const std::string& vgpu_id,
                             int64_t now_unix_ms) {
  for (CreatedVgpu& r : records_) {
    if (r.device_id != device_id || r.vgpu_id != vgpu_id) continue;
    r.created_unix_ms = now_unix_ms;
    return true;
  }
  return false;
}

bool NodeState::SetOwners(const std::map<std::string, PodOwner>& owners) {
  bool changed = false;
  for (CreatedVgpu& r : records_) {
    auto it = owners.find(r.device_id);
    if (it == owners.end()) continue;
    const PodOwner& owner = it->second;
    if (r.owner_pod != owner.pod) {
      r.owner_pod = owner.pod;
      r.owner_uid.reset();
      changed = true;
    }
    if (!owner.uid.empty() && r.owner_uid != owner.uid) {
      r.owner_uid = owner.uid;
      changed = true;
    }
  }
  return changed;
}

Status NodeState::Save() {
  Status saved = store_.Save(records_);
  if (!saved.ok()) spdlog::error("state not saved: {}", saved.ToString());
  return saved;
}

mdev::VgpuType* NodeState::FindType(const std::string& parent, const std::string& type_id) {
  for (mdev::Parent& p : inventory_.parents) {
    if (p.name != parent) continue;
    for (mdev::VgpuType& type : p.types) {
      if (type.id == type_id) return &type;
    }
  }
  return nullptr;
}

void NodeState::VgpuCreated(const mdev::Vgpu& vgpu) {
  ++own_changes_;
  if (inventory_.FindVgpu(vgpu.id) != nullptr) return;  // a rescan already saw it
  inventory_.vgpus.push_back(vgpu);
  mdev::VgpuType* type = FindType(vgpu.parent, vgpu.type_id);
  if (type != nullptr && type->available_instances > 0) --type->available_instances;
}

void NodeState::VgpuRemoved(const std::string& vgpu_id) {
  auto v = std::find_if(inventory_.vgpus.begin(), inventory_.vgpus.end(),
                        [&](const mdev::Vgpu& x) { return x.id == vgpu_id; });
  ++own_changes_;
  if (v == inventory_.vgpus.end()) return;
  if (mdev::VgpuType* type = FindType(v->parent, v->type_id); type != nullptr) {
    ++type->available_instances;
  }
  inventory_.vgpus.erase(v);
}

namespace {

// Replaces the entries of `gpu` in `list` by those of `fresh`, where the first of them was.
template <typename T>
void ReplaceOf(std::vector<T>& list, const std::string& gpu, std::vector<T>& fresh) {
  auto of_gpu = [&](const T& x) { return x.physical_gpu == gpu; };
  auto first = std::find_if(list.begin(), list.end(), of_gpu);
  const auto at = first - list.begin();
  std::erase_if(list, of_gpu);
  std::erase_if(fresh, [&](const T& x) { return !of_gpu(x); });
  list.insert(list.begin() + std::min<std::ptrdiff_t>(at, std::ssize(list)),
              std::make_move_iterator(fresh.begin()), std::make_move_iterator(fresh.end()));
}

}  // namespace

void NodeState::RereadGpu(mdev::Backend& backend, const std::string& physical_gpu) {
  Result<mdev::Inventory> fresh = backend.ScanGpuRoom(physical_gpu, inventory_);
  if (!fresh.ok()) {
    spdlog::debug("siblings of {} not read again ({}); the rescan catches up", physical_gpu,
                  fresh.status().ToString());
    return;
  }
  ++own_changes_;  // a scan read before this is older than the view now
  ReplaceOf(inventory_.parents, physical_gpu, fresh->parents);
  ReplaceOf(inventory_.vgpus, physical_gpu, fresh->vgpus);
}

std::string NodeState::PhysicalGpuOf(const std::string& vgpu_id) const {
  const mdev::Vgpu* v = inventory_.FindVgpu(vgpu_id);
  return v != nullptr ? v->physical_gpu : "";
}

void NodeState::VgpuRemovedAndReread(mdev::Backend& backend, const std::string& vgpu_id) {
  const std::string gpu = PhysicalGpuOf(vgpu_id);
  VgpuRemoved(vgpu_id);
  if (!gpu.empty()) RereadGpu(backend, gpu);
}

LifecycleSnapshot NodeState::Snapshot(const std::set<std::string>& removing,
                                      const std::set<std::string>& allocating) const {
  LifecycleSnapshot out;
  out.records = records_;
  out.removing = removing;
  out.allocating = allocating;
  out.inventory_known = inventory_known_;
  std::set<std::string> ours;
  for (const CreatedVgpu& r : records_) ours.insert(r.vgpu_id);
  for (const mdev::Vgpu& v : inventory_.vgpus) {
    out.existing.insert(v.id);
    if (!ours.contains(v.id)) out.foreign.push_back(v.id);
  }
  return out;
}

}  // namespace kvgpu::deviceplugin
