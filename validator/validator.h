// kvgpu-validator's flow on one node (docs/validator.md): doctor -> schedule -> attach -> driver
// -> licence -> cuda -> cleanup, each bounded; the first step that fails names the result. The
// probe pod is always deleted once made, whatever failed, and its vGPU must be gone from the
// node before the node counts as validated.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/cross_program.h"
#include "kube/api_client.h"
#include "kube/node.h"
#include "validator/guest.h"

namespace kvgpu::validator {

enum class Step { kDoctor, kSchedule, kAttach, kDriver, kLicence, kCuda, kCleanup };
inline constexpr Step kSteps[] = {Step::kDoctor,  Step::kSchedule, Step::kAttach, Step::kDriver,
                                  Step::kLicence, Step::kCuda,     Step::kCleanup};
const char* StepName(Step step);    // "doctor"
const char* StepReason(Step step);  // the condition's reason when it fails: "Doctor"

using std::chrono::milliseconds;

// docs/validator.md's bounds; each flag of the same name sets one.
struct Timeouts {
  milliseconds doctor{30000};
  milliseconds schedule{60000};
  milliseconds attach{180000};
  milliseconds driver{60000};
  milliseconds licence{120000};
  milliseconds cuda{60000};
  milliseconds cleanup{60000};
};

struct ValidatorOptions {
  std::string node;
  std::string namespace_name = "kata-vgpu";
  std::string image = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0";
  std::string vgpuctl = "vgpuctl";
  std::string host_root = "/host";  // the node's / as the validator sees it (read-only)
  std::string sysfs_root;           // vgpuctl list/types root; empty: host_root
  std::string state_file = "/host/var/lib/kata-vgpu/device-plugin-state.json";
  std::string resource_prefix{kVgpuResourcePrefix};
  GuestOptions guest;  // licence_tries is derived from the licence bound and interval
  Timeouts timeouts;
  milliseconds poll{1000};
};

struct StepResult {
  Step step;
  bool ok = false;
  std::string message;
  milliseconds took{0};
};

struct Outcome {
  std::vector<StepResult> steps;  // in the order run; a step not run is absent
  std::string pod;                // "namespace/name" of the probe pod, when one was made

  bool validated() const;
  const StepResult* failed() const;  // the first failed step, or nullptr
};

class Validator {
 public:
  Validator(kube::ApiTransport& api, ValidatorOptions options);
  Outcome Run();

 private:
  struct Verdict {
    bool ok;
    std::string message;
  };
  using Look = std::function<std::optional<Verdict>()>;
  // Calls `look` every poll interval until it decides, or fails the step after `bound` saying
  // what `waiting` holds then.
  Verdict Poll(milliseconds bound, const Look& look, const std::string* waiting);

  Verdict Doctor();
  Verdict Schedule();
  Verdict Attach();
  Verdict Driver();
  Verdict Licence();
  Verdict Cuda();
  Verdict Cleanup();

  Result<std::string> PickResource(const kube::NodeInfo& node);
  std::string PodPath() const;
  // The probe pod's log parsed so far; nullopt while there is none yet.
  std::optional<GuestLog> ReadLog(std::string* waiting);
  // Learns the vGPUs the plugin made for the probe pod (its state file's ownerPod).
  void NoteVgpus();
  struct StateView {
    std::set<std::string> owned;  // ownerPod is the probe pod
    // Made since the probe pod was created and not attributed to any pod yet: the plugin learns
    // a vGPU's pod from kubelet only a pass after Allocate, so until then it may be the probe's.
    std::set<std::string> unattributed;
  };
  StateView ProbeVgpusInState() const;
  Result<std::set<std::string>> VgpusOnNode();

  kube::ApiTransport& api_;
  ValidatorOptions options_;
  std::string pod_name_;
  bool pod_made_ = false;
  int64_t pod_made_unix_ms_ = 0;  // just before the probe pod was created
  std::set<std::string> vgpus_;
};

}  // namespace kvgpu::validator
