// Decoding pods: the pure part of the client that the lifecycle decides on.
#include "kube/pod.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvgpu::kube {
namespace {

TEST(ParsePodTest, KeepsWhatLifecycleDecisionsNeed) {
  const auto json = nlohmann::json::parse(R"({
    "metadata": {"uid": "u1", "namespace": "ml", "name": "train", "resourceVersion": "42",
                 "deletionTimestamp": "2024-01-01T00:00:00Z"},
    "spec": {"nodeName": "node-a",
             "initContainers": [{"name": "driver", "resources": {"limits": {"cpu": "1"}}}],
             "containers": [{"name": "main", "resources": {
                 "limits": {"tencent.com/vgpu-492": "1"},
                 "requests": {"tencent.com/vgpu-492": 1, "memory": "1Gi"}}},
                            {"name": "side"}]},
    "status": {"phase": "Running", "nominatedNodeName": "node-b"}})");
  auto pod = ParsePod(json);
  ASSERT_TRUE(pod.ok()) << pod.status().ToString();
  EXPECT_EQ(pod->uid, "u1");
  EXPECT_EQ(pod->Key(), "ml/train");
  EXPECT_EQ(pod->node_name, "node-a");
  EXPECT_EQ(pod->phase, "Running");
  EXPECT_EQ(pod->nominated_node, "node-b");
  EXPECT_EQ(pod->resource_version, "42");
  EXPECT_TRUE(pod->deleting);
  EXPECT_FALSE(pod->Finished());
  ASSERT_EQ(pod->containers.size(), 3u);
  EXPECT_TRUE(pod->containers[0].init);
  EXPECT_EQ(pod->containers[1].name, "main");
  EXPECT_EQ(pod->containers[1].limits.at("tencent.com/vgpu-492"), "1");
  EXPECT_EQ(pod->containers[1].requests.at("tencent.com/vgpu-492"), "1")
      << "a bare number quantity reads as its text";
  EXPECT_TRUE(pod->Requests("tencent.com/vgpu-492"));
  EXPECT_TRUE(pod->Requests("cpu")) << "init containers count";
  EXPECT_FALSE(pod->Requests("nvidia.com/gpu"));
}

// The API server's names are escaped where they enter, so no log line quoting them can be forged;
// valid names (the test above) come out unchanged.
TEST(ParsePodTest, NamesThatWouldForgeALogLineAreEscaped) {
  nlohmann::json json = {
      {"metadata", {{"uid", "u\n1"}, {"namespace", "ml\r"}, {"name", "a\nforged line"}}},
      {"spec", {{"nodeName", "node\x1b"}, {"containers", {{{"name", "c\n"}}}}}}};
  auto pod = ParsePod(json);
  ASSERT_TRUE(pod.ok()) << pod.status().ToString();
  EXPECT_EQ(pod->uid, "u\\n1");
  EXPECT_EQ(pod->Key(), "ml\\r/a\\nforged line");
  EXPECT_EQ(pod->node_name, "node\\x1b");
  EXPECT_EQ(pod->containers.at(0).name, "c\\n");
}

TEST(ParsePodTest, PhasesAndMissingParts) {
  struct Case {
    std::string description;
    std::string json;
    bool ok;
    bool finished;
    bool deleting;
  };
  const std::vector<Case> cases = {
      {"succeeded",
       R"({"metadata":{"uid":"u","namespace":"n","name":"p"},"status":{"phase":"Succeeded"}})",
       true, true, false},
      {"failed",
       R"({"metadata":{"uid":"u","namespace":"n","name":"p"},"status":{"phase":"Failed"}})", true,
       true, false},
      {"pending without spec", R"({"metadata":{"uid":"u","namespace":"n","name":"p"}})", true,
       false, false},
      {"null deletionTimestamp",
       R"({"metadata":{"uid":"u","namespace":"n","name":"p","deletionTimestamp":null}})", true,
       false, false},
      {"no uid", R"({"metadata":{"namespace":"n","name":"p"}})", false, false, false},
      {"no metadata", R"({"spec":{}})", false, false, false},
      {"not an object", R"([1,2])", false, false, false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    auto pod = ParsePod(nlohmann::json::parse(c.json));
    ASSERT_EQ(pod.ok(), c.ok);
    if (!c.ok) {
      EXPECT_EQ(pod.status().code(), ErrorCode::kDecode);
      continue;
    }
    EXPECT_EQ(pod->Finished(), c.finished);
    EXPECT_EQ(pod->deleting, c.deleting);
  }
}

}  // namespace
}  // namespace kvgpu::kube
