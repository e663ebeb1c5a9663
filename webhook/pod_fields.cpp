#include "webhook/pod_fields.h"

#include <nlohmann/json.hpp>

namespace kvgpu::webhook {
namespace {

using namespace pod_fields;  // NOLINT(google-build-using-namespace): the table reads as the Pod

using Kind = FieldRule::Kind;

const FieldRule kAll{Kind::kAll};
const FieldRule kNamed{Kind::kObject, {{kName.key, &kAll}}};
const FieldRule kNamedList{Kind::kArray, {}, &kNamed};
const FieldRule kMount{Kind::kObject, {{kName.key, &kAll}, {kMountPath.key, &kAll}}};
const FieldRule kMounts{Kind::kArray, {}, &kMount};
const FieldRule kClaimRef{Kind::kObject, {{kName.key, &kAll}, {kRequest.key, &kAll}}};
const FieldRule kClaimRefs{Kind::kArray, {}, &kClaimRef};
const FieldRule kResourceLists{
    Kind::kObject, {{kLimits.key, &kAll}, {kRequests.key, &kAll}, {kClaims.key, &kClaimRefs}}};
const FieldRule kPodClaim{
    Kind::kObject,
    {{kName.key, &kAll}, {kResourceClaimName.key, &kAll}, {kResourceClaimTemplateName.key, &kAll}}};
const FieldRule kPodClaims{Kind::kArray, {}, &kPodClaim};
const FieldRule kContainer{Kind::kObject,
                           {{kName.key, &kAll},
                            {kResources.key, &kResourceLists},
                            {kVolumeMounts.key, &kMounts},
                            {kEnv.key, &kNamedList}}};
const FieldRule kContainerList{Kind::kArray, {}, &kContainer};
const FieldRule kWholeList{Kind::kArray, {}, &kAll};
const FieldRule kSpecRule{Kind::kObject,
                          {{kRuntimeClassName.key, &kAll},
                           {kRestartPolicy.key, &kAll},
                           {kContainers.key, &kContainerList},
                           {kInitContainers.key, &kContainerList},
                           {kEphemeralContainers.key, &kNamedList},
                           {kVolumes.key, &kWholeList},
                           {kResourceClaims.key, &kPodClaims}}};
const FieldRule kAnnotationRule{Kind::kAnnotations};
const FieldRule kMetadataRule{Kind::kObject,
                              {{kNamespace.key, &kAll},
                               {kName.key, &kAll},
                               {kGenerateName.key, &kAll},
                               {kAnnotations.key, &kAnnotationRule}}};
const FieldRule kPod{Kind::kObject, {{kMetadata.key, &kMetadataRule}, {kSpec.key, &kSpecRule}}};

}  // namespace

const FieldRule& PodRule() {
  return kPod;
}
const FieldRule& KeepAll() {
  return kAll;
}

std::vector<PodField> AllPodFields() {
  return {kMetadata,
          kNamespace,
          kName,
          kGenerateName,
          kAnnotations,
          kSpec,
          kRuntimeClassName,
          kRestartPolicy,
          kContainers,
          kInitContainers,
          kEphemeralContainers,
          kVolumes,
          kResources,
          kLimits,
          kRequests,
          kVolumeMounts,
          kMountPath,
          kEnv,
          kResourceClaims,
          kResourceClaimName,
          kResourceClaimTemplateName,
          kClaims,
          kRequest};
}

const nlohmann::json& Member(const nlohmann::json& object, std::string_view key) {
  static const nlohmann::json absent;
  if (!object.is_object()) return absent;
  const auto it = object.find(key);
  return it == object.end() ? absent : *it;
}

}  // namespace kvgpu::webhook
