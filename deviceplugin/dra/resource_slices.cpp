#include "deviceplugin/dra/resource_slices.h"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <map>

#include "deviceplugin/model/device_catalogue.h"

namespace kvgpu::deviceplugin::dra {

namespace {

using nlohmann::json;

constexpr const char* kApiVersion = "resource.k8s.io/v1";
constexpr const char* kFramebufferCounter = "framebuffer";

std::string Lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

struct TypeOnGpu {
  const mdev::VgpuType* type = nullptr;  // as the first parent listing it shows it
  uint32_t parents = 0;                  // parents of the GPU that list it
  uint32_t available = 0;                // the kernel's counts, summed
  uint32_t existing = 0;                 // vGPUs of it on the GPU
};

struct GpuFacts {
  const mdev::Parent* first = nullptr;  // the PF where it is a parent, else the first VF
  bool virtual_functions = false;       // vGPUs are made on VFs, one per VF
  std::map<std::string, TypeOnGpu> types;
};

std::map<std::string, GpuFacts> FactsOf(const mdev::Inventory& inventory,
                                        const ModelOptions& model) {
  std::map<std::string, GpuFacts> gpus;
  for (const mdev::Parent& parent : inventory.parents) {
    GpuFacts& gpu = gpus[parent.physical_gpu];
    if (gpu.first == nullptr || parent.name == parent.physical_gpu) gpu.first = &parent;
    gpu.virtual_functions = gpu.virtual_functions || parent.is_virtual_function ||
                            parent.flavour == mdev::Flavour::kVendorVfio;
    for (const mdev::VgpuType& type : parent.types) {
      if (!Offered(model, inventory, parent, type)) continue;
      TypeOnGpu& facts = gpu.types[type.id];
      if (facts.type == nullptr) facts.type = &type;
      ++facts.parents;
      facts.available += type.available_instances;
    }
  }
  for (const mdev::Vgpu& vgpu : inventory.vgpus) {
    auto gpu = gpus.find(vgpu.physical_gpu);
    if (gpu == gpus.end()) continue;
    auto type = gpu->second.types.find(vgpu.type_id);
    if (type != gpu->second.types.end()) ++type->second.existing;
  }
  return gpus;
}

// The framebuffer of the whole GPU: what its largest offering (size x most instances) covers.
uint64_t GpuFramebuffer(const std::string& gpu, const GpuFacts& facts, const GpuRules& rules) {
  uint64_t total = 0;
  for (const auto& [id, type] : facts.types) {
    const uint64_t size = rules.FramebufferOf(gpu, id);
    const uint32_t most = std::max<uint32_t>(1, rules.MaxInstancesOf(gpu, id));
    total = std::max(total, size * most);
  }
  return total;
}

// The most vGPUs of a type the GPU can host at once.
uint32_t MostOf(const std::string& gpu, const std::string& id, const TypeOnGpu& type,
                const GpuFacts& facts, const GpuRules& rules, uint64_t gpu_framebuffer) {
  uint32_t most = rules.MaxInstancesOf(gpu, id);
  const uint64_t size = rules.FramebufferOf(gpu, id);
  if (most == 0 && size > 0 && gpu_framebuffer > 0) {
    most = static_cast<uint32_t>(gpu_framebuffer / size);
  }
  // Without a description or a size only the kernel's counts tell (mtty).
  if (most == 0) most = type.available + type.existing;
  if (facts.virtual_functions) most = std::min(most, type.parents);
  return most;
}

}  // namespace

bool IsDnsLabel(const std::string& name) {
  if (name.empty() || name.size() > 63) return false;
  for (char c : name) {
    if (!(std::islower(static_cast<unsigned char>(c)) ||
          std::isdigit(static_cast<unsigned char>(c)) || c == '-')) {
      return false;
    }
  }
  return name.front() != '-' && name.back() != '-';
}

bool IsDnsSubdomain(const std::string& name) {
  if (name.empty() || name.size() > 253) return false;
  size_t start = 0;
  while (true) {
    const size_t dot = name.find('.', start);
    const std::string label = name.substr(start, dot == std::string::npos ? dot : dot - start);
    if (!IsDnsLabel(label)) return false;
    if (dot == std::string::npos) return true;
    start = dot + 1;
  }
}

bool IsCIdentifier(const std::string& name) {
  if (name.empty()) return false;
  if (std::isdigit(static_cast<unsigned char>(name.front()))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
  });
}

