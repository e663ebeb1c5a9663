#include "deviceplugin/daemon.h"

#include <spdlog/spdlog.h>

#include <cstdlib>

#include "common/clock.h"
#include "deviceplugin/dra/device_name.h"
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
  // Corrupt, not unreadable: keep the file for a post-mortem, then learn from the checkpoint
  // which vGPUs are ours. Unreadable (permissions, I/O) stops the start instead: Start fails.
  auto* file_store = dynamic_cast<JsonFileStateStore*>(store);
  if (file_store == nullptr) return loaded.status();
  std::filesystem::path kept = file_store->file();
  kept += ".corrupt-" + std::to_string(UnixNowMs() / 1000);
  std::error_code ec;
  std::filesystem::rename(file_store->file(), kept, ec);
  if (ec) {
    return Status::Error(ErrorCode::kIo, "state file corrupt (" + loaded.status().message() +
                                             ") and cannot be moved aside: " + ec.message());
  }
  spdlog::error(
      "STATE FILE CORRUPT: {}; moved to {}; rebuilding from kubelet's checkpoint and "
      "sysfs. vGPUs no answer of ours names are left alone.",
      loaded.status().message(), kept.string());
  Result<mdev::Inventory> inventory = backend_->Scan();
  if (!inventory.ok()) return inventory.status();
  auto checkpoint = kubelet::ReadCheckpoint(kubelet::CheckpointPath(options_.args.kubelet_dir));
  kubelet::Checkpoint empty;
  if (!checkpoint.ok()) {
    spdlog::error(
        "kubelet checkpoint unusable for the rebuild: {}; every existing vGPU is "
        "treated as someone else's",
        checkpoint.status().message());
  }
  Rebuilt rebuilt = RebuildRecords(checkpoint.ok() ? *checkpoint : empty, *inventory, UnixNowMs());
  for (const std::string& note : rebuilt.notes) spdlog::warn("state rebuild: {}", note);
  spdlog::error("state rebuilt: {} vGPUs recognised as ours, {} existing vGPUs left alone",
                rebuilt.vgpus.size(), inventory->vgpus.size() - rebuilt.vgpus.size());
  return store->Save(rebuilt.vgpus);
}

// The API server, from --kubeconfig or in-cluster; none (a warning) outside a cluster or without
// --node-name, since everything the plugin asks of it is about its own node.
Status Daemon::ConnectApi() {
  const CommandLine& args = options_.args;
  std::optional<kube::Config> api;
  if (args.kubeconfig) {
    auto loaded = kube::LoadKubeconfig(*args.kubeconfig);
    if (!loaded.ok()) {
      return Status::Error(loaded.status().code(), "--kubeconfig " + args.kubeconfig->string() +
                                                       ": " + loaded.status().message());
    }
    api = *loaded;
  } else if (std::getenv("KUBERNETES_SERVICE_HOST") != nullptr) {
    auto loaded = kube::LoadInCluster(kube::InClusterFromEnvironment());
    if (!loaded.ok()) {
      return Status::Error(loaded.status().code(),
                           "in-cluster config: " + loaded.status().message());
    }
    api = *loaded;
  }
  if (!api) {
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
  auto client = kube::ApiClient::Create(*api);
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
  if (status.ok()) status = ServeDevicePlugins();
  if (status.ok()) status = ServeDra();
  if (!status.ok()) return status;
  WatchKernel();
  StartLicensing();
  PublishSchedulerState();
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
    // allGPUs: the device plugin keeps the empty list, DRA hides the empty list.
    std::set<std::string> gpus(dra.gpus.begin(), dra.gpus.end());
    dp_view_ = std::make_unique<mdev::GpuFilterBackend>(*backend_, gpus, dra.all_gpus);
    dra_.view = std::make_unique<mdev::GpuFilterBackend>(*backend_, gpus, !dra.all_gpus);
  }
  spdlog::info("vGPU backend {}{}", backend_->Name(),
               options_.config.backend.name == "libvirt"
                   ? " at " + options_.config.backend.libvirt_uri
                   : " under " + options_.args.sysfs_root.string());
  return Status::Ok();
}

