// The fast path of JudgeNode (a pod of one container asking for one resource, read from the
// summary kept with the node's state, FitSummary) reaches the verdict the full placement reaches:
// the same kind, reason and score, on random states of every occupancy mode (unknown, strict,
// equal-size, mixed-size and MIG, with and without their facts), with pods waiting on the node
// for their vGPUs (bound, not yet made; some already made) and vGPUs the plugin made but has not
// attributed, for both placement and both scoring policies.
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <random>

#include "extender/node_fit.h"

namespace kvgpu::extender {
namespace {

using scheduling::Demand;
using scheduling::GpuSlots;
using scheduling::Occupancy;
using scheduling::Policy;
using scheduling::ResourceSlots;
using Kind = NodeVerdict::Kind;

constexpr int64_t kNow = 1'764'130'000'000;

struct Type {
  const char* resource;
  const char* id;
  uint64_t framebuffer_mib;
  uint32_t per_gpu;  // time-sliced: how many a GPU makes; mixed-size: the slots (GiB) it takes
};

// Two types share each framebuffer size, so that equal-size GPUs carry more than one type.
const std::vector<Type> kTypes = {{"r/1a", "t-1a", 1024, 16}, {"r/1b", "t-1b", 1024, 16},
                                  {"r/2a", "t-2a", 2048, 8},  {"r/2b", "t-2b", 2048, 8},
                                  {"r/4a", "t-4a", 4096, 4},  {"r/8a", "t-8a", 8192, 2}};
constexpr uint32_t kMixedSlots = 16;  // a mixed-size GPU of 16 GiB: a type of N GiB takes N slots
constexpr uint32_t kMigProfileSmall = 19;
constexpr uint32_t kMigProfileLarge = 9;

class Random {
 public:
  explicit Random(uint32_t seed) : engine_(seed) {}
  uint32_t Below(uint32_t n) { return std::uniform_int_distribution<uint32_t>(0, n - 1)(engine_); }
  bool Chance(double p) { return std::bernoulli_distribution(p)(engine_); }
  const Type& AnyType() { return kTypes[Below(static_cast<uint32_t>(kTypes.size()))]; }

