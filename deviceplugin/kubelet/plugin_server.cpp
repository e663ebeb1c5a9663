#include "deviceplugin/kubelet/plugin_server.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <optional>
#include <thread>
#include <vector>

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

// What kubelet sees of a device: its ID, health and NUMA node.
struct WireDevice {
  std::string id;
  bool healthy = true;
  std::optional<int32_t> numa_node;

  bool operator==(const WireDevice&) const = default;
};
using WireList = std::vector<WireDevice>;

WireList ToWire(const std::vector<Device>& devices) {
  WireList out;
  out.reserve(devices.size());
  for (const Device& d : devices) out.push_back({d.id, d.healthy, d.numa_node});
  return out;
}

api::ListAndWatchResponse ToList(const WireList& devices) {
  api::ListAndWatchResponse response;
  for (const WireDevice& device : devices) {
    api::Device* out = response.add_devices();
    out->set_id(device.id);
    out->set_health(device.healthy ? kHealthy : kUnhealthy);
    // No topology is kubelet's "no NUMA affinity"; a node makes the Topology Manager's hint.
    if (device.numa_node) out->mutable_topology()->add_nodes()->set_id(*device.numa_node);
  }
  return response;
}

}  // namespace

using Clock = std::chrono::steady_clock;

// One kubelet ListAndWatch stream. gRPC holds it (self_) until OnDone; the server's Streams only
// watch it, so a stream that ended on its own is never touched by a later change.
// gRPC may run a reaction (OnWriteDone, OnDone) inline in whichever thread starts an operation,
// so no lock is held while StartWrite or Finish is called; and Finish is only called with no
// write in flight, which is what makes the calls made after unlocking safe: OnDone (and the
// reactor's end) cannot come before them.
class ListAndWatchStream final : public grpc::ServerWriteReactor<api::ListAndWatchResponse> {
 public:
  using Observers = std::shared_ptr<const PluginObservers>;
  ListAndWatchStream(std::string resource, Observers observers)
      : resource_(std::move(resource)), observers_(std::move(observers)) {}

  static std::shared_ptr<ListAndWatchStream> Open(std::string resource, Observers observers) {
    auto stream = std::make_shared<ListAndWatchStream>(std::move(resource), std::move(observers));
    {
      // Also publishes the constructed stream to the threads gRPC runs its reactions on, in a
      // way TSan sees (gRPC's own hand-off is in uninstrumented code): every reaction locks first.
      std::lock_guard lock(stream->mutex_);
      stream->self_ = stream;
    }
    spdlog::info("listandwatch opened resource={}", stream->resource_);
    return stream;
  }

  // Writes `devices` unless kubelet has them already; offered during a write, they go out after it.
  void Offer(WireList devices, Clock::time_point noticed) {
    {
      std::lock_guard lock(mutex_);
      const uint64_t offer = ++offered_;
      if (ending_) return;
      if (writing_) {
        if (!next_) next_noticed_ = noticed;  // the oldest change not yet written
        next_ = std::move(devices);
        next_offer_ = offer;
        return;
      }
      if (!PrepareLocked(std::move(devices), noticed, offer)) {
        written_ = offer;  // nothing in flight: kubelet has this list
        return;
      }
    }
    StartWrite(&message_);
  }

  // Waits until every list offered before the call is written (gRPC took it for the transport),
  // the stream ended, or `deadline` passed; false on the deadline.
  bool WaitWritten(Clock::time_point deadline) {
    std::unique_lock lock(mutex_);
    const uint64_t wanted = offered_;
    return written_cv_.wait_until(lock, deadline, [&] { return written_ >= wanted || ending_; });
  }

  // Ends the stream with OK: the plugin stops serving (ours), or kubelet cancelled it.
  void End(bool ours = true) {
    {
      std::lock_guard lock(mutex_);
      ended_by_us_ = ended_by_us_ || ours;
      ending_ = true;
    }
    written_cv_.notify_all();  // nothing more is written: no one waits for it
    {
      std::lock_guard lock(mutex_);
      if (writing_ || finished_) return;  // a write in flight finishes it when done
      finished_ = true;
    }
    Finish(grpc::Status::OK);
  }

 private:
  // Makes `devices` the message of the next write; false when kubelet already has them.
  bool PrepareLocked(WireList devices, Clock::time_point noticed, uint64_t offer) {
    if (sent_ && *sent_ == devices) return false;
    message_ = ToList(devices);
    sent_ = std::move(devices);
    writing_ = true;
    writing_noticed_ = noticed;
    writing_offer_ = offer;
    return true;
  }

  void OnWriteDone(bool ok) override {
    std::optional<std::chrono::nanoseconds> push;
    size_t count = 0;
    bool write = false;
    bool finish = false;
    uint64_t written = 0;  // the newest offer kubelet now has
    {
      std::lock_guard lock(mutex_);
      writing_ = false;
      if (ok) {
        count = sent_->size();
        if (written_once_) push = Clock::now() - writing_noticed_;
        written_once_ = true;
        written = writing_offer_;
      } else {
        ending_ = true;  // kubelet went away; the stream cannot carry anything more
      }
      if (ending_) {
        finish = !finished_;
        finished_ = true;
      } else if (next_) {
        WireList devices = std::move(*next_);
        next_.reset();
        write = PrepareLocked(std::move(devices), next_noticed_, next_offer_);
        if (!write) written = next_offer_;  // the list just written is the one offered since
      }
    }
    // The first list is the stream's opening, not a push of a change.
    if (push && observers_->on_push) observers_->on_push(resource_, *push);
    if (ok) spdlog::debug("listandwatch pushed resource={} devices={}", resource_, count);
    {
      // Only now, after the observers: a waiter (an Allocate about to answer) returns after
      // everything this write set off.
      std::lock_guard lock(mutex_);
      written_ = std::max(written_, written);
    }
    written_cv_.notify_all();
    if (write) StartWrite(&message_);
    if (finish) Finish(grpc::Status::OK);
  }

