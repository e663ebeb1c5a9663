// The pods side of the cluster view: which pods hold vGPUs on each node, from the pod watch and
// from this extender's own binds (assumed until the watch shows them), merged with the binds the
// nodes' ledgers record; and the holders of a node that the watch saw go. The nodes' states and
// ledgers are read in cluster_view.cpp.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "extender/cluster_view.h"
#include "extender/protocol.h"

namespace kvgpu::extender {

bool ClusterView::SeenDeleted(const std::string& uid) const {
  return deleted_.contains(uid);
}

void ClusterView::ForgetPod(const std::string& uid) {
  auto it = pods_.find(uid);
  if (it == pods_.end()) return;
  const auto now = steady_now_();
  std::erase_if(gone_, [&](const auto& entry) { return now - entry.second.at > kGoneFor; });
  if (!it->second.node.empty()) gone_[uid] = Gone{std::move(it->second), now};
  pods_.erase(it);
}

std::vector<BoundPod> ClusterView::GoneHolders(const std::string& node,
                                               const std::set<std::string>& holders) const {
  std::lock_guard lock(mutex_);
  const auto now = steady_now_();
  std::set<std::string> held_now;
  for (const auto& [uid, pod] : pods_) {
    if (pod.node == node) held_now.insert(pod.key);
  }
  std::vector<BoundPod> out;
  for (const auto& [uid, gone] : gone_) {
    if (gone.pod.node != node || now - gone.at > kGoneFor) continue;
    if (holders.contains(gone.pod.key) && !held_now.contains(gone.pod.key)) {
      out.push_back(gone.pod);
    }
  }
  return out;
}

void ClusterView::PutPod(const kube::PodInfo& pod, const std::string& node, bool assumed) {
  ++bound_version_;
  if (node.empty() || pod.Finished()) {
    ForgetPod(pod.uid);
    return;
  }
  Result<std::vector<scheduling::Demand>> demand = PodDemand(pod, prefix_);
  if (!demand.ok()) {
    spdlog::warn("pod {}: {}; its vGPUs are not counted", pod.Key(), demand.status().message());
    pods_.erase(pod.uid);
    return;
  }
  if (demand->empty()) {
    pods_.erase(pod.uid);
    return;
  }
  std::optional<std::chrono::steady_clock::time_point> assumed_at;
  if (assumed) assumed_at = steady_now_();
  auto it = pods_.find(pod.uid);
  if (it != pods_.end() && it->second.node == node) {
    it->second.demand = std::move(*demand);
    it->second.assumed_at = assumed_at;
    return;
  }
  pods_[pod.uid] =
      BoundPod{pod.uid, pod.Key(), node, std::move(*demand), next_order_++, assumed_at};
}

void ClusterView::SyncPods(const std::vector<kube::PodInfo>& pods) {
  std::lock_guard lock(mutex_);
  std::map<std::string, BoundPod> previous = std::move(pods_);
  pods_.clear();
  ++bound_version_;
  for (const kube::PodInfo& pod : pods) {
    // Pods seen before keep their bind order.
    if (auto it = previous.find(pod.uid); it != previous.end()) pods_[pod.uid] = it->second;
    PutPod(pod, pod.node_name, false);
  }
  // A bind of ours that the list does not show yet stays assumed.
  for (auto& [uid, pod] : previous) {
    if (pod.assumed_at && !pods_.contains(uid)) pods_[uid] = std::move(pod);
  }
}

void ClusterView::PodChanged(kube::WatchEventType type, const kube::PodInfo& pod) {
  std::lock_guard lock(mutex_);
  if (type == kube::WatchEventType::kDeleted) {
    ++bound_version_;
    ForgetPod(pod.uid);
    const auto now = steady_now_();
    std::erase_if(deleted_, [&](const auto& entry) { return now - entry.second > assume_for_; });
    deleted_[pod.uid] = now;
    return;
  }
  // An event without a node says nothing of a bind of ours still on its way.
  auto it = pods_.find(pod.uid);
  if (pod.node_name.empty() && it != pods_.end() && it->second.assumed_at) return;
  PutPod(pod, pod.node_name, false);
}

void ClusterView::Assume(const kube::PodInfo& pod, const std::string& node) {
  std::lock_guard lock(mutex_);
  PutPod(pod, node, true);
}

std::shared_ptr<const ClusterView::BoundByNode> ClusterView::BoundPodsByNode(
    int64_t now_unix_ms) const {
  std::lock_guard lock(mutex_);
  return BoundPodsByNodeLocked(now_unix_ms);
}

std::shared_ptr<const ClusterView::BoundByNode> ClusterView::BoundPodsByNodeLocked(
    int64_t now_unix_ms) const {
  const auto now = steady_now_();
  BoundSnapshot& last = bound_snapshot_;
  if (last.pods && last.version == bound_version_ && now_unix_ms >= last.made_unix_ms &&
      now_unix_ms < last.until_unix_ms && now < last.until) {
    return last.pods;
  }
  auto out = std::make_shared<BoundByNode>();
  int64_t until_unix_ms = std::numeric_limits<int64_t>::max();
  auto until = std::chrono::steady_clock::time_point::max();
  for (const auto& [uid, pod] : pods_) {
    if (pod.assumed_at) {
      if (now - *pod.assumed_at > assume_for_) continue;
      until = std::min(until, *pod.assumed_at + assume_for_ + std::chrono::milliseconds(1));
    }
    (*out)[pod.node].push_back(pod);
  }
  for (auto& [node, pods] : *out) {
    std::sort(pods.begin(), pods.end(),
              [](const BoundPod& a, const BoundPod& b) { return a.order < b.order; });
  }
  for (const auto& [node, entries] : ledgers_) {
    // The holders are checked where the node's state is at hand (JudgeNode skips them).
    std::vector<LedgerEntry> live = LiveEntries(entries, nullptr, now_unix_ms, assume_for_);
    for (const LedgerEntry& entry : live) {
      until_unix_ms = std::min(until_unix_ms, entry.at_unix_ms + assume_for_.count() + 1);
    }
    if (!live.empty()) (*out)[node] = WithLedgerLocked(std::move((*out)[node]), live);
  }
  last = {std::move(out), last.serial + 1, bound_version_, now_unix_ms, until_unix_ms, until};
  return last.pods;
}

std::vector<BoundPod> ClusterView::WithLedger(std::vector<BoundPod> bound,
                                              const std::vector<LedgerEntry>& entries) const {
  std::lock_guard lock(mutex_);
  return WithLedgerLocked(std::move(bound), entries);
}

std::vector<BoundPod> ClusterView::WithLedgerLocked(std::vector<BoundPod> bound,
                                                    const std::vector<LedgerEntry>& entries) const {
  // Recorded binds the pod watch does not show yet come after the pods it shows, in bind order.
  uint64_t order = next_order_;
  for (const LedgerEntry& entry : entries) {
    const bool known = std::any_of(bound.begin(), bound.end(),
                                   [&](const BoundPod& pod) { return pod.uid == entry.uid; });
    if (known || SeenDeleted(entry.uid)) continue;
    bound.push_back(BoundPod{entry.uid, entry.key, "", entry.demand, order++, std::nullopt});
  }
  return bound;
}

std::vector<BoundPod> ClusterView::BoundPods(const std::string& node, int64_t now_unix_ms) const {
  const std::shared_ptr<const BoundByNode> all = BoundPodsByNode(now_unix_ms);
  auto it = all->find(node);
  return it == all->end() ? std::vector<BoundPod>{} : it->second;
}

}  // namespace kvgpu::extender
