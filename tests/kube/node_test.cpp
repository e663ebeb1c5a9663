// Node reads and writes (kube/node.h) without HTTP: what is parsed, what patch is sent, and that
// bad input sends nothing.
#include "kube/node.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvgpu::kube {
namespace {

using namespace std::chrono_literals;

// Records every request; answers each with an empty object.
class RecordingTransport : public ApiTransport {
 public:
  struct Sent {
    std::string method;
    std::string path;
    nlohmann::json body;
    std::string content_type;
  };
  Result<nlohmann::json> Get(const std::string& path, Canceller*) override {
    sent.push_back({"GET", path, nullptr, ""});
    return answer;
  }
  Result<nlohmann::json> Post(const std::string& path, const nlohmann::json& body,
                              Canceller*) override {
    sent.push_back({"POST", path, body, ""});
    return answer;
  }
  Result<nlohmann::json> Patch(const std::string& path, const nlohmann::json& body,
                               const std::string& content_type, Canceller*) override {
    sent.push_back({"PATCH", path, body, content_type});
    return answer;
  }
  Status Stream(const std::string&, std::chrono::milliseconds, const std::function<void()>&,
                const std::function<bool(std::string_view)>&, Canceller*) override {
    return Status();
  }
  std::vector<Sent> sent;
  nlohmann::json answer = nlohmann::json::object();
};

const std::chrono::system_clock::time_point kNow{1735787045s};  // 2025-01-02T03:04:05Z

TEST(Node, ParsesLabelsAllocatableAndConditions) {
  const nlohmann::json node = {{"metadata",
                                {{"name", "gpu-1"},
                                 {"labels", {{"kata-vgpu.io/vgpu-mode", "mdev"}}},
                                 {"annotations", {{"a", "b"}}}}},
                               {"status",
                                {{"allocatable", {{"tencent.com/vgpu-230", "16"}, {"cpu", "8"}}},
                                 {"conditions",
                                  {{{"type", "Ready"},
                                    {"status", "True"},
                                    {"lastTransitionTime", "2024-01-01T00:00:00Z"}}}}}}};
  auto info = ParseNode(node);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->name, "gpu-1");
  EXPECT_EQ(info->labels.at("kata-vgpu.io/vgpu-mode"), "mdev");
  EXPECT_EQ(info->allocatable.at("tencent.com/vgpu-230"), "16");
  ASSERT_NE(info->Condition("Ready"), nullptr);
  EXPECT_EQ(info->Condition("Ready")->last_transition_time, "2024-01-01T00:00:00Z");
  EXPECT_EQ(info->Condition("KataVgpuValidated"), nullptr);
}

TEST(Node, ANodeWithoutANameIsADecodeError) {
  EXPECT_EQ(ParseNode({{"metadata", nlohmann::json::object()}}).status().code(),
            ErrorCode::kDecode);
  EXPECT_EQ(ParseNode(nlohmann::json::array()).status().code(), ErrorCode::kDecode);
}

TEST(Node, ConditionPatchKeepsTheTransitionTimeWhileTheStatusStaysTheSame) {
  NodeInfo current;
  current.name = "gpu-1";
  current.conditions.push_back(
      {"KataVgpuValidated", "True", "Validated", "", "2024-05-05T00:00:00Z"});
  const NodeCondition same{"KataVgpuValidated", "True", "Validated", "ok", ""};
  auto patch = ConditionPatch(same, current, kNow);
  const auto& entry = patch["status"]["conditions"][0];
  EXPECT_EQ(entry["lastTransitionTime"], "2024-05-05T00:00:00Z");
  EXPECT_EQ(entry["lastHeartbeatTime"], "2025-01-02T03:04:05Z");

  const NodeCondition flipped{"KataVgpuValidated", "False", "Cuda", "Test FAILED", ""};
  patch = ConditionPatch(flipped, current, kNow);
  EXPECT_EQ(patch["status"]["conditions"][0]["lastTransitionTime"], "2025-01-02T03:04:05Z");
  EXPECT_EQ(patch["status"]["conditions"][0]["reason"], "Cuda");
}

TEST(Node, SetNodeConditionSendsAStrategicMergePatchOfTheStatus) {
  RecordingTransport api;
  NodeInfo current;
  current.name = "gpu-1";
  ASSERT_TRUE(
      SetNodeCondition(api, current, {"KataVgpuValidated", "True", "Validated", "", ""}, kNow)
          .ok());
  ASSERT_EQ(api.sent.size(), 1u);
  EXPECT_EQ(api.sent[0].path, "/api/v1/nodes/gpu-1/status");
  EXPECT_EQ(api.sent[0].content_type, "application/strategic-merge-patch+json");
}

TEST(Node, BadConditionsAndLabelsSendNothing) {
  RecordingTransport api;
  NodeInfo current;
  current.name = "gpu-1";
  EXPECT_EQ(SetNodeCondition(api, current, {"KataVgpuValidated", "yes", "", "", ""}, kNow).code(),
            ErrorCode::kInvalid);
  EXPECT_EQ(SetNodeCondition(api, current, {"", "True", "", "", ""}, kNow).code(),
            ErrorCode::kInvalid);
  EXPECT_EQ(SetNodeLabel(api, "gpu-1", "kata-vgpu.io/validated", "").code(), ErrorCode::kInvalid);
  EXPECT_EQ(SetNodeLabel(api, "", "kata-vgpu.io/validated", "true").code(), ErrorCode::kInvalid);
  EXPECT_TRUE(api.sent.empty());
}

TEST(Node, SetNodeLabelSendsAMergePatchOfTheLabelAlone) {
  RecordingTransport api;
  ASSERT_TRUE(SetNodeLabel(api, "gpu-1", "kata-vgpu.io/validated", "true").ok());
  ASSERT_EQ(api.sent.size(), 1u);
  EXPECT_EQ(api.sent[0].path, "/api/v1/nodes/gpu-1");
  EXPECT_EQ(api.sent[0].content_type, "application/merge-patch+json");
  EXPECT_EQ(api.sent[0].body,
            (nlohmann::json{{"metadata", {{"labels", {{"kata-vgpu.io/validated", "true"}}}}}}));
}

TEST(Node, TheBaseTransportSaysDeleteAndTextAreNotSupported) {
  RecordingTransport api;
  EXPECT_EQ(api.Delete("/x").status().code(), ErrorCode::kConfig);
  EXPECT_EQ(api.GetText("/x").status().code(), ErrorCode::kConfig);
}

}  // namespace
}  // namespace kvgpu::kube
