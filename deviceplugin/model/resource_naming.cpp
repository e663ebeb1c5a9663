#include "deviceplugin/model/resource_naming.h"

#include <algorithm>

#include "common/ascii.h"
#include "common/cross_program.h"
#include "mdev/nvidia.h"

namespace kvgpu::deviceplugin {
namespace {

bool IsLowerAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

// RFC 1123 subdomain: labels of [a-z0-9-], alphanumeric at both ends, joined by '.', <= 253.
bool IsDnsSubdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  while (true) {
    size_t dot = s.find('.', start);
    std::string_view label = s.substr(start, dot == std::string_view::npos ? s.npos : dot - start);
    if (label.empty() || label.size() > 63) return false;
    if (!IsLowerAlnum(label.front()) || !IsLowerAlnum(label.back())) return false;
    for (char c : label) {
      if (!IsLowerAlnum(c) && c != '-') return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

// The name part of a Kubernetes qualified name.
bool IsQualifiedNamePart(std::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  if (!IsAsciiAlnum(s.front()) || !IsAsciiAlnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return IsAsciiAlnum(c) || c == '-' || c == '_' || c == '.'; });
}

bool InKubernetesDomain(std::string_view domain) {
  constexpr std::string_view kK8s = "kubernetes.io";
  if (domain == kK8s) return true;
  return domain.size() > kK8s.size() && domain.ends_with(kK8s) &&
         domain[domain.size() - kK8s.size() - 1] == '.';
}

}  // namespace

Result<NamingStyle> ParseNamingStyle(std::string_view text) {
  if (text == "type") return NamingStyle::kType;
  if (text == "profile") return NamingStyle::kProfile;
  return Status::Error(ErrorCode::kInvalid,
                       "naming style \"" + std::string(text) + "\" is not one of: type, profile");
}

const char* NamingStyleName(NamingStyle style) {
  return style == NamingStyle::kProfile ? "profile" : "type";
}

Status ValidateDomain(std::string_view domain) {
  if (!IsDnsSubdomain(domain)) {
    return Status::Error(ErrorCode::kInvalid,
                         "resource domain \"" + std::string(domain) +
                             "\" is not a DNS subdomain (lower-case letters, digits, '-' and '.', "
                             "like tencent.com)");
  }
  // kubelet checks "requests.<name>" too, which costs the prefix 9 characters.
  if (domain.size() + 9 > 253) {
    return Status::Error(ErrorCode::kInvalid, "resource domain is longer than 244 characters");
  }
  if (InKubernetesDomain(domain)) {
    return Status::Error(ErrorCode::kInvalid, "resource domain \"" + std::string(domain) +
                                                  "\" is reserved by Kubernetes; use your own");
  }
  return Status::Ok();
}

Status ValidateExtendedResourceName(std::string_view name) {
  size_t slash = name.find('/');
  if (slash == std::string_view::npos || name.find('/', slash + 1) != std::string_view::npos) {
    return Status::Error(ErrorCode::kInvalid, "resource name \"" + std::string(name) +
                                                  "\" must be <domain>/<name> with one '/'");
  }
  Status domain = ValidateDomain(name.substr(0, slash));
  if (!domain.ok()) return domain;
  if (!IsQualifiedNamePart(name.substr(slash + 1))) {
    return Status::Error(ErrorCode::kInvalid,
                         "resource name \"" + std::string(name) +
                             "\": the part after '/' must be at most 63 characters of letters, "
                             "digits, '-', '_' or '.', starting and ending with a letter or digit");
  }
  return Status::Ok();
}

Result<std::string> ResourceNameFor(const NamingOptions& options, const mdev::VgpuType& type) {
  std::string part;
  if (options.style == NamingStyle::kProfile && type.profile) {
    part = std::string(kVgpuResourceStem) + AsciiLower(type.profile->profile);
  } else if (mdev::IsNvidiaMdevType(type.id)) {
    part = std::string(kVgpuResourceStem) + type.id.substr(type.id.find('-') + 1);
  } else {
    // Vendor-VFIO ids are already the bare number; other drivers keep their whole type id.
    part = std::string(kVgpuResourceStem) + type.id;
  }
  std::string name = options.domain + "/" + part;
  Status valid = ValidateExtendedResourceName(name);
  if (!valid.ok()) {
    return Status::Error(ErrorCode::kInvalid,
                         "vGPU type \"" + type.id + "\" cannot be offered: " + valid.message());
  }
  return name;
}

std::string SocketNameFor(std::string_view resource_name) {
  size_t slash = resource_name.find('/');
  std::string part(slash == std::string_view::npos ? resource_name
                                                   : resource_name.substr(slash + 1));
  return "kata-vgpu-" + part + ".sock";
}

}  // namespace kvgpu::deviceplugin
