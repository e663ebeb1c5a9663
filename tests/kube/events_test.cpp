// Events (kube/events.h): the core/v1 Event built about a pod or a node, and the asynchronous
// recorder that never blocks its caller. Posting one to the API server: api_client_test.cpp.
#include "kube/events.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

namespace kvgpu::kube {
namespace {

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
