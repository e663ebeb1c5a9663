#include "deviceplugin/model/placement.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "common/log_safe.h"

namespace kvgpu::deviceplugin {

namespace {

// What the GPUs carry, as far as ranking a resource's devices goes.
struct GpuLoads {
  std::map<std::string, int> same_type;  // vGPUs locking the GPU as the resource would, per GPU
  std::map<std::string, int> free;       // free devices of the resource per GPU
  // GPUs whose vGPUs lock them against the resource. Allocate updates the vGPUs at once, while
  // the kernel's counts that hide this resource's devices there arrive with the next rescan.
  std::set<std::string> other_type;
};

GpuLoads LoadsOf(const std::vector<Device>& listed, const std::vector<mdev::Vgpu>& vgpus,
                 const GpuRules& rules) {
  GpuLoads loads;
  std::set<std::string> types;
  for (const Device& d : listed) types.insert(d.key.type_id);
  // GPUs whose mode's facts are known for the resource (mixed-size placements, MIG instances):
  // there a device is worth asking for only while scheduling::ModeRoom has room for its type,
  // counted over every vGPU on the GPU, those made since the last scan included.
  std::map<std::string, bool> room;  // GPU -> whether the mode's rule has room
  for (const Device& d : listed) {
    if (room.contains(d.physical_gpu)) continue;
    scheduling::ResourceSlots slots;
    slots.type_id = d.key.type_id;
    slots.framebuffer_mib = rules.FramebufferOf(d.physical_gpu, d.key.type_id);
    rules.FillType(d.physical_gpu, d.key.type_id, slots);
    const std::optional<uint32_t> left =
        scheduling::ModeRoom(rules.ShapeOf(d.physical_gpu, vgpus), slots);
    if (left) room[d.physical_gpu] = *left > 0;
  }
  for (const mdev::Vgpu& v : vgpus) {
    if (room.contains(v.physical_gpu)) {
      if (types.contains(v.type_id)) ++loads.same_type[v.physical_gpu];
      continue;
    }
    const std::string key = rules.LockKey(v.physical_gpu, v.type_id);
    bool same = types.contains(v.type_id);
    bool against = false;
    for (const std::string& type : types) {
      // Where no lock is modelled (key empty) only the resource's own type counts as the same.
      const std::string resource_key = rules.LockKey(v.physical_gpu, type);
      if (key.empty() || resource_key.empty()) continue;
      same = same || resource_key == key;
      against = against || resource_key != key;
    }
    if (same) {
      ++loads.same_type[v.physical_gpu];
    } else if (against || key.empty()) {
      loads.other_type.insert(v.physical_gpu);
    }
  }
  for (const Device& d : listed) {
    if (d.healthy && !d.vgpu_exists) ++loads.free[d.physical_gpu];
  }
  for (const auto& [gpu, has_room] : room) {
    if (!has_room) loads.other_type.insert(gpu);
  }
  // A GPU whose lock's capacity the vGPUs made since the last scan used up: its devices still look
  // free until the kernel's next count, but the kernel would refuse them. Types of one lock share
  // it (equal-size mode: every type of a size has the same max_instance, the GPU over that size).
  for (const Device& d : listed) {
    if (room.contains(d.physical_gpu)) continue;  // ModeRoom counted them
    const uint32_t max = rules.MaxInstancesOf(d.physical_gpu, d.key.type_id);
    auto same = loads.same_type.find(d.physical_gpu);
    if (max > 0 && same != loads.same_type.end() && same->second >= static_cast<int>(max)) {
      loads.other_type.insert(d.physical_gpu);
    }
  }
  return loads;
}

PlacementRank RankOf(const Device& d, const GpuLoads& loads) {
  auto count = [](const std::map<std::string, int>& m, const std::string& gpu) {
    auto it = m.find(gpu);
    return it == m.end() ? 0 : it->second;
  };
  const bool other_type = loads.other_type.contains(d.physical_gpu);
  const scheduling::GpuLoad load{count(loads.same_type, d.physical_gpu),
                                 count(loads.free, d.physical_gpu), other_type};
  return PlacementRank{other_type ? 2 : (d.vgpu_exists ? 1 : 0), scheduling::RankGpu(load),
                       d.physical_gpu, d.id};
}

struct Candidate {
  std::string id;
  std::string gpu;
  PlacementRank rank;
};

void TakeSpread(const std::vector<Candidate>& candidates, size_t want,
                std::set<std::string> chosen_gpus, std::vector<std::string>& chosen) {
  std::vector<bool> taken(candidates.size(), false);
  while (chosen.size() < want) {
    bool progressed = false;
    std::set<std::string> round_gpus = chosen_gpus;
    for (size_t c = 0; c < candidates.size() && chosen.size() < want; ++c) {
      if (taken[c] || round_gpus.contains(candidates[c].gpu)) continue;
      taken[c] = true;
      progressed = true;
      chosen.push_back(candidates[c].id);
      round_gpus.insert(candidates[c].gpu);
    }
    if (!progressed) break;
    chosen_gpus.clear();  // later rounds may reuse GPUs, still spreading evenly
  }
  for (size_t c = 0; c < candidates.size() && chosen.size() < want; ++c) {
    if (!taken[c]) chosen.push_back(candidates[c].id);
  }
}

}  // namespace

Result<std::vector<std::vector<std::string>>> PreferDevices(
    const std::vector<Device>& listed, const std::vector<mdev::Vgpu>& vgpus, const GpuRules& rules,
    bool spread, const std::vector<PreferredRequest>& requests) {
  std::unordered_map<std::string, const Device*> by_id;
  for (const Device& d : listed) by_id[d.id] = &d;
  const GpuLoads loads = LoadsOf(listed, vgpus, rules);

  std::vector<std::vector<std::string>> answers;
  for (size_t i = 0; i < requests.size(); ++i) {
    const PreferredRequest& req = requests[i];
    std::string where = "container request " + std::to_string(i) + ": ";
    std::set<std::string> available(req.available.begin(), req.available.end());
    if (req.size <= 0) return Status::Invalid(where + "allocation size must be at least 1");
    if (static_cast<size_t>(req.size) > available.size()) {
      return Status::Invalid(where + "allocation size " + std::to_string(req.size) +
                             " exceeds the " + std::to_string(available.size()) +
                             " available devices");
    }
    if (req.must_include.size() > static_cast<size_t>(req.size)) {
      return Status::Invalid(where + "more must-include devices than the allocation size");
    }
    std::vector<std::string> chosen;
    std::set<std::string> chosen_gpus;
    for (const std::string& id : req.must_include) {
      if (!available.contains(id)) {
        return Status::Invalid(where + "must-include device " + LogSafe(id) +
                               " is not among the available ones");
      }
      if (std::find(chosen.begin(), chosen.end(), id) != chosen.end()) continue;
      chosen.push_back(id);
      if (auto it = by_id.find(id); it != by_id.end()) chosen_gpus.insert(it->second->physical_gpu);
    }
    std::vector<Candidate> candidates;
    for (const std::string& id : available) {
      if (std::find(chosen.begin(), chosen.end(), id) != chosen.end()) continue;
      auto it = by_id.find(id);
      // Never an ID this resource does not list, or one Allocate would refuse as unhealthy:
      // kubelet fills the rest of the request from its own available list.
      if (it == by_id.end() || !it->second->healthy) continue;
      candidates.push_back({id, it->second->physical_gpu, RankOf(*it->second, loads)});
    }
    std::sort(candidates.begin(), candidates.end(),
              [](const Candidate& a, const Candidate& b) { return a.rank < b.rank; });
    const auto want = static_cast<size_t>(req.size);
    if (spread) {
      TakeSpread(candidates, want, std::move(chosen_gpus), chosen);
    } else {
      for (size_t c = 0; c < candidates.size() && chosen.size() < want; ++c) {
        chosen.push_back(candidates[c].id);
      }
    }
    answers.push_back(std::move(chosen));
  }
  return answers;
}

}  // namespace kvgpu::deviceplugin
