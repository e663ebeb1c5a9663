#include "deviceplugin/dra/dra_plugin.h"

#include <spdlog/spdlog.h>

#include <map>
#include <set>

#include "common/log_safe.h"
#include "deviceplugin/dra/device_name.h"
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

std::string ClaimName(const ClaimRef& ref) {
  return ref.namespace_ + "/" + ref.name + " (" + ref.uid + ")";
}

}  // namespace

Verdict PreparedClaimHolders::Check(const CreatedVgpu& vgpu) {
  std::optional<PreparedClaim> claim = store_.ClaimOfDevice(vgpu.device_id);
  if (!claim) return {Holding::kFree, "", "no prepared claim names the device"};
  return {Holding::kHeld, "claim " + claim->namespace_ + "/" + claim->name,
          "recorded for claim " + claim->uid};
}

DraPlugin::DraPlugin(ResourceManager& manager, PreparedStore& store, kube::ApiTransport& api,
                     DraPluginOptions options)
    : manager_(manager), store_(store), api_(api), options_(std::move(options)) {}

Result<std::vector<PreparedDevice>> DraPlugin::Resolve(
    const std::vector<AllocatedDevice>& allocated) const {
  std::vector<DeviceKey> keys;
  std::map<DeviceKey, const Device*> by_key;
  std::map<std::string, std::vector<Device>> lists;
  for (const std::string& resource : manager_.Resources()) {
    lists[resource] = manager_.Devices(resource);
  }
  for (const auto& [resource, devices] : lists) {
    for (const Device& d : devices) {
      keys.push_back(d.key);
      by_key[d.key] = &d;
    }
  }
  std::map<std::string, DeviceKey> names = UniqueDraNames(keys);
  std::vector<PreparedDevice> out;
  std::set<std::string> seen;
  for (const AllocatedDevice& a : allocated) {
    auto it = names.find(a.device);
    if (it == names.end()) {
      return Status::Error(ErrorCode::kInvalid,
                           "device " + a.device + " of pool " + a.pool + " is not offered here");
    }
    const Device& d = *by_key.at(it->second);
    if (!seen.insert(d.id).second) {
      // Two requests sharing one device (admin access) would hand one vGPU to two users.
      return Status::Error(ErrorCode::kInvalid, "device " + a.device + " allocated twice");
    }
    PreparedDevice p;
    p.request_names = {a.request};
    p.pool = a.pool;
    p.device = a.device;
    p.resource = d.resource;
    p.device_id = d.id;
    out.push_back(std::move(p));
  }
  return out;
}

PrepareAnswer DraPlugin::Prepare(const ClaimRef& ref) {
  if (Status ok = CheckClaimRef(ref); !ok.ok()) return {{}, ok.message()};
  if (std::optional<PreparedClaim> done = store_.Find(ref.uid); done && done->prepared) {
    return {done->devices, ""};
  }
  Result<std::vector<AllocatedDevice>> allocated =
      ReadOurDevices(api_, ref, options_.driver, options_.pool);
  if (!allocated.ok()) return {{}, allocated.status().message()};

  std::lock_guard lock(mutex_);
  Result<std::vector<PreparedDevice>> resolved = Resolve(allocated.value());
  if (!resolved.ok()) return {{}, resolved.status().message()};
  Result<std::vector<PreparedDevice>> prepared = PrepareLocked(ref, std::move(resolved).value());
  if (!prepared.ok()) {
    spdlog::warn("dra prepare claim={} failed: {}", ClaimName(ref),
                 LogSafe(prepared.status().message()));
    return {{}, prepared.status().message()};
  }
  spdlog::info("dra prepared claim={} devices={}", ClaimName(ref), prepared.value().size());
  return {std::move(prepared).value(), ""};
}

Result<std::vector<PreparedDevice>> DraPlugin::PrepareLocked(const ClaimRef& ref,
                                                             std::vector<PreparedDevice> devices) {
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

  std::map<std::string, std::vector<size_t>> by_resource;
  for (size_t i = 0; i < devices.size(); ++i) by_resource[devices[i].resource].push_back(i);
  for (const auto& [resource, indexes] : by_resource) {
    std::vector<std::string> ids;
    for (size_t i : indexes) ids.push_back(devices[i].device_id);
    Result<std::vector<ContainerAllocation>> made = manager_.Allocate(resource, {ids});
    // What was made before a failure stays recorded under this claim: a retry hands it back, an
    // unprepare removes it.
    if (!made.ok()) return made.status();
    const ContainerAllocation& answer = made.value().at(0);
    for (size_t v = 0; v < answer.vgpus.size(); ++v) {
      for (size_t i : indexes) {
        if (devices[i].device_id != answer.vgpus[v].device_id) continue;
        devices[i].vgpu_id = answer.vgpus[v].vgpu_id;
        devices[i].cdi_device_ids.clear();
        if (v < answer.cdi_devices.size()) {
          devices[i].cdi_device_ids.push_back(answer.cdi_devices[v]);
        }
      }
    }
  }
  Failpoint("dra.prepare.after-create");

  claim.devices = devices;
  claim.prepared = true;
  if (Status saved = store_.Put(claim); !saved.ok()) {
    return Status::Error(saved.code(), "vGPUs made, checkpoint not updated: " + saved.message());
  }
  return devices;
}

std::string DraPlugin::Unprepare(const ClaimRef& ref) {
  if (ref.uid.empty()) return "claim UID is empty";
  std::lock_guard lock(mutex_);
  std::optional<PreparedClaim> claim = store_.Find(ref.uid);
  if (!claim) return "";
  // The model's record, not the claim's, says which vGPU a device ID has: a crash between the
  // create and the claim's update leaves the claim without the vGPU's id.
  LifecycleSnapshot snapshot = manager_.Snapshot();
  for (const PreparedDevice& d : claim->devices) {
    for (const CreatedVgpu& record : snapshot.records) {
      if (record.device_id != d.device_id) continue;
      Status removed = manager_.RemoveVgpu(d.device_id, record.vgpu_id, Remover::kLifecycle);
      if (!removed.ok() && removed.code() != ErrorCode::kGone) {
        return "vGPU " + record.vgpu_id + " of device " + d.device +
               " not removed: " + removed.message();
      }
    }
  }
  Failpoint("dra.unprepare.after-remove");
  if (Status erased = store_.Erase(ref.uid); !erased.ok()) {
    return "vGPUs removed, checkpoint not updated: " + erased.message();
  }
  // The recorded claim passed CheckClaimRef when it was prepared; kubelet's reference here did not.
  spdlog::info("dra unprepared claim={}", ClaimName({claim->namespace_, claim->uid, claim->name}));
  return "";
}

}  // namespace kvgpu::deviceplugin::dra
