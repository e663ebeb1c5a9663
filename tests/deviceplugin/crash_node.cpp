#include "tests/deviceplugin/crash_node.h"

#include <algorithm>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <thread>

namespace kvgpu::testing {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

// Fast enough that a test sees removals within a second or two, the rest as deployed.
constexpr const char* kConfig =
    "udevEvents: false\n"
    "rescanInterval: 200ms\n"
    "lifecycle:\n"
    "  gracePeriod: 0s\n"
    "  pollInterval: 200ms\n"
    "  retryMax: 1s\n";

// t4x2 offers 12 types (T4-1B ... T4-16Q), each its own resource.
constexpr size_t kResources = 12;

}  // namespace

std::optional<std::string> CrashNode::Start() {
  if (auto reason = FuseUnavailableReason()) return reason;
  sim_ = std::make_unique<SimMount>(KVGPU_SIM_PATH, "t4x2", dir_.path() / "sim");
  fs::create_directories(dir_.path() / "sim");
  if (auto failed = sim_->Mount()) return failed;
  const fs::path kubelet_dir = dir_.path() / "kubelet";
  fs::create_directories(kubelet_dir / "device-plugins");
  fs::create_directories(kubelet_dir / "pod-resources");
  fs::create_directories(state_dir());
  kubelet_ = std::make_unique<FakeKubelet>(kubelet_dir / "device-plugins");
  podresources_ =
      std::make_unique<FakePodResources>(kubelet_dir / "pod-resources" / "kubelet.sock");
  checkpoint_ = std::make_unique<CheckpointWriter>(kubelet_dir);
  if (!kubelet_->Start()) return "the fake kubelet cannot serve Registration";
  if (!podresources_->Start()) return "the fake kubelet cannot serve PodResources";
  std::ofstream(dir_.path() / "plugin.yaml") << kConfig;
  plugin_ = std::make_unique<ChildProcess>(std::vector<std::string>{}, dir_.path() / "plugin.log");
  return std::nullopt;
}

CrashNode::~CrashNode() {
  // The plugin first (it holds the mount's files open), then kubelet, then the GPUs.
  plugin_.reset();
  podresources_.reset();
  kubelet_.reset();
  sim_.reset();
}

std::optional<std::string> CrashNode::StartPlugin(const std::string& failpoints) {
  std::vector<std::string> argv;
  if (!failpoints.empty()) argv = {"/usr/bin/env", "KVGPU_FAILPOINTS=" + failpoints};
  argv.insert(argv.end(),
              {KVGPU_DEVICE_PLUGIN_PATH, "--sysfs-root", sim_->mount().string(), "--kubelet-dir",
               (dir_.path() / "kubelet").string(), "--state-dir", state_dir().string(),
               "--node-name", "node-1", "--config", (dir_.path() / "plugin.yaml").string()});
  plugin_->set_argv(std::move(argv));
  const size_t before = kubelet_->Registrations().size();
  if (!plugin_->Start()) return plugin_->error();
  const bool ready = WaitFor(
      [&] {
        if (!plugin_->Running()) return true;
        if (kubelet_->Registrations().size() < before + kResources) return false;
        const auto connected = kubelet_->ConnectedResources();
        return connected.size() == kResources &&
               std::all_of(connected.begin(), connected.end(),
                           [&](const auto& r) { return kubelet_->Updates(r) > 0; });
      },
      10s);
  if (ready && plugin_->Running()) return std::nullopt;
  return "kvgpu-device-plugin did not register its " + std::to_string(kResources) +
         " resources:\n" + plugin_->Log();
}

std::optional<int> CrashNode::WaitPluginExit(std::chrono::milliseconds timeout) {
  return plugin_->Wait(timeout);
}

