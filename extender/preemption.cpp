#include "extender/preemption.h"

#include <algorithm>
#include <map>
#include <set>

namespace kvgpu::extender {

namespace {

using scheduling::GpuSlots;
using scheduling::Occupancy;

bool LockModelled(const GpuSlots& gpu) {
  return gpu.occupancy == Occupancy::kStrict || gpu.occupancy == Occupancy::kEqualSize;
}

uint64_t Used(const GpuSlots& gpu) {
  uint64_t used = 0;
  for (const auto& [name, slots] : gpu.resources) used += slots.used;
  return used;
}

// Gives `count` vGPUs of `resource` back as free room on the GPUs carrying it; none when one of
// those GPUs follows a rule the model does not hold.
void GiveBack(std::vector<GpuSlots>& gpus, const std::string& resource, uint32_t count) {
  auto carries = [&](const GpuSlots& gpu) {
    auto it = gpu.resources.find(resource);
    return it != gpu.resources.end() && it->second.used > 0;
  };
  for (const GpuSlots& gpu : gpus) {
    if (carries(gpu) && !LockModelled(gpu)) return;
  }
  for (GpuSlots& gpu : gpus) {
    if (count == 0) return;
    if (!carries(gpu)) continue;
    scheduling::ResourceSlots& slots = gpu.resources[resource];
    const uint32_t n = std::min(count, slots.used);
    slots.used -= n;
    slots.free += n;
    count -= n;
  }
}

// The room `resource` has on an empty GPU of this node: as a free GPU shows it, or a GPU locked
// to what the resource locks to (its own vGPUs and what it can still make there).
uint32_t RoomOnEmptyGpu(const std::vector<GpuSlots>& gpus, const std::string& resource) {
  uint32_t room = 0;
  for (const GpuSlots& gpu : gpus) {
    auto it = gpu.resources.find(resource);
    if (it == gpu.resources.end() || gpu.LockedAgainst(it->second)) continue;
    const bool empty = gpu.lock.empty() && gpu.locked_type.empty() && Used(gpu) == 0;
    if (!empty && gpu.lock.empty()) continue;  // carries vGPUs under no modelled lock
    room = std::max(room, it->second.used + it->second.free);
  }
  return room;
}

// Unlocks the GPUs of each lock whose every vGPU of ours the victims take, offering every
// resource of the node the room it has on an empty GPU.
void Unlock(std::vector<GpuSlots>& gpus, const std::vector<GpuSlots>& before) {
  std::map<std::string, uint64_t> left_by_lock;
  for (size_t i = 0; i < gpus.size(); ++i) {
    // A GPU locked with no vGPU of ours carries someone else's: it stays locked.
    if (!LockModelled(gpus[i]) || gpus[i].lock.empty() || Used(before[i]) == 0) continue;
    left_by_lock[gpus[i].lock] += Used(gpus[i]);
  }
  std::map<std::string, scheduling::ResourceSlots> offered;
  for (const GpuSlots& gpu : before) {
    for (const auto& [name, slots] : gpu.resources) {
      scheduling::ResourceSlots& room = offered[name];
      room.type_id = slots.type_id;
      room.framebuffer_mib = slots.framebuffer_mib;
      room.free = std::max(room.free, RoomOnEmptyGpu(before, name));
    }
  }
  for (size_t i = 0; i < gpus.size(); ++i) {
    GpuSlots& gpu = gpus[i];
    auto left = left_by_lock.find(gpu.lock);
    if (!LockModelled(gpu) || left == left_by_lock.end() || left->second != 0 ||
        Used(before[i]) == 0)
      continue;
    gpu.locked_type.clear();
    gpu.lock.clear();
    for (const auto& [name, room] : offered) {
      if (room.free > 0) gpu.resources[name] = room;
    }
  }
}

}  // namespace

NodeWithout WithoutVictims(const scheduling::NodeVgpuState& state,
                           const std::vector<BoundPod>& bound,
                           const std::vector<BoundPod>& victims) {
  NodeWithout out{state, {}};
  std::set<std::string> gone;
  std::map<std::string, uint32_t> given_back;
  for (const BoundPod& victim : victims) {
    if (!gone.insert(victim.uid).second) continue;  // named twice, freed once
    if (out.state.holders.erase(victim.key) == 0) continue;
    for (const scheduling::Demand& container : victim.demand) {
      for (const auto& [resource, count] : container) given_back[resource] += count;
    }
  }
  for (const BoundPod& pod : bound) {
    if (!gone.contains(pod.uid)) out.bound.push_back(pod);
  }
  for (const auto& [resource, count] : given_back) GiveBack(out.state.gpus, resource, count);
  Unlock(out.state.gpus, state.gpus);
  return out;
}

NodeVerdict JudgePreemption(const Result<scheduling::NodeVgpuState>* state,
                            const std::vector<BoundPod>& bound,
                            const std::vector<BoundPod>& victims, const std::string& pod_uid,
                            const std::vector<scheduling::Demand>& pod_demand, int64_t now_unix_ms,
                            const FitOptions& options) {
  NodeVerdict as_is = JudgeNode(state, bound, pod_uid, pod_demand, now_unix_ms, options);
  if (as_is.kind != NodeVerdict::Kind::kFull) return as_is;
  NodeWithout after = WithoutVictims(state->value(), bound, victims);
  const Result<scheduling::NodeVgpuState> modelled(std::move(after.state));
  NodeVerdict verdict =
      JudgeNode(&modelled, after.bound, pod_uid, pod_demand, now_unix_ms, options);
  if (verdict.kind != NodeVerdict::Kind::kFits) {
    verdict.kind = NodeVerdict::Kind::kFull;
    verdict.reason = "the victims free no room the pod can use: " + verdict.reason;
  }
  return verdict;
}

}  // namespace kvgpu::extender