Status ValidateDriverName(const std::string& driver) {
  if (driver.size() > kDriverNameMaxLength || !IsDnsSubdomain(driver)) {
    return Status::Error(ErrorCode::kConfig,
                         "DRA driver name \"" + driver +
                             "\" is not a lower-case DNS subdomain of at most 63 characters");
  }
  return {};
}

Result<Catalogue> BuildCatalogue(const mdev::Inventory& inventory, const GpuRules& rules,
                                 const SliceOptions& options) {
  Catalogue catalogue;
  const std::map<std::string, GpuFacts> gpus = FactsOf(inventory, options.model);
  std::set<std::string> names;
  for (const auto& [gpu, facts] : gpus) {
    if (facts.types.empty()) continue;
    const std::string gpu_key = DraGpuKey(gpu);
    if (!IsDnsLabel(gpu_key)) {
      return Status::Error(ErrorCode::kInvalid,
                           "GPU \"" + gpu + "\" makes no DNS label for its devices");
    }
    const uint64_t gpu_framebuffer = GpuFramebuffer(gpu, facts, rules);
    CounterSet set;
    if (gpu_framebuffer > 0) {
      // vGPUs no claim holds take their framebuffer from what the devices may draw.
      uint64_t used = 0;
      for (const mdev::Vgpu& vgpu : inventory.vgpus) {
        if (vgpu.physical_gpu != gpu || options.claimed_vgpus.contains(vgpu.id)) continue;
        used += rules.FramebufferOf(gpu, vgpu.type_id);
      }
      set = {gpu_key, gpu, gpu_framebuffer - std::min(used, gpu_framebuffer)};
      catalogue.counter_sets.push_back(set);
    }
    for (const auto& [id, type] : facts.types) {
      const uint32_t most = MostOf(gpu, id, type, facts, rules, gpu_framebuffer);
      if (DraSanitize(id).empty()) {
        return Status::Error(ErrorCode::kInvalid,
                             "vGPU type \"" + id + "\" makes no DNS label for its devices");
      }
      for (uint32_t slot = 0; slot < most; ++slot) {
        DraDevice device;
        device.name = DraDeviceName(gpu, id, slot);
        if (!names.insert(device.name).second) {
          return Status::Error(ErrorCode::kInvalid, "two vGPU types of GPU " + gpu +
                                                        " make the device name " + device.name);
        }
        device.physical_gpu = gpu;
        device.slot = slot;
        device.type_id = id;
        device.type_name = type.type->name;
        if (type.type->profile) {
          device.profile = type.type->profile->profile;
          device.gpu_model = type.type->profile->gpu;
          device.mig_slices = type.type->profile->mig_slices;
        }
        device.pci_device_id = facts.first->device_id;
        device.pci = facts.first->is_pci;
        device.numa_node = facts.first->numa_node;
        device.pcie_root = facts.first->pcie_root;
        device.flavour = facts.first->flavour;
        device.occupancy = rules.OccupancyOf(gpu);
        device.framebuffer_mib = rules.FramebufferOf(gpu, id);
        if (device.framebuffer_mib > 0 && !set.name.empty()) device.counter_set = set.name;
        catalogue.devices.push_back(std::move(device));
      }
    }
  }
  return catalogue;
}

mdev::Inventory TypeMemory::Remember(const mdev::Inventory& inventory) {
  mdev::Inventory out = inventory;
  for (mdev::Parent& parent : out.parents) {
    std::map<std::string, mdev::VgpuType>& seen = types_[parent.name];
    for (const mdev::VgpuType& type : parent.types) seen[type.id] = type;
    for (const auto& [id, type] : seen) {
      const bool listed = std::any_of(parent.types.begin(), parent.types.end(),
                                      [&](const mdev::VgpuType& t) { return t.id == id; });
      if (listed) continue;
      mdev::VgpuType remembered = type;
      remembered.available_instances = 0;
      parent.types.push_back(std::move(remembered));
    }
  }
  return out;
}

