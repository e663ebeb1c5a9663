#include "scheduling/gpu_fit.h"

#include <algorithm>
#include <array>

namespace kvgpu::scheduling {

GpuRank RankGpu(const GpuLoad& load) {
  return GpuRank{load.other_type ? 1 : 0, load.same_type > 0 ? 0 : 1, -load.same_type, load.free};
}

const char* OccupancyName(Occupancy occupancy) {
  switch (occupancy) {
    case Occupancy::kStrict:
      return "strict";
    case Occupancy::kEqualSize:
      return "equal-size";
    case Occupancy::kMixedSize:
      return "mixed-size";
    case Occupancy::kMig:
      return "mig";
    case Occupancy::kUnknown:
      break;
  }
  return "unknown";
}

std::optional<Occupancy> ParseOccupancy(std::string_view name) {
  for (Occupancy o : {Occupancy::kUnknown, Occupancy::kStrict, Occupancy::kEqualSize,
                      Occupancy::kMixedSize, Occupancy::kMig}) {
    if (name == OccupancyName(o)) return o;
  }
  return std::nullopt;
}

std::string LockKey(Occupancy occupancy, const std::string& type_id, uint64_t framebuffer_mib) {
  if (occupancy == Occupancy::kEqualSize && framebuffer_mib > 0) {
    return "framebuffer:" + std::to_string(framebuffer_mib) + "MiB";
  }
  if (occupancy == Occupancy::kStrict || occupancy == Occupancy::kEqualSize) {
    return "type:" + type_id;
  }
  return "";
}

bool GpuSlots::LockedAgainst(const ResourceSlots& slots) const {
  if (lock.empty()) return false;
  const std::string key = LockKey(occupancy, slots.type_id, slots.framebuffer_mib);
  return !key.empty() && key != lock;
}

void GpuSlots::LockTo(const std::string& type_id, uint64_t framebuffer_mib) {
  locked_type = type_id;
  lock = LockKey(occupancy, type_id, framebuffer_mib);
}

namespace {

bool Overlaps(const SlotRange& a, uint32_t start, uint32_t size) {
  return start < a.start + a.size && a.start < start + size;
}

bool SlotsFree(const std::vector<SlotRange>& used, uint32_t start, uint32_t size) {
  return std::none_of(used.begin(), used.end(),
                      [&](const SlotRange& range) { return Overlaps(range, start, size); });
}

uint32_t RoomIn(const GpuInstanceSlots& gi, const ResourceSlots& slots) {
  if (gi.profile != *slots.gi_profile || gi.vgpus >= slots.max_per_gi) return 0;
  if (gi.vgpus > 0 && gi.vgpu_framebuffer_mib != slots.framebuffer_mib) return 0;
  return slots.max_per_gi - gi.vgpus;
}

}  // namespace

std::optional<uint32_t> LowestPlacement(const GpuSlots& gpu, const Placements& placements) {
  for (uint32_t start : placements.ids) {
    if (SlotsFree(gpu.used_slots, start, placements.size)) return start;
  }
  return std::nullopt;
}

std::optional<uint32_t> FittingGpuInstance(const GpuSlots& gpu, const ResourceSlots& slots) {
  if (!slots.gi_profile) return std::nullopt;
  for (const GpuInstanceSlots& gi : gpu.gpu_instances) {
    if (RoomIn(gi, slots) > 0) return gi.id;
  }
  return std::nullopt;
}

std::optional<uint32_t> ModeRoom(const GpuSlots& gpu, const ResourceSlots& slots) {
  if (gpu.occupancy == Occupancy::kMig && slots.gi_profile) {
    uint32_t room = 0;
    for (const GpuInstanceSlots& gi : gpu.gpu_instances) room += RoomIn(gi, slots);
    return room;
  }
  if (gpu.occupancy == Occupancy::kMixedSize && !slots.placements.ids.empty()) {
    std::vector<SlotRange> used = gpu.used_slots;
    uint32_t room = 0;
    for (uint32_t start : slots.placements.ids) {
      if (!SlotsFree(used, start, slots.placements.size)) continue;
      used.push_back({start, slots.placements.size});
      ++room;
    }
    return room;
  }
  return std::nullopt;
}

uint32_t Creatable(const GpuSlots& gpu, const ResourceSlots& slots) {
  std::optional<uint32_t> room = ModeRoom(gpu, slots);
  return room ? std::min(slots.free, *room) : slots.free;
}

bool TakeModeRoom(GpuSlots& gpu, const ResourceSlots& slots) {
  if (gpu.occupancy == Occupancy::kMig && slots.gi_profile) {
    std::optional<uint32_t> id = FittingGpuInstance(gpu, slots);
    if (!id) return false;
    for (GpuInstanceSlots& gi : gpu.gpu_instances) {
      if (gi.id != *id) continue;
      gi.vgpu_framebuffer_mib = slots.framebuffer_mib;
      ++gi.vgpus;
    }
    return true;
  }
  if (gpu.occupancy == Occupancy::kMixedSize && !slots.placements.ids.empty()) {
    std::optional<uint32_t> start = LowestPlacement(gpu, slots.placements);
    if (!start) return false;
    gpu.used_slots.push_back({*start, slots.placements.size});
    return true;
  }
  return false;
}

const char* PolicyName(Policy policy) {
  return policy == Policy::kSpread ? "spread" : "pack";
}

std::optional<Policy> ParsePolicy(const std::string& name) {
  if (name == "pack") return Policy::kPack;
  if (name == "spread") return Policy::kSpread;
  return std::nullopt;
}

namespace {

// vGPUs on the GPU that lock it as `slots` would: that resource's own where no lock is modelled.
int SameLock(const GpuSlots& gpu, const ResourceSlots& slots) {
  const std::string key = LockKey(gpu.occupancy, slots.type_id, slots.framebuffer_mib);
  if (key.empty()) return static_cast<int>(slots.used);
  int same = 0;
  for (const auto& [name, other] : gpu.resources) {
    if (LockKey(gpu.occupancy, other.type_id, other.framebuffer_mib) == key) {
      same += static_cast<int>(other.used);
    }
  }
  // Locked to the key by vGPUs that are not ours to count (another tool's): it carries the key.
  return same == 0 && gpu.lock == key ? 1 : same;
}

// How many vGPUs of `resource` each GPU takes (index -> count); empty when they do not fit.
std::map<size_t, uint32_t> Choose(const std::vector<GpuSlots>& gpus, const std::string& resource,
                                  uint32_t count, Policy policy) {
  const std::vector<Candidate> ranked = RankCandidates(gpus, resource);
  std::vector<uint32_t> n(ranked.size());
  if (!Distribute(ranked, count, policy, n)) return {};
  std::map<size_t, uint32_t> taken;
  for (size_t i = 0; i < ranked.size(); ++i) {
    if (n[i] > 0) taken[ranked[i].index] = n[i];
  }
  return taken;
}

// Whether taking `n` vGPUs of `resource` locks a GPU that FreeGpus counts (Apply's lock).
bool Locks(const GpuSlots& gpu, const std::string& resource, uint32_t n) {
  return n > 0 && gpu.locked_type.empty() && !gpu.resources.at(resource).type_id.empty();
}

void Apply(GpuSlots& gpu, const std::string& resource, uint32_t n) {
  ResourceSlots& slots = gpu.resources.at(resource);
  slots.used += n;
  slots.free -= n;
  if (n == 0) return;
  const std::string key = LockKey(gpu.occupancy, slots.type_id, slots.framebuffer_mib);
  if (gpu.locked_type.empty()) gpu.LockTo(slots.type_id, slots.framebuffer_mib);
  if (ModeRoom(gpu, slots)) {
    // Mixed-size or MIG with the facts known: each vGPU takes its placement or instance, which
    // CreatableOn then reads for every resource. Each also takes a device the others may have
    // counted (a VF lists every type it could take), so their counts lose as many.
    for (uint32_t i = 0; i < n; ++i) (void)TakeModeRoom(gpu, slots);
    for (auto& [other, other_slots] : gpu.resources) {
      if (other == resource) continue;
      if (ModeRoom(gpu, other_slots)) {
        other_slots.free -= std::min(other_slots.free, n);
      } else {
        other_slots.free = 0;  // no facts for it: nothing promised until the kernel counts
      }
    }
    return;
  }
  for (auto& [other, other_slots] : gpu.resources) {
    if (other == resource) continue;
    if (!key.empty() &&
        LockKey(gpu.occupancy, other_slots.type_id, other_slots.framebuffer_mib) == key) {
      // Types of one lock share its capacity: what these took, the others can no longer make.
      other_slots.free -= std::min(other_slots.free, n);
    } else {
      // Locked out; or, with no rule modelled, nothing more is promised until the kernel counts.
      other_slots.free = 0;
    }
  }
}

std::string NoRoom(const std::vector<GpuSlots>& gpus, const std::string& resource, uint32_t count) {
  uint32_t free = 0;
  for (const GpuSlots& gpu : gpus) {
    auto it = gpu.resources.find(resource);
    if (it != gpu.resources.end() && !gpu.LockedAgainst(it->second)) {
      free += Creatable(gpu, it->second);
    }
  }
  return NoRoomReason(resource, count, free);
}

}  // namespace

std::vector<Candidate> RankCandidates(const std::vector<GpuSlots>& gpus,
                                      const std::string& resource) {
  struct Ranked {
    GpuRank rank;
    const std::string* id;
    Candidate candidate;
  };
  std::vector<Ranked> ranked;
  ranked.reserve(gpus.size());
  for (size_t i = 0; i < gpus.size(); ++i) {
    auto it = gpus[i].resources.find(resource);
    if (it == gpus[i].resources.end() || it->second.free == 0) continue;
    if (gpus[i].LockedAgainst(it->second)) continue;
    const uint32_t free = Creatable(gpus[i], it->second);
    if (free == 0) continue;
    GpuLoad load{SameLock(gpus[i], it->second), static_cast<int>(free), false};
    ranked.push_back({RankGpu(load), &gpus[i].id,
                      Candidate{static_cast<uint32_t>(i), free, Locks(gpus[i], resource, 1)}});
  }
  std::sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
    return std::tie(a.rank, *a.id) < std::tie(b.rank, *b.id);
  });
  std::vector<Candidate> out;
  out.reserve(ranked.size());
  for (const Ranked& r : ranked) out.push_back(r.candidate);
  return out;
}

