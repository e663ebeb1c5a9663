#pragma once

#include <string>
#include <string_view>

namespace kvgpu::mdev {

// 8-4-4-4-12 hex digits, as the kernel's uuid_parse accepts (either case).
bool IsValidUuid(std::string_view text);
// Canonical lower-case form; the input must be valid.
std::string NormalizeUuid(std::string_view text);
// A random (version 4) UUID from the OS's entropy.
std::string NewUuid();

}  // namespace kvgpu::mdev
