// The in-memory stand-ins other components' tests use instead of HTTP and gRPC: they must
// deliver what the real ones would, in the order the test asks for.
#include <gtest/gtest.h>

#include "fakes/apiserver/in_memory_kube.h"
#include "fakes/podresources/static_podresources.h"

namespace kvgpu::testing {
namespace {

kube::PodInfo Pod(const std::string& name) {
  kube::PodInfo pod;
  pod.uid = "uid-" + name;
  pod.namespace_name = "ns";
  pod.name = name;
  return pod;
}

TEST(InMemoryPodWatcherTest, DeliversSyncEventsAndConnectivityOnlyWhileStarted) {
  InMemoryPodWatcher watcher;
  std::vector<std::string> log;
  watcher.Sync({Pod("ignored")});
  watcher.Start(
      {[&](const std::vector<kube::PodInfo>& pods) {
         log.push_back("sync " + std::to_string(pods.size()));
       },
       [&](kube::PodEventType type, const kube::PodInfo& pod) {
         log.push_back(std::string(kube::PodEventTypeName(type)) + " " + pod.name);
       },
       [&](bool following, const std::string&) { log.push_back(following ? "up" : "down"); }});
  watcher.Sync({Pod("a"), Pod("b")});
  watcher.Emit(kube::PodEventType::kDeleted, Pod("a"));
  watcher.SetFollowing(false);
  watcher.Stop();
  watcher.Emit(kube::PodEventType::kAdded, Pod("late"));
  EXPECT_EQ(log, (std::vector<std::string>{"sync 2", "up", "DELETED a", "down"}));
}

TEST(RecordingEventRecorderTest, RecordsOrFailsLikeAnUnreachableServer) {
  RecordingEventRecorder recorder;
  EXPECT_TRUE(recorder.Record({"ns", "p", "u"}, kube::EventType::kNormal, "VgpuCreated", "").ok());
  recorder.SetFailing(true);
  EXPECT_EQ(recorder.Record({"ns", "p", "u"}, kube::EventType::kNormal, "VgpuRemoved", "").code(),
            ErrorCode::kTransport);
  EXPECT_EQ(recorder.reasons(), (std::vector<std::string>{"VgpuCreated"}));
}

TEST(StaticPodResourcesTest, AnswersFromTheSetPodsOrFailsWhenDown) {
  StaticPodResources source;
  source.SetPods({{"ns", "p", {{"main", {{"tencent.com/vgpu-492", {"d1"}}}}}}});
  auto pod = source.Get("ns", "p");
  ASSERT_TRUE(pod.ok());
  ASSERT_TRUE(pod.value().has_value());
  EXPECT_TRUE(pod.value()->Holds("tencent.com/vgpu-492", "d1"));
  EXPECT_FALSE(source.Get("ns", "q").value().has_value());
  source.SetDown(true);
  EXPECT_FALSE(source.List().ok());
  EXPECT_EQ(source.calls(), 3);
}

}  // namespace
}  // namespace kvgpu::testing
