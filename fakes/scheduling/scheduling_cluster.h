// A small cluster for scheduling tests and benchmarks: simulated GPU nodes, each running the real
// device plugin (publishing its vGPU state to an in-memory API server) with the fake kubelet;
// kubelet's device manager as far as admission goes (count check, GetPreferredAllocation,
// Allocate, failing a pod as UnexpectedAdmissionError does); and a scheduling cycle as
// kube-scheduler runs it, one pod at a time: its own count filter on the nodes' allocatable
// extended resources, then - when an extender is given - the extender's filter and prioritize
// over the JSON protocol, the highest score winning, then bind.
//
// A burst is scheduled back to back and only then admitted by each node's kubelet, the way bound
// pods reach kubelets while the scheduler goes on: the race the extender exists for.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "deviceplugin/daemon.h"
#include "extender/extender.h"
#include "fakes/common/sim_node.h"
#include "fakes/kubelet/fake_kubelet.h"
#include "fakes/podresources/static_podresources.h"
#include "kube/api_client.h"

namespace kvgpu::testing {

// The API server's Node objects, as far as the device plugins write them (merge patches of
// metadata.annotations) and the extender's node watch reads them.
class NodeObjects : public kube::ApiTransport {
 public:
  Result<nlohmann::json> Get(const std::string& path, kube::Canceller* cancel) override;
  Result<nlohmann::json> Post(const std::string& path, const nlohmann::json& body,
                              kube::Canceller* cancel) override;
  Result<nlohmann::json> Patch(const std::string& path, const nlohmann::json& body,
                               const std::string& content_type, kube::Canceller* cancel) override;
  Status Stream(const std::string& path, std::chrono::milliseconds idle_timeout,
                const std::function<void()>& on_open,
                const std::function<bool(std::string_view)>& on_line,
                kube::Canceller* cancel) override;

  std::vector<nlohmann::json> Nodes() const;
  std::optional<std::string> Annotation(const std::string& node) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, nlohmann::json> nodes_;  // name -> Node
};

struct ClusterPod {
  enum class State { kPending, kBound, kRunning, kFailed };
  std::string name;
  std::string resource;
  uint32_t count = 1;
  State state = State::kPending;
  std::string node;
  std::string failure;  // kubelet's admission error, for kFailed
  std::string uid() const { return "uid-" + name; }
  std::string key() const { return "default/" + name; }
  nlohmann::json Object() const;  // as the API server serves it
};

class GpuNode {
 public:
  GpuNode(std::string name, NodeObjects& api, const std::string& profile = "t4x2");
  ~GpuNode();

  const std::string& name() const { return name_; }
  SimNode& sim() { return sim_; }
  // kubelet's allocatable count of an extended resource: the healthy devices it was sent.
  uint32_t Allocatable(const std::string& resource) const;
  // kubelet admitting a bound pod: Ok, or the admission error that fails the pod.
  Status Admit(const ClusterPod& pod);
  // kubelet tearing a pod down: its devices are free; the plugin removes the vGPUs.
  void Remove(const ClusterPod& pod);
  // Whether the plugin, the kernel, kubelet's lists and the published state agree.
  bool Settled(const NodeObjects& api);
  size_t AllocatedDevices() const;

 private:
  std::string name_;
  SimNode sim_;
  FakeKubelet kubelet_;
  StaticPodResources podresources_;
  std::unique_ptr<deviceplugin::Daemon> daemon_;
  mutable std::mutex mutex_;
  std::map<std::string, std::set<std::string>> allocated_;       // resource -> device IDs
  std::map<std::string, std::vector<std::string>> pod_devices_;  // pod key -> device IDs
  std::vector<kubelet::PodResources> running_;
};

class SchedulingCluster {
 public:
  // `nodes` simulated nodes named node-0...; with `use_extender`, the extender in the loop.
  SchedulingCluster(size_t nodes, bool use_extender, const std::string& profile = "t4x2");

  // Adds pods to the queue (Pending).
  void Submit(std::vector<ClusterPod> pods);
  // One scheduling pass over every Pending pod, back to back, then every node's kubelet admits
  // what was bound to it, in bind order. Returns the pods bound in this pass.
  size_t ScheduleAndAdmit();
  // Deletes a running pod.
  void Delete(const std::string& name);
  // Waits until every node has settled (kernel, plugin, kubelet and published state agree).
  bool Settle(std::chrono::milliseconds timeout = std::chrono::seconds(20));

  std::vector<ClusterPod> Pods() const { return pods_; }
  size_t Count(ClusterPod::State state) const;
  std::vector<std::unique_ptr<GpuNode>>& nodes() { return nodes_; }
  // Whether the kernel of some node can still make `count` vGPUs of `resource` - read from the
  // simulated kernels alone (each GPU: free, or locked to the type with instances left), as an
  // oracle independent of the extender and the plugin.
  bool FitsSomewhere(const std::string& resource, uint32_t count);
  // Per node, what the scheduler's count filter and the extender say of `pod` now, and what the
  // kernel can still make: for failure messages.
  std::string Explain(const ClusterPod& pod);

 private:
  std::string Choose(const ClusterPod& pod);
  // What the pods bound to `node` (or running there) request of `resource`: kube-scheduler's
  // count of it.
  uint32_t Requested(const std::string& node, const std::string& resource) const;

  NodeObjects api_;
  std::vector<std::unique_ptr<GpuNode>> nodes_;
  bool use_extender_;
  extender::ClusterView view_{"tencent.com/vgpu-"};
  extender::Extender extender_;
  std::vector<ClusterPod> pods_;
};

}  // namespace kvgpu::testing
