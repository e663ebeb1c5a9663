#include "fakes/kubelet/fake_kubelet.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>

namespace kvgpu::testing {

namespace api = ::v1beta1;

// One plugin connection, as kubelet's device manager holds it.
struct FakeKubelet::Endpoint {
  std::string resource;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<api::DevicePlugin::Stub> stub;
  api::DevicePluginOptions options;
  grpc::ClientContext stream_context;
  std::thread reader;
  bool connected = true;
  int updates = 0;
  std::map<std::string, std::string> devices;
  std::map<std::string, std::vector<int64_t>> numa_nodes;
};

class FakeKubelet::RegistrationService final : public api::Registration::Service {
 public:
  explicit RegistrationService(FakeKubelet& kubelet) : kubelet_(kubelet) {}
  grpc::Status Register(grpc::ServerContext*, const api::RegisterRequest* request,
                        api::Empty*) override {
    return kubelet_.HandleRegister(*request);
  }

 private:
  FakeKubelet& kubelet_;
};

namespace {

// Kubernetes' IsExtendedResourceName, written out independently of the code under test: a
// qualified name with a prefix, outside kubernetes.io, still qualified with "requests." before it.
// By hand rather than std::regex, which GCC 12 under ASan flags as maybe-uninitialized.
bool IsExtendedResourceName(const std::string& name) {
  auto lower_alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  auto alnum = [&](char c) { return lower_alnum(c) || (c >= 'A' && c <= 'Z'); };
  size_t slash = name.find('/');
  if (slash == std::string::npos || name.find('/', slash + 1) != std::string::npos) return false;
  std::string prefix = name.substr(0, slash);
  std::string part = name.substr(slash + 1);
  if (prefix.empty() || prefix.size() + 9 > 253) return false;
  size_t start = 0;
  while (start <= prefix.size()) {  // DNS-1123 labels joined by '.'
    size_t dot = std::min(prefix.find('.', start), prefix.size());
    std::string label = prefix.substr(start, dot - start);
    if (label.empty() || label.size() > 63 || !lower_alnum(label.front()) ||
        !lower_alnum(label.back())) {
      return false;
    }
    for (char c : label) {
      if (!lower_alnum(c) && c != '-') return false;
    }
    start = dot + 1;
  }
  if (part.empty() || part.size() > 63 || !alnum(part.front()) || !alnum(part.back())) return false;
  for (char c : part) {
    if (!alnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return prefix != "kubernetes.io" && !prefix.ends_with(".kubernetes.io");
}

}  // namespace

FakeKubelet::FakeKubelet(std::filesystem::path plugin_dir) : plugin_dir_(std::move(plugin_dir)) {
  std::filesystem::create_directories(plugin_dir_);
}

FakeKubelet::~FakeKubelet() {
  Stop();
}

bool FakeKubelet::Start() {
  std::error_code ec;
  std::filesystem::remove(socket_path(), ec);
  service_ = std::make_unique<RegistrationService>(*this);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + socket_path().string(), grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  return server_ != nullptr;
}

void FakeKubelet::Stop() {
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_->Wait();
    server_.reset();
  }
  service_.reset();
  std::error_code ec;
  std::filesystem::remove(socket_path(), ec);
  DropEndpoints();
}

bool FakeKubelet::Restart() {
  Stop();
  for (const auto& entry : std::filesystem::directory_iterator(plugin_dir_)) {
    if (entry.path().filename() == "kubelet_internal_checkpoint") continue;  // kubelet keeps it
    std::error_code ec;
    std::filesystem::remove(entry.path(), ec);
  }
  return Start();
}

void FakeKubelet::DropEndpoints() {
  std::map<std::string, std::shared_ptr<Endpoint>> endpoints;
  {
    std::lock_guard lock(mutex_);
    endpoints.swap(endpoints_);
  }
  for (auto& [resource, endpoint] : endpoints) {
    endpoint->stream_context.TryCancel();
    if (endpoint->reader.joinable()) endpoint->reader.join();
  }
  changed_.notify_all();
}

grpc::Status FakeKubelet::HandleRegister(const api::RegisterRequest& request) {
  {
    std::lock_guard lock(mutex_);
    registrations_.push_back(request);
  }
  changed_.notify_all();
  if (request.version() != "v1beta1") {
    return grpc::Status(grpc::StatusCode::UNKNOWN, "requested device plugin version " +
                                                       request.version() +
                                                       " is not supported (supported: v1beta1)");
  }
  if (!IsExtendedResourceName(request.resource_name())) {
    return grpc::Status(grpc::StatusCode::UNKNOWN,
                        "the resource name " + request.resource_name() + " is invalid");
  }
  auto endpoint = std::make_shared<Endpoint>();
  endpoint->resource = request.resource_name();
  endpoint->channel = grpc::CreateChannel("unix://" + (plugin_dir_ / request.endpoint()).string(),
                                          grpc::InsecureChannelCredentials());
  if (!endpoint->channel->WaitForConnected(std::chrono::system_clock::now() +
                                           std::chrono::seconds(2))) {
    return grpc::Status(grpc::StatusCode::UNKNOWN,
                        "failed to dial device plugin at " + request.endpoint());
  }
  endpoint->stub = api::DevicePlugin::NewStub(endpoint->channel);
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    api::Empty empty;
    grpc::Status status =
        endpoint->stub->GetDevicePluginOptions(&context, empty, &endpoint->options);
    if (!status.ok()) return status;
  }
  Endpoint* raw = endpoint.get();
  raw->reader = std::thread([this, raw] {
    api::Empty empty;
    auto reader = raw->stub->ListAndWatch(&raw->stream_context, empty);
    api::ListAndWatchResponse response;
    while (reader->Read(&response)) {
      std::lock_guard lock(mutex_);
      raw->devices.clear();
      raw->numa_nodes.clear();
      for (const auto& d : response.devices()) {
        raw->devices[d.id()] = d.health();
        // Kubelet keeps a device's topology as sent (nil: no NUMA affinity).
        if (d.has_topology()) {
          std::vector<int64_t>& nodes = raw->numa_nodes[d.id()];
          for (const auto& node : d.topology().nodes()) nodes.push_back(node.id());
        }
      }
      ++raw->updates;
      changed_.notify_all();
    }
    (void)reader->Finish();
    std::lock_guard lock(mutex_);
    raw->connected = false;
    changed_.notify_all();
  });
  // A new registration of the same resource replaces the old connection, as in kubelet. Only
  // once its reader runs: a concurrent registration may replace (and join) it at once.
  std::shared_ptr<Endpoint> old;
  {
    std::lock_guard lock(mutex_);
    old = endpoints_[request.resource_name()];
    endpoints_[request.resource_name()] = endpoint;
  }
  if (old) {
    old->stream_context.TryCancel();
    if (old->reader.joinable()) old->reader.join();
  }
  return grpc::Status::OK;
}

std::shared_ptr<FakeKubelet::Endpoint> FakeKubelet::FindEndpoint(
    const std::string& resource) const {
  std::lock_guard lock(mutex_);
  auto it = endpoints_.find(resource);
  return it == endpoints_.end() ? nullptr : it->second;
}

std::vector<api::RegisterRequest> FakeKubelet::Registrations() const {
  std::lock_guard lock(mutex_);
  return registrations_;
}

std::map<std::string, std::string> FakeKubelet::Devices(const std::string& resource) const {
  std::lock_guard lock(mutex_);
  auto it = endpoints_.find(resource);
  return it == endpoints_.end() ? std::map<std::string, std::string>{} : it->second->devices;
}

std::map<std::string, std::string> FakeKubelet::HeldDevices(const std::string& resource) const {
  std::lock_guard lock(mutex_);
  auto it = endpoints_.find(resource);
  if (it == endpoints_.end()) return {};
  std::map<std::string, std::string> devices = it->second->devices;
  if (!it->second->connected) {
    for (auto& [id, health] : devices) health = "Unhealthy";
  }
  return devices;
}

std::map<std::string, std::vector<int64_t>> FakeKubelet::NumaNodes(
    const std::string& resource) const {
  std::lock_guard lock(mutex_);
  auto it = endpoints_.find(resource);
  return it == endpoints_.end() ? std::map<std::string, std::vector<int64_t>>{}
                                : it->second->numa_nodes;
}

int FakeKubelet::Updates(const std::string& resource) const {
  std::lock_guard lock(mutex_);
  auto it = endpoints_.find(resource);
  return it == endpoints_.end() ? 0 : it->second->updates;
}

api::DevicePluginOptions FakeKubelet::Options(const std::string& resource) const {
  std::lock_guard lock(mutex_);
  auto it = endpoints_.find(resource);
  return it == endpoints_.end() ? api::DevicePluginOptions{} : it->second->options;
}

bool FakeKubelet::Connected(const std::string& resource) const {
  std::lock_guard lock(mutex_);
  auto it = endpoints_.find(resource);
  return it != endpoints_.end() && it->second->connected;
}

bool FakeKubelet::WaitUntil(const std::function<bool()>& done,
                            std::chrono::milliseconds timeout) const {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, std::chrono::milliseconds(10));
  }
  return true;
}

