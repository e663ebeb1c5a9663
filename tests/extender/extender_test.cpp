// The verbs over JSON and HTTP: filter keeps the nodes that can take the pod and fails the others
// with the reason (unresolvable when preemption cannot help), prioritize scores every node it is
// given, bind posts a core/v1 Binding and counts the pod at once; bad input gets an error, never
// a crash.
#include "extender/extender.h"

#include <gtest/gtest.h>

#include "tests/extender/node_states.h"

namespace kvgpu::extender {
namespace {

using namespace kvgpu::extender::testing;  // NOLINT(google-build-using-namespace)
using nlohmann::json;

json PodAsking(const std::string& name, const std::string& resource, int count) {
  return {
      {"metadata", {{"name", name}, {"namespace", "ml"}, {"uid", "uid-" + name}}},
      {"spec",
       {{"containers",
         {{{"name", "main"}, {"resources", {{"limits", {{resource, std::to_string(count)}}}}}}}}}}};
}

json WholeNode(const std::string& name, const scheduling::NodeVgpuState& state) {
  return {{"metadata",
           {{"name", name}, {"annotations", {{scheduling::kNodeStateAnnotation, Text(state)}}}}}};
}

class BindingApi : public kube::ApiTransport {
 public:
  Result<json> Get(const std::string&, kube::Canceller*) override { return json(); }
  Result<json> Post(const std::string& path, const json& body) override {
    posts.emplace_back(path, body);
    if (refuse) return Status::Remote(ErrorCode::kHttp, "pods \"x\" not found", 404);
    return json::object();
  }
  Result<json> Patch(const std::string&, const json&, const std::string&) override {
    return json();
  }
  Status Stream(const std::string&, std::chrono::milliseconds, const std::function<void()>&,
                const std::function<bool(std::string_view)>&, kube::Canceller*) override {
    return Status::Ok();
  }
  std::vector<std::pair<std::string, json>> posts;
  bool refuse = false;
};

class ExtenderTest : public ::testing::Test {
 protected:
  ExtenderTest() : extender_(view_, ExtenderOptions{}, &api_, [] { return kNow; }) {}

  ClusterView view_{"tencent.com/vgpu-"};
  BindingApi api_;
  Extender extender_;
};

TEST_F(ExtenderTest, FilterKeepsNodesThatFitAndSaysWhyTheOthersDoNot) {
  json args = {{"Pod", PodAsking("train", k222, 4)},
               {"Nodes",
                {{"items",
                  {WholeNode("free", NodeOf({T4("a")})),
                   WholeNode("busy", NodeOf({T4("a", "223", 1)})),
                   WholeNode("full", NodeOf({T4("a", "222", 14)})),
                   {{"metadata", {{"name", "bare"}}}}}}}},
               {"NodeNames", nullptr}};
  json result = extender_.Filter(args);
  EXPECT_EQ(result["Error"], "");
  ASSERT_EQ(result["Nodes"]["items"].size(), 1u);
  EXPECT_EQ(result["Nodes"]["items"][0]["metadata"]["name"], "free");
  EXPECT_TRUE(result["FailedNodes"].contains("full"));
  EXPECT_TRUE(result["FailedAndUnresolvableNodes"].contains("busy"))
      << "no GPU there offers 222 now";
  EXPECT_NE(result["FailedAndUnresolvableNodes"]["bare"].get<std::string>().find("no vGPU state"),
            std::string::npos);
}

TEST_F(ExtenderTest, WithNodeNamesTheStateComesFromTheWatchedNodes) {
  view_.SyncNodes(
      {WholeNode("n1", NodeOf({T4("a")})), WholeNode("n2", NodeOf({T4("a", "223", 8)}))});
  json args = {
      {"Pod", PodAsking("infer", k223, 1)}, {"Nodes", nullptr}, {"NodeNames", {"n1", "n2"}}};
  json result = extender_.Filter(args);
  EXPECT_EQ(result["NodeNames"], json::array({"n1"}));
  EXPECT_TRUE(result["Nodes"].is_null());
  EXPECT_TRUE(result["FailedNodes"].contains("n2"));
}

TEST_F(ExtenderTest, APodWithoutVgpusPassesEveryNode) {
  json args = {{"Pod", PodAsking("web", "cpu", 1)}, {"NodeNames", {"n1", "n2"}}};
  EXPECT_EQ(extender_.Filter(args)["NodeNames"].size(), 2u);
}

TEST_F(ExtenderTest, PrioritizeScoresEveryNodeGivenZeroWhereItDoesNotFit) {
  json args = {{"Pod", PodAsking("train", k222, 1)},
               {"Nodes",
                {{"items",
                  {WholeNode("holds", NodeOf({T4("a", "222", 2), T4("b")})),
                   WholeNode("free", NodeOf({T4("a"), T4("b")})),
                   {{"metadata", {{"name", "bare"}}}}}}}}};
  json list = extender_.Prioritize(args);
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0]["Host"], "holds");
  EXPECT_GT(list[0]["Score"].get<int64_t>(), list[1]["Score"].get<int64_t>());
  EXPECT_EQ(list[2]["Score"], 0);
}

