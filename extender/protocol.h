// kube-scheduler's extender protocol (k8s.io/kube-scheduler/extender/v1, types.go): the Go types
// carry no json tags, so the wire names are the Go field names ("Pod", "Nodes", "NodeNames",
// "FailedNodes", "Host", "Score", ...), and Go's decoder matches a name case-insensitively when
// no exact match exists; both hold here. With nodeCacheCapable the scheduler sends only
// NodeNames and expects NodeNames back; without, it sends the Node objects in Nodes.items and
// expects the kept ones back there.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "kube/pod.h"
#include "scheduling/gpu_fit.h"
#include "scheduling/node_vgpu_state.h"

namespace kvgpu::extender {

inline constexpr int64_t kMaxExtenderPriority = 10;  // MaxExtenderPriority in types.go

struct CandidateNode {
  std::string name;
  // The Node object as sent (nodeCacheCapable: false); null when only its name came.
  nlohmann::json object;
  // Its vGPU-state annotation, when the object came and carries one.
  std::optional<std::string> state_annotation;
};

struct ExtenderArgs {
  kube::PodInfo pod;
  std::vector<CandidateNode> nodes;
  bool names_only = false;  // NodeNames was sent (nodeCacheCapable)
};

// kInvalid, naming what is wrong, for anything but the documented shape.
Result<ExtenderArgs> ParseExtenderArgs(const nlohmann::json& body);
// The same from the request's text; kDecode when the text is not JSON. A body of the shape
// kube-scheduler sends with nodeCacheCapable is read by ReadExtenderArgsFast; any other (and any
// error) as before: nlohmann's parser, building the document of all but a top-level NodeNames.
Result<ExtenderArgs> ParseExtenderArgsText(std::string_view body);
// filter's and prioritize's arguments with NodeNames (and Nodes null), read with simdjson's
// On-Demand parser without a document (protocol_fast.cpp): what ParseExtenderArgs gives for the
// body's document, or nullopt for any body it does not take - not JSON, arguments the document
// reader refuses, other shapes, keys in another case or repeated, a quantity that is not a string,
// nesting deeper than 256, a body over kFastArgsMaxBody. Every value of a body it takes is read,
// so it takes only JSON that nlohmann reads.
std::optional<ExtenderArgs> ReadExtenderArgsFast(std::string_view body);
// Larger bodies are read by the document reader (the server refuses bodies over 32 MiB). 8 MiB is
// 100,000 node names of 80 bytes; Kubernetes supports 5,000 nodes.
inline constexpr size_t kFastArgsMaxBody = size_t{8} << 20;

// ExtenderFilterResult in the shape the arguments came in. `failed` go to FailedNodes (the
// scheduler may preempt there); `unresolvable` to FailedAndUnresolvableNodes (preemption would
// not help: no vGPU state, or no GPU of the node offers the type).
nlohmann::json FilterResult(const ExtenderArgs& args, const std::vector<std::string_view>& kept,
                            const std::map<std::string, std::string>& failed,
                            const std::map<std::string, std::string>& unresolvable);
// The same as the JSON text the extender answers. With NodeNames (nodeCacheCapable) it is written
// out directly, a name per kept node, not built as a JSON document first: kube-scheduler calls
// filter for every pod with every node's name.
std::string FilterResultText(const ExtenderArgs& args, const std::vector<std::string_view>& kept,
                             const std::map<std::string, std::string>& failed,
                             const std::map<std::string, std::string>& unresolvable);
// An ExtenderFilterResult that only carries Error: the scheduler fails this attempt for the pod
// (ignorable: false) and tries again later.
nlohmann::json FilterError(const std::string& message);

// HostPriorityList, and the same as JSON text written out directly (for every pod, every node).
nlohmann::json PriorityList(const std::vector<std::pair<std::string_view, int64_t>>& scores);
std::string PriorityListText(const std::vector<std::pair<std::string_view, int64_t>>& scores);

struct BindingArgs {
  std::string pod_name;
  std::string pod_namespace;
  std::string pod_uid;
  std::string node;
};
Result<BindingArgs> ParseBindingArgs(const nlohmann::json& body);
// ExtenderBindingResult; an empty message is success.
nlohmann::json BindingResult(const std::string& error);

// ExtenderPreemptionArgs / ExtenderPreemptionResult (types.go). kube-scheduler sends its victims
// per node as whole pods in NodeNameToVictims, or, with nodeCacheCapable, as UIDs in
// NodeNameToMetaVictims; the answer is always NodeNameToMetaVictims. Victims come most important
// first (SelectVictimsOnNode sorts them so), and the answer keeps that order.
struct Victim {
  std::string uid;  // as sent, for the answer
  // The pod, when it was sent whole (NodeNameToVictims).
  std::optional<kube::PodInfo> pod;
};
struct NodeVictims {
  std::vector<Victim> pods;
  int64_t num_pdb_violations = 0;
};
struct PreemptionArgs {
  kube::PodInfo pod;
  std::map<std::string, NodeVictims> nodes;
  bool meta = false;  // NodeNameToMetaVictims was sent
};
// kInvalid, naming what is wrong, for anything but the documented shape.
Result<PreemptionArgs> ParsePreemptionArgs(const nlohmann::json& body);
nlohmann::json PreemptionResult(const std::map<std::string, NodeVictims>& nodes);

// The pod's vGPU demand per container, in the order kubelet admits them, for resources starting
// with `prefix`: each app container's own, and before them the part of an init container's
// demand that the app containers do not cover (kubelet hands init containers' devices on to the
// app containers). A container's count is its limit, else its request (extended resources are
// whole numbers, and the API server makes request and limit equal). kInvalid for a count that is
// not a whole number.
Result<std::vector<scheduling::Demand>> PodDemand(const kube::PodInfo& pod,
                                                  const std::string& prefix);

}  // namespace kvgpu::extender
