#include "demo/node_demo.h"

#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "common/cross_program.h"
#include "demo/narration.h"
#include "demo/pod_view.h"
#include "demo/validator_step.h"
#include "kube/node.h"
#include "validator/record.h"

namespace kvgpu::demo {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::NodeResource;

namespace {

constexpr const char* kPod = "cuda-vectoradd";
constexpr size_t kResources = 12;  // the T4's types

// The plugin with its pod lifecycle on, removing a pod's vGPU as soon as the pod is gone. The
// simulator sends no uevents: rescans (1 s) and the lifecycle's PodResources polls (200 ms) are
// how the plugin sees changes it did not make itself.
constexpr const char* kPluginConfig =
    "resourceDomain: tencent.com\n"
    "udevEvents: false\n"
    "rescanInterval: 1s\n"
    "lifecycle:\n"
    "  gracePeriod: 0s\n"
    "  pollInterval: 200ms\n";

const NodeResource* Find(const std::vector<NodeResource>& resources, const std::string& name) {
  for (const auto& r : resources) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

std::string Describe(const std::vector<NodeResource>& resources) {
  std::ostringstream out;
  for (const auto& r : resources) {
    out << r.name << " " << r.capacity << "/" << r.allocatable << "/" << r.allocated << "; ";
  }
  return out.str();
}

// The Allocatable section of `kubectl describe node`, with what each value was at step a).
std::string AllocatableAgainst(const std::vector<NodeResource>& now,
                               const std::vector<NodeResource>& before) {
  std::ostringstream out;
  out << "Allocatable:                  (at step a)\n";
  for (const auto& r : now) {
    const NodeResource* then = Find(before, r.name);
    std::string line = "  " + r.name + ":  " + std::to_string(r.allocatable);
    line.resize(std::max<size_t>(line.size(), 30), ' ');
    if (then != nullptr && then->allocatable != r.allocatable) {
      line += "(" + std::to_string(then->allocatable) + ")";
    }
    if (r.allocated > 0) line += "  " + std::to_string(r.allocated) + " allocated";
    line.erase(line.find_last_not_of(' ') + 1);
    out << line << "\n";
  }
  return out.str();
}

// A Kata pod asking for one vGPU, as its author writes it.
nlohmann::json UserPod(const std::string& resource) {
  auto pod = nlohmann::json::parse(R"({
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "cuda-vectoradd", "namespace": "default"},
    "spec": {
      "runtimeClassName": "kata-vgpu",
      "restartPolicy": "OnFailure",
      "containers": [{
        "name": "cuda",
        "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
        "resources": {"limits": {}}
      }]
    }
  })");
  pod["spec"]["containers"][0]["resources"]["limits"][resource] = "1";
  return pod;
}

}  // namespace

NodeDemo::NodeDemo(Programs programs) : programs_(std::move(programs)) {}

NodeDemo::~NodeDemo() {
  Teardown();
}

void NodeDemo::Teardown() {
  std::call_once(teardown_once_, [this] {
    // Daemons first (the plugin may still be removing a vGPU), then the node they talk to,
    // then the simulated sysfs under them.
    if (webhook_) webhook_->process().Stop();
    if (plugin_) plugin_->process().Stop();
    node_.reset();
    if (sim_) sim_->Unmount();
    if (dir_.empty()) return;
    if (keep_dir_) {
      std::cerr << "demo: logs kept in " << dir_.string() << "\n";
    } else if (!testing::IsMountPoint(dir_ / "node")) {  // never delete through a mount
      std::error_code ignored;
      fs::remove_all(dir_, ignored);
    }
  });
}

void NodeDemo::Interrupt() {
  interrupted_ = true;
  for (const auto& child : children_) {
    const pid_t pid = child.load();
    if (pid > 0) ::kill(pid, SIGTERM);
  }
}

void NodeDemo::Started(size_t child, pid_t pid) {
  if (pid <= 0) return;  // not started; kill() would take 0 and -1 as process groups
  children_.at(child) = pid;
  // A signal that came before the pid was known.
  if (interrupted_ && pid > 0) ::kill(pid, SIGTERM);
}

