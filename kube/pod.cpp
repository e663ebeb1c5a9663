#include "kube/pod.h"

#include "common/log_safe.h"
#include "kube/json_fields.h"

namespace kvgpu::kube {

namespace {

std::map<std::string, std::string> Quantities(const nlohmann::json& resources, const char* key) {
  std::map<std::string, std::string> out;
  if (!resources.is_object() || !resources.contains(key) || !resources[key].is_object()) {
    return out;
  }
  for (const auto& [name, value] : resources[key].items()) {
    // Quantities are strings on the wire, but clients sometimes write bare numbers.
    out[name] = value.is_string() ? value.get<std::string>() : value.dump();
  }
  return out;
}

void AddContainers(const nlohmann::json& spec, const char* key, bool init, PodInfo* pod) {
  if (!spec.is_object() || !spec.contains(key) || !spec[key].is_array()) return;
  for (const auto& c : spec[key]) {
    ContainerInfo container;
    container.name = PeerName(StringField(c, "name"));
    container.init = init;
    if (c.is_object() && c.contains("resources")) {
      container.requests = Quantities(c["resources"], "requests");
      container.limits = Quantities(c["resources"], "limits");
    }
    pod->containers.push_back(std::move(container));
  }
}

}  // namespace

bool PodInfo::Requests(const std::string& resource) const {
  for (const auto& c : containers) {
    if (c.requests.count(resource) != 0 || c.limits.count(resource) != 0) return true;
  }
  return false;
}

Result<PodInfo> ParsePod(const nlohmann::json& pod) {
  if (!pod.is_object() || !pod.contains("metadata") || !pod["metadata"].is_object()) {
    return Status::Error(ErrorCode::kDecode, "pod has no metadata");
  }
  const auto& meta = pod["metadata"];
  PodInfo info;
  // The API server's word, escaped where it enters (common/log_safe.h: PeerName).
  info.uid = PeerName(StringField(meta, "uid"));
  info.namespace_name = PeerName(StringField(meta, "namespace"));
  info.name = PeerName(StringField(meta, "name"));
  if (info.uid.empty() || info.namespace_name.empty() || info.name.empty()) {
    return Status::Error(ErrorCode::kDecode, "pod lacks metadata.uid, .namespace or .name");
  }
  info.resource_version = StringField(meta, "resourceVersion");
  info.deleting = meta.contains("deletionTimestamp") && !meta["deletionTimestamp"].is_null();
  const nlohmann::json empty = nlohmann::json::object();
  const auto& spec = pod.contains("spec") ? pod["spec"] : empty;
  info.node_name = PeerName(StringField(spec, "nodeName"));
  const auto& status = pod.contains("status") ? pod["status"] : empty;
  info.phase = StringField(status, "phase");
  info.nominated_node = PeerName(StringField(status, "nominatedNodeName"));
  AddContainers(spec, "initContainers", true, &info);
  AddContainers(spec, "containers", false, &info);
  return info;
}

}  // namespace kvgpu::kube
