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
// type of that size may join); older drivers lock it to the type. Mixed-size GPUs place vGPUs at
// fixed start slots (placements) and MIG GPUs in GPU instances: where those facts are known
// (ModeRoom), a GPU offers a type only as far as a placement or instance is free for it. Where
// they are not, as on GPUs whose rule is unknown, only the kernel's counts are believed, and a
// vGPU placed but not yet made leaves nothing else promised on that GPU until the kernel counts
// again.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
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

// Mixed-size mode: where a type may start on its GPU (NVML's nvmlVgpuPlacementList_v2_t:
// placementSize slots from one of placementIds). Empty ids: not known.
struct Placements {
  uint32_t size = 0;
  std::vector<uint32_t> ids;
  bool operator==(const Placements&) const = default;
};

// Mixed-size mode: slots [start, start + size) a vGPU takes.
struct SlotRange {
  uint32_t start = 0;
  uint32_t size = 0;
  bool operator==(const SlotRange&) const = default;
};

// MIG: one GPU instance and the vGPUs in it. An instance hosts vGPUs of one framebuffer size.
struct GpuInstanceSlots {
  uint32_t id = 0;
  uint32_t profile = 0;               // NVML's GPU-instance profile id
  uint64_t vgpu_framebuffer_mib = 0;  // what its vGPUs have; 0 while it holds none
  uint32_t vgpus = 0;
  bool operator==(const GpuInstanceSlots&) const = default;
};

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
  Placements placements;         // mixed-size mode, where known
  // MIG-backed types, where known: the GPU-instance profile they run in and how many one
  // instance holds.
  std::optional<uint32_t> gi_profile;
  uint32_t max_per_gi = 0;

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
  std::vector<SlotRange> used_slots;               // mixed-size: the slots its vGPUs take
  std::vector<GpuInstanceSlots> gpu_instances;     // MIG: its GPU instances

  // Whether a vGPU of `slots` cannot go here for the lock of the vGPUs already on it.
  bool LockedAgainst(const ResourceSlots& slots) const;
  // Records a first vGPU of `type_id` on it (locked_type and lock, by `occupancy`).
  void LockTo(const std::string& type_id, uint64_t framebuffer_mib = 0);
  bool operator==(const GpuSlots&) const = default;
};

// The mode's rule for one more vGPU of `slots` on `gpu`, in one place for the plugin, the extender
// (and DRA's counters): how many more its placements (mixed-size: each at the lowest free start
// from the type's placement ids, so free slots at no valid start stay unused) or GPU instances
// (MIG: instances of the type's profile holding its framebuffer size, or nothing, below
// max_per_gi) admit. nullopt where the mode's facts are not known: there the kernel's counts are
// all there is.
std::optional<uint32_t> ModeRoom(const GpuSlots& gpu, const ResourceSlots& slots);
// Mixed-size: the lowest start of `placements` whose slots are free on `gpu`.
std::optional<uint32_t> LowestPlacement(const GpuSlots& gpu, const Placements& placements);
// MIG: the lowest-numbered GPU instance that takes a vGPU of `slots`.
std::optional<uint32_t> FittingGpuInstance(const GpuSlots& gpu, const ResourceSlots& slots);
// What the GPU can still make of a resource: the kernel's count (`free`), within what ModeRoom
// admits where the mode's facts are known. Placing reads this, never `free` alone.
uint32_t Creatable(const GpuSlots& gpu, const ResourceSlots& slots);
// Records one vGPU of `slots` where ModeRoom counts it (lowest placement or instance); false,
// with nothing changed, when there is no room or the facts are not known.
bool TakeModeRoom(GpuSlots& gpu, const ResourceSlots& slots);

// A container's vGPU request: resource name -> count.
using Demand = std::map<std::string, uint32_t>;

enum class Policy { kPack, kSpread };
const char* PolicyName(Policy policy);  // "pack", "spread"
std::optional<Policy> ParsePolicy(const std::string& name);

// A GPU that can take a vGPU of one resource, as PlaceDemand sees it.
struct Candidate {
  uint32_t index = 0;     // in the node's GPUs
  uint32_t free = 0;      // Creatable there
  bool free_gpu = false;  // carries no vGPU and one of the resource locks it (FreeGpus counts it)
  bool operator==(const Candidate&) const = default;
};
// The GPUs that can take a vGPU of `resource`, in the order PlaceDemand fills them (RankGpu, then
// the GPU's id). A pure function of the GPUs: the extender keeps it with each published state, so
// that a pod asking for one resource is judged without ranking the node's GPUs again.
std::vector<Candidate> RankCandidates(const std::vector<GpuSlots>& gpus,
                                      const std::string& resource);
// How many of `count` vGPUs each of `ranked` takes (`taken`, one per candidate, zeroed first):
// filled one after another (pack) or one device per GPU per round (spread). False when they do
// not all fit.
bool Distribute(std::span<const Candidate> ranked, uint32_t count, Policy policy,
                std::span<uint32_t> taken);
// FreeGpusTaken for `count` vGPUs of one resource, from its RankCandidates: how many free GPUs
// they lock; nullopt when they do not fit.
std::optional<size_t> FreeGpusTakenFrom(std::span<const Candidate> ranked, uint32_t count,
                                        Policy policy);
// PlaceDemand's reason for `count` vGPUs of `resource` not fitting, `creatable` being what the
// node can still make of it (the sum of its candidates' free).
std::string NoRoomReason(const std::string& resource, uint32_t count, uint32_t creatable);

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
