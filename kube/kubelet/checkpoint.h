// kubelet's device-manager checkpoint (<kubelet-dir>/device-plugins/kubelet_internal_checkpoint):
// which pod container got which device IDs of which resource. kubelet rewrites it after every
// allocation (temp file + rename) and does not drop a pod's entries when the pod goes, so an
// entry says "was allocated", not "is held".
//
// JSON, field names as kubelet writes them (pkg/kubelet/cm/devicemanager/checkpoint):
//   {"Data": {"PodDeviceEntries": [{"PodUID", "ContainerName", "ResourceName",
//                                   "DeviceIDs", "AllocResp"}],
//             "RegisteredDevices": {"<resource>": ["<id>", ...]}},
//    "Checksum": <uint64>}
// DeviceIDs is a list before Kubernetes 1.20 and a map NUMA node -> list after ("-1" without
// topology). AllocResp is the base64 of the ContainerAllocateResponse protobuf.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvgpu::kubelet {

enum class CheckpointFormat {
  kEmpty,    // no entries, so no telling
  kList,     // before 1.20: DeviceIDs is a list
  kNumaMap,  // 1.20 on: DeviceIDs maps NUMA node -> list
};

struct CheckpointEntry {
  std::string pod_uid;
  std::string container_name;
  std::string resource_name;
  // NUMA node -> IDs; the list format lands under -1, kubelet's "no topology" node.
  std::map<std::int64_t, std::vector<std::string>> device_ids_by_numa;
  std::string alloc_resp;  // the ContainerAllocateResponse bytes, decoded from base64

  // Every device ID of the entry, NUMA nodes in order.
  std::vector<std::string> DeviceIds() const;
};

struct Checkpoint {
  CheckpointFormat format = CheckpointFormat::kEmpty;
  std::vector<CheckpointEntry> entries;
  std::map<std::string, std::vector<std::string>> registered_devices;
  std::uint64_t checksum = 0;  // as written; kubelet's hash of Go's in-memory form, not checked

  // Entries that list `device_id` of `resource`. More than one when kubelet reused an ID and the
  // old pod's entry is still there.
  std::vector<const CheckpointEntry*> EntriesWith(const std::string& resource,
                                                  const std::string& device_id) const;
};

// The file's text; any deviation from the shape above is a kDecode error that says where.
Result<Checkpoint> ParseCheckpoint(const std::string& text);
// A missing file is kNotFound; unreadable kTransport; bad content kDecode.
Result<Checkpoint> ReadCheckpoint(const std::filesystem::path& path);

std::filesystem::path CheckpointPath(const std::filesystem::path& kubelet_dir);

}  // namespace kvgpu::kubelet
