// What the pod decision (pod_mutator.cpp) and the patch builders (pod_patch.cpp) share: the pod's
// parts as the decision reads them, its scope and its plan, and the builders it calls. Private to
// webhook/.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "webhook/config.h"
#include "webhook/pod_decision.h"
#include "webhook/pod_fields.h"

namespace kvgpu::webhook {

inline const nlohmann::json kNull;

// Fields are read only through pod_fields.h's Member and PodFields (the review parser keeps
// exactly those), annotations by their configured keys (which the parser keeps too).
inline const nlohmann::json& Field(const nlohmann::json& object, PodField field) {
  return Member(object, field);
}
inline const nlohmann::json& Annotation(const nlohmann::json& annotations, const std::string& key) {
  return Member(annotations, key);
}

inline bool AbsentOrNull(const nlohmann::json& value) {
  return value.is_null();
}

struct ContainerRef {
  const char* list;  // "containers" or "initContainers"
  size_t index;
  const nlohmann::json* container;
};

struct PodView {
  const nlohmann::json* metadata = &kNull;
  const nlohmann::json* annotations = &kNull;
  const nlohmann::json* spec = &kNull;
  const nlohmann::json* containers = &kNull;
  const nlohmann::json* init_containers = &kNull;
  const nlohmann::json* volumes = &kNull;
};

// Names quoted in a denial come from the pod: cut, so an answer's size does not grow with them
// (Kubernetes names are at most 253 characters; anything longer is refused by the API server).
inline std::string Quote(const std::string& text) {
  constexpr size_t kMaxQuoted = 253;
  if (text.size() <= kMaxQuoted) return "\"" + text + "\"";
  return "\"" + text.substr(0, kMaxQuoted) + "...\"";
}

// Scope: whether the pod is the webhook's business. Which containers ask for a vGPU, under which
// runtime class the pod will run; or the decision that ends here (no vGPU, excluded, opted out,
// denied outside Kata).
struct PodScope {
  std::vector<ContainerRef> vgpu_containers;
  std::string runtime_class;  // as the pod will run: the one set when the policy sets it
  bool set_runtime_class = false;
  bool already_injected = false;  // the marker is there
};

// Plan: the names what is injected takes in this pod (stepping around the pod's own), and the
// one refusal that depends on them: a mount of an injected volume the pod does not define.
struct InjectionPlan {
  std::map<std::string, std::string> volume_names;  // config name -> name in this pod
  bool volumes_renamed = false;
  std::string driver_name;
  std::string gridd_name;
};

// The patch builders (pod_patch.cpp) the decision calls.
Result<std::set<std::string>> Keys(const nlohmann::json& list, PodField key,
                                   const std::string& where);
bool CarriesOwnInjection(const PodView& view, const std::vector<ContainerRef>& containers,
                         const Config& config);
Result<PodDecision> CompleteInjectedPod(const PodView& view,
                                        const std::vector<ContainerRef>& vgpu_containers,
                                        const Config& config);
Result<PodDecision> RenderInjection(const PodView& view, const PodScope& scope,
                                    const InjectionPlan& plan, const Injection& injection,
                                    AttachMode mode, const Config& config);

}  // namespace kvgpu::webhook
