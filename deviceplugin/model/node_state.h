// What the plugin knows of the node: the kernel's view from the last scan (parents, types with
// their free instances, vGPUs) and the record of the vGPUs this plugin created. Between scans the
// plugin's own creates and removes are applied here, the way the kernel will show them (a created
// vGPU takes an instance, a removed one gives it back), and nowhere else: the lists computed from
// it stay right until the next rescan confirms them.
//
// Not thread-safe: the resource manager holds its lock around every call.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "deviceplugin/model/state_store.h"
#include "mdev/backend.h"
#include "mdev/model.h"

namespace kvgpu::deviceplugin {

// What the lifecycle reads, in one consistent look.
struct LifecycleSnapshot {
  std::vector<CreatedVgpu> records;
  std::set<std::string> existing;  // vGPU ids the kernel showed in the last scan
  std::set<std::string> removing;  // device IDs whose vGPU is being removed right now
  // False until the backend has been read once (libvirtd away since the start): what does not
  // exist cannot be told from what was not seen, so nothing is forgotten or removed.
  bool inventory_known = true;
  // Device IDs of an Allocate still in flight: kubelet cannot know their pod before Allocate
  // returns, so nothing about them is judged until it has.
  std::set<std::string> allocating;
  std::vector<std::string> foreign;  // vGPUs in sysfs this plugin did not create: never touched
};

class NodeState {
 public:
  explicit NodeState(StateStore& store) : store_(store) {}

  // Reads the record. A corrupt one is an error: starting without knowing which vGPUs are ours
  // would break invariants 3 and 4.
  Status Load();

  // A new scan replaces the view. Returns its warnings that the last scan did not have.
  std::vector<std::string> ReplaceInventory(mdev::Inventory inventory);

  const mdev::Inventory& inventory() const { return inventory_; }
  // Whether any scan has been taken: before the first, the empty view says nothing.
  bool inventory_known() const { return inventory_known_; }
  const std::vector<CreatedVgpu>& records() const { return records_; }
  const CreatedVgpu* RecordFor(const std::string& device_id) const;

  // Records a vGPU before the kernel is asked to create it (a crash in between must not leave a
  // vGPU whose origin nobody knows), dropping any record of the same device ID, and saves. When
  // the save fails the new record is not kept either.
  Status Record(CreatedVgpu record);
  // Forgets the record of `device_id` naming `vgpu_id`; false when there is none. Not saved:
  // callers save once after a batch.
  bool Forget(const std::string& device_id, const std::string& vgpu_id);
  // Sets which pod holds each device ID; true when a record changed. A UID once learned stays
  // until the pod's name changes (an owner learned without the API server does not erase it).
  bool SetOwners(const std::map<std::string, PodOwner>& owners);
  // Restarts the "made moments ago" clock of the record of `device_id` naming `vgpu_id` at
  // `now_unix_ms`: the moment Allocate returns, when kubelet can first know the vGPU's pod. False
  // when there is no such record. Not saved.
  bool StampCreated(const std::string& device_id, const std::string& vgpu_id, int64_t now_unix_ms);
  Status Save();

  // The kernel created `vgpu`: in the view, one instance of its type fewer on its parent.
  void VgpuCreated(const mdev::Vgpu& vgpu);
  // The kernel removed the vGPU: out of the view, its instance free again. Nothing when a rescan
  // already saw it go (counts included).
  void VgpuRemoved(const std::string& vgpu_id);

  // A vGPU made or removed on a GPU changes what the GPU and its VFs offer (a strict GPU lists
  // only the locked type, an equal-size one only the locked size, a vendor-VFIO VF's
  // creatable_vgpu_types shrinks to the header when the GPU is full, and a removal grows them
  // back): what such a change moves on `physical_gpu` is read again from `backend` now
  // (Backend::ScanGpuRoom), not at the next rescan, so the counts never show a GPU in a mode it is
  // not in. When the backend cannot read one GPU alone, or fails, the view stays (the rescan that
  // follows every change catches up).
  void RereadGpu(mdev::Backend& backend, const std::string& physical_gpu);
  // The physical GPU of a vGPU in the view; empty for an unknown one.
  std::string PhysicalGpuOf(const std::string& vgpu_id) const;
  // VgpuRemoved, then its GPU read again (RereadGpu): what a removal of the model's own does.
  void VgpuRemovedAndReread(mdev::Backend& backend, const std::string& vgpu_id);

  LifecycleSnapshot Snapshot(const std::set<std::string>& removing,
                             const std::set<std::string>& allocating) const;

  // Raised by every VgpuCreated and VgpuRemoved: a scan read while it changed may predate the
  // change, and must not replace the view (ResourceManager::Refresh).
  uint64_t own_changes() const { return own_changes_; }

 private:
  mdev::VgpuType* FindType(const std::string& parent, const std::string& type_id);

  StateStore& store_;
  mdev::Inventory inventory_;
  std::vector<CreatedVgpu> records_;
  uint64_t own_changes_ = 0;
  bool inventory_known_ = false;
};

}  // namespace kvgpu::deviceplugin
