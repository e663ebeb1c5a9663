// A small cluster for scheduling tests and benchmarks: simulated GPU nodes, each running the real
// device plugin (publishing its vGPU state to an in-memory API server) with the fake kubelet;
// kubelet's device manager as far as admission goes (count check, GetPreferredAllocation,
// Allocate, failing a pod as UnexpectedAdmissionError does); and kube-scheduler's cycle
// (schedule_one.go) around the scheduler extender.
//
// Timing is kube-scheduler's: a scheduling cycle (its own count filter on allocatable minus what
// bound and assumed pods request, then the extender's filter and prioritize over the JSON
// protocol, the highest score winning) assumes the pod and hands the bind to a binding goroutine;
// the next cycle starts at once. The bind (the extender's bind verb, as with bindVerb) lands some
// cycles later; a refused bind sends the pod back to the queue. Each extender replica learns
// binds and pod changes through its own watch, some cycles late; the scheduler calls a replica at
// random (two behind one Service), the events of one watch in order; kubelet admits a bound pod
// some cycles after its bind. Cycles are a discrete clock driven by a seeded random source, so a
// run is repeatable while every interleaving kube-scheduler allows can occur; the device plugins
// run on their own threads. The extenders' clocks (what ages an assumed bind and a bind-ledger
// entry) are the cycles' too, never the process's: a test process stopped for a second between a
// bind and its admission is no cluster whose scheduler stood still that long.
//
// Checked against the real kube-scheduler (v1.36.3, v1.37.2) with the extender and the device
// plugin on simulated nodes (tests/k8s/scenario_extender.py, docs/development.md):
// - it calls prioritize only when more than one node passes the filters, its own and the
//   extender's; with one, that node is taken unscored. This loop called prioritize for every pod
//   until it was corrected to do the same (the outcome was the same: the one node won).
// - its count filter reads the Node's status.allocatable, which kubelet writes from its device
//   manager's lists only every nodeStatusUpdateFrequency (10 s) when they changed; this loop's
//   count filter reads the fake kubelet's lists at once (GpuNode::Allocatable), so it is stricter
//   than kube-scheduler and sends fewer pods on to the extender. Seen in the scenario's bite
//   (an extender that answers every node): kube-scheduler bound pods to nodes whose plugin listed
//   no healthy device of their type any more, and kubelet failed them with "no healthy devices
//   present", which this loop's count filter would not have let through. Not corrected yet: with
//   a 10 s lag the loop's "no Pending pod some node could take" checks would have to let the
//   cluster's time pass after every deletion.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "deviceplugin/daemon.h"
#include "extender/extender.h"
#include "fakes/common/eventually.h"
#include "fakes/common/sim_node.h"
#include "fakes/kubelet/fake_kubelet.h"
#include "fakes/podresources/static_podresources.h"
#include "kube/api_client.h"

namespace kvgpu::testing {

// The API server's Node objects, as far as the device plugins write them (merge patches of
// metadata.annotations) and the extender reads and conditionally patches them (a patch carrying
// metadata.resourceVersion applies only to that version, else 409 Conflict), and its pods as far
// as the extender's bind reads one and POSTs its Binding (answered by `pods`).
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

  // The pod API: GET of a pod and POST of its binding, by namespace/name path; set before use.
  struct Pods {
    std::function<Result<nlohmann::json>(const std::string& name)> get;
    std::function<Result<nlohmann::json>(const std::string& name, const nlohmann::json& binding)>
        bind;
  };
  void ServePods(Pods pods) { pods_ = std::move(pods); }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, nlohmann::json> nodes_;  // name -> Node
  uint64_t version_ = 0;                         // the last resourceVersion given out
  Pods pods_;
};

