// The probe choice, the sysfs types a probe keys by, and the simulator's file (the NVML probe is
// gpu_mode_probe_nvml.cpp).
#include "mdev/gpu_mode_probe.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

namespace kvgpu::mdev {

const char* GpuModeProbeChoiceName(GpuModeProbeChoice choice) {
  switch (choice) {
    case GpuModeProbeChoice::kNvml:
      return "nvml";
    case GpuModeProbeChoice::kSim:
      return "sim";
    case GpuModeProbeChoice::kNone:
      break;
  }
  return "none";
}

std::optional<GpuModeProbeChoice> ParseGpuModeProbeChoice(std::string_view name) {
  for (auto c : {GpuModeProbeChoice::kNone, GpuModeProbeChoice::kNvml, GpuModeProbeChoice::kSim}) {
    if (name == GpuModeProbeChoiceName(c)) return c;
  }
  return std::nullopt;
}

std::shared_ptr<const GpuModeProbe> MakeGpuModeProbe(GpuModeProbeChoice choice,
                                                     const std::filesystem::path& sysfs_root) {
  switch (choice) {
    case GpuModeProbeChoice::kNvml:
      return std::make_shared<NvmlGpuModeProbe>();
    case GpuModeProbeChoice::kSim:
      // The simulator's modes file sits at the top of its tree (sim/kernel_model.h kModesFile).
      return std::make_shared<SimGpuModeProbe>(sysfs_root / "sim-gpu-modes.json");
    case GpuModeProbeChoice::kNone:
      break;
  }
  return nullptr;
}

// --- the simulator's file ---

namespace {

std::optional<uint32_t> U32(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number_unsigned() ||
      it->get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
    return std::nullopt;
  }
  return it->get<uint32_t>();
}

}  // namespace

std::vector<SysfsTypeName> SysfsTypesOf(const Inventory& inventory,
                                        const std::string& physical_gpu) {
  std::vector<SysfsTypeName> types;
  auto add = [&](const std::string& id, const std::optional<std::string>& name) {
    for (SysfsTypeName& t : types) {
      if (t.id != id) continue;
      if (t.name.empty() && name) t.name = *name;
      return;
    }
    types.push_back({id, name.value_or("")});
  };
  for (const Parent& parent : inventory.parents) {
    if (parent.physical_gpu != physical_gpu) continue;
    for (const VgpuType& type : parent.types) add(type.id, type.name);
  }
  // A full vendor-VFIO card lists no type on any VF: its vGPUs still name theirs.
  for (const Vgpu& vgpu : inventory.vgpus) {
    if (vgpu.physical_gpu == physical_gpu) add(vgpu.type_id, vgpu.type_name);
  }
  return types;
}

std::optional<GpuShapeFacts> SimGpuModeProbe::Probe(const std::string& pci_address,
                                                    const std::vector<SysfsTypeName>&) const {
  std::ifstream in(file_);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("gpus") || !doc["gpus"].is_array()) {
    return std::nullopt;
  }
  for (const nlohmann::json& gpu : doc["gpus"]) {
    if (!gpu.is_object() || gpu.value("address", "") != pci_address) continue;
    GpuShapeFacts facts;
    if (gpu.contains("mig") && gpu["mig"].is_boolean()) facts.mig = gpu["mig"].get<bool>();
    if (gpu.contains("heterogeneous") && gpu["heterogeneous"].is_boolean()) {
      facts.heterogeneous = gpu["heterogeneous"].get<bool>();
    }
    if (gpu.contains("gpuInstances") && gpu["gpuInstances"].is_array()) {
      facts.gpu_instances_known = true;
      for (const nlohmann::json& gi : gpu["gpuInstances"]) {
        auto id = U32(gi, "id");
        auto profile = U32(gi, "profileId");
        if (!id || !profile) return std::nullopt;  // a file we cannot read whole says nothing
        facts.gpu_instances.push_back({*id, *profile});
      }
      std::sort(facts.gpu_instances.begin(), facts.gpu_instances.end(),
                [](const auto& a, const auto& b) { return a.id < b.id; });
    }
    for (const nlohmann::json& type : gpu.value("types", nlohmann::json::array())) {
      if (!type.is_object() || !type.contains("id") || !type["id"].is_string()) continue;
      GpuShapeFacts::TypeFacts t;
      if (type.contains("placementIds") && type["placementIds"].is_array()) {
        auto size = U32(type, "placementSize");
        if (!size || *size == 0) return std::nullopt;
        t.placement_size = *size;
        for (const nlohmann::json& id : type["placementIds"]) {
          if (!id.is_number_unsigned()) return std::nullopt;
          t.placement_ids.push_back(id.get<uint32_t>());
        }
      }
      if (type.contains("gpuInstanceProfileId")) {
        t.gi_profile = U32(type, "gpuInstanceProfileId");
        auto max = U32(type, "maxPerGpuInstance");
        if (!t.gi_profile || !max) return std::nullopt;
        t.max_per_gi = *max;
      }
      if (type.contains("maxInstances")) {
        auto max = U32(type, "maxInstances");
        if (!max) return std::nullopt;
        t.max_instances = *max;
      }
      // A type with none of these says nothing (as NVML's probe leaves it out).
      if (!t.placement_ids.empty() || t.gi_profile || t.max_instances > 0) {
        facts.types[type["id"].get<std::string>()] = std::move(t);
      }
    }
    for (const nlohmann::json& vgpu : gpu.value("vgpus", nlohmann::json::array())) {
      if (!vgpu.is_object() || !vgpu.contains("id") || !vgpu["id"].is_string()) continue;
      GpuShapeFacts::VgpuFacts& v = facts.vgpus[vgpu["id"].get<std::string>()];
      v.type = vgpu.value("type", "");
      v.placement = U32(vgpu, "placementId");
      v.gpu_instance = U32(vgpu, "gpuInstanceId");
    }
    return facts;
  }
  return std::nullopt;
}

}  // namespace kvgpu::mdev
