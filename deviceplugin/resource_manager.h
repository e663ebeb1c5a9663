// The node's vGPUs as kubelet resources: which device IDs each resource advertises and their
// health, preferred allocation, and Allocate (vGPU creation with rollback). No gRPC here: the
// servers in plugin_server.h translate to and from the wire (after NVIDIA's rm/server split).
//
// Device list of a resource = free slots the kernel can still create (available_instances, re-read
// after every change) + the vGPUs this plugin created for it (state_store.h). A GPU locked to one
// type shows 0 instances of the others, so their devices vanish; they come back when it is free.
// A parent that disappears keeps its devices listed, Unhealthy, until it returns.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "deviceplugin/config.h"
#include "deviceplugin/device_id.h"
#include "deviceplugin/holders.h"
#include "deviceplugin/state_store.h"
#include "mdev/node.h"

namespace kvgpu::deviceplugin {

struct Device {
  std::string id;
  std::string resource;
  DeviceKey key;
  std::string physical_gpu;
  bool healthy = true;
  bool ours = false;         // this plugin created a vGPU for the ID (state record)
  bool vgpu_exists = false;  // ... and the kernel still shows it

  bool operator==(const Device&) const = default;
};

struct DeviceCounts {
  uint32_t available = 0;  // healthy, no vGPU of ours yet
  uint32_t allocated = 0;  // healthy, a vGPU of ours exists
  uint32_t unhealthy = 0;
};

// What one container gets.
struct AllocatedVgpu {
  std::string device_id;
  std::string vgpu_id;  // mdev UUID, or the VF address for vendor VFIO
  std::string type_id;
  std::string parent;
  uint32_t iommu_group = 0;
  std::string vfio_device;  // "/dev/vfio/<group>"
};

struct DeviceNode {
  std::string host_path;
  std::string container_path;
  std::string permissions;
};

struct ContainerAllocation {
  std::vector<AllocatedVgpu> vgpus;
  std::vector<DeviceNode> devices;
  std::map<std::string, std::string> envs;
  std::vector<std::string> cdi_devices;  // "<resource>=<deviceID>", when CDI is on
};

// What the lifecycle reads, in one consistent look.
struct LifecycleSnapshot {
  std::vector<CreatedVgpu> records;
  std::set<std::string> existing;    // vGPU ids the kernel showed in the last scan
  std::set<std::string> removing;    // device IDs whose vGPU is being removed right now
  std::vector<std::string> foreign;  // vGPUs in sysfs this plugin did not create: never touched
};

// More device IDs than this in one Allocate is no real request (kubelet asks per container).
inline constexpr size_t kMaxDevicesPerRequest = 4096;

struct PreferredRequest {
  std::vector<std::string> available;
  std::vector<std::string> must_include;
  int32_t size = 0;
};

// Metrics and anything else that wants to watch the manager at work. Called without locks held
// except OnDevices (cheap, called under the manager's lock).
class ManagerObserver {
 public:
  virtual ~ManagerObserver() = default;
  virtual void OnVgpuCreated(const std::string& /*resource*/, std::chrono::nanoseconds /*took*/,
                             bool /*ok*/) {}
  virtual void OnVgpuRemoved(const std::string& /*resource*/, std::chrono::nanoseconds /*took*/,
                             bool /*ok*/) {}
  virtual void OnAllocation(const std::string& /*resource*/, const Status& /*result*/) {}
  virtual void OnDevices(const std::map<std::string, DeviceCounts>& /*per_resource*/) {}
};

class ResourceManager {
 public:
  ResourceManager(mdev::Node& node, Config config, StateStore& store, HolderOracle& holders,
                  ManagerObserver* observer = nullptr);

  // Loads the state record and does the first scan. A corrupt record or invalid names in the
  // config are errors: starting without knowing which vGPUs are ours would break invariant 3/4.
  Status Start();

  // Reads sysfs afresh and recomputes every list; calls the change listener if any list changed.
  Status Refresh();

  // Called (without locks) whenever some list changed; the servers push from it.
  void SetChangeListener(std::function<void()> listener);
  // When set, changes made by Allocate ask for a rescan through it (done later, off the request
  // path) instead of rescanning before Allocate returns.
  void SetRefreshRequester(std::function<void()> requester);

  std::vector<std::string> Resources() const;
  std::vector<Device> Devices(const std::string& resource) const;
  std::map<std::string, DeviceCounts> Counts() const;
  std::vector<std::string> Warnings() const;  // from the last scan, plus naming refusals

