#include "webhook/json_patch.h"

#include "common/json_string.h"

namespace kvgpu::webhook {

std::string EscapePointerToken(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

void PatchBuilder::AddJson(std::string_view path, std::string_view value_json) {
  text_ += text_.empty() ? "[" : ",";
  text_ += R"({"op":"add","path":)";
  AppendJsonString(text_, path);
  text_ += R"(,"value":)";
  text_ += value_json;
  text_ += '}';
}

}  // namespace kvgpu::webhook
