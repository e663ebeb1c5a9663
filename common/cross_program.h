// Values that more than one program must agree on (the device plugin, the webhook, the extender,
// vgpuctl, the validator), written once so that they cannot drift apart. deploy/ and docs/ repeat
// them as data; tests/lint/cross_program_constants.py checks that they still say the same, and that
// no other C++ file writes them again.
#pragma once

#include <string_view>

namespace kvgpu {

// The default start of every vGPU extended resource name: "tencent.com/vgpu-222" for nvidia-222.
// The device plugin advertises under it, the webhook and the extender recognise pods by it.
inline constexpr std::string_view kVgpuResourcePrefix = "tencent.com/vgpu-";
// Its two halves, for the device plugin, which names resources <domain>/vgpu-<type> with a
// configurable domain.
inline constexpr std::string_view kVgpuResourceDomain =
    kVgpuResourcePrefix.substr(0, kVgpuResourcePrefix.find('/'));
inline constexpr std::string_view kVgpuResourceStem =
    kVgpuResourcePrefix.substr(kVgpuResourcePrefix.find('/') + 1);

// The node directory the device plugin publishes the licence into (gridd.conf and
// ClientConfigToken/), which the webhook's nvidia-gridd sidecar mounts and vgpuctl doctor checks.
inline constexpr std::string_view kLicensingDir = "/var/lib/kata-vgpu/licensing";

// The DRA driver's name (the default of the device plugin's dra.driverName): its kubelet
// registration and ResourceSlices go under it, deploy/'s DeviceClasses select it and are named
// "<type>.<it>", and the webhook knows a DeviceClass as kata-vgpu's by that name (its default
// resourceClaims.deviceClassDomain).
inline constexpr std::string_view kDraDriverName = "vgpu.tencent.com";

}  // namespace kvgpu
