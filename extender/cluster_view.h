// What the extender knows beyond one request: each node's published vGPU state (from the Node
// watch; needed with nodeCacheCapable, when the scheduler sends only names) and the vGPU pods
// bound to each node (from the watch of assigned pods, and from the extender's own bind verb
// before the watch shows them). Written by the watch threads, read by the HTTP handlers.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "extender/bind_ledger.h"
#include "extender/protocol.h"
#include "kube/list_watch.h"
#include "kube/pod.h"
#include "scheduling/gpu_fit.h"
#include "scheduling/node_vgpu_state.h"

namespace kvgpu::extender {

struct BoundPod {
  std::string uid;
  std::string key;  // "namespace/name"
  std::string node;
  std::vector<scheduling::Demand> demand;  // per container, as kubelet admits them
  uint64_t order = 0;                      // when the view first saw it bound
  // Bound by the extender and not yet seen bound by the watch: counted until the watch shows it,
  // or for kAssumeFor at most (the binding may have failed; kube-scheduler forgets an assumed
  // pod the same way).
  std::optional<std::chrono::steady_clock::time_point> assumed_at;
};

inline constexpr std::chrono::seconds kAssumeFor{30};

class FitMemo;  // node_fit.h

// A node's published state, parsed, and the verdicts reached on it: kept together, so a node
// whose state changes is never judged by a verdict reached on the old one.
struct NodeState {
  std::shared_ptr<const Result<scheduling::NodeVgpuState>> state;  // nullptr: none known
  std::shared_ptr<FitMemo> memo;                                   // nullptr with state
};

class ClusterView {
 public:
  explicit ClusterView(std::string resource_prefix,
                       std::chrono::milliseconds assume_for = kAssumeFor);

  void SyncNodes(const std::vector<nlohmann::json>& nodes);
  void NodeChanged(kube::WatchEventType type, const nlohmann::json& node);
  // The node's vGPU-state annotation; nullopt when the node or its annotation is unknown.
  std::optional<std::string> StateAnnotation(const std::string& node) const;
  // The node's state, parsed once per text: `sent` (the Node kube-scheduler sent) or else the
  // watched annotation (parsed when the watch shows it changed, not per request); nullptr when
  // there is neither.
  std::shared_ptr<const Result<scheduling::NodeVgpuState>> State(
      const std::string& node, const std::optional<std::string>& sent = std::nullopt);
  // The same, with the memo of verdicts reached on that state.
  NodeState StateAndMemo(const std::string& node,
                         const std::optional<std::string>& sent = std::nullopt);
  // StateAndMemo(node.name) of each of `nodes` (their watched states), in one look at the view.
  std::vector<NodeState> WatchedStates(const std::vector<CandidateNode>& nodes) const;

  void SyncPods(const std::vector<kube::PodInfo>& pods);
  void PodChanged(kube::WatchEventType type, const kube::PodInfo& pod);
  // The extender bound `pod` to `node` itself: count it before the watch shows it.
  void Assume(const kube::PodInfo& pod, const std::string& node);
  // vGPU pods bound to `node` that have not finished, in the order they were bound: those the
  // pod watch shows, the extender's own binds, and the binds other replicas recorded in the
  // node's bind ledger (bind_ledger.h) that the pod watch does not show yet. `now_unix_ms` ages
  // the ledger's entries.
  std::vector<BoundPod> BoundPods(const std::string& node, int64_t now_unix_ms = UnixNowMs()) const;
  // The same for every node at once (one look per request, not one per node). Made once and
  // shared until a pod, a ledger or the clock changes what it holds: a cluster's thousands of
  // running pods are not copied for every request.
  using BoundByNode = std::unordered_map<std::string, std::vector<BoundPod>>;
  std::shared_ptr<const BoundByNode> BoundPodsByNode(int64_t now_unix_ms = UnixNowMs()) const;
  // `bound` (one node's BoundPods) with the ledger `entries` it lacks, skipping pods the view
  // saw deleted: what a bind judges a node by.
  std::vector<BoundPod> WithLedger(std::vector<BoundPod> bound,
                                   const std::vector<LedgerEntry>& entries) const;
  std::chrono::milliseconds assume_for() const { return assume_for_; }

  // Whether a watch follows the API server ("nodes", "pods"); readiness needs both.
  void SetFollowing(const std::string& source, bool following);
  bool Following() const;

 private:
  // With mutex_ held.
  void PutPod(const kube::PodInfo& pod, const std::string& node, bool assumed);
  void PutLedger(const std::string& node, const std::optional<std::string>& text);
  bool SeenDeleted(const std::string& uid) const;
  std::vector<BoundPod> WithLedgerLocked(std::vector<BoundPod> bound,
                                         const std::vector<LedgerEntry>& entries) const;

  std::string prefix_;
  std::chrono::milliseconds assume_for_;
  mutable std::mutex mutex_;
  struct Parsed {
    std::string text;
    NodeState state;
  };
  static Parsed Parse(std::string text);
  // Looked up once per node per request: hashed, not ordered (node names share long prefixes).
  std::unordered_map<std::string, Parsed> annotations_;  // node -> vGPU-state text, parsed
  // node -> the last text a request sent that the watch did not show, parsed
  std::unordered_map<std::string, Parsed> sent_;
  std::map<std::string, BoundPod> pods_;  // by uid
  // The bind ledger of each node as the node watch last showed it.
  std::map<std::string, std::vector<LedgerEntry>> ledgers_;
  // Pods the watch saw deleted, by uid, and when: a ledger entry of theirs takes nothing (kept
  // as long as an entry lives).
  std::map<std::string, std::chrono::steady_clock::time_point> deleted_;
  uint64_t next_order_ = 0;
  // Bumped whenever pods_, ledgers_ or deleted_ change what BoundPodsByNode gives.
  uint64_t bound_version_ = 0;
  // BoundPodsByNode's last answer: made at `made_unix_ms` from `bound_version_`; the clocks
  // change it first when an assumed pod or a ledger entry in it expires.
  struct BoundSnapshot {
    std::shared_ptr<const BoundByNode> pods;
    uint64_t version = 0;
    int64_t made_unix_ms = 0;
    int64_t until_unix_ms = 0;
    std::chrono::steady_clock::time_point until;
  };
  mutable BoundSnapshot bound_snapshot_;
  std::map<std::string, bool> following_;
};

}  // namespace kvgpu::extender
