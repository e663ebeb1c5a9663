// The PodResources client against a kubelet-shaped server: List, Get on each kubelet generation
// (served, gated off, absent), a kubelet that is down, and one that restarts.
#include "kube/kubelet/podresources.h"

#include <gtest/gtest.h>

#include <thread>

#include "fakes/common/hung_socket.h"
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

// A lying kubelet's names cannot forge a log line anywhere downstream: every name is escaped
// where it enters (PeerName), and valid Kubernetes names pass unchanged so they still match the
// API server's.
TEST_F(PodResourcesTest, NamesAreMadeLogSafeWhereTheyEnterValidOnesUnchanged) {
  server_.SetPods(
      {{"ml\nns", "evil\n2026-11-27 forged line", {{"c\r", {{kResource, {"dev\x1b"}}}}}},
       TwoPods()[0]});
  auto pods = client_.List();
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  ASSERT_EQ(pods->size(), 2u);
  const PodResources& evil = (*pods)[0];
  EXPECT_EQ(evil.namespace_name, "ml\\nns");
  EXPECT_EQ(evil.name, "evil\\n2026-11-27 forged line");
  EXPECT_EQ(evil.containers.at(0).name, "c\\r");
  EXPECT_EQ(evil.containers.at(0).devices.at(0).device_ids.at(0), "dev\\x1b");
  EXPECT_EQ((*pods)[1], TwoPods()[0]) << "valid names are left as they are";
}

// Cancel breaks a List waiting on a kubelet that never answers, and every later call.
TEST(PodResourcesCancelTest, CancelBreaksAHungListAtOnce) {
  TempDir dir;
  std::filesystem::create_directories(PodResourcesSocket(dir.path()).parent_path());
  kvgpu::testing::HungSocket hung(PodResourcesSocket(dir.path()));
  PodResourcesClient client(PodResourcesSocket(dir.path()), std::chrono::seconds(30));
  std::thread canceller([&] {
    while (hung.accepted() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the List is waiting now
    client.Cancel();
  });
  const auto start = std::chrono::steady_clock::now();
  auto listed = client.List();
  canceller.join();
  EXPECT_FALSE(listed.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10))
      << "waited for the 30 s deadline instead";
  EXPECT_EQ(client.List().status().code(), ErrorCode::kCancelled) << "later calls end at once";
}

}  // namespace
}  // namespace kvgpu::kubelet
