// A Kubernetes node as its device plugin sees it, from the other side: an API server (pods bound
// to the node, their watch, events) and the node's kubelet (Registration, the device plugin
// calls, the PodResources v1 socket, the device-manager checkpoint), composed from the fakes in
// fakes/. The scenario verbs do what the scheduler, kubelet and API server do, in their
// real order, so the real daemons can be driven as separate processes.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fakes/apiserver/fake_apiserver.h"
#include "fakes/kubelet/fake_kubelet.h"
#include "fakes/podresources/checkpoint_writer.h"
#include "fakes/podresources/fake_podresources.h"

namespace kvgpu::testing {

// What a step of a scenario did: empty `error` when it went as kubelet would want.
struct StepResult {
  std::string error;
  bool ok() const { return error.empty(); }
};

// A resource as `kubectl describe node` shows it.
struct NodeResource {
  std::string name;
  int capacity = 0;     // every device the plugin lists
  int allocatable = 0;  // the healthy ones
  int allocated = 0;    // held by the node's running pods (requests = limits for devices)
};

class FakeNode {
 public:
  FakeNode(std::filesystem::path kubelet_dir, std::string node_name);
  ~FakeNode();
  FakeNode(const FakeNode&) = delete;
  FakeNode& operator=(const FakeNode&) = delete;

  // API server, kubelet Registration and PodResources up; the reason when one cannot start.
  StepResult Start();

  // A kubeconfig for the node agent: the API server's URL, its CA (ca.crt beside the file) and a
  // bearer token it accepts.
  void WriteKubeconfig(const std::filesystem::path& path) const;

  // The pod is created bound to this node (ADDED, Pending); kubelet admits it: for each container
  // and each extended resource it asks for, picks devices among the healthy ones no running pod
  // holds (asking GetPreferredAllocation when the plugin offers it), calls Allocate, then records
  // the pod in PodResources and the checkpoint, and the pod turns Running (MODIFIED). When
  // admission fails the pod turns Failed and holds nothing, as with kubelet's
  // UnexpectedAdmissionError. The pod must have metadata.namespace and name.
  StepResult RunPod(nlohmann::json pod);
  // kubelet's part of RunPod alone, for a pod a client created bound to this node and the API
  // server already holds (FakeApiServer::PodHooks): admission, Allocate, Running or Failed.
  StepResult AdmitPod(const nlohmann::json& pod);
  // A Kata pod with one container asking for `resources` (name -> count).
  StepResult RunPod(const std::string& ns, const std::string& name,
                    const std::map<std::string, int>& resources);
  // Deletion as it happens: deletionTimestamp set (MODIFIED), kubelet kills the pod and drops it
  // from PodResources (its devices are free again; the checkpoint keeps its entries), then the
  // object is removed (DELETED).
  StepResult DeletePod(const std::string& ns, const std::string& name);

  // kubelet restarts: the plugin sockets are cleared, Registration and PodResources come back.
  // The device assignments survive, as kubelet reloads them from its checkpoint.
  StepResult RestartKubelet();
  void StopApiServer();
  StepResult StartApiServer();

  // Device IDs a running pod holds for `resource`, all containers together.
  std::vector<std::string> DevicesOf(const std::string& ns, const std::string& name,
                                     const std::string& resource) const;
  // Every resource the plugin registered and lists now, sorted by name.
  std::vector<NodeResource> Resources() const;
  // The lines `kubectl describe node` prints for them (Capacity, Allocatable, Allocated).
  std::string DescribeResources() const;
  // Waits until the plugin has registered `count` resources and streams a list for each.
  bool WaitForResources(size_t count, std::chrono::milliseconds timeout);

  FakeApiServer& api() { return *api_; }
  FakeKubelet& kubelet() { return *kubelet_; }
  FakePodResources& pod_resources() { return *pod_resources_; }
  const std::filesystem::path& kubelet_dir() const { return kubelet_dir_; }
  const std::string& node_name() const { return node_name_; }

 private:
  struct RunningPod {
    std::string ns;
    std::string name;
    std::string uid;
    // container -> resource -> device IDs
    std::map<std::string, std::map<std::string, std::vector<std::string>>> devices;
  };

  // Kubelet's choice of `count` devices for `resource`; fills `ids` or says why not.
  StepResult PickDevices(const std::string& resource, int count, std::vector<std::string>* ids);
  std::vector<std::string> HeldDevices(const std::string& resource) const;
  void PublishKubeletState();

  std::filesystem::path kubelet_dir_;
  std::string node_name_;
  std::unique_ptr<FakeApiServer> api_;
  std::unique_ptr<FakeKubelet> kubelet_;
  std::unique_ptr<FakePodResources> pod_resources_;
  CheckpointWriter checkpoint_;

  mutable std::mutex mutex_;
  std::vector<RunningPod> running_;
  std::vector<CheckpointRecord> checkpoint_records_;  // never shrinks, as kubelet's file
};

}  // namespace kvgpu::testing
