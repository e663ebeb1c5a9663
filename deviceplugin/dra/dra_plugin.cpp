// The DRA kubelet plugin (dra_plugin.h): a claim's devices resolved to model devices, prepared all
// or nothing, rolled back after a crash, and unprepared. Its device-metadata files are written and
// removed by dra_plugin_metadata.cpp.
#include "deviceplugin/dra/dra_plugin.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "common/log_safe.h"
#include "deviceplugin/dra/device_name.h"
#include "deviceplugin/dra/dra_plugin_internal.h"
#include "deviceplugin/model/cdi.h"
#include "deviceplugin/model/failpoint.h"

namespace kvgpu::deviceplugin::dra {

namespace {

bool SameAllocation(const std::vector<PreparedDevice>& a, const std::vector<PreparedDevice>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].pool != b[i].pool || a[i].device != b[i].device || a[i].device_id != b[i].device_id ||
        a[i].request_names != b[i].request_names) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string ClaimName(const ClaimRef& ref) {
  return ref.namespace_ + "/" + ref.name + " (" + ref.uid + ")";
}

deviceplugin::Verdict PreparedClaimHolders::Check(const CreatedVgpu& vgpu) {
  std::optional<PreparedClaim> claim = store_.ClaimOfDevice(vgpu.device_id);
  if (!claim) return {Holding::kFree, "", "no prepared claim names the device"};
  return {Holding::kHeld, "claim " + claim->namespace_ + "/" + claim->name,
          "recorded for claim " + claim->uid};
}

DraPlugin::DraPlugin(ResourceManager& manager, PreparedStore& store, kube::ApiTransport& api,
                     DraPluginOptions options, DeviceMetadataOptions metadata)
    : manager_(manager),
      store_(store),
      api_(api),
      options_(std::move(options)),
      metadata_(std::move(metadata)),
      metadata_files_(options_.driver, metadata_.dir, metadata_.cdi_dir) {}

namespace {

// The slot a device name ends with ("...-<slot>"); nullopt when it ends otherwise.
std::optional<uint32_t> TrailingSlot(const std::string& name) {
  const size_t dash = name.rfind('-');
  if (dash == std::string::npos || dash + 1 == name.size() || name.size() - dash > 10) {
    return std::nullopt;
  }
  uint32_t slot = 0;
  for (size_t i = dash + 1; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    slot = slot * 10 + static_cast<uint32_t>(name[i] - '0');
  }
  return slot;
}

// Whether a re-sent prepare names the devices the claim's record was made for.
bool SameNames(const std::vector<AllocatedDevice>& allocated,
               const std::vector<PreparedDevice>& recorded) {
  if (allocated.size() != recorded.size()) return false;
  for (size_t i = 0; i < allocated.size(); ++i) {
    if (allocated[i].pool != recorded[i].pool || allocated[i].device != recorded[i].device ||
        recorded[i].request_names != std::vector<std::string>{allocated[i].request}) {
      return false;
    }
  }
  return true;
}

}  // namespace

// The claim as the API server has it (ReadOurDevices' GET: a missing claim is kGone).
Result<nlohmann::json> ReadClaim(kube::ApiTransport& api, const ClaimRef& ref) {
  Result<nlohmann::json> claim = api.Get(ResourceClaimPath(ref));
  if (!claim.ok() && claim.status().code() == ErrorCode::kHttp &&
      claim.status().http_status() == 404) {
    return Status::Error(ErrorCode::kGone,
                         "ResourceClaim " + ref.namespace_ + "/" + ref.name + " not found");
  }
  return claim;
}

// A published device is "a vGPU of type T on GPU G" (device_name.h): its name is matched against
// the (GPU, type) pairs the model offers, and any free model device of that pair (the GPU itself,
// or any of its VFs) makes it. A claim already recorded (a failed prepare whose vGPUs could not all
// be removed) keeps the model devices recorded for it, so its retry takes those vGPUs back.
Result<std::vector<PreparedDevice>> DraPlugin::Resolve(
    const ClaimRef& ref, const std::vector<AllocatedDevice>& allocated) const {
  std::optional<PreparedClaim> earlier = store_.Find(ref.uid);
  if (earlier && SameNames(allocated, earlier->devices)) return earlier->devices;
  // The scheduler hands a device to one claim at a time: a device another claim still holds here
  // is an allocation this node has not caught up with (or a stale claim), never a second vGPU.
  std::map<std::pair<std::string, std::string>, const PreparedClaim*> held;
  const std::vector<PreparedClaim> claims = store_.All();
  for (const PreparedClaim& claim : claims) {
    if (claim.uid == ref.uid) continue;
    for (const PreparedDevice& d : claim.devices) held[{d.pool, d.device}] = &claim;
  }
  // A device's name depends on its GPU, type and slot only: each pair is named once per request,
  // not once per model device (a GPU lists up to a few dozen devices of each type), and only the
  // named pair's devices are copied out of the model.
  const std::set<std::pair<std::string, std::string>> offered = manager_.GpuTypes();
  std::vector<PreparedDevice> out;
  std::set<std::string> names;
  std::set<std::string> taken;
  for (const AllocatedDevice& a : allocated) {
    if (!names.insert(a.device).second) {
      // Two requests sharing one device (admin access) would hand one vGPU to two users.
      return Status::Error(ErrorCode::kInvalid, "device " + a.device + " allocated twice");
    }
    if (auto other = held.find({a.pool, a.device}); other != held.end()) {
      return Status::Error(ErrorCode::kBusy, "device " + a.device + " is prepared for claim " +
                                                 other->second->namespace_ + "/" +
                                                 other->second->name);
    }
    std::set<std::pair<std::string, std::string>> pairs;
    if (std::optional<uint32_t> slot = TrailingSlot(a.device)) {
      for (const auto& [gpu, type] : offered) {
        if (DraDeviceName(gpu, type, *slot) == a.device) pairs.emplace(gpu, type);
      }
    }
    if (pairs.empty()) {
      return Status::Error(ErrorCode::kGone,
                           "device " + a.device + " of pool " + a.pool + " is not offered here");
    }
    if (pairs.size() > 1) {
      // Two types of one GPU collapse onto one name; the slices refuse to publish it.
      return Status::Error(ErrorCode::kInvalid, "device " + a.device + " names two vGPU types");
    }
    const auto& [gpu, type] = *pairs.begin();
    const std::vector<Device> devices = manager_.DevicesOf(gpu, type);
    const Device* pick = nullptr;
    for (const Device& d : devices) {
      if (!d.healthy || d.ours || d.vgpu_exists || taken.contains(d.id) ||
          store_.ClaimOfDevice(d.id)) {
        continue;
      }
      pick = &d;
      break;
    }
    if (pick == nullptr) {
      return Status::Error(ErrorCode::kNoRoom, "device " + a.device + ": no free vGPU of type " +
                                                   type + " on GPU " + gpu + " now");
    }
    taken.insert(pick->id);
    PreparedDevice p;
    p.request_names = {a.request};
    p.pool = a.pool;
    p.device = a.device;
    p.resource = pick->resource;
    p.device_id = pick->id;
    out.push_back(std::move(p));
  }
  return out;
}

PrepareAnswer DraPlugin::Prepare(const ClaimRef& ref) {
  if (Status ok = CheckClaimRef(ref); !ok.ok()) return {{}, ok.message()};
  if (std::optional<PreparedClaim> done = store_.Find(ref.uid); done && done->prepared) {
    if (Status kept = KeepMetadata(*done); !kept.ok()) {
      spdlog::warn("dra prepare claim={} pool={} failed: {}", ClaimName(ref), options_.pool,
                   LogSafe(kept.message()));
      return {{}, kept.message()};
    }
    return {done->devices, ""};
  }
  Result<nlohmann::json> claim = ReadClaim(api_, ref);
  if (!claim.ok()) return {{}, claim.status().message()};
  Result<std::vector<AllocatedDevice>> allocated =
      OurDevices(claim.value(), ref, options_.driver, options_.pool);
  if (!allocated.ok()) return {{}, allocated.status().message()};
  // Every name the metadata's paths are made of is checked before anything is made.
  std::optional<MetadataClaim> metadata;
  if (metadata_.enabled && !metadata_.dir.empty()) {
    metadata = MetadataClaim{ref.namespace_, ref.name, ref.uid, PodClaimNameOf(claim.value())};
    std::vector<std::string> requests;
    for (const AllocatedDevice& a : allocated.value()) requests.push_back(a.request);
    if (Status safe = metadata_files_.Check(*metadata, requests); !safe.ok()) {
      spdlog::warn("dra prepare claim={} pool={} refused: {}", ClaimName(ref), options_.pool,
                   LogSafe(safe.message()));
      return {{}, safe.message()};
    }
  }

  std::lock_guard lock(mutex_);
  Result<std::vector<PreparedDevice>> resolved = Resolve(ref, allocated.value());
  // The model's device lists follow the kernel at its rescans, which run after a create or a
  // remove rather than before the answer: right after an unprepare a GPU's other types may not be
  // listed yet, and right after a prepare a device may still look free. A miss is read again from
  // the kernel once before it fails the claim (the fast path never rescans).
  if (!resolved.ok() && (resolved.status().code() == ErrorCode::kGone ||
                         resolved.status().code() == ErrorCode::kNoRoom)) {
    if (Status rescanned = manager_.Refresh(); rescanned.ok()) {
      resolved = Resolve(ref, allocated.value());
    }
  }
  if (!resolved.ok()) {
    spdlog::warn("dra prepare claim={} pool={} failed: {}", ClaimName(ref), options_.pool,
                 LogSafe(resolved.status().message()));
    return {{}, resolved.status().message()};
  }
  // The metadata's attributes are the slices' for the device; once the create fills its GPU (a
  // vendor-VFIO GPU with one large vGPU) no VF lists the type any more, so it is remembered now,
  // while the device is still offered.
  if (metadata) metadata_types_.Remember(manager_.Inventory());
  Result<std::vector<PreparedDevice>> prepared =
      PrepareLocked(ref, std::move(resolved).value(), metadata);
  // A failed prepare made and removed vGPUs (or kept some it could not remove): the GPUs' room
  // changed either way.
  if (options_.on_change) options_.on_change();
  if (!prepared.ok()) {
    spdlog::warn("dra prepare claim={} pool={} failed: {}", ClaimName(ref), options_.pool,
                 LogSafe(prepared.status().message()));
    return {{}, prepared.status().message()};
  }
  spdlog::info("dra prepared claim={} pool={} devices={}", ClaimName(ref), options_.pool,
               prepared.value().size());
  return {std::move(prepared).value(), ""};
}

Result<std::vector<PreparedDevice>> DraPlugin::PrepareLocked(
    const ClaimRef& ref, std::vector<PreparedDevice> devices,
    const std::optional<MetadataClaim>& metadata) {
  // A concurrent prepare of the same claim may have finished while this one read the claim.
  std::optional<PreparedClaim> earlier = store_.Find(ref.uid);
  if (earlier && earlier->prepared) return earlier->devices;
  if (earlier && !SameAllocation(earlier->devices, devices)) {
    return Status::Error(ErrorCode::kInvalid,
                         "the claim's allocation differs from the one recorded at its first "
                         "prepare; unprepare it first");
  }
  for (const PreparedDevice& d : devices) {
    std::optional<PreparedClaim> other = store_.ClaimOfDevice(d.device_id);
    if (other && other->uid != ref.uid) {
      return Status::Error(ErrorCode::kBusy, "device " + d.device + " is prepared for claim " +
                                                 other->namespace_ + "/" + other->name);
    }
  }

  PreparedClaim claim{ref.uid, ref.namespace_, ref.name, false, devices};
  if (Status saved = store_.Put(claim); !saved.ok()) {
    return Status::Error(saved.code(), "checkpoint not written: " + saved.message());
  }
  Failpoint("dra.prepare.after-checkpoint");
  Result<std::vector<PreparedDevice>> made = MakeVgpus(claim, metadata);
  if (!made.ok()) return Status::Error(made.status().code(), Undo(claim, made.status().message()));
  return made;
}

Result<std::vector<PreparedDevice>> DraPlugin::MakeVgpus(
    PreparedClaim claim, const std::optional<MetadataClaim>& metadata) {
  std::vector<PreparedDevice> devices = claim.devices;

  std::map<std::string, std::vector<size_t>> by_resource;
  for (size_t i = 0; i < devices.size(); ++i) by_resource[devices[i].resource].push_back(i);
  for (const auto& [resource, indexes] : by_resource) {
    std::vector<std::string> ids;
    for (size_t i : indexes) ids.push_back(devices[i].device_id);
    // Each resource's vGPUs are made all or nothing; what earlier resources made is undone by the
    // caller. The runtime is handed each one by its CDI id (the model's CDI kind is the resource).
    Result<std::vector<AllocatedVgpu>> made = manager_.Make(resource, ids);
    if (!made.ok()) return made.status();
    for (const AllocatedVgpu& vgpu : *made) {
      for (size_t i : indexes) {
        if (devices[i].device_id != vgpu.device_id) continue;
        devices[i].vgpu_id = vgpu.vgpu_id;
        devices[i].cdi_device_ids.clear();
        if (manager_.options().cdi_enabled) {
          devices[i].cdi_device_ids.push_back(CdiDeviceId(resource, vgpu.device_id));
        }
      }
    }
    Failpoint("dra.prepare.after-resource");
  }
  Failpoint("dra.prepare.after-create");
  if (metadata) {
    if (Status written = WriteMetadata(*metadata, devices); !written.ok()) {
      return Status::Error(written.code(), "vGPUs made, " + written.message());
    }
  }

  claim.devices = devices;
  claim.prepared = true;
  if (Status saved = store_.Put(claim); !saved.ok()) {
    return Status::Error(saved.code(), "vGPUs made, checkpoint not updated: " + saved.message());
  }
  return devices;
}

// The record, not the claim, names the vGPU: a crash between the create and the claim's update
// leaves the claim without the vGPU's id.
Status DraPlugin::RemoveVgpusOf(const PreparedClaim& claim) {
  LifecycleSnapshot snapshot = manager_.Snapshot();
  for (const PreparedDevice& d : claim.devices) {
    for (const CreatedVgpu& record : snapshot.records) {
      if (record.device_id != d.device_id) continue;
      Status removed = manager_.RemoveVgpu(d.device_id, record.vgpu_id, Remover::kLifecycle);
      if (!removed.ok() && removed.code() != ErrorCode::kGone) {
        return Status::Error(removed.code(), "vGPU " + record.vgpu_id + " of device " + d.device +
                                                 " not removed: " + removed.message());
      }
    }
  }
  return Status::Ok();
}

// kubelet was never told of these vGPUs, so no container can use them: removing them all keeps a
// claim whole or absent. What cannot be removed stays recorded under the unprepared claim, for the
// unprepare, the retry or the next start to remove.
std::string DraPlugin::Undo(const PreparedClaim& claim, const std::string& why) {
  if (Status removed = RemoveVgpusOf(claim); !removed.ok()) {
    return why +
           "; the claim's vGPUs made so far are kept until its unprepare or the next start (" +
           removed.message() + ")";
  }
  if (Status gone = RemoveMetadata(claim.namespace_, claim.name, claim.uid); !gone.ok()) {
    return why + "; its vGPUs removed, device metadata not removed: " + gone.message();
  }
  if (Status erased = store_.Erase(claim.uid); !erased.ok()) {
    return why + "; its vGPUs removed, checkpoint not updated: " + erased.message();
  }
  return why + "; nothing of the claim was kept";
}

Status DraPlugin::RollBackUnfinished() {
  std::lock_guard lock(mutex_);
  Status first = Status::Ok();
  bool changed = false;
  for (const PreparedClaim& claim : store_.All()) {
    if (claim.prepared) continue;
    const std::string name = ClaimName({claim.namespace_, claim.uid, claim.name});
    changed = true;
    Status undone = RemoveVgpusOf(claim);
    if (undone.ok()) undone = RemoveMetadata(claim.namespace_, claim.name, claim.uid);
    if (undone.ok()) undone = store_.Erase(claim.uid);
    if (!undone.ok()) {
      if (first.ok()) {
        first = Status::Error(undone.code(), "claim " + name +
                                                 " left half prepared by the last run, not "
                                                 "undone: " +
                                                 undone.message());
      }
      continue;
    }
    spdlog::info("dra claim={} left half prepared by the last run: its vGPUs removed", name);
  }
  if (changed && options_.on_change) options_.on_change();
  return first;
}

std::string DraPlugin::Unprepare(const ClaimRef& ref) {
  if (ref.uid.empty()) return "claim UID is empty";
  std::lock_guard lock(mutex_);
  std::optional<PreparedClaim> claim = store_.Find(ref.uid);
  if (!claim) {
    // Already unprepared; metadata files of it would be left from no state this plugin keeps,
    // but removing them is harmless and a second unprepare finds nothing.
    if (CheckClaimRef(ref).ok()) {
      if (Status gone = RemoveMetadata(ref.namespace_, ref.name, ref.uid); !gone.ok()) {
        return gone.message();
      }
    }
    return "";
  }
  if (Status removed = RemoveVgpusOf(*claim); !removed.ok()) return removed.message();
  Failpoint("dra.unprepare.after-remove");
  if (Status gone = RemoveMetadata(claim->namespace_, claim->name, claim->uid); !gone.ok()) {
    return "vGPUs removed, device metadata not removed: " + gone.message();
  }
  Status erased = store_.Erase(ref.uid);
  if (options_.on_change) options_.on_change();
  if (!erased.ok()) return "vGPUs removed, checkpoint not updated: " + erased.message();
  // The recorded claim passed CheckClaimRef when it was prepared; kubelet's reference here did not.
  spdlog::info("dra unprepared claim={} pool={}",
               ClaimName({claim->namespace_, claim->uid, claim->name}), options_.pool);
  return "";
}

}  // namespace kvgpu::deviceplugin::dra
