#include "deviceplugin/dra/occupancy_decision.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "kube/json_fields.h"
#include "scheduling/gpu_fit.h"

namespace kvgpu::deviceplugin::dra {

namespace {

using kube::Field;
using kube::StringField;
using nlohmann::json;

bool ConditionTrue(const json& conditions, const char* type) {
  if (!conditions.is_array()) return false;
  return std::any_of(conditions.begin(), conditions.end(), [&](const json& c) {
    return StringField(c, "type") == type && StringField(c, "status") == "True";
  });
}

// Every GPU of the view as it is: the kernel's vGPUs with the lock of the first (as Narrow and
// GpuSlots::LockTo take it), and the devices of prepared claims whose vGPU is not made yet.
class GpuStates {
 public:
  explicit GpuStates(const OccupancyView& view) : view_(view) {
    std::set<std::string> made;
    for (const mdev::Vgpu& vgpu : view.inventory.vgpus) {
      made.insert(vgpu.id);
      scheduling::GpuSlots& gpu = Gpu(vgpu.physical_gpu);
      if (gpu.locked_type.empty()) {
        gpu.LockTo(vgpu.type_id, view.rules.FramebufferOf(vgpu.physical_gpu, vgpu.type_id));
      }
    }
    for (const auto& [device, vgpu] : view.prepared) {
      counted_.insert(device);
      if (!vgpu.empty() && made.contains(vgpu)) continue;
      const auto spot = view.devices.find(device);
      if (spot != view.devices.end()) (void)Join(spot->second, gpus_);
    }
  }

  // Whether every device of `devices` may join its GPU, all together; if so they join.
  // `refused` gets those that may not (and why, in `why`).
  bool JoinAll(const std::vector<std::string>& devices, std::vector<std::string>* refused,
               std::string* why) {
    std::map<std::string, scheduling::GpuSlots> trial = gpus_;
    bool all = true;
    for (const std::string& device : devices) {
      if (counted_.contains(device)) continue;  // its vGPU (or a prepare of it) is counted
      const auto spot = view_.devices.find(device);
      std::string reason;
      if (spot == view_.devices.end()) {
        reason = "device " + device + " is not in this node's pool";
      } else if (contested_.contains(spot->second.physical_gpu)) {
        reason = "GPU " + spot->second.physical_gpu +
                 " has settled claims that do not fit together; it takes no other until one goes";
      } else if (!Join(spot->second, trial)) {
        reason = "GPU " + spot->second.physical_gpu + " holds what " + spot->second.type_id +
                 " may not join (" + LockText(trial.at(spot->second.physical_gpu)) + ")";
      }
      if (reason.empty()) continue;
      all = false;
      if (refused) refused->push_back(device);
      if (why && why->empty()) *why = reason;
    }
    if (all) gpus_ = std::move(trial);
    return all;
  }

  // The GPUs of `devices` (of a settled claim that did not fit) take no claim from now on: that
  // claim will still be prepared (or fail there), so whatever joins beside it could be the one
  // whose prepare fails instead.
  void Contest(const std::vector<std::string>& devices) {
    for (const std::string& device : devices) {
      const auto spot = view_.devices.find(device);
      if (spot != view_.devices.end()) contested_.insert(spot->second.physical_gpu);
    }
  }

 private:
  static std::string LockText(const scheduling::GpuSlots& gpu) {
    return gpu.lock.empty() ? scheduling::OccupancyName(gpu.occupancy) : gpu.lock;
  }

  scheduling::GpuSlots& Gpu(const std::string& id) { return GpuIn(id, gpus_); }

  scheduling::GpuSlots& GpuIn(const std::string& id,
                              std::map<std::string, scheduling::GpuSlots>& gpus) {
    auto it = gpus.find(id);
    if (it == gpus.end()) {
      it = gpus.emplace(id, view_.rules.ShapeOf(id, view_.inventory.vgpus)).first;
    }
    return it->second;
  }

