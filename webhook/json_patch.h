// RFC 6902 JSON Patch building blocks: RFC 6901 pointer escaping, "add" operations, and the
// base64 (RFC 4648) the AdmissionReview response carries the patch in.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace kvgpu::webhook {

// One reference token: "~" becomes "~0" and "/" becomes "~1" (in that order, as RFC 6901 says).
std::string EscapePointerToken(std::string_view token);

// Collects operations in order; later operations see the document as earlier ones left it.
class PatchBuilder {
 public:
  void Add(std::string path, nlohmann::json value);
  const nlohmann::json& operations() const { return ops_; }
  bool empty() const { return ops_.empty(); }

 private:
  nlohmann::json ops_ = nlohmann::json::array();
};

std::string Base64Encode(std::string_view bytes);

}  // namespace kvgpu::webhook
