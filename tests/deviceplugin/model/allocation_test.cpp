// Allocate's transaction in its parts: the plan (every ID decided before anything changes), the
// answer each container gets, and a create rolled back to exactly where it started.
#include "deviceplugin/model/allocation.h"

#include <gtest/gtest.h>

#include "deviceplugin/model/allocation_env.h"
#include "fakes/common/sim_node.h"
#include "tests/deviceplugin/model/inventory_builders.h"

namespace kvgpu::deviceplugin {
namespace {

using namespace kvgpu::deviceplugin::testing;  // NOLINT(google-build-using-namespace)

const std::string kGpu = "0000:3b:00.0";
const std::string kId0 = kGpu + "-nvidia-222-0";
const std::string kId1 = kGpu + "-nvidia-222-1";

// A T4 with two free 222s, and optionally our vGPU on slot 0.
struct Node {
  explicit Node(bool ours_on_slot0) : state(store) {
    mdev::Inventory inv;
    mdev::Parent gpu = GpuParent(kGpu);
    gpu.types.push_back(TypeWithFree("nvidia-222", ours_on_slot0 ? 1u : 2u));
    inv.parents.push_back(gpu);
    if (ours_on_slot0) {
      inv.vgpus.push_back(VgpuOn("u0", kGpu, "nvidia-222", 40));
      EXPECT_TRUE(state.Record(Record222(kId0, "u0", kGpu)).ok());
    }
    state.ReplaceInventory(inv);
    catalogue.Rebuild(state.inventory(), state.records(), ModelOptions{});
  }
  Result<ContainerPlans> Plan(const std::vector<std::vector<std::string>>& containers,
                              const EarlierVgpus& earlier = {}) {
    return PlanAllocation(catalogue, state, k222, containers, earlier);
  }

  MemoryStateStore store;
  NodeState state;
  DeviceCatalogue catalogue;
};

TEST(AllocationPlanTest, FreeDevicesArePlannedForCreation) {
  Node node(false);
  auto plans = node.Plan({{kId0}, {kId1}});
  ASSERT_TRUE(plans.ok()) << plans.status().ToString();
  ASSERT_EQ(plans->size(), 2u);
  EXPECT_EQ((*plans)[1][0].device.id, kId1);
  EXPECT_FALSE((*plans)[0][0].reuse_vgpu || (*plans)[0][0].replace_vgpu);
}

TEST(AllocationPlanTest, AnEarlierVgpuIsHandedBackToItsHolderReplacedWhenFreeRefusedWhenUnknown) {
  Node node(true);
  auto held = node.Plan({{kId0}}, {{kId0, {"u0", {Holding::kHeld, "team/a", ""}}}});
  ASSERT_TRUE(held.ok());
  EXPECT_EQ((*held)[0][0].reuse_vgpu, "u0");
  auto free = node.Plan({{kId0}}, {{kId0, {"u0", {Holding::kFree, "", ""}}}});
  ASSERT_TRUE(free.ok());
  EXPECT_EQ((*free)[0][0].replace_vgpu, "u0");
  auto unknown = node.Plan({{kId0}}, {{kId0, {"u0", {Holding::kUnknown, "", ""}}}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), ErrorCode::kBusy);
  EXPECT_NE(unknown.status().message().find("never shared"), std::string::npos);
}

TEST(AllocationPlanTest, AVerdictAboutAnotherVgpuOrNoVerdictIsRefused) {
  Node node(true);
  auto stale = node.Plan({{kId0}}, {{kId0, {"u-older", {Holding::kFree, "", ""}}}});
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.status().code(), ErrorCode::kBusy);
  auto none = node.Plan({{kId0}});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), ErrorCode::kBusy);
}

