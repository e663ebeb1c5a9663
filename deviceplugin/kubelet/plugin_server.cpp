#include "deviceplugin/kubelet/plugin_server.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <thread>
#include <vector>

#include "deviceplugin/kubelet/list_and_watch.h"
#include "deviceplugin/model/resource_naming.h"
#include "kubelet/deviceplugin/v1beta1/api.grpc.pb.h"

namespace kvgpu::deviceplugin {
namespace {

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
    case ErrorCode::kTransport:
    case ErrorCode::kHttp:
    case ErrorCode::kExpired:
      code = grpc::StatusCode::UNAVAILABLE;  // a source of ours is unreachable; kubelet retries
      break;
    case ErrorCode::kCancelled:
      code = grpc::StatusCode::CANCELLED;
      break;
    case ErrorCode::kIo:
    case ErrorCode::kConfig:
    case ErrorCode::kDecode:
      code = grpc::StatusCode::INTERNAL;
      break;
  }
  return grpc::Status(code, status.message());
}

}  // namespace

// Unary calls run on gRPC's callback threads and answer before returning. Allocate blocks one of
// them for the kernel's create time; kubelet makes one Allocate call at a time.
class PluginServer::Service final : public api::DevicePlugin::CallbackService {
 public:
  Service(const std::string& resource, ResourceManager& manager,
          std::shared_ptr<ListAndWatchStreams> streams)
      : resource_(resource), manager_(manager), streams_(std::move(streams)) {}

  grpc::ServerUnaryReactor* GetDevicePluginOptions(grpc::CallbackServerContext* context,
                                                   const api::Empty*,
                                                   api::DevicePluginOptions* options) override {
    options->set_pre_start_required(false);
    options->set_get_preferred_allocation_available(true);
    return Answer(context, grpc::Status::OK);
  }

  grpc::ServerWriteReactor<api::ListAndWatchResponse>* ListAndWatch(grpc::CallbackServerContext*,
                                                                    const api::Empty*) override {
    return streams_->Open();
  }

  grpc::ServerUnaryReactor* GetPreferredAllocation(
      grpc::CallbackServerContext* context, const api::PreferredAllocationRequest* request,
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
      return Answer(context, ToGrpc(answers.status()));
    }
    for (const auto& ids : *answers) {
      auto* out = response->add_container_responses();
      for (const auto& id : ids) out->add_deviceids(id);
    }
    return Answer(context, grpc::Status::OK);
  }

  // Allocate may wait: for the kernel's create and remove, and for kubelet's PodResources answer
  // when a device ID comes back. It runs on a thread of its own, never on gRPC's few callback
  // threads (two on a two-core node), so that calls that need no such wait (other resources'
  // Allocates, preferred allocations) are never queued behind it. Shutdown waits for its reply.
  grpc::ServerUnaryReactor* Allocate(grpc::CallbackServerContext* context,
                                     const api::AllocateRequest* request,
                                     api::AllocateResponse* response) override {
    std::vector<std::vector<std::string>> containers;
    for (const auto& c : request->container_requests()) {
      containers.emplace_back(c.devices_ids().begin(), c.devices_ids().end());
    }
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    std::thread([reactor, response, &manager = manager_, resource = resource_,
                 containers = std::move(containers)] {
      grpc::Status status = Fill(manager.Allocate(resource, containers), *response);
      reactor->Finish(status);  // the last touch: the call and its response end here
    }).detach();
    return reactor;
  }

  grpc::ServerUnaryReactor* PreStartContainer(grpc::CallbackServerContext* context,
                                              const api::PreStartContainerRequest*,
                                              api::PreStartContainerResponse*) override {
    // Not requested in the options; nothing to do before start.
    return Answer(context, grpc::Status::OK);
  }

 private:
  static grpc::Status Fill(const Result<std::vector<ContainerAllocation>>& allocations,
                           api::AllocateResponse& response) {
    if (!allocations.ok()) return ToGrpc(allocations.status());
    for (const ContainerAllocation& a : *allocations) {
      auto* out = response.add_container_responses();
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

  static grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context,
                                          const grpc::Status& status) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(status);
    return reactor;
  }

  std::string resource_;
  ResourceManager& manager_;
  std::shared_ptr<ListAndWatchStreams> streams_;
};

