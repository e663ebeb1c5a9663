// What sysfs does not show about a physical GPU: whether MIG mode and mixed-size (heterogeneous)
// mode are on, and where NVML's placements and GPU instances are known. The model (occupancy.h)
// asks a probe per GPU and falls back to the kernel's counts where the probe cannot tell.
//
// Two probes:
//  - NvmlGpuModeProbe: NVIDIA's NVML, dlopen()ed at run time (no build dependency): the modes
//    only. Placement tables and GPU instances through NVML are not read yet.
//  - SimGpuModeProbe: the simulator's modes file (sim/README.md, docs/simulator.md), which holds
//    the modes, the GPU instances, per-type placements and GPU-instance profiles, and where each
//    vGPU sits.
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

#include "scheduling/gpu_fit.h"

namespace kvgpu::deviceplugin {

struct GpuShapeFacts {
  std::optional<bool> mig;            // nullopt: the probe cannot tell
  std::optional<bool> heterogeneous;  // mixed-size mode
  // Known only where `gpu_instances_known`: the GPU's instances (vgpus 0: filled by the model).
  bool gpu_instances_known = false;
  std::vector<scheduling::GpuInstanceSlots> gpu_instances;
  struct TypeFacts {
    scheduling::Placements placements;   // mixed-size; empty ids: not known
    std::optional<uint32_t> gi_profile;  // MIG-backed types
    uint32_t max_per_gi = 0;
  };
  std::map<std::string, TypeFacts> types;  // by type id
  struct VgpuFacts {
    std::string type;  // the type id
    std::optional<uint32_t> placement;
    std::optional<uint32_t> gpu_instance;
  };
  std::map<std::string, VgpuFacts> vgpus;  // by vGPU id (UUID, or the VF for vendor VFIO)
};

class GpuModeProbe;

// Which probe the daemon uses (config key gpuModeProbe): none, NVML, or the simulator's file under
// the sysfs root.
enum class GpuModeProbeChoice { kNone, kNvml, kSim };
const char* GpuModeProbeChoiceName(GpuModeProbeChoice choice);  // "none", "nvml", "sim"
std::optional<GpuModeProbeChoice> ParseGpuModeProbeChoice(std::string_view name);
// The probe for `choice` (null for kNone); kSim reads <sysfs_root>/sim-gpu-modes.json.
std::shared_ptr<const GpuModeProbe> MakeGpuModeProbe(GpuModeProbeChoice choice,
                                                     const std::filesystem::path& sysfs_root);

class GpuModeProbe {
 public:
  virtual ~GpuModeProbe() = default;
  // Facts about the physical GPU at `pci_address` ("0000:41:00.0"); nullopt when the probe knows
  // nothing of it. Must be safe to call from several threads.
  virtual std::optional<GpuShapeFacts> Probe(const std::string& pci_address) const = 0;
};

// NVML, loaded with dlopen(library) on first use; every call is one of NVML's documented entry
// points (NVML API Reference, docs.nvidia.com/deploy/nvml-api): nvmlInit_v2,
// nvmlDeviceGetHandleByPciBusId_v2, nvmlDeviceGetMigMode, nvmlDeviceGetVgpuHeterogeneousMode.
// A missing library or symbol, or an NVML error, leaves the field unknown.
class NvmlGpuModeProbe : public GpuModeProbe {
 public:
  explicit NvmlGpuModeProbe(std::string library = "libnvidia-ml.so.1");
  ~NvmlGpuModeProbe() override;
  NvmlGpuModeProbe(const NvmlGpuModeProbe&) = delete;
  NvmlGpuModeProbe& operator=(const NvmlGpuModeProbe&) = delete;

  std::optional<GpuShapeFacts> Probe(const std::string& pci_address) const override;
  // Whether the library loaded and nvmlInit_v2 succeeded (loads it if not yet tried).
  bool Loaded() const;

 private:
  struct Api;
  bool LoadLocked() const;

  std::string library_;
  mutable std::mutex mutex_;
  mutable bool tried_ = false;
  mutable std::unique_ptr<Api> api_;
};

// The simulator's modes file, read on every call (it is small and rewritten whole).
class SimGpuModeProbe : public GpuModeProbe {
 public:
  explicit SimGpuModeProbe(std::filesystem::path file) : file_(std::move(file)) {}
  std::optional<GpuShapeFacts> Probe(const std::string& pci_address) const override;

 private:
  std::filesystem::path file_;
};

}  // namespace kvgpu::deviceplugin
