#include "extender/coverage.h"

#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include "common/log_safe.h"

namespace kvgpu::extender {

Result<std::set<std::string>> ManagedResources(const std::string& scheduler_config) {
  YAML::Node doc;
  try {
    doc = YAML::Load(scheduler_config);
  } catch (const YAML::Exception& e) {
    return Status::Error(ErrorCode::kInvalid,
                         std::string("scheduler configuration is not YAML: ") + e.what());
  }
  if (!doc.IsMap() || !doc["extenders"] || !doc["extenders"].IsSequence()) {
    return Status::Error(ErrorCode::kInvalid,
                         "scheduler configuration has no extenders list (a "
                         "KubeSchedulerConfiguration with this extender in `extenders`)");
  }
  std::set<std::string> names;
  for (const YAML::Node& extender : doc["extenders"]) {
    const YAML::Node resources = extender["managedResources"];
    if (!resources || !resources.IsSequence()) continue;
    for (const YAML::Node& resource : resources) {
      if (resource.IsMap() && resource["name"] && resource["name"].IsScalar()) {
        names.insert(resource["name"].as<std::string>());
      }
    }
  }
  return names;
}

std::set<std::string> AdvertisedResources(const nlohmann::json& node, const std::string& prefix) {
  std::set<std::string> out;
  const nlohmann::json* allocatable = nullptr;
  if (auto status = node.find("status"); status != node.end() && status->is_object()) {
    if (auto a = status->find("allocatable"); a != status->end() && a->is_object())
      allocatable = &*a;
  }
  if (allocatable == nullptr) return out;
  for (const auto& [name, value] : allocatable->items()) {
    if (name.rfind(prefix, 0) == 0) out.insert(name);
  }
  return out;
}

Coverage::Coverage(std::set<std::string> managed, std::string prefix,
                   prometheus::Registry& registry)
    : managed_(std::move(managed)),
      prefix_(std::move(prefix)),
      gauge_(prometheus::BuildGauge()
                 .Name("kvgpu_scheduler_extender_unmanaged_resource_nodes")
                 .Help("Nodes advertising a vGPU resource that kube-scheduler's managedResources "
                       "does not send to the extender, by resource")
                 .Register(registry)) {}

void Coverage::Record(const nlohmann::json& node) {
  std::set<std::string> missing;
  for (const std::string& resource : AdvertisedResources(node, prefix_)) {
    if (!managed_.contains(resource)) missing.insert(resource);
  }
  if (missing.empty()) return;
  unmanaged_by_node_[node.value("/metadata/name"_json_pointer, std::string())] = std::move(missing);
}

void Coverage::SyncNodes(const std::vector<nlohmann::json>& nodes) {
  std::lock_guard lock(mutex_);
  unmanaged_by_node_.clear();
  for (const nlohmann::json& node : nodes) Record(node);
  Publish();
}

void Coverage::NodeChanged(kube::WatchEventType type, const nlohmann::json& node) {
  const std::string name = node.value("/metadata/name"_json_pointer, std::string());
  std::lock_guard lock(mutex_);
  unmanaged_by_node_.erase(name);
  if (type != kube::WatchEventType::kDeleted) Record(node);
  Publish();
}

std::map<std::string, std::set<std::string>> Coverage::Unmanaged() const {
  std::lock_guard lock(mutex_);
  std::map<std::string, std::set<std::string>> out;
  for (const auto& [node, resources] : unmanaged_by_node_) {
    for (const std::string& resource : resources) out[resource].insert(node);
  }
  return out;
}

void Coverage::Publish() {
  std::map<std::string, double> counts;
  for (const std::string& resource : labelled_) counts[resource] = 0;
  for (const auto& [node, resources] : unmanaged_by_node_) {
    for (const std::string& resource : resources) {
      counts[resource] += 1;
      if (reported_.insert(resource).second) {
        spdlog::warn(
            "node {} advertises {}, which kube-scheduler's managedResources does not send to "
            "this extender: its pods are placed on counts alone and kubelet may fail them; add it "
            "to managedResources",
            LogSafe(node), LogSafe(resource));
      }
    }
  }
  for (const auto& [resource, count] : counts) {
    gauge_.Add({{"resource", resource}}).Set(count);
    labelled_.insert(resource);
  }
}

}  // namespace kvgpu::extender