bool Distribute(std::span<const Candidate> ranked, uint32_t count, Policy policy,
                std::span<uint32_t> taken) {
  std::fill(taken.begin(), taken.end(), 0u);
  uint32_t left = count;
  if (policy == Policy::kPack) {
    for (size_t i = 0; i < ranked.size() && left > 0; ++i) {
      taken[i] = std::min(left, ranked[i].free);
      left -= taken[i];
    }
  } else {
    bool progressed = true;
    while (left > 0 && progressed) {
      progressed = false;
      for (size_t i = 0; i < ranked.size() && left > 0; ++i) {
        if (taken[i] == ranked[i].free) continue;
        ++taken[i];
        --left;
        progressed = true;
      }
    }
  }
  return left == 0;
}

std::optional<size_t> FreeGpusTakenFrom(std::span<const Candidate> ranked, uint32_t count,
                                        Policy policy) {
  // Nodes have a few GPUs: the counts stay on the stack (the extender asks this of every node).
  constexpr size_t kOnStack = 32;
  std::array<uint32_t, kOnStack> on_stack;  // Distribute zeroes what it uses
  std::vector<uint32_t> on_heap;
  std::span<uint32_t> taken(on_stack.data(), std::min(ranked.size(), kOnStack));
  if (ranked.size() > kOnStack) {
    on_heap.resize(ranked.size());
    taken = on_heap;
  }
  if (!Distribute(ranked, count, policy, taken)) return std::nullopt;
  size_t locked = 0;
  for (size_t i = 0; i < ranked.size(); ++i) {
    if (taken[i] > 0 && ranked[i].free_gpu) ++locked;
  }
  return locked;
}

