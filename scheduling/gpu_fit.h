// Where vGPUs go on a node's GPUs: the one placement rule that the device plugin (kubelet's
// GetPreferredAllocation, deviceplugin/model/placement.h) and the scheduler extender (which node
// can take a pod, extender/) both follow, so that a node places a pod where the extender assumed.
//
// A GPU is ranked for the next vGPU of a resource by RankGpu: GPUs locked to another type last
// (a time-sliced GPU hosts one type at a time), then GPUs already carrying the type, fuller first,
// so that a type packs onto the GPUs it holds and free GPUs stay free for other types.
// PlaceDemand applies that rule to a model of the node's GPUs (per GPU: its lock, and per
// resource the vGPUs used and the devices still creatable). Pure: no I/O, no clock.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kvgpu::scheduling {

// What one GPU carries, as far as ranking it for the next vGPU of one resource goes.
struct GpuLoad {
  int same_type = 0;        // vGPUs of the resource's type on the GPU
  int free = 0;             // devices of the resource on it that can still be made
  bool other_type = false;  // carries a vGPU of another type: locked to it
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
  std::string type_id;
  uint32_t used = 0;  // vGPUs of the resource on the GPU
  uint32_t free = 0;  // devices of it the GPU can still make

  bool operator==(const ResourceSlots&) const = default;
};

struct GpuSlots {
  std::string id;  // the physical GPU's PCI address
  // Time-sliced: the first vGPU locks the GPU to its type and every other type's count drops
  // to 0 (NVIDIA's rule). False for parents without that rule (the kernel's sample drivers).
  bool one_type = true;
  // The type of the vGPUs on it, ours or not (without the one-type rule: the first one's);
  // empty when it carries none.
  std::string locked_type;
  std::map<std::string, ResourceSlots> resources;  // by resource name

  bool operator==(const GpuSlots&) const = default;
};

// A container's vGPU request: resource name -> count.
using Demand = std::map<std::string, uint32_t>;

enum class Policy { kPack, kSpread };
const char* PolicyName(Policy policy);  // "pack", "spread"
std::optional<Policy> ParsePolicy(const std::string& name);

// Places one container's demand the way the plugin answers kubelet: each resource in name order
// (kubelet asks once per resource), GPUs in RankGpu order, filled one after another (pack) or one
// device per GPU per round (spread), and applies it to `gpus` (used and free counts, the lock and
// what the lock hides). Returns false, with `gpus` unchanged and `why` set, when it does not fit.
bool PlaceDemand(std::vector<GpuSlots>& gpus, const Demand& demand, Policy policy,
                 std::string* why = nullptr);

// GPUs carrying no vGPU, which any type can still take.
size_t FreeGpus(const std::vector<GpuSlots>& gpus);

// What PlaceDemand would do with `demand`, without changing `gpus`: how many of the FreeGpus it
// would lock, or nullopt, with `why` set as PlaceDemand sets it, when it does not fit.
std::optional<size_t> FreeGpusTaken(const std::vector<GpuSlots>& gpus, const Demand& demand,
                                    Policy policy, std::string* why = nullptr);

}  // namespace kvgpu::scheduling
