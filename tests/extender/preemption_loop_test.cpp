// The preempt verb against the real device plugin and the simulated kernel (fakes/scheduling): on
// a 2 x T4 node whose GPUs are full, one locked to 223 and one to 222, the extender's verdict on
// kube-scheduler's victims is checked by deleting them and asking the kernel what it can make
// then - an oracle that does not go through the extender's model.
#include <gtest/gtest.h>

#include "extender/extender.h"
#include "fakes/scheduling/scheduling_cluster.h"
#include "tests/extender/loop_helpers.h"

namespace kvgpu::testing {
namespace {

using nlohmann::json;

ClusterPod Asking(const std::string& name, const std::string& type, uint32_t count) {
  ClusterPod pod;
  pod.name = name;
  pod.resource = "tencent.com/vgpu-" + type;
  pod.count = count;
  return pod;
}

// An extender replica following the cluster: its Node watch lists the Nodes as they are at each
// question, its pod watch has seen every deletion (the bind ledger on the Node names deleted pods
// for a while; a replica that saw them go counts them no more).
class Replica {
 public:
  explicit Replica(SchedulingCluster& cluster) : cluster_(cluster) {}

  // The nodes kept for `preemptor` when kube-scheduler names `victims` on node-0 (UIDs only, as
  // with nodeCacheCapable).
  std::vector<std::string> Kept(const ClusterPod& preemptor,
                                const std::vector<std::string>& victims) {
    view_.SyncNodes(cluster_.api().Nodes());
    std::vector<kube::PodInfo> bound;
    for (const ClusterPod& pod : cluster_.Pods()) {
      if (pod.state == ClusterPod::State::kRunning) bound.push_back(*kube::ParsePod(pod.Object()));
    }
    view_.SyncPods(bound);
    json pods = json::array();
    for (const std::string& victim : victims) pods.push_back({{"UID", "uid-" + victim}});
    const json args = {
        {"Pod", preemptor.Object()},
        {"NodeNameToVictims", nullptr},
        {"NodeNameToMetaVictims", {{"node-0", {{"Pods", pods}, {"NumPDBViolations", 0}}}}}};
    Result<json> result = extender_.Preempt(args);
    EXPECT_TRUE(result.ok()) << result.status().message();
    std::vector<std::string> kept;
    if (result.ok()) {
      for (const auto& [node, meta] : (*result)["NodeNameToMetaVictims"].items()) {
        kept.push_back(node);
      }
    }
    return kept;
  }
  // kube-scheduler deletes a victim; the pod watch shows it.
  void Delete(const std::string& name) {
    for (const ClusterPod& pod : cluster_.Pods()) {
      if (pod.name == name)
        view_.PodChanged(kube::WatchEventType::kDeleted, *kube::ParsePod(pod.Object()));
    }
    cluster_.Delete(name);
  }

 private:
  SchedulingCluster& cluster_;
  extender::ClusterView view_{"tencent.com/vgpu-"};
  extender::Extender extender_{view_, extender::ExtenderOptions{}};
};

TEST(PreemptionLoopTest, TheNodesKeptAreThoseWhereDeletingTheVictimsLetsTheKernelMakeThePod) {
  SchedulingCluster cluster(1, /*use_extender=*/true);
  ASSERT_TRUE(cluster.Settle());
  cluster.Submit({Asking("a1", "223", 4), Asking("a2", "223", 4), Asking("b1", "222", 8),
                  Asking("b2", "222", 8)});
  cluster.ScheduleAndAdmit();
  ASSERT_EQ(cluster.Count(ClusterPod::State::kRunning), 4u) << Failures(cluster);
  ASSERT_TRUE(cluster.Settle());
  ASSERT_FALSE(cluster.FitsSomewhere("tencent.com/vgpu-222", 1)) << "both GPUs are full";
  ASSERT_FALSE(cluster.FitsSomewhere("tencent.com/vgpu-223", 1));

  Replica replica(cluster);
  const std::vector<std::string> none;
  const std::vector<std::string> node0 = {"node-0"};
  const ClusterPod small = Asking("small", "222", 8);
  const ClusterPod whole = Asking("whole", "222", 16);
  EXPECT_EQ(replica.Kept(small, {"a1"}), none) << "a2 keeps the 223 GPU";
  EXPECT_EQ(replica.Kept(small, {"b1"}), node0) << "b1's room on the 222 GPU";
  EXPECT_EQ(replica.Kept(whole, {"b1"}), none) << "b1 frees 8, not 16";
  EXPECT_EQ(replica.Kept(whole, {"a1", "a2"}), node0) << "the 223 GPU is emptied";

  replica.Delete("a1");
  ASSERT_TRUE(cluster.Settle());
  EXPECT_FALSE(cluster.FitsSomewhere("tencent.com/vgpu-222", 1)) << "as the extender said";
  replica.Delete("b1");
  ASSERT_TRUE(cluster.Settle());
  EXPECT_TRUE(cluster.FitsSomewhere("tencent.com/vgpu-222", 8));
  EXPECT_FALSE(cluster.FitsSomewhere("tencent.com/vgpu-222", 9));
  EXPECT_EQ(replica.Kept(Asking("big", "223", 8), {"b2"}), node0)
      << "b2 is the 222 GPU's last pod now";
  replica.Delete("a2");
  ASSERT_TRUE(cluster.Settle());
  EXPECT_TRUE(cluster.FitsSomewhere("tencent.com/vgpu-222", 16)) << "the emptied GPU takes 222";
}

}  // namespace
}  // namespace kvgpu::testing
