// What sysfs does not show about a physical GPU: whether MIG mode and mixed-size (heterogeneous)
// mode are on, the placements of its vGPU types, its GPU instances and where its vGPUs sit. The
// plugin's model (deviceplugin/model/occupancy.h) and `vgpuctl doctor` ask a probe per GPU and
// fall back to the kernel's counts where it cannot tell. It is about the driver, as sysfs is, so
// it lives here, below both.
//
// Two probes:
//  - NvmlGpuModeProbe: NVIDIA's NVML, dlopen()ed at run time (no build dependency).
//  - SimGpuModeProbe: the simulator's modes file (sim/README.md, docs/simulator.md).
// Nothing here parses nvidia-smi's human-readable output.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mdev/model.h"

namespace kvgpu::mdev {

struct GpuShapeFacts {
  std::optional<bool> mig;            // nullopt: the probe cannot tell
  std::optional<bool> heterogeneous;  // mixed-size mode
  // Known only where `gpu_instances_known`: the GPU's instances.
  struct GpuInstance {
    uint32_t id = 0;
    uint32_t profile = 0;  // NVML's GPU-instance profile id (nvmlGpuInstanceInfo_t.profileId)
    bool operator==(const GpuInstance&) const = default;
  };
  bool gpu_instances_known = false;
  std::vector<GpuInstance> gpu_instances;  // by id, lowest first
  struct TypeFacts {
    // Mixed-size mode (nvmlVgpuPlacementList_t): the slots a vGPU takes and where it may start;
    // empty ids: not known.
    uint32_t placement_size = 0;
    std::vector<uint32_t> placement_ids;
    std::optional<uint32_t> gi_profile;  // MIG-backed types
    uint32_t max_per_gi = 0;
    // The most vGPUs of the type the GPU makes in its mode (nvmlVgpuTypeGetMaxInstances); 0: not
    // known. Vendor-VFIO types have no description's max_instance: this is their cap.
    uint32_t max_instances = 0;
    bool operator==(const TypeFacts&) const = default;
  };
  std::map<std::string, TypeFacts> types;  // by sysfs type id
  struct VgpuFacts {
    std::string type;  // the sysfs type id
    std::optional<uint32_t> placement;
    std::optional<uint32_t> gpu_instance;
    bool operator==(const VgpuFacts&) const = default;
  };
  std::map<std::string, VgpuFacts> vgpus;  // by vGPU id (UUID, or the VF for vendor VFIO)
  bool operator==(const GpuShapeFacts&) const = default;
};

// A vGPU type as sysfs shows it on one GPU: the facts are keyed by `id`; a probe that names
// types its own way (NVML) finds them by name, then by number (docs/gpu-shapes.md).
struct SysfsTypeName {
  std::string id;    // "nvidia-222", vendor VFIO "1414"
  std::string name;  // "GRID T4-1Q", "NVIDIA H200X-1-18C"; empty when sysfs has none
};
// The types sysfs shows on `physical_gpu`: its parents' and those its vGPUs hold.
std::vector<SysfsTypeName> SysfsTypesOf(const Inventory& inventory,
                                        const std::string& physical_gpu);

class GpuModeProbe {
 public:
  virtual ~GpuModeProbe() = default;
  // Facts about the physical GPU at `pci_address` ("0000:41:00.0"), its types keyed by the ids
  // of `sysfs_types` (types it cannot tie to one are left out); nullopt when the probe knows
  // nothing of the GPU. Must be safe to call from several threads.
  virtual std::optional<GpuShapeFacts> Probe(
      const std::string& pci_address, const std::vector<SysfsTypeName>& sysfs_types) const = 0;
};

// Which probe is used (the plugin's config key gpuModeProbe, vgpuctl doctor --gpu-mode-probe):
// none, NVML, or the simulator's file under the sysfs root.
enum class GpuModeProbeChoice { kNone, kNvml, kSim };
const char* GpuModeProbeChoiceName(GpuModeProbeChoice choice);  // "none", "nvml", "sim"
std::optional<GpuModeProbeChoice> ParseGpuModeProbeChoice(std::string_view name);
// The probe for `choice` (null for kNone); kSim reads <sysfs_root>/sim-gpu-modes.json.
std::shared_ptr<const GpuModeProbe> MakeGpuModeProbe(GpuModeProbeChoice choice,
                                                     const std::filesystem::path& sysfs_root);

// NVML, loaded with dlopen(library) on first use. Every call is one of NVML's documented entry
// points, with the signatures and struct layouts of nvml.h (gpu_mode_probe.cpp names each and its
// source). A missing library or symbol, or an NVML error, leaves that fact unknown.
class NvmlGpuModeProbe : public GpuModeProbe {
 public:
  explicit NvmlGpuModeProbe(std::string library = "libnvidia-ml.so.1");
  ~NvmlGpuModeProbe() override;
  NvmlGpuModeProbe(const NvmlGpuModeProbe&) = delete;
  NvmlGpuModeProbe& operator=(const NvmlGpuModeProbe&) = delete;

  std::optional<GpuShapeFacts> Probe(const std::string& pci_address,
                                     const std::vector<SysfsTypeName>& sysfs_types) const override;
  // Whether the library loaded and nvmlInit_v2 succeeded (loads it if not yet tried).
  bool Loaded() const;

  struct Api;  // the entry points found (gpu_mode_probe.cpp)

 private:
  bool LoadLocked() const;

  std::string library_;
  mutable std::mutex mutex_;
  mutable bool tried_ = false;
  mutable std::unique_ptr<Api> api_;
};

// The simulator's modes file, read on every call (it is small and rewritten whole). It keys
// types by sysfs id already.
class SimGpuModeProbe : public GpuModeProbe {
 public:
  explicit SimGpuModeProbe(std::filesystem::path file) : file_(std::move(file)) {}
  std::optional<GpuShapeFacts> Probe(const std::string& pci_address,
                                     const std::vector<SysfsTypeName>& sysfs_types) const override;

 private:
  std::filesystem::path file_;
};

}  // namespace kvgpu::mdev
