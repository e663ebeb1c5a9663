// What judging a node reads of it (node_fit.h), as the view (cluster_view.h) keeps it: the vGPU
// pods bound there and its published state with the verdicts reached on it. Apart from
// cluster_view.h so that the fit, which the view calls, need not include the view.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduling/gpu_fit.h"
#include "scheduling/node_vgpu_state.h"

namespace kvgpu::extender {

struct BoundPod {
  std::string uid;
  std::string key;  // "namespace/name"
  std::string node;
  std::vector<scheduling::Demand> demand;  // per container, as kubelet admits them
  uint64_t order = 0;                      // when the view first saw it bound
  // Bound by the extender and not yet seen bound by the watch: counted until the watch shows it,
  // or for kAssumeFor (cluster_view.h) at most (the binding may have failed; kube-scheduler forgets
  // an assumed pod the same way).
  std::optional<std::chrono::steady_clock::time_point> assumed_at;
};

class FitMemo;      // node_fit.h
struct FitSummary;  // node_fit.h

// A node's published state, parsed, and the verdicts reached on it: kept together, so a node
// whose state changes is never judged by a verdict reached on the old one.
struct NodeState {
  std::shared_ptr<const Result<scheduling::NodeVgpuState>> state;  // nullptr: none known
  std::shared_ptr<FitMemo> memo;                                   // nullptr with state
};

// A node as a request judges it (JudgeNode's overload for it, node_fit.h): its watched state, the
// pods bound there, and what the usual verdict reads of the state, copied next to it in the view's
// node table when the state was parsed, so a request reads one entry per node. Raw pointers,
// valid while the ClusterView::Watched that gave them lives.
struct WatchedNode {
  const Result<scheduling::NodeVgpuState>* state = nullptr;  // nullptr: none published
  FitMemo* memo = nullptr;
  const std::vector<BoundPod>* bound = nullptr;  // nullptr: none bound there
  // From `state` when it parsed: its time and placing policy, and FitMemo::Published().
  bool ok = false;
  int64_t published_unix_ms = 0;
  scheduling::Policy policy = scheduling::Policy::kPack;
  const FitSummary* published = nullptr;
};

}  // namespace kvgpu::extender
