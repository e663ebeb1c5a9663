#include "webhook/pod_mutator.h"

#include <algorithm>
#include <map>
#include <set>
#include <variant>

#include "webhook/json_patch.h"
#include "webhook/pod_fields.h"

namespace kvgpu::webhook {
namespace {

using nlohmann::json;

const json kNull;

// Fields are read only through pod_fields.h's Member and PodFields (the review parser keeps
// exactly those), annotations by their configured keys (which the parser keeps too).
const json& Field(const json& object, PodField field) {
  return Member(object, field);
}
const json& Annotation(const json& annotations, const std::string& key) {
  return Member(annotations, key);
}

bool AbsentOrNull(const json& value) {
  return value.is_null();
}

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

struct ContainerRef {
  const char* list;  // "containers" or "initContainers"
  size_t index;
  const json* container;
};

struct PodView {
  const json* metadata = &kNull;
  const json* annotations = &kNull;
  const json* spec = &kNull;
  const json* containers = &kNull;
  const json* init_containers = &kNull;
  const json* volumes = &kNull;
};

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

// Names quoted in a denial come from the pod: cut, so an answer's size does not grow with them
// (Kubernetes names are at most 253 characters; anything longer is refused by the API server).
std::string Quote(const std::string& text) {
  constexpr size_t kMaxQuoted = 253;
  if (text.size() <= kMaxQuoted) return "\"" + text + "\"";
  return "\"" + text.substr(0, kMaxQuoted) + "...\"";
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

// Names every entry of a list of named objects (containers, volumes, env vars, mounts by path).
Result<std::set<std::string>> Keys(const json& list, PodField key, const std::string& where) {
  std::set<std::string> out;
  if (AbsentOrNull(list)) return out;
  if (!list.is_array()) return Status::Error(ErrorCode::kInvalid, where + " must be a list");
  for (const auto& item : list) {
    const json& value = Field(item, key);
    if (!value.is_string())
      return Status::Error(ErrorCode::kInvalid,
                           where + " entries must have a string " + std::string(key.key));
    out.insert(value.get<std::string>());
  }
  return out;
}

// Appends `items` (JSON texts) to the list at `path`, creating the list when the pod has none.
void AppendAll(PatchBuilder& patch, const std::string& path, const json& existing,
               const std::vector<std::string>& items) {
  if (items.empty()) return;
  if (AbsentOrNull(existing)) {
    std::string array = "[";
    for (const auto& item : items) array += (array.size() > 1 ? "," : "") + item;
    patch.AddJson(path, array + "]");
    return;
  }
  for (const auto& item : items) patch.AddJson(path + "/-", item);
}

json RenameMounts(json mounts, const std::map<std::string, std::string>& volume_names) {
  for (auto& mount : mounts) mount["name"] = volume_names.at(mount["name"].get<std::string>());
  return mounts;
}

// The workload mounts as JSON text, on the volumes' names in this pod (`pod_names`: config name
// -> name in the pod): the pre-rendered text unless renamed; empty for a volume not in the pod.
std::vector<std::string> WorkloadMountTexts(const Config& config,
                                            const std::map<std::string, std::string>& pod_names) {
  std::vector<std::string> texts;
  for (const RenderedObject& mount : config.workload_mounts) {
    auto it = pod_names.find(mount.object["name"].get_ref<const std::string&>());
    if (it == pod_names.end()) {
      texts.emplace_back();
    } else if (it->first == it->second) {
      texts.push_back(mount.text);
    } else {
      json renamed = mount.object;
      renamed["name"] = it->second;
      texts.push_back(renamed.dump());
    }
  }
  return texts;
}

// The injected container as JSON text: the pre-rendered one unless a clash renamed it or a
// volume it mounts.
std::string ContainerText(const InjectedContainer& container, const std::string& name,
                          bool volumes_renamed,
                          const std::map<std::string, std::string>& volume_names) {
  if (name == container.name && !volumes_renamed) return container.text;
  json object = container.object;
  object["name"] = name;
  if (object.contains("volumeMounts"))
    object["volumeMounts"] = RenameMounts(object["volumeMounts"], volume_names);
  return object.dump();
}

// `part` is found in `whole`: every member `part` names is there with the same value (nested
// objects likewise); members only `whole` has are ignored, as the API server's defaulting adds
// some (a hostPath's `type: ""`). A top-level member named `skip` is not compared.
bool Covers(const json& whole, const json& part, std::string_view skip = {}) {
  if (!part.is_object()) return whole == part;
  if (!whole.is_object()) return false;
  for (const auto& [key, value] : part.items()) {
    if (!skip.empty() && key == skip) continue;
    auto it = whole.find(key);
    if (it == whole.end() || !Covers(*it, value)) return false;
  }
  return true;
}

// On re-invocation: the name each injected volume has in this pod (renamed on a clash), found by
// its source, so a volume of the user's that merely shares the name is never taken for ours.
// Volumes that are gone are absent from the map.
std::map<std::string, std::string> InjectedVolumeNames(const json& pod_volumes,
                                                       const Config& config) {
  std::map<std::string, std::string> names;
  if (!pod_volumes.is_array()) return names;
  for (const auto& volume : config.volumes) {
    const std::string* found = nullptr;
    for (const auto& candidate : pod_volumes) {
      const json& name = Field(candidate, pod_fields::kName);
      // Found by its source: the volume's own name is not compared (no copy without it).
      if (!name.is_string() || !Covers(candidate, volume.object, "name")) continue;
      found = &name.get_ref<const std::string&>();
      if (*found == volume.name) break;  // the unrenamed one wins over a look-alike
    }
    if (found != nullptr) names[volume.name] = *found;
  }
  return names;
}

// `name` is `base` or what UniqueName makes of it on a clash (`base-2`, `base-3`, ...).
bool IsNameOrRenamed(const std::string& name, const std::string& base) {
  if (name == base) return true;
  if (name.size() < base.size() + 2 || !name.starts_with(base + "-")) return false;
  return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(base.size() + 1), name.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

// The pod carries what an earlier call injected even if the marker is gone (another webhook or
// a controller removed the annotation): every injected volume, found by its source, and both
// injected containers by name. Injecting again would add a second driver loader and gridd.
bool CarriesOwnInjection(const PodView& view, const std::vector<ContainerRef>& containers,
                         const Config& config) {
  if (InjectedVolumeNames(*view.volumes, config).size() != config.volumes.size()) return false;
  auto has = [&](const InjectedContainer& injected) {
    return std::any_of(containers.begin(), containers.end(), [&](const ContainerRef& ref) {
      const json& name = Field(*ref.container, pod_fields::kName);
      return name.is_string() && IsNameOrRenamed(name.get_ref<const std::string&>(), injected.name);
    });
  };
  for (const Injection* injection : {&config.hot_plug, &config.cold_plug}) {
    if (has(injection->driver) && has(injection->gridd)) return true;
  }
  return false;
}

// Adds to each vGPU container the workload mounts (by mount path) and env entries (by name) it
// does not have yet. `mount_texts[i]` is the rendered mount `config.workload_mounts[i]`; an
// empty text is skipped (its volume is not in the pod).
Result<bool> AddWorkloadSetup(PatchBuilder& patch, const std::vector<ContainerRef>& containers,
                              const std::vector<std::string>& mount_texts, const Config& config) {
  bool added = false;
  for (const auto& ref : containers) {
    const std::string where =
        std::string("spec.") + ref.list + "[" + std::to_string(ref.index) + "]";
    const std::string path = std::string("/spec/") + ref.list + "/" + std::to_string(ref.index);
    const json& mounts = Field(*ref.container, pod_fields::kVolumeMounts);
    auto paths = Keys(mounts, pod_fields::kMountPath, where + ".volumeMounts");
    if (!paths.ok()) return paths.status();
    std::vector<std::string> add_mounts;
    for (size_t i = 0; i < config.workload_mounts.size(); ++i) {
      const auto& mount_path =
          config.workload_mounts[i].object["mountPath"].get_ref<const std::string&>();
      if (!mount_texts[i].empty() && !paths->contains(mount_path))
        add_mounts.push_back(mount_texts[i]);
    }
    AppendAll(patch, path + "/volumeMounts", mounts, add_mounts);

    const json& env = Field(*ref.container, pod_fields::kEnv);
    auto names = Keys(env, pod_fields::kName, where + ".env");
    if (!names.ok()) return names.status();
    std::vector<std::string> add_env;
    for (const RenderedObject& var : config.workload_env) {
      if (!names->contains(var.object["name"].get_ref<const std::string&>()))
        add_env.push_back(var.text);
    }
    AppendAll(patch, path + "/env", env, add_env);
    added = added || !add_mounts.empty() || !add_env.empty();
  }
  return added;
}

// The marker says this pod was set up already; a webhook that ran after us (re-invocation) may
// have added a container that asks for a vGPU. It gets the workload mounts and env the others
// got, on the volumes already injected; nothing is injected twice.
Result<PodDecision> CompleteInjectedPod(const PodView& view,
                                        const std::vector<ContainerRef>& vgpu_containers,
                                        const Config& config) {
  PodDecision decision;
  decision.outcome = PodOutcome::kAlreadyInjected;
  const std::map<std::string, std::string> names = InjectedVolumeNames(*view.volumes, config);
  const std::vector<std::string> mount_texts = WorkloadMountTexts(config, names);
  PatchBuilder patch;
  auto added = AddWorkloadSetup(patch, vgpu_containers, mount_texts, config);
  if (!added.ok()) return added.status();
  if (!added.value()) return decision;
  for (size_t i = 0; i < mount_texts.size(); ++i) {
    if (mount_texts[i].empty())
      decision.warnings.push_back(
          "kata-vgpu: the injected volume " +
          Quote(config.workload_mounts[i].object["name"].get<std::string>()) +
          " is gone from this pod, so a vGPU container added after "
          "injection does not get it mounted");
  }
  decision.outcome = PodOutcome::kCompleted;
  decision.patch = patch.Text();
  return decision;
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

// Scope: whether the pod is the webhook's business. Which containers ask for a vGPU, under which
// runtime class the pod will run; or the decision that ends here (no vGPU, excluded, opted out,
// denied outside Kata).
struct PodScope {
  std::vector<ContainerRef> vgpu_containers;
  std::string runtime_class;  // as the pod will run: the one set when the policy sets it
  bool set_runtime_class = false;
  bool already_injected = false;  // the marker is there
};
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

// Plan: the names what is injected takes in this pod (stepping around the pod's own), and the
// one refusal that depends on them: a mount of an injected volume the pod does not define.
struct InjectionPlan {
  std::map<std::string, std::string> volume_names;  // config name -> name in this pod
  bool volumes_renamed = false;
  std::string driver_name;
  std::string gridd_name;
};
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

// The injected volumes as the pod gets them: renamed where the plan had to.
std::vector<std::string> VolumeTexts(const InjectionPlan& plan, const Config& config) {
  std::vector<std::string> volumes;
  for (const InjectedVolume& volume : config.volumes) {
    const std::string& name = plan.volume_names.at(volume.name);
    if (name == volume.name) {
      volumes.push_back(volume.text);
      continue;
    }
    json object = volume.object;
    object["name"] = name;
    volumes.push_back(object.dump());
  }
  return volumes;
}

// The marker annotation, whether or not the pod has metadata or annotations yet.
void AddMarker(PatchBuilder& patch, const PodView& view, const Config& config) {
  if (AbsentOrNull(*view.metadata)) {
    patch.Add("/metadata", {{"annotations", {{config.marker_annotation, "true"}}}});
  } else if (AbsentOrNull(*view.annotations)) {
    patch.Add("/metadata/annotations", {{config.marker_annotation, "true"}});
  } else {
    patch.Add("/metadata/annotations/" + EscapePointerToken(config.marker_annotation), "true");
  }
}

// Render: the JSON Patch for a planned injection, and the warnings the pod author should see.
Result<PodDecision> RenderInjection(const PodView& view, const PodScope& scope,
                                    const InjectionPlan& plan, const Injection& injection,
                                    AttachMode mode, const Config& config) {
  PodDecision decision;
  const std::vector<std::string> volumes = VolumeTexts(plan, config);
  PatchBuilder patch;
  AddMarker(patch, view, config);
  if (scope.set_runtime_class) {
    patch.Add("/spec/runtimeClassName", config.runtime_class_to_set);
    decision.warnings.push_back("kata-vgpu: set runtimeClassName to " +
                                config.runtime_class_to_set + " because the pod asks for a vGPU");
  }
  AppendAll(patch, "/spec/volumes", *view.volumes, volumes);

  // Mounts and environment for each vGPU container, before any insertion shifts indexes.
  const std::vector<std::string> mount_texts = WorkloadMountTexts(config, plan.volume_names);
  auto added = AddWorkloadSetup(patch, scope.vgpu_containers, mount_texts, config);
  if (!added.ok()) return added.status();

  std::string driver =
      ContainerText(injection.driver, plan.driver_name, plan.volumes_renamed, plan.volume_names);
  std::string gridd =
      ContainerText(injection.gridd, plan.gridd_name, plan.volumes_renamed, plan.volume_names);

  // Init containers run in order, so the driver loader goes first; the containers that live as
  // long as the pod go where the sidecar mode puts them.
  const bool native = config.sidecar_mode == SidecarMode::kNative;
  std::vector<std::string> front, back;
  if (injection.driver_is_init_container || native) {
    front.push_back(driver);
  } else {
    back.push_back(driver);
  }
  if (native) {
    front.push_back(gridd);
  } else {
    back.push_back(gridd);
  }
  if (AbsentOrNull(*view.init_containers)) {
    AppendAll(patch, "/spec/initContainers", *view.init_containers, front);
  } else {
    for (size_t i = 0; i < front.size(); ++i)
      patch.AddJson("/spec/initContainers/" + std::to_string(i), front[i]);
  }
  for (const auto& container : back) patch.AddJson("/spec/containers/-", container);

  bool init_uses_vgpu = std::any_of(
      scope.vgpu_containers.begin(), scope.vgpu_containers.end(),
      [](const ContainerRef& ref) { return ref.list == std::string_view("initContainers"); });
  if (init_uses_vgpu && mode == AttachMode::kHotPlug) {
    decision.warnings.push_back(
        native ? "kata-vgpu: this runtime class hot-plugs the vGPU: an init container that uses "
                 "it may start before the driver is loaded, and runs without a vGPU licence"
               : "kata-vgpu: classic sidecar mode on a hot-plug runtime class: the driver is "
                 "loaded by an ordinary container, so init containers that use the vGPU find no "
                 "driver");
  } else if (init_uses_vgpu && !native) {
    decision.warnings.push_back(
        "kata-vgpu: classic sidecar mode: init containers run before nvidia-gridd and so "
        "without a vGPU licence");
  }
  const json& restart = Field(*view.spec, pod_fields::kRestartPolicy);
  if (!back.empty() && restart.is_string() && restart != "Always")
    decision.warnings.push_back(
        "kata-vgpu: classic sidecar mode: the injected containers keep running, so this pod "
        "will not complete on its own");

  decision.outcome = PodOutcome::kMutated;
  decision.patch = patch.Text();
  return decision;
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
