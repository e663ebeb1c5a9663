// Discovery: parents, types and existing vGPUs as sysfs shows them.
#include <algorithm>
#include <cctype>
#include <charconv>

#include "mdev/backend_kit.h"
#include "mdev/nvidia.h"
#include "mdev/sysfs_backend.h"
#include "mdev/sysfs_internal.h"
#include "mdev/uuid.h"

namespace kvgpu::mdev {

namespace {

// "dddd:bb:dd.f" in hex, the form sysfs names PCI functions by.
bool LooksLikePciAddress(const std::string& name) {
  constexpr std::string_view kShape = "hhhh:hh:hh.f";
  if (name.size() != kShape.size()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    switch (kShape[i]) {
      case 'h':
        if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
        break;
      case 'f':
        if (c < '0' || c > '7') return false;
        break;
      default:
        if (c != kShape[i]) return false;
    }
  }
  return true;
}

std::optional<std::string> OptionalAttribute(SysfsIo& io, const fs::path& path) {
  if (!io.Exists(path)) return std::nullopt;
  auto value = ReadAttribute(io, path);
  if (!value.ok()) return std::nullopt;
  return *value;
}

}  // namespace

namespace internal {

std::optional<uint32_t> ParseUnsigned(std::string_view text) {
  uint32_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

// Identity of a PCI device (or virtual parent) shared by both flavours.
void FillDeviceIdentity(SysfsIo& io, const fs::path& dir, Parent& parent) {
  auto subsystem = LinkName(io, dir / "subsystem");
  parent.is_pci = subsystem.ok() ? *subsystem == "pci" : LooksLikePciAddress(parent.name);
  parent.physical_gpu = parent.name;
  if (io.Exists(dir / "physfn")) {
    auto pf = LinkName(io, dir / "physfn");
    if (pf.ok()) {
      parent.is_virtual_function = true;
      parent.physical_gpu = *pf;
    }
  }
  parent.vendor_id = OptionalAttribute(io, dir / "vendor");
  parent.device_id = OptionalAttribute(io, dir / "device");
  if (io.Exists(dir / "driver")) {
    auto driver = LinkName(io, dir / "driver");
    if (driver.ok()) parent.driver = *driver;
  }
  if (!parent.is_pci) return;
  // A missing or odd numa_node (an older kernel, a non-NUMA build) just leaves it unknown.
  if (std::optional<std::string> numa = OptionalAttribute(io, dir / "numa_node")) {
    int32_t node = -1;
    auto [end, ec] = std::from_chars(numa->data(), numa->data() + numa->size(), node);
    if (ec == std::errc() && end == numa->data() + numa->size() && node >= 0) {
      parent.numa_node = node;
    }
  }
  if (auto real = io.Canonical(dir); real.ok()) parent.pcie_root = PcieRootOfPath(real->string());
}

std::optional<uint32_t> IommuGroup(SysfsIo& io, const fs::path& device_dir) {
  auto group = LinkName(io, device_dir / "iommu_group");
  if (!group.ok()) return std::nullopt;
  return ParseUnsigned(*group);
}

Result<VgpuType> ReadMdevType(SysfsIo& io, const fs::path& type_dir) {
  VgpuType type;
  type.id = type_dir.filename().string();
  type.name = OptionalAttribute(io, type_dir / "name");
  type.description = OptionalAttribute(io, type_dir / "description");
  auto api = ReadAttribute(io, type_dir / "device_api");
  if (!api.ok()) return api.status();
  type.device_api = *api;
  auto available = ReadAttribute(io, type_dir / "available_instances");
  if (!available.ok()) return available.status();
  auto count = ParseUnsigned(*available);
  if (!count) {
    return Status::Error(ErrorCode::kInvalid, (type_dir / "available_instances").string() +
                                                  " holds '" + *available + "', not a count");
  }
  type.available_instances = *count;
  FillNvidiaDetails(type);
  return type;
}

Result<Vgpu> ReadMdevDevice(SysfsIo& io, const fs::path& devices_dir, const std::string& uuid,
                            const std::vector<Parent>& parents) {
  fs::path link = devices_dir / uuid;
  auto real = io.Canonical(link);
  if (!real.ok()) return real.status();
  Vgpu vgpu;
  vgpu.id = uuid;
  vgpu.flavour = Flavour::kMdev;
  vgpu.parent = real->parent_path().filename().string();
  auto type = LinkName(io, link / "mdev_type");
  if (!type.ok()) return type.status();
  vgpu.type_id = *type;
  vgpu.physical_gpu = vgpu.parent;
  for (const auto& parent : parents) {
    if (parent.name != vgpu.parent) continue;
    vgpu.physical_gpu = parent.physical_gpu;
    for (const auto& t : parent.types) {
      if (t.id == vgpu.type_id) vgpu.type_name = t.name;
    }
  }
  if (!vgpu.type_name) {
    vgpu.type_name = OptionalAttribute(io, link / "mdev_type" / "name");
  }
  vgpu.iommu_group = IommuGroup(io, link);
  vgpu.vfio_device = kit::VfioDevicePath(vgpu.iommu_group);
  return vgpu;
}

}  // namespace internal

namespace {

// One order for every scan, whole or of one GPU: parents by name, vGPUs by id.
void SortInventory(Inventory& inventory) {
  auto by_name = [](const auto& a, const auto& b) { return a.name < b.name; };
  std::sort(inventory.parents.begin(), inventory.parents.end(), by_name);
  std::sort(inventory.vgpus.begin(), inventory.vgpus.end(),
            [](const Vgpu& a, const Vgpu& b) { return a.id < b.id; });
}

}  // namespace

SysfsBackend::SysfsBackend(fs::path root, SysfsIo& io, SysfsBackendOptions options)
    : root_(std::move(root)), io_(io), options_(options) {}

fs::path SysfsBackend::MdevBusDir() const {
  return root_ / "sys/class/mdev_bus";
}
fs::path SysfsBackend::MdevDevicesDir() const {
  return root_ / "sys/bus/mdev/devices";
}
fs::path SysfsBackend::PciDevicesDir() const {
  return root_ / "sys/bus/pci/devices";
}

Result<Inventory> SysfsBackend::Scan() {
  if (!io_.IsDirectory(root_ / "sys")) {
    return Status::Error(ErrorCode::kGone,
                         "no sysfs at " + (root_ / "sys").string() + ": check --sysfs-root");
  }
  Inventory inventory;
  for (auto step : {&SysfsBackend::ScanMdevParents, &SysfsBackend::ScanVendorVfio,
                    &SysfsBackend::ScanMdevDevices}) {
    Status status = (this->*step)(inventory);
    if (!status.ok()) return status;
  }
  SortInventory(inventory);
  return inventory;
}

Status SysfsBackend::ScanMdevParents(Inventory& inventory) {
  fs::path bus = MdevBusDir();
  if (!io_.Exists(bus)) return Status::Ok();  // no mdev driver loaded: nothing to offer
  auto names = io_.ListDir(bus);
  if (!names.ok()) return names.status();
  for (const auto& name : *names) ReadMdevParent(name, inventory);
  return Status::Ok();
}

void SysfsBackend::ReadMdevParent(const std::string& name, Inventory& inventory) {
  fs::path dir = MdevBusDir() / name;
  Parent parent;
  parent.name = name;
  parent.flavour = Flavour::kMdev;
  internal::FillDeviceIdentity(io_, dir, parent);
  auto type_ids = io_.ListDir(dir / "mdev_supported_types");
  if (!type_ids.ok()) {
    inventory.warnings.push_back("parent " + name + " skipped: " + type_ids.status().message());
    return;
  }
  for (const auto& type_id : *type_ids) {
    auto type = internal::ReadMdevType(io_, dir / "mdev_supported_types" / type_id);
    if (!type.ok()) {
      inventory.warnings.push_back("type " + type_id + " of " + name +
                                   " skipped: " + type.status().message());
      continue;
    }
    parent.types.push_back(std::move(*type));
  }
  inventory.parents.push_back(std::move(parent));
}

Status SysfsBackend::ScanMdevDevices(Inventory& inventory) {
  fs::path devices = MdevDevicesDir();
  if (!io_.Exists(devices)) return Status::Ok();
  auto names = io_.ListDir(devices);
  if (!names.ok()) return names.status();
  for (const auto& name : *names) {
    if (!IsValidUuid(name)) {
      inventory.warnings.push_back("mdev entry '" + name + "' is not a UUID; ignored");
      continue;
    }
    auto vgpu = internal::ReadMdevDevice(io_, devices, name, inventory.parents);
    if (!vgpu.ok()) {
      // The device may have been removed between listing and reading: not worth a failure.
      inventory.warnings.push_back("mdev " + name + " skipped: " + vgpu.status().message());
      continue;
    }
    inventory.vgpus.push_back(std::move(*vgpu));
  }
  return Status::Ok();
}

Status SysfsBackend::ScanVendorVfio(Inventory& inventory) {
  fs::path pci = PciDevicesDir();
  if (!io_.Exists(pci)) return Status::Ok();
  auto names = io_.ListDir(pci);
  if (!names.ok()) return names.status();
  for (const auto& name : *names) {
    if (io_.Exists(pci / name / "nvidia" / "creatable_vgpu_types")) {
      ReadVendorVfioVf(name, inventory);
    }
  }
  NameVendorVfioVgpus(inventory);
  return Status::Ok();
}

Result<Inventory> SysfsBackend::ScanGpu(const std::string& physical_gpu) {
  if (!LooksLikePciAddress(physical_gpu)) {
    return Status::Error(ErrorCode::kInvalid, "'" + physical_gpu + "' is not a PCI address");
  }
  fs::path pf = PciDevicesDir() / physical_gpu;
  auto entries = io_.ListDir(pf);
  if (!entries.ok()) return entries.status();
  Inventory inventory;
  // The GPU itself and the VFs its virtfn<N> links name (drivers/pci/iov.c): only they can change
  // with a write to one of them. Each is an mdev parent (in the mdev bus directory) or a vendor
  // VFIO VF, as the full scan reads them.
  std::vector<std::string> functions = {physical_gpu};
  for (const auto& entry : *entries) {
    if (entry.rfind("virtfn", 0) != 0) continue;
    if (auto vf = LinkName(io_, pf / entry); vf.ok()) functions.push_back(*vf);
  }
  bool mdev_parents = false;
  for (const std::string& function : functions) {
    if (io_.Exists(MdevBusDir() / function)) {
      ReadMdevParent(function, inventory);
      mdev_parents = true;
    } else if (io_.Exists(PciDevicesDir() / function / "nvidia" / "creatable_vgpu_types")) {
      ReadVendorVfioVf(function, inventory);
    }
  }
  if (mdev_parents) {
    // The mdevs on those parents: the bus lists every parent's, the others are dropped.
    if (Status read = ScanMdevDevices(inventory); !read.ok()) return read;
    std::erase_if(inventory.vgpus, [&](const Vgpu& vgpu) {
      return vgpu.flavour == Flavour::kMdev &&
             std::none_of(inventory.parents.begin(), inventory.parents.end(),
                          [&](const Parent& p) { return p.name == vgpu.parent; });
    });
  }
  NameVendorVfioVgpus(inventory);
  SortInventory(inventory);
  return inventory;
}

Result<Inventory> SysfsBackend::ScanGpuRoom(const std::string& physical_gpu,
                                            const Inventory& known) {
  Inventory inventory;
  for (const Parent& parent : known.parents) {
    if (parent.physical_gpu != physical_gpu) continue;
    if (parent.flavour == Flavour::kVendorVfio) {
      if (!ReadVendorVfioState(parent, inventory)) return ScanGpu(physical_gpu);
      continue;
    }
    Parent fresh = parent;
    const fs::path types = MdevBusDir() / parent.name / "mdev_supported_types";
    for (VgpuType& type : fresh.types) {
      auto available = ReadAttribute(io_, types / type.id / "available_instances");
      std::optional<uint32_t> count;
      if (available.ok()) count = internal::ParseUnsigned(*available);
      // Gone or odd: the GPU is not what the view says (a VF disabled, a driver reloaded).
      if (!count) return ScanGpu(physical_gpu);
      type.available_instances = *count;
    }
    inventory.parents.push_back(std::move(fresh));
  }
  if (inventory.parents.empty()) return ScanGpu(physical_gpu);
  for (const Vgpu& vgpu : known.vgpus) {
    if (vgpu.flavour == Flavour::kMdev && vgpu.physical_gpu == physical_gpu) {
      inventory.vgpus.push_back(vgpu);
    }
  }
  NameVendorVfioVgpus(inventory);
  SortInventory(inventory);
  return inventory;
}

void SysfsBackend::ReadVendorVfioVf(const std::string& name, Inventory& inventory) {
  Parent parent;
  parent.name = name;
  parent.flavour = Flavour::kVendorVfio;
  internal::FillDeviceIdentity(io_, PciDevicesDir() / name, parent);
  ReadVendorVfioState(std::move(parent), inventory);
}

bool SysfsBackend::ReadVendorVfioState(Parent parent, Inventory& inventory) {
  const std::string& name = parent.name;
  fs::path pci = PciDevicesDir();
  fs::path nvidia = pci / name / "nvidia";
  parent.types.clear();
  auto creatable_text = io_.ReadFile(nvidia / "creatable_vgpu_types");
  if (!creatable_text.ok()) {
    inventory.warnings.push_back("VF " + name + " skipped: " + creatable_text.status().message());
    return false;
  }
  auto creatable = ParseCreatableVgpuTypes(*creatable_text);
  if (!creatable.ok()) {
    inventory.warnings.push_back("VF " + name + " skipped: " + creatable.status().message());
    return false;
  }
  std::map<std::string, std::string> learned;
  for (const auto& [id, type_name] : *creatable) {
    learned[id] = type_name;
    VgpuType type;
    type.id = id;
    type.name = type_name;
    type.available_instances = 1;  // one vGPU per VF
    type.profile = ParseNvidiaProfile(type_name);
    parent.types.push_back(std::move(type));
  }
  RememberTypeNames(learned);

  auto current = ReadAttribute(io_, nvidia / "current_vgpu_type");
  if (!current.ok()) {
    inventory.warnings.push_back("VF " + name + ": " + current.status().message());
  } else if (auto type_id = internal::ParseUnsigned(*current); !type_id) {
    inventory.warnings.push_back("VF " + name + ": current_vgpu_type holds '" + *current +
                                 "', not a type id");
  } else if (*type_id != 0) {
    Vgpu vgpu;
    vgpu.id = name;
    vgpu.flavour = Flavour::kVendorVfio;
    vgpu.parent = name;
    vgpu.physical_gpu = parent.physical_gpu;
    vgpu.type_id = std::to_string(*type_id);
    vgpu.iommu_group = internal::IommuGroup(io_, pci / name);
    vgpu.vfio_device = kit::VfioDevicePath(vgpu.iommu_group);
    inventory.vgpus.push_back(std::move(vgpu));
  }
  inventory.parents.push_back(std::move(parent));
  return true;
}

void SysfsBackend::NameVendorVfioVgpus(Inventory& inventory) const {
  // Names come from any VF's creatable list, so they are looked up once every VF was read.
  for (auto& vgpu : inventory.vgpus) {
    if (vgpu.flavour == Flavour::kVendorVfio) vgpu.type_name = TypeName(vgpu.type_id);
  }
}

std::map<std::string, std::string> SysfsBackend::KnownTypeNames() const {
  std::lock_guard lock(names_mutex_);
  return vendor_type_names_;
}

void SysfsBackend::RememberTypeNames(const std::map<std::string, std::string>& names) {
  std::lock_guard lock(names_mutex_);
  for (const auto& [id, name] : names) vendor_type_names_[id] = name;
}

std::optional<std::string> SysfsBackend::TypeName(const std::string& type_id) const {
  std::lock_guard lock(names_mutex_);
  auto it = vendor_type_names_.find(type_id);
  if (it == vendor_type_names_.end()) return std::nullopt;
  return it->second;
}

}  // namespace kvgpu::mdev
