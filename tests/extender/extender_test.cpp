// The verbs over JSON and HTTP: filter keeps the nodes that can take the pod and fails the others
// with the reason (unresolvable when preemption cannot help), prioritize scores every node it is
// given, bind binds only a pending vGPU pod that fits beside every bind recorded on the node,
// records its own there, posts a core/v1 Binding and counts the pod at once; bad input gets an
// error, never a crash.
#include "extender/extender.h"

#include <gtest/gtest.h>

#include <utility>

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

// The API server as the bind verb uses it: GET a pod and a Node, PATCH the Node (a
// resourceVersion in the patch is a precondition, as the API server treats it), POST a Binding.
class BindingApi : public kube::ApiTransport {
 public:
  Result<json> Get(const std::string& path, kube::Canceller*) override {
    if (auto it = objects.find(path); it != objects.end()) return it->second;
    return Status::Remote(ErrorCode::kHttp, "not found", 404);
  }
  Result<json> Post(const std::string& path, const json& body, kube::Canceller*) override {
    posts.emplace_back(path, body);
    if (refuse) return Status::Remote(ErrorCode::kHttp, "pods \"x\" not found", 404);
    return json::object();
  }
  Result<json> Patch(const std::string& path, const json& body, const std::string&,
                     kube::Canceller*) override {
    json& node = objects[path];
    if (before_patch) std::exchange(before_patch, nullptr)(node);
    json patch = body;
    if (patch["metadata"]["resourceVersion"] != node["metadata"]["resourceVersion"]) {
      ++conflicts;
      return Status::Remote(ErrorCode::kHttp, "the object has been modified", 409);
    }
    patch["metadata"].erase("resourceVersion");
    node.merge_patch(patch);
    node["metadata"]["resourceVersion"] = std::to_string(++version);
    ++patches;
    return node;
  }
  Status Stream(const std::string&, std::chrono::milliseconds, const std::function<void()>&,
                const std::function<bool(std::string_view)>&, kube::Canceller*) override {
    return Status::Ok();
  }
  void PutNode(const json& node) {
    json stored = node;
    stored["metadata"]["resourceVersion"] = std::to_string(++version);
    objects["/api/v1/nodes/" + node["metadata"]["name"].get<std::string>()] = stored;
  }
  void PutPod(const json& pod) {
    objects["/api/v1/namespaces/ml/pods/" + pod["metadata"]["name"].get<std::string>()] = pod;
  }
  json NodeObject(const std::string& name) { return objects["/api/v1/nodes/" + name]; }

  std::map<std::string, json> objects;  // by path
  std::vector<std::pair<std::string, json>> posts;
  bool refuse = false;
  int version = 0;
  int patches = 0;
  int conflicts = 0;
  // Runs once, between the bind's read of the Node and its write: another writer's change.
  std::function<void(json& node)> before_patch;
};

json BindArgs(const std::string& pod, const std::string& node, const std::string& uid = "") {
  return {{"PodName", pod},
          {"PodNamespace", "ml"},
          {"PodUID", uid.empty() ? "uid-" + pod : uid},
          {"Node", node}};
}

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

// Verdicts are remembered per node state (FitMemo): a node that publishes a new state, or a pod
// bound there meanwhile, must be judged afresh - a stale verdict would promise taken GPUs.
TEST_F(ExtenderTest, ANodeIsJudgedAfreshWhenItsStateChangesOrAPodIsBoundThere) {
  view_.SyncNodes({WholeNode("n1", NodeOf({T4("a")}))});
  json args = {{"Pod", PodAsking("train", k222, 16)}, {"Nodes", nullptr}, {"NodeNames", {"n1"}}};
  ASSERT_EQ(extender_.Filter(args)["NodeNames"], json::array({"n1"}));
  ASSERT_EQ(extender_.Filter(args)["NodeNames"], json::array({"n1"}));
  // Same generation, other GPUs: the text is what counts.
  view_.NodeChanged(kube::WatchEventType::kModified, WholeNode("n1", NodeOf({T4("a", "222", 1)})));
  json result = extender_.Filter(args);
  EXPECT_EQ(result["NodeNames"], json::array());
  EXPECT_TRUE(result["FailedNodes"].contains("n1"));
  EXPECT_EQ(extender_.Prioritize(args)[0]["Score"], 0);

  view_.NodeChanged(kube::WatchEventType::kModified, WholeNode("n1", NodeOf({T4("a")})));
  ASSERT_EQ(extender_.Filter(args)["NodeNames"], json::array({"n1"}));
  kube::PodInfo other;
  other.uid = "uid-other";
  other.namespace_name = "ml";
  other.name = "other";
  other.phase = "Pending";
  other.containers.push_back({"main", false, {{k222, "1"}}, {}});
  view_.Assume(other, "n1");
  EXPECT_EQ(extender_.Filter(args)["NodeNames"], json::array());
}

