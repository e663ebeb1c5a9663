#include "deviceplugin/plugin_server.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "deviceplugin/resource_naming.h"
#include "kubelet/deviceplugin/v1beta1/api.grpc.pb.h"

namespace kvgpu::deviceplugin {
namespace {

using mdev::ErrorCode;
namespace api = ::v1beta1;

grpc::Status ToGrpc(const Status& status) {
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  switch (status.code()) {
    case ErrorCode::kOk:
      return grpc::Status::OK;
    case ErrorCode::kInvalid:
    case ErrorCode::kMalformedUuid:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case ErrorCode::kNoRoom:
      code = grpc::StatusCode::RESOURCE_EXHAUSTED;
      break;
    case ErrorCode::kGone:
    case ErrorCode::kBusy:
    case ErrorCode::kExists:
    case ErrorCode::kUnknownParent:
    case ErrorCode::kUnknownType:
      code = grpc::StatusCode::FAILED_PRECONDITION;
      break;
    case ErrorCode::kPermission:
      code = grpc::StatusCode::PERMISSION_DENIED;
      break;
    case ErrorCode::kTimeout:
      code = grpc::StatusCode::DEADLINE_EXCEEDED;
      break;
    case ErrorCode::kIo:
      code = grpc::StatusCode::INTERNAL;
      break;
  }
  return grpc::Status(code, status.message());
}

// What kubelet sees of a device: its ID and health.
using WireList = std::vector<std::pair<std::string, bool>>;

WireList ToWire(const std::vector<Device>& devices) {
  WireList out;
  out.reserve(devices.size());
  for (const Device& d : devices) out.emplace_back(d.id, d.healthy);
  return out;
}

api::ListAndWatchResponse ToList(const WireList& devices) {
  api::ListAndWatchResponse response;
  for (const auto& [id, healthy] : devices) {
    api::Device* out = response.add_devices();
    out->set_id(id);
    out->set_health(healthy ? kHealthy : kUnhealthy);
  }
  return response;
}

}  // namespace

class PluginServer::Service final : public api::DevicePlugin::Service {
 public:
  Service(const std::string& resource, ResourceManager& manager, std::shared_ptr<Signal> signal,
          PushObserver on_push)
      : resource_(resource),
        manager_(manager),
        signal_(std::move(signal)),
        on_push_(std::move(on_push)) {}

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const api::Empty*,
                                      api::DevicePluginOptions* options) override {
    options->set_pre_start_required(false);
    options->set_get_preferred_allocation_available(true);
    return grpc::Status::OK;
  }

  grpc::Status ListAndWatch(grpc::ServerContext* context, const api::Empty*,
                            grpc::ServerWriter<api::ListAndWatchResponse>* writer) override {
    spdlog::info("listandwatch opened resource={}", resource_);
    std::optional<WireList> sent;
    uint64_t seen = 0;
    while (true) {
      std::chrono::steady_clock::time_point notified_at;
      {
        std::unique_lock lock(signal_->mutex);
        // The timeout only bounds how long a cancelled stream lingers.
        signal_->cv.wait_for(lock, std::chrono::seconds(1), [&] {
          return signal_->stopping || signal_->generation != seen || !sent;
        });
        if (signal_->stopping) break;
        seen = signal_->generation;
        notified_at = signal_->notified_at;
      }
      if (context->IsCancelled()) break;
      WireList devices = ToWire(manager_.Devices(resource_));
      if (sent && *sent == devices) continue;
      if (!writer->Write(ToList(devices))) break;
      if (sent && on_push_) on_push_(resource_, std::chrono::steady_clock::now() - notified_at);
      spdlog::debug("listandwatch pushed resource={} devices={}", resource_, devices.size());
      sent = std::move(devices);
    }
    spdlog::info("listandwatch closed resource={}", resource_);
    return grpc::Status::OK;
  }

  grpc::Status GetPreferredAllocation(grpc::ServerContext*,
                                      const api::PreferredAllocationRequest* request,
                                      api::PreferredAllocationResponse* response) override {
    std::vector<PreferredRequest> requests;
    for (const auto& c : request->container_requests()) {
      requests.push_back({{c.available_deviceids().begin(), c.available_deviceids().end()},
                          {c.must_include_deviceids().begin(), c.must_include_deviceids().end()},
                          c.allocation_size()});
    }
    auto answers = manager_.PreferredAllocation(resource_, requests);
    if (!answers.ok()) {
      spdlog::warn("preferred allocation refused resource={} reason={}", resource_,
                   answers.status().message());
      return ToGrpc(answers.status());
    }
    for (const auto& ids : *answers) {
      auto* out = response->add_container_responses();
      for (const auto& id : ids) out->add_deviceids(id);
    }
    return grpc::Status::OK;
  }

