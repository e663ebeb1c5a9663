#include "kube/result.h"

namespace kvgpu::kube {

const char* ErrorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kOk:
      return "ok";
    case ErrorKind::kConfig:
      return "config";
    case ErrorKind::kTransport:
      return "transport";
    case ErrorKind::kHttp:
      return "http";
    case ErrorKind::kGone:
      return "gone";
    case ErrorKind::kDecode:
      return "decode";
    case ErrorKind::kCancelled:
      return "cancelled";
    case ErrorKind::kNotFound:
      return "not found";
  }
  return "unknown";
}

std::string Error::ToString() const {
  return std::string(ErrorKindName(kind_)) + ": " + message_;
}

}  // namespace kvgpu::kube
