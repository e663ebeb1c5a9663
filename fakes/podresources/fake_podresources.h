// kubelet's PodResources v1 server, as a node agent sees it: List and Get over
// <dir>/kubelet.sock with upstream's proto. Get can behave like each kubelet generation: served
// (1.34 on, or the gate on), disabled (1.27-1.33 default: UNKNOWN "PodResources API Get method
// disabled") or absent (before 1.27: UNIMPLEMENTED). An unknown pod in Get is UNKNOWN
// "pod <name> in namespace <ns> not found", as kubelet words it. Restart() is a kubelet restart:
// the socket goes away and comes back.
#pragma once

#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kube/kubelet/podresources.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace kvgpu::testing {

enum class GetSupport { kServed, kDisabled, kAbsent };

class FakePodResources {
 public:
  explicit FakePodResources(std::filesystem::path socket);
  ~FakePodResources();
  FakePodResources(const FakePodResources&) = delete;
  FakePodResources& operator=(const FakePodResources&) = delete;

  bool Start();
  void Stop();  // the socket file goes too, as when kubelet exits
  bool Restart();

  void SetPods(std::vector<kubelet::PodResources> pods);
  void SetGetSupport(GetSupport support);

  int list_calls() const;
  int get_calls() const;
  const std::filesystem::path& socket() const { return socket_; }

  // Called by the service.
  std::vector<kubelet::PodResources> Pods() const;
  GetSupport get_support() const;
  void CountList();
  void CountGet();

 private:
  class Service;
  std::filesystem::path socket_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;

  mutable std::mutex mutex_;
  std::vector<kubelet::PodResources> pods_;
  GetSupport get_support_ = GetSupport::kServed;
  int list_calls_ = 0;
  int get_calls_ = 0;
};

}  // namespace kvgpu::testing
