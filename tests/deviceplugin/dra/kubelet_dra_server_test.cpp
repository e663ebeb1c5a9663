// kubelet's side of the DRA front end (deviceplugin/dra/kubelet_dra_server.h): registration as
// upstream kubelet expects it, both DRAPlugin services, a restarted kubelet, sockets and the
// kubelet directory served again when removed, and the per-call claim limit.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "tests/deviceplugin/dra/dra_flow_fixture.h"

namespace kvgpu::testing {
namespace {

TEST_F(DraFlowTest, RegistersAsUpstreamKubeletExpects) {
  auto reg = kubelet_.Register(kDraDriver);
  ASSERT_TRUE(reg);
  EXPECT_EQ(reg->type, "DRAPlugin");
  EXPECT_EQ(reg->driver, kDraDriver);
  EXPECT_EQ(reg->socket,
            (dir_.path() / "kubelet/plugins_registry" / (std::string(kDraDriver) + "-reg.sock"))
                .string());
  EXPECT_EQ(reg->endpoint, (dir_.path() / "kubelet/plugins" / kDraDriver / "dra.sock").string());
  EXPECT_EQ(reg->supported_versions,
            (std::vector<std::string>{"v1.DRAPlugin", "v1beta1.DRAPlugin"}));
  EXPECT_EQ(reg->chosen, "v1.DRAPlugin");
  ASSERT_TRUE(stack_->server()->LastReport());
  EXPECT_TRUE(stack_->server()->LastReport()->registered);
}

TEST_F(DraFlowTest, TheOlderV1beta1ServiceAnswersTheSame) {
  kubelet_.ForceService("v1beta1.DRAPlugin");
  DraClaim c = Claim("c1", "uid-1", {Ours(Gpu0Device(0))});
  auto answers = kubelet_.Prepare({c});
  ASSERT_EQ(answers["uid-1"].error, "");
  ASSERT_EQ(answers["uid-1"].devices.size(), 1u);
  EXPECT_EQ(Vgpus(), 1u);
  EXPECT_EQ(kubelet_.Unprepare({c})["uid-1"], "");
  EXPECT_EQ(Vgpus(), 0u);
}

TEST_F(DraFlowTest, ARestartedKubeletFindsThePluginAndItsPreparedClaims) {
  DraClaim c = Claim("c1", "uid-1", {Ours(Gpu0Device(0))});
  auto first = kubelet_.Prepare({c});
  ASSERT_EQ(first["uid-1"].error, "");
  // A new kubelet process: it scans plugins_registry afresh and sends its checkpointed claims.
  DraTestKubelet restarted(dir_.path() / "kubelet");
  ASSERT_TRUE(restarted.Register(kDraDriver));
  auto again = restarted.Prepare({c});
  ASSERT_EQ(again["uid-1"].error, "");
  EXPECT_EQ(again["uid-1"].devices[0].cdi_device_ids, first["uid-1"].devices[0].cdi_device_ids);
  EXPECT_EQ(Vgpus(), 1u);
  EXPECT_EQ(restarted.Unprepare({c})["uid-1"], "");
  EXPECT_EQ(Vgpus(), 0u);
}

TEST_F(DraFlowTest, RemovedRegistrationSocketIsServedAgain) {
  std::filesystem::remove(dir_.path() / "kubelet/plugins_registry" /
                          (std::string(kDraDriver) + "-reg.sock"));
  auto reg = kubelet_.Register(kDraDriver, std::chrono::seconds(5));
  ASSERT_TRUE(reg);
  EXPECT_GE(stack_->server()->reserved(), 1);
  DraClaim c = Claim("c1", "uid-1", {Ours(Gpu0Device(0))});
  EXPECT_EQ(kubelet_.Prepare({c})["uid-1"].error, "");
}

TEST_F(DraFlowTest, WipedKubeletDirectoryIsServedAgain) {
  std::filesystem::remove_all(dir_.path() / "kubelet");
  auto reg = kubelet_.Register(kDraDriver, std::chrono::seconds(5));
  ASSERT_TRUE(reg);
  DraClaim c = Claim("c1", "uid-1", {Ours(Gpu0Device(0))});
  EXPECT_EQ(kubelet_.Prepare({c})["uid-1"].error, "");
}

TEST_F(DraFlowTest, TooManyClaimsInOneCallAreRefusedWhole) {
  std::vector<DraClaim> many;
  for (size_t i = 0; i <= deviceplugin::dra::kMaxClaimsPerCall; ++i) {
    many.push_back({"ns", "uid-" + std::to_string(i), "c" + std::to_string(i)});
  }
  std::string error;
  auto answers = kubelet_.Prepare(many, &error);
  EXPECT_TRUE(answers.empty());
  EXPECT_NE(error.find("claims in one call"), std::string::npos) << error;
}

}  // namespace
}  // namespace kvgpu::testing
