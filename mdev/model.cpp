#include "mdev/model.h"

namespace kvgpu::mdev {

const char* FlavourName(Flavour flavour) {
  return flavour == Flavour::kMdev ? "mdev" : "vendor-vfio";
}

const Parent* Inventory::FindParent(const std::string& name) const {
  for (const auto& parent : parents) {
    if (parent.name == name) return &parent;
  }
  return nullptr;
}

const Vgpu* Inventory::FindVgpu(const std::string& id) const {
  for (const auto& vgpu : vgpus) {
    if (vgpu.id == id) return &vgpu;
  }
  return nullptr;
}

}  // namespace kvgpu::mdev
