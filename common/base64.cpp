#include "common/base64.h"

#include <cstdint>

namespace kvgpu {

namespace {
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}  // namespace

std::string Base64Encode(std::string_view bytes) {
  // Filled in place (the output size is known): the webhook encodes every patch it sends.
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

Base64Decoded Base64Decode(std::string_view text) {
  Base64Decoded result;
  std::string& out = result.bytes;
  out.reserve(text.size() * 3 / 4);
  std::uint32_t bits = 0;
  int count = 0;
  size_t padding = 0;
  size_t symbols = 0;
  auto fail = [&](const char* why) {
    result.bytes.clear();
    result.error = std::string("not base64: ") + why;
    return result;
  };
  for (const char c : text) {
    if (c == '\n' || c == '\r' || c == ' ' || c == '\t') continue;
    int value;
    if (c >= 'A' && c <= 'Z') {
      value = c - 'A';
    } else if (c >= 'a' && c <= 'z') {
      value = c - 'a' + 26;
    } else if (c >= '0' && c <= '9') {
      value = c - '0' + 52;
    } else if (c == '+') {
      value = 62;
    } else if (c == '/') {
      value = 63;
    } else if (c == '=') {
      ++padding;
      ++symbols;
      continue;
    } else {
      return fail("unexpected character");
    }
    if (padding > 0) return fail("data after padding");
    ++symbols;
    bits = (bits << 6) | static_cast<std::uint32_t>(value);
    if (++count == 4) {
      out.push_back(static_cast<char>((bits >> 16) & 0xff));
      out.push_back(static_cast<char>((bits >> 8) & 0xff));
      out.push_back(static_cast<char>(bits & 0xff));
      bits = 0;
      count = 0;
    }
  }
  if (symbols % 4 != 0 || padding > 2) return fail("length is not a multiple of 4");
  if (count == 3) {
    out.push_back(static_cast<char>((bits >> 10) & 0xff));
    out.push_back(static_cast<char>((bits >> 2) & 0xff));
  } else if (count == 2) {
    out.push_back(static_cast<char>((bits >> 4) & 0xff));
  } else if (count == 1) {
    return fail("truncated");
  }
  return result;
}

}  // namespace kvgpu
