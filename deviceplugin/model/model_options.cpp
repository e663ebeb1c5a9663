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

}  // namespace kvgpu::deviceplugin