  void OnCancel() override { End(/*ours=*/false); }

  void OnDone() override {
    std::shared_ptr<ListAndWatchStream> self;  // released last: it may be the final owner
    bool kubelet_left = false;
    {
      std::lock_guard lock(mutex_);
      self = std::move(self_);
      kubelet_left = !ended_by_us_;
    }
    spdlog::info("listandwatch closed resource={}{}", resource_,
                 kubelet_left ? " (by kubelet)" : "");
    if (kubelet_left && observers_->on_kubelet_left) observers_->on_kubelet_left(resource_);
  }

  const std::string resource_;
  const Observers observers_;
  std::mutex mutex_;  // guards the members below
  std::shared_ptr<ListAndWatchStream> self_;
  api::ListAndWatchResponse message_;  // of the write in flight; left alone until it is done
  std::optional<WireList> sent_;
  std::optional<WireList> next_;
  Clock::time_point writing_noticed_;
  Clock::time_point next_noticed_;
  // Offers are numbered; written_ is the newest one kubelet has (written, or equal to what was).
  uint64_t offered_ = 0;
  uint64_t writing_offer_ = 0;
  uint64_t next_offer_ = 0;
  uint64_t written_ = 0;
  std::condition_variable written_cv_;
  bool writing_ = false;
  bool written_once_ = false;
  bool ending_ = false;
  bool ended_by_us_ = false;  // End() from our side: the server stops, kubelet did not leave
  bool finished_ = false;
};

// The open ListAndWatch streams of one server. Opening a stream, notifying and ending all hold one
// lock, so lists reach every stream in the order they were read.
class PluginServer::Streams {
 public:
  Streams(std::string resource, ResourceManager& manager, ListAndWatchStream::Observers observers,
          std::shared_ptr<const std::atomic<bool>> withheld)
      : resource_(std::move(resource)),
        manager_(manager),
        observers_(std::move(observers)),
        withheld_(std::move(withheld)) {}

  // Made on the thread that serves, used on gRPC's pooled threads: gRPC hands a call over through
  // its own lock-free queues, which order the two in fact but are not instrumented, so
  // ThreadSanitizer would see this object's construction race with its first use. Serve() publishes
  // it under the lock and each use starts by taking it: an order both the language and
  // ThreadSanitizer see.
  void Publish() { std::lock_guard lock(mutex_); }

  ListAndWatchStream* Open() {
    std::lock_guard lock(mutex_);
    std::shared_ptr<ListAndWatchStream> stream = ListAndWatchStream::Open(resource_, observers_);
    if (ended_) {
      stream->End();
    } else {
      Prune();
      open_.push_back(stream);
      stream->Offer(Current(), Clock::now());
    }
    return stream.get();
  }

  void Notify() {
    Clock::time_point noticed = Clock::now();
    std::lock_guard lock(mutex_);
    Prune();
    if (open_.empty()) return;
    WireList devices = Current();
    for (const auto& weak : open_) {
      if (auto stream = weak.lock()) stream->Offer(devices, noticed);
    }
  }

  // Waits until each open stream has written every list offered to it so far; false when one
  // had not by `deadline`.
  bool WaitWritten(Clock::time_point deadline) {
    std::vector<std::shared_ptr<ListAndWatchStream>> streams;
    {
      std::lock_guard lock(mutex_);
      for (const auto& weak : open_) {
        if (auto stream = weak.lock()) streams.push_back(std::move(stream));
      }
    }
    bool all = true;
    for (const auto& stream : streams) all = stream->WaitWritten(deadline) && all;
    return all;
  }

  void EndAll() {
    std::lock_guard lock(mutex_);
    ended_ = true;
    for (const auto& weak : open_) {
      if (auto stream = weak.lock()) stream->End();
    }
    open_.clear();
  }

 private:
  void Prune() {
    std::erase_if(open_, [](const auto& weak) { return weak.expired(); });
  }

  // An empty list while withheld: kubelet then counts no allocatable device of this resource.
  WireList Current() const {
    return withheld_->load() ? WireList{} : ToWire(manager_.Devices(resource_));
  }

  const std::string resource_;
  ResourceManager& manager_;
  const ListAndWatchStream::Observers observers_;
  const std::shared_ptr<const std::atomic<bool>> withheld_;
  std::mutex mutex_;  // guards the members below
  bool ended_ = false;
  std::vector<std::weak_ptr<ListAndWatchStream>> open_;
};

// Unary calls run on gRPC's callback threads and answer before returning. Allocate blocks one of
// them for the kernel's create time; kubelet makes one Allocate call at a time.
class PluginServer::Service final : public api::DevicePlugin::CallbackService {
 public:
  Service(const std::string& resource, ResourceManager& manager, std::shared_ptr<Streams> streams)
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
  std::shared_ptr<Streams> streams_;
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
  std::shared_ptr<Streams> streams;
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
  auto streams = std::make_shared<Streams>(resource_, manager_, observers_, withheld_);
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
  std::shared_ptr<Streams> streams;
  {
    std::lock_guard lock(mutex_);
    streams = streams_;
  }
  if (streams) streams->Notify();
}

bool PluginServer::WaitPushed(std::chrono::steady_clock::time_point deadline) {
  std::shared_ptr<Streams> streams;
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
