// The pod watch end to end: HTTPS client, list+watch loop and the fake API server, through the
// faults a node sees: compaction, cut streams, an API server going down and up, slow answers.
#include <gtest/gtest.h>

#include "fakes/apiserver/fake_apiserver.h"
#include "kube/api_client.h"
#include "kube/pod_watcher.h"
#include "tests/kube/watch_recorder.h"

namespace kvgpu::kube {
namespace {

using kvgpu::testing::FakeApiServer;
using kvgpu::testing::MakePod;
using testing::WatchRecorder;

const std::map<std::string, std::string> kVgpu = {{"tencent.com/vgpu-492", "1"}};

class PodWatchIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start());
    Config config = server_.ClientConfig();
    ClientOptions client_options;
    client_options.request_timeout = std::chrono::seconds(2);
    auto client = ApiClient::Create(config, client_options);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::move(client.value());
    PodWatchOptions options;
    options.node_name = "node-a";
    options.watch.initial_backoff = std::chrono::milliseconds(20);
    options.watch.max_backoff = std::chrono::milliseconds(100);
    options.watch.seed = 3;
    watcher_ = std::make_unique<ApiPodWatcher>(*client_, options);
  }
  void TearDown() override {
    if (watcher_) watcher_->Stop();
  }

  void StartWatching() {
    watcher_->Start(recorder_.Callbacks());
    ASSERT_TRUE(recorder_.WaitFor([&] { return recorder_.syncs() >= 1; }));
    ASSERT_TRUE(server_.WaitFor([&] { return server_.open_watches() == 1; }));
  }

  FakeApiServer server_;
  std::unique_ptr<ApiClient> client_;
  std::unique_ptr<ApiPodWatcher> watcher_;
  WatchRecorder recorder_;
};

TEST_F(PodWatchIntegrationTest, FollowsOnlyThisNodesPodsThroughTheirLife) {
  server_.AddPod(MakePod("ml", "before", "node-a", kVgpu));
  server_.AddPod(MakePod("ml", "elsewhere", "node-b", kVgpu));
  StartWatching();
  EXPECT_EQ(recorder_.pods().size(), 1u);
  EXPECT_TRUE(recorder_.following());

  server_.AddPod(MakePod("ml", "unscheduled", "", kVgpu));
  server_.AddPod(MakePod("ml", "train", "node-a", kVgpu, "Pending"));
  server_.SetPhase("ml", "train", "Running");
  server_.MarkDeleting("ml", "train");
  ASSERT_TRUE(recorder_.WaitFor(
      [&] { return recorder_.Has("ml/train") && recorder_.pods().at("ml/train").deleting; }));
  EXPECT_EQ(recorder_.pods().at("ml/train").phase, "Running");
  EXPECT_TRUE(recorder_.pods().at("ml/train").Requests("tencent.com/vgpu-492"));

  // The scheduler binds a pod to this node: the node's watch sees it arrive.
  auto bound = MakePod("ml", "unscheduled", "node-a", kVgpu);
  server_.UpdatePod(bound);
  server_.DeletePod("ml", "train");
  server_.DeletePod("ml", "elsewhere");
  ASSERT_TRUE(recorder_.WaitFor([&] { return !recorder_.Has("ml/train"); }));
  EXPECT_TRUE(recorder_.Has("ml/unscheduled"));
  EXPECT_FALSE(recorder_.Has("ml/elsewhere"));
  EXPECT_EQ(recorder_.Count("ADDED ml/unscheduled"), 1);
  EXPECT_EQ(recorder_.Count("DELETED ml/elsewhere"), 0) << "other nodes' pods never show";
  EXPECT_EQ(server_.lists(), 1);
  const auto query = server_.watch_queries().at(0);
  EXPECT_NE(query.find("fieldSelector=spec.nodeName%3Dnode-a"), std::string::npos) << query;
  EXPECT_NE(query.find("allowWatchBookmarks=true"), std::string::npos) << query;
}