  grpc::Status Allocate(grpc::ServerContext*, const api::AllocateRequest* request,
                        api::AllocateResponse* response) override {
    std::vector<std::vector<std::string>> containers;
    for (const auto& c : request->container_requests()) {
      containers.emplace_back(c.devices_ids().begin(), c.devices_ids().end());
    }
    auto allocations = manager_.Allocate(resource_, containers);
    if (!allocations.ok()) return ToGrpc(allocations.status());
    for (const ContainerAllocation& a : *allocations) {
      auto* out = response->add_container_responses();
      for (const auto& [key, value] : a.envs) (*out->mutable_envs())[key] = value;
      for (const DeviceNode& node : a.devices) {
        auto* spec = out->add_devices();
        spec->set_container_path(node.container_path);
        spec->set_host_path(node.host_path);
        spec->set_permissions(node.permissions);
      }
      for (const std::string& name : a.cdi_devices) out->add_cdi_devices()->set_name(name);
    }
    return grpc::Status::OK;
  }

  grpc::Status PreStartContainer(grpc::ServerContext*, const api::PreStartContainerRequest*,
                                 api::PreStartContainerResponse*) override {
    return grpc::Status::OK;  // not requested in the options; nothing to do before start
  }

 private:
  std::string resource_;
  ResourceManager& manager_;
  std::shared_ptr<Signal> signal_;
  PushObserver on_push_;
};

PluginServer::PluginServer(std::string resource, std::filesystem::path plugin_dir,
                           ResourceManager& manager, PushObserver on_push)
    : resource_(std::move(resource)),
      plugin_dir_(std::move(plugin_dir)),
      socket_name_(SocketNameFor(resource_)),
      manager_(manager),
      on_push_(std::move(on_push)) {}

PluginServer::~PluginServer() {
  Stop();
}

bool PluginServer::serving() const {
  std::lock_guard lock(mutex_);
  return server_ != nullptr;
}

void PluginServer::Stop() {
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<Service> service;
  {
    std::lock_guard lock(mutex_);
    if (signal_) {
      std::lock_guard signal_lock(signal_->mutex);
      signal_->stopping = true;
      signal_->cv.notify_all();
    }
    server = std::move(server_);
    service = std::move(service_);
    signal_.reset();
  }
  if (server) {
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server->Wait();
    std::error_code ec;
    std::filesystem::remove(socket_path(), ec);
  }
}

mdev::Status PluginServer::Serve() {
  Stop();
  std::error_code ec;
  std::filesystem::create_directories(plugin_dir_, ec);
  std::filesystem::remove(socket_path(), ec);  // a stale socket from an earlier run
  auto signal = std::make_shared<Signal>();
  auto service = std::make_unique<Service>(resource_, manager_, signal, on_push_);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + socket_path().string(), grpc::InsecureServerCredentials());
  builder.RegisterService(service.get());
  // A handful of calls at a time is all kubelet makes; a small pool keeps memory low.
  grpc::ResourceQuota quota("kvgpu-" + socket_name_);
  quota.SetMaxThreads(8);
  builder.SetResourceQuota(quota);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 1);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) {
    return mdev::Status::Error(ErrorCode::kIo,
                               "cannot serve " + resource_ + " on " + socket_path().string());
  }
  // Self-dial: kubelet must never be told about a socket that does not answer.
  auto channel =
      grpc::CreateChannel("unix://" + socket_path().string(), grpc::InsecureChannelCredentials());
  auto stub = api::DevicePlugin::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  context.set_wait_for_ready(true);
  api::Empty empty;
  api::DevicePluginOptions options;
  grpc::Status answered = stub->GetDevicePluginOptions(&context, empty, &options);
  if (!answered.ok()) {
    server->Shutdown();
    return mdev::Status::Error(ErrorCode::kIo, "socket " + socket_path().string() +
                                                   " does not answer: " + answered.error_message());
  }
  std::lock_guard lock(mutex_);
  signal_ = std::move(signal);
  service_ = std::move(service);
  server_ = std::move(server);
  spdlog::info("serving resource={} socket={}", resource_, socket_path().string());
  return mdev::Status::Ok();
}

void PluginServer::Notify() {
  std::shared_ptr<Signal> signal;
  {
    std::lock_guard lock(mutex_);
    signal = signal_;
  }
  if (!signal) return;
  std::lock_guard lock(signal->mutex);
  ++signal->generation;
  signal->notified_at = std::chrono::steady_clock::now();
  signal->cv.notify_all();
}

mdev::Status PluginServer::Register(const std::filesystem::path& kubelet_socket,
                                    std::chrono::milliseconds timeout) {
  auto channel =
      grpc::CreateChannel("unix://" + kubelet_socket.string(), grpc::InsecureChannelCredentials());
  auto stub = api::Registration::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  api::RegisterRequest request;
  request.set_version(kApiVersion);
  request.set_endpoint(socket_name_);
  request.set_resource_name(resource_);
  request.mutable_options()->set_get_preferred_allocation_available(true);
  api::Empty empty;
  grpc::Status status = stub->Register(&context, request, &empty);
  if (!status.ok()) {
    ErrorCode code = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                             status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                         ? ErrorCode::kGone
                         : ErrorCode::kInvalid;
    return mdev::Status::Error(code, "kubelet refused or missed the registration of " + resource_ +
                                         ": " + status.error_message());
  }
  spdlog::info("registered resource={} endpoint={}", resource_, socket_name_);
  return mdev::Status::Ok();
}

}  // namespace kvgpu::deviceplugin
