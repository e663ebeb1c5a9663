// Which allocated devices of the node's pool may join their GPU: the decision behind the binding
// conditions the daemon publishes with its devices (docs/dra.md, "Occupancy: binding
// conditions"). Pure: no I/O, no clock; the watch loop is occupancy_confirmer.h.
//
// The scheduler (KEP-5007, kube-scheduler's DynamicResources PreBind) copies a device's
// bindingConditions and bindingFailureConditions into the claim's allocation result and waits
// until every binding condition is True in claim.status.devices; any failure condition True makes
// it clear the allocation and schedule the pod again. Here each GPU's state is rebuilt from what
// it really carries (the kernel's vGPUs, ours and foreign, and claims prepared on the node whose
// vGPU is not made yet), then the claims already decided (confirmed, or allocated without our
// binding condition, so never waited for) join it, then the undecided ones in allocation order
// (allocationTimestamp, then UID): a claim whose every device may join (the GPU rules' one rule:
// GpuSlots::LockedAgainst, scheduling::ModeRoom where the GPU's mode facts are known) is
// confirmed and joins; any other gets OccupancyConflict on the devices that may not.
// A verdict once written is never changed: a confirmed claim stays confirmed across restarts
// (rebuilt from its conditions), a conflicting one waits for the scheduler to clear it.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "deviceplugin/dra/resource_slices.h"
#include "deviceplugin/model/occupancy.h"
#include "mdev/model.h"

namespace kvgpu::deviceplugin::dra {

// The condition types kOccupancyConfirmed and kOccupancyConflict are resource_slices.h's: the
// slices name them on every device, the decision writes them into claim.status.devices.

enum class Verdict { kUndecided, kConfirmed, kConflict };
const char* VerdictName(Verdict verdict);  // "undecided", "confirmed", "conflict"

// Where a device of the pool puts a vGPU.
struct DeviceSpot {
  std::string physical_gpu;
  std::string type_id;
  bool operator==(const DeviceSpot&) const = default;
};

// The pool's device names -> GPU and type (the catalogue's devices, before Narrow).
std::map<std::string, DeviceSpot> DeviceSpots(const std::vector<DraDevice>& devices);

// One allocated device of this driver and pool in a claim.
struct ClaimDevice {
  std::string device;       // the DRA device name
  bool waited_for = false;  // its result carries kOccupancyConfirmed: the scheduler waits
  Verdict written = Verdict::kUndecided;  // from claim.status.devices (True conditions)
};

// A claim allocated (in part) from this node's pool.
struct AllocatedClaim {
  std::string uid;
  std::string namespace_;
  std::string name;
  std::string resource_version;
  std::string allocation_timestamp;  // RFC 3339; empty when the API server did not set it
  std::vector<ClaimDevice> devices;  // in result order
};

// The claim's devices of `driver` and `pool`, or nullopt when it has none (not allocated, or
// allocated elsewhere). Malformed entries are skipped, never trusted.
std::optional<AllocatedClaim> ReadAllocatedClaim(const nlohmann::json& claim,
                                                 const std::string& driver,
                                                 const std::string& pool);

// What the node's GPUs carry.
struct OccupancyView {
  mdev::Inventory inventory;                  // the DRA GPUs as the kernel shows them
  GpuRules rules;                             // their modes and types
  std::map<std::string, DeviceSpot> devices;  // every device name of the pool
  // Devices of claims prepared on the node -> their vGPU's id, empty until made.
  std::map<std::string, std::string> prepared;
};

// One claim's verdict for its undecided, waited-for devices.
struct ClaimVerdict {
  std::string uid;
  std::map<std::string, Verdict> devices;  // device name -> kConfirmed or kConflict
  std::string reason;                      // for the condition's message
};

struct OccupancyDecision {
  std::vector<ClaimVerdict> verdicts;  // in allocation order
  // Devices allocated and confirmed (or never waited for) that fit: with the vGPUs they lock
  // their GPU as a vGPU would, which the slices' narrowing must show at once.
  std::vector<std::string> held;
};

// `decided`: verdicts this process wrote that the claims may not show yet (by UID, device).
OccupancyDecision Decide(const OccupancyView& view, const std::vector<AllocatedClaim>& claims,
                         const std::map<std::string, std::map<std::string, Verdict>>& decided = {});

}  // namespace kvgpu::deviceplugin::dra
