// The node's vGPU state as the device plugin publishes it for the scheduler extender: a Node
// annotation holding one JSON document (docs/scheduler-extender.md says why an annotation). This
// is the one definition of that format; the plugin writes it and the extender reads it with the
// functions below, and nothing else builds or parses it.
//
//   {"version": 2, "node": "gpu-node-1", "generation": 12, "publishedUnixMs": 1764130000000,
//    "policy": "pack",
//    (version 3, a mixed-size GPU adds "usedSlots": [{"start": 0, "size": 4}] and per resource
//     "placementSize": 4, "placementIds": [0, 4, ...]; a MIG GPU "gpuInstances": [{"id": 1,
//     "profileId": 19, "vgpuFramebufferMib": 18432, "vgpus": 1}] and per MIG-backed resource
//     "gpuInstanceProfileId": 19, "maxPerGpuInstance": 1)
//    "gpus": [{"id": "0000:3b:00.0", "oneType": true, "lockedType": "nvidia-222",
//              "occupancy": "equal-size", "lock": "framebuffer:1024MiB",
//              "resources": {"tencent.com/vgpu-222": {"type": "nvidia-222", "used": 2,
//                                                     "free": 14, "framebufferMib": 1024}}}],
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

// The upgrade rule (docs/scheduler-extender.md, "Upgrades"): a later version only adds fields,
// and a reader reads the version after its newest as its newest, ignoring what it does not know;
// so the extender reads its newest version N, N-1 and N+1, and the plugin writes by default the
// newest version the previous release's extender reads. The plugin DaemonSet and the extender
// Deployment may then roll in either order.
//   1: the per-type lock (oneType, lockedType). The release before this one reads only 1, so
//      this release still writes 1 unless told every extender reads 2 (nodeStateVersion: 2).
//   2: adds each GPU's occupancy mode and lock key, and each type's framebuffer (the equal-size
//      lock).
//   3: adds the facts of mixed-size and MIG GPUs, where the plugin knows them (each optional):
//      per GPU "usedSlots" [{start, size}] (mixed-size) or "gpuInstances" [{id, profileId,
//      vgpuFramebufferMib, vgpus}] (mig); per resource "placementSize" + "placementIds"
//      (mixed-size) or "gpuInstanceProfileId" + "maxPerGpuInstance" (MIG-backed types). A reader
//      of 2 ignores them and places on those GPUs by the kernel's counts alone, which is safe:
//      it promises nothing else on a GPU once it placed a vGPU there.
inline constexpr int kNodeStateReadMin = 1;
inline constexpr int kNodeStateNewest = 3;
inline constexpr int kNodeStateReadMax = kNodeStateNewest + 1;
inline constexpr int kNodeStateWriteDefault = 1;

struct NodeVgpuState {
  int version = kNodeStateWriteDefault;
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

// Renders `state.version` (1 to 3): earlier versions leave out what they cannot say.
std::string RenderNodeState(const NodeVgpuState& state);
// Strict: a version outside kNodeStateReadMin..kNodeStateReadMax, a missing or mistyped field, or
// counts that do not add up are kInvalid with the field named; such a node is failed by the
// extender, never guessed at. Fields of a later version are ignored.
Result<NodeVgpuState> ParseNodeState(const std::string& text);

}  // namespace kvgpu::scheduling
