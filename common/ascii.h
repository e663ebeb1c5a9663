// ASCII character rules, as identifiers on this path use them (PCI addresses, UUIDs, model names,
// Go's case-insensitive JSON keys, Kubernetes and CDI names): locale-free, bytes above 0x7f left
// alone and never letters or digits.
#pragma once

#include <string>
#include <string_view>

namespace kvgpu {

std::string AsciiLower(std::string_view text);
bool EqualsIgnoringAsciiCase(std::string_view a, std::string_view b);

inline bool IsAsciiAlpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
inline bool IsAsciiAlnum(char c) {
  return IsAsciiAlpha(c) || (c >= '0' && c <= '9');
}

}  // namespace kvgpu