std::vector<DraDevice> Narrow(const std::vector<DraDevice>& devices,
                              const mdev::Inventory& inventory, const GpuRules& rules,
                              const std::vector<std::string>& held) {
  // The lock of each GPU that carries a vGPU: the first vGPU's, as GpuSlots::LockTo takes it.
  std::map<std::string, std::string> locks;
  for (const mdev::Vgpu& vgpu : inventory.vgpus) {
    if (locks.contains(vgpu.physical_gpu)) continue;
    locks[vgpu.physical_gpu] = rules.LockKey(vgpu.physical_gpu, vgpu.type_id);
  }
  // Then what confirmed claims will make: the confirmer joined them by the same rule.
  const std::set<std::string> held_names(held.begin(), held.end());
  for (const DraDevice& device : devices) {
    if (!held_names.contains(device.name) || locks.contains(device.physical_gpu)) continue;
    locks[device.physical_gpu] = rules.LockKey(device.physical_gpu, device.type_id);
  }
  std::vector<DraDevice> kept;
  for (const DraDevice& device : devices) {
    auto lock = locks.find(device.physical_gpu);
    if (lock != locks.end() && !lock->second.empty() &&
        rules.LockKey(device.physical_gpu, device.type_id) != lock->second) {
      continue;
    }
    kept.push_back(device);
  }
  return kept;
}

namespace {

// A quantity of `mib` MiB in the API's canonical form (the largest binary suffix that keeps it
// whole: "16Gi", "1536Mi"), which is how the API server writes it back; anything else would read
// back different and be rewritten at every pass.
std::string Mi(uint64_t mib) {
  if (mib == 0) return "0";
  static constexpr const char* kSuffixes[] = {"Mi", "Gi", "Ti", "Pi", "Ei"};
  size_t suffix = 0;
  while (mib % 1024 == 0 && suffix + 1 < std::size(kSuffixes)) {
    mib /= 1024;
    ++suffix;
  }
  return std::to_string(mib) + kSuffixes[suffix];
}

json StringAttribute(const std::string& value) {
  return {{"string", value}};
}

json DeviceJson(const DraDevice& device, bool binding_conditions, bool compatibility_groups) {
  json attributes = {
      {"type", StringAttribute(device.type_id)},
      {"physicalGpu", StringAttribute(device.physical_gpu)},
      {"backend", StringAttribute(mdev::FlavourName(device.flavour))},
      {"occupancy", StringAttribute(scheduling::OccupancyName(device.occupancy))},
  };
  if (device.type_name) attributes["typeName"] = StringAttribute(*device.type_name);
  if (device.profile) attributes["profile"] = StringAttribute(*device.profile);
  if (device.gpu_model) attributes["gpuModel"] = StringAttribute(*device.gpu_model);
  if (device.mig_slices > 0) attributes["migSlices"] = {{"int", device.mig_slices}};
  if (device.pci_device_id) attributes["pciDeviceId"] = StringAttribute(*device.pci_device_id);
  if (device.pci) attributes[kPciBusIdAttribute] = StringAttribute(device.physical_gpu);
  if (device.pcie_root) attributes[kPcieRootAttribute] = StringAttribute(*device.pcie_root);
  if (device.numa_node) attributes["numaNode"] = {{"int", *device.numa_node}};
  // Strings longer than the API takes are left out rather than cut: a cut value would match
  // selectors it should not.
  for (auto it = attributes.begin(); it != attributes.end();) {
    if (it.value().contains("string") &&
        it.value()["string"].get<std::string>().size() > kMaxAttributeValueLength) {
      it = attributes.erase(it);
    } else {
      ++it;
    }
  }
  json out = {{"name", device.name}, {"attributes", attributes}};
  if (device.framebuffer_mib > 0) {
    out["capacity"] = {{"framebuffer", {{"value", Mi(device.framebuffer_mib)}}}};
  }
  if (!device.counter_set.empty()) {
    json use = {{"counterSet", device.counter_set},
                {"counters", {{kFramebufferCounter, {{"value", Mi(device.framebuffer_mib)}}}}}};
    if (compatibility_groups) {
      if (std::vector<std::string> groups = CompatibilityGroups(device); !groups.empty()) {
        use["compatibilityGroups"] = groups;
      }
    }
    out["consumesCounters"] = json::array({use});
  }
  if (binding_conditions) {
    out["bindingConditions"] = json::array({kOccupancyConfirmed});
    out["bindingFailureConditions"] = json::array({kOccupancyConflict});
  }
  return out;
}

// "<driver>-<suffix>.<node>": the first label says what the slice holds, the node's own labels
// follow unchanged; a node name too long for that is replaced by its hash.
std::string SliceName(const SliceOptions& options, const std::string& suffix) {
  const std::string label = DraFit(DraSanitize(options.driver) + "-" + suffix, 63);
  const std::string node = Lower(options.node_name);
  if (label.size() + 1 + node.size() <= 253) return label + "." + node;
  return label + ".node-" + DraShortHash(node);
}

json SliceJson(const SliceOptions& options, const std::string& name) {
  return {
      {"apiVersion", kApiVersion},
      {"kind", "ResourceSlice"},
      {"metadata", {{"name", name}}},
      {"spec",
       {{"driver", options.driver},
        {"nodeName", options.node_name},
        {"pool", {{"name", options.node_name}, {"generation", 0}, {"resourceSliceCount", 0}}}}}};
}

}  // namespace

