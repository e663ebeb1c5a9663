// The extender's view of the cluster: node annotations from the node watch, vGPU pods per node
// from the assigned-pod watch, a bind of the extender's own counted at once and kept until the
// watch shows it (or it expires), finished and deleted pods dropped.
#include "extender/cluster_view.h"

#include <gtest/gtest.h>

#include <thread>

#include "scheduling/node_vgpu_state.h"

namespace kvgpu::extender {
namespace {

using namespace std::chrono_literals;

nlohmann::json Node(const std::string& name, const std::optional<std::string>& state) {
  nlohmann::json node = {{"metadata", {{"name", name}}}};
  if (state) node["metadata"]["annotations"][scheduling::kNodeStateAnnotation] = *state;
  return node;
}

kube::PodInfo Pod(const std::string& name, const std::string& node, uint32_t vgpus,
                  const std::string& phase = "Pending") {
  kube::PodInfo pod;
  pod.uid = "uid-" + name;
  pod.namespace_name = "ml";
  pod.name = name;
  pod.node_name = node;
  pod.phase = phase;
  kube::ContainerInfo main{"main", false, {}, {}};
  if (vgpus > 0) main.limits["tencent.com/vgpu-222"] = std::to_string(vgpus);
  pod.containers.push_back(main);
  return pod;
}

std::vector<std::string> Keys(const std::vector<BoundPod>& pods) {
  std::vector<std::string> out;
  for (const BoundPod& pod : pods) out.push_back(pod.key);
  return out;
}

TEST(ClusterViewTest, NodeAnnotationsFollowTheNodeWatch) {
  ClusterView view("tencent.com/vgpu-");
  view.SyncNodes({Node("n1", "S1"), Node("n2", std::nullopt)});
  EXPECT_EQ(view.StateAnnotation("n1"), "S1");
  EXPECT_FALSE(view.StateAnnotation("n2"));
  view.NodeChanged(kube::WatchEventType::kModified, Node("n2", "S2"));
  EXPECT_EQ(view.StateAnnotation("n2"), "S2");
  view.NodeChanged(kube::WatchEventType::kModified, Node("n1", std::nullopt));
  EXPECT_FALSE(view.StateAnnotation("n1")) << "an annotation removed is gone";
  view.NodeChanged(kube::WatchEventType::kDeleted, Node("n2", "S2"));
  EXPECT_FALSE(view.StateAnnotation("n2"));
}

TEST(ClusterViewTest, AStateIsParsedOncePerTextAndItsMemoGoesWithIt) {
  ClusterView view("tencent.com/vgpu-");
  view.SyncNodes({Node("n1", "S1")});
  const NodeState first = view.StateAndMemo("n1");
  ASSERT_TRUE(first.state && first.memo);
  EXPECT_FALSE(first.state->ok()) << "S1 is no vGPU state";
  EXPECT_EQ(view.StateAndMemo("n1").memo, first.memo);
  EXPECT_EQ(view.StateAndMemo("n1", "S1").memo, first.memo) << "a Node sent as the watch has it";
  view.NodeChanged(kube::WatchEventType::kModified, Node("n1", "S1"));
  EXPECT_EQ(view.StateAndMemo("n1").memo, first.memo) << "the node changed, its state did not";
  view.NodeChanged(kube::WatchEventType::kModified, Node("n1", "S2"));
  EXPECT_NE(view.StateAndMemo("n1").memo, first.memo);
  EXPECT_NE(view.StateAndMemo("n1", "S1").memo, view.StateAndMemo("n1").memo);
  view.NodeChanged(kube::WatchEventType::kDeleted, Node("n1", "S2"));
  EXPECT_FALSE(view.StateAndMemo("n1").state);
  EXPECT_FALSE(view.StateAndMemo("n1").memo);
}

TEST(ClusterViewTest, VgpuPodsAreListedPerNodeInBindOrderAndFinishedOnesDropped) {
  ClusterView view("tencent.com/vgpu-");
  view.SyncPods({Pod("a", "n1", 1), Pod("cpu-only", "n1", 0), Pod("b", "n2", 2)});
  view.PodChanged(kube::WatchEventType::kAdded, Pod("c", "n1", 1));
  EXPECT_EQ(Keys(view.BoundPods("n1")), (std::vector<std::string>{"ml/a", "ml/c"}));
  EXPECT_EQ(view.BoundPods("n2")[0].demand,
            (std::vector<scheduling::Demand>{{{"tencent.com/vgpu-222", 2}}}));
  view.PodChanged(kube::WatchEventType::kModified, Pod("a", "n1", 1, "Succeeded"));
  view.PodChanged(kube::WatchEventType::kDeleted, Pod("c", "n1", 1));
  EXPECT_TRUE(view.BoundPods("n1").empty());
  view.SyncPods({Pod("c", "n1", 1)});
  EXPECT_TRUE(view.BoundPods("n2").empty()) << "a relist replaces what was known";
}

TEST(ClusterViewTest, ABindOfOursCountsAtOnceAndSurvivesARelistUntilTheWatchShowsIt) {
  ClusterView view("tencent.com/vgpu-", 200ms);
  view.Assume(Pod("a", "", 1), "n1");
  EXPECT_EQ(Keys(view.BoundPods("n1")), std::vector<std::string>{"ml/a"});
  view.SyncPods({});
  EXPECT_EQ(Keys(view.BoundPods("n1")), std::vector<std::string>{"ml/a"})
      << "the list was taken before the binding landed";
  view.PodChanged(kube::WatchEventType::kAdded, Pod("a", "n1", 1));
  std::this_thread::sleep_for(250ms);
  EXPECT_EQ(Keys(view.BoundPods("n1")), std::vector<std::string>{"ml/a"})
      << "seen by the watch: no longer an assumption, never expires";
}

TEST(ClusterViewTest, AnAssumptionTheWatchNeverConfirmsExpires) {
  ClusterView view("tencent.com/vgpu-", 100ms);
  view.Assume(Pod("a", "", 1), "n1");
  EXPECT_EQ(view.BoundPods("n1").size(), 1u);
  std::this_thread::sleep_for(150ms);
  EXPECT_TRUE(view.BoundPods("n1").empty());
}

// BoundPodsByNode's answer is made once and shared (a cluster's running pods are not copied per
// request) until what it holds changes: a pod, a bind-ledger entry, an entry aging out, or the
// clock going back. A Node event that leaves the ledger as it was keeps it.
TEST(ClusterViewTest, TheBoundPodsAreSharedUntilAPodALedgerOrTheClockChangesThem) {
  ClusterView view("tencent.com/vgpu-", 30s);
  view.SyncPods({Pod("a", "n1", 1)});
  const auto first = view.BoundPodsByNode(1'000);
  EXPECT_EQ(view.BoundPodsByNode(1'000), first);
  EXPECT_EQ(view.BoundPodsByNode(2'000), first) << "nothing in it ages";
  view.NodeChanged(kube::WatchEventType::kModified, Node("n1", "S1"));
  EXPECT_EQ(view.BoundPodsByNode(2'000), first) << "a Node event without a ledger change";

  nlohmann::json with_ledger = Node("n2", "S2");
  with_ledger["metadata"]["annotations"][kBindLedgerAnnotation] =
      RenderBindLedger({{"uid-x", "ml/x", 1'500, {{{"tencent.com/vgpu-222", 1}}}}});
  view.NodeChanged(kube::WatchEventType::kModified, with_ledger);
  const auto with_entry = view.BoundPodsByNode(2'000);
  ASSERT_NE(with_entry, first);
  ASSERT_TRUE(with_entry->contains("n2"));
  EXPECT_EQ(Keys(with_entry->at("n2")), std::vector<std::string>{"ml/x"});
  view.NodeChanged(kube::WatchEventType::kModified, with_ledger);
  EXPECT_EQ(view.BoundPodsByNode(2'000), with_entry) << "the same ledger again";

  EXPECT_EQ(view.BoundPodsByNode(31'500), with_entry) << "the entry is 30 s old, not older";
  const auto aged = view.BoundPodsByNode(31'501);
  EXPECT_FALSE(aged->contains("n2")) << "the entry aged out";
  EXPECT_TRUE(view.BoundPodsByNode(2'000)->contains("n2")) << "the clock went back";

  view.PodChanged(kube::WatchEventType::kAdded, Pod("b", "n1", 1));
  EXPECT_EQ(Keys(view.BoundPodsByNode(2'000)->at("n1")),
            (std::vector<std::string>{"ml/a", "ml/b"}));
  view.PodChanged(kube::WatchEventType::kDeleted, Pod("a", "n1", 1));
  EXPECT_EQ(Keys(view.BoundPodsByNode(2'000)->at("n1")), std::vector<std::string>{"ml/b"});
}

TEST(ClusterViewTest, ReadyOnlyWhileEveryWatchFollows) {
  ClusterView view("tencent.com/vgpu-");
  EXPECT_FALSE(view.Following()) << "nothing followed yet";
  view.SetFollowing("nodes", true);
  view.SetFollowing("pods", false);
  EXPECT_FALSE(view.Following());
  view.SetFollowing("pods", true);
  EXPECT_TRUE(view.Following());
}

}  // namespace
}  // namespace kvgpu::extender
