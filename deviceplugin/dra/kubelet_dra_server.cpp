#include "deviceplugin/dra/kubelet_dra_server.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <functional>

#include "common/log_safe.h"
#include "kubelet/dra/v1/api.grpc.pb.h"
#include "kubelet/dra/v1beta1/api.grpc.pb.h"
#include "kubelet/pluginregistration/v1/api.grpc.pb.h"

namespace kvgpu::deviceplugin::dra {

namespace {

namespace drav1 = k8s::io::kubelet::pkg::apis::dra::v1;
namespace drav1beta1 = k8s::io::kubelet::pkg::apis::dra::v1beta1;
namespace reg = pluginregistration;

// The two versions' messages have the same shape; one body serves both.
template <typename Api, typename Base>
class DraService final : public Base {
 public:
  using OnClaim = std::function<void(DraCall, std::chrono::nanoseconds, bool)>;
  DraService(DraPlugin& plugin, OnClaim on_claim)
      : plugin_(plugin), on_claim_(std::move(on_claim)) {}

  grpc::Status NodePrepareResources(grpc::ServerContext*,
                                    const typename Api::NodePrepareResourcesRequest* request,
                                    typename Api::NodePrepareResourcesResponse* response) override {
    if (static_cast<size_t>(request->claims_size()) > kMaxClaimsPerCall) {
      return {grpc::StatusCode::INVALID_ARGUMENT,
              "more than " + std::to_string(kMaxClaimsPerCall) + " claims in one call"};
    }
    for (const auto& claim : request->claims()) {
      const auto start = std::chrono::steady_clock::now();
      PrepareAnswer answer = plugin_.Prepare({claim.namespace_(), claim.uid(), claim.name()});
      Told(DraCall::kPrepare, start, answer.error.empty());
      auto& out = (*response->mutable_claims())[claim.uid()];
      if (!answer.error.empty()) {
        out.set_error(answer.error);
        continue;
      }
      for (const PreparedDevice& d : answer.devices) {
        auto* device = out.add_devices();
        for (const std::string& r : d.request_names) device->add_request_names(r);
        device->set_pool_name(d.pool);
        device->set_device_name(d.device);
        for (const std::string& id : d.cdi_device_ids) device->add_cdi_device_ids(id);
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status NodeUnprepareResources(
      grpc::ServerContext*, const typename Api::NodeUnprepareResourcesRequest* request,
      typename Api::NodeUnprepareResourcesResponse* response) override {
    if (static_cast<size_t>(request->claims_size()) > kMaxClaimsPerCall) {
      return {grpc::StatusCode::INVALID_ARGUMENT,
              "more than " + std::to_string(kMaxClaimsPerCall) + " claims in one call"};
    }
    for (const auto& claim : request->claims()) {
      const auto start = std::chrono::steady_clock::now();
      std::string error = plugin_.Unprepare({claim.namespace_(), claim.uid(), claim.name()});
      Told(DraCall::kUnprepare, start, error.empty());
      auto& out = (*response->mutable_claims())[claim.uid()];
      if (!error.empty()) out.set_error(error);
    }
    return grpc::Status::OK;
  }

 private:
  void Told(DraCall call, std::chrono::steady_clock::time_point start, bool ok) const {
    if (on_claim_) on_claim_(call, std::chrono::steady_clock::now() - start, ok);
  }

  DraPlugin& plugin_;
  const OnClaim on_claim_;
};

struct V1 {
  using NodePrepareResourcesRequest = drav1::NodePrepareResourcesRequest;
  using NodePrepareResourcesResponse = drav1::NodePrepareResourcesResponse;
  using NodeUnprepareResourcesRequest = drav1::NodeUnprepareResourcesRequest;
  using NodeUnprepareResourcesResponse = drav1::NodeUnprepareResourcesResponse;
};
struct V1beta1 {
  using NodePrepareResourcesRequest = drav1beta1::NodePrepareResourcesRequest;
  using NodePrepareResourcesResponse = drav1beta1::NodePrepareResourcesResponse;
  using NodeUnprepareResourcesRequest = drav1beta1::NodeUnprepareResourcesRequest;
  using NodeUnprepareResourcesResponse = drav1beta1::NodeUnprepareResourcesResponse;
};

class RegistrationService final : public reg::Registration::Service {
 public:
  RegistrationService(std::string driver, std::string endpoint,
                      std::function<void(RegistrationReport)> report)
      : driver_(std::move(driver)), endpoint_(std::move(endpoint)), report_(std::move(report)) {}

  grpc::Status GetInfo(grpc::ServerContext*, const reg::InfoRequest*,
                       reg::PluginInfo* info) override {
    info->set_type(kDraPluginType);
    info->set_name(driver_);
    info->set_endpoint(endpoint_);
    info->add_supported_versions(kDraServiceV1);
    info->add_supported_versions(kDraServiceV1beta1);
    return grpc::Status::OK;
  }

  grpc::Status NotifyRegistrationStatus(grpc::ServerContext*, const reg::RegistrationStatus* status,
                                        reg::RegistrationStatusResponse*) override {
    if (status->plugin_registered()) {
      spdlog::info("dra kubelet registered driver={}", driver_);
    } else {
      // Escaped and bounded: a peer's text must not forge or flood log lines.
      spdlog::error("dra kubelet refused driver={}: {}", driver_, LogSafe(status->error()));
    }
    report_({status->plugin_registered(), status->error().substr(0, 1024)});
    return grpc::Status::OK;
  }

 private:
  std::string driver_;
  std::string endpoint_;
  std::function<void(RegistrationReport)> report_;
};

bool IsSocket(const std::filesystem::path& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

std::unique_ptr<grpc::Server> ServeOn(const std::filesystem::path& socket,
                                      std::initializer_list<grpc::Service*> services,
                                      Status* error) {
  std::error_code ec;
  std::filesystem::create_directories(socket.parent_path(), ec);
  std::filesystem::remove(socket, ec);  // a stale socket from an earlier run
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + socket.string(), grpc::InsecureServerCredentials());
  for (grpc::Service* s : services) builder.RegisterService(s);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) *error = Status::Error(ErrorCode::kIo, "cannot serve on " + socket.string());
  return server;
}

}  // namespace

const char* DraCallName(DraCall call) {
  return call == DraCall::kPrepare ? "prepare" : "unprepare";
}

std::filesystem::path DraPluginDir(const DraServerOptions& o) {
  return o.kubelet_root / "plugins" / o.driver;
}
std::filesystem::path DraPluginSocket(const DraServerOptions& o) {
  return DraPluginDir(o) / "dra.sock";
}
std::filesystem::path DraRegistrationDir(const DraServerOptions& o) {
  return o.kubelet_root / "plugins_registry";
}
std::filesystem::path DraRegistrationSocket(const DraServerOptions& o) {
  return DraRegistrationDir(o) / (o.driver + "-reg.sock");
}

KubeletDraServer::KubeletDraServer(DraPlugin& plugin, DraServerOptions options)
    : plugin_(plugin), options_(std::move(options)) {
  v1_ = std::make_unique<DraService<V1, drav1::DRAPlugin::Service>>(plugin_, options_.on_claim);
  v1beta1_ = std::make_unique<DraService<V1beta1, drav1beta1::DRAPlugin::Service>>(
      plugin_, options_.on_claim);
  registration_ = std::make_unique<RegistrationService>(
      options_.driver, DraPluginSocket(options_).string(), [this](RegistrationReport r) {
        std::lock_guard lock(mutex_);
        report_ = std::move(r);
      });
}

KubeletDraServer::~KubeletDraServer() {
  Stop();
}

Status KubeletDraServer::ServeDra() {
  if (dra_server_) dra_server_->Shutdown();
  Status error;
  dra_server_ = ServeOn(DraPluginSocket(options_), {v1_.get(), v1beta1_.get()}, &error);
  return error;
}

Status KubeletDraServer::ServeRegistration() {
  if (registration_server_) registration_server_->Shutdown();
  Status error;
  registration_server_ = ServeOn(DraRegistrationSocket(options_), {registration_.get()}, &error);
  return error;
}

Status KubeletDraServer::Start() {
  if (Status s = ServeDra(); !s.ok()) return s;
  if (Status s = ServeRegistration(); !s.ok()) return s;
  spdlog::info("dra serving driver={} endpoint={} registration={}", options_.driver,
               DraPluginSocket(options_).string(), DraRegistrationSocket(options_).string());
  worker_.Start([this](BackgroundWorker::Handle& worker) { Watch(worker); });
  return Status::Ok();
}

void KubeletDraServer::Watch(BackgroundWorker::Handle& worker) {
  while (worker.SleepFor(options_.recheck)) {
    // The endpoint first: a registration must never point at a socket that is gone.
    bool dra_gone = !IsSocket(DraPluginSocket(options_));
    bool reg_gone = !IsSocket(DraRegistrationSocket(options_));
    if (dra_gone) {
      spdlog::warn("dra socket {} gone; serving it again", DraPluginSocket(options_).string());
      if (Status s = ServeDra(); !s.ok()) spdlog::error("dra: {}", s.message());
    }
    if (dra_gone || reg_gone) {
      // kubelet re-registers a plugin only when its registration socket appears anew.
      if (Status s = ServeRegistration(); !s.ok()) spdlog::error("dra: {}", s.message());
      ++reserved_;
    }
  }
}

void KubeletDraServer::Stop() {
  worker_.Stop();
  std::error_code ec;
  // The registration first, so kubelet stops calling before the endpoint goes.
  if (registration_server_) {
    registration_server_->Shutdown();
    registration_server_.reset();
    std::filesystem::remove(DraRegistrationSocket(options_), ec);
  }
  if (dra_server_) {
    dra_server_->Shutdown();
    dra_server_.reset();
    std::filesystem::remove(DraPluginSocket(options_), ec);
  }
}

std::optional<RegistrationReport> KubeletDraServer::LastReport() const {
  std::lock_guard lock(mutex_);
  return report_;
}

}  // namespace kvgpu::deviceplugin::dra