namespace {

// The plugin places vGPUs where the extender will assume them: version 1 of the published state
// speaks of the per-type lock alone, so while it is written the plugin keeps to that lock even on
// GPUs that would take other types of one size (an extender reading version 1 would otherwise
// count room the plugin has given away).
ModelOptions PlacementAsPublished(const Config& config, const std::filesystem::path& sysfs_root) {
  const bool publish = config.scheduler_state.publish;
  const int version = config.scheduler_state.version;
  ModelOptions model = ForStateVersion(config, publish, version,
                                       MakeGpuModeProbe(config.gpu_mode_probe, sysfs_root));
  if (publish && version < 3 && config.gpu_mode_probe != GpuModeProbeChoice::kNone) {
    spdlog::info(
        "gpuModeProbe gives only each type's max instances while the published state is below "
        "version 3");
  }
  if (publish && version < 2 && config.occupancy != OccupancySetting::kStrict) {
    spdlog::info(
        "vGPUs are placed by the per-type lock while the published state is version 1 "
        "(schedulerState.version: 2 lets types of one size share a GPU)");
  }
  return model;
}

}  // namespace

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

// /healthz fails when the watch loop stops turning (it wakes at least once a second), or when one
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

Status Daemon::ServeDevicePlugins() {
  const CommandLine& args = options_.args;
  std::error_code ec;
  std::filesystem::create_directories(args.DevicePluginDir(), ec);
  if (ec) {
    return Status::Error(ErrorCode::kIo,
                         "cannot create " + args.DevicePluginDir().string() + ": " + ec.message());
  }
  Status watching = watcher_.Start(args.DevicePluginDir());
  if (!watching.ok()) return watching;
  registrar_ = std::make_unique<Registrar>(
      RegistrarOptions{.kubelet_socket = args.KubeletSocket(),
                       .retry_initial = options_.retry_initial,
                       .retry_max = options_.retry_max,
                       .register_timeout = options_.register_timeout},
      RegistrarHooks{.make_server =
                         [this](const std::string& resource) {
                           return std::make_unique<PluginServer>(
                               resource, options_.args.DevicePluginDir(), *manager_,
                               PluginObservers{
                                   .on_push =
                                       [this](const std::string& r, std::chrono::nanoseconds took) {
                                         metrics_.OnPush(r, took);
                                         if (options_.on_push) options_.on_push(r, took);
                                       },
                                   .on_kubelet_left =
                                       [this](const std::string& r) {
                                         if (tracker_) {
                                           tracker_->KubeletRestarted(
                                               "it ended the ListAndWatch of " + r);
                                         }
                                       }});
                         },
                     .kubelet_restarted =
                         [this](const std::string& how) {
                           if (tracker_) tracker_->KubeletRestarted(how);
                         },
                     .attempted = [this](const std::string& resource,
                                         bool ok) { metrics_.OnRegistration(resource, ok); }});
  registrar_->SetWithheld(!ready_);
  // Each change is on every stream before the change's maker goes on: an Allocate answers kubelet
  // only after its lock was written to every other resource's list (issue 49). Bounded, so that
  // a kubelet that stopped reading one stream holds nothing up for long.
  manager_->SetChangeListener([this] {
    constexpr auto kPushWait = std::chrono::milliseconds(500);
    if (!registrar_->Push(kPushWait)) {
      spdlog::warn("a ListAndWatch stream took more than {} ms to take a list", kPushWait.count());
    }
  });
  manager_->SetRefreshRequester([this] {
    lifecycle_->OnAllocated();
    int64_t due = (Clock::now() + options_.allocate_rescan_delay).time_since_epoch().count();
    int64_t none = 0;
    if (allocate_rescan_at_.compare_exchange_strong(none, due)) WakeRescan();
  });
  registrar_->EnsureServers(manager_->Resources());
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

// The serving loop, then the pod sources and the lifecycle: orphans from before a restart are
// collected on the first pass.
void Daemon::StartLoops() {
  registrar_->Start();
  thread_ = std::thread([this] { Loop(); });
  rescan_thread_ = std::thread([this] { RescanLoop(); });
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
  watcher_.Wake();
  WakeRescan();
  if (thread_.joinable()) thread_.join();
  if (rescan_thread_.joinable()) rescan_thread_.join();
  if (manager_) {
    manager_->SetChangeListener(nullptr);
    manager_->SetRefreshRequester(nullptr);
  }
  if (dra_.manager) {
    dra_.manager->SetChangeListener(nullptr);
    dra_.manager->SetRefreshRequester(nullptr);
  }
  if (dra_.confirmer) dra_.confirmer->Stop();
  if (dra_.slices) dra_.slices->Stop();
  if (dra_.server) dra_.server->Stop();
  if (registrar_) registrar_->Stop();
  spdlog::info("stopped");
}

// The DRA front end: its own model over the DRA GPUs, its record and the claim checkpoint in the
// plugin's directory under kubelet's (so both go with the node's kubelet state), CDI always on
// (DRA hands devices to the runtime by CDI id only), the CDI kind under the driver's name so its
// spec files never collide with the device plugin's.
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
  dra::DraServerOptions server{options_.args.kubelet_dir, dra.driver_name};
  server.on_claim = [this](dra::DraCall call, std::chrono::nanoseconds took, bool ok) {
    metrics_.OnDraClaim(dra::DraCallName(call), took, ok, dra_.claims->Count());
    if (dra_.plugin) metrics_.SetDraMetadataFiles(dra_.plugin->MetadataFilesActive());
  };
  const std::filesystem::path dir = dra::DraPluginDir(server);
  std::error_code ec;
  std::filesystem::create_directories(dir / "model", ec);
  if (ec) return Status::Error(ErrorCode::kIo, "create " + dir.string() + ": " + ec.message());
  dra_.model_store = std::make_unique<JsonFileStateStore>(dir / "model");
  dra_.claims = std::make_unique<dra::PreparedStore>(dir);
  if (Status loaded = dra_.claims->Load(); !loaded.ok()) return loaded;
  dra_.holders = std::make_unique<dra::PreparedClaimHolders>(*dra_.claims);
  ModelOptions model = PlacementAsPublished(options_.config, options_.args.sysfs_root);
  model.naming.domain = dra.driver_name;
  model.cdi_enabled = true;
  dra_.manager = std::make_unique<ResourceManager>(*dra_.view, model, *dra_.model_store,
                                                   *dra_.holders, &metrics_);
  if (Status started = dra_.manager->Start(); !started.ok()) return started;
  // As for the device plugin: the rescan after a create runs on the rescan loop, after the answer.
  dra_.manager->SetRefreshRequester([this] {
    int64_t due = (Clock::now() + options_.allocate_rescan_delay).time_since_epoch().count();
    int64_t none = 0;
    if (allocate_rescan_at_.compare_exchange_strong(none, due)) WakeRescan();
  });
  dra_.slices = std::make_unique<dra::SlicePublisher>(
      *api, [this](int64_t generation, bool groups) { return DraSlices(generation, groups); },
      dra::SlicePublisherOptions{.node_name = options_.args.node_name,
                                 .driver = dra.driver_name,
                                 .min_interval = options_.dra_slice_interval,
                                 .compatibility_groups = dra.compatibility_groups},
      [this](bool ok, bool wrote) {
        dra_published_ = ok;
        metrics_.OnDraSlices(ok, wrote, ok && wrote ? dra_.slices->generation() : 0,
                             dra_.slices->compatibility_groups());
      });
  // Binding conditions (docs/dra.md): each allocation of the pool confirmed or failed here, and
  // what is confirmed narrows the slices at once.
  if (dra.binding_conditions) {
    dra::OccupancyConfirmerOptions confirmer;
    confirmer.driver = dra.driver_name;
    confirmer.pool = dra::DraPoolName(options_.args.node_name);
    confirmer.on_verdict = [this](dra::Verdict verdict) {
      metrics_.OnDraVerdict(verdict == dra::Verdict::kConfirmed);
    };
    dra_.confirmer = std::make_unique<dra::OccupancyConfirmer>(
        *api, [this] { return DraOccupancyView(); }, std::move(confirmer),
        [this] { dra_.slices->Trigger(); });
  }
  const auto changed = [this] {
    dra_.slices->Trigger();
    if (dra_.confirmer) dra_.confirmer->Trigger();
  };
  dra_.manager->SetChangeListener(changed);
  // Device metadata (KEP-5304): kept beside the checkpoint, as upstream's helper keeps it; its
  // directory is always known so that an unprepare removes files made before it was switched off.
  dra::DeviceMetadataOptions metadata;
  metadata.enabled = dra.device_metadata;
  metadata.dir = dra.device_metadata_dir.empty() ? dir / dra::kMetadataHostSubDir
                                                 : std::filesystem::path(dra.device_metadata_dir);
  metadata.cdi_dir = model.cdi_dir;
  metadata.on_write = [this](bool ok, std::chrono::nanoseconds took, size_t files) {
    metrics_.OnDraMetadataWrite(ok, took, files);
  };
  metrics_.SetDraMetadataEnabled(dra.device_metadata);
  dra_.plugin = std::make_unique<dra::DraPlugin>(
      *dra_.manager, *dra_.claims, *api,
      dra::DraPluginOptions{dra.driver_name, dra::DraPoolName(options_.args.node_name), changed},
      std::move(metadata));
  if (Status undone = dra_.plugin->RollBackUnfinished(); !undone.ok()) {
    spdlog::warn("dra: {}; kubelet's retry or unprepare of that claim finishes the job",
                 undone.message());
  }
  dra_started_ = Clock::now();
  dra_.server = std::make_unique<dra::KubeletDraServer>(*dra_.plugin, server);
  if (Status served = dra_.server->Start(); !served.ok()) return served;
  dra_.slices->Start();
  if (dra_.confirmer) dra_.confirmer->Start();
  return Status::Ok();
}

