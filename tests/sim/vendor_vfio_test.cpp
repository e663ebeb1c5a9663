// The vendor-specific VFIO flavour (vGPU 17+): a type id written to a VF's
// nvidia/current_vgpu_type creates, 0 destroys, and creatable_vgpu_types shrinks to its header
// on an occupied VF and on every VF once the card is full.
#include <cerrno>

#include "sim_test_util.h"

namespace kvgpu::sim::testing {
namespace {

class VendorVfioTest : public ModelTest {
 protected:
  void SetUp() override { Load("h200-vfio"); }

  static std::string Vf(int i) {
    // 0000:41:00.4 .. 0000:41:00.7, then 0000:41:01.0 ..
    int rid = 4 + i;
    char text[16];
    std::snprintf(text, sizeof text, "0000:41:%02x.%x", rid >> 3, rid & 7);
    return text;
  }
  std::string Creatable(int vf) { return Read(NvidiaDir(Vf(vf)) / "creatable_vgpu_types"); }
  std::string Current(int vf) { return Read(NvidiaDir(Vf(vf)) / "current_vgpu_type"); }
};

// MIG off: only the time-sliced type. h200-mig (MIG on, four 1g.18gb and one 2g.35gb GPU
// instance): only the MIG-backed ones.
constexpr const char* kTimeSliced = "ID    : vGPU Name\n1428  : NVIDIA H200X-141C\n";
constexpr const char* kMigBoth =
    "ID    : vGPU Name\n1414  : NVIDIA H200X-1-18C\n1415  : NVIDIA H200X-2-35C\n";
constexpr const char* kMig2g = "ID    : vGPU Name\n1415  : NVIDIA H200X-2-35C\n";
constexpr const char* kMig1g = "ID    : vGPU Name\n1414  : NVIDIA H200X-1-18C\n";

TEST_F(VendorVfioTest, WritingATypeIdCreatesAndZeroDestroys) {
  ASSERT_EQ(Creatable(0), kTimeSliced);
  ASSERT_TRUE(SetVfType(Vf(0), "1428\n").ok());
  EXPECT_EQ(Current(0), "1428\n");
  EXPECT_EQ(model_->VgpuIds(), std::vector<std::string>{Vf(0)});
  ASSERT_TRUE(SetVfType(Vf(0), "0").ok());
  EXPECT_EQ(Current(0), "0\n");
  EXPECT_TRUE(model_->VgpuIds().empty());
}

TEST_F(VendorVfioTest, CreatableListShrinksAndRegrows) {
  Load("h200-mig");
  ASSERT_EQ(Creatable(0), kMigBoth);
  ASSERT_TRUE(SetVfType(Vf(0), "1414").ok());
  EXPECT_EQ(Creatable(0), kTypeListHeader) << "an occupied VF offers nothing";
  EXPECT_EQ(Creatable(1), kMigBoth) << "three 1g.18gb instances are still free";

  for (int i = 1; i < 4; ++i) ASSERT_TRUE(SetVfType(Vf(i), "1414").ok()) << i;
  EXPECT_EQ(Creatable(4), kMig2g) << "every 1g.18gb instance holds one";
  ASSERT_TRUE(SetVfType(Vf(4), "1415").ok());
  for (int i = 0; i < 16; ++i) EXPECT_EQ(Creatable(i), kTypeListHeader) << "card full, VF " << i;

  ASSERT_TRUE(SetVfType(Vf(3), "0").ok());
  EXPECT_EQ(Creatable(3), kMig1g);
  EXPECT_EQ(Creatable(15), kMig1g);
  EXPECT_EQ(Creatable(4), kTypeListHeader);

  for (int i = 0; i < 5; ++i) ASSERT_TRUE(SetVfType(Vf(i), "0").ok()) << i;
  for (int i = 0; i < 16; ++i) EXPECT_EQ(Creatable(i), kMigBoth) << "all free again, VF " << i;
}

TEST_F(VendorVfioTest, TheFullGpuTypeFillsTheCardAtOnce) {
  ASSERT_TRUE(SetVfType(Vf(5), "1428").ok());
  for (int i = 0; i < 16; ++i) EXPECT_EQ(Creatable(i), kTypeListHeader) << i;
}

struct WriteCase {
  std::string description;
  std::vector<std::pair<int, std::string>> before;  // (VF, type) set first
  bool busy_vf0;
  int vf;
  std::string data;
  int want_errno;
};

TEST_F(VendorVfioTest, CurrentVgpuTypeAnswersWithAnErrnoPerFailure) {
  const WriteCase cases[] = {
      {"not a number", {}, false, 0, "H200X-141C", EINVAL},
      {"empty", {}, false, 0, "", EINVAL},
      {"a type id this GPU does not have", {}, false, 0, "1415", EINVAL},
      {"the VF already hosts a vGPU", {{0, "1428"}}, false, 0, "1428", EEXIST},
      {"the VF already hosts another type", {{0, "1428"}}, false, 0, "1414", EEXIST},
      {"a MIG-backed type with MIG off", {}, false, 0, "1414", ENOSPC},
      {"the full-GPU type is taken", {{0, "1428"}}, false, 1, "1428", ENOSPC},
      {"0 on a free VF does nothing", {}, false, 0, "0", 0},
      {"0 while a VM holds it", {{0, "1428"}}, true, 0, "0", EBUSY},
      {"the VF's type written again after a destroy",
       {{0, "1428"}, {0, "0"}},
       false,
       0,
       "1428\n",
       0},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    Load("h200-vfio");
    for (const auto& [vf, type] : c.before) ASSERT_TRUE(SetVfType(Vf(vf), type).ok());
    model_->SetBusy(Vf(0), c.busy_vf0);
    auto before = model_->VgpuIds();
    std::string current_before = Current(c.vf);
    Status status = SetVfType(Vf(c.vf), c.data);
    EXPECT_EQ(ErrnoOf(status), c.want_errno) << status.ToString();
    if (c.want_errno != 0) {
      EXPECT_EQ(model_->VgpuIds(), before);
      EXPECT_EQ(Current(c.vf), current_before);
    }
  }
}

TEST_F(VendorVfioTest, OtherNvidiaAttributesAreReadOnly) {
  for (const char* name :
       {"creatable_vgpu_types", "gpu_instance_id", "placement_id", "vgpu_params", "warm_update"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(ErrnoOf(model_->WriteFile(NvidiaDir(Vf(0)) / name, "1414")), EACCES);
  }
  EXPECT_TRUE(model_->VgpuIds().empty());
}

TEST_F(VendorVfioTest, CurrentVgpuTypeOpensForReadingAndWriting) {
  EXPECT_TRUE(model_->CheckOpen(NvidiaDir(Vf(0)) / "current_vgpu_type", true).ok());
  EXPECT_TRUE(model_->CheckOpen(NvidiaDir(Vf(0)) / "current_vgpu_type", false).ok());
  EXPECT_EQ(ErrnoOf(model_->CheckOpen(NvidiaDir(Vf(0)) / "creatable_vgpu_types", true)), EACCES);
}

TEST_F(VendorVfioTest, TheVfIsTheDeviceAndKeepsItsOwnGroup) {
  std::string group_before =
      model_->ReadLink(Sys() / "bus/pci/devices" / Vf(2) / "iommu_group")->filename().string();
  ASSERT_TRUE(SetVfType(Vf(2), "1428").ok());
  EXPECT_EQ(
      model_->ReadLink(Sys() / "bus/pci/devices" / Vf(2) / "iommu_group")->filename().string(),
      group_before);
  auto members = model_->ListDir(Sys() / "kernel/iommu_groups" / group_before / "devices");
  ASSERT_TRUE(members.ok());
  EXPECT_EQ(members.value(), std::vector<std::string>{Vf(2)});
}

}  // namespace
}  // namespace kvgpu::sim::testing
