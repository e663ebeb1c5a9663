// The structured-parameters allocator as kube-scheduler runs it for one claim on one node,
// written from KEP-4381 and KEP-4815 and k8s.io/dynamic-resource-allocation
// structured/internal/incubating/allocator_incubating.go (kubernetes/kubernetes, 1.35-1.36):
// - each request names a DeviceClass; a device must match every selector of the class and of the
//   request (isSelectable);
// - devices that other claims hold (allocated, or in flight in the scheduler) are taken
//   (deviceInUse);
// - a device that consumes counters fits only while, for every counter of its pool's sets, what
//   the pool offers less what allocated devices of the pool consume (computed from the devices
//   published now, as checkAvailableCounters does) stays at or above what this claim's picks
//   consume;
// - devices are tried in pool, slice and device order, and the first full solution wins
//   (allocateOne's search, with backtracking; no scoring);
// - results copy each device's bindingConditions and bindingFailureConditions (KEP-5007);
// - with compatibility groups enforced (KEP-5963, DRADeviceCompatibilityGroups on in the
//   scheduler; keps/sig-scheduling/5963-device-compatibility-groups "Scheduler Changes"): per
//   counter set a rolling intersection of the groups of the devices allocated on it, from each
//   allocated device's snapshot in its claim (none: it declared none); a candidate is admitted
//   on each set it consumes iff nothing is allocated there, or both it and everything there
//   declare none, or its groups meet the intersection, which then narrows to the common part;
//   results carry the snapshot. Not enforced, groups are ignored (a scheduler before 1.37).
// Requests are ExactCount `exactly` requests; firstAvailable, allocationMode All, constraints,
// admin access, tolerations and capacity requests are refused as not modelled.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/status.h"
#include "fakes/dra_allocator/cel_selector.h"
#include "fakes/dra_allocator/pools.h"

namespace kvgpu::testing::dra {

struct DeviceId {
  std::string driver;
  std::string pool;
  std::string device;
  auto operator<=>(const DeviceId&) const = default;
};

struct DeviceClass {
  std::string name;
  std::vector<CelSelector> selectors;
  std::string extended_resource_name;  // spec.extendedResourceName (KEP-5004), may be empty
};

// A resource.k8s.io/v1 DeviceClass object (JSON).
Result<DeviceClass> ParseDeviceClass(const nlohmann::json& object);

// KEP-5004: the class an extended resource maps to: the one whose extendedResourceName is it, or
// for "deviceclass.resource.kubernetes.io/<class>" that class (ResourceDeviceClassPrefix,
// kubernetes/api resource/v1/types.go). nullptr: none.
const DeviceClass* ClassForExtendedResource(const std::vector<DeviceClass>& classes,
                                            const std::string& resource);

// Each allocated device's compatibility groups by counter set, as its claim's result records
// them (DeviceRequestAllocationResult.compatibilityGroups).
using GroupSnapshots = std::map<DeviceId, std::map<std::string, std::vector<std::string>>>;

struct DeviceResult {
  std::string request;
  DeviceId id;
  std::vector<std::string> binding_conditions;
  std::vector<std::string> binding_failure_conditions;
  std::map<std::string, std::vector<std::string>> compatibility_groups;  // set -> groups
};

// The devices of allocated claims: status.allocation.devices.results of each.
std::set<DeviceId> AllocatedDevices(const std::vector<nlohmann::json>& claims);
// ... and the compatibility groups their results record.
GroupSnapshots AllocatedGroups(const std::vector<nlohmann::json>& claims);

// Allocates `claim` (its spec.devices) from `pools` (one node's), with `in_use` taken.
// nullopt: it does not fit on this node. An error: the claim or a class cannot be evaluated (as
// upstream, a selector's runtime error stops the allocation). `groups`: the snapshots of the
// devices in use, with compatibility groups enforced; null, not enforced.
Result<std::optional<std::vector<DeviceResult>>> Allocate(const nlohmann::json& claim,
                                                          const std::vector<DeviceClass>& classes,
                                                          const std::vector<Pool>& pools,
                                                          const std::set<DeviceId>& in_use,
                                                          const GroupSnapshots* groups = nullptr);

// status.allocation for `results` on `node`: devices.results (request, driver, pool, device, and
// the binding conditions when a device has them), the node selector the allocator writes for
// node-local devices (matchFields metadata.name In [node]) and allocationTimestamp (RFC 3339).
nlohmann::json AllocationJson(const std::vector<DeviceResult>& results, const std::string& node,
                              const std::string& timestamp);

// Bounds the search (as the scheduler's filter timeout does).
inline constexpr int kMaxAllocateSteps = 200000;

}  // namespace kvgpu::testing::dra
