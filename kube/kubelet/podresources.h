// kubelet's PodResources API v1 (<kubelet-dir>/pod-resources/kubelet.sock): which devices each
// container of each running pod holds, as kubelet knows it now. Unlike the checkpoint, a pod
// leaves this list when kubelet is done with it.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvgpu::kubelet {

struct ContainerDevices {
  std::string resource_name;
  std::vector<std::string> device_ids;
  bool operator==(const ContainerDevices&) const = default;
};

struct ContainerResources {
  std::string name;
  std::vector<ContainerDevices> devices;
  bool operator==(const ContainerResources&) const = default;
};

struct PodResources {
  std::string namespace_name;
  std::string name;
  std::vector<ContainerResources> containers;
  bool operator==(const PodResources&) const = default;

  // Whether a container holds `device_id` of `resource`.
  bool Holds(const std::string& resource, const std::string& device_id) const;
};

// What the lifecycle code depends on; tests answer without gRPC.
class PodResourcesSource {
 public:
  virtual ~PodResourcesSource() = default;
  virtual Result<std::vector<PodResources>> List() = 0;
  // std::nullopt when kubelet has no such pod.
  virtual Result<std::optional<PodResources>> Get(const std::string& namespace_name,
                                                  const std::string& name) = 0;
  // Breaks the calls in flight and every later one (kCancelled): shutdown does not wait out a
  // kubelet that accepts and never answers.
  virtual void Cancel() {}
};

class PodResourcesClient : public PodResourcesSource {
 public:
  // `timeout` bounds each call, so a hung kubelet cannot stall the caller.
  explicit PodResourcesClient(std::filesystem::path socket,
                              std::chrono::milliseconds timeout = std::chrono::seconds(5));
  ~PodResourcesClient() override;

  Result<std::vector<PodResources>> List() override;
  // Uses Get while kubelet offers it. Kubelets before 1.27 answer UNIMPLEMENTED; 1.27-1.33
  // without the KubeletPodResourcesGet gate answer UNKNOWN "PodResources API Get method
  // disabled". Either way the client falls back to List for good.
  Result<std::optional<PodResources>> Get(const std::string& namespace_name,
                                          const std::string& name) override;

  bool get_available() const { return !get_unavailable_.load(); }
  void Cancel() override;

 private:
  struct Stub;
  class Call;  // one call's context, registered for Cancel while it lasts
  std::filesystem::path socket_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Stub> stub_;
  std::atomic<bool> get_unavailable_{false};
  std::mutex calls_mutex_;
  std::set<void*> calls_;  // grpc::ClientContext* of the calls in flight
  bool cancelled_ = false;
};

std::filesystem::path PodResourcesSocket(const std::filesystem::path& kubelet_dir);

}  // namespace kvgpu::kubelet
