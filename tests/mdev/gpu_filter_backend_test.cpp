// One mode per GPU (mdev/gpu_filter_backend.h): each view shows exactly its GPUs
// (an SR-IOV GPU's VFs follow their PF), the two views of one node split it without overlap, and a
// create on a hidden GPU is refused before the kernel is asked.
#include "mdev/gpu_filter_backend.h"

#include <gtest/gtest.h>

#include "fakes/common/sim_node.h"

namespace kvgpu::mdev {
namespace {

std::set<std::string> GpusOf(const Inventory& inventory) {
  std::set<std::string> out;
  for (const Parent& p : inventory.parents) out.insert(p.physical_gpu);
  return out;
}

TEST(GpuFilterBackendTest, TwoViewsSplitTheNodeWithoutOverlap) {
  testing::SimNode sim("t4x2");
  GpuFilterBackend dra(sim.node(), {sim.gpu(0)}, true);
  GpuFilterBackend dp(sim.node(), {sim.gpu(0)}, false);
  auto dra_view = dra.Scan();
  auto dp_view = dp.Scan();
  ASSERT_TRUE(dra_view.ok() && dp_view.ok());
  EXPECT_EQ(GpusOf(dra_view.value()), std::set<std::string>{sim.gpu(0)});
  EXPECT_EQ(GpusOf(dp_view.value()), std::set<std::string>{sim.gpu(1)});
}

TEST(GpuFilterBackendTest, VirtualFunctionsFollowTheirPhysicalGpu) {
  testing::SimNode sim("a100-sriov");
  GpuFilterBackend dra(sim.node(), {sim.gpu(0)}, true);
  auto view = dra.Scan();
  ASSERT_TRUE(view.ok());
  ASSERT_FALSE(view.value().parents.empty());
  bool vf = false;
  for (const Parent& p : view.value().parents) {
    EXPECT_EQ(p.physical_gpu, sim.gpu(0));
    vf = vf || p.is_virtual_function;
  }
  EXPECT_TRUE(vf);
}

// A model behind the filter reads one GPU again after its own create (the GPU's lock changes what
// it and its VFs can make): the filter passes that read on for its GPUs and refuses the others.
TEST(GpuFilterBackendTest, OneGpuIsReadAgainThroughTheFilterOnlyWhereItShowsIt) {
  testing::SimNode sim("t4x2");
  GpuFilterBackend dra(sim.node(), {sim.gpu(0)}, true);
  ASSERT_TRUE(sim.node().Create({sim.gpu(0), "nvidia-225", std::nullopt}).ok());
  auto shown = dra.ScanGpu(sim.gpu(0));
  ASSERT_TRUE(shown.ok()) << shown.status().ToString();
  EXPECT_EQ(GpusOf(shown.value()), std::set<std::string>{sim.gpu(0)});
  ASSERT_EQ(shown.value().vgpus.size(), 1u);
  EXPECT_EQ(shown.value().vgpus[0].type_id, "nvidia-225");
  auto hidden = dra.ScanGpu(sim.gpu(1));
  ASSERT_FALSE(hidden.ok());
  EXPECT_EQ(hidden.status().code(), ErrorCode::kInvalid);

  // The narrow read the model makes (its view in hand) goes the same way.
  auto whole_view = sim.node().Scan();
  ASSERT_TRUE(whole_view.ok());
  auto room = dra.ScanGpuRoom(sim.gpu(0), whole_view.value());
  ASSERT_TRUE(room.ok()) << room.status().ToString();
  EXPECT_EQ(GpusOf(room.value()), std::set<std::string>{sim.gpu(0)});
  EXPECT_EQ(room.value().vgpus.size(), 1u);
  EXPECT_EQ(dra.ScanGpuRoom(sim.gpu(1), whole_view.value()).status().code(), ErrorCode::kInvalid);
}

TEST(GpuFilterBackendTest, CreateOnAHiddenGpuIsRefusedAndMakesNothing) {
  testing::SimNode sim("t4x2");
  GpuFilterBackend dra(sim.node(), {sim.gpu(0)}, true);
  ASSERT_TRUE(dra.Scan().ok());
  auto refused = dra.Create({sim.gpu(1), "nvidia-222", std::nullopt});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::kInvalid);
  EXPECT_TRUE(sim.model().VgpuIds().empty());
  auto made = dra.Create({sim.gpu(0), "nvidia-222", std::nullopt});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  // A vGPU on the other view's GPU is not in this view at all.
  GpuFilterBackend dp(sim.node(), {sim.gpu(0)}, false);
  EXPECT_TRUE(dp.Scan().value().vgpus.empty());
  EXPECT_EQ(dra.Scan().value().vgpus.size(), 1u);
}

}  // namespace
}  // namespace kvgpu::mdev
