// Whether kube-scheduler's preemption candidates make room for a vGPU pod (preemptVerb).
// kube-scheduler picks each node's victims by its own filters alone, which count vGPUs per
// resource and know nothing of what locks a GPU; the extender keeps a node only when its own fit
// (node_fit.h) says the pod's vGPUs fit once the victims are gone.
//
// The published state says which pods hold vGPUs on a node (`holders`), not on which GPU. So the
// node after the victims is modelled without guessing where their vGPUs are:
//  - a victim bound but not yet given its vGPUs no longer takes any;
//  - a holder's vGPUs of a resource go back as free room of that resource on the GPUs carrying
//    it (for the pod's vGPUs of that resource, which GPU gets the room does not change the fit);
//  - a GPU is unlocked only when the victims take every vGPU of ours off every GPU sharing its
//    lock, so it is free wherever their vGPUs were; it then offers each resource the room that
//    resource has on a free GPU of the node, or on one its type holds (a node's GPUs are taken to
//    be one model, as the published state does not name it).
// Only GPUs whose lock rule is modelled (strict, equal-size) get room back; a resource also on a
// GPU of another occupancy gets none, since there only the kernel's counts are believed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "extender/cluster_view.h"
#include "extender/node_fit.h"
#include "scheduling/node_vgpu_state.h"

namespace kvgpu::extender {

struct NodeWithout {
  scheduling::NodeVgpuState state;
  std::vector<BoundPod> bound;
};

// The node once `victims` (pods bound to it, by UID) are gone, as above.
NodeWithout WithoutVictims(const scheduling::NodeVgpuState& state,
                           const std::vector<BoundPod>& bound,
                           const std::vector<BoundPod>& victims);

// kFits: keep the node as a candidate - the pod's vGPUs fit there already (the victims are for
// what kube-scheduler counts), or they fit once the victims are gone. Otherwise the verdict says
// why not: no state or no GPU offering the type (kUnresolvable), or no room even without the
// victims (kFull).
NodeVerdict JudgePreemption(const Result<scheduling::NodeVgpuState>* state,
                            const std::vector<BoundPod>& bound,
                            const std::vector<BoundPod>& victims, const std::string& pod_uid,
                            const std::vector<scheduling::Demand>& pod_demand, int64_t now_unix_ms,
                            const FitOptions& options);

}  // namespace kvgpu::extender
