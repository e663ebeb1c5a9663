// What every collection of the fake API server answers with: the Status object of a failed
// request and a JSON reply (metav1.Status as the real server writes it: kind, apiVersion, empty
// metadata, status "Failure", message, reason, code). Internal to fakes/apiserver.
#pragma once

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>

namespace kvgpu::testing::api_answers {

inline nlohmann::json Failure(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", nlohmann::json::object()},
          {"status", "Failure"}, {"message", message}, {"reason", reason},
          {"code", code}};
}

inline void Answer(httplib::Response& res, int code, const nlohmann::json& body) {
  res.status = code;
  res.set_content(body.dump(), "application/json");
}

inline std::string Key(const std::string& ns, const std::string& name) {
  return ns + "/" + name;
}

}  // namespace kvgpu::testing::api_answers