PluginServer::PluginServer(std::string resource, std::filesystem::path plugin_dir,
                           ResourceManager& manager, PluginObservers observers)
    : resource_(std::move(resource)),
      plugin_dir_(std::move(plugin_dir)),
      socket_name_(SocketNameFor(resource_)),
      manager_(manager),
      observers_(std::make_shared<const PluginObservers>(std::move(observers))) {}

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
  std::shared_ptr<ListAndWatchStreams> streams;
  {
    std::lock_guard lock(mutex_);
    server = std::move(server_);
    service = std::move(service_);
    streams = std::move(streams_);
  }
  if (streams) streams->EndAll();
  if (server) {
    // Calls still running after the deadline are cancelled; Wait returns once all are done.
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server->Wait();
    std::error_code ec;
    std::filesystem::remove(socket_path(), ec);
  }
}

Status PluginServer::Serve() {
  Stop();
  std::error_code ec;
  std::filesystem::create_directories(plugin_dir_, ec);
  std::filesystem::remove(socket_path(), ec);  // a stale socket from an earlier run
  auto streams = std::make_shared<ListAndWatchStreams>(resource_, manager_, observers_, withheld_);
  auto service = std::make_unique<Service>(resource_, manager_, streams);
  streams->Publish();
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + socket_path().string(), grpc::InsecureServerCredentials());
  builder.RegisterService(service.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) {
    return Status::Error(ErrorCode::kIo,
                         "cannot serve " + resource_ + " on " + socket_path().string());
  }
  // Self-dial: kubelet must never be told about a socket that does not answer. The server's
  // threads have only just started: under TSan on a loaded two-core machine (load 14) one of
  // twelve sockets took over 2 s to answer. Waiting longer costs nothing where it answers; where
  // it does not, the registrar serves it again after its backoff.
  auto channel =
      grpc::CreateChannel("unix://" + socket_path().string(), grpc::InsecureChannelCredentials());
  auto stub = api::DevicePlugin::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  context.set_wait_for_ready(true);
  api::Empty empty;
  api::DevicePluginOptions options;
  grpc::Status answered = stub->GetDevicePluginOptions(&context, empty, &options);
  if (!answered.ok()) {
    streams->EndAll();
    server->Shutdown();
    return Status::Error(ErrorCode::kIo, "socket " + socket_path().string() +
                                             " does not answer: " + answered.error_message());
  }
  std::lock_guard lock(mutex_);
  streams_ = std::move(streams);
  service_ = std::move(service);
  server_ = std::move(server);
  spdlog::info("serving resource={} socket={}", resource_, socket_path().string());
  return Status::Ok();
}

void PluginServer::SetWithheld(bool withheld) {
  if (withheld_->exchange(withheld) != withheld) Notify();
}

void PluginServer::Notify() {
  std::shared_ptr<ListAndWatchStreams> streams;
  {
    std::lock_guard lock(mutex_);
    streams = streams_;
  }
  if (streams) streams->Notify();
}

bool PluginServer::WaitPushed(std::chrono::steady_clock::time_point deadline) {
  std::shared_ptr<ListAndWatchStreams> streams;
  {
    std::lock_guard lock(mutex_);
    streams = streams_;
  }
  return !streams || streams->WaitWritten(deadline);
}

Status PluginServer::Register(const std::filesystem::path& kubelet_socket,
                              std::chrono::milliseconds timeout, Canceller* cancel) {
  auto channel =
      grpc::CreateChannel("unix://" + kubelet_socket.string(), grpc::InsecureChannelCredentials());
  auto stub = api::Registration::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  ArmedCall armed(cancel, [&context] { context.TryCancel(); });
  if (armed.cancelled()) {
    return Status::Error(ErrorCode::kCancelled, "registration of " + resource_ + " cancelled");
  }
  api::RegisterRequest request;
  request.set_version(kApiVersion);
  request.set_endpoint(socket_name_);
  request.set_resource_name(resource_);
  request.mutable_options()->set_get_preferred_allocation_available(true);
  api::Empty empty;
  grpc::Status status = stub->Register(&context, request, &empty);
  if (status.error_code() == grpc::StatusCode::CANCELLED) {
    return Status::Error(ErrorCode::kCancelled, "registration of " + resource_ + " cancelled");
  }
  if (!status.ok()) {
    ErrorCode code = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                             status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                         ? ErrorCode::kGone
                         : ErrorCode::kInvalid;
    return Status::Error(code, "kubelet refused or missed the registration of " + resource_ + ": " +
                                   status.error_message());
  }
  spdlog::info("registered resource={} endpoint={}", resource_, socket_name_);
  return Status::Ok();
}

}  // namespace kvgpu::deviceplugin
