// DRA claims in the admission decision (issue #31): which claims are ours, which containers use
// them, and the decision for every pod shape of dra_pod_cases.cpp, through DecidePod and through
// the whole review path (the pruned parser must keep the claim fields).
#include "webhook/resource_claims.h"

#include <gtest/gtest.h>

#include "tests/webhook/pod_cases.h"
#include "webhook/admission.h"
#include "webhook/config.h"
#include "webhook/pod_mutator.h"

namespace kvgpu::webhook {
namespace {

using nlohmann::json;
using testing::DraPodCase;

TEST(ResourceClaims, OurDeviceClassesAreTheDomainAndItsSubdomains) {
  EXPECT_TRUE(IsOurDeviceClass("vgpu.tencent.com", "vgpu.tencent.com"));
  EXPECT_TRUE(IsOurDeviceClass("vgpu-230.vgpu.tencent.com", "vgpu.tencent.com"));
  EXPECT_FALSE(IsOurDeviceClass("xvgpu.tencent.com", "vgpu.tencent.com"));
  EXPECT_FALSE(IsOurDeviceClass(".vgpu.tencent.com", "vgpu.tencent.com"));
  EXPECT_FALSE(IsOurDeviceClass("vgpu.tencent.com.example", "vgpu.tencent.com"));
  EXPECT_FALSE(IsOurDeviceClass("gpu.nvidia.com", "vgpu.tencent.com"));
  EXPECT_FALSE(IsOurDeviceClass("vgpu.tencent.com", ""));
}

// resource/v1 ResourceClaimSpec (kubernetes/api v0.34.0 resource/v1/types.go).
json ClaimSpec(json requests) {
  return {{"devices", {{"requests", std::move(requests)}}}};
}
json Template(json requests) {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaimTemplate"},
          {"metadata", {{"name", "t"}, {"namespace", "ml"}}},
          {"spec", {{"spec", ClaimSpec(std::move(requests))}}}};
}
json Exactly(const std::string& name, const std::string& device_class) {
  return {{"name", name}, {"exactly", {{"deviceClassName", device_class}, {"count", 1}}}};
}

TEST(ResourceClaims, OurRequestsOfATemplateAndOfAClaim) {
  const json requests =
      json::array({Exactly("vgpu", "vgpu-230.vgpu.tencent.com"),
                   Exactly("nic", "sriov.example.com"),
                   {{"name", "any"},
                    {"firstAvailable",
                     {{{"name", "a100"}, {"deviceClassName", "gpu.nvidia.com"}},
                      {{"name", "t4"}, {"deviceClassName", "vgpu.tencent.com"}}}}}});
  auto from_template = OurRequests(Template(requests), true, "vgpu.tencent.com");
  ASSERT_TRUE(from_template.ok()) << from_template.status().message();
  EXPECT_EQ(*from_template, (std::set<std::string>{"vgpu", "any", "any/t4"}));

  json claim = {{"kind", "ResourceClaim"}, {"spec", ClaimSpec(requests)}};
  auto from_claim = OurRequests(claim, false, "vgpu.tencent.com");
  ASSERT_TRUE(from_claim.ok());
  EXPECT_EQ(*from_claim, *from_template);

  auto other =
      OurRequests(Template({Exactly("nic", "sriov.example.com")}), true, "vgpu.tencent.com");
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->empty());
}

