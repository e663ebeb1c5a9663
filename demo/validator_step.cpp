#include "demo/validator_step.h"

#include <spdlog/spdlog.h>

#include <mutex>
#include <thread>
#include <vector>

#include "fakes/common/child_process.h"
#include "scheduling/node_vgpu_state.h"
#include "sim/host_software.h"
#include "sim/kernel_model.h"
#include "validator/command.h"
#include "validator/record.h"

namespace kvgpu::demo {

using namespace std::chrono_literals;

// The Node as kubelet reports it once the plugin registered: its resources allocatable, the
// node labelled for mdev vGPU pods (docs/first-node.md). The plugin's annotation stays.
void PublishNode(testing::FakeNode& node, const std::string& name) {
  nlohmann::json object = node.api().node(name);
  object["metadata"]["name"] = name;
  // kube-apiserver gives every Node a uid; the DRA act's ResourceSlices name their Node owner by
  // it, and the daemon publishes none without it.
  if (!object["metadata"].contains("uid")) {
    object["metadata"]["uid"] = "6b0e5c8a-1d2f-4e3a-9b7c-5d4e3f2a1b0c";
  }
  object["metadata"]["labels"]["kata-vgpu.io/vgpu-mode"] = "mdev";
  nlohmann::json allocatable = {{"cpu", "8"}};
  for (const auto& resource : node.Resources()) {
    allocatable[resource.name] = std::to_string(resource.allocatable);
  }
  object["status"] = {{"allocatable", allocatable},
                      {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}};
  node.api().SetNode(std::move(object));
}

ProbeKubelet::ProbeKubelet(testing::FakeNode& node, std::filesystem::path standins)
    : node_(node), standins_(std::move(standins)) {
  node_.api().SetPodHooks(
      {[this](const nlohmann::json& pod) { Created(pod); },
       [this](const std::string& ns, const std::string& name) { node_.DeletePod(ns, name); }});
}

ProbeKubelet::~ProbeKubelet() {
  node_.api().SetPodHooks({});
  std::lock_guard lock(mutex_);
  for (auto& pod : pods_) pod.join();
}

void ProbeKubelet::Created(const nlohmann::json& pod) {
  std::lock_guard lock(mutex_);
  pods_.emplace_back([this, pod] {
    if (!node_.AdmitPod(pod).ok()) return;  // AdmitPod set it Failed
    const auto& command = pod["spec"]["containers"][0]["command"];
    auto run = validator::RunCommand(
        {"env", "PATH=" + (standins_ / "bin").string() + ":/usr/bin:/bin",
         "KVGPU_FAKE_SMI_OUTPUT=" + (standins_ / "nvidia-smi-q-licensed.txt").string(),
         "KVGPU_FAKE_CUDA=pass", command[0], command[1], command[2]},
        10s);
    const std::string ns = pod["metadata"]["namespace"];
    const std::string name = pod["metadata"]["name"];
    // The phase before the log: once the log is there the validator may delete the pod.
    node_.api().SetPhase(ns, name, "Succeeded");
    node_.api().SetPodLog(ns, name, run.ok() ? run->out : run.status().message());
  });
}

Result<validator::Outcome> RunValidator(const ValidatorStepInputs& in, const std::string& node) {
  // The doctor reads a tree of the same profile with the installed software laid out:
  // kvgpu-sim serves only /sys, and the doctor also reads /opt, /etc and /var/lib.
  auto profile = sim::ProfileByName("t4x2");
  if (!profile.ok()) return profile.status();
  auto model = sim::KernelModel::Create(in.scratch / "host", *profile);
  if (!model.ok()) return model.status();
  if (Status laid = sim::LayOutHostSoftware((*model)->root()); !laid.ok()) return laid;
  PublishNode(*in.node, node);
  // The plugin's vGPU state annotation (resource -> type) lets the validator pick the smallest
  // type; the plugin retries its publication about every second until the Node exists.
  testing::WaitFor(
      [&] {
        return in.node->api()
            .node(node)["metadata"]
            .value("annotations", nlohmann::json::object())
            .contains(scheduling::kNodeStateAnnotation);
      },
      3s);

  kube::Config config = in.node->api().ClientConfig();
  auto api = kube::ApiClient::Create(config);
  if (!api.ok()) return api.status();

  validator::ValidatorOptions options;
  options.node = node;
  options.vgpuctl = in.vgpuctl.string();
  options.host_root = (*model)->root().string();
  options.sysfs_root = in.sim->mount().string();
  options.state_file = in.state_file.string();
  options.guest.nvidia_smi = "nvidia-smi";
  options.guest.cuda_sample = "vectorAdd";
  options.guest.licence_interval = 200ms;
  options.poll = 100ms;
  validator::Outcome outcome;
  {
    // The demo prints the steps itself; the validator's own log lines would repeat them.
    const auto level = spdlog::get_level();
    spdlog::set_level(spdlog::level::warn);
    ProbeKubelet kubelet(*in.node, in.standins);
    outcome = validator::Validator(**api, options).Run();
    spdlog::set_level(level);
  }
  if (Status recorded = validator::RecordOnNode(**api, node, outcome); !recorded.ok()) {
    return recorded;
  }
  return outcome;
}

}  // namespace kvgpu::demo
