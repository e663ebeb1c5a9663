// The two containers the webhook injects (the guest-driver loader and nvidia-gridd): checked as
// the API server would check them, and composed per attach mode and sidecar mode.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "webhook/config_check.h"
#include "webhook/injection.h"

namespace kvgpu::webhook {

// One injected container as configured: the part common to every attach mode, and the parts
// that differ (null when not configured).
struct ContainerSpec {
  InjectedContainer base;
  nlohmann::json args;
  nlohmann::json hot_plug_args;    // driverInit only
  nlohmann::json startup_probe;    // gridd only
  nlohmann::json readiness_probe;  // gridd only
};

// One container's config under `where`; `extra_keys` are the mode-specific keys it accepts
// besides the common ones.
bool BuildContainer(Checker& check, const nlohmann::json& in, const std::string& where,
                    const std::set<std::string>& volume_names,
                    const std::vector<std::string>& prefixes, std::set<std::string> extra_keys,
                    ContainerSpec& out);

// The containers per attach mode. Only on cold-plug with native sidecars does gridd's startup
// probe hold anything back (the next init containers and the workload wait for it, and the
// vGPU is there to be licensed); everywhere else a startup probe would either block the hot-plug
// that the probe waits for, or hold back nothing, so readiness alone reports the licence.
void ComposeInjections(const ContainerSpec& driver, const ContainerSpec& gridd, SidecarMode mode,
                       Injection& hot_plug, Injection& cold_plug);

}  // namespace kvgpu::webhook