std::string NoRoomReason(const std::string& resource, uint32_t count, uint32_t creatable) {
  return resource + ": " + std::to_string(count) + " wanted, " + std::to_string(creatable) +
         " can be made on GPUs free or locked to what it locks to";
}

bool PlaceDemand(std::vector<GpuSlots>& gpus, const Demand& demand, Policy policy,
                 std::string* why) {
  // One resource (the usual container) is chosen before anything changes: no copy to roll back.
  const bool single = demand.size() <= 1;
  std::vector<GpuSlots> copy;
  if (!single) copy = gpus;
  std::vector<GpuSlots>& placed = single ? gpus : copy;
  for (const auto& [resource, count] : demand) {
    if (count == 0) continue;
    std::map<size_t, uint32_t> taken = Choose(placed, resource, count, policy);
    if (taken.empty()) {
      if (why != nullptr) *why = NoRoom(placed, resource, count);
      return false;
    }
    for (const auto& [index, n] : taken) Apply(placed[index], resource, n);
  }
  if (!single) gpus = std::move(copy);
  return true;
}

std::optional<size_t> FreeGpusTaken(const std::vector<GpuSlots>& gpus, const Demand& demand,
                                    Policy policy, std::string* why) {
  if (demand.size() > 1) {  // each resource is placed beside the ones before it: place a copy
    std::vector<GpuSlots> copy = gpus;
    const size_t before = FreeGpus(copy);
    if (!PlaceDemand(copy, demand, policy, why)) return std::nullopt;
    return before - FreeGpus(copy);
  }
  // One resource: PlaceDemand's choice, read without copying the GPUs (the extender asks this of
  // every node for every pod).
  size_t taken_free = 0;
  for (const auto& [resource, count] : demand) {
    if (count == 0) continue;
    const std::vector<Candidate> ranked = RankCandidates(gpus, resource);
    const std::optional<size_t> locked = FreeGpusTakenFrom(ranked, count, policy);
    if (!locked) {
      if (why != nullptr) *why = NoRoom(gpus, resource, count);
      return std::nullopt;
    }
    taken_free += *locked;
  }
  return taken_free;
}

size_t FreeGpus(const std::vector<GpuSlots>& gpus) {
  return static_cast<size_t>(std::count_if(
      gpus.begin(), gpus.end(), [](const GpuSlots& gpu) { return gpu.locked_type.empty(); }));
}

}  // namespace kvgpu::scheduling
