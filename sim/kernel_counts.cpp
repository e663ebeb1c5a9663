// What the model shows after each change: the counts a driver rewrites (available_instances,
// creatable_vgpu_types, current_vgpu_type), the modes file only NVML would show, and the driver
// outputs computed at read time. The rules that give the numbers are in kernel_capacity.cpp.
#include <cerrno>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "sim/kernel_model.h"
#include "sim/model_internal.h"
#include "sim/tree.h"

namespace kvgpu::sim {

namespace {

// Replaces an attribute only when its value changes: a create on an A100 touches 140 counts,
// most of which stay as they are, and each replacement is a rename readers may notice.
Status Update(const fs::path& file, const std::string& content, mode_t mode,
              const fs::path& scratch) {
  std::ifstream in(file, std::ios::binary);
  if (in) {
    std::string current((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (current == content) return Status::Ok();
  }
  return tree::PutFile(file, content, mode, scratch);
}

}  // namespace

Status KernelModel::Refresh(size_t gpu) {
  const GpuSpec& spec = profile_.gpus[gpu];
  fs::path scratch = real_root_ / kScratchDir;
  for (const std::string& parent : ParentsOf(gpu)) {
    fs::path dir = DeviceDir(gpu, parent);
    if (spec.kind == GpuKind::kVendorVfio) {
      std::string creatable = kCreatableHeader;
      for (const TypeSpec& type : spec.types) {
        if (Available(gpu, parent, type) == 0) continue;
        std::string id = type.id;
        id.resize(std::max<size_t>(id.size(), 6), ' ');
        creatable += id + ": " + type.name.value_or("") + "\n";
      }
      auto held = vgpus_.find(parent);
      std::string current = held == vgpus_.end() ? "0" : held->second.type;
      Status s =
          Update(dir / "nvidia" / "creatable_vgpu_types", creatable, tree::kReadOnly, scratch);
      if (!s.ok()) return s;
      s = Update(dir / "nvidia" / "current_vgpu_type", current + "\n", tree::kReadWrite, scratch);
      if (!s.ok()) return s;
      continue;
    }
    for (const TypeSpec& type : spec.types) {
      Status s =
          Update(dir / "mdev_supported_types" / type.id / "available_instances",
                 std::to_string(Available(gpu, parent, type)) + "\n", tree::kReadOnly, scratch);
      if (!s.ok()) return s;
    }
  }
  return WriteModes();
}

Status KernelModel::WriteModes() {
  nlohmann::json gpus = nlohmann::json::array();
  for (size_t i = 0; i < profile_.gpus.size(); ++i) {
    const GpuSpec& spec = profile_.gpus[i];
    const GpuState& state = gpus_[i];
    if (spec.kind == GpuKind::kVirtual || !state.present) continue;
    nlohmann::json gpu = {
        {"address", spec.address}, {"mig", state.mig}, {"heterogeneous", state.heterogeneous}};
    nlohmann::json instances = nlohmann::json::array();
    for (const GpuInstance& gi : state.gpu_instances) {
      uint64_t framebuffer = 0;
      for (const auto& p : spec.gi_profiles) {
        if (p.id == gi.profile) framebuffer = p.framebuffer_mib;
      }
      instances.push_back(
          {{"id", gi.id}, {"profileId", gi.profile}, {"framebufferMib", framebuffer}});
    }
    gpu["gpuInstances"] = instances;
    nlohmann::json types = nlohmann::json::array();
    for (const TypeSpec& type : spec.types) {
      // NVML's nvmlVgpuTypeGetMaxInstances: the most the GPU makes of the type in its mode now.
      const uint32_t max = state.heterogeneous && type.max_instances_mixed > 0
                               ? type.max_instances_mixed
                               : type.max_instances;
      nlohmann::json t = {
          {"id", type.id}, {"framebufferMib", type.framebuffer_mib}, {"maxInstances", max}};
      if (!type.placement_ids.empty()) {
        t["placementSize"] = type.placement_size;
        t["placementIds"] = type.placement_ids;
      }
      if (type.gi_profile) {
        t["gpuInstanceProfileId"] = *type.gi_profile;
        t["maxPerGpuInstance"] = type.max_per_gi;
      }
      types.push_back(t);
    }
    gpu["types"] = types;
    nlohmann::json vgpus = nlohmann::json::array();
    for (const auto& [id, vgpu] : vgpus_) {
      if (vgpu.gpu != i) continue;
      nlohmann::json v = {{"id", id}, {"parent", vgpu.parent}, {"type", vgpu.type}};
      if (vgpu.placement) v["placementId"] = *vgpu.placement;
      if (vgpu.gpu_instance) v["gpuInstanceId"] = *vgpu.gpu_instance;
      vgpus.push_back(v);
    }
    gpu["vgpus"] = vgpus;
    gpus.push_back(gpu);
  }
  nlohmann::json doc = {{"gpus", gpus}};
  return Update(real_root_ / kModesFile, doc.dump() + "\n", tree::kReadOnly,
                real_root_ / kScratchDir);
}

Result<std::string> KernelModel::ReadOutput(const Output& output) const {
  auto it = vgpus_.find(output.vgpu);
  if (output.mdev) {
    // Not Applicable until the vGPU is in use (gentlemanautomaton/machina, mdevfs).
    if (it == vgpus_.end() || !it->second.busy || !it->second.placement) {
      return std::string("Not Applicable\n");
    }
    return std::to_string(*it->second.placement) + "\n";
  }
  if (it == vgpus_.end()) {
    return Status::FromErrno(ENXIO, output.vgpu + ": no vGPU on this VF");
  }
  // With no placement or GPU instance (equal-size, strict) the driver's value is not published:
  // 0 is ours.
  std::optional<uint32_t> value = output.placement ? it->second.placement : it->second.gpu_instance;
  return std::to_string(value.value_or(0)) + "\n";
}

}  // namespace kvgpu::sim
