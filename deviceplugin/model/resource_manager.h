// The node's vGPUs as kubelet resources: the façade the gRPC servers (plugin_server.h) and the
// lifecycle (lifecycle.h) call, and the one lock over the rooms that do the work:
//   node_state.h        the kernel's view and our records, the only code that changes either;
//   device_catalogue.h  each resource's device list and health;
//   placement.h         GetPreferredAllocation's choice;
//   allocation.h        Allocate as one transaction, and its answer;
// and the removal of vGPUs, which must not race an Allocate of the same device ID.
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

#include "deviceplugin/model/allocation.h"
#include "deviceplugin/model/device_catalogue.h"
#include "deviceplugin/model/holders.h"
#include "deviceplugin/model/manager_observer.h"
#include "deviceplugin/model/model_options.h"
#include "deviceplugin/model/node_state.h"
#include "deviceplugin/model/placement.h"
#include "deviceplugin/model/scheduler_state.h"
#include "deviceplugin/model/state_store.h"
#include "mdev/backend.h"

namespace kvgpu::deviceplugin {

// Who asks for a removal: the lifecycle's removals give way to an Allocate of the same device ID
// in flight (kubelet is handing the ID out again); an Allocate's own removal of the ID's earlier
// vGPU does not.
enum class Remover { kAllocate, kLifecycle };

class ResourceManager {
 public:
  ResourceManager(mdev::Backend& backend, ModelOptions options, StateStore& store,
                  HolderOracle& holders, ManagerObserver* observer = nullptr);

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
  // The (physical GPU, type id) pairs the lists hold devices of, and the devices of one pair (the
  // GPU's own and its VFs', in list order): what a front end that names devices by GPU and type
  // looks up without copying every list.
  std::set<std::pair<std::string, std::string>> GpuTypes() const;
  std::vector<Device> DevicesOf(const std::string& physical_gpu, const std::string& type_id) const;
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
  // The same for one set of device IDs, answered in no kubelet dialect: the vGPUs made (or handed
  // back to their holder), in the order of `device_ids`. For a front end that words its answer
  // itself (DRA: the claim's CDI ids); no container, no environment.
  Result<std::vector<AllocatedVgpu>> Make(const std::string& resource,
                                          const std::vector<std::string>& device_ids);

  const ModelOptions& options() const { return options_; }
  // The node's vGPU state for the scheduler extender (scheduler_state.h), in one consistent look.
  scheduling::NodeVgpuState SchedulerState() const;
  // The kernel's view as last scanned (the DRA ResourceSlices are built from it).
  mdev::Inventory Inventory() const;

  // --- for the lifecycle (lifecycle.h) ---
  LifecycleSnapshot Snapshot() const;
  // Records which pod holds each device ID; saved when anything changed.
  Status SetOwners(const std::map<std::string, PodOwner>& owners);
  // Removes our vGPU `vgpu_id` recorded for `device_id` and forgets it. kGone when the record no
  // longer names that vGPU (kubelet handed the ID out again meanwhile). The kernel's remove may
  // block while a VM still holds the device, so this runs without the manager's lock; an Allocate
  // of the same device ID waits for it (up to SetRemovalWait) instead of racing it.
  Status RemoveVgpu(const std::string& device_id, const std::string& vgpu_id,
                    Remover by = Remover::kAllocate);
  // Forgets a record whose vGPU the kernel no longer shows (a reboot, or someone removed it).
  Status ForgetVgpu(const std::string& device_id, const std::string& vgpu_id);
  void SetRemovalWait(std::chrono::milliseconds wait);

 private:
  // What Allocate and Make share: the vGPUs of each container, made as one transaction.
  using MadeVgpus = std::vector<std::vector<AllocatedVgpu>>;
  Result<MadeVgpus> MakeForContainers(const std::string& resource,
                                      const std::vector<std::vector<std::string>>& containers);
  // MakeForContainers with its device IDs marked in flight.
  Result<MadeVgpus> AllocateInFlight(const std::string& resource,
                                     const std::vector<std::vector<std::string>>& containers);
  // Who holds the earlier vGPUs of the requested IDs: asked without the lock (kubelet may be slow).
  EarlierVgpus JudgeEarlier(const std::string& resource,
                            const std::vector<std::vector<std::string>>& containers);
  // Removes, without the lock, the earlier vGPUs of requested IDs that no pod holds (the kernel's
  // remove blocks while the last pod's VM lets go). A request the plan will refuse removes nothing.
  Status RemoveEarlierVgpus(const std::string& resource,
                            const std::vector<std::vector<std::string>>& containers,
                            const EarlierVgpus& earlier);
  Status WaitForRemovals(std::unique_lock<std::mutex>& lock,
                         const std::vector<std::vector<std::string>>& containers);
  // Plans and carries out the request under the lock; rolls back on failure.
  Result<MadeVgpus> AllocateLocked(const std::string& resource,
                                   const std::vector<std::vector<std::string>>& containers,
                                   const EarlierVgpus& earlier, bool& changed);
  // The device IDs of one Allocate are in flight from its start until it returns; then the
  // vGPUs it made start their "made moments ago" clock (holder_tracker.h: Judge).
  void BeginAllocating(const std::vector<std::vector<std::string>>& containers);
  void EndAllocating(const std::vector<std::vector<std::string>>& containers,
                     const MadeVgpus* made);
  // The catalogue from the node state; whether the lists changed. Caller holds mutex_.
  bool Rebuild();
  void AfterChange(bool changed);

  mdev::Backend& backend_;
  ModelOptions options_;
  HolderOracle& holders_;
  ManagerObserver* observer_;

  mutable std::mutex mutex_;
  NodeState state_;
  DeviceCatalogue catalogue_;
  std::function<void()> listener_;
  std::function<void()> refresh_requester_;
  std::set<std::string> removing_;         // device IDs
  std::multiset<std::string> allocating_;  // device IDs, once per Allocate in flight
  std::condition_variable removal_done_;
  std::chrono::milliseconds removal_wait_{10000};
};

}  // namespace kvgpu::deviceplugin
