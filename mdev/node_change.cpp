// Creation and removal of vGPUs, for both flavours, with errors a caller can act on.
#include "mdev/node.h"
#include "mdev/node_internal.h"
#include "mdev/nvidia.h"
#include "mdev/uuid.h"

namespace kvgpu::mdev {

namespace internal {

Result<std::string> MdevUuid(const std::optional<std::string>& requested) {
  std::string uuid = requested ? *requested : NewUuid();
  if (!IsValidUuid(uuid)) {
    return Status::Error(
        ErrorCode::kMalformedUuid,
        "'" + uuid + "' is not a UUID (want xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)");
  }
  return NormalizeUuid(uuid);
}

// Rewrites the kernel's errno into a message that says what happened and what to do.
Status CreateFailed(const Status& write, const std::string& what, const std::string& type,
                    const std::string& parent) {
  std::string message;
  switch (write.code()) {
    case ErrorCode::kExists:
      message = what + " already exists; remove it first or choose another";
      break;
    case ErrorCode::kNoRoom:
      message = "no room for another " + type + " on " + parent +
                ": the GPU is full or locked to another type; remove a vGPU there or use "
                "another GPU";
      break;
    case ErrorCode::kPermission:
      message = "not allowed to create vGPUs on " + parent + ": run as root";
      break;
    case ErrorCode::kGone:
      message = "parent " + parent + " or type " + type + " vanished while creating " + what;
      break;
    case ErrorCode::kBusy:
      message = "parent " + parent + " is busy; retry shortly";
      break;
    case ErrorCode::kInvalid:
      message = "the driver refused to create " + what + " of type " + type + " on " + parent;
      break;
    default:
      message = "creating " + what + " of type " + type + " on " + parent + " failed";
      break;
  }
  return Status::Error(write.code(), message + " [" + write.message() + "]", write.sys_errno());
}

Status RemoveFailed(const Status& write, const std::string& id) {
  std::string message;
  switch (write.code()) {
    case ErrorCode::kGone:
      message = "no vGPU " + id + " (already removed?)";
      break;
    case ErrorCode::kBusy:
      message = "vGPU " + id + " is in use (a VM still holds it); retry after it is released";
      break;
    case ErrorCode::kPermission:
      message = "not allowed to remove vGPU " + id + ": run as root";
      break;
    default:
      message = "removing vGPU " + id + " failed";
      break;
  }
  return Status::Error(write.code(), message + " [" + write.message() + "]", write.sys_errno());
}

}  // namespace internal

Result<Vgpu> Node::Create(const CreateRequest& request) {
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

Result<Vgpu> Node::CreateMdev(const CreateRequest& request) {
  Result<std::string> checked = internal::MdevUuid(request.uuid);
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
    return internal::CreateFailed(written, "vGPU " + uuid, request.type_id, request.parent);
  }

  fs::path device = MdevDevicesDir() / uuid;
  // The kernel adds the device before its `mdev_type` and `iommu_group` links (seen in the VM
  // lab): wait for all three, or the read-back below races the kernel.
  bool appeared = internal::WaitFor(options_.settle_timeout, options_.settle_poll, [&] {
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

Result<Vgpu> Node::CreateVendorVfio(const CreateRequest& request) {
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
    return internal::CreateFailed(written, "a vGPU on VF " + request.parent, request.type_id,
                                  request.parent);
  }
  bool shown = internal::WaitFor(options_.settle_timeout, options_.settle_poll, [&] {
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
  vgpu.vfio_device = internal::VfioDevicePath(vgpu.iommu_group);
  return vgpu;
}

Status Node::Remove(const std::string& id) {
  if (IsValidUuid(id)) return RemoveMdev(NormalizeUuid(id));
  if (id.find('/') == std::string::npos &&
      io_.Exists(PciDevicesDir() / id / "nvidia" / "current_vgpu_type")) {
    return RemoveVendorVfio(id);
  }
  return Status::Error(ErrorCode::kMalformedUuid,
                       "'" + id + "' is neither an mdev UUID nor a vendor-VFIO VF address");
}

Status Node::RemoveMdev(const std::string& uuid) {
  fs::path device = MdevDevicesDir() / uuid;
  Status written = io_.WriteFile(device / "remove", "1");
  if (!written.ok()) return internal::RemoveFailed(written, uuid);
  if (!internal::WaitFor(options_.settle_timeout, options_.settle_poll,
                         [&] { return !io_.Exists(device); })) {
    return Status::Error(ErrorCode::kTimeout,
                         "removed " + uuid + " but it is still in " + MdevDevicesDir().string());
  }
  return Status::Ok();
}

Status Node::RemoveVendorVfio(const std::string& vf) {
  fs::path current_path = PciDevicesDir() / vf / "nvidia" / "current_vgpu_type";
  auto current = ReadAttribute(io_, current_path);
  if (!current.ok()) return internal::RemoveFailed(current.status(), vf);
  if (*current == "0") {
    return Status::Error(ErrorCode::kGone, "VF " + vf + " hosts no vGPU (already removed?)");
  }
  Status written = io_.WriteFile(current_path, "0");
  if (!written.ok()) return internal::RemoveFailed(written, vf);
  bool cleared = internal::WaitFor(options_.settle_timeout, options_.settle_poll, [&] {
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
