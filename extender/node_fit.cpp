#include "extender/node_fit.h"

#include <algorithm>
#include <cmath>

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

}  // namespace

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
                      const FitOptions& options) {
  if (published == nullptr) {
    return Unresolvable(
        "no vGPU state published on the node (the kata-vgpu device plugin is not running there, "
        "or its schedulerState.publish is off)");
  }
  if (!published->ok()) return Unresolvable(published->status().message());
  const scheduling::NodeVgpuState* state = &published->value();
  const int64_t age_ms = now_unix_ms - state->published_unix_ms;
  if (age_ms > options.max_state_age.count()) {
    return Unresolvable("vGPU state is " + std::to_string(age_ms / 1000) + " s old (at most " +
                        std::to_string(options.max_state_age.count() / 1000) +
                        " s): the device plugin is down or cannot reach the API server");
  }
  if (auto resource = NotOffered(state->gpus, pod_demand)) {
    return Unresolvable("no GPU on the node offers " + *resource);
  }
  std::vector<GpuSlots> gpus = state->gpus;
  // Pods bound here whose vGPUs the plugin has not made yet take theirs first, in bind order.
  // The plugin's unattributed vGPUs belong to some of them and already count as used.
  std::map<std::string, uint32_t> made = state->unattributed;
  for (const BoundPod& pod : bound) {
    if (pod.uid == pod_uid || state->holders.contains(pod.key)) continue;
    for (Demand container : pod.demand) {
      for (auto& [resource, count] : container) {
        const uint32_t already = std::min(count, made[resource]);
        count -= already;
        made[resource] -= already;
      }
      // One that no longer fits will fail its admission; it takes nothing.
      (void)scheduling::PlaceDemand(gpus, container, state->policy);
    }
  }
  const size_t free_before = scheduling::FreeGpus(gpus);
  for (const Demand& container : pod_demand) {
    std::string why;
    if (!scheduling::PlaceDemand(gpus, container, state->policy, &why)) {
      return {NodeVerdict::Kind::kFull, why, 0};
    }
  }
  return {NodeVerdict::Kind::kFits, "",
          Score(gpus.size(), free_before, scheduling::FreeGpus(gpus), options.policy)};
}

}  // namespace kvgpu::extender