// The DRA GPUs' slices (docs/dra.md) from the DRA model's view: types a parent listed before are
// kept (TypeMemory), and the vGPUs prepared for claims do not take from the counters again (their
// allocations already did).
Result<std::vector<nlohmann::json>> Daemon::DraSlices(int64_t generation,
                                                      bool compatibility_groups) {
  const mdev::Inventory inventory = dra_.type_memory.Remember(dra_.manager->Inventory());
  const ModelOptions& model = dra_.manager->options();
  dra::SliceOptions options;
  options.node_name = options_.args.node_name;
  options.driver = options_.config.dra.driver_name;
  options.model = model;
  options.binding_conditions = options_.config.dra.binding_conditions;
  options.compatibility_groups = compatibility_groups;
  if (dra_.confirmer) options.held_devices = dra_.confirmer->Held();
  for (const CreatedVgpu& record : dra_.manager->Snapshot().records) {
    if (dra_.claims->ClaimOfDevice(record.device_id)) options.claimed_vgpus.insert(record.vgpu_id);
  }
  const GpuRules rules = RulesFor(inventory, model);
  return dra::BuildResourceSlices(inventory, rules, options, generation);
}

// The same inventory and names as the slices (its own TypeMemory: another thread), and the
// devices of claims prepared here with their vGPU where made.
Result<dra::OccupancyView> Daemon::DraOccupancyView() {
  dra::OccupancyView view;
  view.inventory = dra_.confirmer_types.Remember(dra_.manager->Inventory());
  const ModelOptions& model = dra_.manager->options();
  view.rules = RulesFor(view.inventory, model);
  dra::SliceOptions options;
  options.node_name = options_.args.node_name;
  options.driver = options_.config.dra.driver_name;
  options.model = model;
  Result<dra::Catalogue> catalogue = dra::BuildCatalogue(view.inventory, view.rules, options);
  if (!catalogue.ok()) return catalogue.status();
  view.devices = dra::DeviceSpots(catalogue->devices);
  for (const dra::PreparedClaim& claim : dra_.claims->All()) {
    for (const dra::PreparedDevice& device : claim.devices) {
      view.prepared[device.device] = device.vgpu_id;
    }
  }
  return view;
}

