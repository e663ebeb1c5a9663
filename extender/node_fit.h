// Whether a pod's vGPUs fit on one node, and how well: the node's published GPUs, minus what the
// pods bound there but not yet given their vGPUs will take, then the pod - each placed by the
// rule the node's plugin follows (scheduling::PlaceDemand). Pure: the caller passes the clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "extender/cluster_view.h"
#include "scheduling/gpu_fit.h"

namespace kvgpu::extender {

struct FitOptions {
  // How the extender scores nodes: pack fills nodes (and GPUs) a type already holds, keeping
  // free GPUs and nodes for other types; spread prefers nodes with the most free GPUs left.
  scheduling::Policy policy = scheduling::Policy::kPack;
  // A state older than this is not trusted: its plugin is down or cannot reach the API server.
  // It must exceed the plugins' heartbeat (schedulerState.heartbeat, 2 minutes by default).
  std::chrono::milliseconds max_state_age{std::chrono::minutes(10)};
};

struct NodeVerdict {
  enum class Kind {
    kFits,
    kFull,          // not now: the GPUs that could serve it are taken (preemption may help)
    kUnresolvable,  // no usable state, or no GPU here offers what the pod asks for
  };
  Kind kind = Kind::kFits;
  std::string reason;  // why it does not fit, for FailedNodes
  int64_t score = 0;   // 0..10 when it fits
};

// `state`: the node's published state, parsed; nullptr when it published none.
NodeVerdict JudgeNode(const Result<scheduling::NodeVgpuState>* state,
                      const std::vector<BoundPod>& bound, const std::string& pod_uid,
                      const std::vector<scheduling::Demand>& pod_demand, int64_t now_unix_ms,
                      const FitOptions& options);
// The same from the annotation's text.
NodeVerdict JudgeNode(const std::optional<std::string>& state_annotation,
                      const std::vector<BoundPod>& bound, const std::string& pod_uid,
                      const std::vector<scheduling::Demand>& pod_demand, int64_t now_unix_ms,
                      const FitOptions& options);

}  // namespace kvgpu::extender
