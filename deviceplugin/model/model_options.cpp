#include "deviceplugin/model/model_options.h"

#include "common/ascii.h"

namespace kvgpu::deviceplugin {

const PinRule* FindPin(const ModelOptions& options, const std::string& physical_gpu,
                       const std::vector<std::string>& models) {
  for (const PinRule& rule : options.pinning) {
    if (rule.pci_address && EqualsIgnoringAsciiCase(*rule.pci_address, physical_gpu)) return &rule;
  }
  for (const PinRule& rule : options.pinning) {
    if (!rule.model) continue;
    for (const std::string& model : models) {
      if (EqualsIgnoringAsciiCase(*rule.model, model)) return &rule;
    }
  }
  for (const PinRule& rule : options.pinning) {
    if (rule.all) return &rule;
  }
  return nullptr;
}

GpuRules RulesFor(const mdev::Inventory& inventory, const ModelOptions& options) {
  return GpuRules(inventory, options.occupancy, options.mode_probe.get(),
                  options.limit_probe.get());
}

ModelOptions ForStateVersion(ModelOptions options, bool publish, int version,
                             std::shared_ptr<const GpuModeProbe> probe) {
  options.limit_probe = probe;
  options.mode_probe = !publish || version >= 3 ? std::move(probe) : nullptr;
  if (publish && version < 2) options.occupancy = OccupancySetting::kStrict;
  return options;
}

}  // namespace kvgpu::deviceplugin
