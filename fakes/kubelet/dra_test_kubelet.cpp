#include "fakes/kubelet/dra_test_kubelet.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <thread>

#include "kubelet/dra/v1/api.grpc.pb.h"
#include "kubelet/dra/v1beta1/api.grpc.pb.h"
#include "kubelet/pluginregistration/v1/api.grpc.pb.h"

namespace kvgpu::testing {

namespace {

namespace drav1 = k8s::io::kubelet::pkg::apis::dra::v1;
namespace drav1beta1 = k8s::io::kubelet::pkg::apis::dra::v1beta1;

// kubelet's servicesSupportedByKubelet, newest first.
const std::vector<std::string> kKubeletServices = {"v1.DRAPlugin", "v1beta1.DRAPlugin"};

std::shared_ptr<grpc::Channel> Dial(const std::string& socket) {
  return grpc::CreateChannel("unix://" + socket, grpc::InsecureChannelCredentials());
}

void Deadline(grpc::ClientContext& context) {
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
}

template <typename Api, typename Stub>
std::map<std::string, DraClaimAnswer> PrepareWith(Stub& stub, const std::vector<DraClaim>& claims,
                                                  std::string* rpc_error) {
  typename Api::NodePrepareResourcesRequest request;
  for (const DraClaim& c : claims) {
    auto* claim = request.add_claims();
    claim->set_namespace_(c.ns);
    claim->set_uid(c.uid);
    claim->set_name(c.name);
  }
  typename Api::NodePrepareResourcesResponse response;
  grpc::ClientContext context;
  Deadline(context);
  grpc::Status status = stub.NodePrepareResources(&context, request, &response);
  std::map<std::string, DraClaimAnswer> out;
  if (!status.ok()) {
    if (rpc_error) *rpc_error = status.error_message();
    return out;
  }
  for (const auto& [uid, answer] : response.claims()) {
    DraClaimAnswer a;
    a.error = answer.error();
    for (const auto& d : answer.devices()) {
      a.devices.push_back({{d.request_names().begin(), d.request_names().end()},
                           d.pool_name(),
                           d.device_name(),
                           {d.cdi_device_ids().begin(), d.cdi_device_ids().end()}});
    }
    out[uid] = std::move(a);
  }
  return out;
}

template <typename Api, typename Stub>
std::map<std::string, std::string> UnprepareWith(Stub& stub, const std::vector<DraClaim>& claims,
                                                 std::string* rpc_error) {
  typename Api::NodeUnprepareResourcesRequest request;
  for (const DraClaim& c : claims) {
    auto* claim = request.add_claims();
    claim->set_namespace_(c.ns);
    claim->set_uid(c.uid);
    claim->set_name(c.name);
  }
  typename Api::NodeUnprepareResourcesResponse response;
  grpc::ClientContext context;
  Deadline(context);
  grpc::Status status = stub.NodeUnprepareResources(&context, request, &response);
  std::map<std::string, std::string> out;
  if (!status.ok()) {
    if (rpc_error) *rpc_error = status.error_message();
    return out;
  }
  for (const auto& [uid, answer] : response.claims()) out[uid] = answer.error();
  return out;
}

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

}  // namespace

std::optional<DraRegistration> DraTestKubelet::Register(const std::string& driver,
                                                        std::chrono::milliseconds timeout) {
  registered_.reset();
  const auto until = std::chrono::steady_clock::now() + timeout;
  const std::filesystem::path dir = root_ / "plugins_registry";
  while (std::chrono::steady_clock::now() < until) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      if (!entry.is_socket(ec)) continue;
      auto stub = pluginregistration::Registration::NewStub(Dial(entry.path().string()));
      pluginregistration::InfoRequest request;
      pluginregistration::PluginInfo info;
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
      if (!stub->GetInfo(&context, request, &info).ok() || info.name() != driver) continue;
      DraRegistration r;
      r.socket = entry.path().string();
      r.type = info.type();
      r.driver = info.name();
      r.endpoint = info.endpoint();
      r.supported_versions = {info.supported_versions().begin(), info.supported_versions().end()};
      for (const std::string& v : r.supported_versions) {
        if (std::find(kKubeletServices.begin(), kKubeletServices.end(), v) !=
            kKubeletServices.end()) {
          r.chosen = v;
          break;
        }
      }
      bool ok = r.type == "DRAPlugin" && !r.chosen.empty() && !r.endpoint.empty();
      pluginregistration::RegistrationStatus status;
      status.set_plugin_registered(ok);
      if (!ok) status.set_error("no service this kubelet supports, or not a DRA plugin");
      pluginregistration::RegistrationStatusResponse ignored;
      grpc::ClientContext notify;
      notify.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
      (void)stub->NotifyRegistrationStatus(&notify, status, &ignored);
      if (!ok) return std::nullopt;
      registered_ = r;
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::nullopt;
}

std::map<std::string, DraClaimAnswer> DraTestKubelet::Prepare(const std::vector<DraClaim>& claims,
                                                              std::string* rpc_error) {
  if (!registered_) {
    if (rpc_error) *rpc_error = "not registered";
    return {};
  }
  const std::string service = forced_.empty() ? registered_->chosen : forced_;
  auto channel = Dial(registered_->endpoint);
  if (service == "v1.DRAPlugin") {
    auto stub = drav1::DRAPlugin::NewStub(channel);
    return PrepareWith<V1>(*stub, claims, rpc_error);
  }
  auto stub = drav1beta1::DRAPlugin::NewStub(channel);
  return PrepareWith<V1beta1>(*stub, claims, rpc_error);
}

std::map<std::string, std::string> DraTestKubelet::Unprepare(const std::vector<DraClaim>& claims,
                                                             std::string* rpc_error) {
  if (!registered_) {
    if (rpc_error) *rpc_error = "not registered";
    return {};
  }
  const std::string service = forced_.empty() ? registered_->chosen : forced_;
  auto channel = Dial(registered_->endpoint);
  if (service == "v1.DRAPlugin") {
    auto stub = drav1::DRAPlugin::NewStub(channel);
    return UnprepareWith<V1>(*stub, claims, rpc_error);
  }
  auto stub = drav1beta1::DRAPlugin::NewStub(channel);
  return UnprepareWith<V1beta1>(*stub, claims, rpc_error);
}

}  // namespace kvgpu::testing
