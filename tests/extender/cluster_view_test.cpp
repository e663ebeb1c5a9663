// The extender's view of the cluster: node annotations from the node watch, vGPU pods per node
// from the assigned-pod watch, a bind of the extender's own counted at once and kept until the
// watch shows it (or it expires), finished and deleted pods dropped.
#include "extender/cluster_view.h"

#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "extender/node_fit.h"
#include "scheduling/node_vgpu_state.h"
#include "tests/extender/node_states.h"

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

TEST(ClusterViewTest, PodsThatLeftANodeAreGoneHoldersWhileItsStateListsThemForAWhile) {
  auto steady = std::chrono::steady_clock::time_point{} + 1h;
  ClusterView view("tencent.com/vgpu-", kAssumeFor, [&] { return steady; });
  view.SyncPods({Pod("a", "n1", 1, "Running"), Pod("b", "n1", 2, "Running"),
                 Pod("c", "n2", 1, "Running"), Pod("d", "n1", 0, "Running")});
  view.PodChanged(kube::WatchEventType::kDeleted, Pod("a", "n1", 1, "Running"));
  view.PodChanged(kube::WatchEventType::kModified, Pod("b", "n1", 2, "Succeeded"));
  view.PodChanged(kube::WatchEventType::kDeleted, Pod("c", "n2", 1, "Running"));
  view.PodChanged(kube::WatchEventType::kDeleted, Pod("d", "n1", 0, "Running"));
  const std::set<std::string> holders = {"ml/a", "ml/b", "ml/c", "ml/d"};
  EXPECT_EQ(Keys(view.GoneHolders("n1", holders)), (std::vector<std::string>{"ml/a", "ml/b"}))
      << "deleted and finished; c left another node; d held no vGPU";
  EXPECT_EQ(view.GoneHolders("n1", holders)[1].demand,
            (std::vector<scheduling::Demand>{{{"tencent.com/vgpu-222", 2}}}))
      << "with what each held";
  EXPECT_EQ(Keys(view.GoneHolders("n1", {"ml/b"})), std::vector<std::string>{"ml/b"})
      << "only those the state still lists";

  view.PodChanged(kube::WatchEventType::kAdded, Pod("a", "n1", 1, "Running"));
  EXPECT_EQ(Keys(view.GoneHolders("n1", holders)), std::vector<std::string>{"ml/b"})
      << "a pod made again under a's name holds that name now";

  steady += kGoneFor + 1s;
  EXPECT_TRUE(view.GoneHolders("n1", holders).empty()) << "forgotten after kGoneFor";
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

// The clocks a view is given, not the process's, age its binds and the ledger's entries: a test
// whose steps stand for a cluster's time (fakes/scheduling) stalls without forgetting a bind.
TEST(ClusterViewTest, BindsAndLedgerEntriesAgeOnTheClocksTheViewIsGiven) {
  std::chrono::steady_clock::time_point steady{};
  int64_t unix_ms = 1'000;
  ClusterView view(
      "tencent.com/vgpu-", 100ms, [&] { return steady; }, [&] { return unix_ms; });
  view.Assume(Pod("a", "", 1), "n1");
  nlohmann::json with_ledger = Node("n2", "S2");
  with_ledger["metadata"]["annotations"][kBindLedgerAnnotation] =
      RenderBindLedger({{"uid-x", "ml/x", 1'000, {{{"tencent.com/vgpu-222", 1}}}}});
  view.NodeChanged(kube::WatchEventType::kModified, with_ledger);
  std::this_thread::sleep_for(150ms);
  EXPECT_EQ(Keys(view.BoundPods("n1")), std::vector<std::string>{"ml/a"})
      << "the process's time passed, the view's did not";
  EXPECT_EQ(Keys(view.BoundPods("n2")), std::vector<std::string>{"ml/x"});
  steady += 101ms;
  EXPECT_TRUE(view.BoundPods("n1").empty());
  EXPECT_EQ(Keys(view.BoundPods("n2")), std::vector<std::string>{"ml/x"})
      << "the ledger ages on the unix-ms clock";
  unix_ms += 101;
  EXPECT_EQ(view.NowUnixMs(), 1'101);
  EXPECT_TRUE(view.BoundPods("n2").empty());
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

std::vector<CandidateNode> Names(const std::vector<std::string>& names) {
  std::vector<CandidateNode> nodes;
  for (const std::string& name : names) nodes.push_back({name, nullptr, std::nullopt});
  return nodes;
}

// A valid state, told apart by its time.
std::string StateAt(int64_t published) {
  return testing::Text(
      testing::NodeOf({testing::T4("0000:10:00.0"), testing::T4("0000:11:00.0")}, published));
}

// What Watch gives for `name` is what the view holds for it now: its state (and what is copied
// from it), the pods bound there; nothing of a node gone before, of another node that held the
// slot, or of the node's previous state.
void ExpectCurrent(ClusterView& view, const std::string& name, const WatchedNode& got,
                   int64_t now) {
  SCOPED_TRACE(name);
  const NodeState state = view.StateAndMemo(name);
  EXPECT_EQ(got.state, state.state.get());
  EXPECT_EQ(got.memo, state.memo.get());
  const bool ok = state.state && state.state->ok();
  EXPECT_EQ(got.ok, ok);
  if (ok) {
    EXPECT_EQ(got.published_unix_ms, state.state->value().published_unix_ms);
    EXPECT_EQ(got.policy, state.state->value().policy);
    EXPECT_EQ(got.published, state.memo->Published());
  }
  const std::vector<BoundPod> bound = view.BoundPods(name, now);
  if (!state.state) return;  // a node without a state is failed before its pods are read
  if (bound.empty()) {
    EXPECT_TRUE(got.bound == nullptr || got.bound->empty());
  } else {
    ASSERT_NE(got.bound, nullptr);
    EXPECT_EQ(Keys(*got.bound), Keys(bound));
  }
}

// The node table (a slot per node with a state, bound pods by slot): a node removed gives its slot
// to the next node, a state replaced is read anew, bound pods follow their node and not its slot;
// a Watched keeps the states it points to alive until it is gone, and no longer.
TEST(ClusterViewTest, TheNodeTableNeverAnswersWithAStaleEntry) {
  constexpr int64_t now = testing::kNow;
  ClusterView view("tencent.com/vgpu-");
  view.SyncNodes({Node("n1", StateAt(now - 1)), Node("n2", StateAt(now - 2))});
  view.SyncPods({Pod("a", "n1", 1)});
  const std::vector<std::string> names = {"n1", "n2", "n3", "n4"};
  {
    const ClusterView::Watched watched = view.Watch(Names(names), now);
    ASSERT_EQ(watched.nodes().size(), 4u);
    for (size_t i = 0; i < names.size(); ++i)
      ExpectCurrent(view, names[i], watched.nodes()[i], now);
    ASSERT_NE(watched.nodes()[0].bound, nullptr);
    EXPECT_EQ(Keys(*watched.nodes()[0].bound), std::vector<std::string>{"ml/a"});
    EXPECT_EQ(watched.nodes()[2].state, nullptr) << "n3 has no state";
  }
  // n1 goes, n4 comes and takes its slot; the pod bound to n1 stays bound to n1.
  view.NodeChanged(kube::WatchEventType::kDeleted, Node("n1", std::nullopt));
  view.NodeChanged(kube::WatchEventType::kAdded, Node("n4", StateAt(now - 4)));
  {
    const ClusterView::Watched watched = view.Watch(Names(names), now);
    EXPECT_EQ(watched.nodes()[0].state, nullptr) << "n1 is gone";
    EXPECT_EQ(watched.nodes()[3].published_unix_ms, now - 4);
    EXPECT_TRUE(watched.nodes()[3].bound == nullptr) << "n1's pod on n1's old slot";
    for (size_t i = 0; i < names.size(); ++i)
      ExpectCurrent(view, names[i], watched.nodes()[i], now);
  }
  // A state replaced while a Watched holds the old one: the old stays alive until it goes.
  std::weak_ptr<const Result<scheduling::NodeVgpuState>> old = view.StateAndMemo("n2").state;
  std::optional<ClusterView::Watched> held = view.Watch(Names({"n2"}), now);
  view.NodeChanged(kube::WatchEventType::kModified, Node("n2", StateAt(now - 20)));
  view.PodChanged(kube::WatchEventType::kAdded, Pod("b", "n2", 1));
  {
    const ClusterView::Watched watched = view.Watch(Names({"n2"}), now);
    EXPECT_EQ(watched.nodes()[0].published_unix_ms, now - 20) << "the new state";
    ASSERT_NE(watched.nodes()[0].bound, nullptr) << "the pod bound since";
    EXPECT_EQ(Keys(*watched.nodes()[0].bound), std::vector<std::string>{"ml/b"});
    ExpectCurrent(view, "n2", watched.nodes()[0], now);
  }
  ASSERT_FALSE(old.expired()) << "a Watched made before the change still reads it";
  EXPECT_EQ(held->nodes()[0].state, old.lock().get());
  EXPECT_EQ(held->nodes()[0].state->value().published_unix_ms, now - 2);
  held.reset();
  EXPECT_TRUE(old.expired()) << "kept no longer than the Watched that could read it";
  // A relist drops n2 and keeps n4.
  view.SyncNodes({Node("n4", StateAt(now - 44))});
  const ClusterView::Watched watched = view.Watch(Names(names), now);
  for (size_t i = 0; i < names.size(); ++i) ExpectCurrent(view, names[i], watched.nodes()[i], now);
  EXPECT_EQ(watched.nodes()[1].state, nullptr);
  EXPECT_EQ(watched.nodes()[3].published_unix_ms, now - 44);
}

// The same against random churn: nodes coming, changing and going (one by one and by relists),
// pods bound and deleted, Watched objects held across changes; after every step every name reads
// as the view holds it now, and what held Watched objects point to is still there.
TEST(ClusterViewTest, TheNodeTableFollowsRandomChurn) {
  constexpr int64_t now = testing::kNow;
  ClusterView view("tencent.com/vgpu-");
  std::mt19937 random(6);
  // Enough names for the table to grow and for slots freed by removed nodes to be reused.
  std::vector<std::string> names;
  for (int i = 0; i < 120; ++i) names.push_back("node-" + std::to_string(i));
  std::map<std::string, std::string> model;  // the state text each node has now
  // Each text's publication time, read once when the text is made: read again for every name at
  // every step, the parse was nearly all of this test's time (beyond CTest's limit under ASan).
  std::map<std::string, int64_t> published;
  int64_t stamp = now - 100'000;
  const auto set_state = [&](const std::string& n) {
    model[n] = StateAt(++stamp);
    published[n] = scheduling::ParseNodeState(model[n])->published_unix_ms;
  };
  std::vector<std::string> asked = names;
  asked.push_back("never-seen");
  std::deque<ClusterView::Watched> held;
  for (int step = 0; step < 3000; ++step) {
    const std::string& name = names[random() % names.size()];
    switch (random() % 6) {
      case 0:
      case 1:
        set_state(name);
        view.NodeChanged(kube::WatchEventType::kModified, Node(name, model[name]));
        break;
      case 2:
        model.erase(name);
        view.NodeChanged(
            random() % 2 == 0 ? kube::WatchEventType::kDeleted : kube::WatchEventType::kModified,
            Node(name, std::nullopt));
        break;
      case 3: {
        if (random() % 8 != 0) break;
        std::vector<nlohmann::json> nodes;
        model.clear();
        for (const std::string& n : names) {
          if (random() % 3 != 0) continue;
          set_state(n);
          nodes.push_back(Node(n, model[n]));
        }
        view.SyncNodes(nodes);
        break;
      }
      case 4:
        view.PodChanged(kube::WatchEventType::kAdded,
                        Pod("p" + std::to_string(random() % 40), name, 1));
        break;
      default:
        view.PodChanged(kube::WatchEventType::kDeleted,
                        Pod("p" + std::to_string(random() % 40), name, 1));
    }
    ClusterView::Watched watched = view.Watch(Names(asked), now);
    for (size_t i = 0; i < asked.size(); ++i) {
      ExpectCurrent(view, asked[i], watched.nodes()[i], now);
      const auto it = model.find(asked[i]);
      ASSERT_EQ(view.StateAnnotation(asked[i]),
                it == model.end() ? std::nullopt : std::optional<std::string>(it->second))
          << asked[i] << " at step " << step;
      if (it != model.end()) {
        ASSERT_TRUE(watched.nodes()[i].ok);
        EXPECT_EQ(watched.nodes()[i].published_unix_ms, published.at(asked[i]));
      }
    }
    for (const ClusterView::Watched& old : held) {
      for (const WatchedNode& node : old.nodes()) {
        if (node.ok) {
          EXPECT_EQ(node.state->value().published_unix_ms, node.published_unix_ms);
        }
      }
    }
    held.push_back(std::move(watched));
    if (held.size() > 3 || random() % 5 == 0) held.pop_front();
    if (HasFailure()) break;
  }
}

TEST(ClusterViewTest, ReadyOnlyWhileEveryWatchFollows) {
  ClusterView view("tencent.com/vgpu-");
  EXPECT_FALSE(view.Following()) << "nothing followed yet";
  // The pods' watch follows while the Nodes are still being listed (5,000 of them took 3 s
  // against a real API server, and kube-scheduler's filter calls meanwhile failed every node).
  view.SetFollowing("pods", true);
  EXPECT_FALSE(view.Following()) << "the nodes' watch has not reported yet";
  view.SetFollowing("nodes", true);
  view.SetFollowing("pods", false);
  EXPECT_FALSE(view.Following());
  view.SetFollowing("pods", true);
  EXPECT_TRUE(view.Following());
}

}  // namespace
}  // namespace kvgpu::extender
