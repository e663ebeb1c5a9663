// The preempt verb: a candidate node stays only where the victims kube-scheduler chose make room
// for the pod's vGPUs under the GPUs' lock rules (victims on another GPU than the one the pod
// needs are refused; victims emptying every GPU of a lock unlock them for another type), without
// guessing which GPU holds which pod's vGPUs; the wire format is kube-scheduler's
// (ExtenderPreemptionArgs / ExtenderPreemptionResult, UIDs only with nodeCacheCapable); bad
// arguments get 400 and change nothing.
#include "extender/preemption.h"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "extender/extender.h"
#include "extender/protocol.h"
#include "tests/extender/node_states.h"

namespace kvgpu::extender {
namespace {

using namespace kvgpu::extender::testing;  // NOLINT(google-build-using-namespace)
using nlohmann::json;
using Kind = NodeVerdict::Kind;

BoundPod Holding(const std::string& name, const std::string& resource, uint32_t count) {
  BoundPod pod;
  pod.uid = "uid-" + name;
  pod.key = "ml/" + name;
  pod.node = "n";
  pod.demand = {{{resource, count}}};
  return pod;
}

// GPU a locked to 223 and full (p1 and p2, 4 each); GPU b locked to 222 and full (p3 and p5, 8
// each).
struct TwoLockedGpus {
  scheduling::NodeVgpuState state = NodeOf({T4("a", "223", 8), T4("b", "222", 16)});
  BoundPod p1 = Holding("p1", k223, 4);
  BoundPod p2 = Holding("p2", k223, 4);
  BoundPod p3 = Holding("p3", k222, 8);
  BoundPod p5 = Holding("p5", k222, 8);
  std::vector<BoundPod> bound{p1, p2, p3, p5};

