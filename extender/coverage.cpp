#include "extender/coverage.h"

#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>

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
                   prometheus::Registry& registry, kube::EventRecorder* events, EventBudget budget,
                   Clock now)
    : managed_(std::move(managed)),
      prefix_(std::move(prefix)),
      gauge_(prometheus::BuildGauge()
                 .Name("kvgpu_scheduler_extender_unmanaged_resource_nodes")
                 .Help("Nodes advertising a vGPU resource that kube-scheduler's managedResources "
                       "does not send to the extender, by resource")
                 .Register(registry)),
      events_(events),
      budget_(budget),
      now_(now ? std::move(now) : Clock([] { return std::chrono::steady_clock::now(); })),
      tokens_(budget.burst),
      refilled_(now_()) {}

void Coverage::Record(const nlohmann::json& node) {
  std::set<std::string> missing;
  for (const std::string& resource : AdvertisedResources(node, prefix_)) {
    if (!managed_.contains(resource)) missing.insert(resource);
  }
  if (missing.empty()) return;
  unmanaged_by_node_[node.value("/metadata/name"_json_pointer, std::string())] = std::move(missing);
}

void Coverage::SyncNodes(const std::vector<nlohmann::json>& nodes) {
  std::unique_lock lock(mutex_);
  unmanaged_by_node_.clear();
  for (const nlohmann::json& node : nodes) Record(node);
  std::vector<Pending> pending = Publish();
  lock.unlock();
  Post(pending);
}

void Coverage::NodeChanged(kube::WatchEventType type, const nlohmann::json& node) {
  const std::string name = node.value("/metadata/name"_json_pointer, std::string());
  std::unique_lock lock(mutex_);
  unmanaged_by_node_.erase(name);
  if (type != kube::WatchEventType::kDeleted) Record(node);
  std::vector<Pending> pending = Publish();
  lock.unlock();
  Post(pending);
}

std::map<std::string, std::set<std::string>> Coverage::Unmanaged() const {
  std::lock_guard lock(mutex_);
  std::map<std::string, std::set<std::string>> out;
  for (const auto& [node, resources] : unmanaged_by_node_) {
    for (const std::string& resource : resources) out[resource].insert(node);
  }
  return out;
}

bool Coverage::TakeToken() {
  const auto now = now_();
  if (budget_.every.count() > 0 && now > refilled_) {
    const double earned = std::chrono::duration<double>(now - refilled_) /
                          std::chrono::duration<double>(budget_.every);
    tokens_ = std::min(static_cast<double>(budget_.burst), tokens_ + earned);
  }
  refilled_ = now;
  if (tokens_ < 1) return false;
  tokens_ -= 1;
  return true;
}

void Coverage::Post(const std::vector<Pending>& pending) {
  for (const Pending& p : pending) {
    const Status sent = events_->Record(
        kube::ObjectRef::Node(p.node), kube::EventType::kWarning, kBypassReason,
        "this node advertises " + p.resource +
            ", which kube-scheduler's managedResources does not send to the kata-vgpu scheduler "
            "extender: pods asking for it are placed on counts alone and kubelet may fail them; "
            "add it to managedResources");
    if (!sent.ok()) {
      spdlog::warn("Event {} on node {}: {}", kBypassReason, LogSafe(p.node), sent.message());
    }
  }
}

std::vector<Coverage::Pending> Coverage::Publish() {
  std::vector<Pending> pending;
  if (events_ != nullptr) {
    std::erase_if(told_, [&](const auto& pair) {
      auto it = unmanaged_by_node_.find(pair.first);
      return it == unmanaged_by_node_.end() || !it->second.contains(pair.second);
    });
    for (const auto& [node, resources] : unmanaged_by_node_) {
      for (const std::string& resource : resources) {
        if (told_.contains({node, resource}) || !TakeToken()) continue;
        told_.insert({node, resource});
        pending.push_back({node, resource});
      }
    }
  }
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
  return pending;
}

}  // namespace kvgpu::extender
