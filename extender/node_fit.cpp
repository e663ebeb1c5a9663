#include "extender/node_fit.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <set>
#include <unordered_map>

#include "extender/protocol.h"
#include "scheduling/node_vgpu_state.h"

namespace kvgpu::extender {

namespace {

using scheduling::Demand;
using scheduling::GpuSlots;

NodeVerdict Unresolvable(std::string reason) {
  return {NodeVerdict::Kind::kUnresolvable, std::move(reason), 0};
}

// A resource no GPU of the node serves, full or not: another node is the only answer.
std::optional<std::string> NotOffered(const std::vector<GpuSlots>& gpus,
                                      const std::vector<Demand>& demand) {
  for (const Demand& container : demand) {
    for (const auto& [resource, count] : container) {
      const bool offered = std::any_of(gpus.begin(), gpus.end(), [&](const GpuSlots& gpu) {
        auto it = gpu.resources.find(resource);
        return it != gpu.resources.end() && it->second.used + it->second.free > 0;
      });
      if (!offered && count > 0) return resource;
    }
  }
  return std::nullopt;
}

int64_t Score(size_t gpus, size_t free_before, size_t free_after, scheduling::Policy policy) {
  if (gpus == 0) return 0;
  const double left = static_cast<double>(free_after) / static_cast<double>(gpus);
  if (policy == scheduling::Policy::kSpread) {
    return std::lround(static_cast<double>(kMaxExtenderPriority) * left);
  }
  // Pack: a pod that takes no free GPU scores above any that does; among each, fuller nodes win.
  const int64_t half = kMaxExtenderPriority / 2;
  const int64_t keeps_free_gpus = free_after == free_before ? half : 0;
  return keeps_free_gpus + std::lround(static_cast<double>(half) * (1.0 - left));
}

// Pods bound here whose vGPUs the plugin has not made yet: they take theirs first, in bind order.
std::vector<const BoundPod*> Waiting(const scheduling::NodeVgpuState& state,
                                     const std::vector<BoundPod>& bound,
                                     const std::string& pod_uid) {
  std::vector<const BoundPod*> waiting;
  for (const BoundPod& pod : bound) {
    if (pod.uid != pod_uid && !state.holders.contains(pod.key)) waiting.push_back(&pod);
  }
  return waiting;
}

// The node's GPUs once the waiting pods have taken theirs; nullopt when none wait (the GPUs as
// published, not copied). The plugin's unattributed vGPUs belong to some of them and already
// count as used.
std::optional<std::vector<GpuSlots>> PlaceWaiting(const scheduling::NodeVgpuState& state,
                                                  const std::vector<const BoundPod*>& waiting) {
  if (waiting.empty()) return std::nullopt;
  std::vector<GpuSlots> gpus = state.gpus;
  std::map<std::string, uint32_t> made = state.unattributed;
  for (const BoundPod* pod : waiting) {
    for (Demand container : pod->demand) {
      for (auto& [resource, count] : container) {
        const uint32_t already = std::min(count, made[resource]);
        count -= already;
        made[resource] -= already;
      }
      // One that no longer fits will fail its admission; it takes nothing.
      (void)scheduling::PlaceDemand(gpus, container, state.policy);
    }
  }
  return gpus;
}

// The verdict on a state that is recent enough: whether the pod's vGPUs fit beside the waiting
// pods', and how well.
NodeVerdict Fit(const scheduling::NodeVgpuState& state, const std::vector<const BoundPod*>& waiting,
                const std::vector<Demand>& pod_demand, scheduling::Policy policy) {
  // A pod that fits is offered what it asks (free counts only fall as pods are placed): whether
  // the node offers it at all is asked only of a pod that does not fit, full or unresolvable.
  auto no_fit = [&](std::string why) {
    if (auto resource = NotOffered(state.gpus, pod_demand)) {
      return Unresolvable("no GPU on the node offers " + *resource);
    }
    return NodeVerdict{NodeVerdict::Kind::kFull, std::move(why), 0};
  };
  const std::optional<std::vector<GpuSlots>> after_waiting = PlaceWaiting(state, waiting);
  const std::vector<GpuSlots>& gpus = after_waiting ? *after_waiting : state.gpus;
  const size_t free_before = scheduling::FreeGpus(gpus);
  size_t taken = 0;
  std::string why;
  if (pod_demand.size() <= 1) {  // the usual pod: judged on the GPUs as they are
    const Demand none;
    const std::optional<size_t> n = scheduling::FreeGpusTaken(
        gpus, pod_demand.empty() ? none : pod_demand[0], state.policy, &why);
    if (!n) return no_fit(std::move(why));
    taken = *n;
  } else {  // each container beside the ones before it
    std::vector<GpuSlots> placed = gpus;
    for (const Demand& container : pod_demand) {
      if (!scheduling::PlaceDemand(placed, container, state.policy, &why)) {
        return no_fit(std::move(why));
      }
    }
    taken = free_before - scheduling::FreeGpus(placed);
  }
  return {NodeVerdict::Kind::kFits, "",
          Score(gpus.size(), free_before, free_before - taken, policy)};
}

const FitSummary::Resource* Find(const FitSummary& summary, const UsualPod& pod) {
  if (pod.number != kNoResourceNumber) {
    // Numbered: every summary listing the resource has it under that number.
    for (size_t i = 0; i < summary.numbers.size(); ++i) {
      if (summary.numbers[i] == pod.number) return &summary.resources[i];
    }
    return nullptr;
  }
  for (const FitSummary::Resource& r : summary.resources) {
    if (r.hash == pod.hash && r.name == pod.resource) return &r;
  }
  return nullptr;
}

// Fit's verdict for the pod's vGPUs of one resource, read from the summary of the GPUs Fit places
// on.
NodeVerdict FitOne(const FitSummary& summary, const UsualPod& pod, scheduling::Policy placing,
                   scheduling::Policy scoring) {
  const std::string& resource = pod.resource;
  const uint32_t count = pod.count;
  const FitSummary::Resource* entry = Find(summary, pod);
  const bool listed = entry != nullptr;
  const std::optional<size_t> taken =
      listed ? scheduling::FreeGpusTakenFrom(entry->ranked, count, placing) : std::nullopt;
  if (!taken) {
    if (!listed || !entry->offered) return Unresolvable("no GPU on the node offers " + resource);
    return {NodeVerdict::Kind::kFull, scheduling::NoRoomReason(resource, count, entry->creatable),
            0};
  }
  return {NodeVerdict::Kind::kFits, "",
          Score(summary.gpus, summary.free_gpus, summary.free_gpus - *taken, scoring)};
}

bool SameWaiting(const std::vector<std::vector<Demand>>& remembered,
                 const std::vector<const BoundPod*>& waiting) {
  return remembered.size() == waiting.size() &&
         std::equal(remembered.begin(), remembered.end(), waiting.begin(),
                    [](const auto& demand, const BoundPod* pod) { return demand == pod->demand; });
}

size_t Shape(const std::vector<Demand>& pod_demand, scheduling::Policy policy) {
  size_t hash = static_cast<size_t>(policy);
  auto mix = [&](size_t value) { hash = hash * 1'000'003 ^ value; };
  for (const Demand& container : pod_demand) {
    mix(container.size());
    for (const auto& [resource, count] : container) {
      mix(std::hash<std::string>{}(resource));
      mix(count);
    }
  }
  return hash;
}

}  // namespace

uint32_t ResourceNumber(const std::string& name, bool add) {
  static std::mutex mutex;
  static std::unordered_map<std::string, uint32_t> numbers;
  std::lock_guard lock(mutex);
  if (const auto it = numbers.find(name); it != numbers.end()) return it->second;
  if (!add || numbers.size() >= kResourceNumbers) return kNoResourceNumber;
  const auto number = static_cast<uint32_t>(numbers.size());
  numbers.emplace(name, number);
  return number;
}

std::optional<UsualPod> Usual(const std::vector<Demand>& pod_demand) {
  if (pod_demand.size() != 1 || pod_demand[0].size() != 1 || pod_demand[0].begin()->second == 0) {
    return std::nullopt;
  }
  const auto& [resource, count] = *pod_demand[0].begin();
  return UsualPod{resource, count, std::hash<std::string>{}(resource),
                  ResourceNumber(resource, false)};
}

FitSummary Summarize(const scheduling::NodeVgpuState& state, const std::vector<GpuSlots>& gpus) {
  FitSummary summary;
  summary.gpus = gpus.size();
  summary.free_gpus = scheduling::FreeGpus(gpus);
  std::set<std::string> names;
  for (const GpuSlots& gpu : state.gpus) {
    for (const auto& [name, slots] : gpu.resources) names.insert(name);
  }
  for (const std::string& name : names) {
    FitSummary::Resource resource;
    resource.hash = std::hash<std::string>{}(name);
    resource.name = name;
    resource.number = ResourceNumber(name, true);
    summary.numbers.push_back(resource.number);
    resource.ranked = scheduling::RankCandidates(gpus, name);
    for (const scheduling::Candidate& c : resource.ranked) resource.creatable += c.free;
    resource.offered = !NotOffered(state.gpus, {{{name, 1}}});
    summary.resources.push_back(std::move(resource));
  }
  return summary;
}

FitMemo::FitMemo(const Result<scheduling::NodeVgpuState>& state) {
  if (state.ok()) published_ = std::make_shared<const FitSummary>(Summarize(*state, state->gpus));
}

std::shared_ptr<const FitSummary> FitMemo::Summary(const scheduling::NodeVgpuState& state,
                                                   const std::vector<const BoundPod*>& waiting) {
  if (waiting.empty() && published_) return published_;
  {
    std::lock_guard lock(mutex_);
    for (const Waited& entry : waited_) {
      if (SameWaiting(entry.waiting, waiting)) return entry.summary;
    }
  }
  // Made outside the lock: another thread judging another pod on this node need not wait.
  const std::optional<std::vector<GpuSlots>> after_waiting = PlaceWaiting(state, waiting);
  Waited entry{{},
               std::make_shared<const FitSummary>(
                   Summarize(state, after_waiting ? *after_waiting : state.gpus))};
  for (const BoundPod* pod : waiting) entry.waiting.push_back(pod->demand);
  std::shared_ptr<const FitSummary> summary = entry.summary;
  std::lock_guard lock(mutex_);
  if (waited_.size() < kWaited) {
    waited_.push_back(std::move(entry));
  } else {
    waited_[next_waited_] = std::move(entry);
    next_waited_ = (next_waited_ + 1) % kWaited;
  }
  return summary;
}

NodeVerdict JudgeNode(const std::optional<std::string>& state_annotation,
                      const std::vector<BoundPod>& bound, const std::string& pod_uid,
                      const std::vector<Demand>& pod_demand, int64_t now_unix_ms,
                      const FitOptions& options) {
  if (!state_annotation) {
    return JudgeNode(nullptr, bound, pod_uid, pod_demand, now_unix_ms, options);
  }
  const Result<scheduling::NodeVgpuState> state = scheduling::ParseNodeState(*state_annotation);
  return JudgeNode(&state, bound, pod_uid, pod_demand, now_unix_ms, options);
}

NodeVerdict JudgeNode(const Result<scheduling::NodeVgpuState>* published,
                      const std::vector<BoundPod>& bound, const std::string& pod_uid,
                      const std::vector<Demand>& pod_demand, int64_t now_unix_ms,
                      const FitOptions& options, FitMemo* memo, const UsualPod* usual) {
  if (published == nullptr) {
    return Unresolvable(
        "no vGPU state published on the node (the kata-vgpu device plugin is not running there, "
        "or its schedulerState.publish is off)");
  }
  if (!published->ok()) return Unresolvable(published->status().message());
  const scheduling::NodeVgpuState& state = published->value();
  // Judged on every call, never remembered: the age grows while the state stays the same.
  const int64_t age_ms = now_unix_ms - state.published_unix_ms;
  if (age_ms > options.max_state_age.count()) {
    return Unresolvable("vGPU state is " + std::to_string(age_ms / 1000) + " s old (at most " +
                        std::to_string(options.max_state_age.count() / 1000) +
                        " s): the device plugin is down or cannot reach the API server");
  }
  const std::vector<const BoundPod*> waiting = Waiting(state, bound, pod_uid);
  // The usual pod, one container asking for one resource: read from the summary.
  std::optional<UsualPod> own;
  if (memo != nullptr && usual == nullptr) {
    own = Usual(pod_demand);
    if (own) usual = &*own;
  }
  if (memo != nullptr && usual != nullptr) {
    if (waiting.empty() && memo->Published() != nullptr) {
      return FitOne(*memo->Published(), *usual, state.policy, options.policy);
    }
    return FitOne(*memo->Summary(state, waiting), *usual, state.policy, options.policy);
  }
  if (memo != nullptr) {
    if (std::optional<NodeVerdict> known = memo->Find(waiting, pod_demand, options.policy)) {
      return std::move(*known);
    }
  }
  NodeVerdict verdict = Fit(state, waiting, pod_demand, options.policy);
  if (memo != nullptr) memo->Put(waiting, pod_demand, options.policy, verdict);
  return verdict;
}

NodeVerdict JudgeNode(const WatchedNode& node, const std::string& pod_uid,
                      const std::vector<Demand>& pod_demand, const UsualPod* usual,
                      int64_t now_unix_ms, const FitOptions& options) {
  // JudgeNode's path below for the usual pod on a recent state where no pod waits.
  if (usual != nullptr && node.ok && node.published != nullptr &&
      (node.bound == nullptr || node.bound->empty()) &&
      now_unix_ms - node.published_unix_ms <= options.max_state_age.count()) {
    return FitOne(*node.published, *usual, node.policy, options.policy);
  }
  static const std::vector<BoundPod> kNone;
  return JudgeNode(node.state, node.bound != nullptr ? *node.bound : kNone, pod_uid, pod_demand,
                   now_unix_ms, options, node.memo, usual);
}

std::optional<NodeVerdict> FitMemo::Find(const std::vector<const BoundPod*>& waiting,
                                         const std::vector<Demand>& pod_demand,
                                         scheduling::Policy policy) const {
  const size_t shape = Shape(pod_demand, policy);
  std::lock_guard lock(mutex_);
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (shapes_[i] != shape) continue;
    const Entry& entry = entries_[i];
    if (entry.policy == policy && entry.pod_demand == pod_demand &&
        SameWaiting(entry.waiting, waiting)) {
      return entry.verdict;
    }
  }
  return std::nullopt;
}

void FitMemo::Put(const std::vector<const BoundPod*>& waiting,
                  const std::vector<Demand>& pod_demand, scheduling::Policy policy,
                  const NodeVerdict& verdict) {
  Entry entry{{}, pod_demand, policy, verdict};
  for (const BoundPod* pod : waiting) entry.waiting.push_back(pod->demand);
  const size_t shape = Shape(pod_demand, policy);
  std::lock_guard lock(mutex_);
  size_t at = entries_.size();
  if (at < kEntries) {
    entries_.push_back(std::move(entry));
  } else {
    at = next_;
    entries_[at] = std::move(entry);
    next_ = (next_ + 1) % kEntries;
  }
  shapes_[at] = shape;
}

}  // namespace kvgpu::extender
