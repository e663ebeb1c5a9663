// What the extender knows beyond one request: each node's published vGPU state (from the Node
// watch; needed with nodeCacheCapable, when the scheduler sends only names) and the vGPU pods
// bound to each node (from the watch of assigned pods, and from the extender's own bind verb
// before the watch shows them). Written by the watch threads, read by the HTTP handlers.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "extender/bind_ledger.h"
#include "extender/protocol.h"
#include "extender/watched_node.h"
#include "kube/list_watch.h"
#include "kube/pod.h"
#include "scheduling/gpu_fit.h"
#include "scheduling/node_vgpu_state.h"

namespace kvgpu::extender {

inline constexpr std::chrono::seconds kAssumeFor{30};

// How long the view remembers a vGPU pod that left its node (deleted, or finished): the device
// plugin removes such a pod's vGPUs only after its grace period (`lifecycle.gracePeriod`, 30 s
// shipped) and publishes that a moment later, and until then its published state still lists
// the pod among the holders. Several grace periods, so a busy node's late removal is still known
// for what it is.
inline constexpr std::chrono::seconds kGoneFor{180};

class ClusterView {
 public:
  // `steady_now` ages the view's own binds, `unix_now` the bind ledger's entries (their time base
  // is the one other replicas write in); empty: the real clocks. A test whose steps stand for a
  // cluster's time gives both, kept in step, so that a stalled process ages no bind.
  explicit ClusterView(std::string resource_prefix,
                       std::chrono::milliseconds assume_for = kAssumeFor,
                       SteadyClock steady_now = nullptr, UnixMsClock unix_now = nullptr);

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
  // The watched states and bound pods (BoundPodsByNode) of a request's nodes, in one look at the
  // view: a look-up of each name in the node table, no copy of a shared pointer per node. The
  // states it points to stay alive while it lives: a state the watch replaces or removes
  // meanwhile is kept until every Watched made before that is gone.
  class Watched {
   public:
    Watched(Watched&& other) noexcept;
    Watched& operator=(Watched&&) = delete;
    Watched(const Watched&) = delete;
    Watched& operator=(const Watched&) = delete;
    ~Watched();
    // One per node asked about, in that order.
    const std::vector<WatchedNode>& nodes() const { return nodes_; }

   private:
    friend class ClusterView;
    Watched() = default;
    const ClusterView* view_ = nullptr;  // nullptr: moved from
    uint64_t epoch_ = 0;
    std::shared_ptr<const std::unordered_map<std::string, std::vector<BoundPod>>> bound_;
    std::vector<WatchedNode> nodes_;
  };
  Watched Watch(const std::vector<CandidateNode>& nodes, int64_t now_unix_ms) const;
  Watched Watch(const std::vector<CandidateNode>& nodes) const { return Watch(nodes, NowUnixMs()); }

  // The pods that left `node` (deleted or finished) within kGoneFor and that `holders` (its
  // published state's) still names: vGPUs the plugin will remove. A name a pod bound there now
  // holds is not one of them (a pod made again under its old name).
  std::vector<BoundPod> GoneHolders(const std::string& node,
                                    const std::set<std::string>& holders) const;

  void SyncPods(const std::vector<kube::PodInfo>& pods);
  void PodChanged(kube::WatchEventType type, const kube::PodInfo& pod);
  // The extender bound `pod` to `node` itself: count it before the watch shows it.
  void Assume(const kube::PodInfo& pod, const std::string& node);
  // vGPU pods bound to `node` that have not finished, in the order they were bound: those the
  // pod watch shows, the extender's own binds, and the binds other replicas recorded in the
  // node's bind ledger (bind_ledger.h) that the pod watch does not show yet. `now_unix_ms` ages
  // the ledger's entries.
  std::vector<BoundPod> BoundPods(const std::string& node, int64_t now_unix_ms) const;
  std::vector<BoundPod> BoundPods(const std::string& node) const {
    return BoundPods(node, NowUnixMs());
  }
  // The same for every node at once (one look per request, not one per node). Made once and
  // shared until a pod, a ledger or the clock changes what it holds: a cluster's thousands of
  // running pods are not copied for every request.
  using BoundByNode = std::unordered_map<std::string, std::vector<BoundPod>>;
  std::shared_ptr<const BoundByNode> BoundPodsByNode(int64_t now_unix_ms) const;
  std::shared_ptr<const BoundByNode> BoundPodsByNode() const {
    return BoundPodsByNode(NowUnixMs());
  }
  // `bound` (one node's BoundPods) with the ledger `entries` it lacks, skipping pods the view
  // saw deleted: what a bind judges a node by.
  std::vector<BoundPod> WithLedger(std::vector<BoundPod> bound,
                                   const std::vector<LedgerEntry>& entries) const;
  std::chrono::milliseconds assume_for() const { return assume_for_; }
  // The view's unix-ms clock: what a bind writes in the ledger and what ages the entries.
  int64_t NowUnixMs() const { return unix_now_(); }

