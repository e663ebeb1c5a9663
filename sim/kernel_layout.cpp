// The tree the model lays out: PCI functions under their root ports, mdev parents and types,
// vendor-VFIO attributes, IOMMU groups and the bus/class links, as a 6.x kernel shows them.
#include <cctype>
#include <cstdio>
#include <string>
#include <system_error>
#include <tuple>

#include "sim/kernel_model.h"
#include "sim/model_internal.h"
#include "sim/tree.h"

namespace kvgpu::sim {

namespace {

// The host bridge (root complex) of a NUMA node: bus 00 for node 0 (and for "none"), bus 0x80
// for node 1, the split two-socket hosts commonly use; the simulated host has one per node.
unsigned RootBus(int32_t numa_node) {
  return numa_node > 0 ? 0x80u * unsigned(numa_node) : 0u;
}
std::string HostBridge(int32_t numa_node) {
  char name[16];
  std::snprintf(name, sizeof name, "pci0000:%02x", RootBus(numa_node) & 0xffu);
  return name;
}
// NVIDIA data-center GPUs enumerate as "3D controller".
constexpr const char* kGpuClass = "0x030200";

// "0x10de" -> "10DE", as uevent's PCI_ID spells it.
std::string UeventHex(const std::string& id) {
  std::string out = id.rfind("0x", 0) == 0 ? id.substr(2) : id;
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// The driver the mdev core binds an mdev to: NVIDIA registers its own vfio mdev driver.
std::string MdevDriver(const GpuSpec& gpu) {
  return gpu.kind == GpuKind::kVirtual ? gpu.driver : "nvidia-vgpu-vfio";
}

}  // namespace

fs::path KernelModel::DeviceDir(size_t gpu, const std::string& function) const {
  const GpuSpec& spec = profile_.gpus[gpu];
  if (spec.kind == GpuKind::kVirtual) {
    return SysDir() / "devices" / "virtual" / spec.address / spec.address;
  }
  return SysDir() / "devices" / HostBridge(spec.numa_node) / gpus_[gpu].bridge / function;
}

uint32_t KernelModel::AllocateIommuGroup() {
  // The kernel takes the lowest free number (ida_alloc); a freed group's number is reused.
  fs::path groups = SysDir() / "kernel" / "iommu_groups";
  uint32_t n = 0;
  std::error_code ec;
  while (fs::exists(groups / std::to_string(n), ec)) ++n;
  return n;
}

Status KernelModel::LayoutNode() {
  fs::path sys = SysDir();
  for (const char* dir :
       {"devices/virtual", "bus/pci/devices", "bus/pci/drivers", "kernel/iommu_groups", "class"}) {
    if (Status s = tree::MakeDirs(sys / dir); !s.ok()) return s;
  }
  if (Status s = tree::MakeDirs(real_root_ / kScratchDir); !s.ok()) return s;
  // A prepared node has KVM and vhost-vsock; the device plugin's readiness check looks for these
  // entries under the root it is given (device nodes on a host, plain files here).
  for (const char* node : {"dev/kvm", "dev/vhost-vsock"}) {
    if (Status s = tree::MakeDirs((real_root_ / node).parent_path()); !s.ok()) return s;
    if (Status s = tree::PutFile(real_root_ / node, "", tree::kReadOnly, real_root_ / kScratchDir);
        !s.ok()) {
      return s;
    }
  }
  bool any_mdev = false;
  for (const auto& gpu : profile_.gpus) any_mdev |= gpu.kind != GpuKind::kVendorVfio;
  // vGPU 17 hosts without any mdev parent do not load the mdev core: no mdev bus or class.
  if (any_mdev) {
    for (const char* dir : {"class/mdev_bus", "bus/mdev/devices", "bus/mdev/drivers"}) {
      if (Status s = tree::MakeDirs(sys / dir); !s.ok()) return s;
    }
  }

  if (Status s = LayoutHostKernel(any_mdev); !s.ok()) return s;

  unsigned slot = 1;
  for (size_t i = 0; i < profile_.gpus.size(); ++i) {
    const GpuSpec& spec = profile_.gpus[i];
    if (spec.kind != GpuKind::kVirtual) {
      // Each GPU sits below its own PCIe root port, which is in its own IOMMU group.
      char bridge[16];
      std::snprintf(bridge, sizeof bridge, "0000:%02x:%02x.0", RootBus(spec.numa_node) & 0xffu,
                    slot++);
      gpus_[i].bridge = bridge;
      fs::path dir = sys / "devices" / HostBridge(spec.numa_node) / bridge;
      if (Status s = tree::MakeDirs(dir); !s.ok()) return s;
      for (auto [name, value] :
           {std::pair{"vendor", "0x8086"}, {"device", "0x2030"}, {"class", "0x060400"}}) {
        Status s = tree::PutFile(dir / name, std::string(value) + "\n", tree::kReadOnly,
                                 real_root_ / kScratchDir);
        if (!s.ok()) return s;
      }
      uint32_t group = AllocateIommuGroup();
      fs::path group_dir = sys / "kernel" / "iommu_groups" / std::to_string(group);
      if (Status s = tree::MakeDirs(group_dir / "devices"); !s.ok()) return s;
      if (Status s = tree::Link(group_dir / "devices" / bridge, dir); !s.ok()) return s;
      if (Status s = tree::Link(dir / "iommu_group", group_dir); !s.ok()) return s;
      if (Status s = tree::Link(dir / "subsystem", sys / "bus" / "pci"); !s.ok()) return s;
      Status s = tree::Link(sys / "bus" / "pci" / "devices" / bridge, dir);
      if (!s.ok()) return s;
    }
    if (Status s = LayoutGpu(i); !s.ok()) return s;
  }
  return Status::Ok();
}

Status KernelModel::LayoutPciFunction(size_t gpu, const std::string& address, bool is_vf) {
  const GpuSpec& spec = profile_.gpus[gpu];
  fs::path sys = SysDir();
  fs::path dir = DeviceDir(gpu, address);
  fs::path scratch = real_root_ / kScratchDir;
  if (Status s = tree::MakeDirs(dir); !s.ok()) return s;
  std::string uevent = "DRIVER=" + spec.driver +
                       "\nPCI_CLASS=30200\nPCI_ID=" + UeventHex(spec.vendor_id) + ":" +
                       UeventHex(spec.device_id) + "\nPCI_SLOT_NAME=" + address + "\n";
  for (auto [name, value] : {std::pair{"vendor", spec.vendor_id},
                             {"device", spec.device_id},
                             {"class", std::string(kGpuClass)},
                             {"numa_node", std::to_string(spec.numa_node)},
                             {"uevent", uevent}}) {
    if (name != std::string("uevent")) value += "\n";
    if (Status s = tree::PutFile(dir / name, value, tree::kReadOnly, scratch); !s.ok()) return s;
  }
  if (!is_vf && spec.num_vfs > 0) {
    for (const char* name : {"sriov_totalvfs", "sriov_numvfs"}) {
      Status s =
          tree::PutFile(dir / name, std::to_string(spec.num_vfs) + "\n", tree::kReadOnly, scratch);
      if (!s.ok()) return s;
    }
  }

  fs::path driver_dir = sys / "bus" / "pci" / "drivers" / spec.driver;
  if (Status s = tree::MakeDirs(driver_dir); !s.ok()) return s;
  if (Status s = tree::Link(dir / "driver", driver_dir); !s.ok()) return s;
  if (Status s = tree::Link(driver_dir / address, dir); !s.ok()) return s;
  if (Status s = tree::Link(dir / "subsystem", sys / "bus" / "pci"); !s.ok()) return s;

  uint32_t group = AllocateIommuGroup();
  gpus_[gpu].groups[address] = group;
  fs::path group_dir = sys / "kernel" / "iommu_groups" / std::to_string(group);
  if (Status s = tree::MakeDirs(group_dir / "devices"); !s.ok()) return s;
  if (Status s = tree::Link(group_dir / "devices" / address, dir); !s.ok()) return s;
  if (Status s = tree::Link(dir / "iommu_group", group_dir); !s.ok()) return s;
  // The bus link last: whoever finds the device there finds it complete.
  return tree::Link(sys / "bus" / "pci" / "devices" / address, dir);
}

Status KernelModel::LayoutGpu(size_t gpu) {
  const GpuSpec& spec = profile_.gpus[gpu];
  GpuState& state = gpus_[gpu];
  state.present = true;
  state.vfs.clear();
  state.groups.clear();
  fs::path sys = SysDir();

  if (spec.kind == GpuKind::kVirtual) {
    fs::path dir = DeviceDir(gpu, spec.address);
    fs::path class_dir = sys / "class" / spec.address;
    if (Status s = tree::MakeDirs(dir); !s.ok()) return s;
    if (Status s = tree::MakeDirs(class_dir); !s.ok()) return s;
    if (Status s = tree::Link(dir / "subsystem", class_dir); !s.ok()) return s;
    if (Status s = tree::Link(class_dir / spec.address, dir); !s.ok()) return s;
    if (Status s = LayoutMdevTypes(gpu, spec.address); !s.ok()) return s;
    return Refresh(gpu);
  }

  if (Status s = LayoutPciFunction(gpu, spec.address, false); !s.ok()) return s;
  auto pf = ParsePciAddress(spec.address);
  for (uint32_t i = 0; i < spec.num_vfs; ++i) {
    // Routing ID of VF i = PF's + First VF Offset (4 on these GPUs) + i * VF Stride (1).
    uint32_t rid = pf->bus << 8 | pf->devfn;
    rid += 4 + i;
    char vf[16];
    std::snprintf(vf, sizeof vf, "%04x:%02x:%02x.%x", pf->domain, (rid >> 8) & 0xff,
                  (rid >> 3) & 0x1f, rid & 0x7);
    state.vfs.push_back(vf);
    if (Status s = LayoutPciFunction(gpu, vf, true); !s.ok()) return s;
    fs::path vf_dir = DeviceDir(gpu, vf);
    fs::path pf_dir = DeviceDir(gpu, spec.address);
    Status s = tree::Link(pf_dir / ("virtfn" + std::to_string(i)), vf_dir);
    if (!s.ok()) return s;
    if (s = tree::Link(vf_dir / "physfn", pf_dir); !s.ok()) return s;
  }

  switch (spec.kind) {
    case GpuKind::kMdevPci:
      if (Status s = LayoutMdevTypes(gpu, spec.address); !s.ok()) return s;
      break;
    case GpuKind::kSriovMdev:
      for (const auto& vf : state.vfs) {
        if (Status s = LayoutMdevTypes(gpu, vf); !s.ok()) return s;
      }
      break;
    case GpuKind::kVendorVfio:
      for (const auto& vf : state.vfs) {
        if (Status s = LayoutVendorVfioFiles(gpu, vf); !s.ok()) return s;
      }
      break;
    case GpuKind::kVirtual:
      break;
  }
  return Refresh(gpu);
}

Status KernelModel::LayoutMdevTypes(size_t gpu, const std::string& parent) {
  const GpuSpec& spec = profile_.gpus[gpu];
  fs::path parent_dir = DeviceDir(gpu, parent);
  fs::path scratch = real_root_ / kScratchDir;
  for (const TypeSpec& type : spec.types) {
    fs::path dir = parent_dir / "mdev_supported_types" / type.id;
    if (Status s = tree::MakeDirs(dir / "devices"); !s.ok()) return s;
    auto put = [&](const char* name, const std::string& value, mode_t mode) {
      return tree::PutFile(dir / name, value, mode, scratch);
    };
    if (type.name) {
      if (Status s = put("name", *type.name + "\n", tree::kReadOnly); !s.ok()) return s;
    }
    if (type.description) {
      if (Status s = put("description", *type.description + "\n", tree::kReadOnly); !s.ok()) {
        return s;
      }
    }
    if (Status s = put("device_api", type.device_api + "\n", tree::kReadOnly); !s.ok()) return s;
    // The count itself is written by Refresh, from the model's accounting.
    if (Status s = put("available_instances", "0\n", tree::kReadOnly); !s.ok()) return s;
    if (Status s = put("create", "", tree::kWriteOnly); !s.ok()) return s;
    attributes_[dir / "create"] = Attribute{Action::kCreate, gpu, parent, type.id, ""};
  }
  // Registered with the mdev core last, as mdev_register_parent does once the types exist.
  return tree::Link(SysDir() / "class" / "mdev_bus" / parent, parent_dir);
}

Status KernelModel::LayoutVendorVfioFiles(size_t gpu, const std::string& vf) {
  fs::path dir = DeviceDir(gpu, vf) / "nvidia";
  fs::path scratch = real_root_ / kScratchDir;
  if (Status s = tree::MakeDirs(dir); !s.ok()) return s;
  // Only the file names are published; the values of the last four are ours and inert.
  for (auto [name, value, mode] :
       {std::tuple{"creatable_vgpu_types", kCreatableHeader, tree::kReadOnly},
        {"current_vgpu_type", "0\n", tree::kReadWrite},
        {"gpu_instance_id", "0\n", tree::kReadOnly},
        {"placement_id", "0\n", tree::kReadOnly},
        {"vgpu_params", "\n", tree::kReadOnly},
        {"warm_update", "0\n", tree::kReadOnly}}) {
    if (Status s = tree::PutFile(dir / name, value, mode, scratch); !s.ok()) return s;
  }
  attributes_[dir / "current_vgpu_type"] = Attribute{Action::kCurrentType, gpu, vf, "", ""};
  outputs_[dir / "placement_id"] = Output{vf, true, false};
  outputs_[dir / "gpu_instance_id"] = Output{vf, false, false};
  return Status::Ok();
}

Status KernelModel::LayoutMdev(const Vgpu& vgpu) {
  const GpuSpec& spec = profile_.gpus[vgpu.gpu];
  fs::path sys = SysDir();
  fs::path parent_dir = DeviceDir(vgpu.gpu, vgpu.parent);
  fs::path dir = parent_dir / vgpu.id;
  fs::path type_dir = parent_dir / "mdev_supported_types" / vgpu.type;
  fs::path group_dir = sys / "kernel" / "iommu_groups" / std::to_string(vgpu.iommu_group);
  fs::path driver_dir = sys / "bus" / "mdev" / "drivers" / MdevDriver(spec);

  if (Status s = tree::MakeDirs(dir); !s.ok()) return s;
  if (Status s = tree::Link(dir / "mdev_type", type_dir); !s.ok()) return s;
  if (Status s = tree::Link(dir / "subsystem", sys / "bus" / "mdev"); !s.ok()) return s;
  if (Status s = tree::MakeDirs(driver_dir); !s.ok()) return s;
  if (Status s = tree::Link(dir / "driver", driver_dir); !s.ok()) return s;
  if (Status s = tree::Link(driver_dir / vgpu.id, dir); !s.ok()) return s;
  Status s = tree::PutFile(dir / "remove", "", tree::kWriteOnly, real_root_ / kScratchDir);
  if (!s.ok()) return s;
  attributes_[dir / "remove"] = Attribute{Action::kRemove, vgpu.gpu, vgpu.parent, "", vgpu.id};
  // NVIDIA's per-mdev placement (only on GPUs whose types have placements: mixed-size capable).
  if (spec.heterogeneous_capable) {
    if (s = tree::MakeDirs(dir / "nvidia"); !s.ok()) return s;
    s = tree::PutFile(dir / "nvidia" / "placement_id", "Not Applicable\n", tree::kReadOnly,
                      real_root_ / kScratchDir);
    if (!s.ok()) return s;
    outputs_[dir / "nvidia" / "placement_id"] = Output{vgpu.id, true, true};
  }
  // vfio gives every mdev an IOMMU group of its own (an emulated one).
  if (s = tree::MakeDirs(group_dir / "devices"); !s.ok()) return s;
  if (s = tree::Link(group_dir / "devices" / vgpu.id, dir); !s.ok()) return s;
  if (s = tree::Link(dir / "iommu_group", group_dir); !s.ok()) return s;
  if (s = tree::Link(type_dir / "devices" / vgpu.id, dir); !s.ok()) return s;
  return tree::Link(sys / "bus" / "mdev" / "devices" / vgpu.id, dir);
}

void KernelModel::UnlayoutMdev(const Vgpu& vgpu) {
  const GpuSpec& spec = profile_.gpus[vgpu.gpu];
  fs::path sys = SysDir();
  fs::path parent_dir = DeviceDir(vgpu.gpu, vgpu.parent);
  // Reverse order of appearance: the bus entry goes first.
  RemoveFromTree(sys / "bus" / "mdev" / "devices" / vgpu.id);
  RemoveFromTree(parent_dir / "mdev_supported_types" / vgpu.type / "devices" / vgpu.id);
  RemoveFromTree(sys / "kernel" / "iommu_groups" / std::to_string(vgpu.iommu_group));
  RemoveFromTree(sys / "bus" / "mdev" / "drivers" / MdevDriver(spec) / vgpu.id);
  attributes_.erase(parent_dir / vgpu.id / "remove");
  outputs_.erase(parent_dir / vgpu.id / "nvidia" / "placement_id");
  RemoveFromTree(parent_dir / vgpu.id);
}

void KernelModel::UnlayoutGpu(size_t gpu) {
  const GpuSpec& spec = profile_.gpus[gpu];
  GpuState& state = gpus_[gpu];
  fs::path sys = SysDir();
  for (auto it = vgpus_.begin(); it != vgpus_.end();) {
    if (it->second.gpu != gpu) {
      ++it;
      continue;
    }
    if (spec.kind != GpuKind::kVendorVfio) UnlayoutMdev(it->second);
    it = vgpus_.erase(it);
  }
  for (const auto& parent : ParentsOf(gpu)) {
    RemoveFromTree(sys / "class" / "mdev_bus" / parent);
  }
  if (spec.kind == GpuKind::kVirtual) {
    RemoveFromTree(sys / "class" / spec.address);
    RemoveFromTree(sys / "devices" / "virtual" / spec.address);
  } else {
    std::vector<std::string> functions = state.vfs;
    functions.push_back(spec.address);
    for (const auto& function : functions) {
      RemoveFromTree(sys / "bus" / "pci" / "devices" / function);
      RemoveFromTree(sys / "bus" / "pci" / "drivers" / spec.driver / function);
      RemoveFromTree(sys / "kernel" / "iommu_groups" / std::to_string(state.groups[function]));
      RemoveFromTree(DeviceDir(gpu, function));
    }
  }
  for (auto it = attributes_.begin(); it != attributes_.end();) {
    it = it->second.gpu == gpu ? attributes_.erase(it) : std::next(it);
  }
  state.present = false;
  state.vfs.clear();
  state.groups.clear();
}

void KernelModel::RemoveFromTree(const fs::path& path) {
  if (removal_hook_) removal_hook_(path.lexically_relative(real_root_));
  tree::RemoveAll(path);
}

}  // namespace kvgpu::sim
