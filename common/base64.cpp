#include "common/base64.h"

#include <cstdint>

namespace kvgpu {

namespace {
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// Every pair of output characters for 12 input bits: two lookups per three bytes instead of four.
struct PairTable {
  char pairs[4096][2];
  constexpr PairTable() : pairs() {
    for (unsigned i = 0; i < 4096; ++i) {
      pairs[i][0] = kAlphabet[i >> 6];
      pairs[i][1] = kAlphabet[i & 63];
    }
  }
};
constexpr PairTable kPairs;

}  // namespace

void Base64EncodeAppend(std::string& out, std::string_view bytes) {
  const size_t start = out.size();
  // Sized once ('=' already fills the padding), then written in place.
  out.resize(start + (bytes.size() + 2) / 3 * 4, '=');
  char* to = out.data() + start;
  const auto* from = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t in = 0;
  for (; in + 2 < bytes.size(); in += 3, to += 4) {
    const unsigned triple =
        (unsigned{from[in]} << 16) | (unsigned{from[in + 1]} << 8) | from[in + 2];
    const char* high = kPairs.pairs[triple >> 12];
    const char* low = kPairs.pairs[triple & 4095];
    to[0] = high[0];
    to[1] = high[1];
    to[2] = low[0];
    to[3] = low[1];
  }
  const size_t rest = bytes.size() - in;  // 0, 1 or 2 bytes left
  if (rest > 0) {
    const unsigned triple =
        (unsigned{from[in]} << 16) | (rest == 2 ? unsigned{from[in + 1]} << 8 : 0u);
    to[0] = kAlphabet[(triple >> 18) & 63];
    to[1] = kAlphabet[(triple >> 12) & 63];
    if (rest == 2) to[2] = kAlphabet[(triple >> 6) & 63];
  }
}

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  Base64EncodeAppend(out, bytes);
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
