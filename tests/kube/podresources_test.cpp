// The PodResources client against a kubelet-shaped server: List, Get on each kubelet generation
// (served, gated off, absent), a kubelet that is down, and one that restarts.
#include "kube/kubelet/podresources.h"

#include <gtest/gtest.h>

#include "fakes/common/temp_dir.h"
#include "fakes/podresources/fake_podresources.h"

namespace kvgpu::kubelet {
namespace {

using kvgpu::testing::FakePodResources;
using kvgpu::testing::GetSupport;
using kvgpu::testing::TempDir;

const std::string kResource = "tencent.com/vgpu-492";

std::vector<PodResources> TwoPods() {
  return {
      {"ml", "train", {{"main", {{kResource, {"dev-0", "dev-1"}}}}, {"sidecar", {}}}},
      {"ml", "infer", {{"main", {{kResource, {"dev-2"}}, {"nvidia.com/gpu", {"GPU-1"}}}}}},
  };
}

class PodResourcesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start());
    server_.SetPods(TwoPods());
  }
  TempDir dir_;
  FakePodResources server_{PodResourcesSocket(dir_.path())};
  PodResourcesClient client_{PodResourcesSocket(dir_.path()), std::chrono::seconds(2)};
};

TEST_F(PodResourcesTest, ListGivesEveryContainersDevices) {
  auto pods = client_.List();
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  EXPECT_EQ(pods.value(), TwoPods());
  EXPECT_TRUE(pods.value()[0].Holds(kResource, "dev-1"));
  EXPECT_FALSE(pods.value()[0].Holds(kResource, "dev-2"));
  EXPECT_FALSE(pods.value()[1].Holds(kResource, "GPU-1")) << "the resource must match too";
}

TEST_F(PodResourcesTest, GetOnEachKubeletGeneration) {
  struct Case {
    std::string description;
    GetSupport support;
    bool uses_get_after;  // whether the client still calls Get after the first answer
  };
  const std::vector<Case> cases = {
      {"1.34+: Get served", GetSupport::kServed, true},
      {"1.27-1.33: gate off, UNKNOWN", GetSupport::kDisabled, false},
      {"before 1.27: UNIMPLEMENTED", GetSupport::kAbsent, false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    server_.SetGetSupport(c.support);
    PodResourcesClient client(server_.socket());
    auto pod = client.Get("ml", "infer");
    ASSERT_TRUE(pod.ok()) << pod.status().ToString();
    ASSERT_TRUE(pod.value().has_value());
    EXPECT_EQ(*pod.value(), TwoPods()[1]);
    auto missing = client.Get("ml", "gone");
    ASSERT_TRUE(missing.ok()) << missing.status().ToString();
    EXPECT_FALSE(missing.value().has_value());
    EXPECT_EQ(client.get_available(), c.uses_get_after);
    const int gets = server_.get_calls();
    ASSERT_TRUE(client.Get("ml", "train").ok());
    EXPECT_EQ(server_.get_calls(), gets + (c.uses_get_after ? 1 : 0));
  }
}

TEST_F(PodResourcesTest, KubeletDownIsAnErrorThenRestartIsFollowed) {
  server_.Stop();
  auto down = client_.List();
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.status().code(), ErrorCode::kTransport);
  EXPECT_NE(down.status().message().find("kubelet.sock"), std::string::npos)
      << down.status().message();
  ASSERT_TRUE(server_.Start());
  // gRPC reconnects on its own; the channel's backoff is capped at a second.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  Result<std::vector<PodResources>> up = Status::Error(ErrorCode::kTransport, "not yet");
  while (!up.ok() && std::chrono::steady_clock::now() < deadline) {
    up = client_.List();
    if (!up.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(up.ok()) << up.status().ToString();
  EXPECT_EQ(up.value().size(), 2u);
}

TEST_F(PodResourcesTest, PodsLeavingTheListAreGone) {
  server_.SetPods({TwoPods()[1]});
  auto pods = client_.List();
  ASSERT_TRUE(pods.ok());
  ASSERT_EQ(pods.value().size(), 1u);
  EXPECT_EQ(pods.value()[0].name, "infer");
}

}  // namespace
}  // namespace kvgpu::kubelet