std::string NodeDemo::Vgpuctl(const std::string& command) {
  const fs::path log = dir_ / "vgpuctl.out";
  fs::remove(log);
  testing::ChildProcess vgpuctl(
      {programs_.vgpuctl.string(), "--sysfs-root", sim_->mount().string(), command}, log);
  Check(vgpuctl.Start(), "vgpuctl to start", vgpuctl.error());
  const auto code = vgpuctl.Wait(10s);
  Check(code == 0, "vgpuctl " + command + " to exit 0", vgpuctl.Log());
  std::cout << "\n$ vgpuctl --sysfs-root " << sim_->mount().string() << " " << command << "\n"
            << vgpuctl.Log();
  return vgpuctl.Log();
}

void NodeDemo::Start() {
  Step("A simulated node with two NVIDIA T4 GPUs");
  std::string pattern = (fs::temp_directory_path() / "kvgpu-demo-XXXXXX").string();
  Check(::mkdtemp(pattern.data()) != nullptr,
        "a scratch directory under " + fs::temp_directory_path().string());
  dir_ = fs::canonical(pattern);
  sim_ = std::make_unique<testing::SimMount>(programs_.sim, "t4x2", dir_);
  sim_->process().set_own_process_group(true);
  auto mounted = sim_->Mount();
  Started(0, sim_->process().pid());
  if (mounted) throw CheckFailed("kvgpu-sim to mount: " + *mounted);
  Say("kvgpu-sim serves a sysfs tree of 2 x Tesla T4 (vGPU host driver) at " +
      sim_->mount().string() + ";\nthe daemons below use it through --sysfs-root, nothing else " +
      "changes for them.");

  node_ = std::make_unique<testing::FakeNode>(dir_ / "kubelet", kNode);
  const auto started = node_->Start();
  Check(started.ok(), "the fake kubelet and API server to start", started.error);
  Say("Playing kubelet (" + (dir_ / "kubelet").string() + ") and the API server (" +
      node_->api().url() + ").");

  plugin_ = std::make_unique<testing::PluginProcess>(programs_.device_plugin, sim_->mount(),
                                                     dir_ / "plugin", *node_, kPluginConfig);
  plugin_->process().set_own_process_group(true);
  auto registered = plugin_->Start(*node_, kResources);
  Started(1, plugin_->process().pid());
  if (auto failed = registered) {
    throw CheckFailed("kvgpu-device-plugin to register " + std::to_string(kResources) +
                      " resources: " + *failed);
  }
  std::string command;
  for (const auto& arg : plugin_->process().argv()) command += " " + arg;
  Say("Started kvgpu-device-plugin (pid " + std::to_string(plugin_->process().pid()) +
      "):" + command);

  webhook_ = std::make_unique<testing::WebhookProcess>(programs_.webhook, dir_ / "webhook");
  webhook_->process().set_own_process_group(true);
  auto serving = webhook_->Start();
  Started(2, webhook_->process().pid());
  if (serving) throw CheckFailed("kvgpu-webhook to serve: " + *serving);
  Say("Started kvgpu-webhook (pid " + std::to_string(webhook_->process().pid()) +
      ") on https://127.0.0.1:" + std::to_string(webhook_->port()) +
      " with a certificate made just now.");
}

void NodeDemo::ShowCapacity() {
  Step("a) The node's vGPU capacity, as `kubectl describe node " + std::string(kNode) +
       "` shows it");
  Say("The plugin registered one resource per vGPU type and listed a device per vGPU the GPUs\n"
      "can still create:");
  initial_ = node_->Resources();
  Indented(node_->DescribeResources());
  const NodeResource* wanted = Find(initial_, resource_);
  Check(initial_.size() == kResources && wanted != nullptr && wanted->allocatable == 2 * kPerGpu &&
            wanted->allocated == 0,
        std::to_string(kResources) + " resources, " + resource_ + " with " +
            std::to_string(2 * kPerGpu) + " allocatable",
        Describe(initial_));
}

