#include "fakes/cluster/fake_node.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "kube/kubelet/podresources.h"

namespace kvgpu::testing {

namespace fs = std::filesystem;

namespace {

// A device count from a quantity: "2" or 2. Anything else is not a device request.
int DeviceCount(const nlohmann::json& quantity) {
  if (quantity.is_number_integer()) return quantity.get<int>();
  if (!quantity.is_string()) return 0;
  const std::string text = quantity.get<std::string>();
  if (text.empty() || text.size() > 6 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    return 0;
  }
  return std::stoi(text);
}

// The API server's uid: a random (version 4) UUID.
std::string RandomUid() {
  static std::mutex mutex;
  static std::mt19937_64 random{std::random_device{}()};
  std::lock_guard lock(mutex);
  const std::uint64_t high = (random() & ~0xf000ULL) | 0x4000ULL;
  const std::uint64_t low = (random() & ~(3ULL << 62)) | (2ULL << 62);
  char text[37];
  std::snprintf(text, sizeof text, "%08llx-%04llx-%04llx-%04llx-%012llx",
                static_cast<unsigned long long>(high >> 32),
                static_cast<unsigned long long>((high >> 16) & 0xffff),
                static_cast<unsigned long long>(high & 0xffff),
                static_cast<unsigned long long>(low >> 48),
                static_cast<unsigned long long>(low & 0xffffffffffffULL));
  return text;
}

}  // namespace

FakeNode::FakeNode(fs::path kubelet_dir, std::string node_name)
    : kubelet_dir_(std::move(kubelet_dir)),
      node_name_(std::move(node_name)),
      api_(std::make_unique<FakeApiServer>()),
      kubelet_(std::make_unique<FakeKubelet>(kubelet_dir_ / "device-plugins")),
      pod_resources_(std::make_unique<FakePodResources>(kubelet::PodResourcesSocket(kubelet_dir_))),
      checkpoint_(kubelet_dir_) {
  fs::create_directories(pod_resources_->socket().parent_path());
}

FakeNode::~FakeNode() {
  // The kubelet goes first so that no plugin stream outlives what it reports to.
  kubelet_->Stop();
  pod_resources_->Stop();
  api_->Stop();
}

StepResult FakeNode::Start() {
  if (!api_->Start()) return {"the API server cannot listen on 127.0.0.1"};
  if (!pod_resources_->Start()) {
    return {"PodResources cannot serve " + pod_resources_->socket().string()};
  }
  if (!kubelet_->Start()) return {"kubelet cannot serve " + kubelet_->socket_path().string()};
  // kubelet's device manager has its checkpoint from the start, empty on a fresh node.
  PublishKubeletState();
  return {};
}

void FakeNode::WriteKubeconfig(const fs::path& path) const {
  const fs::path ca = path.parent_path() / "ca.crt";
  std::ofstream(ca) << api_->ca_pem();
  std::ofstream out(path);
  out << "apiVersion: v1\n"
      << "kind: Config\n"
      << "clusters:\n"
      << "- name: fake\n"
      << "  cluster:\n"
      << "    server: " << api_->url() << "\n"
      << "    certificate-authority: " << ca.string() << "\n"
      << "users:\n"
      << "- name: node-agent\n"
      << "  user:\n"
      << "    token: " << FakeApiServer::kToken << "\n"
      << "contexts:\n"
      << "- name: fake\n"
      << "  context: {cluster: fake, user: node-agent}\n"
      << "current-context: fake\n";
}

std::vector<std::string> FakeNode::HeldDevices(const std::string& resource) const {
  std::vector<std::string> held;
  for (const auto& pod : running_) {
    for (const auto& [container, resources] : pod.devices) {
      auto it = resources.find(resource);
      if (it != resources.end()) held.insert(held.end(), it->second.begin(), it->second.end());
    }
  }
  return held;
}

StepResult FakeNode::PickDevices(const std::string& resource, int count,
                                 std::vector<std::string>* ids) {
  std::vector<std::string> held;
  {
    std::lock_guard lock(mutex_);
    held = HeldDevices(resource);
  }
  std::vector<std::string> available;  // sorted: Devices() is a std::map
  for (const auto& [id, health] : kubelet_->Devices(resource)) {
    if (health == "Healthy" && std::find(held.begin(), held.end(), id) == held.end()) {
      available.push_back(id);
    }
  }
  if (static_cast<int>(available.size()) < count) {
    // kubelet's devicesToAllocate message.
    return {"Requested number of devices unavailable for " + resource + ". Requested: " +
            std::to_string(count) + ", Available: " + std::to_string(available.size())};
  }
  std::vector<std::string> chosen;
  if (kubelet_->Options(resource).get_preferred_allocation_available()) {
    v1beta1::PreferredAllocationRequest request;
    auto* container = request.add_container_requests();
    for (const auto& id : available) container->add_available_deviceids(id);
    container->set_allocation_size(count);
    v1beta1::PreferredAllocationResponse response;
    grpc::Status status = kubelet_->GetPreferredAllocation(resource, request, &response);
    if (!status.ok())
      return {"GetPreferredAllocation(" + resource + "): " + status.error_message()};
    // kubelet keeps what the plugin prefers among the available devices, then fills up.
    if (response.container_responses_size() > 0) {
      for (const auto& id : response.container_responses(0).deviceids()) {
        if (static_cast<int>(chosen.size()) < count &&
            std::find(available.begin(), available.end(), id) != available.end() &&
            std::find(chosen.begin(), chosen.end(), id) == chosen.end()) {
          chosen.push_back(id);
        }
      }
    }
  }
  for (const auto& id : available) {
    if (static_cast<int>(chosen.size()) == count) break;
    if (std::find(chosen.begin(), chosen.end(), id) == chosen.end()) chosen.push_back(id);
  }
  *ids = std::move(chosen);
  return {};
}

StepResult FakeNode::RunPod(nlohmann::json pod) {
  const std::string ns = pod["metadata"].value("namespace", "default");
  const std::string name = pod["metadata"].value("name", "");
  pod["metadata"]["namespace"] = ns;
  pod["spec"]["nodeName"] = node_name_;  // the scheduler's binding
  pod["status"] = {{"phase", "Pending"}};
  if (!pod["metadata"].contains("uid")) pod["metadata"]["uid"] = RandomUid();
  api_->AddPod(pod);
  return AdmitPod(pod);
}

StepResult FakeNode::AdmitPod(const nlohmann::json& pod) {
  const std::string ns = pod["metadata"].value("namespace", "default");
  const std::string name = pod["metadata"].value("name", "");
  const auto registered = kubelet_->ConnectedResources();
  RunningPod running{ns, name, "", {}};
  StepResult failed;
  for (const auto& container : pod["spec"].value("containers", nlohmann::json::array())) {
    const std::string container_name = container.value("name", "");
    const auto limits = container.value("resources", nlohmann::json::object())
                            .value("limits", nlohmann::json::object());
    for (const auto& [resource, quantity] : limits.items()) {
      const int count = DeviceCount(quantity);
      if (count == 0 || resource.find('/') == std::string::npos) continue;
      if (std::find(registered.begin(), registered.end(), resource) == registered.end()) {
        failed = {"0/1 nodes are available: 1 Insufficient " + resource + "."};
        break;
      }
      std::vector<std::string> ids;
      failed = PickDevices(resource, count, &ids);
      if (!failed.ok()) break;
      v1beta1::AllocateResponse response;
      grpc::Status status = kubelet_->Allocate(resource, {ids}, &response);
      if (!status.ok()) {
        failed = {"Allocate(" + resource + "): " + status.error_message() + " [kubelet's list " +
                  std::to_string(kubelet_->Updates(resource)) + " of " + resource + ": " +
                  std::to_string(kubelet_->Devices(resource).size()) + " devices]"};
        break;
      }
      running.devices[container_name][resource] = ids;
    }
    if (!failed.ok()) break;
  }
  if (!failed.ok()) {
    api_->SetPhase(ns, name, "Failed");
    return failed;
  }
  {
    std::lock_guard lock(mutex_);
    running.uid = pod["metadata"].value("uid", "");
    running_.push_back(running);
  }
  PublishKubeletState();
  api_->SetPhase(ns, name, "Running");
  return {};
}

StepResult FakeNode::RunPod(const std::string& ns, const std::string& name,
                            const std::map<std::string, int>& resources) {
  std::map<std::string, std::string> quantities;
  for (const auto& [resource, count] : resources) quantities[resource] = std::to_string(count);
  return RunPod(MakePod(ns, name, node_name_, quantities, "Pending"));
}

void FakeNode::PublishKubeletState() {
  std::vector<kubelet::PodResources> listed;
  std::vector<CheckpointRecord> records;
  {
    std::lock_guard lock(mutex_);
    for (const auto& pod : running_) {
      kubelet::PodResources entry{pod.ns, pod.name, {}};
      for (const auto& [container, resources] : pod.devices) {
        kubelet::ContainerResources listed_container{container, {}};
        for (const auto& [resource, ids] : resources) {
          listed_container.devices.push_back({resource, ids});
          CheckpointRecord record{pod.uid, container, resource, ids, -1};
          auto same = [&](const CheckpointRecord& r) {
            return r.pod_uid == record.pod_uid && r.container_name == record.container_name &&
                   r.resource_name == record.resource_name;
          };
          if (std::none_of(checkpoint_records_.begin(), checkpoint_records_.end(), same)) {
            checkpoint_records_.push_back(record);
          }
        }
        entry.containers.push_back(std::move(listed_container));
      }
      listed.push_back(std::move(entry));
    }
    records = checkpoint_records_;
  }
  std::map<std::string, std::vector<std::string>> registered;
  for (const auto& resource : kubelet_->ConnectedResources()) {
    for (const auto& [id, health] : kubelet_->Devices(resource)) registered[resource].push_back(id);
  }
  // Checkpoint before PodResources: kubelet writes it in Allocate, before the container starts.
  checkpoint_.Write(records, registered);
  pod_resources_->SetPods(std::move(listed));
}

StepResult FakeNode::DeletePod(const std::string& ns, const std::string& name) {
  {
    std::lock_guard lock(mutex_);
    auto it = std::find_if(running_.begin(), running_.end(),
                           [&](const RunningPod& p) { return p.ns == ns && p.name == name; });
    if (it != running_.end()) running_.erase(it);
  }
  try {
    api_->MarkDeleting(ns, name);
  } catch (const std::exception&) {
    return {"pods \"" + name + "\" not found in namespace " + ns};
  }
  PublishKubeletState();
  api_->DeletePod(ns, name);
  return {};
}

StepResult FakeNode::RestartKubelet() {
  pod_resources_->Stop();
  if (!kubelet_->Restart()) return {"kubelet cannot serve its socket again"};
  if (!pod_resources_->Start()) return {"PodResources cannot serve again"};
  return {};
}

void FakeNode::StopApiServer() {
  api_->Stop();
}

StepResult FakeNode::StartApiServer() {
  if (!api_->Start()) return {"the API server cannot listen on its port again"};
  return {};
}

std::vector<std::string> FakeNode::DevicesOf(const std::string& ns, const std::string& name,
                                             const std::string& resource) const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> ids;
  for (const auto& pod : running_) {
    if (pod.ns != ns || pod.name != name) continue;
    for (const auto& [container, resources] : pod.devices) {
      auto it = resources.find(resource);
      if (it != resources.end()) ids.insert(ids.end(), it->second.begin(), it->second.end());
    }
  }
  return ids;
}

