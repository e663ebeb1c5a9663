// The placement rule both the plugin and the extender follow: a type packs onto the GPUs it holds
// (fullest first), a free GPU is taken only when those are full and is then locked to the type,
// GPUs locked to another type are never used, spread takes one device per GPU per round, and a
// demand that does not fit changes nothing.
#include "scheduling/gpu_fit.h"

#include <gtest/gtest.h>

namespace kvgpu::scheduling {
namespace {

constexpr const char* k222 = "tencent.com/vgpu-222";  // T4-1Q: 16 per GPU
constexpr const char* k223 = "tencent.com/vgpu-223";  // T4-2Q: 8 per GPU

// A T4 as the plugin publishes it: `used` vGPUs of `locked` (or none), the kernel's counts.
GpuSlots T4(const std::string& id, const std::string& locked = "", uint32_t used = 0) {
  GpuSlots gpu;
  gpu.id = id;
  if (!locked.empty()) gpu.LockTo("nvidia-" + locked);
  const uint32_t used222 = locked == "222" ? used : 0;
  const uint32_t used223 = locked == "223" ? used : 0;
  gpu.resources[k222] = {"nvidia-222", used222,
                         locked.empty() || locked == "222" ? 16 - used222 : 0};
  gpu.resources[k223] = {"nvidia-223", used223,
                         locked.empty() || locked == "223" ? 8 - used223 : 0};
  return gpu;
}

uint32_t Used(const std::vector<GpuSlots>& gpus, size_t gpu, const std::string& resource) {
  return gpus[gpu].resources.at(resource).used;
}

TEST(RankGpuTest, LockedToAnotherTypeLastThenCarryingTheTypeFullestFirstThenFewestFree) {
  const GpuRank other = RankGpu({0, 0, true});
  const GpuRank free_gpu = RankGpu({0, 16, false});
  const GpuRank holds_two = RankGpu({2, 14, false});
  const GpuRank holds_five = RankGpu({5, 11, false});
  EXPECT_LT(free_gpu, other);
  EXPECT_LT(holds_two, free_gpu) << "a GPU already locked to the type before a free one";
  EXPECT_LT(holds_five, holds_two) << "the fuller GPU first: pack";
  EXPECT_LT(RankGpu({0, 4, false}), RankGpu({0, 16, false})) << "then fewer devices left";
}

TEST(PlaceDemandTest, ATypePacksOntoTheGpuItHoldsBeforeTakingAFreeOne) {
  std::vector<GpuSlots> gpus = {T4("0000:3b:00.0"), T4("0000:af:00.0", "222", 3)};
  ASSERT_TRUE(PlaceDemand(gpus, {{k222, 2}}, Policy::kPack));
  EXPECT_EQ(Used(gpus, 1, k222), 5u);
  EXPECT_EQ(Used(gpus, 0, k222), 0u);
  EXPECT_EQ(FreeGpus(gpus), 1u) << "the free GPU is kept for another type";
}

TEST(PlaceDemandTest, TakingAFreeGpuLocksItAndHidesTheOtherTypes) {
  std::vector<GpuSlots> gpus = {T4("0000:3b:00.0"), T4("0000:af:00.0")};
  ASSERT_TRUE(PlaceDemand(gpus, {{k223, 1}}, Policy::kPack));
  EXPECT_EQ(gpus[0].locked_type, "nvidia-223");
  EXPECT_EQ(gpus[0].resources.at(k222).free, 0u);
  EXPECT_EQ(gpus[0].resources.at(k223).free, 7u);
  ASSERT_TRUE(PlaceDemand(gpus, {{k222, 16}}, Policy::kPack));
  EXPECT_EQ(Used(gpus, 1, k222), 16u) << "222 cannot go to the GPU 223 holds";
  std::string why;
  EXPECT_FALSE(PlaceDemand(gpus, {{k222, 1}}, Policy::kPack, &why));
  EXPECT_NE(why.find("1 wanted, 0 can be made"), std::string::npos) << why;
}

TEST(PlaceDemandTest, ADemandThatDoesNotFitChangesNothing) {
  std::vector<GpuSlots> gpus = {T4("0000:3b:00.0", "223", 6), T4("0000:af:00.0")};
  const std::vector<GpuSlots> before = gpus;
  // 223 fits (2 + 8 free); 222 then finds no GPU: nothing of the container is applied.
  EXPECT_FALSE(PlaceDemand(gpus, {{k222, 1}, {k223, 10}}, Policy::kPack));
  EXPECT_EQ(gpus, before);
}

TEST(PlaceDemandTest, ABigRequestSpansGpusFillingEachInTurn) {
  std::vector<GpuSlots> gpus = {T4("0000:3b:00.0"), T4("0000:af:00.0", "223", 7)};
  ASSERT_TRUE(PlaceDemand(gpus, {{k223, 5}}, Policy::kPack));
  EXPECT_EQ(Used(gpus, 1, k223), 8u) << "the held GPU is filled first";
  EXPECT_EQ(Used(gpus, 0, k223), 4u);
}

TEST(PlaceDemandTest, SpreadTakesOneDevicePerGpuPerRound) {
  std::vector<GpuSlots> gpus = {T4("0000:3b:00.0"), T4("0000:af:00.0"), T4("0000:d8:00.0")};
  ASSERT_TRUE(PlaceDemand(gpus, {{k222, 4}}, Policy::kSpread));
  EXPECT_EQ(Used(gpus, 0, k222) + Used(gpus, 1, k222) + Used(gpus, 2, k222), 4u);
  for (size_t i = 0; i < gpus.size(); ++i) {
    EXPECT_GE(Used(gpus, i, k222), 1u) << i;
    EXPECT_LE(Used(gpus, i, k222), 2u) << i;
  }
}

// Where no rule is known (the kernel's mtty sample: 24 ports shared by both types), one vGPU
// placed but not yet made leaves nothing else promised on that parent: here 2 ports are left, so
// after an mtty-1 the mtty-2 (2 ports) no longer fits, whatever its count said before.
TEST(PlaceDemandTest, WhereNoRuleIsKnownAPlacedVgpuLeavesNothingElsePromisedUntilTheKernelCounts) {
  GpuSlots mtty;
  mtty.id = "mtty";
  mtty.occupancy = Occupancy::kUnknown;
  mtty.resources["tencent.com/vgpu-mtty-1"] = {"mtty-1", 0, 2};
  mtty.resources["tencent.com/vgpu-mtty-2"] = {"mtty-2", 0, 1};
  std::vector<GpuSlots> gpus = {mtty};
  ASSERT_TRUE(PlaceDemand(gpus, {{"tencent.com/vgpu-mtty-1", 1}}, Policy::kPack));
  EXPECT_EQ(gpus[0].resources.at("tencent.com/vgpu-mtty-1").free, 1u);
  EXPECT_EQ(gpus[0].resources.at("tencent.com/vgpu-mtty-2").free, 0u);
  EXPECT_FALSE(PlaceDemand(gpus, {{"tencent.com/vgpu-mtty-2", 1}}, Policy::kPack));
  EXPECT_TRUE(PlaceDemand(gpus, {{"tencent.com/vgpu-mtty-1", 1}}, Policy::kPack))
      << "its own count still holds";
}

constexpr const char* k225 = "tencent.com/vgpu-225";  // T4-1A: 1024 MiB, 16 per GPU

// A T4 in equal-size mode: 222 (T4-1B) and 225 (T4-1A) are both 1024 MiB, 223 (T4-2B) 2048 MiB.
// `used222` vGPUs of 222 on it; the counts as the kernel then shows them.
GpuSlots EqualSizeT4(const std::string& id, uint32_t used222 = 0) {
  GpuSlots gpu;
  gpu.id = id;
  gpu.occupancy = Occupancy::kEqualSize;
  gpu.resources[k222] = {"nvidia-222", used222, 16 - used222, 1024};
  gpu.resources[k225] = {"nvidia-225", 0, 16 - used222, 1024};
  gpu.resources[k223] = {"nvidia-223", 0, used222 > 0 ? 0u : 8u, 2048};
  if (used222 > 0) gpu.LockTo("nvidia-222", 1024);
  return gpu;
}

TEST(PlaceDemandTest, EqualSizeLetsTypesOfOneFramebufferShareAGpuAndKeepsOtherSizesOff) {
  std::vector<GpuSlots> gpus = {EqualSizeT4("0000:3b:00.0"), EqualSizeT4("0000:af:00.0", 2)};
  EXPECT_EQ(gpus[1].lock, "framebuffer:1024MiB");
  ASSERT_TRUE(PlaceDemand(gpus, {{k225, 3}}, Policy::kPack));
  EXPECT_EQ(Used(gpus, 1, k225), 3u) << "225 joins the GPU 222 holds: one size, not one type";
  EXPECT_EQ(FreeGpus(gpus), 1u) << "the free GPU is kept";
  EXPECT_EQ(gpus[1].resources.at(k222).free, 11u)
      << "what the 225s took, the 222s sharing their size can no longer make";
  ASSERT_TRUE(PlaceDemand(gpus, {{k223, 1}}, Policy::kPack));
  EXPECT_EQ(Used(gpus, 0, k223), 1u) << "another size goes to the free GPU, never beside them";
  EXPECT_EQ(gpus[0].resources.at(k222).free, 0u) << "and locks it to 2048 MiB";
  EXPECT_EQ(gpus[0].resources.at(k225).free, 0u);
}

TEST(PlaceDemandTest, TheStrictRuleKeepsEveryOtherTypeOffAGpuEvenOfTheSameSize) {
  std::vector<GpuSlots> gpus = {EqualSizeT4("0000:3b:00.0"), EqualSizeT4("0000:af:00.0", 2)};
  for (GpuSlots& gpu : gpus) {
    gpu.occupancy = Occupancy::kStrict;
    if (!gpu.locked_type.empty()) gpu.LockTo(gpu.locked_type, 1024);
  }
  EXPECT_EQ(gpus[1].lock, "type:nvidia-222");
  ASSERT_TRUE(PlaceDemand(gpus, {{k225, 1}}, Policy::kPack));
  EXPECT_EQ(Used(gpus, 0, k225), 1u);
  EXPECT_EQ(Used(gpus, 1, k225), 0u);
}

TEST(LockKeyTest, SizeInEqualSizeModeTypeWhenStrictOrTheSizeIsUnknownNoneWhereNoRuleIsModelled) {
  EXPECT_EQ(LockKey(Occupancy::kEqualSize, "nvidia-222", 1024), "framebuffer:1024MiB");
  EXPECT_EQ(LockKey(Occupancy::kEqualSize, "nvidia-222", 0), "type:nvidia-222");
  EXPECT_EQ(LockKey(Occupancy::kStrict, "nvidia-222", 1024), "type:nvidia-222");
  for (Occupancy o : {Occupancy::kUnknown, Occupancy::kMixedSize, Occupancy::kMig}) {
    EXPECT_EQ(LockKey(o, "nvidia-222", 1024), "") << OccupancyName(o);
    EXPECT_EQ(ParseOccupancy(OccupancyName(o)), o);
  }
  EXPECT_FALSE(ParseOccupancy("equal").has_value());
}

TEST(PlaceDemandTest, AResourceTheNodeDoesNotOfferNeverFits) {
  std::vector<GpuSlots> gpus = {T4("0000:3b:00.0")};
  EXPECT_FALSE(PlaceDemand(gpus, {{"tencent.com/vgpu-nvidia-999", 1}}, Policy::kPack));
  EXPECT_TRUE(PlaceDemand(gpus, {}, Policy::kPack)) << "no demand fits anywhere";
}

// FreeGpusTaken reads what PlaceDemand would do without copying the GPUs: it must agree with
// PlaceDemand on every node, demand and policy, the reason for a misfit included.
TEST(FreeGpusTakenTest, AgreesWithPlaceDemandOnACopy) {
  GpuSlots untyped = T4("e");
  for (auto& [resource, slots] : untyped.resources) slots.type_id.clear();
  GpuSlots shared = T4("f");
  shared.occupancy = Occupancy::kUnknown;
  const std::vector<std::vector<GpuSlots>> nodes = {{T4("a"), T4("b")},
                                                    {T4("a", "222", 3), T4("b", "223", 8), T4("c")},
                                                    {T4("a", "223", 2), T4("b", "222", 16)},
                                                    {untyped, shared, T4("g", "222", 15)},
                                                    {EqualSizeT4("h"), EqualSizeT4("i", 2)},
                                                    {}};
  std::vector<Demand> demands = {{}, {{k222, 0}}, {{"tencent.com/vgpu-999", 1}}};
  for (uint32_t n : {1u, 2u, 8u, 9u, 16u, 17u, 33u}) {
    demands.push_back({{k222, n}});
    demands.push_back({{k223, n}});
    demands.push_back({{k222, n}, {k223, 1}});
    demands.push_back({{k222, n}, {k225, 2}});
  }
  for (const auto& gpus : nodes) {
    for (const Demand& demand : demands) {
      for (Policy policy : {Policy::kPack, Policy::kSpread}) {
        std::vector<GpuSlots> placed = gpus;
        std::string placed_why;
        const bool fits = PlaceDemand(placed, demand, policy, &placed_why);
        std::string why;
        const std::optional<size_t> taken = FreeGpusTaken(gpus, demand, policy, &why);
        ASSERT_EQ(taken.has_value(), fits);
        if (fits) {
          EXPECT_EQ(*taken, FreeGpus(gpus) - FreeGpus(placed));
        } else {
          EXPECT_EQ(why, placed_why);
        }
      }
    }
  }
}

TEST(PolicyTest, NamesRoundTripAndUnknownOnesAreRefused) {
  EXPECT_EQ(ParsePolicy(PolicyName(Policy::kPack)), Policy::kPack);
  EXPECT_EQ(ParsePolicy(PolicyName(Policy::kSpread)), Policy::kSpread);
  EXPECT_FALSE(ParsePolicy("binpack").has_value());
}

// --- mixed-size and MIG: the mode's facts (placements, GPU instances) ---

constexpr const char* k4q = "r/4q";
constexpr const char* k8q = "r/8q";
constexpr const char* k12q = "r/12q";

// A 48-slot mixed-size GPU (the simulator's l40s-vfio numbers): a type of N GiB takes N slots and
// starts at multiples of N. `free`: the kernel's count per resource (VFs listing it).
GpuSlots MixedGpu(uint32_t free = 16) {
  GpuSlots gpu;
  gpu.id = "0000:af:00.0";
  gpu.occupancy = Occupancy::kMixedSize;
  auto add = [&](const char* name, const char* type, uint32_t gib) {
    ResourceSlots slots{type, 0, free, uint64_t{gib} * 1024};
    slots.placements.size = gib;
    for (uint32_t start = 0; start + gib <= 48; start += gib) slots.placements.ids.push_back(start);
    gpu.resources[name] = slots;
  };
  add(k4q, "1700", 4);
  add(k8q, "1702", 8);
  add(k12q, "1703", 12);
  return gpu;
}

TEST(ModeRoomTest, MixedSizeCountsFreePlacementsAndSilosSlotsAtNoValidStart) {
  GpuSlots gpu = MixedGpu();
  gpu.used_slots = {{0, 4}, {12, 12}};  // a 4Q at 0, a 12Q at 12: slots 4-11 free
  EXPECT_EQ(ModeRoom(gpu, gpu.resources.at(k8q)), 3u) << "8Q at 24, 32, 40; 4-11 holds none";
  EXPECT_EQ(LowestPlacement(gpu, gpu.resources.at(k8q).placements), 24u);
  EXPECT_EQ(ModeRoom(gpu, gpu.resources.at(k4q)), 8u) << "4, 8, then 24..44";
  EXPECT_EQ(LowestPlacement(gpu, gpu.resources.at(k4q).placements), 4u);
  GpuSlots unknown = gpu;
  unknown.resources.at(k8q).placements = {};
  EXPECT_EQ(ModeRoom(unknown, unknown.resources.at(k8q)), std::nullopt)
      << "no placements known: the kernel's counts alone";
}

uint32_t CreatableOf(const GpuSlots& gpu, const std::string& resource) {
  return Creatable(gpu, gpu.resources.at(resource));
}

TEST(PlaceDemandTest, MixedSizesShareAGpuWhilePlacementsAreFree) {
  std::vector<GpuSlots> gpus = {MixedGpu()};
  ASSERT_TRUE(PlaceDemand(gpus, {{k4q, 1}}, Policy::kPack));
  ASSERT_TRUE(PlaceDemand(gpus, {{k12q, 1}}, Policy::kPack));
  EXPECT_EQ(gpus[0].used_slots, (std::vector<SlotRange>{{0, 4}, {12, 12}}))
      << "each at its lowest creatable placement";
  EXPECT_EQ(CreatableOf(gpus[0], k8q), 3u) << "8Q where its placements are still free";
  ASSERT_TRUE(PlaceDemand(gpus, {{k8q, 3}}, Policy::kPack));
  std::string why;
  EXPECT_FALSE(PlaceDemand(gpus, {{k8q, 1}}, Policy::kPack, &why))
      << "8 GiB free at 4-11, but no 8Q placement there";
  EXPECT_EQ(CreatableOf(gpus[0], k4q), 2u) << "the 4Q placements at 4 and 8";
}

TEST(PlaceDemandTest, MixedSizeNeverPromisesMoreThanTheKernelCounts) {
  std::vector<GpuSlots> gpus = {MixedGpu(2)};
  EXPECT_FALSE(PlaceDemand(gpus, {{k4q, 3}}, Policy::kPack)) << "the kernel shows two";
  ASSERT_TRUE(PlaceDemand(gpus, {{k4q, 1}}, Policy::kPack));
  EXPECT_EQ(CreatableOf(gpus[0], k8q), 1u) << "the VF the 4Q took is gone for 8Q too";
}

constexpr const char* k2q = "r/dc-1-2q";
constexpr const char* k3q = "r/dc-1-3q";
constexpr const char* k3a = "r/dc-1-3a";
constexpr const char* k6q = "r/dc-1-6q";

// An RTX PRO 6000-like MIG GPU: `gis` instances of GI profile 47 (cubecos's numbers: DC-1-2Q 12
// per GI; 3 and 6 GiB per GI ours).
GpuSlots MigGpu(uint32_t gis) {
  GpuSlots gpu;
  gpu.id = "0000:41:00.0";
  gpu.occupancy = Occupancy::kMig;
  for (uint32_t i = 1; i <= gis; ++i) gpu.gpu_instances.push_back({i, 47, 0, 0});
  auto add = [&](const char* name, const char* type, uint32_t gib, uint32_t per_gi) {
    ResourceSlots slots{type, 0, 48, uint64_t{gib} * 1024};
    slots.gi_profile = 47;
    slots.max_per_gi = per_gi;
    gpu.resources[name] = slots;
  };
  add(k2q, "1560", 2, 12);
  add(k3q, "1561", 3, 8);
  add(k3a, "1562", 3, 8);
  add(k6q, "1563", 6, 4);
  return gpu;
}

TEST(PlaceDemandTest, MigBackedTypesLandOnlyInInstancesOfTheirSizeWithRoom) {
  std::vector<GpuSlots> gpus = {MigGpu(2)};
  ASSERT_TRUE(PlaceDemand(gpus, {{k3q, 5}, {k3a, 3}}, Policy::kPack));
  EXPECT_EQ(gpus[0].gpu_instances[0].vgpus, 8u) << "3Q and 3A share one instance";
  EXPECT_EQ(gpus[0].gpu_instances[1].vgpus, 0u);
  EXPECT_EQ(CreatableOf(gpus[0], k2q), 12u) << "only the empty instance takes 2 GiB";
  ASSERT_TRUE(PlaceDemand(gpus, {{k6q, 1}}, Policy::kPack));
  EXPECT_EQ(gpus[0].gpu_instances[1].vgpu_framebuffer_mib, 6144u);
  EXPECT_EQ(CreatableOf(gpus[0], k2q), 0u) << "no instance empty or of 2 GiB";
  EXPECT_EQ(CreatableOf(gpus[0], k3q), 0u);
  EXPECT_FALSE(PlaceDemand(gpus, {{k6q, 4}}, Policy::kPack)) << "3 more 6Q fit, not 4";
  EXPECT_TRUE(PlaceDemand(gpus, {{k6q, 3}}, Policy::kPack));
}

TEST(PlaceDemandTest, AMigGpuWithoutAFittingInstanceOffersNothingWhateverTheKernelListed) {
  std::vector<GpuSlots> gpus = {MigGpu(0)};
  std::string why;
  EXPECT_FALSE(PlaceDemand(gpus, {{k2q, 1}}, Policy::kPack, &why));
  EXPECT_NE(why.find("0 can be made"), std::string::npos) << why;
}

}  // namespace
}  // namespace kvgpu::scheduling
