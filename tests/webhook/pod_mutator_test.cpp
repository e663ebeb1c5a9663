// Table-driven over every pod shape in pod_cases.cpp: the decision, the patch applied by an
// independent JSON Patch implementation, the invariants of the patched pod, and idempotence.
#include <gtest/gtest.h>

#include <set>

#include "common/base64.h"
#include "tests/webhook/pod_cases.h"
#include "webhook/admission.h"
#include "webhook/config.h"
#include "webhook/json_patch.h"

namespace kvgpu::webhook {
namespace {

using nlohmann::json;
using testing::PodCase;

std::shared_ptr<const Config> ConfigFor(const PodCase& c) {
  auto config = ParseConfig(c.config_yaml);
  EXPECT_TRUE(config.ok()) << config.status().message();
  return config.ok() ? config.value() : DefaultConfig();
}

bool AsksForVgpu(const json& container, const Config& config) {
  for (const char* kind : {"limits", "requests"}) {
    const json& list = container.value("resources", json::object()).value(kind, json::object());
    if (!list.is_object()) continue;
    for (const auto& [name, quantity] : list.items())
      for (const auto& prefix : config.resource_prefixes)
        if (name.starts_with(prefix) && quantity != "0" && quantity != 0) return true;
  }
  return false;
}

// What the API server's validation would reject, and what this project promises on top.
void ExpectValidInjectedPod(const json& before, const json& pod, const Config& config) {
  std::set<std::string> container_names, volume_names;
  for (const auto& v : pod["spec"]["volumes"]) {
    EXPECT_TRUE(volume_names.insert(v["name"].get<std::string>()).second) << v["name"];
  }
  for (const char* list : {"initContainers", "containers", "ephemeralContainers"}) {
    if (!pod["spec"].contains(list)) continue;
    for (const auto& c : pod["spec"][list]) {
      EXPECT_TRUE(container_names.insert(c["name"].get<std::string>()).second) << c["name"];
      std::set<std::string> paths, env;
      for (const auto& m : c.value("volumeMounts", json::array())) {
        if (m.is_null()) continue;
        EXPECT_TRUE(volume_names.contains(m["name"].get<std::string>())) << m["name"];
        EXPECT_TRUE(paths.insert(m["mountPath"].get<std::string>()).second) << m["mountPath"];
      }
      const json& env_list = c.contains("env") && c["env"].is_array() ? c["env"] : json::array();
      for (const auto& e : env_list)
        EXPECT_TRUE(env.insert(e["name"].get<std::string>()).second) << e["name"];
    }
  }
  EXPECT_EQ(pod["metadata"]["annotations"][config.marker_annotation], "true");

  // Every user container is still there, in order, with everything it had.
  for (const char* list : {"containers", "initContainers"}) {
    const json& old_list = before["spec"].value(list, json::array());
    if (!old_list.is_array()) continue;
    std::vector<std::string> kept;
    for (const auto& c : pod["spec"].value(list, json::array()))
      kept.push_back(c["name"].get<std::string>());
    size_t at = 0;
    for (const auto& c : old_list) {
      while (at < kept.size() && kept[at] != c["name"]) ++at;
      EXPECT_LT(at, kept.size()) << "user container " << c["name"] << " lost or reordered";
    }
  }

  // Injected containers never take a vGPU. On hot-plug none of them may hold back the start of
  // the containers whose creation attaches the vGPU: no ordinary init container (it would have
  // to finish first) and no startup probe on a sidecar (the next containers wait for it).
  std::set<std::string> user_names;
  for (const char* list : {"containers", "initContainers", "ephemeralContainers"})
    for (const auto& c : before["spec"].value(list, json::array()))
      user_names.insert(c["name"].get<std::string>());
  const json& runtime_class = pod["spec"]["runtimeClassName"];
  const bool hot_plug =
      config.AttachModeOf(runtime_class.get<std::string>()) == AttachMode::kHotPlug;
  int injected = 0;
  for (const char* list : {"containers", "initContainers"}) {
    for (const auto& c : pod["spec"].value(list, json::array())) {
      if (user_names.contains(c["name"].get<std::string>())) continue;
      ++injected;
      SCOPED_TRACE(c["name"].get<std::string>());
      EXPECT_FALSE(AsksForVgpu(c, config));
      if (hot_plug && list == std::string_view("initContainers")) {
        EXPECT_EQ(c.value("restartPolicy", ""), "Always");
        EXPECT_FALSE(c.contains("startupProbe"));
      }
    }
  }
  EXPECT_EQ(injected, 2);
  std::string driver_path = config.workload_mounts[0].object["mountPath"];
  for (const char* list : {"containers", "initContainers"}) {
    for (const auto& c : pod["spec"].value(list, json::array())) {
      if (!AsksForVgpu(c, config)) continue;
      bool mounted = false;
      for (const auto& m : c["volumeMounts"]) mounted |= m["mountPath"] == driver_path;
      EXPECT_TRUE(mounted) << c["name"] << " has no driver mount";
    }
  }
}

TEST(PodMutator, EveryCaseDecidesAsExpectedAndEveryPatchApplies) {
  json review = testing::FixtureReview();
  for (const PodCase& c : testing::PodCases()) {
    SCOPED_TRACE(c.description);
    auto config = ConfigFor(c);
    json pod = review["request"]["object"];
    c.shape(pod);
    auto decision = DecidePod(pod, c.namespace_name, *config);
    ASSERT_TRUE(decision.ok()) << decision.status().message();
    EXPECT_STREQ(PodOutcomeName(decision->outcome), PodOutcomeName(c.expected));
    EXPECT_EQ(decision->allowed, c.expected != PodOutcome::kDenied);
    if (decision->outcome != PodOutcome::kMutated) {
      EXPECT_TRUE(decision->patch.empty());
      if (c.check) c.check(pod, decision.value());
      continue;
    }
    json patched;
    ASSERT_NO_THROW(patched = testing::ApplyPatch(pod, json::parse(decision->patch)))
        << decision->patch;
    ExpectValidInjectedPod(pod, patched, *config);
    if (c.check) c.check(patched, decision.value());

    // Re-invocation (reinvocationPolicy: IfNeeded) and repeated admission add nothing.
    auto again = DecidePod(patched, c.namespace_name, *config);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->outcome, PodOutcome::kAlreadyInjected);
  }
}

TEST(PodMutator, ReviewResponseCarriesTheSamePatchBase64Encoded) {
  json review = testing::FixtureReview();
  for (const PodCase& c : testing::PodCases()) {
    SCOPED_TRACE(c.description);
    auto config = ConfigFor(c);
    c.shape(review["request"]["object"]);
    review["request"]["namespace"] = c.namespace_name;
    ReviewReply reply = HandleReview(review.dump(), "application/json", *config);
    ASSERT_EQ(reply.http_status, 200) << reply.body;
    json response = json::parse(reply.body);
    EXPECT_EQ(response["apiVersion"], "admission.k8s.io/v1");
    EXPECT_EQ(response["kind"], "AdmissionReview");
    EXPECT_EQ(response["response"]["uid"], review["request"]["uid"]);
    EXPECT_EQ(response["response"]["allowed"], c.expected != PodOutcome::kDenied);
    EXPECT_EQ(response["response"].contains("patch"), c.expected == PodOutcome::kMutated);
    if (c.expected == PodOutcome::kDenied) {
      EXPECT_EQ(response["response"]["status"]["code"], 403);
      EXPECT_FALSE(response["response"]["status"]["message"].get<std::string>().empty());
    }
    if (c.expected == PodOutcome::kMutated) {
      EXPECT_EQ(response["response"]["patchType"], "JSONPatch");
      auto direct = DecidePod(review["request"]["object"], c.namespace_name, *config);
      ASSERT_TRUE(direct.ok());
      EXPECT_EQ(response["response"]["patch"], Base64Encode(direct->patch));
    }
    review = testing::FixtureReview();
  }
}

// The fixture pod under Kata, asking for one vGPU.
json KataVgpuPod() {
  json pod = testing::FixtureReview()["request"]["object"];
  pod["spec"]["runtimeClassName"] = "kata";
  pod["spec"]["containers"][0]["resources"] = {{"limits", {{"tencent.com/vgpu-492", "1"}}}};
  return pod;
}

// `pod` after its first admission as the API server stores it: the patch applied, and a
// hostPath without a type defaulted to type "" (the API server defaults what it decodes).
json InjectedOnce(const json& pod, const Config& config) {
  auto first = DecidePod(pod, "default", config);
  EXPECT_TRUE(first.ok() && first->outcome == PodOutcome::kMutated);
  if (!first.ok()) return pod;
  json injected = testing::ApplyPatch(pod, json::parse(first->patch));
  for (auto& volume : injected["spec"]["volumes"])
    if (volume.contains("hostPath") && !volume["hostPath"].contains("type"))
      volume["hostPath"]["type"] = "";
  return injected;
}

// A webhook that runs after this one (reinvocationPolicy: IfNeeded) adds a container asking for a
// vGPU to a pod already set up: on re-invocation that container gets the driver mount on the
// volume injected the first time, under whatever name the volume got, and nothing is injected
// twice.
TEST(PodMutator, ReinvocationGivesAContainerAddedLaterTheDriverMount) {
  const auto config = DefaultConfig();
  struct Shape {
    const char* description;
    std::function<void(json&)> before;  // on the user's pod
    const char* expected_volume;
  };
  for (const Shape& shape :
       {Shape{"plain", [](json&) {}, "kvgpu-driver"},
        Shape{"the user's own volume named like ours",
              [](json& pod) {
                pod["spec"]["volumes"].push_back({{"name", "kvgpu-driver"}, {"emptyDir", {}}});
              },
              "kvgpu-driver-2"}}) {
    SCOPED_TRACE(shape.description);
    json pod = KataVgpuPod();
    shape.before(pod);
    json injected = InjectedOnce(pod, *config);
    // The later webhook's container.
    injected["spec"]["containers"].push_back(
        {{"name", "late"},
         {"image", "cuda"},
         {"resources", {{"limits", {{"tencent.com/vgpu-492", "1"}}}}}});

    auto again = DecidePod(injected, "default", *config);
    ASSERT_TRUE(again.ok()) << again.status().message();
    EXPECT_EQ(again->outcome, PodOutcome::kCompleted);
    json completed = testing::ApplyPatch(injected, json::parse(again->patch));
    EXPECT_EQ(completed["spec"]["volumes"], injected["spec"]["volumes"]) << "no volume twice";
    EXPECT_EQ(completed["spec"]["initContainers"], injected["spec"]["initContainers"])
        << "no injected container twice";
    const json& late = completed["spec"]["containers"].back();
    ASSERT_TRUE(late.contains("volumeMounts")) << late.dump();
    EXPECT_EQ(late["volumeMounts"], json::array({{{"name", shape.expected_volume},
                                                  {"mountPath", "/usr/local/nvidia"},
                                                  {"readOnly", true}}}));
    EXPECT_EQ(completed["spec"]["containers"][0], injected["spec"]["containers"][0]);

    auto third = DecidePod(completed, "default", *config);
    ASSERT_TRUE(third.ok());
    EXPECT_EQ(third->outcome, PodOutcome::kAlreadyInjected);
    EXPECT_TRUE(third->patch.empty());

    // The reply carries the completing patch like a first injection's.
    json review = testing::FixtureReview();
    review["request"]["object"] = injected;
    ReviewReply reply = HandleReview(review.dump(), "application/json", *config);
    ASSERT_EQ(reply.http_status, 200) << reply.body;
    EXPECT_EQ(reply.outcome, ReviewOutcome::kMutated);
    json response = json::parse(reply.body)["response"];
    EXPECT_EQ(response["patchType"], "JSONPatch");
    EXPECT_EQ(response["patch"], Base64Encode(again->patch));
  }
}

// Issue #26: a mutated pod whose marker annotation another webhook removed got a second
// driver loader, a second gridd and four -2 volumes. The injected volumes and containers are
// recognised without the marker, under whatever names clashes gave them.
TEST(PodMutator, APodInjectedBeforeIsNotInjectedTwiceWhenItsMarkerIsGone) {
  const auto config = DefaultConfig();
  for (bool clash : {false, true}) {
    SCOPED_TRACE(clash ? "injected names renamed by clashes" : "injected names as configured");
    json pod = KataVgpuPod();
    if (clash) {
      pod["spec"]["volumes"].push_back({{"name", "kvgpu-dev"}, {"emptyDir", json::object()}});
      pod["spec"]["containers"].push_back({{"name", "nvidia-gridd"}, {"image", "busybox"}});
    }
    json injected = InjectedOnce(pod, *config);
    injected["metadata"]["annotations"].erase("kata-vgpu.io/injected");

    auto again = DecidePod(injected, "default", *config);
    ASSERT_TRUE(again.ok()) << again.status().message();
    EXPECT_EQ(again->outcome, PodOutcome::kAlreadyInjected);
    EXPECT_TRUE(again->patch.empty()) << again->patch;
  }
}

// The other side: a user's pod that only looks a little like ours (a container named like
// gridd, no injected volumes) is still injected.
TEST(PodMutator, AContainerNamedLikeOursAloneDoesNotCountAsInjected) {
  const auto config = DefaultConfig();
  json pod = KataVgpuPod();
  pod["spec"]["containers"].push_back({{"name", "nvidia-gridd"}, {"image", "busybox"}});
  pod["spec"]["containers"].push_back({{"name", "kvgpu-driver-init"}, {"image", "busybox"}});
  auto decision = DecidePod(pod, "default", *config);
  ASSERT_TRUE(decision.ok()) << decision.status().message();
  EXPECT_EQ(decision->outcome, PodOutcome::kMutated);
}

TEST(PodMutator, AMarkerWithoutTheInjectedVolumesAddsNothing) {
  // Someone set the marker by hand: the pod opted out of injection in effect, and no mount may
  // point at a volume the pod does not have.
  const auto config = DefaultConfig();
  json pod = testing::FixtureReview()["request"]["object"];
  pod["spec"]["runtimeClassName"] = "kata";
  pod["spec"]["containers"][0]["resources"] = {{"limits", {{"tencent.com/vgpu-492", "1"}}}};
  pod["metadata"]["annotations"]["kata-vgpu.io/injected"] = "true";
  auto decision = DecidePod(pod, "default", *config);
  ASSERT_TRUE(decision.ok());
  EXPECT_EQ(decision->outcome, PodOutcome::kAlreadyInjected);
  EXPECT_TRUE(decision->patch.empty());
}

TEST(PodMutator, MalformedPodFieldsAreErrorsNamingTheField) {
  struct Bad {
    const char* description;
    std::function<void(json&)> shape;
    const char* field;
  };
  std::vector<Bad> table = {
      {"containers not a list", [](json& p) { p["spec"]["containers"] = "web"; },
       "spec.containers"},
      {"spec missing", [](json& p) { p.erase("spec"); }, "spec"},
      {"container without name", [](json& p) { p["spec"]["containers"][0].erase("name"); },
       "spec.containers[0]"},
      {"limits a list",
       [](json& p) { p["spec"]["containers"][0]["resources"]["limits"] = json::array(); },
       "spec.containers[0].resources.limits"},
      {"annotations a string", [](json& p) { p["metadata"]["annotations"] = "x"; }, "annotations"},
      {"runtimeClassName a number",
       [](json& p) {
         p["spec"]["runtimeClassName"] = 7;
         p["spec"]["containers"][0]["resources"]["limits"]["tencent.com/vgpu-1"] = "1";
       },
       "runtimeClassName"},
      {"env a map on a vGPU container",
       [](json& p) {
         p["spec"]["runtimeClassName"] = "kata";
         p["spec"]["containers"][0]["resources"]["limits"]["tencent.com/vgpu-1"] = "1";
         p["spec"]["containers"][0]["env"] = json::object({{"A", "b"}});
       },
       "spec.containers[0].env"},
      {"volumes without names",
       [](json& p) {
         p["spec"]["runtimeClassName"] = "kata";
         p["spec"]["containers"][0]["resources"]["limits"]["tencent.com/vgpu-1"] = "1";
         p["spec"]["volumes"] = json::array({json::object()});
       },
       "spec.volumes"},
  };
  for (const auto& bad : table) {
    SCOPED_TRACE(bad.description);
    json pod = testing::FixtureReview()["request"]["object"];
    bad.shape(pod);
    auto decision = DecidePod(pod, "default", *DefaultConfig());
    ASSERT_FALSE(decision.ok());
    EXPECT_NE(decision.status().message().find(bad.field), std::string::npos)
        << decision.status().message();
  }
}

}  // namespace
}  // namespace kvgpu::webhook