  // Whether a watch follows the API server (kNodesWatch, kPodsWatch). Readiness needs both to
  // have said so: a watch that has not reported yet (a cluster's thousands of Nodes still being
  // listed) is not following, whatever the other says.
  static constexpr const char* kNodesWatch = "nodes";
  static constexpr const char* kPodsWatch = "pods";
  void SetFollowing(const std::string& source, bool following);
  bool Following() const;

 private:
  // With mutex_ held.
  void PutPod(const kube::PodInfo& pod, const std::string& node, bool assumed);
  // The pod `uid` leaves pods_; remembered in gone_ when it was bound to a node.
  void ForgetPod(const std::string& uid);
  void PutLedger(const std::string& node, const std::optional<std::string>& text);
  bool SeenDeleted(const std::string& uid) const;
  std::shared_ptr<const BoundByNode> BoundPodsByNodeLocked(int64_t now_unix_ms) const;
  std::vector<BoundPod> WithLedgerLocked(std::vector<BoundPod> bound,
                                         const std::vector<LedgerEntry>& entries) const;

  std::string prefix_;
  std::chrono::milliseconds assume_for_;
  SteadyClock steady_now_;
  UnixMsClock unix_now_;
  mutable std::mutex mutex_;
  struct Parsed {
    std::string text;
    NodeState state;
  };
  static Parsed Parse(std::string text);
  // The node table of the watched states: each node with a state has a slot in `slots_`, found by
  // name in `slot_of_` (hashed, not ordered: node names share long prefixes); a request looks each
  // of its names up once and reads the rest from the slot. A removed node's slot is reused.
  struct Slot {
    std::string name;  // empty: free
    Parsed parsed;     // the vGPU-state text, parsed
    WatchedNode node;  // from `parsed` (`bound` left null)
  };
  // With mutex_ held. The watched state's slot, or nullptr.
  const Slot* WatchedSlot(const std::string& node) const;
  // Gives `node` the watched state `parsed`, or takes its state away.
  void PutWatched(const std::string& node, Parsed parsed);
  void EraseWatched(const std::string& node);
  // A node's watched state replaced or removed: kept while a Watched made before may use it.
  void Retire(NodeState state);
  // A Watched of `epoch` is gone.
  void Unpin(uint64_t epoch) const;
  std::vector<Slot> slots_;
  std::unordered_map<std::string, size_t> slot_of_;
  std::vector<size_t> free_slots_;
  // Bumped whenever a slot is given to another node or freed.
  uint64_t slots_version_ = 0;
  // BoundPodsByNode's answer by slot (pointing into it), made from the answer of that serial
  // number and the slots of that version; remade when either changes.
  mutable std::vector<const std::vector<BoundPod>*> bound_by_slot_;
  mutable uint64_t bound_by_slot_serial_ = 0;
  mutable uint64_t bound_by_slot_version_ = 0;
  // Watched objects alive, by the epoch they were made in; states retired while any lives, with
  // the epoch they were retired in (a Watched of epoch e may use a state retired in epoch >= e).
  mutable std::map<uint64_t, size_t> pins_;
  mutable std::deque<std::pair<uint64_t, NodeState>> retired_;
  uint64_t epoch_ = 0;
  // node -> the last text a request sent that the watch did not show, parsed
  std::unordered_map<std::string, Parsed> sent_;
  std::map<std::string, BoundPod> pods_;  // by uid
  // The bind ledger of each node as the node watch last showed it.
  std::map<std::string, std::vector<LedgerEntry>> ledgers_;
  // Pods the watch saw deleted, by uid, and when: a ledger entry of theirs takes nothing (kept
  // as long as an entry lives).
  std::map<std::string, std::chrono::steady_clock::time_point> deleted_;
  // vGPU pods that left their node, by uid, and when (GoneHolders); pruned by age.
  struct Gone {
    BoundPod pod;
    std::chrono::steady_clock::time_point at;
  };
  std::map<std::string, Gone> gone_;
  uint64_t next_order_ = 0;
  // Bumped whenever pods_, ledgers_ or deleted_ change what BoundPodsByNode gives.
  uint64_t bound_version_ = 0;
  // BoundPodsByNode's last answer: made at `made_unix_ms` from `bound_version_`; the clocks
  // change it first when an assumed pod or a ledger entry in it expires.
  struct BoundSnapshot {
    std::shared_ptr<const BoundByNode> pods;
    uint64_t serial = 0;  // counts the answers made
    uint64_t version = 0;
    int64_t made_unix_ms = 0;
    int64_t until_unix_ms = 0;
    std::chrono::steady_clock::time_point until;
  };
  mutable BoundSnapshot bound_snapshot_;
  std::map<std::string, bool> following_;
};

}  // namespace kvgpu::extender
