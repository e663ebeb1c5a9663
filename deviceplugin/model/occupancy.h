// How each physical GPU's vGPUs may share it (scheduling::Occupancy), told from what the kernel
// shows, and the lock keys that follow; the one source of both for the plugin's placement and the
// state it publishes for the scheduler extender. docs/gpu-shapes.md gives the facts and sources.
//
// sysfs does not show NVIDIA's sharing mode, but the kernel's counts do once a GPU carries a vGPU
// (NVIDIA zeroes what the GPU can no longer take): beside vGPUs of one framebuffer size,
//  - a type of another size still creatable: mixed-size (heterogeneous mode);
//  - another type of the same size still creatable: equal-size (NVIDIA's default today);
//  - the vGPUs' own type creatable and no other type of its size: strict (a driver that locks a
//    GPU to one type).
// MIG-backed types (<GPU>-<slices>-<GB><S>) on a GPU make it mig. A GPU without a vGPU shows none
// of this; it takes what the node's other GPUs (one driver) showed, equal-size or strict, and
// strict when none showed anything: stricter than the hardware is never a failed admission.
// Where a GpuModeProbe (mdev/gpu_mode_probe.h) tells a GPU's MIG or mixed-size mode, its answer
// wins over the counts, and the placements and GPU instances it gives let scheduling::ModeRoom
// place vGPUs on those GPUs by their own rule.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mdev/gpu_mode_probe.h"
#include "mdev/model.h"
#include "scheduling/gpu_fit.h"

namespace kvgpu::deviceplugin {

// The mode probe lives with the driver's other readers in mdev/; the plugin's config and daemon
// name it from here.
using mdev::GpuModeProbe;
using mdev::GpuModeProbeChoice;
using mdev::GpuModeProbeChoiceName;
using mdev::GpuShapeFacts;
using mdev::MakeGpuModeProbe;
using mdev::NvmlGpuModeProbe;
using mdev::ParseGpuModeProbeChoice;
using mdev::SimGpuModeProbe;

// What the operator says (occupancyMode): auto tells each GPU's mode from the kernel's counts;
// strict or equal-size applies to every NVIDIA GPU that is neither MIG-backed nor seen mixing
// sizes.
enum class OccupancySetting { kAuto, kStrict, kEqualSize };
const char* OccupancySettingName(OccupancySetting setting);  // "auto", "strict", "equal-size"
std::optional<OccupancySetting> ParseOccupancySetting(std::string_view name);

// The framebuffer of a type: its description's, else its name's size; 0 when neither says.
uint64_t FramebufferMib(const mdev::VgpuType& type);

class GpuRules {
 public:
  GpuRules() = default;
  // `probe` (may be null) is asked once per NVIDIA GPU here, not kept. `limits` (may be null) is
  // asked only for each type's max instances where `probe` is not given: a cap only lowers what is
  // promised, so it holds whatever the published state says of modes.
  GpuRules(const mdev::Inventory& inventory, OccupancySetting setting,
           const GpuModeProbe* probe = nullptr, const GpuModeProbe* limits = nullptr);

  // kUnknown for GPUs the inventory does not show.
  scheduling::Occupancy OccupancyOf(const std::string& physical_gpu) const;
  uint64_t FramebufferOf(const std::string& physical_gpu, const std::string& type_id) const;
  // The type's max instances on the GPU (its NVIDIA description's max_instance, else the probe's
  // nvmlVgpuTypeGetMaxInstances); 0 when not known.
  uint32_t MaxInstancesOf(const std::string& physical_gpu, const std::string& type_id) const;
  // How many more vGPUs of `type_id` the GPU can make now, beside `vgpus` (the node's; other
  // GPUs' are skipped): on a MIG or mixed-size GPU what its instances or placements admit
  // (scheduling::ModeRoom, within the max); on a time-sliced one the max less the vGPUs of its
  // size (of its type where the size is not known), which bounds both the type and the size lock.
  // nullopt where neither is known: then only the kernel's word for one more is there.
  std::optional<uint32_t> Cap(const std::string& physical_gpu, const std::string& type_id,
                              const std::vector<mdev::Vgpu>& vgpus) const;
  // scheduling::LockKey of a vGPU of `type_id` on the GPU.
  std::string LockKey(const std::string& physical_gpu, const std::string& type_id) const;

  // The probe's facts for ModeRoom: a type's placements or GPU-instance profile on the GPU.
  void FillType(const std::string& physical_gpu, const std::string& type_id,
                scheduling::ResourceSlots& slots) const;
  // The GPU's mode, and the placement slots or GPU instances its vGPUs take there: those the
  // probe showed where it showed them, then those of `vgpus` (all of the node's; other GPUs'
  // are skipped) it did not show, where the driver would put them (the lowest creatable
  // placement, the lowest fitting instance).
  scheduling::GpuSlots ShapeOf(const std::string& physical_gpu,
                               const std::vector<mdev::Vgpu>& vgpus) const;

 private:
  struct TypeFacts {
    uint64_t framebuffer_mib = 0;
    uint32_t max_instances = 0;
  };
  const TypeFacts* Facts(const std::string& physical_gpu, const std::string& type_id) const;
  // The probe's max instances for the types whose description gave none.
  void TakeMaxInstances(const std::string& physical_gpu, const GpuShapeFacts& facts);

  std::map<std::string, scheduling::Occupancy> occupancy_;          // by GPU
  std::map<std::string, GpuShapeFacts> shapes_;                     // by GPU, where probed
  std::map<std::pair<std::string, std::string>, TypeFacts> types_;  // by (GPU, type)
};

}  // namespace kvgpu::deviceplugin
