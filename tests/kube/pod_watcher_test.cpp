// The list+watch loop's decisions against a scripted transport, without HTTP: where it resumes,
// when it relists, how it treats each kind of failure.
#include "kube/pod_watcher.h"

#include <gtest/gtest.h>

#include "tests/kube/scripted_transport.h"
#include "tests/kube/watch_recorder.h"

namespace kvgpu::kube {
namespace {

using testing::ScriptedTransport;
using testing::StreamScript;
using testing::WatchRecorder;

std::string PodJson(const std::string& name, const std::string& version) {
  return nlohmann::json{
      {"metadata",
       {{"uid", "uid-" + name}, {"namespace", "ns"}, {"name", name}, {"resourceVersion", version}}},
      {"spec", {{"nodeName", "node-a"}}}}
      .dump();
}

std::string EventLine(const std::string& type, const std::string& name,
                      const std::string& version) {
  return R"({"type":")" + type + R"(","object":)" + PodJson(name, version) + "}";
}

Result<nlohmann::json> List(const std::string& version, std::vector<std::string> names) {
  nlohmann::json items = nlohmann::json::array();
  for (const auto& name : names) items.push_back(nlohmann::json::parse(PodJson(name, "1")));
  return nlohmann::json{{"metadata", {{"resourceVersion", version}}}, {"items", items}};
}

PodWatchOptions FastOptions() {
  PodWatchOptions options;
  options.node_name = "node-a";
  options.watch.initial_backoff = std::chrono::milliseconds(1);
  options.watch.max_backoff = std::chrono::milliseconds(5);
  options.watch.seed = 1;
  return options;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(PodWatcherTest, ListThenWatchFromItsVersionWithBookmarks) {
  ScriptedTransport transport;
  transport.lists.push_back(List("10", {"a", "b"}));
  transport.streams.push_back(
      {Status(), {EventLine("ADDED", "c", "11"), EventLine("DELETED", "a", "12")}});
  WatchRecorder recorder;
  ApiPodWatcher watcher(transport, FastOptions());
  watcher.Start(recorder.Callbacks());
  ASSERT_TRUE(recorder.WaitFor([&] { return transport.paths().size() >= 3; }));
  watcher.Stop();
  const auto paths = transport.paths();
  EXPECT_EQ(paths[0], "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a");
  EXPECT_TRUE(Contains(paths[1], "watch=1&resourceVersion=10&allowWatchBookmarks=true"));
  EXPECT_TRUE(Contains(paths[2], "resourceVersion=12"))
      << "the clean end resumes from the last event";
  EXPECT_EQ(recorder.log(),
            (std::vector<std::string>{"SYNC 2", "UP", "ADDED ns/c", "DELETED ns/a"}));
  EXPECT_EQ(watcher.lists(), 1);
}

TEST(PodWatcherTest, BookmarkMovesTheResumeVersion) {
  ScriptedTransport transport;
  transport.lists.push_back(List("10", {}));
  transport.streams.push_back(
      {Status::Error(ErrorCode::kTransport, "connection reset"),
       {R"({"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"55"}}})"}});
  WatchRecorder recorder;
  ApiPodWatcher watcher(transport, FastOptions());
  watcher.Start(recorder.Callbacks());
  ASSERT_TRUE(recorder.WaitFor([&] { return transport.paths().size() >= 3; }));
  watcher.Stop();
  EXPECT_TRUE(Contains(transport.paths()[2], "resourceVersion=55"));
  EXPECT_EQ(watcher.lists(), 1) << "a dropped connection resumes, it does not relist";
}

TEST(PodWatcherTest, GoneInEitherFormRelists) {
  struct Case {
    std::string description;
    StreamScript script;
  };
  const std::vector<Case> cases = {
      {"ERROR event with code 410",
       {Status(),
        {R"json({"type":"ERROR","object":{"kind":"Status","status":"Failure","reason":"Expired","code":410,"message":"too old resource version: 10 (20)"}})json"}}},
      {"HTTP 410", {Status::Remote(ErrorCode::kExpired, "HTTP 410", 410), {}, false}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    ScriptedTransport transport;
    transport.lists.push_back(List("10", {"a"}));
    transport.lists.push_back(List("20", {"b"}));
    transport.streams.push_back(c.script);
    WatchRecorder recorder;
    ApiPodWatcher watcher(transport, FastOptions());
    watcher.Start(recorder.Callbacks());
    ASSERT_TRUE(recorder.WaitFor([&] { return recorder.syncs() == 2; }));
    ASSERT_TRUE(recorder.WaitFor([&] { return transport.paths().size() >= 4; }));
    watcher.Stop();
    EXPECT_TRUE(Contains(transport.paths()[3], "resourceVersion=20"));
    EXPECT_FALSE(recorder.Has("ns/a")) << "the relist's view replaces the old one";
    EXPECT_TRUE(recorder.Has("ns/b"));
  }
}

TEST(PodWatcherTest, FailuresBackOffAndReportTheLoss) {
  ScriptedTransport transport;
  transport.lists.push_back(Status::Error(ErrorCode::kTransport, "connection refused"));
  transport.lists.push_back(Status::Remote(ErrorCode::kHttp, "HTTP 503", 503));
  transport.lists.push_back(List("10", {}));
  transport.streams.push_back({Status::Remote(ErrorCode::kHttp, "HTTP 500", 500), {}, false});
  transport.streams.push_back({Status::Error(ErrorCode::kTransport, "reset"), {}});
  WatchRecorder recorder;
  ApiPodWatcher watcher(transport, FastOptions());
  watcher.Start(recorder.Callbacks());
  ASSERT_TRUE(recorder.WaitFor([&] { return transport.paths().size() >= 6; }));
  watcher.Stop();
  EXPECT_EQ(recorder.log(), (std::vector<std::string>{"SYNC 0", "UP", "DOWN", "UP", "DOWN", "UP"}))
      << "never having followed, failed lists report nothing new";
  EXPECT_TRUE(Contains(transport.paths()[5], "resourceVersion=10"));
}

TEST(PodWatcherTest, GarbageLineResumesFromTheLastGoodVersion) {
  ScriptedTransport transport;
  transport.lists.push_back(List("10", {}));
  transport.streams.push_back({Status(), {EventLine("ADDED", "c", "11"), "{not json"}});
  WatchRecorder recorder;
  ApiPodWatcher watcher(transport, FastOptions());
  watcher.Start(recorder.Callbacks());
  ASSERT_TRUE(recorder.WaitFor([&] { return transport.paths().size() >= 3; }));
  watcher.Stop();
  EXPECT_TRUE(Contains(transport.paths()[2], "resourceVersion=11"));
  EXPECT_TRUE(recorder.Has("ns/c"));
}

TEST(PodWatcherTest, StopEndsABlockedWatchPromptly) {
  ScriptedTransport transport;
  transport.lists.push_back(List("10", {}));
  WatchRecorder recorder;
  ApiPodWatcher watcher(transport, FastOptions());
  watcher.Start(recorder.Callbacks());
  ASSERT_TRUE(recorder.WaitFor([&] { return transport.paths().size() >= 2; }));
  const auto start = std::chrono::steady_clock::now();
  watcher.Stop();
  // Not broken by Stop, the scripted watch blocks for good: the bound only has to lie far above
  // the milliseconds a prompt Stop takes.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace kvgpu::kube