  // The one rule for one more vGPU on a GPU: not against its lock, and where the mode's facts are
  // known (mixed-size placements, MIG instances) within the room they leave.
  bool Join(const DeviceSpot& spot, std::map<std::string, scheduling::GpuSlots>& gpus) {
    scheduling::GpuSlots& gpu = GpuIn(spot.physical_gpu, gpus);
    scheduling::ResourceSlots slots;
    slots.type_id = spot.type_id;
    slots.framebuffer_mib = view_.rules.FramebufferOf(spot.physical_gpu, spot.type_id);
    view_.rules.FillType(spot.physical_gpu, spot.type_id, slots);
    if (gpu.LockedAgainst(slots)) return false;
    if (const auto room = scheduling::ModeRoom(gpu, slots)) {
      if (*room == 0 || !scheduling::TakeModeRoom(gpu, slots)) return false;
    }
    if (gpu.locked_type.empty()) gpu.LockTo(spot.type_id, slots.framebuffer_mib);
    return true;
  }

  const OccupancyView& view_;
  std::map<std::string, scheduling::GpuSlots> gpus_;
  std::set<std::string> counted_;    // devices of prepared claims
  std::set<std::string> contested_;  // GPUs where settled claims do not fit together
};

Verdict Effective(const AllocatedClaim& claim, const ClaimDevice& device,
                  const std::map<std::string, std::map<std::string, Verdict>>& decided) {
  if (device.written != Verdict::kUndecided) return device.written;
  const auto ours = decided.find(claim.uid);
  if (ours == decided.end()) return Verdict::kUndecided;
  const auto verdict = ours->second.find(device.device);
  return verdict == ours->second.end() ? Verdict::kUndecided : verdict->second;
}

}  // namespace

std::map<std::string, DeviceSpot> DeviceSpots(const std::vector<DraDevice>& devices) {
  std::map<std::string, DeviceSpot> spots;
  for (const DraDevice& device : devices) {
    spots[device.name] = {device.physical_gpu, device.type_id};
  }
  return spots;
}

const char* VerdictName(Verdict verdict) {
  switch (verdict) {
    case Verdict::kUndecided:
      return "undecided";
    case Verdict::kConfirmed:
      return "confirmed";
    case Verdict::kConflict:
      return "conflict";
  }
  return "?";
}

std::optional<AllocatedClaim> ReadAllocatedClaim(const json& claim, const std::string& driver,
                                                 const std::string& pool) {
  const json& meta = Field(claim, "metadata");
  const json& allocation = Field(Field(claim, "status"), "allocation");
  const json& results = Field(Field(allocation, "devices"), "results");
  if (!results.is_array()) return std::nullopt;
  AllocatedClaim out;
  out.uid = StringField(meta, "uid");
  out.namespace_ = StringField(meta, "namespace");
  out.name = StringField(meta, "name");
  out.resource_version = StringField(meta, "resourceVersion");
  out.allocation_timestamp = StringField(allocation, "allocationTimestamp");
  if (out.uid.empty() || out.namespace_.empty() || out.name.empty()) return std::nullopt;
  const json& statuses = Field(Field(claim, "status"), "devices");
  std::set<std::string> seen;
  for (const json& result : results) {
    if (StringField(result, "driver") != driver || StringField(result, "pool") != pool) continue;
    ClaimDevice device;
    device.device = StringField(result, "device");
    if (device.device.empty() || !seen.insert(device.device).second) continue;
    const json& conditions = Field(result, "bindingConditions");
    device.waited_for = conditions.is_array() &&
                        std::any_of(conditions.begin(), conditions.end(), [](const json& c) {
                          return c.is_string() && c.get<std::string>() == kOccupancyConfirmed;
                        });
    if (statuses.is_array()) {
      for (const json& status : statuses) {
        if (StringField(status, "driver") != driver || StringField(status, "pool") != pool ||
            StringField(status, "device") != device.device) {
          continue;
        }
        const json& given = Field(status, "conditions");
        if (ConditionTrue(given, kOccupancyConflict)) {
          device.written = Verdict::kConflict;
        } else if (ConditionTrue(given, kOccupancyConfirmed)) {
          device.written = Verdict::kConfirmed;
        }
      }
    }
    out.devices.push_back(std::move(device));
  }
  if (out.devices.empty()) return std::nullopt;
  return out;
}

OccupancyDecision Decide(const OccupancyView& view, const std::vector<AllocatedClaim>& claims,
                         const std::map<std::string, std::map<std::string, Verdict>>& decided) {
  std::vector<const AllocatedClaim*> order;
  for (const AllocatedClaim& claim : claims) order.push_back(&claim);
  // Allocation order; a claim without a timestamp (the API server dropped it) after those with.
  std::sort(order.begin(), order.end(), [](const AllocatedClaim* a, const AllocatedClaim* b) {
    return std::make_tuple(a->allocation_timestamp.empty(), a->allocation_timestamp, a->uid) <
           std::make_tuple(b->allocation_timestamp.empty(), b->allocation_timestamp, b->uid);
  });

  GpuStates gpus(view);
  OccupancyDecision decision;
  // First what is settled: claims confirmed, and claims the scheduler does not wait for (they
  // will be prepared whatever is said). A settled claim that does not fit beside those before it
  // (a foreign vGPU came meanwhile, or a claim unprepared and not yet deleted still locks the GPU
  // its way) holds no room, but its GPU takes no open claim while it is there: it may still be
  // prepared, and whatever joined beside it could then be the one to fail.
  std::vector<const AllocatedClaim*> open;
  for (const AllocatedClaim* claim : order) {
    bool conflict = false;
    bool undecided = false;
    std::vector<std::string> settled;
    for (const ClaimDevice& device : claim->devices) {
      const Verdict verdict = Effective(*claim, device, decided);
      if (verdict == Verdict::kConflict) conflict = true;
      if (verdict == Verdict::kUndecided && device.waited_for) undecided = true;
      settled.push_back(device.device);
    }
    if (conflict) continue;  // the scheduler clears it
    if (undecided) {
      open.push_back(claim);
      continue;
    }
    std::vector<std::string> unfit;
    if (gpus.JoinAll(settled, &unfit, nullptr)) {
      decision.held.insert(decision.held.end(), settled.begin(), settled.end());
    } else {
      gpus.Contest(unfit);
    }
  }
  for (const AllocatedClaim* claim : open) {
    std::vector<std::string> names;
    for (const ClaimDevice& device : claim->devices) names.push_back(device.device);
    std::vector<std::string> refused;
    ClaimVerdict verdict{claim->uid, {}, ""};
    if (gpus.JoinAll(names, &refused, &verdict.reason)) {
      for (const ClaimDevice& device : claim->devices) {
        if (device.waited_for && Effective(*claim, device, decided) == Verdict::kUndecided) {
          verdict.devices[device.device] = Verdict::kConfirmed;
        }
      }
      decision.held.insert(decision.held.end(), names.begin(), names.end());
    } else {
      for (const std::string& device : refused) verdict.devices[device] = Verdict::kConflict;
      // A refused device the scheduler does not wait for cannot fail the bind: fail it on a
      // waited-for device of the claim instead.
      const bool any_waited = std::any_of(refused.begin(), refused.end(), [&](const auto& name) {
        return std::any_of(claim->devices.begin(), claim->devices.end(),
                           [&](const auto& d) { return d.device == name && d.waited_for; });
      });
      if (!any_waited) {
        verdict.devices.clear();
        for (const ClaimDevice& device : claim->devices) {
          if (device.waited_for) verdict.devices[device.device] = Verdict::kConflict;
        }
      } else {
        for (auto it = verdict.devices.begin(); it != verdict.devices.end();) {
          const bool waited =
              std::any_of(claim->devices.begin(), claim->devices.end(),
                          [&](const auto& d) { return d.device == it->first && d.waited_for; });
          it = waited ? std::next(it) : verdict.devices.erase(it);
        }
      }
    }
    if (!verdict.devices.empty()) decision.verdicts.push_back(std::move(verdict));
  }
  return decision;
}

}  // namespace kvgpu::deviceplugin::dra