TEST_F(PodWatchIntegrationTest, CutStreamResumesFromTheBookmark) {
  StartWatching();
  server_.AddPod(MakePod("ml", "other-node", "node-b"));  // moves the version, not our stream
  server_.SendBookmarks();
  const std::string bookmark = std::to_string(server_.resource_version());
  ASSERT_TRUE(recorder_.WaitFor([&] { return watcher_->resource_version() == bookmark; }));
  server_.DropWatches();
  ASSERT_TRUE(
      server_.WaitFor([&] { return server_.watches() == 2 && server_.open_watches() == 1; }));
  EXPECT_NE(server_.watch_queries().at(1).find("resourceVersion=" + bookmark), std::string::npos);
  EXPECT_EQ(server_.lists(), 1) << "a cut stream is resumed, not relisted";
  server_.AddPod(MakePod("ml", "after", "node-a"));
  EXPECT_TRUE(recorder_.WaitFor([&] { return recorder_.Has("ml/after"); }));
}

TEST_F(PodWatchIntegrationTest, CompactionWhileCutMeansRelistAndTheMissedDeleteShows) {
  for (bool http_status : {false, true}) {
    SCOPED_TRACE(http_status ? "410 as HTTP status" : "410 as ERROR event");
    server_.SetGoneAsHttpStatus(http_status);
    server_.AddPod(MakePod("ml", "doomed", "node-a"));
    if (recorder_.syncs() == 0) StartWatching();
    ASSERT_TRUE(recorder_.WaitFor([&] { return recorder_.Has("ml/doomed"); }));
    const int lists = server_.lists();
    // The API server goes away; while it is, the pod goes and history is compacted past it.
    server_.Stop();
    server_.DeletePod("ml", "doomed");
    server_.AddPod(MakePod("ml", "newcomer", "node-a"));
    server_.Compact();
    ASSERT_TRUE(server_.Start());
    ASSERT_TRUE(recorder_.WaitFor([&] { return server_.lists() == lists + 1; }));
    ASSERT_TRUE(recorder_.WaitFor([&] { return recorder_.Has("ml/newcomer"); }));
    EXPECT_FALSE(recorder_.Has("ml/doomed")) << "the relist's full set drops the missed pod";
    ASSERT_TRUE(server_.WaitFor([&] { return server_.open_watches() == 1; }));
    server_.DeletePod("ml", "newcomer");
    ASSERT_TRUE(recorder_.WaitFor([&] { return !recorder_.Has("ml/newcomer"); }));
  }
}

TEST_F(PodWatchIntegrationTest, ApiServerDownAndBackIsReportedAndCaughtUp) {
  server_.AddPod(MakePod("ml", "a", "node-a"));
  StartWatching();
  server_.Stop();
  ASSERT_TRUE(recorder_.WaitFor([&] { return !recorder_.following(); }));
  // Let a few reconnects fail against the closed port.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_TRUE(server_.Start());
  server_.AddPod(MakePod("ml", "b", "node-a"));
  ASSERT_TRUE(recorder_.WaitFor([&] { return recorder_.Has("ml/b"); }));
  EXPECT_TRUE(recorder_.following());
  EXPECT_GE(recorder_.Count("DOWN"), 1);
}

TEST_F(PodWatchIntegrationTest, ServerErrorsAreRetried) {
  server_.FailRequests(503, 3);
  server_.AddPod(MakePod("ml", "a", "node-a"));
  watcher_->Start(recorder_.Callbacks());
  ASSERT_TRUE(recorder_.WaitFor([&] { return recorder_.Has("ml/a"); }));
  EXPECT_EQ(recorder_.syncs(), 1);
}

TEST_F(PodWatchIntegrationTest, CleanEndOfWatchIsRewatchedWithoutRelist) {
  StartWatching();
  server_.EndWatches();
  ASSERT_TRUE(
      server_.WaitFor([&] { return server_.watches() == 2 && server_.open_watches() == 1; }));
  EXPECT_EQ(server_.lists(), 1);
  EXPECT_EQ(recorder_.Count("DOWN"), 0);
}

TEST_F(PodWatchIntegrationTest, StopIsPromptEvenDuringASlowList) {
  // The list is answered after 60 s (or when the server stops); a prompt stop takes far less.
  server_.SetResponseDelay(std::chrono::seconds(60));
  watcher_->Start(recorder_.Callbacks());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto start = std::chrono::steady_clock::now();
  watcher_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(recorder_.syncs(), 0);
  server_.SetResponseDelay(std::chrono::milliseconds(0));
}

}  // namespace
}  // namespace kvgpu::kube
