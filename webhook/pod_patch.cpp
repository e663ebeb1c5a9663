// The patch builders of the pod decision (pod_mutator.h): the JSON Patch for a planned injection
// (volumes renamed around the pod's own, the driver loader and nvidia-gridd where the sidecar mode
// puts them, each vGPU container's mounts and environment, the marker) and for a pod injected
// before that gained a vGPU container since; and how an earlier injection is recognised without
// its marker. What to inject, and under which names, is decided in pod_mutator.cpp.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "webhook/json_patch.h"
#include "webhook/pod_mutator_internal.h"

namespace kvgpu::webhook {
namespace {

using nlohmann::json;

}  // namespace

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

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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

}  // namespace kvgpu::webhook