std::vector<NodeResource> FakeNode::Resources() const {
  std::vector<NodeResource> resources;
  for (const auto& name : kubelet_->ConnectedResources()) {
    NodeResource resource{name, 0, 0, 0};
    for (const auto& [id, health] : kubelet_->Devices(name)) {
      ++resource.capacity;
      if (health == "Healthy") ++resource.allocatable;
    }
    {
      std::lock_guard lock(mutex_);
      resource.allocated = static_cast<int>(HeldDevices(name).size());
    }
    resources.push_back(resource);
  }
  return resources;
}

std::string FakeNode::DescribeResources() const {
  const auto resources = Resources();
  size_t width = std::string("Resource").size();
  for (const auto& r : resources) width = std::max(width, r.name.size());
  auto pad = [](const std::string& text, size_t size) {
    return text + std::string(size > text.size() ? size - text.size() : 0, ' ');
  };
  std::ostringstream out;
  out << "Capacity:\n";
  for (const auto& r : resources) {
    out << "  " << pad(r.name + ":", width + 3) << r.capacity << "\n";
  }
  out << "Allocatable:\n";
  for (const auto& r : resources) {
    out << "  " << pad(r.name + ":", width + 3) << r.allocatable << "\n";
  }
  out << "Allocated resources:\n"
      << "  " << pad("Resource", width + 2) << "Requests  Limits\n"
      << "  " << pad("--------", width + 2) << "--------  ------\n";
  for (const auto& r : resources) {
    out << "  " << pad(r.name, width + 2) << pad(std::to_string(r.allocated), 10) << r.allocated
        << "\n";
  }
  return out.str();
}

bool FakeNode::WaitForResources(size_t count, std::chrono::milliseconds timeout) {
  return kubelet_->WaitUntil(
      [&] {
        const auto resources = kubelet_->ConnectedResources();
        if (resources.size() < count) return false;
        return std::all_of(resources.begin(), resources.end(),
                           [&](const std::string& r) { return kubelet_->Updates(r) > 0; });
      },
      timeout);
}

}  // namespace kvgpu::testing
