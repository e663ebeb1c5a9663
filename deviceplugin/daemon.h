// The node daemon, started as named steps over shared state (Daemon::Start): discover -> open
// state -> pod sources -> resource manager and lifecycle -> metrics -> the DRA front end ->
// kernel events -> licensing -> scheduler state -> the device plugin front end -> loops (rescan,
// reconcile), each on its own thread so no peer holds up another's work. Each kubelet front end is
// one object with Start and Stop (dra/dra_front_end.h, kubelet/device_plugin_front_end.h) that the
// daemon only builds, starts and stops. Teardown (Stop) always runs the same way: stop
// reconciling and rescanning, stop the front ends (servers stopped, sockets removed).
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <set>

#include "common/background_worker.h"
#include "deviceplugin/cli.h"
#include "deviceplugin/config.h"
#include "deviceplugin/dra/dra_front_end.h"
#include "deviceplugin/kubelet/device_plugin_front_end.h"
#include "deviceplugin/lifecycle/holder_tracker.h"
#include "deviceplugin/lifecycle/lifecycle.h"
#include "deviceplugin/lifecycle/lifecycle_metrics.h"
#include "deviceplugin/model/resource_manager.h"
#include "deviceplugin/model/state_store.h"
#include "deviceplugin/publish/licensing_publisher.h"
#include "deviceplugin/publish/metrics.h"
#include "deviceplugin/publish/node_readiness.h"
#include "deviceplugin/publish/state_publisher.h"
#include "kube/api_client.h"
#include "kube/events.h"
#include "kube/kubelet/checkpoint_watcher.h"
#include "kube/pod_watcher.h"
#include "mdev/backend.h"
#include "mdev/gpu_filter_backend.h"
#include "mdev/sysfs_io.h"

namespace kvgpu::deviceplugin {

struct DaemonOptions {
  CommandLine args;
  Config config;
  // The sysfs seam; nullptr: the real one (PosixSysfsIo).
  mdev::SysfsIo* io = nullptr;
  // The state store; nullptr: JsonFileStateStore under --state-dir.
  StateStore* store = nullptr;
  // Pod facts; nullptr: the real sources (kubelet under --kubelet-dir, the API server from
  // --kubeconfig or in-cluster). Tests give in-memory ones.
  kubelet::PodResourcesSource* podresources = nullptr;
  kube::PodWatcher* pods = nullptr;
  kube::EventRecorder* events = nullptr;
  // Where the node's vGPU state is published (state_publisher.h); nullptr: the API server the
  // pods come from. Tests give a fake one.
  kube::ApiTransport* api = nullptr;
  // See holder_tracker.h; tests shorten it.
  std::chrono::milliseconds settle{5000};
  // Registration retry: starts here, doubles, capped so a restarted kubelet is found within 5 s.
  std::chrono::milliseconds retry_initial{100};
  std::chrono::milliseconds retry_max{1000};
  std::chrono::milliseconds register_timeout{2000};
  // A rescan asked for by Allocate waits this long: the reply to kubelet goes out first, and
  // back-to-back Allocate calls share one rescan.
  std::chrono::milliseconds allocate_rescan_delay{2};
  // Also told of every ListAndWatch push and its latency (besides the metrics); for benchmarks.
  decltype(DevicePluginObservers::on_push) on_push;
  // How often the licensing files are re-published (kubelet refreshes a mounted Secret within
  // about a minute; this adds at most its own interval to a rotation).
  std::chrono::milliseconds licensing_interval{std::chrono::seconds(30)};
  // How often the node's readiness for vGPU pods is checked again (also after every rescan);
  // a fixed node starts advertising within this.
  std::chrono::milliseconds readiness_interval{std::chrono::seconds(30)};
  // The DRA front end's registration with kubelet and its first ResourceSlices are awaited this
  // long after it starts before their absence makes it not ready (a start is not a failure).
  std::chrono::milliseconds dra_settle{std::chrono::seconds(30)};
  // The DRA ResourceSlices are written at most once per this (slice_publisher.h).
  std::chrono::milliseconds dra_slice_interval{std::chrono::seconds(1)};
};

class Daemon {
 public:
  explicit Daemon(DaemonOptions options);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Every step up to serving; registration and watching then run on the daemon's thread.
  // A failure here (unreadable state, no sysfs, busy metrics port) means the daemon must not run.
  Status Start();
  void Stop();

