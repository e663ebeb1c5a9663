// ASCII case rules, as identifiers on this path use them (PCI addresses, UUIDs, model names, Go's
// case-insensitive JSON keys): locale-free, bytes above 0x7f left alone.
#pragma once

#include <string>
#include <string_view>

namespace kvgpu {

std::string AsciiLower(std::string_view text);
bool EqualsIgnoringAsciiCase(std::string_view a, std::string_view b);

}  // namespace kvgpu