Result<std::vector<json>> SlicesFor(const Catalogue& catalogue, const SliceOptions& options,
                                    int64_t generation) {
  if (Status driver = ValidateDriverName(options.driver); !driver.ok()) return driver;
  if (!IsDnsSubdomain(options.node_name)) {
    return Status::Error(ErrorCode::kInvalid,
                         "node name \"" + options.node_name + "\" is not a DNS subdomain");
  }
  std::vector<json> slices;
  for (size_t i = 0; i < catalogue.counter_sets.size(); i += kMaxCounterSetsPerSlice) {
    json slice = SliceJson(
        options, SliceName(options, "counters-" + std::to_string(i / kMaxCounterSetsPerSlice)));
    json sets = json::array();
    for (size_t j = i; j < std::min(i + kMaxCounterSetsPerSlice, catalogue.counter_sets.size());
         ++j) {
      const CounterSet& set = catalogue.counter_sets[j];
      sets.push_back({{"name", set.name},
                      {"counters", {{kFramebufferCounter, {{"value", Mi(set.framebuffer_mib)}}}}}});
    }
    slice["spec"]["sharedCounters"] = sets;
    slices.push_back(std::move(slice));
  }
  // Each GPU's devices in their own slices.
  std::map<std::string, std::vector<const DraDevice*>> by_gpu;
  for (const DraDevice& device : catalogue.devices) by_gpu[device.physical_gpu].push_back(&device);
  for (const auto& [gpu, devices] : by_gpu) {
    const bool counters = std::any_of(devices.begin(), devices.end(),
                                      [](const DraDevice* d) { return !d->counter_set.empty(); });
    const size_t per_slice = counters ? kMaxDevicesPerSliceConsumingCounters : kMaxDevicesPerSlice;
    for (size_t i = 0; i < devices.size(); i += per_slice) {
      json slice = SliceJson(
          options, SliceName(options, DraGpuKey(gpu) + "-" + std::to_string(i / per_slice)));
      json list = json::array();
      for (size_t j = i; j < std::min(i + per_slice, devices.size()); ++j) {
        list.push_back(
            DeviceJson(*devices[j], options.binding_conditions, options.compatibility_groups));
      }
      slice["spec"]["devices"] = list;
      slices.push_back(std::move(slice));
    }
  }
  for (json& slice : slices) {
    slice["spec"]["pool"]["generation"] = generation;
    slice["spec"]["pool"]["resourceSliceCount"] = static_cast<int64_t>(slices.size());
  }
  if (Status pool = ValidatePool(slices); !pool.ok()) return pool;
  return slices;
}

Result<std::vector<json>> BuildResourceSlices(const mdev::Inventory& inventory,
                                              const GpuRules& rules, const SliceOptions& options,
                                              int64_t generation) {
  Result<Catalogue> catalogue = BuildCatalogue(inventory, rules, options);
  if (!catalogue.ok()) return catalogue.status();
  if (options.narrow) {
    catalogue->devices = Narrow(catalogue->devices, inventory, rules, options.held_devices);
  }
  return SlicesFor(*catalogue, options, generation);
}

json DeviceAttributes(const DraDevice& device) {
  return DeviceJson(device, false, false)["attributes"];
}

std::vector<std::string> CompatibilityGroups(const DraDevice& device) {
  // "type:nvidia-222" -> "type-nvidia-222", "framebuffer:1024MiB" -> "framebuffer-1024mib".
  const auto label = [](const std::string& key) { return DraFit(DraSanitize(key), 63); };
  const std::string lock =
      scheduling::LockKey(device.occupancy, device.type_id, device.framebuffer_mib);
  if (lock.empty()) return {};
  const std::string type =
      scheduling::LockKey(scheduling::Occupancy::kStrict, device.type_id, device.framebuffer_mib);
  if (lock == type) return {label(type)};
  return {label(lock), label(type)};
}

}  // namespace kvgpu::deviceplugin::dra
