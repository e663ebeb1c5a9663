#include "fakes/podresources/fake_podresources.h"

#include <grpcpp/grpcpp.h>

#include "kubelet/podresources/v1/api.grpc.pb.h"

namespace kvgpu::testing {

namespace {

void Fill(const kubelet::PodResources& pod, v1::PodResources* out) {
  out->set_name(pod.name);
  out->set_namespace_(pod.namespace_name);
  for (const auto& container : pod.containers) {
    auto* c = out->add_containers();
    c->set_name(container.name);
    for (const auto& devices : container.devices) {
      auto* d = c->add_devices();
      d->set_resource_name(devices.resource_name);
      for (const auto& id : devices.device_ids) d->add_device_ids(id);
    }
  }
}

}  // namespace

class FakePodResources::Service : public v1::PodResourcesLister::Service {
 public:
  explicit Service(FakePodResources& owner) : owner_(owner) {}

  grpc::Status List(grpc::ServerContext*, const v1::ListPodResourcesRequest*,
                    v1::ListPodResourcesResponse* response) override {
    owner_.CountList();
    for (const auto& pod : owner_.Pods()) Fill(pod, response->add_pod_resources());
    return grpc::Status::OK;
  }

  grpc::Status GetAllocatableResources(grpc::ServerContext*, const v1::AllocatableResourcesRequest*,
                                       v1::AllocatableResourcesResponse*) override {
    return grpc::Status::OK;
  }

  grpc::Status Get(grpc::ServerContext*, const v1::GetPodResourcesRequest* request,
                   v1::GetPodResourcesResponse* response) override {
    owner_.CountGet();
    switch (owner_.get_support()) {
      case GetSupport::kAbsent:
        // What gRPC answers for a method the server does not register.
        return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "");
      case GetSupport::kDisabled:
        return grpc::Status(grpc::StatusCode::UNKNOWN, "PodResources API Get method disabled");
      case GetSupport::kServed:
        break;
    }
    for (const auto& pod : owner_.Pods()) {
      if (pod.name == request->pod_name() && pod.namespace_name == request->pod_namespace()) {
        Fill(pod, response->mutable_pod_resources());
        return grpc::Status::OK;
      }
    }
    return grpc::Status(grpc::StatusCode::UNKNOWN, "pod " + request->pod_name() + " in namespace " +
                                                       request->pod_namespace() + " not found");
  }

 private:
  FakePodResources& owner_;
};

FakePodResources::FakePodResources(std::filesystem::path socket)
    : socket_(std::move(socket)), service_(std::make_unique<Service>(*this)) {}

FakePodResources::~FakePodResources() {
  Stop();
}

bool FakePodResources::Start() {
  if (server_) return true;
  std::filesystem::create_directories(socket_.parent_path());
  std::error_code ignored;
  std::filesystem::remove(socket_, ignored);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + std::filesystem::absolute(socket_).string(),
                           grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  return server_ != nullptr;
}

void FakePodResources::Stop() {
  if (!server_) return;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
  server_->Wait();
  server_.reset();
  std::error_code ignored;
  std::filesystem::remove(socket_, ignored);
}

bool FakePodResources::Restart() {
  Stop();
  return Start();
}

void FakePodResources::SetPods(std::vector<kubelet::PodResources> pods) {
  std::lock_guard lock(mutex_);
  pods_ = std::move(pods);
}

void FakePodResources::SetGetSupport(GetSupport support) {
  std::lock_guard lock(mutex_);
  get_support_ = support;
}

int FakePodResources::list_calls() const {
  std::lock_guard lock(mutex_);
  return list_calls_;
}

int FakePodResources::get_calls() const {
  std::lock_guard lock(mutex_);
  return get_calls_;
}

std::vector<kubelet::PodResources> FakePodResources::Pods() const {
  std::lock_guard lock(mutex_);
  return pods_;
}

GetSupport FakePodResources::get_support() const {
  std::lock_guard lock(mutex_);
  return get_support_;
}

void FakePodResources::CountList() {
  std::lock_guard lock(mutex_);
  ++list_calls_;
}

void FakePodResources::CountGet() {
  std::lock_guard lock(mutex_);
  ++get_calls_;
}

}  // namespace kvgpu::testing
