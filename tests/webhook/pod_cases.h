// The pod shapes every webhook test runs over: the real AdmissionReview from kube-apiserver,
// varied one concern at a time. Shared by the gtest suite and by the dump tool whose output the
// OpenAPI validation script checks.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "webhook/pod_mutator.h"

namespace kvgpu::webhook::testing {

struct PodCase {
  using Check = std::function<void(const nlohmann::json& patched, const webhook::PodDecision&)>;
  PodCase(std::string description_, std::function<void(nlohmann::json&)> shape_,
          webhook::PodOutcome expected_, std::string config_yaml_ = "",
          std::string namespace_name_ = "default", Check check_ = {})
      : description(std::move(description_)),
        shape(std::move(shape_)),
        expected(expected_),
        config_yaml(std::move(config_yaml_)),
        namespace_name(std::move(namespace_name_)),
        check(std::move(check_)) {}

  std::string description;
  std::function<void(nlohmann::json& pod)> shape;  // edits the fixture's request.object
  webhook::PodOutcome expected;
  std::string config_yaml;                 // overrides on the defaults; "" = defaults
  std::string namespace_name = "default";  // request.namespace
  // Extra checks on the patched pod (mutated cases) or the decision (others).
  Check check;
};

// A pod that uses DRA claims (dra_pod_cases.cpp), with what the claim lookups find for it.
struct DraPodCase {
  PodCase pod;
  webhook::PodClaims claims;  // the lookups' answer, whatever the pod asks for
  // The pod's claim names the decision must ask about, in order (only claims containers use).
  std::vector<std::string> expected_lookups;
};
std::vector<DraPodCase> DraPodCases();

// A resolver that answers from `table` (only the claims asked for) and records what was asked.
webhook::ClaimResolver TableResolver(const webhook::PodClaims& table,
                                     std::vector<webhook::PodClaimSource>* asked = nullptr);

// The fixture AdmissionReview (tests/webhook/data/pod-create.json).
nlohmann::json FixtureReview();
// The first container of a pod: the fixture's only one, "web".
inline nlohmann::json& Web(nlohmann::json& pod) {
  return pod["spec"]["containers"][0];
}
std::vector<PodCase> PodCases();

// Applies an RFC 6902 patch with nlohmann's implementation (independent of the builder).
nlohmann::json ApplyPatch(const nlohmann::json& document, const nlohmann::json& patch);

}  // namespace kvgpu::webhook::testing
