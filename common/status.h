// Status and Result: the one error type of every component. An error a caller can act on: a
// generic code to decide by (never parse messages), a message that says what happened and what to
// do, and the detail of where it came from (the errno of a sysfs write, the HTTP status of an API
// server answer). Kept small on purpose, after leveldb's Status; gRPC codes and HTTP answers of
// our own servers are mapped at the edges.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace kvgpu {

enum class ErrorCode {
  kOk = 0,
  kMalformedUuid,  // EINVAL from `create`, or a string that is not a UUID
  kExists,         // EEXIST: the UUID is taken (any type, any parent), or the VF already hosts one
  kNoRoom,         // ENOSPC / EUSERS: the type has no instance left on that parent
  kGone,           // ENOENT: the device (or file) is not there
  kBusy,           // EBUSY: in use (a VM still holds the device)
  kPermission,     // EACCES / EPERM
  kUnknownParent,  // no such parent device
  kUnknownType,    // the parent has no such type
  kInvalid,        // bad input or unparseable sysfs content
  kTimeout,        // the kernel did not show the expected result in time
  kIo,             // any other errno
  // Remote APIs and configuration (the API server, kubelet's sockets and files, kubeconfig):
  kConfig,     // missing or malformed configuration (kubeconfig, service account files)
  kTransport,  // could not connect, TLS failure, connection dropped, timed out
  kHttp,       // the server answered with a status other than 2xx (http_status() says which)
  kExpired,    // HTTP 410: the resourceVersion asked for is compacted away; relist
  kDecode,     // the body was not what the API promises
  kCancelled,  // Stop() was called
};

const char* ErrorCodeName(ErrorCode code);

class Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(ErrorCode code, std::string message, int sys_errno = 0) {
    return Status(code, std::move(message), sys_errno);
  }
  // Bad input: a malformed request, config or file (kInvalid).
  static Status Invalid(std::string message) {
    return Status(ErrorCode::kInvalid, std::move(message), 0);
  }
  // Maps an errno from a sysfs write or open to the typed error.
  static Status FromErrno(int sys_errno, std::string message);
  // An answer of a remote HTTP API (`http_status` 0 when it never answered).
  static Status Remote(ErrorCode code, std::string message, int http_status) {
    Status s(code, std::move(message), 0);
    s.http_status_ = http_status;
    return s;
  }

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  int sys_errno() const { return errno_; }
  int http_status() const { return http_status_; }
  const std::string& message() const { return message_; }
  // "<code name>: <message>"
  std::string ToString() const;

 private:
  Status(ErrorCode code, std::string message, int sys_errno)
      : code_(code), errno_(sys_errno), message_(std::move(message)) {}

  ErrorCode code_ = ErrorCode::kOk;
  int errno_ = 0;
  int http_status_ = 0;
  std::string message_;
};

// A value or the Status that explains its absence.
template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!status_.ok() && "Result built from an OK status carries no value");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  const T& value() const& { return *value_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  const T& operator*() const& { return *value_; }
  T& operator*() & { return *value_; }
  const T* operator->() const { return &*value_; }
  T* operator->() { return &*value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace kvgpu
