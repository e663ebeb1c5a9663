// What the decision for one Pod CREATE (pod_mutator.h) comes to: leave the pod alone, deny it, or
// the JSON Patch that makes its vGPU work inside Kata. Apart from the decision itself, so the patch
// builders (pod_patch.cpp) return it without including pod_mutator.h.
#pragma once

#include <string>
#include <vector>

namespace kvgpu::webhook {

// Why a pod was let through unchanged, was denied, or was mutated (a metrics label each).
enum class PodOutcome {
  kNoVgpu,  // no container asks for a configured vGPU resource
  kExcludedNamespace,
  kOptedOut,
  kAlreadyInjected,  // marker annotation present, or the injected volumes and containers are
                     // (re-invocation, repeated admission, marker removed)
  kCompleted,        // marker present, and a vGPU container added since got the workload mounts/env
  kMutated,
  kDenied,
};

struct PodDecision {
  PodOutcome outcome = PodOutcome::kNoVgpu;
  bool allowed = true;
  std::string message;                // why it was denied
  std::string patch;                  // the JSON Patch document (text) when mutated
  std::vector<std::string> warnings;  // shown to the pod author by kubectl
};

}  // namespace kvgpu::webhook
