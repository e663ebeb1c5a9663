// The DRA plugin (deviceplugin/dra/dra_plugin.h) through kubelet's calls: what a claim's prepare
// creates and its unprepare removes, idempotence, restarts, other drivers' results, foreign vGPUs
// and bad claims.
#include <gtest/gtest.h>

#include <fstream>

#include "tests/deviceplugin/dra/dra_flow_fixture.h"

namespace kvgpu::testing {
namespace {

TEST_F(DraFlowTest, PrepareCreatesTheVgpuAndReturnsItsCdiDevice) {
  DraClaim c = Claim("c1", "uid-1", {Ours(Gpu0Device(0))});
  auto answers = kubelet_.Prepare({c});
  ASSERT_EQ(answers.count("uid-1"), 1u);
  const DraClaimAnswer& a = answers["uid-1"];
  ASSERT_EQ(a.error, "");
  ASSERT_EQ(a.devices.size(), 1u);
  EXPECT_EQ(a.devices[0].device, Gpu0Device(0));
  EXPECT_EQ(a.devices[0].pool, Pool());
  EXPECT_EQ(a.devices[0].request_names, std::vector<std::string>{"gpu"});
  ASSERT_EQ(a.devices[0].cdi_device_ids.size(), 1u);
  EXPECT_EQ(a.devices[0].cdi_device_ids[0],
            std::string(kDraDriver) + "/vgpu-222=" + sim_.gpu(0) + "-" + kType + "-0");
  auto vgpus = sim_.model().Vgpus();
  ASSERT_EQ(vgpus.size(), 1u);
  EXPECT_EQ(vgpus[0].parent, sim_.gpu(0));
  EXPECT_EQ(vgpus[0].type, kType);
  // The CDI spec names the vGPU's VFIO group under the kind the id gives.
  std::ifstream spec(dir_.path() / "cdi" /
                     ("kata-vgpu_" + std::string(kDraDriver) + "_vgpu-222.json"));
  ASSERT_TRUE(spec.good());
  std::string text((std::istreambuf_iterator<char>(spec)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(sim_.gpu(0) + "-" + kType + "-0"), std::string::npos);
}

TEST_F(DraFlowTest, RePrepareIsIdempotentWithoutTheApiServer) {
  DraClaim c = Claim("c1", "uid-1", {Ours(Gpu0Device(0)), Ours(Gpu0Device(1), "second")});
  auto first = kubelet_.Prepare({c});
  ASSERT_EQ(first["uid-1"].error, "");
  int gets = api_server_.resource_claim_gets();
  auto again = kubelet_.Prepare({c});
  ASSERT_EQ(again["uid-1"].error, "");
  ASSERT_EQ(again["uid-1"].devices.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(again["uid-1"].devices[i].cdi_device_ids, first["uid-1"].devices[i].cdi_device_ids);
  }
  EXPECT_EQ(Vgpus(), 2u);
  EXPECT_EQ(api_server_.resource_claim_gets(), gets);
}

TEST_F(DraFlowTest, UnprepareRemovesExactlyTheClaimsVgpus) {
  DraClaim a = Claim("a", "uid-a", {Ours(Gpu0Device(0))});
  DraClaim b = Claim("b", "uid-b", {Ours(Gpu0Device(1))});
  auto answers = kubelet_.Prepare({a, b});
  ASSERT_EQ(answers["uid-a"].error, "");
  ASSERT_EQ(answers["uid-b"].error, "");
  ASSERT_EQ(Vgpus(), 2u);
  auto before = sim_.model().VgpuIds();
  EXPECT_EQ(kubelet_.Unprepare({a})["uid-a"], "");
  auto after = sim_.model().VgpuIds();
  ASSERT_EQ(after.size(), 1u);
  // b's vGPU is the one left.
  auto b_again = kubelet_.Prepare({b});
  EXPECT_EQ(b_again["uid-b"].devices[0].cdi_device_ids, answers["uid-b"].devices[0].cdi_device_ids);
  EXPECT_EQ(sim_.model().VgpuIds(), after);
  // Unpreparing again, or a claim never seen, is success and changes nothing.
  EXPECT_EQ(kubelet_.Unprepare({a})["uid-a"], "");
  EXPECT_EQ(kubelet_.Unprepare({{"ns", "uid-never", "never"}})["uid-never"], "");
  EXPECT_EQ(sim_.model().VgpuIds(), after);
}

TEST_F(DraFlowTest, DaemonRestartBetweenPrepareAndUnprepare) {
  DraClaim c = Claim("c1", "uid-1", {Ours(Gpu0Device(0))});
  auto first = kubelet_.Prepare({c});
  ASSERT_EQ(first["uid-1"].error, "");
  auto ids = sim_.model().VgpuIds();
  StopDaemon();
  StartDaemon();
  // The re-sent prepare answers from the checkpoint: same CDI id, same vGPU.
  api_server_.DeleteResourceClaim("ns", "c1");
  auto again = kubelet_.Prepare({c});
  ASSERT_EQ(again["uid-1"].error, "");
  EXPECT_EQ(again["uid-1"].devices[0].cdi_device_ids, first["uid-1"].devices[0].cdi_device_ids);
  EXPECT_EQ(sim_.model().VgpuIds(), ids);
  StopDaemon();
  StartDaemon();
  EXPECT_EQ(kubelet_.Unprepare({c})["uid-1"], "");
  EXPECT_EQ(Vgpus(), 0u);
}

TEST_F(DraFlowTest, ResultsOfOtherDriversAndPoolsAreIgnored) {
  DraClaim c = Claim("c1", "uid-1",
                     {Ours(Gpu0Device(0)),
                      {"gpu", "gpu.nvidia.com", Pool(), Gpu0Device(1)},
                      {"gpu", kDraDriver, "node-b", Gpu0Device(2)}});
  auto answers = kubelet_.Prepare({c});
  ASSERT_EQ(answers["uid-1"].error, "");
  ASSERT_EQ(answers["uid-1"].devices.size(), 1u);
  EXPECT_EQ(answers["uid-1"].devices[0].device, Gpu0Device(0));
  EXPECT_EQ(Vgpus(), 1u);
}

TEST_F(DraFlowTest, MissingClaimIsAnErrorForThatClaimOnly) {
  DraClaim good = Claim("good", "uid-good", {Ours(Gpu0Device(0))});
  DraClaim missing{"ns", "uid-missing", "missing"};
  auto answers = kubelet_.Prepare({missing, good});
  ASSERT_EQ(answers.count("uid-missing"), 1u);
  EXPECT_NE(answers["uid-missing"].error.find("not found"), std::string::npos)
      << answers["uid-missing"].error;
  EXPECT_EQ(answers["uid-good"].error, "");
  EXPECT_EQ(Vgpus(), 1u);
}

TEST_F(DraFlowTest, AClaimMadeAnewUnderTheSameNameIsRefused) {
  Claim("c1", "uid-new", {Ours(Gpu0Device(0))});
  auto answers = kubelet_.Prepare({{"ns", "uid-old", "c1"}});
  EXPECT_NE(answers["uid-old"].error.find("UID"), std::string::npos) << answers["uid-old"].error;
  EXPECT_EQ(Vgpus(), 0u);
}

TEST_F(DraFlowTest, DevicesOfTheDevicePluginsGpuAreNotOffered) {
  // GPU 1 is the device plugin's: a (wrong) allocation of it is refused and nothing is made.
  DraClaim c = Claim("c1", "uid-1", {Ours(DraName(sim_.gpu(1), kType, 0))});
  auto answers = kubelet_.Prepare({c});
  EXPECT_NE(answers["uid-1"].error.find("not offered"), std::string::npos)
      << answers["uid-1"].error;
  EXPECT_EQ(Vgpus(), 0u);
}

TEST_F(DraFlowTest, ADevicePreparedForOneClaimIsNotHandedToAnother) {
  DraClaim a = Claim("a", "uid-a", {Ours(Gpu0Device(0))});
  DraClaim b = Claim("b", "uid-b", {Ours(Gpu0Device(0))});
  ASSERT_EQ(kubelet_.Prepare({a})["uid-a"].error, "");
  auto answers = kubelet_.Prepare({b});
  EXPECT_NE(answers["uid-b"].error.find("prepared for claim ns/a"), std::string::npos)
      << answers["uid-b"].error;
  EXPECT_EQ(Vgpus(), 1u);
}

// All or nothing per claim: on an empty T4 sixteen nvidia-222 fit, and then no nvidia-223 (one
// type per time-sliced GPU). The 222s made before the refusal are removed before the answer, so
// the GPU's room is not held by a claim kubelet was told failed, and each retry fails the same
// way without leaving anything.
TEST_F(DraFlowTest, AClaimTheGpuCannotFinishLeavesNoVgpuOnTheNode) {
  std::vector<DraResult> results;
  for (uint32_t slot = 0; slot < 16; ++slot) {
    results.push_back(Ours(Gpu0Device(slot), "small-" + std::to_string(slot)));
  }
  results.push_back(Ours(DraName(sim_.gpu(0), "nvidia-223", 0), "other"));
  DraClaim c = Claim("c1", "uid-1", results);
  for (int attempt = 0; attempt < 2; ++attempt) {
    SCOPED_TRACE("attempt " + std::to_string(attempt));
    auto answers = kubelet_.Prepare({c});
    EXPECT_NE(answers["uid-1"].error, "");
    EXPECT_NE(answers["uid-1"].error.find("nothing of the claim was kept"), std::string::npos)
        << answers["uid-1"].error;
    EXPECT_EQ(Vgpus(), 0u);
    EXPECT_FALSE(stack_->claims().Find("uid-1")) << "no half-prepared claim is remembered";
    EXPECT_TRUE(stack_->manager().Snapshot().records.empty());
  }
  // The GPU is free for the type the claim could not have: nothing of the failed claim holds it.
  DraClaim other = Claim("c2", "uid-2", {Ours(DraName(sim_.gpu(0), "nvidia-223", 0))});
  EXPECT_EQ(kubelet_.Prepare({other})["uid-2"].error, "");
  EXPECT_EQ(Vgpus(), 1u);
  // The failed claim's unprepare (kubelet sends it when the pod goes) finds nothing to do.
  EXPECT_EQ(kubelet_.Unprepare({c})["uid-1"], "");
  EXPECT_EQ(Vgpus(), 1u);
}

TEST_F(DraFlowTest, ForeignVgpusAreNeverTouched) {
  StopDaemon();
  auto foreign = sim_.node().Create({sim_.gpu(0), kType, std::nullopt});
  ASSERT_TRUE(foreign.ok()) << foreign.status().ToString();
  StartDaemon();
  DraClaim c = Claim("c1", "uid-1", {Ours(Gpu0Device(0))});
  ASSERT_EQ(kubelet_.Prepare({c})["uid-1"].error, "");
  EXPECT_EQ(kubelet_.Unprepare({c})["uid-1"], "");
  auto ids = sim_.model().VgpuIds();
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(ids[0], foreign.value().id);
}

TEST_F(DraFlowTest, BadClaimReferencesAreRefusedPerClaim) {
  auto answers = kubelet_.Prepare({{"../x", "uid-1", "c1"}, {"ns", "", "c1"}});
  EXPECT_NE(answers["uid-1"].error.find("namespace"), std::string::npos);
  EXPECT_NE(answers[""].error.find("UID"), std::string::npos);
  EXPECT_EQ(api_server_.resource_claim_gets(), 0);
}

}  // namespace
}  // namespace kvgpu::testing
