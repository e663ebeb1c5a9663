#include "mdev/model.h"

#include <cctype>

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

std::optional<std::string> PcieRootOfPath(const std::string& sysfs_path) {
  // A path component "pci" + 4 hex digits + ':' + 2 hex digits: the host bridge the kernel names
  // after the root complex's PCI domain and bus.
  auto is_root = [](std::string_view name) {
    if (name.size() != 10 || name.substr(0, 3) != "pci" || name[7] != ':') return false;
    for (size_t i = 3; i < name.size(); ++i) {
      if (i != 7 && !std::isxdigit(static_cast<unsigned char>(name[i]))) return false;
    }
    return true;
  };
  size_t begin = 0;
  while (begin <= sysfs_path.size()) {
    size_t end = sysfs_path.find('/', begin);
    if (end == std::string::npos) end = sysfs_path.size();
    std::string_view name(sysfs_path.data() + begin, end - begin);
    if (is_root(name)) return std::string(name);
    begin = end + 1;
  }
  return std::nullopt;
}

const Vgpu* Inventory::FindVgpu(const std::string& id) const {
  for (const auto& vgpu : vgpus) {
    if (vgpu.id == id) return &vgpu;
  }
  return nullptr;
}

}  // namespace kvgpu::mdev
