// The DRA kubelet plugin front end (docs/dra-kubelet-plugin.md) as one object, in the manner of
// NVIDIA's DRA driver: Start builds the device state (a model over the DRA GPUs alone, its record
// and the claim checkpoint), rolls back what a crash left half done, serves kubelet's DRA sockets
// and publishes the ResourceSlices (and, with binding conditions, confirms occupancy); Stop undoes
// that in reverse order. The daemon, the tests and the benchmarks all build it this way: only the
// options differ (where the state lives, whether kubelet's sockets are served and the slices
// published). Destroying it and building it again over the same directories is a daemon restart.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "deviceplugin/dra/device_metadata.h"
#include "deviceplugin/dra/dra_plugin.h"
#include "deviceplugin/dra/kubelet_dra_server.h"
#include "deviceplugin/dra/occupancy_confirmer.h"
#include "deviceplugin/dra/occupancy_decision.h"
#include "deviceplugin/dra/prepared_store.h"
#include "deviceplugin/dra/resource_slices.h"
#include "deviceplugin/dra/slice_publisher.h"
#include "deviceplugin/model/manager_observer.h"
#include "deviceplugin/model/model_options.h"
#include "deviceplugin/model/resource_manager.h"
#include "deviceplugin/model/state_store.h"
#include "kube/api_client.h"
#include "mdev/backend.h"
#include "mdev/gpu_filter_backend.h"

namespace kvgpu::deviceplugin::dra {

struct DraFrontEndOptions {
  std::string driver;     // config dra.driverName: the slices' driver, the CDI kind's vendor
  std::string node_name;  // the slices' node and the pool (DraPoolName)
  std::filesystem::path kubelet_dir = "/var/lib/kubelet";
  // The model's record (model/ below it), the claim checkpoint and the device metadata files;
  // empty: the plugin's directory under kubelet's (DraPluginDir), so they go with the node's
  // kubelet state (the daemon's choice).
  std::filesystem::path state_dir;
  // The GPUs the front end sees (GpuFilterBackend): `gpus` alone, or with `all_but_listed` every
  // GPU except them (config dra.allGPUs hides the device plugin's list).
  std::set<std::string> gpus;
  bool all_but_listed = false;
  // The placement (the daemon's, as published); the front end names its resources under the
  // driver's domain and always writes CDI specs (DRA hands devices to the runtime by CDI id only).
  ModelOptions model;
  bool binding_conditions = false;            // config dra.bindingConditions
  bool compatibility_groups = true;           // config dra.compatibilityGroups
  bool device_metadata = false;               // config dra.deviceMetadata
  std::filesystem::path device_metadata_dir;  // empty: beside the checkpoint (kMetadataHostSubDir)
  std::chrono::milliseconds slice_interval{1000};  // slice_publisher.h min_interval
  std::chrono::milliseconds socket_recheck{1000};  // kubelet_dra_server.h recheck
  // The parts a test may leave out: kubelet's sockets (a test calling the plugin directly) and
  // the slices with the occupancy confirmer (a test without slices to publish to).
  bool serve_kubelet = true;
  bool publish_slices = true;
};

// What the front end tells its owner (metrics, rescans); every one may be empty.
struct DraObservers {
  ManagerObserver* model = nullptr;  // the model's creations and removals
  // A change asks for a rescan through this, done later off the request path; empty: the model
  // rescans before it answers.
  std::function<void()> request_rescan;
  // After each claim of a kubelet call: how long, whether it failed, the claims prepared after it
  // and the device metadata files they hold.
  std::function<void(DraCall, std::chrono::nanoseconds took, bool ok, size_t claims,
                     size_t metadata_files)>
      on_claim;
  // A pass of the slice publisher: failed, wrote the pool at `generation` (0 unless written), or
  // unchanged.
  std::function<void(bool ok, bool wrote, int64_t generation, bool compatibility_groups)> on_slices;
  std::function<void(Verdict)> on_verdict;  // an occupancy verdict written to a claim
  std::function<void(bool ok, std::chrono::nanoseconds took, size_t files)> on_metadata_write;
};

class DraFrontEnd {
 public:
  DraFrontEnd(mdev::Backend& backend, kube::ApiTransport& api, DraFrontEndOptions options,
              DraObservers observers = {});
  ~DraFrontEnd();
  DraFrontEnd(const DraFrontEnd&) = delete;
  DraFrontEnd& operator=(const DraFrontEnd&) = delete;

  // Every step in order; the first failure ends it (Stop, or the destructor, undoes the rest).
  Status Start();
  // Stops confirming, publishing and serving, in the reverse order of Start. Idempotent.
  void Stop();

  // Valid once Start has built them (a failed Start may leave later ones null).
  ResourceManager& manager() { return *manager_; }
  DraPlugin& plugin() { return *plugin_; }
  PreparedStore& claims() { return *claims_; }
  KubeletDraServer* server() { return server_.get(); }

  // kubelet's sockets were served (Start got that far), and when that began.
  bool serving() const { return server_ != nullptr; }
  std::chrono::steady_clock::time_point started() const { return started_; }
  // What kubelet said of the registration last; nullopt before it said anything.
  std::optional<RegistrationReport> LastReport() const;
  std::filesystem::path RegistrationSocket() const;
  // The slice publisher's last pass succeeded.
  bool published() const { return published_.load(); }

 private:
  std::filesystem::path StateDir() const;
  Status OpenModel();
  void MakePublishers();
  DeviceMetadataOptions Metadata() const;
  void Changed();
  // The DRA GPUs' slices and what they carry for the confirmer (each on its own thread).
  Result<std::vector<nlohmann::json>> Slices(int64_t generation, bool compatibility_groups);
  Result<OccupancyView> Occupancy();

  kube::ApiTransport& api_;
  DraFrontEndOptions options_;
  DraObservers observers_;
  mdev::GpuFilterBackend view_;
  std::unique_ptr<JsonFileStateStore> model_store_;
  std::unique_ptr<PreparedStore> claims_;
  std::unique_ptr<PreparedClaimHolders> holders_;
  std::unique_ptr<ResourceManager> manager_;
  std::unique_ptr<DraPlugin> plugin_;
  TypeMemory slice_types_;  // used on the slice publisher's thread only
  std::unique_ptr<SlicePublisher> slices_;
  TypeMemory confirmer_types_;                     // used on the confirmer's thread only
  std::unique_ptr<OccupancyConfirmer> confirmer_;  // binding_conditions
  std::unique_ptr<KubeletDraServer> server_;
  std::chrono::steady_clock::time_point started_{};
  std::atomic<bool> published_{false};
  bool stopped_ = false;
};

}  // namespace kvgpu::deviceplugin::dra
