// The webhook's configuration: which pods are in scope and what gets injected into them.
// Loaded from YAML (keys mirror Kubernetes' camelCase), validated as a whole; a config that fails
// validation is never used, so a reload with a broken file keeps the previous one.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "webhook/injection.h"

namespace kvgpu::webhook {

// What to do with a pod that asks for a vGPU but does not run under a Kata runtime class.
enum class NonKataPolicy {
  kDeny,             // refuse it and say which runtimeClassName to add
  kSetRuntimeClass,  // set runtimeClassName when the pod names none (an explicit other class is
                     // still refused: the author chose it)
};

// When Kata attaches the pod's VFIO devices to the VM, which decides what may wait for them.
enum class AttachMode {
  kHotPlug,   // hot_plug_vfio: the device arrives when the container that asks for it is
              // created, i.e. after every init container and after native sidecars started
  kColdPlug,  // cold_plug_vfio: every device is there when the VM boots
};

// What a pod whose claims could not be looked up gets (docs/webhook.md, "DRA claims").
enum class ClaimLookupFailure {
  kDeny,   // refused, saying which claim and why: the pod author or its controller retries
  kAllow,  // the claims that failed count as not ours; the pod is decided on the rest, warned
};

// DRA claims (resource_claims.h, claim_lookup.h): which DeviceClasses are ours and how the
// ResourceClaims and ResourceClaimTemplates that say so are looked up.
struct ClaimSettings {
  std::string device_class_domain;              // a class is ours when named this or "*.<this>"
  std::chrono::milliseconds lookup_timeout{0};  // all of one pod's lookups together
  size_t cache_entries = 0;
  size_t cache_bytes = 0;
  std::chrono::milliseconds cache_ttl{0};
  ClaimLookupFailure on_failure = ClaimLookupFailure::kDeny;
};

struct Config {
  std::vector<std::string> runtime_class_names;
  // The subset of runtime_class_names whose Kata configuration cold-plugs VFIO devices; every
  // other class is treated as hot-plug (whose setup also works, only later, on cold-plug).
  std::vector<std::string> cold_plug_runtime_class_names;
  std::vector<std::string> resource_prefixes;
  std::vector<std::string> excluded_namespaces;
  std::string opt_out_annotation;  // the pod opts out when this annotation is "false"
  std::string marker_annotation;   // set on every mutated pod; its presence means "done"
  NonKataPolicy non_kata_policy = NonKataPolicy::kDeny;
  std::string runtime_class_to_set;  // used by kSetRuntimeClass
  SidecarMode sidecar_mode = SidecarMode::kNative;

  std::vector<InjectedVolume> volumes;
  Injection hot_plug;
  Injection cold_plug;
  // Added to every container that asks for a vGPU (skipped per item when the container already
  // has a mount at that path or an env var of that name: the pod author wins).
  std::vector<RenderedObject> workload_mounts;  // VolumeMounts
  std::vector<RenderedObject> workload_env;     // EnvVars
  ClaimSettings claims;

  AttachMode AttachModeOf(std::string_view runtime_class) const;
  bool IsInjectedVolumeName(std::string_view name) const {
    for (const auto& volume : volumes)
      if (volume.name == name) return true;
    return false;
  }
  const Injection& InjectionFor(AttachMode mode) const {
    return mode == AttachMode::kColdPlug ? cold_plug : hot_plug;
  }
};

// The built-in defaults: a valid config on its own, and the base every YAML file overrides.
std::shared_ptr<const Config> DefaultConfig();

// Parses YAML text. Unknown keys are errors, so a typo never silently falls back to a default.
Result<std::shared_ptr<const Config>> ParseConfig(std::string_view yaml_text);
Result<std::shared_ptr<const Config>> LoadConfigFile(const std::string& path);

}  // namespace kvgpu::webhook
