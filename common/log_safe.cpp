#include "common/log_safe.h"

#include <cstdio>

namespace kvgpu {

std::string LogSafe(std::string_view text, size_t cap) {
  std::string out;
  size_t shown = text.size() < cap ? text.size() : cap;
  out.reserve(shown + 16);
  for (size_t i = 0; i < shown; ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    switch (c) {
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      default:
        if (c < 0x20 || c >= 0x7f) {
          char hex[5];
          std::snprintf(hex, sizeof(hex), "\\x%02x", c);
          out += hex;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  if (shown < text.size()) {
    out += "...(" + std::to_string(text.size()) + " bytes)";
  }
  return out;
}

}  // namespace kvgpu
