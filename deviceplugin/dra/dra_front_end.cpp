#include "deviceplugin/dra/dra_front_end.h"

#include <spdlog/spdlog.h>

#include <system_error>
#include <utility>

#include "deviceplugin/dra/device_name.h"

namespace kvgpu::deviceplugin::dra {

DraFrontEnd::DraFrontEnd(mdev::Backend& backend, kube::ApiTransport& api,
                         DraFrontEndOptions options, DraObservers observers)
    : api_(api),
      options_(std::move(options)),
      observers_(std::move(observers)),
      view_(backend, options_.gpus, !options_.all_but_listed) {
  options_.model.naming.domain = options_.driver;
  options_.model.cdi_enabled = true;
}

DraFrontEnd::~DraFrontEnd() {
  Stop();
}

std::filesystem::path DraFrontEnd::StateDir() const {
  if (!options_.state_dir.empty()) return options_.state_dir;
  return DraPluginDir(DraServerOptions{options_.kubelet_dir, options_.driver});
}

// The model over the DRA GPUs, its record and the claim checkpoint (the model's holders).
Status DraFrontEnd::OpenModel() {
  const std::filesystem::path dir = StateDir();
  std::error_code ec;
  std::filesystem::create_directories(dir / "model", ec);
  if (ec) return Status::Error(ErrorCode::kIo, "create " + dir.string() + ": " + ec.message());
  model_store_ = std::make_unique<JsonFileStateStore>(dir / "model");
  claims_ = std::make_unique<PreparedStore>(dir);
  if (Status loaded = claims_->Load(); !loaded.ok()) return loaded;
  holders_ = std::make_unique<PreparedClaimHolders>(*claims_);
  manager_ = std::make_unique<ResourceManager>(view_, options_.model, *model_store_, *holders_,
                                               observers_.model);
  if (Status started = manager_->Start(); !started.ok()) return started;
  // As for the device plugin: the rescan after a create runs later, after the answer.
  if (observers_.request_rescan) manager_->SetRefreshRequester(observers_.request_rescan);
  return Status::Ok();
}

// The slices and, with binding conditions, the occupancy confirmer (docs/dra.md): each allocation
// of the pool confirmed or failed here, and what is confirmed narrows the slices at once.
void DraFrontEnd::MakePublishers() {
  if (!options_.publish_slices) return;
  slices_ = std::make_unique<SlicePublisher>(
      api_, [this](int64_t generation, bool groups) { return Slices(generation, groups); },
      SlicePublisherOptions{.node_name = options_.node_name,
                            .driver = options_.driver,
                            .min_interval = options_.slice_interval,
                            .compatibility_groups = options_.compatibility_groups},
      [this](bool ok, bool wrote) {
        published_ = ok;
        if (observers_.on_slices) {
          observers_.on_slices(ok, wrote, ok && wrote ? slices_->generation() : 0,
                               slices_->compatibility_groups());
        }
      });
  if (options_.binding_conditions) {
    OccupancyConfirmerOptions confirmer;
    confirmer.driver = options_.driver;
    confirmer.pool = DraPoolName(options_.node_name);
    confirmer.on_verdict = observers_.on_verdict;
    confirmer_ = std::make_unique<OccupancyConfirmer>(
        api_, [this] { return Occupancy(); }, std::move(confirmer), [this] { slices_->Trigger(); });
  }
  manager_->SetChangeListener([this] { Changed(); });
}

void DraFrontEnd::Changed() {
  if (slices_) slices_->Trigger();
  if (confirmer_) confirmer_->Trigger();
}

// Device metadata (KEP-5304): kept beside the checkpoint, as upstream's helper keeps it; its
// directory is always known so that an unprepare removes files made before it was switched off.
DeviceMetadataOptions DraFrontEnd::Metadata() const {
  DeviceMetadataOptions metadata;
  metadata.enabled = options_.device_metadata;
  metadata.dir = options_.device_metadata_dir.empty() ? StateDir() / kMetadataHostSubDir
                                                      : options_.device_metadata_dir;
  metadata.cdi_dir = options_.model.cdi_dir;
  metadata.on_write = observers_.on_metadata_write;
  return metadata;
}

Status DraFrontEnd::Start() {
  if (Status opened = OpenModel(); !opened.ok()) return opened;
  MakePublishers();
  plugin_ = std::make_unique<DraPlugin>(
      *manager_, *claims_, api_,
      DraPluginOptions{options_.driver, DraPoolName(options_.node_name), [this] { Changed(); }},
      Metadata());
  if (Status undone = plugin_->RollBackUnfinished(); !undone.ok()) {
    spdlog::warn("dra: {}; kubelet's retry or unprepare of that claim finishes the job",
                 undone.message());
  }
  started_ = std::chrono::steady_clock::now();
  if (options_.serve_kubelet) {
    DraServerOptions server{options_.kubelet_dir, options_.driver, options_.socket_recheck};
    server.on_claim = [this](DraCall call, std::chrono::nanoseconds took, bool ok) {
      if (observers_.on_claim) {
        observers_.on_claim(call, took, ok, claims_->Count(), plugin_->MetadataFilesActive());
      }
    };
    server_ = std::make_unique<KubeletDraServer>(*plugin_, server);
    if (Status served = server_->Start(); !served.ok()) return served;
  }
  if (slices_) slices_->Start();
  if (confirmer_) confirmer_->Start();
  return Status::Ok();
}

void DraFrontEnd::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (manager_) {
    manager_->SetChangeListener(nullptr);
    manager_->SetRefreshRequester(nullptr);
  }
  if (confirmer_) confirmer_->Stop();
  if (slices_) slices_->Stop();
  if (server_) server_->Stop();
}

