// The binds the extenders made to a node and that the node's published vGPU state does not show
// yet, kept on the Node itself (annotation kvgpu.tencent.com/vgpu-binds) and written with the
// Node's resourceVersion as a precondition. kube-scheduler binds asynchronously and calls the
// extender for the next pod before the last bind lands; each extender replica sees the others'
// binds only through the API server. The bind verb reads the Node, checks the pod fits beside
// every recorded bind, and adds its own with a conditional patch: a second replica binding to the
// same node at the same moment gets 409 Conflict and judges again. So binds to one node are
// serialised across replicas, extender restarts and scheduler restarts (the ledger outlives
// them), and no two pods are promised the same GPU (docs/scheduler-extender.md).
//
//   {"version": 1, "binds": [{"uid": "u-1", "pod": "ml/train-0", "atUnixMs": 1764130000000,
//                             "demand": [{"tencent.com/vgpu-222": 1}]}]}
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduling/gpu_fit.h"
#include "scheduling/node_vgpu_state.h"

namespace kvgpu::extender {

inline constexpr const char* kBindLedgerAnnotation = "kvgpu.tencent.com/vgpu-binds";
inline constexpr int kBindLedgerVersion = 1;

struct LedgerEntry {
  std::string uid;
  std::string key;  // "namespace/name"
  int64_t at_unix_ms = 0;
  std::vector<scheduling::Demand> demand;  // per container, as kubelet admits them

  bool operator==(const LedgerEntry&) const = default;
};

std::string RenderBindLedger(const std::vector<LedgerEntry>& entries);
// Strict: anything but the documented shape is kInvalid, naming the field.
Result<std::vector<LedgerEntry>> ParseBindLedger(const std::string& text);

// The entries still needed: younger than `keep_for` (by then every replica's pod watch shows the
// bind) and not yet made on the node (`state` lists the pod among its holders).
std::vector<LedgerEntry> LiveEntries(const std::vector<LedgerEntry>& entries,
                                     const scheduling::NodeVgpuState* state, int64_t now_unix_ms,
                                     std::chrono::milliseconds keep_for);

}  // namespace kvgpu::extender