std::optional<std::string> CrashNode::RunPod(const std::string& name, const std::string& gpu,
                                             CrashPod* pod) {
  std::string device_id;
  for (const auto& [id, health] : kubelet_->Devices(kT4_1B)) {
    const bool held = std::any_of(running_.begin(), running_.end(),
                                  [&](const CrashPod& p) { return p.device_id == id; });
    if (health == "Healthy" && id.starts_with(gpu + "-") && !held) {
      device_id = id;
      break;
    }
  }
  if (device_id.empty()) return "no healthy free device of " + std::string(kT4_1B) + " on " + gpu;
  v1beta1::AllocateResponse response;
  grpc::Status status = kubelet_->Allocate(kT4_1B, {{device_id}}, &response);
  if (!status.ok()) return "Allocate: " + status.error_message();
  const auto& envs = response.container_responses(0).envs();
  auto uuids = envs.find("KVGPU_VGPU_222_UUIDS");
  if (uuids == envs.end()) return "Allocate answered without KVGPU_VGPU_222_UUIDS";
  *pod = CrashPod{"uid-" + name, name, device_id, uuids->second,
                  response.container_responses(0).SerializeAsString()};
  running_.push_back(*pod);
  checkpoint_records_.push_back({pod->uid, "main", kT4_1B, {device_id}, -1, pod->alloc_response});
  Publish();
  return std::nullopt;
}

void CrashNode::DeletePod(const std::string& name) {
  std::erase_if(running_, [&](const CrashPod& p) { return p.name == name; });
  Publish();
}

void CrashNode::Publish() {
  std::vector<kubelet::PodResources> listed;
  for (const CrashPod& pod : running_) {
    listed.push_back({"default", pod.name, {{"main", {{kT4_1B, {pod.device_id}}}}}});
  }
  std::map<std::string, std::vector<std::string>> registered;
  for (const auto& [resource, ids] : Advertised()) {
    registered[resource].assign(ids.begin(), ids.end());
  }
  // The checkpoint first: kubelet writes it in Allocate, before the container starts.
  checkpoint_->Write(checkpoint_records_, registered);
  podresources_->SetPods(std::move(listed));
}

bool CrashNode::RestartKubelet(std::chrono::milliseconds empty_for) {
  podresources_->Stop();
  podresources_->SetPods({});
  if (!kubelet_->Restart() || !podresources_->Start()) return false;
  std::this_thread::sleep_for(empty_for);
  Publish();
  return true;
}

std::optional<std::string> CrashNode::CreateForeign(const std::string& gpu, const std::string& type,
                                                    std::string* uuid) {
  static int made = 0;
  std::ostringstream text;
  text << "0f0e1a2b-0000-4000-8000-" << std::setw(12) << std::setfill('0') << ++made;
  *uuid = text.str();
  const fs::path create =
      sim_->mount() / "sys" / "class" / "mdev_bus" / gpu / "mdev_supported_types" / type / "create";
  std::ofstream out(create);
  out << *uuid << "\n" << std::flush;
  if (!out) return "writing " + create.string() + " failed";
  return std::nullopt;
}

std::vector<SimVgpu> CrashNode::Vgpus() const {
  std::vector<SimVgpu> out;
  std::istringstream lines(sim_->State());
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string kind, flag;
    SimVgpu vgpu;
    words >> kind >> vgpu.uuid >> vgpu.parent >> vgpu.type >> flag;
    if (kind != "vgpu") continue;
    vgpu.busy = flag == "busy";
    out.push_back(vgpu);
  }
  return out;
}

std::set<std::string> CrashNode::VgpuUuids() const {
  std::set<std::string> out;
  for (const SimVgpu& vgpu : Vgpus()) out.insert(vgpu.uuid);
  return out;
}

bool CrashNode::WaitForVgpus(const std::set<std::string>& uuids,
                             std::chrono::milliseconds timeout) const {
  return WaitFor([&] { return VgpuUuids() == uuids; }, timeout);
}

std::map<std::string, std::set<std::string>> CrashNode::Advertised() const {
  std::map<std::string, std::set<std::string>> out;
  for (const auto& resource : kubelet_->ConnectedResources()) {
    for (const auto& [id, health] : kubelet_->Devices(resource)) out[resource].insert(id);
  }
  return out;
}

std::string CrashNode::Logs() const {
  std::string out = "--- kvgpu-device-plugin log ---\n";
  if (plugin_) out += plugin_->Log();
  if (sim_)
    out +=
        "--- kvgpu-sim log ---\n" + sim_->process().Log() + "--- sim state ---\n" + sim_->State();
  return out;
}

}  // namespace kvgpu::testing
