// Where vGPUs go on a node's GPUs: the one placement rule that the device plugin (kubelet's
// GetPreferredAllocation, deviceplugin/model/placement.h) and the scheduler extender (which node
// can take a pod, extender/) both follow, so that a node places a pod where the extender assumed.
//
// A GPU is ranked for the next vGPU of a resource by RankGpu: GPUs locked to what the resource
// cannot join last, then GPUs already carrying what it locks to, fuller first, so that vGPUs pack
// onto the GPUs they hold and free GPUs stay free for other sizes and types.
// PlaceDemand applies that rule to a model of the node's GPUs (per GPU: its occupancy mode and
// lock, and per resource the vGPUs used and the devices still creatable). Pure: no I/O, no clock.
//
// What locks a GPU depends on its occupancy mode (docs/gpu-shapes.md gives the sources): NVIDIA's
// default equal-size mode locks a time-sliced GPU to the framebuffer size of its first vGPU (any
// type of that size may join); older drivers lock it to the type. Mixed-size and MIG-backed GPUs
// follow rules (placements, GPU instances) this model does not hold, so there, as on GPUs whose
// rule is unknown, only the kernel's counts are believed, and a vGPU placed but not yet made
// leaves nothing else promised on that GPU until the kernel counts again.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvgpu::scheduling {

// How vGPUs may share one physical GPU.
enum class Occupancy {
  kUnknown,    // no rule known (the kernel's sample drivers, GPUs not yet told apart)
  kStrict,     // the first vGPU locks the GPU to its type
  kEqualSize,  // the first vGPU locks the GPU to its framebuffer size; series may mix
  kMixedSize,  // heterogeneous mode: sizes may mix where a placement is free
  kMig,        // MIG-backed vGPUs in GPU instances
};
// "unknown", "strict", "equal-size", "mixed-size", "mig".
const char* OccupancyName(Occupancy occupancy);
std::optional<Occupancy> ParseOccupancy(std::string_view name);

// What a vGPU of a type locks a GPU in `occupancy` to: its type (strict, and equal-size when the
// framebuffer is not known), its framebuffer size (equal-size); empty where no lock is modelled.
std::string LockKey(Occupancy occupancy, const std::string& type_id, uint64_t framebuffer_mib);

// What one GPU carries, as far as ranking it for the next vGPU of one resource goes.
struct GpuLoad {
  int same_type = 0;        // vGPUs on the GPU that lock it as the resource would
  int free = 0;             // devices of the resource on it that can still be made
  bool other_type = false;  // locked to something the resource cannot join
};

// How good a GPU is for the next vGPU of a resource; lower first. Member order is the order of
// importance.
struct GpuRank {
  int blocked = 0;          // 1: locked to another type
  int unlocked = 1;         // 0: carries the type already; 1: a GPU free of vGPUs is kept
  int minus_same_type = 0;  // fuller GPUs first (pack)
  int free = 0;             // then fewer devices left

  auto operator<=>(const GpuRank&) const = default;
};

GpuRank RankGpu(const GpuLoad& load);

// One resource on one GPU.
struct ResourceSlots {
  ResourceSlots() = default;
  ResourceSlots(std::string type, uint32_t used_count, uint32_t free_count,
                uint64_t framebuffer = 0)
      : type_id(std::move(type)),
        used(used_count),
        free(free_count),
        framebuffer_mib(framebuffer) {}

  std::string type_id;
  uint32_t used = 0;             // vGPUs of the resource on the GPU
  uint32_t free = 0;             // devices of it the GPU can still make
  uint64_t framebuffer_mib = 0;  // the type's framebuffer; 0 when not known

  bool operator==(const ResourceSlots&) const = default;
};

struct GpuSlots {
  std::string id;  // the physical GPU's PCI address
  Occupancy occupancy = Occupancy::kStrict;
  // The type of the first vGPU on it, ours or not; empty when it carries none.
  std::string locked_type;
  // LockKey of the vGPUs on it (empty when it carries none, or when no lock is modelled).
  std::string lock;
  std::map<std::string, ResourceSlots> resources;  // by resource name

  // Whether a vGPU of `slots` cannot go here for the lock of the vGPUs already on it.
  bool LockedAgainst(const ResourceSlots& slots) const;
  // Records a first vGPU of `type_id` on it (locked_type and lock, by `occupancy`).
  void LockTo(const std::string& type_id, uint64_t framebuffer_mib = 0);
  bool operator==(const GpuSlots&) const = default;
};

// A container's vGPU request: resource name -> count.
using Demand = std::map<std::string, uint32_t>;

enum class Policy { kPack, kSpread };
const char* PolicyName(Policy policy);  // "pack", "spread"
std::optional<Policy> ParsePolicy(const std::string& name);

// Places one container's demand the way the plugin answers kubelet: each resource in name order
// (kubelet asks once per resource), GPUs in RankGpu order, filled one after another (pack) or one
// device per GPU per round (spread), and applies it to `gpus` (used and free counts, the lock,
// what the lock hides, and what vGPUs sharing the lock's capacity have left). Returns false, with
// `gpus` unchanged and `why` set, when it does not fit.
bool PlaceDemand(std::vector<GpuSlots>& gpus, const Demand& demand, Policy policy,
                 std::string* why = nullptr);

// GPUs carrying no vGPU, which any type can still take.
size_t FreeGpus(const std::vector<GpuSlots>& gpus);

// What PlaceDemand would do with `demand`, without changing `gpus`: how many of the FreeGpus it
// would lock, or nullopt, with `why` set as PlaceDemand sets it, when it does not fit.
std::optional<size_t> FreeGpusTaken(const std::vector<GpuSlots>& gpus, const Demand& demand,
                                    Policy policy, std::string* why = nullptr);

}  // namespace kvgpu::scheduling
