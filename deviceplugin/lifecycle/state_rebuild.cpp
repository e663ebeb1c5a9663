#include "deviceplugin/lifecycle/state_rebuild.h"

#include <spdlog/spdlog.h>

#include <map>
#include <set>

#include "common/clock.h"
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

Status RebuildCorruptState(JsonFileStateStore& store, const Status& corrupt, mdev::Backend& backend,
                           const std::filesystem::path& kubelet_dir) {
  std::filesystem::path kept = store.file();
  kept += ".corrupt-" + std::to_string(UnixNowMs() / 1000);
  std::error_code ec;
  std::filesystem::rename(store.file(), kept, ec);
  if (ec) {
    return Status::Error(ErrorCode::kIo, "state file corrupt (" + corrupt.message() +
                                             ") and cannot be moved aside: " + ec.message());
  }
  spdlog::error(
      "STATE FILE CORRUPT: {}; moved to {}; rebuilding from kubelet's checkpoint and "
      "sysfs. vGPUs no answer of ours names are left alone.",
      corrupt.message(), kept.string());
  Result<mdev::Inventory> inventory = backend.Scan();
  if (!inventory.ok()) return inventory.status();
  auto checkpoint = kubelet::ReadCheckpoint(kubelet::CheckpointPath(kubelet_dir));
  kubelet::Checkpoint empty;
  if (!checkpoint.ok()) {
    spdlog::error(
        "kubelet checkpoint unusable for the rebuild: {}; every existing vGPU is "
        "treated as someone else's",
        checkpoint.status().message());
  }
  Rebuilt rebuilt = RebuildRecords(checkpoint.ok() ? *checkpoint : empty, *inventory, UnixNowMs());
  for (const std::string& note : rebuilt.notes) spdlog::warn("state rebuild: {}", note);
  spdlog::error("state rebuilt: {} vGPUs recognised as ours, {} existing vGPUs left alone",
                rebuilt.vgpus.size(), inventory->vgpus.size() - rebuilt.vgpus.size());
  return store.Save(rebuilt.vgpus);
}

}  // namespace kvgpu::deviceplugin
