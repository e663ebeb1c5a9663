// The fields of a Pod the admission decision may read: one table. The review parser builds its
// pruning rules from it (review_parse.cpp keeps exactly these fields of request.object), and the
// decision reads the pod only through `PodField`s (pod_mutator.cpp), so a field the decision
// reads cannot be one the parser drops: a new field is added here, in both at once.
#pragma once

#include <initializer_list>
#include <nlohmann/json_fwd.hpp>
#include <string_view>
#include <utility>
#include <vector>

namespace kvgpu::webhook {

struct PodField {
  std::string_view key;
};

// object[key], with an absent field, or an object that is not one, read as null: the API server's
// "omitempty". The decision and the claim checks read every field through these.
const nlohmann::json& Member(const nlohmann::json& object, std::string_view key);
inline const nlohmann::json& Member(const nlohmann::json& object, PodField field) {
  return Member(object, field.key);
}

namespace pod_fields {
inline constexpr PodField kMetadata{"metadata"};
inline constexpr PodField kNamespace{"namespace"};
inline constexpr PodField kName{"name"};
inline constexpr PodField kGenerateName{"generateName"};  // the decision log names the pod
inline constexpr PodField kAnnotations{"annotations"};    // only the configured keys are kept
inline constexpr PodField kSpec{"spec"};
inline constexpr PodField kRuntimeClassName{"runtimeClassName"};
inline constexpr PodField kRestartPolicy{"restartPolicy"};
inline constexpr PodField kContainers{"containers"};
inline constexpr PodField kInitContainers{"initContainers"};
inline constexpr PodField kEphemeralContainers{"ephemeralContainers"};
inline constexpr PodField kVolumes{"volumes"};  // whole: injected ones are found by source
inline constexpr PodField kResources{"resources"};
inline constexpr PodField kLimits{"limits"};
inline constexpr PodField kRequests{"requests"};
inline constexpr PodField kVolumeMounts{"volumeMounts"};
inline constexpr PodField kMountPath{"mountPath"};
inline constexpr PodField kEnv{"env"};
// DRA (resource_claims.h): the pod's claims and which of them each container uses.
inline constexpr PodField kResourceClaims{"resourceClaims"};
inline constexpr PodField kResourceClaimName{"resourceClaimName"};
inline constexpr PodField kResourceClaimTemplateName{"resourceClaimTemplateName"};
inline constexpr PodField kClaims{"claims"};
inline constexpr PodField kRequest{"request"};
}  // namespace pod_fields

// What of a value to keep. A container whose type does not match its rule (an array where an
// object is expected) is kept empty: the decision only needs its type to report the error.
struct FieldRule {
  enum class Kind { kAll, kObject, kArray, kAnnotations };
  Kind kind;
  std::initializer_list<std::pair<std::string_view, const FieldRule*>> fields = {};  // kObject
  const FieldRule* items = nullptr;                                                  // kArray
};

// The rule for request.object, and the rule that keeps a value whole.
const FieldRule& PodRule();
const FieldRule& KeepAll();

// Every PodField above, for the test that each is kept by PodRule().
std::vector<PodField> AllPodFields();

}  // namespace kvgpu::webhook