std::optional<RegistrationReport> DraFrontEnd::LastReport() const {
  if (!server_) return std::nullopt;
  return server_->LastReport();
}

std::filesystem::path DraFrontEnd::RegistrationSocket() const {
  return DraRegistrationSocket({options_.kubelet_dir, options_.driver});
}

// The DRA GPUs' slices (docs/dra.md) from the DRA model's view: types a parent listed before are
// kept (TypeMemory), and the vGPUs prepared for claims do not take from the counters again (their
// allocations already did).
Result<std::vector<nlohmann::json>> DraFrontEnd::Slices(int64_t generation,
                                                        bool compatibility_groups) {
  const mdev::Inventory inventory = slice_types_.Remember(manager_->Inventory());
  const ModelOptions& model = manager_->options();
  SliceOptions options;
  options.node_name = options_.node_name;
  options.driver = options_.driver;
  options.model = model;
  options.binding_conditions = options_.binding_conditions;
  options.compatibility_groups = compatibility_groups;
  if (confirmer_) options.held_devices = confirmer_->Held();
  for (const CreatedVgpu& record : manager_->Snapshot().records) {
    if (claims_->ClaimOfDevice(record.device_id)) options.claimed_vgpus.insert(record.vgpu_id);
  }
  const GpuRules rules = RulesFor(inventory, model);
  return BuildResourceSlices(inventory, rules, options, generation);
}

// The same inventory and names as the slices (its own TypeMemory: another thread), and the
// devices of claims prepared here with their vGPU where made.
Result<OccupancyView> DraFrontEnd::Occupancy() {
  OccupancyView view;
  view.inventory = confirmer_types_.Remember(manager_->Inventory());
  const ModelOptions& model = manager_->options();
  view.rules = RulesFor(view.inventory, model);
  SliceOptions options;
  options.node_name = options_.node_name;
  options.driver = options_.driver;
  options.model = model;
  Result<Catalogue> catalogue = BuildCatalogue(view.inventory, view.rules, options);
  if (!catalogue.ok()) return catalogue.status();
  view.devices = DeviceSpots(catalogue->devices);
  for (const PreparedClaim& claim : claims_->All()) {
    for (const PreparedDevice& device : claim.devices)
      view.prepared[device.device] = device.vgpu_id;
  }
  return view;
}

}  // namespace kvgpu::deviceplugin::dra
