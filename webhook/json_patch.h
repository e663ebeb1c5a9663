// RFC 6902 JSON Patch building blocks: RFC 6901 pointer escaping and "add" operations.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace kvgpu::webhook {

// One reference token: "~" becomes "~0" and "/" becomes "~1" (in that order, as RFC 6901 says).
std::string EscapePointerToken(std::string_view token);

// Collects "add" operations in order, as JSON text; later operations see the document as
// earlier ones left it. Values come either as JSON or as JSON text rendered beforehand (the
// injected containers and volumes are rendered once per config, not once per request).
class PatchBuilder {
 public:
  void AddJson(std::string_view path, std::string_view value_json);
  void Add(std::string_view path, const nlohmann::json& value) { AddJson(path, value.dump()); }
  bool empty() const { return text_.empty(); }
  // The RFC 6902 document: a JSON array of the operations.
  std::string Text() const { return text_.empty() ? "[]" : text_ + "]"; }

 private:
  std::string text_;
};

}  // namespace kvgpu::webhook
