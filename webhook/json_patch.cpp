#include "webhook/json_patch.h"

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

void AppendJsonString(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (char c : text) {
    auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20) {
      out += "\\u00";
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    } else {
      out += c;
    }
  }
  out += '"';
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
