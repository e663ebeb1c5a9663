// The device plugin API front end (kubelet's v1beta1, docs/device-plugin.md) as one object, in the
// manner of NVIDIA's k8s-device-plugin: one PluginServer per resource the model offers (each builds
// kubelet's answers, Allocate's container answer included, from the model), the registrar that
// keeps them registered, and the watch of kubelet's device-plugins directory on its own thread.
// Start serves, registers and watches; Stop undoes that in reverse order. The daemon starts and
// stops it, and after each rescan asks it to serve what the model offers now.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "common/background_worker.h"
#include "common/status.h"
#include "deviceplugin/kubelet/registrar.h"
#include "deviceplugin/kubelet/socket_watch.h"
#include "deviceplugin/model/resource_manager.h"

namespace kvgpu::deviceplugin {

struct DevicePluginFrontEndOptions {
  std::filesystem::path plugin_dir;      // kubelet's device-plugins directory (our sockets)
  std::filesystem::path kubelet_socket;  // kubelet's Registration service in it
  // Registration retry (registrar.h): starts here, doubles, capped.
  std::chrono::milliseconds retry_initial{100};
  std::chrono::milliseconds retry_max{1000};
  std::chrono::milliseconds register_timeout{2000};
  // How long a change of the model waits for every ListAndWatch stream to take the new lists
  // before its maker goes on (issue 49).
  std::chrono::milliseconds push_wait{500};
};

// What the front end tells its owner; every one may be empty.
struct DevicePluginObservers {
  // Each ListAndWatch push and its latency.
  std::function<void(const std::string& resource, std::chrono::nanoseconds took)> on_push;
  // Each registration attempt's outcome.
  std::function<void(const std::string& resource, bool ok)> on_registration;
  // kubelet restarted (or is restarting): the pods it lists are stale until it lists them again.
  std::function<void(const std::string& how)> kubelet_restarted;
  // Each turn of the directory watch (at least once a second): /healthz's heartbeat.
  std::function<void()> on_turn;
};

class DevicePluginFrontEnd {
 public:
  DevicePluginFrontEnd(ResourceManager& manager, DevicePluginFrontEndOptions options,
                       DevicePluginObservers observers = {});
  ~DevicePluginFrontEnd();
  DevicePluginFrontEnd(const DevicePluginFrontEnd&) = delete;
  DevicePluginFrontEnd& operator=(const DevicePluginFrontEnd&) = delete;

  // Watches kubelet's directory, serves every resource the model offers, then registers them and
  // starts the watch loop. A failure (no directory) means the daemon must not run.
  Status Start();
  // Stops the watch loop, the model's pushes and every server (their sockets removed).
  // Idempotent.
  void Stop();

  // Serves every resource the model offers now that is not served yet (after a rescan).
  void ServeOffered();
  // Withheld: every list kubelet gets is empty (node_readiness.h); may be set before Start.
  // Called from one thread at a time.
  void SetWithheld(bool withheld);
  // Resources currently registered with kubelet.
  std::set<std::string> Registered() const;

 private:
  // The watch loop: kubelet's directory events to the registrar. Nothing here calls a peer or the
  // backend, so no peer can stop it turning.
  void Loop(BackgroundWorker::Handle& worker);

  ResourceManager& manager_;
  DevicePluginFrontEndOptions options_;
  DevicePluginObservers observers_;
  bool withheld_ = false;
  DirWatcher watcher_;
  std::unique_ptr<Registrar> registrar_;
  std::atomic<bool> stop_{false};
  BackgroundWorker loop_;  // the watch loop
};

}  // namespace kvgpu::deviceplugin
