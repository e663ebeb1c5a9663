#include "extender/cluster_view.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "extender/node_fit.h"
#include "extender/protocol.h"
#include "scheduling/node_vgpu_state.h"

namespace kvgpu::extender {

namespace {

std::optional<std::pair<std::string, std::optional<std::string>>> NameAndAnnotation(
    const nlohmann::json& node) {
  const auto metadata = node.find("metadata");
  if (metadata == node.end() || !metadata->is_object()) return std::nullopt;
  const auto name = metadata->find("name");
  if (name == metadata->end() || !name->is_string()) return std::nullopt;
  std::optional<std::string> annotation;
  if (auto annotations = metadata->find("annotations");
      annotations != metadata->end() && annotations->is_object()) {
    if (auto it = annotations->find(scheduling::kNodeStateAnnotation);
        it != annotations->end() && it->is_string()) {
      annotation = it->get<std::string>();
    }
  }
  return std::pair{name->get<std::string>(), annotation};
}

std::optional<std::string> LedgerAnnotation(const nlohmann::json& node) {
  const nlohmann::json* annotations = node.contains("metadata") && node["metadata"].is_object() &&
                                              node["metadata"].contains("annotations")
                                          ? &node["metadata"]["annotations"]
                                          : nullptr;
  if (annotations == nullptr || !annotations->is_object()) return std::nullopt;
  auto it = annotations->find(kBindLedgerAnnotation);
  if (it == annotations->end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

}  // namespace

ClusterView::ClusterView(std::string resource_prefix, std::chrono::milliseconds assume_for,
                         SteadyClock steady_now, UnixMsClock unix_now)
    : prefix_(std::move(resource_prefix)),
      assume_for_(assume_for),
      steady_now_(steady_now ? std::move(steady_now)
                             : SteadyClock([] { return std::chrono::steady_clock::now(); })),
      unix_now_(unix_now ? std::move(unix_now) : UnixMsClock([] { return UnixNowMs(); })) {}

namespace {

// A state and its memo in one allocation: a request copies both pointers for every node, and
// their counts then share a cache line.
struct StateWithMemo {
  explicit StateWithMemo(Result<scheduling::NodeVgpuState> parsed)
      : state(std::move(parsed)), memo(state) {}
  const Result<scheduling::NodeVgpuState> state;
  FitMemo memo;  // summarized here, on the watch's thread, not by the first request to ask
};

}  // namespace

ClusterView::Parsed ClusterView::Parse(std::string text) {
  auto both = std::make_shared<StateWithMemo>(scheduling::ParseNodeState(text));
  NodeState state{std::shared_ptr<const Result<scheduling::NodeVgpuState>>(both, &both->state),
                  std::shared_ptr<FitMemo>(both, &both->memo)};
  return Parsed{std::move(text), std::move(state)};
}

const ClusterView::Slot* ClusterView::WatchedSlot(const std::string& node) const {
  const auto it = slot_of_.find(node);
  return it == slot_of_.end() ? nullptr : &slots_[it->second];
}

void ClusterView::PutWatched(const std::string& node, Parsed parsed) {
  size_t index = 0;
  if (const auto it = slot_of_.find(node); it != slot_of_.end()) {
    index = it->second;
    Retire(std::move(slots_[index].parsed.state));
  } else {
    if (free_slots_.empty()) {
      index = slots_.size();
      slots_.emplace_back();
    } else {
      index = free_slots_.back();
      free_slots_.pop_back();
    }
    slot_of_.emplace(node, index);
    slots_[index].name = node;
    ++slots_version_;
  }
  Slot& slot = slots_[index];
  slot.parsed = std::move(parsed);
  const NodeState& state = slot.parsed.state;
  slot.node = WatchedNode{state.state.get(), state.memo.get()};
  if (state.state && state.state->ok()) {
    slot.node.ok = true;
    slot.node.published_unix_ms = state.state->value().published_unix_ms;
    slot.node.policy = state.state->value().policy;
    slot.node.published = state.memo ? state.memo->Published() : nullptr;
  }
}

void ClusterView::EraseWatched(const std::string& node) {
  const auto it = slot_of_.find(node);
  if (it == slot_of_.end()) return;
  Slot& slot = slots_[it->second];
  Retire(std::move(slot.parsed.state));
  slot = Slot{};
  free_slots_.push_back(it->second);
  slot_of_.erase(it);
  ++slots_version_;
}

void ClusterView::Retire(NodeState state) {
  if (pins_.empty()) return;  // no request can hold it: it goes now
  retired_.emplace_back(epoch_++, std::move(state));
}

void ClusterView::Unpin(uint64_t epoch) const {
  std::deque<std::pair<uint64_t, NodeState>> gone;
  {
    std::lock_guard lock(mutex_);
    const auto it = pins_.find(epoch);
    if (--it->second == 0) pins_.erase(it);
    // What was retired before the oldest Watched still alive was made is nobody's now.
    const uint64_t oldest = pins_.empty() ? UINT64_MAX : pins_.begin()->first;
    while (!retired_.empty() && retired_.front().first < oldest) {
      gone.push_back(std::move(retired_.front()));
      retired_.pop_front();
    }
  }
}  // `gone` is freed here, without the lock

ClusterView::Watched::Watched(Watched&& other) noexcept
    : view_(std::exchange(other.view_, nullptr)),
      epoch_(other.epoch_),
      bound_(std::move(other.bound_)),
      nodes_(std::move(other.nodes_)) {}

ClusterView::Watched::~Watched() {
  if (view_ != nullptr) view_->Unpin(epoch_);
}

ClusterView::Watched ClusterView::Watch(const std::vector<CandidateNode>& nodes,
                                        int64_t now_unix_ms) const {
  Watched watched;
  watched.nodes_.reserve(nodes.size());
  std::lock_guard lock(mutex_);
  watched.bound_ = BoundPodsByNodeLocked(now_unix_ms);
  if (bound_by_slot_serial_ != bound_snapshot_.serial || bound_by_slot_version_ != slots_version_ ||
      bound_by_slot_.size() != slots_.size()) {
    bound_by_slot_.assign(slots_.size(), nullptr);
    for (const auto& [node, pods] : *watched.bound_) {
      if (const auto it = slot_of_.find(node); it != slot_of_.end()) {
        bound_by_slot_[it->second] = &pods;
      }
    }
    bound_by_slot_serial_ = bound_snapshot_.serial;
    bound_by_slot_version_ = slots_version_;
  }
  for (const CandidateNode& node : nodes) {
    const auto it = slot_of_.find(node.name);
    if (it == slot_of_.end()) {
      watched.nodes_.emplace_back();
      continue;
    }
    watched.nodes_.push_back(slots_[it->second].node);
    watched.nodes_.back().bound = bound_by_slot_[it->second];
  }
  watched.view_ = this;
  watched.epoch_ = epoch_;
  ++pins_[epoch_];
  return watched;
}

void ClusterView::SyncNodes(const std::vector<nlohmann::json>& nodes) {
  // Parsed before the lock: a relist of thousands of nodes would hold up the requests.
  std::unordered_map<std::string, Parsed> annotations;
  std::vector<std::pair<std::string, std::optional<std::string>>> ledgers;
  for (const nlohmann::json& node : nodes) {
    auto parsed = NameAndAnnotation(node);
    if (!parsed) continue;
    if (parsed->second) annotations[parsed->first] = Parse(std::move(*parsed->second));
    ledgers.emplace_back(parsed->first, LedgerAnnotation(node));
  }
  std::lock_guard lock(mutex_);
  ledgers_.clear();
  ++bound_version_;
  for (const auto& [name, text] : ledgers) PutLedger(name, text);
  std::vector<std::string> gone;
  for (const Slot& slot : slots_) {
    if (!slot.name.empty() && !annotations.contains(slot.name)) gone.push_back(slot.name);
  }
  for (const std::string& name : gone) EraseWatched(name);
  for (auto& [name, parsed] : annotations) PutWatched(name, std::move(parsed));
  std::erase_if(sent_, [&](const auto& entry) { return !slot_of_.contains(entry.first); });
}

void ClusterView::NodeChanged(kube::WatchEventType type, const nlohmann::json& node) {
  auto parsed = NameAndAnnotation(node);
  if (!parsed) return;
  const std::string& name = parsed->first;
  const bool gone = type == kube::WatchEventType::kDeleted || !parsed->second;
  std::optional<Parsed> changed;
  if (!gone) {
    // Nodes change every few seconds for other reasons (kubelet's status): parse only new text.
    bool same = false;
    {
      std::lock_guard lock(mutex_);
      const Slot* watched = WatchedSlot(name);
      same = watched != nullptr && watched->parsed.text == *parsed->second;
    }
    if (!same) changed = Parse(std::move(*parsed->second));
  }
  std::lock_guard lock(mutex_);
  PutLedger(name, type == kube::WatchEventType::kDeleted ? std::nullopt : LedgerAnnotation(node));
  if (gone) {
    EraseWatched(name);
    sent_.erase(name);
  } else if (changed) {
    PutWatched(name, std::move(*changed));
  }
}

std::optional<std::string> ClusterView::StateAnnotation(const std::string& node) const {
  std::lock_guard lock(mutex_);
  const Slot* watched = WatchedSlot(node);
  if (watched == nullptr) return std::nullopt;
  return watched->parsed.text;
}

std::shared_ptr<const Result<scheduling::NodeVgpuState>> ClusterView::State(
    const std::string& node, const std::optional<std::string>& sent) {
  return StateAndMemo(node, sent).state;
}

NodeState ClusterView::StateAndMemo(const std::string& node,
                                    const std::optional<std::string>& sent) {
  {
    std::lock_guard lock(mutex_);
    const Slot* watched = WatchedSlot(node);
    if (!sent) return watched != nullptr ? watched->parsed.state : NodeState{};
    if (watched != nullptr && watched->parsed.text == *sent) return watched->parsed.state;
    if (auto it = sent_.find(node); it != sent_.end() && it->second.text == *sent) {
      return it->second.state;
    }
  }
  Parsed parsed = Parse(*sent);
  NodeState state = parsed.state;
  std::lock_guard lock(mutex_);
  sent_[node] = std::move(parsed);
  return state;
}

void ClusterView::PutLedger(const std::string& node, const std::optional<std::string>& text) {
  // Every Node event comes here (kubelet's status every few seconds per node): only a ledger that
  // changed makes BoundPodsByNode's answer new.
  const auto it = ledgers_.find(node);
  if (!text) {
    if (it != ledgers_.end()) {
      ledgers_.erase(it);
      ++bound_version_;
    }
    return;
  }
  Result<std::vector<LedgerEntry>> entries = ParseBindLedger(*text);
  if (!entries.ok()) {
    // Filter goes on without it; bind reads the ledger again and refuses what it cannot read.
    spdlog::warn("node {}: {}", node, entries.status().message());
    if (it != ledgers_.end()) {
      ledgers_.erase(it);
      ++bound_version_;
    }
    return;
  }
  if (it != ledgers_.end() && it->second == *entries) return;
  ledgers_[node] = std::move(*entries);
  ++bound_version_;
}

void ClusterView::SetFollowing(const std::string& source, bool following) {
  std::lock_guard lock(mutex_);
  following_[source] = following;
}

bool ClusterView::Following() const {
  std::lock_guard lock(mutex_);
  return std::all_of(following_.begin(), following_.end(),
                     [](const auto& entry) { return entry.second; }) &&
         following_.contains(kNodesWatch) && following_.contains(kPodsWatch);
}

}  // namespace kvgpu::extender
