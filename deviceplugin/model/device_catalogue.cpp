#include "deviceplugin/model/device_catalogue.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "deviceplugin/model/resource_naming.h"

namespace kvgpu::deviceplugin {

namespace {

using SlotsByType = std::map<std::pair<std::string, std::string>, std::set<uint32_t>>;

// SR-IOV: every VF shows each type it could host, but the GPU behind them hosts at most
// max_instance of a type (1 for an A100D-80C). Free devices per (GPU, type) stop there.
std::map<std::pair<std::string, std::string>, uint32_t> VfBudgets(
    const mdev::Inventory& inventory) {
  std::map<std::pair<std::string, std::string>, uint32_t> budget;
  for (const mdev::Parent& parent : inventory.parents) {
    if (!parent.is_virtual_function) continue;
    for (const mdev::VgpuType& type : parent.types) {
      if (!type.nvidia || !type.nvidia->max_instance) continue;
      uint32_t made = 0;
      for (const mdev::Vgpu& v : inventory.vgpus) {
        if (v.physical_gpu == parent.physical_gpu && v.type_id == type.id) ++made;
      }
      uint32_t max = *type.nvidia->max_instance;
      budget.try_emplace({parent.physical_gpu, type.id}, max > made ? max - made : 0);
    }
  }
  return budget;
}

// `free` slots for a type: those listed before first, then the lowest unused; never one of
// `used` (our records).
std::vector<uint32_t> PickFreeSlots(uint32_t free, const std::set<uint32_t>& used,
                                    const std::set<uint32_t>* listed_before) {
  std::vector<uint32_t> slots;
  if (listed_before != nullptr) {
    for (uint32_t slot : *listed_before) {
      if (slots.size() < free && !used.contains(slot)) slots.push_back(slot);
    }
  }
  for (uint32_t slot = 0; slots.size() < free; ++slot) {
    if (!used.contains(slot) && std::find(slots.begin(), slots.end(), slot) == slots.end()) {
      slots.push_back(slot);
    }
  }
  std::sort(slots.begin(), slots.end());
  return slots;
}

}  // namespace

bool Offered(const ModelOptions& options, const mdev::Inventory& inventory,
             const mdev::Parent& parent, const mdev::VgpuType& type) {
  if (!options.allowed_types.empty() &&
      std::find(options.allowed_types.begin(), options.allowed_types.end(), type.id) ==
          options.allowed_types.end()) {
    return false;
  }
  if (options.pinning.empty()) return true;
  std::vector<std::string> models;
  for (const mdev::Parent& p : inventory.parents) {
    if (p.physical_gpu != parent.physical_gpu) continue;
    if (p.device_id) models.push_back(*p.device_id);
    for (const mdev::VgpuType& t : p.types) {
      if (t.profile) models.push_back(t.profile->gpu);
    }
  }
  const PinRule* pin = FindPin(options, parent.physical_gpu, models);
  if (pin == nullptr && parent.name != parent.physical_gpu) {
    pin = FindPin(options, parent.name, models);  // an operator may name the VF itself
  }
  return pin == nullptr || pin->type_id == type.id;
}

bool DeviceCatalogue::Rebuild(const mdev::Inventory& inventory,
                              const std::vector<CreatedVgpu>& records,
                              const ModelOptions& options) {
  SlotsByType listed_slots;
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
  for (const mdev::Vgpu& v : inventory.vgpus) existing.insert(v.id);
  std::vector<std::string> naming_warnings;
  auto vf_budget = VfBudgets(inventory);

  for (const mdev::Parent& parent : inventory.parents) {
    std::vector<Device>& parent_devices = by_parent[parent.name];
    for (const mdev::VgpuType& type : parent.types) {
      std::vector<const CreatedVgpu*> ours;
      for (const CreatedVgpu& r : records) {
        if (r.parent == parent.name && r.type_id == type.id) ours.push_back(&r);
      }
      const bool offered = Offered(options, inventory, parent, type);
      if (!offered && ours.empty()) continue;
      Result<std::string> resource = ResourceNameFor(options.naming, type);
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
      uint32_t free =
          offered && type.available_instances > missing ? type.available_instances - missing : 0;
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
      auto before = listed_slots.find({parent.name, type.id});
      for (uint32_t slot :
           PickFreeSlots(free, used, before == listed_slots.end() ? nullptr : &before->second)) {
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
  for (const CreatedVgpu& r : records) {
    Device d{r.device_id,
             r.resource,
             DeviceKey{r.parent, r.type_id, r.slot},
             r.physical_gpu,
             inventory.FindParent(r.parent) != nullptr,
             true,
             existing.contains(r.vgpu_id)};
    ours_ids.insert(r.device_id);
    by_parent[r.parent].push_back(std::move(d));
  }
  for (auto& [parent_name, devices] : by_parent) {
    if (inventory.FindParent(parent_name) != nullptr) last_seen_[parent_name] = devices;
  }
  // Parents gone since an earlier scan: what they offered stays listed, Unhealthy, so kubelet
  // stops scheduling onto it without forgetting the devices.
  for (const auto& [parent_name, devices] : last_seen_) {
    if (inventory.FindParent(parent_name) != nullptr) continue;
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
  const bool changed = views != views_;
  views_ = std::move(views);
  for (const std::string& w : naming_warnings) {
    if (std::find(naming_warnings_.begin(), naming_warnings_.end(), w) == naming_warnings_.end()) {
      spdlog::error("naming: {}", w);
    }
  }
  naming_warnings_ = std::move(naming_warnings);
  return changed;
}

std::vector<std::string> DeviceCatalogue::Resources() const {
  std::vector<std::string> out;
  for (const auto& [resource, devices] : views_) out.push_back(resource);
  return out;
}

const std::vector<Device>& DeviceCatalogue::Devices(const std::string& resource) const {
  static const std::vector<Device> kNone;
  auto it = views_.find(resource);
  return it == views_.end() ? kNone : it->second;
}

const Device* DeviceCatalogue::Find(const std::string& resource, const std::string& id) const {
  const std::vector<Device>& devices = Devices(resource);
  auto it =
      std::lower_bound(devices.begin(), devices.end(), id,
                       [](const Device& d, const std::string& wanted) { return d.id < wanted; });
  return it == devices.end() || it->id != id ? nullptr : &*it;
}

std::optional<std::string> DeviceCatalogue::ResourceOf(const std::string& id) const {
  auto it = resource_of_.find(id);
  if (it == resource_of_.end()) return std::nullopt;
  return it->second;
}

void DeviceCatalogue::MarkAllocated(const std::string& resource, const std::string& id) {
  auto view = views_.find(resource);
  if (view == views_.end()) return;
  auto it =
      std::lower_bound(view->second.begin(), view->second.end(), id,
                       [](const Device& d, const std::string& wanted) { return d.id < wanted; });
  if (it == view->second.end() || it->id != id) return;
  it->ours = true;
  it->vgpu_exists = true;
}

std::map<std::string, DeviceCounts> DeviceCatalogue::Counts() const {
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

}  // namespace kvgpu::deviceplugin