std::vector<std::string> FakeKubelet::ConnectedResources() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> resources;
  for (const auto& [resource, endpoint] : endpoints_) {
    if (endpoint->connected) resources.push_back(resource);
  }
  return resources;
}

grpc::Status FakeKubelet::Allocate(const std::string& resource,
                                   const std::vector<std::vector<std::string>>& containers,
                                   api::AllocateResponse* response) {
  std::shared_ptr<Endpoint> endpoint = FindEndpoint(resource);
  if (!endpoint) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no plugin for " + resource);
  api::AllocateRequest request;
  for (const auto& ids : containers) {
    auto* container = request.add_container_requests();
    for (const auto& id : ids) container->add_devices_ids(id);
  }
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return endpoint->stub->Allocate(&context, request, response);
}

grpc::Status FakeKubelet::GetDevicePluginOptions(const std::string& resource,
                                                 api::DevicePluginOptions* options) {
  std::shared_ptr<Endpoint> endpoint = FindEndpoint(resource);
  if (!endpoint) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no plugin for " + resource);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  api::Empty empty;
  return endpoint->stub->GetDevicePluginOptions(&context, empty, options);
}

grpc::Status FakeKubelet::GetPreferredAllocation(const std::string& resource,
                                                 const api::PreferredAllocationRequest& request,
                                                 api::PreferredAllocationResponse* response) {
  std::shared_ptr<Endpoint> endpoint = FindEndpoint(resource);
  if (!endpoint) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no plugin for " + resource);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return endpoint->stub->GetPreferredAllocation(&context, request, response);
}

}  // namespace kvgpu::testing
