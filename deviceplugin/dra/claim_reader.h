// What a ResourceClaim allocated to this driver on this node. kubelet's NodePrepareResources names
// a claim only (namespace, name, UID); the devices are in the claim's status on the API server:
// resource.k8s.io/v1 ResourceClaim status.allocation.devices.results[], each with request, driver,
// pool and device (kubernetes/kubernetes staging/src/k8s.io/api/resource/v1/types.go,
// DeviceRequestAllocationResult).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "kube/api_client.h"

namespace kvgpu::deviceplugin::dra {

// resource.k8s.io/v1 AllocationResultsMaxSize: a claim never has more results than this.
inline constexpr size_t kMaxAllocationResults = 32;

struct ClaimRef {
  std::string namespace_;
  std::string uid;
  std::string name;
};

struct AllocatedDevice {
  std::string request;
  std::string pool;
  std::string device;
};

// The API path of the claim.
std::string ResourceClaimPath(const ClaimRef& ref);

// The results for `driver` in `pool`, in the claim's order; results of other drivers or pools are
// left out. Errors: the UID is not the one kubelet named (the claim was deleted and made anew),
// the claim is not allocated, or the status is malformed or over the API's limits.
Result<std::vector<AllocatedDevice>> OurDevices(const nlohmann::json& claim, const ClaimRef& ref,
                                                const std::string& driver, const std::string& pool);

// GET of the claim and OurDevices of it. A missing claim is kGone.
Result<std::vector<AllocatedDevice>> ReadOurDevices(kube::ApiTransport& api, const ClaimRef& ref,
                                                    const std::string& driver,
                                                    const std::string& pool,
                                                    Canceller* cancel = nullptr);

}  // namespace kvgpu::deviceplugin::dra

namespace kvgpu::deviceplugin::dra {

// Whether kubelet's claim reference can name a claim at all (a namespace is a DNS label, a name a
// DNS subdomain, a UID non-empty and short); the reason when not. Checked before the reference
// goes into an API path.
Status CheckClaimRef(const ClaimRef& ref);

}  // namespace kvgpu::deviceplugin::dra
