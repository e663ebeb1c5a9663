// Pods whose containers use DRA claims (issue #31): the decision treats a container that uses a
// claim of our DeviceClasses as one that asks for a `tencent.com/vgpu-*` resource.
#include <gtest/gtest.h>

#include "tests/webhook/pod_cases.h"

namespace kvgpu::webhook::testing {
namespace {

using nlohmann::json;
using webhook::PodOutcome;

// core/v1 PodResourceClaim and container ResourceClaim (kubernetes/api v0.34.0-v0.36.0
// core/v1/types.go): `name` + one of resourceClaimName / resourceClaimTemplateName; containers
// reference `name` and optionally one `request`.
void Claim(json& pod, const std::string& name, const char* source, const std::string& object) {
  pod["spec"]["resourceClaims"].push_back({{"name", name}, {source, object}});
}
void Uses(json& container, const std::string& claim, const std::string& request = "") {
  json ref = {{"name", claim}};
  if (!request.empty()) ref["request"] = request;
  container["resources"]["claims"].push_back(ref);
}
// The fixture pod under Kata with a second container "sidecar" that uses nothing.
void KataTwoContainers(json& pod) {
  pod["spec"]["runtimeClassName"] = "kata";
  json second = Web(pod);
  second["name"] = "sidecar";
  second["resources"] = json::object();
  pod["spec"]["containers"].push_back(second);
}

bool MountsDriver(const json& container) {
  for (const auto& mount : container.value("volumeMounts", json::array()))
    if (mount["mountPath"] == "/usr/local/nvidia") return true;
  return false;
}

// The full setup went to the first container only.
void InjectedForWebOnly(const json& pod, const PodDecision&) {
  ASSERT_TRUE(pod["spec"]["initContainers"].is_array());
  EXPECT_EQ(pod["spec"]["initContainers"][0]["name"], "kvgpu-driver-init");
  EXPECT_EQ(pod["spec"]["initContainers"][1]["name"], "nvidia-gridd");
  EXPECT_TRUE(MountsDriver(pod["spec"]["containers"][0]));
  EXPECT_FALSE(MountsDriver(pod["spec"]["containers"][1]));
}

webhook::PodClaims Ours(std::map<std::string, std::set<std::string>> ours) {
  webhook::PodClaims claims;
  claims.ours = std::move(ours);
  return claims;
}

}  // namespace

webhook::ClaimResolver TableResolver(const webhook::PodClaims& table,
                                     std::vector<webhook::PodClaimSource>* asked) {
  return [table, asked](std::string_view, const std::vector<webhook::PodClaimSource>& sources) {
    webhook::PodClaims out;
    for (const auto& source : sources) {
      if (asked != nullptr) asked->push_back(source);
      if (auto it = table.ours.find(source.name); it != table.ours.end())
        out.ours[source.name] = it->second;
      if (auto it = table.failed.find(source.name); it != table.failed.end())
        out.failed[source.name] = it->second;
    }
    return out;
  };
}

std::vector<DraPodCase> DraPodCases() {
  std::vector<DraPodCase> cases;
  cases.push_back({{"kata pod whose container uses a claim template of our class: full setup "
                    "for that container",
                    [](json& pod) {
                      KataTwoContainers(pod);
                      Claim(pod, "gpu", "resourceClaimTemplateName", "vgpu-230");
                      Uses(Web(pod), "gpu");
                    },
                    PodOutcome::kMutated, "", "default", InjectedForWebOnly},
                   Ours({{"gpu", {"vgpu"}}}),
                   {"gpu"}});
  cases.push_back({{"a claim by name (resourceClaimName) of our class: full setup",
                    [](json& pod) {
                      KataTwoContainers(pod);
                      Claim(pod, "shared", "resourceClaimName", "team-vgpu");
                      Uses(Web(pod), "shared");
                    },
                    PodOutcome::kMutated, "", "default", InjectedForWebOnly},
                   Ours({{"shared", {"vgpu"}}}),
                   {"shared"}});
  cases.push_back({{"another driver's claim (no request of ours): untouched",
                    [](json& pod) {
                      KataTwoContainers(pod);
                      Claim(pod, "nic", "resourceClaimTemplateName", "sriov-nic");
                      Uses(Web(pod), "nic");
                    },
                    PodOutcome::kNoVgpu},
                   Ours({{"nic", {}}}),
                   {"nic"}});
  cases.push_back({{"a container that uses only the other driver's request of a mixed claim: "
                    "untouched",
                    [](json& pod) {
                      KataTwoContainers(pod);
                      Claim(pod, "mixed", "resourceClaimTemplateName", "vgpu-and-nic");
                      Uses(Web(pod), "mixed", "nic");
                    },
                    PodOutcome::kNoVgpu},
                   Ours({{"mixed", {"vgpu"}}}),
                   {"mixed"}});
  cases.push_back({{"the container that uses our request of a mixed claim gets the setup, the "
                    "one that uses the other request does not",
                    [](json& pod) {
                      KataTwoContainers(pod);
                      Claim(pod, "mixed", "resourceClaimTemplateName", "vgpu-and-nic");
                      Uses(Web(pod), "mixed", "vgpu");
                      Uses(pod["spec"]["containers"][1], "mixed", "nic");
                    },
                    PodOutcome::kMutated, "", "default", InjectedForWebOnly},
                   Ours({{"mixed", {"vgpu"}}}),
                   {"mixed"}});
  cases.push_back({{"a firstAvailable subrequest of our class, referenced as request/subrequest",
                    [](json& pod) {
                      KataTwoContainers(pod);
                      Claim(pod, "gpu", "resourceClaimTemplateName", "t4-or-l4");
                      Uses(Web(pod), "gpu", "any/t4");
                    },
                    PodOutcome::kMutated, "", "default", InjectedForWebOnly},
                   Ours({{"gpu", {"any", "any/t4"}}}),
                   {"gpu"}});
  cases.push_back({{"a claim declared but used by no container is not looked up",
                    [](json& pod) {
                      KataTwoContainers(pod);
                      Claim(pod, "unused", "resourceClaimTemplateName", "vgpu-230");
                    },
                    PodOutcome::kNoVgpu},
                   Ours({{"unused", {"vgpu"}}}),
                   {}});
  cases.push_back(
      {{"a non-Kata pod using our claim is denied, naming the container and the claim",
        [](json& pod) {
          Claim(pod, "gpu", "resourceClaimTemplateName", "vgpu-230");
          Uses(Web(pod), "gpu");
        },
        PodOutcome::kDenied, "", "default",
        [](const json&, const PodDecision& decision) {
          EXPECT_NE(decision.message.find("a vGPU through DRA claim \"gpu\""), std::string::npos)
              << decision.message;
          EXPECT_NE(decision.message.find("runtimeClassName"), std::string::npos);
        }},
       Ours({{"gpu", {"vgpu"}}}),
       {"gpu"}});
  webhook::PodClaims failed;
  failed.failed["gpu"] = "ResourceClaimTemplate vgpu-230: no answer within 2000ms";
  cases.push_back(
      {{"a lookup that failed, onLookupFailure deny (default): denied, saying which and why",
        [](json& pod) {
          KataTwoContainers(pod);
          Claim(pod, "gpu", "resourceClaimTemplateName", "vgpu-230");
          Uses(Web(pod), "gpu");
        },
        PodOutcome::kDenied, "", "default",
        [](const json&, const PodDecision& decision) {
          EXPECT_NE(decision.message.find("claim \"gpu\""), std::string::npos);
          EXPECT_NE(decision.message.find("no answer within 2000ms"), std::string::npos);
        }},
       failed,
       {"gpu"}});
  cases.push_back(
      {{"a lookup that failed, onLookupFailure allow: admitted untouched, with a warning",
        [](json& pod) {
          KataTwoContainers(pod);
          Claim(pod, "gpu", "resourceClaimTemplateName", "vgpu-230");
          Uses(Web(pod), "gpu");
        },
        PodOutcome::kNoVgpu, "resourceClaims: {onLookupFailure: allow}", "default",
        [](const json&, const PodDecision& decision) {
          ASSERT_EQ(decision.warnings.size(), 1u);
          EXPECT_NE(decision.warnings[0].find("no answer within 2000ms"), std::string::npos);
        }},
       failed,
       {"gpu"}});
  cases.push_back(
      {{"a lookup that failed, onLookupFailure allow, the pod also asks for an extended "
        "resource: injected for that, with the warning",
        [](json& pod) {
          KataTwoContainers(pod);
          Claim(pod, "gpu", "resourceClaimTemplateName", "vgpu-230");
          Uses(pod["spec"]["containers"][1], "gpu");
          Web(pod)["resources"]["limits"]["tencent.com/vgpu-230"] = "1";
        },
        PodOutcome::kMutated, "resourceClaims: {onLookupFailure: allow}", "default",
        [](const json& pod, const PodDecision& decision) {
          InjectedForWebOnly(pod, decision);
          EXPECT_FALSE(decision.warnings.empty());
        }},
       failed,
       {"gpu"}});
  cases.push_back({{"re-invocation (marker present) with a failed lookup: not refused, warned",
                    [](json& pod) {
                      KataTwoContainers(pod);
                      Claim(pod, "gpu", "resourceClaimTemplateName", "vgpu-230");
                      Uses(Web(pod), "gpu");
                      pod["metadata"]["annotations"]["kata-vgpu.io/injected"] = "true";
                    },
                    // Allowed as it is: the failed claim counts as not ours.
                    PodOutcome::kNoVgpu, "", "default",
                    [](const json&, const PodDecision& decision) {
                      EXPECT_TRUE(decision.allowed);
                      ASSERT_EQ(decision.warnings.size(), 1u);
                    }},
                   failed,
                   {"gpu"}});
  cases.push_back(
      {{"KEP-5004: a pod whose tencent.com/vgpu-* limit DRA allocates through the class's "
        "extendedResourceName is injected as before, with no lookup",
        [](json& pod) {
          KataTwoContainers(pod);
          Web(pod)["resources"]["limits"]["tencent.com/vgpu-230"] = "1";
        },
        PodOutcome::kMutated, "", "default", InjectedForWebOnly},
       failed,  // a lookup, if made, would fail the pod
       {}});
  cases.push_back({{"claims in an excluded namespace are not looked up",
                    [](json& pod) {
                      KataTwoContainers(pod);
                      Claim(pod, "gpu", "resourceClaimTemplateName", "vgpu-230");
                      Uses(Web(pod), "gpu");
                    },
                    PodOutcome::kExcludedNamespace, "", "kube-system"},
                   Ours({{"gpu", {"vgpu"}}}),
                   {}});
  return cases;
}

}  // namespace kvgpu::webhook::testing
