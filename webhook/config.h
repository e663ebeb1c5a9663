// The webhook's configuration: which pods are in scope and what gets injected into them.
// Loaded from YAML (keys mirror Kubernetes' camelCase), validated as a whole; a config that fails
// validation is never used, so a reload with a broken file keeps the previous one.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "webhook/expected.h"

namespace kvgpu::webhook {

// What to do with a pod that asks for a vGPU but does not run under a Kata runtime class.
enum class NonKataPolicy {
  kDeny,             // refuse it and say which runtimeClassName to add
  kSetRuntimeClass,  // set runtimeClassName when the pod names none (an explicit other class is
                     // still refused: the author chose it)
};

// How the licensing daemon runs next to the workload.
enum class SidecarMode {
  kNative,   // init container with restartPolicy: Always (Kubernetes >= 1.29): starts licensed
             // before the workload and does not keep Jobs from completing
  kClassic,  // an ordinary container, for clusters without native sidecars
};

// A container the webhook adds. Stored as the JSON object that goes into the patch; `name` and
// the volume names inside `volumeMounts` are rewritten at admission when they clash.
struct InjectedContainer {
  std::string name;
  nlohmann::json object;
};

struct InjectedVolume {
  std::string name;
  nlohmann::json object;  // the whole Volume: {"name": ..., "hostPath": {...}}
};

struct Config {
  std::vector<std::string> runtime_class_names;
  std::vector<std::string> resource_prefixes;
  std::vector<std::string> excluded_namespaces;
  std::string opt_out_annotation;  // the pod opts out when this annotation is "false"
  std::string marker_annotation;   // set on every mutated pod; its presence means "done"
  NonKataPolicy non_kata_policy = NonKataPolicy::kDeny;
  std::string runtime_class_to_set;  // used by kSetRuntimeClass
  SidecarMode sidecar_mode = SidecarMode::kNative;

  std::vector<InjectedVolume> volumes;
  InjectedContainer driver_init;
  InjectedContainer gridd;
  // Added to every container that asks for a vGPU (skipped per item when the container already
  // has a mount at that path or an env var of that name: the pod author wins).
  nlohmann::json workload_mounts = nlohmann::json::array();
  nlohmann::json workload_env = nlohmann::json::array();

  // The same objects as JSON text, rendered once at load: an admission without name clashes
  // copies these instead of building and serialising JSON per request.
  std::vector<std::string> volume_texts;  // parallel to `volumes`
  std::string driver_init_text;
  std::string gridd_text;  // includes restartPolicy: Always in native mode
  std::vector<std::string> workload_mount_texts;
  std::vector<std::string> workload_env_texts;
};

// The built-in defaults: a valid config on its own, and the base every YAML file overrides.
std::shared_ptr<const Config> DefaultConfig();

// Parses YAML text. Unknown keys are errors, so a typo never silently falls back to a default.
Expected<std::shared_ptr<const Config>> ParseConfig(std::string_view yaml_text);
Expected<std::shared_ptr<const Config>> LoadConfigFile(const std::string& path);

// Kubernetes name rules, shared with the admission code.
bool IsDnsLabel(std::string_view name);

}  // namespace kvgpu::webhook
