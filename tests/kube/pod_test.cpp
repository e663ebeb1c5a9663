// Decoding pods, building Events and the reconnect backoff: the pure parts of the client.
#include "kube/pod.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "kube/events.h"
#include "kube/pod_watcher.h"

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

TEST(BuildEventTest, CoreV1EventAboutThePod) {
  const auto when = std::chrono::system_clock::time_point(std::chrono::seconds(1700000000));
  const auto event =
      BuildEvent({"ml", "train", "u1"}, EventType::kWarning, "VgpuCreateFailed",
                 "no room on 0000:3b:00.0", "kata-vgpu-device-plugin", "node-a", when);
  EXPECT_EQ(event["apiVersion"], "v1");
  EXPECT_EQ(event["kind"], "Event");
  EXPECT_EQ(event["metadata"]["namespace"], "ml");
  EXPECT_EQ(event["metadata"]["name"].get<std::string>().rfind("train.", 0), 0u);
  EXPECT_EQ(event["involvedObject"], nlohmann::json({{"apiVersion", "v1"},
                                                     {"kind", "Pod"},
                                                     {"namespace", "ml"},
                                                     {"name", "train"},
                                                     {"uid", "u1"}}));
  EXPECT_EQ(event["type"], "Warning");
  EXPECT_EQ(event["reason"], "VgpuCreateFailed");
  EXPECT_EQ(event["source"]["host"], "node-a");
  EXPECT_EQ(event["firstTimestamp"], "2023-11-14T22:13:20Z");
  EXPECT_EQ(event["count"], 1);
}

TEST(BuildEventTest, ANodeEventLivesInDefaultAndNamesTheNodeAsKubeletDoes) {
  const auto when = std::chrono::system_clock::time_point(std::chrono::seconds(1700000000));
  const auto event =
      BuildEvent(ObjectRef::Node("gpu-7"), EventType::kWarning, "NodeNotReadyForVgpu",
                 "kvm missing", "kata-vgpu-device-plugin", "gpu-7", when);
  EXPECT_EQ(event["metadata"]["namespace"], "default");
  EXPECT_EQ(event["metadata"]["name"].get<std::string>().rfind("gpu-7.", 0), 0u);
  // Cluster-scoped: no namespace in the reference; kubelet uses the node name as its UID.
  EXPECT_EQ(event["involvedObject"],
            nlohmann::json(
                {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", "gpu-7"}, {"uid", "gpu-7"}}));
}

}  // namespace
}  // namespace kvgpu::kube

namespace kvgpu::kube {
namespace {

// Records what it is given; can be made slow or failing.
class SlowRecorder : public EventRecorder {
 public:
  Status Record(const PodRef& pod, EventType, const std::string& reason,
                const std::string&) override {
    std::unique_lock lock(mutex_);
    ++entered_;
    released_.notify_all();
    released_.wait(lock, [this] { return open_; });
    seen_.push_back(pod.name + ":" + reason);
    return fail_ ? Status::Error(ErrorCode::kTransport, "down") : Status();
  }
  void Open() {
    std::lock_guard lock(mutex_);
    open_ = true;
    released_.notify_all();
  }
  void Fail() {
    std::lock_guard lock(mutex_);
    fail_ = true;
  }
  void WaitEntered(int count) {
    std::unique_lock lock(mutex_);
    released_.wait(lock, [&] { return entered_ >= count; });
  }
  std::vector<std::string> seen() {
    std::lock_guard lock(mutex_);
    return seen_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable released_;
  bool open_ = false;
  bool fail_ = false;
  int entered_ = 0;
  std::vector<std::string> seen_;
};

TEST(AsyncEventRecorderTest, NeverBlocksTheCallerAndDropsTheOldestWhenFull) {
  SlowRecorder inner;
  AsyncEventRecorder recorder(inner, 2);
  // The first event is taken at once and blocks in the inner recorder; the queue then holds two.
  EXPECT_TRUE(recorder.Record({"ns", "a", "u"}, EventType::kNormal, "VgpuCreated", "").ok());
  inner.WaitEntered(1);
  for (const char* name : {"b", "c", "d"}) {
    EXPECT_TRUE(recorder.Record({"ns", name, "u"}, EventType::kNormal, "VgpuCreated", "").ok());
  }
  inner.Open();
  recorder.Flush();
  EXPECT_EQ(inner.seen(),
            (std::vector<std::string>{"a:VgpuCreated", "c:VgpuCreated", "d:VgpuCreated"}));
  EXPECT_EQ(recorder.dropped(), 1u) << "the oldest waiting event gave way";
}

TEST(AsyncEventRecorderTest, FailuresAreCounted) {
  SlowRecorder inner;
  inner.Open();
  inner.Fail();
  AsyncEventRecorder recorder(inner);
  recorder.Record({"ns", "p", "u"}, EventType::kWarning, "VgpuRemoveFailed", "EBUSY");
  recorder.Flush();
  EXPECT_EQ(recorder.failed(), 1u);
}

}  // namespace
}  // namespace kvgpu::kube
