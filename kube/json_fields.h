// Reading Kubernetes objects as JSON: a field that is absent, null or of another type reads as
// empty, the way the API's optional fields are treated, instead of throwing.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kvgpu::kube {

// object[key] when it is a string, else "".
inline std::string StringField(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return "";
  const auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

// object[key], or a null value when object is not an object or has no such key.
inline const nlohmann::json& Field(const nlohmann::json& object, const char* key) {
  static const nlohmann::json null;
  if (!object.is_object()) return null;
  const auto it = object.find(key);
  return it == object.end() ? null : *it;
}

}  // namespace kvgpu::kube
