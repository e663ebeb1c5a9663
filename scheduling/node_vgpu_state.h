// The node's vGPU state as the device plugin publishes it for the scheduler extender: a Node
// annotation holding one JSON document (docs/scheduler-extender.md says why an annotation). This
// is the one definition of that format; the plugin writes it and the extender reads it with the
// functions below, and nothing else builds or parses it.
//
//   {"version": 1, "node": "gpu-node-1", "generation": 12, "publishedUnixMs": 1764130000000,
//    "policy": "pack",
//    "gpus": [{"id": "0000:3b:00.0", "oneType": true, "lockedType": "nvidia-222",
//              "resources": {"tencent.com/vgpu-222": {"type": "nvidia-222", "used": 2,
//                                                     "free": 14}}}],
//    "holders": ["ml/train-0"],
//    "unattributed": {"tencent.com/vgpu-222": 1}}
//
// `holders` are the pods whose vGPUs the plugin has made and attributed; `unattributed` counts
// vGPUs made for pods the plugin has not yet learned (kubelet's PodResources tells it within
// seconds). A pod bound to the node and in neither is still waiting for its vGPUs.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduling/gpu_fit.h"

namespace kvgpu::scheduling {

inline constexpr const char* kNodeStateAnnotation = "kvgpu.tencent.com/vgpu-state";
inline constexpr int kNodeStateVersion = 1;

struct NodeVgpuState {
  int version = kNodeStateVersion;
  std::string node;
  // Raised by the publishing plugin with every document it writes (restarts from 1 with the
  // plugin; readers compare it only with what the same plugin wrote before).
  uint64_t generation = 0;
  int64_t published_unix_ms = 0;
  Policy policy = Policy::kPack;
  std::vector<GpuSlots> gpus;
  std::set<std::string> holders;                 // "namespace/name"
  std::map<std::string, uint32_t> unattributed;  // resource -> vGPUs

  // Equal in what the node offers: generation and time aside (the publisher's change test).
  bool SameContent(const NodeVgpuState& other) const;
};

std::string RenderNodeState(const NodeVgpuState& state);
// Strict: an unknown version, a missing or mistyped field, or counts that do not add up are
// kInvalid with the field named; such a node is failed by the extender, never guessed at.
Result<NodeVgpuState> ParseNodeState(const std::string& text);

}  // namespace kvgpu::scheduling
