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

std::string Base64Encode(std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out((bytes.size() + 2) / 3 * 4, '=');
  auto byte = [&](size_t at) {
    return static_cast<unsigned>(static_cast<unsigned char>(bytes[at]));
  };
  size_t in = 0, at = 0;
  for (; in + 2 < bytes.size(); in += 3) {
    unsigned triple = (byte(in) << 16) | (byte(in + 1) << 8) | byte(in + 2);
    out[at++] = kAlphabet[(triple >> 18) & 63];
    out[at++] = kAlphabet[(triple >> 12) & 63];
    out[at++] = kAlphabet[(triple >> 6) & 63];
    out[at++] = kAlphabet[triple & 63];
  }
  size_t rest = bytes.size() - in;  // 0, 1 or 2 bytes left; '=' already fills the padding
  if (rest > 0) {
    unsigned triple = (byte(in) << 16) | (rest == 2 ? byte(in + 1) << 8 : 0u);
    out[at++] = kAlphabet[(triple >> 18) & 63];
    out[at++] = kAlphabet[(triple >> 12) & 63];
    if (rest == 2) out[at] = kAlphabet[(triple >> 6) & 63];
  }
  return out;
}

}  // namespace kvgpu::webhook
