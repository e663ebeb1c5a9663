// Error and Result for the Kubernetes client: what went wrong, the HTTP status when the API
// server answered (0 when it never did), and a message that says what to do. The watch loop
// decides between relist, reconnect and give-up on `kind`, never by parsing messages.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace kvgpu::kube {

enum class ErrorKind {
  kOk = 0,
  kConfig,     // missing or malformed configuration (kubeconfig, service account files)
  kTransport,  // could not connect, TLS failure, connection dropped, timed out
  kHttp,       // the server answered with a status other than 2xx
  kGone,       // 410: the resourceVersion asked for is compacted away; relist
  kDecode,     // the body was not what the API promises
  kCancelled,  // Stop() was called
  kNotFound,   // the file, socket or object is not there
};

const char* ErrorKindName(ErrorKind kind);

class Error {
 public:
  Error() = default;
  Error(ErrorKind kind, std::string message, int http_status = 0)
      : kind_(kind), http_status_(http_status), message_(std::move(message)) {}

  bool ok() const { return kind_ == ErrorKind::kOk; }
  ErrorKind kind() const { return kind_; }
  int http_status() const { return http_status_; }
  const std::string& message() const { return message_; }
  // "<kind>: <message>"
  std::string ToString() const;

 private:
  ErrorKind kind_ = ErrorKind::kOk;
  int http_status_ = 0;
  std::string message_;
};

template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : error_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return value_.has_value(); }
  const Error& error() const { return error_; }
  const T& value() const& { return *value_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  const T& operator*() const& { return *value_; }
  T& operator*() & { return *value_; }
  const T* operator->() const { return &*value_; }
  T* operator->() { return &*value_; }

 private:
  std::optional<T> value_;
  Error error_;
};

}  // namespace kvgpu::kube
