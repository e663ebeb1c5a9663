// Creation and removal of vGPUs, for both flavours, with errors a caller can act on.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "mdev/backend_kit.h"
#include "mdev/nvidia.h"
#include "mdev/sysfs_backend.h"
#include "mdev/sysfs_internal.h"
#include "mdev/uuid.h"

namespace kvgpu::mdev {

Result<Vgpu> SysfsBackend::Create(const CreateRequest& request) {
  if (request.parent.empty() || request.type_id.empty()) {
    return Status::Error(ErrorCode::kInvalid, "create needs a parent and a type");
  }
  if (io_.Exists(MdevBusDir() / request.parent)) return CreateMdev(request);
  if (io_.Exists(PciDevicesDir() / request.parent / "nvidia" / "current_vgpu_type")) {
    return CreateVendorVfio(request);
  }
  return Status::Error(ErrorCode::kUnknownParent,
                       "no vGPU-capable parent '" + request.parent +
                           "' (see `vgpuctl types` for the parents of this node)");
}

Result<Vgpu> SysfsBackend::CreateMdev(const CreateRequest& request) {
  Result<std::string> checked = kit::MdevUuid(request.uuid);
  if (!checked.ok()) return checked.status();
  const std::string& uuid = *checked;
  fs::path parent_dir = MdevBusDir() / request.parent;
  fs::path type_dir = parent_dir / "mdev_supported_types" / request.type_id;
  if (request.type_id.find('/') != std::string::npos || !io_.IsDirectory(type_dir)) {
    return Status::Error(ErrorCode::kUnknownType, "parent " + request.parent + " has no type '" +
                                                      request.type_id + "' (see `vgpuctl types`)");
  }
  Status written = io_.WriteFile(type_dir / "create", uuid);
  if (!written.ok()) {
    return kit::CreateFailed(written, "vGPU " + uuid, request.type_id, request.parent);
  }

  fs::path device = MdevDevicesDir() / uuid;
  // The kernel adds the device before its `mdev_type` and `iommu_group` links (seen in the VM
  // lab): wait for all three, or the read-back below races the kernel.
  bool appeared = kit::WaitFor(options_.settle_timeout, options_.settle_poll, [&] {
    return io_.Exists(device) && io_.Exists(device / "mdev_type") &&
           io_.Exists(device / "iommu_group");
  });
  if (!appeared) {
    return Status::Error(ErrorCode::kTimeout, "created " + uuid +
                                                  " but it did not appear with its type and "
                                                  "IOMMU group in " +
                                                  MdevDevicesDir().string());
  }
  Parent parent;
  parent.name = request.parent;
  internal::FillDeviceIdentity(io_, parent_dir, parent);
  auto type = internal::ReadMdevType(io_, type_dir);
  if (type.ok()) parent.types.push_back(*type);
  return internal::ReadMdevDevice(io_, MdevDevicesDir(), uuid, {parent});
}

Result<Vgpu> SysfsBackend::CreateVendorVfio(const CreateRequest& request) {
  if (request.uuid) {
    return Status::Error(ErrorCode::kInvalid, "vendor-VFIO vGPUs have no UUID: the VF " +
                                                  request.parent + " is the device");
  }
  if (!internal::ParseUnsigned(request.type_id)) {
    return Status::Error(ErrorCode::kUnknownType,
                         "vendor-VFIO type ids are numbers; '" + request.type_id + "' is not one");
  }
  fs::path vf_dir = PciDevicesDir() / request.parent;
  fs::path nvidia = vf_dir / "nvidia";
  auto current = ReadAttribute(io_, nvidia / "current_vgpu_type");
  if (!current.ok()) return current.status();
  if (*current != "0") {
    return Status::Error(ErrorCode::kExists, "VF " + request.parent + " already hosts vGPU type " +
                                                 *current + "; remove it first");
  }
  auto listed = io_.ReadFile(nvidia / "creatable_vgpu_types");
  if (!listed.ok()) return listed.status();
  auto creatable = ParseCreatableVgpuTypes(*listed);
  if (!creatable.ok()) return creatable.status();
  bool can_create = false;
  for (const auto& [id, name] : *creatable) {
    RememberTypeNames({{id, name}});
    if (id == request.type_id) can_create = true;
  }
  if (!can_create) {
    if (TypeName(request.type_id)) {
      return Status::Error(ErrorCode::kNoRoom, "no room for another " + request.type_id +
                                                   " on VF " + request.parent +
                                                   ": the GPU is full or locked to another type");
    }
    return Status::Error(ErrorCode::kUnknownType, "VF " + request.parent + " cannot create type " +
                                                      request.type_id + " (see `vgpuctl types`)");
  }
  Status written = io_.WriteFile(nvidia / "current_vgpu_type", request.type_id);
  if (!written.ok()) {
    return kit::CreateFailed(written, "a vGPU on VF " + request.parent, request.type_id,
                             request.parent);
  }
  bool shown = kit::WaitFor(options_.settle_timeout, options_.settle_poll, [&] {
    auto now = ReadAttribute(io_, nvidia / "current_vgpu_type");
    return now.ok() && *now == request.type_id;
  });
  if (!shown) {
    return Status::Error(ErrorCode::kTimeout, "wrote type " + request.type_id + " to VF " +
                                                  request.parent +
                                                  " but current_vgpu_type does not show it");
  }
  Vgpu vgpu;
  vgpu.id = request.parent;
  vgpu.flavour = Flavour::kVendorVfio;
  vgpu.parent = request.parent;
  Parent identity;
  identity.name = request.parent;
  internal::FillDeviceIdentity(io_, vf_dir, identity);
  vgpu.physical_gpu = identity.physical_gpu;
  vgpu.type_id = request.type_id;
  vgpu.type_name = TypeName(request.type_id);
  vgpu.iommu_group = internal::IommuGroup(io_, vf_dir);
  vgpu.vfio_device = kit::VfioDevicePath(vgpu.iommu_group);
  return vgpu;
}

Status SysfsBackend::Remove(const std::string& id) {
  return RemoveIfType(id, "");
}

Status SysfsBackend::RemoveIfType(const std::string& id, const std::string& type_id) {
  if (IsValidUuid(id)) return RemoveMdev(NormalizeUuid(id));
  if (id.find('/') == std::string::npos &&
      io_.Exists(PciDevicesDir() / id / "nvidia" / "current_vgpu_type")) {
    return RemoveVendorVfio(id, type_id);
  }
  return Status::Error(ErrorCode::kMalformedUuid,
                       "'" + id + "' is neither an mdev UUID nor a vendor-VFIO VF address");
}

Status SysfsBackend::RemoveMdev(const std::string& uuid) {
  fs::path device = MdevDevicesDir() / uuid;
  Status written = io_.WriteFile(device / "remove", "1");
  if (!written.ok()) return kit::RemoveFailed(written, uuid);
  if (!kit::WaitFor(options_.settle_timeout, options_.settle_poll,
                    [&] { return !io_.Exists(device); })) {
    return Status::Error(ErrorCode::kTimeout,
                         "removed " + uuid + " but it is still in " + MdevDevicesDir().string());
  }
  return Status::Ok();
}

namespace internal {

Result<std::vector<int>> OpenedBy(const fs::path& proc_root,
                                  const std::vector<std::string>& paths) {
  std::error_code ec;
  // No proc tree at all under a test's or simulator's root: nothing there can hold the VF.
  if (!fs::exists(proc_root, ec) && !ec) return std::vector<int>{};
  fs::directory_iterator processes(proc_root, ec);
  if (ec) {
    return Status::Error(ErrorCode::kIo, "cannot list " + proc_root.string() + ": " + ec.message() +
                                             "; cannot tell who holds the VF");
  }
  std::vector<int> holders;
  for (const fs::directory_entry& process : processes) {
    const std::string pid = process.path().filename().string();
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code fd_ec;
    for (const fs::directory_entry& fd : fs::directory_iterator(process.path() / "fd", fd_ec)) {
      std::error_code link_ec;
      const std::string target = fs::read_symlink(fd.path(), link_ec).string();
      if (!link_ec && std::find(paths.begin(), paths.end(), target) != paths.end()) {
        holders.push_back(std::stoi(pid));
        break;
      }
    }
  }
  return holders;
}

}  // namespace internal

// The files a VM holds a vendor-VFIO VF by: its group's node, and its iommufd device node.
std::vector<std::string> SysfsBackend::VfioPathsOf(const std::string& vf) {
  std::vector<std::string> paths;
  const fs::path vf_dir = PciDevicesDir() / vf;
  if (auto group = internal::IommuGroup(io_, vf_dir)) paths.push_back(kit::VfioDevicePath(group));
  if (auto names = io_.ListDir(vf_dir / "vfio-dev"); names.ok()) {
    for (const std::string& name : *names) paths.push_back("/dev/vfio/devices/" + name);
  }
  return paths;
}

Status SysfsBackend::RemoveVendorVfio(const std::string& vf, const std::string& expected_type) {
  fs::path current_path = PciDevicesDir() / vf / "nvidia" / "current_vgpu_type";
  auto current = ReadAttribute(io_, current_path);
  if (!current.ok()) return kit::RemoveFailed(current.status(), vf);
  if (*current == "0") {
    return Status::Error(ErrorCode::kGone, "VF " + vf + " hosts no vGPU (already removed?)");
  }
  // The VF path outlives its vGPU: a type other than ours is the next owner's, never ours to clear.
  if (!expected_type.empty() && *current != expected_type) {
    return Status::Error(ErrorCode::kGone, "VF " + vf + " now holds type " + *current +
                                               ", not the " + expected_type +
                                               " asked for: ours is gone and the VF is another "
                                               "owner's; left as it is");
  }
  auto holders = internal::OpenedBy(
      options_.proc_root.empty() ? root_ / "proc" : options_.proc_root, VfioPathsOf(vf));
  if (!holders.ok()) return kit::RemoveFailed(holders.status(), vf);
  if (!holders->empty()) {
    return Status::Error(ErrorCode::kBusy,
                         "VF " + vf + " is held open by process " +
                             std::to_string(holders->front()) +
                             " (a VM still using it); its vGPU stays until it lets go");
  }
  Status written = io_.WriteFile(current_path, "0");
  if (!written.ok()) return kit::RemoveFailed(written, vf);
  bool cleared = kit::WaitFor(options_.settle_timeout, options_.settle_poll, [&] {
    auto now = ReadAttribute(io_, current_path);
    return now.ok() && *now == "0";
  });
  if (!cleared) {
    return Status::Error(ErrorCode::kTimeout,
                         "wrote 0 to " + current_path.string() + " but the vGPU is still there");
  }
  return Status::Ok();
}

}  // namespace kvgpu::mdev
