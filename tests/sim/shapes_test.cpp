// The GPU shapes of current NVIDIA hosts in the kernel model: equal-size and mixed-size mode with
// placement slots (l40s-vfio), MIG-backed vGPUs in GPU instances (h200-mig, rtxpro6000-mig), the
// mode controls and their ordering rules, and the per-VF driver outputs. The facts and their
// sources are in sim/profiles.cpp and docs/gpu-shapes.md.
#include <cerrno>
#include <nlohmann/json.hpp>

#include "sim_test_util.h"

namespace kvgpu::sim::testing {
namespace {

std::string Vf(const std::string& pf_bus, int i) {
  int rid = 4 + i;
  char text[16];
  std::snprintf(text, sizeof text, "0000:%s:%02x.%x", pf_bus.c_str(), rid >> 3, rid & 7);
  return text;
}

class ShapesTest : public ModelTest {
 protected:
  std::string Creatable(const std::string& vf) {
    return Read(NvidiaDir(vf) / "creatable_vgpu_types");
  }
  Result<std::string> Output(const std::string& vf, const char* name) {
    return model_->ReadFile(NvidiaDir(vf) / name);
  }
  nlohmann::json Modes() {
    return nlohmann::json::parse(Read(model_->root() / KernelModel::kModesFile));
  }
};

// --- equal-size and mixed-size (l40s-vfio: GPU 3b equal-size, GPU af mixed-size) ---

TEST_F(ShapesTest, EqualSizeReducesSiblingsToTheLockedSizeAndMixesSeries) {
  Load("l40s-vfio");
  ASSERT_EQ(ErrnoOf(SetVfType(Vf("3b", 0), "1700")), 0);  // L40S-4Q
  EXPECT_EQ(Creatable(Vf("3b", 1)),
            std::string(kTypeListHeader) + "1700  : NVIDIA L40S-4Q\n" + "1701  : NVIDIA L40S-4A\n")
      << "siblings offer only the locked size, both series";
  EXPECT_EQ(ErrnoOf(SetVfType(Vf("3b", 1), "1702")), ENOSPC) << "another size is refused";
  EXPECT_EQ(ErrnoOf(SetVfType(Vf("3b", 1), "1701")), 0) << "same size, other series, shares";
}

TEST_F(ShapesTest, MixedSizeTakesTheLowestCreatablePlacementAndSilosFreeSlots) {
  Load("l40s-vfio");
  const std::string gpu = "af";
  ASSERT_EQ(ErrnoOf(SetVfType(Vf(gpu, 0), "1700")), 0);  // 4Q  -> slots 0-3
  ASSERT_EQ(ErrnoOf(SetVfType(Vf(gpu, 1), "1703")), 0);  // 12Q -> 12-23 (0 is taken)
  ASSERT_EQ(ErrnoOf(SetVfType(Vf(gpu, 2), "1704")), 0);  // 24Q -> 24-47
  EXPECT_EQ(Output(Vf(gpu, 0), "placement_id").value(), "0\n");
  EXPECT_EQ(Output(Vf(gpu, 1), "placement_id").value(), "12\n");
  EXPECT_EQ(Output(Vf(gpu, 2), "placement_id").value(), "24\n");
  // Slots 4-11 are free (8 GiB) but no 8Q placement (0, 8, ...) lies inside them.
  EXPECT_EQ(Creatable(Vf(gpu, 3)),
            std::string(kTypeListHeader) + "1700  : NVIDIA L40S-4Q\n" + "1701  : NVIDIA L40S-4A\n");
  EXPECT_EQ(ErrnoOf(SetVfType(Vf(gpu, 3), "1702")), ENOSPC);
  ASSERT_EQ(ErrnoOf(SetVfType(Vf(gpu, 3), "1701")), 0);
  ASSERT_EQ(ErrnoOf(SetVfType(Vf(gpu, 4), "1700")), 0);
  EXPECT_EQ(Output(Vf(gpu, 4), "placement_id").value(), "8\n");
  EXPECT_EQ(Creatable(Vf(gpu, 5)), kTypeListHeader) << "every slot taken: header only";
  ASSERT_EQ(ErrnoOf(SetVfType(Vf(gpu, 1), "0")), 0);
  EXPECT_EQ(ErrnoOf(SetVfType(Vf(gpu, 5), "1702")), 0) << "12-23 free again: an 8Q at 16";
  EXPECT_EQ(Output(Vf(gpu, 5), "placement_id").value(), "16\n");
}

TEST_F(ShapesTest, VendorVfioOutputsReadEnxioUntilAVgpuExists) {
  Load("l40s-vfio");
  EXPECT_EQ(ErrnoOf(Output(Vf("af", 0), "placement_id").status()), ENXIO);
  EXPECT_EQ(ErrnoOf(Output(Vf("af", 0), "gpu_instance_id").status()), ENXIO);
  ASSERT_EQ(ErrnoOf(SetVfType(Vf("af", 0), "1704")), 0);
  EXPECT_EQ(Output(Vf("af", 0), "placement_id").value(), "0\n");
  ASSERT_EQ(ErrnoOf(SetVfType(Vf("af", 0), "0")), 0);
  EXPECT_EQ(ErrnoOf(Output(Vf("af", 0), "placement_id").status()), ENXIO);
}

TEST_F(ShapesTest, MixedSizeModeIsRefusedWhileAVgpuExistsAndClearedByAVfReEnable) {
  Load("l40s-vfio");
  ASSERT_EQ(ErrnoOf(SetVfType(Vf("3b", 0), "1700")), 0);
  EXPECT_EQ(ErrnoOf(model_->SetHeterogeneous("0000:3b:00.0", true)), EBUSY);
  ASSERT_EQ(ErrnoOf(SetVfType(Vf("3b", 0), "0")), 0);
  ASSERT_EQ(ErrnoOf(model_->SetHeterogeneous("0000:3b:00.0", true)), 0);
  ASSERT_EQ(ErrnoOf(SetVfType(Vf("3b", 0), "1700")), 0);
  EXPECT_EQ(ErrnoOf(SetVfType(Vf("3b", 1), "1702")), 0) << "sizes mix once the mode is on";
  EXPECT_TRUE(Modes()["gpus"][0]["heterogeneous"].get<bool>());

  ASSERT_TRUE(model_->RemoveGpu("0000:af:00.0").ok());
  ASSERT_TRUE(model_->RestoreGpu("0000:af:00.0").ok());
  EXPECT_FALSE(Modes()["gpus"][1]["heterogeneous"].get<bool>()) << "sriov-manage resets it";
  ASSERT_EQ(ErrnoOf(SetVfType(Vf("af", 0), "1700")), 0);
  EXPECT_EQ(ErrnoOf(SetVfType(Vf("af", 1), "1702")), ENOSPC) << "back to equal-size";
}

TEST_F(ShapesTest, MdevPlacementIsNotApplicableUntilTheVgpuIsInUse) {
  auto profile = ProfileByName("l40s-vfio").value();
  GpuSpec& gpu = profile.gpus[1];
  gpu.kind = GpuKind::kMdevPci;
  gpu.num_vfs = 0;
  for (TypeSpec& type : gpu.types) {
    type.id = "nvidia-" + type.id;
    type.device_api = "vfio-pci";
  }
  profile.gpus.erase(profile.gpus.begin());
  Load(profile);
  ASSERT_EQ(ErrnoOf(CreateMdev("0000:af:00.0", "nvidia-1703", Uuid(1))), 0);
  ASSERT_EQ(ErrnoOf(CreateMdev("0000:af:00.0", "nvidia-1702", Uuid(2))), 0);
  EXPECT_EQ(Available("0000:af:00.0", "nvidia-1702"), "3\n") << "8Q: 24, 32, 40 still free";
  EXPECT_EQ(Read(MdevDir(Uuid(2)) / "nvidia" / "placement_id"), "Not Applicable\n");
  model_->SetBusy(Uuid(2), true);
  EXPECT_EQ(Read(MdevDir(Uuid(2)) / "nvidia" / "placement_id"), "16\n");
}

// --- MIG ---

TEST_F(ShapesTest, MigBackedTypesGoOnlyWhereAGpuInstanceFitsAndTimeSlicedOnesAreAbsent) {
  Load("h200-mig");
  EXPECT_EQ(Creatable(Vf("41", 0)), std::string(kTypeListHeader) + "1414  : NVIDIA H200X-1-18C\n" +
                                        "1415  : NVIDIA H200X-2-35C\n");
  EXPECT_EQ(ErrnoOf(SetVfType(Vf("41", 0), "1428")), ENOSPC) << "time-sliced while MIG is on";
  for (int i = 0; i < 4; ++i) ASSERT_EQ(ErrnoOf(SetVfType(Vf("41", i), "1414")), 0) << i;
  EXPECT_EQ(Output(Vf("41", 0), "gpu_instance_id").value(), "1\n");
  EXPECT_EQ(Output(Vf("41", 3), "gpu_instance_id").value(), "4\n");
  EXPECT_EQ(ErrnoOf(SetVfType(Vf("41", 4), "1414")), EIO) << "no 1g.18gb instance left";
  ASSERT_EQ(ErrnoOf(SetVfType(Vf("41", 4), "1415")), 0);
  EXPECT_EQ(Output(Vf("41", 4), "gpu_instance_id").value(), "5\n");
  EXPECT_EQ(Creatable(Vf("41", 5)), kTypeListHeader);

  EXPECT_EQ(ErrnoOf(model_->DestroyGpuInstance("0000:41:00.0", 5)), EBUSY);
  EXPECT_EQ(ErrnoOf(model_->SetMig("0000:41:00.0", false)), EBUSY);
  ASSERT_TRUE(model_->RemoveGpu("0000:41:00.0").ok());
  ASSERT_TRUE(model_->RestoreGpu("0000:41:00.0").ok());
  EXPECT_TRUE(Modes()["gpus"][0]["mig"].get<bool>()) << "MIG mode persists";
  EXPECT_TRUE(Modes()["gpus"][0]["gpuInstances"].empty()) << "a VF re-enable wipes every GI";
  EXPECT_EQ(ErrnoOf(SetVfType(Vf("41", 0), "1414")), EIO);
  auto gi = model_->CreateGpuInstance("0000:41:00.0", 19);
  ASSERT_TRUE(gi.ok());
  EXPECT_EQ(ErrnoOf(SetVfType(Vf("41", 0), "1414")), 0);
  EXPECT_EQ(ErrnoOf(model_->CreateGpuInstance("0000:41:00.0", 99).status()), EINVAL);
}

TEST_F(ShapesTest, AGpuInstanceHostsOneSizeUpToItsMaxPerInstance) {
  Load("rtxpro6000-mig");
  ASSERT_EQ(ErrnoOf(SetVfType(Vf("41", 0), "1561")), 0);  // DC-1-3Q -> GI 1
  ASSERT_EQ(ErrnoOf(SetVfType(Vf("41", 1), "1562")), 0);  // DC-1-3A beside it
  EXPECT_EQ(Output(Vf("41", 1), "gpu_instance_id").value(), "1\n");
  ASSERT_EQ(ErrnoOf(SetVfType(Vf("41", 2), "1563")), 0);  // DC-1-6Q: not into GI 1
  EXPECT_EQ(Output(Vf("41", 2), "gpu_instance_id").value(), "2\n");
  for (int i = 3; i < 9; ++i) ASSERT_EQ(ErrnoOf(SetVfType(Vf("41", i), "1561")), 0) << i;
  EXPECT_EQ(Output(Vf("41", 8), "gpu_instance_id").value(), "1\n") << "8 of 3 GiB in GI 1";
  ASSERT_EQ(ErrnoOf(SetVfType(Vf("41", 9), "1561")), 0);
  EXPECT_EQ(Output(Vf("41", 9), "gpu_instance_id").value(), "3\n") << "GI 1 full: the next";
  ASSERT_EQ(ErrnoOf(SetVfType(Vf("41", 10), "1564")), 0);  // DC-1-24Q takes GI 4
  EXPECT_EQ(ErrnoOf(SetVfType(Vf("41", 11), "1564")), EIO);
  EXPECT_EQ(ErrnoOf(SetVfType(Vf("41", 11), "1519")), ENOSPC) << "time-sliced while MIG is on";
  auto modes = Modes();
  EXPECT_EQ(modes["gpus"][0]["gpuInstances"].size(), 4u);
  EXPECT_EQ(modes["gpus"][0]["types"][2]["maxPerGpuInstance"], 12);
}

// NVIDIA: a GPU runs time-sliced or MIG-backed vGPUs, never both, and a MIG-backed vGPU runs in a
// GPU instance, which exists only with MIG on (sources: sim/profiles.cpp, H200VendorVfio).
TEST_F(ShapesTest, AMigBackedTypeIsNeitherListedNorMadeWithMigOff) {
  Load("h200-vfio");
  EXPECT_EQ(Creatable(Vf("41", 0)), std::string(kTypeListHeader) + "1428  : NVIDIA H200X-141C\n");
  EXPECT_EQ(ErrnoOf(SetVfType(Vf("41", 0), "1414")), ENOSPC) << "MIG-backed with MIG off";
  ASSERT_EQ(ErrnoOf(SetVfType(Vf("41", 0), "1428")), 0);
  EXPECT_EQ(ErrnoOf(SetVfType(Vf("41", 1), "1414")), ENOSPC) << "beside a time-sliced vGPU";
  EXPECT_EQ(ErrnoOf(SetVfType(Vf("41", 1), "1428")), ENOSPC) << "one H200X-141C per GPU";
  EXPECT_EQ(Creatable(Vf("41", 1)), kTypeListHeader);
}

// An H200 has 7 compute slices (MIG user guide, "Supported MIG Profiles"): h200-mig's four 1g and
// one 2g instance leave room for one more 1g, and for no 2g however many the profile allows.
TEST_F(ShapesTest, GpuInstancesStopAtTheGpusSlices) {
  Load("h200-mig");
  const std::string gpu = "0000:41:00.0";
  EXPECT_EQ(ErrnoOf(model_->CreateGpuInstance(gpu, 14).status()), ENOSPC) << "2 slices, 1 left";
  auto seventh = model_->CreateGpuInstance(gpu, 19);
  ASSERT_TRUE(seventh.ok()) << seventh.status().message();
  EXPECT_EQ(ErrnoOf(model_->CreateGpuInstance(gpu, 19).status()), ENOSPC) << "an 8th slice";
  EXPECT_EQ(Modes()["gpus"][0]["gpuInstances"].size(), 6u) << "a refusal makes nothing";
  ASSERT_TRUE(model_->DestroyGpuInstance(gpu, *seventh).ok());
  EXPECT_TRUE(model_->CreateGpuInstance(gpu, 19).ok()) << "a destroyed instance frees its slice";
}

TEST(ShapesProfileTest, BadShapesAreRefusedBeforeLayout) {
  auto profile = ProfileByName("l40s-vfio").value();
  profile.gpus[0].heterogeneous_capable = false;  // placements on a GPU that cannot mix sizes
  kvgpu::testing::TempDir dir;
  EXPECT_FALSE(KernelModel::Create(dir.path() / "a", profile).ok());
  auto mig = ProfileByName("h200-mig").value();
  mig.gpus[0].types[1].gi_profile = 77;  // a GI profile the GPU has not
  EXPECT_FALSE(KernelModel::Create(dir.path() / "b", mig).ok());
  auto slices = ProfileByName("h200-mig").value();
  slices.gpus[0].initial_gpu_instances = {14, 14, 14};  // 6 slices of 7, but then a 1g too many
  slices.gpus[0].initial_gpu_instances.push_back(19);
  slices.gpus[0].initial_gpu_instances.push_back(19);
  EXPECT_FALSE(KernelModel::Create(dir.path() / "c", slices).ok()) << "8 slices on a 7-slice GPU";
  auto time_sliced = ProfileByName("h200-vfio").value();
  time_sliced.gpus[0].types[1].gi_profile.reset();  // H200X-1-18C offered as time-sliced
  EXPECT_FALSE(KernelModel::Create(dir.path() / "d", time_sliced).ok());
}

}  // namespace
}  // namespace kvgpu::sim::testing
