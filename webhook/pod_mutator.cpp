#include "webhook/pod_mutator.h"

#include <algorithm>
#include <map>
#include <set>
#include <variant>

#include "webhook/pod_fields.h"
#include "webhook/pod_mutator_internal.h"

namespace kvgpu::webhook {
namespace {

using nlohmann::json;

// Extended resources are whole numbers; "0" in any spelling asks for nothing.
bool IsZeroQuantity(const json& quantity) {
  if (quantity.is_number()) return quantity == 0;
  if (!quantity.is_string()) return false;
  const auto& text = quantity.get_ref<const std::string&>();
  bool saw_digit = false;
  for (char c : text) {
    if (c == '+' || c == '-' || c == '.') continue;
    if (c >= '0' && c <= '9') {
      if (c != '0') return false;
      saw_digit = true;
      continue;
    }
    break;  // the suffix (m, k, Ki, ...) does not change zero
  }
  return saw_digit;
}

Result<PodView> View(const json& pod) {
  PodView view;
  if (!pod.is_object())
    return Status::Error(ErrorCode::kInvalid, "request.object must be a Pod object");
  view.metadata = &Field(pod, pod_fields::kMetadata);
  if (!view.metadata->is_object() && !AbsentOrNull(*view.metadata))
    return Status::Error(ErrorCode::kInvalid, "request.object.metadata must be an object");
  view.annotations = &Field(*view.metadata, pod_fields::kAnnotations);
  if (!view.annotations->is_object() && !AbsentOrNull(*view.annotations))
    return Status::Error(ErrorCode::kInvalid,
                         "request.object.metadata.annotations must be an object");
  view.spec = &Field(pod, pod_fields::kSpec);
  if (!view.spec->is_object())
    return Status::Error(ErrorCode::kInvalid, "request.object.spec must be an object");
  view.containers = &Field(*view.spec, pod_fields::kContainers);
  if (!view.containers->is_array())
    return Status::Error(ErrorCode::kInvalid, "request.object.spec.containers must be a list");
  view.init_containers = &Field(*view.spec, pod_fields::kInitContainers);
  if (!view.init_containers->is_array() && !AbsentOrNull(*view.init_containers))
    return Status::Error(ErrorCode::kInvalid, "request.object.spec.initContainers must be a list");
  view.volumes = &Field(*view.spec, pod_fields::kVolumes);
  if (!view.volumes->is_array() && !AbsentOrNull(*view.volumes))
    return Status::Error(ErrorCode::kInvalid, "request.object.spec.volumes must be a list");
  return view;
}

// Containers and init containers, in that order (ephemeral ones cannot be set on CREATE).
std::vector<ContainerRef> AllContainers(const PodView& view) {
  std::vector<ContainerRef> out;
  for (const char* list : {"containers", "initContainers"}) {
    const json& containers =
        list == std::string_view("containers") ? *view.containers : *view.init_containers;
    if (!containers.is_array()) continue;
    for (size_t i = 0; i < containers.size(); ++i) out.push_back({list, i, &containers[i]});
  }
  return out;
}

// What of a container asks for a vGPU, as a denial quotes it: the first vGPU resource, else the
// first use of a claim of our DeviceClasses; "" if none. Errors on malformed containers.
Result<std::string> VgpuRequest(const json& container, const std::string& where,
                                const Config& config, const PodClaims& claims) {
  if (!container.is_object() || !Field(container, pod_fields::kName).is_string())
    return Status::Error(ErrorCode::kInvalid, where + " must be an object with a name");
  const json& resources = Field(container, pod_fields::kResources);
  if (!resources.is_object() && !AbsentOrNull(resources))
    return Status::Error(ErrorCode::kInvalid, where + ".resources must be an object");
  for (PodField kind : {pod_fields::kLimits, pod_fields::kRequests}) {
    const json& list = Field(resources, kind);
    if (AbsentOrNull(list)) continue;
    if (!list.is_object())
      return Status::Error(ErrorCode::kInvalid,
                           where + ".resources." + std::string(kind.key) + " must be an object");
    for (const auto& [name, quantity] : list.items()) {
      for (const auto& prefix : config.resource_prefixes) {
        if (name.starts_with(prefix) && !IsZeroQuantity(quantity))
          return "vGPU resource " + Quote(name);
      }
    }
  }
  const std::string claim = OurClaimReference(container, claims);
  if (!claim.empty()) return "a vGPU through DRA claim " + Quote(claim);
  return std::string();
}

std::string UniqueName(const std::string& base, std::set<std::string>& taken) {
  std::string name = base;
  for (int suffix = 2; taken.contains(name); ++suffix) name = base + "-" + std::to_string(suffix);
  taken.insert(name);
  return name;
}

}  // namespace

const char* PodOutcomeName(PodOutcome outcome) {
  switch (outcome) {
    case PodOutcome::kNoVgpu:
      return "no_vgpu";
    case PodOutcome::kExcludedNamespace:
      return "excluded_namespace";
    case PodOutcome::kOptedOut:
      return "opted_out";
    case PodOutcome::kAlreadyInjected:
      return "already_injected";
    case PodOutcome::kCompleted:
      return "completed";
    case PodOutcome::kMutated:
      return "mutated";
    case PodOutcome::kDenied:
      return "denied";
  }
  return "unknown";
}

namespace {

using ScopeOrDecision = std::variant<PodScope, PodDecision>;

// The pod's claims as the lookups found them, or the denial when a lookup failed and the policy
// refuses; with `allow` the failures become warnings and those claims count as not ours.
using ClaimsOrDecision = std::variant<PodClaims, PodDecision>;

Result<ClaimsOrDecision> LookUpClaims(const PodView& view, const std::string& pod_namespace,
                                      const Config& config, const ClaimResolver& resolve_claims,
                                      std::vector<std::string>& warnings) {
  if (!resolve_claims) return ClaimsOrDecision(PodClaims());
  auto sources = ReferencedPodClaims(*view.spec);
  if (!sources.ok())
    return Status::Error(ErrorCode::kInvalid, "request.object." + sources.status().message());
  if (sources->empty()) return ClaimsOrDecision(PodClaims());
  PodClaims claims = resolve_claims(pod_namespace, *sources);
  if (claims.failed.empty()) return ClaimsOrDecision(std::move(claims));
  const auto& [name, reason] = *claims.failed.begin();
  const std::string what = "could not tell whether claim " + Quote(name) +
                           " asks for a kata-vgpu DeviceClass (" + Quote(reason) + ")";
  // A pod with the marker was decided by an earlier call (re-invocation): refusing it now for a
  // lookup that worked then would fail a pod that is already set up.
  const bool decided_before =
      !AbsentOrNull(Annotation(*view.annotations, config.marker_annotation));
  if (config.claims.on_failure == ClaimLookupFailure::kAllow || decided_before) {
    warnings.push_back("kata-vgpu: " + what +
                       ": the pod is admitted as if it did not; if it does, its vGPU has no "
                       "driver or licence");
    return ClaimsOrDecision(std::move(claims));
  }
  PodDecision decision;
  decision.outcome = PodOutcome::kDenied;
  decision.allowed = false;
  decision.message = what +
                     "; vGPU pods need the kata-vgpu setup, so the webhook refuses "
                     "the pod rather than guess: create it again once the claim can be "
                     "read (resourceClaims.onLookupFailure: deny, docs/webhook.md)";
  return ClaimsOrDecision(decision);
}

Result<ScopeOrDecision> ScopePod(const PodView& view, std::string_view namespace_name,
                                 const Config& config, const ClaimResolver& resolve_claims,
                                 std::vector<std::string>& warnings) {
  PodDecision decision;
  std::string pod_namespace(namespace_name);
  if (pod_namespace.empty() && Field(*view.metadata, pod_fields::kNamespace).is_string())
    pod_namespace = Field(*view.metadata, pod_fields::kNamespace).get<std::string>();
  const auto& excluded = config.excluded_namespaces;
  if (std::find(excluded.begin(), excluded.end(), pod_namespace) != excluded.end()) {
    decision.outcome = PodOutcome::kExcludedNamespace;
    return ScopeOrDecision(decision);
  }

  auto looked_up = LookUpClaims(view, pod_namespace, config, resolve_claims, warnings);
  if (!looked_up.ok()) return looked_up.status();
  if (const auto* done = std::get_if<PodDecision>(&*looked_up)) return ScopeOrDecision(*done);
  const PodClaims& claims = std::get<PodClaims>(*looked_up);

  PodScope scope;
  std::string first_resource, first_container;
  for (const ContainerRef& ref : AllContainers(view)) {
    auto resource = VgpuRequest(
        *ref.container, "spec." + std::string(ref.list) + "[" + std::to_string(ref.index) + "]",
        config, claims);
    if (!resource.ok()) return resource.status();
    if (resource->empty()) continue;
    if (first_resource.empty()) {
      first_resource = resource.value();
      first_container = Field(*ref.container, pod_fields::kName).get<std::string>();
    }
    scope.vgpu_containers.push_back(ref);
  }
  if (scope.vgpu_containers.empty()) return ScopeOrDecision(decision);
  if (scope.vgpu_containers.size() > kMaxVgpuContainersPerPod) {
    decision.outcome = PodOutcome::kDenied;
    decision.allowed = false;
    decision.message = std::to_string(scope.vgpu_containers.size()) +
                       " containers ask for a vGPU; a pod runs in one Kata VM, which can be given "
                       "at most " +
                       std::to_string(kMaxVgpuContainersPerPod) +
                       " (docs/webhook.md, \"Limits\"): split the work over several pods";
    return ScopeOrDecision(decision);
  }

  // Invariant: a pod outside Kata never gets privileged injected containers.
  const json& runtime_class = Field(*view.spec, pod_fields::kRuntimeClassName);
  if (!runtime_class.is_string() && !AbsentOrNull(runtime_class))
    return Status::Error(ErrorCode::kInvalid,
                         "request.object.spec.runtimeClassName must be a string");
  std::string runtime = runtime_class.is_string() ? runtime_class.get<std::string>() : "";
  const auto& kata = config.runtime_class_names;
  scope.runtime_class = runtime;
  if (std::find(kata.begin(), kata.end(), runtime) == kata.end()) {
    if (config.non_kata_policy == NonKataPolicy::kSetRuntimeClass && runtime.empty()) {
      scope.set_runtime_class = true;
      scope.runtime_class = config.runtime_class_to_set;
    } else {
      decision.outcome = PodOutcome::kDenied;
      decision.allowed = false;
      decision.message = "container " + Quote(first_container) + " asks for " + first_resource +
                         ", but vGPUs are only given to pods running in a Kata VM and " +
                         (runtime.empty() ? std::string("this pod sets no runtimeClassName")
                                          : "this pod's runtimeClassName is " + Quote(runtime)) +
                         ": add `runtimeClassName: " + config.runtime_class_to_set +
                         "` to the pod spec";
      return ScopeOrDecision(decision);
    }
  }

  auto annotation = [&](const std::string& key) -> const json& {
    return Annotation(*view.annotations, key);
  };
  if (annotation(config.opt_out_annotation) == "false") {
    decision.outcome = PodOutcome::kOptedOut;
    return ScopeOrDecision(decision);
  }
  scope.already_injected = !AbsentOrNull(annotation(config.marker_annotation)) ||
                           CarriesOwnInjection(view, AllContainers(view), config);
  return ScopeOrDecision(scope);
}

using PlanOrDecision = std::variant<InjectionPlan, PodDecision>;

Result<PlanOrDecision> PlanInjection(const PodView& view, const Injection& injection,
                                     const Config& config) {
  std::set<std::string> container_names;
  for (PodField list :
       {pod_fields::kContainers, pod_fields::kInitContainers, pod_fields::kEphemeralContainers}) {
    auto names = Keys(Field(*view.spec, list), pod_fields::kName, "spec." + std::string(list.key));
    if (!names.ok()) return names.status();
    container_names.merge(names.value());
  }
  auto volume_names_or = Keys(*view.volumes, pod_fields::kName, "spec.volumes");
  if (!volume_names_or.ok()) return volume_names_or.status();
  const std::set<std::string> declared = std::move(volume_names_or.value());
  // The names first: a clash renames an injected volume (kvgpu-dev -> kvgpu-dev-2), and the
  // refusal below must cover the name it ends up with, not only the configured one.
  InjectionPlan plan;
  std::set<std::string> taken_volumes = declared;
  std::set<std::string> injected_names;
  for (const InjectedVolume& volume : config.volumes) {
    const std::string& name = plan.volume_names[volume.name] =
        UniqueName(volume.name, taken_volumes);
    plan.volumes_renamed = plan.volumes_renamed || name != volume.name;
    injected_names.insert(name);
  }
  // A mount naming a volume the pod does not have would be refused by the API server, unless
  // this patch adds a volume by that name: the node's /dev, licence files or a writable driver
  // bundle, reached by a container that never declared them. Refused instead, for the names
  // this patch adds and for every configured one.
  for (const ContainerRef& ref : AllContainers(view)) {
    const json& mounts = Field(*ref.container, pod_fields::kVolumeMounts);
    if (!mounts.is_array()) continue;
    for (const auto& mount : mounts) {
      const json& name = Field(mount, pod_fields::kName);
      if (!name.is_string() || declared.contains(name.get<std::string>())) continue;
      const std::string& mounted = name.get_ref<const std::string&>();
      if (!injected_names.contains(mounted) && !config.IsInjectedVolumeName(mounted)) continue;
      PodDecision decision;
      decision.outcome = PodOutcome::kDenied;
      decision.allowed = false;
      decision.message = "container " +
                         Quote(Field(*ref.container, pod_fields::kName).get<std::string>()) +
                         " mounts volume " + Quote(mounted) +
                         ", which this pod does not define; that name belongs to a volume "
                         "kata-vgpu injects, and only its own mounts may use it";
      return PlanOrDecision(decision);
    }
  }
  plan.driver_name = UniqueName(injection.driver.name, container_names);
  plan.gridd_name = UniqueName(injection.gridd.name, container_names);
  return PlanOrDecision(plan);
}

Result<PodDecision> Decide(const PodView& view, std::string_view namespace_name,
                           const Config& config, const ClaimResolver& resolve_claims,
                           std::vector<std::string>& warnings) {
  auto scoped = ScopePod(view, namespace_name, config, resolve_claims, warnings);
  if (!scoped.ok()) return scoped.status();
  if (const auto* done = std::get_if<PodDecision>(&*scoped)) return *done;
  const PodScope& scope = std::get<PodScope>(*scoped);
  if (scope.already_injected) return CompleteInjectedPod(view, scope.vgpu_containers, config);

  const AttachMode mode = config.AttachModeOf(scope.runtime_class);
  const Injection& injection = config.InjectionFor(mode);
  auto planned = PlanInjection(view, injection, config);
  if (!planned.ok()) return planned.status();
  if (const auto* done = std::get_if<PodDecision>(&*planned)) return *done;
  return RenderInjection(view, scope, std::get<InjectionPlan>(*planned), injection, mode, config);
}

}  // namespace

Result<PodDecision> DecidePod(const json& pod, std::string_view namespace_name,
                              const Config& config, const ClaimResolver& resolve_claims) {
  auto view = View(pod);
  if (!view.ok()) return view.status();
  std::vector<std::string> warnings;  // a claim lookup's, whatever the outcome
  auto decision = Decide(*view, namespace_name, config, resolve_claims, warnings);
  if (!decision.ok() || warnings.empty()) return decision;
  decision->warnings.insert(decision->warnings.begin(), warnings.begin(), warnings.end());
  return decision;
}

}  // namespace kvgpu::webhook