  TwoLockedGpus() { state.holders = {"ml/p1", "ml/p2", "ml/p3", "ml/p5"}; }
  Kind Judge(const std::string& resource, uint32_t count, const std::vector<BoundPod>& victims) {
    const Result<scheduling::NodeVgpuState> published(state);
    return JudgePreemption(&published, bound, victims, "uid-preemptor", {{{resource, count}}}, kNow,
                           FitOptions{})
        .kind;
  }
};

TEST(PreemptionTest, VictimsOnAGpuThePodCannotUseAreRefused) {
  TwoLockedGpus node;
  EXPECT_EQ(node.Judge(k223, 1, {node.p3}), Kind::kFull)
      << "p5 still holds GPU b for 222, and GPU a has no room for 223";
  EXPECT_EQ(node.Judge(k222, 1, {node.p1}), Kind::kFull)
      << "p2 still holds GPU a for 223, so 222 gets nothing there";
  EXPECT_EQ(node.Judge(k223, 1, {node.p1}), Kind::kFits) << "p1's room on GPU a takes a 223";
  EXPECT_EQ(node.Judge(k223, 4, {node.p1}), Kind::kFits);
  EXPECT_EQ(node.Judge(k223, 5, {node.p1}), Kind::kFull) << "p1 frees 4, not 5";
  EXPECT_EQ(node.Judge(k222, 1, {node.p3}), Kind::kFits);
}

TEST(PreemptionTest, VictimsTakingEveryVgpuOfALockUnlockItsGpusForAnotherType) {
  TwoLockedGpus node;
  EXPECT_EQ(node.Judge(k222, 16, {node.p1, node.p2}), Kind::kFits)
      << "GPU a is empty and offers 222 as GPU b shows it can (16)";
  EXPECT_EQ(node.Judge(k222, 17, {node.p1, node.p2}), Kind::kFull);
  EXPECT_EQ(node.Judge(k223, 8, {node.p5, node.p3}), Kind::kFits) << "GPU b is free for 223 (8)";
  EXPECT_EQ(node.Judge(k223, 9, {node.p5, node.p3}), Kind::kFull);
}

// The state names the pods holding vGPUs on the node, not the GPU: a victim whose type is on two
// GPUs might be on either, so neither is taken to be emptied by it.
TEST(PreemptionTest, AGpuIsUnlockedOnlyWhenTheVictimsTakeEveryVgpuSharingItsLock) {
  TwoLockedGpus node;
  node.state = NodeOf({T4("a", "223", 8), T4("b", "222", 16), T4("c", "223", 2)});
  node.state.holders = {"ml/p1", "ml/p2", "ml/p3", "ml/p5", "ml/p4"};
  const BoundPod p4 = Holding("p4", k223, 2);
  node.bound.push_back(p4);
  EXPECT_EQ(node.Judge(k222, 1, {p4}), Kind::kFull)
      << "p4's two 223 vGPUs may be on GPU a or c: neither is known to be empty";
  EXPECT_EQ(node.Judge(k222, 1, {node.p1, node.p2, p4}), Kind::kFits);
  EXPECT_EQ(node.Judge(k222, 32, {node.p1, node.p2, p4}), Kind::kFits) << "both a and c unlock";
}

TEST(PreemptionTest, VgpusMadeForPodsNotYetAttributedKeepTheirGpuLocked) {
  TwoLockedGpus node;
  node.state.holders = {"ml/p1", "ml/p3", "ml/p5"};  // p2's vGPUs made, not yet attributed
  node.state.unattributed = {{k223, 4}};
  EXPECT_EQ(node.Judge(k222, 1, {node.p1}), Kind::kFull);
}

TEST(PreemptionTest, AGpuLockedByVgpusNotOursStaysLocked) {
  TwoLockedGpus node;
  node.state = NodeOf({T4("a", "223", 0), T4("b", "222", 16)});  // a: someone else's vGPU
  node.state.holders = {"ml/p3", "ml/p5"};
  node.bound = {node.p3, node.p5};
  EXPECT_EQ(node.Judge(k222, 16, {node.p3, node.p5}), Kind::kFits);
  EXPECT_EQ(node.Judge(k222, 17, {node.p3, node.p5}), Kind::kFull)
      << "GPU a stays locked to 223: it carries a vGPU, if none of ours";
}

TEST(PreemptionTest, AGpuWhoseRuleIsNotModelledGetsNoRoomBack) {
  TwoLockedGpus node;
  node.state = NodeOf({T4("b", "222", 16)});
  node.state.holders = {"ml/p3", "ml/p5"};
  node.bound = {node.p3, node.p5};
  ASSERT_EQ(node.Judge(k222, 1, {node.p3}), Kind::kFits);
  node.state.gpus[0].occupancy = scheduling::Occupancy::kUnknown;
  node.state.gpus[0].lock.clear();
  EXPECT_EQ(node.Judge(k222, 1, {node.p3}), Kind::kFull)
      << "only the kernel's counts are believed there";
}

TEST(PreemptionTest, AVictimWaitingForItsVgpusGivesBackTheRoomItWasPromised) {
  TwoLockedGpus node;
  node.state = NodeOf({T4("b", "222", 12)});
  node.state.holders = {"ml/p3"};
  const BoundPod waiting = Holding("w", k222, 4);
  node.bound = {Holding("p3", k222, 12), waiting};
  EXPECT_EQ(node.Judge(k222, 4, {}), Kind::kFull);
  EXPECT_EQ(node.Judge(k222, 4, {waiting}), Kind::kFits);
}

TEST(PreemptionTest, ANodeWhereThePodFitsIsKeptAndOneWithoutUsableStateIsNot) {
  TwoLockedGpus node;
  node.state = NodeOf({T4("a")});
  node.bound = {};
  EXPECT_EQ(node.Judge(k222, 1, {}), Kind::kFits)
      << "the GPUs are not what stops the pod: the victims are for what kube-scheduler counts";
  node.state = NodeOf({T4("a")}, kNow - 3'600'000);
  EXPECT_EQ(node.Judge(k222, 1, {}), Kind::kUnresolvable) << "an hour-old state";
  EXPECT_EQ(JudgePreemption(nullptr, {}, {}, "u", {{{k222, 1}}}, kNow, FitOptions{}).kind,
            Kind::kUnresolvable);
}

// kube-scheduler's wire format: k8s.io/kube-scheduler/extender/v1 types.go carries no json tags,
// so the names are the Go field names.
TEST(PreemptionProtocolTest, ParsesBothVictimShapesAndAnswersMetaVictims) {
  json pod = {{"metadata", {{"name", "p"}, {"namespace", "ml"}, {"uid", "u-p"}}}};
  json victim = {{"metadata", {{"name", "v"}, {"namespace", "ml"}, {"uid", "u-v"}}}};
  Result<PreemptionArgs> whole = ParsePreemptionArgs(
      {{"Pod", pod},
       {"NodeNameToVictims", {{"n1", {{"Pods", {victim}}, {"NumPDBViolations", 2}}}}},
       {"NodeNameToMetaVictims", nullptr}});
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  EXPECT_FALSE(whole->meta);
  ASSERT_EQ(whole->nodes.at("n1").pods.size(), 1u);
  EXPECT_EQ(whole->nodes.at("n1").pods[0].uid, "u-v");
  ASSERT_TRUE(whole->nodes.at("n1").pods[0].pod.has_value());
  EXPECT_EQ(whole->nodes.at("n1").num_pdb_violations, 2);

  Result<PreemptionArgs> meta =
      ParsePreemptionArgs({{"Pod", pod},
                           {"NodeNameToVictims", nullptr},
                           {"NodeNameToMetaVictims",
                            {{"n1", {{"Pods", {{{"UID", "u-v"}}}}, {"NumPDBViolations", 0}}}}}});
  ASSERT_TRUE(meta.ok()) << meta.status().message();
  EXPECT_TRUE(meta->meta);
  EXPECT_EQ(PreemptionResult(meta->nodes).dump(),
            R"({"NodeNameToMetaVictims":{"n1":{"NumPDBViolations":0,"Pods":[{"UID":"u-v"}]}}})");
}

TEST(PreemptionProtocolTest, AnythingButTheDocumentedShapeIsInvalid) {
  json pod = {{"metadata", {{"name", "p"}, {"namespace", "ml"}, {"uid", "u-p"}}}};
  for (const json& body : {
           json::array(),
           json{{"NodeNameToMetaVictims", json::object()}},
           json{{"Pod", {{"metadata", {{"name", "p"}}}}},
                {"NodeNameToMetaVictims", json::object()}},
           json{{"Pod", pod}, {"NodeNameToMetaVictims", "n1"}},
           json{{"Pod", pod}, {"NodeNameToMetaVictims", {{"n1", nullptr}}}},
           json{{"Pod", pod}, {"NodeNameToMetaVictims", {{"n1", {{"Pods", "u-v"}}}}}},
           json{{"Pod", pod}, {"NodeNameToMetaVictims", {{"n1", {{"Pods", {json::object()}}}}}}},
           json{{"Pod", pod},
                {"NodeNameToMetaVictims",
                 {{"n1", {{"Pods", {{{"UID", "u"}}}}, {"NumPDBViolations", "1"}}}}}},
           json{{"Pod", pod}, {"NodeNameToVictims", {{"n1", {{"Pods", {{{"UID", "u"}}}}}}}}},
       }) {
    Result<PreemptionArgs> args = ParsePreemptionArgs(body);
    EXPECT_FALSE(args.ok()) << body.dump();
    if (!args.ok()) {
      EXPECT_EQ(args.status().code(), ErrorCode::kInvalid) << body.dump();
    }
  }
}

kube::PodInfo BoundTo(const std::string& name, const std::string& node, const std::string& resource,
                      uint32_t count) {
  kube::PodInfo pod;
  pod.uid = "uid-" + name;
  pod.namespace_name = "ml";
  pod.name = name;
  pod.node_name = node;
  pod.phase = "Running";
  pod.containers.push_back({"main", false, {}, {{resource, std::to_string(count)}}});
  return pod;
}

json Asking(const std::string& name, const std::string& resource, uint32_t count) {
  json limits = json::object();
  if (!resource.empty()) limits[resource] = std::to_string(count);
  return {{"metadata", {{"name", name}, {"namespace", "ml"}, {"uid", "uid-" + name}}},
          {"spec", {{"containers", {{{"name", "main"}, {"resources", {{"limits", limits}}}}}}}}};
}

json Meta(const std::vector<std::string>& uids, int64_t pdb = 0) {
  json pods = json::array();
  for (const std::string& uid : uids) pods.push_back({{"UID", uid}});
  return {{"Pods", pods}, {"NumPDBViolations", pdb}};
}

json Annotated(const std::string& name, scheduling::NodeVgpuState state,
               const std::set<std::string>& holders) {
  state.holders = holders;
  return {{"metadata",
           {{"name", name}, {"annotations", {{scheduling::kNodeStateAnnotation, Text(state)}}}}}};
}

class PreemptVerbTest : public ::testing::Test {
 protected:
  PreemptVerbTest() : extender_(view_, ExtenderOptions{}, nullptr, [] { return kNow; }) {
    // n1 as TwoLockedGpus; n2: T4s locked to 222 (p4) and 223 (p6), full.
    view_.SyncNodes(
        {Annotated("n1", NodeOf({T4("a", "223", 8), T4("b", "222", 16)}),
                   {"ml/p1", "ml/p2", "ml/p3", "ml/p5"}),
         Annotated("n2", NodeOf({T4("a", "222", 16), T4("b", "223", 8)}), {"ml/p4", "ml/p6"})});
    view_.SyncPods({BoundTo("p1", "n1", k223, 4), BoundTo("p2", "n1", k223, 4),
                    BoundTo("p3", "n1", k222, 8), BoundTo("p5", "n1", k222, 8),
                    BoundTo("p4", "n2", k222, 16), BoundTo("p6", "n2", k223, 8)});
  }
  https::HttpResponse Post(const json& body) {
    return extender_.Handle({"POST", "/preempt", "application/json", body.dump(), true});
  }

