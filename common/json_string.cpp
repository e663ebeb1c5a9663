#include "common/json_string.h"

#include <algorithm>

namespace kvgpu {

void AppendJsonString(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  // The usual name, printable ASCII with no quote or backslash, goes out in one piece.
  if (std::all_of(text.begin(), text.end(), [](char c) {
        const auto byte = static_cast<unsigned char>(c);
        return byte >= 0x20 && byte < 0x80 && c != '"' && c != '\\';
      })) {
    const size_t at = out.size();
    out.resize(at + text.size() + 2);
    out[at] = '"';
    text.copy(out.data() + at + 1, text.size());
    out[at + text.size() + 1] = '"';
    return;
  }
  out.push_back('"');
  size_t i = 0;
  while (i < text.size()) {
    // Printable ASCII but the quote and the backslash goes out as it is, a run at a time.
    size_t plain = i;
    while (plain < text.size() && static_cast<unsigned char>(text[plain]) >= 0x20 &&
           static_cast<unsigned char>(text[plain]) < 0x80 && text[plain] != '"' &&
           text[plain] != '\\') {
      ++plain;
    }
    out.append(text.substr(i, plain - i));
    i = plain;
    if (i == text.size()) break;
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte >= 0x80) {
      // A whole UTF-8 sequence (RFC 3629: shortest form, no surrogates, at most U+10FFFF) is
      // copied as it is; anything else is one U+FFFD per byte.
      const size_t length = byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : byte >= 0xc2 ? 2 : 0;
      bool valid = length > 0 && byte <= 0xf4 && i + length <= text.size();
      for (size_t k = 1; valid && k < length; ++k) {
        valid = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
      }
      if (valid && length >= 3) {
        const auto second = static_cast<unsigned char>(text[i + 1]);
        if (byte == 0xe0 && second < 0xa0) valid = false;   // overlong
        if (byte == 0xed && second >= 0xa0) valid = false;  // a surrogate
        if (byte == 0xf0 && second < 0x90) valid = false;   // overlong
        if (byte == 0xf4 && second >= 0x90) valid = false;  // above U+10FFFF
      }
      if (valid) {
        out.append(text.substr(i, length));
        i += length;
      } else {
        out.append("\\ufffd");
        ++i;
      }
      continue;
    }
    switch (byte) {
      case '"':
        out.append("\\\"");
        break;
      case '\\':
        out.append("\\\\");
        break;
      case '\n':
        out.append("\\n");
        break;
      case '\r':
        out.append("\\r");
        break;
      case '\t':
        out.append("\\t");
        break;
      case '\b':
        out.append("\\b");
        break;
      case '\f':
        out.append("\\f");
        break;
      default:
        if (byte < 0x20) {
          out.append("\\u00");
          out.push_back(kHex[byte >> 4]);
          out.push_back(kHex[byte & 0xf]);
        } else {
          out.push_back(static_cast<char>(byte));
        }
    }
    ++i;
  }
  out.push_back('"');
}

}  // namespace kvgpu
