// Peer-supplied text (device IDs, resource names, kubelet's error messages) as it may appear in
// our logs and in the error messages we send back: control characters, quotes and backslashes
// escaped, non-ASCII bytes as \xNN, and cut at `cap` bytes of input with the length said, so a
// request can neither forge a log line nor make us write (or answer) a megabyte.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvgpu {

inline constexpr size_t kLogSafeCap = 96;

std::string LogSafe(std::string_view text, size_t cap = kLogSafeCap);

}  // namespace kvgpu
