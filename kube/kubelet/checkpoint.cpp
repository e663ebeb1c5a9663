#include "kube/kubelet/checkpoint.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/log_safe.h"
#include "kube/config.h"

namespace kvgpu::kubelet {

namespace {

Status Bad(const std::string& what) {
  return Status::Error(ErrorCode::kDecode, "checkpoint: " + what);
}

bool StringList(const nlohmann::json& value, std::vector<std::string>* out) {
  if (value.is_null()) return true;  // Go writes a nil slice as null
  if (!value.is_array()) return false;
  for (const auto& id : value) {
    if (!id.is_string()) return false;
    out->push_back(PeerName(id.get<std::string>()));
  }
  return true;
}

Result<CheckpointEntry> ParseEntry(const nlohmann::json& json, size_t index,
                                   CheckpointFormat* format) {
  const std::string where = "PodDeviceEntries[" + std::to_string(index) + "]";
  if (!json.is_object()) return Bad(where + " is not an object");
  CheckpointEntry entry;
  for (const auto& [key, field] :
       {std::pair{"PodUID", &entry.pod_uid}, std::pair{"ContainerName", &entry.container_name},
        std::pair{"ResourceName", &entry.resource_name}}) {
    if (!json.contains(key) || !json[key].is_string() || json[key].get<std::string>().empty()) {
      return Bad(where + "." + key + " is missing or not a string");
    }
    *field = PeerName(json[key].get<std::string>());  // kubelet's word: escaped where it enters
  }
  const auto ids = json.find("DeviceIDs");
  if (ids == json.end()) return Bad(where + ".DeviceIDs is missing");
  CheckpointFormat entry_format = CheckpointFormat::kEmpty;
  if (ids->is_array()) {
    entry_format = CheckpointFormat::kList;
    if (!StringList(*ids, &entry.device_ids_by_numa[-1])) {
      return Bad(where + ".DeviceIDs holds something other than strings");
    }
  } else if (ids->is_object()) {
    entry_format = CheckpointFormat::kNumaMap;
    for (const auto& [node, list] : ids->items()) {
      std::int64_t numa = 0;
      const auto [end, ec] = std::from_chars(node.data(), node.data() + node.size(), numa);
      if (ec != std::errc() || end != node.data() + node.size()) {
        return Bad(where + ".DeviceIDs has NUMA node \"" + node + "\", not a number");
      }
      if (!StringList(list, &entry.device_ids_by_numa[numa])) {
        return Bad(where + ".DeviceIDs[\"" + node + "\"] is not a list of strings");
      }
    }
  } else if (!ids->is_null()) {
    return Bad(where + ".DeviceIDs is neither a list nor a map");
  }
  if (entry_format != CheckpointFormat::kEmpty) {
    if (*format != CheckpointFormat::kEmpty && *format != entry_format) {
      return Bad(where + " mixes the list and the NUMA-map forms of DeviceIDs");
    }
    *format = entry_format;
  }
  const auto resp = json.find("AllocResp");
  if (resp != json.end() && !resp->is_null()) {
    if (!resp->is_string()) return Bad(where + ".AllocResp is not a string");
    auto bytes = kube::DecodeBase64(resp->get<std::string>());
    if (!bytes.ok()) return Bad(where + ".AllocResp: " + bytes.status().message());
    entry.alloc_resp = std::move(bytes.value());
  }
  return entry;
}

}  // namespace

std::vector<std::string> CheckpointEntry::DeviceIds() const {
  std::vector<std::string> all;
  for (const auto& [numa, ids] : device_ids_by_numa) all.insert(all.end(), ids.begin(), ids.end());
  return all;
}

std::vector<const CheckpointEntry*> Checkpoint::EntriesWith(const std::string& resource,
                                                            const std::string& device_id) const {
  std::vector<const CheckpointEntry*> found;
  for (const auto& entry : entries) {
    if (entry.resource_name != resource) continue;
    for (const auto& [numa, ids] : entry.device_ids_by_numa) {
      if (std::find(ids.begin(), ids.end(), device_id) != ids.end()) {
        found.push_back(&entry);
        break;
      }
    }
  }
  return found;
}

Result<Checkpoint> ParseCheckpoint(const std::string& text) {
  if (text.empty()) return Bad("the file is empty");
  const auto json = nlohmann::json::parse(text, nullptr, false);
  if (json.is_discarded()) return Bad("not valid JSON (truncated or garbage)");
  if (!json.is_object()) return Bad("not a JSON object");
  const auto data = json.find("Data");
  if (data == json.end() || !data->is_object()) return Bad("no Data object");
  const auto sum = json.find("Checksum");
  if (sum == json.end() || !sum->is_number_unsigned()) return Bad("no Checksum number");
  Checkpoint checkpoint;
  checkpoint.checksum = sum->get<std::uint64_t>();
  const auto entries = data->find("PodDeviceEntries");
  if (entries != data->end() && !entries->is_null()) {
    if (!entries->is_array()) return Bad("Data.PodDeviceEntries is not a list");
    for (size_t i = 0; i < entries->size(); ++i) {
      auto entry = ParseEntry((*entries)[i], i, &checkpoint.format);
      if (!entry.ok()) return entry.status();
      checkpoint.entries.push_back(std::move(entry.value()));
    }
  }
  const auto registered = data->find("RegisteredDevices");
  if (registered != data->end() && !registered->is_null()) {
    if (!registered->is_object()) return Bad("Data.RegisteredDevices is not a map");
    for (const auto& [resource, ids] : registered->items()) {
      if (!StringList(ids, &checkpoint.registered_devices[resource])) {
        return Bad("Data.RegisteredDevices[\"" + resource + "\"] is not a list of strings");
      }
    }
  }
  return checkpoint;
}

Result<Checkpoint> ReadCheckpoint(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    if (err == ENOENT) return Status::Error(ErrorCode::kGone, path.string() + " does not exist");
    return Status::Error(ErrorCode::kTransport,
                         "cannot open " + path.string() + ": " + std::strerror(err));
  }
  std::ostringstream text;
  text << in.rdbuf();
  auto checkpoint = ParseCheckpoint(text.str());
  if (!checkpoint.ok()) {
    return Status::Error(checkpoint.status().code(),
                         path.string() + ": " + checkpoint.status().message());
  }
  return checkpoint;
}

std::filesystem::path CheckpointPath(const std::filesystem::path& kubelet_dir) {
  return kubelet_dir / "device-plugins" / "kubelet_internal_checkpoint";
}

}  // namespace kvgpu::kubelet
