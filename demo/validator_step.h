// The demo's last step: kvgpu-validator's flow (validator/) run against the demo's node, as its
// DaemonSet runs it. The demo plays kubelet and the Kata guest for the probe pod: kubelet admits
// it through the real plugin (a real simulated vGPU is made), and the guest's script runs here
// with stand-ins for nvidia-smi and the CUDA sample whose outputs follow NVIDIA's documented
// formats (tests/validator/data/README.md).
#pragma once

#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fakes/cluster/fake_node.h"
#include "fakes/cluster/sim_mount.h"
#include "validator/validator.h"

namespace kvgpu::demo {

struct ValidatorStepInputs {
  testing::FakeNode* node;
  testing::SimMount* sim;
  std::filesystem::path vgpuctl;
  std::filesystem::path state_file;  // the plugin's
  std::filesystem::path scratch;     // where the doctor's node tree is laid out
  std::filesystem::path standins;    // bin/nvidia-smi, bin/vectorAdd and their fixtures
};

// The Node as kubelet and kube-apiserver keep it once the plugin registered: a uid, the
// kata-vgpu.io/vgpu-mode label, the plugin's resources allocatable, Ready. Annotations stay.
void PublishNode(testing::FakeNode& node, const std::string& name);

// kubelet and the Kata guest for the validator's probe pods on `node` (its API server's pod
// hooks, while this lives): kubelet admits each through the real plugin, the guest runs the pod's
// script with the stand-ins in `standins` (bin/nvidia-smi, bin/vectorAdd, their fixtures) and its
// output becomes the pod's log. Each pod on a thread of its own (the request that created it must
// return first); joined when this goes away. Also used by tests/monitoring's workload, which runs
// kvgpu-validator the program against it.
class ProbeKubelet {
 public:
  ProbeKubelet(testing::FakeNode& node, std::filesystem::path standins);
  ~ProbeKubelet();
  ProbeKubelet(const ProbeKubelet&) = delete;
  ProbeKubelet& operator=(const ProbeKubelet&) = delete;

 private:
  void Created(const nlohmann::json& pod);

  testing::FakeNode& node_;
  std::filesystem::path standins_;
  std::mutex mutex_;
  std::vector<std::thread> pods_;
};

// Runs the flow and records it on the Node; the outcome, or an error when it could not run.
Result<validator::Outcome> RunValidator(const ValidatorStepInputs& in, const std::string& node);

}  // namespace kvgpu::demo
