// The list+watch loop (kube/list_watch.h) on its own, against a scripted transport: the objects
// handed on as the API server sent them, the watch request it makes, and what it does with a list
// it cannot use, a watch the server ends, an ERROR event and an event type it does not know.
// How it resumes, relists and backs off as the pod watcher sees it: pod_watcher_test.cpp.
#include "kube/list_watch.h"

#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "fakes/common/eventually.h"
#include "tests/kube/scripted_transport.h"

namespace kvgpu::kube {
namespace {

using kvgpu::testing::Eventually;
using testing::ScriptedTransport;
using testing::StreamScript;

nlohmann::json Node(const std::string& name, const std::string& version) {
  return {{"kind", "Node"},
          {"metadata", {{"name", name}, {"resourceVersion", version}}},
          {"status", {{"capacity", {{"cpu", "4"}}}}}};
}

std::string Event(const std::string& type, const nlohmann::json& object) {
  return nlohmann::json{{"type", type}, {"object", object}}.dump();
}

Result<nlohmann::json> ListOf(const std::string& version, const nlohmann::json& items) {
  return nlohmann::json{
      {"kind", "NodeList"}, {"metadata", {{"resourceVersion", version}}}, {"items", items}};
}

// What the callbacks were told, in order.
class Recorder {
 public:
  ListWatchCallbacks Callbacks() {
    return {[this](const std::vector<nlohmann::json>& objects) {
              std::lock_guard lock(mutex_);
              synced_.push_back(objects);
              log_.push_back("SYNC " + std::to_string(objects.size()));
            },
            [this](WatchEventType type, const nlohmann::json& object) {
              std::lock_guard lock(mutex_);
              events_.push_back(object);
              log_.push_back(std::string(WatchEventTypeName(type)) + " " +
                             object["metadata"]["name"].get<std::string>());
            },
            [this](bool following, const std::string& reason) {
              std::lock_guard lock(mutex_);
              log_.push_back(following ? "UP" : "DOWN " + reason);
            }};
  }
  std::vector<std::string> log() const {
    std::lock_guard lock(mutex_);
    return log_;
  }
  std::vector<std::vector<nlohmann::json>> synced() const {
    std::lock_guard lock(mutex_);
    return synced_;
  }
  std::vector<nlohmann::json> events() const {
    std::lock_guard lock(mutex_);
    return events_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> log_;
  std::vector<std::vector<nlohmann::json>> synced_;
  std::vector<nlohmann::json> events_;
};

ListWatchOptions FastOptions(const std::string& path) {
  ListWatchOptions options;
  options.path = path;
  options.what = "nodes";
  options.initial_backoff = std::chrono::milliseconds(1);
  options.max_backoff = std::chrono::milliseconds(5);
  options.watch_timeout = std::chrono::seconds(42);
  options.seed = 1;
  return options;
}

bool StartsWith(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0;
}

TEST(ListWatcherTest, ObjectsAreHandedOnAsTheApiServerSentThem) {
  ScriptedTransport transport;
  const nlohmann::json a = Node("a", "5");
  transport.lists.push_back(ListOf("7", nlohmann::json::array({a, "not an object", 42})));
  const nlohmann::json b = Node("b", "8");
  transport.streams.push_back({Status(), {Event("ADDED", b)}});
  Recorder recorder;
  ListWatcher watcher(transport, FastOptions("/api/v1/nodes"));
  watcher.Start(recorder.Callbacks());
  ASSERT_TRUE(Eventually([&] { return recorder.events().size() == 1; }));
  watcher.Stop();
  ASSERT_EQ(recorder.synced().size(), 1u);
  EXPECT_EQ(recorder.synced()[0], std::vector<nlohmann::json>{a})
      << "items that are not objects are skipped";
  EXPECT_EQ(recorder.events()[0], b);
  EXPECT_EQ(watcher.resource_version(), "8");
}

TEST(ListWatcherTest, TheWatchAsksFromTheListsVersionWithBookmarksAndATimeout) {
  for (const char* asked : {"/api/v1/nodes", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn"}) {
    const std::string path = asked;
    SCOPED_TRACE(path);
    ScriptedTransport transport;
    transport.lists.push_back(ListOf("7", nlohmann::json::array()));
    Recorder recorder;
    ListWatcher watcher(transport, FastOptions(path));
    watcher.Start(recorder.Callbacks());
    ASSERT_TRUE(Eventually([&] { return transport.paths().size() >= 2; }));
    watcher.Stop();
    const std::string separator = path.find('?') == std::string::npos ? "?" : "&";
    EXPECT_EQ(transport.paths()[0], path);
    EXPECT_EQ(
        transport.paths()[1],
        path + separator + "watch=1&resourceVersion=7&allowWatchBookmarks=true&timeoutSeconds=42");
  }
}

TEST(ListWatcherTest, AListWithoutAVersionIsNotTakenAndTheListIsTriedAgain) {
  ScriptedTransport transport;
  transport.lists.push_back(
      nlohmann::json{{"kind", "NodeList"}, {"items", nlohmann::json::array({Node("a", "1")})}});
  transport.lists.push_back(ListOf("9", nlohmann::json::array({Node("b", "2")})));
  Recorder recorder;
  ListWatcher watcher(transport, FastOptions("/api/v1/nodes"));
  watcher.Start(recorder.Callbacks());
  ASSERT_TRUE(Eventually([&] { return transport.paths().size() >= 3; }));
  watcher.Stop();
  EXPECT_EQ(transport.paths()[1], "/api/v1/nodes") << "listed again, not watched";
  EXPECT_TRUE(StartsWith(transport.paths()[2], "/api/v1/nodes?watch=1&resourceVersion=9&"));
  EXPECT_EQ(watcher.lists(), 1) << "only a usable list counts";
  ASSERT_EQ(recorder.synced().size(), 1u);
  EXPECT_EQ(recorder.synced()[0], std::vector<nlohmann::json>{Node("b", "2")});
}

TEST(ListWatcherTest, AWatchTheServerEndsIsWatchedAgainWithoutAList) {
  ScriptedTransport transport;
  transport.lists.push_back(ListOf("7", nlohmann::json::array()));
  transport.streams.push_back({Status(), {Event("MODIFIED", Node("a", "8"))}});
  transport.streams.push_back({Status(), {}});
  Recorder recorder;
  ListWatcher watcher(transport, FastOptions("/api/v1/nodes"));
  watcher.Start(recorder.Callbacks());
  ASSERT_TRUE(Eventually([&] { return transport.paths().size() >= 4; }));
  watcher.Stop();
  EXPECT_EQ(watcher.lists(), 1);
  EXPECT_TRUE(StartsWith(transport.paths()[2], "/api/v1/nodes?watch=1&resourceVersion=8&"));
  EXPECT_TRUE(StartsWith(transport.paths()[3], "/api/v1/nodes?watch=1&resourceVersion=8&"));
  EXPECT_EQ(recorder.log(), (std::vector<std::string>{"SYNC 0", "UP", "MODIFIED a"}))
      << "a watch ended as asked (timeoutSeconds) loses nothing";
}

TEST(ListWatcherTest, AnErrorEventOtherThanGoneIsALossAndTheWatchResumesFromItsVersion) {
  ScriptedTransport transport;
  transport.lists.push_back(ListOf("7", nlohmann::json::array()));
  transport.streams.push_back(
      {Status(),
       {Event("ADDED", Node("a", "8")),
        R"({"type":"ERROR","object":{"kind":"Status","code":500,"reason":"InternalError"}})",
        Event("ADDED", Node("never", "9"))}});
  Recorder recorder;
  ListWatcher watcher(transport, FastOptions("/api/v1/nodes"));
  watcher.Start(recorder.Callbacks());
  ASSERT_TRUE(Eventually([&] { return transport.paths().size() >= 3; }));
  ASSERT_TRUE(Eventually([&] { return recorder.log().size() >= 5; }));
  watcher.Stop();
  EXPECT_EQ(watcher.lists(), 1) << "not a relist: the version is not too old";
  EXPECT_TRUE(StartsWith(transport.paths()[2], "/api/v1/nodes?watch=1&resourceVersion=8&"));
  const std::vector<std::string> log = recorder.log();
  ASSERT_GE(log.size(), 5u);
  EXPECT_EQ(log[0], "SYNC 0");
  EXPECT_EQ(log[1], "UP");
  EXPECT_EQ(log[2], "ADDED a");
  EXPECT_TRUE(StartsWith(log[3], "DOWN watch ERROR event: ")) << log[3];
  EXPECT_EQ(log[4], "UP") << "following again once the next watch opens";
  for (const nlohmann::json& event : recorder.events()) {
    EXPECT_NE(event["metadata"]["name"], "never") << "nothing after the ERROR event is applied";
  }
}

TEST(ListWatcherTest, AnEventOfAnUnknownTypeIsSkippedAndTheWatchGoesOn) {
  ScriptedTransport transport;
  transport.lists.push_back(ListOf("7", nlohmann::json::array()));
  transport.streams.push_back(
      {Status(), {Event("RESIZED", Node("odd", "8")), Event("DELETED", Node("a", "9"))}});
  Recorder recorder;
  ListWatcher watcher(transport, FastOptions("/api/v1/nodes"));
  watcher.Start(recorder.Callbacks());
  ASSERT_TRUE(Eventually([&] { return recorder.events().size() == 1; }));
  watcher.Stop();
  EXPECT_EQ(recorder.log(), (std::vector<std::string>{"SYNC 0", "UP", "DELETED a"}));
  EXPECT_EQ(watcher.resource_version(), "9");
}

TEST(ListWatcherTest, StartedAgainAfterAStopItListsAfresh) {
  ScriptedTransport transport;
  transport.lists.push_back(ListOf("7", nlohmann::json::array({Node("a", "1")})));
  transport.lists.push_back(ListOf("20", nlohmann::json::array({Node("b", "2")})));
  Recorder recorder;
  ListWatcher watcher(transport, FastOptions("/api/v1/nodes"));
  watcher.Start(recorder.Callbacks());
  ASSERT_TRUE(Eventually([&] { return watcher.watches() >= 1; }));
  watcher.Stop();
  watcher.Start(recorder.Callbacks());
  ASSERT_TRUE(Eventually([&] { return watcher.watches() >= 2; }));
  watcher.Stop();
  EXPECT_EQ(watcher.lists(), 2);
  ASSERT_EQ(recorder.synced().size(), 2u);
  EXPECT_EQ(recorder.synced()[1], std::vector<nlohmann::json>{Node("b", "2")});
  EXPECT_EQ(watcher.resource_version(), "20");
}

TEST(WatchEventTypeNameTest, NamesEachTypeAsTheApiServerSpellsIt) {
  EXPECT_STREQ(WatchEventTypeName(WatchEventType::kAdded), "ADDED");
  EXPECT_STREQ(WatchEventTypeName(WatchEventType::kModified), "MODIFIED");
  EXPECT_STREQ(WatchEventTypeName(WatchEventType::kDeleted), "DELETED");
}

}  // namespace
}  // namespace kvgpu::kube
