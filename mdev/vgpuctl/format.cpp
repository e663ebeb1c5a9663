#include "mdev/vgpuctl/format.h"

#include <algorithm>

namespace kvgpu::vgpuctl {

namespace {

constexpr const char* kNone = "-";

template <typename T>
std::string Cell(const std::optional<T>& value) {
  if (!value) return kNone;
  if constexpr (std::is_same_v<T, std::string>) {
    return value->empty() ? kNone : *value;
  } else {
    return std::to_string(*value);
  }
}

template <typename T>
nlohmann::json OrNull(const std::optional<T>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

}  // namespace

std::string RenderTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(widths[i] - row[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string TypesTable(const mdev::Inventory& inventory) {
  std::vector<std::vector<std::string>> rows = {
      {"PARENT", "GPU", "FLAVOUR", "TYPE", "AVAIL", "NAME", "PROFILE", "FB(MiB)", "MAX"}};
  for (const auto& parent : inventory.parents) {
    for (const auto& type : parent.types) {
      std::optional<uint64_t> framebuffer;
      std::optional<uint32_t> max_instance;
      if (type.nvidia) {
        framebuffer = type.nvidia->framebuffer_mib;
        max_instance = type.nvidia->max_instance;
      }
      std::optional<std::string> profile;
      if (type.profile) profile = type.profile->profile;
      rows.push_back({parent.name, parent.physical_gpu, mdev::FlavourName(parent.flavour), type.id,
                      std::to_string(type.available_instances), Cell(type.name), Cell(profile),
                      Cell(framebuffer), Cell(max_instance)});
    }
  }
  return RenderTable(rows);
}

std::string VgpusTable(const mdev::Inventory& inventory) {
  std::vector<std::vector<std::string>> rows = {
      {"ID", "FLAVOUR", "PARENT", "GPU", "TYPE", "NAME", "IOMMU", "VFIO"}};
  for (const auto& vgpu : inventory.vgpus) {
    rows.push_back({vgpu.id, mdev::FlavourName(vgpu.flavour), vgpu.parent, vgpu.physical_gpu,
                    vgpu.type_id, Cell(vgpu.type_name), Cell(vgpu.iommu_group),
                    vgpu.vfio_device.empty() ? kNone : vgpu.vfio_device});
  }
  return RenderTable(rows);
}

nlohmann::json TypesJson(const mdev::Inventory& inventory) {
  nlohmann::json parents = nlohmann::json::array();
  for (const auto& parent : inventory.parents) {
    nlohmann::json types = nlohmann::json::array();
    for (const auto& type : parent.types) {
      nlohmann::json t = {{"id", type.id},
                          {"name", OrNull(type.name)},
                          {"description", OrNull(type.description)},
                          {"device_api", type.device_api},
                          {"available_instances", type.available_instances},
                          {"profile", nullptr},
                          {"nvidia", nullptr}};
      if (type.profile) {
        t["profile"] = {{"profile", type.profile->profile},
                        {"gpu", type.profile->gpu},
                        {"series", std::string(1, type.profile->series)}};
      }
      if (type.nvidia) {
        t["nvidia"] = {{"framebuffer_mib", OrNull(type.nvidia->framebuffer_mib)},
                       {"max_instance", OrNull(type.nvidia->max_instance)},
                       {"num_heads", OrNull(type.nvidia->num_heads)},
                       {"frl_config", OrNull(type.nvidia->frl_config)},
                       {"max_resolution", OrNull(type.nvidia->max_resolution)}};
      }
      types.push_back(std::move(t));
    }
    parents.push_back({{"name", parent.name},
                       {"flavour", mdev::FlavourName(parent.flavour)},
                       {"pci", parent.is_pci},
                       {"virtual_function", parent.is_virtual_function},
                       {"physical_gpu", parent.physical_gpu},
                       {"vendor_id", OrNull(parent.vendor_id)},
                       {"device_id", OrNull(parent.device_id)},
                       {"driver", OrNull(parent.driver)},
                       {"numa_node", OrNull(parent.numa_node)},
                       {"pcie_root", OrNull(parent.pcie_root)},
                       {"types", std::move(types)}});
  }
  return {{"parents", std::move(parents)}, {"warnings", inventory.warnings}};
}

nlohmann::json VgpuJson(const mdev::Vgpu& vgpu) {
  return {{"id", vgpu.id},
          {"uuid", vgpu.flavour == mdev::Flavour::kMdev ? nlohmann::json(vgpu.id)
                                                        : nlohmann::json(nullptr)},
          {"flavour", mdev::FlavourName(vgpu.flavour)},
          {"parent", vgpu.parent},
          {"physical_gpu", vgpu.physical_gpu},
          {"type_id", vgpu.type_id},
          {"type_name", OrNull(vgpu.type_name)},
          {"iommu_group", OrNull(vgpu.iommu_group)},
          {"persistent", vgpu.persistent},
          {"vfio_device",
           vgpu.vfio_device.empty() ? nlohmann::json(nullptr) : nlohmann::json(vgpu.vfio_device)}};
}

nlohmann::json VgpusJson(const mdev::Inventory& inventory) {
  nlohmann::json vgpus = nlohmann::json::array();
  for (const auto& vgpu : inventory.vgpus) vgpus.push_back(VgpuJson(vgpu));
  return {{"vgpus", std::move(vgpus)}, {"warnings", inventory.warnings}};
}

}  // namespace kvgpu::vgpuctl
