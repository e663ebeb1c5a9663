// The DRA kubelet plugin's device metadata (KEP-5304, device_metadata.h): each prepared request's
// file written with the attributes its device was published with, written again when a prepared
// claim's file is gone, counted, and removed with the claim. Prepare and unprepare, which call
// these, are in dra_plugin.cpp.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>

#include "common/log_safe.h"
#include "deviceplugin/dra/dra_plugin.h"
#include "deviceplugin/dra/dra_plugin_internal.h"

namespace kvgpu::deviceplugin::dra {

// The catalogue the slices are built from (same inventory, rules and options), so each device's
// metadata carries exactly the attributes it was published with.
Status DraPlugin::WriteMetadata(const MetadataClaim& claim, std::vector<PreparedDevice>& devices) {
  const mdev::Inventory inventory = metadata_types_.Remember(manager_.Inventory());
  const ModelOptions& model = manager_.options();
  const GpuRules rules = RulesFor(inventory, model);
  SliceOptions slice_options;
  slice_options.driver = options_.driver;
  slice_options.model = model;
  Result<Catalogue> catalogue = BuildCatalogue(inventory, rules, slice_options);
  if (!catalogue.ok()) {
    spdlog::warn("dra metadata claim={}: no catalogue ({}); the vGPU identity only",
                 ClaimName({claim.namespace_, claim.uid, claim.name}),
                 LogSafe(catalogue.status().message()));
  }
  std::vector<MetadataDevice> list;
  for (const PreparedDevice& d : devices) {
    const DraDevice* published = nullptr;
    if (catalogue.ok()) {
      for (const DraDevice& c : catalogue->devices) {
        if (c.name == d.device) published = &c;
      }
    }
    nlohmann::json attributes =
        published ? MetadataAttributes(*published, d.vgpu_id) : VgpuIdentityAttributes(d.vgpu_id);
    for (const std::string& request : d.request_names) {
      list.push_back({request, d.pool, d.device, attributes});
    }
  }
  const auto started = std::chrono::steady_clock::now();
  Result<std::map<std::string, std::string>> ids = metadata_files_.Write(claim, list);
  if (metadata_.on_write) {
    metadata_.on_write(ids.ok(), std::chrono::steady_clock::now() - started,
                       ids.ok() ? ids->size() : 0);
  }
  if (!ids.ok()) return ids.status();
  // Once per request, on its first device, as upstream's helper adds it.
  for (const auto& [base, id] : ids.value()) {
    for (PreparedDevice& d : devices) {
      const bool of_request =
          std::any_of(d.request_names.begin(), d.request_names.end(),
                      [&](const std::string& r) { return BaseRequest(r) == base; });
      if (!of_request) continue;
      if (std::find(d.cdi_device_ids.begin(), d.cdi_device_ids.end(), id) ==
          d.cdi_device_ids.end()) {
        d.cdi_device_ids.push_back(id);
      }
      break;
    }
  }
  return Status::Ok();
}

Status DraPlugin::KeepMetadata(const PreparedClaim& prepared) {
  std::set<std::string> bases;
  for (const PreparedDevice& d : prepared.devices) {
    for (const std::string& id : d.cdi_device_ids) {
      if (!metadata_files_.IsMetadataCdiId(id)) continue;
      for (const std::string& r : d.request_names) bases.insert(BaseRequest(r));
    }
  }
  if (bases.empty() || metadata_.dir.empty()) return Status::Ok();
  const std::vector<std::string> wanted(bases.begin(), bases.end());
  MetadataClaim claim{prepared.namespace_, prepared.name, prepared.uid, std::nullopt};
  if (metadata_files_.Present(claim, wanted)) return Status::Ok();
  // Gone (a wiped directory): written again, the pod claim name read from the claim again.
  const ClaimRef ref{prepared.namespace_, prepared.uid, prepared.name};
  Result<nlohmann::json> read = ReadClaim(api_, ref);
  if (!read.ok()) {
    return Status::Error(read.status().code(),
                         "device metadata gone and not restored: " + read.status().message());
  }
  if (Result<std::vector<AllocatedDevice>> ours =
          OurDevices(read.value(), ref, options_.driver, options_.pool);
      !ours.ok()) {
    return Status::Error(ours.status().code(),
                         "device metadata gone and not restored: " + ours.status().message());
  }
  claim.pod_claim_name = PodClaimNameOf(read.value());
  std::lock_guard lock(mutex_);
  std::optional<PreparedClaim> still = store_.Find(prepared.uid);
  if (!still || !still->prepared) {
    return Status::Error(ErrorCode::kBusy, "claim unprepared meanwhile");
  }
  std::vector<PreparedDevice> devices = still->devices;
  if (Status written = WriteMetadata(claim, devices); !written.ok()) return written;
  spdlog::info("dra metadata claim={} restored", ClaimName(ref));
  return Status::Ok();
}

size_t DraPlugin::MetadataFilesActive() const {
  size_t files = 0;
  for (const PreparedClaim& claim : store_.All()) {
    if (!claim.prepared) continue;
    for (const PreparedDevice& d : claim.devices) {
      files += static_cast<size_t>(std::count_if(
          d.cdi_device_ids.begin(), d.cdi_device_ids.end(),
          [&](const std::string& id) { return metadata_files_.IsMetadataCdiId(id); }));
    }
  }
  return files;
}

Status DraPlugin::RemoveMetadata(const std::string& namespace_, const std::string& name,
                                 const std::string& uid) const {
  if (metadata_.dir.empty()) return Status::Ok();
  // Host directories are named by namespace and name: one a newer claim of that name (another
  // UID) has prepared stays.
  bool keep_dir = false;
  for (const PreparedClaim& other : store_.All()) {
    if (other.uid != uid && other.namespace_ == namespace_ && other.name == name) keep_dir = true;
  }
  return metadata_files_.Remove(namespace_, name, uid, keep_dir);
}

}  // namespace kvgpu::deviceplugin::dra
