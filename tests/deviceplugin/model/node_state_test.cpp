// The node state: the plugin's own creates and removes change the cached kernel view the way the
// kernel will (an instance taken, an instance given back), and the record is saved before it
// counts. Pure: hand-built inventories, an in-memory store.
#include "deviceplugin/model/node_state.h"

#include <gtest/gtest.h>

#include "tests/deviceplugin/model/inventory_builders.h"

namespace kvgpu::deviceplugin {
namespace {

using namespace kvgpu::deviceplugin::testing;  // NOLINT(google-build-using-namespace)

mdev::Inventory OneT4(uint32_t free_222) {
  mdev::Inventory inv;
  mdev::Parent gpu = GpuParent("0000:3b:00.0");
  gpu.types.push_back(TypeWithFree("nvidia-222", free_222));
  gpu.types.push_back(TypeWithFree("nvidia-223", 8));
  inv.parents.push_back(gpu);
  return inv;
}

mdev::Vgpu Vgpu222(const std::string& id) {
  return VgpuOn(id, "0000:3b:00.0", "nvidia-222", 40);
}

uint32_t Free(const NodeState& state, const std::string& type) {
  for (const mdev::VgpuType& t : state.inventory().parents[0].types) {
    if (t.id == type) return t.available_instances;
  }
  return 0;
}

TEST(NodeStateTest, ACreatedVgpuTakesAnInstanceOfItsTypeAndARemovedOneGivesItBack) {
  MemoryStateStore store;
  NodeState state(store);
  state.ReplaceInventory(OneT4(16));
  state.VgpuCreated(Vgpu222("u1"));
  EXPECT_EQ(Free(state, "nvidia-222"), 15u);
  EXPECT_EQ(Free(state, "nvidia-223"), 8u) << "other types' counts are the next scan's to change";
  ASSERT_NE(state.inventory().FindVgpu("u1"), nullptr);
  state.VgpuCreated(Vgpu222("u1"));
  EXPECT_EQ(Free(state, "nvidia-222"), 15u) << "a vGPU the view already shows is not counted twice";
  state.VgpuRemoved("u1");
  EXPECT_EQ(Free(state, "nvidia-222"), 16u);
  EXPECT_EQ(state.inventory().FindVgpu("u1"), nullptr);
}

TEST(NodeStateTest, RemovingAVgpuARescanAlreadyDroppedChangesNoCount) {
  MemoryStateStore store;
  NodeState state(store);
  state.ReplaceInventory(OneT4(16));  // the rescan: u1 gone, its instance already free
  state.VgpuRemoved("u1");
  EXPECT_EQ(Free(state, "nvidia-222"), 16u);
}

TEST(NodeStateTest, ACountAtZeroIsNotTakenBelowZero) {
  MemoryStateStore store;
  NodeState state(store);
  state.ReplaceInventory(OneT4(0));  // a count read after the kernel had made our vGPU
  state.VgpuCreated(Vgpu222("u1"));
  EXPECT_EQ(Free(state, "nvidia-222"), 0u);
}

TEST(NodeStateTest, ARecordIsSavedBeforeItCountsAndReplacesTheSameDeviceIdsRecord) {
  MemoryStateStore store;
  NodeState state(store);
  ASSERT_TRUE(state.Record(Record222("d-0", "u1")).ok());
  ASSERT_TRUE(state.Record(Record222("d-0", "u2")).ok());
  ASSERT_EQ(store.vgpus_.size(), 1u);
  EXPECT_EQ(store.vgpus_[0].vgpu_id, "u2");
  ASSERT_NE(state.RecordFor("d-0"), nullptr);
  EXPECT_EQ(state.RecordFor("d-0")->vgpu_id, "u2");
}

TEST(NodeStateTest, ARecordThatCannotBeSavedIsNotKept) {
  MemoryStateStore store;
  NodeState state(store);
  store.fail_saves = true;
  EXPECT_FALSE(state.Record(Record222("d-0", "u1")).ok());
  EXPECT_EQ(state.RecordFor("d-0"), nullptr);
  EXPECT_TRUE(state.records().empty());
}

TEST(NodeStateTest, ForgetDropsOnlyTheRecordNamingThatVgpu) {
  MemoryStateStore store;
  NodeState state(store);
  ASSERT_TRUE(state.Record(Record222("d-0", "u1")).ok());
  EXPECT_FALSE(state.Forget("d-0", "u-other")) << "kubelet handed d-0 out again meanwhile";
  EXPECT_NE(state.RecordFor("d-0"), nullptr);
  EXPECT_TRUE(state.Forget("d-0", "u1"));
  EXPECT_EQ(state.RecordFor("d-0"), nullptr);
}

TEST(NodeStateTest, SetOwnersReportsAChangeOnlyWhenAnOwnerChanged) {
  MemoryStateStore store;
  NodeState state(store);
  ASSERT_TRUE(state.Record(Record222("d-0", "u1")).ok());
  EXPECT_TRUE(state.SetOwners({{"d-0", {"team/a", ""}}}));
  EXPECT_FALSE(state.SetOwners({{"d-0", {"team/a", ""}}}));
  EXPECT_FALSE(state.SetOwners({{"d-unknown", {"team/b", ""}}}));
  EXPECT_EQ(state.RecordFor("d-0")->owner_pod, "team/a");
  EXPECT_TRUE(state.SetOwners({{"d-0", {"team/a", "uid-a"}}})) << "the UID learned later";
  EXPECT_FALSE(state.SetOwners({{"d-0", {"team/a", ""}}})) << "a word without the UID keeps it";
  EXPECT_EQ(state.RecordFor("d-0")->owner_uid, "uid-a");
  EXPECT_TRUE(state.SetOwners({{"d-0", {"team/b", ""}}}));
  EXPECT_EQ(state.RecordFor("d-0")->owner_uid, std::nullopt) << "another pod: the old UID goes";
}

TEST(NodeStateTest, SnapshotTellsOurVgpusFromForeignOnes) {
  MemoryStateStore store;
  NodeState state(store);
  mdev::Inventory inv = OneT4(14);
  inv.vgpus = {Vgpu222("ours"), Vgpu222("someone-elses")};
  state.ReplaceInventory(inv);
  ASSERT_TRUE(state.Record(Record222("d-0", "ours")).ok());
  LifecycleSnapshot snap = state.Snapshot({"d-0"}, {});
  EXPECT_EQ(snap.existing, (std::set<std::string>{"ours", "someone-elses"}));
  EXPECT_EQ(snap.foreign, std::vector<std::string>{"someone-elses"});
  EXPECT_EQ(snap.removing, std::set<std::string>{"d-0"});
  EXPECT_EQ(snap.records.size(), 1u);
}

TEST(NodeStateTest, ACorruptRecordRefusesToLoad) {
  class Corrupt : public StateStore {
   public:
    Result<std::vector<CreatedVgpu>> Load() override {
      return Status::Error(ErrorCode::kInvalid, "not JSON");
    }
    Status Save(const std::vector<CreatedVgpu>&) override { return Status::Ok(); }
  } store;
  NodeState state(store);
  Status loaded = state.Load();
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.message().find("refusing to start"), std::string::npos) << loaded.message();
}

TEST(NodeStateTest, OnlyWarningsTheLastScanDidNotHaveAreReportedAsNew) {
  MemoryStateStore store;
  NodeState state(store);
  mdev::Inventory first = OneT4(16);
  first.warnings = {"odd file a"};
  EXPECT_EQ(state.ReplaceInventory(first), std::vector<std::string>{"odd file a"});
  mdev::Inventory second = OneT4(16);
  second.warnings = {"odd file a", "odd file b"};
  EXPECT_EQ(state.ReplaceInventory(second), std::vector<std::string>{"odd file b"});
}

}  // namespace
}  // namespace kvgpu::deviceplugin
