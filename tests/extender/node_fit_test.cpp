// Whether a pod fits on a node: no, with the reason, when the node has no usable state (none,
// unreadable, too old) or no GPU offering the type (unresolvable), or when the GPUs that could
// serve it are taken (full) - counting the pods bound there whose vGPUs are not made yet; the
// scores order nodes for pack and spread.
#include "extender/node_fit.h"

#include <gtest/gtest.h>

#include "extender/protocol.h"
#include "tests/extender/node_states.h"

namespace kvgpu::extender {
namespace {

using namespace kvgpu::extender::testing;  // NOLINT(google-build-using-namespace)
using Kind = NodeVerdict::Kind;

const FitOptions kOptions{scheduling::Policy::kPack, std::chrono::minutes(10)};

NodeVerdict Judge(const std::optional<std::string>& state, const scheduling::Demand& pod,
                  const std::vector<BoundPod>& bound = {}, int64_t now = kNow,
                  const FitOptions& options = kOptions) {
  return JudgeNode(state, bound, "pod-uid", {pod}, now, options);
}

BoundPod Bound(const std::string& key, scheduling::Demand demand, uint64_t order = 0) {
  return BoundPod{"uid-" + key, key, "n", {std::move(demand)}, order, std::nullopt};
}

TEST(NodeFitTest, ANodeWithoutUsableStateIsFailedForGoodWithTheReason) {
  NodeVerdict none = Judge(std::nullopt, {{k222, 1}});
  EXPECT_EQ(none.kind, Kind::kUnresolvable);
  EXPECT_NE(none.reason.find("no vGPU state"), std::string::npos);

  NodeVerdict garbled = Judge(std::string("{\"version\": 7}"), {{k222, 1}});
  EXPECT_EQ(garbled.kind, Kind::kUnresolvable);
  EXPECT_NE(garbled.reason.find("version 7"), std::string::npos) << garbled.reason;

  const std::string state = Text(NodeOf({T4("a")}, kNow - 601'000));
  NodeVerdict stale = Judge(state, {{k222, 1}});
  EXPECT_EQ(stale.kind, Kind::kUnresolvable);
  EXPECT_NE(stale.reason.find("601 s old"), std::string::npos) << stale.reason;
  EXPECT_EQ(Judge(Text(NodeOf({T4("a")}, kNow - 600'000)), {{k222, 1}}).kind, Kind::kFits)
      << "exactly at the limit is still fresh";
}

TEST(NodeFitTest, ATypeNoGpuHereOffersIsUnresolvableAndAFullNodeIsFull) {
  const std::string state = Text(NodeOf({T4("a", "223", 8)}));
  NodeVerdict other = Judge(state, {{"tencent.com/vgpu-999", 1}});
  EXPECT_EQ(other.kind, Kind::kUnresolvable);
  // 222 is offered by this node's GPUs in general but the only GPU is locked to 223 and full:
  // the node shows no 222 at all, so no GPU offers it now either.
  EXPECT_EQ(Judge(state, {{k222, 1}}).kind, Kind::kUnresolvable);
  NodeVerdict full = Judge(state, {{k223, 1}});
  EXPECT_EQ(full.kind, Kind::kFull);
  EXPECT_NE(full.reason.find(k223), std::string::npos);
}

TEST(NodeFitTest, OnlyGpusFreeOrLockedToTheTypeCount) {
  // GPU a holds 223 (2 used, 6 free); b is free: 222 fits only on b, 16 at most.
  const std::string state = Text(NodeOf({T4("a", "223", 2), T4("b")}));
  EXPECT_EQ(Judge(state, {{k222, 16}}).kind, Kind::kFits);
  EXPECT_EQ(Judge(state, {{k222, 17}}).kind, Kind::kFull);
  EXPECT_EQ(Judge(state, {{k223, 14}}).kind, Kind::kFits) << "6 on a, 8 on b";
  EXPECT_EQ(Judge(state, {{k223, 15}}).kind, Kind::kFull);
}

TEST(NodeFitTest, PodsBoundButNotYetGivenTheirVgpusTakeTheirsFirst) {
  const std::string state = Text(NodeOf({T4("a"), T4("b")}));
  // A 223 pod bound moments ago will lock one GPU: a second type gets only the other.
  std::vector<BoundPod> bound = {Bound("ml/a", {{k223, 1}})};
  EXPECT_EQ(Judge(state, {{k222, 16}}, bound).kind, Kind::kFits);
  EXPECT_EQ(Judge(state, {{k222, 17}}, bound).kind, Kind::kFull);
  // Two bound 223 pods on a pack policy go to the same GPU; a third type... still one free GPU.
  bound.push_back(Bound("ml/b", {{k223, 1}}, 1));
  EXPECT_EQ(Judge(state, {{k222, 16}}, bound).kind, Kind::kFits);
  // Nine 223s cannot share one GPU (8 each): both GPUs go to 223.
  bound.push_back(Bound("ml/c", {{k223, 7}}, 2));
  EXPECT_EQ(Judge(state, {{k222, 1}}, bound).kind, Kind::kFull);
}

TEST(NodeFitTest, APodWhoseVgpusAreMadeCountsOnceNotTwice) {
  scheduling::NodeVgpuState state = NodeOf({T4("a", "223", 8), T4("b")});
  // ml/a's 8 vGPUs are made and attributed: it is in holders, its bound entry adds nothing.
  state.holders = {"ml/a"};
  std::vector<BoundPod> bound = {Bound("ml/a", {{k223, 8}})};
  EXPECT_EQ(Judge(Text(state), {{k222, 16}}, bound).kind, Kind::kFits);
  // ml/b's vGPU is made but not yet attributed: unattributed covers its bound entry.
  state.gpus[1] = T4("b", "222", 1);
  state.unattributed = {{k222, 1}};
  bound.push_back(Bound("ml/b", {{k222, 1}}, 1));
  EXPECT_EQ(Judge(Text(state), {{k222, 15}}, bound).kind, Kind::kFits);
  EXPECT_EQ(Judge(Text(state), {{k222, 16}}, bound).kind, Kind::kFull);
}

TEST(NodeFitTest, AMemoAnswersOnlyWhatWasAskedOfTheSameWaitingPodsDemandAndPolicy) {
  const Result<scheduling::NodeVgpuState> state = NodeOf({T4("a"), T4("b")});
  FitMemo memo;
  auto judge = [&](uint32_t vgpus, const std::vector<BoundPod>& bound, int64_t now = kNow,
                   const FitOptions& options = kOptions) {
    return JudgeNode(&state, bound, "pod-uid", {{{k222, vgpus}}}, now, options, &memo);
  };
  EXPECT_EQ(judge(17, {}).kind, Kind::kFits) << "16 on one GPU, 1 on the other";
  EXPECT_EQ(judge(17, {}).kind, Kind::kFits) << "remembered";
  // A 223 pod waiting on the node locks a GPU: the verdict reached without it no longer holds.
  EXPECT_EQ(judge(17, {Bound("ml/a", {{k223, 1}})}).kind, Kind::kFull);
  EXPECT_EQ(judge(17, {Bound("ml/a", {{k222, 1}})}).kind, Kind::kFits)
      << "its demand counts: a 222 leaves the GPU to 222";
  EXPECT_EQ(judge(17, {Bound("ml/a", {{k222, 16}})}).kind, Kind::kFull);
  EXPECT_EQ(judge(32, {}).kind, Kind::kFits);
  EXPECT_EQ(judge(33, {}).kind, Kind::kFull) << "another demand";
  const FitOptions spread{scheduling::Policy::kSpread, std::chrono::minutes(10)};
  EXPECT_NE(judge(1, {}).score, judge(1, {}, kNow, spread).score) << "another policy";
  // The age is judged on every call: a remembered verdict does not keep a stale node.
  EXPECT_EQ(judge(17, {}, kNow + 11 * 60'000).kind, Kind::kUnresolvable);
}

TEST(NodeFitTest, ThePodItselfIsNotCountedAsBoundBeforeIt) {
  const std::string state = Text(NodeOf({T4("a")}));
  std::vector<BoundPod> bound = {BoundPod{"pod-uid", "ml/me", "n", {{{k222, 16}}}, 0, {}}};
  EXPECT_EQ(Judge(state, {{k222, 16}}, bound).kind, Kind::kFits);
}

TEST(NodeFitTest, PackPrefersNodesTheTypeHoldsAndSpreadNodesWithFreeGpus) {
  const std::string holds_222 = Text(NodeOf({T4("a", "222", 3), T4("b")}));
  const std::string all_free = Text(NodeOf({T4("a"), T4("b")}));
  const std::string one_left = Text(NodeOf({T4("a", "223", 8), T4("b")}));
  const scheduling::Demand pod = {{k222, 1}};
  const int64_t pack_holds = Judge(holds_222, pod).score;
  const int64_t pack_free = Judge(all_free, pod).score;
  const int64_t pack_last = Judge(one_left, pod).score;
  EXPECT_GT(pack_holds, pack_free) << "no free GPU taken beats taking one";
  EXPECT_GT(pack_last, pack_free) << "between nodes that lose a free GPU, the fuller one";
  EXPECT_LE(pack_holds, kMaxExtenderPriority);
  FitOptions spread = kOptions;
  spread.policy = scheduling::Policy::kSpread;
  EXPECT_GT(Judge(holds_222, pod, {}, kNow, spread).score,
            Judge(one_left, pod, {}, kNow, spread).score);
  EXPECT_EQ(Judge(all_free, pod, {}, kNow, spread).score, 5) << "one of two GPUs left free";
}

}  // namespace
}  // namespace kvgpu::extender
