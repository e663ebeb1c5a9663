#include "kube/node.h"

namespace kvgpu::kube {

namespace {

std::map<std::string, std::string> StringMap(const nlohmann::json& object) {
  std::map<std::string, std::string> out;
  if (!object.is_object()) return out;
  for (const auto& [key, value] : object.items()) {
    if (value.is_string()) out[key] = value.get<std::string>();
  }
  return out;
}

std::string NodePath(const std::string& name) {
  return "/api/v1/nodes/" + QueryEscape(name);
}

}  // namespace

const NodeCondition* NodeInfo::Condition(const std::string& type) const {
  for (const auto& condition : conditions) {
    if (condition.type == type) return &condition;
  }
  return nullptr;
}

Result<NodeInfo> ParseNode(const nlohmann::json& node) {
  if (!node.is_object() || !node.contains("metadata") || !node["metadata"].is_object() ||
      !node["metadata"].contains("name") || !node["metadata"]["name"].is_string()) {
    return Status::Error(ErrorCode::kDecode, "a Node without metadata.name");
  }
  const auto& meta = node["metadata"];
  NodeInfo info;
  info.name = meta["name"].get<std::string>();
  info.labels = StringMap(meta.value("labels", nlohmann::json::object()));
  info.annotations = StringMap(meta.value("annotations", nlohmann::json::object()));
  const auto status = node.value("status", nlohmann::json::object());
  if (!status.is_object()) return info;
  info.allocatable = StringMap(status.value("allocatable", nlohmann::json::object()));
  for (const auto& c : status.value("conditions", nlohmann::json::array())) {
    if (!c.is_object()) continue;
    info.conditions.push_back({c.value("type", ""), c.value("status", ""), c.value("reason", ""),
                               c.value("message", ""), c.value("lastTransitionTime", "")});
  }
  return info;
}

Result<NodeInfo> GetNode(ApiTransport& api, const std::string& name, Canceller* cancel) {
  auto answer = api.Get(NodePath(name), cancel);
  if (!answer.ok()) return answer.status();
  return ParseNode(answer.value());
}

nlohmann::json ConditionPatch(const NodeCondition& condition, const NodeInfo& current,
                              std::chrono::system_clock::time_point now) {
  const std::string stamp = Rfc3339(now);
  const NodeCondition* before = current.Condition(condition.type);
  const bool changed = before == nullptr || before->status != condition.status ||
                       before->last_transition_time.empty();
  nlohmann::json entry = {{"type", condition.type},
                          {"status", condition.status},
                          {"reason", condition.reason},
                          {"message", condition.message},
                          {"lastHeartbeatTime", stamp},
                          {"lastTransitionTime", changed ? stamp : before->last_transition_time}};
  return {{"status", {{"conditions", nlohmann::json::array({entry})}}}};
}

Status SetNodeCondition(ApiTransport& api, const NodeInfo& current, const NodeCondition& condition,
                        std::chrono::system_clock::time_point now, Canceller* cancel) {
  if (condition.type.empty() || (condition.status != "True" && condition.status != "False" &&
                                 condition.status != "Unknown")) {
    return Status::Error(ErrorCode::kInvalid,
                         "a node condition needs a type and a status of "
                         "True, False or Unknown, not \"" +
                             condition.status + "\"");
  }
  auto answer =
      api.Patch(NodePath(current.name) + "/status", ConditionPatch(condition, current, now),
                "application/strategic-merge-patch+json", cancel);
  return answer.ok() ? Status() : answer.status();
}

Status SetNodeLabel(ApiTransport& api, const std::string& node, const std::string& key,
                    const std::string& value, Canceller* cancel) {
  if (node.empty() || key.empty() || value.empty()) {
    return Status::Error(ErrorCode::kInvalid, "a node label needs a node, a key and a value");
  }
  const nlohmann::json patch = {{"metadata", {{"labels", {{key, value}}}}}};
  auto answer = api.Patch(NodePath(node), patch, "application/merge-patch+json", cancel);
  return answer.ok() ? Status() : answer.status();
}

}  // namespace kvgpu::kube