struct ClusterPod {
  // kAssumed: in kube-scheduler's cache with its bind on the way; the API server has it Pending.
  enum class State { kPending, kAssumed, kBound, kRunning, kFailed };
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
  // `probe`: the plugin's gpuModeProbe (kSim reads the simulator's modes file, as nvml reads the
  // driver on a real node).
  GpuNode(std::string name, NodeObjects& api, const std::string& profile = "t4x2",
          deviceplugin::GpuModeProbeChoice probe = deviceplugin::GpuModeProbeChoice::kNone);
  ~GpuNode();

  const std::string& name() const { return name_; }
  SimNode& sim() { return sim_; }
  // kubelet's allocatable count of an extended resource: the healthy devices it was sent (none
  // while the plugin's endpoint is gone).
  uint32_t Allocatable(const std::string& resource) const;
  // kubelet admitting a bound pod: Ok, or the admission error that fails the pod.
  Status Admit(const ClusterPod& pod);
  // kubelet tearing a pod down: its devices are free; the plugin removes the vGPUs.
  void Remove(const ClusterPod& pod);
  // The plugin's DaemonSet rolls: the plugin stops and starts again (its state file kept), now
  // writing the node state in `state_version`. Returns once kubelet has seen the old plugin go;
  // the node is Settled again once kubelet holds the new plugin's lists.
  void RestartPlugin(int state_version);
  // Whether the plugin, the kernel, kubelet's lists and the published state agree.
  bool Settled(const NodeObjects& api);
  // Why not: the first check that fails, or empty when Settled.
  std::string Unsettled(const NodeObjects& api);
  size_t AllocatedDevices() const;

 private:
  std::string name_;
  SimNode sim_;
  FakeKubelet kubelet_;
  StaticPodResources podresources_;
  deviceplugin::DaemonOptions options_;
  std::unique_ptr<deviceplugin::Daemon> daemon_;
  mutable std::mutex mutex_;
  std::map<std::string, std::set<std::string>> allocated_;       // resource -> device IDs
  std::map<std::string, std::vector<std::string>> pod_devices_;  // pod key -> device IDs
  std::vector<kubelet::PodResources> running_;
};

// kube-scheduler's timing, in scheduling cycles: each delay is drawn uniformly from [0, max].
struct LoopTiming {
  size_t replicas = 2;        // extender replicas behind the Service
  size_t bind_latency = 3;    // cycles from assuming a pod to its bind landing
  size_t watch_lag = 4;       // cycles before a replica's pod watch shows a change
  size_t admit_latency = 5;   // cycles from a bind landing to kubelet admitting the pod
  double node_watch_p = 0.5;  // chance per cycle that a replica's node watch has caught up
  uint32_t seed = 1;
  // How long a bind's ledger entry counts (ClusterView's assume_for).
  std::chrono::milliseconds assume_for{std::chrono::seconds(30)};
  // The extenders' time per scheduling cycle; about kube-scheduler's on a busy cluster, and far
  // below assume_for, so that no bind is forgotten while its pod is on its way.
  std::chrono::milliseconds cycle{10};
};

// The extenders' steady and unix-ms clocks in one: they start at the real time and then move
// only when the cluster's time does.
class ClusterClock {
 public:
  std::chrono::steady_clock::time_point Steady() const {
    return steady_start_ + std::chrono::milliseconds(elapsed_ms_.load());
  }
  int64_t UnixMs() const { return unix_start_ms_ + elapsed_ms_.load(); }
  void Advance(std::chrono::milliseconds by) { elapsed_ms_ += by.count(); }

 private:
  const std::chrono::steady_clock::time_point steady_start_ = std::chrono::steady_clock::now();
  const int64_t unix_start_ms_ = UnixNowMs();
  std::atomic<int64_t> elapsed_ms_{0};
};

class SchedulingCluster {
 public:
  // `nodes` simulated nodes named node-0...; with `use_extender`, the extender in the loop (and
  // its bind verb binding); without, kube-scheduler's default binder.
  SchedulingCluster(
      size_t nodes, bool use_extender, const std::string& profile = "t4x2", LoopTiming timing = {},
      deviceplugin::GpuModeProbeChoice probe = deviceplugin::GpuModeProbeChoice::kNone);
  ~SchedulingCluster();

