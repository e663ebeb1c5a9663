// Which device IDs each resource lists to kubelet, and their health, computed from the node state
// and the config alone.
//
// Device list of a resource = free slots the kernel can still create (available_instances) + the
// vGPUs this plugin created for it. A GPU locked to one type shows 0 instances of the others, so
// their devices vanish; they come back when it is free. A parent that disappears keeps its devices
// listed, Unhealthy, until it returns.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "deviceplugin/model/device_id.h"
#include "deviceplugin/model/model_options.h"
#include "deviceplugin/model/state_store.h"
#include "mdev/model.h"

namespace kvgpu::deviceplugin {

struct Device {
  std::string id;
  std::string resource;
  DeviceKey key;
  std::string physical_gpu;
  bool healthy = true;
  bool ours = false;         // this plugin created a vGPU for the ID (state record)
  bool vgpu_exists = false;  // ... and the kernel still shows it
  // The parent's NUMA node, told to kubelet (ListAndWatch topology) for its Topology Manager.
  std::optional<int32_t> numa_node = std::nullopt;

  bool operator==(const Device&) const = default;
};

struct DeviceCounts {
  uint32_t available = 0;  // healthy, no vGPU of ours yet
  uint32_t allocated = 0;  // healthy, a vGPU of ours exists
  uint32_t unhealthy = 0;
};

// Whether the config lets `type` be offered on `parent` (allowed types, pinning rules).
bool Offered(const ModelOptions& options, const mdev::Inventory& inventory,
             const mdev::Parent& parent, const mdev::VgpuType& type);

class DeviceCatalogue {
 public:
  // Recomputes every list. Free slots listed before stay listed first: kubelet holds the IDs of
  // the last list pushed, and an ID it was given must still name a device when it asks for it.
  // True when any list changed.
  bool Rebuild(const mdev::Inventory& inventory, const std::vector<CreatedVgpu>& records,
               const ModelOptions& options);

  std::vector<std::string> Resources() const;
  // Sorted by ID; empty for a resource never seen.
  const std::vector<Device>& Devices(const std::string& resource) const;
  bool Knows(const std::string& resource) const { return views_.contains(resource); }
  const Device* Find(const std::string& resource, const std::string& id) const;
  // The resource whose list holds `id` now.
  std::optional<std::string> ResourceOf(const std::string& id) const;
  // Offered to kubelet by some list since the plugin started.
  bool EverAdvertised(const std::string& id) const { return advertised_.contains(id); }
  // A vGPU of ours now exists for the ID: the lists kubelet sees do not change (the device stays
  // listed and healthy), so no rebuild is needed on the request path.
  void MarkAllocated(const std::string& resource, const std::string& id);

  std::map<std::string, DeviceCounts> Counts() const;
  const std::vector<std::string>& naming_warnings() const { return naming_warnings_; }

 private:
  struct Pass;
  using SlotsByType = std::map<std::pair<std::string, std::string>, std::set<uint32_t>>;
  // The free slots the lists hold now (kept first by the next pass); records them advertised.
  SlotsByType ListedFreeSlots();
  void KeepVanishedParents(Pass& pass, const std::set<std::string>& ours_ids);
  // The pass's lists become the catalogue's; true when any changed.
  bool Publish(Pass& pass);

  std::map<std::string, std::vector<Device>> views_;          // resource -> devices by id
  std::unordered_map<std::string, std::string> resource_of_;  // device id -> resource
  std::set<std::string> advertised_;                          // every device ID a list has offered
  std::map<std::string, std::vector<Device>> last_seen_;      // parent -> its devices
  std::vector<std::string> naming_warnings_;
};

}  // namespace kvgpu::deviceplugin
