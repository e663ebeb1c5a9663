// The sysfs backend: the node as the kernel shows it, read and written directly. Discovery of
// parents, types and vGPUs under a sysfs root, and creation/removal of vGPUs, for both flavours.
//
// Paths are always <root>/sys/...; the root is "/" on a real node and a temp dir in tests.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "common/status.h"
#include "mdev/backend.h"
#include "mdev/model.h"
#include "mdev/sysfs_io.h"

namespace kvgpu::mdev {

struct SysfsBackendOptions {
  // How long create/remove wait for the kernel to show (or stop showing) the device.
  std::chrono::milliseconds settle_timeout{2000};
  std::chrono::milliseconds settle_poll{1};
  // Whose open files a vendor-VFIO release checks first; empty: <root>/proc (the host's /proc
  // when root is /, which the DaemonSet's hostPID gives).
  std::filesystem::path proc_root;
};

class SysfsBackend : public Backend {
 public:
  SysfsBackend(std::filesystem::path root, SysfsIo& io, SysfsBackendOptions options = {});

  const char* Name() const override { return "sysfs"; }

  const std::filesystem::path& root() const { return root_; }

  // Reads everything afresh. Odd entries are skipped with a warning; only an unreadable root
  // (no sysfs at all) is an error. A root with neither an mdev bus nor vendor-VFIO VFs is an
  // empty inventory, not an error.
  Result<Inventory> Scan() override;

  // `physical_gpu` and its VFs (its virtfn* links), each an mdev parent or a vendor-VFIO VF, with
  // their vGPUs, read as Scan reads them. An unreadable PF is an error; a VF that cannot be read is
  // skipped with a warning.
  Result<Inventory> ScanGpu(const std::string& physical_gpu) override;

  // The types' available_instances of the GPU's known mdev parents and the creatable and current
  // types of its known vendor-VFIO VFs: what one create or remove changes. An mdev parent's
  // types are fixed when its driver registers it (mdev_register_parent), so their directories
  // are not listed again.
  Result<Inventory> ScanGpuRoom(const std::string& physical_gpu, const Inventory& known) override;

  // Creates one vGPU and waits until the kernel shows it with its IOMMU group.
  Result<Vgpu> Create(const CreateRequest& request) override;

  // Removes a vGPU by id (UUID, or VF address for vendor VFIO) and waits until it is gone.
  Status Remove(const std::string& id) override;
  // A vendor-VFIO VF is cleared only while it holds `type_id` (another type is the next owner's,
  // kGone) and no process holds its VFIO files open (kBusy).
  Status RemoveIfType(const std::string& id, const std::string& type_id) override;

  // Kernel uevents (libudev, udev_monitor.h) for the mdev and PCI subsystems.
  Result<std::unique_ptr<EventSubscription>> WatchChanges(
      std::function<void(const std::string& what)> changed) override;

  // Vendor-VFIO type names seen so far, by type id: `creatable_vgpu_types` shrinks to its header
  // when a card is full, so names are remembered from earlier scans (and may be seeded by a
  // caller that persisted them).
  std::map<std::string, std::string> KnownTypeNames() const;
  void RememberTypeNames(const std::map<std::string, std::string>& names);

  // Paths, for callers that watch or report them.
  std::filesystem::path MdevBusDir() const;      // <root>/sys/class/mdev_bus
  std::filesystem::path MdevDevicesDir() const;  // <root>/sys/bus/mdev/devices
  std::filesystem::path PciDevicesDir() const;   // <root>/sys/bus/pci/devices

 private:
  Status ScanMdevParents(Inventory& inventory);
  // One mdev parent (its entry in the mdev bus directory) and its types into `inventory`.
  void ReadMdevParent(const std::string& name, Inventory& inventory);
  Status ScanMdevDevices(Inventory& inventory);
  Status ScanVendorVfio(Inventory& inventory);
  void ReadVendorVfioVf(const std::string& name, Inventory& inventory);
  // A VF's creatable types and current type, after its identity is in `parent`; false (with a
  // warning in `inventory`) when they cannot be read, and the VF is then left out.
  bool ReadVendorVfioState(Parent parent, Inventory& inventory);
  void NameVendorVfioVgpus(Inventory& inventory) const;
  Result<Vgpu> CreateMdev(const CreateRequest& request);
  Result<Vgpu> CreateVendorVfio(const CreateRequest& request);
  Status RemoveMdev(const std::string& uuid);
  Status RemoveVendorVfio(const std::string& vf, const std::string& expected_type);
  std::vector<std::string> VfioPathsOf(const std::string& vf);
  std::optional<std::string> TypeName(const std::string& type_id) const;

  std::filesystem::path root_;
  SysfsIo& io_;
  SysfsBackendOptions options_;
  mutable std::mutex names_mutex_;
  std::map<std::string, std::string> vendor_type_names_;
};

}  // namespace kvgpu::mdev
