// What a prepared kata-vgpu node has installed besides its kernel, laid out under a root the way
// the installers leave it (docs/install.md steps 2-4 and the running device plugin): Kata under
// /opt/kata, kata-config/install.sh's configurations, QEMU wrapper and containerd block,
// guest-image/build.sh install's kernel and driver bundle, the licensing files the plugin
// publishes, kubelet's and the plugin's sockets and the plugin's state file. The doctor's tests and
// the demo pair it with the kernel model to get a whole healthy node, then break one piece.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "common/status.h"

namespace kvgpu::sim {

struct HostSoftware {
  std::string kata_version = "3.27.0";
  std::string guest_driver_version = "550.90.07";  // the R550 guest driver of vGPU 17.3
  std::string guest_kernel_release = "6.1.119-kvgpu3";
  int64_t token_expiry_unix_s = 0;           // the licence token's `exp`; 0: a year from now
  std::string plugin_resource = "vgpu-222";  // names the plugin's socket kata-vgpu-<this>.sock
};

// Lays it out under `root` (which may already hold the kernel model's tree). The Kata binaries are
// shell scripts that print what the real ones print for --version.
Status LayOutHostSoftware(const std::filesystem::path& root, const HostSoftware& spec = {});

// An NLS client configuration token shaped as NVIDIA's: a JWS compact serialisation whose payload
// carries `iat` and `exp` (unsigned here: the doctor reads the claims, it cannot check NVIDIA's
// signature).
std::string ClientConfigToken(int64_t issued_unix_s, int64_t expires_unix_s);

}  // namespace kvgpu::sim