  ResourceManager& manager() { return *manager_; }
  // The DRA front end's model; nullptr unless config dra serves some GPU.
  ResourceManager* dra_manager() { return dra_ ? &dra_->manager() : nullptr; }
  Lifecycle& lifecycle() { return *lifecycle_; }
  Metrics& metrics() { return metrics_; }
  // Resources currently registered with kubelet.
  std::set<std::string> Registered() const;
  // Ask for a rescan now (what a udev event does).
  void RequestRefresh();

 private:
  void RescanLoop(BackgroundWorker::Handle& worker);
  // Asks for a rescan shortly after an Allocate or a prepare (allocate_rescan_delay).
  void RescanSoon();
  // Checks the node's prerequisites; on a change, withholds or restores every resource's list.
  void CheckReadiness();
  // Which front ends run and what each shows now (node_readiness.h).
  FrontEndFacts FrontEnds() const;
  void ReportBackend();
  // Start's steps, in order.
  Status Discover();
  Status OpenState(StateStore*& store);
  Status ConnectApi();
  Status OpenPodSources();
  Status StartManager(StateStore& store);
  Status ServeMetrics();
  // The DRA front end (docs/dra-kubelet-plugin.md), when config dra names GPUs.
  Status ServeDra();
  void WatchKernel();
  void StartLicensing();
  void PublishSchedulerState();
  Status ServeDevicePlugins();
  void StartLoops();

  DaemonOptions options_;
  std::unique_ptr<mdev::SysfsIo> own_io_;
  std::unique_ptr<StateStore> own_store_;
  std::unique_ptr<mdev::Backend> backend_;
  bool backend_connected_ = true;  // as last reported; the loop's
  Metrics metrics_;
  // Pod facts (holder_tracker.h) and what acts on them; declared in the order they must start.
  std::unique_ptr<kubelet::PodResourcesSource> own_podresources_;
  std::unique_ptr<kubelet::CheckpointWatcher> checkpoint_;
  std::unique_ptr<kube::ApiClient> api_;
  std::unique_ptr<kube::PodWatcher> own_pods_;
  std::unique_ptr<kube::EventRecorder> api_events_;
  std::unique_ptr<kube::AsyncEventRecorder> async_events_;
  std::unique_ptr<HolderTracker> tracker_;
  std::unique_ptr<ResourceManager> manager_;
  std::unique_ptr<LifecycleMetrics> lifecycle_metrics_;
  std::unique_ptr<Lifecycle> lifecycle_;
  kube::EventRecorder* events_for_lifecycle_ = nullptr;
  LifecycleOptions lifecycle_options_;
  std::unique_ptr<mdev::EventSubscription> device_events_;
  std::unique_ptr<LicensingLoop> licensing_;
  std::unique_ptr<NodeReadinessReporter> readiness_;
  std::unique_ptr<StatePublisher> publisher_;
  std::atomic<bool> ready_{true};  // written by the loop (and Start)
  bool dp_runs_ = true;            // the device plugin front end runs (set at start)
  std::chrono::steady_clock::time_point next_readiness_{};

  // The front ends: one mode per GPU. The device plugin's model sees the backend through dp_view_
  // (without DRA's GPUs), DRA's model through its own view (only them).
  std::unique_ptr<mdev::GpuFilterBackend> dp_view_;
  std::unique_ptr<DevicePluginFrontEnd> device_plugin_;
  std::unique_ptr<dra::DraFrontEnd> dra_;

  std::atomic<bool> stop_{false};
  std::atomic<bool> refresh_requested_{false};
  // steady_clock ticks of the last turn of the device plugin front end's watch loop.
  std::atomic<int64_t> loop_heartbeat_{0};
  // steady_clock nanoseconds when the rescan an Allocate asked for is due; 0: none pending.
  std::atomic<int64_t> allocate_rescan_at_{0};
  std::atomic<int64_t> rescan_started_{0};  // steady_clock ticks; 0: no rescan running
  BackgroundWorker rescan_;                 // the rescan loop
};

}  // namespace kvgpu::deviceplugin