std::set<std::string> Daemon::Registered() const {
  return registrar_ ? registrar_->Registered() : std::set<std::string>{};
}

void Daemon::RequestRefresh() {
  refresh_requested_ = true;
  WakeRescan();
}

// The watch loop: kubelet's directory events to the registrar, and the heartbeat /healthz reads.
// Nothing here calls a peer or the backend, so no peer can stop it turning.
void Daemon::Loop() {
  while (!stop_) {
    loop_heartbeat_ = Clock::now().time_since_epoch().count();
    std::vector<DirEvent> events = watcher_.Wait(std::chrono::milliseconds(1000));
    if (stop_) break;
    registrar_->HandleDirEvents(events);
  }
}

// The rescan loop: reads the backend (which may be libvirtd, and may hang until its keepalive
// gives up), checks readiness and serves new resources, at the rescan interval, at once when asked
// (a device event), and shortly after an Allocate. A slow backend delays only this loop.
void Daemon::RescanLoop() {
  auto next_rescan = Clock::now() + options_.config.rescan_interval;
  std::unique_lock lock(rescan_mutex_);
  while (!stop_) {
    auto until = std::min(next_rescan, next_readiness_);
    if (int64_t due = allocate_rescan_at_.load(); due != 0) {
      until = std::min(until, Clock::time_point(Clock::duration(due)));
    }
    rescan_wake_.wait_until(lock, until, [&] { return stop_ || refresh_requested_.load(); });
    if (stop_) break;
    lock.unlock();
    auto now = Clock::now();
    int64_t rescan_at = allocate_rescan_at_.load();
    bool allocate_due = rescan_at != 0 && now >= Clock::time_point(Clock::duration(rescan_at));
    if (allocate_due) allocate_rescan_at_ = 0;
    if (refresh_requested_.exchange(false) || allocate_due || now >= next_rescan) {
      rescan_started_ = now.time_since_epoch().count();
      (void)manager_->Refresh();
      if (dra_.manager) (void)dra_.manager->Refresh();
      ReportBackend();
      metrics_.OnGpus(manager_->SchedulerState().gpus);
      CheckReadiness();
      registrar_->EnsureServers(manager_->Resources());
      rescan_started_ = 0;
      next_rescan = Clock::now() + options_.config.rescan_interval;
    } else if (now >= next_readiness_) {
      CheckReadiness();
    }
    lock.lock();
  }
}

void Daemon::WakeRescan() {
  { std::lock_guard lock(rescan_mutex_); }  // a waiter between its check and its wait sees it
  rescan_wake_.notify_all();
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
  if (!dra_.manager || !dra_.server) {  // not started yet: nothing to judge
    d.offers_vgpus = true;
    d.settling = true;
    return facts;
  }
  d.offers_vgpus = !dra_.manager->Resources().empty();
  d.settling = Clock::now() < dra_started_ + options_.dra_settle;
  if (std::optional<dra::RegistrationReport> report = dra_.server->LastReport()) {
    d.registered = report->registered;
    d.registration_error = report->error;
  }
  d.registration_socket =
      dra::DraRegistrationSocket({options_.args.kubelet_dir, dra.driver_name}).string();
  d.published = dra_published_.load();
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
  if (registrar_) registrar_->SetWithheld(!ready);
}

}  // namespace kvgpu::deviceplugin
