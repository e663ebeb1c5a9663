// Kubernetes resource names for vGPU types, and the checks kubelet applies to them.
#pragma once

#include <string>
#include <string_view>

#include "common/cross_program.h"
#include "common/status.h"
#include "mdev/model.h"

namespace kvgpu::deviceplugin {

enum class NamingStyle {
  kType,  // <domain>/vgpu-<N> for nvidia-<N> and vendor-VFIO id <N>, <domain>/vgpu-<type-id> else
  kProfile,  // <domain>/vgpu-<profile in lower case> ("vgpu-t4-1q") where the NVIDIA name parses
};

struct NamingOptions {
  std::string domain{kVgpuResourceDomain};
  NamingStyle style = NamingStyle::kType;
};

Result<NamingStyle> ParseNamingStyle(std::string_view text);  // "type" | "profile"
const char* NamingStyleName(NamingStyle style);

// The domain must be a DNS-1123 subdomain outside kubernetes.io, as kubelet requires of an
// extended resource's prefix.
Status ValidateDomain(std::string_view domain);

// The test kubelet runs on Register: "<prefix>/<name>" with a DNS subdomain prefix outside
// kubernetes.io and a name part that is a qualified name (<= 63 characters, alphanumeric at both
// ends, '-', '_', '.' inside), also after kubelet prepends "requests.".
Status ValidateExtendedResourceName(std::string_view name);

// The resource a type of a parent is offered as. Fails (naming the type) when the result would not
// be a valid extended resource name.
Result<std::string> ResourceNameFor(const NamingOptions& options, const mdev::VgpuType& type);

// The socket file kubelet knows the resource's server by: "kata-vgpu-<name part>.sock".
std::string SocketNameFor(std::string_view resource_name);

}  // namespace kvgpu::deviceplugin