  // One answer per container request; bad input (unknown IDs, wrong size) is kInvalid.
  Result<std::vector<std::vector<std::string>>> PreferredAllocation(
      const std::string& resource, const std::vector<PreferredRequest>& requests) const;

  // Creates one vGPU per device ID, for every container of one kubelet Allocate call. All or
  // nothing: on any failure the vGPUs this call created are removed again, and the error names the
  // device and the kernel's reason. An ID whose earlier vGPU still exists goes by holders.h;
  // when no pod holds it, that vGPU is removed first without the lock (the kernel's remove blocks
  // while the last pod's VM still holds it), waiting out EBUSY for up to SetRemovalWait.
  Result<std::vector<ContainerAllocation>> Allocate(
      const std::string& resource, const std::vector<std::vector<std::string>>& containers);

  const Config& config() const { return config_; }

  // --- for the lifecycle (reconciler.h) ---
  LifecycleSnapshot Snapshot() const;
  // Records which pod holds each device ID ("namespace/name"); saved when anything changed.
  Status SetOwners(const std::map<std::string, std::string>& owners);
  // Removes our vGPU `vgpu_id` recorded for `device_id` and forgets it. kGone when the record no
  // longer names that vGPU (kubelet handed the ID out again meanwhile). The kernel's remove may
  // block while a VM still holds the device, so this runs without the manager's lock; an Allocate
  // of the same device ID waits for it (up to SetRemovalWait) instead of racing it.
  Status RemoveVgpu(const std::string& device_id, const std::string& vgpu_id);
  // Forgets a record whose vGPU the kernel no longer shows (a reboot, or someone removed it).
  Status ForgetVgpu(const std::string& device_id, const std::string& vgpu_id);
  void SetRemovalWait(std::chrono::milliseconds wait);

 private:
  struct Plan;
  struct Judged {
    std::string vgpu_id;  // the earlier vGPU the answer is about
    Verdict answer;
  };
  using JudgedMap = std::map<std::string, Judged>;  // by device ID

  // Sizes kubelet never sends (IDs over 63 characters, more devices than any node has): refused
  // before anything is looked up.
  static Status CheckShape(const std::string& resource,
                           const std::vector<std::vector<std::string>>& containers);
  JudgedMap JudgeEarlier(const std::string& resource,
                         const std::vector<std::vector<std::string>>& containers);

  void Recompute();  // views_ from inventory_ + records_; caller holds mutex_
  Status Validate(const std::string& resource, const std::vector<std::vector<std::string>>& c,
                  const JudgedMap& judged, std::vector<std::vector<Plan>>& plans);
  Result<AllocatedVgpu> Realize(const Plan& plan, std::vector<std::string>& created);
  void RollBack(const std::string& resource, const std::vector<std::string>& created);
  Status SaveRecords();
  Status WaitForRemovals(std::unique_lock<std::mutex>& lock,
                         const std::vector<std::vector<std::string>>& containers);
  Status RemoveEarlierVgpus(const std::string& resource,
                            const std::vector<std::vector<std::string>>& containers,
                            const JudgedMap& judged);
  Status WriteCdiSpecs(const std::string& resource);
  ContainerAllocation Answer(const std::string& resource, std::vector<AllocatedVgpu> vgpus) const;
  void AfterChange(bool changed);
  const mdev::Parent* FindParent(const std::string& name) const;
  // A vGPU the kernel removed: out of the cached view, its instance counted free again.
  void DropVgpuFromView(const std::string& vgpu_id);
  std::map<std::string, DeviceCounts> CountsLocked() const;
  bool Offered(const mdev::Parent& parent, const mdev::VgpuType& type) const;

  mdev::Node& node_;
  Config config_;
  StateStore& store_;
  HolderOracle& holders_;
  ManagerObserver* observer_;

  mutable std::mutex mutex_;
  mdev::Inventory inventory_;
  std::vector<CreatedVgpu> records_;
  std::map<std::string, std::vector<Device>> views_;          // resource -> devices by id
  std::unordered_map<std::string, std::string> resource_of_;  // device id -> resource
  std::set<std::string> advertised_;  // every device ID a list has offered kubelet
  std::map<std::string, std::vector<Device>> last_seen_;  // parent -> its devices
  std::vector<std::string> naming_warnings_;
  std::function<void()> listener_;
  std::function<void()> refresh_requester_;
  std::set<std::string> removing_;  // device IDs
  std::condition_variable removal_done_;
  std::chrono::milliseconds removal_wait_{10000};
};

}  // namespace kvgpu::deviceplugin
