// The node's vGPUs as DRA ResourceSlices (resource.k8s.io/v1), computed from the kernel's view and
// the GPU rules alone: pure, no I/O, same input -> same slices (names, order, content), so that a
// re-publish changes only what changed. docs/dra.md gives the layout and what it guarantees.
//
// Layout (Kubernetes 1.35+: a slice holds devices or sharedCounters, never both):
//  - per physical GPU a counter set "gpu-<address>" with one counter, `framebuffer` (Mi): the
//    GPU's framebuffer less what vGPUs not held by a claim already use;
//  - per creatable vGPU a device "gpu-<address>-<type>-<n>" (device_name.h DraDeviceName), n below
//    the most vGPUs of the type the GPU can host at once, consuming its framebuffer from its GPU's
//    counter set. Devices name slots, not parents: the kubelet plugin picks the parent (the GPU, or
//    a free VF) when it prepares.
//  - counter sets in "...-counters-<i>" slices, 8 a slice; each GPU's devices in "...-<gpu>-<j>"
//    slices, 64 a slice; every slice of the pool carries its generation and count.
// Counters are additive; one type (or size) per time-sliced GPU is not. Narrow() is the fast
// path that closes most of that gap: once a GPU carries a vGPU, only devices that may join it
// stay published.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "deviceplugin/dra/device_name.h"
#include "deviceplugin/model/model_options.h"
#include "deviceplugin/model/occupancy.h"
#include "mdev/model.h"
#include "scheduling/gpu_fit.h"

namespace kvgpu::deviceplugin::dra {

// Limits the API server enforces on a ResourceSlice: kubernetes/api resource/v1/types.go at
// v0.35.0 and v0.36.0 (Kubernetes 1.35/1.36), where the upstream name is given.
inline constexpr size_t kMaxDevicesPerSlice = 128;  // ResourceSliceMaxDevices
// ResourceSliceMaxDevicesWithTaintsOrConsumesCounters (1.35), ...WithAdvancedFeatures (1.36).
inline constexpr size_t kMaxDevicesPerSliceConsumingCounters = 64;
inline constexpr size_t kMaxCounterSetsPerSlice = 8;           // ResourceSliceMaxCounterSets
inline constexpr size_t kMaxCountersPerCounterSet = 32;        // ...MaxCountersPerCounterSet
inline constexpr size_t kMaxCounterConsumptionsPerDevice = 2;  // ...DeviceCounterConsumptions...
inline constexpr size_t kMaxAttributesAndCapacities = 32;      // ...AttributesAndCapacities...
inline constexpr size_t kMaxAttributeValueLength = 64;         // DeviceAttributeMaxValueLength
inline constexpr size_t kMaxQualifiedNameDomainLength = 63;    // DeviceMaxDomainLength
inline constexpr size_t kMaxQualifiedNameIdLength = 32;        // DeviceMaxIDLength
inline constexpr size_t kDriverNameMaxLength = 63;             // DriverNameMaxLength
inline constexpr size_t kPoolNameMaxLength = 253;              // PoolNameMaxLength
// BindingConditionsMaxSize and BindingFailureConditionsMaxSize (v0.36.0).
inline constexpr size_t kMaxBindingConditions = 4;
// compatibilityGroups on a consumesCounters entry (KEP-5963, DRADeviceCompatibilityGroups, alpha
// in 1.37): at most 2 names, none twice, per Kubernetes' 1.37 feature documentation. The name
// rules are not in a released kubernetes/api here; the groups written are DNS labels, which any
// plausible rule accepts (and the publisher's dry-run probe finds out where one does not).
inline constexpr size_t kMaxCompatibilityGroups = 2;

// The standard attribute for a PCI address in extended BDF (kubernetes/kubernetes
// staging/src/k8s.io/dynamic-resource-allocation/deviceattribute/attribute.go,
// StandardDeviceAttributePCIBusID).
inline constexpr const char* kPciBusIdAttribute = "resource.kubernetes.io/pciBusID";
// ... and for the PCIe root complex, "pci<domain>:<bus>" (StandardDeviceAttributePCIeRoot, the
// same file): devices that share it are close on the bus, what a claim's matchAttribute aligns.
inline constexpr const char* kPcieRootAttribute = "resource.kubernetes.io/pcieRoot";
// The one default (dra/device_name.h), for the kubelet plugin and the slices alike.
inline constexpr const char* kDefaultDriverName = kDefaultDraDriverName.data();

// Condition types (metav1.Condition types: qualified names) in the devices' bindingConditions and
// bindingFailureConditions, and in claim.status.devices[].conditions, where the occupancy
// decision (occupancy_decision.h) writes them.
inline constexpr const char* kOccupancyConfirmed = "OccupancyConfirmed";
inline constexpr const char* kOccupancyConflict = "OccupancyConflict";

struct SliceOptions {
  std::string node_name;
  std::string driver = kDefaultDriverName;
  ModelOptions model;  // allowed types and pinning: what the device plugin would offer
  bool narrow = true;  // Narrow() the devices of GPUs that carry vGPUs
  // vGPUs prepared for ResourceClaims: their allocations already consume the counters, so they
  // are not subtracted again. Every other vGPU on a GPU (the device plugin's, foreign) is.
  std::set<std::string> claimed_vgpus;
  // Each device says the scheduler must wait for OccupancyConfirmed before binding, and give up
  // on OccupancyConflict (KEP-5007; occupancy_decision.h); config dra.bindingConditions.
  bool binding_conditions = true;
  // Each device's counter consumption names its GPU's lock as a compatibility group (KEP-5963;
  // CompatibilityGroup below), so a scheduler that enforces them never puts two types (or sizes)
  // on a strict (equal-size) GPU. Only where the API server keeps the field: the publisher
  // probes for it (slice_publisher.h); config dra.compatibilityGroups.
  bool compatibility_groups = false;
  // Devices allocated to claims and confirmed whose vGPU may not be made yet: for Narrow they
  // lock their GPU as the vGPU will.
  std::vector<std::string> held_devices;
};

// One creatable vGPU of the pool.
struct DraDevice {
  std::string name;  // DNS label, unique in the pool
  std::string physical_gpu;
  uint32_t slot = 0;  // 0 .. most-of-the-type-1
  std::string type_id;
  std::optional<std::string> type_name;      // "GRID T4-1Q"
  std::optional<std::string> profile;        // "T4-1Q" (mdev::NvidiaProfile)
  std::optional<std::string> gpu_model;      // "T4"
  uint32_t mig_slices = 0;                   // MIG-backed: the GPU instance's slices
  std::optional<std::string> pci_device_id;  // "0x1eb8"
  bool pci = false;                          // the physical GPU is a PCI device
  std::optional<int32_t> numa_node;          // the physical GPU's, where the kernel knows it
  std::optional<std::string> pcie_root;      // "pci0000:3a"
  mdev::Flavour flavour = mdev::Flavour::kMdev;
  scheduling::Occupancy occupancy = scheduling::Occupancy::kUnknown;
  uint64_t framebuffer_mib = 0;  // 0: not known (consumes no counter)
  std::string counter_set;       // empty: consumes nothing

