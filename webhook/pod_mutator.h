// The decision for one Pod CREATE: leave it alone, deny it, or the JSON Patch that makes its
// vGPU work inside Kata. Pure: no I/O, no clock, so every pod shape can be tested as a table.
// pod_mutator.cpp decides (the pod's scope, the names injected things take); pod_patch.cpp
// builds the patch the decision asks for.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "webhook/config.h"
#include "webhook/pod_decision.h"
#include "webhook/resource_claims.h"

namespace kvgpu::webhook {

// The most containers of one pod that may ask for a vGPU. A pod is one Kata VM on one node;
// each such container is given its own vGPU device, and NVIDIA supports at most 16 vGPUs in
// one VM (fewer on most boards), while a node hosts at most a few dozen. 32 is twice what any
// VM can be given: a pod past it cannot run anywhere, so it is denied with that reason before
// its patch is built (the patch grows with each vGPU container, and with it the answer).
inline constexpr size_t kMaxVgpuContainersPerPod = 32;

// The metrics label of an outcome (PodOutcome: pod_decision.h).
const char* PodOutcomeName(PodOutcome outcome);

// What the pod's DRA claims ask for, looked up outside this pure function (claim_lookup.h; tests
// pass a table). Called once, only for a pod in scope whose containers reference claims.
using ClaimResolver = std::function<PodClaims(std::string_view namespace_name,
                                              const std::vector<PodClaimSource>& claims)>;

// `pod` is request.object; `namespace_name` is request.namespace (the object's own
// metadata.namespace may be empty on CREATE; it is the fallback when the request names none). An
// error means the object is not a well-formed Pod; the message names the offending field. A
// container that uses a claim of one of our DeviceClasses wants a vGPU as one that asks for a
// `resourcePrefixes` resource does; without `resolve_claims` claims are not looked at.
Result<PodDecision> DecidePod(const nlohmann::json& pod, std::string_view namespace_name,
                              const Config& config, const ClaimResolver& resolve_claims = {});

}  // namespace kvgpu::webhook