  ClusterView view_{"tencent.com/vgpu-"};
  Extender extender_;
};

TEST_F(PreemptVerbTest, UidOnlyVictimsKeepTheNodesWhereTheyMakeRoomInTheOrderSent) {
  const json args = {{"Pod", Asking("big", k223, 4)},
                     {"NodeNameToVictims", nullptr},
                     {"NodeNameToMetaVictims",
                      {{"n1", Meta({"uid-p2", "uid-p3"}, 1)},  // p2 frees GPU a's room
                       {"n2", Meta({"uid-p4"})}}}};            // frees a 222 GPU for 223
  https::HttpResponse response = Post(args);
  ASSERT_EQ(response.status, 200) << response.body;
  EXPECT_EQ(json::parse(response.body), json::parse(R"({"NodeNameToMetaVictims":{
              "n1":{"Pods":[{"UID":"uid-p2"},{"UID":"uid-p3"}],"NumPDBViolations":1},
              "n2":{"Pods":[{"UID":"uid-p4"}],"NumPDBViolations":0}}})"));

  const json wrong_gpu = {{"Pod", Asking("big", k223, 4)},
                          {"NodeNameToVictims", nullptr},
                          {"NodeNameToMetaVictims", {{"n1", Meta({"uid-p3"})}}}};
  EXPECT_EQ(json::parse(Post(wrong_gpu).body), json::parse(R"({"NodeNameToMetaVictims":{}})"))
      << "p3 frees the 222 GPU only: the 223 GPU stays full";
  const json unknown = {
      {"Pod", Asking("big", k223, 4)},
      {"NodeNameToVictims", nullptr},
      {"NodeNameToMetaVictims", {{"n1", Meta({"uid-nobody"})}, {"n9", Meta({"u"})}}}};
  EXPECT_EQ(json::parse(Post(unknown).body), json::parse(R"({"NodeNameToMetaVictims":{}})"))
      << "a UID the extender does not know frees nothing; a node without state is dropped";
}

// Found against the real kube-scheduler (tests/k8s/scenario_extender.py): once a victim's pod
// object is gone, kube-scheduler preempts again for the same pod while the plugin still holds the
// victim's vGPU for its grace period. Its nominated node will have room: no new victims anywhere.
TEST_F(PreemptVerbTest, APodNominatedWhereGonePodsVgpusAwaitRemovalGetsNoNewVictims) {
  view_.PodChanged(kube::WatchEventType::kDeleted, BoundTo("p1", "n1", k223, 4));
  auto preempt = [&](uint32_t count, const std::string& nominated) {
    json pod = Asking("big", k223, count);
    if (!nominated.empty()) pod["status"]["nominatedNodeName"] = nominated;
    const json args = {{"Pod", pod},
                       {"NodeNameToVictims", nullptr},
                       {"NodeNameToMetaVictims", {{"n2", Meta({"uid-p4"})}}}};
    https::HttpResponse response = Post(args);
    EXPECT_EQ(response.status, 200) << response.body;
    return json::parse(response.body)["NodeNameToMetaVictims"];
  };
  EXPECT_TRUE(preempt(4, "n1").empty()) << "p1's vGPUs on n1, still listed, make room for 4";
  EXPECT_TRUE(preempt(4, "").contains("n2")) << "not nominated: kube-scheduler's first try";
  EXPECT_TRUE(preempt(5, "n1").contains("n2")) << "p1's room is 4: waiting would not place 5";
  EXPECT_TRUE(preempt(4, "n2").contains("n2")) << "nothing of a gone pod on n2";

  // The plugin removed p1's vGPUs and published it: n1 has the room now (the filter passes there),
  // and a preemption asked anyway is judged as any other.
  view_.NodeChanged(kube::WatchEventType::kModified,
                    Annotated("n1", NodeOf({T4("a", "223", 4), T4("b", "222", 16)}),
                              {"ml/p2", "ml/p3", "ml/p5"}));
  EXPECT_TRUE(preempt(4, "n1").contains("n2"));
}

TEST_F(PreemptVerbTest, WholeVictimsTheWatchHasNotShownAreJudgedByTheirOwnSpec) {
  view_.SyncPods({BoundTo("p1", "n1", k223, 4), BoundTo("p3", "n1", k222, 8),
                  BoundTo("p5", "n1", k222, 8)});  // p2 not seen yet
  json p2 = Asking("p2", k223, 4);
  p2["spec"]["nodeName"] = "n1";
  const json args = {{"Pod", Asking("small", k223, 1)},
                     {"NodeNameToVictims", {{"n1", {{"Pods", {p2}}, {"NumPDBViolations", 0}}}}},
                     {"NodeNameToMetaVictims", nullptr}};
  EXPECT_EQ(json::parse(Post(args).body),
            json::parse(R"({"NodeNameToMetaVictims":{"n1":{"Pods":[{"UID":"uid-p2"}],
                                                            "NumPDBViolations":0}}})"));
}