  bool operator==(const DraDevice&) const = default;
};

struct CounterSet {
  std::string name;  // DNS label
  std::string physical_gpu;
  uint64_t framebuffer_mib = 0;  // what the devices may still draw

  bool operator==(const CounterSet&) const = default;
};

struct Catalogue {
  std::vector<CounterSet> counter_sets;  // by GPU
  std::vector<DraDevice> devices;        // by GPU, type, slot
};

// Every device the node's GPUs could host, and their counter sets. Fails (naming it) when a name
// cannot be made valid.
Result<Catalogue> BuildCatalogue(const mdev::Inventory& inventory, const GpuRules& rules,
                                 const SliceOptions& options);

// The types each parent ever listed. A kernel may stop listing a type while the GPU cannot take
// one more (vendor-VFIO VFs list only what is creatable now), but a device a claim was allocated
// must keep its name and its counters: Remember() puts the types a parent listed before back on
// it, with no instance available, so the catalogue stays the GPU's whole offer.
class TypeMemory {
 public:
  // `inventory` with every type its parents listed in earlier calls added back where missing.
  mdev::Inventory Remember(const mdev::Inventory& inventory);

 private:
  std::map<std::string, std::map<std::string, mdev::VgpuType>> types_;  // parent -> id -> type
};

// Slice narrowing: on a GPU that carries a vGPU, keeps only the devices of what locks the GPU
// (scheduling::LockKey: its type on strict GPUs, its framebuffer size on equal-size ones); GPUs
// without a modelled lock (mixed-size, MIG, unknown) and free GPUs keep every device. A GPU with
// no vGPU yet but a `held` device (a claim's, confirmed) is locked by the first of them.
std::vector<DraDevice> Narrow(const std::vector<DraDevice>& devices,
                              const mdev::Inventory& inventory, const GpuRules& rules,
                              const std::vector<std::string>& held = {});

// The pool's slices at `generation` (metadata.name, spec; no owner, which the publisher sets).
// Empty when the node has nothing to offer.
Result<std::vector<nlohmann::json>> BuildResourceSlices(const mdev::Inventory& inventory,
                                                        const GpuRules& rules,
                                                        const SliceOptions& options,
                                                        int64_t generation);
// The same from a catalogue already built (BuildCatalogue, then Narrow).
Result<std::vector<nlohmann::json>> SlicesFor(const Catalogue& catalogue,
                                              const SliceOptions& options, int64_t generation);
// The compatibility groups `device` declares on its counter set (KEP-5963: devices on one counter
// set are co-allocated only while the groups of all of them intersect, a snapshot of each
// allocated device's groups kept in its claim): its type, "type-<type id>", on strict GPUs; on
// equal-size GPUs its size, "framebuffer-<n>mib", and its type as well, so that an allocation
// made while the GPU still read as strict (a free GPU's mode is known only once it carries a
// vGPU, where no probe tells it) keeps the devices of its own type allocatable after the GPU
// reads as equal-size, and never another type. None where no lock is modelled (mixed-size and
// MIG GPUs take any mix their counters allow; unknown GPUs are the kernel's to refuse). Devices
// on one GPU share its occupancy, so a GPU never mixes devices with and without groups.
std::vector<std::string> CompatibilityGroups(const DraDevice& device);

// The attributes `device` is published with (its entry's "attributes" in the slices), for readers
// of the same facts outside them (the device metadata, dra/device_metadata.h).
nlohmann::json DeviceAttributes(const DraDevice& device);

// The API server's checks that the OpenAPI schema does not carry (types.go limits, DNS labels,
// qualified names, devices xor sharedCounters), for one slice.
Status ValidateSlice(const nlohmann::json& slice);
// ... and across the pool: unique slice, device and counter-set names, one driver, pool,
// generation and a count that matches, every consumed counter set and counter defined.
Status ValidatePool(const std::vector<nlohmann::json>& slices);

// Whether `name` is a DNS-1123 label / subdomain / a C identifier.
bool IsDnsLabel(const std::string& name);
bool IsDnsSubdomain(const std::string& name);
bool IsCIdentifier(const std::string& name);
// The driver name rules (DNS subdomain, <= 63, lower case).
Status ValidateDriverName(const std::string& driver);

}  // namespace kvgpu::deviceplugin::dra