TEST(AllocationPlanTest, UnknownRepeatedAndNoLongerFreeIdsAreToldApart) {
  Node node(false);
  auto unknown = node.Plan({{"0000:3b:00.0-nvidia-222-7"}});
  EXPECT_EQ(unknown.status().code(), ErrorCode::kInvalid);
  auto twice = node.Plan({{kId0}, {kId0}});
  EXPECT_NE(twice.status().message().find("requested twice"), std::string::npos);
  // The GPU filled up after kubelet got the list with slot 1 in it. (Had it room left, the ID
  // would take that room: ResourceManagerTest.AnIdDroppedByASharedCountStillGetsTheRoomItsGpuHas.)
  mdev::Inventory full = node.state.inventory();
  full.parents[0].types[0].available_instances = 0;
  node.state.ReplaceInventory(full);
  node.catalogue.Rebuild(node.state.inventory(), node.state.records(), ModelOptions{});
  auto gone = node.Plan({{kId1}});
  EXPECT_EQ(gone.status().code(), ErrorCode::kNoRoom) << gone.status().ToString();
  EXPECT_EQ(node.Plan({}).status().code(), ErrorCode::kInvalid);
  EXPECT_EQ(node.Plan({{}}).status().code(), ErrorCode::kInvalid);
}

TEST(AllocationShapeTest, IdsLongerThanKubeletAllowsAndHugeRequestsAreRefused) {
  EXPECT_TRUE(CheckRequestShape(k222, {{kId0}}).ok());
  EXPECT_EQ(CheckRequestShape(k222, {{std::string(64, 'a')}}).code(), ErrorCode::kInvalid);
  std::vector<std::string> many(kMaxDevicesPerRequest + 1, kId0);
  EXPECT_EQ(CheckRequestShape(k222, {many}).code(), ErrorCode::kInvalid);
}

TEST(AllocationAnswerTest, EachIommuGroupOnceTheEnvRecoveryReadsAndCdiNames) {
  std::vector<AllocatedVgpu> vgpus = {
      {kId0, "u0", "nvidia-222", kGpu, 40, "/dev/vfio/40"},
      {kId1, "u1", "nvidia-222", kGpu, 40, "/dev/vfio/40"},  // a shared group
  };
  ContainerAllocation answer = AnswerContainer(k222, vgpus, /*cdi_enabled=*/true);
  ASSERT_EQ(answer.devices.size(), 2u);
  EXPECT_EQ(answer.devices[0].host_path, "/dev/vfio/vfio");
  EXPECT_EQ(answer.devices[1].host_path, "/dev/vfio/40");
  EXPECT_EQ(answer.cdi_devices, (std::vector<std::string>{k222 + "=" + kId0, k222 + "=" + kId1}));
  std::vector<std::string> notes;
  std::vector<ParsedEnv> parsed = ParseAllocationEnv(answer.envs, notes);
  ASSERT_EQ(parsed.size(), 1u) << "what recovery reads back is what Allocate wrote";
  EXPECT_EQ(parsed[0].vgpus.vgpu_ids, (std::vector<std::string>{"u0", "u1"}));
  EXPECT_TRUE(AnswerContainer(k222, vgpus, false).cdi_devices.empty());
}

TEST(AllocationTransactionTest, ARollbackLeavesKernelRecordAndCountsAsTheyWere) {
  kvgpu::testing::SimNode sim("t4x2");
  MemoryStateStore store;
  NodeState state(store);
  auto inventory = sim.node().Scan();
  ASSERT_TRUE(inventory.ok());
  state.ReplaceInventory(*inventory);
  DeviceCatalogue catalogue;
  catalogue.Rebuild(state.inventory(), state.records(), ModelOptions{});
  const mdev::Inventory before = state.inventory();

  auto plans = PlanAllocation(catalogue, state, k222, {{kId0, kId1}}, {});
  ASSERT_TRUE(plans.ok()) << plans.status().ToString();
  AllocationTransaction transaction(sim.node(), state, nullptr);
  for (const AllocationPlan& plan : (*plans)[0]) ASSERT_TRUE(transaction.Realize(plan).ok());
  EXPECT_EQ(sim.model().VgpuIds().size(), 2u);
  EXPECT_EQ(store.vgpus_.size(), 2u);
  transaction.RollBack(k222);
  EXPECT_TRUE(sim.model().VgpuIds().empty());
  EXPECT_TRUE(store.vgpus_.empty());
  EXPECT_TRUE(state.records().empty());
  EXPECT_TRUE(state.inventory().vgpus.empty());
  for (size_t t = 0; t < before.parents[0].types.size(); ++t) {
    EXPECT_EQ(state.inventory().parents[0].types[t].available_instances,
              before.parents[0].types[t].available_instances)
        << "every instance taken was given back: " << before.parents[0].types[t].id;
  }
}

}  // namespace
}  // namespace kvgpu::deviceplugin
