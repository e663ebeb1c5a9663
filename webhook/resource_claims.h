// DRA claims as the admission decision sees them (issue #31): which of a pod's claims its
// containers use, and which requests of a ResourceClaim or ResourceClaimTemplate ask for one of
// kata-vgpu's DeviceClasses. Pure: the objects are fetched elsewhere (claim_lookup.h).
//
// Field names from upstream (kubernetes/api v0.34.0 and v0.36.0, the same in both):
// - core/v1 PodSpec.resourceClaims[]: PodResourceClaim {name, resourceClaimName,
//   resourceClaimTemplateName}, exactly one of the last two set;
// - core/v1 ResourceRequirements.claims[]: ResourceClaim {name, request}: `name` is a
//   PodResourceClaim's, `request` (optional) one request of that claim, else all of it;
// - resource/v1 ResourceClaim.spec and ResourceClaimTemplate.spec.spec: ResourceClaimSpec
//   {devices: DeviceClaim {requests: []DeviceRequest}}; DeviceRequest {name, exactly:
//   ExactDeviceRequest {deviceClassName}, firstAvailable: []DeviceSubRequest {name,
//   deviceClassName}}, exactly one of exactly and firstAvailable set; at most 32 requests
//   (DeviceRequestsMaxSize) and 8 subrequests (FirstAvailableDeviceRequestMaxSize). A result of
//   a subrequest is named "<request>/<subrequest>".
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvgpu::webhook {

// One spec.resourceClaims entry that some container references: the object that says which
// DeviceClasses it asks for.
struct PodClaimSource {
  std::string name;        // the PodResourceClaim's name, as containers reference it
  bool template_ = false;  // resourceClaimTemplateName (true) or resourceClaimName
  std::string object;      // the ResourceClaimTemplate's or ResourceClaim's name
  bool operator==(const PodClaimSource&) const = default;
};

// The claims in a pod's `spec` that any container or init container references, in spec order.
// An error names the malformed field ("spec.resourceClaims[0] ...").
Result<std::vector<PodClaimSource>> ReferencedPodClaims(const nlohmann::json& spec);

// A DeviceClass is kata-vgpu's when its name is `domain` or ends in ".<domain>"
// (vgpu.tencent.com, vgpu-230.vgpu.tencent.com: deploy/components/dra/device-classes.yaml).
bool IsOurDeviceClass(std::string_view class_name, std::string_view domain);

// The requests of a ResourceClaim (`is_template` false) or ResourceClaimTemplate that ask for one
// of our classes: "<request>" for each, and "<request>/<subrequest>" for each subrequest of ours.
// Empty: none. An error says what in the object is not a v1 claim.
Result<std::set<std::string>> OurRequests(const nlohmann::json& object, bool is_template,
                                          std::string_view domain);

// What the lookups found for one pod: by PodResourceClaim name, the requests that are ours
// (absent or empty: none); and for each claim that could not be looked up, why.
struct PodClaims {
  std::map<std::string, std::set<std::string>> ours;
  std::map<std::string, std::string> failed;  // claim name -> reason
};

// The first claim reference of `container` (its resources.claims) that reaches one of our
// requests: "claim" or "claim/request"; "" when none does.
std::string OurClaimReference(const nlohmann::json& container, const PodClaims& claims);

}  // namespace kvgpu::webhook