TEST_F(ExtenderTest, BindPostsABindingAndCountsThePodOnTheNodeAtOnce) {
  view_.SyncNodes({WholeNode("n1", NodeOf({T4("a")}))});
  json args = {{"Pod", PodAsking("train", k222, 16)}, {"NodeNames", {"n1"}}};
  ASSERT_EQ(extender_.Filter(args)["NodeNames"].size(), 1u);
  json bound = extender_.Bind(
      {{"PodName", "train"}, {"PodNamespace", "ml"}, {"PodUID", "uid-train"}, {"Node", "n1"}});
  EXPECT_EQ(bound["Error"], "");
  ASSERT_EQ(api_.posts.size(), 1u);
  EXPECT_EQ(api_.posts[0].first, "/api/v1/namespaces/ml/pods/train/binding");
  EXPECT_EQ(api_.posts[0].second["kind"], "Binding");
  EXPECT_EQ(api_.posts[0].second["target"],
            json({{"apiVersion", "v1"}, {"kind", "Node"}, {"name", "n1"}}));
  // The next pod sees n1's only GPU taken before any watch reports the binding.
  json next = {{"Pod", PodAsking("next", k222, 1)}, {"NodeNames", {"n1"}}};
  EXPECT_TRUE(extender_.Filter(next)["NodeNames"].empty());
}

TEST_F(ExtenderTest, ARefusedBindingIsReportedAndCountsNothing) {
  view_.SyncNodes({WholeNode("n1", NodeOf({T4("a")}))});
  json args = {{"Pod", PodAsking("train", k222, 16)}, {"NodeNames", {"n1"}}};
  extender_.Filter(args);
  api_.refuse = true;
  json bound = extender_.Bind(
      {{"PodName", "train"}, {"PodNamespace", "ml"}, {"PodUID", "uid-train"}, {"Node", "n1"}});
  EXPECT_NE(bound["Error"].get<std::string>().find("not found"), std::string::npos);
  json next = {{"Pod", PodAsking("next", k222, 1)}, {"NodeNames", {"n1"}}};
  EXPECT_EQ(extender_.Filter(next)["NodeNames"].size(), 1u);
}

TEST_F(ExtenderTest, OverHttpBadInputGetsAnErrorAndTheProbesAnswer) {
  auto post = [&](const std::string& path, const std::string& body) {
    return extender_.Handle({"POST", path, "application/json", body, false});
  };
  EXPECT_EQ(post("/filter", "{not json").status, 400);
  https::HttpResponse refused = post("/filter", "{}");
  EXPECT_EQ(refused.status, 200);
  EXPECT_NE(json::parse(refused.body)["Error"].get<std::string>().find("ExtenderArgs"),
            std::string::npos);
  EXPECT_EQ(json::parse(post("/prioritize", "[]").body), json::array());
  EXPECT_EQ(post("/nothing", "{}").status, 404);
  EXPECT_EQ(extender_.Handle({"GET", "/filter", "", "", false}).status, 405);
  EXPECT_EQ(extender_.Handle({"GET", "/healthz", "", "", false}).status, 200);
  EXPECT_EQ(extender_.Handle({"GET", "/readyz", "", "", false}).status, 503)
      << "not ready before the watches follow";
  view_.SetFollowing("nodes", true);
  view_.SetFollowing("pods", true);
  EXPECT_EQ(extender_.Handle({"GET", "/readyz", "", "", false}).status, 200);
}

}  // namespace
}  // namespace kvgpu::extender