void NodeDemo::AdmitPod() {
  Step("b) A Kata pod asks for one vGPU; the API server sends it to the webhook");
  const nlohmann::json pod = UserPod(resource_);
  Say("The pod as its author wrote it:");
  Indented(ToYaml(pod));

  const auto client = webhook_->client();
  const auto answer = client.Review(pod, "3d5a1e07-6f0b-4c1e-9a4f-1f2c3b4d5e6f");
  Check(answer.ok() && answer.allowed && answer.patch.is_array() && !answer.patch.empty(),
        "the webhook to allow the pod with a JSON Patch",
        answer.error.empty() ? answer.message : answer.error);
  admitted_pod_ = ApplyAnswer(pod, answer);
  Say("AdmissionReview over HTTPS: allowed, with a JSON Patch of " +
      std::to_string(answer.patch.size()) + " operations. The pod as stored:");
  std::cout << UnifiedDiff(ToYaml(pod), ToYaml(admitted_pod_), "pod (submitted)",
                           "pod (after kvgpu-webhook)", dir_);

  // What the patch must have done for the pod to work in its VM.
  std::vector<std::string> init_names;
  for (const auto& c : admitted_pod_["spec"].value("initContainers", nlohmann::json::array())) {
    init_names.push_back(c.value("name", ""));
    Check(!c.value("resources", nlohmann::json::object())
               .value("limits", nlohmann::json::object())
               .contains(resource_),
          "injected containers not to ask for " + resource_);
  }
  Check(init_names.size() == 2 && init_names[0] == "kvgpu-driver-init" &&
            init_names[1] == "nvidia-gridd",
        "init containers kvgpu-driver-init and nvidia-gridd", admitted_pod_.dump());

  auto plain = pod;
  plain["metadata"]["name"] = "cuda-runc";
  plain["spec"].erase("runtimeClassName");
  const auto denied = client.Review(plain, "0c1d2e3f-4a5b-4c6d-8e7f-8a9b0c1d2e3f");
  Check(denied.ok() && !denied.allowed, "a vGPU pod without runtimeClassName to be denied",
        denied.error.empty() ? "allowed" : denied.error);
  Say("\nThe same pod without runtimeClassName is denied:\n  " + denied.message);
}

void NodeDemo::AllocatePod() {
  Step("c) The pod is scheduled to " + std::string(kNode) + "; kubelet allocates its vGPU");
  const auto ran = node_->RunPod(admitted_pod_);
  Check(ran.ok(), "kubelet to admit the pod", ran.error);
  const auto ids = node_->DevicesOf(kNamespace, kPod, resource_);
  Check(ids.size() == 1, "one device for the pod");
  device_id_ = ids[0];
  gpu_ = device_id_.substr(0, device_id_.find("-nvidia-"));
  Say("kubelet picked " + device_id_ +
      " (GetPreferredAllocation), called Allocate, recorded it in "
      "PodResources\nand its checkpoint; the pod is Running. The plugin created the vGPU:");
  const std::string listed = Vgpuctl("list");
  Check(listed.find(gpu_) != std::string::npos && listed.find(kType) != std::string::npos,
        "a " + std::string(kType) + " vGPU on " + gpu_ + " in vgpuctl list", listed);

  // Time-sliced vGPU: the GPU is now locked to this type, the plugin pushes shorter lists.
  const bool withdrawn = testing::WaitFor(
      [&] {
        const auto now = node_->Resources();
        for (const auto& before : initial_) {
          const NodeResource* after = Find(now, before.name);
          if (after == nullptr) return false;
          const bool same_type = before.name == resource_;
          if (same_type && (after->allocatable != before.allocatable || after->allocated != 1)) {
            return false;
          }
          if (!same_type && after->allocatable * 2 != before.allocatable) return false;
        }
        return true;
      },
      5s);
  Say("\n" + gpu_ + " now serves " + std::string(kType) +
      " only: the plugin withdrew the other types from it, they\nremain on the other GPU:");
  Indented(AllocatableAgainst(node_->Resources(), initial_));
  Check(withdrawn,
        "every other type halved (one GPU left for them) and " + resource_ + " 1 allocated",
        Describe(node_->Resources()));
}

