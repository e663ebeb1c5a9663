#include "deviceplugin/daemon.h"

#include <spdlog/spdlog.h>

#include "common/clock.h"
#include "deviceplugin/front_end_metrics.h"
#include "deviceplugin/lifecycle/state_rebuild.h"

namespace kvgpu::deviceplugin {

using Clock = std::chrono::steady_clock;

Daemon::Daemon(DaemonOptions options) : options_(std::move(options)) {}

Daemon::~Daemon() {
  Stop();
}

Status Daemon::OpenState(StateStore*& store) {
  store = options_.store;
  if (store == nullptr) {
    own_store_ = std::make_unique<JsonFileStateStore>(options_.args.state_dir);
    store = own_store_.get();
  }
  Result<std::vector<CreatedVgpu>> loaded = store->Load();
  if (loaded.ok() || loaded.status().code() != ErrorCode::kInvalid) return Status::Ok();
  // Corrupt, not unreadable: rebuilt from kubelet's checkpoint (state_rebuild.h). Unreadable
  // (permissions, I/O) stops the start instead: Start fails.
  auto* file_store = dynamic_cast<JsonFileStateStore*>(store);
  if (file_store == nullptr) return loaded.status();
  return RebuildCorruptState(*file_store, loaded.status(), *backend_, options_.args.kubelet_dir);
}

// The API server, from --kubeconfig or in-cluster; none (a warning) outside a cluster or without
// --node-name, since everything the plugin asks of it is about its own node.
Status Daemon::ConnectApi() {
  const CommandLine& args = options_.args;
  Result<std::optional<kube::Config>> api = ApiServerConfig(args);
  if (!api.ok()) return api.status();
  if (!*api) {
    spdlog::warn(
        "no API server (no --kubeconfig, not in a cluster): pods are tracked through kubelet "
        "alone, no Events are posted and the scheduler extender gets no state from this node");
    return Status::Ok();
  }
  if (args.node_name.empty()) {
    spdlog::warn(
        "no --node-name: the API server's pods cannot be followed and the node's vGPU state "
        "is not published");
    return Status::Ok();
  }
  auto client = kube::ApiClient::Create(**api);
  if (!client.ok()) {
    return Status::Error(client.status().code(), "API client: " + client.status().message());
  }
  api_ = std::move(*client);
  return Status::Ok();
}

Status Daemon::OpenPodSources() {
  const CommandLine& args = options_.args;
  const LifecycleConfig& lifecycle = options_.config.lifecycle;
  if (options_.podresources == nullptr) {
    own_podresources_ = std::make_unique<kubelet::PodResourcesClient>(args.PodResourcesSocket());
  }
  checkpoint_ = std::make_unique<kubelet::CheckpointWatcher>(args.kubelet_dir);
  kube::PodWatcher* pods = options_.pods;
  kube::EventRecorder* events = options_.events;
  const bool publish = options_.config.scheduler_state.publish && options_.api == nullptr;
  if ((lifecycle.watch_pods && (pods == nullptr || events == nullptr)) || publish) {
    Status connected = ConnectApi();
    if (!connected.ok()) return connected;
  }
  if (api_ && lifecycle.watch_pods) {
    if (pods == nullptr) {
      own_pods_ = std::make_unique<kube::ApiPodWatcher>(
          *api_, kube::PodWatchOptions{.node_name = args.node_name, .watch = {}});
    }
    if (events == nullptr && lifecycle.events) {
      api_events_ =
          std::make_unique<kube::ApiEventRecorder>(*api_, "kvgpu-device-plugin", args.node_name);
    }
  }
  if (pods == nullptr) pods = own_pods_.get();
  if (events == nullptr && api_events_) {
    async_events_ = std::make_unique<kube::AsyncEventRecorder>(*api_events_);
    events = async_events_.get();
  }
  if (!lifecycle.events) events = nullptr;
  kubelet::PodResourcesSource* podresources =
      options_.podresources != nullptr ? options_.podresources : own_podresources_.get();
  tracker_ =
      std::make_unique<HolderTracker>(podresources, checkpoint_.get(), pods, options_.settle);
  LifecycleOptions reconcile;
  reconcile.grace_period = lifecycle.grace_period;
  reconcile.poll_interval = lifecycle.poll_interval;
  reconcile.retry_max = lifecycle.retry_max;
  reconcile.settle = options_.settle;
  lifecycle_metrics_ = std::make_unique<LifecycleMetrics>(metrics_.registry());
  events_for_lifecycle_ = events;
  lifecycle_options_ = reconcile;
  return Status::Ok();
}

// Start-up, step by step; each needs the ones before it, and the first failure ends start-up
// (Stop() then tears down whatever was started).
Status Daemon::Start() {
  Status status = Discover();
  StateStore* store = nullptr;
  if (status.ok()) status = OpenState(store);
  if (status.ok()) status = OpenPodSources();
  if (status.ok()) status = StartManager(*store);
  if (status.ok()) status = ServeMetrics();
  if (status.ok()) status = ServeDra();
  if (!status.ok()) return status;
  WatchKernel();
  StartLicensing();
  PublishSchedulerState();
  if (Status served = ServeDevicePlugins(); !served.ok()) return served;
  StartLoops();
  return Status::Ok();
}

Status Daemon::Discover() {
  mdev::SysfsIo* io = options_.io;
  if (io == nullptr) {
    own_io_ = std::make_unique<mdev::PosixSysfsIo>();
    io = own_io_.get();
  }
  auto backend = mdev::MakeBackend(options_.config.backend, options_.args.sysfs_root, *io);
  if (!backend.ok()) return backend.status();
  backend_ = std::move(*backend);
  const DraConfig& dra = options_.config.dra;
  if (dra.enabled()) {
    // allGPUs: the device plugin keeps the empty list, DRA (dra_front_end.h) hides it.
    std::set<std::string> gpus(dra.gpus.begin(), dra.gpus.end());
    dp_view_ = std::make_unique<mdev::GpuFilterBackend>(*backend_, gpus, dra.all_gpus);
  }
  spdlog::info("vGPU backend {}{}", backend_->Name(),
               options_.config.backend.name == "libvirt"
                   ? " at " + options_.config.backend.libvirt_uri
                   : " under " + options_.args.sysfs_root.string());
  return Status::Ok();
}

Status Daemon::StartManager(StateStore& store) {
  mdev::Backend& view = dp_view_ ? static_cast<mdev::Backend&>(*dp_view_) : *backend_;
  manager_ = std::make_unique<ResourceManager>(
      view, PlacementAsPublished(options_.config, options_.args.sysfs_root), store, *tracker_,
      &metrics_);
  Status started = manager_->Start();
  if (!started.ok()) return started;
  ReportBackend();  // a backend away since the start shows in the metrics (and alert) at once
  metrics_.OnGpus(manager_->SchedulerState().gpus);
  lifecycle_ = std::make_unique<Lifecycle>(*manager_, *tracker_, events_for_lifecycle_,
                                           lifecycle_options_, lifecycle_metrics_.get());
  for (const std::string& resource : manager_->Resources()) {
    spdlog::info("resource offered name={} devices={}", resource,
                 manager_->Devices(resource).size());
  }
  // The device plugin front end runs where DRA does not take every GPU it sees; a node whose
  // GPUs all serve DRA is not judged by the device plugin's (empty) resources.
  const DraConfig& dra = options_.config.dra;
  dp_runs_ = !dra.enabled() || (!dra.all_gpus && !manager_->Inventory().parents.empty());
  // Before the first server: a node that is not ready never shows kubelet a device.
  readiness_ = std::make_unique<NodeReadinessReporter>(metrics_.registry(), events_for_lifecycle_,
                                                       options_.args.node_name, FrontEnds());
  CheckReadiness();
  return Status::Ok();
}

// /healthz fails when the device plugin front end's watch of kubelet's directory stops turning (it
// wakes at least once a second; device_plugin_front_end.h), or when one
// rescan has run for longer than kStuckRescan: longer than any backend may take (libvirt's
// keepalive gives up on a hung libvirtd after 15 s), so only a scan stuck for good.
Status Daemon::ServeMetrics() {
  constexpr auto kStuckRescan = std::chrono::seconds(120);
  loop_heartbeat_ = Clock::now().time_since_epoch().count();
  metrics_.SetHealthCheck([this, kStuckRescan] {
    auto now = Clock::now();
    auto beat = Clock::time_point(Clock::duration(loop_heartbeat_.load()));
    int64_t rescan = rescan_started_.load();
    bool stuck = rescan != 0 && now - Clock::time_point(Clock::duration(rescan)) > kStuckRescan;
    return !stop_ && now - beat < std::chrono::seconds(10) && !stuck;
  });
  const std::string& address = options_.args.metrics_addr;
  if (address.empty()) return Status::Ok();
  Status served = metrics_.Serve(address);
  if (!served.ok()) return served;
  spdlog::info("metrics on http://{}/metrics", address);
  return Status::Ok();
}

// Device events (udev's, or libvirt's node-device events) make rescans immediate; periodic
// rescans catch everything else, and are all there is when events cannot be had.
void Daemon::WatchKernel() {
  if (!options_.config.udev_events) return;
  auto events = backend_->WatchChanges([this](const std::string& what) {
    spdlog::debug("device event: {}", what);
    RequestRefresh();
  });
  if (!events.ok()) {
    spdlog::warn("no device events ({}); relying on rescans every {} ms",
                 events.status().ToString(), options_.config.rescan_interval.count());
    return;
  }
  device_events_ = std::move(*events);
}

void Daemon::StartLicensing() {
  const CommandLine& args = options_.args;
  if (!args.licensing_source) return;
  LicensingPublisher publisher(*args.licensing_source, args.licensing_dir);
  LicensingLoop::Observer report = LicensingReporter(metrics_.registry(), publisher);
  licensing_ = std::make_unique<LicensingLoop>(std::move(publisher), options_.licensing_interval,
                                               std::move(report));
}

// For the scheduler extender (docs/scheduler-extender.md): the node's vGPU state on its Node.
void Daemon::PublishSchedulerState() {
  const SchedulerStateConfig& config = options_.config.scheduler_state;
  kube::ApiTransport* api = options_.api != nullptr ? options_.api : api_.get();
  if (!config.publish || api == nullptr || options_.args.node_name.empty()) return;
  publisher_ = std::make_unique<StatePublisher>(
      *api,
      [this, version = config.version] {
        scheduling::NodeVgpuState state = manager_->SchedulerState();
        state.version = version;
        return state;
      },
      StatePublisherOptions{.node_name = options_.args.node_name,
                            .min_interval = config.min_interval,
                            .heartbeat = config.heartbeat},
      [this](bool ok, uint64_t generation) { metrics_.OnStatePublished(ok, generation); });
  publisher_->Start();
}

// The device plugin front end (kubelet/device_plugin_front_end.h): served, registered and
// watching kubelet's directory once everything it may be asked about runs; its servers build their
// answers from the model, and it tells this daemon of kubelet's restarts and of each turn of its
// watch (the heartbeat /healthz reads).
Status Daemon::ServeDevicePlugins() {
  const CommandLine& args = options_.args;
  DevicePluginObservers observers = DevicePluginMetrics(metrics_, options_.on_push);
  observers.kubelet_restarted = [this](const std::string& how) {
    if (tracker_) tracker_->KubeletRestarted(how);
  };
  observers.on_turn = [this] { loop_heartbeat_ = Clock::now().time_since_epoch().count(); };
  device_plugin_ = std::make_unique<DevicePluginFrontEnd>(
      *manager_,
      DevicePluginFrontEndOptions{.plugin_dir = args.DevicePluginDir(),
                                  .kubelet_socket = args.KubeletSocket(),
                                  .retry_initial = options_.retry_initial,
                                  .retry_max = options_.retry_max,
                                  .register_timeout = options_.register_timeout},
      std::move(observers));
  device_plugin_->SetWithheld(!ready_);
  manager_->SetRefreshRequester([this] {
    lifecycle_->OnAllocated();
    RescanSoon();
  });
  return device_plugin_->Start();
}

void Daemon::RescanSoon() {
  int64_t due = (Clock::now() + options_.allocate_rescan_delay).time_since_epoch().count();
  int64_t none = 0;
  if (allocate_rescan_at_.compare_exchange_strong(none, due)) rescan_.Wake();
}

// The rescan loop, then the pod sources and the lifecycle: orphans from before a restart are
// collected on the first pass.
void Daemon::StartLoops() {
  rescan_.Start([this](BackgroundWorker::Handle& worker) { RescanLoop(worker); });
  tracker_->Start({[this] { lifecycle_->Trigger(true); }, [this] { lifecycle_->Trigger(false); }});
  lifecycle_->Start();
}

// Bounded whatever the peers do: calls in flight to kubelet and the API server are broken, not
// waited out. Dropped: the state patch in flight (the next start publishes anew) and Events not
// sent within kEventFlushLimit (counted in the log). The state file is written before every change
// it records, so nothing of it is lost. A removal blocked in the kernel (a VM still holds the
// mdev) is the one wait left: the kernel's, not a peer's.
void Daemon::Stop() {
  if (stop_.exchange(true)) return;
  constexpr std::chrono::milliseconds kEventFlushLimit{1000};
  metrics_.SetHealthCheck([] { return false; });
  if (own_podresources_) own_podresources_->Cancel();
  if (publisher_) publisher_->Stop();
  if (tracker_) tracker_->Stop();
  if (lifecycle_) lifecycle_->Stop();
  if (async_events_ && !async_events_->Flush(kEventFlushLimit)) {
    async_events_->Cancel();
    spdlog::warn("Events the API server did not take within {} ms are dropped",
                 kEventFlushLimit.count());
  }
  device_events_.reset();
  licensing_.reset();
  rescan_.Stop();
  if (manager_) manager_->SetRefreshRequester(nullptr);
  if (dra_) dra_->Stop();
  if (device_plugin_) device_plugin_->Stop();
  spdlog::info("stopped");
}

// The DRA front end (dra/dra_front_end.h): its own model over the DRA GPUs, its record and the
// claim checkpoint in the plugin's directory under kubelet's, the CDI kind under the driver's name
// so its spec files never collide with the device plugin's; its metrics are this daemon's.
Status Daemon::ServeDra() {
  const DraConfig& dra = options_.config.dra;
  if (!dra.enabled()) return Status::Ok();
  kube::ApiTransport* api = options_.api;
  if (api == nullptr) {
    if (!api_) {
      if (Status connected = ConnectApi(); !connected.ok()) return connected;
    }
    api = api_.get();
  }
  if (api == nullptr || options_.args.node_name.empty()) {
    return Status::Error(ErrorCode::kConfig,
                         "config dra needs the API server (--kubeconfig or in-cluster) and "
                         "--node-name: a claim's devices are read from the API server");
  }
  dra::DraFrontEndOptions options;
  options.driver = dra.driver_name;
  options.node_name = options_.args.node_name;
  options.kubelet_dir = options_.args.kubelet_dir;
  options.gpus = std::set<std::string>(dra.gpus.begin(), dra.gpus.end());
  options.all_but_listed = dra.all_gpus;
  options.model = PlacementAsPublished(options_.config, options_.args.sysfs_root);
  options.binding_conditions = dra.binding_conditions;
  options.compatibility_groups = dra.compatibility_groups;
  options.device_metadata = dra.device_metadata;
  options.device_metadata_dir = dra.device_metadata_dir;
  options.slice_interval = options_.dra_slice_interval;
  metrics_.SetDraMetadataEnabled(dra.device_metadata);
  dra::DraObservers observers = DraMetrics(metrics_);
  observers.request_rescan = [this] { RescanSoon(); };  // on the rescan loop, after the answer
  dra_ = std::make_unique<dra::DraFrontEnd>(*backend_, *api, std::move(options), observers);
  return dra_->Start();
}

std::set<std::string> Daemon::Registered() const {
  return device_plugin_ ? device_plugin_->Registered() : std::set<std::string>{};
}

void Daemon::RequestRefresh() {
  refresh_requested_ = true;
  rescan_.Wake();
}

// The rescan loop: reads the backend (which may be libvirtd, and may hang until its keepalive
// gives up), checks readiness and serves new resources, at the rescan interval, at once when asked
// (a device event), and shortly after an Allocate. A slow backend delays only this loop.
void Daemon::RescanLoop(BackgroundWorker::Handle& worker) {
  auto next_rescan = Clock::now() + options_.config.rescan_interval;
  for (;;) {
    auto until = std::min(next_rescan, next_readiness_);
    if (int64_t due = allocate_rescan_at_.load(); due != 0) {
      until = std::min(until, Clock::time_point(Clock::duration(due)));
    }
    // Woken by a device event (refresh_requested_) or an Allocate (allocate_rescan_at_): both
    // are looked at below; a wake for a later rescan only makes the next wait shorter.
    if (!worker.WaitUntil(until)) break;
    auto now = Clock::now();
    int64_t rescan_at = allocate_rescan_at_.load();
    bool allocate_due = rescan_at != 0 && now >= Clock::time_point(Clock::duration(rescan_at));
    if (allocate_due) allocate_rescan_at_ = 0;
    if (refresh_requested_.exchange(false) || allocate_due || now >= next_rescan) {
      rescan_started_ = now.time_since_epoch().count();
      (void)manager_->Refresh();
      if (dra_) (void)dra_->manager().Refresh();
      ReportBackend();
      metrics_.OnGpus(manager_->SchedulerState().gpus);
      CheckReadiness();
      device_plugin_->ServeOffered();
      rescan_started_ = 0;
      next_rescan = Clock::now() + options_.config.rescan_interval;
    } else if (now >= next_readiness_) {
      CheckReadiness();
    }
  }
}

// A lost backend connection is logged once when lost and once when back, and always in metrics.
void Daemon::ReportBackend() {
  mdev::BackendHealth health = backend_->Health();
  metrics_.OnBackend(backend_->Name(), health);
  if (health.connected == backend_connected_) return;
  backend_connected_ = health.connected;
  if (health.connected) {
    spdlog::info("{} backend reachable again ({} reconnects since start)", backend_->Name(),
                 health.reconnects);
  } else {
    spdlog::error(
        "{} backend unreachable: {}; the last view is kept and nothing is removed "
        "until it is back",
        backend_->Name(), health.last_error);
  }
}

FrontEndFacts Daemon::FrontEnds() const {
  FrontEndFacts facts;
  if (dp_runs_) facts.device_plugin_offers = !manager_->Resources().empty();
  const DraConfig& dra = options_.config.dra;
  if (!dra.enabled()) return facts;
  DraFacts& d = facts.dra.emplace();
  d.driver = dra.driver_name;
  if (!dra_ || !dra_->serving()) {  // not started yet: nothing to judge
    d.offers_vgpus = true;
    d.settling = true;
    return facts;
  }
  d.offers_vgpus = !dra_->manager().Resources().empty();
  d.settling = Clock::now() < dra_->started() + options_.dra_settle;
  if (std::optional<dra::RegistrationReport> report = dra_->LastReport()) {
    d.registered = report->registered;
    d.registration_error = report->error;
  }
  d.registration_socket = dra_->RegistrationSocket().string();
  d.published = dra_->published();
  return facts;
}

void Daemon::CheckReadiness() {
  next_readiness_ = Clock::now() + options_.readiness_interval;
  bool ready = true;
  if (!options_.args.node_readiness_check) {
    readiness_->Disabled();
  } else {
    ready = readiness_->Update(CheckNodeReadiness(options_.args.sysfs_root, FrontEnds()));
  }
  if (ready_.exchange(ready) == ready) return;
  if (device_plugin_) device_plugin_->SetWithheld(!ready);
}

}  // namespace kvgpu::deviceplugin
