// What the webhook injects into a pod, as its config builders (container_builder.h,
// volume_builder.h) make it and the config (config.h) keeps it. Apart from config.h so that the
// builders need not include the config they are called from.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kvgpu::webhook {

// How the long-running injected containers (gridd; on hot-plug also the driver loader) run.
enum class SidecarMode {
  kNative,   // init containers with restartPolicy: Always (Kubernetes >= 1.29): they do not keep
             // Jobs from completing, and on cold-plug gridd's startup probe holds the workload
             // until the vGPU is licensed
  kClassic,  // ordinary containers, for clusters without native sidecars
};

// A container the webhook adds. Stored as the JSON object that goes into the patch; `name` and
// the volume names inside `volumeMounts` are rewritten at admission when they clash. `text` is
// `object` rendered once at load: an admission without name clashes copies it instead of
// building and serialising JSON per request.
struct InjectedContainer {
  std::string name;
  nlohmann::json object;
  std::string text;
};

// The two injected containers as they go into a pod of one attach mode.
struct Injection {
  InjectedContainer driver;  // loads the guest driver
  InjectedContainer gridd;   // the licensing daemon
  // Cold-plug: the driver loader is an ordinary init container that runs to completion before
  // anything else. Hot-plug: it cannot (the device is not there yet), so it is a sidecar that
  // waits for the device, loads the driver and stays.
  bool driver_is_init_container = true;
};

// A JSON object the webhook adds, with its text rendered once at load (see InjectedContainer).
struct RenderedObject {
  nlohmann::json object;
  std::string text;
};

struct InjectedVolume {
  std::string name;
  nlohmann::json object;  // the whole Volume: {"name": ..., "hostPath": {...}}
  std::string text;       // `object` rendered
};

}  // namespace kvgpu::webhook
