// What the model needs to know of the operator's wishes: which types are offered, how they are
// named, how multi-vGPU requests spread, whether CDI specs are written. The daemon's Config
// (deviceplugin/config.h) extends these with what only a process has (backend, loops, publishing),
// so every front end (the device plugin API today, DRA next) hands the model the same options.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "deviceplugin/model/occupancy.h"
#include "deviceplugin/model/resource_naming.h"

namespace kvgpu::deviceplugin {

// Static mode: a GPU matching the rule offers only `type`.
struct PinRule {
  std::optional<std::string> pci_address;  // the GPU (or its PF for SR-IOV): "0000:3b:00.0"
  std::optional<std::string> model;        // "T4" (from the type names) or a PCI device id "0x1eb8"
  bool all = false;
  std::string type_id;  // "nvidia-222"

  bool operator==(const PinRule&) const = default;
};

struct ModelOptions {
  NamingOptions naming;
  std::vector<std::string> allowed_types;  // empty: every type the node shows
  std::vector<PinRule> pinning;            // first match wins, by address, then model, then all
  bool spread_across_gpus = false;         // multi-vGPU requests: distinct physical GPUs first
  // How NVIDIA GPUs share (occupancy.h): told from the kernel's counts, or set.
  OccupancySetting occupancy = OccupancySetting::kAuto;
  // Where the GPUs' MIG and mixed-size modes are read (mdev/gpu_mode_probe.h); null: the counts
  // alone.
  std::shared_ptr<const GpuModeProbe> mode_probe;
  // Where each type's max instances are read when mode_probe is not used (the same probe): the
  // cap on vendor-VFIO lists, whose types have no description. Null: the kernel's word for one.
  std::shared_ptr<const GpuModeProbe> limit_probe;
  bool cdi_enabled = false;
  std::filesystem::path cdi_dir = "/var/run/cdi";
};

// The node's GPU rules as these options read them (occupancy.h): every part of the model that
// places, lists or publishes builds them here.
GpuRules RulesFor(const mdev::Inventory& inventory, const ModelOptions& options);

// The options the model places by while the published state is `version` (publish false: none is
// published): the extender reads the mode probe's placements and GPU instances only from version
// 3 on, so below it the plugin places as the extender assumes, by the kernel's counts, and with
// version 1 (the per-type lock alone) by the per-type lock. The probe's max instances are used at
// every version: they only lower what is promised. docs/scheduler-extender.md, "What each
// version promises".
ModelOptions ForStateVersion(ModelOptions options, bool publish, int version,
                             std::shared_ptr<const GpuModeProbe> probe);

// The rule that applies to a GPU, if any.
const PinRule* FindPin(const ModelOptions& options, const std::string& physical_gpu,
                       const std::vector<std::string>& models);

}  // namespace kvgpu::deviceplugin
