// The daemon as named steps over shared state (after Falco's app actions):
// load config -> open state -> discover -> metrics -> serve -> register -> watch.
// Teardown (Stop) always runs the same way: stop watching, stop servers, remove sockets.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "deviceplugin/cli.h"
#include "deviceplugin/config.h"
#include "deviceplugin/holders.h"
#include "deviceplugin/metrics.h"
#include "deviceplugin/plugin_server.h"
#include "deviceplugin/resource_manager.h"
#include "deviceplugin/socket_watch.h"
#include "deviceplugin/state_store.h"
#include "mdev/node.h"
#include "mdev/udev_monitor.h"

namespace kvgpu::deviceplugin {

struct DaemonOptions {
  CommandLine args;
  Config config;
  // The sysfs seam; nullptr: the real one (PosixSysfsIo).
  mdev::SysfsIo* io = nullptr;
  // The state store; nullptr: JsonFileStateStore under --state-dir.
  StateStore* store = nullptr;
  // Who holds device IDs; nullptr: UnknownHolders (never claims an ID is free).
  HolderOracle* holders = nullptr;
  // Registration retry: starts here, doubles, capped so a restarted kubelet is found within 5 s.
  std::chrono::milliseconds retry_initial{100};
  std::chrono::milliseconds retry_max{1000};
  std::chrono::milliseconds register_timeout{2000};
  // A rescan asked for by Allocate waits this long: the reply to kubelet goes out first, and
  // back-to-back Allocate calls share one rescan.
  std::chrono::milliseconds allocate_rescan_delay{2};
  // Also told of every ListAndWatch push and its latency (besides the metrics); for benchmarks.
  PluginServer::PushObserver on_push;
};

class Daemon {
 public:
  explicit Daemon(DaemonOptions options);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Every step up to serving; registration and watching then run on the daemon's thread.
  // A failure here (unreadable state, no sysfs, busy metrics port) means the daemon must not run.
  mdev::Status Start();
  void Stop();

  ResourceManager& manager() { return *manager_; }
  Metrics& metrics() { return metrics_; }
  // Resources currently registered with kubelet.
  std::set<std::string> Registered() const;
  // Ask for a rescan now (what a udev event does).
  void RequestRefresh();

 private:
  void Loop();
  void EnsureServers();
  void HandleDirEvents(const std::vector<DirEvent>& events);
  void TryRegister();

  DaemonOptions options_;
  std::unique_ptr<mdev::SysfsIo> own_io_;
  std::unique_ptr<StateStore> own_store_;
  UnknownHolders unknown_holders_;
  std::unique_ptr<mdev::Node> node_;
  Metrics metrics_;
  std::unique_ptr<ResourceManager> manager_;
  std::unique_ptr<mdev::UdevMonitor> udev_;
  DirWatcher watcher_;

  // The change listener only needs the servers to notify; it must never wait for servers_mutex_,
  // which is held while a server stops (and stopping waits for in-flight calls to return).
  std::mutex notify_mutex_;
  std::vector<PluginServer*> notify_;

  mutable std::mutex servers_mutex_;
  std::map<std::string, std::unique_ptr<PluginServer>> servers_;
  std::set<std::string> unregistered_;

  std::atomic<bool> stop_{false};
  std::atomic<bool> refresh_requested_{false};
  // steady_clock nanoseconds when the rescan an Allocate asked for is due; 0: none pending.
  std::atomic<int64_t> allocate_rescan_at_{0};
  std::thread thread_;
  std::chrono::steady_clock::time_point next_retry_{};
  std::chrono::milliseconds backoff_{0};
  bool kubelet_missing_logged_ = false;
};

}  // namespace kvgpu::deviceplugin