void NodeDemo::DeletePod() {
  Step("d) The pod is deleted; the plugin removes its vGPU");
  const auto deleted = node_->DeletePod(kNamespace, kPod);
  Check(deleted.ok(), "the pod to be deleted", deleted.error);
  Say("The API server sent DELETED for " + std::string(kNamespace) + "/" + kPod +
      " and kubelet dropped it from PodResources.");
  const bool removed =
      testing::WaitFor([&] { return sim_->State().find("\nvgpu ") == std::string::npos; }, 10s);
  Check(removed, "the plugin to remove the vGPU (lifecycle.gracePeriod: 0s)", sim_->State());
  Vgpuctl("list");
  const bool back = testing::WaitFor(
      [&] {
        const auto now = node_->Resources();
        if (now.size() != initial_.size()) return false;
        for (size_t i = 0; i < now.size(); ++i) {
          if (now[i].name != initial_[i].name || now[i].capacity != initial_[i].capacity ||
              now[i].allocatable != initial_[i].allocatable || now[i].allocated != 0) {
            return false;
          }
        }
        return true;
      },
      5s);
  Say("\nEvery type is back on both GPUs:");
  Indented(AllocatableAgainst(node_->Resources(), initial_));
  Check(back, "the capacity of step a) again", Describe(node_->Resources()));
}

void NodeDemo::ValidateNode() {
  Step("e) kvgpu-validator proves a vGPU works in a Kata pod here, and says so on the Node");
  Say("As its DaemonSet runs it (docs/validator.md): vgpuctl doctor, then a Kata pod of the\n"
      "node's smallest vGPU type that runs nvidia-smi -q and vectorAdd in its guest. This demo\n"
      "plays that guest with stand-ins printing NVIDIA's documented output formats.\n");
  auto outcome = RunValidator({node_.get(), sim_.get(), programs_.vgpuctl, plugin_->state_file(),
                               dir_, programs_.validator_standins},
                              kNode);
  Check(outcome.ok(), "the validator to run", outcome.ok() ? "" : outcome.status().ToString());
  for (const auto& step : outcome->steps) {
    char head[48];
    std::snprintf(head, sizeof head, "  %-9s %-7s %5.2f s  ", validator::StepName(step.step),
                  step.ok ? "passed" : "FAILED", std::chrono::duration<double>(step.took).count());
    Say(head + step.message);
  }
  const auto node = kube::ParseNode(node_->api().node(kNode));
  Check(node.ok(), "the Node to be readable");
  const auto* condition = node->Condition(validator::kConditionType);
  const auto label = node->labels.find(validator::kValidatedLabel);
  Check(condition != nullptr && label != node->labels.end(), "the condition and label on the Node");
  Say("\nOn the Node (`kubectl describe node " + std::string(kNode) + "`): condition " +
      condition->type + "=" + condition->status + " (" + condition->reason + "), label " +
      label->first + "=" + label->second + ", and an Event " +
      node_->api().events().back().value("reason", "") + ".");
  Check(outcome->validated() && condition->status == "True" && label->second == "true",
        "the node validated",
        outcome->failed() == nullptr ? condition->message : outcome->failed()->message);
  Check(sim_->State().find("\nvgpu ") == std::string::npos, "the probe pod's vGPU gone",
        sim_->State());
}

int NodeDemo::Run() {
  const auto began = std::chrono::steady_clock::now();
  resource_ =
      std::string(kVgpuResourcePrefix) + std::string(kType).substr(std::string("nvidia-").size());
  if (auto reason = testing::FuseUnavailableReason()) {
    std::cerr << "demo: the simulated node needs FUSE: " << *reason << "\n";
    return 1;
  }
  try {
    Start();
    ShowCapacity();
    AdmitPod();
    AllocatePod();
    DeletePod();
    ValidateNode();
    SwitchToDra();
    AllocateClaim();
    PrepareClaim();
    UnprepareClaim();
  } catch (const std::exception& failed) {
    if (interrupted_) {
      Teardown();
      std::cerr << "demo: interrupted; the node is stopped and unmounted\n";
      return 130;
    }
    std::cerr << "\ndemo: FAILED: " << failed.what() << "\n";
    keep_dir_ = !dir_.empty();
    Teardown();
    return 1;
  }
  Teardown();
  if (interrupted_) return 130;
  const auto seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  std::ostringstream took;
  took.precision(1);
  took << std::fixed << seconds;
  Step("Done in " + took.str() + " s: every step showed what it should");
  return 0;
}

}  // namespace kvgpu::demo
