// The few facts about a Node that node agents act on (labels, annotations, allocatable
// resources, conditions), and the two writes they make to it: a condition in its status and a
// label. Nothing here lists or watches Nodes.
#pragma once

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "kube/api_client.h"

namespace kvgpu::kube {

struct NodeCondition {
  std::string type;    // "KataVgpuValidated"
  std::string status;  // "True", "False" or "Unknown"
  std::string reason;  // CamelCase, one word
  std::string message;
  std::string last_transition_time;  // RFC 3339; empty when not set

  bool operator==(const NodeCondition&) const = default;
};

struct NodeInfo {
  std::string name;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  std::map<std::string, std::string> allocatable;  // resource -> quantity as written
  std::vector<NodeCondition> conditions;

  // nullptr when the node has no condition of that type.
  const NodeCondition* Condition(const std::string& type) const;
};

// Needs metadata.name; everything else may be missing (a node kubelet never reported on).
Result<NodeInfo> ParseNode(const nlohmann::json& node);

// GET /api/v1/nodes/<name>.
Result<NodeInfo> GetNode(ApiTransport& api, const std::string& name, Canceller* cancel = nullptr);

// The strategic merge patch of nodes/<name>/status that sets one condition: the API server merges
// status.conditions by `type`, so kubelet's own conditions (Ready, MemoryPressure...) stay as they
// are, where a JSON merge patch would replace the whole list. lastHeartbeatTime is `now`;
// lastTransitionTime is `now` only when the status changes from what `current` holds, as kubelet
// keeps it.
nlohmann::json ConditionPatch(const NodeCondition& condition, const NodeInfo& current,
                              std::chrono::system_clock::time_point now);
// Sends it. A condition without type or with a status other than True/False/Unknown is kInvalid,
// and nothing is sent.
Status SetNodeCondition(ApiTransport& api, const NodeInfo& current, const NodeCondition& condition,
                        std::chrono::system_clock::time_point now, Canceller* cancel = nullptr);

// A JSON merge patch of the node's metadata.labels: `key` set to `value`. An empty key or value
// is kInvalid, and nothing is sent.
Status SetNodeLabel(ApiTransport& api, const std::string& node, const std::string& key,
                    const std::string& value, Canceller* cancel = nullptr);

}  // namespace kvgpu::kube
