// The preempt verb of kube-scheduler's extender protocol: ExtenderPreemptionArgs read (victims as
// whole pods or as MetaPods, by node) and ExtenderPreemptionResult written. The filter,
// prioritize and bind verbs are in protocol.cpp.
#include <string>
#include <utility>

#include "extender/protocol.h"
#include "extender/protocol_internal.h"
#include "kube/pod.h"

namespace kvgpu::extender {

using nlohmann::json;

namespace {

Result<Victim> ParseVictim(const json& item, bool meta, const std::string& where) {
  if (meta) {
    const json* uid = Field(item, "UID");
    if (uid == nullptr || !uid->is_string() || uid->get<std::string>().empty()) {
      return Status::Invalid(where + ": a MetaPod without UID");
    }
    return Victim{uid->get<std::string>(), std::nullopt};
  }
  Result<kube::PodInfo> pod = kube::ParsePod(item);
  if (!pod.ok()) return Status::Invalid(where + ": " + pod.status().message());
  const std::string uid = item["metadata"]["uid"].get<std::string>();
  return Victim{uid, std::move(*pod)};
}

Result<NodeVictims> ParseNodeVictims(const json& value, bool meta, const std::string& where) {
  if (!value.is_object()) return Status::Invalid(where + ": not an object");
  NodeVictims victims;
  if (const json* count = Field(value, "NumPDBViolations"); count != nullptr && !count->is_null()) {
    if (!count->is_number_integer())
      return Status::Invalid(where + ".NumPDBViolations: not an integer");
    victims.num_pdb_violations = count->get<int64_t>();
  }
  const json* pods = Field(value, "Pods");
  if (pods == nullptr || pods->is_null()) return victims;
  if (!pods->is_array()) return Status::Invalid(where + ".Pods: not a list");
  for (const json& item : *pods) {
    Result<Victim> victim = ParseVictim(item, meta, where + ".Pods");
    if (!victim.ok()) return victim.status();
    victims.pods.push_back(std::move(*victim));
  }
  return victims;
}

}  // namespace

Result<PreemptionArgs> ParsePreemptionArgs(const json& body) {
  if (!body.is_object()) return Status::Invalid("ExtenderPreemptionArgs: not a JSON object");
  const json* pod = Field(body, "Pod");
  if (pod == nullptr || !pod->is_object())
    return Status::Invalid("ExtenderPreemptionArgs.Pod: missing");
  Result<kube::PodInfo> parsed = kube::ParsePod(*pod);
  if (!parsed.ok())
    return Status::Invalid("ExtenderPreemptionArgs.Pod: " + parsed.status().message());
  PreemptionArgs args;
  args.pod = std::move(*parsed);
  // Go marshals the map it does not fill as null.
  const json* metas = Field(body, "NodeNameToMetaVictims");
  const json* wholes = Field(body, "NodeNameToVictims");
  args.meta = metas != nullptr && !metas->is_null();
  const json* map = args.meta ? metas : wholes;
  const std::string name = args.meta ? "NodeNameToMetaVictims" : "NodeNameToVictims";
  if (map == nullptr || map->is_null()) return args;  // no candidate node
  if (!map->is_object())
    return Status::Invalid("ExtenderPreemptionArgs." + name + ": not an object");
  for (const auto& [node, value] : map->items()) {
    Result<NodeVictims> victims =
        ParseNodeVictims(value, args.meta, "ExtenderPreemptionArgs." + name + "[" + node + "]");
    if (!victims.ok()) return victims.status();
    args.nodes.emplace(node, std::move(*victims));
  }
  return args;
}

json PreemptionResult(const std::map<std::string, NodeVictims>& nodes) {
  json map = json::object();
  for (const auto& [node, victims] : nodes) {
    json pods = json::array();
    for (const Victim& victim : victims.pods) pods.push_back({{"UID", victim.uid}});
    map[node] = {{"Pods", std::move(pods)}, {"NumPDBViolations", victims.num_pdb_violations}};
  }
  return {{"NodeNameToMetaVictims", std::move(map)}};
}

}  // namespace kvgpu::extender
