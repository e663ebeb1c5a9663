#include "mdev/backend_kit.h"

#include "mdev/uuid.h"

namespace kvgpu::mdev::kit {

std::string VfioDevicePath(std::optional<uint32_t> group) {
  return group ? "/dev/vfio/" + std::to_string(*group) : std::string();
}

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

}  // namespace kvgpu::mdev::kit
