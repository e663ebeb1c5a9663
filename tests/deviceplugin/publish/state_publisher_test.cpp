// Publishing the node's vGPU state on its Node: a merge patch of the one annotation, written when
// the content changes or the heartbeat is due and not otherwise, a generation that rises with each
// write, and an API server that refuses only delaying the write (retried, never lost).
#include "deviceplugin/publish/state_publisher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

namespace kvgpu::deviceplugin {
namespace {

using namespace std::chrono_literals;

// The API server as far as the publisher sees it: PATCH on nodes, recorded; scripted failures.
class ScriptedApi : public kube::ApiTransport {
 public:
  Result<nlohmann::json> Get(const std::string&, kube::Canceller*) override {
    return Status::Error(ErrorCode::kInvalid, "not used");
  }
  Result<nlohmann::json> Post(const std::string&, const nlohmann::json&,
                              kube::Canceller*) override {
    return Status::Error(ErrorCode::kInvalid, "not used");
  }
  Result<nlohmann::json> Patch(const std::string& path, const nlohmann::json& body,
                               const std::string& content_type, kube::Canceller*) override {
    std::lock_guard lock(mutex);
    if (failures > 0) {
      --failures;
      return Status::Remote(ErrorCode::kHttp, "etcdserver: request timed out", 503);
    }
    patches.push_back({path, body, content_type});
    return nlohmann::json::object();
  }
  Status Stream(const std::string&, std::chrono::milliseconds, const std::function<void()>&,
                const std::function<bool(std::string_view)>&, kube::Canceller*) override {
    return Status::Error(ErrorCode::kInvalid, "not used");
  }

  struct Sent {
    std::string path;
    nlohmann::json body;
    std::string content_type;
  };
  size_t Count() {
    std::lock_guard lock(mutex);
    return patches.size();
  }
  scheduling::NodeVgpuState Last() {
    std::lock_guard lock(mutex);
    const std::string text =
        patches.back().body["metadata"]["annotations"][scheduling::kNodeStateAnnotation];
    return *scheduling::ParseNodeState(text);
  }

  std::mutex mutex;
  std::vector<Sent> patches;
  int failures = 0;
};

scheduling::NodeVgpuState StateWithFree(uint32_t free) {
  scheduling::NodeVgpuState state;
  scheduling::GpuSlots gpu;
  gpu.id = "0000:3b:00.0";
  gpu.resources["tencent.com/vgpu-222"] = {"nvidia-222", 16 - free, free};
  state.gpus = {gpu};
  return state;
}

class StatePublisherTest : public ::testing::Test {
 protected:
  StatePublisher Publisher(std::chrono::milliseconds heartbeat = 1h) {
    return StatePublisher(
        api_, [this] { return StateWithFree(free_.load()); },
        StatePublisherOptions{
            .node_name = "gpu-node-1", .min_interval = 10ms, .heartbeat = heartbeat});
  }

  ScriptedApi api_;
  std::atomic<uint32_t> free_{16};
};

TEST_F(StatePublisherTest, TheFirstLookWritesTheAnnotationAsAMergePatchOnTheNode) {
  StatePublisher publisher = Publisher();
  Result<bool> wrote = publisher.PublishIfDue();
  ASSERT_TRUE(wrote.ok()) << wrote.status().ToString();
  EXPECT_TRUE(*wrote);
  ASSERT_EQ(api_.Count(), 1u);
  EXPECT_EQ(api_.patches[0].path, "/api/v1/nodes/gpu-node-1");
  EXPECT_EQ(api_.patches[0].content_type, "application/merge-patch+json");
  EXPECT_EQ(api_.patches[0].body.size(), 1u) << "only metadata.annotations is touched";
  EXPECT_EQ(api_.patches[0].body["metadata"].size(), 1u);
  scheduling::NodeVgpuState sent = api_.Last();
  EXPECT_EQ(sent.node, "gpu-node-1");
  EXPECT_EQ(sent.generation, 1u);
  EXPECT_GT(sent.published_unix_ms, 0);
  EXPECT_TRUE(sent.SameContent([] {
    scheduling::NodeVgpuState s = StateWithFree(16);
    s.node = "gpu-node-1";
    return s;
  }()));
}

TEST_F(StatePublisherTest, NothingIsWrittenUntilTheContentChangesThenTheGenerationRises) {
  StatePublisher publisher = Publisher();
  ASSERT_TRUE(*publisher.PublishIfDue());
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(*publisher.PublishIfDue());
  EXPECT_EQ(api_.Count(), 1u);
  free_ = 15;
  EXPECT_TRUE(*publisher.PublishIfDue());
  EXPECT_EQ(api_.Last().generation, 2u);
  EXPECT_EQ(api_.Last().gpus[0].resources.at("tencent.com/vgpu-222").free, 15u);
}

TEST_F(StatePublisherTest, TheSameContentIsWrittenAgainOnceTheHeartbeatIsDue) {
  StatePublisher publisher = Publisher(50ms);
  ASSERT_TRUE(*publisher.PublishIfDue());
  EXPECT_FALSE(*publisher.PublishIfDue()) << "well inside the heartbeat";
  std::this_thread::sleep_for(60ms);
  EXPECT_TRUE(*publisher.PublishIfDue());
  EXPECT_EQ(api_.Last().generation, 2u);
}

TEST_F(StatePublisherTest, ARefusedWriteIsTriedAgainAndNotCountedAsPublished) {
  StatePublisher publisher = Publisher();
  api_.failures = 1;
  Result<bool> refused = publisher.PublishIfDue();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(publisher.generation(), 0u);
  EXPECT_TRUE(*publisher.PublishIfDue()) << "the unchanged state is still due";
  EXPECT_EQ(api_.Last().generation, 1u);
}

TEST_F(StatePublisherTest, ItsThreadFollowsChangesAndOutlastsAnApiServerThatFails) {
  StatePublisher publisher = Publisher();
  api_.failures = 3;
  publisher.Start();
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (api_.Count() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_EQ(api_.Count(), 1u) << "published once the API server takes it";
  free_ = 3;
  while (api_.Last().gpus[0].resources.at("tencent.com/vgpu-222").free != 3 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(api_.Last().gpus[0].resources.at("tencent.com/vgpu-222").free, 3u);
  publisher.Stop();
  const size_t writes = api_.Count();
  free_ = 1;
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(api_.Count(), writes) << "nothing after Stop";
}

}  // namespace
}  // namespace kvgpu::deviceplugin