TEST(ResourceClaims, AnObjectThatIsNoV1ClaimIsAnErrorNotAnAnswer) {
  const std::vector<std::pair<std::string, json>> bad = {
      {"a list", json::array()},
      {"no spec", {{"kind", "ResourceClaimTemplate"}}},
      {"a claim where a template belongs", {{"spec", ClaimSpec(json::array())}}},
      {"requests not a list", Template(json::object())},
      // v1beta1's shape: deviceClassName on the request itself.
      {"v1beta1 request", Template({{{"name", "r"}, {"deviceClassName", "vgpu.tencent.com"}}})},
      {"both exactly and firstAvailable", Template({{{"name", "r"},
                                                     {"exactly", {{"deviceClassName", "x"}}},
                                                     {"firstAvailable", json::array()}}})},
      {"class not a string", Template({{{"name", "r"}, {"exactly", {{"deviceClassName", 7}}}}})},
      {"request without a name", Template({{{"exactly", {{"deviceClassName", "x"}}}}})},
  };
  for (const auto& [what, object] : bad) {
    SCOPED_TRACE(what);
    auto result = OurRequests(object, true, "vgpu.tencent.com");
    EXPECT_FALSE(result.ok());
  }
}

TEST(ResourceClaims, OnlyTheClaimsContainersUseAreLookedUp) {
  json spec = {
      {"resourceClaims",
       {{{"name", "a"}, {"resourceClaimTemplateName", "ta"}},
        {{"name", "b"}, {"resourceClaimName", "cb"}},
        {{"name", "unused"}, {"resourceClaimName", "cu"}}}},
      {"containers", {{{"name", "c"}, {"resources", {{"claims", {{{"name", "b"}}}}}}}}},
      {"initContainers",
       {{{"name", "i"}, {"resources", {{"claims", {{{"name", "a"}, {"request", "r"}}}}}}}}}};
  auto refs = ReferencedPodClaims(spec);
  ASSERT_TRUE(refs.ok()) << refs.status().message();
  EXPECT_EQ(*refs, (std::vector<PodClaimSource>{{"a", true, "ta"}, {"b", false, "cb"}}));
}

TEST(ResourceClaims, AMalformedPodClaimIsNamedInTheError) {
  auto with_claim = [](json claim) {
    return json{{"resourceClaims", {std::move(claim)}},
                {"containers", {{{"name", "c"}, {"resources", {{"claims", {{{"name", "a"}}}}}}}}}};
  };
  for (const json& claim :
       {json{{"name", "a"}},
        json{{"name", "a"}, {"resourceClaimName", "x"}, {"resourceClaimTemplateName", "y"}},
        json{{"name", "a"}, {"resourceClaimName", 3}},
        json{{"name", "a"}, {"resourceClaimName", ""}}}) {
    SCOPED_TRACE(claim.dump());
    auto refs = ReferencedPodClaims(with_claim(claim));
    ASSERT_FALSE(refs.ok());
    EXPECT_NE(refs.status().message().find("spec.resourceClaims[0]"), std::string::npos);
  }
  json spec = {{"containers", {{{"name", "c"}, {"resources", {{"claims", "gpu"}}}}}}};
  EXPECT_FALSE(ReferencedPodClaims(spec).ok());
}

std::shared_ptr<const Config> ConfigOf(const std::string& yaml) {
  auto config = ParseConfig(yaml);
  EXPECT_TRUE(config.ok()) << config.status().message();
  return config.ok() ? config.value() : DefaultConfig();
}

TEST(ResourceClaims, EveryDraCaseDecidesAsExpectedAndAsksOnlyForItsClaims) {
  const json review = testing::FixtureReview();
  for (const DraPodCase& c : testing::DraPodCases()) {
    SCOPED_TRACE(c.pod.description);
    auto config = ConfigOf(c.pod.config_yaml);
    json pod = review["request"]["object"];
    c.pod.shape(pod);
    std::vector<PodClaimSource> asked;
    auto decision =
        DecidePod(pod, c.pod.namespace_name, *config, testing::TableResolver(c.claims, &asked));
    ASSERT_TRUE(decision.ok()) << decision.status().message();
    EXPECT_STREQ(PodOutcomeName(decision->outcome), PodOutcomeName(c.pod.expected));
    std::vector<std::string> names;
    for (const auto& source : asked) names.push_back(source.name);
    EXPECT_EQ(names, c.expected_lookups);
    json patched = pod;
    if (decision->outcome == PodOutcome::kMutated) {
      ASSERT_NO_THROW(patched = testing::ApplyPatch(pod, json::parse(decision->patch)));
    }
    if (c.pod.check) c.pod.check(patched, *decision);
    if (decision->outcome != PodOutcome::kMutated) continue;
    // Re-invocation: the marker holds, nothing is added twice.
    auto again =
        DecidePod(patched, c.pod.namespace_name, *config, testing::TableResolver(c.claims));
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->outcome, PodOutcome::kAlreadyInjected);
  }
}

