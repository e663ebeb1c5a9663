// The DRA front end's work, without gRPC: NodePrepareResources and NodeUnprepareResources of one
// claim each, over the same model the device plugin uses (resource_manager.h), a model that sees
// only the GPUs DRA serves (mdev/gpu_filter_backend.h).
//
// Prepare: the claim's results for our driver and pool are read from the API server
// (claim_reader.h), each DRA name (device_name.h) resolved to a free model device of its GPU and
// type, the claim recorded (prepared_store.h) and only then each vGPU created through the model's
// Allocate, which also writes the CDI spec; the claim is then marked prepared with its CDI device
// IDs. All or nothing per claim: a prepare that fails after its first create removes what it made
// and forgets the claim before it answers, and a claim a killed daemon left unprepared in the
// record is undone the same way at the next start (RollBackUnfinished), so kubelet never finds
// part of a claim on the node. A claim already prepared is answered from the record, without the
// API server. Unprepare removes the vGPUs recorded for the claim, then forgets it; an unknown
// claim is already unprepared.
//
// Device metadata (device_metadata.h, KEP-5304): with it on, a prepare writes a metadata file and
// its bind-mount CDI spec per request once the vGPUs exist, and answers the spec's CDI device ID
// beside the vGPU's; a prepare answered from the record restores them when they are gone; an
// unprepare removes them after the vGPUs and before it forgets the claim.
//
// dra_plugin.cpp prepares and unprepares; dra_plugin_metadata.cpp writes, restores, counts and
// removes the device-metadata files.
#pragma once

#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "deviceplugin/dra/claim_reader.h"
#include "deviceplugin/dra/device_metadata.h"
#include "deviceplugin/dra/prepared_store.h"
#include "deviceplugin/dra/resource_slices.h"
#include "deviceplugin/model/holders.h"
#include "deviceplugin/model/resource_manager.h"
#include "kube/api_client.h"

namespace kvgpu::deviceplugin::dra {

struct DraPluginOptions {
  std::string driver;  // the DRA driver name (ResourceSlice spec.driver)
  std::string pool;    // this node's pool (device_name.h DraPoolName)
  // Called after a prepare or unprepare changed the node (the slices are republished from it).
  std::function<void()> on_change;
};

// The DRA model's holders: a vGPU is held while a claim in the store names its device ID, so a
// re-sent prepare gets that same vGPU back; a record no claim names is free to be made anew.
class PreparedClaimHolders : public HolderOracle {
 public:
  explicit PreparedClaimHolders(const PreparedStore& store) : store_(store) {}
  Verdict Check(const CreatedVgpu& vgpu) override;
  bool UsesHandoutTime() const override { return false; }

 private:
  const PreparedStore& store_;
};

struct PrepareAnswer {
  std::vector<PreparedDevice> devices;
  std::string error;  // non-empty: the claim is not prepared (kubelet retries)
};

class DraPlugin {
 public:
  // `metadata`: off unless given; the daemon gives it from config dra.deviceMetadata.
  DraPlugin(ResourceManager& manager, PreparedStore& store, kube::ApiTransport& api,
            DraPluginOptions options, DeviceMetadataOptions metadata = {});

  PrepareAnswer Prepare(const ClaimRef& ref);
  // Undoes every claim the record holds as not prepared (a daemon killed mid-prepare): its vGPUs
  // and metadata removed, the claim forgotten. Before serving kubelet. A claim that cannot be
  // undone (the backend away) stays recorded, so its retry or unprepare finishes the job; the
  // first such error is returned, the other claims are undone all the same.
  Status RollBackUnfinished();
  // Empty when the claim's vGPUs are gone and the claim forgotten.
  std::string Unprepare(const ClaimRef& ref);

  const DraPluginOptions& options() const { return options_; }
  // The device-metadata files the prepared claims hold (one per request that has one).
  size_t MetadataFilesActive() const;

 private:
  Result<std::vector<PreparedDevice>> Resolve(const ClaimRef& ref,
                                              const std::vector<AllocatedDevice>& allocated) const;
  Result<std::vector<PreparedDevice>> PrepareLocked(const ClaimRef& ref,
                                                    std::vector<PreparedDevice> devices,
                                                    const std::optional<MetadataClaim>& metadata);
  // The vGPUs, metadata and the prepared record of a claim already recorded as not prepared.
  Result<std::vector<PreparedDevice>> MakeVgpus(PreparedClaim claim,
                                                const std::optional<MetadataClaim>& metadata);
  // The vGPUs the model's record holds for the claim's device IDs removed.
  Status RemoveVgpusOf(const PreparedClaim& claim);
  // A failed prepare undone (vGPUs, metadata, record); returns `why` with what was kept, if any.
  std::string Undo(const PreparedClaim& claim, const std::string& why);
  // The metadata of `devices` (their published attributes and vGPUs) written; each request's CDI
  // device ID added to its first device.
  Status WriteMetadata(const MetadataClaim& claim, std::vector<PreparedDevice>& devices);
  // A prepared claim whose answer names metadata CDI devices gets their files back if gone.
  Status KeepMetadata(const PreparedClaim& claim);
  Status RemoveMetadata(const std::string& namespace_, const std::string& name,
                        const std::string& uid) const;

  ResourceManager& manager_;
  PreparedStore& store_;
  kube::ApiTransport& api_;
  DraPluginOptions options_;
  DeviceMetadataOptions metadata_;
  DeviceMetadataFiles metadata_files_;
  TypeMemory metadata_types_;  // used under mutex_ only
  std::mutex mutex_;           // one prepare or unprepare at a time changes the model and the store
};

}  // namespace kvgpu::deviceplugin::dra
