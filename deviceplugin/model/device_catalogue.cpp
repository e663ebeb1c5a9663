#include "deviceplugin/model/device_catalogue.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "deviceplugin/model/resource_naming.h"

namespace kvgpu::deviceplugin {

namespace {

// SR-IOV: every VF shows each type it could host, but the GPU behind them hosts at most
// max_instance of a type (1 for an A100D-80C). Free devices per (GPU, type) stop there.
// Vendor VFIO: a VF lists a type while the GPU can make one more, so 16 free VFs list a type 16
// times on a GPU that takes 2. Its types have no description; the cap is what the GPU's rule
// admits (GpuRules::Cap: the probe's max instances, the instances or placements free), and
// where nothing says how many, one: the kernel's word is for one more, and the rescan after each
// create (Backend::ScanGpuRoom) lists the next.
std::map<std::pair<std::string, std::string>, uint32_t> VfBudgets(const mdev::Inventory& inventory,
                                                                  const GpuRules& rules) {
  std::map<std::pair<std::string, std::string>, uint32_t> budget;
  for (const mdev::Parent& parent : inventory.parents) {
    if (parent.flavour == mdev::Flavour::kVendorVfio) {
      for (const mdev::VgpuType& type : parent.types) {
        const auto key = std::make_pair(parent.physical_gpu, type.id);
        if (budget.contains(key)) continue;
        budget[key] = rules.Cap(parent.physical_gpu, type.id, inventory.vgpus).value_or(1);
      }
      continue;
    }
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

namespace {

using DevicesByParent = std::map<std::string, std::vector<Device>>;

// How many more instances of `type` may be listed on its parent: what the kernel says is
// available, less our vGPUs it no longer shows (their slots are still ours), within the VF
// budget of its physical GPU and within the type's maximum.
uint32_t FreeToList(const mdev::VgpuType& type, bool offered, uint32_t ours, uint32_t missing,
                    uint32_t* vf_budget) {
  uint32_t free =
      offered && type.available_instances > missing ? type.available_instances - missing : 0;
  if (vf_budget != nullptr) {
    free = std::min(free, *vf_budget);
    *vf_budget -= free;
  }
  // Never more than the type can hold on this parent: a count read a moment before the kernel
  // showed our newest vGPU (a cached or racing read) must not list one device too many.
  if (type.nvidia && type.nvidia->max_instance) {
    const uint32_t max = *type.nvidia->max_instance;
    const uint32_t held = ours - missing;
    free = std::min(free, max > held ? max - held : 0);
  }
  return free;
}

}  // namespace

// One pass of Rebuild: the free devices of every offered type, then ours, then what vanished
// parents listed, into the lists kubelet sees.
struct DeviceCatalogue::Pass {
  const mdev::Inventory& inventory;
  const std::vector<CreatedVgpu>& records;
  const ModelOptions& options;
  SlotsByType listed_slots;  // the free slots the lists hold now, kept first
  std::set<std::string> existing;
  std::map<std::pair<std::string, std::string>, uint32_t> vf_budget;
  std::map<std::string, std::vector<Device>> views;
  DevicesByParent by_parent;
  std::vector<std::string> warnings;

  void OfferType(const mdev::Parent& parent, const mdev::VgpuType& type) {
    std::vector<const CreatedVgpu*> ours;
    for (const CreatedVgpu& r : records) {
      if (r.parent == parent.name && r.type_id == type.id) ours.push_back(&r);
    }
    const bool offered = Offered(options, inventory, parent, type);
    if (!offered && ours.empty()) return;
    Result<std::string> resource = ResourceNameFor(options.naming, type);
    if (!resource.ok()) {
      warnings.push_back(resource.status().message());
      return;
    }
    // Offered, even with no instance free now (its GPU locked to another type): the resource is
    // served and registered from the start, its list empty until the GPU frees up.
    views.try_emplace(*resource);
    std::set<uint32_t> used;
    uint32_t missing = 0;
    for (const CreatedVgpu* r : ours) {
      used.insert(r->slot);
      if (!existing.contains(r->vgpu_id)) ++missing;
    }
    auto budget = vf_budget.find({parent.physical_gpu, type.id});
    const uint32_t free = FreeToList(type, offered, static_cast<uint32_t>(ours.size()), missing,
                                     budget == vf_budget.end() ? nullptr : &budget->second);
    auto before = listed_slots.find({parent.name, type.id});
    for (uint32_t slot :
         PickFreeSlots(free, used, before == listed_slots.end() ? nullptr : &before->second)) {
      DeviceKey key{parent.name, type.id, slot};
      std::string id = MakeDeviceId(key);
      if (id.size() > kMaxDeviceIdLength) {
        warnings.push_back("type " + type.id + " of " + parent.name +
                           ": device IDs would exceed 63 characters; not offered");
        break;
      }
      by_parent[parent.name].push_back(
          Device{id, *resource, key, parent.physical_gpu, true, false, false, parent.numa_node});
    }
  }

  // Our vGPUs, wherever their parent is; those of a vanished parent are Unhealthy. Returns
  // their device IDs.
  std::set<std::string> AddOurs() {
    std::set<std::string> ids;
    for (const CreatedVgpu& r : records) {
      const mdev::Parent* parent = inventory.FindParent(r.parent);
      Device d{r.device_id,
               r.resource,
               DeviceKey{r.parent, r.type_id, r.slot},
               r.physical_gpu,
               parent != nullptr,
               true,
               existing.contains(r.vgpu_id),
               parent != nullptr ? parent->numa_node : std::nullopt};
      ids.insert(r.device_id);
      by_parent[r.parent].push_back(std::move(d));
    }
    return ids;
  }
};

DeviceCatalogue::SlotsByType DeviceCatalogue::ListedFreeSlots() {
  SlotsByType slots;
  for (const auto& [resource, devices] : views_) {
    for (const Device& d : devices) {
      if (!d.healthy) continue;
      slots[{d.key.parent, d.key.type_id}].insert(d.key.slot);
      advertised_.insert(d.id);  // bounded: one entry per slot ever offered
    }
  }
  return slots;
}

void DeviceCatalogue::KeepVanishedParents(Pass& pass, const std::set<std::string>& ours_ids) {
  for (auto& [parent_name, devices] : pass.by_parent) {
    if (pass.inventory.FindParent(parent_name) != nullptr) last_seen_[parent_name] = devices;
  }
  // Parents gone since an earlier scan: what they offered stays listed, Unhealthy, so kubelet
  // stops scheduling onto it without forgetting the devices.
  for (const auto& [parent_name, devices] : last_seen_) {
    if (pass.inventory.FindParent(parent_name) != nullptr) continue;
    for (Device d : devices) {
      if (ours_ids.contains(d.id)) continue;  // already listed from the record
      d.healthy = false;
      pass.by_parent[parent_name].push_back(std::move(d));
    }
  }
}

bool DeviceCatalogue::Publish(Pass& pass) {
  resource_of_.clear();
  for (auto& [parent_name, devices] : pass.by_parent) {
    for (Device& d : devices) {
      if (resource_of_.contains(d.id)) continue;
      resource_of_[d.id] = d.resource;
      pass.views[d.resource].push_back(std::move(d));
    }
  }
  for (auto& [resource, devices] : pass.views) {
    std::sort(devices.begin(), devices.end(),
              [](const Device& a, const Device& b) { return a.id < b.id; });
  }
  // A resource seen once keeps its (maybe empty) list, so its server can say "none left".
  for (const auto& [resource, devices] : views_) pass.views.try_emplace(resource);
  const bool changed = pass.views != views_;
  views_ = std::move(pass.views);
  for (const std::string& w : pass.warnings) {
    if (std::find(naming_warnings_.begin(), naming_warnings_.end(), w) == naming_warnings_.end()) {
      spdlog::error("naming: {}", w);
    }
  }
  naming_warnings_ = std::move(pass.warnings);
  return changed;
}

bool DeviceCatalogue::Rebuild(const mdev::Inventory& inventory,
                              const std::vector<CreatedVgpu>& records,
                              const ModelOptions& options) {
  Pass pass{inventory, records,
            options,   ListedFreeSlots(),
            {},        VfBudgets(inventory, RulesFor(inventory, options)),
            {},        {},
            {}};
  for (const mdev::Vgpu& v : inventory.vgpus) pass.existing.insert(v.id);
  for (const mdev::Parent& parent : inventory.parents) {
    pass.by_parent.try_emplace(parent.name);
    for (const mdev::VgpuType& type : parent.types) pass.OfferType(parent, type);
  }
  KeepVanishedParents(pass, pass.AddOurs());
  return Publish(pass);
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