  // Adds pods to the queue (Pending).
  void Submit(std::vector<ClusterPod> pods);
  // One pass of the scheduling queue: a cycle for every Pending pod in turn, binds, watch events
  // and admissions landing between cycles as they fall due, then every one still on its way.
  // `each_cycle(n)` runs before cycle n (churn, restarts mid-burst). Returns the pods bound.
  size_t ScheduleAndAdmit(const std::function<void(size_t cycle)>& each_cycle = nullptr);
  // Deletes a pod (its devices free on its node; the replicas' watches see it in time).
  void Delete(const std::string& name);
  // kube-scheduler restarts: its binding goroutines and its cache of assumed pods are gone; the
  // pods whose bind had not landed are Pending again.
  void RestartScheduler();
  // An extender replica restarts: a fresh view that lists the nodes and bound pods again.
  void RestartExtender(size_t replica);
  // Waits until every node has settled (kernel, plugin, kubelet and published state agree);
  // then every replica's node watch shows the Nodes as they are. The extenders' clocks stand
  // still meanwhile: it is called mid-burst too, with binds on their way.
  bool Settle(std::chrono::milliseconds timeout = kEventDeadline);
  // Lets `by` of the extenders' time pass with no cycle run: how a test waits out what they
  // forget after a while (an assumed bind, a ledger entry), in place of sleeping.
  void AdvanceClock(std::chrono::milliseconds by) { clock_.Advance(by); }

  std::vector<ClusterPod> Pods() const { return pods_; }
  size_t Count(ClusterPod::State state) const;
  // Binds the extender refused (the pod went back to the queue).
  size_t RefusedBinds() const { return refused_binds_; }
  std::vector<std::unique_ptr<GpuNode>>& nodes() { return nodes_; }
  // The API server's Node objects (what an extender's Node watch lists).
  const NodeObjects& api() const { return api_; }
  // Whether the kernel of some node can still make `count` vGPUs of `resource` - read from the
  // simulated kernels alone (each GPU: free, or locked to the type with instances left), as an
  // oracle independent of the extender and the plugin.
  bool FitsSomewhere(const std::string& resource, uint32_t count);
  // Per node, what the scheduler's count filter and the extender say of `pod` now, and what the
  // kernel can still make: for failure messages.
  std::string Explain(const ClusterPod& pod);

 private:
  struct Replica;
  struct Event {
    enum class Kind { kBind, kWatch, kAdmit };
    size_t due = 0;
    Kind kind = Kind::kBind;
    std::string pod;              // name
    size_t replica = 0;           // kWatch: whose watch
    kube::WatchEventType type{};  // kWatch
    nlohmann::json object;        // kWatch: the pod as it was then
  };

  std::string Choose(const ClusterPod& pod);
  // What the pods bound to `node`, assumed there or running there request of `resource`:
  // kube-scheduler's count of it.
  uint32_t Requested(const std::string& node, const std::string& resource) const;
  ClusterPod* Find(const std::string& name);
  size_t Draw(size_t max);
  void NextCycle();
  void Publish(const ClusterPod& pod, kube::WatchEventType type);  // to every replica's watch
  void RunDue(size_t cycle, size_t* bound);
  void Land(const Event& event, size_t* bound);
  bool BindLands(ClusterPod& pod);
  Result<nlohmann::json> ApiGetPod(const std::string& path);
  Result<nlohmann::json> ApiBind(const std::string& path, const nlohmann::json& binding);

  NodeObjects api_;
  std::vector<std::unique_ptr<GpuNode>> nodes_;
  bool use_extender_;
  LoopTiming timing_;
  ClusterClock clock_;
  std::mt19937 random_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::vector<Event> events_;
  size_t cycle_ = 0;
  size_t refused_binds_ = 0;
  std::vector<ClusterPod> pods_;
};

}  // namespace kvgpu::testing
