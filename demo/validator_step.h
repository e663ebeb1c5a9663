// The demo's last step: kvgpu-validator's flow (validator/) run against the demo's node, as its
// DaemonSet runs it. The demo plays kubelet and the Kata guest for the probe pod: kubelet admits
// it through the real plugin (a real simulated vGPU is made), and the guest's script runs here
// with stand-ins for nvidia-smi and the CUDA sample whose outputs follow NVIDIA's documented
// formats (tests/validator/data/README.md).
#pragma once

#include <filesystem>
#include <string>

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

// Runs the flow and records it on the Node; the outcome, or an error when it could not run.
Result<validator::Outcome> RunValidator(const ValidatorStepInputs& in, const std::string& node);

}  // namespace kvgpu::demo
