#include "deviceplugin/state_rebuild.h"

#include <map>
#include <set>

#include "deviceplugin/device_id.h"
#include "kubelet/deviceplugin/v1beta1/api.pb.h"

namespace kvgpu::deviceplugin {
namespace {

std::vector<std::string> Split(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool EndsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Rebuilt RebuildRecords(const kubelet::Checkpoint& checkpoint, const mdev::Inventory& inventory,
                       int64_t now_unix_ms) {
  Rebuilt out;
  std::set<std::string> taken;
  // A reused device ID has several entries, but only its newest vGPU can still exist (the old one
  // is removed before the new one is made), so the entries' order does not matter.
  for (auto entry = checkpoint.entries.begin(); entry != checkpoint.entries.end(); ++entry) {
    v1beta1::ContainerAllocateResponse response;
    if (entry->alloc_resp.empty() || !response.ParseFromString(entry->alloc_resp)) continue;
    const auto& envs = response.envs();
    for (const auto& [name, ids_text] : envs) {
      if (name.rfind("KVGPU_", 0) != 0 || !EndsWith(name, "_DEVICE_IDS")) continue;
      std::string prefix = name.substr(0, name.size() - std::string("DEVICE_IDS").size());
      auto uuids_it = envs.find(prefix + "UUIDS");
      if (uuids_it == envs.end()) continue;
      std::vector<std::string> ids = Split(ids_text);
      std::vector<std::string> uuids = Split(uuids_it->second);
      if (ids.size() != uuids.size()) {
        out.notes.push_back("pod " + entry->pod_uid + ": " + name + " and UUIDS differ in length");
        continue;
      }
      for (size_t i = 0; i < ids.size(); ++i) {
        const std::string& id = ids[i];
        const std::string& vgpu_id = uuids[i];
        if (taken.contains(id) || taken.contains(vgpu_id)) continue;
        const mdev::Vgpu* vgpu = inventory.FindVgpu(vgpu_id);
        if (vgpu == nullptr) continue;  // gone already: nothing to own
        std::string stem = vgpu->parent + "-" + vgpu->type_id + "-";
        std::string slot = id.rfind(stem, 0) == 0 ? id.substr(stem.size()) : "";
        if (slot.empty() || slot.size() > 6 ||
            slot.find_first_not_of("0123456789") != std::string::npos) {
          out.notes.push_back("device " + id + " does not match vGPU " + vgpu_id + " (" +
                              vgpu->parent + ", " + vgpu->type_id + "); left alone");
          continue;
        }
        CreatedVgpu record;
        record.device_id = id;
        record.resource = entry->resource_name;
        record.vgpu_id = vgpu_id;
        record.parent = vgpu->parent;
        record.physical_gpu = vgpu->physical_gpu;
        record.type_id = vgpu->type_id;
        record.slot = static_cast<uint32_t>(std::stoul(slot));
        record.created_unix_ms = now_unix_ms;
        taken.insert(id);
        taken.insert(vgpu_id);
        out.vgpus.push_back(std::move(record));
      }
    }
  }
  return out;
}

}  // namespace kvgpu::deviceplugin
