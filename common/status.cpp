#include "common/status.h"

#include <cerrno>
#include <cstring>

namespace kvgpu {

const char* ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return "ok";
    case ErrorCode::kMalformedUuid:
      return "malformed-uuid";
    case ErrorCode::kExists:
      return "exists";
    case ErrorCode::kNoRoom:
      return "no-room";
    case ErrorCode::kGone:
      return "gone";
    case ErrorCode::kBusy:
      return "busy";
    case ErrorCode::kPermission:
      return "permission-denied";
    case ErrorCode::kUnknownParent:
      return "unknown-parent";
    case ErrorCode::kUnknownType:
      return "unknown-type";
    case ErrorCode::kInvalid:
      return "invalid";
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kIo:
      return "io-error";
    case ErrorCode::kConfig:
      return "config";
    case ErrorCode::kTransport:
      return "transport";
    case ErrorCode::kHttp:
      return "http";
    case ErrorCode::kExpired:
      return "expired";
    case ErrorCode::kDecode:
      return "decode";
    case ErrorCode::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

Status Status::FromErrno(int sys_errno, std::string message) {
  ErrorCode code = ErrorCode::kIo;
  switch (sys_errno) {
    case EINVAL:
      code = ErrorCode::kInvalid;
      break;
    case EEXIST:
      code = ErrorCode::kExists;
      break;
    case ENOSPC:
    case EUSERS:
      code = ErrorCode::kNoRoom;
      break;
    case ENOENT:
    case ENODEV:
      code = ErrorCode::kGone;
      break;
    case EBUSY:
      code = ErrorCode::kBusy;
      break;
    case EACCES:
    case EPERM:
    case EROFS:
      code = ErrorCode::kPermission;
      break;
    default:
      break;
  }
  return Status(code, std::move(message) + " (" + std::strerror(sys_errno) + ")", sys_errno);
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  return std::string(ErrorCodeName(code_)) + ": " + message_;
}

}  // namespace kvgpu
