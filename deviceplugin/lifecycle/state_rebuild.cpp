#include "deviceplugin/lifecycle/state_rebuild.h"

#include <map>
#include <set>

#include "deviceplugin/model/allocation_env.h"
#include "deviceplugin/model/device_id.h"
#include "kubelet/deviceplugin/v1beta1/api.pb.h"

namespace kvgpu::deviceplugin {
Rebuilt RebuildRecords(const kubelet::Checkpoint& checkpoint, const mdev::Inventory& inventory,
                       int64_t now_unix_ms) {
  Rebuilt out;
  std::set<std::string> taken;
  // A reused device ID has several entries, but only its newest vGPU can still exist (the old one
  // is removed before the new one is made), so the entries' order does not matter.
  for (auto entry = checkpoint.entries.begin(); entry != checkpoint.entries.end(); ++entry) {
    v1beta1::ContainerAllocateResponse response;
    if (entry->alloc_resp.empty() || !response.ParseFromString(entry->alloc_resp)) continue;
    std::map<std::string, std::string> envs(response.envs().begin(), response.envs().end());
    std::vector<std::string> notes;
    std::vector<ParsedEnv> parsed = ParseAllocationEnv(envs, notes);
    for (const std::string& note : notes)
      out.notes.push_back("pod " + entry->pod_uid + ": " + note);
    for (const ParsedEnv& resource : parsed) {
      const std::vector<std::string>& ids = resource.vgpus.device_ids;
      const std::vector<std::string>& uuids = resource.vgpus.vgpu_ids;
      for (size_t i = 0; i < ids.size(); ++i) {
        const std::string& id = ids[i];
        const std::string& vgpu_id = uuids[i];
        if (taken.contains(id) || taken.contains(vgpu_id)) continue;
        const mdev::Vgpu* vgpu = inventory.FindVgpu(vgpu_id);
        if (vgpu == nullptr) continue;  // gone already: nothing to own
        std::optional<DeviceKey> key = ParseDeviceId(id, vgpu->parent, vgpu->type_id);
        if (!key) {
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
        record.slot = key->slot;
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