 private:
  std::mt19937 engine_;
};

// A time-sliced GPU (unknown, strict or equal-size): free, or locked by a first vGPU of a random
// type (ours or another tool's), with its lock mates' counts in any state of use.
GpuSlots TimeSlicedGpu(Random& random, Occupancy occupancy) {
  GpuSlots gpu;
  gpu.occupancy = occupancy;
  const bool locked = random.Chance(0.6);
  const Type& lock = random.AnyType();
  if (locked) gpu.LockTo(lock.id, lock.framebuffer_mib);
  for (const Type& type : kTypes) {
    if (random.Chance(0.2)) continue;  // not listed on this GPU
    ResourceSlots slots{type.id, 0, 0, random.Chance(0.9) ? type.framebuffer_mib : 0};
    if (random.Chance(0.05)) slots.type_id.clear();  // a type the plugin could not name
    if (!locked) {
      slots.free = random.Chance(0.9) ? type.per_gpu : random.Below(type.per_gpu + 1);
    } else if (!gpu.LockedAgainst(slots)) {
      slots.used = random.Chance(0.5) ? random.Below(type.per_gpu + 1) : 0;
      slots.free = random.Below(type.per_gpu - std::min(slots.used, type.per_gpu) + 1);
    } else {
      slots.free = random.Chance(0.1) ? 1 : 0;  // a kernel count the lock hides anyway
    }
    gpu.resources[type.resource] = slots;
  }
  return gpu;
}

// Mixed-size: each type starts at multiples of its size; some slots used; facts sometimes
// unknown (no placement ids), where the kernel's counts are all there is.
GpuSlots MixedSizeGpu(Random& random) {
  GpuSlots gpu;
  gpu.occupancy = Occupancy::kMixedSize;
  const bool known = random.Chance(0.85);
  for (const Type& type : kTypes) {
    if (random.Chance(0.25)) continue;
    const uint32_t size = static_cast<uint32_t>(type.framebuffer_mib / 1024);
    ResourceSlots slots{type.id, 0, random.Below(kMixedSlots / size + 2), type.framebuffer_mib};
    if (known) {
      slots.placements.size = size;
      for (uint32_t start = 0; start + size <= kMixedSlots; start += size) {
        slots.placements.ids.push_back(start);
      }
    }
    gpu.resources[type.resource] = slots;
  }
  // vGPUs already there, each at a free start of its type.
  for (uint32_t n = random.Below(4); n > 0; --n) {
    const Type& type = random.AnyType();
    auto it = gpu.resources.find(type.resource);
    if (it == gpu.resources.end() || it->second.placements.ids.empty()) continue;
    std::optional<uint32_t> start = scheduling::LowestPlacement(gpu, it->second.placements);
    if (!start) continue;
    gpu.used_slots.push_back({*start, it->second.placements.size});
    ++it->second.used;
    if (gpu.locked_type.empty()) gpu.LockTo(type.id, type.framebuffer_mib);
  }
  return gpu;
}

// MIG: a few GPU instances of two profiles, some holding vGPUs of one framebuffer size; MIG-backed
// types name their profile and how many one instance holds (sometimes not known).
GpuSlots MigGpu(Random& random) {
  GpuSlots gpu;
  gpu.occupancy = Occupancy::kMig;
  for (uint32_t id = 1, n = random.Below(4); id <= n; ++id) {
    const uint32_t profile = random.Chance(0.5) ? kMigProfileSmall : kMigProfileLarge;
    gpu.gpu_instances.push_back({id, profile, 0, 0});
  }
  for (const Type& type : kTypes) {
    if (random.Chance(0.25)) continue;
    ResourceSlots slots{type.id, 0, random.Below(6), type.framebuffer_mib};
    if (random.Chance(0.85)) {
      slots.gi_profile = type.framebuffer_mib <= 2048 ? kMigProfileSmall : kMigProfileLarge;
      slots.max_per_gi = type.framebuffer_mib <= 2048 ? 3 : 1;
    }
    gpu.resources[type.resource] = slots;
  }
  for (scheduling::GpuInstanceSlots& gi : gpu.gpu_instances) {
    if (random.Chance(0.5)) continue;
    gi.vgpus = 1 + random.Below(2);
    gi.vgpu_framebuffer_mib = random.Chance(0.5) ? 1024 : 2048;
  }
  if (random.Chance(0.5)) gpu.LockTo(random.AnyType().id, 0);
  return gpu;
}

scheduling::NodeVgpuState RandomState(Random& random) {
  scheduling::NodeVgpuState state;
  state.version = scheduling::kNodeStateNewest;
  state.node = "n";
  state.generation = 1;
  state.published_unix_ms = kNow;
  state.policy = random.Chance(0.5) ? Policy::kPack : Policy::kSpread;
  const Occupancy modes[] = {Occupancy::kUnknown, Occupancy::kStrict, Occupancy::kEqualSize,
                             Occupancy::kMixedSize, Occupancy::kMig};
  // Mostly one mode per node, as on real nodes; sometimes a mix.
  const Occupancy node_mode = modes[random.Below(5)];
  for (uint32_t g = 0, n = random.Below(9); g < n; ++g) {
    const Occupancy mode = random.Chance(0.8) ? node_mode : modes[random.Below(5)];
    GpuSlots gpu = mode == Occupancy::kMixedSize ? MixedSizeGpu(random)
                   : mode == Occupancy::kMig     ? MigGpu(random)
                                                 : TimeSlicedGpu(random, mode);
    // Ids out of order, some equal in rank: the id breaks the tie.
    gpu.id = "0000:" + std::to_string(10 + random.Below(90)) + ":00." + std::to_string(g);
    state.gpus.push_back(std::move(gpu));
  }
  if (random.Chance(0.2)) state.unattributed[random.AnyType().resource] = 1 + random.Below(2);
  return state;
}

Demand RandomContainer(Random& random) {
  Demand demand;
  for (uint32_t n = 1 + (random.Chance(0.3) ? 1 : 0); n > 0; --n) {
    demand[random.AnyType().resource] = 1 + random.Below(4);
  }
  return demand;
}

// Pods bound to the node: most wait for their vGPUs, some are made already (holders).
std::vector<BoundPod> RandomBound(Random& random, scheduling::NodeVgpuState& state) {
  std::vector<BoundPod> bound;
  for (uint32_t i = 0, n = random.Chance(0.5) ? random.Below(4) : 0; i < n; ++i) {
    BoundPod pod;
    pod.uid = "uid-" + std::to_string(i);
    pod.key = "ml/p-" + std::to_string(i);
    pod.node = "n";
    pod.order = i;
    pod.demand.push_back(RandomContainer(random));
    if (random.Chance(0.2)) pod.demand.push_back(RandomContainer(random));
    if (random.Chance(0.2)) state.holders.insert(pod.key);
    bound.push_back(std::move(pod));
  }
  return bound;
}

std::string Show(const NodeVerdict& verdict) {
  return std::to_string(static_cast<int>(verdict.kind)) + " score " +
         std::to_string(verdict.score) + " [" + verdict.reason + "]";
}

TEST(NodeFitFastTest, TheSummaryGivesTheFullPlacementsVerdictOnRandomStatesOfEveryMode) {
  Random random(20261127);
  std::map<Kind, int> kinds;
  int fits_taking_free_gpus = 0;
  int judged_beside_waiting = 0;
  for (int node = 0; node < 3000; ++node) {
    scheduling::NodeVgpuState published = RandomState(random);
    const std::vector<BoundPod> bound = RandomBound(random, published);
    const Result<scheduling::NodeVgpuState> state(published);
    // As ClusterView makes it (summarized when parsed), and as a caller without one does.
    FitMemo parsed(state);
    FitMemo bare;
    for (int pod = 0; pod < 12; ++pod) {
      const std::string resource =
          random.Chance(0.05) ? "r/not-offered" : std::string(random.AnyType().resource);
      const uint32_t count = 1 + (random.Chance(0.8) ? random.Below(3) : random.Below(40));
      const std::vector<Demand> demand = {{{resource, count}}};
      for (Policy scoring : {Policy::kPack, Policy::kSpread}) {
        const FitOptions options{scoring, std::chrono::minutes(10)};
        // The pod may be one of the bound ones (prioritize after its bind): it never waits on
        // itself.
        const std::string uid = random.Chance(0.1) ? "uid-0" : "pod-uid";
        const NodeVerdict full = JudgeNode(&state, bound, uid, demand, kNow, options);
        for (FitMemo* memo : {&parsed, &bare, &parsed}) {  // the second look finds it kept
          const NodeVerdict fast = JudgeNode(&state, bound, uid, demand, kNow, options, memo);
          ASSERT_EQ(fast.kind, full.kind) << "node " << node << " pod " << pod << ": fast "
                                          << Show(fast) << " full " << Show(full);
          ASSERT_EQ(fast.reason, full.reason) << "node " << node << " pod " << pod;
          ASSERT_EQ(fast.score, full.score) << "node " << node << " pod " << pod;
        }
        // As a request reads the node from the view's table, the pod's resource found by its
        // number or (beyond the numbered names) by name; on a recent and on a stale state.
        const WatchedNode watched{&state,
                                  &parsed,
                                  bound.empty() ? nullptr : &bound,
                                  true,
                                  published.published_unix_ms,
                                  published.policy,
                                  parsed.Published()};
        const std::optional<UsualPod> usual = Usual(demand);
        ASSERT_TRUE(usual.has_value());
        UsualPod by_name = *usual;
        by_name.number = kNoResourceNumber;
        for (const int64_t now : {kNow, kNow + 600'001}) {
          const NodeVerdict want =
              now == kNow ? full : JudgeNode(&state, bound, uid, demand, now, options);
          for (const UsualPod* pod_key : std::array<const UsualPod*, 2>{&*usual, &by_name}) {
            const NodeVerdict read = JudgeNode(watched, uid, demand, pod_key, now, options);
            ASSERT_EQ(read.kind, want.kind) << "node " << node << " pod " << pod << ": read "
                                            << Show(read) << " full " << Show(want);
            ASSERT_EQ(read.reason, want.reason) << "node " << node << " pod " << pod;
            ASSERT_EQ(read.score, want.score) << "node " << node << " pod " << pod;
          }
        }
        ++kinds[full.kind];
        if (full.kind == Kind::kFits && full.score < 5 && scoring == Policy::kPack) {
          ++fits_taking_free_gpus;  // pack scores a pod that locks a free GPU below half
        }
        const bool waits = std::any_of(bound.begin(), bound.end(), [&](const BoundPod& b) {
          return b.uid != uid && !published.holders.contains(b.key);
        });
        if (waits) ++judged_beside_waiting;
      }
    }
  }
  // The states must have reached every kind of answer, or the comparison proves little.
  EXPECT_GT(kinds[Kind::kFits], 5000);
  EXPECT_GT(kinds[Kind::kFull], 5000);
  EXPECT_GT(kinds[Kind::kUnresolvable], 2000);
  EXPECT_GT(fits_taking_free_gpus, 2000);
  EXPECT_GT(judged_beside_waiting, 10000);
}

// A state that could not be read, or is too old, is judged before any summary is asked.
TEST(NodeFitFastTest, AnUnreadableOrStaleStateIsFailedWhateverTheMemoHolds) {
  Random random(7);
  scheduling::NodeVgpuState published = RandomState(random);
  const Result<scheduling::NodeVgpuState> state(published);
  FitMemo memo(state);
  const std::vector<Demand> demand = {{{"r/1a", 1}}};
  const FitOptions options{Policy::kPack, std::chrono::minutes(10)};
  EXPECT_EQ(JudgeNode(&state, {}, "u", demand, kNow + 600'001, options, &memo).kind,
            Kind::kUnresolvable);
  const Result<scheduling::NodeVgpuState> bad =
      Status::Error(ErrorCode::kInvalid, "vGPU state: version 9");
  FitMemo bad_memo(bad);
  EXPECT_EQ(bad_memo.Published(), nullptr);
  const NodeVerdict verdict = JudgeNode(&bad, {}, "u", demand, kNow, options, &bad_memo);
  EXPECT_EQ(verdict.kind, Kind::kUnresolvable);
  EXPECT_EQ(verdict.reason, "vGPU state: version 9");
}

}  // namespace
}  // namespace kvgpu::extender