TEST_F(PreemptVerbTest, APodWithoutVgpusGetsEveryNodeBackAsSent) {
  const json args = {{"Pod", Asking("web", "", 0)},
                     {"NodeNameToVictims", nullptr},
                     {"NodeNameToMetaVictims", {{"n1", Meta({"uid-p3"}, 2)}, {"n9", Meta({"x"})}}}};
  EXPECT_EQ(json::parse(Post(args).body), json::parse(R"({"NodeNameToMetaVictims":{
              "n1":{"Pods":[{"UID":"uid-p3"}],"NumPDBViolations":2},
              "n9":{"Pods":[{"UID":"x"}],"NumPDBViolations":0}}})"));
}

TEST_F(PreemptVerbTest, BadArgumentsGet400AndChangeNothing) {
  const std::vector<BoundPod> before = view_.BoundPods("n1", kNow);
  https::HttpResponse not_json =
      extender_.Handle({"POST", "/preempt", "application/json", "{nope", true});
  EXPECT_EQ(not_json.status, 400);
  https::HttpResponse no_pod = Post({{"NodeNameToMetaVictims", json::object()}});
  EXPECT_EQ(no_pod.status, 400);
  EXPECT_NE(no_pod.body.find("ExtenderPreemptionArgs.Pod"), std::string::npos) << no_pod.body;
  https::HttpResponse bad_victims =
      Post({{"Pod", Asking("big", k223, 4)}, {"NodeNameToMetaVictims", {{"n1", {{"Pods", 7}}}}}});
  EXPECT_EQ(bad_victims.status, 400);
  EXPECT_NE(bad_victims.body.find("n1"), std::string::npos) << bad_victims.body;
  EXPECT_EQ(extender_.Handle({"GET", "/preempt", "", "", true}).status, 405);
  EXPECT_EQ(view_.BoundPods("n1", kNow).size(), before.size());
}

// The shipped kube-scheduler configuration names each verb by the path the extender serves it at:
// a verb kube-scheduler calls and gets 404 for fails the pod's scheduling (ignorable: false).
TEST_F(PreemptVerbTest, EveryVerbTheShippedSchedulerConfigNamesIsServed) {
  std::ifstream in(std::string(KVGPU_SOURCE_DIR) + "/deploy/scheduler/kube-scheduler-config.yaml");
  std::stringstream text;
  text << in.rdbuf();
  const std::string config = text.str();
  ASSERT_FALSE(config.empty());
  std::set<std::string> verbs;
  const std::regex verb(R"(\n\s*(\w+)Verb:\s*(\S+))");
  for (auto it = std::sregex_iterator(config.begin(), config.end(), verb);
       it != std::sregex_iterator(); ++it) {
    verbs.insert((*it)[1].str());
    EXPECT_NE(
        extender_.Handle({"POST", "/" + (*it)[2].str(), "application/json", "{}", true}).status,
        404)
        << (*it)[0].str();
  }
  EXPECT_EQ(verbs, (std::set<std::string>{"bind", "filter", "preempt", "prioritize"}));
}

}  // namespace
}  // namespace kvgpu::extender
