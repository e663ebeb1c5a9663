// The volumes the webhook injects, and the mounts and env it adds to each container that asks for
// a vGPU: checked as the API server would check them, and rendered once at load.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "webhook/config_check.h"
#include "webhook/injection.h"

namespace kvgpu::webhook {

// Injected names get "-2", "-3", ... on a clash, so they must leave room for it within 63.
inline constexpr size_t kMaxInjectedNameLength = 56;

// `volumes`: a list of Volume objects with one known source each. `names` gets their names.
bool BuildVolumes(Checker& check, const nlohmann::json& volumes, std::vector<InjectedVolume>& out,
                  std::set<std::string>& names);

// VolumeMounts of `volume_names` only, at distinct absolute paths.
bool BuildMounts(Checker& check, const nlohmann::json& mounts, const std::string& where,
                 const std::set<std::string>& volume_names, nlohmann::json& out);

// `workload`: {volumeMounts, env} added to every vGPU container.
bool BuildWorkload(Checker& check, const nlohmann::json& workload,
                   const std::set<std::string>& volume_names, std::vector<RenderedObject>& mounts,
                   std::vector<RenderedObject>& env);

}  // namespace kvgpu::webhook
