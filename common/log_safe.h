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

// A name a peer hands us (a pod's name, namespace or UID, a container's name, a resource name, a
// device ID from kubelet or the API server), made safe once, where it enters, so that no later
// log line or message can be forged by it whoever forgets to escape. Valid Kubernetes names
// (DNS-1123, at most 253 bytes, no byte LogSafe escapes) come out unchanged, so names from
// different sources still match; anything else can match no real object anyway.
inline constexpr size_t kPeerNameCap = 253;
inline std::string PeerName(std::string_view text) {
  return LogSafe(text, kPeerNameCap);
}

}  // namespace kvgpu
