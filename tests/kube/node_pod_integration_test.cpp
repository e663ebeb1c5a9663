// What a node validator asks of the API server, against the fake one over HTTPS: a condition
// written next to kubelet's without replacing them, a label, and a pod created, read, logged and
// deleted by name.
#include <gtest/gtest.h>

#include "fakes/apiserver/fake_apiserver.h"
#include "kube/api_client.h"
#include "kube/node.h"

namespace kvgpu::kube {
namespace {

using kvgpu::testing::FakeApiServer;
using kvgpu::testing::MakePod;

class NodePodTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start());
    Config config = server_.ClientConfig();
    auto client = ApiClient::Create(config);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::move(client.value());
    // kubelet's own condition is there first: the validator's must join it, not replace it.
    server_.SetNode(nlohmann::json::parse(R"({
      "metadata": {"name": "gpu-1", "labels": {"a": "b"}},
      "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}
    })"));
  }

  FakeApiServer server_;
  std::unique_ptr<ApiClient> client_;
};

TEST_F(NodePodTest, AConditionJoinsKubeletsAndReplacesOnlyItsOwnType) {
  auto node = GetNode(*client_, "gpu-1");
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  const auto now = std::chrono::system_clock::now();
  ASSERT_TRUE(
      SetNodeCondition(*client_, *node, {"KataVgpuValidated", "False", "Cuda", "x", ""}, now).ok());
  node = GetNode(*client_, "gpu-1");
  ASSERT_TRUE(
      SetNodeCondition(*client_, *node, {"KataVgpuValidated", "True", "Validated", "", ""}, now)
          .ok());
  node = GetNode(*client_, "gpu-1");
  ASSERT_TRUE(node.ok());
  ASSERT_EQ(node->conditions.size(), 2u);
  EXPECT_EQ(node->Condition("Ready")->reason, "KubeletReady");
  EXPECT_EQ(node->Condition("KataVgpuValidated")->status, "True");
}

TEST_F(NodePodTest, ALabelIsAddedBesideTheOthers) {
  ASSERT_TRUE(SetNodeLabel(*client_, "gpu-1", "kata-vgpu.io/validated", "false").ok());
  auto node = GetNode(*client_, "gpu-1");
  ASSERT_TRUE(node.ok());
  EXPECT_EQ(node->labels.at("kata-vgpu.io/validated"), "false");
  EXPECT_EQ(node->labels.at("a"), "b");
}

TEST_F(NodePodTest, AnUnknownNodeIsA404) {
  auto node = GetNode(*client_, "nope");
  EXPECT_EQ(node.status().http_status(), 404);
  EXPECT_EQ(SetNodeLabel(*client_, "nope", "k", "v").http_status(), 404);
}

TEST_F(NodePodTest, APodIsCreatedReadLoggedAndDeletedByName) {
  auto pod = MakePod("kata-vgpu", "v", "gpu-1");
  pod["status"] = nullptr;
  auto created = client_->Post("/api/v1/namespaces/kata-vgpu/pods", pod);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(created.value()["status"]["phase"], "Pending");
  EXPECT_EQ(client_->Post("/api/v1/namespaces/kata-vgpu/pods", pod).status().http_status(), 409);
  // Before the container runs the log is a 400, as from the real server.
  EXPECT_EQ(client_->GetText("/api/v1/namespaces/kata-vgpu/pods/v/log").status().http_status(),
            400);
  server_.SetPodLog("kata-vgpu", "v", "line 1\nnot json\n");
  auto log = client_->GetText("/api/v1/namespaces/kata-vgpu/pods/v/log");
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  EXPECT_EQ(log.value(), "line 1\nnot json\n");
  ASSERT_TRUE(client_->Delete("/api/v1/namespaces/kata-vgpu/pods/v").ok());
  EXPECT_EQ(client_->Get("/api/v1/namespaces/kata-vgpu/pods/v").status().http_status(), 404);
  EXPECT_EQ(client_->Delete("/api/v1/namespaces/kata-vgpu/pods/v").status().http_status(), 404);
}

}  // namespace
}  // namespace kvgpu::kube