TEST(ResourceClaims, WithoutALookupClaimsAreNotLookedAt) {
  const json review = testing::FixtureReview();
  for (const DraPodCase& c : testing::DraPodCases()) {
    SCOPED_TRACE(c.pod.description);
    json pod = review["request"]["object"];
    c.pod.shape(pod);
    auto decision = DecidePod(pod, c.pod.namespace_name, *ConfigOf(c.pod.config_yaml));
    ASSERT_TRUE(decision.ok());
    const bool extended = pod["spec"]["containers"][0]["resources"].contains("limits");
    if (c.pod.expected == PodOutcome::kMutated && !extended) {
      EXPECT_NE(decision->outcome, PodOutcome::kMutated);
    }
  }
}

TEST(ResourceClaims, TheReviewPathKeepsTheClaimFieldsAndGivesTheSameAnswer) {
  for (const DraPodCase& c : testing::DraPodCases()) {
    SCOPED_TRACE(c.pod.description);
    auto config = ConfigOf(c.pod.config_yaml);
    json review = testing::FixtureReview();
    c.pod.shape(review["request"]["object"]);
    review["request"]["namespace"] = c.pod.namespace_name;
    ReviewReply reply =
        HandleReview(review.dump(), "application/json", *config, testing::TableResolver(c.claims));
    ASSERT_EQ(reply.http_status, 200) << reply.body;
    EXPECT_STREQ(PodOutcomeName(reply.pod_outcome), PodOutcomeName(c.pod.expected));
    ReviewReply whole = HandleReviewDocument(review, *config, testing::TableResolver(c.claims));
    EXPECT_EQ(reply.body, whole.body);
  }
}

TEST(ResourceClaims, ConfigKeysAreCheckedAndTheDefaultsHold) {
  const ClaimSettings& defaults = DefaultConfig()->claims;
  EXPECT_EQ(defaults.device_class_domain, "vgpu.tencent.com");
  EXPECT_EQ(defaults.lookup_timeout, std::chrono::seconds(2));
  EXPECT_EQ(defaults.on_failure, ClaimLookupFailure::kDeny);
  auto allow = ParseConfig("resourceClaims: {onLookupFailure: allow, lookupTimeout: 500ms}");
  ASSERT_TRUE(allow.ok()) << allow.status().message();
  EXPECT_EQ((*allow)->claims.on_failure, ClaimLookupFailure::kAllow);
  EXPECT_EQ((*allow)->claims.lookup_timeout, std::chrono::milliseconds(500));
  EXPECT_EQ((*allow)->claims.cache_entries, 1024u);  // merged key by key
  for (const char* bad :
       {"resourceClaims: {onLookupFailure: maybe}", "resourceClaims: {lookupTimeout: 60s}",
        "resourceClaims: {lookupTimeout: soon}", "resourceClaims: {cacheEntries: -1}",
        "resourceClaims: {cacheBytes: 1e12}", "resourceClaims: {deviceClassDomain: Not_A_Domain}",
        "resourceClaims: {deviceClasses: [x]}", "resourceClaims: []"}) {
    SCOPED_TRACE(bad);
    auto config = ParseConfig(bad);
    ASSERT_FALSE(config.ok());
    EXPECT_NE(config.status().message().find("resourceClaims"), std::string::npos)
        << config.status().message();
  }
}

}  // namespace
}  // namespace kvgpu::webhook
