// A value or the reason it could not be produced. The reason is a sentence meant for the person
// who has to fix the input (a pod author, a cluster admin), so it says what is wrong and where.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace kvgpu::webhook {

struct Error {
  std::string message;
};

template <typename T>
class Expected {
 public:
  Expected(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Expected(Error error)
      : error_(std::move(error.message)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return value_.has_value(); }
  const std::string& error() const { return error_; }
  const T& value() const& { return *value_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  const T* operator->() const { return &*value_; }
  T* operator->() { return &*value_; }

 private:
  std::optional<T> value_;
  std::string error_;
};

}  // namespace kvgpu::webhook
