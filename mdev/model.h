// What the kernel shows of the node's GPUs: parents, their vGPU types, existing vGPUs.
// Plain values; discovery (node.h) builds them, nothing here touches sysfs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvgpu::mdev {

// How vGPUs are made on a parent.
enum class Flavour {
  kMdev,        // mediated device: UUID written to mdev_supported_types/<type>/create
  kVendorVfio,  // NVIDIA vGPU 17+ on kernel >= 6.8: type id written to
                // <VF>/nvidia/current_vgpu_type
};
const char* FlavourName(Flavour flavour);  // "mdev", "vendor-vfio"

// Parsed NVIDIA `description`:
// "num_heads=4, frl_config=45, framebuffer=1024M, max_resolution=5120x2880, max_instance=16".
struct NvidiaDescription {
  std::optional<uint64_t> framebuffer_mib;
  std::optional<uint32_t> max_instance;
  std::optional<uint32_t> num_heads;
  std::optional<uint32_t> frl_config;
  std::optional<std::string> max_resolution;  // "5120x2880"
};

// The profile is the last token of an NVIDIA type name ("GRID T4-1Q", "NVIDIA H200X-1-18C").
// MIG-backed types are <GPU>-<slices>-<GB><series>[suffix] (NVIDIA/vgpu-device-manager's names).
struct NvidiaProfile {
  std::string profile;      // "T4-1Q", "A100D-4C", "H200X-1-18C"
  std::string gpu;          // "T4", "A100D", "H200X"
  char series = 0;          // 'A' apps, 'B' PC, 'C' compute, 'Q' workstation
  uint32_t size_gib = 0;    // the framebuffer the name gives: 1 for T4-1Q, 18 for H200X-1-18C
  uint32_t mig_slices = 0;  // MIG-backed: the GPU instance's slices (1 for H200X-1-18C); else 0
};

struct VgpuType {
  std::string id;                           // "nvidia-222", "mtty-2", or a vendor-VFIO id "1414"
  std::optional<std::string> name;          // may be absent (mtty has it, not all drivers do)
  std::optional<std::string> description;   // absent for mtty
  std::string device_api;                   // "vfio-pci"; empty for vendor VFIO types
  uint32_t available_instances = 0;         // the kernel's truth at scan time
  std::optional<NvidiaDescription> nvidia;  // for NVIDIA types whose description parses
  std::optional<NvidiaProfile> profile;     // for NVIDIA types whose name parses
};

struct Parent {
  std::string name;  // sysfs name: "0000:3b:00.0", "mtty"
  Flavour flavour = Flavour::kMdev;
  bool is_pci = false;
  bool is_virtual_function = false;      // an SR-IOV VF (has `physfn`)
  std::string physical_gpu;              // the PF for a VF, else the parent itself
  std::optional<std::string> vendor_id;  // "0x10de"
  std::optional<std::string> device_id;  // "0x1eb8"
  std::optional<std::string> driver;     // bound driver's name, when linked
  // The NUMA node the device is attached to (sysfs `numa_node`; the kernel writes -1 for none,
  // which is absent here), and its PCIe root complex, "pci<domain>:<bus>" (the bridge directory
  // its sysfs path runs through; the form of Kubernetes' resource.kubernetes.io/pcieRoot).
  std::optional<int32_t> numa_node;
  std::optional<std::string> pcie_root;
  std::vector<VgpuType> types;
};

// "pci0000:00" from a PCI device's real sysfs path (/sys/devices/pci0000:00/0000:00:01.0/...);
// nullopt when no component has that form.
std::optional<std::string> PcieRootOfPath(const std::string& sysfs_path);

struct Vgpu {
  // UUID for an mdev; for a vendor-VFIO vGPU the VF's PCI address (the VF is the device).
  std::string id;
  Flavour flavour = Flavour::kMdev;
  std::string parent;
  std::string physical_gpu;
  std::string type_id;
  std::optional<std::string> type_name;
  std::optional<uint32_t> iommu_group;
  std::string vfio_device;  // "/dev/vfio/<group>" as the host sees it; empty without a group
  // A persistent definition exists (libvirt's nodedev-define, mdevctl define): someone else's
  // vGPU, whoever started it. Only the libvirt backend can tell; sysfs shows no definitions.
  bool persistent = false;
};

struct Inventory {
  std::vector<Parent> parents;
  std::vector<Vgpu> vgpus;
  // Entries skipped because sysfs showed something unexpected; each says what and where.
  std::vector<std::string> warnings;

  const Parent* FindParent(const std::string& name) const;
  const Vgpu* FindVgpu(const std::string& id) const;
};

}  // namespace kvgpu::mdev
