// Where the node's vGPUs are read and made. Two implementations: the kernel's sysfs written
// directly (Node, node.h) and libvirt's node-device API (LibvirtBackend, libvirt_backend.h) for
// hosts where libvirt owns the mdevs. Everything above mdev/ (the device plugin, vgpuctl) holds a
// Backend and never knows which one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "mdev/model.h"

namespace kvgpu::mdev {

struct CreateRequest {
  std::string parent;               // "0000:3b:00.0", "mtty", or a VF address for vendor VFIO
  std::string type_id;              // "nvidia-222", "mtty-2", "1414"
  std::optional<std::string> uuid;  // mdev only; a random one when absent
};

// A running subscription to device events; events stop when it is destroyed.
class EventSubscription {
 public:
  virtual ~EventSubscription() = default;
};

// The backend's link to whatever it talks to. The sysfs backend is always connected; the
// libvirt one loses and regains libvirtd.
struct BackendHealth {
  bool connected = true;
  uint64_t reconnects = 0;  // connections regained after a loss, since start
  std::string last_error;   // why the last connection attempt or call failed; empty when none
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual const char* Name() const = 0;  // "sysfs", "libvirt"

  // Reads everything afresh. Odd entries are skipped with a warning in the inventory. An error
  // means the view could not be read at all (no sysfs, libvirtd unreachable): callers keep the
  // view they had and decide nothing from this one.
  virtual Result<Inventory> Scan() = 0;

  // Creates one vGPU and returns it once its IOMMU group shows.
  virtual Result<Vgpu> Create(const CreateRequest& request) = 0;

  // Removes a vGPU by id (UUID, or VF address for vendor VFIO) and returns once it is gone.
  // A vGPU that something else keeps a persistent definition of is refused (kPermission).
  virtual Status Remove(const std::string& id) = 0;
  // Remove, for a caller that knows the type it made there. Where an id is reused for the next
  // owner (a vendor-VFIO VF), a backend clears it only while it still holds that type. An mdev's
  // UUID is never reused, so by default this is Remove.
  virtual Status RemoveIfType(const std::string& id, const std::string& type_id) {
    (void)type_id;
    return Remove(id);
  }

  // Reads afresh the parents and vGPUs of one physical GPU (the GPU and every VF of it, mdev
  // parents or vendor VFIO VFs), for a caller that just changed one of them: a vGPU made on a GPU
  // or one of its VFs changes what the others can still make (the GPU's lock, its free room), and
  // a removal changes it back. kInvalid by default (a backend that cannot read one GPU alone):
  // the caller rescans instead.
  virtual Result<Inventory> ScanGpu(const std::string& physical_gpu) {
    return Status::Error(ErrorCode::kInvalid, std::string(Name()) + " cannot read one GPU" +
                                                  " alone (" + physical_gpu + ")");
  }

  // ScanGpu for a caller whose view `known` already holds the GPU's parents, types and vGPUs and
  // that just made or removed one of its vGPUs: only what such a change moves is read afresh (the
  // free room of each type, a vendor-VFIO VF's creatable types and current type); identities and
  // other vGPUs are taken from `known`, and the rescan that follows every change catches up with
  // anything else. A GPU that `known` does not hold, or whose reads fail, is read whole. By
  // default, ScanGpu.
  virtual Result<Inventory> ScanGpuRoom(const std::string& physical_gpu, const Inventory& known) {
    (void)known;
    return ScanGpu(physical_gpu);
  }

  // Calls `changed` (on a thread of the backend's) whenever the node's devices may have changed;
  // `what` names the event for logs. `changed` must return quickly and not call into the backend
  // (it may run inside one of the backend's calls); it should only schedule a rescan. An error
  // means the backend has no events here: callers rely
  // on periodic rescans.
  virtual Result<std::unique_ptr<EventSubscription>> WatchChanges(
      std::function<void(const std::string& what)> changed) = 0;

  virtual BackendHealth Health() const { return {}; }
};

}  // namespace kvgpu::mdev