TEST_F(ExtenderTest, WithWholeNodesAChangedAnnotationIsJudgedAfresh) {
  auto args = [](const scheduling::NodeVgpuState& state) {
    return json{{"Pod", PodAsking("train", k222, 16)},
                {"Nodes", {{"items", {WholeNode("n1", state)}}}},
                {"NodeNames", nullptr}};
  };
  ASSERT_EQ(extender_.Filter(args(NodeOf({T4("a")})))["Nodes"]["items"].size(), 1u);
  EXPECT_EQ(extender_.Filter(args(NodeOf({T4("a", "222", 1)})))["Nodes"]["items"].size(), 0u);
  EXPECT_EQ(extender_.Filter(args(NodeOf({T4("a")})))["Nodes"]["items"].size(), 1u);
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

TEST_F(ExtenderTest, BindRecordsTheBindOnTheNodePostsABindingAndCountsThePodAtOnce) {
  api_.PutNode(WholeNode("n1", NodeOf({T4("a")})));
  api_.PutPod(PodAsking("train", k222, 16));
  view_.SyncNodes({api_.NodeObject("n1")});
  json bound = extender_.Bind(BindArgs("train", "n1"));
  EXPECT_EQ(bound["Error"], "");
  ASSERT_EQ(api_.posts.size(), 1u);
  EXPECT_EQ(api_.posts[0].first, "/api/v1/namespaces/ml/pods/train/binding");
  EXPECT_EQ(api_.posts[0].second["kind"], "Binding");
  EXPECT_EQ(api_.posts[0].second["target"],
            json({{"apiVersion", "v1"}, {"kind", "Node"}, {"name", "n1"}}));
  Result<std::vector<LedgerEntry>> ledger = ParseBindLedger(
      api_.NodeObject("n1")["metadata"]["annotations"][kBindLedgerAnnotation].get<std::string>());
  ASSERT_TRUE(ledger.ok()) << ledger.status().message();
  ASSERT_EQ(ledger->size(), 1u);
  EXPECT_EQ((*ledger)[0].uid, "uid-train");
  EXPECT_EQ((*ledger)[0].demand, (std::vector<scheduling::Demand>{{{k222, 16}}}));
  // The next pod sees n1's only GPU taken before any watch reports the binding.
  json next = {{"Pod", PodAsking("next", k222, 1)}, {"NodeNames", {"n1"}}};
  EXPECT_TRUE(extender_.Filter(next)["NodeNames"].empty());
}

// Two replicas behind one Service: the second has not seen the first's bind in its pod watch.
TEST_F(ExtenderTest, AnotherReplicasBindRecordedOnTheNodeKeepsThisReplicaFromPromisingItsGpu) {
  api_.PutNode(WholeNode("n1", NodeOf({T4("a")})));
  api_.PutPod(PodAsking("train", k222, 16));
  api_.PutPod(PodAsking("other", k223, 1));
  ClusterView other_view{"tencent.com/vgpu-"};
  Extender other(other_view, ExtenderOptions{}, &api_, [] { return kNow; });
  other_view.SyncNodes({api_.NodeObject("n1")});  // its node watch is behind too
  ASSERT_EQ(extender_.Bind(BindArgs("train", "n1"))["Error"], "");
  const std::string refused = other.Bind(BindArgs("other", "n1"))["Error"].get<std::string>();
  EXPECT_NE(refused.find("node n1 cannot take pod ml/other now"), std::string::npos) << refused;
  EXPECT_EQ(api_.posts.size(), 1u) << "only the first pod is bound";
  // Once its node watch shows the ledger, its filter fails the node as well.
  other_view.SyncNodes({api_.NodeObject("n1")});
  json next = {{"Pod", PodAsking("next", k222, 1)}, {"NodeNames", {"n1"}}};
  EXPECT_TRUE(other.Filter(next)["NodeNames"].empty());
}

// Without a clock of its own the extender reads its view's: the times it writes in the ledger are
// those the view ages the entries by, also when a test drives the view's clock.
TEST_F(ExtenderTest, WithoutAClockOfItsOwnTheExtenderWritesTheLedgerOnItsViewsClock) {
  api_.PutNode(WholeNode("n1", NodeOf({T4("a")})));
  api_.PutPod(PodAsking("train", k222, 1));
  ClusterView view("tencent.com/vgpu-", kAssumeFor, nullptr, [] { return kNow + 5; });
  Extender extender(view, ExtenderOptions{}, &api_);
  view.SyncNodes({api_.NodeObject("n1")});
  ASSERT_EQ(extender.Bind(BindArgs("train", "n1"))["Error"], "");
  Result<std::vector<LedgerEntry>> ledger = ParseBindLedger(
      api_.NodeObject("n1")["metadata"]["annotations"][kBindLedgerAnnotation].get<std::string>());
  ASSERT_TRUE(ledger.ok()) << ledger.status().message();
  ASSERT_EQ(ledger->size(), 1u);
  EXPECT_EQ((*ledger)[0].at_unix_ms, kNow + 5);
}

TEST_F(ExtenderTest, ABindThatLosesTheRaceForTheNodeJudgesTheNodeAgainAsItIsNow) {
  api_.PutNode(WholeNode("n1", NodeOf({T4("a")})));
  api_.PutPod(PodAsking("train", k222, 8));
  // Between this bind's read and its write, another replica records a bind of 223 on the GPU.
  api_.before_patch = [](json& node) {
    node["metadata"]["annotations"][kBindLedgerAnnotation] =
        RenderBindLedger({{"uid-rival", "ml/rival", kNow, {{{k223, 1}}}}});
    node["metadata"]["resourceVersion"] = "rival";
  };
  const std::string refused = extender_.Bind(BindArgs("train", "n1"))["Error"].get<std::string>();
  EXPECT_EQ(api_.conflicts, 1);
  EXPECT_NE(refused.find("cannot take pod ml/train now"), std::string::npos) << refused;
  EXPECT_TRUE(api_.posts.empty());
}

TEST_F(ExtenderTest, BindRefusesWhatItMustNotBindAndChangesNothing) {
  api_.PutNode(WholeNode("n1", NodeOf({T4("a")})));
  json bound_already = PodAsking("placed", k222, 1);
  bound_already["spec"]["nodeName"] = "n2";
  json ending = PodAsking("ending", k222, 1);
  ending["status"]["phase"] = "Succeeded";
  json cpu_only = PodAsking("cpu", "cpu", 1);
  for (const json& pod :
       {PodAsking("train", k222, 1), bound_already, ending, cpu_only, PodAsking("big", k222, 17)}) {
    api_.PutPod(pod);
  }
  struct Case {
    std::string description;
    json args;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"another pod's UID", BindArgs("train", "n1", "uid-someone"), "its UID is uid-train"},
      {"a pod bound already", BindArgs("placed", "n1"), "bound to n2 already"},
      {"a pod that ended", BindArgs("ending", "n1"), "it is ending"},
      {"a pod without vGPUs", BindArgs("cpu", "n1"), "asks for no vGPU"},
      {"a pod that does not fit", BindArgs("big", "n1"), "cannot take pod ml/big"},
      {"a pod that does not exist", BindArgs("ghost", "n1"), "not found"},
      {"a node that does not exist", BindArgs("train", "n9"), "not found"},
      {"no node named",
       {{"PodName", "train"}, {"PodNamespace", "ml"}, {"PodUID", "uid-train"}},
       "ExtenderBindingArgs.Node: missing"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.description);
    const std::string error = extender_.Bind(c.args)["Error"].get<std::string>();
    EXPECT_NE(error.find(c.error), std::string::npos) << error;
  }
  EXPECT_EQ(api_.patches, 0);
  EXPECT_TRUE(api_.posts.empty());
}

TEST_F(ExtenderTest, ARefusedBindingIsReportedAndCountsNothingInThisReplica) {
  api_.PutNode(WholeNode("n1", NodeOf({T4("a")})));
  api_.PutPod(PodAsking("train", k222, 16));
  api_.refuse = true;
  json bound = extender_.Bind(BindArgs("train", "n1"));
  EXPECT_NE(bound["Error"].get<std::string>().find("not found"), std::string::npos);
  EXPECT_TRUE(view_.BoundPods("n1").empty());
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
