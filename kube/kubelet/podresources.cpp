#include "kube/kubelet/podresources.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/log_safe.h"
#include "kubelet/podresources/v1/api.grpc.pb.h"

namespace kvgpu::kubelet {

namespace {

// kubelet's own PodResources clients allow 16 MiB answers; a node with many pods needs it.
constexpr int kMaxMessage = 16 * 1024 * 1024;

PodResources Convert(const v1::PodResources& pod) {
  PodResources out;
  // kubelet's word, escaped where it enters (common/log_safe.h: PeerName).
  out.namespace_name = PeerName(pod.namespace_());
  out.name = PeerName(pod.name());
  for (const auto& container : pod.containers()) {
    ContainerResources c;
    c.name = PeerName(container.name());
    for (const auto& devices : container.devices()) {
      ContainerDevices& d = c.devices.emplace_back();
      d.resource_name = PeerName(devices.resource_name());
      for (const std::string& id : devices.device_ids()) d.device_ids.push_back(PeerName(id));
    }
    out.containers.push_back(std::move(c));
  }
  return out;
}

Status FromStatus(const grpc::Status& status, const std::string& what) {
  const std::string message =
      what + ": " + std::to_string(status.error_code()) + " " + status.error_message();
  return Status::Error(ErrorCode::kTransport, message);
}

}  // namespace

bool PodResources::Holds(const std::string& resource, const std::string& device_id) const {
  for (const auto& container : containers) {
    for (const auto& devices : container.devices) {
      if (devices.resource_name == resource &&
          std::find(devices.device_ids.begin(), devices.device_ids.end(), device_id) !=
              devices.device_ids.end()) {
        return true;
      }
    }
  }
  return false;
}

struct PodResourcesClient::Stub {
  std::unique_ptr<v1::PodResourcesLister::Stub> stub;
};

PodResourcesClient::PodResourcesClient(std::filesystem::path socket,
                                       std::chrono::milliseconds timeout)
    : socket_(std::move(socket)), timeout_(timeout), stub_(std::make_unique<Stub>()) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessage);
  // kubelet restarts re-create the socket; come back within a second, not gRPC's two minutes.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  auto channel = grpc::CreateCustomChannel("unix://" + std::filesystem::absolute(socket_).string(),
                                           grpc::InsecureChannelCredentials(), args);
  stub_->stub = v1::PodResourcesLister::NewStub(channel);
}

PodResourcesClient::~PodResourcesClient() = default;

class PodResourcesClient::Call {
 public:
  Call(PodResourcesClient& client, std::chrono::milliseconds timeout) : client_(client) {
    context_.set_deadline(std::chrono::system_clock::now() + timeout);
    std::lock_guard lock(client_.calls_mutex_);
    cancelled_ = client_.cancelled_;
    if (!cancelled_) client_.calls_.insert(&context_);
  }
  ~Call() {
    std::lock_guard lock(client_.calls_mutex_);
    client_.calls_.erase(&context_);
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  grpc::ClientContext* context() { return &context_; }
  bool cancelled() const { return cancelled_; }

 private:
  PodResourcesClient& client_;
  grpc::ClientContext context_;
  bool cancelled_ = false;
};

void PodResourcesClient::Cancel() {
  std::lock_guard lock(calls_mutex_);
  cancelled_ = true;
  for (void* context : calls_) static_cast<grpc::ClientContext*>(context)->TryCancel();
}

Result<std::vector<PodResources>> PodResourcesClient::List() {
  Call call(*this, timeout_);
  if (call.cancelled()) return Status::Error(ErrorCode::kCancelled, "PodResources: stopping");
  grpc::ClientContext& context = *call.context();
  v1::ListPodResourcesRequest request;
  v1::ListPodResourcesResponse response;
  const grpc::Status status = stub_->stub->List(&context, request, &response);
  if (!status.ok()) return FromStatus(status, "PodResources List on " + socket_.string());
  std::vector<PodResources> pods;
  pods.reserve(static_cast<size_t>(response.pod_resources_size()));
  for (const auto& pod : response.pod_resources()) pods.push_back(Convert(pod));
  return pods;
}

Result<std::optional<PodResources>> PodResourcesClient::Get(const std::string& namespace_name,
                                                            const std::string& name) {
  if (!get_unavailable_.load()) {
    Call call(*this, timeout_);
    if (call.cancelled()) return Status::Error(ErrorCode::kCancelled, "PodResources: stopping");
    grpc::ClientContext& context = *call.context();
    v1::GetPodResourcesRequest request;
    request.set_pod_name(name);
    request.set_pod_namespace(namespace_name);
    v1::GetPodResourcesResponse response;
    const grpc::Status status = stub_->stub->Get(&context, request, &response);
    if (status.ok()) return std::optional<PodResources>(Convert(response.pod_resources()));
    const std::string& message = status.error_message();
    // kubelet answers a pod it does not know with a plain error (UNKNOWN) "... not found".
    if (status.error_code() == grpc::StatusCode::UNKNOWN &&
        message.find("not found") != std::string::npos) {
      return std::optional<PodResources>();
    }
    const bool disabled = status.error_code() == grpc::StatusCode::UNIMPLEMENTED ||
                          (status.error_code() == grpc::StatusCode::UNKNOWN &&
                           message.find("Get method disabled") != std::string::npos);
    if (!disabled) return FromStatus(status, "PodResources Get on " + socket_.string());
    spdlog::info("kubelet PodResources Get is not available ({}); using List", message);
    get_unavailable_ = true;
  }
  auto pods = List();
  if (!pods.ok()) return pods.status();
  for (auto& pod : pods.value()) {
    if (pod.namespace_name == namespace_name && pod.name == name) {
      return std::optional<PodResources>(std::move(pod));
    }
  }
  return std::optional<PodResources>();
}

std::filesystem::path PodResourcesSocket(const std::filesystem::path& kubelet_dir) {
  return kubelet_dir / "pod-resources" / "kubelet.sock";
}

}  // namespace kvgpu::kubelet
