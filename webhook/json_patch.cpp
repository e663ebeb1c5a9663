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

void PatchBuilder::Add(std::string path, nlohmann::json value) {
  ops_.push_back({{"op", "add"}, {"path", std::move(path)}, {"value", std::move(value)}});
}

std::string Base64Encode(std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  auto byte = [&](size_t at) {
    return static_cast<unsigned>(static_cast<unsigned char>(bytes[at]));
  };
  for (; i + 2 < bytes.size(); i += 3) {
    unsigned triple = (byte(i) << 16) | (byte(i + 1) << 8) | byte(i + 2);
    out += kAlphabet[(triple >> 18) & 63];
    out += kAlphabet[(triple >> 12) & 63];
    out += kAlphabet[(triple >> 6) & 63];
    out += kAlphabet[triple & 63];
  }
  if (i + 1 == bytes.size()) {
    unsigned triple = byte(i) << 16;
    out += kAlphabet[(triple >> 18) & 63];
    out += kAlphabet[(triple >> 12) & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    unsigned triple = (byte(i) << 16) | (byte(i + 1) << 8);
    out += kAlphabet[(triple >> 18) & 63];
    out += kAlphabet[(triple >> 12) & 63];
    out += kAlphabet[(triple >> 6) & 63];
    out += '=';
  }
  return out;
}

}  // namespace kvgpu::webhook
